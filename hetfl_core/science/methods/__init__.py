"""Every federated method, one file each. Importing the package imports every module in
it, in name order (found by :func:`pkgutil.iter_modules`, as FL-bench finds its methods), and
the ``@register`` in each file fills :data:`METHODS` (the registry of
:mod:`hetfl_core.science.methods.base`): a new method is one new file here."""
from __future__ import annotations

import importlib
import pkgutil

from .base import METHODS, ClientPlan, ClientReport, Method, get_method, register

#: the modules of this package, each imported once here (``base`` included)
MODULES = tuple(info.name for info in pkgutil.iter_modules(__path__))
for _module in MODULES:
    importlib.import_module(f"{__name__}.{_module}")

__all__ = ["METHODS", "MODULES", "ClientPlan", "ClientReport", "Method", "get_method", "register", *MODULES]
