"""Sweeps on a Ray cluster: :func:`hetfl_core.runtime.experiments.sweep` with ``executor="ray"``.

Each missing run is one Ray task, named by its cache file (``fedavg-<key>``), that calls
:func:`~hetfl_core.runtime.experiments.run_cached` on a worker, so it is cached there as in a
process pool and an interrupted sweep resumes from what finished; without a filesystem
shared with the nodes, the driver stores each result it receives as well. The package and
each run's method class travel with the tasks (Ray's ``py_modules``; a plug-in registered
in the driver runs on the workers), so the nodes need the dependencies and the datasets
(``$HETFL_DATA``), not a checkout.

A failure stays one run's, as one plain line; a worker that dies under a run (SIGKILL, an
out-of-memory kill, a lost node) makes Ray run it once more (``max_retries=1``: a run is
deterministic, so a second death is reported). A bad ``address`` is refused in one line
within seconds.
"""
from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path

from .config import RunConfig
from ..science.errors import ConfigError, HetflError

__all__ = ["connect", "ray_outcomes", "REACH_SECONDS"]

#: how long :func:`connect` waits for a cluster's port to answer
REACH_SECONDS = 10


def _check_reachable(address: str) -> None:
    """Raise :class:`ConfigError` unless ``address`` is ``auto``, ``local`` or ``[ray://]host:port``
    with a port that accepts a connection within :data:`REACH_SECONDS`: Ray itself waits for a
    closed port indefinitely and reports a malformed address with a traceback."""
    import socket

    text = address.strip()
    if text in ("auto", "local"):     # Ray's: the cluster this machine is in; a new one
        return
    body = text[len("ray://"):] if text.startswith("ray://") else text
    host, _, port = body.rpartition(":")
    host = host.strip("[]")                 # an IPv6 literal: [::1]:6379
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"Ray address {address!r} is not host:port (e.g. 10.0.0.5:6379), "
                          f"ray://host:port or auto")
    try:
        socket.create_connection((host, int(port)), timeout=REACH_SECONDS).close()
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ConfigError(f"cannot reach the Ray cluster at {address!r} ({reason}): is its head "
                          "node up, and is the port its GCS port (6379 by default)?") from None


@contextmanager
def _stderr_held_back(held: list[str]):
    """Hold back file descriptor 2 (where Ray's C++ core logs each failed attempt to reach a
    cluster) during the block: its lines go to ``held``, and to stderr after all on success."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    log = tempfile.TemporaryFile()
    os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        log.seek(0)
        text = log.read()
        log.close()
        held.extend(line for line in text.decode(errors="replace").splitlines() if line.strip())
    os.write(2, text)                       # the block succeeded: Ray's lines after all


def connect(address: str | None = None, cpus: int | None = None):
    """The Ray session: the one already open, the cluster at ``address``, or a local Ray with
    ``cpus`` CPUs (and no dashboard). Ray's own log lines are kept to warnings, and the
    workers' output stays in Ray's log files."""
    import logging
    import warnings

    import ray

    if ray.is_initialized():
        return ray
    if address:
        _check_reachable(address)
    runtime_env = {"py_modules": [str(Path(__file__).resolve().parents[1])]}  # the hetfl_core package
    quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
    held: list[str] = []
    try:
        with warnings.catch_warnings():     # Ray's tip on a future default: not the user's
            warnings.filterwarnings("ignore", "Tip: In future versions of Ray", FutureWarning)
            if address:
                with _stderr_held_back(held):
                    ray.init(address=address, runtime_env=runtime_env, **quiet)
            else:
                ray.init(num_cpus=cpus, include_dashboard=False, runtime_env=runtime_env, **quiet)
    except (ConnectionError, ValueError, RuntimeError, TimeoutError) as exc:
        where = f"the Ray cluster at {address!r}" if address else "a local Ray"
        last = held[-1].split("] ", 1)[-1] if held else ""      # Ray's last log line: the cause
        cause = f" ({last})" if last else ""
        raise ConfigError(f"cannot reach {where}: {_plain(exc)}{cause}") from None
    return ray


def _plain(exc: BaseException) -> str:
    """An exception's first line, without the ANSI colour codes of Ray's messages."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    return (text.splitlines() or [""])[0]


#: class attributes ``Method.__init_subclass__`` resets on a subclass that does not set them;
#: cloudpickle leaves out of a class it sends by value any attribute that *is* its parent's
#: (``reads_hardware_tiers = False`` under a parent that declares the same), so they travel
#: beside it
_OWN_DECLARATIONS = ("label", "color", "marker", "reads_hardware_tiers")


def _method_by_value(cls) -> bytes:
    """The method class ``cls`` pickled for a Ray worker, with its own declarations
    (:data:`_OWN_DECLARATIONS`): by reference for the package's own methods, by value for any other (a
    plug-in whose module exists only here)."""
    from ray import cloudpickle

    own = {key: cls.__dict__[key] for key in _OWN_DECLARATIONS if key in cls.__dict__}
    module = sys.modules.get(cls.__module__)
    ours = cls.__module__.split(".")[0] == __package__
    if ours or module is None or cls.__module__ == "__main__":    # by value already: __main__'s
        return cloudpickle.dumps((cls, own))
    cloudpickle.register_pickle_by_value(module)
    try:
        return cloudpickle.dumps((cls, own))
    finally:
        cloudpickle.unregister_pickle_by_value(module)


def _load_method(method: bytes):
    """The class :func:`_method_by_value` pickled, with the declarations it had in the
    driver (a rebuilt subclass would otherwise be reset to its defaults)."""
    from ray import cloudpickle

    cls, own = cloudpickle.loads(method)
    for key, value in own.items():
        setattr(cls, key, value)
    return cls


def _run_task(run_cached, config_dict: dict, directory: str, method: bytes):
    """One run on a Ray worker (``run_cached``: :func:`hetfl_core.runtime.experiments.run_cached`),
    with one torch thread (the task holds one CPU) and the pickled class ``method`` registered
    under the config's method name; any failure comes back as a one-line :class:`HetflError`."""
    import torch

    from ..science.methods import METHODS

    torch.set_num_threads(1)
    try:
        METHODS[config_dict["method"]] = _load_method(method)
        return run_cached(RunConfig.from_dict(config_dict), Path(directory))
    except HetflError as exc:
        return HetflError(str(exc))
    except Exception as exc:         # the run's own failure, whatever it is: the other runs go on
        return HetflError(f"{type(exc).__name__}: {_plain(exc)}")


def _task_failure(exc: Exception) -> HetflError:
    """A Ray error from a run's task as one plain line."""
    from ray import exceptions

    if isinstance(exc, exceptions.OutOfMemoryError):
        return HetflError("Ray's memory monitor stopped its worker: the node ran out of memory")
    if isinstance(exc, exceptions.WorkerCrashedError):
        return HetflError("its Ray worker died under it twice (Ray runs it once more after the "
                          "first; killed, e.g. for lack of memory)")
    cause = getattr(exc, "cause", None)
    if isinstance(exc, exceptions.RayTaskError) and isinstance(cause, BaseException):
        return HetflError(f"{type(cause).__name__}: {_plain(cause)}")
    return HetflError(f"{type(exc).__name__}: {_plain(exc)}")


def ray_outcomes(run_cached, configs: dict[int, RunConfig], directory: Path, address: str | None,
                 gpus_per_run: float, cpus: int, task_name):
    """Run ``configs`` (index -> config) as Ray tasks of ``run_cached`` (the caller's
    :func:`hetfl_core.runtime.experiments.run_cached`), each named ``task_name(config)`` in Ray's
    dashboard; yield ``(index, result or HetflError)`` as each finishes, whatever the failure
    (an exception in the run, a dead worker, a lost node). An interrupt cancels the runs not
    yet finished."""
    from ..science.methods import get_method

    ray = connect(address, cpus)
    task = ray.remote(_run_task)
    classes = {c.method: _method_by_value(get_method(c.method)) for c in configs.values()}
    pending = {task.options(num_cpus=1, num_gpus=gpus_per_run, max_retries=1, name=task_name(c))
               .remote(run_cached, c.to_dict(), str(directory), classes[c.method]): i
               for i, c in configs.items()}
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(done[0])
            try:
                outcome = ray.get(done[0])
            except ray.exceptions.RayError as exc:
                outcome = _task_failure(exc)
            yield i, outcome
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
