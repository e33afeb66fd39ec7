"""The random walk with reinforced memory over update-rate candidates (SRP-pFed, Eqs. 6-7).

The server keeps a memory weight h(x) for each candidate rate p_x of the grid
P = {1/c, 2/c, ..., 1} (Sec. III-B). Each round it turns the memory into probabilities
pi_x = h(x) / sum_j h(j) (Eq. 7), samples K rates P_t from pi (Alg. 2) and, once the clients
report their losses, decays every weight and reinforces the sampled ones (Eq. 6):

    h(x) <- lambda h(x) + b(t)   if p_x in P_t,      h(x) <- lambda h(x)   otherwise,

    b(t) = 1 - 1 / (1 + exp(-L_t)) = 1 / (1 + exp(L_t)).

The next state is drawn from pi whatever the current one, so the "walk" is an urn with
fading memory: h(x) is a discounted count of the rounds in which p_x was sampled, each
weighted by that round's reinforcement.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from .errors import ConfigError

__all__ = ["rate_grid", "reinforcement", "inclusion_probabilities", "ReinforcedRateWalk"]

MODES = ("rm", "rd", "fixed")


def rate_grid(candidates: int) -> list[float]:
    """The uniform grid on (0, 1]: p_x = x / c for x = 1..c (Sec. V-A)."""
    if candidates < 1:
        raise ConfigError(f"candidates must be >= 1, got {candidates}")
    return [x / candidates for x in range(1, candidates + 1)]


def reinforcement(loss: float) -> float:
    """b = 1 - 1/(1 + e^{-L}) = 1/(1 + e^{L}), in (0, 1/2] for L >= 0 (Eq. 6)."""
    if loss > 700:  # exp overflow: b is 0 to double precision
        return 0.0
    return 1.0 / (1.0 + math.exp(loss))


def inclusion_probabilities(probs, k: int, replacement: bool = False) -> np.ndarray:
    """P[p_x in P_t] for each x under the sampling rule (exact).

    With replacement: 1 - (1 - pi_x)^K. Without: successive sampling, summed over the
    ordered sequences of distinct draws (fine for the small grids used here).
    """
    pi = np.asarray(probs, float)
    if replacement:
        return 1.0 - (1.0 - pi) ** k
    out = np.zeros(len(pi))
    for draws in itertools.permutations(np.flatnonzero(pi > 0), k):
        prob, left = 1.0, float(pi.sum())
        for x in draws:
            prob, left = prob * pi[x] / left, left - pi[x]
        out[list(draws)] += prob
    return out


class ReinforcedRateWalk:
    """Memory h over the candidate rates; ``probs``, ``sample`` and ``update`` (Eqs. 6-7).

    ``rates``: the candidate grid (ascending); ``k``: rates sampled per round; ``decay``:
    lambda in (0, 1) (not given in the paper; 0.9 here). Where Sec. III-B and Eq. 6 are
    ambiguous, the paper's literal rule is an option:

    * ``replacement=False`` draws K *distinct* rates, renormalising over the rates not yet
      drawn; ``True`` (literal) draws K independently and merges duplicates (so fewer may remain);
    * ``loss_agg``: L_t is the data-weighted ``"mean"`` of the clients' losses; the literal
      ``"sum"`` makes b ~ exp(-sum) ~ 0 with many clients;
    * ``credit="shared"`` (literal) gives every sampled rate the same b(t); ``"per_rate"`` gives
      rate x the b of the clients that chose it, and nothing to rates nobody chose;
    * ``mode``: ``"rm"`` reinforced memory, ``"rd"`` uniform random rates (Table VII's RD),
      ``"fixed"`` the rates ``fixed`` every round (Table VII's "none" and "CL").
    """

    def __init__(self, rates, k: int = 2, decay: float = 0.9, mode: str = "rm", replacement: bool = False,
                 loss_agg: str = "mean", credit: str = "shared", fixed=None):
        rates = [float(r) for r in rates]
        if not rates or any(not 0 < r <= 1 for r in rates) or rates != sorted(set(rates)):
            raise ConfigError(f"rates must be distinct, ascending and in (0, 1], got {rates}")
        for name, value, allowed in (("mode", mode, MODES), ("loss_agg", loss_agg, ("mean", "sum")),
                                     ("credit", credit, ("shared", "per_rate"))):
            if value not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        if mode != "fixed" and not 1 <= k <= len(rates):
            raise ConfigError(f"k must be in 1..{len(rates)} (the number of candidates), got {k}")
        if not 0 < decay < 1:
            raise ConfigError(f"decay must be in (0, 1), got {decay}")
        self.rates, self.k, self.decay, self.mode = rates, k, decay, mode
        self.replacement, self.loss_agg, self.credit = replacement, loss_agg, credit
        if mode == "fixed":
            if not fixed or any(float(r) not in rates for r in fixed):
                raise ConfigError(f"fixed rates must be candidates of {rates}, got {fixed}")
            self.fixed = sorted({rates.index(float(r)) for r in fixed})
        self.memory = np.ones(len(rates), dtype=np.float64)  # h^1(x) = 1: pi starts uniform

    def probs(self) -> np.ndarray:
        """pi_x = h(x) / sum_j h(j) (Eq. 7); uniform under ``mode="rd"``."""
        if self.mode == "rd":
            return np.full(len(self.rates), 1.0 / len(self.rates))
        return self.memory / self.memory.sum()

    def sample(self, rng: np.random.Generator) -> list[int]:
        """Indices of the rates P_t of this round, ascending (SAMPLEUPDATERATE, Alg. 2).

        Each draw is an inverse-CDF draw: U ~ U(0, 1], the smallest j with F_j >= U.
        """
        if self.mode == "fixed":
            return list(self.fixed)
        pi = self.probs()
        chosen: list[int] = []
        for _ in range(self.k):
            weights = pi.copy()
            if not self.replacement:
                weights[chosen] = 0.0
            cdf = np.cumsum(weights / weights.sum())
            u = 1.0 - rng.random()  # U(0, 1]
            j = min(int(np.searchsorted(cdf, u, side="left")), len(cdf) - 1)
            while weights[j] == 0:  # float round-off at the top of the CDF
                j -= 1
            if j not in chosen:
                chosen.append(j)
        return sorted(chosen)

    def round_loss(self, losses, weights) -> float:
        """L_t: the data-weighted mean (default) or the literal sum of the clients' losses."""
        losses, weights = np.asarray(losses, float), np.asarray(weights, float)
        if self.loss_agg == "sum":
            return float(losses.sum())
        return float((weights * losses).sum() / weights.sum())

    def update(self, sampled: list[int], losses, weights, chosen=None) -> dict[int, float]:
        """Eq. 6 at the end of a round: h <- lambda h, plus b on the sampled rates.

        ``losses``/``weights``: each reporting client's loss and data size; ``chosen``:
        the index of the rate each client picked (needed for ``credit="per_rate"``).
        Returns the bonus given to each rate index.
        """
        if self.credit == "shared":
            b = reinforcement(self.round_loss(losses, weights)) if len(losses) else 0.0
            bonus = {x: b for x in sampled}
        else:
            mine = {x: [i for i, c in enumerate(chosen) if c == x] for x in sampled}
            bonus = {x: reinforcement(self.round_loss([losses[i] for i in ix], [weights[i] for i in ix]))
                     for x, ix in mine.items() if ix}
        self.memory *= self.decay
        for x, b in bonus.items():
            self.memory[x] += b
        return bonus
