"""The OFA-FL chapter's machinery (``book/ofa_fl.ipynb``): the experiment grid of its
figures and tables, the per-seed readings of the runs, the chapter's tables and figures,
and its claim ledger.

The runs are the paper's Figs. 2-5 and Tables 1-2 (Varma et al., 2023) at a scaled fixed
schedule: the first pruning after ``warmup`` rounds, then one every ``every`` rounds, then
``tail`` rounds after the last pruning. Every reading is per seed, so the ledger judges a
claim on each seed (:mod:`hetfl_core.report`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.ticker import MaxNLocator

from .. import lottery, plots
from ..config import RunConfig
from ..experiments import sweep
from ..masks import prunable
from ..methods import ofafl
from ..models import build_model
from ..report import (MISSING, NUMBERS_CLASS, Criterion, Ledger, above_chance, at_least,
                      at_most, fmt, fmt_mean_sd, is_true, more_than, numbers, of_seeds, probe_note,
                      show_table)
from ..system import profile_model, training_flops

__all__ = ["PAPER_R", "STRESS_R", "TABLE2_R", "METHODS", "LABEL", "READINGS", "CHANCE_MARGIN",
           "STRETCH", "PAPER_SETTING", "PAPER_TABLES", "Study", "nesting_holds", "idea_figure",
           "layer_density_bars", "storage_rows", "flops_rows", "ratio_panels", "fig2_rows",
           "table_rows", "table_header", "paper_cells", "with_paper", "reading_tables",
           "show_reading_tables", "curve_panels", "prune_rounds", "drops", "peak_round",
           "replay_densities", "lead_above_chance", "stretch_note", "stretch_label",
           "build_ledger"]

PAPER_R = [1.0, 0.8, 0.6, 0.4, 0.2]      # the paper's ratios (Figs. 2-3, Table 1)
STRESS_R = [1.0, 0.5, 0.25, 0.1, 0.05]   # stress ratios: small models separate the methods
TABLE2_R = [1.0, 0.9, 0.8, 0.7, 0.6]     # Table 2's mild ratios
METHODS = ["ofafl", "ltp", "ofa-oneshot"]
LABEL = {"ofafl": "OFA-FL", "ltp": "LTP", "ofa-oneshot": "one-shot"}
#: the paper's two readings and the book's steadier one (see ``lottery.ratio_summary``)
READINGS = {"max": "max-avg round", "final": "final", "last": "mean, last 5"}
#: points above chance a (smallest) sub-network must score to count as having learned: 30%
#: on ten balanced classes is what a network scores that recognises three classes and no more
CHANCE_MARGIN = 20.0
#: a row whose reason is the run length is probed at this many times the rounds (W, P, tail)
STRETCH = 3
#: a probe's change (points) within which a gap "stays"
STAYS_WITHIN = 1.0
#: the setting of the paper's Tables 1-2; the book's Table 1-2 runs use a stand-in
PAPER_SETTING = "CIFAR-10, ResNet50"
#: the paper's Tables 1-2 (Varma et al., 2023), keyed like the book's grids: per method and
#: reading (``max``: the epoch of the highest mean accuracy over the ratios; ``final``), the
#: accuracy (%) at each ratio and the variance across the five ratios, as printed. "Table 1"
#: prunes every 50 epochs (the book's P) or 100 (2P) after 200; "Table 2" has no one-shot
#: row. The paper reports no mean of the last five rounds.
PAPER_TABLES = {
    "table1-P": {    # Table 1, pruning frequency 50
        "ofafl": {"max": ([34.67, 34.68, 34.67, 34.66, 34.65], .0001),
                  "final": ([34.67, 34.68, 34.67, 34.66, 34.65], .0001)},
        "ltp": {"max": ([58.95, 58.9, 58.79, 53.93, 45.34], 27.89),
                "final": ([43.49, 43.48, 43.45, 43.18, 41.8], .4227)},
        "ofa-oneshot": {"max": ([80.78, 80.78, 80.72, 79.32, 66.95], 29.26),
                        "final": ([39.53, 39.53, 39.53, 38.19, 32.96], 6.489)}},
    "table1-2P": {   # Table 1, pruning frequency 100
        "ofafl": {"max": ([49.83, 49.81, 49.8, 44.09, 37.52], 23.79),
                  "final": ([43.70, 43.70, 43.70, 43.70, 43.61], .0012)},
        "ltp": {"max": ([53.72, 53.72, 53.63, 46.04, 38.87], 35.44),
                "final": ([40.27, 40.25, 40.26, 40.11, 38.14], .6973)},
        "ofa-oneshot": {"max": ([80.78, 80.78, 80.72, 79.32, 66.95], 29.26),
                        "final": ([36.4, 36.4, 36.39, 34.66, 29.78], 6.568)}},
    "table2": {      # Table 2, ratios 1.0 to 0.6
        "ofafl": {"max": ([76.99, 76.99, 76.99, 76.98, 76.96], .0001),
                  "final": ([76.99, 76.99, 76.99, 76.98, 76.96], .0001)},
        "ltp": {"max": ([79.72, 79.7, 79.7, 79.65, 79.58], .0026),
                "final": ([79.17, 79.17, 79.18, 79.19, 79.13], .0004)}},
}


@dataclass
class Study:
    """The chapter's runs: one config per (figure, method, scope, seed), and their results.

    ``base`` holds what every run shares; ``data`` and ``cifar_data`` the RunConfig fields
    of the MNIST figures and of the CIFAR-10 stand-in tables; the schedule is
    ``warmup``/``every``/``tail`` rounds (Table 1 also runs at frequency ``2 * every``).
    The ``probe-*`` grids rerun the runs behind the rows that blame the run length at
    ``STRETCH`` times every part of the schedule, on the first ``probe_seeds`` seeds.
    """

    base: RunConfig
    data: dict
    cifar_data: dict
    cifar_model: str
    seeds: list
    warmup: int
    every: int
    tail: int
    probe_seeds: int = 1
    grids: dict = field(init=False)
    results: dict = field(default_factory=dict)

    def __post_init__(self):
        mnist, cifar = self.data, {"model": self.cifar_model, **self.cifar_data}
        p = self.every
        self.grids = {
            "fig2": self.grid(self.setting(STRESS_R, **mnist), scopes=("global", "layer")),
            "fig3": self.grid(self.setting(STRESS_R, model="cnn", **mnist)),
            "table1-P": self.grid(self.setting(PAPER_R, **cifar)),
            "table1-2P": self.grid(self.setting(PAPER_R, every=2 * p, **cifar)),
            "table2": self.grid(self.setting(TABLE2_R, **cifar), methods=["ofafl", "ltp"]),
            # the layerwise twins of Table 1's frequency-P runs
            "scope": self.grid(self.setting(PAPER_R, **cifar), methods=["ltp", "ofa-oneshot"],
                               scopes=("layer",)),
            # the same at STRETCH times the rounds, for the rows that blame the run length
            "probe-fig2": self.grid(self.setting(STRESS_R, stretch=STRETCH, **mnist),
                                    seeds=self.seeds[:self.probe_seeds]),
            **{f"probe-table1-{name}": self.grid(
                self.setting(PAPER_R, every=k * p, stretch=STRETCH, **cifar), methods=["ofafl"],
                seeds=self.seeds[:self.probe_seeds]) for name, k in (("P", 1), ("2P", 2))},
        }

    def setting(self, ratios, every=None, test_samples=None, stretch=1, **fields) -> RunConfig:
        """One run's config: prune first after ``warmup`` rounds, then every ``every``;
        ``warmup + (s-1) * every + tail`` rounds in all, each part times ``stretch``."""
        warmup, every = stretch * self.warmup, stretch * (every or self.every)
        opts = {"ratios": ratios, "warmup": warmup, "every": every,
                "test_samples": test_samples}
        rounds = warmup + (len(ratios) - 1) * every + stretch * self.tail
        return self.base.replace(rounds=rounds, options=opts, **fields)

    def grid(self, cfg, methods=METHODS, scopes=("global",), seeds=None) -> list:
        """``cfg`` for every method, pruning scope and seed (all of the study's seeds by
        default)."""
        return [cfg.replace(method=m, seed=s, options={"scope": sc})
                for m in methods for sc in scopes for s in (seeds or self.seeds)]

    @property
    def configs(self) -> list:
        return [c for g in self.grids.values() for c in g]

    def run(self, processes: int = 2) -> None:
        """Run (or read from the cache) every config of the study."""
        configs = self.configs
        results = sweep(configs, processes=processes, desc="OFA-FL runs")
        self.results = {c.key(): r for c, r in zip(configs, results)}

    def runs(self, grid: str, method: str, scope: str = "global") -> list:
        """The results of one method and scope in ``grid``, one per seed (seed order)."""
        return [self.results[c.key()] for c in self.grids[grid]
                if c.method == method and c.options["scope"] == scope]

    def readings(self, grid, method, scope="global", reading="max") -> list:
        """Each seed's ``lottery.ratio_summary`` reading: per-ratio ``acc``, ``mean``,
        ``var`` (population variance across ratios), in percent."""
        return [lottery.ratio_summary(r)[reading] for r in self.runs(grid, method, scope)]

    def seed_values(self, grid, method, key, scope="global", reading="max") -> np.ndarray:
        """One number per seed: ``key`` is ``"mean"``, ``"var"`` or ``"amin"`` (accuracy of
        the smallest ratio)."""
        out = [x["acc"][-1] if key == "amin" else x[key]
               for x in self.readings(grid, method, scope, reading)]
        return np.array(out, dtype=float)

    def summary(self, grid, method, scope="global", reading="max") -> dict:
        """Per-ratio accuracy (mean and sd over seeds), and the mean and variance across
        ratios averaged over the seeds."""
        s = self.readings(grid, method, scope, reading)
        acc = np.array([x["acc"] for x in s])
        return {"acc": acc.mean(0), "acc_sd": acc.std(0),
                "mean": float(np.mean([x["mean"] for x in s])),
                "var": float(np.mean([x["var"] for x in s]))}


def nesting_holds(model: str, shape, ratios, seed: int) -> bool:
    """Prune a fresh ``model`` (initialised with ``seed``) through ``ratios``: are the
    masks nested, and do the per-weight levels give back every mask?"""
    torch.manual_seed(seed)
    net = build_model(model, shape, 10)
    weights = {k: p.detach() for k, p in net.named_parameters() if k in prunable(net)}
    chain = [{k: torch.ones_like(w) for k, w in weights.items()}]
    for n in range(1, len(ratios)):
        keep = lottery.keep_fraction(ratios, n)
        chain.append(lottery.prune_within(weights, chain[-1], keep))
    back = lottery.masks_from_levels(lottery.mask_levels(chain), len(chain))
    same = all(torch.equal(a[k], b[k]) for a, b in zip(chain, back) for k in a)
    return lottery.is_nested(chain) and same


def idea_figure(ratios, seed: int = 0) -> None:
    """The chapter's opening picture: the level of each weight of a random layer, and the
    number of losses each client computes per batch."""
    torch.manual_seed(seed)
    layer = {"w": torch.randn(16, 24)}
    masks = [{"w": torch.ones(16, 24)}]
    for n in range(1, len(ratios)):
        masks.append(lottery.prune_within(layer, masks[-1], lottery.keep_fraction(ratios, n)))
    levels = lottery.mask_levels(masks)["w"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.2), constrained_layout=True)
    im = a.imshow(levels, cmap="viridis", vmin=0, vmax=len(ratios) - 1)
    a.set_title("level of each weight of one layer")
    a.grid(False)
    cb = fig.colorbar(im, ax=a, ticks=range(len(ratios)))
    cb.ax.set_yticklabels([f"held by r >= {r}" if j else "r = 1.0 only"
                           for j, r in enumerate(ratios)])
    caps = ofafl.default_capacities(ratios, 10)
    b.bar(range(10), [sum(r <= c for r in ratios) for c in caps],
          color=plots.method_style("ofafl")["color"])
    b.yaxis.set_major_locator(MaxNLocator(integer=True))
    b.set_xticks(range(10), [f"{c}" for c in caps])
    b.set_xlabel("client capacity c")
    b.set_ylabel("losses per batch")
    b.set_title("once-for-all loss: own + every smaller sub-network")
    plt.show()


def layer_density_bars(weights: dict, chains: dict, ratio: float) -> None:
    """Per-layer density of the smallest mask of each chain (``{"global": chain, ...}``)."""
    names = list(weights)
    x = np.arange(len(names))
    width = 0.8 / len(chains)
    fig, ax = plt.subplots(figsize=(8, 3.6), constrained_layout=True)
    looks = [dict(color="0.35"), dict(color="0.75", hatch="//", edgecolor="0.35")]
    for i, ((label, chain), look) in enumerate(zip(chains.items(), looks)):
        dens = [float(chain[-1][k].mean()) for k in names]
        bars = ax.bar(x + (i - (len(chains) - 1) / 2) * width, dens, width, label=label,
                      **look)
        ax.bar_label(bars, fmt="%.3f", fontsize=9)
    ax.set_xticks(x, [f"{k}\n{tuple(weights[k].shape)}" for k in names])
    ax.axhline(ratio, color="k", lw=0.8, ls="--")
    ax.set_ylabel(f"density at r = {ratio}")
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
    ax.set_title("per-layer density of the smallest sub-network (MLP at initialisation)")
    plt.show()


def storage_rows(n_weights: int, ratio_lists: dict) -> list:
    """Storage of each layout in units of one dense copy (32 bits per weight)."""
    one = 32 * n_weights
    rows = []
    for name, ratios in ratio_lists.items():
        rows.append([name, *(fmt(lottery.storage_bits(n_weights, ratios, lay) / one, d)
                             for lay, d in (("separate", 2), ("ofa", 3), ("bitmaps", 3))),
                     fmt((ratios[-1] * 32 * n_weights + n_weights) / one, 2)])
    return rows


def flops_rows(net, shape, chain: list, ratios) -> list:
    """Training FLOPs per sample of a client of each capacity, in dense passes, as the
    library charges them: ``masked-dense`` (the default, as the paper computes) and the
    ``sparse`` bound; ``chain`` holds the nested masks of ``ratios``."""
    costs = profile_model(net, shape)
    dense = training_flops(costs, 1)
    rows = []
    for j, r in enumerate(ratios):
        masks = chain[j:]                       # own mask and every smaller one
        rows.append([str(r), str(len(masks)),
                     *(fmt(lottery.training_cost(costs, masks, 1, model) / dense, 2)
                       for model in ofafl.FLOPS_MODELS)])
    return rows


def ratio_panels(study: Study, grid: str, ratios, variants, title: str) -> None:
    """Fig. 2/3 panels: accuracy per ratio (mean and sd over seeds), (a) at the max-average
    round and (b) after the last round; ``variants`` are (method, scope) pairs."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True, constrained_layout=True)
    panels = (("max", "(a) at the max-average round"), ("final", "(b) after the last round"))
    for ax, (reading, name) in zip(axes, panels):
        for method, scope in variants:
            s = study.summary(grid, method, scope, reading)
            ax.errorbar(range(len(ratios)), s["acc"], yerr=s["acc_sd"], capsize=3,
                        ls="-" if scope == "global" else "--", **plots.method_style(method),
                        label=f"{LABEL[method]}, {'global' if scope == 'global' else 'layerwise'}")
        ax.set_xticks(range(len(ratios)), [str(r) for r in ratios])
        ax.set_xlabel("ratio r")
        ax.set_title(name)
    axes[0].set_ylabel("test accuracy (%)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center")
    fig.suptitle(title)
    plt.show()


def fig2_rows(study: Study, variants) -> list:
    """Mean and variance across ratios (max-avg round and final) and the smallest ratio's
    final accuracy, each mean ± sd over the seeds."""
    rows = []
    for m, sc in variants:
        cells = [fmt_mean_sd(study.seed_values("fig2", m, key, sc, reading), seeds=False)
                 for reading in ("max", "final") for key in ("mean", "var")]
        amin = study.seed_values("fig2", m, "amin", sc, "final")
        rows.append([LABEL[m], sc, *cells, fmt_mean_sd(amin, seeds=False)])
    return rows


def table_header(ratios) -> list:
    """Header of a Table 1/2 reproduction: per-ratio accuracy and the variance, for the
    max-average round and the final round, then the last-five-rounds mean and variance."""
    head = ["P", "method"]
    for reading in ("max", "final"):
        head += [f"{READINGS[reading]}: r={r}" for r in ratios] + [f"{READINGS[reading]}: var"]
    return head + ["mean, last 5", "var, last 5"]


def paper_cells(grid: str, method: str, n: int) -> list:
    """The paper's values (:data:`PAPER_TABLES`) aligned with a :func:`table_rows` row's
    cells for ``n`` ratios, as printed; ``None`` where the paper reports none."""
    entry = PAPER_TABLES.get(grid, {}).get(method, {})
    cells = []
    for reading in ("max", "final"):
        accs, var = entry.get(reading, ([None] * n, None))
        cells += [*accs, var]
    return cells + [None, None]


def with_paper(book: str, paper) -> str:
    """A cell: this book's value, then the paper's (``"62.1 / 34.67"``; "—" where the paper
    has none), short enough that seven columns fit the page."""
    return f"{book} / {MISSING if paper is None else f'{paper:g}'}"


def table_rows(study: Study, grids: dict, methods) -> list:
    """Rows of a Table 1/2 reproduction (means over seeds), each cell beside the paper's
    value of :data:`PAPER_TABLES`; ``grids`` maps P to a grid."""
    rows = []
    for p, grid in grids.items():
        for m in methods:
            s = {k: study.summary(grid, m, "global", k) for k in READINGS}
            cells = []
            for k in ("max", "final"):
                cells += [fmt(a) for a in s[k]["acc"]] + [fmt(s[k]["var"], 2)]
            cells += [fmt(s["last"]["mean"]), fmt(s["last"]["var"], 2)]
            paper = paper_cells(grid, m, len(s["max"]["acc"]))
            rows.append([p, LABEL[m], *map(with_paper, cells, paper)])
    return rows


def reading_tables(rows: list, ratios) -> list[tuple[str, list, list]]:
    """A Table 1/2 reproduction (:func:`table_rows`) as three narrow tables, ``(reading,
    header, rows)`` each: the max-average round and the final round (per-ratio accuracy and
    the variance), then the mean and variance of the last five rounds. The first column
    names the method and its pruning frequency, so five ratios fit in seven columns."""
    n = len(ratios)
    parts = [(READINGS["max"], range(2, 3 + n), [f"r={r}" for r in ratios] + ["var"]),
             (READINGS["final"] + " round", range(3 + n, 4 + 2 * n),
              [f"r={r}" for r in ratios] + ["var"]),
             ("last five rounds", range(4 + 2 * n, 6 + 2 * n), ["mean", "var"])]
    return [(name, ["method, P", *head], [[f"{row[1]}, P={row[0]}", *(row[i] for i in cols)]
                                          for row in rows])
            for name, cols, head in parts]


def show_reading_tables(rows: list, ratios, stand_in: str = "") -> None:
    """Display :func:`reading_tables`, each a table of numbers (values never wrap); the
    caption names the paper's setting and the book's ``stand_in`` (dataset, model)."""
    ours = f"; this book: {stand_in}" if stand_in else ""
    for name, header, part in reading_tables(rows, ratios):
        show_table(part, header, caption=f"**{name}** (this book / the paper: "
                   f"mean over seeds{ours}; the paper's value from {PAPER_SETTING})", css_class=NUMBERS_CLASS)


def prune_rounds(study: Study, method: str, ratios, every: int) -> list:
    """The rounds at which ``method`` prunes (one-shot prunes once, after the warm-up)."""
    if method == "ofa-oneshot":
        return [study.warmup + 1]
    return [study.warmup + 1 + k * every for k in range(len(ratios) - 1)]


def curve_panels(study: Study, grid: str, ratios, every: int) -> None:
    """Figs. 4-5: a_r(t) of every ratio (mean over seeds), each curve from the round its
    sub-network exists, with the pruning rounds dotted; the ratios coloured from the full
    model (dark) to the smallest (light), the same in every panel."""
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.6), sharey=True, constrained_layout=True)
    titles = {"ofafl": "Fig. 4: OFA-FL", "ltp": "LTP", "ofa-oneshot": "Fig. 5: one-shot"}
    colours = plt.get_cmap("viridis")(np.linspace(0, 0.9, len(ratios)))
    for ax, m in zip(axes, METHODS):
        curves = [lottery.ratio_curves(r) for r in study.runs(grid, m)]
        acc = 100 * np.mean([c for c, _ in curves], 0)   # NaN before a ratio exists
        for j, r in enumerate(ratios):
            ax.plot(curves[0][1], acc[:, j], color=colours[j], label=f"r = {r}")
        for t in prune_rounds(study, m, ratios, every):
            ax.axvline(t, color="k", lw=0.6, ls=":")
        ax.set_title(titles[m])
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].set_ylabel("test accuracy (%)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(ratios))
    plt.show()


def drops(result: dict, rounds) -> list:
    """a_1.0(t-1) - a_1.0(t) at each pruning round t, in points."""
    curves, at = lottery.ratio_curves(result)
    full = dict(zip(at, 100 * curves[:, 0]))
    return [full[t - 1] - full[t] for t in rounds if t - 1 in full]


def replay_densities(config: RunConfig, engine) -> dict:
    """Replay one run's rounds (every client, no evaluation) and return the per-layer
    density of every mask, ``{ratio: {layer: density}}``."""
    sim = engine.build_simulation(config)
    for t in range(1, config.rounds + 1):
        sim.round(t, clients=range(config.clients), evaluate=False)
    return {r: {n: float(m.mean()) for n, m in masks.items()}
            for r, masks in sim.method.masks.items()}


def lead_above_chance(ours, theirs, chance: float, margin: float, who: str, rival: str):
    """Per-seed booleans for "``who`` beats ``rival`` *and* clears chance by ``margin``"
    (a win between two collapsed sub-networks is no win), the criterion, the measured
    text, and a measured reason when it does not hold on every seed."""
    ours, theirs = np.asarray(ours, float), np.asarray(theirs, float)
    clear = above_chance(chance, margin, what=f"{who} accuracy (%)")
    passes = [bool(a > b and clear(a)) for a, b in zip(ours, theirs)]
    crit = is_true(f"{who} − {rival} > 0 and {clear.text}")
    measured = f"{who} {fmt_mean_sd(ours, seeds=False)} vs {rival} {fmt_mean_sd(theirs)}"
    low = [name for name, v in ((who, ours), (rival, theirs)) if v.mean() < chance + margin]
    why = ""
    if not all(passes):
        wins = int(sum(a > b for a, b in zip(ours, theirs)))
        why = f"{who} ahead on {of_seeds(wins, len(ours))}"
        if low:
            why += (f"; {' and '.join(low)} within {fmt(margin)} points of chance "
                    f"({fmt(chance)}%): not learned")
    elif low:
        why = (f"{rival} within {fmt(margin)} points of chance ({fmt(theirs.mean())}% vs "
               f"chance {fmt(chance)}%)")
    return passes, crit, measured, why


#: points by which a method's mean accuracy across ratios may trail the best other's on a
#: seed before its lower variance stops counting as a win (a collapsed network is flat)
VARIANCE_GUARD = 5.0


def stretch_note(base, stretched, criterion: Criterion, seeds, unit: str = " points",
                 higher_is_better: bool = True) -> str:
    """:func:`hetfl_core.report.probe_note` at this chapter's ``STRETCH`` and ``STAYS_WITHIN``."""
    return probe_note(base, stretched, criterion, seeds, STRETCH, unit, higher_is_better, STAYS_WITHIN)


def stretch_label(seeds) -> str:
    """'at 3x the rounds (seed 0)': how a probe's values are introduced."""
    who = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {list(seeds)}"
    return f"at {STRETCH}x the rounds ({who})"


def _gap(study, grid, a, others, key, reading, best=max) -> np.ndarray:
    """Per seed: ``a``'s value minus the best (``max`` or ``min``) of ``others``'."""
    rival = best(study.seed_values(grid, m, key, reading=reading) for m in others) \
        if len(others) == 1 else np.array([best(v) for v in zip(
            *(study.seed_values(grid, m, key, reading=reading) for m in others))])
    return study.seed_values(grid, a, key, reading=reading) - rival


def _gap_claim(led: Ledger, study: Study, grid: str, ref: str, statement: str, paper: str,
               a: str, others: list, key: str, reading: str, criterion: Criterion, unit: str,
               best=max, digits: int = 1, reason: str = "", **kwargs):
    """A claim on ``a``'s lead over the best of ``others`` (per seed); the measured text
    gives each method's value, and a claim that does not hold names the method that is
    best on average, with ``reason`` after it."""
    gap = _gap(study, grid, a, others, key, reading, best)
    values = {m: study.seed_values(grid, m, key, reading=reading) for m in [a, *others]}
    means = ", ".join(f"{LABEL[m]} {fmt_mean_sd(v, digits, seeds=False)}" for m, v in values.items())
    if key == "var":
        # a low variance across ratios is no win if it comes from a collapsed network: a
        # seed where ``a``'s mean accuracy trails the best other's by more than the guard
        # fails the row (its value becomes +inf, judged by the sign test)
        behind = -_gap(study, grid, a, others, "mean", reading, max)
        gap = np.where(behind > VARIANCE_GUARD, np.inf, gap)
        means += (f"; mean accuracy {fmt_mean_sd(-behind, 1, ' points', seeds=False)} against "
                  f"the best other (a seed more than {VARIANCE_GUARD:g} points behind fails)")
    passes = [criterion(v) for v in gap]
    why = ""
    if not all(passes):
        top = best(values, key=lambda m: values[m].mean())
        why = (f"holds on {of_seeds(sum(passes), len(passes))}; {LABEL[top]} is "
               f"{'highest' if best is max else 'lowest'} on average "
               f"({fmt(values[top].mean(), digits)})" + (f"; {reason}" if reason else ""))
    return led.claim(ref, statement, paper, gap, criterion, why=why, digits=digits, unit=unit,
                     measured=f"{fmt_mean_sd(gap, digits, unit)}; {means}", **kwargs)


def build_ledger(study: Study, scale: str, chance: float, chance_cifar: float,
                 margin: float, parameters: dict | None = None) -> Ledger:
    """The chapter's claim ledger: every claim of the paper, judged on each seed."""
    led = Ledger("ofa_fl", "OFA-FL", scale=scale, parameters=parameters)
    w, p, n = study.warmup, study.every, len(study.seeds)
    nested = [nesting_holds("mlp", (1, 28, 28), STRESS_R, s) for s in study.seeds]
    led.claim("Fig. 1", "one stored model serves every ratio: the masks are nested",
              "by design", nested, is_true("masks nested; levels give back every mask"),
              measured=f"nested on {sum(nested)} of {n} initialisations",
              section="ofa_fl-nested", kind="invariant")
    for reading, ref in (("max", "Fig. 2a"), ("final", "Fig. 2b")):
        _gap_claim(led, study, "fig2", ref, "lower variance across ratios than LTP "
                   f"({READINGS[reading]}, stress MLP)", "lowest variance", "ofafl", ["ltp"],
                   "var", reading, at_most(0, what="var OFA-FL − var LTP"), " pt²", best=min,
                   section="ofa_fl-fig2", headline=reading == "max")
    for grid, ref, what in (("fig2", "Figs. 2-3", "MLP"), ("fig3", "Fig. 3", "CNN")):
        ours, theirs = (study.seed_values(grid, m, "amin", reading="final") for m in ("ofafl", "ltp"))
        passes, crit, measured, why = lead_above_chance(ours, theirs, chance, margin, "OFA-FL", "LTP")
        led.claim(ref, f"smallest sub-network (r={STRESS_R[-1]}, {what}): OFA-FL beats LTP "
                  "and learns", "implied", passes, crit, measured=measured, why=why,
                  section=f"ofa_fl-{grid}", kind="prediction")
    # OFA-FL itself has layerwise twins on the stress MLP (fig2) only
    for grid, ratios, lgrid, cc, where, pruned in (
            ("fig2", STRESS_R, "fig2", chance, "stress MLP", ("ofafl", "ltp", "ofa-oneshot")),
            ("table1-P", PAPER_R, "scope", chance_cifar, "stand-in", ("ltp", "ofa-oneshot"))):
        for m in pruned:
            g = study.seed_values(grid, m, "amin", "global", "final")
            lay = study.seed_values(lgrid, m, "amin", "layer", "final")
            passes, crit, measured, why = lead_above_chance(g, lay, cc, margin, "global", "layerwise")
            led.claim("Fig. 2", f"global beats layerwise pruning at r={ratios[-1]} ({LABEL[m]}, "
                      f"{where})", "non-layerwise better", passes, crit, measured=measured,
                      why=why, section="ofa_fl-fig2" if grid == "fig2" else "ofa_fl-table1")
    k, probe = study.probe_seeds, study.seeds[:study.probe_seeds]
    others, best_mean = ["ltp", "ofa-oneshot"], at_least(0, " points", "OFA-FL − best other")
    probe_mean = stretch_note(_gap(study, "fig2", "ofafl", others, "mean", "max")[:k],
                              _gap(study, "probe-fig2", "ofafl", others, "mean", "max"),
                              best_mean, probe)
    _gap_claim(led, study, "fig2", "Figs. 2-3", "OFA-FL has the highest mean accuracy across "
               "ratios (stress MLP)", "highest mean", "ofafl", others, "mean",
               "max", best_mean, " points", section="ofa_fl-fig2", headline=True,
               reason=f"one-shot trains every ratio from round {w + 1}, progressive pruning "
                      f"gives the last ratio P + tail = {p + study.tail} rounds; {probe_mean}")
    _gap_claim(led, study, "fig3", "Fig. 3", "OFA-FL has the highest mean accuracy across "
               "ratios (CNN)", "highest mean", "ofafl", others, "mean", "max", best_mean,
               " points", section="ofa_fl-fig3")
    _gap_claim(led, study, "fig3", "Fig. 3", "lower variance across ratios than LTP (after the "
               "last round, CNN)", "lowest variance", "ofafl", ["ltp"], "var", "final",
               at_most(0, what="var OFA-FL − var LTP"), " pt²", best=min, section="ofa_fl-fig3")
    for grid, freq in (("table1-P", p), ("table1-2P", 2 * p)):
        _gap_claim(led, study, grid, "Table 1", f"frequency {freq}: OFA-FL has the lowest "
                   "final variance", "lowest in all four columns", "ofafl",
                   ["ltp", "ofa-oneshot"], "var", "final",
                   at_most(0, what="var OFA-FL − lowest other"), " pt²", best=min,
                   section="ofa_fl-table1")
        _gap_claim(led, study, grid, "Table 1", f"frequency {freq}: one-shot has the highest "
                   "max-avg accuracy", "80.8 vs 34.7 / 49.8 (OFA-FL)", "ofa-oneshot",
                   ["ofafl", "ltp"], "mean", "max",
                   at_least(0, " points", "one-shot − best other"), " points",
                   section="ofa_fl-table1")
    fa, fb = (study.seed_values(g, "ofafl", "mean", reading="final")
              for g in ("table1-P", "table1-2P"))
    sa, sb = (study.seed_values(g, "ofafl", "mean", reading="final")
              for g in ("probe-table1-P", "probe-table1-2P"))
    little = at_most(3, " points", f"|mean at P={p} − mean at P={2 * p}|")
    led.claim("Table 1", "the pruning frequency matters little (OFA-FL final mean)",
              "'not as important'", np.abs(fa - fb), little, unit=" points",
              measured=f"{fmt_mean_sd(np.abs(fa - fb), unit=' points')}; mean "
                       f"{fmt_mean_sd(fa, seeds=False)} (P={p}), {fmt_mean_sd(fb, seeds=False)} "
                       f"(P={2 * p})",
              why=f"final mean {fmt(fa.mean())} (P={p}) vs {fmt(fb.mean())} (P={2 * p}); the "
                  f"last ratio trains P + tail rounds: {p + study.tail} at P={p}, "
                  f"{2 * p + study.tail} at P={2 * p}; |difference| "
                  + stretch_note(np.abs(fa - fb)[:k], np.abs(sa - sb), little, probe,
                                 higher_is_better=False),
              section="ofa_fl-table1")
    _gap_claim(led, study, "table2", "Table 2", "OFA-FL has a lower final variance than LTP",
               ".0001 vs .0004", "ofafl", ["ltp"], "var", "final",
               at_most(0, what="var OFA-FL − var LTP"), " pt²", best=min, digits=3,
               section="ofa_fl-table2", headline=True)
    _gap_claim(led, study, "table2", "Table 2", "LTP is more accurate than OFA-FL "
               "(max-avg round)", "79.7 vs 77.0 (+2.7 points)", "ltp", ["ofafl"], "mean", "max",
               more_than(0, " points", "LTP − OFA-FL"), " points", section="ofa_fl-table2")
    _fig45_claims(led, study)
    return led


def _fig45_claims(led: Ledger, study: Study) -> None:
    """Figs. 4-5: drops of a_1.0 at the pruning rounds of the Table 1 runs at 2P."""
    w, every = study.warmup, 2 * study.every
    one = [drops(r, [w + 1])[0] for r in study.runs("table1-2P", "ofa-oneshot")]
    led.claim("Fig. 5", "one-shot's full network drops at its single pruning", "a single drop",
              one, more_than(0, " points", f"a_1.0(round {w}) − a_1.0(round {w + 1})"),
              unit=" points", section="ofa_fl-fig4",
              why=f"a_1.0 changes by {float(-np.mean(one)):+.1f} points at round {w + 1}, the "
                  "round all ten clients join (two train before it); conjecture: the eight "
                  "new clients' data outweighs the rewinding of the smallest mask")
    rounds = prune_rounds(study, "ofafl", PAPER_R, every)
    d = np.array([drops(r, rounds) for r in study.runs("table1-2P", "ofafl")])
    first = d[:, 0] - d[:, 1:].max(1)
    led.claim("Fig. 4", "the first pruning causes the largest drop of a_1.0", "sawtooth",
              first, at_least(0, " points", "first drop − largest later drop"),
              unit=" points", section="ofa_fl-fig4", kind="prediction",
              why=f"drops at rounds {numbers(rounds)} (mean over seeds): "
                  f"{', '.join(fmt(x) for x in d.mean(0))} points, each read after the "
                  "pruning round's own training")
    peaks = [peak_round(r) for r in study.runs("table1-2P", "ofafl")]
    stretched = [peak_round(r) for r in study.runs("probe-table1-2P", "ofafl")]
    led.claim("Fig. 4", "a_1.0 peaks before the first pruning", "peak before pruning",
              peaks, at_most(w, what="round of a_1.0's peak"), digits=0,
              measured=f"round {fmt_mean_sd(peaks, 0)}",
              section="ofa_fl-fig4",
              why=f"peak rounds {numbers(peaks)}, first pruning at round {w + 1}; "
                  f"{stretch_label(study.seeds[:study.probe_seeds])}: peak rounds "
                  f"{numbers(stretched)}, first pruning at round {STRETCH * w + 1}; "
                  "conjecture: only 2 of 10 clients train in the warm-up, and rewinding is "
                  "partial")


def peak_round(result: dict) -> int:
    """The round at which the full network's accuracy a_1.0 is highest."""
    curves, at = lottery.ratio_curves(result)
    return int(at[np.argmax(curves[:, 0])])
