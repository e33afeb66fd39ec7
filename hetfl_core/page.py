"""Printed output that fits the book's page: its code column holds 76 characters at
1280 px, and a longer printed line scrolls sideways.

:func:`say` is ``print`` for a chapter's running text: it joins its parts as ``print``
does and wraps the line at :data:`COLUMN`, the continuation indented by two spaces.
"""
from __future__ import annotations

import textwrap

__all__ = ["COLUMN", "say"]

#: characters of the page's code column (and of its printed output)
COLUMN = 76


def say(*parts, sep: str = " ") -> None:
    """Print ``parts`` (each ``str``-ed, joined by ``sep``) as ``print`` does, each line
    wrapped at :data:`COLUMN` characters with a two-space continuation indent; words
    longer than the column are left whole."""
    for line in sep.join(map(str, parts)).split("\n"):
        print(textwrap.fill(line, COLUMN, subsequent_indent="  ", break_long_words=False,
                            break_on_hyphens=False, drop_whitespace=True) if line else "")
