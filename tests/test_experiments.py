import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hetfl_core.runtime.engine as engine
import hetfl_core.runtime.experiments as experiments
from hetfl_core import HetflError, run, run_cached, sweep
from hetfl_core.runtime.experiments import cache_path, source_hash


def test_run_cached_stores_once_and_reuses(tiny_config, cache, monkeypatch):
    first = run_cached(tiny_config)
    files = list(cache.glob("*.json"))
    assert len(files) == 1 and files[0] == cache_path(tiny_config)
    assert json.loads(files[0].read_text()) == first

    def refuse(*args, **kwargs):
        raise AssertionError("ran again")

    monkeypatch.setattr(engine, "run", refuse)
    assert run_cached(tiny_config) == first
    assert not list(cache.glob(".tmp-*"))


def test_cache_key_covers_config_and_source(tiny_config, tmp_path, monkeypatch):
    """The key changes with the config and with the source hash, which changes when a file
    of a run layer (science, runtime) changes and not when the book layer or the command
    line does."""
    assert cache_path(tiny_config) != cache_path(tiny_config.replace(seed=1))
    assert cache_path(tiny_config) != cache_path(tiny_config.replace(options={"mu": 0.1}))
    key = cache_path(tiny_config)
    copy = tmp_path / "hetfl_core"
    package = Path(experiments.__file__).parents[1]
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(experiments, "__file__", str(copy / "runtime" / "experiments.py"))
    hash_of_copy = experiments.source_hash.__wrapped__        # uncached, reads the copy
    before = hash_of_copy()
    assert re.fullmatch("[0-9a-f]{12}", before) and before == source_hash()
    for outside in ("book/plots.py", "book/chapter.py", "cli.py", "__init__.py"):
        with open(copy / outside, "a") as f:
            f.write("\n# an edit outside the run layers\n")
        assert hash_of_copy() == before, outside
    for inside in ("runtime/engine.py", "science/masks.py", "science/methods/fedavg.py"):
        with open(copy / inside, "a") as f:
            f.write("\n# an edit to code that computes runs\n")
        changed = hash_of_copy()
        assert changed != before, inside
        before = changed
    monkeypatch.setattr(experiments, "source_hash", lambda: changed)
    assert cache_path(tiny_config) != key


@pytest.mark.slow
def test_sweep_in_processes_equals_single_process(tiny_config, cache):
    configs = [tiny_config, tiny_config.replace(seed=1)]
    parallel = sweep(configs, processes=2, progress=False)
    assert [r["config"]["seed"] for r in parallel] == [0, 1]
    for config, result in zip(configs, parallel):
        assert result["history"] == json.loads(json.dumps(run(config)["history"]))


def test_failed_run_in_sweep_keeps_finished_work(tiny_config, cache):
    good = tiny_config
    bad = tiny_config.replace(lr=100.0, local_steps=20, rounds=3)
    with pytest.raises(HetflError) as err:
        sweep([good, bad], processes=1, progress=False)
    assert "1 of 2 runs failed" in str(err.value) and "\n" not in str(err.value)
    assert cache_path(good).exists() and not cache_path(bad).exists()


@pytest.mark.slow
def test_sweeps_share_their_worker_processes(tiny_config, cache):
    sweep([tiny_config, tiny_config.replace(seed=1)], processes=2, progress=False)
    pool = experiments._POOL
    workers = set(pool._processes)
    sweep([tiny_config.replace(seed=2), tiny_config.replace(seed=3)], processes=2, progress=False)
    assert experiments._POOL is pool and set(pool._processes) == workers


@pytest.mark.slow
def test_an_interrupt_ends_idle_workers_quietly_and_the_next_sweep_starts_new_ones(tiny_config, cache, capfd):
    sweep([tiny_config, tiny_config.replace(seed=1)], processes=2, progress=False)
    pool = experiments._POOL
    workers = list(pool._processes.values())
    for worker in workers:           # what a Jupyter kernel's shutdown or interrupt sends its process group
        os.kill(worker.pid, signal.SIGINT)
    # The pool's manager thread reaps a worker that leaves and terminates its siblings; while it
    # reaps, Process.exitcode can read None for a moment (waitpid races), so poll until it is set.
    deadline = time.monotonic() + 30
    while any(w.exitcode is None for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(w.exitcode in (0, -signal.SIGTERM) for w in workers), [w.exitcode for w in workers]
    assert "Traceback" not in capfd.readouterr().err
    results = sweep([tiny_config.replace(seed=2), tiny_config.replace(seed=3)], processes=2, progress=False)
    assert experiments._POOL is not pool and [r["config"]["seed"] for r in results] == [2, 3]


@pytest.mark.slow
def test_a_script_without_a_main_guard_gets_one_line_naming_it(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text("from hetfl_core import RunConfig, sweep\n"
                      "sweep([RunConfig(dataset='digits', clients=2, rounds=1, seed=s) for s in (7, 8)],\n"
                      f"      processes=2, progress=False, directory={str(tmp_path / 'runs')!r})\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode != 0
    assert "if __name__ ==" in out.stderr.strip().splitlines()[-1]
    assert out.stderr.count("Traceback") == 1, out.stderr     # the parent's own: no worker's tracebacks


@pytest.mark.parametrize("content", [b"\x89PNG\x00\xff\xfe garbage", b"[]", b"{}", b'{"config": {}, "history": []}',
                                     b'{"config": {}'])
def test_a_broken_cache_file_is_a_miss_and_is_rewritten(content, tiny_config, cache):
    path = cache_path(tiny_config)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    assert experiments.load_cached(tiny_config) is None
    result = run_cached(tiny_config)
    assert json.loads(path.read_text()) == result and result["history"]


def _run_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _run_cached_in_a_process(config, log: Path, cache: Path) -> subprocess.Popen:
    code = (f"from hetfl_core import RunConfig, run_cached\n"
            f"run_cached(RunConfig.from_dict({config.to_dict()!r}))\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "HETFL_CACHE": str(cache),
           "HETFL_RUN_LOG": str(log)}
    return subprocess.Popen([sys.executable, "-c", code], env=env)


@pytest.mark.slow
def test_a_run_computed_elsewhere_under_the_lock_is_not_computed_again(tiny_config, cache, tmp_path):
    import fcntl

    log = tmp_path / "runs.log"
    result = run(tiny_config)
    lock = cache_path(tiny_config).with_suffix(".lock")
    lock.parent.mkdir(parents=True)
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)           # as a concurrent sweep computing this run
        waiter = _run_cached_in_a_process(tiny_config, log, cache)
        time.sleep(8)                              # it has imported and now waits for the lock
        assert waiter.poll() is None
        experiments._write_atomic(cache_path(tiny_config), result)
        fcntl.flock(held, fcntl.LOCK_UN)
    assert waiter.wait(timeout=120) == 0
    assert [row["cached"] for row in _run_log(log)] == [True]   # read, not computed twice


@pytest.mark.slow
def test_a_lock_holder_that_dies_blocks_nobody(tiny_config, cache, tmp_path):
    lock = cache_path(tiny_config).with_suffix(".lock")
    lock.parent.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", f"import fcntl, time\nf = open({str(lock)!r}, 'a')\n"
                               "fcntl.flock(f, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(600)"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    assert run_cached(tiny_config)["history"]


def test_every_run_computes_with_one_torch_thread(tiny_config):
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen = []
        run(tiny_config.replace(rounds=1), callback=lambda row: seen.append(torch.get_num_threads()))
        assert seen == [1]                           # one thread while computing
        assert torch.get_num_threads() == 2          # the caller's count afterwards
    finally:
        torch.set_num_threads(before)


def test_an_unwritable_cache_is_refused_before_training(tiny_config, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("HETFL_CACHE", str(blocker / "runs"))

    def refuse(*args, **kwargs):
        raise AssertionError("trained although the result could not be stored")

    monkeypatch.setattr(engine, "run", refuse)
    for attempt in (lambda: run_cached(tiny_config), lambda: sweep([tiny_config], processes=1, progress=False)):
        with pytest.raises(HetflError, match="cache directory"):
            attempt()


def test_a_grid_sweeps_each_distinct_config_once_and_comes_back_under_its_keys(tmp_path):
    import pytest

    from hetfl_core import RunConfig
    from hetfl_core.runtime.experiments import by, sweep

    base = RunConfig(dataset="digits", clients=4, rounds=1, local_steps=1, participation=1.0)
    grid = {("fedavg", 0): base, ("fedavg", 1): base.replace(seed=1),
            ("alias", 0): base, ("fedprox", 0): base.replace(method="fedprox")}
    runs = sweep(grid, processes=1, directory=tmp_path, progress=False)
    assert list(runs) == list(grid)
    assert runs[("alias", 0)] is runs[("fedavg", 0)]                  # equal configs ran once
    assert len(list(tmp_path.rglob("*.json"))) == 3
    assert by(runs, "fedavg") == [runs[("fedavg", 0)], runs[("fedavg", 1)]]
    assert by(runs, None, 0) == [runs[k] for k in grid if k[1] == 0]
    assert by({"a": 1, "b": 2}, "b") == [2]
    with pytest.raises(ValueError):
        by(runs)
    from hetfl_core.science.errors import ConfigError
    with pytest.raises(ConfigError, match="entry 'x' is"):
        sweep({"x": 3}, progress=False)
