"""Per-round joint choice of sparsity k, pruning rate r and bandwidth share l (Tan et al. 2025).

The server of the lightweight personalised method (Tan et al., 2025; Alg. 1) solves, every
round, problem (31) restricted to that round (the paper's (31) couples all rounds):

    min_{k, r, l}  sum_n gamma_n (theta1 sqrt(1 - r_n) - theta2 k_n)                  (31a)
    s.t.  tau_comp_n(r_n) + S(k_n) / R_n(l_n) <= tau_max                              (31b)
          zeta omega_n^3 tau_comp_n(r_n) + p_n S(k_n) / R_n(l_n) <= E_n   (optional)  (31c)
          k_min <= k <= 1,  r_min <= r <= r_max,  sum_n l_n = 1                        (31d-g)

with the wireless uplink rate R_n(l) = l W log2(1 + h_n p_n / (N0 l W)) (7), the upload
size S(k) = k d_B (log2(1/k) + FPP + 1) (9) and the compute time
tau_comp(r) = b C (d_B + r d_P) / (omega d) (12). Both the objective (concave in r) and
(31b) (S(k)/R(l) couples k and l) are non-convex.

:func:`solve_dca` is Alg. 2: slack variables z (comm latency), u = l z and u = v^2 turn
(31) into the difference-of-convex program (38); each DCA iteration linearises the
concave parts at the current point and solves the convex subproblem (39) with cvxpy's
default conic solver (CLARABEL). Every linearisation is an inner approximation, so from a
feasible start each iterate is feasible and the true objective never increases.

:func:`uniform_allocation` (l = 1/N, each client's best (k, r) on a fine grid) and
:func:`grid_search` (brute force over l as well, for N <= 3) are the references the tests
compare against. Units inside the solver: Mbit, MHz, seconds.
"""
from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field, replace

import numpy as np

from .errors import ConfigError, InfeasibleError
from .streams import STREAMS
from .system import (FLOAT_BITS, NOISE_PSD, CellState, WirelessCell, compute_seconds, cpu_energy,
                     min_round_time, min_shares)
from .system import topk_upload_bits as upload_bits

__all__ = ["NOISE_PSD", "RoundSystem", "Allocation", "upload_bits", "objective", "latency", "min_share",
           "min_deadline", "feasible_start", "solve_dca", "best_for_shares", "uniform_allocation", "grid_search",
           "calibrate_deadline"]

K_MIN, R_MIN, R_MAX = 0.01, 0.05, 1 - 1e-4   # the gradients of (39) are singular at k=0, r=1


def _upload_bits_slope(k, d_base: int, value_bits: int = FLOAT_BITS):
    """dS/dk = d_B (log2(1/k) + FPP + 1 - 1/ln 2) = -grad phi_1 (derived from Eq. 38)."""
    return d_base * (-np.log2(k) + value_bits + 1 - 1 / math.log(2))


@dataclass
class RoundSystem:
    """One round's system state: what the server knows when it allocates (Sec. III).

    ``state`` is the round of the cell (:class:`~hetfl_core.science.system.CellState`: the band W
    and per client the channel gain h, transmit power p and CPU frequency omega); per
    client the data weight ``gamma`` (sums to 1) and optional per-round energy budgets
    ``energy_budget_j``; shared, the model split ``d_base``/``d_private``, ``batch`` b,
    ``cycles_per_sample`` C, ``energy_coeff`` zeta and the deadline ``deadline_s``.
    """

    state: CellState
    gamma: np.ndarray
    d_base: int
    d_private: int
    batch: int
    cycles_per_sample: float
    deadline_s: float
    energy_coeff: float = 1e-28
    energy_budget_j: np.ndarray | None = None
    value_bits: int = FLOAT_BITS

    @classmethod
    def mean_of(cls, cost_model, gamma, d_base: int, d_private: int, batch: int, *, seed: int,
                deadline_s: float | None = None, deadline_position: float = 0.5) -> RoundSystem:
        """The mean round of a wireless cost model's cell (``cost_model.cell`` without fading,
        with its C) for this split and data weights; the deadline is ``deadline_s`` or
        calibrated at ``deadline_position`` (:func:`calibrate_deadline`)."""
        cell = cost_model.cell
        system = cls(cell.mean_state(), np.asarray(gamma, float), d_base, d_private, batch,
                     cost_model.cycles_per_sample, 1.0, cell.energy_coeff)
        if deadline_s is None:
            deadline_s = calibrate_deadline(cell, system, deadline_position, seed)
        return replace(system, deadline_s=float(deadline_s))

    @property
    def n(self) -> int:
        """The number of clients N."""
        return len(self.gamma)

    @property
    def bandwidth_hz(self) -> float:
        """The band W."""
        return self.state.bandwidth_hz

    @property
    def snr(self) -> np.ndarray:
        """Each client's SNR on the whole band (:attr:`CellState.snr`)."""
        return self.state.snr

    def rates(self, share) -> np.ndarray:
        """Eq. (7) for every client at its bandwidth share (:meth:`CellState.rates`)."""
        return self.state.rates(share)

    def compute_time(self, r) -> np.ndarray:
        """Eq. (12): tau_comp = b C (d_B + r d_P) / (omega d) (:func:`~hetfl_core.science.system.compute_seconds`)."""
        return compute_seconds(self.batch * self.cycles_per_sample, self.state.cpu_hz,
                               self.d_base + np.asarray(r, float) * self.d_private, self.d_base + self.d_private)

    def compute_energy(self, r) -> np.ndarray:
        """Eq. (13): E_comp = zeta omega^3 tau_comp (:func:`~hetfl_core.science.system.cpu_energy`)."""
        return cpu_energy(self.energy_coeff, self.state.cpu_hz, self.compute_time(r))

    def with_state(self, state: CellState, energy_budget_j: float | None = None) -> RoundSystem:
        """This system on another draw of the cell (and per-client energy budgets, if any)."""
        budget = None if energy_budget_j is None else np.full(len(state.gain), energy_budget_j)
        return replace(self, state=state, energy_budget_j=budget)

    def subset(self, idx) -> RoundSystem:
        """The round of the clients ``idx`` alone: their state, budgets and data weights (renormalised)."""
        gamma = self.gamma[idx]
        budget = None if self.energy_budget_j is None else np.asarray(self.energy_budget_j)[idx]
        return replace(self, state=self.state.subset(idx), gamma=gamma / gamma.sum(), energy_budget_j=budget)


def objective(k, r, system: RoundSystem, theta1: float, theta2: float = 1.0) -> float:
    """Eq. (31a) for one round: sum_n gamma_n (theta1 sqrt(1 - r_n) - theta2 k_n)."""
    return float(np.sum(system.gamma * (theta1 * np.sqrt(np.clip(1 - np.asarray(r), 0, None))
                                        - theta2 * np.asarray(k))))


def latency(k, r, share, system: RoundSystem) -> np.ndarray:
    """Eqs. (10), (12), (14): tau_all = tau_comp(r) + S(k) / R(l), per client."""
    return system.compute_time(r) + upload_bits(k, system.d_base, system.value_bits) / system.rates(share)


def energy(k, r, share, system: RoundSystem) -> np.ndarray:
    """Eqs. (11), (13): E = zeta omega^3 tau_comp + p tau_comm, per client and round."""
    comm = upload_bits(k, system.d_base, system.value_bits) / system.rates(share)
    return system.compute_energy(r) + system.state.tx_power_w * comm


def min_share(system: RoundSystem, bits, seconds) -> np.ndarray:
    """The smallest l_n with R_n(l_n) >= bits_n / seconds_n (``system.min_shares``, Lambert W);
    ``inf`` for clients that cannot make it even with the whole band."""
    return min_shares(system.snr, system.bandwidth_hz, bits, seconds)


def min_deadline(system: RoundSystem, k, r, iters: int = 60) -> float:
    """The smallest deadline under which (k, r) fits with the best bandwidth split
    (``system.min_round_time``)."""
    bits = upload_bits(k, system.d_base, system.value_bits) * np.ones(system.n)
    return min_round_time(system.snr, system.bandwidth_hz, bits, system.compute_time(r) * np.ones(system.n), iters)


@dataclass
class Allocation:
    """One round's decision and how it was reached.

    ``history`` holds the true objective (31a) at the start point and after every DCA
    iteration; ``relaxed`` says the round's deadline was infeasible and was relaxed to
    ``deadline_s`` = 1.05 x the smallest feasible one (the paper gives no deadline).
    """

    k: np.ndarray
    r: np.ndarray
    share: np.ndarray
    objective: float
    deadline_s: float
    history: list = field(default_factory=list)
    iterations: int = 0
    relaxed: bool = False
    status: str = "optimal"


def feasible_start(system: RoundSystem, k_min: float = K_MIN, r_min: float = R_MIN):
    """A feasible start for Alg. 2: (k, r) = (k_min, r_min) and the least shares that meet the deadline, scaled to sum 1.

    Returns (k, r, share) or raises :class:`InfeasibleError` when even that point misses
    the deadline.
    """
    k, r = np.full(system.n, k_min), np.full(system.n, r_min)
    slack = system.deadline_s - system.compute_time(r)
    share = min_share(system, upload_bits(k, system.d_base, system.value_bits), slack)
    total = share.sum()
    if not np.isfinite(total) or total > 1:
        raise InfeasibleError(f"deadline {system.deadline_s:.4g} s is infeasible even at k={k_min}, r={r_min} "
                              f"(needs {total:.3g} of the band)")
    return k, r, share / total


class _Subproblem:
    """The convex subproblem (39), built once per (N, energy) and re-solved with new parameters (DPP)."""

    def __init__(self, n: int, with_energy: bool, k_min: float, r_min: float, r_max: float):
        import cvxpy as cp

        self.cp = cp
        k, r, z, u, v, s = (cp.Variable(n, name=name) for name in "krzuvs")
        P = lambda name, **kw: cp.Parameter(n, name=name, **kw)  # noqa: E731
        self.c, self.g = P("c"), P("g")                          # linearised -S(k) / W  [Mbit/MHz]
        self.vi, self.vi2 = P("vi", nonneg=True), P("vi2", nonneg=True)
        self.sr = P("sr", nonneg=True)                           # theta1 gamma / (2 sqrt(1 - r_i))
        self.wk = P("wk", nonneg=True)                           # theta2 gamma
        self.ainv, self.lna = P("ainv", nonneg=True), P("lna")   # 1 / a and ln a, a = full-band SNR
        self.A, self.B = P("A", nonneg=True), P("B", nonneg=True)  # tau_comp = A + B r  (12)
        self.tau = cp.Parameter(nonneg=True, name="tau")
        tc = self.A + cp.multiply(self.B, r)
        # (39b) / W in the stable form: lambda_1 / W = (rel_entr(u, z + u / a) - u ln a) / ln 2; the
        # equal rel_entr(u, u + a z) / ln 2 mixes u ~ 1e-2 with a z ~ 1e6 and stalls the solver
        cons = [k >= k_min, k <= 1, r >= r_min, r <= r_max,                       # (31d), (31e)
                tc + z <= self.tau,                                              # (32a)
                u >= 0, u <= z, v >= 0,                                          # (35a), (35b)
                cp.SOC(s + z, cp.vstack([2 * v, s - z]), axis=0), cp.sum(s) <= 1,  # (36a): s >= v^2 / z
                (cp.rel_entr(u, z + cp.multiply(self.ainv, u)) - cp.multiply(self.lna, u)) / math.log(2)
                <= self.c + cp.multiply(self.g, k),
                u <= 2 * cp.multiply(self.vi, v) - self.vi2]                     # (39c)
        if with_energy:
            self.eA, self.eB = P("eA", nonneg=True), P("eB", nonneg=True)
            self.p, self.E = P("p", nonneg=True), P("E", nonneg=True)
            cons.append(self.eA + cp.multiply(self.eB, r) + cp.multiply(self.p, z) <= self.E)  # (32b)
        self.vars = (k, r, z, u, v)
        self.problem = cp.Problem(cp.Minimize(-self.wk @ k - self.sr @ r), cons)

    def solve(self):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")          # "optimal_inaccurate" is checked by the caller
                # a fresh solver every time: a warm-started Clarabel keeps the equilibration of
                # the first data it saw, so a round's answer would depend on earlier rounds
                self.problem.solve(solver=self.cp.CLARABEL, warm_start=False)
        except self.cp.SolverError:
            return None
        if self.problem.status not in ("optimal", "optimal_inaccurate"):
            return None
        return tuple(np.asarray(x.value, float) for x in self.vars)


#: one subproblem per (n, with_energy, k_min, r_min, r_max), re-solved with new parameters
_subproblem = functools.cache(_Subproblem)


def largest_k(system: RoundSystem, budget, lo, hi, iters: int = 60):
    """The largest k in [lo, hi] whose upload S(k) (Eq. 9) fits ``budget`` bits, element-wise
    (bisection: S increases in k); ``lo`` where even it does not fit."""
    for _ in range(iters):
        mid = (lo + hi) / 2
        fits = upload_bits(mid, system.d_base, system.value_bits) <= budget
        lo, hi = np.where(fits, mid, lo), np.where(fits, hi, mid)
    return lo


def _repair(system: RoundSystem, k, r, share, k_min):
    """Lower k where solver tolerance left tau_all a hair above the deadline (S increases in k)."""
    budget = system.rates(share) * (system.deadline_s - system.compute_time(r))
    bad = upload_bits(np.asarray(k, float), system.d_base, system.value_bits) > budget
    if not bad.any():
        return k
    return np.where(bad, largest_k(system, budget, np.full(system.n, k_min), np.asarray(k, float)), k)


def _feasible(system: RoundSystem, k, r, share, k_min, rtol: float = 1e-9):
    """``(k, share)`` that meet the deadline (and any energy budget) at ``r``, or ``None``: the
    solver's shares with k :func:`_repair`-ed, else the least shares that fit (k, r) scaled up
    to fill the band."""
    candidates = [share]
    need = min_share(system, upload_bits(k, system.d_base, system.value_bits),
                     system.deadline_s - system.compute_time(r))
    if np.all(np.isfinite(need)) and 0 < need.sum() <= 1:
        candidates.append(need / need.sum())
    for shares in candidates:
        k_fit = _repair(system, k, r, shares, k_min)
        ok = latency(k_fit, r, shares, system) <= system.deadline_s * (1 + rtol)
        if system.energy_budget_j is not None:
            ok &= energy(k_fit, r, shares, system) <= np.asarray(system.energy_budget_j) * (1 + 1e-6)
        if ok.all():
            return k_fit, shares
    return None


def solve_dca(system: RoundSystem, theta1: float, theta2: float = 1.0, *, max_iter: int = 30,
              tol: float = 1e-4, k_min: float = K_MIN, r_min: float = R_MIN, r_max: float = R_MAX,
              relax: bool = True) -> Allocation:
    """Alg. 2: DCA on (38) from the feasible start of :func:`feasible_start`, one convex program (39) per iteration.

    Stops when max |k^{i+1} - k^i|, |r^{i+1} - r^i| <= ``tol`` or after ``max_iter``
    iterations and returns the last iterate x^{i+1} (the paper returns x^i). If the
    deadline is infeasible, raises :class:`InfeasibleError` (``relax=False``) or relaxes it to
    1.05 x the smallest feasible deadline and says so in ``Allocation.relaxed``.
    Shares are l = u / z rescaled to sum 1 (R increases in l, so this only helps). Every
    iterate is checked against the deadline and the energy budgets before it is accepted:
    an inaccurate solve that misses them ends the iterations at the last feasible point
    (``Allocation.status`` says so), so the returned allocation is always feasible.
    """
    relaxed = False
    try:
        k, r, share = feasible_start(system, k_min, r_min)
    except InfeasibleError:
        if not relax:
            raise
        system = replace(system, deadline_s=1.05 * min_deadline(system, k_min, r_min))
        relaxed = True
        k, r, share = feasible_start(system, k_min, r_min)
    bits0 = upload_bits(k, system.d_base, system.value_bits) / 1e6
    z = bits0 / (system.rates(share) / 1e6)
    v = np.sqrt(share * z)
    history = [objective(k, r, system, theta1, theta2)]
    sub = _subproblem(system.n, system.energy_budget_j is not None, k_min, r_min, r_max)
    W = system.bandwidth_hz / 1e6
    cpu_hz = system.state.cpu_hz
    sub.ainv.value, sub.lna.value = 1 / system.snr, np.log(system.snr)
    sub.A.value = system.compute_time(0.0)                                   # (12): tau_comp = A + B r
    sub.B.value = compute_seconds(system.batch * system.cycles_per_sample, cpu_hz, system.d_private,
                                  system.d_base + system.d_private)
    sub.tau.value = system.deadline_s
    sub.wk.value = theta2 * system.gamma
    if system.energy_budget_j is not None:                                   # (13) of A and B
        sub.eA.value, sub.eB.value = (cpu_energy(system.energy_coeff, cpu_hz, t) for t in (sub.A.value, sub.B.value))
        sub.p.value, sub.E.value = system.state.tx_power_w, np.asarray(system.energy_budget_j, float)
    share_best, status, it = share, "optimal", 0
    for it in range(1, max_iter + 1):
        slope = _upload_bits_slope(k, system.d_base, system.value_bits) / 1e6
        phi1 = -upload_bits(k, system.d_base, system.value_bits) / 1e6
        # (39b) / W:  lambda_1 / W <= phi_1(k_i) + grad phi_1(k_i) (k - k_i),  grad phi_1 = -S'
        sub.g.value = -slope / W
        sub.c.value = (phi1 + slope * k) / W
        sub.vi.value, sub.vi2.value = v, v ** 2
        sub.sr.value = theta1 * system.gamma / (2 * np.sqrt(1 - r))
        sol = sub.solve()
        if sol is None:
            status = "solver failed; kept the last iterate"
            break
        k_new, r_new, z_new, u_new, v_new = sol
        k_new, r_new = np.clip(k_new, k_min, 1.0), np.clip(r_new, r_min, r_max)
        f = objective(k_new, r_new, system, theta1, theta2)
        if f > history[-1] + 1e-6 * (1 + abs(history[-1])):
            # exact solves never raise (31a); an inaccurate one can: keep the last iterate
            status = f"stopped: an inaccurate solve raised the objective by {f - history[-1]:.2g}"
            break
        share_new = np.clip(u_new, 0, None) / np.clip(z_new, 1e-12, None)
        fit = _feasible(system, k_new, r_new, share_new / max(share_new.sum(), 1e-300), k_min) \
            if np.isfinite(share_new).all() and share_new.sum() > 0 else None
        if fit is None:
            status = f"stopped: iteration {it}'s solve misses the deadline; kept the last iterate"
            break
        step = max(np.abs(k_new - k).max(), np.abs(r_new - r).max())
        k, r, v = k_new, r_new, np.clip(v_new, 1e-12, None)
        share_best = fit[1]
        history.append(f)
        if step <= tol:
            break
    share = share_best
    k = _repair(system, k, r, share, k_min)
    return Allocation(k, r, share, objective(k, r, system, theta1, theta2), system.deadline_s, history, it,
                      relaxed, status)


def best_for_shares(system: RoundSystem, share, theta1: float, theta2: float = 1.0, *,
                    k_min: float = K_MIN, r_min: float = R_MIN, r_max: float = R_MAX, grid: int = 401):
    """Each client's best (k, r) for fixed shares: the per-client problem is 1-D in r.

    For a given r the best k is the largest that still meets the deadline (S increases in
    k); r is searched on a grid in sqrt(1 - r) (where the objective is linear) and refined
    once around the best point. Returns (k, r, per-client objective), ``inf`` where no (k, r)
    fits.
    """
    share = np.broadcast_to(np.asarray(share, float), (system.n,))
    rate = system.rates(share)[:, None]
    s_lo, s_hi = math.sqrt(1 - r_max), math.sqrt(1 - r_min)

    def evaluate(s):                                     # s: (N, G) values of sqrt(1 - r)
        r = 1 - s ** 2
        budget = rate * (system.deadline_s - system.compute_time(r.T).T)
        full = upload_bits(np.ones(s.shape), system.d_base, system.value_bits) <= budget
        k = np.where(full, 1.0, largest_k(system, budget, np.full(s.shape, k_min), np.ones(s.shape), 50))
        ok = upload_bits(np.full(s.shape, k_min), system.d_base, system.value_bits) <= budget
        f = np.where(ok, theta1 * s - theta2 * k, np.inf)
        return k, r, f

    s = np.tile(np.linspace(s_lo, s_hi, grid), (system.n, 1))
    k, r, f = evaluate(s)
    i = f.argmin(1)
    step = (s_hi - s_lo) / (grid - 1)
    centre = s[np.arange(system.n), i][:, None]
    s2 = np.clip(centre + np.linspace(-step, step, grid)[None, :], s_lo, s_hi)
    k2, r2, f2 = evaluate(s2)
    j = f2.argmin(1)
    rows = np.arange(system.n)
    return k2[rows, j], r2[rows, j], f2[rows, j]


def uniform_allocation(system: RoundSystem, theta1: float, theta2: float = 1.0, relax: bool = True,
                       **bounds) -> Allocation:
    """l_n = 1/N and each client's best (k, r) for it: the best uniform-bandwidth allocation.

    An infeasible deadline raises :class:`InfeasibleError` or (``relax=True``) is relaxed to
    1.05 x the smallest one equal shares allow at (k_min, r_min), as in :func:`solve_dca`.
    """
    share = np.full(system.n, 1 / system.n)
    k, r, f = best_for_shares(system, share, theta1, theta2, **bounds)
    relaxed = False
    if not np.all(np.isfinite(f)):
        if not relax:
            raise InfeasibleError(f"deadline {system.deadline_s:.4g} s is infeasible with equal bandwidth shares")
        k_min, r_min = bounds.get("k_min", K_MIN), bounds.get("r_min", R_MIN)
        floor = latency(k_min, r_min, share, system).max()
        system = replace(system, deadline_s=1.05 * float(floor))
        k, r, f = best_for_shares(system, share, theta1, theta2, **bounds)
        relaxed = True
    return Allocation(k, r, share, objective(k, r, system, theta1, theta2), system.deadline_s, relaxed=relaxed)


def grid_search(system: RoundSystem, theta1: float, theta2: float = 1.0, points: int = 101, **bounds) -> Allocation:
    """Brute force for N = 2 (or 3): a grid over the shares on the simplex, each client's best (k, r).

    The share grid is refined twice around the best point. Slow; for checking DCA only.
    """
    if system.n not in (2, 3):
        raise ConfigError(f"grid_search handles 2 or 3 clients, got {system.n}")

    def search(centre, width):
        axes = [np.clip(c + np.linspace(-width, width, points), 1e-6, 1) for c in centre[:-1]]
        best = (np.inf, None)
        for combo in np.stack(np.meshgrid(*axes), -1).reshape(-1, system.n - 1):
            last = 1 - combo.sum()
            if last <= 1e-6:
                continue
            share = np.append(combo, last)
            k, r, f = best_for_shares(system, share, theta1, theta2, grid=101, **bounds)
            value = float(np.sum(system.gamma * f))
            if value < best[0]:
                best = (value, (k, r, share))
        return best

    centre, width = np.full(system.n, 1 / system.n), 0.5
    f, point = search(centre, width)
    for _ in range(2):
        if point is None:
            break
        width = 4 * width / (points - 1)
        f2, point2 = search(point[2], width)
        if f2 <= f:
            f, point = f2, point2
    if point is None:
        raise InfeasibleError("no share on the grid meets the deadline")
    k, r, share = point
    return Allocation(k, r, share, objective(k, r, system, theta1, theta2), system.deadline_s)


def calibrate_deadline(cell: WirelessCell, mean_system: RoundSystem, position: float, seed: int,
                       draws: int = 30) -> float:
    """tau_max at ``position`` between the smallest feasible deadlines at (k_min, r_min) and
    at (1, 1) under the best shares, each the median over ``draws`` probe rounds (CPU speeds
    are redrawn every round, so the slowest client of a round, not the mean one, sets them)."""
    probe = np.random.default_rng([seed, STREAMS["cell"], 1])
    rounds = [mean_system.with_state(cell.draw(probe)) for _ in range(draws)]
    lo = np.median([min_deadline(s, K_MIN, R_MIN) for s in rounds])
    hi = np.median([min_deadline(s, 1.0, 1.0) for s in rounds])
    return float(lo + position * (hi - lo))
