"""How many arguments the chapters pass to each ``claim(`` call.

``python tools/claim_arguments.py [--calls NAMES] [CHAPTER.md ...]`` reads the code cells of
the chapters (MyST Markdown notebooks, ``book/*.md`` by default), finds every call whose
function is named ``claim`` (``ledger.claim(...)``, ``book.claim(...)``) with :mod:`ast`, and
prints per chapter the number of calls and the median number of arguments (positional and
keyword), then the median over all of them. ``--calls claim,state,claim_cases`` counts the
calls of any of those names instead (``book.state(...)`` states a claim where it is made).
"""
from __future__ import annotations

import argparse
import ast
import pathlib
import re
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAGIC = re.compile(r"^\s*[%!].*$", re.M)


def code_cells(path: pathlib.Path) -> list[str]:
    """The code of each code cell of a chapter (read by jupytext, as the build reads it),
    IPython magics (``%``, ``!``) blanked so that it parses as Python."""
    import jupytext

    return [MAGIC.sub("", cell.source) for cell in jupytext.read(path).cells if cell.cell_type == "code"]


def claim_arguments(source: str, names: tuple[str, ...] = ("claim",)) -> list[int]:
    """For every call of a function named one of ``names`` (``claim`` by default) in
    ``source``: its number of arguments (positional and keyword; a ``*args`` or
    ``**kwargs`` counts as one)."""
    counts = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in names:
                counts.append(len(node.args) + len(node.keywords))
    return counts


def chapter_arguments(path: pathlib.Path, names: tuple[str, ...] = ("claim",)) -> list[int]:
    """The argument counts of every call of one of ``names`` in a chapter's code cells (a
    cell that mentions such a call but does not parse raises ``SyntaxError`` naming the
    chapter; other cells, such as shell commands shown on a page, are passed over)."""
    counts = []
    for i, cell in enumerate(code_cells(path)):
        if not any(f"{name}(" in cell for name in names):
            continue
        try:
            counts.extend(claim_arguments(cell, names))
        except SyntaxError as err:
            raise SyntaxError(f"{path.name}, code cell {i + 1}: {err.msg}") from None
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", type=pathlib.Path)
    parser.add_argument("--calls", default="claim",
                        help="comma-separated names of the calls to count (default: claim)")
    args = parser.parse_args(argv)
    names = tuple(name.strip() for name in args.calls.split(",") if name.strip())
    chapters = args.chapters or sorted((ROOT / "book").glob("*.md"))
    every = []
    for path in chapters:
        counts = chapter_arguments(path, names)
        if counts:
            print(f"{path.stem}: {len(counts)} calls, median {statistics.median(counts):g} arguments")
            every.extend(counts)
    if not every:
        print(f"no {', '.join(f'{name}(' for name in names)} calls", file=sys.stderr)
        return 1
    print(f"all: {len(every)} calls, median {statistics.median(every):g} arguments, "
          f"from {min(every)} to {max(every)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
