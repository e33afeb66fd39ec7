"""The PDF edition (``make pdf``, tools/print_pdf.py): one file holding every page of the
book in the order of ``_toc.yml``, after a title page and the contents, each page of the
book numbered and each page's title where the contents say.

The PDF is ``<build>/pdf/hetfl.pdf`` (``make test`` prints the smoke build's); the test
prints it when it is missing or older than the rendered pages.
"""
import importlib.util
import re
import unicodedata
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
    """``text`` with its whitespace folded and a word hyphenated over two lines whole again
    (a PDF breaks a title anywhere), its ligatures spelt out ("ﬁ" is "fi")."""
    text = " ".join(unicodedata.normalize("NFKC", text).split())
    return re.sub(r"(?<=\w)- (?=\w)", "-", text)


def test_the_pdf_has_every_page_of_the_book_a_contents_page_and_page_numbers(build_dir, pdf):
    from bs4 import BeautifulSoup

    reader = pypdf.PdfReader(pdf)
    sheets = [words(page.extract_text()) for page in reader.pages]
    numbered = [re.search(r"(\d+) / (\d+)$", text) for text in sheets]
    front = next(i for i, m in enumerate(numbered) if m)          # the title page, contents
    assert front >= 2 and not any(numbered[:front])
    body = len(sheets) - front
    assert [m and (int(m[1]), int(m[2])) for m in numbered[front:]] == \
        [(i, body) for i in range(1, body + 1)], "a sheet of the book has no or a wrong number"
    titles = []
    for file in print_pdf.toc_files():
        page = BeautifulSoup((build_dir / "html" / f"{file}.html").read_text(), "html.parser")
        titles.append(words(print_pdf.page_title(page.select_one("article.bd-article"))))
    assert len(titles) >= 10 and all(titles)
    front_matter = " ".join(sheets[:front])
    assert "Contents" in front_matter
    contents = front_matter[front_matter.index("Contents"):]         # after the title page
    starts = []
    for title in titles:
        number = re.search(re.escape(title) + r" (\d+)", contents)
        assert number, f"{title!r} is not in the contents with a page number"
        starts.append(int(number.group(1)))
        assert title in sheets[front + starts[-1] - 1], f"{title!r} is not on page {starts[-1]}"
    assert starts[0] == 1 and starts == sorted(starts) and body > len(titles)
    assert reader.outline, "the PDF has no outline (bookmarks)"
