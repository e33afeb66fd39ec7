"""The book's Sphinx extension (loaded through ``_config.yml``'s ``local_extensions``).

* ``hetfl``, a pybtex style whose bibliography labels are author-year ("McMahan et al.
  2017"), matching the author-year citations in the text;
* one copy of each script per page: sphinx-thebe's inline configuration is registered twice
  under Jupyter Book 1.x, which declares ``THEBE_JS_URL`` twice and logs an error in every
  page's console;
* the book's stylesheet, ``static/hetfl.css`` beside this file (the claim ledgers' folded
  rows, tables of numbers that never wrap a value);
* every display equation numbered (:class:`NumberEveryEquation`).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from sphinx.transforms import SphinxTransform


def author_year(entry) -> str:
    """"Surname 2017", "A and B 2017" or "A et al. 2017" (editors when there is no author)."""
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [" ".join(p.last_names) or " ".join(p.first_names) for p in people] or \
        [entry.fields.get("organization", entry.key)]
    who = names[0] if len(names) == 1 else f"{names[0]} and {names[1]}" if len(names) == 2 else f"{names[0]} et al."
    return plain_text(f"{who} {entry.fields.get('year', 'n.d.')}")


def plain_text(latex: str) -> str:
    """BibTeX's LaTeX as the text it stands for: ``Horv{\\'a}th`` is ``Horváth``."""
    import codecs

    import latexcodec  # noqa: F401  (registers the "ulatex" codec; pybtex depends on it)

    return codecs.decode(latex, "ulatex").replace("{", "").replace("}", "")


class AuthorYearLabels(BaseLabelStyle):
    """Author-year labels, with a, b, ... where two entries would share one."""

    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [author_year(e) for e in entries]
        repeated, seen = Counter(labels), Counter()
        for label in labels:
            if repeated[label] > 1:
                seen[label] += 1
                label += "abcdefghijklmnopqrstuvwxyz"[seen[label] - 1]
            yield label


class AuthorYearStyle(UnsrtStyle):
    """pybtex's ``unsrt`` formatting with :class:`AuthorYearLabels`, the entries sorted by
    author, year and title, and titles as the bibliography writes them (``unsrt`` lower-cases
    all but their first letter: "fedavg", "non-iid")."""

    default_label_style = AuthorYearLabels
    default_sorting_style = "author_year_title"

    def format_title(self, e, which_field, as_sentence=True):
        from pybtex.style.template import field, sentence

        title = field(which_field)
        return sentence[title] if as_sentence else title


def one_copy_of_each_script(app, pagename, templatename, context, doctree):
    """Drop repeated scripts (same file, same inline body) from a page. An inline script is
    registered with the file name ``None`` by the application and ``""`` by the builder."""
    scripts, seen = [], set()
    for script in context.get("script_files", []):
        key = (str(getattr(script, "filename", script) or ""), str(getattr(script, "attributes", {}).get("body", "")))
        if key not in seen:
            seen.add(key)
            scripts.append(script)
    context["script_files"] = scripts


STATIC = Path(__file__).resolve().parent / "static"


def add_static(app, config):
    """Serve ``static/`` with the book's other static files (after ``_config.yml``'s own
    ``html_static_path``, which the build may set)."""
    config.html_static_path = [*config.html_static_path, str(STATIC)]


class NumberEveryEquation(SphinxTransform):
    """Number every display equation, as ``math_number_all`` promises: Sphinx numbers the
    ``{math}`` directive's blocks, but MyST's ``$$ ... $$`` blocks only when they carry a
    label. Each unlabelled block gets the label Sphinx's directive would give it
    (``docname:serial``), a number within its chapter, and an anchor to link to."""

    default_priority = 200          # before references to equations are resolved

    def apply(self, **kwargs) -> None:
        from docutils import nodes
        from docutils.nodes import make_id

        if not self.config.math_number_all:
            return
        domain = self.env.get_domain("math")
        for node in list(self.document.findall(nodes.math_block)):
            if node.get("label") or node.get("nowrap"):
                continue
            seq = self.env.new_serialno("sphinx.ext.math#equations")
            node["label"] = f"{self.env.docname}:{seq}"
            domain.note_equation(self.env.docname, node["label"], location=node)
            node["number"] = domain.get_equation_number_for(node["label"])
            target = nodes.target("", "", ids=[make_id(f"equation-{node['label']}")])
            node.parent.insert(node.parent.index(node), target)


def setup(app):
    register_plugin("pybtex.style.formatting", "hetfl", AuthorYearStyle)
    app.add_transform(NumberEveryEquation)
    app.connect("config-inited", add_static)
    app.add_css_file("hetfl.css")
    app.connect("html-page-context", one_copy_of_each_script, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
