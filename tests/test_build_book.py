"""The book build's own checks (tools/build_book.py)."""
import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow     # servers, notebooks, processes or long runs: not in make test-fast

ROOT = Path(__file__).resolve().parent.parent

_spec = importlib.util.spec_from_file_location(
    "build_book", Path(__file__).resolve().parent.parent / "tools" / "build_book.py")
build_book = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_book)
raw_tables = build_book.raw_tables


def test_raw_tables_finds_a_table_rendered_as_text(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "good.html").write_text(
        "<table><tr><td>—</td></tr></table><pre>print('| a |\\n|---|')</pre>")     # code may show pipes
    (tmp_path / "book" / "bad.html").write_text("<p>| claim | verdict |\n|—|—|\n| x | holds |</p>")
    (tmp_path / "book" / "dashes.html").write_text("<p>| a | b |\n|---|---|---|</p>")
    assert raw_tables(tmp_path) == ["book/bad.html", "book/dashes.html"]


def test_verdict_boxes_and_scorecard_come_from_the_ledgers(tmp_path, monkeypatch):
    import json

    from hetfl_core.book.report import Ledger, at_least, load_ledgers

    root, staging = tmp_path / "repo", tmp_path / "staging"
    for base in (root, staging):
        (base / "book").mkdir(parents=True)
    cell = {"cell_type": "markdown", "metadata": {"tags": ["verdict-box"]}, "source": "placeholder"}
    for name in ("alpha", "beta"):
        (staging / "book" / f"{name}.ipynb").write_text(json.dumps({"cells": [cell], "metadata": {}}))
    (staging / "book" / "scorecard.md").write_text("# Scorecard\n\nintro\n<!-- scorecard -->\nstale\n")
    monkeypatch.setattr(build_book, "ROOT", root)
    notebooks = [root / "book" / "alpha.ipynb", root / "book" / "beta.ipynb"]
    ledger = Ledger("alpha", "Alpha", scale="smoke")
    ledger.claim("Table I", "A beats B", "+5", [1.0, -1.0, 0.5], at_least(0))
    ledger.save(tmp_path / "ledgers")
    ledgers = load_ledgers(tmp_path / "ledgers")
    assert build_book.fill_verdicts(staging, notebooks, ledgers) == ["beta"]      # beta wrote none
    box = json.loads((staging / "book" / "alpha.ipynb").read_text())["cells"][0]["source"]
    assert "1 counted paper claim: 0 hold, 0 fail, 1 is inconclusive." in box
    assert build_book.write_scorecard(staging, notebooks, ledgers)
    page = (staging / "book" / "scorecard.md").read_text()
    assert page.startswith("# Scorecard\n\nintro\n") and "stale" not in page and "A beats B" in page


def test_strip_solutions_keeps_exercises_and_text():
    text = ("intro\n```{exercise}\n:label: ex-a\nDo it.\n```\n\n```{solution} ex-a\n:class: dropdown\n"
            "Done: 42.\n```\n\n````{solution} ex-b\n```python\nprint(1)\n```\n````\n:::{solution} ex-c\nthree\n:::\nend\n")
    out, removed = build_book.strip_solutions(text)
    assert removed == 3
    assert "Done" not in out and "print(1)" not in out and "three" not in out
    assert "```{exercise}\n:label: ex-a\nDo it.\n```" in out and out.startswith("intro") and out.endswith("end\n")
    import pytest

    with pytest.raises(ValueError):
        build_book.strip_solutions("```{solution} x\nnever closed\n")


def test_student_edition_removes_every_solution(tmp_path):
    import json

    staging = tmp_path / "src"
    (staging / "book").mkdir(parents=True)
    cell = {"cell_type": "markdown", "metadata": {},
            "source": ["```{exercise}\n", ":label: e1\n", "Q\n", "```\n", "```{solution} e1\n", "A\n", "```\n"]}
    code = {"cell_type": "code", "metadata": {}, "source": "x = '```{solution}'", "outputs": []}
    (staging / "book" / "ch.ipynb").write_text(json.dumps({"cells": [cell, code], "metadata": {}}))
    (staging / "book" / "page.md").write_text("```{solution} e2\nB\n```\n")
    (staging / "_config.yml").write_text("title: t\n")
    assert build_book.student_edition(staging, tmp_path / "student") == 2
    nb = json.loads((tmp_path / "student" / "book" / "ch.ipynb").read_text())
    assert nb["cells"][0]["source"] == "```{exercise}\n:label: e1\nQ\n```\n"
    assert nb["cells"][1]["source"] == code["source"]                  # code is left alone
    assert (tmp_path / "student" / "book" / "page.md").read_text() == ""
    assert "title: t (student edition)" in (tmp_path / "student" / "_config.yml").read_text()
    assert "A\n" in "".join(cell["source"])                             # the full book is untouched


def test_student_edition_removes_gated_solutions_and_their_code(tmp_path):
    import json

    def md(text):
        return {"cell_type": "markdown", "metadata": {}, "source": text}

    def code(text, tags=()):
        return {"cell_type": "code", "metadata": {"tags": list(tags)}, "source": text,
                "outputs": []}

    cells = [md("```{exercise}\n:label: e1\nQ\n```\n\n"
                "```{solution-start} e1\n:class: dropdown\n```\nWe compute it:\n"),
             code("print(42)", ["solution"]), code("print(43)"),
             md("so the answer is above.\n```{solution-end}\n```\n\nAfter.\n"),
             code("print(1)")]
    staging = tmp_path / "src"
    (staging / "book").mkdir(parents=True)
    (staging / "book" / "ch.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}}))
    assert build_book.student_edition(staging, tmp_path / "student") == 1
    nb = json.loads((tmp_path / "student" / "book" / "ch.ipynb").read_text())
    assert [c["source"] for c in nb["cells"]] == [
        "```{exercise}\n:label: e1\nQ\n```\n\n", "\nAfter.\n", "print(1)"]
    import pytest

    with pytest.raises(ValueError):
        build_book.strip_notebook_solutions({"cells": cells[:3]})


def test_count_class_counts_whole_class_names(tmp_path):
    (tmp_path / "a.html").write_text('<div class="exercise admonition"></div><div class="solution dropdown">'
                                     '</div><div class="exercises"></div><p class="x exercise"></p>')
    assert build_book.count_class(tmp_path, "exercise") == 2
    assert build_book.count_class(tmp_path, "solution") == 1


def test_execution_report_rows_come_from_papermill_and_the_run_logs(tmp_path, monkeypatch):
    import json

    root, staging = tmp_path / "repo", tmp_path / "staging"
    (staging / "book").mkdir(parents=True)
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# Alpha: a paper\n", "text"]}],
          "metadata": {"papermill": {"start_time": "2026-11-24T10:00:05.1", "duration": 61.4,
                                     "parameters": {"scale": "book", "seed": 3}}}}
    (staging / "book" / "alpha.ipynb").write_text(json.dumps(nb))
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "alpha.jsonl").write_text("\n".join(
        json.dumps({"seed": s, "cached": c, "method": "m", "dataset": "digits", "key": k,
                    "data": "0123456789abcdef"})
        for s, c, k in [(3, True, "k1"), (4, False, "k2"), (5, False, "k2")]))
    monkeypatch.setattr(build_book, "ROOT", root)
    monkeypatch.setattr(build_book, "RUN_LOGS", logs)
    rows = build_book.execution_rows(staging, [root / "book" / "alpha.ipynb"], "book", "2026-11-24 09:59", {})
    assert rows == [["{doc}`Alpha <alpha>`", "2026-11-24 10:00", "61 s", "book", "seed=3",
                     "3, 4, 5", "1 + 2", 2]]
    assert len(rows[0]) == len(build_book.EXECUTION_HEADER)
    data = build_book.data_rows(staging, [root / "book" / "alpha.ipynb"])
    assert data == [["{doc}`Alpha <alpha>`", "digits", "`0123456789abcdef`"]]
    junit = tmp_path / "nbval.xml"
    junit.write_text('<testsuites><testsuite><testcase classname="book.alpha.ipynb" name="Cell 0" time="1.5"/>'
                     '<testcase classname="book.alpha.ipynb" name="Cell 1" time="2.0"/></testsuite></testsuites>')
    assert build_book.chapter_seconds(junit) == {"alpha": 3.5}
    (staging / "book" / "execution.md").write_text(
        "# Execution report\n<!-- execution-report -->\nSTALE\n")
    assert build_book.write_execution_report(staging, rows, data, commit="0123abcd4567")
    page = (staging / "book" / "execution.md").read_text()
    assert "STALE" not in page and "| 61 s |" in page and "torch" in page
    assert "commit `0123abcd4567`" in page and "| digits | `0123456789abcdef` |" in page


def test_the_commit_is_the_checkouts_head(tmp_path):
    import subprocess

    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    assert build_book.git_commit().startswith(head) and len(head) == 12
    assert build_book.git_commit(tmp_path) == "unknown"          # not a git checkout


def test_no_public_repository_means_no_launch_buttons_and_a_checkout_install(tmp_path):
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["repository"]["url"] = ""
    bare = build_book.repository_settings(config)
    assert "launch_buttons" not in bare and "repository" not in bare
    assert bare["html"]["use_repository_button"] is False
    config["repository"].update(url="https://example.org/someone/hetfl/", path_to_book=".")
    public = build_book.repository_settings(config)
    assert public["launch_buttons"] and public["html"]["use_repository_button"]
    assert public["repository"]["path_to_book"] == ""                # no "/./" in Colab links
    assert build_book.repository_url(config) == "https://example.org/someone/hetfl"
    nb = tmp_path / "x.ipynb"
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {"tags": ["install"]},
                                         "source": ["old"], "outputs": []}], "metadata": {}}))
    assert build_book.set_install_cell(nb, "https://example.org/someone/hetfl")
    assert "git+https://example.org/someone/hetfl" in "".join(json.loads(nb.read_text())["cells"][0]["source"])
    assert build_book.set_install_cell(nb, "")
    source = "".join(json.loads(nb.read_text())["cells"][0]["source"])
    assert f'WHEEL = "{build_book.wheel_name()}"' in source and "git+" not in source
    compile(source, "install", "exec")
    compile(build_book.install_cell_source("https://example.org/x"), "install", "exec")


def test_the_install_cell_installs_the_wheel_beside_the_notebook_or_says_where_to_get_it(
        tmp_path, monkeypatch):
    """Run where the library is 'missing' (find_spec patched): with no wheel in the folder
    it raises one line naming the wheel and where to get it; with one it calls pip on it."""
    import subprocess

    source = build_book.install_cell_source("", "hetfl_core-9.9-py3-none-any.whl")
    calls = []
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "hetfl_core" else find_spec(name, *a))
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: calls.append(cmd))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="hetfl_core-9.9-py3-none-any.whl is not here: "
                                               "download it from the book's first page"):
        exec(source, {})
    assert not calls
    (tmp_path / "hetfl_core-9.9-py3-none-any.whl").write_text("")
    exec(source, {})
    assert calls and calls[0][-1] == "hetfl_core-9.9-py3-none-any.whl" and "install" in calls[0]


def test_the_build_ships_the_librarys_wheel_and_the_intro_links_it(tmp_path):
    wheel = build_book.build_wheel(tmp_path / "wheel")     # its contents: test_packaging.py
    assert wheel.name == build_book.wheel_name() == f"hetfl_core-{build_book.package_version()}-py3-none-any.whl"
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "intro.md").write_text("Download. <!-- install -->\n\nRest.\n")
    assert build_book.write_install(tmp_path, "", wheel.name, "0123abcd4567")
    text = (tmp_path / "book" / "intro.md").read_text()
    assert f"{{download}}`{wheel.name} <wheel/{wheel.name}>`" in text
    assert "commit `0123abcd4567`" in text and f"pip install {wheel.name}" in text and "git+" not in text
    assert "git+https://example.org/x" in build_book.install_markdown("https://example.org/x", wheel.name, "c")


def test_the_intro_states_the_measured_chapter_times(tmp_path):
    assert build_book.timing_markdown({}, "book") == ""
    text = build_book.timing_markdown({"heroes": 643.2, "fedlps": 2711.0, "arena": 1200.0}, "book")
    assert "its 3 chapters at scale `book`, in 643 to 2,711 s each" in text
    assert "<execution-report>" in text


def test_the_intro_states_the_books_totals(tmp_path):
    from hetfl_core.book.report import Ledger, at_least

    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "intro.md").write_text("before\n\n<!-- totals -->\n\nafter\n")
    paper = Ledger("fedlps", "FedLPS", scale="book")
    paper.claim("T", "a", "x", [1.0, 2.0, 1.5], at_least(0))
    paper.claim("T", "b", "x", [1.0], at_least(0))
    arena = Ledger("arena", "Arena", scale="book")
    arena.claim("T", "c", "x", [-1.0, -2.0, -1.5], at_least(0))
    ledgers = {"fedlps": paper.to_dict(), "arena": arena.to_dict()}
    assert build_book.write_totals(tmp_path, ledgers, "book")
    text = (tmp_path / "book" / "intro.md").read_text()
    assert "1 counted paper claim: 1 holds, 0 fail, 0 are inconclusive; 1 indicative" in text
    assert "The arena adds 1 counted paper claim: 0 hold, 1 fails" in text
    assert text.startswith("before") and text.rstrip().endswith("after")


def test_a_chapter_is_myst_markdown_and_is_staged_as_the_notebook_it_holds(tmp_path):
    """Chapters are stored as MyST Markdown (jupytext); the build runs and renders the
    notebook each holds, cell for cell, tags kept."""
    import jupytext

    chapter = tmp_path / "ch.md"
    header = (ROOT / "book" / "foundations.md").read_text().split("\n---\n", 1)[0]   # a real chapter's
    chapter.write_text(header + "\n---\n\n# Ch\n\n```{code-cell} ipython3\n:tags: [parameters]\n\n"
                       "scale: str = \"book\"\n```\n\ntext\n")
    page = tmp_path / "page.md"
    page.write_text("---\ntitle: x\n---\n# A page\n")
    assert build_book.is_chapter(chapter) and not build_book.is_chapter(page)
    assert not build_book.is_chapter(tmp_path / "missing.md")
    nb = json.loads(build_book.to_notebook(chapter, tmp_path / "out" / "ch.ipynb").read_text())
    kinds = [c["cell_type"] for c in nb["cells"]]
    assert kinds == ["markdown", "code", "markdown"]
    assert nb["cells"][1]["metadata"]["tags"] == ["parameters"]
    assert "".join(nb["cells"][1]["source"]) == 'scale: str = "book"'
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    assert jupytext.read(chapter)["cells"][1]["source"] == 'scale: str = "book"'
    assert [p.suffix for p in build_book.chapters()] == [".md"] * 8


def test_chapters_start_longest_first_by_the_recorded_seconds(tmp_path):
    nbs = [Path(f"book/{n}.md") for n in ("intro_a", "long", "short", "new", "mid")]
    seconds = tmp_path / "seconds.json"
    seconds.write_text(json.dumps({"_about": "x", "intro_a": 5, "long": 900, "short": 10, "mid": 300}))
    assert [p.stem for p in build_book.longest_first(nbs, seconds)] == ["new", "long", "mid", "short", "intro_a"]
    assert build_book.longest_first(nbs, tmp_path / "missing.json") == nbs
    seconds.write_text("not json")
    assert build_book.longest_first(nbs, seconds) == nbs


def test_the_recorded_seconds_name_every_chapter():
    recorded = json.loads(build_book.CHAPTER_SECONDS.read_text())
    assert sorted(k for k in recorded if not k.startswith("_")) == sorted(p.stem for p in build_book.chapters())
