"""The machinery of ``book/lightweight_pfl.ipynb`` (Tan et al., lightweight personalised FL
with sparsification, pruning and DCA): the experiment grids, the cost tables of Tables IV
and V, the optimiser's rounds and Table VI, the plots, and the chapter's claim ledger.

Every run is on the same simulated wireless cell (``system="wireless"``): OPT, its
ablations (FedAvg-S, FedAvg-P, fixed (k, r), equal shares) and Table III's splits are
configurations of the plug-in ``sparse-prune-pfl`` (:func:`method_config`); the paper's
baselines FedAvg, FedPer and LG-FedAvg are the library's ``fedavg``, ``fedper`` and
``lg-fedavg`` (:func:`baseline_config`), and "FedPer+BW" is FedPer with the cell's
latency-minimising shares. Runs are kept in :class:`Runs`, keyed by
``(case, method, seed)``; a claim's per-seed values are computed on the seeds every method
it compares ran on (:meth:`Runs.shared_seeds`), so a claim against a baseline that ran on
one seed is a one-seed claim, and the ledger says so.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from .. import data as hd
from .. import dca, plots  # plots: the book's style for every figure here
from ..config import RunConfig
from ..masks import structured_units
from ..models import build_model
from ..personalization import (body_parameter_names, head_parameter_names, split_layers,
                               split_parameter_names)
from ..report import (Ledger, above_chance, at_least, at_most, best_on_average, compare,
                      first_reach, fmt, fmt_mean_sd, is_true, mean_sd, show_table)

__all__ = ["CASES", "METHODS", "ABLATION", "FIXED_PAIRS", "RES_METHODS", "TEXT_METHODS",
           "BASELINES", "COSTS", "PAPER_TABLE6", "method_config", "baseline_config",
           "baseline_split", "config_for", "image_grid", "Runs", "scale_probe_grid",
           "scale_probe", "probe_text", "widest_gap_case",
           "cost_to", "sooner", "final_pct", "fedper_targets",
           "cost_rows", "show_cost_tables", "chosen", "plot_cases", "plot_round_picture",
           "plot_tradeoff", "dca_rounds", "show_dca_rounds", "split_fractions",
           "show_table3", "table6", "show_table6", "FIXED9", "fig9_grid", "fig9_latency",
           "FIG10_GROUPS", "show_fig10", "style", "text_grid", "majority_accuracy",
           "show_text_runs", "cases_won", "image_claims", "resnet_claims",
           "ablation_claims", "bandwidth_claims", "text_claims", "dca_claims",
           "SOLVER_TOL"]

#: the four non-IID cases of Figs. 2-3 and Table IV
CASES = {"class-4": dict(partition="shards", classes_per_client=4),
         "class-2": dict(partition="shards", classes_per_client=2),
         "alpha=0.5": dict(partition="dirichlet", alpha=0.5),
         "alpha=0.1": dict(partition="dirichlet", alpha=0.1)}

#: OPT, the paper's baselines (``baseline``: the library's method, sharing what ``split``
#: shares) and FedPer with the cell's latency-minimising shares; FedAvg-S and FedAvg-P have
#: no plug-in of their own and are settings of sparse-prune-pfl
METHODS = {"OPT": dict(allocation="dca"),
           "FedPer": dict(baseline="fedper", split="conv"),
           "FedPer+BW": dict(baseline="fedper", split="conv", bandwidth_policy="min-time"),
           "LG-FedAvg": dict(baseline="lg-fedavg", split="fc"),
           "FedAvg": dict(baseline="fedavg", split="all"),
           "FedAvg-S": dict(split="all", k=0.05),
           "FedAvg-P": dict(split="all", r=0.5, prune_scope="all")}

#: the fixed (k, r) of Fig. 10; (1, 1) is FedPer
ABLATION = {"(1,1)": (1.0, 1.0), "(0.5,1)": (0.5, 1.0), "(0.1,1)": (0.1, 1.0),
            "(1,0.8)": (1.0, 0.8), "(1,0.5)": (1.0, 0.5), "(0.5,0.8)": (0.5, 0.8)}
#: the fixed pairs of Fig. 10 under the names the runs carry
FIXED_PAIRS = ["FedPer", "(0.5,1)", "(0.1,1)", "(1,0.8)", "(1,0.5)", "(0.5,0.8)"]

#: Figs. 4-5 and Table V: the ResNet with its last block private
RES_METHODS = {"OPT": dict(allocation="dca", split="last-block"),
               "FedPer": dict(baseline="fedper", split="last-block"),
               "LG-FedAvg": dict(baseline="lg-fedavg", split="fc"),
               "FedAvg": dict(baseline="fedavg", split="all")}

#: Figs. 6-8: the LoRA transformer (base = layer-0 LoRA; LG-FedAvg shares the classifier)
TEXT_METHODS = {"OPT": dict(allocation="dca", split="first:4"),
                "FedPer": dict(baseline="fedper", split="first:4"),
                "LG-FedAvg": dict(baseline="lg-fedavg", split="last:1"),
                "FedAvg": dict(baseline="fedavg", split="all")}

#: the baselines of Table IV
BASELINES = ("FedPer", "LG-FedAvg", "FedAvg")

#: the costs of Tables IV-V: column name -> (history key, digits, scale)
COSTS = {"latency (s)": ("time_s", 1, 1.0), "energy (J)": ("energy_j", 2, 1.0),
         "uplink (Mbit)": ("uplink_bits", 1, 1e-6), "GFLOPs": ("flops", 2, 1e-9)}

#: the paper's Table VI: band -> (k-bar, r-bar)
PAPER_TABLE6 = {"10 MHz": (0.74, 0.82), "30 MHz": (0.86, 0.91), "50 MHz": (0.98, 0.96),
                "10~50 MHz": (0.78, 0.97), "20~40 MHz": (0.66, 0.94)}

#: the objective's numerical tolerance: CLARABEL's answers can move (31a) by ~1e-6
SOLVER_TOL = 1e-4

#: the methods that run on every seed; the others run on the first
SPREAD_METHODS = ("OPT", "FedPer")
#: the methods of the scale probe: the accuracy gap and latency ratio at more rounds
PROBE_METHODS = ("OPT", "FedPer")


# -- configurations -------------------------------------------------------------------
def method_config(base: RunConfig, split: str = "conv", allocation: str = "fixed",
                  k: float = 1.0, r: float = 1.0, prune_scope: str = "private",
                  options: dict | None = None, **changes) -> RunConfig:
    """``base`` as one method of the chapter: the split (conv base, FC base, all shared,
    ...), the allocation (``dca``, ``uniform`` equal shares, ``fixed`` (k, r)) and
    ``options`` on top of ``base``'s (``theta_ratio``); ``changes`` are RunConfig
    fields (seed, partition, ...)."""
    opts = {**base.options, "split": split, "allocation": allocation, "k": k, "r": r,
            "prune_scope": prune_scope, **(options or {})}
    return base.replace(options=opts, **changes)


@functools.lru_cache(maxsize=None)
def _model(name: str, dataset: str):
    data = hd.load_dataset(dataset)
    return build_model(name, data.input_shape, data.num_classes)


def baseline_split(model_name: str, dataset: str, method: str,
                   split: str) -> tuple[int | None, list[str]]:
    """The ``head_layers`` of the library's ``fedper`` (private head) or ``lg-fedavg``
    (shared head) whose shared parameters are closest to the base of ``split`` (``conv``:
    the paper's FedPer; ``fc``: its LG-FedAvg), and the parameters on which the two differ
    (none where a ``head_layers`` matches exactly). ``fedavg`` shares everything: ``None``."""
    if method == "fedavg":
        return None, []
    model = _model(model_name, dataset)
    wanted = set(split_parameter_names(model, split))
    names = body_parameter_names if method == "fedper" else head_parameter_names
    sizes = {n: p.numel() for n, p in model.named_parameters()}
    best = None
    for h in range(1, len(structured_units(model, include_output=True))):
        diff = sorted(wanted ^ set(names(model, h)))
        cost = sum(sizes[n] for n in diff)
        if best is None or cost < best[0]:
            best = (cost, h, diff)
    return best[1], best[2]


def baseline_config(base: RunConfig, method: str, split: str,
                    bandwidth_policy: str = "equal", **changes) -> RunConfig:
    """``base`` run as the library's ``method`` (``fedavg``, ``fedper``, ``lg-fedavg``) on
    the same wireless cell, clients, seed, rounds, local steps and learning rate, sharing
    the base of ``split`` (:func:`baseline_split`); the band split by the cell's
    ``bandwidth_policy`` (``equal``, or ``min-time``: the shares that end the round
    soonest); ``changes`` are RunConfig fields."""
    config = base.replace(**changes)
    head, _ = baseline_split(config.model, config.dataset, method, split)
    return dataclasses.replace(config, method=method, system="wireless",
                               bandwidth_policy=bandwidth_policy,
                               options={} if head is None else {"head_layers": head})


def config_for(base: RunConfig, spec: dict, **changes) -> RunConfig:
    """The config of one entry of :data:`METHODS` (or of the ResNet's and the text's):
    a baseline (``baseline`` names the library's method) or a sparse-prune-pfl setting."""
    spec = dict(spec)
    if "baseline" in spec:
        return baseline_config(base, spec.pop("baseline"), **spec, **changes)
    return method_config(base, **spec, **changes)


def image_grid(base: RunConfig, cases: Sequence[str], seeds: Sequence[int],
               ablation_seeds: int = 2) -> dict:
    """The runs of Figs. 2-3, Table IV and Fig. 10, keyed ``(case, method, seed)``.

    OPT and Table IV's baselines (:data:`BASELINES`) run on every seed, the others on the
    first; FedAvg-S and FedAvg-P, the fixed (k, r) of Fig. 10 and OPT with equal shares
    (its (k, r) rule at l = 1/N) only at Dirichlet 0.1, the last two on the first
    ``ablation_seeds`` seeds; FedPer+BW there on the first two."""
    configs = {}
    for case in cases:
        for m, opts in METHODS.items():
            if m in ("FedAvg-S", "FedAvg-P") and case != "alpha=0.1":
                continue
            spread = seeds if m in SPREAD_METHODS or m in BASELINES else seeds[:1]
            if m == "FedPer+BW" and case == "alpha=0.1":
                spread = seeds[:2]
            for s in spread:
                configs[(case, m, s)] = config_for(base, opts, seed=s, **CASES[case])
    if "alpha=0.1" in cases:
        for s in seeds[:ablation_seeds]:
            for name, (k, r) in ABLATION.items():
                key = ("alpha=0.1", "FedPer" if name == "(1,1)" else name, s)
                configs.setdefault(key, method_config(base, k=k, r=r, seed=s,
                                                      **CASES["alpha=0.1"]))
            configs[("alpha=0.1", "OPT, equal shares", s)] = method_config(
                base, allocation="uniform", seed=s, **CASES["alpha=0.1"])
    return configs


def scale_probe_grid(base: RunConfig, case: str, seed: int, factor: int = 3) -> dict:
    """OPT and FedPer in ``case`` at ``factor`` times ``base``'s rounds on one seed, keyed
    ``(case, method, seed)``: does a gap that the short runs show close with more rounds?"""
    long = base.replace(rounds=factor * base.rounds)
    return {(case, m, seed): config_for(long, METHODS[m], seed=seed, **CASES[case])
            for m in PROBE_METHODS}


class Runs:
    """Finished runs keyed ``(case, method, seed)``; ``runs(case, method)`` lists a
    method's runs over its seeds (or over ``seeds``)."""

    def __init__(self, results: dict):
        self.results = dict(results)

    def seeds(self, case, method) -> list:
        """The seeds ``method`` ran on in ``case``."""
        return sorted(s for (c, m, s) in self.results if c == case and m == method)

    def shared_seeds(self, cases, methods) -> list:
        """The seeds every one of ``methods`` ran on in every one of ``cases``."""
        sets = [set(self.seeds(c, m)) for c in cases for m in methods]
        return sorted(set.intersection(*sets)) if sets else []

    def __call__(self, case, method, seeds=None) -> list[dict]:
        seeds = self.seeds(case, method) if seeds is None else seeds
        return [self.results[(case, method, s)] for s in seeds
                if (case, method, s) in self.results]

    def one(self, case, method, seed) -> dict:
        return self.results[(case, method, seed)]


# -- history queries --------------------------------------------------------------------
def cost_to(result: dict, target: float, key: str = "time_s") -> float:
    """Cumulative ``key`` (latency ``time_s``, ``energy_j``, ``uplink_bits``, ``flops``)
    at the first evaluation where the personalised accuracy reaches ``target``
    (``inf``: never)."""
    return first_reach(result, target, x=key)


def sooner(a: float, b: float, factor: float = 1.0) -> bool:
    """``a`` reaches a target, and no later than ``factor`` times ``b`` (``inf``: never;
    two runs that never reach it are not "sooner")."""
    return math.isfinite(a) and a <= factor * b


def final_pct(result: dict, key: str = "acc_personal") -> float:
    """The last evaluated ``key`` in percent."""
    rows = [row for row in result["history"] if row.get(key) is not None]
    return 100 * float(rows[-1][key]) if rows else math.nan


def _mean_final(runs: list[dict], key: str = "acc_personal") -> float:
    return float(np.mean([final_pct(r, key) for r in runs]))


def fedper_targets(runs: Runs, cases: Sequence[str]) -> dict:
    """Table IV's targets X1, X2: 80% and 90% of FedPer's final accuracy (mean over its
    seeds), as fractions, per case."""
    return {c: {f: f * _mean_final(runs(c, "FedPer")) / 100 for f in (0.8, 0.9)}
            for c in cases}


def _upto(result: dict, rounds: int) -> dict:
    """``result``'s history up to round ``rounds`` (a shorter run of the same seed)."""
    return {"history": [row for row in result["history"] if row["round"] <= rounds]}


def scale_probe(runs: Runs, case: str, seed: int, horizons: Sequence[int]) -> dict:
    """Per horizon (a round count): OPT − FedPer accuracy (points) at that round, and OPT's
    latency to 90% of FedPer's accuracy at that round over FedPer's (``inf``: OPT never
    reaches it); the long runs of :func:`scale_probe_grid` cut at each horizon."""
    out = {}
    for h in horizons:
        opt, fedper = (_upto(runs.one(case, m, seed), h) for m in PROBE_METHODS)
        target = 0.9 * final_pct(fedper) / 100
        out[h] = {"gap": final_pct(opt) - final_pct(fedper),
                  "ratio": _ratio(cost_to(opt, target), cost_to(fedper, target))}
    return out


def widest_gap_case(runs: Runs, cases) -> str:
    """The case where OPT ends furthest below FedPer (mean over their shared seeds): the
    one the scale probe lengthens."""
    seeds = runs.shared_seeds(cases, PROBE_METHODS)
    return min(cases, key=lambda c: float(np.mean(_gaps(runs, [c], *PROBE_METHODS, seeds))))


def probe_text(probe: dict, case: str, what: str = "gap") -> str:
    """The probe in words: OPT − FedPer (``gap``, points; it closes, stays or widens by
    more than half a point) or OPT / FedPer latency (``ratio``; it falls, stays or rises
    by more than 0.05) at each horizon."""
    hs = sorted(probe)
    v = [probe[h][what] for h in hs]
    head = f"probe at {hs[-1] // hs[0]}× the rounds ({case}, 1 seed), at " \
           f"{' / '.join(map(str, hs))} rounds: "
    if what == "gap":
        trend = "closes" if abs(v[-1]) < abs(v[0]) - 0.5 else \
            "widens" if abs(v[-1]) > abs(v[0]) + 0.5 else "stays"
        return head + f"OPT − FedPer {' / '.join(fmt(x, 1) for x in v)} points: the gap {trend}"
    trend = "falls" if v[-1] < v[0] - 0.05 else "rises" if v[-1] > v[0] + 0.05 else "stays"
    return head + (f"OPT / FedPer latency to 90% of FedPer's accuracy "
                   f"{' / '.join(fmt(x, 2) for x in v)}: the ratio {trend}")


# -- tables ---------------------------------------------------------------------------
def cost_rows(runs: Runs, cases, methods, targets: dict, frac: float) -> list[list]:
    """Rows of a cost table: per case and method, each cost to the target (mean ± sd over
    the method's seeds, "never" if no seed reaches it); the fastest latency in bold."""
    rows = []
    for c in cases:
        target = targets[c][frac]
        cells, lat = {}, {}
        for m in methods:
            rs = runs(c, m)
            values = {name: [cost_to(r, target, key) for r in rs]
                      for name, (key, _, _) in COSTS.items()}
            cells[m] = [fmt_mean_sd(values[name], d, scale=sc, seeds=False)
                        for name, (_, d, sc) in COSTS.items()]
            lat[m] = mean_sd(values["latency (s)"])[0]
        fastest = min(methods, key=lambda m: lat[m])
        if math.isfinite(lat[fastest]):
            cells[fastest][0] = f"**{cells[fastest][0]}**"
        for i, m in enumerate(methods):
            label = f"{c} ({fmt(target, 1, '%', 100)})" if i == 0 else ""
            rows.append([label, f"{m} ({len(runs(c, m))})", *cells[m]])
    return rows


def show_cost_tables(runs: Runs, cases, methods, targets: dict) -> None:
    """Tables IV/V: latency, energy, uplink and GFLOPs to 80% and 90% of FedPer's final
    accuracy, a row per case and method (seeds in brackets)."""
    header = ["case (target)", "method (seeds)", *COSTS]
    for frac in (0.8, 0.9):
        show_table(cost_rows(runs, cases, methods, targets, frac), header,
                   caption=f"**To {fmt(frac, 0, '%', 100)} of FedPer's final accuracy**",
                   align=["l", "l", "r", "r", "r", "r"])


def chosen(runs: list[dict]) -> tuple[float, float]:
    """OPT's mean (k, r) over clients, rounds and seeds."""
    rows = [c for r in runs for row in r["history"] for c in row["clients"]]
    return float(np.mean([c["k"] for c in rows])), float(np.mean([c["r"] for c in rows]))


# -- plots ----------------------------------------------------------------------------
#: the fixed-rate variants and OPT's equal-share ablation: settings of the one method, not
#: methods, so each takes one of the palette's spare colours (the index) and a marker;
#: (0.3,1), Fig. 9's, shares (0.1,1)'s colour, which is only in Fig. 10
_VARIANTS = {"(0.5,1)": (0, "x"), "(0.1,1)": (1, "P"), "(1,0.8)": (2, "*"),
             "(1,0.5)": (3, "h"), "(0.5,0.8)": (4, "X"), "OPT, equal shares": (5, "<"),
             "(0.3,1)": (1, "d"), "FedPer+BW": (6, "v")}
#: a spare colour too near OPT's brown to sit beside it
_NEAR_OPT = "#843c39"


def style(name: str) -> dict:
    """The colour and marker of a run's name in this chapter's figures: a method's from
    the palette (FedAvg-S, FedAvg with top-k sparsified uploads, is top-k's), a fixed-rate
    variant's and FedPer+BW's (FedPer with latency-minimising shares) from the palette's
    spare colours."""
    if name in _VARIANTS:
        used = {color for color, _ in plots.METHOD_STYLES.values()} | {_NEAR_OPT}
        spare = [c for c in plots.SPARE_COLOURS if c not in used]
        index, marker = _VARIANTS[name]
        return {"color": spare[index], "marker": marker}
    return plots.method_style(name)


def _panels(n: int, height: float = 3.2):
    """A figure of ``n`` panels at most three a row (four: two by two), 10 inches wide."""

    cols = 2 if n == 4 else min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(10, height * rows + 0.6),
                             constrained_layout=True, squeeze=False)
    for ax in axes.flat[n:]:
        ax.remove()
    return fig, list(axes.flat[:n])


def _curves(ax, runs: list, name: str, y: str) -> None:
    plots.plot_curves(runs, x="time_s", y=y, ax=ax, label=lambda r: name, **style(name))
    ax.get_legend().remove()


def plot_cases(runs: Runs, cases, methods, y: str, title: str) -> None:
    """One panel per non-IID case (three a row at most): ``y`` against cumulative latency,
    a band over seeds; one legend under the panels."""

    fig, axes = _panels(len(cases))
    for ax, case in zip(axes, cases):
        for m in methods:
            if runs(case, m):
                _curves(ax, runs(case, m), m, y)
        ax.set_title(case)
    plots.legend_below(fig, axes)
    fig.suptitle(title)
    plt.show()


def plot_round_picture() -> None:
    """The opening picture: what two clients upload (top-k of the base gradient) and keep
    (the largest private weights) in one round."""

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2), constrained_layout=True)
    rng = np.random.default_rng(0)
    for ax, (name, k, r) in zip(axes, [("client 1: good channel, slow CPU", 0.9, 0.6),
                                        ("client 2: deep fade, fast CPU", 0.2, 1.0)]):
        g, w = np.abs(rng.normal(size=40)), np.abs(rng.normal(size=12))
        sent, kept = g >= np.quantile(g, 1 - k), w >= np.quantile(w, 1 - r)
        opt = style("OPT")["color"]
        ax.bar(np.arange(40), g, color=np.where(sent, opt, "lightgray"))
        ax.bar(np.arange(42, 54), w, color=np.where(kept, opt, "lightgray"), hatch="//",
               edgecolor="white")
        ax.set_title(f"{name}\nupload k={k} of base gradient | keep r={r} of private "
                     "weights", fontsize=9)
        ax.set_xticks([20, 48], ["base B: gradient (uploaded)", "private P: weights (local)"])
        ax.set_yticks([])
    plt.suptitle("grey: not sent (base) / pruned (private)")
    plt.show()


def plot_tradeoff(system: dca.RoundSystem, slopes=(0.2, 0.6)) -> None:
    """Time to a target for a fixed (k, r), ``T tau ∝ tau(k, r) / (1 - floor(k, r))``, with
    the corrected floor affine in k and in sqrt(1 - r), for two floor slopes."""

    share = np.full(system.n, 1 / system.n)
    xs = np.linspace(dca.K_MIN, 1, 200)
    round_k = np.array([dca.latency(k, 1.0, share, system).max() for k in xs])
    round_r = np.array([dca.latency(1.0, min(r, dca.R_MAX), share, system).max() for r in xs])
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2), constrained_layout=True)
    looks = [dict(color=c, ls=ls) for c, ls in zip(("0.15", "0.55"), ("-", "--"))]
    for slope, look in zip(slopes, looks):    # floor slope f / epsilon; not methods: greys
        panels = ((axes[0], slope, slope * (1 - xs), round_k, "k (r = 1)"),
                  (axes[1], slope / 3, slope / 3 * np.sqrt(1 - xs), round_r, "r (k = 1)"))
        for ax, shown, floor, tau, name in panels:
            wall = tau / (1 - floor)       # T * tau up to the constant 2 Delta / eta
            ax.plot(xs, wall / wall.min(), **look, label=f"floor slope {shown:.2f}")
            ax.set_xlabel(name)
            ax.set_ylabel("time to target / its minimum")
            ax.legend()
    plt.suptitle("time to a target accuracy for a fixed (k, r): the minimum sits at an end")
    plt.show()


# -- the optimiser ------------------------------------------------------------------
def dca_rounds(scenario: dca.WirelessScenario, theta_ratio: float, n_rounds: int) -> list:
    """Solve ``n_rounds`` drawn rounds with DCA (Alg. 2) and with the best equal-share
    allocation at the same deadline; per round, the numbers the DCA claims check."""
    rows = []
    for t in range(n_rounds):
        system = scenario.draw()
        alloc = dca.solve_dca(system, theta_ratio)
        system = dataclasses.replace(system, deadline_s=alloc.deadline_s)
        uniform = dca.uniform_allocation(system, theta_ratio)
        lat = dca.latency(alloc.k, alloc.r, alloc.share, system)
        energy_ok = True
        if system.energy_budget_j is not None:
            spent = dca.energy(alloc.k, alloc.r, alloc.share, system)
            energy_ok = bool(np.all(spent <= np.asarray(system.energy_budget_j) * (1 + 1e-6)))
        steps = np.diff(alloc.history) if len(alloc.history) > 1 else np.zeros(1)
        rows.append({"round": t, "alloc": alloc, "iterations": alloc.iterations,
                     "objective": float(alloc.objective), "uniform": float(uniform.objective),
                     "relaxed": bool(alloc.relaxed),
                     "max_latency_ratio": float(lat.max() / system.deadline_s),
                     "share_sum": float(alloc.share.sum()), "energy_ok": energy_ok,
                     "largest_rise": float(max(steps.max(), 0.0))})
    return rows


def show_dca_rounds(rows: list) -> None:
    """The objective (31a) per DCA iteration of each drawn round, and a table per round:
    iterations, DCA's and the best equal-share objective, deadline and band use."""


    fig, ax = plt.subplots(figsize=(6.4, 3.2), constrained_layout=True)
    colours = plt.get_cmap("viridis")(np.linspace(0, 0.9, len(rows)))
    for r, colour in zip(rows, colours):
        ax.plot(r["alloc"].history, marker="o", color=colour, label=f"round {r['round']}")
    ax.set_xlabel("DCA iteration")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("objective (31a)")
    ax.set_yscale("symlog")
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
    plt.show()
    show_table([[r["round"], r["iterations"], fmt(r["objective"], 4), fmt(r["uniform"], 4),
                 r["relaxed"], fmt(r["max_latency_ratio"], 6), fmt(r["share_sum"], 3)]
                for r in rows],
               ["round", "iterations", "DCA objective", "equal shares", "relaxed",
                "max τ/τmax", "Σ l"])


def split_fractions(model, splits: Sequence[str]) -> dict:
    """The percentage of ``model``'s weights each split shares (Table III's bases)."""

    total = sum(p.numel() for p in model.parameters())
    out = {}
    for split in splits:
        shared = set(split_layers(model, split))
        out[split] = 100 * sum(p.numel() for n, p in model.named_parameters()
                               if n.rsplit(".", 1)[0] in shared) / total
    return out


def show_table3(runs: Runs, alphas, fractions: dict) -> dict:
    """Table III: final accuracy per split and alpha (one seed); returns, per alpha, the
    shared percentage of the best split."""
    best, rows = {}, []
    for a in alphas:
        (seed,) = runs.seeds(a, next(iter(fractions)))[:1]
        accs = {s: final_pct(runs.one(a, s, seed)) for s in fractions}
        top = max(accs, key=accs.get)
        best[a] = fractions[top]
        rows.append([a, *(fmt(v, 1, "%") for v in accs.values()), top])
    show_table(rows, ["α", *(f"{s} ({fmt(f, 2)}% shared)" for s, f in fractions.items()),
                      "best"])
    return best


def table6(scenario_args: dict, bands: dict, deadline_s: float, theta_ratio: float,
           draws: int) -> dict:
    """Table VI: the optimiser's mean ``(k-bar, r-bar, relaxed share)`` over ``draws``
    random rounds per band (a band or a ``(low, high)`` range drawn per round), the
    deadline fixed at ``deadline_s``; ``scenario_args`` are the
    :class:`~hetfl_core.dca.WirelessScenario` arguments but the band."""
    out = {}
    for name, band in bands.items():
        scenario = dca.WirelessScenario(**scenario_args, bandwidth_hz=band,
                                        deadline_s=deadline_s)
        allocs = [dca.solve_dca(scenario.draw(), theta_ratio) for _ in range(draws)]
        out[name] = (float(np.mean([a.k for a in allocs])), float(np.mean([a.r for a in allocs])),
                     float(np.mean([a.relaxed for a in allocs])))
    return out


def show_table6(table: dict) -> None:
    """Table VI next to the paper's."""
    show_table([[name, fmt(kb, 3), fmt(rb, 3), fmt(rel, 0, "%", 100),
                 fmt(PAPER_TABLE6[name][0], 2), fmt(PAPER_TABLE6[name][1], 2)]
                for name, (kb, rb, rel) in table.items()],
               ["band (paper scale)", "k-bar", "r-bar", "relaxed rounds", "paper k-bar",
                "paper r-bar"], align=["l", "r", "r", "r", "r", "r"])


#: Fig. 9's fixed (k, r) with equal shares ((1, 1): the library's FedPer)
FIXED9 = {"FedPer": (1.0, 1.0), "(0.3,1)": (0.3, 1.0), "(1,0.5)": (1.0, 0.5)}


def fig9_grid(base: RunConfig, band_hz: float, case: str, deadline_s: float, bands) -> dict:
    """Fig. 9's runs keyed ``(band, method, seed)``: OPT and :data:`FIXED9` at the base band
    ``band_hz`` ("10 MHz"), five times it ("50 MHz") and a band drawn per round between
    the two ("10~50 MHz"), the deadline fixed at its base-band value."""
    mhz = band_hz / 1e6
    cell = {"10 MHz": {}, "50 MHz": {"bandwidth_mhz": 5 * mhz},
            "10~50 MHz": {"bandwidth_mhz": mhz, "bandwidth_high_mhz": 5 * mhz}}
    fixed = {"10 MHz": {}, "50 MHz": {"deadline_s": deadline_s}, "10~50 MHz": {"deadline_s": deadline_s}}
    configs = {}
    for band in bands:
        configs[(band, "OPT", base.seed)] = method_config(
            base, allocation="dca", options=fixed[band], **cell[band], **CASES[case])
        for name, (k, r) in FIXED9.items():
            configs[(band, name, base.seed)] = config_for(
                base, METHODS["FedPer"], **cell[band], **CASES[case]) if name == "FedPer" \
                else method_config(base, k=k, r=r, options=fixed[band], **cell[band],
                                   **CASES[case])
    return configs


def fig9_latency(runs: Runs, bands) -> tuple[float, dict]:
    """Fig. 9's target (90% of FedPer's final accuracy at the base band) and each run's
    latency to it, keyed ``(band, method)``; shows them as a table."""
    (seed,) = runs.seeds(bands[0], "FedPer")[:1]
    target = 0.9 * final_pct(runs.one(bands[0], "FedPer", seed)) / 100
    names = ["OPT", *FIXED9]
    lat = {(b, m): cost_to(runs.one(b, m, seed), target) for b in bands for m in names}
    show_table([[b, *(fmt(lat[(b, m)], 1) for m in names)] for b in bands],
               ["band", *(f"{m} (s)" for m in names)],
               caption=f"Latency to {fmt(target, 1, '%', 100)} (90% of FedPer's final "
                       "accuracy at the base band), one seed")
    return target, lat


#: Fig. 10's panels
FIG10_GROUPS = {"(a) components": ["FedAvg-P", "FedAvg-S", "FedPer"],
                "(b) sparsification k": ["FedPer", "(0.5,1)", "(0.1,1)"],
                "(c) pruning r": ["FedPer", "(1,0.8)", "(1,0.5)"],
                "(d) fixed vs OPT": ["(0.5,0.8)", "OPT, equal shares", "FedPer+BW", "OPT"]}


def show_fig10(runs: Runs, target: float, case: str = "alpha=0.1") -> None:
    """Fig. 10's four panels (accuracy against latency, on the seeds every fixed variant
    ran on) and a table: final accuracy, round time and latency to ``target``."""

    seeds = runs.shared_seeds([case], FIXED_PAIRS)
    fig, axes = _panels(len(FIG10_GROUPS), height=2.9)
    for ax, (title, names) in zip(axes, FIG10_GROUPS.items()):
        for m in names:
            if runs(case, m, seeds):
                _curves(ax, runs(case, m, seeds), m, "acc_personal")
        ax.set_title(title)
    plots.legend_below(fig, axes)
    plt.show()
    rows = []
    for m in ["OPT", "OPT, equal shares", "FedPer+BW", *FIXED_PAIRS, "FedAvg-S", "FedAvg-P"]:
        rs = runs(case, m, seeds)
        per_round = [np.mean([row["round_time_s"] for row in r["history"]]) for r in rs]
        rows.append([f"{m} ({len(rs)})", fmt_mean_sd([final_pct(r) for r in rs], seeds=False),
                     fmt_mean_sd(per_round, 3, seeds=False),
                     fmt_mean_sd([cost_to(r, target) for r in rs], seeds=False)])
    show_table(rows, ["variant (seeds)", "final accuracy (%)", "round time (s)",
                      f"latency to {fmt(target, 1, '%', 100)} (s)"],
               align=["l", "r", "r", "r"])


def text_grid(base: RunConfig, alphas, seeds) -> dict:
    """The runs of Figs. 6-8 keyed ``(alpha, method, seed)``; OPT and FedPer on every
    seed, the other two on the first."""
    return {(a, m, s): config_for(base, opts, alpha=a, seed=s)
            for a in alphas for m, opts in TEXT_METHODS.items()
            for s in (seeds if m in SPREAD_METHODS else seeds[:1])}


def majority_accuracy(dataset, alpha: float, clients: int, seed: int,
                      train_samples) -> float:
    """Accuracy (%) of clients that each answer their majority training label, on the
    federated split of ``dataset`` (the label prior a private classifier can learn)."""

    fed = hd.make_federated(dataset, "dirichlet", clients, seed, alpha=alpha,
                            train_samples=train_samples)
    hits = sum(int((c.y_test == int(c.y_train.float().mean() >= 0.5)).sum())
               for c in fed.clients)
    return 100 * hits / sum(len(c.y_test) for c in fed.clients)


def show_text_runs(runs: Runs, alphas, majority: dict) -> None:
    """Figs. 6-8 (loss, accuracy, F1 against latency per alpha, the majority-label line
    on accuracy) and a table of final accuracy, F1 and latency per method."""

    fig, axes = plt.subplots(3, len(alphas), figsize=(min(10, 5 * len(alphas)), 9),
                             constrained_layout=True, squeeze=False)
    panels = (("loss", 6), ("acc_personal", 7), ("f1_personal", 8))
    for col, a in enumerate(alphas):
        for row, (y, number) in enumerate(panels):
            ax = axes[row][col]
            for m in TEXT_METHODS:
                _curves(ax, runs(a, m), m, y)
            if y == "acc_personal":
                ax.axhline(majority[a], color="gray", lw=1, ls=":", label="majority label")
            ax.set_title(f"Fig. {number}: alpha = {a}")
    plots.legend_below(fig, axes.flat)
    plt.show()
    rows = []
    for m in TEXT_METHODS:
        for a in alphas:
            rs = runs(a, m)
            rows.append([m, a, len(rs), fmt_mean_sd([final_pct(r) for r in rs], seeds=False),
                         fmt_mean_sd([final_pct(r, "f1_personal") for r in rs], seeds=False),
                         fmt_mean_sd([r["history"][-1]["time_s"] for r in rs], seeds=False)])
    rows += [["majority label", a, "", fmt(majority[a], 1), "", ""] for a in alphas]
    show_table(rows, ["method", "α", "seeds", "final accuracy (%)", "F1 (%)", "latency (s)"],
               align=["l", "r", "r", "r", "r", "r"])


# -- claims -----------------------------------------------------------------------------
def cases_won(runs: Runs, cases, method: str, rivals, target: Callable[[str], float],
              factor: float = 1.0, key: str = "time_s", seeds=None) -> tuple[list, np.ndarray]:
    """Per seed, in how many ``cases`` ``method`` reaches ``target(case)`` no later than
    ``factor`` times the soonest of ``rivals`` (on the seeds all of them ran on)."""
    seeds = runs.shared_seeds(cases, [method, *rivals]) if seeds is None else seeds
    counts = []
    for s in seeds:
        won = 0
        for c in cases:
            mine = cost_to(runs.one(c, method, s), target(c), key)
            best = min(cost_to(runs.one(c, m, s), target(c), key) for m in rivals)
            won += sooner(mine, best, factor)
        counts.append(won)
    return seeds, np.array(counts, dtype=float)


def _gaps(runs: Runs, cases, a: str, b, seeds, key: str = "acc_personal", worst=min):
    """Per seed, the worst (``min``) or largest (``max``) over ``cases`` of the final
    ``key`` of ``a`` minus that of the best of ``b`` (a name or a list), in points."""
    rivals = [b] if isinstance(b, str) else list(b)
    return np.array([worst(final_pct(runs.one(c, a, s), key)
                           - max(final_pct(runs.one(c, m, s), key) for m in rivals)
                           for c in cases) for s in seeds])


def _round_time(runs: Runs, case, method: str, seeds) -> float:
    """``method``'s mean round time (s) over rounds and ``seeds``."""
    return float(np.mean([row["round_time_s"] for r in runs(case, method, seeds)
                          for row in r["history"]]))


def _ratio(a: float, b: float) -> float:
    """``a / b`` for latencies: ``inf`` if ``a`` never arrives, 0 if only ``b`` never does."""
    if not math.isfinite(a):
        return math.inf
    return 0.0 if not math.isfinite(b) else a / b


def _per_case(values: dict, digits: int = 2, unit: str = "") -> str:
    return ", ".join(f"{c}: {fmt(v, digits, unit)}" for c, v in values.items())


def _count(values, total: int, what: str) -> str:
    """``"2 of 4 cases (1 seed)"``, ``"2.7 ± 0.5 of 4 cases (3 seeds)"``, ``"1 of 1 case
    (1 seed)"``."""
    v = np.asarray(values, dtype=float)
    n = f"{v.size} seed{'s' if v.size != 1 else ''}"
    text = fmt(v[0], 0) if v.size == 1 or v.std() == 0 else fmt_mean_sd(v, seeds=False)
    what = what[:-1] if total == 1 and what.endswith("s") else what
    return f"{text} of {total} {what} ({n})"


def _latencies(runs: Runs, cases, a: str, b: str, target: dict, seeds,
               key: str = "time_s", unit: str = " s", scale: float = 1.0,
               name: str = "") -> str:
    """Per case, the mean cost (latency by default) of ``a`` and ``b`` to the target,
    compared."""
    def mean(m, c):
        return mean_sd([cost_to(runs.one(c, m, s), target[c], key) for s in seeds])[0]
    return ", ".join(f"{name}{c}: {compare(mean(a, c), mean(b, c), 2, unit, scale)}"
                     for c in cases)


def _all_latencies(runs: Runs, cases, methods, target: dict, seeds, name: str = "") -> str:
    """Per case, every method's mean latency to the target."""
    def mean(m, c):
        return mean_sd([cost_to(runs.one(c, m, s), target[c]) for s in seeds])[0]
    return "; ".join(f"{name}{c}: " + ", ".join(f"{m} {fmt(mean(m, c), 2, ' s')}" for m in methods)
                     for c in cases)


def _seeds_note(seeds) -> str:
    return f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''}"


def image_claims(ledger: Ledger, runs: Runs, cases, targets: dict,
                 probe: tuple[str, dict] | None = None) -> None:
    """Table IV and Figs. 2-3 (LeNet-5): latency to X2 against the baselines and against
    FedPer with latency-minimising shares, bits, final accuracy against FedPer and FedAvg,
    FedAvg-P against FedAvg. ``probe``: ``(case, scale_probe(...))``, whose longer runs
    test the rows against FedPer."""
    tested = {w: "; " + probe_text(probe[1], probe[0], w) if probe else ""
              for w in ("gap", "ratio")}
    x2 = {c: targets[c][0.9] for c in cases}
    need = min(3, len(cases))
    # the paper's Table IV reports 38-57% less latency than the best baseline: the row
    # tests at least 30% less (0.7x), the bound the paper's range clears in every case
    seeds, won = cases_won(runs, cases, "OPT", BASELINES, x2.get, 0.7)
    best = {c: min(BASELINES, key=lambda m: cost_to(runs.one(c, m, seeds[0]), x2[c]))
            for c in cases}
    pair = {c: (cost_to(runs.one(c, "OPT", seeds[0]), x2[c]),
                cost_to(runs.one(c, best[c], seeds[0]), x2[c])) for c in cases}
    ledger.claim("Table IV", f"OPT reaches X2 with ≥ 30% less latency than the best of "
                 f"FedAvg, FedPer and LG-FedAvg in ≥ {need} of {len(cases)} cases",
                 paper="38–57% less latency", values=won,
                 criterion=at_least(need, what="cases won"),
                 measured=_count(won, len(cases), "cases"),
                 why=f"latency to X2, OPT vs the best baseline at seed {seeds[0]}: "
                     + ", ".join(f"{c}: {compare(o, b, 2, ' s')} ({best[c]})"
                                 for c, (o, b) in pair.items()),
                 section="lightweight_pfl-table4", headline=True)
    for m, factor in (("FedPer", 0.8), ("FedAvg", 1.0)):
        s_m, won_m = cases_won(runs, cases, "OPT", [m], x2.get, factor)
        ledger.claim("Table IV", f"OPT reaches X2 with ≤ {factor:.1f}× {m}'s latency in "
                     f"≥ {need} of {len(cases)} cases", paper="faster than " + m,
                     values=won_m, criterion=at_least(need, what="cases won"),
                     measured=_count(won_m, len(cases), "cases"),
                     why=f"latency to X2, OPT vs {m} (mean over {_seeds_note(s_m)}): "
                         + _latencies(runs, cases, "OPT", m, x2, s_m)
                         + (tested["ratio"] if m == "FedPer" else ""),
                     section="lightweight_pfl-table4")
    if all(runs(c, "FedPer+BW") for c in cases):
        s_w, won_w = cases_won(runs, cases, "OPT", ["FedPer+BW"], x2.get)
        ledger.claim("Sec. V-E", "OPT (k, r and shares chosen jointly) reaches X2 no later than "
                     f"FedPer with latency-minimising shares in ≥ {need} of {len(cases)} cases",
                     paper="joint optimisation beats any module alone", values=won_w,
                     criterion=at_least(need, what="cases won"),
                     measured=_count(won_w, len(cases), "cases"),
                     why="latency to X2, OPT vs FedPer+BW: "
                         + _latencies(runs, cases, "OPT", "FedPer+BW", x2, s_w)
                         + "; FedPer+BW vs FedPer: "
                         + _latencies(runs, cases, "FedPer+BW", "FedPer", x2, s_w),
                     section="lightweight_pfl-table4")
    s_b, won_b = cases_won(runs, cases, "OPT", ["FedPer"], x2.get, key="uplink_bits")
    ledger.claim("Table IV", f"OPT uploads fewer bits than FedPer to reach X2 in ≥ {need} "
                 f"of {len(cases)} cases", paper="fewer bits", values=won_b,
                 criterion=at_least(need, what="cases won"),
                 measured=_count(won_b, len(cases), "cases"),
                 why="uplink to X2, OPT vs FedPer: " + _latencies(
                     runs, cases, "OPT", "FedPer", x2, s_b, "uplink_bits", " Mbit", 1e-6),
                 section="lightweight_pfl-table4")
    s_p = runs.shared_seeds(cases, ["OPT", "FedPer"])
    gap = _gaps(runs, cases, "OPT", "FedPer", s_p)
    means = {c: float(np.mean(_gaps(runs, [c], "OPT", "FedPer", s_p))) for c in cases}
    ledger.claim("Figs. 2–3", "OPT's final accuracy is within 2 points of FedPer's (same "
                 "rounds, every case)", paper="negligible loss", values=gap, unit=" points",
                 criterion=at_least(-2, " points", "worst case OPT − FedPer"),
                 why=f"OPT − FedPer per case: {_per_case(means, 1)} points" + tested["gap"]
                     + "; a likely cause (conjecture): clients at k_min barely update the "
                       "base",
                 section="lightweight_pfl-fig2-3",
                 headline=True)
    hard = [c for c in ("class-2", "alpha=0.1") if c in cases]
    s_a = runs.shared_seeds(hard, ["OPT", "FedAvg"])
    if hard:
        ledger.claim("Figs. 2–3",
                     f"FedAvg ends ≥ 5 points below OPT under {' and '.join(hard)}",
                     paper="a large gap", values=_gaps(runs, hard, "OPT", "FedAvg", s_a),
                     unit=" points", criterion=at_least(5, " points", "worst case OPT − FedAvg"),
                     why="OPT − FedAvg per case: " + _per_case(
                         {c: float(np.mean(_gaps(runs, [c], "OPT", "FedAvg", s_a)))
                          for c in hard}, 1, " points"),
                     section="lightweight_pfl-fig2-3")
    if "alpha=0.1" in cases:
        s_f = runs.shared_seeds(["alpha=0.1"], ["FedAvg-P", "FedAvg"])
        fp = _gaps(runs, ["alpha=0.1"], "FedAvg-P", "FedAvg", s_f)
        ledger.claim("Fig. 10(a)", "FedAvg-P is no more accurate than FedAvg (α = 0.1, "
                     "1 point slack)", paper="FedAvg-P worse", values=fp, unit=" points",
                     criterion=at_most(1, " points", "FedAvg-P − FedAvg"),
                     why=f"FedAvg-P − FedAvg = {fmt(fp.mean(), 1)} points",
                     section="lightweight_pfl-fig10")


def resnet_claims(ledger: Ledger, runs: Runs, cases, targets: dict, head_share: float) -> None:
    """Figs. 4-5 and Table V (the ResNet with its last block private)."""
    x2 = {c: targets[c][0.9] for c in cases}
    s_p, won = cases_won(runs, cases, "OPT", ["FedPer"], x2.get, 0.8)
    ledger.claim("Table V", "ResNet: OPT reaches X2 with ≤ 0.8× FedPer's latency in every "
                 "case", paper="faster than FedPer", values=won,
                 criterion=at_least(len(cases), what="cases won"),
                 measured=_count(won, len(cases), "cases"),
                 why="latency to X2, OPT vs FedPer: "
                     + _latencies(runs, cases, "OPT", "FedPer", x2, s_p),
                 section="lightweight_pfl-resnet", headline=True)
    rivals = [m for m in RES_METHODS if m != "OPT"]
    s_f, first = cases_won(runs, cases, "OPT", rivals, x2.get)
    ledger.claim("Table V", "ResNet: OPT is the first method to reach X2 in every case",
                 paper="OPT fastest", values=first,
                 criterion=at_least(len(cases), what="cases first"),
                 measured=_count(first, len(cases), "cases"),
                 why="latency to X2: " + _all_latencies(runs, cases, RES_METHODS, x2, s_f)
                     + f"; LG-FedAvg shares only the classifier, {fmt(head_share, 1)}% of "
                       "the ResNet's weights, so its uploads are tiny",
                 section="lightweight_pfl-resnet")
    gap = _gaps(runs, cases, "OPT", "FedPer", s_p)
    ledger.claim("Figs. 4–5", "ResNet: OPT's final accuracy is at least FedPer's (same "
                 "rounds)", paper="highest accuracy", values=gap, unit=" points",
                 criterion=at_least(0, " points", "worst case OPT − FedPer"),
                 why=f"worst case OPT − FedPer: {fmt(gap.mean(), 1)} points",
                 section="lightweight_pfl-resnet")
    s_a = runs.shared_seeds(cases, ["OPT", "FedAvg"])
    fa = _gaps(runs, cases, "OPT", "FedAvg", s_a)
    ledger.claim("Figs. 4–5", "ResNet: FedAvg ends ≥ 5 points below OPT",
                 paper="FedAvg does not improve", values=fa, unit=" points",
                 criterion=at_least(5, " points", "worst case OPT − FedAvg"),
                 why=f"worst case OPT − FedAvg: {fmt(fa.mean(), 1)} points",
                 section="lightweight_pfl-resnet")


def ablation_claims(ledger: Ledger, runs: Runs, target: float) -> None:
    """Fig. 10 (Dirichlet 0.1): OPT against the fixed (k, r), optimised shares against
    equal shares, accuracy as k or r falls."""
    case = "alpha=0.1"
    seeds = runs.shared_seeds([case], ["OPT", "OPT, equal shares", *FIXED_PAIRS])
    lat = {m: np.array([cost_to(runs.one(case, m, s), target) for s in seeds])
           for m in ["OPT", "OPT, equal shares", *FIXED_PAIRS]}
    # the comparator is fixed in advance (the pair fastest on average), not the fastest pair
    # of each seed, whose minimum over noisy latencies would bias the row against OPT
    fastest = best_on_average(lat, FIXED_PAIRS, lower=True)
    fixed = lat[fastest]
    ledger.claim("Fig. 10(d)", "OPT reaches X2 (α = 0.1) no later than every fixed (k, r)",
                 paper="no fixed pair beats OPT",
                 values=[sooner(o, f) for o, f in zip(lat["OPT"], fixed)],
                 criterion=is_true(f"OPT reaches X2 no later than the fixed pair fastest on "
                                   f"average ({fastest})"),
                 measured=f"OPT {fmt_mean_sd(lat['OPT'], 1, ' s', seeds=False)}, fastest fixed "
                          f"{fastest} {fmt_mean_sd(lat[fastest], 1, ' s', seeds=False)} "
                          f"({_seeds_note(seeds)})",
                 why=f"latency to X2 per seed, OPT vs {fastest}: "
                     + "; ".join(compare(o, f, 1, " s") for o, f in zip(lat["OPT"], fixed)),
                 section="lightweight_pfl-fig10")
    fin = {m: np.array([final_pct(runs.one(case, m, s)) for s in seeds])
           for m in ["OPT", *FIXED_PAIRS]}
    # the comparator is fixed in advance (the pair best on average), not the best pair of
    # each seed, whose maximum over noisy values would bias the row against OPT
    top = max(FIXED_PAIRS, key=lambda m: float(np.mean(fin[m])))
    gap = fin["OPT"] - fin[top]
    ledger.claim("Fig. 10", "OPT's final accuracy is at least the best fixed (k, r)'s "
                 "(α = 0.1)", paper="OPT best overall", values=gap, unit=" points",
                 criterion=at_least(0, " points", f"OPT − best fixed on average ({top})"),
                 why=f"OPT − {top}: {fmt(gap.mean(), 1)} points",
                 section="lightweight_pfl-fig10")
    ratio = [_ratio(o, e) for o, e in zip(lat["OPT"], lat["OPT, equal shares"])]
    ledger.claim("Figs. 9–10", "Optimised bandwidth shares reach X2 (α = 0.1) ≥ 5% sooner "
                 "than equal shares with the same (k, r) rule",
                 paper="the joint allocation is faster", values=ratio, digits=2,
                 criterion=at_most(0.95, what="latency OPT / equal shares"),
                 why=f"latency ratio {fmt(float(np.mean(ratio)), 2)}; mean round "
                     + ", ".join(f"{m} {fmt(_round_time(runs, case, m, seeds), 3, ' s')}, "
                                 f"k-bar {fmt(chosen(runs(case, m, seeds))[0], 2)}"
                                 for m in ("OPT", "OPT, equal shares"))
                     + ": the shares buy a larger k, not a shorter round",
                 section="lightweight_pfl-fig10")
    orders = (["FedPer", "(0.5,1)", "(0.1,1)"], ["FedPer", "(1,0.8)", "(1,0.5)"])
    rise = np.max([fin[b] - fin[a] for order in orders for a, b in zip(order, order[1:])],
                  axis=0)
    shown = "; ".join(", ".join(compare(fin[a].mean(), fin[b].mean()) for a, b in
                                zip(order, order[1:])) for order in orders)
    ledger.claim("Fig. 10(b, c)", "Final accuracy does not rise as k or r falls (1 point "
                 "slack)", paper="smaller k, r end lower", values=rise, unit=" points",
                 criterion=at_most(1, " points", "largest rise"),
                 why=f"final accuracy (%) along k: 1, 0.5, 0.1 and r: 1, 0.8, 0.5: {shown}",
                 section="lightweight_pfl-fig10")


def bandwidth_claims(ledger: Ledger, table: dict, fig9_latency: dict, bands9,
                     split_best: dict | None = None) -> None:
    """Table VI (the optimiser alone), Fig. 9 (OPT against fixed pairs per band) and
    Table III (where to split), each measured on one seed."""
    kb = [table[b][0] for b in ("10 MHz", "30 MHz", "50 MHz")]
    ledger.claim("Table VI", "More bandwidth gives a larger k-bar (0.01 slack per step)",
                 paper=" / ".join(f"{PAPER_TABLE6[b][0]:.2f}" for b in
                                  ("10 MHz", "30 MHz", "50 MHz")),
                 values=[min(b - a for a, b in zip(kb, kb[1:]))], digits=3,
                 criterion=at_least(-0.01, what="smallest step in k-bar"),
                 measured=" / ".join(fmt(v, 2) for v in kb) + " (1 seed)",
                 why=f"k-bar {' / '.join(fmt(v, 2) for v in kb)}",
                 section="lightweight_pfl-table6")
    rb = [table[b][1] for b in ("10 MHz", "50 MHz")]
    ledger.claim("Table VI", "r-bar does not fall with bandwidth (0.02 slack)",
                 paper=f"{PAPER_TABLE6['10 MHz'][1]:.2f} → {PAPER_TABLE6['50 MHz'][1]:.2f}",
                 values=[rb[1] - rb[0]], digits=3,
                 criterion=at_least(-0.02, what="r-bar change"),
                 measured=f"{fmt(rb[0], 2)} → {fmt(rb[1], 2)} (1 seed)",
                 why=f"r-bar {fmt(rb[0], 2)} → {fmt(rb[1], 2)}",
                 section="lightweight_pfl-table6")
    names = sorted({m for _, m in fig9_latency}, key=lambda m: m != "OPT")
    first = {b: min(names, key=lambda m: fig9_latency[(b, m)]) for b in bands9}
    won = sum(sooner(fig9_latency[(b, "OPT")], min(fig9_latency[(b, m)] for m in names
                                                   if m != "OPT")) for b in bands9)
    ledger.claim("Fig. 9", "OPT is the fastest to X2 at every bandwidth",
                 paper="OPT best and robust", values=[won],
                 criterion=at_least(len(bands9), what="bands won"),
                 measured=_count([won], len(bands9), "bands"),
                 why="first per band: " + ", ".join(f"{b} {m}" for b, m in first.items())
                     + "; with the deadline fixed, a wide band leaves OPT slack it spends "
                       f"on k = r = 1 (Table VI's k-bar at 50 MHz: {fmt(kb[2], 2)})",
                 section="lightweight_pfl-fig9")
    if split_best and len(split_best) > 1:
        (a0, f0), (a1, f1) = list(split_best.items())[0], list(split_best.items())[-1]
        ledger.claim("Table III", "Stronger non-IID favours a smaller shared base",
                     paper="α = 0.1: 0.25%, α = 2: 98.62% shared", values=[f0 - f1],
                     unit=" points", digits=2,
                     criterion=at_most(0, " points", "best base at α small − at α large"),
                     measured=f"α = {a0}: {fmt(f0, 2)}%, α = {a1}: {fmt(f1, 2)}% (1 seed)",
                     why=f"best shared fraction α = {a0}: {fmt(f0, 2)}%, "
                         f"α = {a1}: {fmt(f1, 2)}%", section="lightweight_pfl-table3")


def text_claims(ledger: Ledger, runs: Runs, alphas, majority: dict) -> None:
    """Figs. 6-8: the LoRA transformer on the sentence-pair task."""
    seeds = runs.shared_seeds(alphas, TEXT_METHODS)
    goal = {a: float(np.mean([final_pct(r) for r in runs(a, "FedAvg", seeds)])) / 100
            for a in alphas}
    _, faster = cases_won(runs, alphas, "OPT", ["FedAvg"], goal.get, seeds=seeds)
    ledger.claim("Figs. 6–8", "OPT reaches FedAvg's final accuracy with no more latency "
                 "than FedAvg, at every α", paper="faster", values=faster,
                 criterion=at_least(len(alphas), what="α won"),
                 measured=_count(faster, len(alphas), "α"),
                 why="latency to FedAvg's final accuracy, OPT vs FedAvg: "
                     + _latencies(runs, alphas, "OPT", "FedAvg", goal, seeds, name="α="),
                 section="lightweight_pfl-text")
    rivals = [m for m in TEXT_METHODS if m != "OPT"]
    acc = _gaps(runs, alphas, "OPT", rivals, seeds)
    f1 = _gaps(runs, alphas, "OPT", rivals, seeds, key="f1_personal")
    ledger.claim("Figs. 7–8", "OPT's final accuracy and F1 are within 3 points of the "
                 "best baseline's", paper="highest accuracy and F1",
                 values=np.minimum(acc, f1), unit=" points",
                 criterion=at_least(-3, " points", "worst of OPT − best baseline"),
                 why=f"OPT − best baseline: accuracy {fmt(acc.mean(), 1)}, F1 "
                     f"{fmt(f1.mean(), 1)} points", section="lightweight_pfl-text")
    lg = _gaps(runs, alphas, "LG-FedAvg", "FedAvg", seeds, worst=max)
    ledger.claim("Fig. 7", "LG-FedAvg ends below FedAvg", paper="below FedAvg", values=lg,
                 unit=" points", criterion=at_most(0, " points", "LG-FedAvg − FedAvg"),
                 why=f"LG-FedAvg − FedAvg: {fmt(lg.mean(), 1)} points; conjecture: here "
                     "LG-FedAvg keeps both layers' LoRA private, and private adapters "
                     "learn each client's label skew", section="lightweight_pfl-text")
    _, first = cases_won(runs, alphas, "OPT", rivals, goal.get, seeds=seeds)
    ledger.claim("Figs. 6–8", "OPT is the first method to reach FedAvg's final accuracy",
                 paper="OPT fastest", values=first,
                 criterion=at_least(len(alphas), what="α first"),
                 measured=_count(first, len(alphas), "α"),
                 why="latency to FedAvg's final accuracy: "
                     + _all_latencies(runs, alphas, TEXT_METHODS, goal, seeds, "α="),
                 section="lightweight_pfl-text")
    best = {a: float(np.mean([final_pct(r) for r in runs(a, "OPT", seeds)])) for a in alphas}
    margin = {a: best[a] - majority[a] for a in alphas}
    ledger.claim("Fig. 7", "OPT's personalised accuracy clears the majority-label rule by "
                 "2 points at every α", paper="implied by Fig. 7",
                 values=[min(final_pct(runs.one(a, "OPT", s)) - majority[a] for a in alphas)
                         for s in seeds], unit=" points",
                 criterion=above_chance(0, 2, " points", "worst OPT − majority label"),
                 why="OPT − majority label: " + _per_case(
                     {f"α={a}": v for a, v in margin.items()}, 1, " points"),
                 section="lightweight_pfl-text", kind="prediction")


def dca_claims(ledger: Ledger, rows: list) -> None:
    """Alg. 2 on the drawn rounds of the DCA section: feasibility and monotone descent,
    and a better objective than the best equal-share allocation."""
    ok = [r["max_latency_ratio"] <= 1 + 1e-6 and r["share_sum"] <= 1 + 1e-6
          and r["energy_ok"] and r["largest_rise"] <= SOLVER_TOL for r in rows]
    ledger.claim("Alg. 2", "DCA's allocation meets the deadline (max τ/τmax ≤ 1) and the "
                 "band (Σ l ≤ 1), and its objective never increases (to the solver's tolerance)",
                 paper="feasible, monotone descent", values=ok,
                 criterion=is_true("feasible and non-increasing in this round"),
                 measured=f"{sum(ok)} of {len(ok)} drawn rounds; max τ/τmax "
                          f"{fmt(max(r['max_latency_ratio'] for r in rows), 6)}, largest "
                          f"Σ l {fmt(max(r['share_sum'] for r in rows), 4)}",
                 why=f"largest objective rise {max(r['largest_rise'] for r in rows):.2g}",
                 section="lightweight_pfl-dca", kind="invariant")
    diff = [r["objective"] - r["uniform"] for r in rows]
    ledger.claim("Alg. 2", "DCA's objective (31a) is no worse than the best equal-share "
                 "allocation's (to the solver's tolerance)",
                 paper="better than uniform bandwidth", values=diff,
                 digits=4, criterion=at_most(SOLVER_TOL, what="DCA − equal shares"),
                 measured=f"{fmt_mean_sd(diff, 4, seeds=False)} over {len(diff)} drawn rounds",
                 why=f"largest DCA − equal shares: {max(diff):.2g}",
                 section="lightweight_pfl-dca")
