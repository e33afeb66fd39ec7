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

from hetfl_core.errors import HetflError
from hetfl_core.experiments import cache_path, describe_run, sweep
from hetfl_core.methods import METHODS
from hetfl_core.methods.fedavg import FedAvg

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
        from hetfl_core.experiments import sweep

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
        deadline = time.time() + 10
        while time.time() < deadline and any(map(_alive, children)):
            time.sleep(0.2)
        assert not [p for p in children if _alive(p)], "workers outlived their parent"
    finally:
        parent.kill()


class Exploding(FedAvg):
    """A plug-in whose client update fails with a plain RuntimeError (not a HetflError)."""

    name = "exploding-test-method"
    summary = "fails in its first client update"

    def client_update(self, client, plan, generator):
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
