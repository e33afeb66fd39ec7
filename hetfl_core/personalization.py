"""Splitting a model into a shared part and a private part, and keeping private state.

The decoupled personalised methods differ only in which part is shared:

* FedPer, FedRep, FedBABU share the **body** (feature extractor) and keep the **head**
  (the last ``head_layers`` unit layers, by default the classifier) on the client;
* LG-FedAvg shares the head and keeps the body.

Parts are given by parameter names, so the same code serves every model in
:mod:`hetfl_core.models`.
"""
from __future__ import annotations

import torch
from torch import nn

from .errors import ConfigError
from .models import structured_units

__all__ = ["head_layer_names", "head_parameter_names", "body_parameter_names", "layer_of",
           "PrivateStore"]


def layer_of(parameter_name: str) -> str:
    """The module that owns a parameter: ``"fc1.weight"`` -> ``"fc1"``."""
    return parameter_name.rsplit(".", 1)[0]


def head_layer_names(model: nn.Module, head_layers: int = 1) -> list[str]:
    """Names of the last ``head_layers`` unit layers (conv, linear, LSTM), output layer included."""
    units = structured_units(model, include_output=True)
    if not 1 <= head_layers < len(units):
        raise ConfigError(f"head_layers must be in 1..{len(units) - 1} for this model, got {head_layers}")
    return [name for name, _, _ in units[-head_layers:]]


def head_parameter_names(model: nn.Module, head_layers: int = 1) -> list[str]:
    """Parameter names of the head."""
    layers = set(head_layer_names(model, head_layers))
    return [n for n, _ in model.named_parameters() if layer_of(n) in layers]


def body_parameter_names(model: nn.Module, head_layers: int = 1) -> list[str]:
    """Parameter names of everything but the head."""
    head = set(head_parameter_names(model, head_layers))
    return [n for n, _ in model.named_parameters() if n not in head]


class PrivateStore:
    """Each client's private tensors (a head, a body, a mask), kept between rounds."""

    def __init__(self):
        self._states: dict[int, dict[str, torch.Tensor]] = {}

    def __contains__(self, client_id: int) -> bool:
        return client_id in self._states

    def save(self, client_id: int, model: nn.Module, names) -> None:
        """Keep copies of ``model``'s parameters ``names`` for ``client_id``."""
        params = dict(model.named_parameters())
        self._states[client_id] = {n: params[n].detach().clone() for n in names}

    def load_into(self, client_id: int, model: nn.Module) -> nn.Module:
        """Write the client's private tensors into ``model`` (no-op for a new client)."""
        if client_id in self._states:
            params = dict(model.named_parameters())
            with torch.no_grad():
                for n, value in self._states[client_id].items():
                    params[n].copy_(value)
        return model
