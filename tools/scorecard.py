"""The book's verdicts as its site shows them: the verdict box atop each paper chapter
(:func:`verdict_box_markdown`) and the scorecard page (:func:`scorecard_markdown`), written
by ``tools/build_book.py`` from the saved claim ledgers
(:func:`hetfl_core.book.report.load_ledgers`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from hetfl_core.book.report import (LEDGER_CLASS, MIN_SEEDS, NUMBERS_CLASS, SCORECARD_DETAIL,
                                    UNCOUNTED, VERDICTS, Ledger, _claim_table, _counts, _longer,
                                    _ref, _verdict_text, chance_of, counts_sentence, folded_table,
                                    judged_twice_markdown, markdown_table, sign_test_seeds, within)


def _by_chance(ledger: dict) -> float:
    """How many decisive verdicts (*holds* or *fails*) the rule would give a ledger's counted
    paper claims by chance alone, every true effect exactly on its margin."""
    return float(sum(sum(chance_of(c)) for c in ledger["claims"] if c.get("kind", "paper") == "paper"
                     and c["verdict"] in VERDICTS and np.isfinite(chance_of(c)).all()))


def _chance_sentence(ledger: dict, counts: dict[str, int]) -> str:
    """What chance alone would give among the counted verdicts, or nothing when none is
    counted (too few seeds at this scale)."""
    counted = sum(counts[v] for v in VERDICTS)
    if not counted:
        return ""
    return (" If every effect sat exactly on its margin, chance alone would give about "
            f"{_by_chance(ledger):.1f} decisive verdicts (holds or fails) among these {counted}.")


def verdict_box_markdown(ledger: dict, longer_training=None) -> str:
    """The box at the top of a chapter: the counted verdicts of the paper's claims, and
    each counted headline claim with its verdict and a link to its evidence section;
    ``longer_training(claim)``, where given, is a sentence on what longer training says
    when it says something else (:func:`hetfl_core.book.ladder.longer_training_note`), or ``None``;
    not at smoke scale, whose verdicts are a toy's, below the ladder's first rung."""
    if ledger.get("scale") == "smoke":
        longer_training = None
    counts = _counts(ledger)
    lines = [":::{admonition} Verdict: does the paper hold up?", ":class: tip", "",
             f"At scale `{ledger.get('scale') or '?'}`, {counts_sentence(counts)} A verdict is "
             f"counted when it rests on at least {MIN_SEEDS} seeds: the one-sided 90% bounds of the "
             "mean against the paper's margin." + _chance_sentence(ledger, counts) + " The "
             + _ref("claim ledger", f"{ledger['chapter']}-ledger") + " at the end lists every claim.", ""]
    counted = [c for c in ledger["claims"] if c.get("kind", "paper") == "paper" and c["verdict"] in VERDICTS]
    headline = [c for c in counted if c.get("headline")] or counted[:3]
    for c in headline:
        where = f" {_ref('Evidence', c['section'])}." if c.get("section") else ""
        lines.append(f"- **{_verdict_text(c)}**: {c['ref']}, {c['statement']}. "
                     f"Paper: {c['paper']}; here: {c['measured']}"
                     + (f"; 90% bounds {c['interval_text']}" if c.get("interval_text") else "")
                     + (f"; its seeds detect an effect of {c['detectable']} past the margin"
                        if c.get("detectable") else "") + f".{where}"
                     + _longer(c, longer_training))
    lines.append(":::")
    return "\n".join(lines)


def scorecard_markdown(ledgers: dict[str, dict], order: Sequence[str] | None = None,
                       longer_training=None) -> str:
    """The book's scorecard: per paper, the counted verdicts, then the uncounted ones and
    the book's own predictions and checks apart; then every claim, grouped by paper, the
    paper's claims in the chapter's order (the paper's) before the book's own, as the
    ledgers show them, with a link to its evidence and its per-seed values folded beneath it
    too (:data:`SCORECARD_DETAIL`); ``longer_training(chapter, claim)``, where given, says
    beside a verdict what longer training reads otherwise
    (:func:`hetfl_core.book.ladder.longer_training_note`)."""
    order = [c for c in (order or ledgers) if c in ledgers]
    columns = (*VERDICTS, *UNCOUNTED)
    count_rows, sections = [], []
    for name in order:
        ledger = ledgers[name]
        counts = _counts(ledger)
        link = _ref(ledger["title"], f"{name}-ledger")
        others = sum(c.get("kind", "paper") != "paper" for c in ledger["claims"])
        count_rows.append([link, ledger.get("scale", ""), *(counts[v] for v in columns), others,
                           _by_chance(ledger)])
        claims = sorted(ledger["claims"], key=lambda c: c.get("kind", "paper") != "paper")
        if claims:
            note = None if longer_training is None or ledger.get("scale") == "smoke" else \
                (lambda c, name=name: longer_training(name, c))      # a smoke verdict: a toy's
            rows, details = _claim_table(claims, scorecard=True, longer_training=note)
            sections.append(f"### {ledger['title']}\n\n" + folded_table(
                rows, Ledger.HEADER, details, SCORECARD_DETAIL,
                summary="criterion, per-seed values, bounds and why it differs",
                css_class=LEDGER_CLASS))
    totals = [sum(r[i] for r in count_rows) for i in range(2, len(columns) + 4)]
    count_rows.append(["**all papers**", "", *totals])
    return ("## Counts per paper\n\n"
            f"Counted: paper claims judged on at least {MIN_SEEDS} seeds by the one-sided 90% bounds "
            "of the mean against the paper's margin. With the effect exactly on the margin, a claim "
            "holds about one time in ten and fails one time in ten, for continuous, roughly "
            "symmetric paired values (strong skew on 3 seeds errs more); the last column sums these "
            "chances over each paper's counted claims: the decisive verdicts chance alone would give. "
            "A target one side never reached is bounded by the run's whole budget, in the direction "
            "the bound is valid; a claim \"in at least k of m cases\" judges each case by its own "
            "interval and counts them; a yes/no claim needs "
            f"{sign_test_seeds()} seeds. Indicative (fewer seeds) and untestable "
            "(neither side reached the target) claims are shown but not counted, and neither are "
            "this book's own predictions nor the checks of what the code enforces.\n\n"
            + within(markdown_table(count_rows, ["paper", "scale", *columns,
                                                 "predictions and checks", "decisive by chance"],
                                    ["l", "l", *["r"] * (len(columns) + 2)]), NUMBERS_CLASS)
            + judged_twice_markdown(ledgers, order)
            + "\n\n## Every claim\n\n" + "\n\n".join(sections))
