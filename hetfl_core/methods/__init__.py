"""Every federated method, one file each; importing the package fills :data:`METHODS` (the
registry of :mod:`hetfl_core.methods.base`), so a new method file joins the imports below."""
from __future__ import annotations

from . import (aggregate, ditto, fedavg, fedbabu, fedlps, fedlps_code, fedper, fedrep, fedrolex, fjord, flanc, heroes, heterofl, lgfedavg,
               local, lotteryfl, ltp, ofafl, oneshot, prunefl, sparse_prune_pfl, srp_pfed, topk, unit_mask)
from .base import METHODS, ClientPlan, ClientReport, Method, get_method, register

__all__ = ["METHODS", "ClientPlan", "ClientReport", "Method", "get_method", "register", "aggregate", "ditto", "fedavg", "fedbabu",
           "fedlps", "fedlps_code", "fedper", "fedrep", "fedrolex", "fjord", "flanc", "heroes", "heterofl", "lgfedavg", "local",
           "lotteryfl", "ltp", "ofafl", "oneshot", "prunefl", "sparse_prune_pfl", "srp_pfed", "topk", "unit_mask"]
