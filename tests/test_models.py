import math

import pytest
import torch

from hetfl_core.science import models
from hetfl_core.science.errors import ConfigError


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


@pytest.mark.parametrize("map_size", [5, 7])
def test_a_whole_map_convolution_equals_the_convolution(map_size):
    torch.manual_seed(0)
    layer, x = models.WholeMapConv2d(16, 120, 5), torch.randn(8, 16, map_size, map_size)
    expected = torch.nn.functional.conv2d(x, layer.weight, layer.bias)
    torch.testing.assert_close(layer(x), expected, rtol=0, atol=1e-5)
    assert layer(x).shape == expected.shape


def test_lenet5_third_layer_keeps_its_weights_and_cost():
    from hetfl_core.science.system import profile_model

    model = models.build_model("lenet5", (1, 28, 28), 10)
    assert model.state_dict()["conv3.weight"].shape == (120, 16, 5, 5)
    conv3 = next(c for c in profile_model(model, (1, 28, 28)) if c.name == "conv3")
    assert (conv3.kind, conv3.macs, conv3.params) == ("conv", 120 * 16 * 25, 120 * 16 * 25 + 120)


@pytest.mark.parametrize("shape", [(500, 10, 24, 24), (20, 6, 28, 28), (7, 3, 5, 7), (4, 16, 3, 2)])
def test_the_evaluation_pooling_is_max_pool2d_bit_for_bit(shape):
    """Exact ties (many zeros after a ReLU, repeated values) and a NaN, odd sizes: the
    channels-last pooling of an evaluation gives max_pool2d's numbers, in its layout."""
    torch.manual_seed(0)
    x = (torch.randn(*shape) * 3).round().relu() / 3
    x[0, 0, 0, 0] = math.nan
    with torch.no_grad():
        fast, plain = models.max_pool_2x2(x), torch.nn.functional.max_pool2d(x, 2)
    assert fast.is_contiguous() and fast.shape == plain.shape
    assert torch.equal(fast.nan_to_num(-7.0), plain.nan_to_num(-7.0))
    assert fast[0, 0, 0, 0].isnan() == plain[0, 0, 0, 0].isnan()


def test_the_pooling_keeps_max_pool2d_under_autograd_and_vmap():
    """A small map under autograd and torch.func.vmap take max_pool2d itself: the same
    output and gradient, and no memory-format query that vmap refuses."""
    torch.manual_seed(1)
    x = (torch.randn(6, 4, 8, 8) * 2).round().relu().requires_grad_()
    y = models.max_pool_2x2(x)
    y.sum().backward()
    x2 = x.detach().clone().requires_grad_()
    torch.nn.functional.max_pool2d(x2, 2).sum().backward()
    assert torch.equal(y, torch.nn.functional.max_pool2d(x.detach(), 2))
    assert torch.equal(x.grad, x2.grad)
    stacked = torch.randn(3, 5, 4, 8, 8)
    with torch.no_grad():
        batched = torch.func.vmap(models.max_pool_2x2)(stacked)
    assert torch.equal(batched, torch.nn.functional.max_pool2d(stacked.flatten(0, 1), 2).view(3, 5, 4, 4, 4))


@pytest.mark.parametrize("shape", [(32, 32, 24, 24), (24, 16, 15, 13), (20, 64, 8, 8)])
def test_the_training_pooling_is_max_pool2d_bit_for_bit(shape):
    """Under autograd, a map of 65,536 elements or more is pooled channels-last: the same
    output, the same gradient (ties, a NaN and odd sizes included) as max_pool2d."""
    torch.manual_seed(3)
    x = (torch.randn(*shape) * 3).round().relu() / 3
    x[0, 0, 0, 0] = math.nan
    x[-1, -1, :2, :2] = 1.0                     # a window of four equal maxima
    fast_in, plain_in = x.clone().requires_grad_(), x.clone().requires_grad_()
    fast, plain = models.max_pool_2x2(fast_in), torch.nn.functional.max_pool2d(plain_in, 2)
    assert x.numel() >= models._FAST_POOL_MIN_ELEMENTS and fast.grad_fn is not None
    assert "ChannelsLast" in type(fast.grad_fn).__name__ and fast.is_contiguous()
    assert torch.equal(fast.nan_to_num(-7.0), plain.nan_to_num(-7.0))
    grad = torch.randn(fast.shape, generator=torch.Generator().manual_seed(4))
    fast.backward(grad)
    plain.backward(grad)
    assert torch.equal(fast_in.grad, plain_in.grad)


def test_every_pooling_model_trains_as_before(monkeypatch):
    """Three SGD steps of each pooling model reach the same weights, bit for bit, with
    max_pool2d in place of the pooling."""
    def trained():
        torch.manual_seed(5)
        x, y = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
        out = {}
        for name in ("lenet5", "cnn", "wcnn", "pcnn"):
            model = models.build_model(name, (1, 28, 28), 10)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(3):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
            out[name] = [p.detach().clone() for p in model.parameters()]
        return out
    fast = trained()
    monkeypatch.setattr(models, "max_pool_2x2", lambda t: torch.nn.functional.max_pool2d(t, 2))
    plain = trained()
    for name in fast:
        assert all(torch.equal(a, b) for a, b in zip(fast[name], plain[name])), name


def test_every_pooling_model_evaluates_as_before(monkeypatch):
    """The models that pool (LeNet-5, the CNN, the width CNNs) give, without autograd, the
    logits they give with max_pool2d in place of the evaluation pooling."""
    torch.manual_seed(2)
    x = torch.randn(64, 1, 28, 28)
    built = {name: models.build_model(name, (1, 28, 28), 10).eval()
             for name in ("lenet5", "cnn", "wcnn", "pcnn")}
    with torch.no_grad():
        fast = {name: model(x) for name, model in built.items()}
        monkeypatch.setattr(models, "max_pool_2x2", lambda t: torch.nn.functional.max_pool2d(t, 2))
        plain = {name: model(x) for name, model in built.items()}
    for name in built:
        assert torch.equal(fast[name], plain[name]), name
