"""The Heroes controller (Alg. 1): widths from a time budget, then local update frequencies.

Notation of Sec. IV-V: a client n of width p has the per-iteration time
``mu_n = flops(p) / q_n`` (Eq. 17) and the transfer time ``nu_n = bits(p) / b_n`` (Eq. 18);
the round waits for the slowest client (Eqs. 19-20). The bound of Theorem 1 with
alpha <= beta^2 (Eq. 23),

    G(H, tau) = 4 F(x^0) / (H eta tau) + L eta tau (G^2 + 18 sigma^2) / 3 + 6 L^2 beta^2,

is convex in tau with minimiser tau* (:func:`tau_raw`; :func:`tau_calibrated`, the
default, and :func:`tau_eps` are variants). The fastest client l (:func:`deadline_client`)
runs tau*, its finish time is the deadline, and every other client's tau lies in the
window of Eq. (24), chosen there to minimise the variance V of the blocks' update counts (Eq. 21).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

from .composition import COMPOSED_MODELS, build_composed
from .errors import ConfigError
from .models import build_model
from .system import profile_model, training_flops

__all__ = ["width_profiles", "step_flops", "budget_widths", "heroes_widths", "width_for_budget", "tau_raw", "tau_calibrated", "tau_eps", "deadline_client", "frequency_window",
           "block_variance", "variance_minimising_tau", "plan_frequencies", "completion_times", "waiting_time"]


def width_for_budget(iteration_time: Callable[[int], float], mu_max: float, max_width: int) -> int:
    """Alg. 1 l. 6-11 (mended: the printed loop can overshoot): the largest p in 1..P whose per-iteration
    time ``iteration_time(p)`` is at most ``mu_max``; 1 if none is."""
    feasible = [p for p in range(1, max_width + 1) if iteration_time(p) <= mu_max]
    return max(feasible) if feasible else 1


def tau_raw(F: float, L: float, S: float, eta: float, H: int) -> float:
    """Eq. (25): tau* = sqrt(12 F / (eta^2 H L S)), S = G^2 + 18 sigma^2, the minimiser of the bound (23)."""
    return math.sqrt(12.0 * F / (eta * eta * H * L * S))


def tau_calibrated(tau0: float, F: float, L: float, S: float, F1: float, L1: float, S1: float) -> float:
    """tau_0 sqrt((F / F^1) (L^1 S^1) / (L S)): Eq. (25)'s dependence on the loss, the
    smoothness and the gradient noise, with the scale fixed by tau_0 at the first
    estimates (superscript 1) instead of the unknown absolute constants (this book's choice)."""
    return tau0 * math.sqrt((F / F1) * (L1 * S1) / (L * S))


def tau_eps(eps: float, L: float, S: float, beta2: float, eta: float) -> float:
    """tau*(H_min) = 3 (eps - 6 L^2 beta^2) / (2 eta L S): the tau at the fewest rounds that
    bring the bound (23) under eps (derived from Eq. 23); needs eps > 6 L^2 beta^2."""
    slack = eps - 6.0 * L * L * beta2
    if slack <= 0:
        raise ConfigError(f"eps={eps} is below the bound's floor 6 L^2 beta^2 = {eps - slack:.3g}")
    return 3.0 * slack / (2.0 * eta * L * S)


def deadline_client(tau_star: float, mu, nu) -> int:
    """Eq. (27): the client that finishes first at the common tau* (argmin tau* mu_n + nu_n,
    independent of H)."""
    return int(np.argmin(tau_star * np.asarray(mu, float) + np.asarray(nu, float)))


def frequency_window(deadline: float, rho: float, mu: float, nu: float) -> tuple[int, int]:
    """Eq. (24): 0 <= T_l - (tau mu + nu) <= rho, as integers [tau_a, tau_b].

    tau_b < 1 (the upload alone misses the deadline) gives (1, 1), a straggler; an empty
    integer window collapses to tau_b (the paper leaves this case open)."""
    tau_b = math.floor((deadline - nu) / mu + 1e-9)
    if tau_b < 1:
        return 1, 1
    tau_a = math.ceil((deadline - rho - nu) / mu - 1e-9)
    return min(max(tau_a, 1), tau_b), tau_b


def block_variance(counts) -> float:
    """Eq. (21): V = (1/P^2) sum_i (c_i - mean c)^2."""
    c = np.asarray(counts, float)
    return float(((c - c.mean()) ** 2).mean())


def variance_minimising_tau(counts, blocks, tau_a: int, tau_b: int) -> int:
    """The tau in [tau_a, tau_b] minimising V(c + tau 1_S) (Alg. 1 l. 19).

    V is a convex quadratic in tau with vertex (mean c - mean_S c) / (1 - m / P^2) for
    m = |S| < P^2; if S holds every block, V does not depend on tau and tau_b is taken."""
    c = np.asarray(counts, float)
    m, n = len(blocks), len(c)
    if m >= n:
        return tau_b
    vertex = (c.mean() - c[list(blocks)].mean()) / (1.0 - m / n)
    candidates = {min(max(t, tau_a), tau_b) for t in (math.floor(vertex), math.ceil(vertex))}
    in_s = np.isin(np.arange(n), list(blocks))
    return min(sorted(candidates), key=lambda t: block_variance(c + t * in_s))


def plan_frequencies(mu, nu, widths, tau_l: int, rho_fraction: float, counts: np.ndarray,
                     select: Callable, commit: Callable, adaptive: bool = True):
    """Alg. 1 l. 12-22 for one round (order, which the paper leaves open: l first, then by decreasing width).

    ``select(n)`` returns client n's selection (its ``.blocks``) given the current counts,
    ``commit(n, selection, tau)`` adds tau to the counters (l. 21-22). With
    ``adaptive=False`` every client runs ``tau_l`` (fixed frequency, Fig. 2a).
    Returns ``(taus, selections, l)``, lists in the clients' order.
    """
    mu, nu = np.asarray(mu, float), np.asarray(nu, float)
    l = deadline_client(tau_l, mu, nu)
    deadline = tau_l * mu[l] + nu[l]
    order = [l] + sorted((n for n in range(len(mu)) if n != l), key=lambda n: (-widths[n], n))
    taus, selections = [0] * len(mu), [None] * len(mu)
    for n in order:
        sel = select(n)
        if not adaptive or n == l:
            tau = tau_l
        else:
            tau_a, tau_b = frequency_window(deadline, rho_fraction * deadline, mu[n], nu[n])
            tau = variance_minimising_tau(counts, sel.blocks, tau_a, tau_b)
        commit(n, sel, tau)
        taus[n], selections[n] = int(tau), sel
    return taus, selections, l


def completion_times(taus, mu, nu) -> np.ndarray:
    """Eq. (19): T_n = tau_n mu_n + nu_n."""
    return np.asarray(taus, float) * np.asarray(mu, float) + np.asarray(nu, float)


def waiting_time(times) -> float:
    """Eq. (20): W = mean_n (max_m T_m - T_n)."""
    t = np.asarray(times, float)
    return float((t.max() - t).mean())


# -- the width each client's hardware affords (Alg. 1 l. 6-11, Eq. 17) ----------------------
def width_profiles(config, data, max_width: int) -> dict[int, list]:
    """The layer profiles of the dense width-p/P twin of the run's model, p = 1..P: a
    composed width-p model computes exactly its dense twin's products (Eq. 4)."""
    return {p: profile_model(build_model(config.model, data.input_shape, data.num_classes, width=p / max_width),
                             data.input_shape, dtype=data.dataset.x_train.dtype) for p in range(1, max_width + 1)}


def step_flops(profile, batch_size: int, composition_macs: float = 0.0) -> float:
    """G(v . u_p) of Eq. (17) for one local step: the width-p model's training FLOPs on a
    batch (its dense twin's, from ``system.training_flops``) plus composing its weights,
    forward and both backward products (``6 x`` the composition's multiply-adds)."""
    return training_flops(profile, batch_size) + 6.0 * composition_macs


def budget_widths(step_cost, hardware, width_budget: float, max_width: int) -> list[int]:
    """Alg. 1 l. 6-11 for every client's ``hardware``: the widest p in 1..P whose step time
    ``step_cost(p) / q_n`` (Eq. 17) fits mu_max = ``width_budget`` x the full model's step
    time on the fastest hardware; 1 if none does. Heroes and, with their ``width_budget``
    option, the width baselines take their widths from this one rule."""
    fastest = max(d.flops_per_s for d in hardware)
    mu_max = width_budget * step_cost(max_width) / fastest
    return [width_for_budget(lambda p: step_cost(p) / d.flops_per_s, mu_max, max_width) for d in hardware]


def heroes_widths(config, data, hardware, max_width: int, width_budget: float) -> list[int]:
    """Each client's Heroes width p (:func:`budget_widths`) with the step cost of Eq. (17)
    for the run's model: the composed model's where it has one, else the dense twin's."""
    with torch.random.fork_rng(devices=[]):   # building the twins leaves the run's random state alone
        profiles = width_profiles(config, data, max_width)
        composed = build_composed(config.model, data.input_shape, data.num_classes, max_width) \
            if config.model in COMPOSED_MODELS else None
    return budget_widths(
        lambda p: step_flops(profiles[p], config.batch_size, composed.composition_macs(p) if composed else 0.0),
        hardware, width_budget, max_width)
