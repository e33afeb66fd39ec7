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
