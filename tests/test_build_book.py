"""The book build's own checks (tools/build_book.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

from build_book import raw_tables  # noqa: E402


def test_raw_tables_finds_a_table_rendered_as_text(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "good.html").write_text(
        "<table><tr><td>—</td></tr></table><pre>print('| a |\\n|---|')</pre>")     # code may show pipes
    (tmp_path / "book" / "bad.html").write_text("<p>| claim | verdict |\n|—|—|\n| x | holds |</p>")
    (tmp_path / "book" / "dashes.html").write_text("<p>| a | b |\n|---|---|---|</p>")
    assert raw_tables(tmp_path) == ["book/bad.html", "book/dashes.html"]
