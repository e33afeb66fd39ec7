"""Sweeps that cannot orphan or lose: workers end with their parent, any failure is one
run's and is named by what sets its config apart, any iterable works."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hetfl_core.science.errors import HetflError
from hetfl_core.runtime.experiments import cache_path, describe_run, sweep
from hetfl_core.science.methods import METHODS
from hetfl_core.science.methods.fedavg import FedAvg

pytestmark = pytest.mark.slow     # servers, notebooks, processes or long runs: not in make test-fast

ROOT = Path(__file__).resolve().parent.parent


def _children(pid: int) -> set[int]:
    """The live processes whose parent is ``pid`` (read from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
def test_sigkill_of_the_parent_leaves_no_worker_behind(tmp_path):
    script = tmp_path / "long_sweep.py"
    script.write_text(textwrap.dedent("""
        from hetfl_core import RunConfig
        from hetfl_core.runtime.experiments import sweep

        if __name__ == "__main__":
            sweep([RunConfig(dataset="digits", partition="iid", clients=4, rounds=100000, seed=s) for s in (0, 1)],
                  processes=2, progress=False)
    """))
    env = dict(os.environ, PYTHONPATH=str(ROOT), HETFL_CACHE=str(tmp_path / "runs"))
    parent = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        children: set[int] = set()
        while time.time() < deadline and len(children) < 3:   # two workers and multiprocessing's helper
            time.sleep(0.5)
            children |= _children(parent.pid)
        assert len(children) >= 2, "the sweep never started its workers"
        time.sleep(2)                     # the workers are importing or training
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        # a worker still importing torch ends once its start-up reaches the parent check,
        # which takes seconds on a loaded machine
        deadline = time.time() + 60
        while time.time() < deadline and any(map(_alive, children)):
            time.sleep(0.2)
        assert not [p for p in children if _alive(p)], "workers outlived their parent"
    finally:
        parent.kill()


class Exploding(FedAvg):
    """A plug-in whose client update fails with a plain RuntimeError (not a HetflError)."""

    name = "exploding-test-method"
    summary = "fails in its first client update"

    def client_step(self, client, plan, state, generator):
        raise RuntimeError("boom")


def test_any_error_in_one_run_is_recorded_and_the_others_finish(tiny_config, cache, monkeypatch):
    monkeypatch.setitem(METHODS, Exploding.name, Exploding)     # registered for this test only
    bad = tiny_config.replace(method=Exploding.name)
    good = tiny_config.replace(seed=1)
    with pytest.raises(HetflError) as err:
        sweep(iter([bad, good]), processes=1, progress=False)
    message = str(err.value)
    assert "1 of 2 runs failed" in message and "RuntimeError: boom" in message and "\n" not in message
    assert cache_path(good).exists()


def test_a_generator_of_configs_is_swept(tiny_config, cache):
    results = sweep((tiny_config.replace(seed=s) for s in (0, 1)), processes=1, progress=False)
    assert len(results) == 2 and all(r["history"] for r in results)


def test_a_failed_run_is_named_by_what_sets_it_apart(tiny_config):
    configs = [tiny_config.replace(lr=lr, clients=k) for lr, k in ((0.05, 4), (0.1, 4), (0.1, 6))]
    assert describe_run(configs, 2) == "fedavg (clients=6, lr=0.1)"
    assert describe_run([tiny_config], 0) == "fedavg (seed=0)"


def _lock_holder(lock: Path) -> int | None:
    """The pid holding ``lock`` (a run's lock file, held while the run computes), read from
    /proc/locks; None when nobody holds it."""
    try:
        inode = lock.stat().st_ino
    except OSError:
        return None
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields:            # a process waiting for the lock, not its holder
            continue
        if len(fields) >= 6 and fields[5].rsplit(":", 1)[-1] == str(inode):
            return int(fields[4])
    return None


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads /proc/locks")
def test_a_sigkilled_worker_does_not_stop_the_other_runs(tiny_config, cache):
    """A worker killed mid-run (as an out-of-memory kill does): the pool is rebuilt, every
    other run still runs and is cached, and the killed run is retried once."""
    import threading

    victim = tiny_config.replace(rounds=100000)          # runs until it is killed
    others = [tiny_config.replace(seed=s) for s in range(1, 5)]
    kills: list[int] = []
    stop = threading.Event()

    def kill_the_victims_worker():
        lock = cache_path(victim).with_suffix(".lock")
        while not stop.is_set():
            pid = _lock_holder(lock) if cache_path(others[0]).exists() else None
            if pid is not None and pid not in kills:      # a killed worker lists its lock a moment longer
                os.kill(pid, signal.SIGKILL)
                kills.append(pid)
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_victims_worker, daemon=True)
    killer.start()
    try:
        with pytest.raises(HetflError) as err:
            sweep([victim, *others], processes=2, progress=False)
    finally:
        stop.set()
        killer.join(10)
    message = str(err.value)
    assert message.startswith("1 of 5 runs failed (finished runs are cached); first: fedavg (rounds=100000")
    assert "worker process died" in message and "__main__" not in message and "\n" not in message
    assert len(kills) == 2                   # the killed run was run once more, then given up
    assert all(cache_path(c).exists() for c in others) and not cache_path(victim).exists()


class RaisesTypeError(FedAvg):
    """A plug-in with a bug: its client update raises a TypeError (not a HetflError)."""

    name = "raises-type-error-test-method"
    summary = "fails in its first client update"

    def client_step(self, client, plan, state, generator):
        return None + 1


def test_a_plugin_registered_in_the_caller_runs_in_the_pool_workers(tiny_config, cache):
    """A method registered at run time (here by the test) in a module the workers can
    import: the workers run it, and its error is one line while the other run is cached."""
    from hetfl_core.science.methods import register

    register(RaisesTypeError)
    bad, good = tiny_config.replace(method=RaisesTypeError.name), tiny_config.replace(seed=1)
    with pytest.raises(HetflError) as err:
        sweep([bad, good], processes=2, progress=False)
    message = str(err.value)
    assert message.startswith("1 of 2 runs failed") and "TypeError: unsupported operand" in message
    assert cache_path(good).exists()


def _sweep_in_a_subprocess(tmp_path, code: str, script: bool = False):
    """Run ``code`` with ``python -c`` (no ``__file__``, as in a notebook) or as a script file."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HETFL_CACHE": str(tmp_path / "runs")}
    code = textwrap.dedent(code)
    if script:
        (tmp_path / "script.py").write_text(code)
        argv = [sys.executable, str(tmp_path / "script.py")]
    else:
        argv = [sys.executable, "-c", code]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)


def test_a_method_registered_in_a_notebook_runs_in_this_process_and_says_so(tmp_path):
    out = _sweep_in_a_subprocess(tmp_path, """
        from hetfl_core import RunConfig, sweep
        from hetfl_core.science.methods import register
        from hetfl_core.science.methods.fedavg import FedAvg

        @register
        class MyMethod(FedAvg):
            name = "my-method"
            summary = "FedAvg under another name"

        results = sweep([RunConfig(method="my-method", dataset="digits", clients=4, rounds=1, seed=s)
                         for s in range(2)] + [RunConfig(dataset="digits", clients=4, rounds=1)],
                        progress=False)
        print([r["config"]["method"] for r in results])
    """)
    assert out.returncode == 0, out.stderr
    assert "['my-method', 'my-method', 'fedavg']" in out.stdout
    assert "registered in this process only" in out.stderr and "Traceback" not in out.stderr
    assert len(list((tmp_path / "runs").glob("my-method-*.json"))) == 2


def test_a_method_registered_under_the_main_guard_runs_in_this_process(tmp_path):
    out = _sweep_in_a_subprocess(tmp_path, """
        from hetfl_core import RunConfig, sweep
        from hetfl_core.science.methods import register
        from hetfl_core.science.methods.fedavg import FedAvg

        if __name__ == "__main__":
            @register
            class Guarded(FedAvg):
                name = "guarded-method"
                summary = "FedAvg under another name"

            results = sweep([RunConfig(method="guarded-method", dataset="digits", clients=4, rounds=1,
                                       seed=s) for s in range(2)], progress=False)
            print(len(results))
    """, script=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2" and "registered in this process only" in out.stderr


def test_workers_that_fail_at_start_up_under_a_guard_do_not_blame_the_guard(tmp_path):
    out = _sweep_in_a_subprocess(tmp_path, """
        from hetfl_core import RunConfig, sweep

        if __name__ != "__main__":
            raise RuntimeError("this file runs as a script only")

        if __name__ == "__main__":
            sweep([RunConfig(dataset="digits", clients=2, rounds=1, seed=s) for s in (7, 8)],
                  processes=2, progress=False)
    """, script=True)
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode != 0 and "died while starting" in last, out.stderr
    assert "if __name__" not in last and "main module failed" in last


def test_the_packages_own_methods_go_to_the_pool_when_it_is_installed(monkeypatch):
    """Installed (an editable install is found by its own finder, not on ``sys.path``),
    every method of the package and of its subpackages is one the workers can import: none
    is run one after the other in the caller's process."""
    from hetfl_core.runtime import experiments
    from hetfl_core.science.methods import get_method

    root = str(ROOT)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", root)])
    monkeypatch.chdir(ROOT.parent)
    for name in ("fedavg", "fedbabu", "srp-pfed", "sparse-prune-pfl"):
        assert experiments._in_this_process_only(get_method(name)) is None, name
