"""Where a run computes: ``RunConfig.device`` names a torch device.

``"cpu"`` (the default), ``"cuda"``, ``"cuda:N"``, ``"mps"``, or ``"auto"`` (the first
GPU if there is one, else Apple's MPS, else the CPU). Models, client data and masks live
on that device; the seeded generators stay on the CPU, so a run draws the same minibatches
wherever it computes.
"""
from __future__ import annotations

import dataclasses
import re

import torch

from .errors import ConfigError

__all__ = ["DEVICE_NAMES", "check_device", "resolve_device", "place_data"]

DEVICE_NAMES = ("cpu", "cuda", "cuda:N", "mps", "auto")


def _mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()


def check_device(name: str) -> None:
    """Raise :class:`ConfigError` (one line) unless ``name`` is a device this machine has."""
    if not isinstance(name, str) or not re.fullmatch(r"cpu|auto|mps|cuda(:\d+)?", name):
        raise ConfigError(f"unknown device {name!r}; choose one of: {', '.join(DEVICE_NAMES)}")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"device {name!r} is not available: torch sees no CUDA GPU on this machine "
                              f"(use --device cpu or auto)")
        index = int(name.split(":")[1]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise ConfigError(f"device {name!r} is not available: this machine has "
                              f"{torch.cuda.device_count()} CUDA GPU(s)")
    if name == "mps" and not _mps_available():
        raise ConfigError("device 'mps' is not available: torch sees no Apple MPS backend (use --device cpu or auto)")


def resolve_device(name: str) -> torch.device:
    """The torch device ``name`` stands for (``"auto"``: CUDA, else MPS, else CPU)."""
    check_device(name)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if _mps_available() else "cpu"
    return torch.device(name)


def place_data(data, device: torch.device):
    """A copy of a :class:`~hetfl_core.science.data.FederatedData` whose tensors live on ``device``.

    The dataset object itself is shared with :func:`~hetfl_core.science.data.load_dataset`'s cache,
    so it is copied rather than moved in place; on the CPU ``Tensor.to`` returns the same
    tensors and nothing is copied.
    """
    def moved(record):
        return dataclasses.replace(record, **{f.name: getattr(record, f.name).to(device)
                                              for f in dataclasses.fields(record)
                                              if isinstance(getattr(record, f.name), torch.Tensor)})

    return dataclasses.replace(data, dataset=moved(data.dataset), clients=[moved(c) for c in data.clients])
