"""The arena chapter's machinery (``book/arena.ipynb``): its tables, figures and claims,
built from :mod:`hetfl_core.arena`'s runs, and the example plug-in method of its "Add
your method" section."""
from __future__ import annotations

import numpy as np
import torch

from .. import arena
from ..arena import LABELS, PAPER_BASELINES, PAPER_METRIC, label
from ..methods.fedavg import FedAvg, weighted_average
from ..report import NUMBERS_CLASS, Ledger, fmt, fmt_mean_sd, judge, more_than, show_table

__all__ = ["PAPER_REFS", "ACCURACY", "COST", "SHOWN", "NUMBERS", "rules_rows", "at_grid_edge",
           "show_rules", "leaderboard_cell", "leaderboard_tables", "show_leaderboard", "scenario_rows",
           "plot_pareto", "plot_map", "judged_winners", "win_counts", "show_summary", "gaps", "claims",
           "levelled_off", "identical_groups", "server_predictions", "plugin_demo", "FedAvgM",
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
        rows.append([label(m), lrs or "—", shown or "paper defaults",
                     "no" if arena.tier_blind(m) else "yes", ", ".join(missing) or "—"])
    return rows


def at_grid_edge(runs: arena.ArenaRuns) -> str:
    """The methods whose tuned rate is at an edge of their task's grid (where a wider grid
    might serve them better), e.g. ``"none"`` or ``"FedAvg (image, largest)"``."""
    if all(len(g) <= 1 for g in runs.settings.lr_grid.values()):
        return "— (a one-value grid)"
    edges = arena.lr_edges(runs.lrs, runs.settings.lr_grid)
    return ", ".join(f"{label(m)} ({t}, {side})" for (t, m), side in edges.items()) or "none"


def show_rules(runs: arena.ArenaRuns) -> None:
    """The table of what each method brings."""
    show_table(rules_rows(runs), ["method", "tuned lr", "options the arena sets",
                                  "reads device tiers", "cannot run"])


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
    method lacks. Empty without runs."""
    block = scenario_rows(rows, name)
    tables = []
    for keys, lr in ((ACCURACY, True), (COST, False)):
        out = []
        for r in block:
            cells = [r["rank"], r["label"]]
            if lr:
                cells.append("/".join(f"{x:g}" for x in r["lrs"]) or "—")
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
               "a/b: the target reached on a of b seeds, the "
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
        best = {cell: (m, v) for cell, (m, v, verdict, _) in
                judged_winners(rows, key, skews, heterogeneities).items() if verdict == "holds"}
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


def judged_winners(rows: list[dict], key: str = "acc", skews=None, heterogeneities=None) -> dict:
    """``{(skew, heterogeneity): (method, mean, verdict, runner_up)}`` per image scenario:
    the method with the highest mean ``key`` and the ledger's verdict (:func:`judge`,
    paired one-sided t-interval over the seeds both ran) on its lead over the runner-up
    being above 0: ``"holds"`` is a clear win, anything else a cell without a winner."""
    best = arena.winners(rows, key, skews, heterogeneities)
    out = {}
    for (skew, het), (m, value) in best.items():
        cell = [r for r in rows if r["task"] == "image" and np.isfinite(r["mean"][key])
                and (r["skew"], r["heterogeneity"]) == (skew, het)]
        cell.sort(key=lambda r: -r["mean"][key])
        if len(cell) < 2:
            out[(skew, het)] = (m, value, "holds" if cell else "untestable", None)
            continue
        a, b = cell[0]["values"][key], cell[1]["values"][key]
        diffs = [100 * (x - y) for x, y in zip(a, b)]
        verdict = judge(diffs, more_than(0, " points")).verdict
        out[(skew, het)] = (m, value, verdict, cell[1]["method"])
    return out


def win_counts(rows: list[dict], key: str = "acc") -> dict[str, int]:
    """How many image scenarios each method clearly wins on ``key`` (its lead over the
    runner-up holds by :func:`judged_winners`). A method whose accuracy cannot depend on
    the device tier (:func:`hetfl_core.arena.tier_blind`) counts once per label skew it
    wins, however many tiers of that skew it wins: the tiers are one result for it."""
    won = set()
    for (skew, het), (m, _, verdict, _) in judged_winners(rows, key).items():
        if verdict == "holds":
            won.add((m, skew) if arena.tier_blind(m) else (m, skew, het))
    counts: dict[str, int] = {}
    for entry in won:
        counts[entry[0]] = counts.get(entry[0], 0) + 1
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
                n = runs.settings.map_seeds
                ledger.claim(ref, f"{LABELS[m]} beats {label(b)} on {word} accuracy ({where})",
                             paper=f"{LABELS[m]} ahead of {label(b)}", values=values,
                             criterion=more_than(0, " points", f"{LABELS[m]} − {label(b)}"), unit=" points",
                             why=(f"{LABELS[m]} {why} ({n} seed{'s' * (n > 1)} each, mean gap)"
                                  if why else ""), section="arena-teaches",
                             headline=scenario.task == "image" and b == baselines[0],
                             pairs=[(m, b)])


def levelled_off(runs: arena.ArenaRuns, method: str = "fedavg", factor: int = 2,
                 processes: int = 2) -> dict:
    """Is training long enough? ``method`` in the reference scenario at its tuned rate,
    every reference seed, run again for ``factor`` times the rounds: per seed its final
    personalised accuracy at the arena's rounds (``short``) and at ``factor`` times them
    (``long``), and ``gain`` = long - short in points."""
    from ..experiments import sweep
    from ..report import final

    short = {r["config"]["seed"]: final(r) for r in runs.runs(runs.settings.reference, method)}
    lr = runs.lrs[("image", method)]
    configs = [arena._config(runs.settings, runs.settings.reference, method, lr, sd)
               for sd in sorted(short)]
    configs = [c.replace(rounds=factor * c.rounds, options=arena.method_options(
        method, c.replace(rounds=factor * c.rounds))) for c in configs]
    long = [final(r) for r in sweep(configs, processes=processes, progress=False)]
    shorts = [short[sd] for sd in sorted(short)]
    return {"short": shorts, "long": long, "gain": [100 * (b - a) for a, b in zip(shorts, long)]}


def identical_groups(rows: list[dict], name: str, digits: int = 6) -> list[list[str]]:
    """The groups of at least two methods in scenario ``name`` whose per-seed personalised
    accuracies are identical (to ``digits`` decimals): methods that computed the same
    predictions on every seed."""
    groups: dict[tuple, list[str]] = {}
    for r in scenario_rows(rows, name):
        key = tuple(round(v, digits) for v in r["values"]["acc"])
        groups.setdefault(key, []).append(r["method"])
    return [g for g in groups.values() if len(g) > 1]


def server_predictions(config) -> dict:
    """Run ``config`` and read its server model's predictions on the clients' pooled test
    splits: ``acc`` (the run's final personalised accuracy), ``server_acc`` (the server
    model's accuracy there), ``top_share`` (the share of inputs given the most frequent
    prediction), ``distinct`` (how many different labels it predicts) and ``majority``
    (the majority-label rate of those splits)."""
    from ..engine import build_simulation, run_rounds
    from ..report import final

    sim = build_simulation(config)
    result = run_rounds(sim)
    x = torch.cat([c.x_test for c in sim.data.clients])
    y = torch.cat([c.y_test.reshape(-1) for c in sim.data.clients])
    model = sim.method.model.eval()
    with torch.no_grad():
        pred = model(x).argmax(-1).reshape(-1)
    counts = torch.bincount(pred)
    return {"acc": final(result), "server_acc": float((pred == y).float().mean()),
            "top_share": float(counts.max()) / pred.numel(), "distinct": int((counts > 0).sum()),
            "majority": float(torch.bincount(y).max()) / y.numel()}


def plugin_demo(runs: arena.ArenaRuns, name: str, processes: int = 2) -> list[dict]:
    """The plug-in ``name`` beside FedAvg in the reference scenario, at FedAvg's tuned rate
    and on the reference seeds: one result per seed for each, ``{"method", "acc"}``."""
    from ..experiments import sweep
    from ..report import final

    s, ref = runs.settings, runs.settings.reference
    lr = runs.lrs[("image", "fedavg")]
    seeds = range(s.image.seed, s.image.seed + s.seeds)
    configs = [arena._config(s, ref, m, lr, sd) for m in (name, "fedavg") for sd in seeds]
    return [{"method": c.method, "seed": c.seed, "acc": final(r)}
            for c, r in zip(configs, sweep(configs, processes=processes, progress=False))]


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

