"""Mask rules shared by the pruning and sparse-pattern methods: unstructured masks of the
weights (matrices and kernels; biases stay dense) and structured masks of the output units
of every hidden layer, turned into ``{parameter name: 0/1 tensor}`` masks so that
``training.local_sgd(masks=...)`` keeps masked weights at zero.
"""
from __future__ import annotations

import math
from copy import deepcopy

import torch
from torch import nn

from .errors import ConfigError
from .models import kept_units, structured_units

__all__ = ["prunable", "magnitude_mask", "mask_density", "layer_densities", "ordered_units", "random_units",
           "unit_masks_to_parameters", "kept_fractions_of_units", "apply_mask", "masked_copy", "unit_magnitudes",
           "top_units", "magnitude_units", "ScoredNetwork", "pattern_string"]


def prunable(model: nn.Module) -> list[str]:
    """Names of the parameters magnitude pruning may zero (weights with 2+ dimensions)."""
    return [n for n, p in model.named_parameters() if p.dim() > 1]


def _check_density(density: float) -> None:
    if not 0 < density <= 1:
        raise ConfigError(f"density must be in (0, 1], got {density}")


def _kth_largest(flat: torch.Tensor, density: float) -> torch.Tensor:
    """The ceil(density n)-th largest of the n values ``flat`` (at least the largest)."""
    k = max(1, math.ceil(density * flat.numel()))
    return flat.kthvalue(flat.numel() - k + 1).values


def magnitude_mask(weights: dict[str, torch.Tensor], density: float, scope: str = "global") -> dict[str, torch.Tensor]:
    """Keep the ceil(density * size) largest |w|: over all tensors (``"global"``) or in each (``"layer"``)."""
    _check_density(density)
    if scope == "layer":
        return {name: (w.abs() >= _kth_largest(w.abs().flatten(), density)).float() for name, w in weights.items()}
    if scope != "global":
        raise ConfigError(f"scope must be 'global' or 'layer', got {scope!r}")
    threshold = _kth_largest(torch.cat([w.abs().flatten() for w in weights.values()]), density)
    return {name: (w.abs() >= threshold).float() for name, w in weights.items()}


def mask_density(masks: dict[str, torch.Tensor]) -> float:
    """Fraction of entries kept over all masks."""
    return float(sum(m.sum() for m in masks.values()) / sum(m.numel() for m in masks.values()))


def layer_densities(masks: dict[str, torch.Tensor]) -> dict[str, float]:
    """Per-layer density keyed by layer (module) name, as ``system.training_flops(density=...)`` takes it."""
    return {name.rsplit(".", 1)[0]: float(m.mean()) for name, m in masks.items() if m.dim() > 1}


def _unit_pattern(model: nn.Module, ratio: float, order) -> dict[str, torch.Tensor]:
    """Per hidden layer of n units, the first ceil(ratio n) units of ``order(n)`` (bool per unit)."""
    _check_density(ratio)
    out = {}
    for name, _, n in structured_units(model):
        out[name] = torch.zeros(n, dtype=torch.bool)
        out[name][order(n)[:kept_units(n, ratio)]] = True
    return out


def ordered_units(model: nn.Module, ratio: float) -> dict[str, torch.Tensor]:
    """Ordered pattern: the first ceil(ratio n) units of every hidden layer (bool per unit)."""
    return _unit_pattern(model, ratio, torch.arange)


def random_units(model: nn.Module, ratio: float, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random pattern: ceil(ratio n) units of every hidden layer drawn without replacement."""
    return _unit_pattern(model, ratio, lambda n: torch.randperm(n, generator=generator))


def unit_masks_to_parameters(model: nn.Module, units: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Parameter masks that zero every dropped unit's weights (its output row) and bias."""
    params = dict(model.named_parameters())
    masks = {}
    for layer, keep in units.items():
        for name in (f"{layer}.weight", f"{layer}.bias"):
            if name in params:
                p = params[name]
                shape = (-1,) + (1,) * (p.dim() - 1)
                masks[name] = keep.to(p.device).float().reshape(shape).expand_as(p).clone()
    return masks


def apply_mask(model: nn.Module, masks: dict[str, torch.Tensor]) -> None:
    """theta <- m (.) theta on the masked parameters, in place (every masked method's step)."""
    with torch.no_grad():
        params = dict(model.named_parameters())
        for name, m in masks.items():
            params[name].mul_(m)


def masked_copy(model: nn.Module, masks: dict[str, torch.Tensor]) -> nn.Module:
    """A copy of ``model`` with ``masks`` applied (the original is untouched)."""
    copy = deepcopy(model)
    apply_mask(copy, masks)
    return copy


def kept_fractions_of_units(units: dict[str, torch.Tensor]) -> dict[str, float]:
    """Fraction of units kept per layer, as ``system.training_flops(keep=...)`` takes it."""
    return {layer: float(keep.float().mean()) for layer, keep in units.items()}


def unit_magnitudes(model: nn.Module) -> dict[str, torch.Tensor]:
    """|w|_J: per hidden unit, the sum of |w| over its weights (row or filter) and bias (FedLPS, Eq. 8)."""
    params = dict(model.named_parameters())
    out = {}
    for name, _, n in structured_units(model):
        total = params[f"{name}.weight"].detach().abs().reshape(n, -1).sum(1)
        if f"{name}.bias" in params:
            total = total + params[f"{name}.bias"].detach().abs()
        out[name] = total
    return out


def _top_count(n_units: int, ratio: float) -> int:
    """k = max(1, floor(ratio n)), the units FedLPS's Eq. (4) keeps of a layer of n."""
    return max(1, math.floor(ratio * n_units + 1e-9))


def _ranked_below(q: torch.Tensor, k) -> torch.Tensor:
    """The units ranked below ``k`` by descending score (stable: ties to the lower index)."""
    return torch.argsort(torch.sort(q.detach(), descending=True, stable=True).indices) < k


def top_units(scores: dict[str, torch.Tensor], ratio: float) -> dict[str, torch.Tensor]:
    """Per layer, the max(1, floor(ratio n)) units of largest score, ties to the lower index (FedLPS, Eq. 4)."""
    _check_density(ratio)
    return {name: _ranked_below(q, _top_count(q.numel(), ratio)) for name, q in scores.items()}


def magnitude_units(model: nn.Module, ratio: float) -> dict[str, torch.Tensor]:
    """Magnitude pattern: the units of largest |w|_J in every hidden layer."""
    return top_units(unit_magnitudes(model), ratio)


def pattern_string(keep: dict[str, torch.Tensor]) -> str:
    """A unit pattern as a '0'/'1' string over all hidden units in forward order (for the history)."""
    return "".join("1" if v else "0" for mask in keep.values() for v in mask.tolist())


def _key(layer: str) -> str:
    return layer.replace(".", "__")


def _expand(mask: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """A per-unit mask shaped to multiply the next layer's input (channels, or flattened features)."""
    if x.dim() == 4:
        return mask.view(1, -1, 1, 1)
    return mask.repeat_interleave(x.shape[-1] // mask.numel())


class ScoredNetwork(nn.Module):
    """``net`` with the units of its hidden layers switched by per-unit scores (Eqs. 4-6).

    ``mode="learned"``: the scores are parameters, and the mask is the straight-through
    P + sigma(Q) - stopgrad(sigma(Q)); ``"fixed"``: the scores are constants;
    ``"magnitude"``: the scores are |w|_J of the current weights. The mask of unit j of
    layer l multiplies the input of the layer that reads layer l (after the activation and
    pooling), so ``consumers`` maps each hidden layer to the layer it feeds.
    """

    def __init__(self, net: nn.Module, scores: dict, ratio: float, consumers: dict, mode: str = "learned",
                 q_grad: str = "all"):
        super().__init__()
        self.net, self.ratio, self.mode, self.q_grad = net, ratio, mode, q_grad
        self.layers = list(scores)
        device = next(net.parameters()).device     # scores drawn on the CPU act on the net's device
        self.scores = nn.ParameterDict({_key(n): nn.Parameter(q.detach().clone().float().to(device),
                                                              requires_grad=mode == "learned")
                                        for n, q in scores.items()})
        # k_l = max(1, floor(s J_l)) per layer, held as a constant tensor so that networks of
        # different ratios can run side by side (hetfl_core.runtime.batched stacks them)
        _check_density(ratio)
        kept = {_key(n): float(_top_count(q.numel(), ratio)) for n, q in scores.items()}
        self.kept = nn.ParameterDict({key: nn.Parameter(torch.tensor(k, device=device), requires_grad=False)
                                      for key, k in kept.items()})
        self.current: dict[str, torch.Tensor] = {}
        modules = dict(net.named_modules())
        for layer, consumer in consumers.items():
            modules[consumer].register_forward_pre_hook(
                lambda _module, inputs, layer=layer: (inputs[0] * _expand(self.current[layer], inputs[0]),
                                                      *inputs[1:]))

    def score_values(self) -> dict[str, torch.Tensor]:
        """Each pruned layer's unit scores: the weights' magnitudes, or the learned scores."""
        if self.mode == "magnitude":
            return unit_magnitudes(self.net)
        return {n: self.scores[_key(n)] for n in self.layers}

    def pattern(self) -> dict[str, torch.Tensor]:
        """Eq. (4): P_l = the top k_l units of layer l by score, as :func:`top_units`."""
        return {name: _ranked_below(q, self.kept[_key(name)]) for name, q in self.score_values().items()}

    def forward(self, x):
        keep = self.pattern()
        for n in self.layers:
            p = keep[n].float()
            if self.mode == "learned":
                sig = torch.sigmoid(self.scores[_key(n)])
                through = sig - sig.detach()   # value 0, gradient sigma'(q)
                p = p + (through * p if self.q_grad == "kept" else through)
            self.current[n] = p
        return self.net(x)

    def importance_loss(self) -> torch.Tensor:
        """Eq. (8), read with Q: sum over layers of ||Q_l - sigma(|omega|_J)||^2, |omega|_J detached."""
        target = unit_magnitudes(self.net)
        return sum(((self.scores[_key(n)] - torch.sigmoid(target[n])) ** 2).sum() for n in self.layers)
