"""The rendered pages' text, as a reader sees it: no raw Python or numpy printed as output
(a dict, a list of numbers, an array, a tensor, a numpy scalar, a float with a dozen
digits) and no number that disagrees with its noun ("1 are", "1 local epochs", "1 of 1
seeds"). Code is not scanned: the code cells' source, and code quoted in the text
(``options={"rule": ...}``); what a cell printed is."""
import re
from pathlib import Path

import pytest

bs4 = pytest.importorskip("bs4", reason="Beautiful Soup comes with the book's Sphinx theme")

#: what a value printed by ``print``/``repr`` looks like, where a sentence or table belongs
REPRS = {
    # Python prints a dict's string keys in single quotes; code (show_source) uses double
    "a dict": re.compile(r"\{\s*(?:'[^']*'|-?\d[\d.e+-]*)\s*:"),
    "a list of numbers": re.compile(r"\[\s*-?\d[\d.e+-]*(?:\s*,\s*-?\d[\d.e+-]*){2,}\s*,?\s*\]"),
    "a numpy array": re.compile(r"(?<![.\w])array\(|\[\s*-?\d[\d.e+-]*\s+-?\d[\d.e+-]*\s"),
    "a tensor": re.compile(r"(?<![.\w])tensor\("),
    "a numpy scalar": re.compile(r"\bnp\.(?:float|int|bool|str)_?\d*\("),
    "a float's full repr": re.compile(r"\d\.\d{10,}"),
}
#: a count of one with a plural noun or verb
SLIPS = re.compile(r"(?<![\d.,−/-])\b1 (?:are|were|have|seeds|local epochs|local steps|rounds"
                   r"|clients|classes|cases|claims|methods|runs|points)\b|\b1 of 1 seeds\b")


def reader_lines(page: Path) -> list[str]:
    """The lines of text a reader sees on ``page``'s article: prose, tables and the cells'
    outputs, without code (the code cells' source, code quoted in the text), scripts and
    styles."""
    soup = bs4.BeautifulSoup(page.read_text(errors="replace"), "html.parser")
    root = soup.select_one("article.bd-article") or soup.body or soup
    for junk in root.select("script, style, div.cell_input, .headerlink"):
        junk.decompose()
    for code in root.select("pre, code"):                # code quoted in the text, not output
        if code.find_parent(class_="cell_output") is None:
            code.decompose()
    return [line.strip() for line in root.get_text("\n").splitlines() if line.strip()]


def problems(lines: list[str]) -> list[str]:
    """Each line with a raw repr or an agreement slip, named."""
    found = []
    for line in lines:
        found += [f"{what}: {line[:120]!r}" for what, pattern in REPRS.items()
                  if pattern.search(line)]
        found += [f"{m.group(0)!r}: {line[:120]!r}" for m in SLIPS.finditer(line)]
    return found


def test_no_raw_reprs_or_agreement_slips_on_any_page(build_dir):
    html = build_dir / "html"
    pages = [p for p in sorted(html.rglob("*.html")) if "_static" not in p.parts
             and not p.name.startswith(("genindex", "search"))]
    assert len(pages) >= 8
    bad = {p.relative_to(html).as_posix(): found for p in pages
           if (found := problems(reader_lines(p)))}
    assert not bad, bad


def test_the_scan_finds_reprs_and_slips_and_passes_sentences(tmp_path):
    page = tmp_path / "page.html"
    page.write_text("""<html><body><article class="bd-article">
<div class="cell_input"><pre>print({'a': 1}, np.float64(2.0))</pre></div>
<div class="cell_output"><pre>cells won: {'FedRep': 5, 'Heroes': 3}
{0.05: '0.603'}
shares [0.1, 0.25, 0.15, 0.5]
[1.   1.   0.01]
np.float64(0.5) and tensor([1.]) and array([1, 2])
1.862645149230957e-08</pre></div>
<p>On 1 of 1 seeds; 1 are inconclusive after 1 local epochs.</p>
<p>Set <code>options={"rule": 1}</code>:</p><div class="highlight"><pre>{'a': [1, 2, 3]}</pre></div>
<div class="cell_output"><pre>    defaults = {"beta": 0.9}
    values = np.array([1, 2]) + torch.tensor(3)</pre></div>
<p>90% bounds [0.9, 3.1] points; 1 seed; 2 seeds; 0.1 are rates; 11 rounds; the mean of 21 runs; 20/1 clients.</p>
</article></body></html>""")
    found = problems(reader_lines(page))
    kinds = [f.split(":")[0] for f in found]
    assert kinds.count("a dict") == 2 and "a list of numbers" in kinds and "a numpy array" in kinds
    assert "a tensor" in kinds and "a numpy scalar" in kinds and "a float's full repr" in kinds
    assert {"'1 of 1 seeds'", "'1 are'", "'1 local epochs'"} <= set(kinds)
    assert not any("90% bounds" in f or "0.1 are" in f or "rule" in f or "'a'" in f
                   or "defaults" in f or "np.array" in f for f in found), found
