"""The book's figures in one style: :func:`method_style` gives a method the same colour and
marker in every figure (:data:`METHOD_STYLES`: declared on each method's class, the papers'
methods in saturated colours, the baselines by family in related hues, each its own marker); :func:`plot_curves` draws
accuracy (or loss) against round, simulated time, FLOPs or traffic, the spread over seeds
shaded; :func:`grouped_bars` a methods x settings table; :func:`client_class_heatmap` a
clients x classes count matrix.
"""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np

from .report import evaluated, row_value

__all__ = ["use_style", "METHOD_STYLES", "MethodStyles", "VARIANT_STYLES", "ALIASES", "method_key", "method_style", "X_AXES", "Y_AXES", "series",
           "plot_curves", "grouped_bars", "legend_below", "mark_never", "client_class_heatmap", "SPARE_COLOURS",
           "panels", "plot_cases", "plot_critical_difference", "colour_distance", "distinct_colours",
           "PAGE_WIDTH_PX", "legible"]

#: the styles of the chapters' variants that are not registered methods (Heroes' ENC with
#: fixed frequency, the lightweight PFL paper's FedAvg-P); a method's own style is declared
#: on its class (``color``, ``marker``)
VARIANT_STYLES: dict[str, tuple[str, str]] = {"enc": ("#c5b0d5", "s"), "fedavgp": ("#c49c94", "v")}


class MethodStyles(Mapping):
    """method key (lower case, letters and digits only) -> (colour, marker): every registered
    method that declares a ``color`` on its class (the papers' methods in saturated colours,
    the baselines by family in related hues, each its own marker), and
    :data:`VARIANT_STYLES`. Read from the registry at each access, so a plug-in registered
    later is in."""

    def table(self) -> dict[str, tuple[str, str]]:
        """The mapping as it stands now."""
        from ..science.methods import METHODS

        own = {_normal(name): (cls.color, cls.marker) for name, cls in METHODS.items() if cls.color}
        return {**VARIANT_STYLES, **own}

    def __getitem__(self, key: str) -> tuple[str, str]:
        return self.table()[key]

    def __iter__(self):
        return iter(self.table())

    def __len__(self) -> int:
        return len(self.table())


#: method key -> (colour, marker), from the methods' classes (:class:`MethodStyles`)
METHOD_STYLES = MethodStyles()
#: display names the chapters use -> method key
ALIASES = {"opt": "sparseprunepfl", "encfixed": "enc", "pruning": "oneshot", "lthpruning": "ltp",
           "lth": "ltp", "mp": "heterofl", "originalnc": "flanc", "enhancednc": "enc",
           "fedavgs": "topk"}   # FedAvg-S: FedAvg with top-k sparsified uploads
#: colours no method uses, for a chapter's variants (fixed-rate runs, ablations): eight
#: hues apart (black, mustard, violet, crimson, teal, sienna, lime, pale teal); the previous set
#: held four near-identical purples, which an ablation's four variants all drew
SPARE_COLOURS = ("#000000", "#e6ab02", "#6a3d9a", "#ce1256", "#01665e", "#b35806", "#a6d854",
                 "#80cdc1")


def _normal(name: str) -> str:
    """``"LG-FedAvg"``, ``"lg-fedavg"`` -> ``"lgfedavg"``: lower case, letters and digits only."""
    return "".join(ch for ch in str(name).lower() if ch.isalnum())


def method_key(name: str) -> str:
    """``"LG-FedAvg"``, ``"lg-fedavg"`` -> ``"lgfedavg"``; a chapter's alias -> its method."""
    key = _normal(name)
    return ALIASES.get(key, key)


def method_style(name: str) -> dict:
    """``{"color": ..., "marker": ...}`` of a method (by registered name, its class's
    ``label`` or a chapter's alias). A label
    that is not a method (e.g. "OFA-FL, r=0.5") takes the style of the method it starts with;
    an unknown one gets a fixed colour from its name."""
    from ..science.methods import METHODS

    styles = METHOD_STYLES.table()
    by_label = {_normal(cls.label): _normal(n) for n, cls in METHODS.items() if _normal(cls.label) not in styles}
    key, head = method_key(name), method_key(re.split("[,(:]", str(name))[0])
    key, head = by_label.get(key, key), by_label.get(head, head)
    if key not in styles and head in styles:
        key = head
    color, marker = styles.get(key, (SPARE_COLOURS[sum(map(ord, key)) % len(SPARE_COLOURS)], "o"))
    return {"color": color, "marker": marker}

def colour_distance(first: str, second: str) -> float:
    """How far apart two colours look: the Euclidean distance of their CIELAB coordinates
    (CIE76 Delta E, D65 white; about 2 is the least a reader notices, under 25 reads as
    shades of one colour)."""
    def lab(colour):
        import matplotlib.colors

        rgb = np.array(matplotlib.colors.to_rgb(colour))
        rgb = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
        xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722],
                        [0.0193, 0.1192, 0.9505]]) @ rgb / np.array([0.9505, 1.0, 1.089])
        f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
        return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])

    return float(np.linalg.norm(lab(first) - lab(second)))


def distinct_colours(n: int, avoid=(), pool=SPARE_COLOURS) -> list[str]:
    """``n`` colours of ``pool`` (default :data:`SPARE_COLOURS`) for a figure's variants,
    chosen one at a time: each the one farthest (:func:`colour_distance`) from every colour
    in ``avoid`` (the methods the figure also draws) and every colour already chosen, ties
    going to the earlier in ``pool``. A rule, so a change of palette cannot leave a variant
    on a colour next to a method's."""
    pool = list(dict.fromkeys(pool))
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= len(pool):
        raise ValueError(f"distinct_colours: n must be an integer from 0 to {len(pool)} "
                         f"(the pool's size), got {n!r}")
    taken, chosen = list(avoid), []
    for _ in range(n):
        best = max((c for c in pool if c not in chosen),
                   key=lambda c: min((colour_distance(c, t) for t in taken), default=0.0))
        chosen.append(best)
        taken.append(best)
    return chosen


#: x-axis key -> (label, scale applied to the history value)
X_AXES = {
    "round": ("round", 1.0),
    "time_s": ("simulated time (s)", 1.0),
    "flops": ("training FLOPs (GFLOPs)", 1e-9),
    "uplink_bits": ("uplink traffic (MB)", 1 / 8e6),
    "downlink_bits": ("downlink traffic (MB)", 1 / 8e6),
}
#: y-axis key -> (label, scale)
Y_AXES = {
    "acc_personal": ("personalised accuracy (%)", 100.0),
    "acc_global": ("global accuracy (%)", 100.0),
    "loss": ("training loss", 1.0),
    "loss_global": ("global test loss", 1.0),
    "loss_personal": ("personalised test loss", 1.0),
    "f1_personal": ("personalised F1 (%)", 100.0),
    "f1_global": ("global F1 (%)", 100.0),
}


def use_style() -> None:
    """The book's matplotlib style (applied on import; call again after changing rcParams)."""
    plt.rcParams.update({
        "figure.figsize": (6.4, 3.8), "figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3,
        "axes.spines.top": False, "axes.spines.right": False, "legend.frameon": False,
        "font.size": 10, "lines.linewidth": 1.8,
    })


use_style()


def series(result: dict, x: str = "round", y: str = "acc_personal") -> tuple[np.ndarray, np.ndarray]:
    """The (x, y) points of one run, skipping rounds where ``y`` was not evaluated; ``x``
    may be a derived history key such as ``traffic_bits``."""
    rows = evaluated(result, y)
    return (np.array([row_value(r, x) for r in rows], float),
            np.array([row_value(r, y) for r in rows], float))


def plot_curves(results: list[dict], x: str = "round", y: str = "acc_personal", ax=None,
                label=None, spread: str = "minmax", **line_kw):
    """Plot ``y`` against ``x`` for runs grouped by ``label`` (default: the method name):
    a group (e.g. the seeds) is drawn as its mean at the mean x, with the min-max band
    (``spread="minmax"``) or +-1 std (``"std"``) shaded."""
    if x not in X_AXES or y not in Y_AXES:
        raise ValueError(f"x must be one of {list(X_AXES)} and y one of {list(Y_AXES)}")
    ax = ax or plt.gca()
    label = label or (lambda result: result["config"]["method"])
    groups: dict[str, list] = defaultdict(list)
    for r in results:
        groups[label(r)].append(series(r, x, y))
    (xlabel, xs), (ylabel, ys) = X_AXES[x], Y_AXES[y]
    for name, runs in groups.items():
        n = min(len(s[0]) for s in runs)
        xv = np.mean([s[0][:n] for s in runs], axis=0) * xs
        yv = np.array([s[1][:n] for s in runs]) * ys
        style = {**method_style(name), "markevery": max(1, len(xv) // 8), "markersize": 4, **line_kw}
        (line,) = ax.plot(xv, yv.mean(0), label=name, **style)
        if len(runs) > 1:
            lo, hi = (yv.min(0), yv.max(0)) if spread == "minmax" else \
                (yv.mean(0) - yv.std(0), yv.mean(0) + yv.std(0))
            ax.fill_between(xv, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend()
    return ax


def panels(n: int, height: float = 3.2, width: float = 10.0, cols: int | None = None):
    """A figure of ``n`` panels, at most three a row (four: two by two), ``width`` inches
    wide and ``height`` inches a row; returns the figure and the list of its ``n`` axes."""
    if n < 1:
        raise ValueError(f"a figure needs at least one panel, got {n}")
    cols = cols or (2 if n == 4 else min(n, 3))
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width, height * rows + 0.6),
                             constrained_layout=True, squeeze=False)
    for ax in axes.flat[n:]:
        ax.remove()
    return fig, list(axes.flat[:n])


def plot_cases(cases: dict, x: str = "round", y: str = "acc_personal", title: str = "",
               spread: str = "minmax", style=None, height: float = 3.2):
    """One panel per case: ``cases`` maps a panel's title to ``{label: runs}`` (the seeds of
    one method), each drawn by :func:`plot_curves` (mean line, ``spread`` band over seeds)
    in ``style(label)`` (default :func:`method_style`); one legend under the panels.
    Returns the figure."""
    fig, axes = panels(len(cases), height=height)
    for ax, (case, curves) in zip(axes, cases.items()):
        for label, runs in curves.items():
            if runs:
                plot_curves(runs, x=x, y=y, ax=ax, label=lambda r, name=label: name, spread=spread,
                            **(style(label) if style else {}))
        ax.set_title(case)
    legend_below(fig, axes)
    if title:
        fig.suptitle(title)
    return fig


def grouped_bars(values: dict[str, dict[str, float]], ax=None, errors: dict | None = None,
                 ylabel: str = "", fmt: str | None = None):
    """Grouped bars: ``values[group][series]``, e.g. ``{"dirichlet": {"fedavg": 0.8, ...}}``;
    ``errors`` has the same shape (error bar half-widths); ``fmt`` (e.g. ``"{:.1f}"``)
    writes each value on its bar."""
    ax = ax or plt.gca()
    groups = list(values)
    names = list(dict.fromkeys(n for g in groups for n in values[g]))
    width = 0.8 / max(len(names), 1)
    base = np.arange(len(groups))
    for i, name in enumerate(names):
        heights = [values[g].get(name, np.nan) for g in groups]
        err = [errors[g].get(name, 0) for g in groups] if errors else None
        bars = ax.bar(base + (i - (len(names) - 1) / 2) * width, heights, width, yerr=err, label=name,
                      capsize=2, color=method_style(name)["color"])
        if fmt:
            ax.bar_label(bars, ["" if not np.isfinite(h) else fmt.format(h) for h in heights], fontsize=9)
    ax.set_xticks(base, groups)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0))    # beside the bars, never over them
    mark_never(ax)
    return ax


def legend_below(fig, axes, ncol: int | None = None) -> None:
    """One legend for the figure under its panels, never over a bar or a curve: every name
    drawn in ``axes`` (one axes or several) once, and each panel's own legend removed."""
    entries = {}
    for ax in np.atleast_1d(axes).flat:
        for handle, name in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(name, handle)
    for ax in fig.axes:
        if ax.get_legend():
            ax.get_legend().remove()
    fig.legend(list(entries.values()), list(entries), loc="outside lower center",
               ncol=ncol or min(len(entries), max(1, int(fig.get_figwidth() // 1.6))))


#: the width, in CSS pixels (96 an inch), at which the book's page shows a figure
PAGE_WIDTH_PX = 688


def legible(fig, min_pt: float = 8.0, page_px: int = PAGE_WIDTH_PX):
    """Enlarge every text of ``fig`` (titles, labels, tick labels, legends) that would read
    under ``min_pt`` points once the figure is shown at most ``page_px`` CSS pixels wide,
    so a wide multi-panel figure stays readable when the page scales it down; texts
    already large enough keep their size. Returns the figure."""
    import matplotlib.text

    if not min_pt > 0 or not page_px > 0:
        raise ValueError(f"legible: min_pt and page_px must be positive, got {min_pt!r}, {page_px!r}")
    shown = min(fig.dpi, page_px / fig.get_figwidth()) / 96    # shown points per drawn point
    need = min_pt / shown
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if any(label.get_fontsize() < need for label in axis.get_ticklabels(which="both")):
                axis.set_tick_params(which="both", labelsize=need)
    for text in fig.findobj(matplotlib.text.Text):
        if text.get_text() and text.get_fontsize() < need:
            text.set_fontsize(need)
    return fig


def mark_never(ax, text: str = "never") -> None:
    """Mark every bar of ``ax`` with no height (its runs never reached the target) by a
    cross on the axis in the bar's colour, labelled ``text``, with no bar and no number:
    a "never" has no height to draw."""
    from matplotlib.container import BarContainer

    containers = [c for c in ax.containers if isinstance(c, BarContainer)]
    heights = [p.get_height() for c in containers for p in c.patches]
    if not any(np.isfinite(h) for h in heights):
        ax.set_ylim(0, 1)
    for container in containers:
        for patch in container.patches:
            if np.isfinite(patch.get_height()):
                continue
            x = patch.get_x() + patch.get_width() / 2
            ax.plot(x, 0, marker="x", ms=9, mew=2, color=patch.get_facecolor(), clip_on=False)
            ax.annotate(text, (x, 0), xytext=(0, 9), textcoords="offset points", rotation=90,
                        ha="center", va="bottom", fontsize=8, color="0.35", style="italic")


def client_class_heatmap(counts: np.ndarray, ax=None, title: str | None = None, colorbar: bool = True):
    """A clients (rows) x classes (columns) heat map of sample counts."""
    ax = ax or plt.gca()
    image = ax.imshow(np.asarray(counts), aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    ax.grid(False)
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, label="samples")
    return ax


def plot_critical_difference(result, ax=None, labels=None):
    """A critical-difference diagram (Demšar, JMLR 7, 2006) of a
    :class:`~hetfl_core.book.arena.CriticalDifference`: the methods at their average ranks on
    one axis (1, the best, on the left), the better half labelled to the left and the rest
    to the right, the critical difference drawn as a bar above the axis, and a thick line
    under each group of methods no two of which differ significantly. ``labels`` maps a
    method to its display name."""
    ax = ax or plt.gca()
    k = len(result.methods)
    order = list(np.argsort(result.ranks))
    names = [(labels or {}).get(result.methods[i], result.methods[i]) for i in order]
    ranks = [result.ranks[i] for i in order]
    half = (k + 1) // 2
    ax.set_xlim(0.5, k + 0.5)
    ax.set_ylim(-(half + 1.5), 1.8)
    ax.plot([1, k], [0, 0], color="black", linewidth=1)
    for rank in range(1, k + 1):                 # the rank axis, its ticks above the line
        ax.plot([rank, rank], [0, 0.12], color="black", linewidth=1)
        ax.text(rank, 0.2, str(rank), ha="center", va="bottom", fontsize=9)
    ax.set_axis_off()
    for place, (name, rank) in enumerate(zip(names, ranks)):
        left = place < half
        depth = -(place + 1 if left else k - place)
        edge = 0.5 if left else k + 0.5
        colour = method_style(name)["color"]
        ax.plot([rank, rank, edge], [0, depth, depth], color=colour, linewidth=1)
        ax.text(edge + (0.05 if left else -0.05), depth, f"{name} ({rank:.2f})", ha="left" if left else "right",
                va="bottom", fontsize=9)
    ax.plot([1, 1 + result.difference], [1.0, 1.0], color="black", linewidth=2)
    ax.text(1 + result.difference / 2, 1.1, f"CD = {result.difference:.2f}", ha="center", va="bottom", fontsize=9)
    for level, group in enumerate(result.groups()):
        spots = [result.ranks[result.methods.index(m)] for m in group]
        ax.plot([min(spots) - 0.05, max(spots) + 0.05], [-0.3 - 0.25 * level] * 2, color="black", linewidth=3)
    return ax
