"""SRP-pFed's element-wise partial updates: a magnitude mask splits a client's model into a
shared part (uploaded and averaged) and a personal part (kept). Masks are ``{parameter name:
0/1 float tensor}`` over all trainable parameters, as ``training.local_sgd(masks=...)`` takes them.
"""
from __future__ import annotations

import torch

from .compression import flatten, unflatten
from .errors import ConfigError

__all__ = ["update_rate_mask", "mask_size", "fuse", "masked_aggregate"]


def _sorted_mask(flat: torch.Tensor, k: int, personal: str) -> torch.Tensor:
    """The k entries first in the stable sort of |flat| (descending for ``"smallest"``)."""
    order = torch.argsort(flat.abs(), stable=True, descending=(personal == "smallest"))
    mask = torch.zeros_like(flat)
    mask[order[:k]] = 1.0
    return mask


def _ranked_mask(flat: torch.Tensor, p: float, personal: str) -> torch.Tensor:
    """1 on the round(p d) entries of ``flat`` that come first when |flat| is sorted stably
    (ascending for ``personal="largest"``, descending for ``"smallest"``), 0 elsewhere.

    The same mask as :func:`_sorted_mask` without sorting: the k-th value v of |flat|
    (``torch.kthvalue``, linear time) splits the entries into those strictly before v, all
    kept, and those equal to v, of which a stable sort keeps the first by position. A vector
    holding a NaN, which the two orders may place differently, is sorted."""
    n = flat.numel()
    k = max(1, int(round(p * n)))
    if k >= n:
        return torch.ones_like(flat)
    size = flat.abs()
    if torch.isnan(size).any():
        return _sorted_mask(flat, k, personal)
    if personal == "smallest":
        v = torch.kthvalue(size, n - k + 1).values
        before = size > v
    else:
        v = torch.kthvalue(size, k).values
        before = size < v
    mask = before.to(flat.dtype)
    mask[(size == v).nonzero().flatten()[:k - int(before.sum())]] = 1.0
    return mask


def update_rate_mask(weights: dict[str, torch.Tensor], p: float, scope: str = "global",
                     personal: str = "largest") -> dict[str, torch.Tensor]:
    """The shared mask of update rate ``p`` (Eqs. 2-3): round(p d) entries set to 1.

    ``personal="largest"`` (the paper): the largest-|w| entries stay personal, so the
    shared ones are the smallest; ``"smallest"`` reverses it (an ablation). ``scope``
    ranks over the whole model (``"global"``, the paper's element-wise rule) or within
    each tensor (``"layer"``). Ties are broken by position (stable sort), so masks are
    deterministic and nested in p.
    """
    if not 0 < p <= 1:
        raise ConfigError(f"update rate must be in (0, 1], got {p}")
    if personal not in ("largest", "smallest"):
        raise ConfigError(f"personal must be 'largest' or 'smallest', got {personal!r}")
    if scope == "layer":
        return {n: _ranked_mask(w.detach().flatten(), p, personal).reshape(w.shape) for n, w in weights.items()}
    if scope != "global":
        raise ConfigError(f"scope must be 'global' or 'layer', got {scope!r}")
    return unflatten(_ranked_mask(flatten({n: w.detach() for n, w in weights.items()}), p, personal), weights)


def mask_size(mask: dict[str, torch.Tensor]) -> int:
    """Number of shared entries, ||m||_1."""
    return int(sum(m.sum() for m in mask.values()))


def fuse(global_weights: dict[str, torch.Tensor], local_weights: dict[str, torch.Tensor],
         mask: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Eq. 5: m * w_g + (1 - m) * w_i, the shared entries from the global model, the personal
    ones from the client's."""
    return {n: mask[n] * global_weights[n] + (1 - mask[n]) * local_weights[n] for n in mask}


def masked_aggregate(old: dict[str, torch.Tensor], uploads, mode: str = "element") -> dict[str, torch.Tensor]:
    """The new global model from ``uploads`` = [(n_i, mask_i, shared values_i)] (Eq. 4).

    ``"element"``: w[l] = sum_i n_i m_i[l] w_i[l] / sum_i n_i m_i[l], and the old w[l]
    where no client shares l (the prose of Sec. III-C). ``"paper_eq4"``: the literal
    sum_i n_i m_i w_i / sum_i n_i, which shrinks entries shared by few clients towards 0.
    """
    if mode not in ("element", "paper_eq4"):
        raise ConfigError(f"aggregation must be 'element' or 'paper_eq4', got {mode!r}")
    total = float(sum(n for n, _, _ in uploads))
    new = {}
    for name, w in old.items():
        weighted = sum(n * m[name] * v[name] for n, m, v in uploads)
        if mode == "paper_eq4":
            new[name] = weighted / total
        else:
            cover = sum(n * m[name] for n, m, _ in uploads)
            new[name] = torch.where(cover > 0, weighted / cover.clamp_min(1e-12), w)
    return new
