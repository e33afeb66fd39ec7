"""RunConfig.validate(): every bad field, option and misfit is one ConfigError line naming
the field, raised before any data is loaded."""
import json
import math
from fractions import Fraction

import numpy as np
import pytest

from hetfl_core import RunConfig
from hetfl_core.science.data import datasets as data_module
from hetfl_core.runtime.config import MODEL_INPUTS
from hetfl_core.science.data import DATASET_INFO, DATASETS, load_dataset
from hetfl_core.runtime.engine import run
from hetfl_core.science.errors import ConfigError, DivergenceError
from hetfl_core.science.models import MODELS

BAD_FIELDS = [
    ("rounds", "3"), ("rounds", None), ("lr", [0.1]), ("lr", "0.1"), ("rounds", 2.5), ("batch_size", 2.5),
    ("seed", 1.5), ("seed", None), ("seed", -1), ("seed", 2 ** 32), ("seed", 10 ** 31), ("clients", True),
    ("local_epochs", math.inf), ("local_epochs", 1e308), ("lr", math.inf), ("lr", 1e308), ("lr", math.nan),
    ("weight_decay", math.inf), ("weight_decay", 1e308), ("alpha", 1e308), ("rounds", 10 ** 31),
    ("local_steps", 10 ** 31), ("eval_global", 1), ("dataset", None), ("model", 3), ("participation", 0),
    ("momentum", 1.0), ("train_samples", 0),
]


@pytest.mark.parametrize("name, value", BAD_FIELDS, ids=[f"{n}={v!r}" for n, v in BAD_FIELDS])
def test_bad_field_is_one_config_error_naming_it(name, value):
    with pytest.raises(ConfigError) as err:
        RunConfig(**{"dataset": "digits", name: value}).validate()
    assert name in str(err.value) and "\n" not in str(err.value)


MISFITS = [
    (dict(partition="natural"), "natural"), (dict(clients=2000), "clients"),
    (dict(partition="shards", classes_per_client=11), "classes_per_client"), (dict(model="lenet5"), "lenet5"),
    (dict(model="charlstm"), "charlstm"), (dict(train_samples=10, clients=11), "clients"),
]


@pytest.mark.parametrize("fields, named", MISFITS, ids=[n for _, n in MISFITS])
def test_misfit_is_refused_before_loading(fields, named, monkeypatch):
    monkeypatch.setattr(data_module, "_CACHE", {})
    with pytest.raises(ConfigError, match=named):
        RunConfig(dataset="digits", **fields).validate()
    assert data_module._CACHE == {}


def test_image_model_on_text_is_refused_before_loading(monkeypatch):
    monkeypatch.setattr(data_module, "_CACHE", {})
    with pytest.raises(ConfigError, match="cannot read shakespeare"):
        RunConfig(dataset="shakespeare", model="cnn").validate()
    assert data_module._CACHE == {}


def test_metadata_covers_every_model_and_dataset_and_matches_digits():
    assert set(MODEL_INPUTS) == set(MODELS) and set(DATASET_INFO) == set(DATASETS)
    ds = load_dataset("digits")
    reads, side, classes, train_size = DATASET_INFO["digits"]
    assert (side, classes, train_size) == (ds.x_train.shape[-1], ds.num_classes, len(ds.y_train))


@pytest.mark.parametrize("options", [{"mu": "abc"}, {"mu": [1]}, {"mu": None}, {"mu": math.nan},
                                     {"mu": math.inf}, {"mu": -1.0}])
def test_bad_option_value_is_a_config_error(options):
    with pytest.raises(ConfigError, match="mu"):
        RunConfig(method="fedprox", dataset="digits", options=options).validate()


def test_from_dict_refuses_a_non_dict():
    with pytest.raises(ConfigError, match="must be a dict"):
        RunConfig.from_dict("fedavg")


def test_divergence_names_weight_decay_when_it_is_set(tiny_config):
    with pytest.raises(DivergenceError, match="weight_decay"):
        run(tiny_config.replace(weight_decay=100.0, rounds=2, local_steps=20).validate())


PLAIN = [("seed", np.int64(3), 3), ("rounds", np.int32(2), 2), ("clients", np.uint32(4), 4),
         ("local_steps", np.int64(2), 2), ("lr", np.float32(0.5), 0.5),
         ("lr", Fraction(1, 4), 0.25), ("lr", 1, 1.0), ("alpha", np.float64(0.3), 0.3),
         ("eval_global", np.True_, True)]


@pytest.mark.parametrize("name, value, plain", PLAIN, ids=[f"{n}={v!r}" for n, v, _ in PLAIN])
def test_a_number_of_another_type_becomes_plain_python(name, value, plain):
    config = RunConfig(dataset="digits", **{name: value})
    key = config.key()
    config.validate()
    assert config.key() == key == RunConfig(dataset="digits", **{name: plain}).key()
    assert getattr(config, name) == plain and type(getattr(config, name)) is type(plain)
    assert json.loads(json.dumps(config.to_dict()))[name] == plain


@pytest.mark.parametrize("method, options, plain", [
    ("fedprox", {"mu": np.float32(0.25)}, {"mu": 0.25}),
    ("fedprox", {"mu": Fraction(1, 8)}, {"mu": 0.125}),
    ("heterofl", {"widths": [np.float32(1.0), np.float64(0.5)]}, {"widths": [1.0, 0.5]}),
    ("heterofl", {"widths": np.array([1.0, 0.5])}, {"widths": [1.0, 0.5]}),
    ("heterofl", {"max_width": np.int64(4)}, {"max_width": 4})])
def test_numpy_values_in_options_become_plain_python(method, options, plain):
    config = RunConfig(method=method, dataset="digits", options=options).validate()
    assert json.dumps(config.options, sort_keys=True) == json.dumps(plain, sort_keys=True)
    stored = json.loads(json.dumps(config.options))
    assert all(type(a) is type(b) for a, b in zip(stored.values(), plain.values()))


@pytest.mark.parametrize("changes, named", [
    (dict(lr=Fraction(1, 3)), "lr"), (dict(method="fedprox", options={"mu": Fraction(1, 3)}), "mu"),
    (dict(method="fedprox", options={"mu": {1, 2}}), "mu")])
def test_a_value_a_float_would_round_or_json_cannot_hold_is_refused(changes, named):
    with pytest.raises(ConfigError, match=named) as err:
        RunConfig(dataset="digits", **changes).validate()
    assert "\n" not in str(err.value)
