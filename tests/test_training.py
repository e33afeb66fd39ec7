"""Evaluation in parts (:func:`hetfl_core.science.training.forward_in_parts`): the same logits, hence
the same accuracy and the same summed loss, as one forward pass over a batch."""
import pytest
import torch
from torch import nn

from hetfl_core.science import models, training
from hetfl_core.science.transformer import LoRATransformer, _weight_shapes


def inputs(name: str, rows: int) -> tuple[nn.Module, torch.Tensor]:
    """A freshly drawn registered model ``name`` and ``rows`` inputs of the kind it reads."""
    generator = torch.Generator().manual_seed(7)
    if name in ("charlstm", "charlstm-s"):
        return models.build_model(name, (40,), 80), torch.randint(0, 80, (rows, 40), generator=generator)
    if name == "embbag":
        return models.build_model(name, (30,), 4), torch.randint(0, 500, (rows, 30), generator=generator)
    if name == "lora-transformer":     # a drawn encoder in place of the pre-trained one
        seq_len, vocab = 21, 60
        torch.manual_seed(3)
        backbone = {k: torch.randn(shape) * 0.1
                    for k, shape in _weight_shapes(vocab, seq_len, 32, 2, 2, 128).items()}
        ids = torch.randint(4, vocab, (rows, seq_len), generator=generator)
        return LoRATransformer((seq_len,), 2, backbone=backbone), ids
    shape = (3, 32, 32) if name == "resnet" else (1, 28, 28)
    return models.build_model(name, shape, 10), torch.randn((rows, *shape), generator=generator)


@pytest.mark.parametrize("name", list(models.MODELS))
def test_parts_give_one_pass_logits_for_every_registered_model(name, monkeypatch):
    torch.manual_seed(0)
    model, x = inputs(name, 1100)
    model.eval()
    with torch.no_grad():
        whole, parts = model(x), training.forward_in_parts(model, x, rows=500)
    assert torch.equal(whole, parts)
    y = torch.randint(0, whole.shape[1], (len(x),), generator=torch.Generator().manual_seed(1))
    in_parts = training.evaluate(model, x, y)
    monkeypatch.setattr(training, "FORWARD_ROWS", len(x))      # one pass a batch
    assert in_parts == training.evaluate(model, x, y)


def test_a_batch_statistics_norm_is_never_split():
    """HeteroFL's static batch norm scores a sample with its batch's statistics: splitting
    the batch would change the logits, so it is evaluated in one pass."""
    model = models.build_model("resnet", (3, 32, 32), 10).eval()
    assert training.batch_dependent(model)
    assert not training.batch_dependent(models.build_model("cnn", (1, 28, 28), 10).eval())
    x = torch.randn(700, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        split = torch.cat([model(x[:500]), model(x[500:])])
        assert not torch.equal(model(x), split)          # the reason it is not split
        assert torch.equal(training.forward_in_parts(model, x, rows=500), model(x))


def _module_states(model: nn.Module) -> list:
    """Each module's class and attributes (tensors by value), in module order."""
    def plain(value):
        if isinstance(value, torch.Tensor):
            return (type(value).__name__, value.dtype, tuple(value.shape), value.requires_grad,
                    value.detach().flatten().tolist())
        if isinstance(value, dict):
            return type(value).__name__, {k: plain(v) for k, v in value.items()}
        if isinstance(value, nn.Module):
            return type(value).__name__
        return value if isinstance(value, (bool, int, float, str, type(None), tuple, set)) else type(value).__name__
    return [(type(m).__name__, sorted(m.__dict__), {k: plain(v) for k, v in m.__dict__.items()})
            for m in model.modules()]


@pytest.mark.parametrize("name", list(models.MODELS))
def test_clone_model_equals_a_deep_copy_for_every_registered_model(name):
    """The fast copy gives what ``copy.deepcopy`` gives: the same modules, attributes, flags
    and parameter values, in tensors of its own."""
    import copy

    torch.manual_seed(0)
    model, x = inputs(name, 8)
    first = next(model.parameters())
    first.requires_grad_(False)               # a frozen parameter stays frozen
    model.eval()
    fast, deep = training.clone_model(model), copy.deepcopy(model)
    assert _module_states(fast) == _module_states(deep) == _module_states(model)
    for mine, theirs in zip(fast.parameters(), model.parameters()):
        assert type(mine) is type(theirs) and mine.data_ptr() != theirs.data_ptr()
    with torch.no_grad():
        assert torch.equal(fast(x), deep(x))
        next(fast.parameters()).add_(1.0)     # the copy owns its parameters
    assert torch.equal(next(model.parameters()), next(deep.parameters()))


def test_clone_model_keeps_ties_hooks_and_a_module_s_own_copy_hook():
    calls = []

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(3, 3)
            self.b = nn.Linear(3, 3)
            self.b.weight = self.a.weight       # one parameter, two modules
            self.alias = self.a                 # one module, two names

        def forward(self, x):
            return self.b(self.a(x))

    class OwnCopy(nn.Linear):
        def __deepcopy__(self, memo):
            calls.append(1)
            return nn.Linear(self.in_features, self.out_features)

    model = Tied()
    model.register_forward_hook(lambda module, args, out: out * 2)
    model.extra = OwnCopy(3, 3)
    clone = training.clone_model(model)
    assert clone.b.weight is clone.a.weight and clone.alias is clone.a
    assert clone.a.weight is not model.a.weight
    x = torch.randn(2, 3)
    assert torch.equal(clone(x), model(x))    # the hook came along
    assert calls == [1]                        # the module's own __deepcopy__ was used
