"""hetfl_core: a simulator of heterogeneous federated learning, and the methods of five papers.

Quick use::

    from hetfl_core import RunConfig, run
    result = run(RunConfig(method="fedavg", dataset="digits", model="cnn", rounds=5))
    result["history"][-1]["acc_personal"]
"""
from .config import ALL, RunConfig, SCALES, by_scale, check_scale
from .engine import run
from .errors import ConfigError, DatasetUnavailable, DivergenceError, HetflError, InfeasibleError
from .experiments import run_cached, sweep
from .methods import METHODS, get_method, register
from .methods.base import ClientPlan, ClientReport, Method

__version__ = "0.1.0"
__all__ = ["RunConfig", "SCALES", "ALL", "by_scale", "check_scale", "ClientPlan", "ClientReport",
           "Method", "run",
           "ConfigError", "DatasetUnavailable", "DivergenceError", "HetflError", "InfeasibleError",
           "run_cached", "sweep", "METHODS", "get_method", "register"]
