"""The registry of federated methods: ``python -m hetfl_core list`` prints it."""
from __future__ import annotations

from ..errors import ConfigError

METHODS: dict[str, type] = {}


def register(cls):
    """Class decorator: make a :class:`~hetfl_core.engine.Method` runnable by its ``name``."""
    METHODS[cls.name] = cls
    return cls


def get_method(name: str):
    """The method class registered as ``name``, or :class:`ConfigError`."""
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; choose one of: {', '.join(sorted(METHODS))}")
    return METHODS[name]


from . import (  # noqa: E402,F401  (each import registers its methods)
    fedavg, fedbabu, fedper, fedrep, fedrolex, fjord, heterofl, lgfedavg, local, lotteryfl, oneshot, topk, unit_mask,
)
