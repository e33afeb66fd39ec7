"""The headline claims on the ladder (:mod:`hetfl_core.ladder`), one :class:`ClaimSpec` each,
and the ladder's rungs (:data:`RUNGS`).

Each spec restates the chapter's setting (``book`` and ``paper`` scale, at the chapter's
default parameters) and the query and criterion of the chapter cell it names; the rivals
are fixed here, before any ladder run. Where a chapter pairs its method with the best of
many baselines, the ladder judges it against the book-scale best (as the chapter's text
names it) and against the paper's strongest of the chapter's baselines (by the paper's
own table), each on its own.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import numpy as np

from .config import ALL, RunConfig, by_scale
from .report import Criterion, at_least, costs_to_target, final, more_than, per_seed, ratio

#: the rungs, cheapest first: the book scale's configuration, 2x, 4x and 8x its rounds,
#: and the paper's federation
RUNGS = ("book", "x2", "x4", "x8", "paper")
#: the points on the percent scale (how accuracy differences print)
PTS = " points"


@dataclass(eq=False)
class ClaimSpec:
    """One headline claim on the ladder.

    ``methods`` maps each label the claim needs (the method, its rivals, any run its value
    reads, e.g. the run that sets a target) to ``(registered name, options)`` or
    ``(registered name, options, changes to the setting)`` (a level of a sweep);
    ``setting(scale)`` is the chapter's configuration at ``"book"`` and ``"paper"`` scale
    (``"smoke"`` for a test's toy); ``value(runs, rival)`` is the claim's per-seed paired
    value from ``runs`` (label -> the results of :attr:`seeds`, in order) against one rival,
    as the chapter's cell ``cell`` computes it; ``criterion`` the chapter's criterion.
    ``paper_value`` is the paper's number on the value's scale (a line on the plot), or
    ``None``. ``paper_eval_every`` evaluates the paper rung every so many rounds (``None``:
    as the chapter's paper scale does); ``paper_global_last_two`` scores the global model on
    the whole test set after the last two rounds only at the paper rung (the final global
    accuracy, a mean of the last two, stays defined; no claim on the ladder reads it
    earlier), where every round's scoring is a sixth of a paper-scale run's time."""

    chapter: str
    ref: str
    statement: str
    cell: str
    paper: str
    paper_value: float | None
    method: str
    rivals: tuple[str, ...]
    methods: Mapping[str, tuple[str, dict]]
    setting: Callable[[str], RunConfig]
    value: Callable[[dict, str], np.ndarray]
    criterion: Criterion
    unit: str = PTS
    digits: int = 1
    seeds: tuple[int, ...] = (0, 1, 2)
    rungs: tuple[str, ...] = RUNGS
    base_scale: str = "book"
    paper_eval_every: int | None = None
    paper_global_last_two: bool = True

    @property
    def name(self) -> str:
        """The claim's reference within its chapter, e.g. ``"Table I"``."""
        return self.ref


#: chapter -> its claims on the ladder, in the chapter's order
SPECS: dict[str, list[ClaimSpec]] = {}


def register(spec: ClaimSpec) -> ClaimSpec:
    """Add ``spec`` to :data:`SPECS` (a claim already there under its chapter and ``ref`` is
    replaced)."""
    claims = SPECS.setdefault(spec.chapter, [])
    claims[:] = [c for c in claims if c.ref != spec.ref] + [spec]
    return spec




# -- FedLPS (book/fedlps.md) ---------------------------------------------------------------
def fedlps_setting(scale: str) -> RunConfig:
    """Table I's runs (the chapter's ``base``, its setup cell), at the default parameters:
    the CNN on a two-class shard split, 20 clients at book scale and the paper's MNIST
    setting (100 clients, a tenth a round, 100 rounds of 5 local epochs, Sec. VI-A)."""
    at = partial(by_scale, scale)
    return RunConfig(
        dataset=at(smoke="digits", book="fashion-mnist", paper="fashion-mnist"), model="cnn",
        partition="shards", classes_per_client=2, clients=at(smoke=6, book=20, paper=100),
        participation=at(smoke=0.25, book=0.25, paper=0.1),
        rounds=at(smoke=2, book=20, paper=100), local_epochs=at(smoke=1, book=1, paper=5),
        batch_size=20, lr=0.1, momentum=0.5,
        train_samples=at(smoke=ALL, book=4000, paper=ALL), heterogeneity="medium",
        eval_every=at(smoke=1, book=4, paper=2), seed=0)


#: FedRolex scored as FedLPS is, with the global model (``personal_eval="global"``): the
#: chapter's Table I compares FedLPS with every baseline scored alike
FEDLPS_METHODS = {"FedLPS": ("fedlps", {}), "FedPer": ("fedper", {}),
                  "FedRolex": ("fedrolex", {"personal_eval": "global"})}


def fedlps_lead(runs: dict, rival: str) -> np.ndarray:
    """Per seed, FedLPS's personalised accuracy minus the rival's (points; each the mean of
    the last two evaluations), as the chapter's Table I claim (``columns`` and the claim cell)."""
    return 100 * (per_seed(runs["FedLPS"], final, last=2) - per_seed(runs[rival], final, last=2))


def fedlps_time_ratio(runs: dict, rival: str) -> np.ndarray:
    """Per seed, the rival's simulated time to 90% of FedPer's accuracy (its mean over the
    seeds, the mean of the last two evaluations) over FedLPS's: the chapter's Figs. 4-5
    claim (``targets``, ``tta`` and the claim cell); a time never reached bounded by the
    run's horizon (:func:`~hetfl_core.report.costs_to_target`)."""
    target = 0.9 * float(np.mean(per_seed(runs["FedPer"], final, last=2)))
    times = {n: costs_to_target(runs[n], target, x="time_s") for n in ("FedLPS", rival)}
    return ratio(times[rival], times["FedLPS"])


# FedPer is the book scale's best baseline (the chapter's Table I probe names it); of the
# chapter's baselines the paper's Table I has FedRolex strongest on MNIST (93.73%).
register(ClaimSpec(
    "fedlps", "Table I", "FedLPS is the most accurate method", "Table I, the claim cell",
    "96.77% on MNIST, +3.04 points over FedRolex (93.73%)", 96.77 - 93.73,
    "FedLPS", ("FedPer", "FedRolex"), FEDLPS_METHODS, fedlps_setting, fedlps_lead,
    at_least(1.28, PTS, "FedLPS − rival (the paper's smallest lead, +1.28)")))
register(ClaimSpec(
    "fedlps", "Figs. 4-5", "FedLPS reaches 90% of FedPer's accuracy in at most 31.2% of the "
    "fastest baseline's time", "Figs. 4-5, the second claim cell",
    "≥ 68.80% less running time than the baselines", 1 / 0.312,
    "FedLPS", ("FedPer", "FedRolex"), FEDLPS_METHODS, fedlps_setting, fedlps_time_ratio,
    at_least(1 / 0.312, "×", "rival time / FedLPS time", log=True), unit="×", digits=2))


def fedlps_side_setting(scale: str) -> RunConfig:
    """The runs of Figs. 6-9 (the chapter's ``side``): Table I's on 2000 training samples at
    book scale, as Table I's elsewhere."""
    base = fedlps_setting(scale)
    return base.replace(train_samples=2000) if scale == "book" else base


#: Fig. 6's levels, classes per client: the book scale's three at every rung (the paper's
#: 2, 4, 6, 8, 10 include both ends), so that the rungs compare the same levels
FIG6_CLASSES = (2, 5, 10)
FIG6_METHODS = {f"{n}, c={c}": (FEDLPS_METHODS.get(n, ("fedavg", {}))[0], {}, {"classes_per_client": c})
                for n in ("FedAvg", "FedPer", "FedLPS") for c in FIG6_CLASSES}


def fedlps_worst_level_lead(runs: dict, rival: str) -> np.ndarray:
    """Per seed, FedLPS's lead over the rival at its worst level (points; accuracy the mean
    of the last two evaluations): the chapter's ``noniid`` and second Fig. 6 claim cell."""
    lead = [100 * (per_seed(runs[f"FedLPS, c={c}"], final, last=2) - per_seed(runs[f"{rival}, c={c}"], final, last=2))
            for c in FIG6_CLASSES]
    return np.min(lead, axis=0)


# the better of FedAvg and FedPer on average is the chapter's rival; both are judged
register(ClaimSpec(
    "fedlps", "Fig. 6", "FedLPS is more accurate than FedAvg and FedPer at every non-IID "
    "level, the IID end included", "Fig. 6, the second claim cell",
    "FedLPS always outperforms the baselines", None, "FedLPS", ("FedPer", "FedAvg"),
    FIG6_METHODS, fedlps_side_setting, fedlps_worst_level_lead,
    more_than(0, PTS, "FedLPS − rival, worst level")))


# -- SRP-pFed (book/srp_pfed.md) -----------------------------------------------------------
def srp_base(scale: str) -> RunConfig:
    """The chapter's ``base`` (its setup cell) at the default parameters: 30 rounds at book
    scale; the paper's 100 clients, LeNet-5 and 2000 rounds of 5 local epochs (Sec. V-A)."""
    at = partial(by_scale, scale)
    return RunConfig(
        dataset=at(smoke="digits", book="fashion-mnist", paper="fashion-mnist"),
        model=at(smoke="cnn", book="cnn", paper="lenet5"),
        clients=at(smoke=4, book=20, paper=100), participation=at(smoke=0.25, book=0.25, paper=0.1),
        rounds=at(smoke=2, book=30, paper=2000), train_samples=at(smoke=400, book=4000, paper=ALL),
        val_fraction=0.1, test_fraction=0.2, lr=0.05, batch_size=at(smoke=32, book=32, paper=64),
        local_epochs=at(smoke=1, book=1, paper=5), eval_every=at(smoke=1, book=10, paper=5), seed=0)


def srp_setting(scale: str) -> RunConfig:
    """The label-skew runs of Table III, (0.1, 1): :func:`srp_base` on the dir(0.1) split."""
    return srp_base(scale).replace(partition="dirichlet", alpha=0.1)


def srp_writers_setting(scale: str) -> RunConfig:
    """Table IV's writers runs (the chapter's ``TASKS["tab4"]``): :func:`srp_base` on the
    MNIST stand-in dealt by writer's style, evaluated every 5 rounds, the paper's 500 rounds
    at paper scale."""
    at = partial(by_scale, scale)
    return srp_base(scale).replace(
        partition="writers", dataset=at(smoke="digits", book="mnist-5k", paper="mnist-5k"),
        eval_every=at(smoke=1, book=5, paper=5), rounds=at(smoke=2, book=30, paper=500))


def _srp_methods() -> dict:
    from .methods.srp_pfed import SRPpFed

    # the chapter's config(): SRP-pFed's options completed with its defaults and the
    # chapter's parameters candidates=10, k=2, decay=0.9
    return {"SRP-pFed": ("srp-pfed", {**SRPpFed.defaults, "candidates": 10, "k": 2, "decay": 0.9}),
            "FedAvg": ("fedavg", {})}


def srp_gap(runs: dict, rival: str) -> np.ndarray:
    """Per seed, SRP-pFed's personalised accuracy minus the rival's (points, final
    evaluation): the chapter's first label-skew claim cell."""
    return 100 * (per_seed(runs["SRP-pFed"], final) - per_seed(runs[rival], final))


def srp_traffic_ratio(runs: dict, rival: str) -> np.ndarray:
    """Per seed, the rival's uplink plus downlink to the target over SRP-pFed's, the target
    FedAvg's mean final accuracy rounded down to 5 points (the chapter's ``target_of`` and
    ``traffic_to``, second label-skew claim cell)."""
    target = 5 * math.floor(float(np.mean(100 * per_seed(runs["FedAvg"], final))) / 5)
    cost = {n: costs_to_target(runs[n], target / 100, x="traffic_bits") for n in ("SRP-pFed", rival)}
    return ratio(cost[rival], cost["SRP-pFed"])


register(ClaimSpec(
    "srp_pfed", "Table III, (0.1, 1)", "under strong label skew SRP-pFed is far more accurate "
    "than FedAvg", "Table III, (0.1, 1), the first claim cell", "86.9% vs 55.7% (+31.2 points)",
    31.2, "SRP-pFed", ("FedAvg",), _srp_methods(), srp_setting, srp_gap,
    at_least(31.2, PTS, "SRP-pFed − FedAvg (the paper's +31.2)")))
register(ClaimSpec(
    "srp_pfed", "Table III, (0.1, 1), traffic", "SRP-pFed needs 212 times less communication than FedAvg "
    "to reach FedAvg's final accuracy (rounded down to 5 points)",
    "Table III, (0.1, 1), the second claim cell", "0.04 Gb vs 8.49 Gb to 50%", 8.49 / 0.04,
    "SRP-pFed", ("FedAvg",), _srp_methods(), srp_setting, srp_traffic_ratio,
    at_least(212, "×", "FedAvg / SRP-pFed traffic to the target (the paper's 8.49 / 0.04)",
             log=True), unit="×", digits=2))
register(ClaimSpec(
    "srp_pfed", "Table IV, non-IID", "under the writers' style shift SRP-pFed is 10.9 "
    "points above FedAvg", "Table IV, the claim cell", "89.69% vs 78.76% (+10.9 points)",
    89.69 - 78.76, "SRP-pFed", ("FedAvg",), _srp_methods(), srp_writers_setting, srp_gap,
    at_least(10.9, PTS, "SRP-pFed − FedAvg (the paper's +10.9)")))


# -- Lightweight personalised FL (book/lightweight_pfl.md) ---------------------------------
def lpfl_setting(scale: str) -> RunConfig:
    """The chapter's ``base`` (its settings cell) at the default parameters: OPT's method
    on Fashion-MNIST with LeNet-5, 10 clients, 40 rounds of 2 local steps at book scale;
    100 clients, 100 rounds of 1 step and every training sample at paper scale (Sec. V),
    personalised models scored every second round. Its options (``theta_ratio``) are
    OPT's (:func:`_lpfl_methods`): a baseline's options replace the base's in the chapter."""
    at = partial(by_scale, scale)
    dataset = at(smoke="digits", book="fashion-mnist", paper="fashion-mnist")
    return RunConfig(
        method="sparse-prune-pfl", dataset=dataset, model="cnn" if scale == "smoke" else "lenet5",
        clients=at(smoke=10, book=10, paper=100), rounds=at(smoke=2, book=40, paper=100),
        local_steps=at(smoke=1, book=2, paper=1), lr=0.05, batch_size=32, seed=0,
        train_samples=at(smoke=400, book=4000, paper=ALL), eval_every=at(smoke=1, book=2, paper=2),
        eval_global=False)


#: the cases of Figs. 2-3 (the chapter's ``CASES``): a level each
LPFL_CASES = {"class-4": {"partition": "shards", "classes_per_client": 4},
              "class-2": {"partition": "shards", "classes_per_client": 2},
              "alpha=0.5": {"partition": "dirichlet", "alpha": 0.5},
              "alpha=0.1": {"partition": "dirichlet", "alpha": 0.1}}


def _fedper_head(model: str, dataset: str) -> int:
    """FedPer's ``head_layers`` whose private part is closest to the convolutional split
    (the chapter's ``baseline_split(model, dataset, "fedper", "conv")``): the head that
    differs from it in the fewest parameters."""
    from .data import load_dataset
    from .masks import structured_units
    from .models import build_model
    from .personalization import body_parameter_names, split_parameter_names

    data = load_dataset(dataset)
    net = build_model(model, data.input_shape, data.num_classes)
    wanted = set(split_parameter_names(net, "conv"))
    sizes = {n: p.numel() for n, p in net.named_parameters()}
    costs = {h: sum(sizes[n] for n in wanted ^ set(body_parameter_names(net, h)))
             for h in range(1, len(structured_units(net, include_output=True)))}
    return min(costs, key=lambda h: (costs[h], h))


def _lpfl_methods() -> dict:
    """OPT (``method_config(base, allocation="dca")``) and FedPer (``config_for``: the
    wireless cell, equal bandwidth, the head nearest the conv split) in every case."""
    opt = {"theta_ratio": 10.0, "split": "conv", "allocation": "dca", "k": 1.0, "r": 1.0,
           "prune_scope": "private"}
    head = _fedper_head("lenet5", "fashion-mnist")
    methods = {}
    for case, level in LPFL_CASES.items():
        methods[f"OPT, {case}"] = ("sparse-prune-pfl", opt, level)
        methods[f"FedPer, {case}"] = ("fedper", {"head_layers": head},
                                      {**level, "system": "wireless", "bandwidth_policy": "equal"})
    return methods


def lpfl_worst_case_gap(runs: dict, rival: str) -> np.ndarray:
    """Per seed, OPT's final personalised accuracy minus the rival's in its worst case
    (points): the chapter's ``gap_by_case`` of the Figs. 2-3 row, every case at once."""
    gaps = [100 * (per_seed(runs[f"OPT, {c}"], final) - per_seed(runs[f"{rival}, {c}"], final))
            for c in LPFL_CASES]
    return np.min(gaps, axis=0)


# FedPer is the rival the row names (the paper's "negligible loss" against it)
register(ClaimSpec(
    "lightweight_pfl", "Figs. 2–3", "OPT's final accuracy is within 2 points of FedPer's "
    "(same rounds, every case)", "Figs. 2–3, the OPT − FedPer claim cell", "negligible loss",
    None, "OPT", ("FedPer",), _lpfl_methods(), lpfl_setting, lpfl_worst_case_gap,
    at_least(-2, PTS, "OPT − FedPer, worst case")))
