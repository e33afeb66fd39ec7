"""Update compression: top-k sparsification with optional error feedback.

Top-k keeps the k entries of largest magnitude of a vector and zeroes the rest. Error
feedback (Stich et al., 2018) adds what was not sent last time to the next update:

    e_0 = 0,   s_t = top_k(u_t + e_{t-1}),   e_t = u_t + e_{t-1} - s_t,

so every coordinate's mass is sent eventually.
"""
from __future__ import annotations

import math

import torch

from .errors import ConfigError

__all__ = ["flatten", "unflatten", "top_k", "ErrorFeedback", "error_feedback"]


def flatten(tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """Concatenate tensors (in dict order) into one vector."""
    return torch.cat([t.reshape(-1) for t in tensors.values()])


def unflatten(vector: torch.Tensor, like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Split ``vector`` back into tensors shaped like ``like``."""
    parts = vector.split([t.numel() for t in like.values()])
    return {name: part.reshape(t.shape) for (name, t), part in zip(like.items(), parts)}


def top_k(vector: torch.Tensor, fraction: float) -> tuple[torch.Tensor, int]:
    """Keep the ceil(fraction * d) largest-magnitude entries; return (sparse vector, k)."""
    if not 0 < fraction <= 1:
        raise ConfigError(f"top-k fraction must be in (0, 1], got {fraction}")
    k = max(1, math.ceil(fraction * vector.numel()))
    sparse = torch.zeros_like(vector)
    idx = vector.abs().topk(k, sorted=False).indices
    sparse[idx] = vector[idx]
    return sparse, k


class ErrorFeedback:
    """Per-client residual memory e of the unsent part of past updates (``clients``:
    client id -> its e)."""

    def __init__(self):
        self.clients: dict[int, torch.Tensor] = {}

    def compress(self, client_id: int, update: torch.Tensor, fraction: float) -> tuple[torch.Tensor, int]:
        """s = top_k(u + e); e <- u + e - s. Returns (s, k)."""
        sent, k, self.clients[client_id] = error_feedback(update, self.clients.get(client_id), fraction)
        return sent, k


def error_feedback(update: torch.Tensor, memory: torch.Tensor | None,
                   fraction: float) -> tuple[torch.Tensor, int, torch.Tensor]:
    """One client's error-feedback compression (Stich et al. 2018): s = top_k(u + e) and the
    new residual e' = u + e - s, from the residual ``memory`` e (``None``: zero). Returns
    (s, k, e')."""
    corrected = update + (torch.zeros_like(update) if memory is None else memory)
    sent, k = top_k(corrected, fraction)
    return sent, k, corrected - sent
