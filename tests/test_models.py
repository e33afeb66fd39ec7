import math

import pytest
import torch

from hetfl_core import models
from hetfl_core.errors import ConfigError


def test_lenet5_parameter_counts_match_the_papers():
    assert models.count_parameters(models.build_model("lenet5", (1, 28, 28), 10)) == 61_706
    assert models.count_parameters(models.build_model("lenet5", (3, 32, 32), 10)) == 62_006


def test_mlp_parameter_count_matches_formula():
    model = models.build_model("mlp", (1, 28, 28), 10)
    assert models.count_parameters(model) == 784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10


@pytest.mark.parametrize("name,shape", [("mlp", (1, 28, 28)), ("lenet5", (1, 28, 28)), ("cnn", (1, 28, 28)),
                                        ("cnn", (1, 8, 8)), ("wcnn", (1, 28, 28)), ("resnet", (3, 32, 32))])
@pytest.mark.parametrize("width", [1.0, 0.5])
def test_models_run_at_every_width(name, shape, width):
    model = models.build_model(name, shape, 10, width=width)
    assert model(torch.randn(3, *shape)).shape == (3, 10)


def test_width_scales_hidden_units():
    full = models.structured_units(models.build_model("wcnn", (1, 28, 28), 10))
    half = models.structured_units(models.build_model("wcnn", (1, 28, 28), 10, width=0.5))
    assert [n for *_, n in half] == [math.ceil(n / 2) for *_, n in full]


def test_char_lstm_predicts_next_character():
    model = models.build_model("charlstm", (40,), 80)
    assert model(torch.randint(0, 80, (2, 40))).shape == (2, 80)


def test_structured_units_skip_the_output_layer():
    model = models.build_model("lenet5", (1, 28, 28), 10)
    units = models.structured_units(model)
    assert [(name, n) for name, _, n in units] == [("conv1", 6), ("conv2", 16), ("conv3", 120), ("fc1", 84)]
    assert models.structured_units(model, include_output=True)[-1][2] == 10


def test_bad_model_arguments():
    with pytest.raises(ConfigError, match="unknown model"):
        models.build_model("vgg99", (1, 28, 28), 10)
    with pytest.raises(ConfigError, match="width"):
        models.build_model("cnn", (1, 28, 28), 10, width=1.5)
