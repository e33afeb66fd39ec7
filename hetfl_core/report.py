"""Reading runs and reporting what they show: history queries, tables for people, and the
claim ledger every paper chapter ends with.

* History queries (:func:`final`, :func:`value_at`, :func:`first_reach`, :func:`per_seed`)
  take as ``x`` any cumulative history key (``round``, ``time_s``, ``uplink_bits``, ...) or
  ``traffic_bits`` (both directions); a target never reached is ``math.inf``.
* Formatting (:func:`fmt`, :func:`fmt_mean_sd`, :func:`compare`, :func:`markdown_table`,
  :func:`folded_table`) turns numbers into text for people; :func:`show_source` prints a
  library function as valid Python, without its docstring.
* :class:`Ledger` holds a chapter's claims, each judged by :func:`judge` from its paired
  per-seed values; :meth:`Ledger.save` writes it for the book's scorecard
  (:func:`scorecard_markdown`) and the verdict box atop the chapter (:func:`verdict_box_markdown`).
"""
from __future__ import annotations

import ast
import html
import inspect
import json
import math
import os
import re
import textwrap
from dataclasses import asdict, dataclass, field
from numbers import Integral, Real
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

__all__ = ["NEVER", "MISSING", "DERIVED_KEYS", "row_value", "evaluated", "final", "value_at",
           "first_reach", "per_seed", "ratio", "best_on_average", "mean_sd", "fmt", "fmt_mean_sd", "listing",
           "numbers", "of_seeds", "compare", "escape_cell", "markdown_table", "folded_table",
           "FOLDED_CLASS", "LEDGER_CLASS", "NUMBERS_CLASS", "within", "show_table",
           "source_text", "show_source", "Criterion", "at_least", "at_most", "above_chance",
           "more_than", "is_true", "VERDICTS", "UNCOUNTED", "KINDS", "MIN_SEEDS", "Judgement",
           "judge", "verdict_of", "cites_a_diagnostic", "counts_sentence", "Claim", "Ledger",
           "ledger_dir", "load_ledgers", "verdict_box_markdown", "scorecard_markdown",
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
    """The last evaluated ``y`` whose cumulative ``x`` is within ``budget`` (``nan`` if none is)."""
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


def ratio(baseline, method) -> np.ndarray:
    """Per seed ``baseline / method`` (a speedup, a traffic saving, a ratio of counts). For
    costs to a target, ``inf`` (never reached) stays apart: the ratio is ``inf`` where only
    the method reached it, ``0`` where only the baseline did, ``nan`` where neither did;
    ``x / 0`` is ``inf`` and ``0 / 0`` is ``nan``."""
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
    tail = f" ({_plural(n, 'seed', 'seeds')})" if seeds and n else ""
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
    return f"{int(k)} of {_plural(int(n), 'seed', 'seeds')}"


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


def show_source(*objs, docstring: bool = False) -> None:
    """Print the source of each object (see :func:`source_text`), separated by a blank line."""
    print("\n".join(source_text(o, docstring) for o in objs).rstrip())


# -- criteria and verdicts --------------------------------------------------------------------
@dataclass(frozen=True)
class Criterion:
    """A test a claim's measured values must pass, and its text for the ledger: ``test``
    judges one seed's value; a criterion that compares with a number also carries ``bound``,
    ``op`` (``">="``, ``">"``, ``"<="`` or ``"<"``) and ``log`` (the values are ratios, such
    as speed-ups, judged on the log scale), for :func:`judge` to use."""

    text: str
    test: Callable[[float], bool]
    bound: float | None = None
    op: str | None = None
    log: bool = False

    def __call__(self, value) -> bool:
        return bool(self.test(value))


_OPS = {">=": lambda v, b: v >= b, ">": lambda v, b: v > b,
        "<=": lambda v, b: v <= b, "<": lambda v, b: v < b}


def _num(bound: float, unit: str) -> str:
    """``"3 points"``, and ``"1 point"`` for a bound of exactly one."""
    if abs(bound) == 1 and re.fullmatch(r" [a-z]+s", unit):
        unit = unit[:-1]
    return f"{bound:g}{unit}"


def _compared(text: str, bound: float, op: str, log: bool) -> Criterion:
    if log and not bound > 0:
        raise ValueError("a ratio judged on the log scale needs a positive bound")
    return Criterion(text, lambda v: _OPS[op](v, bound), bound=float(bound), op=op, log=log)


def at_least(bound: float, unit: str = "", what: str = "value", log: bool = False) -> Criterion:
    """Passes when the value is ``>= bound`` (a value that is ``nan`` fails); ``log``: the
    values are ratios, judged on the log scale."""
    return _compared(f"{what} ≥ {_num(bound, unit)}", bound, ">=", log)


def at_most(bound: float, unit: str = "", what: str = "value", log: bool = False) -> Criterion:
    """Passes when the value is ``<= bound`` (``inf``, a target never reached, fails unless
    the bound is ``inf``; ``nan`` fails); ``log``: the values are ratios."""
    return _compared(f"{what} ≤ {_num(bound, unit)}", bound, "<=", log)


def above_chance(chance: float, margin: float, unit: str = "", what: str = "accuracy") -> Criterion:
    """Passes when the value clears ``chance`` (or an untrained model's score) by ``margin``;
    a claim pitted against chance must state a positive margin."""
    if not margin > 0:
        raise ValueError("a comparison with chance level needs a positive margin")
    return _compared(f"{what} ≥ chance {_num(chance, unit)} + {_num(margin, unit)}",
                     chance + margin, ">=", False)


def more_than(bound: float, unit: str = "", what: str = "value", log: bool = False) -> Criterion:
    """Passes when the value is strictly above ``bound`` (a drop of 0 is no drop)."""
    return _compared(f"{what} > {_num(bound, unit)}", bound, ">", log)


def sooner(what: str = "cost to the target", factor: float = 1.0) -> Criterion:
    """A criterion on a per-seed ratio ``rival cost / method cost`` to a common target
    (:func:`ratio`): the method reaches it sooner when the ratio exceeds ``factor`` (1: any
    saving; 1 / 0.312 = 3.2: "68.8% less time"). Judged on the log scale."""
    return more_than(factor, "x", f"{what}, rival / method", log=True)


def is_true(text: str) -> Criterion:
    """For per-seed booleans computed by the chapter (e.g. "first to reach the target"):
    ``text`` says what each seed's boolean asserts. Judged by a sign test (:func:`judge`)."""
    return Criterion(text, lambda v: bool(v))


#: the verdicts the scorecard counts (claims on at least :data:`MIN_SEEDS` seeds)
VERDICTS = ("holds", "fails", "inconclusive")
#: verdicts shown but never counted: too few seeds, or a target neither side reached
UNCOUNTED = ("indicative", "untestable")
#: what a claim is: one of the paper's claims (counted), a prediction of this book's own
#: (shown apart), or a quantity the code enforces (a check, never counted)
KINDS = ("paper", "prediction", "invariant")
#: the fewest paired seeds a counted verdict rests on
MIN_SEEDS = 3
#: the one-sided confidence of each bound of the interval
CONFIDENCE = 0.90


@dataclass(frozen=True)
class Judgement:
    """What the rule concludes from a claim's per-seed values (see :func:`judge`)."""

    verdict: str                            # holds / fails / inconclusive / indicative / untestable
    method: str                             # "t-interval", "sign test", "indicative", "untestable"
    n: int                                  # the seeds judged (censored ones left out)
    censored: int = 0                       # seeds where neither side reached the target
    interval: tuple[float, float] | None = None   # one-sided bounds of the mean, in value units
    narrow: bool = False                    # holds, but within a fifth of the half-width


def _t_quantile(n: int) -> float:
    from scipy.stats import t

    return float(t.ppf(CONFIDENCE, n - 1))


def _sign_test(passes: Sequence[bool]) -> str:
    """*holds* when so many seeds pass that it would happen by chance (each seed a fair
    coin) with probability at most ``1 - CONFIDENCE``; *fails* likewise for the failures."""
    from scipy.stats import binom

    n, k = len(passes), int(sum(passes))
    if binom.sf(k - 1, n, 0.5) <= 1 - CONFIDENCE:
        return "holds"
    if binom.cdf(k, n, 0.5) <= 1 - CONFIDENCE:
        return "fails"
    return "inconclusive"


def _per_seed_array(values) -> np.ndarray:
    """Per-seed values as a flat array: of booleans where every value is one, else of floats."""
    raw = list(np.ravel(np.asarray(values, dtype=object)))
    boolean = bool(raw) and all(isinstance(v, (bool, np.bool_)) for v in raw)
    return np.array(raw, dtype=bool if boolean else float)


def judge(values: Sequence, criterion: Criterion) -> Judgement:
    """The verdict on a claim from its per-seed values (paired differences, ratios or
    booleans, one per seed).

    * Values that are ``nan`` are censored seeds (neither side reached the target, or the
      value is undefined) and are left out; if every seed is censored the claim is
      *untestable*.
    * Fewer than :data:`MIN_SEEDS` seeds left: *indicative* (shown, never counted).
    * A criterion with a bound and finite values: the one-sided 90% t-interval of the
      mean (sample sd, ``ddof=1``; on the log scale for ratios). *Holds* if the bound on
      the claim's side clears the margin, *fails* if the other bound does not reach it,
      *inconclusive* otherwise. At an effect exactly on the margin it says *holds* with
      probability 10% whatever the number of seeds, and its power grows with them.
    * Booleans, criteria without a bound, and values with an infinite entry (a target one
      side never reached): a sign test on the seeds that pass, at the same 10% level (so a
      yes/no claim needs 4 seeds, all passing, to hold).
    """
    values = _per_seed_array(values)
    boolean = values.dtype == bool
    kept = values if boolean else values[~np.isnan(values)]
    n, censored = len(kept), int(values.size - kept.size)
    if n == 0:
        return Judgement("untestable", "untestable", 0, censored)
    if n < MIN_SEEDS:
        return Judgement("indicative", "indicative", n, censored)
    if boolean or criterion.bound is None or not np.isfinite(kept).all() \
            or (criterion.log and (kept <= 0).any()):
        return Judgement(_sign_test([criterion(v) for v in kept]), "sign test", n, censored)
    x = np.log(kept) if criterion.log else kept
    bound = math.log(criterion.bound) if criterion.log else criterion.bound
    half = _t_quantile(n) * float(x.std(ddof=1)) / math.sqrt(n)
    lo, hi = float(x.mean()) - half, float(x.mean()) + half
    interval = (math.exp(lo), math.exp(hi)) if criterion.log else (lo, hi)
    test = _OPS[criterion.op]
    sure, other = (lo, hi) if criterion.op in (">=", ">") else (hi, lo)     # the claim's side first
    verdict = "holds" if test(sure, bound) else "inconclusive" if test(other, bound) else "fails"
    narrow = verdict == "holds" and abs(sure - bound) < 0.2 * half
    return Judgement(verdict, "t-interval", n, censored, interval, narrow)


def verdict_of(passes: Sequence[bool]) -> str:
    """The verdict from per-seed outcomes alone: *indicative* below :data:`MIN_SEEDS`
    seeds, else the sign test of :func:`judge`."""
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
    """Whether ``why`` cites a measured number other than the claim's own values: a number
    that appears in none of ``own`` (the claim's measured text, the paper's value, the
    criterion, the statement)."""
    own = [_SEED_COUNT.sub(" ", text) for text in own]
    mine = set().union(*(_numbers(text) for text in own)) if own else set()
    return bool(_numbers(why) - mine)


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
    why: str = ""                  # why it differs: a measured reason, or a conjecture
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

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"claim kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.verdict != "holds":
            why = self.why.strip()
            if not why:
                self.why = "conjecture: not investigated"
            elif "conjecture" not in why.lower() and not cites_a_diagnostic(
                    why, self.measured, self.paper, self.criterion, self.statement):
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


def ledger_dir() -> Path:
    """Where ledgers are written: ``$HETFL_LEDGER_DIR`` (set by the book build) or
    ``~/.cache/hetfl/ledgers``."""
    return Path(os.environ.get("HETFL_LEDGER_DIR", Path.home() / ".cache" / "hetfl" / "ledgers")).expanduser()


class Ledger:
    """A chapter's claims: ``ledger.claim(...)`` for each, then ``ledger.show()`` and
    ``ledger.save()``.

    Example::

        ledger = Ledger("heroes", "Heroes", scale=scale)
        gap = per_seed(heroes_runs, final) - per_seed(fedavg_runs, final)
        ledger.claim("Table II", "Heroes is more accurate than FedAvg", paper="+10.46 points",
                     values=100 * gap, criterion=at_least(0, " points", "Heroes − FedAvg"),
                     unit=" points", section="heroes-table2", headline=True)
    """

    def __init__(self, chapter: str, title: str, scale: str = "", parameters: dict | None = None):
        self.chapter, self.title, self.scale = chapter, title, scale
        self.parameters = dict(parameters or {})
        self.claims: list[Claim] = []

    def claim(self, ref: str, statement: str, paper: str, values, criterion: Criterion,
              why: str = "", digits: int = 1, unit: str = "", scale: float = 1.0, measured: str | None = None,
              section: str = "", headline: bool = False, kind: str = "paper",
              pairs=(), runs=None) -> Claim:
        """Add a claim, judged by :func:`judge` of its per-seed ``values`` against ``criterion``.

        ``values`` holds one number (or boolean) per seed: the method's paired value against
        a pre-specified comparator on that seed (a difference, or a ratio for ``log=True``).
        ``measured`` replaces the default text (:func:`fmt_mean_sd` of the values), e.g.
        ``"OPT first on 3 of 3 seeds"``; ``kind`` is one of :data:`KINDS`. ``pairs`` names
        the ``(method, rival)`` comparisons it judges (registered names) and ``runs`` (the
        results or configs behind the values) records their setting (:func:`setting_of`), so
        that :func:`judged_twice_markdown` can set two ledgers' claims on one comparison side
        by side and say in what their runs differ. No values raise ``ValueError``.
        """
        values = _per_seed_array(values)
        if values.size == 0:
            raise ValueError(f"claim {statement!r} has no measured values")
        passes = [criterion(v) for v in values]
        judgement = judge(values, criterion)
        if measured is None:
            measured = fmt_mean_sd(values, digits, unit, scale) if values.dtype != bool else \
                of_seeds(sum(passes), len(passes))
        interval_text = "" if judgement.interval is None else \
            "[{}, {}]{}".format(*(fmt(bound, digits, "", scale) for bound in judgement.interval), unit)
        if judgement.censored:
            measured += f"; {_plural(judgement.censored, 'seed', 'seeds')} censored"
        c = Claim(ref, statement, paper, [_plain(v) for v in values], criterion.text, passes, measured, why,
                  section, headline, kind, judgement.verdict, judgement.method,
                  list(judgement.interval) if judgement.interval else None, interval_text,
                  judgement.narrow, [list(pair) for pair in pairs],
                  setting_of(runs) if runs is not None else {})
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
        from .experiments import write_atomic

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


def _plural(n: int, one: str, many: str) -> str:
    return plural(n, one, many)


def counts_sentence(counts: dict[str, int], total: int | None = None) -> str:
    """``"12 paper claims: 5 hold, 4 fail, 1 is inconclusive; 2 indicative (fewer than 3
    seeds)"``: the counted verdicts, then the uncounted ones apart."""
    counted = sum(counts.get(v, 0) for v in VERDICTS)
    text = (f"{_plural(counted, 'counted paper claim', 'counted paper claims')}: "
            f"{_plural(counts.get('holds', 0), 'holds', 'hold')}, {_plural(counts.get('fails', 0), 'fails', 'fail')}, "
            f"{_plural(counts.get('inconclusive', 0), 'is', 'are')} inconclusive")
    apart = []
    if counts.get("indicative"):
        apart.append(f"{counts['indicative']} indicative (fewer than {MIN_SEEDS} seeds)")
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
    if claim["verdict"] == "indicative":
        return f"indicative ({_plural(len(claim['values']), 'seed', 'seeds')})"
    return claim["verdict"] + (" (narrow)" if claim.get("narrow") else "")


def _verdict_cell(claim: dict) -> str:
    """A saved claim's verdict for a table, in bold unless it holds."""
    text = _verdict_text(claim)
    return text if text.startswith("holds") else f"**{text}**"


def verdict_box_markdown(ledger: dict) -> str:
    """The box at the top of a chapter: the counted verdicts of the paper's claims, and
    each counted headline claim with its verdict and a link to its evidence section."""
    counts = _counts(ledger)
    lines = [":::{admonition} Verdict: does the paper hold up?", ":class: tip", "",
             f"At scale `{ledger.get('scale') or '?'}`, {counts_sentence(counts)} A verdict is "
             f"counted when it rests on at least {MIN_SEEDS} seeds: the one-sided 90% bounds of the "
             "mean against the paper's margin. The " + _ref("claim ledger", f"{ledger['chapter']}-ledger")
             + " at the end lists every claim.", ""]
    counted = [c for c in ledger["claims"] if c.get("kind", "paper") == "paper" and c["verdict"] in VERDICTS]
    headline = [c for c in counted if c.get("headline")] or counted[:3]
    for c in headline:
        where = f" {_ref('Evidence', c['section'])}." if c.get("section") else ""
        lines.append(f"- **{_verdict_text(c)}**: {c['ref']}, {c['statement']}. "
                     f"Paper: {c['paper']}; here: {c['measured']}"
                     + (f"; 90% bounds {c['interval_text']}" if c.get("interval_text") else "") + f".{where}")
    lines.append(":::")
    return "\n".join(lines)


def _value_text(v) -> str:
    """One of a saved claim's per-seed values (:func:`_plain`) for people."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, str):
        return NEVER if v == "inf" else v
    return MISSING if v is None else f"{v:.3g}"


#: what the scorecard folds beneath each claim
SCORECARD_DETAIL = ("criterion", "per-seed values", "90% one-sided bounds of the mean",
                    "this book in full", "why it differs")


def _claim_table(claims: list[dict], scorecard: bool = False) -> tuple[list, list]:
    """Saved claims as a ledger's rows (:attr:`Ledger.HEADER`) and what each folds beneath
    it (:attr:`Ledger.DETAIL`); for the ``scorecard``, each claim links to its evidence and
    folds its per-seed values too (:data:`SCORECARD_DETAIL`)."""
    rows, details = [], []
    for c in claims:
        kind = c.get("kind", "paper")
        claim = f"{c['ref']}: {c['statement']}" + ("" if kind == "paper" else f" ({kind})")
        if scorecard and c.get("section"):
            claim += " " + _ref("evidence", c["section"])
        head, whole = _measured(c["measured"])
        rows.append([claim, c.get("paper") or MISSING, head, _verdict_cell(c)])
        values = [", ".join(map(_value_text, c["values"]))] if scorecard else []
        details.append([c["criterion"], *values, c.get("interval_text") or MISSING, whole,
                        c.get("why") or MISSING])
    return rows, details


def scorecard_markdown(ledgers: dict[str, dict], order: Sequence[str] | None = None) -> str:
    """The book's scorecard: per paper, the counted verdicts, then the uncounted ones and
    the book's own predictions and checks apart; then every claim, grouped by paper and
    verdict, as the ledgers show it, with a link to its evidence and its per-seed values
    folded beneath it too (:data:`SCORECARD_DETAIL`)."""
    order = [c for c in (order or ledgers) if c in ledgers]
    columns = (*VERDICTS, *UNCOUNTED)
    count_rows, sections = [], []
    rank = {v: i for i, v in enumerate(columns)}
    for name in order:
        ledger = ledgers[name]
        counts = _counts(ledger)
        link = _ref(ledger["title"], f"{name}-ledger")
        others = sum(c.get("kind", "paper") != "paper" for c in ledger["claims"])
        count_rows.append([link, ledger.get("scale", ""), *(counts[v] for v in columns), others])
        claims = sorted(ledger["claims"], key=lambda c: (c.get("kind", "paper") != "paper",
                                                         rank.get(c["verdict"], 9)))
        if claims:
            rows, details = _claim_table(claims, scorecard=True)
            sections.append(f"### {ledger['title']}\n\n" + folded_table(
                rows, Ledger.HEADER, details, SCORECARD_DETAIL,
                summary="criterion, per-seed values, bounds and why it differs",
                css_class=LEDGER_CLASS))
    totals = [sum(r[i] for r in count_rows) for i in range(2, len(columns) + 3)]
    count_rows.append(["**all papers**", "", *totals])
    return ("## Counts per paper\n\n"
            f"Counted: paper claims judged on at least {MIN_SEEDS} seeds by the one-sided 90% bounds "
            "of the mean against the paper's margin. Indicative (fewer seeds) and untestable "
            "(neither side reached the target) claims are shown but not counted, and neither are "
            "this book's own predictions nor the checks of what the code enforces.\n\n"
            + within(markdown_table(count_rows, ["paper", "scale", *columns,
                                                 "predictions and checks"],
                                    ["l", "l", *["r"] * (len(columns) + 1)]), NUMBERS_CLASS)
            + judged_twice_markdown(ledgers, order)
            + "\n\n## Every claim\n\n" + "\n\n".join(sections))


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
            details.append([f"{_plural(len(c['values']), 'seed', 'seeds')}, scale {ledgers[name].get('scale', '')}",
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

