"""Every rendered page in a real headless Chromium: math typeset, images loaded, a quiet console,
and tables that fit (at a 1280 px wide window no table is wider than the page's content
column, and no claim ledger is taller than :data:`LEDGER_MAX_PX`).

Chromium is Debian's (``make setup`` installs it), driven by Playwright; a screenshot of
each page is saved in ``<build>/screenshots``, and every table's size in
``<build>/screenshots/tables.json``.
"""
import json
import shutil
from pathlib import Path

import pytest

from .conftest import serve

playwright = pytest.importorskip("playwright.sync_api", reason="playwright is in requirements.txt")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]

# After MathJax ran: text outside code that still holds TeX delimiters, images that did not
# load, and how much math was typeset.
INSPECT = """() => {
  const raw = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.parentElement.closest('pre, code, script, style, textarea, mjx-container')) continue;
    const t = n.textContent;
    if (t.includes('$$') || t.includes('\\\\(') || t.includes('\\\\[')) raw.push(t.trim().slice(0, 60));
  }
  const images = Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0))
    .map(i => i.getAttribute('src'));
  return {raw, images, typeset: document.querySelectorAll('mjx-container').length};
}"""


#: the tallest a claim ledger may be, its rows folded, at a 1280 px wide window
LEDGER_MAX_PX = 2500
LEDGER_CLASS = "hetfl-ledger"      # hetfl_core.book.report.LEDGER_CLASS

# Every table in the page's content column: its width (the whole table, also where a scroll
# container clips it), its height, and whether it is a claim ledger; and the column's width.
TABLES = """(ledgerClass) => {
  const article = document.querySelector('article.bd-article') || document.body;
  const style = getComputedStyle(article);
  const column = article.clientWidth - parseFloat(style.paddingLeft)
    - parseFloat(style.paddingRight);
  const tables = Array.from(article.querySelectorAll('table')).map((t, i) => {
    const box = t.getBoundingClientRect();
    const head = t.querySelector('th, td');
    return {index: i, width: Math.round(box.width), height: Math.round(box.height),
            ledger: t.classList.contains(ledgerClass),
            first: head ? head.textContent.trim().slice(0, 40) : ''};
  });
  const box = article.getBoundingClientRect();
  const left = box.left + parseFloat(style.paddingLeft);
  const right = box.right - parseFloat(style.paddingRight);
  const equations = Array.from(article.querySelectorAll('mjx-container[display="true"]'))
    .map((m, i) => {
      const body = (m.querySelector('mjx-math') || m).getBoundingClientRect();
      const holder = m.closest('.math');
      const number = holder ? holder.querySelector('.eqno') : null;
      return {index: i, width: Math.round(body.width), tex: (holder || m).id || '',
              hidden: m.scrollWidth - m.clientWidth,
              left: Math.round(body.left - left), right: Math.round(right - body.right),
              number: number ? Math.round(number.getBoundingClientRect().left - body.right) : null};
    });
  return {column: Math.round(column), tables, equations};
}"""


def equation_problems(equation: dict, column: int) -> list[str]:
    """How one display equation of :data:`TABLES`'s answer does not fit (none when it does):
    wider than the column, cut by its own box (MathJax's container scrolls: its
    ``scrollWidth`` exceeds its ``clientWidth``), sticking out of the column on the left or
    the right, or running under its equation number. A pixel of rounding is allowed."""
    where = f"display equation {equation['index'] + 1} ({equation['tex'] or 'no id'})"
    problems = []
    if equation["width"] > column + 1:
        problems.append(f"{where} is {equation['width']} px wide, the column {column} px")
    if equation.get("hidden", 0) > 1:
        problems.append(f"{where} is cut: {equation['hidden']} px of it scroll out of its box")
    for side in ("left", "right"):
        if equation.get(side, 0) < -1:
            problems.append(f"{where} sticks {-equation[side]} px out of the column on the {side}")
    if equation.get("number") is not None and equation["number"] < -1:
        problems.append(f"{where} runs {-equation['number']} px under its equation number")
    return problems


def table_problems(found: dict) -> list[str]:
    """The tables and display equations of :data:`TABLES`'s answer that do not fit: wider
    than the column (by more than a pixel of rounding), a ledger taller than
    :data:`LEDGER_MAX_PX`, or an equation cut (:func:`equation_problems`)."""
    problems = []
    for t in found["tables"]:
        where = f"table {t['index'] + 1} ({t['first']!r})"
        if t["width"] > found["column"] + 1:
            problems.append(f"{where} is {t['width']} px wide, the column {found['column']} px")
        if t["ledger"] and t["height"] > LEDGER_MAX_PX:
            problems.append(f"ledger {where} is {t['height']} px tall (at most {LEDGER_MAX_PX})")
    for e in found.get("equations", []):
        problems += equation_problems(e, found["column"])
    return problems


def inspect_page(page, url: str, screenshot: Path | None = None, sizes: dict | None = None
                 ) -> tuple[list[str], int]:
    """Open ``url``; return its problems (none for a good page) and how many formulas MathJax
    typeset; ``sizes`` (if given) gets the page's tables' sizes under ``url``."""
    errors = []

    def console(message):
        # the browser's own request for /favicon.ico at the server root is not the page's
        if message.type == "error" and not message.location.get("url", "").endswith("/favicon.ico"):
            errors.append(message.text)

    page.on("console", console)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("response", lambda r: errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    page.goto(url, wait_until="load")
    page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
    found = page.evaluate(INSPECT)
    tables = page.evaluate(TABLES, LEDGER_CLASS)
    if sizes is not None:
        sizes[url] = tables
    if screenshot:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(screenshot), full_page=False)
    problems = [f"raw math: {t!r}" for t in found["raw"]]
    problems += [f"image did not load: {src}" for src in found["images"]]
    problems += [f"console error: {e}" for e in errors]
    problems += table_problems(tables)
    return problems, found["typeset"]


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


def pages(html: Path) -> list[Path]:
    """The book's pages, less the generated index, search page and redirects."""
    return sorted(p for p in html.rglob("*.html") if "_static" not in p.parts
                  and not p.name.startswith(("genindex", "search"))
                  and 'http-equiv="Refresh"' not in p.read_text(errors="replace"))


def test_every_page_renders_in_chromium(build_dir, browser):
    html = build_dir / "html"
    server, url = serve(html)
    failures, typeset, sizes = {}, 0, {}
    try:
        for path in pages(html):
            name = path.relative_to(html).as_posix()
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            shot = build_dir / "screenshots" / (name.replace("/", "_") + ".png")
            problems, formulas = inspect_page(page, f"{url}/{name}", shot, sizes)
            typeset += formulas
            page.close()
            if problems:
                failures[name] = problems[:5]
    finally:
        server.shutdown()
    (build_dir / "screenshots" / "tables.json").write_text(
        json.dumps({k.removeprefix(url + "/"): v for k, v in sizes.items()}, indent=1))
    assert not failures, failures
    ledgers = sum(t["ledger"] for v in sizes.values() for t in v["tables"])
    assert ledgers >= 5, f"{ledgers} claim ledgers found"
    assert typeset > 100, f"only {typeset} formulas typeset in the whole book"


def test_the_check_fails_on_a_page_without_mathjax(tmp_path, browser):
    """The same check on a page whose math was never typeset, with a broken image, fails."""
    (tmp_path / "raw.html").write_text("<html><body><p>Inline \\(x^2\\) and display $$y$$.</p>"
                                       "<img src='missing.png'></body></html>")
    (tmp_path / "good.html").write_text("<html><body><p>No math.</p><pre>$$ in code $$</pre></body></html>")
    server, url = serve(tmp_path)
    try:
        page = browser.new_page()
        problems, _ = inspect_page(page, f"{url}/raw.html")
        page.close()
        page = browser.new_page()
        assert inspect_page(page, f"{url}/good.html")[0] == []
        page.close()
    finally:
        server.shutdown()
    assert any(p.startswith("raw math") for p in problems)
    assert any(p.startswith("image did not load") for p in problems)


# The theme's layout of a numbered display equation (pydata-sphinx-theme): the number and
# MathJax's container side by side in a flex row, the container scrolling what does not fit.
EQUATION_CSS = ("<style>div.math{display:flex;flex-direction:row-reverse;gap:.5em;align-items:center;"
                "overflow:hidden;max-width:100%} div.math mjx-container{display:block;flex-grow:1;"
                "overflow:auto;text-align:center}</style>")
EQUATION = ("<div class='math' id='equation-{name}'><span class='eqno' style='display:inline-block;"
            "width:60px'>(3.6)</span><mjx-container display='true'><mjx-math "
            "style='display:inline-block;width:{width}px'>x</mjx-math></mjx-container></div>")


def test_the_check_fails_on_a_table_or_equation_too_wide_or_a_ledger_too_tall(tmp_path, browser):
    """A table wider than the content column, a ledger taller than the limit, an equation
    wider than the column, and one narrower than the column but wider than the room its
    number leaves (so that it scrolls under the number, as FedLPS's Theorem 1 did) are each
    reported; a narrow table, a short ledger and a short equation are not."""
    wide = ("<table><tr>" + "<td style='white-space:nowrap'>1,234.5 ± 67.8</td>" * 12
            + "</tr></table>")
    tall = (f"<table class='{LEDGER_CLASS}'><tr>"
            f"<td style='height:{LEDGER_MAX_PX + 100}px'>x</td></tr></table>")
    fine = f"<table class='{LEDGER_CLASS}'><tr><td>claim</td><td>holds</td></tr></table>"
    bad = (wide + tall + EQUATION.format(name="x", width=900)
           + EQUATION.format(name="under-number", width=580))
    good = fine + EQUATION.format(name="y", width=300)
    for name, body in (("bad", bad), ("good", good)):
        (tmp_path / f"{name}.html").write_text(f"<html><head>{EQUATION_CSS}</head><body><article "
                                              f"class='bd-article' style='width:600px'>{body}"
                                              "</article></body></html>")
    server, url = serve(tmp_path)
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        problems, _ = inspect_page(page, f"{url}/bad.html")
        sizes = page.evaluate(TABLES, LEDGER_CLASS)
        page.close()
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        assert inspect_page(page, f"{url}/good.html")[0] == []
        page.close()
    finally:
        server.shutdown()
    assert any("px wide, the column 600 px" in p for p in problems), problems
    assert any(p.startswith("ledger table 2") and "px tall" in p for p in problems), problems
    assert any(p.startswith("display equation 1 (equation-x) is 900 px wide") for p in problems), problems
    # narrower than the column, so a check of its width alone passes it; cut all the same
    under = sizes["equations"][1]
    assert under["width"] < sizes["column"], sizes
    assert any(p.startswith("display equation 2 (equation-under-number) is cut") for p in problems), problems
    assert any(p.startswith("display equation 2 (equation-under-number) runs") for p in problems), problems
