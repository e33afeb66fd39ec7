"""The server's folds, shared by the methods (in the spirit of Flower's
``strategy/aggregate.py``): plain data-weighted averaging, and averaging each entry over
the clients that hold it (sub-models, masks), with the message such a client sends."""
from __future__ import annotations

import torch

__all__ = ["weighted_average", "average_over_holders", "masked_upload"]


def weighted_average(states: list[dict], weights: list[float]) -> dict:
    """sum_k w_k state_k / sum_k w_k, tensor by tensor."""
    total = float(sum(weights))
    return {name: sum(s[name] * (w / total) for s, w in zip(states, weights)) for name in states[0]}


def average_over_holders(model, reports, weights: list[float] | None = None) -> None:
    """Set each entry of ``model`` to the weighted mean over the reports that hold it.

    Each report sends ``weights`` and where it ``held`` them, in the global shapes (see
    ``submodel.embed``); entries no report holds keep their value. ``weights`` gives each
    report's weight (default: its ``n_samples``; all ones: the plain mean over holders).
    """
    if not reports:              # a round nobody could train in (OFA-FL's warm-up without a full client)
        return
    weights = [r.n_samples for r in reports] if weights is None else weights
    with torch.no_grad():
        for name, p in model.named_parameters():
            total = sum(w * r.held[name] for r, w in zip(reports, weights))
            weighted = sum(w * r.held[name] * r.weights[name]
                           for r, w in zip(reports, weights))
            p.copy_(torch.where(total > 0, weighted / total.clamp_min(1e-12), p))


def masked_upload(model, masks: dict) -> tuple[dict, dict, int]:
    """What a client sends under parameter ``masks``: its values, where it holds them
    (unmasked tensors are held whole), and the number of entries it holds."""
    params = dict(model.named_parameters())
    held = {n: masks.get(n, torch.ones_like(p)) for n, p in params.items()}
    values = {n: p.detach().clone() for n, p in params.items()}
    return values, held, int(sum(h.sum() for h in held.values()))
