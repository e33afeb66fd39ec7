import pytest
import torch

from hetfl_core.science import masks
from hetfl_core.science.errors import ConfigError
from hetfl_core.science.models import build_model


def test_global_magnitude_mask_keeps_the_largest_overall():
    weights = {"a.weight": torch.tensor([[1.0, -9.0], [0.5, 3.0]]), "b.weight": torch.tensor([[2.0, -0.1]])}
    m = masks.magnitude_mask(weights, 0.5, "global")
    assert m["a.weight"].tolist() == [[0, 1], [0, 1]] and m["b.weight"].tolist() == [[1, 0]]
    assert masks.mask_density(m) == 0.5


def test_layer_magnitude_mask_hits_density_in_every_layer():
    torch.manual_seed(0)
    weights = {"a.weight": torch.randn(20, 10), "b.weight": torch.randn(5, 20) * 100}
    m = masks.magnitude_mask(weights, 0.3, "layer")
    assert {n: float(v.mean()) for n, v in m.items()} == pytest.approx({"a.weight": 0.3, "b.weight": 0.3})
    g = masks.magnitude_mask(weights, 0.3, "global")
    # global pruning spends the budget on the large-magnitude layer
    assert float(g["b.weight"].mean()) > 0.85 and float(g["a.weight"].mean()) < 0.05
    assert masks.layer_densities(m) == pytest.approx({"a": 0.3, "b": 0.3})
    with pytest.raises(ConfigError):
        masks.magnitude_mask(weights, 0.0)


def test_unit_patterns():
    model = build_model("cnn", (1, 8, 8), 10)
    ordered = masks.ordered_units(model, 0.5)
    assert ordered["conv1"].tolist() == [True] * 5 + [False] * 5
    rand = masks.random_units(model, 0.5, torch.Generator().manual_seed(0))
    assert all(int(v.sum()) == int(ordered[k].sum()) for k, v in rand.items())
    assert any(not torch.equal(rand[k], ordered[k]) for k in rand)
    params = masks.unit_masks_to_parameters(model, ordered)
    assert params["conv1.weight"].shape == model.conv1.weight.shape
    assert float(params["conv1.weight"][5:].abs().sum()) == 0 and float(params["conv1.bias"][:5].sum()) == 5
    assert masks.kept_fractions_of_units(ordered)["conv1"] == 0.5
