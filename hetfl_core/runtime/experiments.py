"""Running many configurations: an on-disk cache keyed by the whole config, and sweeps.

:func:`run_cached` returns a finished run from the cache (``$HETFL_CACHE`` or
``~/.cache/hetfl/runs``) or runs it and stores it atomically, so an interrupted sweep loses
no finished run; :func:`sweep` runs the missing configs of a list or a grid in worker
processes (or on Ray). The key holds everything a run's numbers depend on (:func:`key_salt`),
so a changed algorithm or dataset never serves stale numbers, and a stored file is served
only if it is a whole run of that very config (:func:`is_result_of`).
"""
from __future__ import annotations

import ast
import ctypes
import errno
import fcntl
import functools
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import itertools
import json
import os
import re
import secrets
import signal
import stat
import sys
import sysconfig
import threading
import time
import types
import warnings
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, suppress
from multiprocessing import current_process, get_context
from numbers import Integral, Real
from pathlib import Path

from .config import RunConfig, plain_value
from .engine import single_thread
from ..science.errors import ConfigError, HetflError
from ..science.methods import METHODS, get_method

__all__ = ["cache_dir", "check_writable", "describe_run", "run_lock", "source_hash",
           "method_source_hash", "key_salt", "cache_path", "is_result_of", "load_cached", "log_run",
           "run_cached", "sweep", "training_slot", "training_slots", "write_atomic"]

#: (path, size, mtime) -> SHA-256 of the file: a method's source read once per process and version
_FILE_HASHES: dict[tuple[str, int, int], str] = {}
#: what a cache error names
CACHE_WHAT = "the cache directory ($HETFL_CACHE)"
#: the bytes :func:`check_writable` reserves by default: a full disk is found before training
PROBE_BYTES = 64 * 1024
#: open flags that refuse a symbolic link as the last path component, and leak no descriptor
_NO_LINKS = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def cache_dir() -> Path:
    """Where finished runs are stored: ``$HETFL_CACHE``, or ``~/.cache/hetfl/runs`` where it is
    unset; set but empty (the current directory, whatever it is) is a :class:`ConfigError`."""
    value = os.environ.get("HETFL_CACHE")
    if value is None:
        return Path.home() / ".cache" / "hetfl" / "runs"
    if not value.strip():
        raise ConfigError("$HETFL_CACHE is set but empty: unset it for ~/.cache/hetfl/runs "
                          "or name a directory")
    return Path(value).expanduser()


#: the layers whose code computes a run (the package's subpackages of those names): every
#: ``.py`` file in them enters the cache key; the book layer (:mod:`hetfl_core.book`, what
#: reads and shows results and what the chapters share: they only build configs, which the
#: key holds) and the command line do not. A method a chapter defines (the arena's FedAvgM)
#: is keyed by its own code (:func:`method_source_hash`).
RUN_LAYERS = ("science", "runtime")


@functools.cache
def source_hash() -> str:
    """A hash of the code that computes runs, every ``.py`` file of the :data:`RUN_LAYERS`
    (part of every cache key), read once per process; editing a chapter or the book layer
    does not recompute its runs."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for layer in RUN_LAYERS:
        for path in sorted((root / layer).rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


def _file_hash(path: str) -> str:
    """The SHA-256 of the file at ``path``, read again only when its size or mtime changes."""
    stat = os.stat(path)
    key = (path, stat.st_size, stat.st_mtime_ns)
    if key not in _FILE_HASHES:
        _FILE_HASHES[key] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return _FILE_HASHES[key]


def _code_digest(code, h) -> None:
    """Feed a function's bytecode, names and constants (nested functions too) to ``h``;
    not its file name or line numbers, which change from one notebook session to the next."""
    h.update(code.co_code)
    h.update(repr((code.co_names, code.co_varnames, code.co_freevars)).encode())
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            _code_digest(const, h)
        else:
            plain = sorted(map(repr, const)) if isinstance(const, frozenset) else const
            h.update(repr(plain).encode())


def _class_code_hash(cls) -> str:
    """A hash of a notebook cell's class: its functions' code and its other attributes' values."""
    h = hashlib.sha256()
    for name, value in sorted(vars(cls).items()):
        functions = [value.fget, value.fset, value.fdel] if isinstance(value, property) else \
            [getattr(value, "__func__", value)]
        codes = [f.__code__ for f in functions if hasattr(f, "__code__")]
        h.update(name.encode())
        for code in codes:
            _code_digest(code, h)
        if not codes and not name.startswith("__") and name != "_abc_impl":   # abc's cache: an address
            h.update(repr(value).encode())
    return h.hexdigest()


def _module_namespace(klass) -> dict:
    """The globals of ``klass``'s module, read from its functions (a plug-in file need not
    be in ``sys.modules``)."""
    for value in vars(klass).values():
        function = getattr(value, "__func__", value)
        if hasattr(function, "__globals__"):
            return function.__globals__
    module = sys.modules.get(klass.__module__)
    return vars(module) if module is not None else {}


def _local_helper_files(namespace: dict) -> list[str]:
    """The sorted source files of the modules a module (its globals ``namespace``) uses, directly
    or through each other, other than installed libraries and this package (which
    :func:`source_hash` covers): a plug-in's helper modules (``from helpers import step``)."""
    paths = sysconfig.get_paths()
    roots = tuple(os.path.realpath(r) + os.sep for r in {
        paths["stdlib"], paths["platstdlib"], paths["purelib"], paths["platlib"], str(Path(__file__).parents[1])})
    found, seen, todo = set(), set(), [namespace]
    while todo:
        for value in list(todo.pop().values()):
            used = value if isinstance(value, types.ModuleType) else \
                sys.modules.get(getattr(value, "__module__", None) or "")
            path = getattr(used, "__file__", None)
            if not path or not path.endswith(".py") or used.__name__ in seen:
                continue
            seen.add(used.__name__)
            real = os.path.realpath(path)
            if not real.startswith(roots) and os.path.isfile(real):
                found.add(real)
                todo.append(vars(used))
    return sorted(found)


def method_source_hash(method: str) -> str:
    """A hash of the code of ``method``'s class and every class it derives from (the file each
    is defined in or, for a notebook cell's, its functions' code) and of the local helper
    modules those files use (:func:`_local_helper_files`). A plug-in file, a helper it imports,
    a chapter's method (FedAvgM) and an edited method file each change it; where a file lies
    does not."""
    h = hashlib.sha256()
    helpers: set[str] = set()
    for klass in get_method(method).__mro__[:-1]:          # all but object
        try:
            path = inspect.getsourcefile(klass)
        except (TypeError, OSError):                        # defined where no file holds it
            path = None
        h.update(klass.__qualname__.encode())
        found = path and os.path.isfile(path)
        h.update((_file_hash(path) if found else _class_code_hash(klass)).encode())
        helpers.update(_local_helper_files(_module_namespace(klass)))
    for path in sorted(helpers):
        h.update(Path(path).name.encode())
        h.update(_file_hash(path).encode())
    return h.hexdigest()[:12]


def key_salt(config: RunConfig) -> str:
    """Everything besides the config that a run's numbers depend on, as the cache key reads
    it: the package's source (:func:`source_hash`), the method's classes
    (:func:`method_source_hash`), the data (:func:`~hetfl_core.science.data.fingerprint.dataset_fingerprint`),
    the torch, numpy and scikit-learn versions (scikit-learn ships the digits data and splits
    some datasets), and the device ``config.device`` resolves to here (``auto`` keys as ``cpu``
    or ``cuda``). Not the CPU's vector kernels: results from two CPUs agree to the golden tolerance."""
    import numpy
    import sklearn
    import torch

    from ..science.data.fingerprint import dataset_fingerprint
    from ..science.devices import resolve_device

    return json.dumps({"source": source_hash(), "method": method_source_hash(config.method),
                       "data": dataset_fingerprint(config.dataset), "torch": torch.__version__,
                       "numpy": numpy.__version__, "sklearn": sklearn.__version__,
                       "device": str(resolve_device(config.device))},
                      sort_keys=True)


def _create_exclusive(directory: Path, prefix: str, suffix: str) -> tuple[int, Path]:
    """A new file in ``directory``, opened for writing without following links, with the
    permissions the umask leaves of 0666 (a shared cache stays readable by its group)."""

    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_LINKS
    while True:
        path = directory / f"{prefix}{os.getpid()}-{secrets.token_hex(6)}{suffix}"
        with suppress(FileExistsError):
            return os.open(path, flags, 0o666), path


def check_writable(directory: Path, what: str, name: str | None = None,
                   size: int = PROBE_BYTES) -> None:
    """Raise :class:`ConfigError` (naming ``what``) unless a file called ``name`` of ``size``
    bytes can be written in ``directory`` or the directories that would be made for it: a probe
    file claims the bytes, so a run is never computed and then lost to a read-only or full disk."""
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
        fd, probe = _create_exclusive(existing, ".probe-", "")
    except OSError as exc:
        raise ConfigError(f"{what}: cannot write in {existing} ({exc.strerror})") from None
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except (AttributeError, OSError) as exc:      # a file system without it: write zeros
            if isinstance(exc, OSError) and exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
            os.write(fd, bytes(size))
    except OSError as exc:                            # a full disk, or over quota
        raise ConfigError(f"{what}: cannot write {size // 1024} KiB in {existing} "
                          f"({exc.strerror})") from None
    finally:
        os.close(fd)
        os.unlink(probe)


def cache_path(config: RunConfig, directory: Path | None = None) -> Path:
    """The cache file of ``config``: ``METHOD-KEY.json``, the key a hash of the whole config
    and of :func:`key_salt`. ``METHOD`` is the method's name as a plain file name: characters
    other than letters, digits and ``._+-`` become ``_``, leading dots go, at most 100 bytes;
    so a method named ``a/../../b`` stays inside the cache directory."""
    method = re.sub(r"[^A-Za-z0-9._+-]", "_", config.method).lstrip(".")[:100] or "method"
    return Path(directory or cache_dir()) / f"{method}-{config.key(key_salt(config))}.json"


#: the numbers every history row holds, and the scores (``None`` in a round not evaluated)
ROW_NUMBERS = ("time_s", "round_time_s", "idle_s", "loss", "uplink_bits", "downlink_bits", "flops",
               "energy_j")
ROW_SCORES = ("acc_global", "loss_global", "acc_personal", "loss_personal")


def is_result_of(result, config: RunConfig) -> bool:
    """Whether ``result`` is a whole run of ``config`` as :func:`hetfl_core.runtime.engine.run` returns
    it: its ``config`` equals ``config`` (as JSON stores it), and its history has one row per
    round, each a dict with its ``round`` (1, 2, ...), the numbers :data:`ROW_NUMBERS`, the
    scores :data:`ROW_SCORES` (numbers or ``None``), ``acc_clients`` and a list of ``clients``."""
    def number(value, or_none: bool = False) -> bool:
        return type(value) in (int, float) or or_none and value is None

    if not (isinstance(result, dict) and isinstance(result.get("history"), list)
            and result.get("config") == json.loads(json.dumps(config.to_dict()))
            and len(result["history"]) == config.rounds):
        return False
    for i, row in enumerate(result["history"], 1):
        if not (isinstance(row, dict) and type(row.get("round")) is int and row["round"] == i
                and all(number(row.get(k)) for k in ROW_NUMBERS)
                and all(k in row and number(row[k], or_none=True) for k in ROW_SCORES)):
            return False
        per_client, clients = row.get("acc_clients", ()), row.get("clients")
        if not (per_client is None or isinstance(per_client, list)
                and all(number(v, or_none=True) for v in per_client)):
            return False
        if not (isinstance(clients, list) and all(isinstance(c, dict) for c in clients)):
            return False
    return True


def load_cached(config: RunConfig, directory: Path | None = None) -> dict | None:
    """The stored result of ``config``, or ``None``: a file that cannot be read, is not JSON
    (or nests too deep to parse) or is not a whole run of ``config`` (:func:`is_result_of`:
    another config's result, a row without its round) is a miss, and the next run rewrites it.
    Anything but a regular file there (a directory, a FIFO) is a one-line :class:`ConfigError`:
    it is opened without blocking and checked before it is read, never waited on."""
    path = cache_path(config, directory)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read()
    except OSError:
        return None
    finally:
        os.close(fd)
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a file"
        raise ConfigError(f"the cache file {path} is {kind}, so the run could not be stored: remove it")
    try:
        result = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return result if is_result_of(result, config) else None


def _make_folder(folder: Path) -> None:
    """Make the cache's ``folder``, or say in one line why not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HetflError(f"{CACHE_WHAT}: cannot make {folder} ({exc.strerror})") from None


def _open_lock_file(path: Path, what: str) -> int:
    """A descriptor of the lock file ``path`` (made if missing), opened without following a
    symbolic link; one there, or any other failure, is refused in one line naming ``what``."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | _NO_LINKS, 0o666)
    except OSError as exc:
        why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise HetflError(f"{CACHE_WHAT}: cannot open the {what} {path} ({why})") from None


@contextmanager
def run_lock(config: RunConfig, directory: Path | None = None):
    """Hold ``config``'s lock file while it is computed, so concurrent sweeps into one cache
    compute it once. ``flock`` locks die with their holder: a killed run blocks nobody.

    The lock file is opened without following a symbolic link (one there is refused in one
    line) and removed by its holder when done; a process that waited on a removed file
    finds it gone once it holds the lock and locks the new one instead."""
    path = cache_path(config, directory).with_suffix(".lock")
    _make_folder(path.parent)
    while True:
        fd = _open_lock_file(path, "lock file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            with suppress(FileNotFoundError):          # its holder removed it while this one waited
                now = os.stat(path, follow_symlinks=False)
                if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                    break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield
    finally:
        with suppress(OSError):
            os.unlink(path)                          # still held: no one else locks this file now
        os.close(fd)                                 # releases the lock


#: how many runs may train at once on this machine, across processes ($HETFL_TRAINING_SLOTS)
SLOTS_VARIABLE = "HETFL_TRAINING_SLOTS"
_SLOT_POLL_S = 0.05


def training_slots() -> int:
    """``$HETFL_TRAINING_SLOTS``: at most this many runs train at once among the processes
    that share a cache directory (0, or unset: no limit). A one-line :class:`ConfigError`
    for a value that is not a whole number of at least 0."""
    value = os.environ.get(SLOTS_VARIABLE, "").strip()
    if not value:
        return 0
    try:
        slots = int(value)
    except ValueError:
        slots = -1
    if slots < 0:
        raise ConfigError(f"${SLOTS_VARIABLE} must be a whole number of runs (0: no limit), got {value!r}")
    return slots


@contextmanager
def training_slot():
    """Hold one of ``$HETFL_TRAINING_SLOTS`` slots (:func:`training_slots`) while a run trains.

    On a machine with as many cores as slots, more processes training at once than cores
    only take turns on them, and each turn starts on caches another process has filled: on
    2 cores, four processes training the baselines' CNN spent 13-23% more CPU per run than
    two did. The book build runs two chapters with two worker processes each, so it sets
    the slots to the core count: the workers beyond it wait (asleep, polling every 50 ms)
    instead of training. A slot is an ``flock`` on ``.training-slots/slot-<i>.lock`` in the
    cache directory (``$HETFL_CACHE``'s, whatever directory the run is stored in), shared by
    every process that shares it, and dies with its holder. Scheduling only: what a run
    computes does not depend on it. Without slots nothing is held."""
    slots = training_slots()
    if not slots:
        yield
        return
    folder = cache_dir() / ".training-slots"
    _make_folder(folder)
    first = os.getpid() % slots               # processes start their search at different slots
    fds = []
    try:
        for i in range(slots):                 # opened once, tried every poll
            fds.append(_open_lock_file(folder / f"slot-{(first + i) % slots}.lock", "slot file"))
        while not any(_try_lock(fd) for fd in fds):
            time.sleep(_SLOT_POLL_S)
        yield
    finally:
        for fd in fds:
            os.close(fd)                               # releases the slot held


def _try_lock(fd: int) -> bool:
    """Whether this process now holds ``fd``'s ``flock`` (taken without waiting)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _plain_result(value):
    """A numpy scalar or array in a result (a method's own metric) as plain JSON types."""
    try:
        return plain_value("a value of the result", value)
    except ConfigError:
        raise TypeError(f"{type(value).__name__} {value!r:.60} cannot be stored as JSON") from None


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: to a new temporary file beside it, then
    renamed over it, so no reader sees half a file and a symbolic link at ``path`` is replaced,
    never followed. On failure the temporary file is removed and the ``OSError`` raised."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_exclusive(path.parent, ".tmp-", ".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def _write_atomic(path: Path, result: dict) -> None:
    """Store ``result`` at ``path`` by :func:`write_atomic`; a failure is one :class:`HetflError`
    line naming the cache directory (a full disk, a read-only one, a value JSON cannot hold)."""
    try:
        write_atomic(path, json.dumps(result, default=_plain_result).encode())
    except (TypeError, ValueError, RecursionError) as exc:
        raise HetflError(f"the result cannot be stored in {CACHE_WHAT} {path.parent}: "
                         f"{exc}") from None
    except OSError as exc:
        raise HetflError(f"cannot store the run in {CACHE_WHAT} {path.parent}: "
                         f"{exc.strerror or exc}") from None


def log_run(config: RunConfig, cached: bool, seconds: float) -> None:
    """Append one line to ``$HETFL_RUN_LOG`` (when set): which run, from the cache or computed,
    in how many wall-clock seconds, its cache key (the file name's, :func:`cache_path`) and
    the fingerprint of the data it read (:func:`~hetfl_core.science.data.fingerprint.dataset_fingerprint`,
    a SHA-256 of the arrays). The book build reads it for the execution report."""
    path = os.environ.get("HETFL_RUN_LOG")
    if not path:
        return
    salt = key_salt(config)
    line = json.dumps({"method": config.method, "dataset": config.dataset, "seed": config.seed,
                       "cached": cached, "seconds": round(seconds, 3), "key": config.key(salt),
                       "data": json.loads(salt)["data"]})
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:        # one short line per write: appends from several processes stay whole
        f.write(line + "\n")


def run_cached(config: RunConfig, directory: Path | None = None, progress: bool = False,
               use_cache: bool = True) -> dict:
    """Run ``config`` unless its result is cached; store what is run.

    Before training: the config is checked, the cache file's place must hold a file or
    nothing, and the cache directory must take a generous guess of the result's bytes (a row
    per round, a record per client in it; 64 KiB to 16 MiB). Should the write still fail (the
    disk filled meanwhile), the :class:`HetflError` names the cache directory and carries the
    finished run as its ``result``. With ``$HETFL_TRAINING_SLOTS`` set, the training waits
    for a slot (:func:`training_slot`), and the run log's seconds leave the wait out."""
    from .engine import run

    config.validate()
    training_slots()                                     # a bad $HETFL_TRAINING_SLOTS stops here
    start = time.perf_counter()
    waited = 0.0

    def train():
        nonlocal waited
        asked = time.perf_counter()
        with training_slot():
            waited = time.perf_counter() - asked
            return run(config, progress=progress)

    result = load_cached(config, directory) if use_cache else None
    cached = result is not None
    if not use_cache:
        result = train()
    elif not cached:
        size = min(max(PROBE_BYTES, 4096 + config.rounds * (2048 + 400 * config.clients)), 16 << 20)
        check_writable(Path(directory or cache_dir()), CACHE_WHAT, size=size)
        with run_lock(config, directory):
            result = load_cached(config, directory)      # another process may have run it meanwhile
            cached = result is not None
            if not cached:
                result = train()
                try:
                    _write_atomic(cache_path(config, directory), result)
                except HetflError as exc:
                    exc.result = result
                    raise
    log_run(config, cached, time.perf_counter() - start - waited)
    return result


_RUNNING = False     # in a worker: a run is under way
_STARTED = None      # in a worker: the queue on which it announces each run it starts


def _on_interrupt(signum, frame):
    """A worker's SIGINT (a Jupyter kernel signals its whole process group): abort the run
    under way; an idle worker leaves quietly."""
    if _RUNNING:
        raise KeyboardInterrupt
    os._exit(0)


def _die_with_parent(parent: int) -> None:
    """End this worker when the process ``parent`` dies, even by SIGKILL: Linux's
    PR_SET_PDEATHSIG signals it at once, and a thread watching the parent's pid covers other
    systems and a parent that died before the call."""
    with suppress(OSError, AttributeError):         # not Linux: the watchdog alone
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)      # 1 = PR_SET_PDEATHSIG

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="hetfl-parent-watchdog").start()


def _worker_init(parent: int, started):
    """A pool worker's start: end with the parent, one torch thread, :func:`_on_interrupt` for
    SIGINT, and ``started`` (a queue) to announce each run it starts."""
    global _STARTED
    _die_with_parent(parent)
    single_thread()
    signal.signal(signal.SIGINT, _on_interrupt)
    _STARTED = started


def _worker(config_dict: dict, directory: str, tag: tuple, module: str, qualname: str) -> dict:
    """One run in a pool worker: announce ``tag`` with this worker's pid (so the parent knows
    which run a dying worker had under way), register the class ``module.qualname`` as the
    config's method, and run it. The parent's registry is the truth, plug-ins it registered at
    run time included (a kept worker may hold another class under that name from an earlier sweep)."""
    global _RUNNING
    name = config_dict["method"]
    _RUNNING = True
    try:
        _STARTED.put((*tag, os.getpid()))
        try:
            cls = importlib.import_module(module)   # a spawned worker's __main__: the caller's script
            for part in qualname.split("."):
                cls = getattr(cls, part)
        except Exception as exc:
            raise HetflError(f"method {name!r} ({module}.{qualname}) cannot be loaded in a worker "
                             f"process ({type(exc).__name__}: {exc}); use processes=1") from None
        METHODS[name] = cls
        return run_cached(RunConfig.from_dict(config_dict), Path(directory))
    finally:
        _RUNNING = False


def _main_module() -> tuple[str | None, list | None]:
    """The caller's main module as a spawned worker re-imports it: its file (``None`` in a
    notebook or ``python -c``) and its top-level statements (``None`` if unreadable)."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    try:
        return path, ast.parse(Path(path).read_bytes()).body if path else None
    except (OSError, SyntaxError, ValueError):
        return path, None


def _in_this_process_only(cls) -> str | None:
    """Why a spawned worker process cannot load the method class ``cls`` (it imports the
    class's module, and re-runs the caller's script for ``__main__``), or ``None`` when it can."""
    module, qualname = cls.__module__, cls.__qualname__
    if "<locals>" in qualname:
        return "its class is defined inside a function"
    if module == "__main__":
        path, top = _main_module()
        if not path:
            return "its class is defined in __main__, which has no file (a notebook, python -c)"
        if top is None:
            return f"its class is defined in {path}, which cannot be read back"
        outer = qualname.split(".")[0]
        if not any(isinstance(n, ast.ClassDef) and n.name == outer for n in top):
            return (f"its class is not defined at the top level of {Path(path).name} "
                    "(e.g. under the __main__ guard)")
        return None
    top = module.split(".")[0]
    if top == __name__.split(".")[0]:     # this package's own methods: a worker imports them
        return None
    try:
        found = importlib.machinery.PathFinder.find_spec(top, sys.path)
        if found is None:   # an editable install is found by its finder, set up at start-up
            found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        found = None
    return None if found is not None else f"its module {module} cannot be imported by a new process"


_POOL: ProcessPoolExecutor | None = None
_POOL_STARTED = None      # the queue on which _POOL's workers announce the runs they start
_POOL_HAS_RUN = False     # a run has started in _POOL: a break after that is not a start-up failure
_SWEEP_TAGS = itertools.count(1)   # tags the runs of each pool sweep of this process


def _worker_pool(processes: int) -> ProcessPoolExecutor:
    """The worker processes, kept from one sweep to the next: a new worker spends seconds
    importing torch and loading its dataset, and a chapter runs several sweeps."""
    global _POOL, _POOL_STARTED, _POOL_HAS_RUN
    if _POOL is None or _POOL._max_workers != processes or _POOL._broken or \
            any(p.exitcode is not None for p in (_POOL._processes or {}).values()):   # a worker has ended
        if _POOL is not None:
            _POOL.shutdown(wait=False, cancel_futures=True)
        context = get_context("spawn")
        _POOL_STARTED = context.SimpleQueue()
        _POOL_HAS_RUN = False
        _POOL = ProcessPoolExecutor(max_workers=processes, mp_context=context,
                                    initializer=_worker_init, initargs=(os.getpid(), _POOL_STARTED))
    return _POOL


def _note_started(sweep_tag: int, under_way: dict[int, int]) -> None:
    """Read the workers' announcements into ``under_way`` (a worker's pid -> the run of sweep
    ``sweep_tag`` it started last); read often: a full pipe would block the workers."""
    global _POOL_HAS_RUN
    while not _POOL_STARTED.empty():
        tag, i, pid = _POOL_STARTED.get()
        _POOL_HAS_RUN = True
        if tag == sweep_tag:
            under_way[pid] = i


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


class _Outcomes:
    """A sweep's runs so far: results in ``results``, ``(i, error)`` in ``errors``, the
    settled runs in ``done``; each settled run moves the progress bar on."""

    def __init__(self, results: list, bar):
        self.results, self.errors, self.done, self.bar = results, [], set(), bar

    def record(self, i: int, outcome) -> None:
        """Run ``i``'s result, or the exception it failed with."""
        if isinstance(outcome, BaseException):
            self.errors.append((i, outcome))
        else:
            self.results[i] = outcome
        self.done.add(i)
        self.bar.update()


def _signal_name(exitcode: int | None) -> str:
    """How a worker process ended, in words (``SIGKILL``, ``exit status 1``)."""
    if exitcode is not None and exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit status {exitcode}"


def _start_up_failure(exitcodes: list[int | None]) -> str:
    """Why a pool's workers died before any run started in it, in one line, from their exit
    codes: a signal (killed, e.g. for lack of memory), or an error while re-importing the
    caller's main module, which without the ``__main__`` guard is the sweep itself."""
    killed = [c for c in exitcodes if c is not None and c < 0 and c != -signal.SIGTERM]
    if killed:
        return (f"a worker process was killed while starting ({_signal_name(killed[0])}), e.g. "
                "for lack of memory; finished runs are cached")
    path, top = _main_module()       # no file (a notebook): nothing to re-import, nothing to guard
    if not path or top is not None and any(isinstance(n, ast.If) and "__name__" in ast.unparse(n.test)
                                           for n in top):
        ended = next((c for c in exitcodes if c not in (None, 0, -signal.SIGTERM)), None)
        return (f"the worker processes died while starting ({_signal_name(ended)}): re-importing "
                "the caller's main module failed in them; finished runs are cached")
    return ("the worker processes died while starting: a script must call sweep() under "
            "'if __name__ == \"__main__\":' (workers re-import it), or memory ran out; "
            "finished runs are cached")


def _run_in_pool(configs, todo, processes, directory, outcomes: _Outcomes) -> None:
    """The missing runs in the kept worker pool; any failure is recorded.

    A worker that dies mid-run breaks the pool, which stops its other workers too: the pool
    is rebuilt and every unfinished run submitted again. The dead worker's run is retried
    once (dying a second time, it fails); the runs the broken pool stopped rerun without
    counting. A pool whose workers die before any run started in it fails the sweep at once,
    naming the likely cause (:func:`_start_up_failure`)."""
    sweep_tag = next(_SWEEP_TAGS)
    classes = {i: get_method(configs[i].method) for i in todo}
    deaths = dict.fromkeys(todo, 0)        # how often each run was under way in a dying worker
    remaining = list(todo)
    while remaining:
        pool = _worker_pool(processes)
        where = str(directory or cache_dir())   # resolved here: a kept worker has an older environ
        futures = {pool.submit(_worker, configs[i].to_dict(), where, (sweep_tag, i),
                               classes[i].__module__, classes[i].__qualname__): i for i in remaining}
        under_way: dict[int, int] = {}
        try:
            for fut in as_completed(futures):
                _note_started(sweep_tag, under_way)
                if isinstance(fut.exception(), BrokenProcessPool):
                    break
                outcomes.record(futures[fut], fut.exception() or fut.result())   # a failure is that run's
            else:
                return
        except BaseException:   # an interrupt: drop what has not started; running runs still cache
            for fut in futures:
                fut.cancel()
            raise
        workers = dict(pool._processes or {})
        pool.shutdown(wait=True)           # a broken pool has stopped its workers: wait for them
        _note_started(sweep_tag, under_way)
        if not _POOL_HAS_RUN:
            raise HetflError(_start_up_failure([p.exitcode for p in workers.values()])) from None
        for fut, i in futures.items():      # runs that ended before the break was seen
            if i not in outcomes.done and not isinstance(fut.exception(), BrokenProcessPool):
                outcomes.record(i, fut.exception() or fut.result())
        dead = {pid: p.exitcode for pid, p in workers.items()
                if p.exitcode not in (0, -signal.SIGTERM)}   # the broken pool SIGTERMs the rest
        for pid, i in under_way.items():
            if i in outcomes.done or (dead and pid not in dead):
                continue                 # finished, or stopped by the broken pool: not its fault
            deaths[i] += 1
            if deaths[i] == 2:
                how = _signal_name(dead.get(pid))
                if how == "SIGKILL":
                    how += ": killed, e.g. for lack of memory"
                outcomes.record(i, HetflError(f"its worker process died ({how}) twice while running it"))
        remaining = [i for i in remaining if i not in outcomes.done]


def _run_on_ray(configs, todo, directory, address, gpus_per_run, processes, outcomes: _Outcomes) -> None:
    """The missing runs as tasks on a Ray cluster (:mod:`hetfl_core.runtime.ray_executor`); any
    failure is recorded. A result a node could not cache (no shared filesystem) is stored here."""
    from .ray_executor import ray_outcomes

    directory = Path(directory or cache_dir())
    for i, outcome in ray_outcomes(run_cached, {i: configs[i] for i in todo}, directory, address, gpus_per_run,
                                   processes, task_name=lambda c: cache_path(c, directory).stem):
        if not isinstance(outcome, Exception) and not cache_path(configs[i], directory).exists():
            _write_atomic(cache_path(configs[i], directory), outcome)
        outcomes.record(i, outcome)


def _type_name(value) -> str:
    """``value`` named for an error message: ``None``, ``the class dict``, ``str 'fedavg'``."""
    if value is None:
        return "None"
    if isinstance(value, type):
        return f"the class {value.__name__}"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _checked_arguments(configs, processes, directory, executor, address, gpus_per_run):
    """:func:`sweep`'s arguments, each wrong one refused in one line: the configs as a list
    and ``processes`` (2 for ``None``)."""
    if isinstance(configs, RunConfig):
        raise ConfigError("sweep() takes a list of RunConfig, got one RunConfig; pass [config]")
    if isinstance(configs, (str, bytes, dict)) or not isinstance(configs, Iterable):
        raise ConfigError("sweep() takes an iterable of RunConfig (e.g. a list), "
                          f"got {_type_name(configs)}")
    configs = list(configs)
    for i, c in enumerate(configs):
        if isinstance(c, dict):
            raise ConfigError(f"sweep(): item {i} is a dict, not a RunConfig; "
                              "build one with RunConfig.from_dict")
        if not isinstance(c, RunConfig):
            raise ConfigError(f"sweep(): item {i} is {_type_name(c)}, not a RunConfig")
    processes = 2 if processes is None else processes
    for value, ok, wanted in (
            (processes, isinstance(processes, Integral) and processes >= 1, "processes must be a whole number >= 1"),
            (directory, directory is None or isinstance(directory, (str, os.PathLike)),
             "directory must be a path (str or Path)"),
            (executor, executor is None or isinstance(executor, str), "executor must be 'process' or 'ray'"),
            (address, address is None or isinstance(address, str), "address must be a string such as 'HOST:6379'"),
            (gpus_per_run, isinstance(gpus_per_run, Real) and gpus_per_run >= 0, "gpus_per_run must be a number >= 0")):
        if not ok or isinstance(value, bool):       # True is an int to Python, never a count here
            raise ConfigError(f"{wanted}, got {_type_name(value)}")
    return configs, int(processes)


class LocalRunsWarning(UserWarning):
    """Runs of a method registered in this process only (a notebook's plug-in) run here,
    one after the other, not in the worker processes."""


def _split_off_local_methods(configs, todo) -> tuple[list[int], list[int]]:
    """``todo`` split into runs the pool workers can run and runs of methods registered in this
    process only, which run here; a warning says which."""
    why = {name: _in_this_process_only(get_method(name))
           for name in {configs[i].method for i in todo}}
    here = [i for i in todo if why[configs[i].method]]
    for name in sorted(n for n, reason in why.items() if reason):
        count = sum(configs[i].method == name for i in here)
        runs = "1 run" if count == 1 else f"{count} runs"
        warnings.warn(f"method {name!r} is registered in this process only ({why[name]}), so "
                      f"its {runs} run here, one after the other, not in the "
                      "worker processes", LocalRunsWarning, stacklevel=3)
    return [i for i in todo if i not in here], here


def sweep(configs, processes: int | None = 2, directory: Path | None = None, desc: str = "runs",
          progress: bool = True, executor: str | None = None, address: str | None = None,
          gpus_per_run: float = 0) -> list[dict]:
    """Results of every config (any iterable of :class:`RunConfig`), in order: cached ones at
    once, the rest in ``processes`` workers (``None``: the default, 2).

    A ``dict`` of configs (a grid: ``{(method, seed): config, ...}``) comes back as a dict
    with the same keys; equal configs in it run once and share their result (select from
    it with :func:`by`).

    ``executor="ray"`` sends the missing runs to the Ray cluster at ``address`` instead
    (a local Ray with ``processes`` CPUs when there is none), each task holding one CPU
    and ``gpus_per_run`` GPUs (see :mod:`hetfl_core.runtime.ray_executor`). The defaults come from
    ``$HETFL_EXECUTOR`` (``process`` or ``ray``) and ``$HETFL_RAY_ADDRESS``, so a chapter
    run by papermill sweeps on a cluster without changing a line; ``gpus_per_run`` and
    ``address`` given to the process executor are ignored with a warning.

    A failing run does not stop the others: every finished run is stored, then the error of
    the first failed config (in the given order) is raised as one line naming the config by
    the fields that set it apart. A run whose worker dies under it (killed, or out of memory)
    is run once more, on either executor; dying twice, it counts as failed.

    Workers are spawned processes that import the caller's main module, so a script calls
    ``sweep`` under ``if __name__ == "__main__":`` (notebooks need nothing). They are kept
    for the next sweep with the same ``processes`` and end with the caller's process. A
    worker loads each run's method class by its module and name, so plug-ins registered at
    run time work; a class that exists in this process only (defined in a notebook, in a
    function, or under the ``__main__`` guard) runs in this process, with a warning (on Ray
    it travels with its tasks). Arguments of the wrong type are refused in one line.
    """
    if getattr(current_process(), "_inheriting", False):
        # a spawned worker re-importing the caller's main module, a script without the
        # __main__ guard: quietly, the parent reports the missing guard in one line
        raise SystemExit(1)
    if isinstance(configs, dict):       # a grid: each distinct config once, the results under its keys
        distinct: dict[str, RunConfig] = {}
        names = {}
        for key, config in configs.items():
            if not isinstance(config, RunConfig):
                raise ConfigError(f"sweep(): the grid's entry {key!r} is {_type_name(config)}, "
                                  "not a RunConfig")
            names[key] = json.dumps(config.to_dict(), sort_keys=True, default=str)
            distinct.setdefault(names[key], config)
        results = sweep(list(distinct.values()), processes, directory, desc, progress, executor,
                        address, gpus_per_run)
        by_name = dict(zip(distinct, results))
        return {key: by_name[names[key]] for key in configs}
    configs, processes = _checked_arguments(configs, processes, directory, executor, address,
                                            gpus_per_run)
    executor = executor or os.environ.get("HETFL_EXECUTOR") or "process"
    if executor not in ("process", "ray"):
        raise ConfigError(f"unknown executor {executor!r}; choose process or ray")
    if executor == "process" and (gpus_per_run or address):
        unused = "gpus_per_run" if gpus_per_run else "address"
        warnings.warn(f"{unused} applies to executor='ray' only; the process executor runs on "
                      "this machine", stacklevel=2)
    for c in configs:
        c.validate()
    training_slots()                     # a bad $HETFL_TRAINING_SLOTS stops the sweep before any run
    results: list[dict | None] = [load_cached(c, directory) for c in configs]
    for c, r in zip(configs, results):
        if r is not None:
            log_run(c, True, 0.0)
    todo = [i for i, r in enumerate(results) if r is None]
    if not todo:
        return results  # type: ignore[return-value]
    what = CACHE_WHAT if directory is None else "sweep's directory argument"
    check_writable(Path(directory or cache_dir()), what)
    pooled, here = [], todo
    if executor == "process" and processes > 1 and len(todo) > 1:
        pooled, here = _split_off_local_methods(configs, todo)
    from tqdm import tqdm

    bar = tqdm(total=len(configs), initial=len(configs) - len(todo), desc=desc, unit="run",
               disable=not progress)
    outcomes = _Outcomes(results, bar)
    if executor == "ray":
        _run_on_ray(configs, todo, directory, address or os.environ.get("HETFL_RAY_ADDRESS"), gpus_per_run,
                    processes, outcomes)
    else:
        if len(pooled) == 1:
            here = sorted(pooled + here)
        elif pooled:
            _run_in_pool(configs, pooled, processes, directory, outcomes)
        for i in here:
            try:
                outcome = run_cached(configs[i], directory)
            except Exception as exc:      # any failure is that run's; the others still run
                outcome = exc
            outcomes.record(i, outcome)
    bar.close()
    if outcomes.errors:
        i, exc = min(outcomes.errors, key=lambda e: e[0])
        raise HetflError(f"{len(outcomes.errors)} of {len(configs)} runs failed (finished runs are cached); "
                         f"first: {describe_run(configs, i)}: {_one_line(exc)}")
    return results  # type: ignore[return-value]


def by(results: dict, *parts) -> list:
    """The results of a grid (the dict :func:`sweep` returns) whose key begins with
    ``parts``, in the grid's order: ``by(runs, "fedlps")`` is every seed's run of
    ``("fedlps", seed)`` keys; ``None`` in ``parts`` matches anything (``by(runs, None, 0)``
    is every method's seed-0 run). A key that is not a tuple is a key of one part."""
    if not parts:
        raise ValueError("by() needs at least one part of a key to select on")
    keys = {key: key if isinstance(key, tuple) else (key,) for key in results}
    return [value for key, value in results.items() if len(keys[key]) >= len(parts)
            and all(p is None or k == p for k, p in zip(keys[key], parts))]
