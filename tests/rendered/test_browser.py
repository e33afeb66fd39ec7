"""Every rendered page in a real headless Chromium: math typeset, images loaded, a quiet console.

Chromium is Debian's (``make setup`` installs it), driven by Playwright; a screenshot of
each page is saved in ``<build>/screenshots``.
"""
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


def inspect_page(page, url: str, screenshot: Path | None = None) -> tuple[list[str], int]:
    """Open ``url``; return its problems (none for a good page) and how many formulas MathJax typeset."""
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
    if screenshot:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(screenshot), full_page=False)
    problems = [f"raw math: {t!r}" for t in found["raw"]]
    problems += [f"image did not load: {src}" for src in found["images"]]
    problems += [f"console error: {e}" for e in errors]
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
    failures, typeset = {}, 0
    try:
        for path in pages(html):
            name = path.relative_to(html).as_posix()
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            problems, formulas = inspect_page(page, f"{url}/{name}",
                                              build_dir / "screenshots" / (name.replace("/", "_") + ".png"))
            typeset += formulas
            page.close()
            if problems:
                failures[name] = problems[:5]
    finally:
        server.shutdown()
    assert not failures, failures
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
        assert inspect_page(page, f"{url}/good.html") == ([], 0)
        page.close()
    finally:
        server.shutdown()
    assert any(p.startswith("raw math") for p in problems)
    assert any(p.startswith("image did not load") for p in problems)
