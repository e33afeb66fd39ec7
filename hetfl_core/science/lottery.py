"""Nested lottery-ticket masks: one set of weights, one mask per density ratio.

OFA-FL (Varma et al., 2023) carves a chain of nested unstructured masks
``m[R[0]] >= m[R[1]] >= ... >= m[R[s-1]]`` out of one network, for a descending list of
density ratios ``R = [1.0, ...]``: pruning events, the masks' level encoding, pruning
schedules and the paper's metrics, each citing the line of Alg. 1-4 or the section it
implements. Masks are ``{parameter name: 0/1 float tensor}`` over the prunable weights
(:func:`hetfl_core.science.masks.prunable`), as ``training.local_sgd(masks=...)`` takes them.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call

from .errors import ConfigError
from .masks import layer_densities, magnitude_mask
from .system import FLOAT_BITS, training_flops

__all__ = ["FLOPS_MODELS", "training_cost", "joint_loss", "check_ratios", "keep_fraction", "prune_within", "rewind", "oneshot_masks", "is_nested",
           "mask_levels", "masks_from_levels", "FixedSchedule", "ConvergenceTrigger", "spread",
           "max_average_round", "storage_bits", "ratio_curves", "ratio_summary"]


def check_ratios(ratios) -> list[float]:
    """``ratios`` as floats if it starts at 1.0 and strictly decreases inside (0, 1], else ConfigError."""
    values = [float(r) for r in ratios]
    if not values or values[0] != 1.0 or any(not 0 < b < a for a, b in zip(values, values[1:])):
        raise ConfigError(f"ratios must start at 1.0 and strictly decrease in (0, 1], got {list(ratios)}")
    return values


def keep_fraction(ratios, n: int) -> float:
    """r_relative of pruning event n: the fraction of the parent's weights kept, R[n] / R[n-1].

    Corrects Alg. 1, l. 12, which reads 1 - (R[n] - R[n-1]) / R[n-1] (1.2 for 1.0 -> 0.8).
    The product over events telescopes: prod_{j<=n} R[j]/R[j-1] = R[n].
    """
    if not 1 <= n < len(ratios):
        raise ConfigError(f"pruning event n must be in 1..{len(ratios) - 1}, got {n}")
    return ratios[n] / ratios[n - 1]


def prune_within(weights: dict[str, torch.Tensor], parent: dict[str, torch.Tensor], keep: float,
                 scope: str = "global") -> dict[str, torch.Tensor]:
    """Alg. 2: keep the ``keep`` fraction of the parent's surviving weights with the largest |w|;
    pruning only inside the parent's support is what makes the masks nested.

    ``scope="global"`` ranks all survivors together (the paper's "non-layerwise": one
    threshold alpha, each layer ends at its own density); ``"layer"`` keeps ``keep`` of
    every layer's survivors. The result is multiplied by the parent, so the child lies
    inside it even where a survivor is exactly zero.
    """
    if not 0 < keep <= 1:
        raise ConfigError(f"keep fraction must be in (0, 1], got {keep}")
    scores = {n: w.detach().abs() * parent[n] for n, w in weights.items()}
    if scope == "global":
        alive = sum(float(m.sum()) for m in parent.values()) / sum(m.numel() for m in parent.values())
        child = magnitude_mask(scores, keep * alive, "global")
    elif scope == "layer":
        child = {n: magnitude_mask({n: s}, max(keep * float(parent[n].mean()), 1e-12), "layer")[n]
                 for n, s in scores.items()}
    else:
        raise ConfigError(f"scope must be 'global' or 'layer', got {scope!r}")
    return {n: child[n] * parent[n] for n in weights}


@torch.no_grad()
def rewind(params: dict[str, torch.Tensor], initial: dict[str, torch.Tensor], mask: dict[str, torch.Tensor],
           rewind_unmasked: bool = True) -> None:
    """Reinitialize (Alg. 3), in place: theta <- theta_init where ``mask`` is 1, unchanged elsewhere
    (partial rewinding: every pruned weight keeps its trained value).

    Tensors without a mask (biases, norm parameters) are rewound whole if
    ``rewind_unmasked`` (the paper restores "parameters ... that have not been pruned").
    """
    for name, p in params.items():
        if name in mask:
            p.copy_(torch.where(mask[name].bool(), initial[name], p))
        elif rewind_unmasked:
            p.copy_(initial[name])


def oneshot_masks(weights: dict[str, torch.Tensor], ratios, scope: str = "global") -> list[dict]:
    """The one-shot baseline: one mask per ratio from a single magnitude ranking of ``weights``
    (ratio 1.0: all ones), nested since a lower threshold keeps a superset."""
    return [{n: torch.ones_like(w) for n, w in weights.items()} if r == 1.0
            else magnitude_mask({n: w.detach() for n, w in weights.items()}, r, scope) for r in ratios]


def is_nested(masks: list[dict]) -> bool:
    """True if every mask lies inside the one before it (masks ordered by decreasing ratio)."""
    return all(bool((small[n] <= big[n]).all()) for big, small in zip(masks, masks[1:]) for n in big)


def mask_levels(masks: list[dict]) -> dict[str, torch.Tensor]:
    """lambda(p) = max{j : masks[j][p] = 1}: nested masks as one small integer per weight
    (ceil(log2 s) bits)."""
    return {n: sum(m[n].long() for m in masks[1:]) for n in masks[0]}


def masks_from_levels(levels: dict[str, torch.Tensor], count: int) -> list[dict]:
    """Inverse of :func:`mask_levels` for nested masks: masks[j] = 1[lambda >= j], j < ``count``."""
    return [{n: (lv >= j).float() for n, lv in levels.items()} for j in range(count)]


def storage_bits(n_weights: int, ratios, layout: str = "ofa") -> float:
    """Bits to store a model for every ratio (Sec. 4.6 of the chapter), N = ``n_weights``.

    ``"separate"``: one dense model per ratio at full size, 32 N sum(R);
    ``"ofa"``: one model plus a level per weight, 32 N + N ceil(log2 s);
    ``"bitmaps"``: one model plus s - 1 bitmaps, 32 N + (s - 1) N.
    """
    s = len(ratios)
    if layout == "separate":
        return FLOAT_BITS * n_weights * float(sum(ratios))
    if layout == "ofa":
        return FLOAT_BITS * n_weights + n_weights * math.ceil(math.log2(s))
    if layout == "bitmaps":
        return FLOAT_BITS * n_weights + (s - 1) * n_weights
    raise ConfigError(f"layout must be 'separate', 'ofa' or 'bitmaps', got {layout!r}")


class FixedSchedule:
    """Prune at round W + 1, then every P rounds (rounds count from 1): the paper's Sec. 3.7 (b)."""

    def __init__(self, warmup: int, every: int):
        self.warmup, self.every = int(warmup), int(every)

    def __call__(self, round_idx: int, n_done: int, last_loss: float | None = None) -> bool:
        return round_idx == self.warmup + 1 + n_done * self.every


class ConvergenceTrigger:
    """Prune when the smallest sub-network's validation loss stopped falling (Sec. 3.7 (a)).

    Fires in round t if the loss measured after round t-1 rose or fell by less than
    ``delta`` since the round before, never in round 1, and not within ``min_gap`` rounds
    of the previous pruning (the loss jumps right after a pruning and rewinding).
    """

    def __init__(self, delta: float = 1e-3, min_gap: int = 5):
        self.delta, self.min_gap = float(delta), int(min_gap)
        self.previous: float | None = None
        self.last_prune = 0

    def __call__(self, round_idx: int, n_done: int, last_loss: float | None = None) -> bool:
        previous, self.previous = self.previous, last_loss
        if previous is None or last_loss is None or round_idx - self.last_prune <= self.min_gap:
            return False
        if previous - last_loss < self.delta:
            self.last_prune, self.previous = round_idx, None
            return True
        return False


def spread(accuracies) -> tuple[float, float]:
    """Mean and population variance across ratios, (1/s) sum_r a_r and (1/s) sum_r (a_r - mean)^2."""
    values = [float(a) for a in accuracies]
    mean = sum(values) / len(values)
    return mean, sum((a - mean) ** 2 for a in values) / len(values)


def max_average_round(per_round: list) -> int:
    """Index of the round with the highest mean accuracy among rounds where every ratio exists.

    ``per_round[t]`` lists a_r(t), with ``None`` for a ratio not yet pruned. The paper's
    "maximized" columns read the accuracies at this round (a max over noisy rounds, so
    biased upwards).
    """
    complete = [t for t, accs in enumerate(per_round) if accs is not None and None not in accs]
    if not complete:
        raise ValueError("no round has every ratio")
    return max(complete, key=lambda t: spread(per_round[t])[0])


def ratio_curves(result: dict):
    """A run's a_r(t) as a (rounds x s) array (NaN while a ratio is not pruned), and its rounds."""
    rows = [r for r in result["history"] if r.get("acc_ratios") is not None]
    curves = np.array([[np.nan if a is None else a for a in r["acc_ratios"]] for r in rows], float)
    return curves, np.array([r["round"] for r in rows])


def ratio_summary(result: dict, last: int = 5) -> dict:
    """The paper's two readings of a run, plus a steadier one, in percent as its tables.

    ``max``: a_r at the max-average round (:func:`max_average_round`); ``final``: a_r after
    the last round; ``last``: a_r averaged over the ``last`` final rounds in which every
    ratio exists. Each has ``acc`` (per ratio), ``mean`` and ``var`` (:func:`spread`).
    """
    curves, rounds = ratio_curves(result)
    curves = 100 * curves
    per_round = [[None if a != a else float(a) for a in row] for row in curves]
    t_max = max_average_round(per_round)
    out = {}
    complete = curves[~np.isnan(curves).any(axis=1)]
    for key, accs in (("max", curves[t_max]), ("final", curves[-1]), ("last", complete[-last:].mean(0))):
        mean, var = spread(accs)
        out[key] = {"acc": [float(a) for a in accs], "mean": mean, "var": var}
    out["max"]["round"] = int(rounds[t_max])
    return out


#: how a client's training FLOPs are charged (see :func:`training_cost`)
FLOPS_MODELS = ("masked-dense", "sparse")


def training_cost(costs, masks: list[dict], samples: int, flops_model: str = "masked-dense") -> float:
    """FLOPs of Alg. 4 on ``samples`` samples: one forward and backward pass per loss, one
    loss per mask in ``masks`` (the client's own and every smaller pruned one).

    ``"masked-dense"``: the paper trains the masked dense weights (Alg. 3, l. 15; Alg. 4,
    l. 6), so each loss costs a dense pass and a smaller client saves compute only by
    computing fewer losses (Sec. 2). ``"sparse"`` charges each layer at its density, what an
    ideal sparse kernel would cost: a lower bound the paper does not claim.
    """
    if flops_model not in FLOPS_MODELS:
        raise ConfigError(f"flops_model must be one of {', '.join(FLOPS_MODELS)}; got {flops_model!r}")
    if flops_model == "sparse":
        return sum(training_flops(costs, samples, density=layer_densities(m)) for m in masks)
    return len(masks) * training_flops(costs, samples)


def joint_loss(model, masks: list[dict], xb, yb):
    """Alg. 4: (1/J) sum_j CE(f(x; m_j * theta), y) over the own mask and the smaller ones.

    The own sub-network is the model itself (its weights are already own * theta); each
    smaller one is a functional call with the masked weights, so gradients reach theta
    only where m_j = 1: grad = (1/J) sum_j m_j * g_j.
    """
    params = dict(model.named_parameters())
    losses = [F.cross_entropy(model(xb), yb)]
    for m in masks:
        masked = {n: p * m[n] if n in m else p for n, p in params.items()}
        logits = functional_call(model, masked, (xb,))
        losses.append(F.cross_entropy(logits, yb))
    return sum(losses) / len(losses)
