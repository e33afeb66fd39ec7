"""How many arguments the chapters pass to each call that states a claim.

``python tools/claim_arguments.py [--calls NAMES] [CHAPTER.md ...]`` reads the code cells of
the chapters (MyST Markdown notebooks, ``book/*.md`` by default), finds every call whose
function is named one of :data:`CLAIM_CALLS` (``book.state(...)``, ``book.headline(...)``,
``ledger.claim(...)``, and a chapter's own wrapper named ``claim``) with :mod:`ast`, and
prints per chapter the number of calls and the median number of arguments (positional and
keyword), then the median over all of them. ``--calls claim`` counts the calls of the
names given instead.
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
#: the calls that state a claim: the ledger's, the chapter's and its headline variant
CLAIM_CALLS = ("claim", "state", "claim_cases", "headline")


def code_cells(path: pathlib.Path) -> list[str]:
    """The code of each code cell of a chapter (read by jupytext, as the build reads it),
    IPython magics (``%``, ``!``) blanked so that it parses as Python."""
    import jupytext

    return [MAGIC.sub("", cell.source) for cell in jupytext.read(path).cells if cell.cell_type == "code"]


def _name(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")


def wrappers(trees, names: tuple[str, ...] = CLAIM_CALLS) -> set[str]:
    """The functions a chapter defines that state a claim: those that call one of
    ``names``, or such a function (a wrapper of a wrapper)."""
    found: set[str] = set()
    while True:
        more = {f.name for tree in trees for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                and any(isinstance(n, ast.Call) and _name(n) in (*names, *found) for n in ast.walk(f))}
        if more <= found:
            return found
        found |= more


def claim_arguments(source: str, names: tuple[str, ...] = CLAIM_CALLS) -> list[int]:
    """For every call of a function named one of ``names`` (:data:`CLAIM_CALLS`) in
    ``source``: its number of arguments (positional and keyword; a ``*args`` or
    ``**kwargs`` counts as one). A call that only passes its caller's ``*args`` and
    ``**kwargs`` on (a wrapper's) is not counted: the wrapper's calls are."""
    counts = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _name(node) in names:
            forwarded = all(isinstance(a, ast.Starred) for a in node.args) and \
                all(k.arg is None for k in node.keywords)
            if not forwarded:
                counts.append(len(node.args) + len(node.keywords))
    return counts


def chapter_arguments(path: pathlib.Path, names: tuple[str, ...] = CLAIM_CALLS) -> list[int]:
    """The argument counts of every call of one of ``names``, or of a function the
    chapter defines that calls one (:func:`wrappers`: ``claim_with_probe(...)`` counts as
    a claim), in a chapter's code cells (a cell that mentions such a call but does not
    parse raises ``SyntaxError`` naming the chapter; other cells, such as shell commands
    shown on a page, are passed over)."""
    parsed = []
    for i, cell in enumerate(code_cells(path)):
        try:
            parsed.append((cell, ast.parse(cell)))
        except SyntaxError as err:
            if any(f"{name}(" in cell for name in names):
                raise SyntaxError(f"{path.name}, code cell {i + 1}: {err.msg}") from None
    names = (*names, *sorted(wrappers([tree for _, tree in parsed], names)))
    counts = []
    for cell, _ in parsed:
        if any(f"{name}(" in cell for name in names):
            counts.extend(claim_arguments(cell, names))
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", type=pathlib.Path)
    parser.add_argument("--calls", default=",".join(CLAIM_CALLS),
                        help="comma-separated names of the calls to count (default: "
                             f"{','.join(CLAIM_CALLS)})")
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
