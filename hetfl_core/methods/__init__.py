"""Every federated method, one file each, and the registry that names them.

The plug-in base (:class:`~hetfl_core.methods.base.Method`, ``ClientPlan``,
``ClientReport``) and :func:`register` live in :mod:`hetfl_core.methods.base`, which the
method files import; this package imports the method files, so importing it fills
:data:`METHODS` (``python -m hetfl_core list`` prints it). A new method file is added to
the import list below.
"""
from __future__ import annotations

from . import (aggregate, ditto, fedavg, fedbabu, fedlps, fedlps_code, fedper, fedrep, fedrolex, fjord, flanc, heroes, heterofl, lgfedavg,
               local, lotteryfl, ltp, ofafl, oneshot, prunefl, sparse_prune_pfl, srp_pfed, topk, unit_mask)
from .base import METHODS, ClientPlan, ClientReport, Method, get_method, register

__all__ = ["METHODS", "ClientPlan", "ClientReport", "Method", "get_method", "register", "aggregate", "ditto", "fedavg", "fedbabu",
           "fedlps", "fedlps_code", "fedper", "fedrep", "fedrolex", "fjord", "flanc", "heroes", "heterofl", "lgfedavg", "local",
           "lotteryfl", "ltp", "ofafl", "oneshot", "prunefl", "sparse_prune_pfl", "srp_pfed", "topk", "unit_mask"]
