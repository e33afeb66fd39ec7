"""Running many configurations: an on-disk cache keyed by the whole config, and sweeps.

* :func:`run_cached` returns a finished run from the cache or runs it and stores it,
  written atomically (temp file + rename), so an interrupted sweep loses no finished run;
  an unreadable or wrongly shaped file is a miss and is rewritten, and a lock file per
  run makes concurrent sweeps into one cache compute each run once.
* :func:`sweep` runs the missing configs in separate processes, one torch thread each
  (as every run has: :func:`hetfl_core.engine.single_thread`), with a progress bar.

The cache key covers the config and a hash of the package's source, so a changed
algorithm never serves stale numbers. The cache lives in ``$HETFL_CACHE`` or
``~/.cache/hetfl/runs``.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing import get_context
from pathlib import Path

from .config import RunConfig
from .errors import ConfigError, HetflError

__all__ = ["cache_dir", "check_writable", "describe_run", "run_lock", "source_hash", "cache_path",
           "load_cached", "log_run", "run_cached", "sweep"]

_SOURCE_HASH: str | None = None


def cache_dir() -> Path:
    """Where finished runs are stored."""
    return Path(os.environ.get("HETFL_CACHE", Path.home() / ".cache" / "hetfl" / "runs")).expanduser()


#: package files that cannot change a run's numbers: what reads and shows results
NOT_IN_RUNS = ("chapters", "report.py", "plots.py", "cli.py", "__main__.py", "arena.py")


def source_hash() -> str:
    """A hash of the package's ``.py`` files that compute runs (part of every cache key);
    the chapters' machinery, the report layer, the plots and the command line are left out,
    so editing a chapter does not recompute its runs."""
    global _SOURCE_HASH
    if _SOURCE_HASH is None:
        h = hashlib.sha256()
        root = Path(__file__).parent
        for path in sorted(root.rglob("*.py")):
            if path.relative_to(root).parts[0] in NOT_IN_RUNS:
                continue
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
        _SOURCE_HASH = h.hexdigest()[:12]
    return _SOURCE_HASH


def check_writable(directory: Path, what: str, name: str | None = None) -> None:
    """Raise :class:`ConfigError` unless a file (called ``name``, if given) can be created in
    ``directory`` or in the directories that would be made for it: checked with a probe file,
    before any training, so a run is never computed and then lost."""
    directory = Path(directory)
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{what}: {existing} is not a directory, so {directory} cannot be made")
    if name is not None and len(name.encode()) > os.pathconf(existing, "PC_NAME_MAX"):
        raise ConfigError(f"{what}: the file name is {len(name.encode())} bytes, longer than this file "
                          f"system's {os.pathconf(existing, 'PC_NAME_MAX')}")
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".probe-")
    except OSError as exc:
        raise ConfigError(f"{what}: cannot write in {existing} ({exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)


def cache_path(config: RunConfig, directory: Path | None = None) -> Path:
    """The cache file of ``config``."""
    return Path(directory or cache_dir()) / f"{config.method}-{config.key(source_hash())}.json"


def load_cached(config: RunConfig, directory: Path | None = None) -> dict | None:
    """The stored result of ``config``, or ``None``: a file that cannot be read, is not JSON
    or lacks the config and a history is a miss, and the next run rewrites it."""
    path = cache_path(config, directory)
    try:
        result = json.loads(path.read_bytes().decode())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not (isinstance(result, dict) and isinstance(result.get("config"), dict)
            and isinstance(result.get("history"), list) and result["history"]):
        return None
    return result


@contextmanager
def run_lock(config: RunConfig, directory: Path | None = None):
    """Hold ``config``'s lock file while it is computed, so concurrent sweeps into one cache
    compute it once. ``flock`` locks die with their holder: a killed run blocks nobody."""
    path = cache_path(config, directory).with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _write_atomic(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(result, f)
    os.replace(tmp, path)


def log_run(config: RunConfig, cached: bool, seconds: float) -> None:
    """Append one line to ``$HETFL_RUN_LOG`` (when set): which run, from the cache or computed,
    in how many wall-clock seconds. The book build reads it for the execution report."""
    path = os.environ.get("HETFL_RUN_LOG")
    if not path:
        return
    line = json.dumps({"method": config.method, "dataset": config.dataset, "seed": config.seed,
                       "cached": cached, "seconds": round(seconds, 3)})
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:        # one short line per write: appends from several processes stay whole
        f.write(line + "\n")


def run_cached(config: RunConfig, directory: Path | None = None, progress: bool = False,
               use_cache: bool = True) -> dict:
    """Run ``config`` unless its result is cached; store what is run."""
    from .engine import run

    config.validate()
    start = time.perf_counter()
    if not use_cache:
        result = run(config, progress=progress)
        log_run(config, False, time.perf_counter() - start)
        return result
    cached = load_cached(config, directory)
    if cached is None:
        check_writable(Path(directory or cache_dir()), "the cache directory ($HETFL_CACHE)")   # before training
        with run_lock(config, directory):
            cached = load_cached(config, directory)      # another process may have run it meanwhile
            if cached is None:
                result = run(config, progress=progress)
                _write_atomic(cache_path(config, directory), result)
                log_run(config, False, time.perf_counter() - start)
                return result
    log_run(config, True, time.perf_counter() - start)
    return cached


_RUNNING = False     # in a worker: a run is under way


def _on_interrupt(signum, frame):
    """A worker's SIGINT: abort the run under way; an idle worker leaves quietly. (A
    Jupyter kernel's shutdown and its interrupt button signal the whole process group.)"""
    if _RUNNING:
        raise KeyboardInterrupt
    os._exit(0)


def _die_with_parent(parent: int) -> None:
    """End this worker when the process ``parent`` dies, however it dies (even SIGKILL):
    Linux's PR_SET_PDEATHSIG signals it at once, and a thread watching the parent's pid
    covers other systems and a parent that died before the call."""
    import ctypes
    import signal
    import threading

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)      # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):       # not Linux: the watchdog alone
        pass

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="hetfl-parent-watchdog").start()


def _worker_init(parent: int):
    """A pool worker's start: end with the parent, one torch thread, :func:`_on_interrupt` for SIGINT."""
    import signal

    from .engine import single_thread

    _die_with_parent(parent)
    single_thread()
    signal.signal(signal.SIGINT, _on_interrupt)


def _worker(config_dict: dict, directory: str | None) -> dict:
    global _RUNNING
    _RUNNING = True
    try:
        return run_cached(RunConfig.from_dict(config_dict), Path(directory) if directory else None)
    finally:
        _RUNNING = False


_POOL: ProcessPoolExecutor | None = None


def _worker_pool(processes: int) -> ProcessPoolExecutor:
    """The worker processes, kept from one sweep to the next: a new worker spends seconds
    importing torch and loading its dataset, and a chapter runs several sweeps."""
    global _POOL
    if _POOL is None or _POOL._max_workers != processes or _POOL._broken or \
            any(p.exitcode is not None for p in (_POOL._processes or {}).values()):   # a worker has ended
        if _POOL is not None:
            _POOL.shutdown(wait=False, cancel_futures=True)
        _POOL = ProcessPoolExecutor(max_workers=processes, mp_context=get_context("spawn"), initializer=_worker_init,
                                    initargs=(os.getpid(),))
    return _POOL


def _bootstrapping_worker() -> bool:
    """True in a spawned worker while it re-imports the caller's main module: a script
    without the ``__main__`` guard then reaches :func:`sweep` again."""
    from multiprocessing import current_process

    return bool(getattr(current_process(), "_inheriting", False))


def describe_run(configs: list[RunConfig], i: int) -> str:
    """Config ``i`` named by the fields in which the configs differ (``fedavg (lr=0.1, seed=2)``)."""
    rows = [c.to_dict() for c in configs]
    varied = [k for k in rows[i] if len({json.dumps(r[k], sort_keys=True, default=str) for r in rows}) > 1
              and k != "method"]
    fields = ", ".join(f"{k}={rows[i][k]!r}" for k in varied) or f"seed={configs[i].seed}"
    return f"{configs[i].method} ({fields})"


def _one_line(exc: Exception) -> str:
    """An error as one line: a HetflError's message, else its type and first line."""
    text = (str(exc).splitlines() or [""])[0]
    return text if isinstance(exc, HetflError) else f"{type(exc).__name__}: {text}"


def _run_serially(configs, todo, directory, errors, results, bar) -> None:
    """The missing runs in this process, one after the other; any failure is recorded."""
    for i in todo:
        try:
            results[i] = run_cached(configs[i], directory)
        except Exception as exc:      # any failure is that run's; the others still run
            errors.append((i, exc))
        if bar:
            bar.update()


def _run_in_pool(configs, todo, processes, directory, errors, results, bar) -> None:
    """The missing runs in the kept worker pool; any failure is recorded."""
    global _POOL
    pool = _worker_pool(processes)
    futures = {pool.submit(_worker, configs[i].to_dict(), str(directory) if directory else None): i
               for i in todo}
    try:
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                results[i] = fut.result()
            except BrokenProcessPool:
                raise
            except Exception as exc:   # any failure is that run's; the others still run
                errors.append((i, exc))
            if bar:
                bar.update()
    except BrokenProcessPool:
        _POOL = None
        raise HetflError("a worker process died: a script must call sweep() under "
                         "'if __name__ == \"__main__\":' (workers re-import it), or memory ran out; "
                         "finished runs are cached") from None
    except BaseException:       # an interrupt: drop what has not started; running runs still cache
        for fut in futures:
            fut.cancel()
        raise


def _run_on_ray(configs, todo, directory, address, gpus_per_run, processes, errors, results, bar) -> None:
    """The missing runs as tasks on a Ray cluster (:mod:`hetfl_core.ray_executor`); any
    failure is recorded. A result a node could not cache (no shared filesystem) is stored here."""
    from .ray_executor import ray_outcomes

    directory = Path(directory or cache_dir())
    for i, outcome in ray_outcomes(run_cached, {i: configs[i] for i in todo}, directory, address, gpus_per_run,
                                   processes):
        if isinstance(outcome, Exception):
            errors.append((i, outcome))
        else:
            results[i] = outcome
            if not cache_path(configs[i], directory).exists():
                _write_atomic(cache_path(configs[i], directory), outcome)
        if bar:
            bar.update()


def sweep(configs, processes: int = 2, directory: Path | None = None, desc: str = "runs",
          progress: bool = True, executor: str | None = None, address: str | None = None,
          gpus_per_run: float = 0) -> list[dict]:
    """Results of every config (any iterable), in order: cached ones at once, the rest in
    ``processes`` workers.

    ``executor="ray"`` sends the missing runs to the Ray cluster at ``address`` instead
    (a local Ray with ``processes`` CPUs when there is none), each task holding one CPU
    and ``gpus_per_run`` GPUs (see :mod:`hetfl_core.ray_executor`). The defaults come from
    ``$HETFL_EXECUTOR`` (``process`` or ``ray``) and ``$HETFL_RAY_ADDRESS``, so a chapter
    run by papermill sweeps on a cluster without changing a line.

    A failing run, whatever its error, does not stop the others: every finished run is
    stored, then the first failure is raised as one line naming the config by the fields
    that set it apart.

    Workers are spawned processes that import the caller's main module, so a script calls
    ``sweep`` under ``if __name__ == "__main__":`` (notebooks need nothing). They are kept
    for the next sweep with the same ``processes`` and end when the caller's process does.
    """
    if _bootstrapping_worker():
        raise SystemExit(1)           # quietly: the parent reports the missing guard in one line
    executor = executor or os.environ.get("HETFL_EXECUTOR") or "process"
    if executor not in ("process", "ray"):
        raise ConfigError(f"unknown executor {executor!r}; choose process or ray")
    configs = list(configs)
    for c in configs:
        c.validate()
    results: list[dict | None] = [load_cached(c, directory) for c in configs]
    for c, r in zip(configs, results):
        if r is not None:
            log_run(c, True, 0.0)
    todo = [i for i, r in enumerate(results) if r is None]
    if not todo:
        return results  # type: ignore[return-value]
    check_writable(Path(directory or cache_dir()), "the cache directory ($HETFL_CACHE)")
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(configs), initial=len(configs) - len(todo), desc=desc, unit="run")
    errors: list[tuple[int, Exception]] = []
    if executor == "ray":
        _run_on_ray(configs, todo, directory, address or os.environ.get("HETFL_RAY_ADDRESS"), gpus_per_run,
                    processes, errors, results, bar)
    elif processes <= 1 or len(todo) == 1:
        _run_serially(configs, todo, directory, errors, results, bar)
    else:
        _run_in_pool(configs, todo, processes, directory, errors, results, bar)
    if bar:
        bar.close()
    if errors:
        i, exc = errors[0]
        raise HetflError(f"{len(errors)} of {len(configs)} runs failed (finished runs are cached); "
                         f"first: {describe_run(configs, i)}: {_one_line(exc)}")
    return results  # type: ignore[return-value]
