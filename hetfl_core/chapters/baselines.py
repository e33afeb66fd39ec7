"""The baselines chapter's machinery: the method families, the pictures of what a client
trains (width windows, pruning densities), the grid of runs on one scenario, the results
table, and the checks of two orderings the baselines' own papers state.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.ticker import MaxNLocator

from .. import masks, plots, submodel
from ..config import RunConfig
from ..methods import METHODS
from ..report import at_least, final, fmt, fmt_mean_sd, judge, of_seeds, per_seed

__all__ = ["FAMILIES", "SPLITS", "CLAIM_RUNS", "family_methods", "plot_width_coverage",
           "plot_pruning_densities", "run_grid", "pick", "plot_split",
           "results_rows", "RESULTS_HEADER", "seed_differences", "ordering_lines",
           "family_gaps"]

#: the baselines by the heterogeneity they answer
FAMILIES = {
    "reference": ["fedavg", "fedprox", "local"],
    "width": ["heterofl", "fedrolex", "fjord"],
    "sparse": ["oneshot", "prunefl", "lotteryfl", "ordered-mask", "random-mask"],
    "personalised": ["fedper", "fedrep", "lg-fedavg", "fedbabu"],
    "compression": ["topk", "topk-ef"],
}

#: the two splits every method runs on, as RunConfig fields
SPLITS = {"dirichlet(0.5)": dict(partition="dirichlet", alpha=0.5),
          "shards(2)": dict(partition="shards", classes_per_client=2)}

#: the runs repeated over several seeds: the methods of the two orderings checked
CLAIM_RUNS = {"dirichlet(0.5)": ["heterofl", "fedrolex"],
              "shards(2)": ["fedavg", "fedper", "fedrep"]}


def family_methods(families: dict = FAMILIES) -> list[str]:
    """The registered methods of ``families``, in family order."""
    return [m for ms in families.values() for m in ms if m in METHODS]


def plot_width_coverage(model, widths=(1.0, 0.5, 0.25), rounds=(1, 8)):
    """For conv2 of ``model``: how many of the clients (one per width) train each entry,
    under HeteroFL's first units and FedRolex's window in the given rounds."""
    rules = [("HeteroFL, round t", submodel.first_units)] + [
        (f"FedRolex, round {t}", lambda n, w, t=t: submodel.rolling_units(n, w, t - 1))
        for t in rounds]
    fig, axes = plt.subplots(1, len(rules), figsize=(10, 3.3), constrained_layout=True)
    for ax, (title, rule) in zip(axes, rules):
        coverage = torch.zeros_like(model.conv2.weight[:, :, 0, 0])
        for width in widths:
            idx = submodel.layer_indices(model, width, rule)
            sub = submodel.extract(model, model.state_dict(), idx)
            _, held = submodel.embed(model, sub, idx)
            coverage += held["conv2.weight"][:, :, 0, 0]
        image = ax.imshow(coverage, cmap=plt.get_cmap("Blues", len(widths) + 1),
                          vmin=-0.5, vmax=len(widths) + 0.5, aspect="auto")
        ax.set(title=title, xlabel="input channel", ylabel="output channel")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(False)
    fig.colorbar(image, ax=axes, ticks=range(len(widths) + 1), label="clients", shrink=0.9)
    names = ", ".join(f"{w:g}" for w in widths)
    fig.suptitle(f"conv2: how many of {len(widths)} clients (widths {names}) "
                 "train each entry")
    plt.show()


def plot_pruning_densities(model, density: float = 0.2):
    """The density each layer keeps when magnitude pruning keeps ``density`` of the
    weights over the whole model (global) or in every layer."""
    weights = {n: p.detach() for n, p in model.named_parameters() if p.dim() > 1}
    fig, axes = plt.subplots(1, 2, figsize=(9, 2.8), constrained_layout=True)
    for ax, scope in zip(axes, ["global", "layer"]):
        kept = masks.layer_densities(masks.magnitude_mask(weights, density, scope))
        ax.bar(list(kept), list(kept.values()), color=plots.method_style("oneshot")["color"])
        ax.set(ylim=(0, 1), title=f"{scope} pruning to {density:.0%}",
               ylabel="density kept")
    plt.show()


def run_grid(base: RunConfig, methods, seed: int, claim_seeds) -> dict[tuple, RunConfig]:
    """The chapter's runs, keyed ``(split, method, seed)``: every method on every split of
    :data:`SPLITS` with ``seed``, and the methods of :data:`CLAIM_RUNS` on every seed of
    ``claim_seeds``."""
    grid = {(split, m, seed): base.replace(method=m, seed=seed, **fields)
            for split, fields in SPLITS.items() for m in methods}
    for split, ms in CLAIM_RUNS.items():
        for m in ms:
            for s in claim_seeds:
                grid[(split, m, s)] = base.replace(method=m, seed=s, **SPLITS[split])
    return grid


def pick(results: dict, split: str, methods, seeds) -> list[dict]:
    """The runs of ``methods`` on ``split``, each over ``seeds``."""
    return [results[(split, m, s)] for m in methods for s in seeds]


def plot_split(results: dict, split: str, methods, seed: int):
    """Personalised accuracy against simulated time, uplink traffic and training FLOPs;
    one legend (each method's colour and marker) under the three panels."""
    fig, axes = plt.subplots(1, 3, figsize=(10, 4.6), sharey=True, constrained_layout=True)
    for ax, x in zip(axes, ["time_s", "uplink_bits", "flops"]):
        plots.plot_curves(pick(results, split, methods, [seed]), x=x, y="acc_personal", ax=ax)
        ax.get_legend().remove()
    for ax in axes[1:]:
        ax.set_ylabel("")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=6, fontsize=9)
    fig.suptitle(f"{split}: personalised accuracy vs simulated time, uplink traffic "
                 "and training FLOPs")
    plt.show()


RESULTS_HEADER = ["method", *(f"{s} {kind} (%)" for s in SPLITS for kind in ("pers.", "glob.")),
                  "sim. s", "MB up", "GFLOPs"]


def results_rows(results: dict, methods, seed: int) -> list[list[str]]:
    """One row per method: final personalised and global accuracy on each split, then the
    Dirichlet run's simulated time, uplink megabytes and training GFLOPs."""
    rows = []
    for m in methods:
        row = [m]
        for split in SPLITS:
            r = results[(split, m, seed)]
            row += [fmt(final(r, y), 1, scale=100) for y in ("acc_personal", "acc_global")]
        last = results[("dirichlet(0.5)", m, seed)]["history"][-1]
        row += [fmt(last["time_s"]), fmt(last["uplink_bits"] / 8e6),
                fmt(last["flops"] / 1e9)]
        rows.append(row)
    return rows


def seed_differences(results: dict, split: str, a: str, b: str, y: str, seeds) -> np.ndarray:
    """Per seed, ``a``'s final ``y`` minus ``b``'s, in points."""
    return 100 * (per_seed(pick(results, split, [a], seeds), final, y=y)
                  - per_seed(pick(results, split, [b], seeds), final, y=y))


def ordering_lines(results: dict, seeds) -> list[str]:
    """The two orderings of the baselines' papers, each judged on the per-seed gaps by the
    ledger's rule (:func:`hetfl_core.report.judge`): FedRolex at least as accurate as
    HeteroFL (global, Dirichlet); FedPer and FedRep above FedAvg (personalised, two classes
    per client)."""
    checks = [("dirichlet(0.5)", "fedrolex", "heterofl", "acc_global"),
              ("shards(2)", "fedper", "fedavg", "acc_personal"),
              ("shards(2)", "fedrep", "fedavg", "acc_personal")]
    lines = []
    for split, a, b, y in checks:
        gap = seed_differences(results, split, a, b, y, seeds)
        passes = gap >= 0
        lines.append(f"{split}, {y}: {a} - {b} = {fmt_mean_sd(gap, unit=' points')}; "
                     f"{a} >= {b} on {of_seeds(passes.sum(), len(gap))} "
                     f"({judge(gap, at_least(0)).verdict})")
    return lines


def family_gaps(results: dict, methods, seed: int) -> list[str]:
    """What the figures show, computed: per split, the personalised accuracy of each
    personalised method and local training minus FedAvg's (the smallest and largest),
    the width methods' simulated time against FedAvg's, and top-k's uplink traffic."""
    personal = [m for m in FAMILIES["personalised"] + ["local"] if m in methods]
    lines = []
    for split in SPLITS:
        gaps = {m: seed_differences(results, split, m, "fedavg", "acc_personal", [seed])[0]
                for m in personal}
        lo, hi = min(gaps, key=gaps.get), max(gaps, key=gaps.get)
        lines.append(f"{split}: personalised accuracy minus FedAvg's, personalised methods "
                     f"and local: from {fmt(gaps[lo], unit=' points')} ({lo}) "
                     f"to {fmt(gaps[hi], unit=' points')} ({hi})")
    last = {m: results[("dirichlet(0.5)", m, seed)]["history"][-1] for m in methods}
    for m in [m for m in FAMILIES["width"] + FAMILIES["compression"] if m in methods]:
        lines.append(f"{m}: {fmt(last[m]['time_s'] / last['fedavg']['time_s'], 2)}x "
                     f"FedAvg's simulated time, "
                     f"{fmt(last[m]['uplink_bits'] / last['fedavg']['uplink_bits'], 2)}x "
                     "its uplink traffic (Dirichlet split)")
    return lines
