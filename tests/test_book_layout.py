"""What every stored chapter looks like (CHAPTERS.md, "What a reader sees")."""
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted(p for p in (ROOT / "book").glob("*.md") if p.read_text().startswith("---\njupytext:"))
PAPERS = ("fedlps", "heroes", "ofa_fl", "srp_pfed", "lightweight_pfl")


def cells(path):
    """The cells of a chapter stored as MyST Markdown (as jupytext reads them)."""
    import jupytext

    return jupytext.read(path)["cells"]


def test_every_chapter_is_stored_as_myst_markdown_and_none_as_a_notebook():
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    import build_book

    assert not list((ROOT / "book").glob("*.ipynb"))
    stems = [p.stem for p in build_book.chapters()]
    assert {p.stem for p in CHAPTERS} == set(stems) and len(stems) == 8
    for path in CHAPTERS:
        head = path.read_text().split("\n---", 1)[0]
        assert "format_name: myst" in head and "kernelspec:" in head, path


def text(cell):
    return "".join(cell["source"])


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_first_code_cell_is_the_install_cell_the_build_fills_in(path):
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    import build_book

    first = next(c for c in cells(path) if c["cell_type"] == "code")
    assert build_book.INSTALL_TAG in first["metadata"]["tags"]
    # stored as the build renders it with no public repository configured
    assert text(first) == build_book.install_cell_source("")
    assert "github.com" not in text(first)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_code_is_short_stored_clean_and_parameters_typed(path):
    code = [c for c in cells(path) if c["cell_type"] == "code"]
    assert all(not c.get("outputs") for c in code), "stored with outputs"
    assert max(len(text(c).splitlines()) for c in code) <= 40
    assert max(len(line) for c in code for line in text(c).splitlines()) <= 88
    params = [c for c in code if "parameters" in c["metadata"].get("tags", [])]
    assert len(params) == 1
    assigned = [line for line in text(params[0]).splitlines() if re.match(r"^\w+\s*[:=]", line)]
    assert assigned and all(re.match(r"^\w+: [\w |\[\]]+ = ", line) for line in assigned), assigned
    assert any("check_parameters(globals()" in text(c)
               or re.search(r"Chapter\([^)]*globals\(\)", text(c)) for c in code)


@pytest.mark.parametrize("stem", (*PAPERS, "arena"))   # the arena has a ledger too
def test_a_paper_chapter_has_its_verdict_box_and_ledger(stem):
    nb = cells(ROOT / "book" / f"{stem}.md")
    boxes = [i for i, c in enumerate(nb) if "verdict-box" in c["metadata"].get("tags", [])]
    first_section = next(i for i, c in enumerate(nb) if c["cell_type"] == "markdown"
                         and re.search(r"^## ", text(c), re.M))
    assert len(boxes) == 1 and boxes[0] < first_section             # at the end of the introduction
    markdown = "\n".join(text(c) for c in nb if c["cell_type"] == "markdown")
    assert f"({stem}-ledger)=\n## Paper vs this book" in markdown
    code = "\n".join(text(c) for c in nb if c["cell_type"] == "code")
    assert ".save()" in code and ".show()" in code


def test_the_book_cites_papers_not_specs():
    for path in [*CHAPTERS, *(ROOT / "hetfl_core").rglob("*.py")]:
        assert not re.search(r"spec §|paper 00[0-4]|\.\./shared", path.read_text()), path


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_figure_a_cell_draws_has_a_caption_and_a_name(path):
    """A figure is numbered ("Fig. 3.4") and can be referred to by its name only when its
    cell gives both (myst-nb's ``mystnb: figure:`` cell option); one figure a cell, and the
    cell shows nothing after it."""
    import ast

    def shows(statement) -> int:
        """How many ``plt.show()`` calls a top-level statement makes (a function's body
        draws when it is called, in the cell that calls it)."""
        if isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
            return 0
        return sum(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "show"
                   and getattr(n.func.value, "id", "") == "plt" for n in ast.walk(statement))

    for cell in cells(path):
        if cell["cell_type"] != "code":
            continue
        drawn = sum(shows(s) for s in ast.parse(text(cell)).body)
        if not drawn:
            continue
        figure = cell["metadata"].get("mystnb", {}).get("figure", {})
        assert figure.get("caption") and figure.get("name", "").startswith("fig-"), text(cell)[:300]
        assert drawn == 1, text(cell)[:300]
        # nothing after it: myst-nb would wrap a second output in the figure, named again
        after = text(cell).rsplit("plt.show()", 1)[1].strip()
        assert not after or after.startswith("else:"), text(cell)[-300:]   # else: no figure


#: the chapter's calls that state a claim and show its verdict row where it is made
STATING = ("state", "headline")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_claim_shows_its_verdict_where_it_is_made(path):
    """A claim is made in the chapter, under its evidence, and reads there as its one-row
    verdict: a collapsed cell (``hide-input``) that makes one either calls
    ``book.state`` or ``book.headline`` (or a chapter helper that does) or leaves the
    claim as the cell's last value; no removed cell makes one."""
    import ast

    def name(call) -> str:
        return getattr(call.func, "id", "") or getattr(call.func, "attr", "")

    def calls(node):
        """The claim-making calls in ``node``: ``book.claim``, ``book.state``,
        ``book.headline`` and the chapter's ``*_claim`` helpers."""
        return [n for n in ast.walk(node) if isinstance(n, ast.Call)
                and (name(n).endswith("claim") or name(n) in STATING)]

    trees = [ast.parse(text(c)) for c in cells(path) if c["cell_type"] == "code"]
    showing = set(STATING) | {f.name for tree in trees for f in ast.walk(tree)
                              if isinstance(f, ast.FunctionDef)
                              and any(name(n) in STATING for n in calls(f))}
    for cell in cells(path):
        tags = set(cell["metadata"].get("tags", []))
        if cell["cell_type"] != "code" or not tags & {"hide-input", "remove-input", "remove-cell"}:
            continue
        body = ast.parse(text(cell)).body
        made = [n for s in body if not isinstance(s, (ast.FunctionDef, ast.ClassDef))
                for n in calls(s)]
        assert not (made and "remove-cell" in tags), text(cell)[:300]
        last = body[-1] if body and not text(cell).rstrip().endswith(";") else None
        shown_last = isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and \
            name(last.value).endswith("claim")
        for call in made:
            assert name(call) in showing or (shown_last and call is last.value), \
                f"a collapsed claim that shows no verdict row: {text(cell)[:300]}"


#: what a visible code block may hold: the code column fits 76 characters at a 1280 px
#: wide window (wider lines scroll sideways), and a cell of at most 40 lines is read whole
CODE_COLUMN, CELL_LINES = 76, 40
HIDDEN_TAGS = {"hide-input", "remove-input", "remove-cell", "hide-cell"}
#: the pages whose visible code is held to that: every page that passes it
FITTING_PAGES = ("intro", "foundations", "baselines", "fedlps", "heroes", "ofa_fl", "srp_pfed",
                 "lightweight_pfl", "arena", "execution", "scorecard")


def visible_code(path: Path) -> list[str]:
    """The code a reader sees on a page: its fenced code blocks and, in a chapter, the
    sources of its code cells that are not hidden or removed."""
    fenced, open_fences = [], []        # the fences open around a line: (backticks, block)
    for line in path.read_text().splitlines():
        ticks = re.match(r"^(`{3,})(.*)$", line)
        if ticks and open_fences and ticks.group(1) == open_fences[-1][0] and not ticks.group(2).strip():
            _, block = open_fences.pop()           # a closing fence
            if block is not None:
                fenced.append("\n".join(block))
        elif ticks:                                # an opening one: ```bash, ````{exercise}
            plain = not ticks.group(2).lstrip().startswith("{")
            open_fences.append((ticks.group(1), [] if plain else None))
        elif open_fences and open_fences[-1][1] is not None:
            open_fences[-1][1].append(line)
    if path not in CHAPTERS:
        return fenced
    return fenced + [text(c) for c in cells(path) if c["cell_type"] == "code"
                     and not HIDDEN_TAGS & set(c["metadata"].get("tags", []))]


def code_too_wide(blocks: list[str]) -> list[str]:
    """The lines wider than :data:`CODE_COLUMN` and the blocks longer than
    :data:`CELL_LINES`, one line each."""
    problems = []
    for block in blocks:
        lines = block.rstrip("\n").splitlines()
        if len(lines) > CELL_LINES:
            problems.append(f"a cell of {len(lines)} lines: {lines[0][:60]!r}")
        problems += [f"{len(line)} characters: {line[:60]!r}" for line in lines if len(line) > CODE_COLUMN]
    return problems


@pytest.mark.parametrize("stem", FITTING_PAGES)
def test_visible_code_fits_the_code_column(stem):
    assert code_too_wide(visible_code(ROOT / "book" / f"{stem}.md")) == []


def test_the_code_column_check_finds_a_wide_line_and_a_long_cell():
    assert code_too_wide(["x = 1\n" * 40, "y = 2\n"]) == []
    found = code_too_wide(["x = 1\n" * 41, "z = '" + "a" * 80 + "'\n"])
    assert len(found) == 2 and found[0].startswith("a cell of 41 lines")
    assert found[1].startswith("86 characters")
