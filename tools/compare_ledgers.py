"""Which verdicts differ between two sets of ledgers, and what the book's claims would say
under the rule that judged them from every seed alone.

``python tools/compare_ledgers.py BEFORE_DIR AFTER_DIR [--names A B]`` reads the ledgers
(``<chapter>.json``, as :meth:`hetfl_core.book.report.Ledger.save` writes them) of two runs of
the book, e.g. a build with ``-p baselines simplified`` and one with the baselines as their
authors ran them, matches claims by chapter, reference and statement, and prints per
chapter the claims whose verdict differs, with both sides' values and criterion; then the
counted verdicts of each side per chapter (paper claims only).

``python tools/compare_ledgers.py --every-seed DIR`` re-judges the claims of ``DIR`` with
the rule that says *holds* when every seed passes, *fails* when none does and
*inconclusive* otherwise (whatever the number of seeds), and prints each claim whose verdict
that rule would change, beside the paired-interval verdict of
:func:`hetfl_core.book.report.judge`.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
from collections import Counter

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hetfl_core.book.report import load_ledgers  # noqa: E402

COUNTED = ("holds", "fails", "inconclusive")


def claims_of(ledgers: dict) -> dict:
    """``{(chapter, ref, statement): claim}`` over every ledger; a repeated key is numbered."""
    out = {}
    for chapter, ledger in ledgers.items():
        for claim in ledger["claims"]:
            key = (chapter, claim["ref"], claim["statement"])
            n = 2
            while key in out:
                key, n = (chapter, claim["ref"], f"{claim['statement']} [{n}]"), n + 1
            out[key] = claim
    return out


def every_seed_verdict(claim: dict) -> str:
    """The every-seed rule: holds if every seed passes, fails if none does, else
    inconclusive (``untestable`` where no seed was judged)."""
    passes = [p for p in claim.get("passes", []) if p is not None]
    if not passes:
        return "untestable"
    return "holds" if all(passes) else "fails" if not any(passes) else "inconclusive"


def _values(claim: dict) -> str:
    return ", ".join("—" if v is None else v if isinstance(v, str) else f"{v:.3g}"
                     for v in claim["values"])


def counts(claims: dict, chapter: str) -> str:
    c = Counter(v["verdict"] for k, v in claims.items()
                if k[0] == chapter and v.get("kind", "paper") == "paper")
    counted = " / ".join(str(c.get(v, 0)) for v in COUNTED)
    return f"{counted} (holds / fails / inconclusive); indicative {c.get('indicative', 0)}, " \
           f"untestable {c.get('untestable', 0)}"


def compare(before: dict, after: dict, names: tuple[str, str]) -> None:
    chapters = sorted({k[0] for k in (*before, *after)})
    for chapter in chapters:
        changed = [(k, before.get(k), after.get(k)) for k in dict.fromkeys([*before, *after])
                   if k[0] == chapter and (before.get(k) or {}).get("verdict")
                   != (after.get(k) or {}).get("verdict")]
        print(f"## {chapter}")
        print(f"- {names[0]}: {counts(before, chapter)}")
        print(f"- {names[1]}: {counts(after, chapter)}")
        for (_, ref, statement), b, a in changed:
            side = [f"{n}: {c['verdict']} [{_values(c)}]" if c else f"{n}: (no row)"
                    for n, c in zip(names, (b, a))]
            kind = (a or b).get("kind", "paper")
            print(f"  * {ref} ({kind}) {statement}: " + "; ".join(side))
            print(f"    criterion: {(a or b)['criterion']}")
        if not changed:
            print("  (no verdict differs)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=pathlib.Path)
    parser.add_argument("--names", nargs=2, default=("before", "after"))
    parser.add_argument("--every-seed", action="store_true",
                        help="re-judge one directory's claims with the every-seed rule")
    args = parser.parse_args(argv)
    for d in args.dirs:
        if not d.is_dir() or not list(d.glob("*.json")):
            parser.error(f"{d} holds no ledgers (<chapter>.json)")
    if args.every_seed:
        if len(args.dirs) != 1:
            parser.error("--every-seed takes one directory")
        claims = claims_of(load_ledgers(args.dirs[0]))
        moved = Counter()
        for (chapter, ref, statement), c in claims.items():
            old = every_seed_verdict(c)
            if old != c["verdict"] and c.get("kind", "paper") == "paper":
                moved[(old, c["verdict"])] += 1
                print(f"{chapter} {ref}: {statement}: every seed {old} -> {c['verdict']} "
                      f"[{_values(c)}] {c.get('interval_text') or ''}")
        print("moves:", ", ".join(f"{a} -> {b}: {n}" for (a, b), n in sorted(moved.items())) or "none")
        return 0
    if len(args.dirs) != 2:
        parser.error("name two ledger directories (or one with --every-seed)")
    compare(claims_of(load_ledgers(args.dirs[0])), claims_of(load_ledgers(args.dirs[1])),
            tuple(args.names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
