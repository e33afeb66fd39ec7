"""Sweeps on a Ray cluster: :func:`hetfl_core.experiments.sweep` with ``executor="ray"``.

Each missing run is one Ray task that calls :func:`~hetfl_core.experiments.run_cached`
on a worker, so a run is cached there as it is in a process pool (atomically, keyed by
the config and the source hash) and an interrupted sweep resumes from what finished.
With a shared filesystem as the cache directory every node reads and writes the same
cache; without one, the driver stores each result it receives as well.

The package travels with the tasks (Ray's ``py_modules``), so the cluster's nodes need
the dependencies and the datasets (``$HETFL_DATA``), not a checkout.
"""
from __future__ import annotations

from pathlib import Path

from .config import RunConfig
from .errors import ConfigError, HetflError

__all__ = ["connect", "ray_outcomes"]


def connect(address: str | None = None, cpus: int | None = None):
    """The Ray session: the one already open, the cluster at ``address``, or a local Ray with
    ``cpus`` CPUs (and no dashboard)."""
    import ray

    if ray.is_initialized():
        return ray
    runtime_env = {"py_modules": [str(Path(__file__).resolve().parent)]}     # the hetfl_core package
    try:
        if address:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
        else:
            ray.init(num_cpus=cpus, include_dashboard=False, runtime_env=runtime_env, log_to_driver=False)
    except ConnectionError as exc:
        raise ConfigError(f"cannot reach the Ray cluster at {address!r}: {exc}") from None
    return ray


def _run_task(run_cached, config_dict: dict, directory: str):
    """One run on a Ray worker (``run_cached``: :func:`hetfl_core.experiments.run_cached`):
    one torch thread (the task holds one CPU); a failure comes back as its message, so the
    driver reports it like a pool's."""
    import torch

    torch.set_num_threads(1)
    try:
        return run_cached(RunConfig.from_dict(config_dict), Path(directory))
    except HetflError as exc:
        return HetflError(str(exc))


def ray_outcomes(run_cached, configs: dict[int, RunConfig], directory: Path, address: str | None = None,
                 gpus_per_run: float = 0, cpus: int | None = None):
    """Run ``configs`` (index -> config) as Ray tasks of ``run_cached`` (the caller's
    :func:`hetfl_core.experiments.run_cached`); yield ``(index, result or HetflError)`` as
    each finishes. An interrupt cancels the runs not yet finished."""
    if gpus_per_run < 0:
        raise ConfigError(f"gpus_per_run must be >= 0, got {gpus_per_run}")
    ray = connect(address, cpus)
    task = ray.remote(_run_task).options(num_cpus=1, num_gpus=gpus_per_run, max_retries=0)
    pending = {task.remote(run_cached, c.to_dict(), str(directory)): i for i, c in configs.items()}
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(done[0])
            yield i, ray.get(done[0])
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
