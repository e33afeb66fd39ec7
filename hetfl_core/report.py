"""Reading runs and reporting what they show: history queries, tables for people, and the
claim ledger every paper chapter ends with.

* History queries (:func:`final`, :func:`value_at`, :func:`first_reach`, :func:`per_seed`)
  read one run's history; ``x`` may be any cumulative history key (``round``,
  ``time_s``, ``uplink_bits``, ``flops``, ...) or ``traffic_bits`` (both directions).
  A target that is never reached is ``math.inf``, so "sooner" comparisons stay correct
  and tables print "never".
* Formatting (:func:`fmt`, :func:`fmt_mean_sd`, :func:`compare`, :func:`markdown_table`)
  turns numbers into text for people: no ``np.float64(...)``, "never" for an unreached
  target, "—" for a missing value, comparison signs computed, table cells escaped.
* :func:`show_source` prints a library function as valid Python, without its docstring.
* :class:`Ledger` holds a chapter's claims. Each claim carries the measured value of
  every seed and a :class:`Criterion`; its verdict is computed from the seeds:
  *holds* (the criterion holds on every seed), *fails* (on none), *inconclusive* (the
  seeds disagree). :meth:`Ledger.save` writes the ledger for the book's scorecard
  (:func:`scorecard_markdown`) and the verdict box at the top of the chapter
  (:func:`verdict_box_markdown`).
"""
from __future__ import annotations

import ast
import inspect
import json
import math
import os
import re
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

__all__ = ["NEVER", "MISSING", "DERIVED_KEYS", "row_value", "evaluated", "final", "value_at", "first_reach",
           "per_seed", "ratio", "mean_sd", "fmt", "fmt_mean_sd", "compare", "escape_cell", "markdown_table",
           "show_table", "source_text", "show_source", "Criterion", "at_least", "at_most", "above_chance",
           "more_than", "is_true", "VERDICTS", "verdict_of", "Claim", "Ledger", "ledger_dir", "load_ledgers",
           "verdict_box_markdown", "scorecard_markdown", "probe_note"]

NEVER = "never"
MISSING = "—"

#: history keys computed from a row: ``traffic_bits`` is uplink plus downlink
DERIVED_KEYS: dict[str, Callable[[dict], float]] = {
    "traffic_bits": lambda row: row["uplink_bits"] + row["downlink_bits"],
}


# -- history queries ------------------------------------------------------------------------
def row_value(row: dict, key: str):
    """``row[key]``, or a derived key of :data:`DERIVED_KEYS`."""
    if key in DERIVED_KEYS:
        return DERIVED_KEYS[key](row)
    return row.get(key)


def evaluated(result: dict, y: str = "acc_personal") -> list[dict]:
    """The history rows of ``result`` where ``y`` was evaluated (not ``None``)."""
    return [row for row in result["history"] if row_value(row, y) is not None]


def final(result: dict, y: str = "acc_personal") -> float:
    """The last evaluated value of ``y`` (``nan`` if it was never evaluated)."""
    rows = evaluated(result, y)
    return float(row_value(rows[-1], y)) if rows else math.nan


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
    out[np.isinf(b) & np.isinf(m)] = math.nan
    return out


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and (population) standard deviation of the finite values; ``inf`` mean if any
    value is infinite (a seed that never reached a target), ``nan`` if none is given."""
    v = np.asarray(list(values), dtype=float)
    if v.size == 0 or np.isnan(v).all():
        return math.nan, math.nan
    if np.isinf(v).any():
        return math.inf, math.nan
    v = v[~np.isnan(v)]
    return float(v.mean()), float(v.std())


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
    tail = f" ({n} seed{'s' if n != 1 else ''})" if seeds and n else ""
    if n == 0 or np.isnan(v).all():
        return MISSING
    never = int(np.isposinf(v).sum())
    finite = v[np.isfinite(v)]
    if never == n:
        return f"{NEVER}{tail}"
    if n == 1 or finite.size == 1:
        text = fmt(finite[0], digits, unit, scale)
    else:
        text = f"{fmt(finite.mean(), digits, '', scale)} ± {fmt(finite.std(), digits, '', scale)}{unit}"
    if never:
        return f"{text}; {NEVER} on {never} of {n} seeds"
    return text + tail


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


def show_table(rows: Iterable[Sequence], header: Sequence[str], caption: str = "", **kwargs) -> None:
    """Display :func:`markdown_table` in a notebook (with an optional caption line above)."""
    from IPython.display import Markdown, display

    text = markdown_table(rows, header, **kwargs)
    display(Markdown(f"{caption}\n\n{text}" if caption else text))


# -- source printer ---------------------------------------------------------------------------
def source_text(obj, docstring: bool = False) -> str:
    """The source of a function or class, dedented to valid Python, its docstrings removed
    (unless ``docstring``)."""
    text = textwrap.dedent(inspect.getsource(obj))
    if docstring:
        return text
    tree = ast.parse(text)
    lines = text.splitlines()
    drop = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant) \
                    and isinstance(first.value.value, str):
                if len(node.body) == 1:       # a docstring-only body keeps a valid body
                    continue
                drop.update(range(first.lineno - 1, first.end_lineno))
    kept = [line for i, line in enumerate(lines) if i not in drop]
    out = "\n".join(kept) + "\n"
    ast.parse(out)   # still valid Python
    return out


def show_source(*objs, docstring: bool = False) -> None:
    """Print the source of each object (see :func:`source_text`), separated by a blank line."""
    print("\n".join(source_text(o, docstring) for o in objs).rstrip())


# -- criteria and verdicts --------------------------------------------------------------------
@dataclass(frozen=True)
class Criterion:
    """A test one seed's measured value must pass, and its text for the ledger."""

    text: str
    test: Callable[[float], bool]

    def __call__(self, value) -> bool:
        return bool(self.test(value))


def _num(bound: float, unit: str) -> str:
    return f"{bound:g}{unit}"


def at_least(bound: float, unit: str = "", what: str = "value") -> Criterion:
    """Passes when the value is ``>= bound`` (a value that is ``nan`` fails)."""
    return Criterion(f"{what} ≥ {_num(bound, unit)}", lambda v: v >= bound)


def at_most(bound: float, unit: str = "", what: str = "value") -> Criterion:
    """Passes when the value is ``<= bound`` (``inf``, a target never reached, fails unless
    the bound is ``inf``; ``nan`` fails)."""
    return Criterion(f"{what} ≤ {_num(bound, unit)}", lambda v: v <= bound)


def above_chance(chance: float, margin: float, unit: str = "", what: str = "accuracy") -> Criterion:
    """Passes when the value clears ``chance`` (or an untrained model's score) by ``margin``;
    a claim pitted against chance must state a positive margin."""
    if not margin > 0:
        raise ValueError("a comparison with chance level needs a positive margin")
    return Criterion(f"{what} ≥ chance {_num(chance, unit)} + {_num(margin, unit)}",
                     lambda v: v >= chance + margin)


def more_than(bound: float, unit: str = "", what: str = "value") -> Criterion:
    """Passes when the value is strictly above ``bound`` (a drop of 0 is no drop)."""
    return Criterion(f"{what} > {_num(bound, unit)}", lambda v: v > bound)


def is_true(text: str) -> Criterion:
    """For per-seed booleans computed by the chapter (e.g. "first to reach the target"):
    ``text`` says what each seed's boolean asserts."""
    return Criterion(text, lambda v: bool(v))


VERDICTS = ("holds", "fails", "inconclusive")


def verdict_of(passes: Sequence[bool]) -> str:
    """*holds* if every seed passes, *fails* if none does, *inconclusive* if they disagree."""
    passes = [bool(p) for p in passes]
    if not passes:
        raise ValueError("a verdict needs at least one seed")
    if all(passes):
        return "holds"
    if not any(passes):
        return "fails"
    return "inconclusive"


_MEASURED = re.compile(r"\d")


@dataclass
class Claim:
    """One of a paper's claims and what this book measured of it."""

    ref: str                       # where the paper says it: "Table I", "Fig. 4a", "Sec. III-D"
    statement: str                 # the claim, in a sentence
    paper: str                     # what the paper reports
    values: list                   # the measured value of each seed
    criterion: str                 # the test each seed's value must pass, in words
    passes: list                   # each seed's outcome
    measured: str                  # the values for people: "77.3 ± 1.2% (3 seeds)"
    why: str = ""                  # why it differs: a measured reason, or a conjecture
    section: str = ""              # the label of the chapter section with the evidence
    headline: bool = False         # shown in the verdict box at the top of the chapter
    verdict: str = field(init=False)

    def __post_init__(self):
        self.verdict = verdict_of(self.passes)
        if self.verdict != "holds":
            why = self.why.strip()
            if not why:
                self.why = "conjecture: not investigated"
            elif not _MEASURED.search(why) and "conjecture" not in why.lower():
                self.why = f"conjecture: {why}"

    @property
    def seeds(self) -> int:
        return len(self.values)

    @property
    def verdict_text(self) -> str:
        """The verdict, with "(1 seed)" when it rests on one seed."""
        return self.verdict + (" (1 seed)" if self.seeds == 1 else "")


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
              section: str = "", headline: bool = False) -> Claim:
        """Add a claim; its verdict comes from ``criterion`` applied to each seed's value.

        ``values`` is one number (or boolean) per seed. ``measured`` overrides the default
        text (:func:`fmt_mean_sd` of the values) when the values are booleans or need
        context, e.g. ``"OPT first on 3 of 3 seeds"``.
        """
        raw = list(np.ravel(np.asarray(values, dtype=object)))
        boolean = bool(raw) and all(isinstance(v, (bool, np.bool_)) for v in raw)
        values = np.array(raw, dtype=bool if boolean else float)
        if values.size == 0:
            raise ValueError(f"claim {statement!r} has no measured values")
        passes = [criterion(v) for v in values]
        if measured is None:
            measured = fmt_mean_sd(values, digits, unit, scale) if values.dtype != bool else \
                f"{sum(passes)} of {len(passes)} seeds"
        c = Claim(ref, statement, paper, [_plain(v) for v in values], criterion.text, passes, measured, why,
                  section, headline)
        self.claims.append(c)
        return c

    def counts(self) -> dict[str, int]:
        """How many claims hold, fail and are inconclusive."""
        return {v: sum(c.verdict == v for c in self.claims) for v in VERDICTS}

    def rows(self) -> list[list[str]]:
        """The ledger's rows: claim | paper | this book | criterion | verdict | why."""
        return [[f"{c.ref}: {c.statement}", c.paper, c.measured, c.criterion, _bold(c.verdict_text), c.why]
                for c in self.claims]

    HEADER = ("claim", "paper", "this book (mean ± sd, n seeds)", "criterion (each seed)", "verdict",
              "why it differs")

    def markdown(self) -> str:
        """The ledger as one Markdown table, with the counts above it."""
        counts = self.counts()
        head = ", ".join(f"{counts[v]} {v}" for v in VERDICTS)
        return f"**{len(self.claims)} claims: {head}.**\n\n" + markdown_table(self.rows(), self.HEADER)

    def show(self) -> None:
        """Display the ledger in the notebook."""
        from IPython.display import Markdown, display

        display(Markdown(self.markdown()))

    def to_dict(self) -> dict:
        return {"chapter": self.chapter, "title": self.title, "scale": self.scale,
                "parameters": self.parameters, "claims": [asdict(c) for c in self.claims]}

    def save(self, directory: Path | None = None) -> Path:
        """Write the ledger as JSON (atomically) for the scorecard and the verdict box."""
        directory = Path(directory or ledger_dir())
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.chapter}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1, default=_plain))
        os.replace(tmp, path)
        return path


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


def _bold(verdict: str) -> str:
    return verdict if verdict.startswith("holds") else f"**{verdict}**"


def load_ledgers(directory: Path | None = None) -> dict[str, dict]:
    """Every saved ledger in ``directory``, by chapter name."""
    directory = Path(directory or ledger_dir())
    return {p.stem: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}


def _ref(text: str, label: str) -> str:
    """A MyST cross-reference to ``label`` (a ``(label)=`` target on any page)."""
    return f"{{ref}}`{text} <{label}>`"


def _counts(ledger: dict) -> dict[str, int]:
    return {v: sum(c["verdict"] == v for c in ledger["claims"]) for v in VERDICTS}


def _verdict_cell(claim: dict) -> str:
    text = claim["verdict"] + (" (1 seed)" if len(claim["values"]) == 1 else "")
    return _bold(text)


def verdict_box_markdown(ledger: dict) -> str:
    """The box at the top of a chapter: the counts, and each headline claim with its verdict
    and a link to its evidence section."""
    counts = _counts(ledger)
    lines = [":::{admonition} Verdict: does the paper hold up?", ":class: tip", "",
             f"Of this chapter's {len(ledger['claims'])} claims (scale `{ledger.get('scale') or '?'}`), "
             f"**{counts['holds']} hold**, **{counts['fails']} fail** and **{counts['inconclusive']} are "
             "inconclusive** (the seeds disagree); the " + _ref("claim ledger", f"{ledger['chapter']}-ledger")
             + " at the end lists them all.", ""]
    headline = [c for c in ledger["claims"] if c.get("headline")] or ledger["claims"][:3]
    for c in headline:
        where = f" {_ref('Evidence', c['section'])}." if c.get("section") else ""
        lines.append(f"- **{_verdict_cell(c).strip('*')}**: {c['ref']}, {c['statement']}. "
                     f"Paper: {c['paper']}; here: {c['measured']}.{where}")
    lines.append(":::")
    return "\n".join(lines)


def scorecard_markdown(ledgers: dict[str, dict], order: Sequence[str] | None = None) -> str:
    """The book's scorecard: counts per paper, then every claim of every chapter."""
    order = [c for c in (order or ledgers) if c in ledgers]
    total = {v: 0 for v in VERDICTS}
    count_rows, claim_rows = [], []
    for name in order:
        ledger = ledgers[name]
        counts = _counts(ledger)
        for v in VERDICTS:
            total[v] += counts[v]
        link = _ref(ledger["title"], f"{name}-ledger")
        count_rows.append([link, ledger.get("scale", ""), len(ledger["claims"]),
                           *(counts[v] for v in VERDICTS)])
        for c in ledger["claims"]:
            claim_rows.append([ledger["title"], f"{c['ref']}: {c['statement']}", c["paper"], c["measured"],
                               _verdict_cell(c), c["why"]])
    count_rows.append(["**all papers**", "", sum(total.values()), *(total[v] for v in VERDICTS)])
    return ("## Counts per paper\n\n"
            + markdown_table(count_rows, ["paper", "scale", "claims", *VERDICTS], ["l", "l", "r", "r", "r", "r"])
            + "\n\n## Every claim\n\nEach chapter's ledger also gives the criterion every seed's value "
            "had to pass.\n\n"
            + markdown_table(claim_rows, ["paper", "claim", "paper reports", "this book", "verdict",
                                          "why it differs"]))


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
    who = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {list(seeds)}"
    return f"at {factor:g}x the rounds ({who}): {fmt(base.mean())} → {fmt(stretched.mean())}{unit}, {trend}"

