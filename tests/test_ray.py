import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hetfl_core.science.errors import ConfigError, HetflError
from hetfl_core.runtime.experiments import cache_path, sweep
from hetfl_core.science.methods import register
from hetfl_core.science.methods.fedavg import FedAvg

pytestmark = pytest.mark.slow     # servers, notebooks, processes or long runs: not in make test-fast

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def configs(method_config):
    return [method_config("fedavg", rounds=2), method_config("fedavg", rounds=2, seed=1),
            method_config("heterofl", rounds=2, heterogeneity="high")]


def test_ray_sweep_equals_the_process_pool_and_resumes(configs, local_ray, tmp_path, monkeypatch):
    pool = sweep(configs, processes=2, directory=tmp_path / "pool", progress=False)
    monkeypatch.setenv("HETFL_EXECUTOR", "ray")   # how a papermill run picks the executor
    on_ray = sweep(configs, directory=tmp_path / "ray", progress=False)
    assert [r["history"] for r in on_ray] == [r["history"] for r in pool]
    assert pool[0]["history"] != pool[1]["history"]
    # resume: finished runs are read back, a missing one is run again
    stored = [cache_path(c, tmp_path / "ray") for c in configs]
    stamps = [p.stat().st_mtime_ns for p in stored]
    stored[1].unlink()
    again = sweep(configs, executor="ray", directory=tmp_path / "ray", progress=False)
    assert [r["history"] for r in again] == [r["history"] for r in pool]
    assert [p.stat().st_mtime_ns for p in stored[::2]] == stamps[::2] and stored[1].exists()
    assert not list((tmp_path / "ray").glob(".tmp-*"))


def test_a_failing_ray_run_is_reported_after_the_others_finish(method_config, local_ray, tmp_path):
    good = method_config("fedavg")
    bad = method_config("fedavg", lr=1e6, rounds=3, local_steps=20)   # diverges
    with pytest.raises(HetflError, match="1 of 2 runs failed.*diverged"):
        sweep([good, bad], executor="ray", directory=tmp_path, progress=False)
    assert cache_path(good, tmp_path).exists()


def test_unknown_executor_fails_before_any_run(configs, tmp_path):
    with pytest.raises(ConfigError, match="unknown executor 'slurm'"):
        sweep(configs, executor="slurm", directory=tmp_path, progress=False)


class RaisesTypeError(FedAvg):
    """A plug-in with a bug: its client update raises a TypeError (not a HetflError)."""

    name = "ray-type-error-test-method"
    summary = "fails in its first client update"

    def client_step(self, client, plan, state, generator):
        return None + 1


def test_a_plain_error_in_a_ray_run_is_one_line_and_the_others_are_cached(method_config, local_ray,
                                                                           tmp_path):
    """A plug-in registered in the driver travels to the Ray workers; its TypeError is that
    run's, reported in one plain line, and the other runs still run and are cached."""
    register(RaisesTypeError)
    bad = method_config(RaisesTypeError.name)
    good = [method_config("fedavg", seed=s) for s in (1, 2)]
    with pytest.raises(HetflError) as err:
        sweep([bad, *good], executor="ray", directory=tmp_path, progress=False)
    message = str(err.value)
    assert message.startswith("1 of 3 runs failed (finished runs are cached); first: "
                              "ray-type-error-test-method")
    assert "TypeError: unsupported operand" in message
    assert "\n" not in message and "\x1b" not in message and "RayTaskError" not in message
    assert all(cache_path(c, tmp_path).exists() for c in good)


def _ray_task_pid(title: str) -> int | None:
    """The pid of the Ray worker whose process title is ``title`` (``ray::<task name>``)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            except OSError:
                continue
            if argv0 == title:
                return int(entry.name)
    return None


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
def test_a_killed_ray_worker_loses_one_run_not_the_sweep(method_config, local_ray, tmp_path):
    """SIGKILL of the worker under a run (what an out-of-memory kill does): Ray runs it once
    more; killed again, it is reported in one line, and every other run is cached."""
    victim = method_config("fedavg", rounds=400)       # runs until it is killed
    good = [method_config("fedavg", seed=s) for s in (1, 2)]
    title = f"ray::{cache_path(victim, tmp_path).stem}"       # each task is named by its cache file
    kills: list[int] = []
    stop = threading.Event()

    def kill_the_victims_worker():
        while not stop.is_set():
            pid = _ray_task_pid(title)
            if pid is not None and pid not in kills:
                os.kill(pid, signal.SIGKILL)
                kills.append(pid)
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_victims_worker, daemon=True)
    killer.start()
    try:
        with pytest.raises(HetflError) as err:
            sweep([victim, *good], executor="ray", directory=tmp_path, progress=False)
    finally:
        stop.set()
        killer.join(10)
    message = str(err.value)
    assert message.startswith("1 of 3 runs failed (finished runs are cached); first: fedavg (rounds=400")
    assert "worker died" in message and "\n" not in message and "\x1b" not in message
    assert "WorkerCrashedError" not in message
    assert len(kills) == 2                   # Ray ran it once more after the first kill
    assert all(cache_path(c, tmp_path).exists() for c in good) and not cache_path(victim, tmp_path).exists()


def _cli_on_ray(address: str, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HETFL_CACHE": str(tmp_path / "runs")}
    env.pop("HETFL_RAY_ADDRESS", None)
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "hetfl_core", "run", "fedavg", "--dataset", "digits",
                          "--clients", "4", "--rounds", "1", "--quiet", "--executor", "ray",
                          "--address", address], capture_output=True, text=True, env=env, timeout=60)
    return out, time.monotonic() - start


@pytest.mark.parametrize("address, needle", [
    ("127.0.0.1:1", "cannot reach the Ray cluster at '127.0.0.1:1'"),
    ("garbage", "Ray address 'garbage' is not host:port"),
])
def test_a_bad_ray_address_fails_fast_with_one_line(address, needle, tmp_path):
    out, seconds = _cli_on_ray(address, tmp_path)
    assert out.returncode == 2 and seconds < 20, (out.returncode, seconds, out.stderr[-2000:])
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) <= 2, out.stderr
    assert needle in out.stderr.strip().splitlines()[-1]


def test_a_plug_in_sent_by_value_keeps_its_own_declarations(tmp_path):
    """cloudpickle leaves out of a class sent by value the attributes that are its parent's
    objects (``reads_hardware_tiers = False`` under FedAvg's own); the worker's copy keeps them."""
    script = tmp_path / "plug.py"
    script.write_text(
        "import sys\n"
        "from hetfl_core.science.methods.fedavg import FedAvg\n"
        "from hetfl_core.runtime.ray_executor import _method_by_value\n"
        "class Mine(FedAvg, name='mine-by-value', label='Mine', reads_hardware_tiers=False):\n"
        "    '''A plug-in defined in __main__.'''\n"
        "open(sys.argv[1], 'wb').write(_method_by_value(Mine))\n")
    sent = tmp_path / "mine.bin"
    subprocess.run([sys.executable, str(script), str(sent)], check=True, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    from hetfl_core.runtime.ray_executor import _load_method

    cls = _load_method(sent.read_bytes())
    assert (cls.name, cls.label, cls.reads_hardware_tiers) == ("mine-by-value", "Mine", False)
    assert issubclass(cls, FedAvg) and cls is not FedAvg
