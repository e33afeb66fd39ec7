"""The method-agnostic round loop.

A method is a plug-in (:class:`~hetfl_core.science.methods.base.Method`) with hooks named after
the steps of the papers' pseudocode, in the spirit of Flower's ``Strategy``::

    method.setup(sim)                                  (once the run is built)
    for round t = 1..R:
        S_t   <- sample clients                        (engine)
        plans <- method.configure_round(t, S_t)        (server: widths, ratios, steps)
        for k in S_t: report_k <- method.client_step(k, plan_k)     (client: its
                                                           local SGD, run by the engine)
        method.aggregate(t, reports)                   (server)
        evaluate global and personalised models        (engine)

The engine knows no method by name (the plug-in and its registry are
:mod:`hetfl_core.science.methods.base`). It owns sampling, seeding, the run's cost model
(:mod:`hetfl_core.science.system`), the cost counters and the history.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from .batched import batched_steps, uses_batched_clients
from .config import RunConfig
from ..science.data import FederatedData, load_dataset, make_federated
from ..science.devices import place_data, resolve_device
from ..science.errors import DivergenceError
from ..science.methods.base import ClientPlan, ClientReport, Method, get_method, seeded_generator
from ..science.streams import STREAMS
from ..science.system import SYSTEMS, CostModel, HardwareProfile, make_hardware, round_time
from ..science.threads import single_thread
from ..science.training import evaluate

__all__ = ["Simulation", "build_data", "build_hardware", "build_simulation", "local_updates", "run", "run_rounds", "divergence_suspects",
           "single_thread", "evaluation_due", "score_global_model"]


@dataclass
class Simulation:
    """A built run: data, the clients' simulated hardware, the cost model and the method,
    before any round."""

    config: RunConfig
    data: FederatedData
    hardware: list[HardwareProfile]
    method: Method
    cost_model: CostModel
    totals: dict = field(default_factory=lambda: dict.fromkeys(("time_s", "uplink_bits", "downlink_bits", "flops",
                                                                 "energy_j"), 0.0))
    plans: dict = field(default_factory=dict)
    reports: list = field(default_factory=list)

    @property
    def devices(self) -> list[HardwareProfile]:
        """The earlier name of :attr:`hardware`, kept for code written against it."""
        return self.hardware

    def __post_init__(self):
        self.sampler = np.random.default_rng([self.config.seed, STREAMS["participants"]])

    def sample(self, round_idx: int) -> list[int]:
        """The round's participants: ``participation`` x ``clients`` of them, without replacement
        (one seeded stream over the run, so rounds must come in order)."""
        per_round = max(1, int(round(self.config.participation * self.config.clients)))
        return sorted(int(k) for k in self.sampler.choice(self.config.clients, per_round, replace=False))

    def round(self, round_idx: int, client_updates=None, *, clients: list[int] | None = None,
              evaluate: bool | None = None) -> dict:
        """One round: sample, plan, train, charge, aggregate, and evaluate when due.

        ``clients`` fixes the participants instead of sampling them (a test or a chapter
        that follows given clients); ``evaluate`` forces the scoring on or off (default:
        every ``eval_every`` rounds and after the last). The round's plans and reports stay
        on the simulation as ``plans`` and ``reports``.

        Returns the history row: ``round``, ``time_s`` (simulated wall-clock since the
        start), ``round_time_s``, ``idle_s`` (summed waiting of the faster participants),
        ``loss`` (mean local training loss), cumulative ``uplink_bits``, ``downlink_bits``,
        ``flops`` and ``energy_j``, the scores (``acc_global``, ``loss_global``,
        ``acc_personal``, ``loss_personal``, ``acc_clients``; ``None`` between
        evaluations; ``acc_val`` on the validation splits when ``val_fraction`` > 0) with
        the method's own metrics under their own keys, and ``clients``: each participant's
        tier, time, energy, steps, width and ratio.
        """
        config, method = self.config, self.method
        sampled = self.sample(round_idx) if clients is None else sorted(int(k) for k in clients)
        self.cost_model.start_round(round_idx, sampled)
        method.round_lr = method.lr_at(round_idx)
        plans = method.configure_round(round_idx, sampled)
        jobs = [(k, plans[k]) for k in sampled if k in plans]
        reports = []
        for (k, _), report in zip(jobs, (client_updates or local_updates)(self, round_idx, jobs), strict=True):
            if not math.isfinite(report.loss):      # stop at once: the later clients' work would be lost anyway
                raise DivergenceError(f"{config.method} diverged in round {round_idx} (client {k} loss {report.loss}): "
                                      f"lower {divergence_suspects(config, method)}")
            reports.append(report)
        self.plans, self.reports = dict(jobs), reports
        charges = self.cost_model.charge(jobs, reports)
        records = [{"id": k, "tier": charge.hardware.tier, "time_s": charge.time_s, "energy_j": charge.energy_j,
                    "local_steps": report.local_steps, "width": report.width, "ratio": report.ratio,
                    "flops": report.flops, "uplink_bits": report.uplink_bits,
                    **({} if charge.share is None else {"share": charge.share}), **report.extra}
                   for (k, _), report, charge in zip(jobs, reports, charges)]
        method.aggregate(round_idx, reports)
        slowest = round_time(c.time_s for c in charges)
        totals = self.totals
        totals["time_s"] += slowest
        totals["uplink_bits"] += sum(r.uplink_bits for r in reports)
        totals["downlink_bits"] += sum(r.downlink_bits for r in reports)
        totals["flops"] += sum(r.flops for r in reports)
        totals["energy_j"] += sum(c.energy_j for c in charges)
        row = {"round": round_idx, "time_s": totals["time_s"], "round_time_s": slowest,
               "idle_s": sum(slowest - c.time_s for c in charges),
               "loss": mean_training_loss(reports),
               "uplink_bits": totals["uplink_bits"], "downlink_bits": totals["downlink_bits"],
               "flops": totals["flops"], "energy_j": totals["energy_j"]}
        due, score_global = evaluation_due(config, round_idx)
        if due if evaluate is None else evaluate:
            row.update(evaluate_method(self, score_global=score_global))
        else:
            row.update(acc_global=None, loss_global=None, acc_personal=None, loss_personal=None, acc_clients=None)
        row["clients"] = records
        return row


def mean_training_loss(reports) -> float:
    """The mean local training loss of the round's reports that took a step (a client left
    without a batch, under ``drop_last``, has no loss); ``nan`` if none took one."""
    losses = [r.loss for r in reports if r.local_steps > 0]
    return float(np.mean(losses)) if losses else float("nan")


def evaluation_due(config: RunConfig, round_idx: int) -> tuple[bool, bool]:
    """Whether round ``round_idx`` ends with an evaluation (every ``eval_every`` rounds and
    after the last), and whether that evaluation scores the global model (``eval_global``,
    every ``eval_global_every`` rounds and after the last)."""
    last = round_idx == config.rounds
    every = config.eval_global_every
    return (round_idx % config.eval_every == 0 or last,
            config.eval_global and (every is None or round_idx % every == 0 or last))


def system_of(config: RunConfig) -> str:
    """The run's cost model: the config's ``system``, else its method's own."""
    return config.system if config.system is not None else get_method(config.method).default_system


def build_data(config: RunConfig) -> FederatedData:
    """The run's dataset dealt to its clients, on the run's device."""
    dataset = load_dataset(config.dataset)
    data = make_federated(dataset, config.partition, config.clients, config.seed, alpha=config.alpha,
                          classes_per_client=config.classes_per_client,
                          train_samples=config.train_samples, test_fraction=config.test_fraction,
                          val_fraction=config.val_fraction, given=config.given_indices)
    return place_data(data, resolve_device(config.device))


def build_hardware(config: RunConfig) -> list[HardwareProfile]:
    """The run's simulated hardware: one profile per client, drawn from the seed."""
    return make_hardware(config.clients, config.heterogeneity,
                         np.random.default_rng([config.seed, STREAMS["hardware"]]))


def build_simulation(config: RunConfig) -> Simulation:
    """Validate ``config`` and build its data, hardware, method and cost model, then set the
    method up for them (:meth:`~hetfl_core.science.methods.base.Method.setup`); no training yet."""
    config.validate()
    data = build_data(config)
    hardware = build_hardware(config)
    torch.manual_seed(config.seed)  # model initialisation
    method = get_method(config.method)(config, data, hardware)
    sim = Simulation(config, data, hardware, method, SYSTEMS[system_of(config)].from_run(config, data, method))
    method.setup(sim)
    return sim


def _pooled(parts) -> tuple:
    """Pooled accuracy and loss of ``(correct, summed loss, samples)`` parts, and each part's
    accuracy (``None`` for an empty part); ``None, None`` when there is no sample at all."""
    per_part = [c / n if n else None for c, _, n in parts]
    total = sum(n for _, _, n in parts)
    if not total:
        return None, None, per_part
    correct, loss = sum(c for c, _, _ in parts), sum((l for _, l, _ in parts), 0.0)
    return correct / total, loss / total, per_part


def f1_score(counts: dict) -> float | None:
    """F1 of class 1 from pooled ``tp``, ``fp``, ``fn`` (``None`` if nothing was predicted or present)."""
    tp, fp, fn = counts.get("tp", 0), counts.get("fp", 0), counts.get("fn", 0)
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else None


def score_global_model(model, dataset, counts: dict | None = None) -> tuple:
    """Accuracy and mean loss of the global ``model`` on ``dataset``'s whole test set (``None,
    None`` where the method has no global model); ``counts`` (a dict) adds up the binary F1
    counts (:func:`~hetfl_core.science.training.evaluate`)."""
    if model is None:
        return None, None
    return _pooled([(*evaluate(model, dataset.x_test, dataset.y_test, confusion=counts), len(dataset.y_test))])[:2]


def evaluate_method(sim: Simulation, score_global: bool | None = None) -> dict:
    """Personalised accuracy pooled over client test sets; and, where ``score_global`` (default:
    the config's ``eval_global``), the global model's accuracy on the global test set with the
    method's own scores (:meth:`~hetfl_core.science.methods.base.Method.extra_metrics`)."""
    method, data = sim.method, sim.data
    binary = data.dataset.num_classes == 2
    score_global = sim.config.eval_global if score_global is None else score_global
    model = method.global_model() if score_global else None
    global_counts, personal_counts = ({}, {}) if binary else (None, None)
    acc_global, loss_global = score_global_model(model, data.dataset, global_counts)
    tests, vals = [], []
    for c in data.clients:      # each personalised model built once, scored on its test and validation splits
        personal = method.personal_model(c.client_id)
        tests.append((*evaluate(personal, c.x_test, c.y_test, confusion=personal_counts), len(c.y_test)))
        if sim.config.val_fraction > 0 and len(c.y_val):
            vals.append((*evaluate(personal, c.x_val, c.y_val), len(c.y_val)))
    acc, loss, per_client = _pooled(tests)
    row = {"acc_global": acc_global, "loss_global": loss_global, "acc_personal": acc, "loss_personal": loss,
           "acc_clients": per_client}
    if sim.config.val_fraction > 0:   # pooled personalised accuracy on the validation splits (for tuning)
        row["acc_val"] = _pooled(vals)[0]
    if binary:  # MRPC-style tasks report F1 of the positive class too
        row["f1_global"] = f1_score(global_counts) if model is not None else None
        row["f1_personal"] = f1_score(personal_counts)
    extra = method.extra_metrics() if score_global else {}
    clash = sorted(set(extra) & set(row))
    if clash:
        raise TypeError(f"{method.name}.extra_metrics() must not overwrite the engine's {', '.join(clash)}: "
                        f"give the method's scores their own keys")
    return {**row, **extra}


def local_updates(sim: Simulation, round_idx: int, plans: list[tuple[int, ClientPlan]]):
    """Each planned client's report, in order: each client's step run to its end in turn
    (:meth:`~hetfl_core.science.methods.base.Method.client_update`), or, where the run batches
    clients, the round's steps driven together (:func:`~hetfl_core.runtime.batched.batched_steps`)."""
    jobs = [(sim.data.clients[k], plan, seeded_generator(sim.config.seed, round_idx, k)) for k, plan in plans]
    if uses_batched_clients(sim.config):
        yield from batched_steps(sim.method, jobs)
    else:
        yield from (sim.method.client_update(*job) for job in jobs)


def divergence_suspects(config: RunConfig, method: Method) -> str:
    """What to lower after a non-finite loss: lr, and weight_decay and the method's
    ``step_like_options`` where they are set (a large decay or proximal coefficient blows up
    SGD as a large step does); for a method registered from outside the package (a plug-in),
    its own code too."""
    suspects = [f"lr (now {config.lr})"]
    if config.weight_decay:
        suspects.append(f"weight_decay (now {config.weight_decay})")
    suspects += [f"{name} (now {method.options[name]})" for name in method.step_like_options
                 if method.options.get(name)]
    text = " or ".join(suspects)
    cls = type(method)
    if not cls.__module__.startswith("hetfl_core."):
        try:
            where = inspect.getsourcefile(cls) or cls.__module__
        except TypeError:
            where = cls.__module__
        text += f", or look for the fault in the plug-in method {config.method} ({where})"
    return text


def run(config: RunConfig, progress: bool = False, callback=None) -> dict:
    """Run one configuration and return ``{"config": ..., "history": [...]}`` (:func:`run_rounds`),
    data built and rounds run on one torch thread (:class:`single_thread`)."""
    with single_thread():
        return run_rounds(build_simulation(config), progress, callback)


def run_rounds(sim: Simulation, progress: bool = False, callback=None, client_updates=local_updates) -> dict:
    """Run a built simulation's rounds and return ``{"config": ..., "history": [...]}``.

    One history row per round (see :meth:`Simulation.round`). Raises
    :class:`DivergenceError` when a local loss is not finite. ``client_updates(sim, round,
    [(client, plan), ...])`` yields the clients' reports in order; the default trains them
    here, :mod:`hetfl_core.runtime.flower` on Flower's nodes.
    """
    config = sim.config
    history = []
    rounds = range(1, config.rounds + 1)
    if progress:
        from tqdm import tqdm

        rounds = tqdm(rounds, desc=f"{config.method}", unit="round", leave=False)
    try:
        with single_thread():      # the caller's own thread count comes back afterwards
            for t in rounds:
                row = sim.round(t, client_updates)
                history.append(row)
                if progress and row["acc_personal"] is not None:
                    rounds.set_postfix(acc=f"{row['acc_personal']:.3f}")
                if callback:
                    callback(row)
    finally:
        if progress:   # cleared now, also when a round fails on a thread whose traceback is kept
            rounds.close()
    return {"config": config.to_dict(), "history": history}
