"""The short summary that closes a paper chapter, written from its claim ledger.

:func:`summary_markdown` turns a chapter's :class:`~hetfl_core.report.Ledger` (or a saved
ledger's ``dict``) into a few lines for people: how many of the paper's counted claims
hold, fail or stay inconclusive, which ones, and for each that does not hold the first
clause of its *why* (the measured diagnostic, or the word "conjecture"). Every number in
it comes from the ledger, so the summary cannot disagree with the table above it.
"""
from __future__ import annotations

from .report import VERDICTS, Ledger, _counts, counts_sentence

__all__ = ["summary_markdown", "first_clause"]


def first_clause(text: str, limit: int = 160) -> str:
    """The part of a *why* before its first ``"; "``, cut at ``limit`` characters."""
    head = text.split("; ", 1)[0].strip()
    return head if len(head) <= limit else head[: limit - 1].rstrip() + "…"


def summary_markdown(ledger, title: str = "") -> str:
    """Markdown summing up ``ledger`` (a :class:`~hetfl_core.report.Ledger` or its saved
    ``dict``): the counts of the counted paper claims, then one line per counted claim,
    grouped by verdict; claims that do not hold carry the first clause of their *why*.
    Uncounted claims (indicative, untestable) and checks appear only in the counts."""
    saved = ledger.to_dict() if isinstance(ledger, Ledger) else ledger
    claims = saved["claims"]
    papers = [c for c in claims if c.get("kind", "paper") == "paper"]
    lines = [f"**{title or saved.get('title', 'This chapter')} at scale "
             f"`{saved.get('scale') or '?'}`:** "
             + counts_sentence(_counts(saved), total=len(claims)), ""]
    heads = {"holds": "What held", "fails": "What failed",
             "inconclusive": "What the seeds could not decide"}
    for verdict in VERDICTS:
        rows = [c for c in papers if c["verdict"] == verdict]
        if not rows:
            continue
        lines += [f"{heads[verdict]}:", ""]
        for c in rows:
            line = f"- {c['ref']}: {c['statement']} ({c['measured']})"
            if verdict != "holds" and c.get("why"):
                line += f"; why: {first_clause(c['why'])}"
            lines.append(line + ".")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
