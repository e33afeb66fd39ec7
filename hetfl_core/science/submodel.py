"""Width sub-models: cut a narrower model out of the global one, and put it back.

HeteroFL, FedRolex and FjORD give a client of width w in (0, 1] the sub-network that keeps
ceil(w * n_l) of the n_l output units of every hidden layer l: the first ones (HeteroFL,
FjORD's ordered dropout) or a rolling window (FedRolex). A sub-model's state dict loads into
``build_model(name, ..., width=w)``; :func:`embed` is the exact inverse of :func:`extract` on
the kept entries. Supported: the chain models ``SUPPORTED_MODELS`` (each layer reads the
previous unit layer's output, flattened where a conv feeds a linear layer).
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from .models import kept_units, structured_units

__all__ = ["SUPPORTED_MODELS", "first_units", "rolling_units", "layer_indices", "extract",
           "embed", "kept_fractions_of_indices", "hidden_units", "hidden_output_hook"]

SUPPORTED_MODELS = ("mlp", "lenet5", "cnn", "wcnn", "pcnn")


def first_units(n_units: int, width: float) -> torch.Tensor:
    """HeteroFL / FjORD: the first ceil(w n) units."""
    return torch.arange(kept_units(n_units, width))


def rolling_units(n_units: int, width: float, offset: int) -> torch.Tensor:
    """FedRolex: a window of ceil(w n) units starting at ``offset`` (mod n), kept in ascending order."""
    k = kept_units(n_units, width)
    return torch.sort((torch.arange(k) + offset) % n_units).values


def layer_indices(model: nn.Module, width: float, rule=first_units) -> dict[str, torch.Tensor]:
    """Kept output units of every hidden unit layer, by ``rule(n_units, width)``."""
    return {name: rule(n, width) for name, _, n in structured_units(model)}


def _slices(model: nn.Module, indices: dict):
    """For every parameter: (output index or None, input index or None)."""
    out, previous = {}, None      # previous: the feeding layer's (kept units, number of units)
    for name, layer, units in structured_units(model, include_output=True):
        rows, cols = indices.get(name), None
        if previous is not None:
            kept, n = previous
            fan_in = layer.in_features if isinstance(layer, nn.Linear) else layer.in_channels
            per_unit = fan_in // n  # > 1 where a conv's channels are flattened into a linear layer
            cols = (kept[:, None] * per_unit + torch.arange(per_unit)[None, :]).reshape(-1)
        out[f"{name}.weight"] = (rows, cols)
        if getattr(layer, "bias", None) is not None:
            out[f"{name}.bias"] = (rows, None)
        previous = (rows, units)
    return out


def extract(model: nn.Module, state: dict, indices: dict) -> dict:
    """The sub-model's state dict: rows by each layer's kept units, columns by its input's."""
    result = {}
    for name, (rows, cols) in _slices(model, indices).items():
        t = state[name]
        if rows is not None:
            t = t.index_select(0, rows.to(t.device))      # unit indices live on the CPU
        if cols is not None:
            t = t.index_select(1, cols.to(t.device))
        result[name] = t.clone()
    return result


def embed(model: nn.Module, sub_state: dict, indices: dict, like: dict | None = None) -> tuple[dict, dict]:
    """Write a sub-model back into global shapes.

    Returns ``(values, held)``: ``values`` holds the sub-model's entries at their global
    positions (``like``'s values, or zeros, elsewhere), ``held`` is 1 where the sub-model
    has an entry and 0 elsewhere.
    """
    values, held = {}, {}
    params = dict(model.named_parameters())
    for name, (rows, cols) in _slices(model, indices).items():
        full = (like[name].clone() if like is not None else torch.zeros_like(params[name])).detach()
        mask = torch.zeros_like(full)
        at = (rows if rows is not None else torch.arange(full.shape[0])).to(full.device)
        if full.dim() > 1:
            c = (cols if cols is not None else torch.arange(full.shape[1])).to(full.device)
            at = (at[:, None], c[None, :])
        full[at] = sub_state[name]
        mask[at] = 1
        values[name], held[name] = full, mask
    return values, held


def kept_fractions_of_indices(model: nn.Module, indices: dict) -> dict[str, float]:
    """Fraction of units kept per layer, as ``system.training_flops(keep=...)`` takes it."""
    units = hidden_units(model)
    return {name: len(idx) / units[name] for name, idx in indices.items()}


def hidden_units(model: nn.Module) -> dict[str, int]:
    """Every hidden unit layer's name and number of output units, in forward order."""
    return {name: n for name, _, n in structured_units(model)}


@contextmanager
def hidden_output_hook(model: nn.Module, transform):
    """While in the context, every hidden unit layer's output ``out`` (units on dim 1) is
    replaced by ``transform(name, module, out)``: HeteroFL's Scaler divides it by the width
    while training, FjORD's ordered dropout zeroes the units past the sampled width."""
    handles = [module.register_forward_hook(
        lambda mod, _inputs, out, name=name: transform(name, mod, out))
        for name, module, _ in structured_units(model)]
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()
