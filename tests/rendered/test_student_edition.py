"""The student edition (``make student``; ``make test`` renders it at smoke scale)."""
import re

EXERCISE = re.compile(r'class="exercise admonition"')
SOLUTION = re.compile(r'class="solution[ "]')


def count(html, pattern):
    return {p.relative_to(html).as_posix(): len(pattern.findall(p.read_text(errors="replace")))
            for p in html.rglob("*.html")}


def test_student_edition_keeps_every_exercise_and_no_solution(build_dir):
    full, student = build_dir / "html", build_dir / "student" / "html"
    assert student.exists(), "the smoke build renders the student edition with --student"
    exercises, kept = count(full, EXERCISE), count(student, EXERCISE)
    assert sum(exercises.values()) >= 20
    assert kept == exercises
    assert sum(count(full, SOLUTION).values()) == sum(exercises.values())
    assert not any(count(student, SOLUTION).values())
    for page in student.rglob("*.html"):          # nor the text of a solution's dropdown
        assert "Solution to" not in page.read_text(errors="replace"), page


def test_the_student_edition_says_so_on_every_page(build_dir):
    """Its pages' titles carry "(student edition)", and the intro opens with a note; the
    full book's do not."""
    full, student = build_dir / "html", build_dir / "student" / "html"
    for page in ("book/intro.html", "book/foundations.html"):
        assert "(student edition)" in (student / page).read_text(errors="replace"), page
        assert "(student edition)" not in (full / page).read_text(errors="replace"), page
    assert "This is the <strong>student edition</strong>" in (student / "book/intro.html").read_text()
