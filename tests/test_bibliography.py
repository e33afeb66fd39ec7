"""The bibliography as the book prints it (tools/sphinx/hetfl_sphinx.py's pybtex style):
author-year labels in plain text, entries in author order, titles as written."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "sphinx"))
import hetfl_sphinx  # noqa: E402


def formatted():
    from pybtex.database import parse_file

    bib = parse_file(ROOT / "book" / "references.bib")
    return bib, list(hetfl_sphinx.AuthorYearStyle().format_bibliography(bib))


def test_labels_are_plain_text_and_entries_in_author_order():
    bib, entries = formatted()
    assert hetfl_sphinx.author_year(bib.entries["horvath2021fjord"]) == "Horváth et al. 2021"
    assert hetfl_sphinx.plain_text("Horv{\\'a}th") == "Horváth"
    labels = [e.label for e in entries]
    assert not any("\\" in label or "{" in label for label in labels), labels
    surnames = [label.split()[0].lower() for label in labels]
    assert surnames == sorted(surnames)


def test_titles_keep_their_capitals():
    _, entries = formatted()
    text = " ".join(e.text.render_as("text") for e in entries)
    assert "On the Convergence of FedAvg on Non-IID Data" in text
    assert "fedavg" not in text
