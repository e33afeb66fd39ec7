import json
import subprocess
import sys

import pytest
import torch

from hetfl_core.runtime.engine import build_simulation, run_rounds
from hetfl_core.runtime.flower import run_flower
from hetfl_core.science.methods import METHODS

pytestmark = pytest.mark.slow     # servers, notebooks, processes or long runs: not in make test-fast


def weights(method, clients):
    """The global model's weights and every client's personal model's."""
    models = [method.global_model(), *(method.personal_model(k) for k in range(clients))]
    return [m.state_dict() for m in models if m is not None]


def test_every_method_on_flower_matches_the_engine(method_config):
    configs = [method_config(m, rounds=2, heterogeneity="high") for m in sorted(METHODS)]
    on_flower = {}
    flower = run_flower(configs, on_run=lambda result, method: on_flower.setdefault(
        result["config"]["method"], weights(method, 3)))
    for config, result in zip(configs, flower):
        sim = build_simulation(config)
        engine = run_rounds(sim)
        for a, b in zip(engine["history"], result["history"], strict=True):
            for key in ("acc_global", "acc_personal", "loss", "flops", "uplink_bits", "downlink_bits", "time_s"):
                assert a[key] == b[key], (config.method, a["round"], key)
        for mine, theirs in zip(weights(sim.method, 3), on_flower[config.method], strict=True):
            assert mine.keys() == theirs.keys()
            for name in mine:
                torch.testing.assert_close(theirs[name], mine[name], rtol=0, atol=1e-5)


def test_the_command_line_runs_a_method_on_flower(tmp_path, method_config):
    out = subprocess.run([sys.executable, "-m", "hetfl_core", "run", "fedper", "--dataset", "digits", "--partition",
                          "iid", "--clients", "2", "--rounds", "1", "--local-steps", "2", "--engine", "flower",
                          "--quiet", "--out", str(tmp_path / "run.json")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    history = json.loads((tmp_path / "run.json").read_text())["history"]
    engine = run_rounds(build_simulation(method_config("fedper", clients=2)))
    assert history == json.loads(json.dumps(engine["history"]))


def test_a_flower_run_config_with_a_bad_node_count_is_one_line(tmp_path):
    import pytest

    from hetfl_core.runtime.config import RunConfig
    from hetfl_core.science.errors import ConfigError
    from hetfl_core.runtime.flower_app import read_run_config

    base = {"hetfl-config": json.dumps(RunConfig(dataset="digits").to_dict()), "output": str(tmp_path / "r.json")}
    assert read_run_config({**base, "nodes": 3})[2] == 3
    for nodes, message in (("two", "nodes must be a whole number, got 'two'"), (-1, None)):
        with pytest.raises(ConfigError, match=message or "nodes must be at least 1"):
            read_run_config({**base, "nodes": nodes})
