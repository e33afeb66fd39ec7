"""The headline claims on the ladder (:mod:`hetfl_core.book.ladder`), one :class:`ClaimSpec` each,
and the ladder's rungs (:data:`RUNGS`).

Each spec restates the chapter's setting (``book`` and ``paper`` scale, at the chapter's
default parameters) and the query and criterion of the chapter cell it names; the rivals
are fixed here, before any ladder run. Where a chapter pairs its method with the best of
many baselines, the ladder judges it against the book-scale best (as the chapter's text
names it) and against the paper's strongest of the chapter's baselines (by the paper's
own table), each on its own; where the chapter's claim cell picks its comparator by a rule
fixed before the seeds are paired (the best on average in each case), the ladder applies
that rule to each rung's own runs, and names the paper's strongest apart where the paper
gives numbers to name it by.

One module per chapter (``fedlps``, ``srp_pfed``, ...) registers its claims on import,
with :class:`ClaimSpec` and :func:`register` of :mod:`.claims`; this package imports them
all, in the book's order.
"""
from __future__ import annotations

from .claims import PTS, RUNGS, SPECS, ClaimSpec, register  # noqa: F401
from . import fedlps, heroes, ofa_fl, srp_pfed, lightweight_pfl, arena  # noqa: E402,F401  (the book's order)
