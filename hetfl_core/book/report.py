"""Reading runs and reporting what they show: history queries, tables for people, and the
claim ledger every paper chapter ends with.

* History queries (:func:`final`, :func:`value_at`, :func:`first_reach`, :func:`per_seed`)
  take as ``x`` any cumulative history key (``round``, ``time_s``, ``uplink_bits``, ...) or
  ``traffic_bits`` (both directions); a target never reached is ``math.inf``.
* Formatting (:func:`fmt`, :func:`fmt_mean_sd`, :func:`compare`, :func:`markdown_table`,
  :func:`folded_table`) turns numbers into text for people; :func:`show_source` prints a
  library function as valid Python, without its docstring.
* :class:`Ledger` holds a chapter's claims, each judged by :func:`judge` from its paired
  per-seed values; :meth:`Ledger.save` writes it for the book's scorecard and the verdict
  box atop the chapter (``tools/scorecard.py``, which the book build runs).
"""
from __future__ import annotations

import ast
import functools
import html
import inspect
import io
import json
import math
import os
import re
import textwrap
import tokenize
from dataclasses import asdict, dataclass, field
from numbers import Integral, Real
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

__all__ = ["NEVER", "MISSING", "DERIVED_KEYS", "row_value", "evaluated", "final", "value_at",
           "first_reach", "per_seed", "ratio", "best_on_average", "mean_sd", "fmt", "fmt_mean_sd", "listing",
           "numbers", "of_seeds", "compare", "escape_cell", "markdown_table", "folded_table",
           "FOLDED_CLASS", "LEDGER_CLASS", "NUMBERS_CLASS", "within", "show_table",
           "source_text", "show_source", "fit_source", "SOURCE_WIDTH", "Criterion", "at_least", "at_most", "above_chance", "sooner",
           "more_than", "is_true", "VERDICTS", "UNCOUNTED", "CHECKS", "KINDS", "MIN_SEEDS", "Judgement",
           "judge", "judge_cases", "check", "verdict_of", "sign_test_seeds", "detectable_effect",
           "chance_of", "cites_a_diagnostic", "Why", "counts_sentence", "Claim", "Ledger",
           "Bounded", "bounded", "costs_to_target", "value_by", "common_budget", "comparator",
           "Paired", "paired",
           "ledger_dir", "load_ledgers",
           "judged_twice_markdown", "probe_note", "plural"]

NEVER = "never"
MISSING = "—"

#: history keys computed from a row: ``traffic_bits`` is uplink plus downlink
DERIVED_KEYS: dict[str, Callable[[dict], float]] = {
    "traffic_bits": lambda row: row["uplink_bits"] + row["downlink_bits"],
}


# -- history queries ------------------------------------------------------------------------
def row_value(row: dict, key: str):
    """``row[key]``, or a derived key of :data:`DERIVED_KEYS`."""
    return DERIVED_KEYS[key](row) if key in DERIVED_KEYS else row.get(key)


def evaluated(result: dict, y: str = "acc_personal") -> list[dict]:
    """The history rows of ``result`` where ``y`` was evaluated (not ``None``)."""
    return [row for row in result["history"] if row_value(row, y) is not None]


def final(result: dict, y: str = "acc_personal", last: int = 1) -> float:
    """The mean of the last ``last`` evaluated values of ``y`` (``nan`` if it was never
    evaluated); ``last=1`` is the final value."""
    if last < 1:
        raise ValueError(f"last must be at least 1, got {last}")
    rows = evaluated(result, y)[-last:]
    return float(np.mean([row_value(r, y) for r in rows])) if rows else math.nan


def total(result: dict, key: str) -> float:
    """The end-of-run value of the cumulative ``key`` (``time_s``, ``traffic_bits``,
    ``energy_j``, ...): its last value in the history (``nan`` if it has none)."""
    for row in reversed(result["history"]):
        try:
            value = row_value(row, key)
        except KeyError:            # a derived key whose parts this row lacks
            continue
        if value is not None:
            return float(value)
    return math.nan


def mean_finite(values) -> float:
    """The mean of the finite values (``nan`` and ``inf`` left out; ``nan`` if none is)."""
    v = np.asarray(list(values), dtype=float)
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else math.nan


def value_at(result: dict, budget: float, x: str = "time_s", y: str = "acc_personal") -> float:
    """The last evaluated ``y`` whose cumulative ``x`` is within ``budget`` (``nan`` if none
    is: a run not yet evaluated, which :func:`judge` would read as censored; for a claim's
    values use :func:`value_by`, which says so instead)."""
    rows = [row for row in evaluated(result, y) if row_value(row, x) <= budget]
    return float(row_value(rows[-1], y)) if rows else math.nan


def first_reach(result: dict, target: float, x: str = "time_s", y: str = "acc_personal") -> float:
    """Cumulative ``x`` (time, round, bits, energy, ...) at the first evaluation where ``y``
    reaches ``target``; ``math.inf`` if it never does."""
    for row in evaluated(result, y):
        if row_value(row, y) >= target:
            return float(row_value(row, x))
    return math.inf


def per_seed(results: Iterable[dict], query: Callable[[dict], float], *args, **kwargs) -> np.ndarray:
    """``query(result, *args, **kwargs)`` for each run (one per seed), as an array."""
    return np.array([query(r, *args, **kwargs) for r in results], dtype=float)


def value_by(result: dict, budget: float, x: str = "time_s", y: str = "acc_personal") -> float:
    """``y`` as the run stood at ``budget`` of ``x``: its last evaluation at or before the
    budget. A run not yet evaluated by then has no value to read, which is not the same as a
    target never reached (that is censored, :class:`Bounded`): it raises ``ValueError``
    naming the run, the budget and its first evaluation, so the chapter sets the budget at or
    after every run's first evaluation (:func:`common_budget`) instead of losing the seed."""
    rows = [row for row in evaluated(result, y) if row_value(row, x) <= budget]
    if rows:
        return float(row_value(rows[-1], y))
    first = evaluated(result, y)
    config = result.get("config", {})
    when = f"its first is at {x} {row_value(first[0], x):g}" if first else f"it has no {y} at all"
    raise ValueError(f"{config.get('method', 'a run')} (seed {config.get('seed', '?')}) has no {y} "
                     f"evaluated by {x} {budget:g}; {when}")


def common_budget(results: Iterable[dict], x: str = "time_s", y: str = "acc_personal") -> float:
    """The smallest budget of ``x`` at which every run has an evaluation of ``y``: the
    latest of the runs' first evaluations (:func:`value_by` reads every run there)."""
    firsts = []
    for result in results:
        rows = evaluated(result, y)
        if not rows:
            raise ValueError(f"{result.get('config', {}).get('method', 'a run')} has no {y} evaluated")
        firsts.append(float(row_value(rows[0], x)))
    if not firsts:
        raise ValueError("a common budget needs at least one run")
    return max(firsts)


def _span(values) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(low, high, shown)`` of per-seed values: a :class:`Bounded`'s, or a plain array's
    (each value its own bounds)."""
    if isinstance(values, Bounded):
        return values.low, values.high, values.shown
    v = np.ravel(np.asarray(values, dtype=float))
    return v, v, v


@dataclass(frozen=True, eq=False)
class Bounded:
    """Per-seed values of which some are known only as a bound: seed ``i``'s value lies in
    ``[low[i], high[i]]``, and ``shown[i]`` is what prints (``inf`` for a target never
    reached, as :func:`first_reach` gives it). A cost to a target that a run never reached
    within its horizon (its whole budget of ``x``) is at least the horizon: ``low`` is the
    horizon, ``high`` is ``inf`` (:func:`bounded`, :func:`costs_to_target`). Ratios
    (:func:`ratio`) and differences (``a - b``) carry the bounds through by interval
    arithmetic, so :func:`judge` uses each seed's bound in the direction it is valid."""

    low: np.ndarray
    high: np.ndarray
    shown: np.ndarray

    def __post_init__(self):
        for name in ("low", "high", "shown"):
            object.__setattr__(self, name, np.ravel(np.asarray(getattr(self, name), dtype=float)))
        if not self.low.shape == self.high.shape == self.shown.shape:
            raise ValueError(f"bounds of {self.low.size} and {self.high.size} seeds for "
                             f"{self.shown.size} values")
        if (self.low > self.high).any():
            raise ValueError("a lower bound lies above its upper bound")

    def __len__(self) -> int:
        return int(self.shown.size)

    @property
    def exact(self) -> np.ndarray:
        """Which seeds' values are known exactly (``low == high``)."""
        return self.low == self.high

    def __sub__(self, other) -> "Bounded":
        low, high, shown = _span(other)
        with np.errstate(invalid="ignore"):
            return Bounded(self.low - high, self.high - low, self.shown - shown)

    def __rsub__(self, other) -> "Bounded":
        low, high, shown = _span(other)
        with np.errstate(invalid="ignore"):
            return Bounded(low - self.high, high - self.low, shown - self.shown)

    def __mul__(self, factor: float) -> "Bounded":
        if not float(factor) > 0:
            raise ValueError(f"a bounded value is scaled by a positive factor only, got {factor}")
        return Bounded(self.low * factor, self.high * factor, self.shown * factor)

    __rmul__ = __mul__


def bounded(costs, horizon) -> Bounded:
    """Per-seed costs to a target (``inf`` where it was never reached, :func:`first_reach`)
    with each run's ``horizon`` (its whole budget of the cost: a number, or one per seed):
    a never-reached cost is at least its horizon, so it becomes the bound ``[horizon, inf)``.
    A finite cost above its horizon, or a horizon that is not a positive number, raises
    ``ValueError``."""
    costs = np.ravel(np.asarray(costs, dtype=float))
    horizon = np.broadcast_to(np.asarray(horizon, dtype=float), costs.shape)
    never = np.isposinf(costs)
    if not (np.isfinite(horizon[never]) & (horizon[never] > 0)).all():
        raise ValueError("the horizon of a never-reached cost must be a positive number")
    if (costs[np.isfinite(costs)] > horizon[np.isfinite(costs)]).any():
        raise ValueError("a cost to the target lies beyond its run's horizon")
    return Bounded(np.where(never, horizon, costs), costs, costs)


def costs_to_target(results: Iterable[dict], target: float, x: str = "time_s",
                    y: str = "acc_personal") -> Bounded:
    """Each run's cost of ``x`` to reach ``target`` in ``y`` (:func:`first_reach`), with a
    never-reached one bounded below by the run's whole budget of ``x`` (:func:`total`)."""
    results = list(results)
    return bounded(per_seed(results, first_reach, target, x, y), per_seed(results, total, x))


def ratio(baseline, method):
    """Per seed ``baseline / method`` (a speedup, a traffic saving, a ratio of counts). For
    costs to a target, ``inf`` (never reached) stays apart: the ratio is ``inf`` where only
    the method reached it, ``0`` where only the baseline did, ``nan`` where neither did;
    ``x / 0`` is ``inf`` and ``0 / 0`` is ``nan``. Where either side is :class:`Bounded`
    (:func:`costs_to_target`), so is the ratio: a rival that never reached the target gives
    a lower bound ``horizon / method cost`` on the speed-up, a method that never reached it
    an upper bound ``rival cost / horizon``."""
    if isinstance(baseline, Bounded) or isinstance(method, Bounded):
        (b_low, b_high, b), (m_low, m_high, m) = _span(baseline), _span(method)
        with np.errstate(divide="ignore", invalid="ignore"):
            low, high = b_low / m_high, b_high / m_low
        low, high = np.nan_to_num(low, nan=0.0, posinf=math.inf), np.nan_to_num(high, nan=math.inf, posinf=math.inf)
        return Bounded(low, high, ratio(b, m))
    b, m = np.asarray(baseline, float), np.asarray(method, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = b / m
    out[np.isinf(b) & np.isfinite(m)] = math.inf
    out[np.isfinite(b) & np.isinf(m)] = 0.0
    return out


def best_on_average(values: dict, names: Iterable[str], lower: bool = False) -> str:
    """The pre-specified comparator of a paired claim: of ``names``, the one whose mean of
    ``values[name]`` over the seeds is highest (``lower``: lowest, for costs), chosen once;
    each seed is then paired with that one rival, never with the best rival of that seed
    (a per-seed maximum over noisy rivals is biased against the method). ``nan`` seeds are
    left out of a mean, an ``inf`` makes it ``inf``; a rival with no value is passed over;
    ties go to the first name."""
    names = list(names)
    if not names:
        raise ValueError("a comparator needs at least one rival")
    seeds = {n: np.ravel(np.asarray(values[n], dtype=float)) for n in names}
    means = {n: float(np.mean(v[~np.isnan(v)])) for n, v in seeds.items() if not np.isnan(v).all()}
    if not means:
        return names[0]
    return (min if lower else max)(means, key=means.get)


def comparator(values: dict, names: Iterable[str], lower: bool = False) -> str:
    """The pre-specified comparator of a paired claim, chosen among the rivals of ``names``
    that have a value on *every* seed (a rival not yet evaluated on a seed, ``nan``, is
    passed over: chosen on fewer seeds than the claim uses, it would be chosen by the seeds
    it has): the one with the highest mean over the seeds (``lower``: the lowest, for
    costs; ``inf``, a target never reached, makes a mean ``inf``), chosen once for all
    seeds, never the best rival of each seed. Ties go to the first name; no rival with a
    value on every seed raises ``ValueError``."""
    names = list(names)
    if not names:
        raise ValueError("a comparator needs at least one rival")
    complete = [n for n in names if not np.isnan(np.asarray(values[n], dtype=float)).any()]
    if not complete:
        raise ValueError(f"no rival of {', '.join(names)} has a value on every seed")
    return best_on_average(values, complete, lower)


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (``ddof=1``; ``nan`` for one value) of the finite
    values; ``inf`` mean if any value is infinite (a seed that never reached a target),
    ``nan`` if none is given."""
    v = np.asarray(list(values), dtype=float)
    if v.size == 0 or np.isnan(v).all():
        return math.nan, math.nan
    if np.isinf(v).any():
        return math.inf, math.nan
    v = v[~np.isnan(v)]
    return float(v.mean()), (float(v.std(ddof=1)) if v.size > 1 else math.nan)


# -- formatting -------------------------------------------------------------------------------
def fmt(value, digits: int = 1, unit: str = "", scale: float = 1.0) -> str:
    """A number for people: ``fmt(0.7731, 1, "%", 100)`` is ``"77.3%"``; ``inf`` is "never",
    ``None``/``nan`` is "—"; booleans are "yes"/"no"; integers print with thousands commas."""
    if value is None:
        return MISSING
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)) and scale == 1.0:
        return f"{int(value):,}{unit}"
    v = float(value) * scale
    if math.isnan(v):
        return MISSING
    if math.isinf(v):
        return NEVER if v > 0 else "-∞"
    return f"{v:,.{digits}f}{unit}"


def fmt_mean_sd(values: Sequence[float], digits: int = 1, unit: str = "", scale: float = 1.0,
                seeds: bool = True) -> str:
    """``"77.3 ± 1.2% (3 seeds)"`` from per-seed values; one seed prints no spread; seeds that
    never reached a target are counted: ``"never (2 of 3 seeds)"``, ``"12.0 s; never on 1 of 3"``."""
    v = np.asarray(list(values), dtype=float)
    n = int(v.size)
    tail = f" ({plural(n, 'seed', 'seeds')})" if seeds and n else ""
    if n == 0 or np.isnan(v).all():
        return MISSING
    never = int(np.isposinf(v).sum())
    finite = v[np.isfinite(v)]
    if never == n:
        return f"{NEVER}{tail}"
    if finite.size == 0:            # only nan and -inf besides the never-reached seeds
        text = MISSING
    elif finite.size == 1:
        text = fmt(finite[0], digits, unit, scale)
    else:
        text = f"{fmt(finite.mean(), digits, '', scale)} ± {fmt(finite.std(ddof=1), digits, '', scale)}{unit}"
    if never:
        return f"{text}; {NEVER} on {of_seeds(never, n)}"
    return text + tail


def listing(pairs, sep: str = ", ", between: str = " ") -> str:
    """A mapping as a phrase for people, not a Python ``dict``: ``{"FedAvg": "75%", "Heroes":
    "30%"}`` is ``"FedAvg 75%, Heroes 30%"``; numbers are :func:`fmt`-ed, "none" if empty."""
    items = dict(pairs).items()
    return sep.join(f"{k}{between}{fmt(v) if isinstance(v, (float, np.floating)) else v}"
                    for k, v in items) if items else "none"


def numbers(values, form: str = "{:g}") -> str:
    """Numbers as a phrase for people, not a printed list or array: ``numbers([25.0, 20.0,
    3.0])`` is ``"25, 20, 3"``; ``form`` formats each (e.g. ``"{:.2f}"``)."""
    return ", ".join(form.format(float(v)) for v in np.ravel(np.asarray(values, dtype=float)))


def of_seeds(k: int, n: int) -> str:
    """``"2 of 3 seeds"``, and ``"1 of 1 seed"``: a count of the seeds out of ``n``."""
    return f"{int(k)} of {plural(int(n), 'seed', 'seeds')}"


def compare(a: float, b: float, digits: int = 1, unit: str = "", scale: float = 1.0) -> str:
    """``"77.3 < 77.4"`` with the sign computed from the values (as printed at ``digits``)."""
    ta, tb = fmt(a, digits, unit, scale), fmt(b, digits, unit, scale)
    if ta == tb:
        sign = "="
    elif math.isnan(float(a)) or math.isnan(float(b)):
        sign = "vs"
    else:
        sign = "<" if float(a) < float(b) else ">"
    return f"{ta} {sign} {tb}"


def escape_cell(text) -> str:
    """Table-cell text: ``|`` escaped (``|w|_J`` must not split a cell), newlines folded."""
    return re.sub(r"(?<!\\)\|", r"\\|", str(text)).replace("\n", " ")


def markdown_table(rows: Iterable[Sequence], header: Sequence[str], align: Sequence[str] | None = None) -> str:
    """A Markdown (MyST) table from ``rows`` of cells; cells are escaped, numbers formatted by
    :func:`fmt`. ``align`` holds one of ``"l"``, ``"r"``, ``"c"`` per column."""
    def cell(value):
        if isinstance(value, (float, np.floating, int, np.integer, bool, np.bool_)) or value is None:
            return fmt(value)
        return escape_cell(value)

    marks = {"l": ":---", "r": "---:", "c": ":---:", None: "---"}
    align = list(align or [None] * len(header))
    lines = ["| " + " | ".join(escape_cell(h) for h in header) + " |",
             "|" + "|".join(marks[a] for a in align) + "|"]
    for row in rows:
        row = list(row)
        if len(row) != len(header):
            raise ValueError(f"a table row has {len(row)} cells, the header {len(header)}")
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines)


#: the CSS class of every :func:`folded_table`, and that of a claim ledger's table (the
#: book's stylesheet reads both, the browser test the second)
FOLDED_CLASS = "hetfl-folded"
LEDGER_CLASS = "hetfl-ledger"

_BLOCK_START = re.compile(r"^(\d*)([-+*#>.)])(?=\s|$)")


def _block(text) -> str:
    """A table cell's text as one Markdown paragraph: a leading list, heading or quote
    marker escaped (the cell holds text, not a list)."""
    text = " ".join(str(text).split())
    return _BLOCK_START.sub(r"\1\\\2", text, count=1) or MISSING


def folded_table(rows: Iterable[Sequence], header: Sequence[str], details: Sequence[Sequence],
                 detail_header: Sequence[str], summary: str, css_class: str = "") -> str:
    """A table whose every row has a full-width row beneath it holding a folded
    ``<details>`` (its line reads ``summary``): the row's ``details`` cells, each after its
    ``detail_header`` name (a ``None`` left out). Each pair of rows is one ``<tbody>``, so a
    stylesheet stripes pairs. The skeleton is HTML and every cell a Markdown paragraph, so
    MyST (and Jupyter) render the cells' math, emphasis and references."""
    rows, details = [list(r) for r in rows], [list(d) for d in details]
    if len(rows) != len(details):
        raise ValueError(f"{len(rows)} rows but {len(details)} details")
    out = [f'<table class="{" ".join(["table", FOLDED_CLASS, css_class]).strip()}">',
           "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr></thead>"]
    for row, detail in zip(rows, details):
        if len(row) != len(header) or len(detail) != len(detail_header):
            raise ValueError(f"a row has {len(row)} cells and {len(detail)} details; the header "
                             f"{len(header)} and {len(detail_header)}")
        cells = [fmt(v) if isinstance(v, (float, np.floating, int, np.integer)) else v for v in row]
        out.append('<tbody><tr class="folded-row"><td>\n\n'
                   + "\n\n</td><td>\n\n".join(map(_block, cells)) + "\n\n</td></tr>")
        text = "\n\n".join(f"**{name[:1].upper() + name[1:]}:** {' '.join(str(value).split())}"
                             for name, value in zip(detail_header, detail) if value is not None)
        out.append(f'<tr class="folded-detail"><td colspan="{len(header)}"><details>'
                   f"<summary>{html.escape(summary)}</summary>\n\n{text}\n\n</details></td></tr></tbody>")
    out.append("</table>")
    return "\n".join(out)


def show_table(rows: Iterable[Sequence], header: Sequence[str], caption: str = "",
               css_class: str = "", **kwargs) -> None:
    """Display :func:`markdown_table` in a notebook, with an optional caption line above, in a
    ``<div>`` of ``css_class`` if one is given (:func:`within`)."""
    from IPython.display import Markdown, display

    text = within(markdown_table(rows, header, **kwargs), css_class)
    display(Markdown(f"{caption}\n\n{text}" if caption else text))


#: the CSS class of a table of numbers, whose values never wrap (the book's stylesheet)
NUMBERS_CLASS = "hetfl-numbers"


def within(markdown: str, css_class: str = "") -> str:
    """``markdown`` inside a ``<div>`` of ``css_class`` (blank lines around it, so MyST and
    Jupyter still parse it as Markdown); unchanged without a class."""
    if not css_class:
        return markdown
    return f'<div class="{html.escape(css_class)}">\n\n{markdown}\n\n</div>'


# -- source printer ---------------------------------------------------------------------------
def source_text(obj, docstring: bool = False) -> str:
    """The source of a function or class, dedented to valid Python, its docstrings removed
    (unless ``docstring``)."""
    text = textwrap.dedent(inspect.getsource(obj))
    if docstring:
        return text
    drop = set()
    for node in ast.walk(ast.parse(text)):
        # a docstring-only body keeps its docstring, to stay a valid body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and len(node.body) > 1 \
                and ast.get_docstring(node, clean=False) is not None:
            drop.update(range(node.body[0].lineno - 1, node.body[0].end_lineno))
    return "".join(line for i, line in enumerate(text.splitlines(keepends=True)) if i not in drop)


#: the widest printed source line :func:`show_source` aims at (a page's code column)
SOURCE_WIDTH = 76


def _break_point(text: str, width: int) -> tuple[int, int, int] | None:
    """Where the first line of ``text`` wider than ``width`` can break: ``(row, col,
    indent)`` just after a comma inside brackets (so the break is an implicit
    continuation), the last such comma within ``width`` (else the first one), and the
    column its continuation starts at: under its open bracket, or at the line's own
    indent where the bracket ends its line (a hanging indent); ``None`` if no wide line
    has one."""
    lines, stack, fstring, opened = text.splitlines(), [], 0, None
    breaks: dict[int, list[tuple[int, int]]] = {}
    starts = {getattr(tokenize, "FSTRING_START", -1)}
    ends = {getattr(tokenize, "FSTRING_END", -1)}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if opened is not None and tok.type in (tokenize.NL, tokenize.COMMENT):
            stack[-1] = None                # a hanging bracket: continue at the indent
        opened = None
        fstring += (tok.type in starts) - (tok.type in ends)
        if tok.type != tokenize.OP or fstring:
            continue
        if tok.string in "([{":
            stack.append(tok.start[1] + 1)
            opened = tok
        elif tok.string in ")]}":
            stack.pop()
        elif tok.string == "," and stack:
            row, col = tok.end
            line = lines[row - 1]
            if line[col:].strip() and not line[col:].lstrip().startswith("#"):
                indent = stack[-1] if stack[-1] is not None else len(line) - len(line.lstrip())
                breaks.setdefault(row, []).append((col, indent))
    for row, line in enumerate(lines, 1):
        if len(line) > width and breaks.get(row):
            fitting = [b for b in breaks[row] if b[0] <= width]
            col, indent = fitting[-1] if fitting else breaks[row][0]
            if indent < col:
                return row, col, indent
    return None


def fit_source(text: str, width: int = SOURCE_WIDTH) -> str:
    """Python source with its lines wider than ``width`` broken after commas inside
    brackets, each continuation under its open bracket, where a line has such a comma
    (the code and its tokens are unchanged; a line with none is left as it is). A wide
    line's trailing comment first moves to two spaces after its code."""
    lines = text.split("\n")
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type != tokenize.COMMENT:
            continue
        (row, col), line = tok.start, lines[tok.start[0] - 1]
        if len(line) > width and line[:col].strip():
            lines[row - 1] = f"{line[:col].rstrip()}  {line[col:]}"
    text = "\n".join(lines)
    for _ in range(text.count(",") + 1):
        at = _break_point(text, width)
        if at is None:
            break
        row, col, indent = at
        lines = text.split("\n")
        line = lines[row - 1]
        lines[row - 1:row] = [line[:col].rstrip(), " " * indent + line[col:].lstrip()]
        text = "\n".join(lines)
    return text


def show_source(*objs, docstring: bool = False, width: int = SOURCE_WIDTH) -> None:
    """Print the source of each object (see :func:`source_text`), separated by a blank line,
    its wide lines broken to fit ``width`` columns where they can (:func:`fit_source`)."""
    print(fit_source("\n".join(source_text(o, docstring) for o in objs).rstrip(), width))


# -- criteria and verdicts --------------------------------------------------------------------
@dataclass(frozen=True)
class Criterion:
    """A test a claim's measured values must pass, and its text for the ledger: ``test``
    judges one seed's value; a criterion that compares with a number also carries ``bound``,
    ``op`` (``">="``, ``">"``, ``"<="`` or ``"<"``) and ``log`` (the values are ratios, such
    as speed-ups, judged on the log scale), for :func:`judge` to use. Its ``unit`` is the
    unit a claim shows its values in unless told otherwise: the bound's (``" points"``),
    none for a ratio judged on the log scale, whose values show as plain numbers with two
    decimals (:attr:`digits`)."""

    text: str
    test: Callable[[float], bool]
    bound: float | None = None
    op: str | None = None
    log: bool = False
    unit: str = ""

    @property
    def digits(self) -> int:
        """The decimals a claim shows its values with unless told otherwise: 2 for a ratio
        judged on the log scale, else 1."""
        return 2 if self.log else 1

    def __call__(self, value) -> bool:
        return bool(self.test(value))


_OPS = {">=": lambda v, b: v >= b, ">": lambda v, b: v > b,
        "<=": lambda v, b: v <= b, "<": lambda v, b: v < b}


def _num(bound: float, unit: str) -> str:
    """``"3 points"``, and ``"1 point"`` for a bound of exactly one."""
    if abs(bound) == 1 and re.fullmatch(r" [a-z]+s", unit):
        unit = unit[:-1]
    return f"{bound:g}{unit}"


def _compared(text: str, bound: float, op: str, log: bool, unit: str = "") -> Criterion:
    if log and not bound > 0:
        raise ValueError("a ratio judged on the log scale needs a positive bound")
    return Criterion(text, lambda v: _OPS[op](v, bound), bound=float(bound), op=op, log=log,
                     unit="" if log else unit)


def at_least(bound: float, unit: str = "", what: str = "value", log: bool = False) -> Criterion:
    """Passes when the value is ``>= bound`` (a value that is ``nan`` fails); ``log``: the
    values are ratios, judged on the log scale."""
    return _compared(f"{what} ≥ {_num(bound, unit)}", bound, ">=", log, unit)


def at_most(bound: float, unit: str = "", what: str = "value", log: bool = False) -> Criterion:
    """Passes when the value is ``<= bound`` (``inf``, a target never reached, fails unless
    the bound is ``inf``; ``nan`` fails); ``log``: the values are ratios."""
    return _compared(f"{what} ≤ {_num(bound, unit)}", bound, "<=", log, unit)


def above_chance(chance: float, margin: float, unit: str = "", what: str = "accuracy") -> Criterion:
    """Passes when the value clears ``chance`` (or an untrained model's score) by ``margin``;
    a claim pitted against chance must state a positive margin."""
    if not margin > 0:
        raise ValueError("a comparison with chance level needs a positive margin")
    return _compared(f"{what} ≥ chance {_num(chance, unit)} + {_num(margin, unit)}",
                     chance + margin, ">=", False, unit)


def more_than(bound: float, unit: str = "", what: str = "value", log: bool = False) -> Criterion:
    """Passes when the value is strictly above ``bound`` (a drop of 0 is no drop)."""
    return _compared(f"{what} > {_num(bound, unit)}", bound, ">", log, unit)


def sooner(what: str = "cost to the target", factor: float = 1.0) -> Criterion:
    """A criterion on a per-seed ratio ``rival cost / method cost`` to a common target
    (:func:`ratio`): the method reaches it sooner when the ratio exceeds ``factor`` (1: any
    saving; 1 / 0.312 = 3.2: "68.8% less time"). Judged on the log scale."""
    return more_than(factor, "x", f"{what}, rival / method", log=True)


def is_true(text: str) -> Criterion:
    """For per-seed booleans computed by the chapter (e.g. "first to reach the target"):
    ``text`` says what each seed's boolean asserts. A paper claim judged on booleans is a
    sign test (:func:`judge`): it decides only from :func:`sign_test_seeds` seeds on (4 at
    the 10% level), and is *indicative* below; on fewer seeds, pass the number behind the
    boolean with its margin instead. An invariant's booleans are checked, never judged."""
    return Criterion(text, lambda v: bool(v))


#: the verdicts the scorecard counts (claims on at least :data:`MIN_SEEDS` seeds)
VERDICTS = ("holds", "fails", "inconclusive")
#: verdicts shown but never counted: too few seeds, or a target neither side reached
UNCOUNTED = ("indicative", "untestable")
#: what an invariant shows: true on every seed, or not (checked, never judged by the rule)
CHECKS = ("checked", "violated")
#: what a claim is: one of the paper's claims (counted), a prediction of this book's own
#: (shown apart), or a quantity the code enforces (a check, never counted)
KINDS = ("paper", "prediction", "invariant")
#: the fewest paired seeds a counted verdict rests on
MIN_SEEDS = 3
#: the one-sided confidence of each bound of the interval
CONFIDENCE = 0.90
#: the power at which :func:`detectable_effect` states the smallest effect a row can detect
POWER = 0.80


@dataclass(frozen=True)
class Judgement:
    """What the rule concludes from a claim's per-seed values (see :func:`judge`)."""

    verdict: str                            # holds / fails / inconclusive / indicative / untestable
    method: str                             # "t-interval", "sign test", "cases", ...
    n: int                                  # the seeds judged (censored ones left out)
    censored: int = 0                       # seeds where neither side reached the target
    interval: tuple[float, float] | None = None   # one-sided bounds of the mean, in value units
    narrow: bool = False                    # holds, but within a fifth of the half-width
    bounded: int = 0                        # seeds known only as a bound (the horizon)
    chance: tuple[float, float] = (math.nan, math.nan)   # P(holds), P(fails) on the margin
    detectable: float = math.nan            # smallest effect past the margin it detects (power 80%)
    cases: dict = field(default_factory=dict)   # per case: its own judgement (judge_cases)


@functools.lru_cache(maxsize=None)
def _t_quantile(n: int, confidence: float = CONFIDENCE) -> float:
    from scipy.stats import t

    return float(t.ppf(confidence, n - 1))


def sign_test_seeds(confidence: float = CONFIDENCE) -> int:
    """The fewest seeds on which a sign test at one-sided ``confidence`` can decide at all:
    all ``n`` passing must be rarer than ``1 - confidence`` for a fair coin (4 at 90%)."""
    return math.ceil(math.log(1 - confidence) / math.log(0.5))


def _sign_test(passes: Sequence[bool], confidence: float = CONFIDENCE) -> str:
    """*holds* when so many seeds pass that it would happen by chance (each seed a fair
    coin) with probability at most ``1 - confidence``; *fails* likewise for the failures."""
    from scipy.stats import binom

    n, k = len(passes), int(sum(passes))
    if binom.sf(k - 1, n, 0.5) <= 1 - confidence:
        return "holds"
    if binom.cdf(k, n, 0.5) <= 1 - confidence:
        return "fails"
    return "inconclusive"


def _sign_chance(n: int, confidence: float = CONFIDENCE) -> float:
    """P(the sign test says *holds*) on ``n`` seeds when each passes as a fair coin (and so
    P(*fails*)): the largest tail of Binomial(n, 1/2) at most ``1 - confidence``."""
    from scipy.stats import binom

    k = next((k for k in range(n + 1) if binom.sf(k - 1, n, 0.5) <= 1 - confidence), n + 1)
    return float(binom.sf(k - 1, n, 0.5))


def detectable_effect(sd: float, n: int, confidence: float = CONFIDENCE, power: float = POWER) -> float:
    """The smallest true effect past the margin (in the values' units) that the t-interval
    rule on ``n`` seeds of spread ``sd`` says *holds* for with probability ``power``: the
    noncentral t solves ``P(T'(n - 1, delta sqrt(n) / sd) > t_confidence) = power``
    (``nan`` below two seeds or without a finite spread; 0 for no spread)."""
    if n < 2 or not np.isfinite(sd):
        return math.nan
    return float(_noncentrality(n, confidence, power) * sd / math.sqrt(n)) if sd else 0.0


@functools.lru_cache(maxsize=None)
def _noncentrality(n: int, confidence: float, power: float) -> float:
    """The noncentrality at which a one-sided t test on ``n`` values at ``confidence``
    rejects with probability ``power``."""
    from scipy.optimize import brentq
    from scipy.stats import nct

    q = _t_quantile(n, confidence)
    return float(brentq(lambda nc: nct.sf(q, n - 1, nc) - power, 0.0, 100.0))


def _per_seed_array(values) -> np.ndarray:
    """Per-seed values as a flat array: of booleans where every value is one, else of floats."""
    if isinstance(values, Bounded):
        return values.shown
    raw = list(np.ravel(np.asarray(values, dtype=object)))
    boolean = bool(raw) and all(isinstance(v, (bool, np.bool_)) for v in raw)
    return np.array(raw, dtype=bool if boolean else float)


def _one_sided(x: np.ndarray, confidence: float) -> tuple[float, float]:
    """Mean and one-sided t half-width of ``x``; an infinite entry makes the mean infinite
    (a bound that is no bound on that side)."""
    if np.isinf(x).any():
        return float(x.sum()), 0.0
    return float(x.mean()), _t_quantile(x.size, confidence) * float(x.std(ddof=1)) / math.sqrt(x.size)


def judge(values, criterion: Criterion, confidence: float = CONFIDENCE) -> Judgement:
    """The verdict on a claim from its per-seed values (paired differences, ratios or
    booleans, one per seed, or :class:`Bounded` values).

    * Values that are ``nan``, and bounded seeds with no bound on either side, are
      censored seeds (neither side reached the target) and are left out; if every seed is
      censored the claim is *untestable*.
    * Fewer than :data:`MIN_SEEDS` seeds left: *indicative* (shown, never counted).
    * A criterion with a bound: the one-sided t-interval of the mean at ``confidence``
      (90%; sample sd, ``ddof=1``; on the log scale for ratios). *Holds* if the bound on
      the claim's side lies strictly past the margin, *fails* if the other bound lies
      strictly short of it, *inconclusive* otherwise. On symmetric values with the effect
      exactly on the margin it says *holds* 10% of the time and *fails* 10% (more under
      strong skew at 3 seeds), and its power grows with the seeds.
    * A bound that lands exactly on the margin decides nothing: all seeds equal to the
      margin (no spread, a zero-width interval) is *inconclusive*. Values with no spread
      strictly clear of it decide, and the method says "zero spread" (the interval then
      carries no uncertainty). Continuous values have no spread with probability 0, so this
      leaves the 10% on the margin as it is; values that tie by construction (counts of
      cases, saturated scores) belong in :func:`judge_cases` or a check, not here.
    * :class:`Bounded` seeds (a target one side never reached within its horizon): the
      claim's side is judged on each seed's bound in the claim's direction, the other
      side on the bound in the other. For "ratio > b" a rival that never reached the target
      gives ``horizon / method cost``, a lower bound: the lower bounds are a variable
      (the ratio with the rival's cost cut at the horizon) whose mean lies at or below the
      true mean, so the t lower bound of the lower bounds is a lower bound of the true mean
      at the same confidence (as far as the t-interval itself is, on roughly symmetric
      values). A method that never reached it gives no lower bound at all (0), which rules
      out *holds*, and its upper bound ``rival cost / horizon`` enters the test for *fails*,
      where a rival that never reached it (no upper bound) rules *fails* out. A seed's
      bound that already lies past the margin on the claim's side thus counts for the claim
      and never against it; the verdict says how many seeds were bounded.
    * Booleans, criteria without a bound, and plain infinite values (a target never
      reached, without its horizon): a sign test on the seeds that pass, at the same
      level; it cannot decide below :func:`sign_test_seeds` seeds (4), so there it is
      *indicative*.
    """
    shown = _per_seed_array(values)
    boolean = shown.dtype == bool
    if boolean:
        low = high = shown
        unknown = np.zeros(shown.size, bool)
    else:
        low, high, _ = _span(values)
        unknown = np.isnan(shown) if not isinstance(values, Bounded) else \
            np.isnan(low) | np.isnan(high) | ((low <= (0 if criterion.log else -math.inf)) & np.isposinf(high))
    keep = ~unknown
    n, censored = int(keep.sum()), int(unknown.sum())
    if n == 0:
        return Judgement("untestable", "untestable", 0, censored)
    if n < MIN_SEEDS:
        return Judgement("indicative", "indicative", n, censored)
    low, high = low[keep], high[keep]
    plain_infinite = not boolean and not isinstance(values, Bounded) and not np.isfinite(low).all()
    if boolean or criterion.bound is None or plain_infinite or \
            (criterion.log and not isinstance(values, Bounded) and (low <= 0).any()):
        needs = sign_test_seeds(confidence)
        if n < needs:
            return Judgement("indicative", f"sign test, needs {needs} seeds", n, censored)
        chance = _sign_chance(n, confidence)
        return Judgement(_sign_test([criterion(v) for v in shown[keep]], confidence), "sign test", n,
                         censored, chance=(chance, chance))
    bounded_seeds = int((low != high).sum())
    with np.errstate(divide="ignore"):
        low_x, high_x = (np.log(low), np.log(high)) if criterion.log else (low, high)
    bound = math.log(criterion.bound) if criterion.log else criterion.bound
    upward = criterion.op in (">=", ">")
    lo_mean, lo_half = _one_sided(low_x, confidence)
    hi_mean, hi_half = _one_sided(high_x, confidence)
    lo, hi = lo_mean - lo_half, hi_mean + hi_half
    if upward:
        holds, fails, sure, half = lo > bound, hi < bound, lo, lo_half
    else:
        holds, fails, sure, half = hi < bound, lo > bound, hi, hi_half
    verdict = "holds" if holds else "fails" if fails else "inconclusive"
    interval = (math.exp(lo), math.exp(hi)) if criterion.log else (lo, hi)
    narrow = verdict == "holds" and abs(sure - bound) < 0.2 * half
    spread = [x for x in (low_x, high_x) if np.isfinite(x).all()]
    sd = float(spread[0].std(ddof=1)) if spread else math.nan
    method = "t-interval" + (", zero spread" if sd == 0 else "")
    at_margin = 1 - confidence           # P(T > t_confidence) = 1 - confidence for each side
    effect = detectable_effect(sd, n, confidence)
    return Judgement(verdict, method, n, censored, interval, narrow, bounded_seeds,
                     (at_margin, at_margin), math.exp(effect) if criterion.log else effect)


def judge_cases(cases: dict, k: int, criterion: Criterion, confidence: float = CONFIDENCE) -> Judgement:
    """The verdict on "the claim holds in at least ``k`` of the ``m`` cases": each case
    (its own paired per-seed values, as for :func:`judge`) judged by its own interval, then
    the cases counted. *Holds* when ``k`` cases hold, *fails* when ``m - k + 1`` cases fail
    (so fewer than ``k`` can hold), *inconclusive* otherwise; *indicative* when fewer than
    ``k`` cases (for holds) and fewer than ``m - k + 1`` (for fails) rest on
    :data:`MIN_SEEDS` seeds.

    Each case is judged at a Bonferroni level so that the count keeps the rule's 10%: the
    claim is false when at most ``k - 1`` cases are past the margin, and then *holds* needs
    one of the other ``m - k + 1`` to hold by chance, so a case holds at ``1 - (1 -
    confidence) / (m - k + 1)``; likewise a case fails at ``1 - (1 - confidence) / k``.
    Without it, "3 of 4" with two cases exactly on the margin would hold 19% of the time
    (1 - 0.9²). For "in every case" (``k = m``) holds uses each case's own 90% interval."""
    m = len(cases)
    if m == 0 or not 1 <= k <= m:
        raise ValueError(f"'at least k of m cases' needs 1 <= k <= m, got k = {k} of {m} cases")
    alpha = 1 - confidence
    up = {name: judge(v, criterion, 1 - alpha / (m - k + 1)) for name, v in cases.items()}
    down = {name: judge(v, criterion, 1 - alpha / k) for name, v in cases.items()}
    held = sum(j.verdict == "holds" for j in up.values())
    failed = sum(j.verdict == "fails" for j in down.values())
    counted = [j for j in up.values() if j.verdict in VERDICTS]
    if held >= k:
        verdict = "holds"
    elif failed >= m - k + 1:
        verdict = "fails"
    elif len(counted) < min(k, m - k + 1):
        verdict = "untestable" if all(j.verdict == "untestable" for j in up.values()) else "indicative"
    else:
        verdict = "inconclusive"
    per_case = {}
    for name in cases:
        verdict_up, verdict_down = up[name].verdict, down[name].verdict
        per_case[name] = {"verdict": "fails" if verdict_down == "fails" and verdict_up != "holds" else verdict_up,
                          "interval": [up[name].interval[0], down[name].interval[1]]
                          if up[name].interval and down[name].interval else None}
    n = min((j.n for j in up.values()), default=0)
    chance = _cases_chance(m, k, n, confidence) if n >= MIN_SEEDS else (math.nan, math.nan)
    return Judgement(verdict, f"cases, {k} of {m}", n, sum(j.censored for j in up.values()),
                     bounded=sum(j.bounded for j in up.values()), chance=chance, cases=per_case)


def _cases_chance(m: int, k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """P(holds), P(fails) of :func:`judge_cases` when every case sits exactly on its margin
    (each case holds, or fails, with its own level's probability, the cases independent)."""
    from scipy.stats import binom, t as student

    alpha = 1 - confidence
    p_hold = float(student.sf(_t_quantile(n, 1 - alpha / (m - k + 1)), n - 1))
    p_fail = float(student.sf(_t_quantile(n, 1 - alpha / k), n - 1))
    return float(binom.sf(k - 1, m, p_hold)), float(binom.sf(m - k, m, p_fail))


def check(values, criterion: Criterion) -> Judgement:
    """An invariant (a quantity the code enforces) on its per-seed values: *checked* when
    ``criterion`` passes on every seed, else *violated*; never judged by the rule (its
    per-seed outcomes are facts of the code, not noisy estimates)."""
    shown = _per_seed_array(values)
    passes = [criterion(v) for v in shown]
    return Judgement("checked" if all(passes) else "violated", "checked on every seed", len(passes))


def verdict_of(passes: Sequence[bool]) -> str:
    """The verdict from per-seed outcomes alone: *indicative* below :data:`MIN_SEEDS`
    seeds or below the seeds a sign test needs to decide (:func:`sign_test_seeds`), else
    the sign test of :func:`judge`."""
    passes = [bool(p) for p in passes]
    if not passes:
        raise ValueError("a verdict needs at least one seed")
    return judge(passes, is_true("passes")).verdict


_REFERENCE = re.compile(r"\b(?:Figs?|Tables?|Eqs?|Secs?|Alg|Algorithm|Prop|Lemma|Theorem|Cor)\.?\s*"
                        r"[\dIVXivx][\w.–-]*")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_SEED_COUNT = re.compile(r"\b\d+ (?:of \d+ )?seeds?\b")


def _numbers(text: str) -> set[str]:
    """The numbers in ``text`` that are not part of a reference to a figure, table, ..."""
    return {n.replace(",", "") for n in _NUMBER.findall(_REFERENCE.sub(" ", text))}


def cites_a_diagnostic(why: str, *own: str) -> bool:
    """Whether ``why`` holds a number other than the claim's own values: a number that
    appears in none of ``own`` (the claim's measured text, the paper's value, the criterion,
    the statement). A screen only: a new digit is not yet a named diagnostic, and a claim's
    "why" counts as measured only when it names one (:class:`Why`)."""
    own = [_SEED_COUNT.sub(" ", text) for text in own]
    mine = set().union(*(_numbers(text) for text in own)) if own else set()
    return bool(_numbers(why) - mine)


@dataclass(frozen=True)
class Why:
    """A measured reason why a claim's result differs from the paper: the ``diagnostic``
    it cites, by name (``"final-round drift"``), and that diagnostic's measured ``value``
    (a number, or per-seed numbers), with an optional reading ``text``. Rendered by the
    library (:meth:`render`), so the number in a ledger is the diagnostic's own."""

    diagnostic: str
    value: object
    text: str = ""
    unit: str = ""
    digits: int = 2

    def __post_init__(self):
        if not str(self.diagnostic).strip():
            raise ValueError("a why must name the diagnostic it cites")

    def value_text(self) -> str:
        """The diagnostic's value for people: one number, or per-seed numbers."""
        v = np.ravel(np.asarray(self.value, dtype=float))
        return (fmt(v[0], self.digits, self.unit) if v.size == 1
                else ", ".join(fmt(x, self.digits) for x in v) + self.unit + " per seed")

    def render(self) -> str:
        """``"FedLPS drifts most (final-round drift = 0.42)"``."""
        cited = f"{self.diagnostic} = {self.value_text()}"
        return f"{self.text} ({cited})" if self.text else cited


def _why_parts(why) -> tuple[str, dict[str, str]]:
    """A claim's ``why`` (text, :class:`Why`, a mapping of diagnostic name to value, or a
    list of :class:`Why`) as its text and the named diagnostics it cites."""
    if isinstance(why, Why):
        why = [why]
    elif isinstance(why, dict):
        why = [Why(name, value) for name, value in why.items()]
    if isinstance(why, (list, tuple)):
        if not all(isinstance(w, Why) for w in why):
            raise ValueError("a why given as a list must hold Why(diagnostic, value) entries")
        return "; ".join(w.render() for w in why), {w.diagnostic: w.value_text() for w in why}
    return str(why or ""), {}


@dataclass
class Claim:
    """One of a paper's claims and what this book measured of it."""

    ref: str                       # where the paper says it: "Table I", "Fig. 4a", "Sec. III-D"
    statement: str                 # the claim, in a sentence
    paper: str                     # what the paper reports
    values: list                   # the measured value of each seed
    criterion: str                 # the test the values must pass, in words
    passes: list                   # each seed's outcome
    measured: str                  # the values for people: "77.3 ± 1.2% (3 seeds)"
    why: object = ""               # why it differs: a Why (named diagnostic), or a conjecture
    section: str = ""              # the label of the chapter section with the evidence
    headline: bool = False         # shown in the verdict box at the top of the chapter
    kind: str = "paper"            # paper claim, book prediction or invariant (KINDS)
    verdict: str = ""              # computed by Ledger.claim (judge)
    method: str = ""               # how the verdict was reached
    interval: list | None = None   # one-sided 90% bounds of the mean, in value units
    interval_text: str = ""        # the interval for people, in the claim's unit
    narrow: bool = False           # holds within a fifth of the interval's half-width
    pairs: list = field(default_factory=list)   # (method, rival) comparisons it judges
    setting: dict = field(default_factory=dict)  # what its runs ran with (setting_of)
    diagnostics: dict = field(default_factory=dict)  # the named diagnostics its why cites
    bounded: int = 0               # seeds known only as a bound by the run's horizon
    chance: list | None = None     # P(holds), P(fails) with the effect exactly on the margin
    detectable: str = ""           # the smallest effect past the margin its seeds detect
    cases: dict = field(default_factory=dict)   # per case: verdict and interval (claim_cases)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"claim kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        text, named = _why_parts(self.why)
        self.why, self.diagnostics = text, {**self.diagnostics, **named}
        if self.verdict not in ("holds", "checked"):
            why = self.why.strip()
            if not why:
                self.why = "conjecture: not investigated"
            elif not self.diagnostics and not why.lower().startswith("conjecture"):
                self.why = f"conjecture: {why}"

    def _repr_markdown_(self) -> str:
        """A claim left as a cell's last value shows as its verdict line."""
        return f"{self.ref}: {self.statement}: **{self.verdict_text}** ({_measured(self.measured)[0]})"

    @property
    def seeds(self) -> int:
        return len(self.values)

    @property
    def per_seed(self) -> str:
        """``"all"``, ``"none"`` or ``"some"``: how many seeds pass the criterion on their own."""
        k = sum(bool(p) for p in self.passes)
        return "all" if k == len(self.passes) else "none" if k == 0 else "some"

    @property
    def counted(self) -> bool:
        """Whether the scorecard counts it: a paper claim with a counted verdict."""
        return self.kind == "paper" and self.verdict in VERDICTS

    @property
    def verdict_text(self) -> str:
        """The verdict, with the seed count when it is too small to count, and "narrow"."""
        return _verdict_text(vars(self))


@dataclass(frozen=True)
class Paired:
    """A method's per-seed values paired with one rival's on the same seeds
    (:func:`paired`): ``values`` (the gap, or the rival-over-method ratio of costs), the
    two sides' own values, the runs behind them and the text :meth:`Ledger.claim` writes."""

    values: object                 # per seed: an array, or Bounded for costs to a target
    method: str
    rival: str
    method_values: np.ndarray
    rival_values: np.ndarray
    runs: tuple
    unit: str = ""
    digits: int = 1
    names: tuple[str, str] | None = None     # display names of method and rival

    def measured(self) -> str:
        """``"+7.2 ± 0.9 points (3 seeds); FedLPS 77.3 ± 1.2, FedAvg 70.1 ± 0.8"``."""
        mine, theirs = self.names or (self.method, self.rival)
        sides = (f"{mine} {fmt_mean_sd(self.method_values, self.digits, seeds=False)}, "
                 f"{theirs} {fmt_mean_sd(self.rival_values, self.digits, seeds=False)}")
        return f"{fmt_mean_sd(_per_seed_array(self.values), self.digits, self.unit)}; {sides}"


def _name(runs: list) -> str:
    """The method the runs ran (their configs' ``method``)."""
    names = {(r["config"] if isinstance(r, dict) else r.to_dict()).get("method") for r in runs}
    if len(names) != 1:
        raise ValueError(f"one side of a pair must run one method, got {sorted(map(str, names))}")
    return str(names.pop())


def paired(method_runs, rival_runs, query: Callable, *args, speedup: bool = False, scale: float = 1.0,
           unit: str = "", digits: int = 1, names: tuple[str, str] | None = None, **kwargs) -> Paired:
    """The method's and a rival's runs paired seed by seed (the seeds must match, in order):
    ``query(run, *args, **kwargs)`` on each, and per seed the gap ``scale * (method -
    rival)``; with ``speedup``, the query is a cost to a target (:func:`first_reach`) and
    the value is ``rival / method`` (:func:`ratio`), a never-reached cost bounded by its
    run's whole budget of the query's ``x`` (:class:`Bounded`). :meth:`Ledger.claim` takes
    the result as its values and writes the measured text, pairs and setting from it; the
    text names the two sides by ``names`` (display names), else by their registered names."""
    method_runs, rival_runs = list(method_runs), list(rival_runs)
    seeds = [[(r["config"] if isinstance(r, dict) else r.to_dict()).get("seed") for r in side]
             for side in (method_runs, rival_runs)]
    if seeds[0] != seeds[1]:
        raise ValueError(f"paired runs must share their seeds in order, got {seeds[0]} and {seeds[1]}")
    mine, theirs = per_seed(method_runs, query, *args, **kwargs), per_seed(rival_runs, query, *args, **kwargs)
    if speedup:
        x = kwargs.get("x", "time_s")
        values = ratio(bounded(theirs, per_seed(rival_runs, total, x)),
                       bounded(mine, per_seed(method_runs, total, x)))
        shown_mine, shown_theirs = mine, theirs
    else:
        values = scale * (mine - theirs)
        shown_mine, shown_theirs = scale * mine, scale * theirs
    return Paired(values, _name(method_runs), _name(rival_runs), shown_mine, shown_theirs,
                  tuple(method_runs + rival_runs), unit, digits, names)


def ledger_dir() -> Path:
    """Where ledgers are written: ``$HETFL_LEDGER_DIR`` (set by the book build) or
    ``~/.cache/hetfl/ledgers``."""
    return Path(os.environ.get("HETFL_LEDGER_DIR", Path.home() / ".cache" / "hetfl" / "ledgers")).expanduser()


class Ledger:
    """A chapter's claims: ``ledger.claim(...)`` for each, then ``ledger.show()`` and
    ``ledger.save()``. With ``why_where_missed`` a claim every seed passes (held, or
    indicative) keeps no why; with ``seeds_named`` a measured text given without its seed
    count gets it. A chapter states its claims through
    :class:`~hetfl_core.book.Chapter` (``book.state``), which adds its section.

    Example::

        ledger = Ledger("heroes", "Heroes", scale=scale)
        gap = paired(heroes_runs, fedavg_runs, final, scale=100, unit=" points")
        ledger.claim("Table II", "Heroes is more accurate than FedAvg", "+10.46 points", gap,
                     at_least(0, " points", "Heroes − FedAvg"))
        speedup = paired(heroes_runs, fedavg_runs, first_reach, 0.7, x="time_s", speedup=True)
        ledger.claim("Fig. 4a", "Heroes reaches 70% sooner", "3.28x", speedup, sooner(factor=2))
    """

    def __init__(self, chapter: str, title: str, scale: str = "", parameters: dict | None = None,
                 why_where_missed: bool = False, seeds_named: bool = False):
        self.chapter, self.title, self.scale = chapter, title, scale
        self.parameters = dict(parameters or {})
        self.claims: list[Claim] = []
        #: keep a claim's why only where some seed misses or it does not hold (or is
        #: indicative): a claim every seed passes needs no reason
        self.why_where_missed = why_where_missed
        #: a measured text given without its seed count gets it: "... (3 seeds)"
        self.seeds_named = seeds_named

    def claim(self, ref: str, statement: str, paper: str, values, criterion: Criterion,
              why="", digits: int | None = None, unit: str | None = None, scale: float = 1.0,
              measured: str | None = None, section: str = "", headline: bool = False, kind: str = "paper",
              pairs=None, runs=None) -> Claim:
        """Add a claim, judged by :func:`judge` of its per-seed ``values`` against ``criterion``
        (an invariant, ``kind="invariant"``, is checked on every seed instead, :func:`check`).

        ``values`` holds one number (or boolean) per seed: the method's paired value against
        a pre-specified comparator on that seed (a difference, or a ratio for ``log=True``),
        :class:`Bounded` values (a target never reached, bounded by the run's horizon), or a
        :class:`Paired` (:func:`paired`), from which the measured text, ``pairs`` and
        ``runs`` (hence the setting), ``unit`` and ``digits`` are taken unless given.
        Otherwise the values show in the criterion's unit (:attr:`Criterion.unit`) with its
        digits (:attr:`Criterion.digits`: two for a ratio, else one).
        ``measured`` replaces the default text (:func:`fmt_mean_sd` of the values), e.g.
        ``"OPT first on 3 of 3 seeds"`` (with :attr:`seeds_named`, a text that does not
        name its seeds gets their count); ``kind`` is one of :data:`KINDS`. ``pairs`` names
        the ``(method, rival)`` comparisons it judges (registered names) and ``runs`` (the
        results or configs behind the values) records their setting (:func:`setting_of`), so
        that :func:`judged_twice_markdown` can set two ledgers' claims on one comparison side
        by side and say in what their runs differ. ``why`` names the diagnostic it cites
        (:class:`Why`, or ``{"mask overlap": 0.39}``); a plain text is shown as a conjecture
        unless the claim holds. No values raise ``ValueError``.
        """
        named = measured is not None and self.seeds_named and "seed" not in measured
        if isinstance(values, Paired):
            given = values
            pairs = [(given.method, given.rival)] if pairs is None else pairs
            runs = list(given.runs) if runs is None else runs
            unit = given.unit if unit is None else unit
            digits = given.digits if digits is None else digits
            measured = given.measured() if measured is None and scale == 1.0 else measured
            values = given.values
        digits = criterion.digits if digits is None else digits
        unit = criterion.unit if unit is None else unit
        shown = _per_seed_array(values)
        if shown.size == 0:
            raise ValueError(f"claim {statement!r} has no measured values")
        if named:
            measured += f" ({plural(shown.size, 'seed')})"
        passes = [criterion(v) for v in shown]
        judgement = check(values, criterion) if kind == "invariant" else judge(values, criterion)
        if measured is None:
            measured = fmt_mean_sd(shown, digits, unit, scale) if shown.dtype != bool else \
                of_seeds(sum(passes), len(passes))
        return self._add(ref, statement, paper, shown, criterion, passes, measured, judgement, why,
                         digits, unit, scale, section, headline, kind, pairs, runs)

    def claim_cases(self, ref: str, statement: str, paper: str, cases: dict, k: int,
                    criterion: Criterion, why="", digits: int | None = None, unit: str | None = None,
                    section: str = "", headline: bool = False, kind: str = "paper", pairs=None,
                    runs=None) -> Claim:
        """Add an "in at least ``k`` of the cases" claim (``k = len(cases)``: "in every
        case"), judged by :func:`judge_cases`: ``cases`` maps each case's name to its own
        paired per-seed values. The ledger shows each case's verdict and interval, and as the
        per-seed values the number of cases that pass on each seed; ``unit`` and ``digits``
        default to the criterion's, as for :meth:`claim`."""
        digits = criterion.digits if digits is None else digits
        unit = criterion.unit if unit is None else unit
        judgement = judge_cases(cases, k, criterion)
        arrays = [_per_seed_array(v) for v in cases.values()]
        if len({a.size for a in arrays}) != 1:
            raise ValueError(f"the cases of {statement!r} must have one value per seed each")
        wins = np.sum([[criterion(v) for v in a] for a in arrays], axis=0)
        passes = [bool(w >= k) for w in wins]
        measured = "; ".join(f"{name} {fmt_mean_sd(a, digits, unit, seeds=False)} ({info['verdict']})"
                             for (name, info), a in zip(judgement.cases.items(), arrays))
        held = sum(info["verdict"] == "holds" for info in judgement.cases.values())
        measured = f"{held} of {plural(len(cases), 'case')} {'holds' if len(cases) == 1 else 'hold'} " \
                   f"(needs {k}); {measured}"
        return self._add(ref, statement, paper, wins.astype(float), criterion, passes, measured, judgement,
                         why, digits, unit, 1.0, section, headline, kind, pairs, runs)

    def _add(self, ref, statement, paper, shown, criterion, passes, measured, judgement, why, digits, unit,
             scale, section, headline, kind, pairs, runs) -> Claim:
        """Record a judged claim with its texts: bounds, seeds bounded or censored, the
        chance rates on the margin and the smallest effect its seeds detect."""
        interval_text = "" if judgement.interval is None else \
            "[{}, {}]{}".format(*(fmt(bound, digits, "", scale) for bound in judgement.interval), unit)
        if judgement.cases:
            interval_text = "; ".join(
                f"{name}: " + ("[{}, {}]{}".format(*(fmt(b, digits) for b in info["interval"]), unit)
                               if info["interval"] else MISSING) for name, info in judgement.cases.items())
        if judgement.bounded:
            measured += f"; {of_seeds(judgement.bounded, len(shown))} bounded by the run's horizon"
        if judgement.censored:
            measured += f"; {plural(judgement.censored, 'seed', 'seeds')} censored"
        detectable = "" if not np.isfinite(judgement.detectable) else \
            (f"×{judgement.detectable:.2f}" if criterion.log else fmt(judgement.detectable * scale, digits, unit))
        c = Claim(ref, statement, paper, [_plain(v) for v in shown], criterion.text, passes, measured, why,
                  section, headline, kind, judgement.verdict, judgement.method,
                  list(judgement.interval) if judgement.interval else None, interval_text,
                  judgement.narrow, [list(pair) for pair in pairs or ()],
                  setting_of(runs) if runs is not None else {}, bounded=judgement.bounded,
                  chance=list(judgement.chance) if np.isfinite(judgement.chance).all() else None,
                  detectable=detectable, cases=judgement.cases)
        if self.why_where_missed and passes and all(passes) and c.verdict in ("holds", "indicative"):
            c.why = ""
        self.claims.append(c)
        return c

    def counts(self, kind: str = "paper") -> dict[str, int]:
        """How many claims of ``kind`` have each verdict (counted and uncounted)."""
        return _counts(self.to_dict(), kind)

    def rows(self) -> list[list[str]]:
        """The ledger's rows, one per claim: claim | paper | this book | verdict."""
        return _claim_table(self.to_dict()["claims"])[0]

    def details(self) -> list[list[str]]:
        """What each row folds away beneath it (:attr:`DETAIL`; ``None`` for "this book in
        full" where the row shows it whole)."""
        return _claim_table(self.to_dict()["claims"])[1]

    HEADER = ("claim", "paper", "this book (mean ± sd, n seeds)", "verdict")
    DETAIL = ("criterion", "90% one-sided bounds of the mean", "this book in full",
              "why it differs")

    def markdown(self) -> str:
        """The ledger as one table (:func:`folded_table`), with the counts above it: a row
        per claim, its criterion, bounds and "why" folded beneath it."""
        rows, details = _claim_table(self.to_dict()["claims"])
        return f"**{counts_sentence(self.counts(), len(self.claims))}**\n\n" + \
            folded_table(rows, self.HEADER, details, self.DETAIL,
                         summary="criterion, bounds and why it differs", css_class=LEDGER_CLASS)

    def show(self) -> None:
        """Display the ledger in the notebook."""
        from IPython.display import Markdown, display

        display(Markdown(self.markdown()))

    def to_dict(self) -> dict:
        return {"chapter": self.chapter, "title": self.title, "scale": self.scale,
                "parameters": self.parameters, "claims": [asdict(c) for c in self.claims]}

    def save(self, directory: Path | None = None) -> Path:
        """Write the ledger as JSON (atomically) for the scorecard and the verdict box."""
        from ..runtime.experiments import write_atomic

        path = Path(directory or ledger_dir()) / f"{self.chapter}.json"
        write_atomic(path, json.dumps(self.to_dict(), indent=1, default=_plain).encode())
        return path


def _measured(text: str) -> tuple[str, str | None]:
    """A claim's measured text for a ledger row, its headline (up to the first "; "), and
    the whole text for the fold beneath it (``None`` when the headline is all of it)."""
    head = text.split("; ", 1)[0]
    return head, (text if head != text else None)


def _plain(value):
    """A JSON-ready Python number (``inf``/``nan`` become strings JSON can carry)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    v = float(value)
    if math.isnan(v):
        return None
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def load_ledgers(directory: Path | None = None) -> dict[str, dict]:
    """Every saved ledger in ``directory``, by chapter name."""
    directory = Path(directory or ledger_dir())
    return {p.stem: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}


def _ref(text: str, label: str) -> str:
    """A MyST cross-reference to ``label`` (a ``(label)=`` target on any page)."""
    return f"{{ref}}`{text} <{label}>`"


def plural(count: float, noun: str, many: str | None = None) -> str:
    """``count`` and ``noun``, in the plural unless ``count`` is one: ``"3 seeds"``,
    ``"1 seed"``, ``"1 local epoch"`` (a whole float prints as an integer), ``"2.5 local
    epochs"``; ``many`` is the plural where adding an ``s`` is wrong (``"classes per
    client"``). For the text of captions and "why" notes, in place of ``"seed(s)"``."""
    if isinstance(count, bool) or not isinstance(count, Real):
        raise TypeError(f"plural: count must be a number, got {count!r}")
    number = str(int(count)) if isinstance(count, Integral) else f"{float(count):g}"
    return f"{number} {noun if count == 1 else (many or noun + 's')}"


def counts_sentence(counts: dict[str, int], total: int | None = None) -> str:
    """``"12 paper claims: 5 hold, 4 fail, 1 is inconclusive; 2 indicative (fewer than 3
    seeds)"``: the counted verdicts, then the uncounted ones apart."""
    counted = sum(counts.get(v, 0) for v in VERDICTS)
    text = (f"{plural(counted, 'counted paper claim', 'counted paper claims')}: "
            f"{plural(counts.get('holds', 0), 'holds', 'hold')}, {plural(counts.get('fails', 0), 'fails', 'fail')}, "
            f"{plural(counts.get('inconclusive', 0), 'is', 'are')} inconclusive")
    apart = []
    if counts.get("indicative"):
        apart.append(f"{counts['indicative']} indicative (fewer than {MIN_SEEDS} seeds, or a sign test "
                     f"on fewer than {sign_test_seeds()})")
    if counts.get("untestable"):
        apart.append(f"{counts['untestable']} untestable (neither side reached the target)")
    if total is not None:
        others = total - counted - sum(counts.get(v, 0) for v in UNCOUNTED)
        if others:
            apart.append(f"{others} not the paper's (predictions and checks, shown apart)")
    return text + ("; " + "; ".join(apart) if apart else "") + "."


def _counts(ledger: dict, kind: str = "paper") -> dict[str, int]:
    return {v: sum(c["verdict"] == v and c.get("kind", "paper") == kind for c in ledger["claims"])
            for v in (*VERDICTS, *UNCOUNTED)}


def _verdict_text(claim: dict) -> str:
    """:attr:`Claim.verdict_text` of a saved claim (or of a :class:`Claim`'s ``vars``)."""
    n = len(claim["values"])
    if claim["verdict"] == "indicative":
        needs = re.search(r"needs (\d+) seeds", claim.get("method", ""))
        return f"indicative ({plural(n, 'seed', 'seeds')}" + (
            f"; a sign test needs {needs.group(1)})" if needs else ")")
    if claim["verdict"] == "checked":
        return f"checked on {of_seeds(n, n)}"
    if claim["verdict"] == "violated":
        labels = str((claim.get("setting") or {}).get("seeds", "")).split("/")
        labels = labels if len(labels) == n else [str(i) for i in range(n)]
        failed = [labels[i] for i, ok in enumerate(claim.get("passes") or [True] * n) if not ok]
        return f"fails on seed{'s' if len(failed) > 1 else ''} {', '.join(failed)}"
    notes = (["narrow"] if claim.get("narrow") else []) + \
        ([f"{of_seeds(claim['bounded'], n)} bounded by the horizon"] if claim.get("bounded") else [])
    return claim["verdict"] + (f" ({'; '.join(notes)})" if notes else "")


def _verdict_cell(claim: dict) -> str:
    """A saved claim's verdict for a table, in bold unless it holds."""
    text = _verdict_text(claim)
    return text if text.startswith(("holds", "checked")) else f"**{text}**"


def chance_of(claim: dict) -> tuple[float, float]:
    """P(*holds*), P(*fails*) the rule gives a saved claim if its true effect sat exactly on
    its margin: its own (:attr:`Judgement.chance`), or, for a ledger saved without it,
    recomputed from its method and seeds (``nan`` where the rule decides nothing)."""
    if claim.get("chance"):
        return tuple(claim["chance"])
    n, method = len(claim["values"]), claim.get("method", "")
    cases = re.fullmatch(r"cases, (\d+) of (\d+)", method)
    if cases and n >= MIN_SEEDS:
        return _cases_chance(int(cases.group(2)), int(cases.group(1)), n)
    if method.startswith("t-interval"):
        return 1 - CONFIDENCE, 1 - CONFIDENCE
    if method == "sign test":
        return (_sign_chance(n),) * 2
    return math.nan, math.nan


def _longer(claim: dict, longer_training) -> str:
    """`` *note*`` for a claim longer training reads otherwise, else empty."""
    note = longer_training(claim) if longer_training is not None else None
    return f" *{note}*" if note else ""


def _value_text(v) -> str:
    """One of a saved claim's per-seed values (:func:`_plain`) for people."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, str):
        return NEVER if v == "inf" else v
    return MISSING if v is None else f"{v:.3g}"


#: what the scorecard folds beneath each claim
SCORECARD_DETAIL = ("criterion", "per-seed values", "90% one-sided bounds of the mean",
                    "smallest effect past the margin it detects (80% power)", "this book in full",
                    "why it differs")


def _claim_table(claims: list[dict], scorecard: bool = False, longer_training=None) -> tuple[list, list]:
    """Saved claims as a ledger's rows (:attr:`Ledger.HEADER`) and what each folds beneath
    it (:attr:`Ledger.DETAIL`); for the ``scorecard``, each claim links to its evidence and
    folds its per-seed values too (:data:`SCORECARD_DETAIL`), and its verdict says what
    ``longer_training(claim)`` reads otherwise (:func:`verdict_box_markdown`)."""
    rows, details = [], []
    for c in claims:
        kind = c.get("kind", "paper")
        claim = f"{c['ref']}: {c['statement']}" + ("" if kind == "paper" else f" ({kind})")
        if scorecard and c.get("section"):
            claim += " " + _ref("evidence", c["section"])
        head, whole = _measured(c["measured"])
        rows.append([claim, c.get("paper") or MISSING, head, _verdict_cell(c) + _longer(c, longer_training)])
        values = [", ".join(map(_value_text, c["values"])), c.get("interval_text") or MISSING,
                  c.get("detectable") or MISSING] if scorecard else [c.get("interval_text") or MISSING]
        details.append([c["criterion"], *values, whole, c.get("why") or MISSING])
    return rows, details


#: the partitions that read ``alpha`` and ``classes_per_client`` (a run of another leaves them unused)
PARTITION_PARAMETERS = {"alpha": ("dirichlet", "quantity"), "classes_per_client": ("shards",)}
#: the run settings a claim records (:func:`setting_of`), in the order they are compared
SETTING_FIELDS = ("dataset", "model", "partition", "alpha", "classes_per_client", "clients",
                  "participation", "rounds", "local_steps", "local_epochs", "lr", "heterogeneity",
                  "system")


def setting_of(runs) -> dict[str, str]:
    """What ``runs`` (results, configs, or a dict of either) ran with: each field of
    :data:`SETTING_FIELDS` that is set, its values joined by "/" where the runs differ
    (``{"dataset": "digits", "rounds": "20", "lr": "0.03/0.1", ...}``), and ``seeds``."""
    runs = list(runs.values()) if isinstance(runs, dict) else list(runs)
    configs = [r["config"] if isinstance(r, dict) else r.to_dict() for r in runs]
    out = {}
    for name in (*SETTING_FIELDS, "seed"):
        values = list(dict.fromkeys(str(c.get(name)) for c in configs if c.get(name) is not None))
        used = name not in PARTITION_PARAMETERS or any(c.get("partition") in PARTITION_PARAMETERS[name]
                                                       for c in configs)
        if values and used:
            out["seeds" if name == "seed" else name] = "/".join(values)
    return out


def _setting_differences(entries) -> list[str]:
    """The settings in which the claims' runs differ: ``"rounds: 20 (FedLPS) vs 30 (Arena)"``."""
    known = [(title, c.get("setting") or {}) for title, c in entries]
    if not all(setting for _, setting in known):
        return []
    out = []
    for name in (*SETTING_FIELDS, "seeds"):
        values = [(title, setting.get(name, "—")) for title, setting in known]
        if len({v for _, v in values}) > 1:
            out.append(f"{name}: " + " vs ".join(f"{v} ({title})" for title, v in values))
    return out


def judged_twice_markdown(ledgers: dict[str, dict], order: Sequence[str] | None = None) -> str:
    """A section listing every comparison ``(method, rival)`` that more than one ledger
    judges (the claims' ``pairs``), each ledger's claim beside the others: its verdict, and
    folded beneath it (:func:`folded_table`) its seeds, scale and criterion and what differs
    between them. Empty when no comparison is judged twice."""
    order = [c for c in (order or ledgers) if c in ledgers]
    seen: dict[tuple, list] = {}
    for name in order:
        for c in ledgers[name]["claims"]:
            for pair in c.get("pairs") or []:
                seen.setdefault(tuple(pair), []).append((name, c))
    rows, details = [], []
    for (method, rival), entries in sorted(seen.items()):
        if len({name for name, _ in entries}) < 2:
            continue
        verdicts = {c["verdict"] for _, c in entries}
        aspects = {"seeds": lambda name, c: len(c["values"]), "scale": lambda name, c: ledgers[name].get("scale"),
                   "criterion": lambda name, c: c["criterion"]}
        differs = [what for what, of in aspects.items() if len({of(name, c) for name, c in entries}) > 1]
        specific = _setting_differences([(ledgers[name]["title"].split(":")[0], c) for name, c in entries])
        differs.extend(specific or ["setting and metric (see each claim)"])
        for name, c in entries:
            rows.append([f"{method} vs {rival}" + (" (**disagree**)" if len(verdicts) > 1 else ""),
                         ledgers[name]["title"], f"{c['ref']}: {c['statement']}", _verdict_cell(c)])
            details.append([f"{plural(len(c['values']), 'seed', 'seeds')}, scale {ledgers[name].get('scale', '')}",
                            c["criterion"], ", ".join(differs)])
    if not rows:
        return ""
    return ("\n\n## The same comparison, judged twice\n\nA chapter and the arena can judge the "
            "same pair of methods in different settings (data, scale, tuning, metric) and on "
            "different seeds; each row is one ledger's claim, and the line folded beneath it "
            "says what differs between them.\n\n"
            + folded_table(rows, ["comparison", "ledger", "claim", "verdict"], details,
                           ["seeds", "criterion", "differs in"],
                           summary="seeds, scale and criterion, and what differs"))


def probe_note(base, stretched, criterion: "Criterion", seeds, factor: float = 3, unit: str = " points",
               higher_is_better: bool = True, stays_within: float = 1.0) -> str:
    """What a probe at ``factor`` times the rounds shows for a claim whose "why" blames the
    run length: the value on the probe ``seeds`` at the book's length (``base``) and at the
    stretched one (``stretched``), and whether the gap *closes* (``criterion`` passes on
    every probe seed where it did not before), *narrows*, *stays* (within ``stays_within``)
    or *widens*.

    >>> probe_note([-5.0], [-2.0], at_least(0, " points"), [0])
    'at 3x the rounds (seed 0): -5.0 → -2.0 points, the gap narrows'
    """
    base, stretched = np.asarray(base, float), np.asarray(stretched, float)
    change = (stretched.mean() - base.mean()) * (1 if higher_is_better else -1)
    if all(criterion(v) for v in stretched):
        trend = ("the criterion passes at both lengths" if all(criterion(v) for v in base)
                 else "the gap closes: the criterion passes")
    elif abs(change) <= stays_within:
        trend = "the gap stays"
    else:
        trend = "the gap narrows" if change > 0 else "the gap widens"
    who = f"seed {seeds[0]}" if len(seeds) == 1 else "seeds " + ", ".join(map(str, seeds))
    return f"at {factor:g}x the rounds ({who}): {fmt(base.mean())} → {fmt(stretched.mean())}{unit}, {trend}"

