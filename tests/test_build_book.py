"""The book build's own checks (tools/build_book.py)."""
import importlib.util
from pathlib import Path

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

    from hetfl_core.report import Ledger, at_least, load_ledgers

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
    ledger.claim("Table I", "A beats B", "+5", [1.0, -1.0], at_least(0))
    ledger.save(tmp_path / "ledgers")
    ledgers = load_ledgers(tmp_path / "ledgers")
    assert build_book.fill_verdicts(staging, notebooks, ledgers) == ["beta"]      # beta wrote none
    box = json.loads((staging / "book" / "alpha.ipynb").read_text())["cells"][0]["source"]
    assert "**0 hold**, **0 fail** and **1 are inconclusive**" in box
    assert build_book.write_scorecard(staging, notebooks, ledgers)
    page = (staging / "book" / "scorecard.md").read_text()
    assert page.startswith("# Scorecard\n\nintro\n") and "stale" not in page and "A beats B" in page
