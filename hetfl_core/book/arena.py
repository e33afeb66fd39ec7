"""The arena: every paper's method and the baselines on one benchmark.

Each paper compares its method with baselines it chose, on its own data, hardware model
and tuning. The arena runs all of them on one grid of scenarios, through one simulator
and one cost model (:mod:`hetfl_core.science.system`), with the same budget for everyone:

* **data**: Fashion-MNIST (14x14) with a small CNN (``wcnn``, the one image model every
  method here can run), and Shakespeare's next character with its natural one client per
  speaking role (``charlstm-s``; methods that cannot run an LSTM are marked, not run);
* **label skew**: Dirichlet alpha 0.1, 0.5 and near-IID (alpha 100); **hardware
  heterogeneity**: the shared tiers ``low``, ``medium``, ``high``
  (:data:`hetfl_core.science.system.HETEROGENEITY`);
* **one cost model**: every run is charged by the ``wireless`` system (tiered hardware on
  one wireless cell), whatever its paper's own hardware model: the lightweight PFL method's
  allocation needs that cell, so every method runs on it and all times and energies compare;
* **equal for all**: clients, rounds, local steps, batch size, participation, seeds;
  each method's learning rate is chosen from the same geometric grid by its final
  personalised accuracy on the clients' *validation* splits (``acc_val``) in the
  reference scenario, seed ``seeds[0]``: the two middle rates first, then the grid is
  walked outwards while the best rate sits at the edge of those tried (:func:`widen`), and
  a method whose best is at the grid's own edge is flagged (:func:`lr_edges`); every other
  hyperparameter is its paper's default (a run that diverges falls back to the next
  smaller rate of the grid). OFA-FL serves each client the largest density its hardware tier
  affords and runs its pruning schedule scaled to the arena's rounds (:func:`method_options`).

:func:`run_arena` runs (or reads from the cache) the whole grid; :func:`leaderboard`
turns the runs into one row per scenario and method: personalised and global accuracy,
the worst 10% of clients, simulated time, bits, energy and FLOPs at the end and to the
scenario's target accuracy (90% of the best method's final mean accuracy), and the
accuracy at a fixed simulated-time budget (the median finishing time of the methods,
later where some run has not yet been evaluated by then: :func:`targets`).
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import numpy as np
import torch

from .chapter import with_baselines
from ..runtime.config import ALL, RunConfig, by_scale, check_scale, check_value
from ..runtime.engine import build_data
from ..science.errors import ConfigError, HetflError
from ..runtime.experiments import _one_line, load_cached, sweep
from ..science.methods import METHODS as _REGISTERED
from ..science.methods import get_method
from .report import common_budget, final, first_reach, value_by

__all__ = ["SYSTEM", "TIER_BLIND", "tier_blind", "METHODS", "PAPER_METHODS", "PAPER_BASELINES", "SKEWS",
           "Scenario", "Settings", "settings", "scenarios", "method_options", "tuning_configs", "pick_lr",
           "first_lrs", "widen", "lr_edges", "majority_rate", "training_samples", "run_configs", "ArenaRuns",
           "check_arguments", "run_arena", "worst_share", "run_metrics", "leaderboard", "COLUMNS",
           "write_leaderboard", "pareto_front", "log_ticks", "plot_pareto", "winners", "label", "score_table",
           "Improvement", "probability_of_improvement", "CriticalDifference", "critical_difference"]

#: the arena's methods: the five papers' first, then the baselines
METHODS = ("fedlps", "heroes", "ofafl", "srp-pfed", "sparse-prune-pfl", "fedavg", "fedprox", "heterofl",
           "fedrolex", "fjord", "fedper", "fedrep", "lg-fedavg", "ditto", "local")
PAPER_METHODS = METHODS[:5]
#: the baselines each paper compared against that also run in the arena (FedLPS Table I,
#: Heroes Table II, SRP-pFed Table III, the lightweight PFL paper's Figs. 3-4); OFA-FL
#: compared only with pruning schedules (LTP, one-shot), none of which is an arena method
PAPER_BASELINES = {"fedlps": ("fedavg", "heterofl", "fedrolex", "fedper"), "heroes": ("fedavg", "heterofl"),
                   "ofafl": (), "srp-pfed": ("fedavg", "fedper", "fedrep", "lg-fedavg", "ditto", "local"),
                   "sparse-prune-pfl": ("fedper", "lg-fedavg", "fedavg")}
#: the metric each paper reports its method by (OFA-FL's: each client's own sub-network on
#: its data, which is the arena's personalised accuracy; its server keeps no single model)
PAPER_METRIC = {"fedlps": "acc_personal", "heroes": "acc_global", "ofafl": "acc_personal",
                "srp-pfed": "acc_personal", "sparse-prune-pfl": "acc_personal"}
#: the one cost model every run is charged by (:mod:`hetfl_core.science.system`): the wireless cell
SYSTEM = "wireless"
#: the registered methods whose training never reads the hardware tiers (``reads_hardware_tiers
#: = False`` on their classes): they use ``self.hardware`` for no decision (SRP-pFed only with
#: its semi-asynchronous ``window``, off by default), so their accuracy is the same at every
#: heterogeneity level and only their costs change. The others size sub-models (HeteroFL,
#: FedRolex, FjORD, Heroes, FedLPS), capacities (OFA-FL, via :func:`method_options`) or the
#: allocation (the lightweight PFL method) by tier
TIER_BLIND = tuple(name for name, cls in _REGISTERED.items() if not cls.reads_hardware_tiers)
#: label skew name -> Dirichlet alpha (``natural`` is a text corpus's own split)
SKEWS = {"α=0.1": 0.1, "α=0.5": 0.5, "near-IID": 100.0, "natural": None}


def tier_blind(method: str) -> bool:
    """Whether ``method``'s accuracy cannot depend on the hardware tier: its class declares
    ``reads_hardware_tiers = False`` (:data:`TIER_BLIND`; an unknown name counts as tier-aware)."""
    return method in _REGISTERED and not _REGISTERED[method].reads_hardware_tiers


def label(method: str) -> str:
    """A registered method's display name, its class's ``label`` (``"sparse-prune-pfl"`` ->
    ``"Lightweight PFL"``); an unregistered name as it is."""
    return _REGISTERED[method].label if method in _REGISTERED else method


@dataclass(frozen=True)
class Scenario:
    """One cell of the grid: a task (``image`` or ``text``), a label skew and a hardware
    heterogeneity level."""

    task: str
    skew: str
    heterogeneity: str

    @property
    def name(self) -> str:
        return f"{self.task}, {self.skew}, {self.heterogeneity} heterogeneity"


#: the one text scenario: Shakespeare's own split, medium heterogeneity
_TEXT = Scenario("text", "natural", "medium")


@dataclass
class Settings:
    """What every method gets at one scale (identical for all of them)."""

    scale: str
    image: RunConfig
    text: RunConfig | None
    skews: tuple
    heterogeneities: tuple
    reference: Scenario
    seeds: int                  # seeds in the reference scenario
    text_seeds: int             # seeds in the text scenario
    map_seeds: int              # seeds in the other image cells
    lr_grid: dict               # task -> the learning rates every method is tuned over
    baselines: str = "authors"  # how the baselines run (:data:`hetfl_core.book.BASELINES`)

    def seeds_in(self, scenario: Scenario) -> int:
        """The number of seeds every method runs in ``scenario``."""
        if scenario == self.reference:
            return self.seeds
        return self.text_seeds if scenario.task == "text" else self.map_seeds

    def references(self) -> dict:
        """``{task: scenario}``: where each task's learning rate is tuned."""
        return {"image": self.reference, **({"text": _TEXT} if self.text is not None else {})}


def settings(scale: str, seed: int = 0) -> Settings:
    """The arena's settings at ``scale``: ``smoke`` (seconds, digits), ``book`` (the
    chapter: Fashion-MNIST 14x14 and Shakespeare, minutes on two cores) or ``paper``.

    No paper defines the arena (its grid is the union of five papers' settings), so its
    ``paper`` scale is this benchmark's own, documented here: full-resolution Fashion-MNIST
    and Shakespeare with every training sample, 50 clients of which a fifth take part per
    round (as in the papers' partial-participation setups), 200 image and 100 text rounds of
    10 local steps, every skew and every hardware tier, 3 seeds in every cell and a wider
    learning-rate grid. At ``book`` scale every cell has 3 seeds too (the ledger's minimum),
    and the grids are geometric (factor about 3) around the rates that served at that scale.
    The global model, whose final accuracy alone the arena reads, is scored after the last
    round only (``eval_global_every``): on the whole test set it is the costliest part of an
    evaluation."""
    check_scale(scale)
    image = RunConfig(dataset=by_scale(scale, smoke="digits", book="fashion-mnist-14", paper="fashion-mnist"),
                      model="wcnn", partition="dirichlet", alpha=0.5,
                      clients=by_scale(scale, smoke=6, book=10, paper=50),
                      participation=by_scale(scale, smoke=0.5, book=0.5, paper=0.2),
                      rounds=by_scale(scale, smoke=2, book=14, paper=200),
                      local_steps=by_scale(scale, smoke=2, book=5, paper=10), batch_size=32,
                      train_samples=by_scale(scale, smoke=300, book=2000, paper=ALL),
                      val_fraction=0.1, test_fraction=0.2, heterogeneity="medium", system=SYSTEM,
                      eval_every=by_scale(scale, smoke=1, book=4, paper=10), seed=seed)
    image = image.replace(eval_global_every=image.rounds)
    text = None if scale == "smoke" else image.replace(   # the image task's clients, steps and splits
        dataset="shakespeare", model="charlstm-s", partition="natural", batch_size=16,
        rounds=by_scale(scale, smoke=2, book=12, paper=100),
        train_samples=by_scale(scale, smoke=2000, book=6000, paper=ALL),
        eval_every=by_scale(scale, smoke=1, book=3, paper=10))
    text = text and text.replace(eval_global_every=text.rounds)
    return Settings(scale=scale, image=image, text=text,
                    skews=by_scale(scale, smoke=("α=0.5",), book=("α=0.1", "α=0.5", "near-IID"),
                                   paper=("α=0.1", "α=0.5", "near-IID")),
                    heterogeneities=by_scale(scale, smoke=("medium",),
                                             book=("low", "medium", "high"),
                                             paper=("low", "medium", "high")),
                    reference=Scenario("image", "α=0.5", "medium"),
                    seeds=by_scale(scale, smoke=1, book=3, paper=3),
                    text_seeds=by_scale(scale, smoke=1, book=3, paper=3),
                    map_seeds=by_scale(scale, smoke=1, book=3, paper=3),
                    lr_grid={"image": by_scale(scale, smoke=(0.1,), book=(0.03, 0.1, 0.3, 1.0, 3.0),
                                               paper=(0.01, 0.03, 0.1, 0.3, 1.0, 3.0)),
                             "text": by_scale(scale, smoke=(1.0,), book=(0.3, 1.0, 3.0, 10.0, 30.0),
                                              paper=(0.1, 0.3, 1.0, 3.0, 10.0, 30.0))})


def scenarios(s: Settings) -> list[Scenario]:
    """Every scenario of the grid: the image cells (skew x heterogeneity), then the text one."""
    cells = [Scenario("image", k, h) for k in s.skews for h in s.heterogeneities]
    return cells + ([_TEXT] if s.text is not None else [])


def method_options(method: str, config: RunConfig) -> dict:
    """The options a method runs with in the arena: its defaults, except where the method
    says otherwise for the arena's run of ``config`` (:meth:`Method.arena_options
    <hetfl_core.science.methods.base.Method.arena_options>`: OFA-FL's capacities by hardware tier and
    its schedule scaled to the rounds; the lightweight PFL method's split on the LSTM)."""
    return get_method(method).arena_options(config)


def _base(s: Settings, scenario: Scenario) -> RunConfig:
    if scenario.task == "text":
        return s.text.replace(heterogeneity=scenario.heterogeneity)
    return s.image.replace(alpha=SKEWS[scenario.skew], heterogeneity=scenario.heterogeneity)


def _config(s: Settings, scenario: Scenario, method: str, lr: float, seed: int) -> RunConfig:
    c = _base(s, scenario).replace(method=method, lr=lr, seed=seed, system=SYSTEM)
    return with_baselines(c.replace(options=method_options(method, c)), s.baselines)


def _refusal(config: RunConfig) -> str | None:
    """Why ``config`` cannot run (its validation error), or ``None``."""
    try:
        config.validate()
    except ConfigError as exc:
        return str(exc)
    return None


def tuning_configs(s: Settings, methods) -> dict:
    """``{(task, method, lr): config}``: each method that can run the task at each learning
    rate of the grid, in the task's reference scenario (:meth:`Settings.references`), first seed."""
    configs = {(task, m, lr): _config(s, scenario, m, lr, s.image.seed)
               for task, scenario in s.references().items() for m in methods for lr in s.lr_grid[task]}
    return {k: c for k, c in configs.items() if _refusal(c) is None}


def _only_planned(tuning: dict, task: str, method: str) -> bool:
    """Whether every tuning result of ``method`` on ``task`` is a planned one (``plan``
    records runs without training them, :func:`hetfl_core.book.enter_plan_mode`)."""
    results = [r for k, r in tuning.items() if k[:2] == (task, method)]
    return bool(results) and all(r is not None and r.get("planned") for r in results)


def pick_lr(tuning: dict, lr_grid: dict) -> dict:
    """``{(task, method): lr}``: the value of the task's grid ``lr_grid[task]`` with the best
    final validation accuracy (``acc_val``); a run that diverged (``None``) loses; ties go to
    the smaller rate. A method whose runs are only planned gets the smallest rate planned,
    a stand-in that lets a plan record the runs the tuned rate would take."""
    chosen = {}
    for task, m in dict.fromkeys((t, m) for t, m, _ in tuning):
        scores = []
        for lr in lr_grid[task]:
            result = tuning.get((task, m, lr))
            rows = [r for r in (result or {}).get("history", []) if r.get("acc_val") is not None]
            scores.append(rows[-1]["acc_val"] if rows else -math.inf)
        if max(scores) > -math.inf:
            chosen[(task, m)] = lr_grid[task][int(np.argmax(scores))]
        elif _only_planned(tuning, task, m):
            chosen[(task, m)] = next(lr for lr in lr_grid[task] if (task, m, lr) in tuning)
    return chosen


def first_lrs(grid) -> tuple:
    """The rates tuning starts from: the two middle values of ``grid`` (the lower middle
    pair of an odd grid; all of a grid of at most two)."""
    grid = tuple(grid)
    mid = max(len(grid) // 2 - 1, 0)
    return grid[mid:mid + 2]


def widen(tuning: dict, lr_grid: dict) -> list:
    """``[(task, method, lr)]``: the rates still to try. For each method in ``tuning``, if
    its best rate (:func:`pick_lr` over the rates tried) is the smallest or the largest
    tried, the grid's next rate beyond it, if any; if every rate tried diverged, the next
    smaller one. A method whose runs are only planned gets the next larger rate once (as
    :func:`training_samples` counts)."""
    out = []
    for task, m in dict.fromkeys((t, m) for t, m, _ in tuning):
        grid = list(lr_grid[task])
        tried = sorted(lr for t, mm, lr in tuning if (t, mm) == (task, m))
        mine = {k: v for k, v in tuning.items() if k[:2] == (task, m)}
        best = pick_lr(mine, {task: tried}).get((task, m))
        lo, hi = grid.index(tried[0]), grid.index(tried[-1])
        if _only_planned(mine, task, m):       # a plan: one step outwards, as tuning mostly takes
            if len(tried) == len(first_lrs(grid)) and hi < len(grid) - 1:
                out.append((task, m, grid[hi + 1]))
            continue
        if (best is None or best == tried[0]) and lo > 0:
            out.append((task, m, grid[lo - 1]))
        if best is not None and best == tried[-1] and len(tried) > 1 and hi < len(grid) - 1:
            out.append((task, m, grid[hi + 1]))
    return out


def lr_edges(lrs: dict, lr_grid: dict) -> dict:
    """``{(task, method): "smallest" | "largest"}`` for every method whose chosen rate is at
    an edge of its task's grid (where a wider grid might serve it better); empty for a
    one-value grid."""
    return {(task, m): "smallest" if lr == lr_grid[task][0] else "largest"
            for (task, m), lr in lrs.items()
            if len(lr_grid[task]) > 1 and lr in (lr_grid[task][0], lr_grid[task][-1])}


def majority_rate(config: RunConfig) -> float:
    """The accuracy of always predicting the most frequent label of the clients' pooled
    test splits (on Shakespeare: the most frequent next character)."""
    data = build_data(config)
    y = torch.cat([c.y_test.reshape(-1) for c in data.clients])
    if y.numel() == 0:
        return math.nan
    return float(torch.bincount(y).max()) / y.numel()


def training_samples(s: Settings, methods=METHODS, lrs_per_method: float | None = None) -> dict:
    """``{task: samples}``: the training samples the whole arena draws (clients x
    participation x rounds x local steps x batch size, summed over every tuning and
    reported run; a method that cannot run a task still counts, an upper bound).
    ``lrs_per_method`` is the number of tuning rates per method (default: the first ones
    plus one step outwards, at most the grid)."""
    out = {}
    for task, base in (("image", s.image), ("text", s.text)):
        if base is None:
            continue
        per_run = (base.clients * base.participation * base.rounds * base.local_steps
                   * base.batch_size)
        grid = s.lr_grid[task]
        tuned = lrs_per_method if lrs_per_method is not None else \
            min(len(grid), len(first_lrs(grid)) + 1)
        seeds = sum(s.seeds_in(sc) for sc in scenarios(s) if sc.task == task)
        out[task] = per_run * len(methods) * (tuned + seeds - 1)     # seed 0 of a cell is tuned
    return out


def run_configs(s: Settings, methods, lrs: dict) -> dict:
    """``{(scenario, method, seed): config}`` for every cell, tuned method and seed."""
    first = s.image.seed
    return {(sc, m, seed): _config(s, sc, m, lrs[(sc.task, m)], seed)
            for sc in scenarios(s) for m in methods if (sc.task, m) in lrs
            for seed in range(first, first + s.seeds_in(sc))}


@dataclass
class ArenaRuns:
    """What :func:`run_arena` returns: the settings, the chosen learning rates, every
    result by ``(scenario, method, seed)``, the runs that failed (with their one-line
    error), the methods a task cannot run, and the tuning runs by ``(task, method, lr)``
    (a diverged one is ``None``)."""

    settings: Settings
    methods: tuple
    lrs: dict
    results: dict
    failed: dict
    unsupported: dict
    tuning: dict = field(default_factory=dict)

    def runs(self, scenario: Scenario, method: str) -> list[dict]:
        """The results of ``method`` in ``scenario``, one per seed, in seed order."""
        return [r for (sc, m, _), r in sorted(self.results.items(), key=lambda kv: kv[0][2])
                if sc == scenario and m == method]


def _sweep_tolerant(grid: dict, processes: int, desc: str, directory, progress: bool):
    """Run every config of ``grid`` through :func:`~hetfl_core.runtime.experiments.sweep`; a run
    that fails (diverges, say) is recorded, the others are kept."""
    keys, configs = list(grid), list(grid.values())
    try:
        results = sweep(configs, processes=processes, directory=directory, desc=desc, progress=progress)
        return dict(zip(keys, results)), {}
    except HetflError as exc:
        out = {k: load_cached(c, directory) for k, c in zip(keys, configs)}
        missing = [k for k, r in out.items() if r is None]
        why = _one_line(exc) if len(missing) == 1 else f"one of {len(missing)} failed runs; {_one_line(exc)}"
        return {k: r for k, r in out.items() if r is not None}, {k: why for k in missing}


def check_arguments(scale: str, processes: int, seed: int) -> None:
    """Raise :class:`ConfigError` (one line) unless the arena can run at ``scale`` with
    ``processes`` workers from the first seed ``seed``: every seed it will use, ``seed`` to
    ``seed`` + the number of seeds - 1, must be a valid :attr:`RunConfig.seed`."""
    check_scale(scale)
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ConfigError(f"processes must be an integer of at least 1, got {processes!r}")
    meta = next(f.metadata for f in fields(RunConfig) if f.name == "seed")
    check_value("seed", seed, meta)
    s = settings(scale, seed)
    n = max(s.seeds, s.text_seeds, s.map_seeds)
    check_value(f"seed (the last of the arena's {n} seeds from {seed})", seed + n - 1, meta)


def run_arena(scale: str = "smoke", methods=None, processes: int = 2, seed: int = 0, directory=None,
              progress: bool = True, baselines: str = "authors") -> ArenaRuns:
    """Tune, then run the whole arena at ``scale`` (cached and resumable: a rerun reads
    every finished run from the cache). ``methods`` defaults to :data:`METHODS`; any
    registered method (a plug-in) may be named. A method that cannot run a task's model is
    left out of that task; a run that still fails one rate lower is reported in ``failed``.
    ``baselines="simplified"`` runs the baselines simplified
    (:data:`hetfl_core.book.SIMPLIFIED_BASELINES`)."""
    check_arguments(scale, processes, seed)
    s = replace(settings(scale, seed), baselines=baselines)
    methods = tuple(dict.fromkeys(methods or METHODS))
    for m in methods:
        get_method(m)
    unsupported = {(task, m): why for task, scenario in s.references().items() for m in methods
                   if (why := _refusal(_config(s, scenario, m, s.lr_grid[task][0], seed)))}
    every = tuning_configs(s, methods)
    todo = [k for k in every if k[2] in first_lrs(s.lr_grid[k[0]])]
    tuning = {}
    while todo:                       # the middle rates, then outwards while the best is at an edge
        done, _ = _sweep_tolerant({k: every[k] for k in todo}, processes, "arena: tuning lr",
                                  directory, progress)
        tuning.update({k: done.get(k) for k in todo})
        todo = [k for k in widen(tuning, s.lr_grid) if k in every and k not in tuning]
    lrs = pick_lr(tuning, s.lr_grid)
    failed = {(t, m, lr): "diverged at every rate tried" for t, m, lr in tuning
              if (t, m) not in lrs}
    grid = run_configs(s, methods, lrs)
    results, failed_runs = _sweep_tolerant(grid, processes, "arena: runs", directory, progress)
    retry = {k: grid[k].replace(lr=lower) for k in failed_runs
             if (lower := max([lr for lr in s.lr_grid[k[0].task] if lr < grid[k].lr], default=None))}
    if retry:      # the same rule for every method: a failed run (diverged) falls back one rate
        more, failed_runs = _sweep_tolerant(retry, processes, "arena: lower lr", directory, progress)
        results.update(more)
    return ArenaRuns(s, methods, lrs, results, {**failed, **failed_runs}, unsupported, tuning)


# -- metrics -------------------------------------------------------------------------------
def worst_share(accuracies, share: float = 0.1) -> float:
    """Mean accuracy of the worst ``share`` of clients (at least one client); ``nan``
    if no client was scored."""
    values = np.sort([a for a in accuracies or [] if a is not None])
    if values.size == 0:
        return math.nan
    return float(values[:max(1, math.ceil(share * values.size))].mean())


def _last(result: dict, key: str) -> float:
    value = result["history"][-1].get(key)
    return math.nan if value is None else float(value)


def run_metrics(result: dict, target: float, budget: float) -> dict:
    """One run's arena metrics: final personalised (``acc``) and global (``acc_global``)
    accuracy, the worst 10% of clients (``worst10``), simulated ``time_s``, ``bits`` (up
    plus down), ``energy_j`` (``nan`` where the history has none) and ``flops`` at the end;
    the same four costs when personalised accuracy first reaches ``target`` (``inf`` if it
    never does); and the personalised accuracy at the simulated-time ``budget``: its last
    evaluation at or before the budget (:func:`~hetfl_core.book.report.value_by`, which raises
    for a run not yet evaluated by then; :func:`targets` sets a budget every run reaches)."""
    rows = [r for r in result["history"] if r.get("acc_clients") is not None]
    last = result["history"][-1]
    out = {"acc": final(result), "acc_global": final(result, "acc_global"),
           "worst10": worst_share(rows[-1]["acc_clients"]) if rows else math.nan,
           "time_s": _last(result, "time_s"), "bits": last["uplink_bits"] + last["downlink_bits"],
           "energy_j": _last(result, "energy_j"), "flops": _last(result, "flops"),
           "acc_at_budget": value_by(result, budget)}
    for key, x in (("time", "time_s"), ("bits", "traffic_bits"), ("energy", "energy_j"), ("flops", "flops")):
        no_energy = key == "energy" and last.get("energy_j") is None
        out[f"{key}_to_target"] = math.nan if no_energy else first_reach(result, target, x)
    return out


def targets(runs: ArenaRuns, scenario: Scenario, share: float = 0.9) -> tuple[float, float]:
    """The scenario's target accuracy (``share`` of the best method's final mean
    personalised accuracy) and time budget: the median finishing time of its methods, or,
    where some run has not been evaluated by then, the latest first evaluation of its runs
    (:func:`~hetfl_core.book.report.common_budget`), so that every run has an accuracy at the
    budget (the last evaluation at or before it) and none drops out of that column."""
    per_method = [rs for m in runs.methods if (rs := runs.runs(scenario, m))]
    if not per_method:
        return math.nan, math.nan
    best = np.nanmax([np.nanmean([final(r) for r in rs]) for rs in per_method])
    times = [np.mean([r["history"][-1]["time_s"] for r in rs]) for rs in per_method]
    every_run = [r for rs in per_method for r in rs]
    return share * float(best), max(float(np.median(times)), common_budget(every_run, "time_s"))


#: leaderboard columns: key -> (header, digits, scale, unit)
COLUMNS = {"acc": ("personalised acc. (%)", 1, 100, ""), "acc_global": ("global acc. (%)", 1, 100, ""),
           "worst10": ("worst 10% (%)", 1, 100, ""), "acc_at_budget": ("acc. at time budget (%)", 1, 100, ""),
           "time_s": ("time (s)", 1, 1, ""), "bits": ("traffic (MB)", 1, 1 / 8e6, ""),
           "energy_j": ("energy (J)", 2, 1, ""), "flops": ("GFLOPs", 0, 1e-9, ""),
           "time_to_target": ("time to target (s)", 1, 1, ""),
           "bits_to_target": ("MB to target", 1, 1 / 8e6, ""), "energy_to_target": ("J to target", 2, 1, ""),
           "flops_to_target": ("GFLOPs to target", 0, 1e-9, "")}


def leaderboard(runs: ArenaRuns) -> list[dict]:
    """One row per scenario and method, best personalised accuracy first within each
    scenario: the method, its learning rate, its seeds, and per metric of
    :func:`run_metrics` the per-seed values (``values``) and their mean (``mean``)."""
    rows = []
    for scenario in scenarios(runs.settings):
        target, budget = targets(runs, scenario)
        block = []
        for m in runs.methods:
            rs = runs.runs(scenario, m)
            if not rs:
                continue
            per = [run_metrics(r, target, budget) for r in rs]
            values = {k: [p[k] for p in per] for k in per[0]}
            lrs = sorted({r["config"]["lr"] for r in rs}, reverse=True)
            block.append({"scenario": scenario.name, "task": scenario.task, "skew": scenario.skew,
                          "heterogeneity": scenario.heterogeneity, "method": m, "label": label(m),
                          "lr": lrs[0], "lrs": lrs, "seeds": len(rs), "system": SYSTEM, "target": target,
                          "budget_s": budget, "mean": {k: _mean(v) for k, v in values.items()},
                          "values": values})
        if scenario.task == "text" and block:
            block.append(_majority_row(runs, scenario, block[0]))
        block.sort(key=lambda r: -np.nan_to_num(r["mean"]["acc"], nan=-1))
        for rank, row in enumerate(block, 1):
            row["rank"] = rank
        rows += block
    return rows


def _majority_row(runs: ArenaRuns, scenario: Scenario, like: dict) -> dict:
    """The text leaderboard's baseline row: the majority-character rate of each seed's
    test splits (``acc``; no other metric)."""
    seeds = sorted({r["config"]["seed"] for m in runs.methods for r in runs.runs(scenario, m)})
    config = _base(runs.settings, scenario)
    values = {k: [math.nan] * len(seeds) for k in like["values"]}
    values["acc"] = [majority_rate(config.replace(seed=sd)) for sd in seeds]
    shared = ("scenario", "task", "skew", "heterogeneity", "target", "budget_s")
    return {**{k: like[k] for k in shared},
            "method": "majority", "label": "Majority character", "lr": math.nan, "lrs": [],
            "seeds": len(seeds), "system": "—", "baseline": True, "values": values,
            "mean": {k: _mean(v) for k, v in values.items()}}


def _mean(values) -> float:
    v = np.asarray(values, float)
    if v.size == 0 or np.isnan(v).all():
        return math.nan
    if np.isposinf(v).any():
        return math.inf
    return float(np.nanmean(v))


def _csv_value(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and math.isinf(value):
        return "never"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def write_leaderboard(rows: list[dict], out: Path) -> tuple[Path, Path]:
    """``leaderboard.csv`` (one line per scenario and method, the metrics' means) and
    ``leaderboard.json`` (with every seed's value) in the directory ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    head = ["scenario", "rank", "method", "lr", "seeds", "system", "target", "budget_s", *COLUMNS]
    csv_path, json_path = out / "leaderboard.csv", out / "leaderboard.json"
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        for r in rows:
            w.writerow([_csv_value(r[k]) for k in head[:8]] + [_csv_value(r["mean"][k]) for k in COLUMNS])

    def plain(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None if math.isnan(v) else "inf"
        return v

    data = [{**{k: plain(v) for k, v in r.items() if k not in ("mean", "values")},
             "mean": {k: plain(v) for k, v in r["mean"].items()},
             "values": {k: [plain(x) for x in v] for k, v in r["values"].items()}} for r in rows]
    json_path.write_text(json.dumps(data, indent=1))
    return csv_path, json_path


# -- pictures -------------------------------------------------------------------------------
def pareto_front(points) -> list[int]:
    """Indices of the points ``(cost, accuracy)`` no other point beats on both (lower or
    equal cost and higher or equal accuracy, one strictly), cheapest first."""
    pts = [(float(c), float(a)) for c, a in points]
    keep = [i for i, (c, a) in enumerate(pts) if math.isfinite(c) and math.isfinite(a) and
            not any(c2 <= c and a2 >= a and (c2 < c or a2 > a) for c2, a2 in pts
                    if math.isfinite(c2) and math.isfinite(a2))]
    return sorted(keep, key=lambda i: pts[i][0])


def log_ticks(ax) -> list[float]:
    """Label the log x-axis of ``ax`` with plain numbers (``0.3``, ``1``, ``20``, not
    ``3×10⁻¹``) at 1, 2, 3 and 5 times each power of ten over a range of up to 1.5
    decades, 1, 2 and 5 up to 3 decades, the powers alone beyond; minor ticks unlabelled.
    Call it once the data are drawn; returns the labelled values within the axis."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    low, high = ax.get_xlim()
    decades = math.log10(high / low) if low > 0 and high > low else 1.0
    subs = (1.0, 2.0, 3.0, 5.0) if decades < 1.5 else (1.0, 2.0, 5.0) if decades < 3 else (1.0,)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    return [float(v) for v in ax.get_xticks() if low <= v <= high]


def plot_pareto(rows: list[dict], axes=None, costs=("time_s", "bits"), y: str = "acc"):
    """Accuracy against each cost in ``costs`` (one panel each), one point per method
    (mean over seeds, in the method's colour and marker), the Pareto front as a dashed
    step line. ``rows`` are the leaderboard rows of one scenario."""
    import matplotlib.pyplot as plt

    from .plots import method_style

    if axes is None:
        _, axes = plt.subplots(1, len(costs), figsize=(4.2 * len(costs), 3.6), constrained_layout=True)
    axes = np.atleast_1d(axes)
    for ax, cost in zip(axes, costs):
        header, _, scale, _ = COLUMNS[cost]
        pts = [(r["mean"][cost] * scale, r["mean"][y] * 100) for r in rows]
        for r, (cx, cy) in zip(rows, pts):
            if math.isfinite(cx) and math.isfinite(cy):
                ax.scatter(cx, cy, s=45, label=r["label"], **method_style(r["method"]), zorder=3)
        front = [pts[i] for i in pareto_front(pts)]
        if front:
            ax.step([p[0] for p in front], [p[1] for p in front], where="post", ls="--", color="0.4",
                    lw=1, zorder=2)
        ax.set_xscale("log")
        log_ticks(ax)
        free = [r["label"] for r, (cx, _) in zip(rows, pts) if cx == 0]
        label = header.replace("(", "(log, ") if "(" in header else header
        if free:                      # no cost at all (Local sends nothing): off a log axis
            label += "\nnot shown, zero cost: " + ", ".join(free)
        ax.set_xlabel(label)
        ax.set_ylabel(COLUMNS[y][0])
    return axes


def winners(rows: list[dict], key: str = "acc", skews=None, heterogeneities=None) -> dict:
    """``{(skew, heterogeneity): (method, mean)}``: the method with the highest mean
    ``key`` in each image scenario (ties: the first in leaderboard order)."""
    best = {}
    for r in rows:
        if r["task"] != "image" or (skews and r["skew"] not in skews) or \
                (heterogeneities and r["heterogeneity"] not in heterogeneities):
            continue
        cell, value = (r["skew"], r["heterogeneity"]), r["mean"][key]
        if math.isfinite(value) and (cell not in best or value > best[cell][1]):
            best[cell] = (r["method"], value)
    return best


# -- comparing methods over the cells: probability of improvement, critical differences --------
def score_table(rows: list[dict], key: str = "acc", methods=None) -> tuple[list[str], list[str], np.ndarray]:
    """The leaderboard's per-seed ``key`` as one array: ``(methods, cells, values)`` with
    ``values[method, cell, seed]``, over the cells (scenarios) in which every one of
    ``methods`` (default: every method of the rows but the majority baseline) has a finite
    value on the same number of seeds. No such cell raises ``ValueError``."""
    by = {(r["method"], r["scenario"]): np.asarray(r["values"][key], dtype=float) for r in rows}
    methods = list(methods or dict.fromkeys(r["method"] for r in rows if not r.get("baseline")))
    cells = list(dict.fromkeys(r["scenario"] for r in rows))
    complete = [c for c in cells if all((m, c) in by and np.isfinite(by[(m, c)]).all() for m in methods)
                and len({by[(m, c)].size for m in methods}) == 1]
    if not complete or not methods:
        raise ValueError(f"no scenario where every one of {', '.join(methods) or 'no methods'} has "
                         f"{key} on every seed")
    seeds = min(by[(methods[0], c)].size for c in complete)
    complete = [c for c in complete if by[(methods[0], c)].size == seeds]
    return methods, complete, np.array([[by[(m, c)] for c in complete] for m in methods])


@dataclass(frozen=True)
class Improvement:
    """P(X > Y) over the cells with its bootstrap interval (:func:`probability_of_improvement`)."""

    probability: float
    low: float
    high: float
    cells: int
    seeds: int


def _improvement(x: np.ndarray, y: np.ndarray, paired: bool) -> float:
    """P(X > Y), ties counting one half, averaged over the cells (rows of ``x`` and ``y``):
    per cell over the paired seeds, or (``paired=False``) over every pair of runs (the
    Mann-Whitney statistic of rliable's probability of improvement)."""
    if paired:
        return float(np.mean((x > y) + 0.5 * (x == y)))
    a, b = x[:, :, None], y[:, None, :]
    return float(np.mean((a > b) + 0.5 * (a == b)))


def probability_of_improvement(x, y, paired: bool = True, higher: bool = True, reps: int = 2000,
                               seed: int = 0, confidence: float = 0.95) -> Improvement:
    """The probability that method X scores better than method Y on a cell (Agarwal et al.,
    NeurIPS 2021, "probability of improvement"; Bouthillier et al., MLSys 2021): ``x`` and
    ``y`` hold per-seed values, one row per cell (scenario; a flat array is one cell), the
    seeds of a cell shared by both (``paired``: seed i of X against seed i of Y; otherwise
    every run of X against every run of Y). ``higher=False`` for costs. Its two-sided
    ``confidence`` interval is the percentile interval of a stratified bootstrap (``reps``
    resamples of the seeds within each cell, one seeded generator). X improves on Y
    reliably when the interval lies above 1/2."""
    x, y = np.atleast_2d(np.asarray(x, float)), np.atleast_2d(np.asarray(y, float))
    if x.shape != y.shape or x.size == 0:
        raise ValueError(f"X and Y need the same cells and seeds, got shapes {x.shape} and {y.shape}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("probability of improvement needs a finite value on every cell and seed")
    if reps < 1 or not 0 < confidence < 1:
        raise ValueError(f"reps must be positive and confidence in (0, 1), got {reps} and {confidence}")
    if not higher:
        x, y = -x, -y
    rng = np.random.default_rng(seed)
    cells, seeds = x.shape
    rows = np.arange(cells)[:, None]
    draws = []
    for _ in range(reps):
        i = rng.integers(0, seeds, (cells, seeds))
        j = i if paired else rng.integers(0, seeds, (cells, seeds))
        draws.append(_improvement(x[rows, i], y[rows, j], paired))
    tail = (1 - confidence) / 2
    low, high = np.quantile(draws, [tail, 1 - tail])
    return Improvement(_improvement(x, y, paired), float(low), float(high), cells, seeds)


@dataclass(frozen=True)
class CriticalDifference:
    """Average ranks over the cells, the Friedman test and the Nemenyi critical difference
    (:func:`critical_difference`)."""

    methods: list
    ranks: list                 # average rank per method (1 = best)
    statistic: float            # Friedman's chi-square
    p_value: float
    difference: float           # the Nemenyi critical difference of average ranks
    cells: int
    alpha: float

    def groups(self) -> list[list[str]]:
        """The maximal runs of methods (ordered by rank) whose average ranks lie within the
        critical difference of each other: no pair inside one differs significantly."""
        order = np.argsort(self.ranks)
        ranks = np.asarray(self.ranks)[order]
        out = []
        for start in range(len(order)):
            end = start
            while end + 1 < len(order) and ranks[end + 1] - ranks[start] <= self.difference:
                end += 1
            group = [self.methods[k] for k in order[start:end + 1]]
            if len(group) > 1 and not any(set(group) <= set(g) for g in out):
                out.append(group)
        return out


def critical_difference(scores, methods=None, higher: bool = True, alpha: float = 0.05) -> CriticalDifference:
    """Demšar's comparison of several methods over several cells (JMLR 7, 2006): ``scores``
    is ``values[method, cell]`` (per-seed values are averaged over the last axis first) or a
    mapping method -> per-cell values; per cell the methods are ranked (1 = best, ties
    averaged), the average ranks are tested by Friedman's chi-square, and two methods differ
    when their average ranks differ by more than the Nemenyi critical difference
    ``q_alpha sqrt(k (k + 1) / (6 N))`` (``q_alpha`` the studentized range at ``k`` methods
    over sqrt 2)."""
    from scipy.stats import chi2, rankdata, studentized_range

    if isinstance(scores, dict):
        methods = list(scores)
        scores = [scores[m] for m in methods]
    values = np.asarray(scores, dtype=float)
    if values.ndim == 3:
        values = values.mean(axis=2)
    k, n = values.shape if values.ndim == 2 else (0, 0)
    methods = list(methods) if methods is not None else [str(i) for i in range(k)]
    if k < 2 or n < 2 or len(methods) != k:
        raise ValueError(f"a critical difference needs at least 2 methods on 2 cells, got {k} on {n}")
    if not np.isfinite(values).all():
        raise ValueError("every method needs a finite score on every cell")
    ranks = rankdata(-values if higher else values, axis=0).mean(axis=1)
    statistic = 12 * n / (k * (k + 1)) * (np.sum(ranks ** 2) - k * (k + 1) ** 2 / 4)
    q = studentized_range.ppf(1 - alpha, k, np.inf) / math.sqrt(2)
    return CriticalDifference(methods, [float(r) for r in ranks], float(statistic),
                              float(chi2.sf(statistic, k - 1)), float(q * math.sqrt(k * (k + 1) / (6 * n))),
                              n, alpha)
