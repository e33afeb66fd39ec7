"""Each chapter's training cost in training samples at a scale, to keep its budget.

``python tools/training_cost.py [SCALE] [CHAPTER ...]`` plans each chapter (default: all
of them) at ``SCALE`` (default ``book``) without training (:func:`hetfl_core.book.plan_chapter`:
the chapter runs and its sweeps only record their configs) and prints, per sweep, its
distinct runs and their cost (:func:`hetfl_core.book.training_samples`: participants per
round x rounds x samples a visit). Equal configs are counted once, as the cache runs them
once; cached runs are counted too (this is the chapter's cost, not what is left to run).
The cost is nominal: it ignores the model's size and methods that train twice a visit
(Ditto), so it compares a chapter with itself. ``python -m hetfl_core plan CHAPTER``
prints the same plan with a time estimate measured on this machine.
"""
from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from hetfl_core import RunConfig  # noqa: E402
from hetfl_core.book import plan_chapter, training_samples  # noqa: E402


def chapter_cost(name: str, scale: str) -> dict[str, tuple[int, float]]:
    """Per sweep of chapter ``name`` at ``scale``: its distinct runs and their training samples."""
    records, errors = plan_chapter(ROOT / "book" / f"{name}.md", scale)
    if errors:
        print(f"{name}: {len(errors)} cell(s) failed on planned (empty) results; first: {errors[0]}",
              file=sys.stderr)
    seen, parts = set(), {}
    for r in records:
        if r["key"] in seen:
            continue
        seen.add(r["key"])
        runs, cost = parts.get(r["where"], (0, 0.0))
        parts[r["where"]] = (runs + 1, cost + training_samples(RunConfig.from_dict(r["config"])))
    return parts


def main(argv) -> int:
    """Print each chapter's runs and training samples at the scale given (book)."""
    from build_book import chapters

    scale = argv[0] if argv else "book"
    names = argv[1:] or [p.stem for p in chapters()]
    for name in names:
        parts = chapter_cost(name, scale)
        total = sum(cost for _, cost in parts.values())
        print(f"{name}: {total / 1e6:.3f} M training samples")
        for where, (runs, cost) in parts.items():
            print(f"  {where:32s} {runs:4d} runs {cost / 1e6:9.2f} M samples")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
