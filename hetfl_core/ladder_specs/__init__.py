"""The headline claims on the ladder (:mod:`hetfl_core.ladder`), one :class:`ClaimSpec` each,
and the ladder's rungs (:data:`RUNGS`).

Each spec restates the chapter's setting (``book`` and ``paper`` scale, at the chapter's
default parameters) and the query and criterion of the chapter cell it names; the rivals
are fixed here, before any ladder run. Where a chapter pairs its method with the best of
many baselines, the ladder judges it against the book-scale best (as the chapter's text
names it) and against the paper's strongest of the chapter's baselines (by the paper's
own table), each on its own.

One module per chapter (``fedlps``, ``srp_pfed``, ...) registers its claims on import;
this package imports them all, in the book's order.
"""
from __future__ import annotations

from .base import PTS, RUNGS, SPECS, ClaimSpec, register  # noqa: F401  (the package's names)

from . import fedlps, ofa_fl, srp_pfed, lightweight_pfl, arena  # noqa: E402,F401  (each registers its claims)
