"""The run cache: what its key covers (code, plug-ins, data, versions, device), what a stored
file must be to be served, and writes that lose nothing and leave nothing behind (a full
disk, a directory or a FIFO in the way, links, permissions, odd method names)."""
import errno
import importlib
import importlib.util
import json
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import hetfl_core.runtime.engine as engine
import hetfl_core.runtime.experiments as experiments
from hetfl_core import run, run_cached, sweep
from hetfl_core.science.data import datasets as data_module
from hetfl_core.science.data.storage import ArrayDataset
from hetfl_core.science.errors import ConfigError, HetflError
from hetfl_core.runtime.experiments import cache_path, load_cached
from hetfl_core.science.methods import METHODS, register
from hetfl_core.science.methods.fedavg import FedAvg

ROOT = Path(__file__).resolve().parent.parent
RUN_ARGS = ["run", "fedavg", "--dataset", "digits", "--clients", "4", "--rounds", "2", "--quiet"]


def _refuse_training(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("trained although the run could not be stored")

    monkeypatch.setattr(engine, "run", refuse)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith((".tmp", ".probe")) or
                  p.suffix == ".lock") if directory.exists() else []


# -- numpy-typed configs (F2) ------------------------------------------------------------


def test_a_numpy_typed_config_is_cached_under_the_plain_configs_key(tiny_config, cache):
    typed = tiny_config.replace(seed=np.int64(1), rounds=np.int32(2), clients=np.uint32(4),
                                lr=np.float32(0.5), local_epochs=Fraction(1, 2))
    plain = tiny_config.replace(seed=1, rounds=2, clients=4, lr=0.5, local_epochs=0.5)
    assert cache_path(typed) == cache_path(plain)
    result = run_cached(typed)
    assert json.loads(cache_path(plain).read_text()) == result
    assert load_cached(plain) == result and _leftovers(cache) == []


def test_a_numpy_seeded_sweep_stores_every_run(tiny_config, cache):
    configs = [tiny_config.replace(seed=s) for s in np.arange(2)]
    results = sweep(configs, processes=1, progress=False)
    assert [r["config"]["seed"] for r in results] == [0, 1]
    assert all(cache_path(tiny_config.replace(seed=s)).exists() for s in (0, 1))
    assert _leftovers(cache) == []


def test_a_result_json_cannot_hold_is_one_line_and_leaves_no_temp_file(tiny_config, cache):
    path = cache_path(tiny_config)
    path.parent.mkdir(parents=True)
    path.write_text("kept")
    with pytest.raises(HetflError, match="cache directory") as err:
        experiments._write_atomic(path, {"history": [{"extra": object()}]})
    assert "\n" not in str(err.value) and path.read_text() == "kept" and _leftovers(cache) == []
    experiments._write_atomic(path, {"history": [{"acc": np.float32(0.5), "n": np.int64(3)}]})
    assert json.loads(path.read_text()) == {"history": [{"acc": 0.5, "n": 3}]}


# -- what the key covers (F3) ------------------------------------------------------------


def _import_plugin(path: Path, module: str):
    spec = importlib.util.spec_from_file_location(module, path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


PLUGIN = """
from hetfl_core.science.methods import register
from hetfl_core.science.methods.fedavg import FedAvg

@register
class Mine(FedAvg):
    name = "mine-test"
    summary = "FedAvg, version {version}"
"""


def test_the_key_covers_a_plugins_file_and_an_edit_to_it(tiny_config, tmp_path):
    plugin = tmp_path / "mine.py"
    plugin.write_text(PLUGIN.format(version=1))
    _import_plugin(plugin, "hetfl_plugin_mine")
    config = tiny_config.replace(method="mine-test")
    first = cache_path(config)
    plugin.write_text(PLUGIN.format(version=2) + "# edited\n")
    _import_plugin(plugin, "hetfl_plugin_mine")     # the same definition again: it replaces itself
    assert cache_path(config) != first


HELPED_PLUGIN = """
from hetfl_core.science.methods import register
from hetfl_core.science.methods.fedavg import FedAvg
from {helper} import scaled

@register
class Helped(FedAvg):
    name = "helped-test"
    summary = "FedAvg whose step a helper module scales"

    def aggregate(self, round_idx, reports):
        return scaled(super().aggregate(round_idx, reports))
"""


def test_the_key_covers_a_helper_module_a_plugin_imports(tiny_config, tmp_path, monkeypatch):
    helper = tmp_path / "hetfl_test_helper.py"
    helper.write_text("def scaled(value):\n    return value\n")
    plugin = tmp_path / "helped.py"
    plugin.write_text(HELPED_PLUGIN.format(helper="hetfl_test_helper"))
    monkeypatch.syspath_prepend(str(tmp_path))
    _import_plugin(plugin, "hetfl_plugin_helped")
    config = tiny_config.replace(method="helped-test")
    first = cache_path(config)
    assert cache_path(config) == first                  # the same code, the same key
    helper.write_text("def scaled(value):\n    return value  # a different step\n")
    assert cache_path(config) != first                  # the helper is part of the key
    sys.modules.pop("hetfl_test_helper", None)


def test_a_class_without_a_file_is_keyed_by_its_code(tiny_config):
    def define(step):
        namespace = {"FedAvg": FedAvg, "__name__": "notebook_cell_test"}   # a module without a file
        exec(f"class Cell(FedAvg):\n    name = 'cell-test'\n    def aggregate(self, r, reports):\n"
             f"        return {step}\n", namespace)           # as a notebook cell: no source file
        return namespace["Cell"]

    register(define(1))
    first = experiments.method_source_hash("cell-test")
    register(define(1))                                       # the cell run again, unchanged
    assert experiments.method_source_hash("cell-test") == first
    register(define(2))                                       # ... and edited
    assert experiments.method_source_hash("cell-test") != first


def _toy_dataset(path: Path):
    def load(root=None):
        import torch

        arrays = np.load(path)
        x = torch.from_numpy(arrays["x"])
        y = torch.from_numpy(arrays["y"])
        return ArrayDataset("toy-data", x[:40], y[:40], x[40:], y[40:], 2)

    return load


def test_the_key_covers_the_data(tiny_config, tmp_path, monkeypatch):
    """A dataset registered at run time whose file changes (as in a new process) gets a new key."""
    rng = np.random.default_rng(0)
    path = tmp_path / "toy.npz"
    x, y = rng.normal(size=(50, 1, 8, 8)).astype(np.float32), rng.integers(0, 2, 50)
    np.savez(path, x=x, y=y)
    monkeypatch.setitem(data_module.DATASETS, "toy-data", (_toy_dataset(path), "a toy"))
    monkeypatch.setitem(data_module.DATASET_INFO, "toy-data", data_module.DatasetInfo("image", 8, 2, 40))
    monkeypatch.setattr(data_module, "_CACHE", {})
    config = tiny_config.replace(dataset="toy-data")
    first = cache_path(config)
    assert cache_path(config) == first                         # memoised, stable
    np.savez(path, x=x, y=1 - y)                               # the labels flipped
    monkeypatch.setattr(data_module, "_CACHE", {})             # as a new process loads it
    assert cache_path(config) != first


def test_the_key_covers_versions_and_the_resolved_device(tiny_config, monkeypatch):
    import torch

    import hetfl_core.science.devices as devices

    first = cache_path(tiny_config)
    monkeypatch.setattr(torch, "__version__", "0.0.0")
    assert cache_path(tiny_config) != first
    monkeypatch.undo()
    auto = tiny_config.replace(device="auto")
    on_cpu = cache_path(auto)
    monkeypatch.setattr(devices, "resolve_device", lambda name: torch.device("cuda"))   # a GPU node
    assert cache_path(auto) != on_cpu


def test_register_refuses_a_taken_name_in_one_line():
    class Impostor(FedAvg):
        name = "fedavg"

    with pytest.raises(ConfigError, match="taken by") as err:
        register(Impostor)
    assert "\n" not in str(err.value) and METHODS["fedavg"] is FedAvg
    assert register(FedAvg) is FedAvg                          # the same class again: a no-op
    register(replace=True)(Impostor)
    assert METHODS["fedavg"] is Impostor                       # the registry is restored (conftest)


@pytest.mark.slow
def test_a_plugin_that_takes_a_builtin_name_is_refused_by_the_cli(tmp_path, capsys):
    from hetfl_core.cli import main

    plugin = tmp_path / "p_override.py"
    plugin.write_text("from hetfl_core.science.methods import register\n"
                      "from hetfl_core.science.methods.fedavg import FedAvg\n"
                      "@register\nclass Fake(FedAvg):\n    name = 'fedavg'\n")
    assert main(["arena", "--scale", "smoke", "--plugin", str(plugin), "--methods", "fedavg",
                 "--out", str(tmp_path / "out")]) == 2
    line = capsys.readouterr().err.strip()
    assert "taken by" in line and "\n" not in line


def test_another_configs_result_under_this_key_is_a_miss(tiny_config, cache):
    other = run(tiny_config.replace(seed=5))
    path = cache_path(tiny_config)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(other))
    assert load_cached(tiny_config) is None
    assert run_cached(tiny_config)["config"]["seed"] == 0


# -- the stored file's shape (F9) --------------------------------------------------------

ROWS = {"ints": [1], "empty-dict": [{}], "null": [None], "round-x": "x", "round-bool": True,
        "no-loss": None, "too-few": "short"}


@pytest.mark.parametrize("case", sorted(ROWS))
def test_a_cache_file_with_bad_rows_is_a_miss_and_is_rewritten(case, tiny_config, cache):
    good = json.loads(json.dumps(run(tiny_config)))
    broken = json.loads(json.dumps(good))
    if case in ("round-x", "round-bool"):
        broken["history"][0]["round"] = ROWS[case]
    elif case == "no-loss":
        del broken["history"][1]["loss"]
    elif case == "too-few":
        broken["history"] = broken["history"][:1]
    else:
        broken["history"] = ROWS[case]
    path = cache_path(tiny_config)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(broken))
    assert load_cached(tiny_config) is None
    assert run_cached(tiny_config) == good and json.loads(path.read_text()) == good


def test_a_cache_file_nested_too_deep_is_a_miss(tiny_config, cache):
    path = cache_path(tiny_config)
    path.parent.mkdir(parents=True)
    path.write_text("[" * 100_000)
    assert load_cached(tiny_config) is None


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_directory_or_fifo_at_the_cache_path_is_refused_before_training(kind, tiny_config, cache,
                                                                          monkeypatch):
    path = cache_path(tiny_config)
    path.parent.mkdir(parents=True)
    path.mkdir() if kind == "directory" else os.mkfifo(path)
    _refuse_training(monkeypatch)
    class Hung(Exception):
        """Not an OSError, which a reader may catch."""

    def hung(*args):
        raise Hung("waited on the cache file")

    before = signal.signal(signal.SIGALRM, hung)             # a hang fails the test instead
    signal.alarm(30)
    try:
        for attempt in (lambda: run_cached(tiny_config),
                        lambda: sweep([tiny_config], processes=1, progress=False)):
            with pytest.raises(ConfigError, match="remove it") as err:
                attempt()
            assert str(path) in str(err.value) and "\n" not in str(err.value)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


# -- a full disk (F6) --------------------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 256 KiB tmpfs (needs root to mount; skipped otherwise), unmounted afterwards."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(directory: Path, leave: int) -> None:
    """Fill ``directory``'s file system up to ``leave`` free bytes."""
    free = os.statvfs(directory).f_bavail * os.statvfs(directory).f_frsize
    with open(directory / "fill", "wb") as f:
        f.write(bytes(max(free - leave, 0)))


def test_a_full_disk_is_refused_before_training(tiny_config, small_tmpfs, monkeypatch, capsys):
    _fill(small_tmpfs, 8 * 1024)
    monkeypatch.setenv("HETFL_CACHE", str(small_tmpfs / "runs"))
    _refuse_training(monkeypatch)
    with pytest.raises(HetflError, match="cache directory") as err:
        run_cached(tiny_config)
    assert "No space left" in str(err.value) and "\n" not in str(err.value)
    assert _leftovers(small_tmpfs) == [] and _leftovers(small_tmpfs / "runs") == []
    from hetfl_core.cli import main

    assert main(RUN_ARGS) == 2
    line = capsys.readouterr().err.strip()
    assert "No space left" in line and "\n" not in line


def test_a_disk_that_fills_during_the_write_leaves_no_temp_file(tiny_config, small_tmpfs,
                                                                 monkeypatch):
    monkeypatch.setenv("HETFL_CACHE", str(small_tmpfs))
    result = run(tiny_config)
    big = {**result, "history": result["history"] * 200}     # larger than what is left
    _fill(small_tmpfs, 16 * 1024)
    with pytest.raises(HetflError, match="cache directory") as err:
        experiments._write_atomic(cache_path(tiny_config), big)
    assert str(small_tmpfs) in str(err.value) and "No space left" in str(err.value)
    assert _leftovers(small_tmpfs) == [] and not cache_path(tiny_config).exists()


def test_a_failed_write_after_training_carries_the_finished_run(tiny_config, cache, monkeypatch):
    real = os.replace

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(HetflError, match="No space left") as err:
        run_cached(tiny_config)
    monkeypatch.setattr(os, "replace", real)
    assert err.value.result["history"] and _leftovers(cache) == []


# -- files and paths (F13) ---------------------------------------------------------------


def test_lock_files_are_removed_and_results_respect_the_umask(tiny_config, cache):
    old = os.umask(0o022)
    try:
        run_cached(tiny_config)
        assert stat.S_IMODE(cache_path(tiny_config).stat().st_mode) == 0o644
        os.umask(0o077)
        run_cached(tiny_config.replace(seed=1))
        assert stat.S_IMODE(cache_path(tiny_config.replace(seed=1)).stat().st_mode) == 0o600
    finally:
        os.umask(old)
    assert _leftovers(cache) == []


def test_a_lock_file_that_is_a_symbolic_link_is_refused(tiny_config, cache, tmp_path, monkeypatch):
    precious = tmp_path / "precious.txt"
    precious.write_text("mine")
    lock = cache_path(tiny_config).with_suffix(".lock")
    lock.parent.mkdir(parents=True)
    lock.symlink_to(precious)
    _refuse_training(monkeypatch)
    with pytest.raises(HetflError, match="symbolic link"):
        run_cached(tiny_config)
    assert precious.read_text() == "mine"


def test_a_method_name_cannot_leave_the_cache_directory(tiny_config, cache):
    class Escape(FedAvg):
        name = "x/../../../rel_escape"

    register(Escape)
    path = cache_path(tiny_config.replace(method=Escape.name))
    assert path.parent == cache and "/" not in path.name and not path.name.startswith(".")
    run_cached(tiny_config.replace(method=Escape.name))
    assert path.exists() and not list(cache.parent.parent.glob("rel_escape*"))


def test_an_empty_hetfl_cache_is_refused_in_one_line(tiny_config, monkeypatch, capsys):
    monkeypatch.setenv("HETFL_CACHE", "")
    _refuse_training(monkeypatch)
    with pytest.raises(ConfigError, match="HETFL_CACHE is set but empty"):
        run_cached(tiny_config)
    from hetfl_core.cli import main

    assert main(RUN_ARGS) == 2
    assert "HETFL_CACHE" in capsys.readouterr().err


@pytest.mark.slow
def test_two_processes_waiting_on_one_lock_compute_the_run_once(tiny_config, cache, tmp_path):
    """The holder removes its lock file when done: the waiters still serialise (each checks
    that the file it locked is still the lock) and read the stored run."""
    import fcntl

    log = tmp_path / "runs.log"
    lock = cache_path(tiny_config).with_suffix(".lock")
    lock.parent.mkdir(parents=True)
    code = textwrap.dedent(f"""
        from hetfl_core import RunConfig, run_cached
        run_cached(RunConfig.from_dict({tiny_config.to_dict()!r}))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HETFL_CACHE": str(cache),
           "HETFL_RUN_LOG": str(log)}
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        waiters = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(2)]
        import time

        time.sleep(6)
        assert all(w.poll() is None for w in waiters)
        os.unlink(lock)                                        # as a finished holder does
    assert all(w.wait(timeout=180) == 0 for w in waiters)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(r["cached"] for r in rows) == [False, True] and _leftovers(cache) == []


def test_a_file_rewritten_in_place_while_it_is_read_is_never_served_half(tiny_config, cache):
    """Row 3d of the reliability report: an outside writer that rewrites a cache file in
    place (truncate, then write), cycling through broken and whole contents every
    millisecond, while the cache reads it: a read gives the whole run or a miss, never
    another content and never an exception."""
    import threading
    import time

    whole = run(tiny_config)
    path = cache_path(tiny_config)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(whole)
    contents = [text, '{"config":{},"history":[1]}', "[{}]", "[null]", text[: len(text) // 2],
                json.dumps({"config": whole["config"], "history": whole["history"][:1]})]
    stop = threading.Event()

    def rewrite():
        i = 0
        while not stop.is_set():
            with open(path, "w") as handle:
                handle.write(contents[i % len(contents)])
            i += 1
            time.sleep(0.001)

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        served = [load_cached(tiny_config) for _ in range(300)]
    finally:
        stop.set()
        writer.join()
    expected = json.loads(text)
    assert all(result is None or result == expected for result in served)


# -- training slots: no more runs train at once than $HETFL_TRAINING_SLOTS ---------------


@pytest.mark.parametrize("value, slots", [(None, 0), ("", 0), ("0", 0), ("2", 2), (" 3 ", 3)])
def test_training_slots_read_the_variable(monkeypatch, value, slots):
    if value is None:
        monkeypatch.delenv("HETFL_TRAINING_SLOTS", raising=False)
    else:
        monkeypatch.setenv("HETFL_TRAINING_SLOTS", value)
    assert experiments.training_slots() == slots


@pytest.mark.parametrize("value", ["two", "-1", "1.5"])
def test_a_bad_slot_count_stops_a_sweep_before_any_run(monkeypatch, cache, tiny_config, value):
    monkeypatch.setenv("HETFL_TRAINING_SLOTS", value)
    _refuse_training(monkeypatch)
    with pytest.raises(ConfigError, match=r"\$HETFL_TRAINING_SLOTS must be a whole number.*" + re.escape(repr(value))):
        sweep([tiny_config], processes=1)
    with pytest.raises(ConfigError, match="HETFL_TRAINING_SLOTS"):
        run_cached(tiny_config)


def test_no_more_runs_train_at_once_than_there_are_slots(monkeypatch, cache):
    import threading
    import time

    monkeypatch.setenv("HETFL_TRAINING_SLOTS", "2")
    inside, most, lock = [0], [0], threading.Lock()

    def train():
        with experiments.training_slot():
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.15)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=train) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert most[0] == 2 and inside[0] == 0
    assert sorted(p.name for p in (cache / ".training-slots").iterdir()) == ["slot-0.lock", "slot-1.lock"]


def test_a_killed_holder_frees_its_slot(monkeypatch, cache):
    import time

    monkeypatch.setenv("HETFL_TRAINING_SLOTS", "1")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from hetfl_core.runtime.experiments import training_slot
        with training_slot():
            print("held", flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True, env={**os.environ})
    try:
        assert holder.stdout.readline().strip() == "held"
        waiting = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
            from hetfl_core.runtime.experiments import training_slot
            with training_slot():
                print("got it", flush=True)
            """)], stdout=subprocess.PIPE, text=True, env={**os.environ})
        time.sleep(1.5)
        assert waiting.poll() is None                 # the one slot is held
        holder.kill()
        assert waiting.communicate(timeout=30)[0].strip() == "got it"
    finally:
        holder.kill()
        holder.wait()


def test_slots_change_no_result_and_the_log_leaves_the_wait_out(monkeypatch, cache, tiny_config, tmp_path):
    log = tmp_path / "runs.jsonl"
    monkeypatch.setenv("HETFL_RUN_LOG", str(log))
    monkeypatch.setenv("HETFL_TRAINING_SLOTS", "1")
    free = run(tiny_config)
    waits = []
    real_slot = experiments.training_slot

    @experiments.contextmanager
    def slow_slot():
        import time
        time.sleep(2.0)                              # as if another process held the slot
        waits.append(1)
        with real_slot():
            yield

    monkeypatch.setattr(experiments, "training_slot", slow_slot)
    import time
    start = time.perf_counter()
    assert run_cached(tiny_config) == free
    took = time.perf_counter() - start
    assert waits == [1]
    assert json.loads(log.read_text().splitlines()[-1])["seconds"] <= took - 2.0 + 0.01
