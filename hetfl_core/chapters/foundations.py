"""The foundations chapter's machinery: FedAvg and FedProx on quadratic clients (client
drift in closed form), the partition summaries, the experiment grid of FedAvg and FedProx
runs, and what the chapter reads from them (sequential steps, the round's stragglers).
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import to_hex
from matplotlib.ticker import MaxNLocator

from .. import data as hd
from .. import plots, system
from ..config import RunConfig
from ..report import final, fmt, fmt_mean_sd, per_seed

__all__ = ["fedavg_fixed_point", "fedavg_fixed_point_formula", "fedprox_fixed_point",
           "fedprox_fixed_point_formula", "plot_drift", "PARTITION_SETTINGS",
           "partition_summary", "plot_partitions", "skewed_dirichlet_partition",
           "run_grid", "runs", "plot_accuracy", "sequential_steps", "accuracy_summary",
           "tier_times",
           "plot_round_clients", "straggler_summary"]


# -- client drift on quadratic clients F_k(w) = a_k/2 (w - c_k)^2 ---------------------
def fedavg_fixed_point(a, c, p, eta: float, local_steps: int, rounds: int = 2000) -> float:
    """FedAvg iterated to convergence: each client runs ``local_steps`` gradient steps of
    size ``eta`` from the broadcast ``w``, ``w_E = c + (1 - eta a)^E (w - c)``, and the
    server averages with weights ``p``."""
    a, c, p = map(np.asarray, (a, c, p))
    w = 0.0
    for _ in range(rounds):
        w = float((p * (c + (1 - eta * a) ** local_steps * (w - c))).sum())
    return w


def fedavg_fixed_point_formula(a, c, p, eta: float, local_steps: int) -> float:
    """The closed form of FedAvg's fixed point: the ``c_k`` averaged with weights
    ``p_k (1 - (1 - eta a_k)^E)``."""
    a, c, p = map(np.asarray, (a, c, p))
    weight = p * (1 - (1 - eta * a) ** local_steps)
    return float((weight * c).sum() / weight.sum())


def fedprox_fixed_point(a, c, p, mu: float, rounds: int = 20000) -> float:
    """FedProx iterated to convergence, each client minimising
    ``F_k(w) + mu/2 (w - w_t)^2`` exactly: ``w_k = (a_k c_k + mu w_t) / (a_k + mu)``."""
    a, c, p = map(np.asarray, (a, c, p))
    w = 0.0
    for _ in range(rounds):
        w = float((p * (a * c + mu * w) / (a + mu)).sum())
    return w


def fedprox_fixed_point_formula(a, c, p, mu: float) -> float:
    """The closed form of FedProx's fixed point (an exercise of the chapter): the ``c_k``
    averaged with weights ``p_k a_k / (a_k + mu)``."""
    a, c, p = map(np.asarray, (a, c, p))
    weight = p * a / (a + mu)
    return float((weight * c).sum() / weight.sum())


def plot_drift(a, c, p, eta: float, steps, ax=None):
    """FedAvg's fixed point against the number of local steps, with the minimiser of
    ``F`` and the mean of the local minimisers."""
    ax = ax or plt.gca()
    a, c, p = map(np.asarray, (a, c, p))
    iterated = [fedavg_fixed_point(a, c, p, eta, E) for E in steps]
    ax.plot(steps, iterated, label="FedAvg fixed point $w^\\star_E$",
            markevery=4, **plots.method_style("fedavg"))
    ax.axhline((p * a * c).sum() / (p * a).sum(), color="k", ls="--",
               label="minimiser of $F$")
    ax.axhline((p * c).sum(), color="gray", ls=":", label="mean of local minimisers")
    ax.set_xlabel("local steps E")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("w")
    ax.legend()
    return ax


# -- statistical heterogeneity ---------------------------------------------------------
#: the partitions the chapter draws: (partition, its options)
PARTITION_SETTINGS = [("iid", {}), ("dirichlet", {"alpha": 0.1}),
                      ("dirichlet", {"alpha": 0.5}), ("dirichlet", {"alpha": 100.0}),
                      ("shards", {"classes_per_client": 2}), ("quantity", {"alpha": 1.0})]


def partition_summary(counts: np.ndarray, share: float = 0.05) -> tuple[float, int, int]:
    """From a clients x classes count matrix: the mean number of classes holding at least
    ``share`` of a client's data, and the smallest and largest client."""
    counts = np.asarray(counts)
    sizes = counts.sum(1)
    held = (counts / sizes[:, None] >= share).sum(1).mean()
    return float(held), int(sizes.min()), int(sizes.max())


def plot_partitions(pool, clients: int, seed: int, train_samples: int,
                    settings=PARTITION_SETTINGS) -> dict[str, tuple]:
    """Heat maps of each partition in ``settings`` (one panel each, three a row, each with
    its colour bar of samples); returns :func:`partition_summary` of each, by title."""
    rows = -(-len(settings) // 3)
    fig, axes = plt.subplots(rows, 3, figsize=(10, 3.2 * rows), constrained_layout=True,
                             squeeze=False)
    summaries = {}
    for ax, (name, options) in zip(axes.flat, settings):
        fed = hd.make_federated(pool, name, clients, seed, train_samples=train_samples,
                                **options)
        title = name + "".join(f" {k}={v}" for k, v in options.items())
        counts = fed.class_counts()
        plots.client_class_heatmap(counts, ax=ax, title=title)
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(MaxNLocator(integer=True))
        summaries[title] = partition_summary(counts)
    for ax in axes.flat[len(settings):]:
        ax.remove()
    plt.show()
    return summaries


def skewed_dirichlet_partition(labels, alpha: float, size_alpha: float, n_clients: int,
                               rng: np.random.Generator) -> list[np.ndarray]:
    """Label skew *and* quantity skew: each client's Dirichlet(``alpha``) share is cut
    down to a size drawn by the quantity-skew partitioner (Dirichlet(``size_alpha``)
    proportions), so clients differ in both their label mix and their size."""
    labels = np.asarray(labels)
    shares = hd.dirichlet_partition(labels, alpha, n_clients, rng)
    sizes = [len(s) for s in hd.quantity_skew_partition(len(labels), n_clients, rng,
                                                         size_alpha)]
    return [np.sort(rng.choice(share, min(size, len(share)), replace=False))
            for share, size in zip(shares, sizes)]


# -- the FedAvg runs ---------------------------------------------------------------------
#: the partitions FedAvg runs on, as RunConfig fields
PARTITIONS = {"iid": {"partition": "iid"}, "dirichlet": {"partition": "dirichlet"},
              "shards": {"partition": "shards", "classes_per_client": 2}}


def run_grid(base: RunConfig, seeds, prox_mu: float) -> dict[tuple, RunConfig]:
    """The chapter's runs, keyed ``(partition, method, seed)``: FedAvg on every partition
    of :data:`PARTITIONS`, FedProx (``mu = prox_mu``) on the Dirichlet split, and one
    central reference (one client holding all the data, same epochs) on the first seed."""
    grid = {(name, "fedavg", s): base.replace(seed=s, **fields)
            for name, fields in PARTITIONS.items() for s in seeds}
    grid.update({("dirichlet", "fedprox", s): base.replace(method="fedprox", seed=s,
                                                           options={"mu": prox_mu})
                 for s in seeds})
    grid[("central", "fedavg", seeds[0])] = base.replace(
        seed=seeds[0], clients=1, partition="iid", heterogeneity="none")
    return grid


def runs(results: dict, partition: str, method: str = "fedavg") -> list[dict]:
    """The results of one (partition, method) cell of the grid, one per seed."""
    return [r for (p, m, _), r in results.items() if p == partition and m == method]


def plot_accuracy(results: dict) -> None:
    """FedAvg's global accuracy on each partition (and the central reference) against
    round, simulated time and uplink traffic, one legend under the three panels."""
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.6), constrained_layout=True)
    curves = [r for name in PARTITIONS for r in runs(results, name)]
    label = lambda r: r["config"]["partition"] if r["config"]["clients"] > 1 else "central"
    titles = {"round": "accuracy vs round", "time_s": "vs simulated time",
              "uplink_bits": "vs uplink traffic"}
    for ax, (x, title) in zip(axes, titles.items()):
        shown = curves + (runs(results, "central") if x == "round" else [])
        plots.plot_curves(shown, x=x, y="acc_global", ax=ax, label=label)
        ax.set_title(title)
        ax.get_legend().remove()
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, [f"FedAvg, {n}" if n != "central" else "central (one client)"
                         for n in labels], loc="outside lower center", ncol=len(labels))
    plt.show()


def sequential_steps(result: dict) -> int:
    """SGD steps taken one after another: per round, the most local steps of a client."""
    return int(sum(max(c["local_steps"] for c in row["clients"])
                   for row in result["history"]))


def accuracy_summary(results: dict, prox_mu: float) -> list[str]:
    """Lines for people: central vs FedAvg's global accuracy per partition (ordered best
    first), FedProx against FedAvg on the Dirichlet split (per-seed differences), and the
    sequential steps behind them."""
    pct = dict(digits=1, unit="%", scale=100)
    central = final(runs(results, "central")[0], "acc_global")
    lines = [f"central training, same model and epochs: {fmt(central, **pct)}"]
    accs = {name: per_seed(runs(results, name), final, y="acc_global") for name in PARTITIONS}
    for name, acc in sorted(accs.items(), key=lambda kv: -kv[1].mean()):
        lines.append(f"FedAvg {name:9s}: global {fmt_mean_sd(acc, **pct)}, "
                     f"{fmt(100 * (central - acc.mean()))} points below central")
    order = " > ".join(sorted(accs, key=lambda n: -accs[n].mean()))
    lines.append(f"order by mean global accuracy: {order}")
    prox = per_seed(runs(results, "dirichlet", "fedprox"), final, y="acc_global")
    gap = 100 * (prox - accs["dirichlet"])
    lines.append(f"FedProx dirichlet (mu={prox_mu:g}): global {fmt_mean_sd(prox, **pct)}; "
                 f"FedProx - FedAvg per seed: {', '.join(fmt(g, 2) for g in gap)} points")
    steps = [c["local_steps"] for row in runs(results, "dirichlet")[0]["history"]
             for c in row["clients"]]
    lines.append(f"sequential SGD steps: central {sequential_steps(runs(results, 'central')[0])}, "
                 f"FedAvg {sequential_steps(runs(results, 'iid')[0])}; a Dirichlet client takes "
                 f"{fmt(float(np.median(steps)), 0)} local steps per round (median)")
    return lines


# -- system heterogeneity ------------------------------------------------------------------
#: device tiers, fastest to slowest, on a sequential scale that no method's colour is on
TIER_COLORS = dict(zip(("high", "mid", "low"),
                       map(to_hex, plt.get_cmap("cividis")([0.95, 0.65, 0.2]))))


def tier_times(row: dict) -> dict[str, np.ndarray]:
    """The clients' times in one round (a history row), by tier."""
    times: dict[str, list] = {}
    for c in row["clients"]:
        times.setdefault(c["tier"], []).append(c["time_s"])
    return {tier: np.array(t) for tier, t in times.items()}


def plot_round_clients(row: dict, ax=None):
    """Bars of each client's time in one round, sorted, coloured by tier, with the round's
    end (the slowest client) as a dashed line."""
    ax = ax or plt.gca()
    times = np.array([c["time_s"] for c in row["clients"]])
    tiers = [c["tier"] for c in row["clients"]]
    order = np.argsort(times)
    ax.bar(range(len(times)), times[order],
           color=[TIER_COLORS.get(tiers[i], "tab:gray") for i in order])
    ax.axhline(times.max(), color="k", ls="--", lw=1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("client (sorted by time)")
    ax.set_ylabel("time in the round (simulated s)")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c, label=t)
                       for t, c in TIER_COLORS.items() if t in tiers])
    return ax


def straggler_summary(row: dict, heterogeneity: str) -> list[str]:
    """Lines for people on one round: its length, the slowest/fastest ratio, each tier's
    mean time against the fastest tier's (and its nominal speed ratio), the idle share."""
    times = np.array([c["time_s"] for c in row["clients"]])
    by_tier = tier_times(row)
    speed = {name: compute for name, compute, _ in system.HETEROGENEITY[heterogeneity]}
    fastest = min(by_tier, key=lambda t: by_tier[t].mean())
    lines = [f"round time {fmt(row['round_time_s'], 2)} s; slowest/fastest client = "
             f"{fmt(times.max() / times.min())}x"]
    for tier, t in sorted(by_tier.items(), key=lambda kv: kv[1].mean()):
        nominal = speed[fastest] / speed[tier] if tier in speed else float("nan")
        lines.append(f"tier {tier:5s}: mean {fmt(t.mean(), 2)} s = "
                     f"{fmt(t.mean() / by_tier[fastest].mean())}x the {fastest} tier "
                     f"(slower by {fmt(nominal)}x in compute and bandwidth)")
    idle = row["idle_s"] / (row["round_time_s"] * len(times))
    lines.append(f"idle: {fmt(row['idle_s'])} client-seconds, {fmt(idle, 0, '%', 100)} of "
                 "the clients' time in the round")
    return lines
