import pytest

from hetfl_core.errors import ConfigError, HetflError
from hetfl_core.experiments import cache_path, sweep


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
