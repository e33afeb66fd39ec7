"""The PDF edition (``make pdf``, tools/print_pdf.py): one file holding every page of the
book in the order of ``_toc.yml``, with a contents page and a number on every sheet.

The PDF is ``<build>/pdf/hetfl.pdf`` (``make test`` prints the smoke build's); the test
prints it when it is missing or older than the rendered pages.
"""
import importlib.util
import re
from pathlib import Path

import pytest

pypdf = pytest.importorskip("pypdf", reason="pypdf is in requirements.txt")
pytest.importorskip("playwright.sync_api", reason="playwright is in requirements.txt")

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("print_pdf", ROOT / "tools" / "print_pdf.py")
print_pdf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(print_pdf)


@pytest.fixture(scope="module")
def pdf(build_dir) -> Path:
    path = build_dir / "pdf" / "hetfl.pdf"
    html = build_dir / "html"
    if not path.exists() or path.stat().st_mtime < (html / "index.html").stat().st_mtime:
        print_pdf.print_pdf(html, path)
    return path


def words(text: str) -> str:
    """``text`` with its whitespace folded (a PDF breaks a title over lines anywhere)."""
    return " ".join(text.split())


def test_the_pdf_has_every_page_of_the_book_a_contents_page_and_page_numbers(build_dir, pdf):
    from bs4 import BeautifulSoup

    reader = pypdf.PdfReader(pdf)
    sheets = [words(page.extract_text()) for page in reader.pages]
    files = print_pdf.toc_files()
    titles = []
    for file in files:
        page = BeautifulSoup((build_dir / "html" / f"{file}.html").read_text(), "html.parser")
        titles.append(print_pdf.page_title(page.select_one("article.bd-article")))
    assert len(titles) >= 10 and all(titles)
    contents = next(i for i, text in enumerate(sheets) if text.startswith("Contents"))
    listed = sheets[contents]
    starts = []
    for title in titles:
        title = words(title)
        assert title in listed, f"{title!r} is not in the contents"
        number = re.search(re.escape(title) + r" (\d+)", listed)
        assert number, f"{title!r} has no page number in the contents"
        starts.append(int(number.group(1)))
        sheet = starts[-1] - 1
        assert title in sheets[sheet], f"{title!r} is not on sheet {starts[-1]} as listed"
    assert starts == sorted(starts) and starts[0] > contents + 1
    total = len(sheets)
    assert total > len(titles)
    for i, text in enumerate(sheets, 1):
        assert f"{i} / {total}" in text, f"sheet {i} has no page number"
    assert reader.outline, "the PDF has no outline (bookmarks)"
