"""The method-agnostic round loop.

A method is a plug-in (:class:`Method`) with hooks named after the steps of the papers'
pseudocode, in the spirit of Flower's ``Strategy``::

    for round t = 1..R:
        S_t   <- sample clients                        (engine)
        plans <- method.configure_round(t, S_t)        (server: widths, ratios, steps)
        for k in S_t: report_k <- method.client_update(k, plan_k)   (client)
        method.aggregate(t, reports)                   (server)
        evaluate global and personalised models        (engine)

The engine knows no method by name. It owns sampling, seeding, the simulated clock
(:func:`hetfl_core.system.client_time`), the cost counters and the history.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from .config import Option, RunConfig
from .data import ClientData, FederatedData, load_dataset, make_federated
from .devices import place_data, resolve_device
from .errors import ConfigError, DivergenceError
from .models import build_model
from .personalization import paper_split, split_parameter_names
from .system import (ComputeCost, CostModel, DeviceProfile, WirelessCost, make_devices, profile_model, round_time,
                     training_flops)
from .training import evaluate, steps_for_epochs

__all__ = ["ClientPlan", "ClientReport", "Method", "Simulation", "build_data", "build_simulation", "local_updates", "run",
           "run_rounds", "seeded_generator", "divergence_suspects", "single_thread"]


@dataclass
class ClientPlan:
    """What the server asks of one client this round."""

    local_steps: int
    width: float = 1.0   # fraction of hidden units the client trains
    ratio: float = 1.0   # fraction of weights the client keeps (density)
    extra: dict = field(default_factory=dict)
    bandwidth_share: float | None = None   # the client's share of a wireless band (None: the cost model's)
    device: DeviceProfile | None = None    # the device the client runs on this round (None: its own)


@dataclass
class ClientReport:
    """What a client did and sent back. ``update`` is the method's own payload.

    ``time_s`` is left ``None`` for the run's cost model to charge (:mod:`hetfl_core.system`);
    a method whose client stops early (SRP-pFed's semi-asynchronous window) caps it.
    """

    client_id: int
    n_samples: int
    update: Any
    loss: float
    flops: float
    uplink_bits: float
    downlink_bits: float
    local_steps: int
    width: float = 1.0
    ratio: float = 1.0
    extra: dict = field(default_factory=dict)
    time_s: float | None = None


def seeded_generator(*keys: int) -> torch.Generator:
    """A torch generator seeded from a tuple of integers (run seed, round, client, ...)."""
    seed = int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1)[0])
    return torch.Generator().manual_seed(seed)


class Method:
    """Base class of every federated method; FedAvg's behaviour unless a hook is overridden.

    Subclasses set ``name``, a one-line ``summary`` and ``option_specs`` (each option
    declared once as an :class:`~hetfl_core.config.Option`; ``defaults`` follows from it)
    and override the hooks the paper changes. A plug-in may give ``defaults`` alone: its
    options are then typed like their defaults.
    """

    name = "method"
    summary = ""
    option_specs: dict[str, Option] = {}
    defaults: dict = {}
    #: the cost model the method runs under unless the config names one
    default_system = "compute"

    def __init_subclass__(cls, **kwargs):
        """Derive ``defaults`` from ``option_specs``, or plain specs from ``defaults``."""
        super().__init_subclass__(**kwargs)
        if "option_specs" in cls.__dict__:
            cls.defaults = {key: spec.default for key, spec in cls.option_specs.items()}
        elif "defaults" in cls.__dict__:
            cls.option_specs = {key: Option(value) for key, value in cls.defaults.items()}

    def __init__(self, config: RunConfig, data: FederatedData, devices: list[DeviceProfile]):
        self.config = config
        self.options = {**self.defaults, **config.options}
        self.data = data
        self.devices = devices
        self.device = resolve_device(config.device)
        self.cost_model: CostModel | None = None   # the engine's, set before the first round
        self.model = self.build_model()
        self.costs = profile_model(self.model, data.input_shape, dtype=data.dataset.x_train.dtype)

    # -- options ------------------------------------------------------------
    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """Reject a config the method cannot run (default: check its options)."""
        cls.check_options(config.options)

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Reject unknown options and values their declarations refuse; subclasses add
        checks that span several options."""
        unknown = set(options) - set(cls.defaults)
        if unknown:
            known = ", ".join(cls.defaults) or "none"
            raise ConfigError(f"{cls.name} has no option {', '.join(sorted(unknown))} (its options: {known})")
        for key, value in options.items():
            cls.option_specs[key].check(key, value)

    # -- helpers --------------------------------------------------------------
    def build_model(self, width: float = 1.0) -> nn.Module:
        """The run's model architecture at ``width``, on the run's device."""
        return build_model(self.config.model, self.data.input_shape, self.data.num_classes,
                           width=width).to(self.device)

    def local_steps(self, client: ClientData) -> int:
        """Local steps for ``client``: ``local_steps`` if set, else ``local_epochs`` epochs."""
        if self.config.local_steps is not None:
            return self.config.local_steps
        return steps_for_epochs(client.n_train, self.config.batch_size, self.config.local_epochs)

    # -- hooks ----------------------------------------------------------------
    def configure_round(self, round_idx: int, client_ids: list[int]) -> dict[int, ClientPlan]:
        """Server: decide each sampled client's plan (default: full model, E local epochs).

        A sampled client left out of the returned plans sits the round out.
        """
        return {k: ClientPlan(self.local_steps(self.data.clients[k])) for k in client_ids}

    def client_update(self, client: ClientData, plan: ClientPlan, generator: torch.Generator) -> ClientReport:
        """Client: train locally and report the update and its costs."""
        raise NotImplementedError

    def aggregate(self, round_idx: int, reports: list[ClientReport]) -> None:
        """Server: fold the reports into the global state."""
        raise NotImplementedError

    def global_model(self) -> nn.Module | None:
        """The model scored on the global test set (``None`` if the method has none)."""
        return self.model

    def personal_model(self, client_id: int) -> nn.Module:
        """The model client ``client_id`` would use on its own data."""
        return self.model

    def extra_metrics(self) -> dict:
        """Method-specific scores added to each evaluated history row (default: none)."""
        return {}


@dataclass
class Simulation:
    """A built run: data, devices, the cost model and the method, before any round."""

    config: RunConfig
    data: FederatedData
    devices: list[DeviceProfile]
    method: Method
    cost_model: CostModel
    totals: dict = field(default_factory=lambda: dict.fromkeys(("time_s", "uplink_bits", "downlink_bits", "flops",
                                                                 "energy_j"), 0.0))
    sampler: np.random.Generator | None = None

    def sample(self, round_idx: int) -> list[int]:
        """The round's participants: ``participation`` x ``clients`` of them, without replacement
        (one seeded stream over the run, so rounds must come in order)."""
        if self.sampler is None:
            self.sampler = np.random.default_rng([self.config.seed, 4])
        per_round = max(1, int(round(self.config.participation * self.config.clients)))
        return sorted(int(k) for k in self.sampler.choice(self.config.clients, per_round, replace=False))

    def round(self, round_idx: int, client_updates=None) -> dict:
        """One round: sample, plan, train, charge, aggregate, and evaluate when due.

        Returns the history row: ``round``, ``time_s`` (simulated wall-clock since the
        start), ``round_time_s``, ``idle_s`` (summed waiting of the faster participants),
        ``loss`` (mean local training loss), cumulative ``uplink_bits``, ``downlink_bits``,
        ``flops`` and ``energy_j``, the scores (``acc_global``, ``loss_global``,
        ``acc_personal``, ``loss_personal``, ``acc_clients``; ``None`` between
        evaluations; ``acc_val`` on the validation splits when ``val_fraction`` > 0) with the method's own metrics under their own keys, and ``clients``:
        each participant's tier, time, energy, steps, width and ratio.
        """
        config, method = self.config, self.method
        sampled = self.sample(round_idx)
        self.cost_model.start_round(round_idx, sampled)
        plans = method.configure_round(round_idx, sampled)
        jobs = [(k, plans[k]) for k in sampled if k in plans]
        reports = list(zip(jobs, (client_updates or local_updates)(self, round_idx, jobs), strict=True))
        for (k, _), report in reports:
            if not math.isfinite(report.loss):
                raise DivergenceError(f"{config.method} diverged in round {round_idx} (client {k} loss {report.loss}): "
                                      f"lower {divergence_suspects(config, method.options)}")
        reports = [report for _, report in reports]
        charges = self.cost_model.charge(jobs, reports)
        clients = [{"id": k, "tier": charge.device.tier, "time_s": charge.time_s, "energy_j": charge.energy_j,
                    "local_steps": report.local_steps, "width": report.width, "ratio": report.ratio,
                    "flops": report.flops, "uplink_bits": report.uplink_bits,
                    **({} if charge.share is None else {"share": charge.share}), **report.extra}
                   for (k, _), report, charge in zip(jobs, reports, charges)]
        method.aggregate(round_idx, reports)
        slowest = round_time(c["time_s"] for c in clients)
        totals = self.totals
        totals["time_s"] += slowest
        totals["uplink_bits"] += sum(r.uplink_bits for r in reports)
        totals["downlink_bits"] += sum(r.downlink_bits for r in reports)
        totals["flops"] += sum(r.flops for r in reports)
        totals["energy_j"] += sum(c.energy_j for c in charges)
        row = {"round": round_idx, "time_s": totals["time_s"], "round_time_s": slowest,
               "idle_s": sum(slowest - c["time_s"] for c in clients),
               "loss": float(np.mean([r.loss for r in reports])),
               "uplink_bits": totals["uplink_bits"], "downlink_bits": totals["downlink_bits"],
               "flops": totals["flops"], "energy_j": totals["energy_j"]}
        if round_idx % config.eval_every == 0 or round_idx == config.rounds:
            row.update(evaluate_method(self))
        else:
            row.update(acc_global=None, loss_global=None, acc_personal=None, loss_personal=None, acc_clients=None)
        row["clients"] = clients
        return row


def system_of(config: RunConfig) -> str:
    """The run's cost model: the config's ``system``, else its method's own."""
    from .methods import get_method

    return config.system if config.system is not None else get_method(config.method).default_system


def build_cost_model(config: RunConfig, data: FederatedData, devices: list[DeviceProfile],
                     method: Method) -> CostModel:
    """The run's :class:`~hetfl_core.system.CostModel` (``compute`` or ``wireless``)."""
    if system_of(config) == "compute":
        return ComputeCost(devices)
    band = 0.1e6 * config.clients if config.bandwidth_mhz is None else config.bandwidth_mhz * 1e6
    if config.bandwidth_high_mhz is not None:
        band = (band, config.bandwidth_high_mhz * 1e6)
    params = dict(method.model.named_parameters())
    reference = split_parameter_names(method.model, paper_split(config.model, method.model))
    batch = method.local_steps(max(data.clients, key=lambda c: c.n_train)) * config.batch_size
    return WirelessCost(devices, seed=config.seed, bandwidth_hz=band, flops_per_sample=training_flops(method.costs, 1),
                        d_reference=sum(params[n].numel() for n in reference), batch=batch,
                        policy=config.bandwidth_policy)


def build_data(config: RunConfig) -> FederatedData:
    """The run's dataset dealt to its clients, on the run's device."""
    dataset = load_dataset(config.dataset)
    data = make_federated(dataset, config.partition, config.clients, config.seed, alpha=config.alpha,
                          classes_per_client=config.classes_per_client,
                          train_samples=config.train_samples, test_fraction=config.test_fraction,
                          val_fraction=config.val_fraction)
    return place_data(data, resolve_device(config.device))


def build_simulation(config: RunConfig) -> Simulation:
    """Validate ``config`` and build its data, devices and method (no training yet)."""
    from .methods import get_method

    config.validate()
    data = build_data(config)
    devices = make_devices(config.clients, config.heterogeneity, np.random.default_rng([config.seed, 2]))
    torch.manual_seed(config.seed)  # model initialisation
    method = get_method(config.method)(config, data, devices)
    method.cost_model = build_cost_model(config, data, devices, method)
    return Simulation(config, data, devices, method, method.cost_model)


def _score(triples, counts: dict | None = None) -> tuple:
    """Pooled accuracy and loss of (model, x, y) triples, and each triple's accuracy.

    With ``counts`` (a dict), binary tasks also add up true positives, false positives and
    false negatives of class 1 into it, for the F1 score.
    """
    correct = total = 0
    loss = 0.0
    per_part = []
    for model, x, y in triples:
        c, l = evaluate(model, x, y, confusion=counts)
        correct, loss, total = correct + c, loss + l, total + len(y)
        per_part.append(c / len(y) if len(y) else None)
    if not total:
        return None, None, per_part
    return correct / total, loss / total, per_part


def f1_score(counts: dict) -> float | None:
    """F1 of class 1 from pooled ``tp``, ``fp``, ``fn`` (``None`` if nothing was predicted or present)."""
    tp, fp, fn = counts.get("tp", 0), counts.get("fp", 0), counts.get("fn", 0)
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else None


def evaluate_method(sim: Simulation) -> dict:
    """Global accuracy on the global test set (unless ``eval_global`` is off); personalised accuracy
    pooled over client test sets."""
    method, data = sim.method, sim.data
    binary = data.dataset.num_classes == 2
    model = method.global_model() if sim.config.eval_global else None
    acc_global = loss_global = None
    global_counts, personal_counts = ({}, {}) if binary else (None, None)
    if model is not None:
        acc_global, loss_global, _ = _score([(model, data.dataset.x_test, data.dataset.y_test)], global_counts)
    acc, loss, per_client = _score(((method.personal_model(c.client_id), c.x_test, c.y_test) for c in data.clients),
                                   personal_counts)
    row = {"acc_global": acc_global, "loss_global": loss_global, "acc_personal": acc, "loss_personal": loss,
           "acc_clients": per_client}
    if sim.config.val_fraction > 0:   # pooled personalised accuracy on the validation splits (for tuning)
        row["acc_val"] = _score((method.personal_model(c.client_id), c.x_val, c.y_val)
                                for c in data.clients if len(c.y_val))[0]
    if binary:  # MRPC-style tasks report F1 of the positive class too
        row["f1_global"] = f1_score(global_counts) if model is not None else None
        row["f1_personal"] = f1_score(personal_counts)
    extra = method.extra_metrics()
    clash = sorted(set(extra) & set(row))
    if clash:
        raise TypeError(f"{method.name}.extra_metrics() must not overwrite the engine's {', '.join(clash)}: "
                        f"give the method's scores their own keys")
    return {**row, **extra}


def local_updates(sim: Simulation, round_idx: int, plans: list[tuple[int, ClientPlan]]):
    """Each planned client's report, in order: ``client_update`` in this process."""
    for k, plan in plans:
        yield sim.method.client_update(sim.data.clients[k], plan, seeded_generator(sim.config.seed, round_idx, k))


def single_thread() -> None:
    """One torch thread for every run (:func:`run`, the command line, sweeps' workers): a
    different count changes float sums in the 8th digit, and the cache key does not hold it."""
    torch.set_num_threads(1)


def divergence_suspects(config: RunConfig, options: dict) -> str:
    """What to lower after a non-finite loss: lr, and weight_decay and mu where they are set
    (a large decay or proximal coefficient blows up SGD as a large step does)."""
    suspects = [f"lr (now {config.lr})"]
    if config.weight_decay:
        suspects.append(f"weight_decay (now {config.weight_decay})")
    if options.get("mu"):
        suspects.append(f"mu (now {options['mu']})")
    return " or ".join(suspects)


def run(config: RunConfig, progress: bool = False, callback=None) -> dict:
    """Run one configuration and return ``{"config": ..., "history": [...]}`` (see :func:`run_rounds`)."""
    return run_rounds(build_simulation(config), progress, callback)


def run_rounds(sim: Simulation, progress: bool = False, callback=None, client_updates=local_updates) -> dict:
    """Run a built simulation's rounds and return ``{"config": ..., "history": [...]}``.

    One history row per round (see :meth:`Simulation.round`). Raises
    :class:`DivergenceError` when a local loss is not finite. ``client_updates(sim, round,
    [(client, plan), ...])`` yields the clients' reports in order; the default trains them
    here, :mod:`hetfl_core.flower` on Flower's nodes.
    """
    single_thread()
    config = sim.config
    history = []
    rounds = range(1, config.rounds + 1)
    if progress:
        from tqdm import tqdm

        rounds = tqdm(rounds, desc=f"{config.method}", unit="round", leave=False)
    for t in rounds:
        row = sim.round(t, client_updates)
        history.append(row)
        if progress and row["acc_personal"] is not None:
            rounds.set_postfix(acc=f"{row['acc_personal']:.3f}")
        if callback:
            callback(row)
    return {"config": config.to_dict(), "history": history}
