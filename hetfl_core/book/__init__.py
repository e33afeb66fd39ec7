"""The book layer: what reads runs and shows them, never what computes them.

* :mod:`.chapter`: what every chapter shares (its parameters, plan mode, sweeps, captions
  and ledger); its names are this package's, so a chapter writes
  ``from hetfl_core.book import Chapter``;
* :mod:`.report`: history queries, tables, the claim ledger and the scorecard;
* :mod:`.plots`: the book's figures in one style;
* :mod:`.arena` and :mod:`.ladder` (with its specs, :mod:`.ladder_specs`): the benchmark
  of every method, and each headline claim judged again on growing budgets.

Nothing here enters a run's cache key (:func:`hetfl_core.runtime.experiments.source_hash`).
"""
from .chapter import *  # noqa: F401,F403
from .chapter import __all__  # noqa: F401
