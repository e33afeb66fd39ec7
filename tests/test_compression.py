import math

import pytest
import torch

from hetfl_core.science.compression import ErrorFeedback, flatten, top_k, unflatten
from hetfl_core.science.errors import ConfigError


def test_top_k_keeps_exactly_the_largest():
    v = torch.tensor([0.1, -5.0, 0.3, 2.0, -0.2, 0.0, 4.0, 1.0])
    sparse, k = top_k(v, 0.25)
    assert k == 2 and int((sparse != 0).sum()) == 2
    assert torch.equal(sparse, torch.tensor([0, -5.0, 0, 0, 0, 0, 4.0, 0]))
    assert top_k(v, 0.3)[1] == math.ceil(0.3 * 8)
    with pytest.raises(ConfigError):
        top_k(v, 0.0)


def test_error_feedback_carries_the_unsent_mass():
    memory = ErrorFeedback()
    g = torch.Generator().manual_seed(0)
    previous = torch.zeros(50)
    for _ in range(4):
        update = torch.randn(50, generator=g)
        sent, k = memory.compress(3, update, 0.1)
        assert k == 5 and int((sent != 0).sum()) == 5
        assert torch.allclose(sent + memory.clients[3], update + previous)
        previous = memory.clients[3].clone()


def test_flatten_round_trip():
    tensors = {"a": torch.randn(2, 3), "b": torch.randn(4)}
    back = unflatten(flatten(tensors), tensors)
    assert all(torch.equal(back[k], tensors[k]) for k in tensors)
