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


def _import_all() -> None:
    """Import every module of this package: each registers its methods (one file per method)."""
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


_import_all()
