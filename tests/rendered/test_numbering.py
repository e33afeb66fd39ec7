"""Every display equation and every figure of the rendered book has a number, so the text
can refer to it ("Eq. (3.2)", "Fig. 3.4")."""
import re

import pytest

CHAPTERS = ("foundations", "baselines", "fedlps", "heroes", "ofa_fl", "srp_pfed", "lightweight_pfl",
            "arena")


def display_equations(html: str) -> list[str]:
    """The display-math blocks of a page (MathJax's ``div.math``, each with its number if any)."""
    return re.findall(r'<div class="math[^"]*"[^>]*>.*?</div>', html, flags=re.S)


def figures(html: str) -> list[str]:
    """The figures of a page (``<figure>`` elements, each with its caption if any)."""
    return re.findall(r"<figure\b.*?</figure>", html, flags=re.S)


def numbered_equation(block: str) -> bool:
    return re.search(r'<span class="eqno">\(\d+\.\d+\)', block) is not None


def numbered_figure(block: str) -> bool:
    return re.search(r'<span class="caption-number">Fig\. \d+\.\d+ </span>', block) is not None


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_display_equation_and_figure_has_a_number(build_dir, chapter):
    html = (build_dir / "html" / "book" / f"{chapter}.html").read_text()
    equations = display_equations(html)
    assert all(numbered_equation(e) for e in equations), \
        [e[:200] for e in equations if not numbered_equation(e)][:3]
    shown = figures(html)
    assert all(numbered_figure(f) for f in shown), [f[:200] for f in shown if not numbered_figure(f)][:3]


def test_the_check_sees_an_unnumbered_equation_and_figure():
    numbered = '<div class="math notranslate nohighlight" id="equation-x"><span class="eqno">(3.1)</span>\\[a\\]</div>'
    bare = '<div class="math notranslate nohighlight">\\[a\\]</div>'
    assert [numbered_equation(e) for e in display_equations(numbered + bare)] == [True, False]
    fig = ('<figure class="align-default" id="fig-a"><img src="a.png"/><figcaption><p>'
           '<span class="caption-number">Fig. 3.4 </span><span class="caption-text">A</span></p>'
           '</figcaption></figure>')
    assert [numbered_figure(f) for f in figures(fig + '<figure><img src="b.png"/></figure>')] == [True, False]
