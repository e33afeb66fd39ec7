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


def blank_sheets(reader) -> list[int]:
    """The sheets (1-based) with nothing on them but their page number: no other text and
    no image."""
    blank = []
    for i, page in enumerate(reader.pages, 1):
        text = re.sub(r"\d+ / \d+", "", page.extract_text() or "").strip()
        resources = page.get("/Resources") or {}
        images = resources.get("/XObject") or {}
        if not text and not len(images):
            blank.append(i)
    return blank


def test_the_pdf_prints_what_the_html_folds_and_has_no_blank_sheet(pdf):
    reader = pypdf.PdfReader(pdf)
    text = words(" ".join(page.extract_text() for page in reader.pages))
    # no toggle printed shut: hidden code is left out with a note, other folds print open
    assert "Show code cell source" not in text and "Hide code cell source" not in text
    assert "left out of print; the chapter's notebook holds" in text
    assert "criterion, bounds and why it differs" in text          # a ledger row's fold, open
    assert blank_sheets(reader) == []


def test_the_title_page_names_authors_scale_commit_and_licence_and_the_contents_sections(
        build_dir, pdf):
    import json

    reader = pypdf.PdfReader(pdf)
    title = words(reader.pages[0].extract_text())
    built = json.loads((build_dir / "build.json").read_text())
    for field in (f"Authors: {print_pdf.title_facts(build_dir)['Authors']}",
                  f"Scale: {built['scale']}", f"Commit: {built['commit']}", "Licence: MIT License"):
        assert field in title, (field, title)
    contents = words(" ".join(page.extract_text() for page in reader.pages[1:4]))
    assert contents.count("Exercises") >= 5, "the contents list no sections"


def test_the_html_links_the_pdf(build_dir, pdf):
    from bs4 import BeautifulSoup

    first = print_pdf.toc_files()[0]
    soup = BeautifulSoup((build_dir / "html" / f"{first}.html").read_text(), "html.parser")
    links = soup.select(f".{print_pdf.PDF_LINK_CLASS} a")
    assert len(links) == 1
    target = (build_dir / "html" / first).parent / links[0]["href"]
    assert target.resolve().read_bytes() == pdf.read_bytes()


def test_the_blank_sheet_check_finds_a_blank_sheet(tmp_path):
    writer = pypdf.PdfWriter()
    writer.add_blank_page(width=595, height=842)
    writer.write(tmp_path / "blank.pdf")
    assert blank_sheets(pypdf.PdfReader(tmp_path / "blank.pdf")) == [1]
