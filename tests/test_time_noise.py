"""Noisy device times (``RunConfig.time_noise``): a seeded log-normal factor on each
client's compute time per round, off (exactly) by default."""
import math

import numpy as np
import pytest

from hetfl_core import RunConfig, run
from hetfl_core.runtime.engine import build_simulation
from hetfl_core.science.system import compute_noise
from hetfl_core.science.errors import ConfigError
from hetfl_core.science.system import client_time

BASE = RunConfig(method="fedavg", dataset="digits", model="cnn", clients=4, rounds=2,
                 local_steps=2, batch_size=16, heterogeneity="medium", seed=1)


def times(result):
    return [[c["time_s"] for c in row["clients"]] for row in result["history"]]


def test_no_noise_charges_the_device_model_exactly():
    result = run(BASE.replace(time_noise=0.0))
    assert result["history"] == run(BASE)["history"]
    devices = build_simulation(BASE).hardware
    for row in result["history"]:
        for c in row["clients"]:
            expected = client_time(devices[c["id"]], c["flops"], c["uplink_bits"],
                                   c["uplink_bits"])     # FedAvg's download equals its upload
            assert c["time_s"] == expected
    assert compute_noise(BASE.seed, BASE.time_noise, 3, 2) == 1.0


def test_noise_is_seeded_and_moves_only_the_clock():
    noisy = BASE.replace(time_noise=0.3)
    a, b, quiet = run(noisy), run(noisy), run(BASE)
    assert times(a) == times(b)
    assert times(a) != times(quiet)
    assert [r["loss"] for r in a["history"]] == [r["loss"] for r in quiet["history"]]
    assert times(run(noisy.replace(seed=2))) != times(a)


def test_noise_factor_is_log_normal_with_mean_one():
    config = BASE.replace(time_noise=0.5)
    f = np.array([compute_noise(config.seed, 0.5, t, k) for t in range(1, 201) for k in range(20)])
    assert np.log(f).std() == pytest.approx(0.5, rel=0.08)
    assert f.mean() == pytest.approx(1.0, abs=0.05)
    assert compute_noise(1, 0.5, 4, 7) == compute_noise(1, 0.5, 4, 7) != compute_noise(1, 0.5, 4, 8)
    assert math.isfinite(compute_noise(1, 10.0, 1, 1))


@pytest.mark.parametrize("value", [-0.1, 11.0, float("nan")])
def test_bad_noise_fails_with_one_line(value):
    with pytest.raises(ConfigError, match="time_noise"):
        BASE.replace(time_noise=value).validate()
