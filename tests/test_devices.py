import subprocess
import sys

import pytest
import torch

from hetfl_core import RunConfig, run
from hetfl_core.science.devices import resolve_device
from hetfl_core.runtime.engine import build_simulation
from hetfl_core.science.errors import ConfigError


def test_cpu_is_the_default_device(tiny_config):
    assert tiny_config.device == "cpu"
    sim = build_simulation(tiny_config)
    assert sim.data.clients[0].x_train.device.type == "cpu"
    assert next(sim.method.model.parameters()).device.type == "cpu"


@pytest.mark.parametrize("device, needle", [("tpu", "unknown device 'tpu'"), ("cuda:x", "unknown device"),
                                            ("cuda:99", "cuda:99")])
def test_unknown_or_missing_device_fails_validation(device, needle):
    with pytest.raises(ConfigError, match=needle):
        RunConfig(dataset="digits", device=device).validate()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
@pytest.mark.slow
def test_cuda_without_a_gpu_exits_2_with_one_line():
    out = subprocess.run([sys.executable, "-m", "hetfl_core", "run", "fedavg", "--dataset", "digits",
                          "--device", "cuda"], capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "not available" in out.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine (torch.cuda.is_available() "
                                                          "is False): the CUDA runs need one")
@pytest.mark.parametrize("method", ["fedavg", "heterofl", "fedlps"])
def test_cuda_runs_cost_the_same_and_learn_alike(method, method_config):
    cpu = run(method_config(method, rounds=2))["history"]
    gpu = run(method_config(method, rounds=2, device="cuda"))["history"]
    for a, b in zip(cpu, gpu):
        assert (a["flops"], a["uplink_bits"], a["downlink_bits"]) == (b["flops"], b["uplink_bits"], b["downlink_bits"])
        assert b["acc_personal"] == pytest.approx(a["acc_personal"], abs=0.05)
