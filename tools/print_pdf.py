"""Print the rendered book to one PDF with the Chromium the browser test drives.

    python tools/print_pdf.py                      # _build/html -> _build/pdf/hetfl.pdf
    python tools/print_pdf.py --build-dir _build/smoke --out _build/smoke/pdf/hetfl.pdf

Every page of ``_toc.yml``, in its order, goes into one HTML document, each page's
article on a new sheet, with its links and images made absolute and the folded lines of
the claim ledgers open (paper cannot be clicked). Chromium (Debian's, through Playwright,
offline: the book is served from localhost) prints it with a number in every sheet's
footer; the sheet each page starts on (read with pypdf from the PDF's named destinations)
goes into the front matter, a title page and the contents, printed apart and put first.
The PDF's outline (bookmarks) lists the headings.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import posixpath
import re
import shutil
import sys
import threading
import time
from io import BytesIO
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: where the combined document is served (it exists only in the browser's route)
PRINT_PATH = "book/__print__.html"
#: page chrome left out of the print: navigation, search, buttons, the per-page footer
CHROME = (".bd-header", ".bd-sidebar-primary", ".bd-sidebar-secondary", ".bd-header-article",
          ".prev-next-footer", ".prev-next-area", ".bd-footer", ".bd-footer-content",
          "#pst-back-to-top", ".search-button__wrapper", "dialog", ".skip-link",
          "#pst-skip-link", ".headerlink", "#jb-print-docs-body", "#searchbox")
PRINT_CSS = """
/* the theme's print styles hide each page's first h1 and keep a table on one sheet */
.bd-main .bd-content .bd-article h1:first-of-type { display: block; }
.bd-main .bd-content table { break-inside: auto; }
.bd-main .bd-content { margin-left: 0; }
.hetfl-print-page { break-before: page; }
.bd-article > .hetfl-print-page:first-child { break-before: auto; }
.hetfl-print-title { text-align: center; padding-top: 30%; }
.hetfl-print-title h1 { font-size: 2.2rem; }
.hetfl-print-contents ol { list-style: none; padding-left: 0; }
.hetfl-print-contents li { display: flex; gap: 0.5rem; margin: 0.3rem 0; }
.hetfl-print-contents li .dots { flex: 1; border-bottom: 1px dotted #888; margin-bottom: 0.3rem; }
a.hetfl-print-self { color: inherit; text-decoration: none; }
.bd-main .bd-content .bd-article-container, .bd-page-width { max-width: 100%; }
.bd-container__inner, .bd-main { display: block; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; }
figure, img, mjx-container[display="true"], tr { break-inside: avoid; }
h1, h2, h3 { break-after: avoid; }
/* The theme keeps a code block, an admonition and a table whole (break-inside: avoid), in
   flex boxes: one too tall for what is left of a sheet moved to the next and left its
   empty frame, or a blank sheet, behind. In print they break like text. */
div.highlight, div[class*=highlight-], div.cell, div.cell_input, div.cell_output,
div.output, .admonition, div.admonition, .bd-main .bd-content table {
  break-inside: auto; }
div.highlight, div[class*=highlight-] { display: block; }
.admonition, div.admonition { overflow: visible; }
/* a figure taller than a sheet cannot be kept whole: it left a blank sheet before it */
img { max-height: 235mm; width: auto; max-width: 100%; object-fit: contain; }
.hetfl-print-note { font-size: 0.85em; font-style: italic; color: #555; }
.hetfl-print-title .hetfl-print-facts { margin-top: 3rem; font-size: 0.95rem; line-height: 1.6; }
.hetfl-print-contents li.section { margin: 0.1rem 0 0.1rem 1.5rem; font-size: 0.9em; }
"""
#: what the folded code cells (``hide-input``) are replaced by in print, once a page
HIDDEN_NOTE = ("{n} code cell{s} folded away on this page {are} left out of print; the "
               "chapter's notebook holds {them}.")
FOOTER = ("<div style='font-size:8px; width:100%; text-align:center; color:#555'>"
          "<span class='pageNumber'></span> / <span class='totalPages'></span></div>")


def toc_files(root: Path = ROOT) -> list[str]:
    """The book's pages in the order of ``_toc.yml`` (``"book/intro"``, ...)."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))
            walk(entry.get("chapters"))
            for part in entry.get("parts", []) if isinstance(entry, dict) else []:
                walk(part.get("chapters"))

    walk(toc.get("chapters"))
    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    return files


def anchor(file: str) -> str:
    """The id of a page's start in the combined document."""
    return "print-" + re.sub(r"[^A-Za-z0-9]+", "-", file)


def _absolute(page: str, url: str, pages: set[str]) -> str:
    """``url`` as written in ``page`` (relative to it), made absolute on the server; a link
    to another page of the book becomes an anchor in the combined document."""
    if not url or url.startswith(("#", "data:", "mailto:", "javascript:")) or urlsplit(url).scheme:
        return url
    parts = urlsplit(url)
    path = parts.path if parts.path.startswith("/") else \
        posixpath.normpath(posixpath.join(posixpath.dirname("/" + page), parts.path))
    target = path.lstrip("/").removesuffix(".html")
    if target in pages:
        return "#" + (parts.fragment or anchor(target))
    return path + (f"#{parts.fragment}" if parts.fragment else "")


def _make_absolute(soup, file: str, pages: set[str]) -> None:
    """Every link and source in ``soup`` (from ``file``'s page) made absolute
    (:func:`_absolute`)."""
    for tag in soup.find_all(["img", "a", "source", "link", "script"]):
        for attr in ("src", "href"):
            if tag.get(attr):
                tag[attr] = _absolute(f"{file}.html", tag[attr], pages)


def page_title(article) -> str:
    """The text of a page's first heading (its number included, its "#" link left out)."""
    heading = article.find(["h1", "h2"])
    if heading is None:
        return ""
    text = "".join(t for t in heading.find_all(string=True)
                   if t.find_parent(class_="headerlink") is None)
    return " ".join(text.split())


def _template(html: Path, files: list[str]):
    """The first page of the book, its chrome left out and its article empty, its links
    absolute and the print styles added: the shell both printed documents fill."""
    from bs4 import BeautifulSoup

    template = BeautifulSoup((html / f"{files[0]}.html").read_text(errors="replace"),
                             "html.parser")
    for junk in template.select(", ".join(CHROME)):
        junk.decompose()
    _make_absolute(template, files[0], set(files))
    template.select_one("article.bd-article").clear()
    style = template.new_tag("style")
    style.string = PRINT_CSS
    template.head.append(style)
    return template


def fold_for_print(article, soup) -> int:
    """Paper cannot be clicked: the code cells a page folds away (``hide-input``, a
    "Show code cell source" toggle) are left out, with one note (:data:`HIDDEN_NOTE`) at
    the top of the page, and every other fold (a ledger row's detail, a folded output) is
    printed open. Returns how many code cells were left out."""
    hidden = article.select("details.hide.above-input")
    for details in hidden:
        details.decompose()
    for details in article.select("details"):
        details["open"] = ""
    if hidden:
        n = len(hidden)
        note = soup.new_tag("p", attrs={"class": "hetfl-print-note"})
        note.string = HIDDEN_NOTE.format(n=n, s="s" * (n != 1), are="are" if n != 1 else "is",
                                         them="them" if n != 1 else "it")
        heading = article.find(["h1", "h2"])
        if heading is not None:
            heading.insert_after(note)
        else:
            article.insert(0, note)
    return len(hidden)


def _link_to_self(template, heading, target: str) -> None:
    """Wrap ``heading``'s text in a link to ``target`` (an id), so that the printed PDF
    carries a named destination there (:func:`destination_sheets` reads it)."""
    link = template.new_tag("a", attrs={"href": f"#{target}", "class": "hetfl-print-self"})
    link.extend(list(heading.contents))
    heading.append(link)


def body_document(html: Path, files: list[str]
                  ) -> tuple[str, list[tuple[str, str]], dict[str, list[tuple[str, str]]]]:
    """The book's pages as one HTML document, each on a new sheet; each page's ``(file,
    title)``; and each page's sections (its ``h2`` headings) as ``(id, title)``. A page's
    first heading links to the page's own start, and a section's to itself, so the PDF
    carries a named destination at each (:func:`destination_sheets`)."""
    from bs4 import BeautifulSoup

    template = _template(html, files)
    body = template.select_one("article.bd-article")
    titles, sections = [], {}
    for file in files:
        soup = BeautifulSoup((html / f"{file}.html").read_text(errors="replace"), "html.parser")
        article = soup.select_one("article.bd-article")
        if article is None:
            raise SystemExit(f"{html / file}.html has no article: is it a page of the book?")
        for junk in article.select(", ".join(CHROME)):
            junk.decompose()
        _make_absolute(article, file, set(files))
        fold_for_print(article, template)
        titles.append((file, page_title(article)))
        heading = article.find(["h1", "h2"])
        if heading is not None:
            _link_to_self(template, heading, anchor(file))
        sections[file] = []
        for k, section in enumerate(h for h in article.find_all("h2") if h is not heading):
            section["id"] = f"{anchor(file)}-s{k + 1}"
            sections[file].append((section["id"], " ".join(section.get_text(" ").split())))
            _link_to_self(template, section, section["id"])
        page = template.new_tag("section", attrs={"class": "hetfl-print-page",
                                                  "id": anchor(file)})
        page.extend(list(article.contents))
        body.append(page)
    return str(template), titles, sections


def front_document(html: Path, files: list[str], titles: list[tuple[str, str]],
                   numbers: dict[str, int], facts: dict[str, str] | None = None,
                   sections: dict[str, list[tuple[str, str]]] | None = None) -> str:
    """The front matter: a title page (the book's title and ``facts``: its authors, scale,
    commit, licence, in that order), then the contents: each page and its sections with
    their page numbers in the body (:func:`body_document` as printed)."""
    from bs4 import BeautifulSoup
    from html import escape

    template = _template(html, files)
    book = template.title.get_text().split("—")[-1].strip() if template.title else "hetfl"
    rows = []
    for file, title in titles:
        rows.append(f"<li><span>{escape(title)}</span><span class='dots'></span>"
                    f"<span>{numbers[file]}</span></li>")
        rows += [f"<li class='section'><span>{escape(name)}</span><span class='dots'></span>"
                 f"<span>{numbers[key]}</span></li>"
                 for key, name in (sections or {}).get(file, []) if key in numbers]
    lines = "".join(f"<div>{escape(key)}: {escape(value)}</div>"
                    for key, value in (facts or {}).items())
    template.select_one("article.bd-article").append(BeautifulSoup(
        f"<div class='hetfl-print-title'><h1>{escape(book)}</h1>"
        f"<p>{time.strftime('%Y-%m-%d')}</p><div class='hetfl-print-facts'>{lines}</div>"
        f"</div><div class='hetfl-print-contents hetfl-print-page'><h2>Contents</h2>"
        f"<ol>{''.join(rows)}</ol></div>", "html.parser"))
    return str(template)


def title_facts(build_dir: Path, root: Path = ROOT) -> dict[str, str]:
    """What the title page states: the authors (``_config.yml``), the scale and commit the
    build recorded (``<build>/build.json``, written by tools/build_book.py; "unknown"
    without it) and the licence (``pyproject.toml``)."""
    import json
    import tomllib

    import yaml

    config = yaml.safe_load((root / "_config.yml").read_text())
    record = build_dir / "build.json"
    built = json.loads(record.read_text()) if record.exists() else {}
    licence = tomllib.loads((root / "pyproject.toml").read_text())["project"]["license"]
    licence = licence.get("text", "") if isinstance(licence, dict) else str(licence)
    return {"Authors": str(config.get("author") or "unknown"),
            "Scale": str(built.get("scale", "unknown")),
            "Commit": str(built.get("commit", "unknown")),
            "Licence": f"{licence} License" if licence else "unknown"}


def serve(directory: Path):
    """An HTTP server for ``directory`` on a free localhost port, in a thread."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def destination_sheets(pdf: bytes) -> dict[str, int]:
    """The sheet (1-based) of every named destination of ``pdf``: Chromium writes one for
    each target of a link inside the document."""
    from pypdf import PdfReader

    reader = PdfReader(BytesIO(pdf))
    return {name.lstrip("/"): reader.get_destination_page_number(dest) + 1
            for name, dest in reader.named_destinations.items()}


def start_sheets(pdf: bytes, files: list[str]) -> dict[str, int]:
    """The sheet (1-based) each page starts on, from the named destinations Chromium writes
    for the links of the pages' first headings to their own starts."""
    sheets = destination_sheets(pdf)
    found = {file: sheets[anchor(file)] for file in files if anchor(file) in sheets}
    missing = [f for f in files if f not in found]
    if missing:
        raise SystemExit(f"the printed book has no start for: {', '.join(missing)}")
    return found


def _fulfil(document: str):
    """A route handler that answers with ``document``."""
    def handler(route, request=None):
        route.fulfill(body=document, content_type="text/html; charset=utf-8")

    return handler


def _print(browser, url: str, document: str, footer: bool, timeout_s: float) -> bytes:
    """``document`` (served at :data:`PRINT_PATH`, beside the book's own pages) as an A4
    PDF, with MathJax done; ``footer``: every sheet's number in its footer."""
    page = browser.new_page(viewport={"width": 1000, "height": 1400})
    page.route(f"{url}/{PRINT_PATH}", _fulfil(document))
    page.goto(f"{url}/{PRINT_PATH}", wait_until="load", timeout=timeout_s * 1000)
    page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
    page.emulate_media(media="print")
    pdf = page.pdf(format="A4", print_background=True, display_header_footer=footer,
                   header_template="<span></span>", footer_template=FOOTER,
                   margin={"top": "16mm", "bottom": "18mm", "left": "14mm", "right": "14mm"},
                   outline=True, tagged=True)
    page.close()
    return pdf


def print_pdf(html: Path, out: Path, files: list[str] | None = None,
              timeout_s: float = 300) -> dict:
    """Print the book rendered in ``html`` to ``out``: the front matter (title page and
    contents, unnumbered), then the book's pages, numbered from 1. Returns each page's
    ``(file, title, number)``, the number of sheets and the seconds it took."""
    from playwright.sync_api import sync_playwright
    from pypdf import PdfReader, PdfWriter

    start = time.perf_counter()
    files = files or toc_files()
    server, url = serve(html)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            document, titles, sections = body_document(html, files)
            body = _print(browser, url, document, True, timeout_s)
            numbers = start_sheets(body, files)
            numbers.update(destination_sheets(body))
            front = _print(browser, url, front_document(html, files, titles, numbers,
                                                        title_facts(html.parent), sections),
                           False, timeout_s)
            browser.close()
    finally:
        server.shutdown()
    writer = PdfWriter()
    writer.append(PdfReader(BytesIO(front)), import_outline=False)
    writer.append(PdfReader(BytesIO(body)))
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as f:
        writer.write(f)
    link_from_html(html, out, files[0], len(writer.pages))
    return {"pages": [(f, t, numbers[f]) for f, t in titles], "sheets": len(writer.pages),
            "seconds": time.perf_counter() - start}


PDF_LINK_CLASS = "hetfl-pdf-link"
PDF_DOWNLOAD = "_downloads/hetfl.pdf"      # where the rendered HTML carries the PDF


def link_from_html(html: Path, pdf: Path, first: str, sheets: int) -> Path:
    """Put a copy of ``pdf`` into the rendered book (:data:`PDF_DOWNLOAD`) and a link to it
    under the title of its first page (``first``, e.g. ``"book/intro"``), in place of any
    link an earlier print put there; returns the copy's path."""
    from bs4 import BeautifulSoup

    copy = html / PDF_DOWNLOAD
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(pdf, copy)
    page = html / f"{first}.html"
    soup = BeautifulSoup(page.read_text(errors="replace"), "html.parser")
    for old in soup.select(f".{PDF_LINK_CLASS}"):
        old.decompose()
    href = posixpath.relpath(PDF_DOWNLOAD, posixpath.dirname(first) or ".")
    link = BeautifulSoup(f"<p class='{PDF_LINK_CLASS}'>The whole book as one PDF, printed from "
                         f"this build: <a href='{href}'>hetfl.pdf</a> ({sheets} pages).</p>",
                         "html.parser")
    article = soup.select_one("article.bd-article")
    heading = article.find(["h1", "h2"]) if article is not None else None
    if heading is not None:
        heading.insert_after(link)
    elif article is not None:
        article.insert(0, link)
    page.write_text(str(soup))
    return copy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", type=Path, default=ROOT / "_build",
                        help="the book build whose html/ is printed (default _build)")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "pdf" / "hetfl.pdf")
    args = parser.parse_args()
    html = args.build_dir / "html"
    if not (html / "index.html").exists():
        print(f"no rendered book in {args.build_dir}: run 'make book' first (or pass "
              "--build-dir _build/smoke after 'make smoke-book')", file=sys.stderr)
        return 1
    done = print_pdf(html, args.out)
    print(f"{args.out}: {done['sheets']} pages, {len(done['pages'])} chapters and pages, "
          f"printed in {done['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
