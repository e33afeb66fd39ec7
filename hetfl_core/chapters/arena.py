"""The arena chapter's machinery (``book/arena.ipynb``): its tables, figures and claims,
built from :mod:`hetfl_core.arena`'s runs, and the example plug-in method of its "Add
your method" section."""
from __future__ import annotations

import numpy as np
import torch

from .. import arena
from ..arena import LABELS, PAPER_BASELINES, PAPER_METRIC, label
from ..methods.fedavg import FedAvg, weighted_average
from ..report import NUMBERS_CLASS, Ledger, fmt, fmt_mean_sd, more_than, show_table

__all__ = ["PAPER_REFS", "ACCURACY", "COST", "SHOWN", "NUMBERS", "rules_rows", "at_grid_edge",
           "show_rules", "leaderboard_cell", "leaderboard_tables", "show_leaderboard", "scenario_rows",
           "plot_pareto", "plot_map", "win_counts", "show_summary", "gaps", "claims", "FedAvgM",
           "register_example"]

#: where each paper compares its method with the baselines the arena also runs
PAPER_REFS = {"fedlps": "FedLPS, Table I", "heroes": "Heroes, Table II", "ofafl": "OFA-FL, Figs. 2-3",
              "srp-pfed": "SRP-pFed, Table III", "sparse-prune-pfl": "Lightweight PFL, Figs. 2-3"}
#: leaderboard columns the chapter shows (all are in the CSV), in two tables of at most
#: seven columns each: what a method reaches, and what it costs
ACCURACY = ("acc", "acc_global", "worst10", "acc_at_budget")
COST = ("time_s", "bits", "energy_j", "time_to_target", "bits_to_target")
SHOWN = ACCURACY + COST
#: the CSS class of a table of numbers whose values never wrap (the book's stylesheet)
NUMBERS = NUMBERS_CLASS


def rules_rows(runs: arena.ArenaRuns) -> list[list]:
    """One row per method: its learning rate per task, the options the arena sets, its
    cost model, and the tasks it cannot run."""
    rows = []
    for m in runs.methods:
        lrs = ", ".join(f"{t}: {runs.lrs[(t, m)]:g}" for t in ("image", "text") if (t, m) in runs.lrs)
        config = runs.settings.image.replace(method=m)
        options = arena.method_options(m, config)
        shown = ", ".join(f"{k}={v}" for k, v in options.items() if k != "capacities")
        if "capacities" in options:
            shown = "capacity by device tier, " + shown
        missing = [t for t in ("image", "text") if (t, m) in runs.unsupported]
        rows.append([label(m), lrs or "—", shown or "paper defaults", arena.OWN_SYSTEM.get(m, arena.SYSTEM),
                     ", ".join(missing) or "—"])
    return rows


def at_grid_edge(runs: arena.ArenaRuns) -> str:
    """How many methods chose the largest rate of their task's grid (where a wider grid
    might have served them better), e.g. ``"13 of 15 (image)"``."""
    parts = []
    for task, grid in runs.settings.lr_grid.items():
        chosen = [lr for (t, _), lr in runs.lrs.items() if t == task]
        if chosen and len(grid) > 1:
            parts.append(f"{sum(lr == max(grid) for lr in chosen)} of {len(chosen)} ({task})")
    return ", ".join(parts) or "— (a one-value grid)"


def show_rules(runs: arena.ArenaRuns) -> None:
    """The table of what each method brings."""
    show_table(rules_rows(runs), ["method", "tuned lr", "options the arena sets", "cost model",
                                  "cannot run"])


def scenario_rows(rows: list[dict], name: str) -> list[dict]:
    """The leaderboard rows of the scenario called ``name``."""
    return [r for r in rows if r["scenario"] == name]


def leaderboard_cell(values, key: str) -> str:
    """One leaderboard value: mean ± sd over seeds of metric ``key`` (as
    :data:`hetfl_core.arena.COLUMNS` formats it); where some seeds never reached a target,
    the mean is over those that did and ``(2/3)`` says how many did, so the cell stays short."""
    _, digits, scale, _ = arena.COLUMNS[key]
    v = np.asarray(list(values), dtype=float)
    reached = v[np.isfinite(v)]
    if 0 < reached.size < v.size and np.isposinf(v).any():
        return f"{fmt_mean_sd(reached, digits, '', scale, seeds=False)} ({reached.size}/{v.size})"
    return fmt_mean_sd(v, digits, "", scale, seeds=False)


def leaderboard_tables(rows: list[dict], name: str) -> list[tuple[list[str], list[list]]]:
    """One scenario's leaderboard as two tables, ``(header, rows)`` each: accuracy (rank,
    method, lr and the :data:`ACCURACY` metrics) and cost (rank, method and the :data:`COST`
    metrics); mean ± sd over seeds, "never" for a target not reached, "—" for a metric a
    method lacks, † for a method charged by its own wireless cell. Empty without runs."""
    block = scenario_rows(rows, name)
    tables = []
    for keys, lr in ((ACCURACY, True), (COST, False)):
        out = []
        for r in block:
            cells = [r["rank"], r["label"] + (" †" if r["system"] != arena.SYSTEM else "")]
            if lr:
                cells.append("/".join(f"{x:g}" for x in r["lrs"]))
            cells += [leaderboard_cell(r["values"][key], key) for key in keys]
            out.append(cells)
        header = ["#", "method", *(["lr"] if lr else []), *(arena.COLUMNS[k][0] for k in keys)]
        if block:
            tables.append((header, out))
    return tables


def show_leaderboard(rows: list[dict], name: str) -> None:
    """One scenario's leaderboard (:func:`leaderboard_tables`): its accuracy table, then
    its cost table, under one caption."""
    tables = leaderboard_tables(rows, name)
    if not tables:
        print(f"{name}: no runs")
        return
    r0 = scenario_rows(rows, name)[0]
    caption = (f"**{name}** ({r0['seeds']} seed{'s' if r0['seeds'] > 1 else ''}; target "
               f"{fmt(r0['target'], 1, '%', 100)}, time budget {fmt(r0['budget_s'], 1)} s; "
               "† charged by its own wireless cell; a/b: the target reached on a of b seeds, the "
               "mean over those)")
    (acc_header, acc_rows), (cost_header, cost_rows) = tables
    show_table(acc_rows, acc_header, caption=caption + ", accuracy:", css_class=NUMBERS)
    show_table(cost_rows, cost_header, caption=f"**{name}**, cost:", css_class=NUMBERS)

def plot_pareto(rows: list[dict], names) -> None:
    """Accuracy against simulated time and against traffic, one row of panels per scenario
    in ``names``, one legend for all."""
    import matplotlib.pyplot as plt

    from ..plots import legend_below

    names = [n for n in names if scenario_rows(rows, n)]
    fig, axes = plt.subplots(len(names), 2, figsize=(8.6, 3.3 * len(names) + 0.9), layout="constrained",
                             squeeze=False)
    for ax_row, name in zip(axes, names):
        arena.plot_pareto(scenario_rows(rows, name), ax_row)
        ax_row[0].set_title(name, fontsize=10, loc="left")
    legend_below(fig, axes, ncol=5)
    plt.show()


def plot_map(rows: list[dict], skews, heterogeneities) -> None:
    """"Who wins where": over label skew x device heterogeneity, the method with the best
    final personalised accuracy (left) and the best accuracy at the time budget (right),
    each cell in the winner's colour with its name and value."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgb

    from ..plots import method_style

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), layout="constrained")
    for ax, key, title in zip(axes, ("acc", "acc_at_budget"),
                              ("best final personalised accuracy", "best accuracy at the time budget")):
        best = arena.winners(rows, key, skews, heterogeneities)
        image = np.ones((len(skews), len(heterogeneities), 3))
        for (i, k), (j, h) in ((a, b) for a in enumerate(skews) for b in enumerate(heterogeneities)):
            if (k, h) not in best:
                continue
            m, value = best[(k, h)]
            image[i, j] = 0.55 + 0.45 * np.array(to_rgb(method_style(m)["color"]))
            ax.text(j, i, f"{label(m)}\n{100 * value:.1f}%", ha="center", va="center", fontsize=9)
        ax.imshow(image, aspect="auto")
        ax.set_xticks(range(len(heterogeneities)), [f"{h}" for h in heterogeneities])
        ax.set_yticks(range(len(skews)), list(skews))
        ax.set_xlabel("device heterogeneity")
        ax.set_ylabel("label skew")
        ax.set_title(title, fontsize=10)
        ax.grid(False)
    plt.show()


def win_counts(rows: list[dict], key: str = "acc") -> dict[str, int]:
    """How many image scenarios each method wins on ``key``."""
    counts: dict[str, int] = {}
    for m, _ in arena.winners(rows, key).values():
        counts[m] = counts.get(m, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def show_summary(rows: list[dict]) -> None:
    """Per method over the image cells: its mean rank (by final personalised accuracy),
    the cells it wins on final accuracy and at the time budget, and its mean accuracy."""
    image = [r for r in rows if r["task"] == "image"]
    wins, fast = win_counts(rows), win_counts(rows, "acc_at_budget")
    out = []
    for m in dict.fromkeys(r["method"] for r in image):
        mine = [r for r in image if r["method"] == m]
        out.append([label(m), float(np.mean([r["rank"] for r in mine])), wins.get(m, 0), fast.get(m, 0),
                    fmt(float(np.nanmean([r["mean"]["acc"] for r in mine])), 1, "%", 100), len(mine)])
    out.sort(key=lambda row: row[1])
    show_table(out, ["method", "mean rank", "cells won", "cells won at the time budget",
                     "mean personalised acc.", "cells"])


def gaps(runs: arena.ArenaRuns, scenario, method: str, baseline: str, metric: str) -> np.ndarray:
    """Per seed, ``method``'s final ``metric`` minus ``baseline``'s, in points (seeds in
    common only; empty if either did not run)."""
    from ..report import final

    a = {r["config"]["seed"]: final(r, metric) for r in runs.runs(scenario, method)}
    b = {r["config"]["seed"]: final(r, metric) for r in runs.runs(scenario, baseline)}
    return np.array([100 * (a[s] - b[s]) for s in sorted(set(a) & set(b))], float)


def _other_cells(runs: arena.ArenaRuns, method: str, baseline: str, metric: str) -> str:
    """The sign of the gap in the other image cells, as measured evidence for ``why``."""
    cells = [sc for sc in arena.scenarios(runs.settings) if sc.task == "image" and sc != runs.settings.reference]
    signs = [float(np.mean(g)) for sc in cells if (g := gaps(runs, sc, method, baseline, metric)).size]
    if not signs:
        return ""
    return f"ahead in {sum(v > 0 for v in signs)} of the {len(signs)} other image cells"


def claims(ledger: Ledger, runs: arena.ArenaRuns) -> None:
    """For each paper's method and each baseline its paper used that also runs here: is
    it more accurate, on its paper's metric, in the reference image scenario and in the
    text scenario (every seed)? OFA-FL's paper has no such baseline: it is set against
    FedAvg, the dense model it trains."""
    text = arena.Scenario("text", "natural", "medium")
    for m in arena.PAPER_METHODS:
        if m not in runs.methods:
            continue
        metric = PAPER_METRIC[m]
        word = "personalised" if metric == "acc_personal" else "global"
        baselines = PAPER_BASELINES[m] or ("fedavg",)
        for b in baselines:
            if b not in runs.methods:
                continue
            for scenario, where in ((runs.settings.reference, "image, α=0.5, medium"), (text, "Shakespeare")):
                values = gaps(runs, scenario, m, b, metric)
                values = values[np.isfinite(values)]
                if values.size == 0:
                    continue
                ref = PAPER_REFS[m] if PAPER_BASELINES[m] else "arena (no baseline of the paper runs here)"
                why = _other_cells(runs, m, b, metric) if scenario.task == "image" and \
                    not (values > 0).all() else ""
                ledger.claim(ref, f"{LABELS[m]} beats {label(b)} on {word} accuracy ({where})",
                             paper=f"{LABELS[m]} ahead of {label(b)}", values=values,
                             criterion=more_than(0, " points", f"{LABELS[m]} − {label(b)}"), unit=" points",
                             why=(f"{LABELS[m]} {why} (1 seed each); conjecture: the paper's own "
                                  "data, scale and tuning favoured it" if why else ""), section="arena-teaches",
                             headline=scenario.task == "image" and b == baselines[0],
                             pairs=[(m, b)])


# -- "Add your method": a plug-in of about thirty lines -------------------------------------
class FedAvgM(FedAvg):
    """FedAvg with server momentum (Hsu et al., 2019, Alg. 1): the averaged update is
    treated as a pseudo-gradient, ``v <- beta v + (w_avg - w)``, ``w <- w + v``."""

    name = "fedavgm"
    summary = "FedAvgM: FedAvg with server momentum beta (Hsu et al. 2019)"
    defaults = {"beta": 0.9}

    def __init__(self, config, data, devices):
        super().__init__(config, data, devices)
        self.velocity = {n: torch.zeros_like(p) for n, p in self.model.state_dict().items()}

    def aggregate(self, round_idx, reports):
        """v <- beta v + (sum_k n_k/n w_k - w);  w <- w + v."""
        avg = weighted_average([r.update for r in reports], [r.n_samples for r in reports])
        state = self.model.state_dict()
        beta = self.options["beta"]
        for name, value in avg.items():
            self.velocity[name] = beta * self.velocity[name] + (value - state[name])
            state[name] = state[name] + self.velocity[name]
        self.model.load_state_dict(state)


def register_example() -> str:
    """Register :class:`FedAvgM` (once) and return its name."""
    from ..methods import METHODS, register

    if METHODS.get(FedAvgM.name) is not FedAvgM:
        register(FedAvgM)
    return FedAvgM.name

