"""Splitting a model into a shared part and a private part (as parameter names, for every
model in :mod:`hetfl_core.science.models`), and keeping private state. FedPer, FedRep and FedBABU
share the **body** and keep the **head** (the last ``head_layers`` unit layers, by default
the classifier) on the client; LG-FedAvg shares the head and keeps the body.
"""
from __future__ import annotations

import torch
from torch import nn

from .errors import ConfigError
from .models import structured_units

__all__ = ["head_parameter_names", "body_parameter_names", "layer_of",
           "PrivateStore", "copy_parameters", "load_parameters", "split_layers", "split_parameter_names", "paper_split"]


def layer_of(parameter_name: str) -> str:
    """The module that owns a parameter: ``"fc1.weight"`` -> ``"fc1"``."""
    return parameter_name.rsplit(".", 1)[0]


def head_parameter_names(model: nn.Module, head_layers: int = 1) -> list[str]:
    """Parameter names of the head: the last ``head_layers`` unit layers (conv, linear,
    LSTM), output layer included."""
    units = len(structured_units(model, include_output=True))
    if not 1 <= head_layers < units:
        raise ConfigError(f"head_layers must be in 1..{units - 1} for this model, got {head_layers}")
    return split_parameter_names(model, f"last:{head_layers}")


def body_parameter_names(model: nn.Module, head_layers: int = 1) -> list[str]:
    """Parameter names of everything but the head."""
    head = set(head_parameter_names(model, head_layers))
    return [n for n, _ in model.named_parameters() if n not in head]


class PrivateStore:
    """Each client's private tensors (a head, a body, a mask), kept between rounds
    (``clients``: client id -> its tensors by parameter name)."""

    def __init__(self):
        self.clients: dict[int, dict[str, torch.Tensor]] = {}

    def __contains__(self, client_id: int) -> bool:
        return client_id in self.clients

    def save(self, client_id: int, model: nn.Module, names) -> None:
        """Keep copies of ``model``'s parameters ``names`` for ``client_id``."""
        self.clients[client_id] = copy_parameters(model, names)

    def load_into(self, client_id: int, model: nn.Module) -> nn.Module:
        """Write the client's private tensors into ``model`` (no-op for a new client)."""
        return load_parameters(model, self.clients.get(client_id))


def copy_parameters(model: nn.Module, names) -> dict[str, torch.Tensor]:
    """Copies of ``model``'s parameters ``names``, by name (a client's private part)."""
    params = dict(model.named_parameters())
    return {n: params[n].detach().clone() for n in names}


def load_parameters(model: nn.Module, tensors: dict | None) -> nn.Module:
    """``model`` with ``tensors`` (name -> tensor) written into its parameters (``None``:
    unchanged, a client not yet visited)."""
    if tensors:
        params = dict(model.named_parameters())
        with torch.no_grad():
            for n, value in tensors.items():
                params[n].copy_(value)
    return model


def split_layers(model: nn.Module, split: str) -> list[str]:
    """The layers of the shared base for a ``split`` name (Table III's LeNet-5 splits).

    ``"conv"``: every conv layer (the paper's choice: conv1-3 of LeNet-5, 82.15% of the
    weights); ``"fc"``: every linear layer (LG-FedAvg); ``"all"``: every layer (FedAvg);
    ``"first:N"``: the first N layers in forward order (Table III: 1, 2, 3, 4);
    ``"last:N"``: the last N layers (LG-FedAvg's shared head on any model: ``last:1`` for
    the LoRA transformer, whose first four "layers" are layer 0's adapters);
    ``"last-block"``: everything but a ResNet's last residual block, pooling and classifier
    (Tan et al. 2025's ResNet-18 split, Sec. V): whole blocks, their batch-norm layers included.
    """
    owners = [name for name, module in model.named_modules() if any(True for _ in module.parameters(recurse=False))]
    if split == "all":          # every parameter, batch-norm layers included
        return owners
    if split == "last-block":
        blocks = getattr(model, "layers", None)
        if not isinstance(blocks, nn.Sequential) or len(blocks) < 2:
            raise ConfigError("split last-block needs a model built of residual blocks (model resnet)")
        private = (f"layers.{len(blocks) - 1}.", "classifier.")
        return [name for name in owners if not (name + ".").startswith(private)]
    units = structured_units(model, include_output=True)
    kinds = {"conv": nn.Conv2d, "fc": nn.Linear}
    if split in kinds:
        return [n for n, m, _ in units if isinstance(m, kinds[split])]
    if split.startswith(("first:", "last:")):
        count = int(split.split(":", 1)[1])
        if not 1 <= count <= len(units):
            raise ConfigError(f"split {split.split(':')[0]}:N needs N in 1..{len(units)} for this model, got {count}")
        return [n for n, _, _ in (units[:count] if split.startswith("first:") else units[-count:])]
    raise ConfigError(f"unknown split {split!r}; choose conv, fc, all, first:N, last:N or last-block")


def paper_split(model_name: str, model: nn.Module) -> str:
    """Tan et al. 2025's split for a model (Sec. V): a ResNet's last block private, the LoRA encoder's
    first-layer adapters shared, otherwise the conv layers shared (every layer for a model
    without any)."""
    default = "conv" if any(isinstance(m, nn.Conv2d) for m in model.modules()) else "all"
    return {"resnet": "last-block", "lora-transformer": "first:4"}.get(model_name, default)


def split_parameter_names(model: nn.Module, split: str) -> list[str]:
    """The parameter names in the shared base of a ``split`` (see :func:`split_layers`)."""
    layers = set(split_layers(model, split))
    return [n for n, _ in model.named_parameters() if layer_of(n) in layers]
