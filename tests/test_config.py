"""RunConfig: a frozen value, normalised when it is made and checked once by validate(),
which changes nothing; replace() replaces fields (the options too), with_options() merges
options; and the key of a config, which finds its cached and stored runs, stays what it was."""
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from hetfl_core import ConfigError, RunConfig

ROOT = Path(__file__).resolve().parents[1]

#: representative configs and their keys as the config code computed them before RunConfig
#: became frozen (commit c857a86): the on-disk cache and the ladder's stored runs are found
#: by these keys, so a change to them orphans every stored result
PINNED = [
    ({}, "bac33ba2d491294bbc5c"),
    ({"method": "fedprox", "options": {"mu": 0.01}}, "0b5c818e7e49ac213df7"),
    ({"alpha": 1, "lr": 1, "local_epochs": 2, "seed": 5}, "7a00c8ed398be6300763"),
    ({"seed": np.int64(3), "rounds": np.int32(4), "lr": np.float32(0.5), "clients": np.uint32(8)},
     "a3fef53f313c7a35060b"),
    ({"method": "fedlps", "dataset": "fashion-mnist", "partition": "shards", "clients": 20,
      "participation": 0.25, "rounds": 20, "batch_size": 20, "lr": 0.1, "momentum": 0.5,
      "train_samples": 2000, "heterogeneity": "medium", "eval_every": 4, "seed": 2,
      "options": {"ratio_levels": [0.25, 0.5, 1.0], "ucb_xi": 1.0}}, "a08cd2c421bc0c9829ce"),
    ({"method": "sparse-prune-pfl", "system": "wireless", "bandwidth_mhz": 5,
      "bandwidth_high_mhz": 20.0, "bandwidth_policy": "min-time", "time_noise": 0.3,
      "local_steps": 5, "eval_global": False, "eval_global_every": 3, "batched_clients": True,
      "device": "cuda"}, "94cedaa634d054b0dfe7"),
    ({"partition": "given", "clients": 2, "given_indices": [[0, 1, 2], np.array([3, 4])]},
     "9fa50415e1e58dfae275"),
    ({"method": "fedbabu", "options": {"finetune_epochs": np.float64(1.0), "widths": (0.5, 1),
                                       "table": {"a": [1, 2]}}}, "287b6d77693b6d37e530"),
]


@pytest.mark.parametrize("fields, key", PINNED, ids=[f"pinned{i}" for i in range(len(PINNED))])
def test_a_configs_key_is_the_one_it_had(fields, key):
    assert RunConfig(**fields).key() == key


def test_a_salted_key_is_the_one_it_had():
    assert RunConfig().key("salt") == "4acc715d69de96f92190"


def test_every_stored_ladder_run_is_found_under_its_key():
    from hetfl_core.book.ladder import run_key

    stored = sorted((ROOT / "results" / "ladder" / "runs").glob("*.json"))
    assert stored, "no stored ladder run to check"
    for path in stored:
        record = json.loads(path.read_text())
        assert run_key(RunConfig.from_dict(record["config"])) == path.stem == record["key"]


def test_a_config_is_frozen():
    config = RunConfig(dataset="digits")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.rounds = 3
    assert config.rounds == RunConfig().rounds


def test_values_are_plain_from_the_start_and_validate_changes_nothing():
    options = {"widths": np.array([1.0, 0.5])}
    config = RunConfig(method="heterofl", dataset="DIGITS", lr=1, seed=np.int64(2), options=options)
    assert (config.dataset, config.lr, config.seed) == ("digits", 1.0, 2)
    assert type(config.lr) is float and type(config.seed) is int
    assert config.options == {"widths": [1.0, 0.5]} and config.options is not options
    before = config.to_dict()
    assert config.validate() is config
    assert config.to_dict() == before


def test_validate_checks_a_config_once(monkeypatch):
    config = RunConfig(dataset="digits")
    calls = []
    real = RunConfig._check
    monkeypatch.setattr(RunConfig, "_check", lambda self: calls.append(1) or real(self))
    config.validate()
    config.validate()
    assert len(calls) == 1
    config.replace(seed=1).validate()            # a new config is checked for itself
    assert len(calls) == 2
    assert config == RunConfig(dataset="digits")    # the check leaves equality alone


def test_a_bad_value_is_kept_for_validate_to_refuse():
    from fractions import Fraction

    config = RunConfig(dataset="no-such-data", lr=Fraction(1, 3))
    assert config.dataset == "no-such-data" and config.lr == Fraction(1, 3)
    with pytest.raises(ConfigError, match="lr"):
        config.validate()


def test_replace_replaces_the_options_and_with_options_merges_them():
    config = RunConfig(method="fedprox", options={"mu": 0.1})
    assert config.replace(rounds=3).options == {"mu": 0.1}
    assert config.replace(options={}).options == {}
    assert config.replace(method="fedavg", options={"drop_last": True}).options == {"drop_last": True}
    merged = RunConfig(method="fedbabu", options={"finetune_epochs": 1.0})
    assert merged.with_options(finetune_when="every").options == {"finetune_epochs": 1.0,
                                                                  "finetune_when": "every"}
    assert merged.with_options(finetune_epochs=2.0).options == {"finetune_epochs": 2.0}
    assert merged.with_options() == merged
    assert merged.options == {"finetune_epochs": 1.0}           # neither changes the original
