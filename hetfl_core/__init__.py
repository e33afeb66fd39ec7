"""hetfl_core: a simulator of heterogeneous federated learning, and the methods of five papers.

Quick use::

    from hetfl_core import RunConfig, run
    result = run(RunConfig(method="fedavg", dataset="digits", model="cnn", rounds=5))
    result["history"][-1]["acc_personal"]

The package has three layers, each a subpackage: :mod:`.science` (the papers' methods and
pieces, the models, data and simulated hardware), :mod:`.runtime` (configuration, engine,
cache, sweeps, Ray and Flower) and :mod:`.book` (chapters, reports, plots, arena, ladder).
What computes a run (science and runtime) is what a run's cache key hashes.
"""
import importlib
import importlib.abc
import importlib.util
import sys

#: where each module lived before the layers: ``hetfl_core.science.masks`` still imports
#: ``hetfl_core.science.masks`` (the same module object), so older code and pickles load
MOVED = {**{name: "science." + name for name in (
    "bandits", "composition", "compression", "data", "dca", "devices", "errors", "frequency",
    "lottery", "masks", "methods", "models", "options", "partial_update", "personalization",
    "reinforced_walk", "streams", "submodel", "system", "training", "transformer")},
    **{name: "runtime." + name for name in (
        "batched", "config", "engine", "experiments", "flower", "flower_app", "ray_executor")},
    **{name: "book." + name for name in ("arena", "ladder", "ladder_specs", "plots", "report")}}


def moved_name(name: str) -> str | None:
    """The module path today of ``name``, a path from before the layers, or ``None``."""
    package, _, rest = name.partition(".")
    head, _, tail = rest.partition(".")
    if package != __name__ or head not in MOVED:
        return None
    return ".".join([__name__, MOVED[head], *([tail] if tail else [])])


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a module by its old path as the module at its new path."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if moved_name(name) else None

    def create_module(self, spec):
        return importlib.import_module(moved_name(spec.name))

    def exec_module(self, module):
        pass


def __getattr__(name: str):
    """``hetfl_core.masks`` and the like, the moved modules by their old attribute names."""
    if name in MOVED:
        return importlib.import_module(f"{__name__}.{MOVED[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())

from .runtime.config import ALL, RunConfig, SCALES, by_scale, check_scale  # noqa: E402
from .runtime.engine import run  # noqa: E402
from .runtime.experiments import run_cached, sweep  # noqa: E402
from .science.errors import (ConfigError, DatasetUnavailable, DivergenceError,  # noqa: E402
                             HetflError, InfeasibleError)
from .science.methods import METHODS, get_method, register  # noqa: E402
from .science.methods.base import ClientPlan, ClientReport, Method  # noqa: E402

__version__ = "0.1.0"
__all__ = ["RunConfig", "SCALES", "ALL", "by_scale", "check_scale", "ClientPlan", "ClientReport",
           "Method", "run",
           "ConfigError", "DatasetUnavailable", "DivergenceError", "HetflError", "InfeasibleError",
           "run_cached", "sweep", "METHODS", "get_method", "register"]
