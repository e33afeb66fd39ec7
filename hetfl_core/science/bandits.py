"""Upper-confidence-bound bandits: UCB1, UCB-V and FedLPS's continuum-armed P-UCBV.

* :class:`UCB1` (Auer, Cesa-Bianchi & Fischer, 2002) - finitely many arms, a Hoeffding radius;
* :class:`UCBV` (Audibert, Munos & Szepesvari, 2009) - the same with an empirical
  Bernstein radius, narrow where the rewards vary little;
* :class:`PUCBV` (FedLPS, Alg. 2) - one agent per client over a *continuum* of ratios:
  the arms are intervals, split at every pulled ratio (:meth:`PUCBV.split`: an interval
  whose ratio made accuracy fall loses its lower part, a "prompt" elimination).

Every agent draws from its own seeded :class:`numpy.random.Generator`, so a run repeats
exactly (the FedLPS authors' code explores with an unseeded generator).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .errors import ConfigError

__all__ = ["utility", "pucbv_reward", "UCB1", "UCBV", "Interval", "PUCBV", "bernstein_radius",
           "efficient_ucbv_radius", "index_coverage"]


def utility(accuracy: float) -> float:
    """U(x) = 10 - 20 / (1 + exp(0.35 x)) = 10 tanh(0.175 x) (FedLPS, after Eq. 15).

    ``accuracy`` is a fraction in [0, 1], where U is nearly linear (slope 1.75); in
    percent U saturates above about 15 and every reward vanishes.
    """
    return 10.0 - 20.0 / (1.0 + math.exp(0.35 * accuracy))


def pucbv_reward(accuracy: float, previous_accuracy: float, cost_s: float) -> float:
    """Eq. (15): G(s) = (U(a^r) - U(a^{r-1})) / T^r, accuracy gain in utility per second of local cost."""
    if cost_s <= 0:
        raise ConfigError(f"local cost must be > 0 seconds, got {cost_s}")
    return (utility(accuracy) - utility(previous_accuracy)) / cost_s


def bernstein_radius(variance, pulls, x: float, reward_range: float = 1.0):
    """The empirical Bernstein radius sqrt(2 v x / h) + 3 b x / h (Audibert, Munos &
    Szepesvari 2009, Thm. 1): for h i.i.d. rewards in a range of width b with empirical
    (1/h) variance v, the mean lies within it of the empirical mean w.p. >= 1 - 3 e^-x."""
    pulls = np.asarray(pulls, float)
    return np.sqrt(2 * np.asarray(variance) * x / pulls) + 3 * reward_range * x / pulls


def efficient_ucbv_radius(variance, pulls, log_term: float, rho: float = 0.5):
    """The bonus of FedLPS's Eq. (17): sqrt(rho (v + 2) log_term / (4 (h + 1))), where
    ``log_term`` is max(log(xi psi eps), 0)."""
    return np.sqrt(rho * (np.asarray(variance) + 2) * max(log_term, 0.0)
                   / (4 * (np.asarray(pulls, float) + 1)))


def index_coverage(pulls: int, x: float, log_term: float, streams: int = 20_000,
                   rho: float = 0.5, seed: int = 0,
                   concentrations: tuple[float, ...] = (1.0, 10.0, 100.0)) -> dict[str, float]:
    """How often an upper confidence index lies at or above the true mean, on ``streams``
    simulated Beta reward streams in [0, 1] (means uniform in [0.05, 0.95], concentrations
    drawn from ``concentrations``: 1, 10 or 100 give variances from 1e-3 to 0.23, 0.1
    near-Bernoulli streams), each pulled ``pulls`` times. Returns each index's coverage by
    name: the empirical mean alone, Hoeffding (sqrt(2 x / h)), the empirical Bernstein index
    at level ``x`` (guaranteed >= 1 - 3 e^-x) whole and without its variance or its range
    term, and Eq. (17)'s with ``log_term``."""
    if pulls < 1 or x <= 0 or streams < 1 or not concentrations:
        raise ConfigError(f"need pulls >= 1, x > 0, streams >= 1 and a concentration, got "
                          f"{pulls}, {x}, {streams}, {concentrations}")
    rng = np.random.default_rng(seed)
    mean = rng.uniform(0.05, 0.95, streams)
    conc = rng.choice(np.asarray(concentrations, float), streams)
    rewards = rng.beta(mean[:, None] * conc[:, None], (1 - mean[:, None]) * conc[:, None],
                       (streams, pulls))
    g, v = rewards.mean(1), rewards.var(1)
    covered = {"empirical mean": g,
               "Hoeffding (UCB1)": g + np.sqrt(2 * x / pulls),
               "empirical Bernstein (UCB-V)": g + bernstein_radius(v, pulls, x),
               "UCB-V, no variance term": g + bernstein_radius(0.0, pulls, x),
               "UCB-V, no range term": g + np.sqrt(2 * v * x / pulls),
               "Eq. (17)": g + efficient_ucbv_radius(v, pulls, log_term, rho)}
    return {name: float(np.mean(index >= mean)) for name, index in covered.items()}


def _argmax(rng: np.random.Generator, values) -> int:
    values = np.asarray(values)
    return int(rng.choice(np.flatnonzero(values == values.max())))


class UCB1:
    """UCB1 over ``n_arms`` arms: pull each arm once, then argmax of ``g_i + sqrt(2 ln t / h_i)``."""

    def __init__(self, n_arms: int, seed: int | None = 0):
        if n_arms < 1:
            raise ConfigError(f"n_arms must be >= 1, got {n_arms}")
        self.rewards: list[list[float]] = [[] for _ in range(n_arms)]
        self.rng = np.random.default_rng(seed)

    @property
    def t(self) -> int:
        """Pulls so far."""
        return sum(len(r) for r in self.rewards)

    def radius(self, arm: int) -> float:
        """Hoeffding radius for rewards in [0, 1]."""
        return math.sqrt(2 * math.log(max(self.t, 1)) / len(self.rewards[arm]))

    def index(self, arm: int) -> float:
        """The arm's upper confidence bound (infinite before its first pull)."""
        return float(np.mean(self.rewards[arm])) + self.radius(arm) if self.rewards[arm] else math.inf

    def select(self) -> int:
        """The arm of largest index; ties broken at random (seeded)."""
        return _argmax(self.rng, [self.index(i) for i in range(len(self.rewards))])

    def update(self, arm: int, reward: float) -> None:
        self.rewards[arm].append(float(reward))


class UCBV(UCB1):
    """UCB-V: UCB1 with :func:`bernstein_radius` at x = ln t, b = ``reward_range``. When the
    arm's variance is small the radius shrinks like ``1/h_i`` instead of ``1/sqrt(h_i)``, so a
    low-variance arm is settled with fewer pulls."""

    def __init__(self, n_arms: int, reward_range: float = 1.0, seed: int | None = 0):
        super().__init__(n_arms, seed)
        self.reward_range = float(reward_range)

    def radius(self, arm: int) -> float:
        return float(bernstein_radius(float(np.var(self.rewards[arm])), len(self.rewards[arm]),
                                      math.log(max(self.t, 1)), self.reward_range))


@dataclass
class Interval:
    """An interval arm [lo, hi) of ratios with the rewards credited to it."""

    lo: float
    hi: float
    rewards: list = field(default_factory=list)

    @property
    def pulls(self) -> int:
        """h^i: how often the interval (or the interval it was split from) was credited."""
        return len(self.rewards)

    def mean(self) -> float:
        """Eq. (16): g^i = (1/h^i) sum_l G_l (0 with no reward yet)."""
        return float(np.mean(self.rewards)) if self.rewards else 0.0

    def variance(self) -> float:
        """v^i = (1/h^i) sum_l (G_l - g^i)^2 (0 with no reward yet)."""
        return float(np.var(self.rewards)) if self.rewards else 0.0

    def __contains__(self, s: float) -> bool:
        return self.lo <= s < self.hi


class PUCBV:
    """FedLPS's P-UCBV agent (Alg. 2) for one client, over ratios in [``low``, ``high``).

    ``horizon`` is xi = R / (K eps), the rounds per selected-client slot (Alg. 2, line 1);
    ``rho`` the Efficient-UCBV constant; ``delta`` the elimination threshold on the change
    of training accuracy (fractions: -0.05 is a drop of 5 points). ``explore`` adds the
    authors' code's epsilon-greedy step (a random interval with probability 1/n at the
    n-th update); off by default, as in the paper.
    """

    def __init__(self, low: float = 0.5, high: float = 1.0, n_intervals: int = 5, horizon: float = 10.0,
                 rho: float = 0.5, delta: float = -0.05, explore: bool = False, seed: int | None = 0):
        if not 0 <= low < high <= 1:
            raise ConfigError(f"ratio range must satisfy 0 <= low < high <= 1, got [{low}, {high})")
        if n_intervals < 1:
            raise ConfigError(f"n_intervals must be >= 1, got {n_intervals}")
        if horizon <= 0 or rho <= 0:
            raise ConfigError(f"horizon and rho must be > 0, got {horizon} and {rho}")
        edges = np.linspace(low, high, n_intervals + 1)
        self.intervals = [Interval(float(a), float(b)) for a, b in zip(edges[:-1], edges[1:])]
        self.horizon, self.rho, self.delta, self.explore = float(horizon), float(rho), float(delta), explore
        self.eps = 1.0   # epsilon_r of Alg. 2, halved at every update
        self.updates = 0
        self.rng = np.random.default_rng(seed)

    def first_ratio(self) -> float:
        """s^0: uniform in a uniformly chosen initial interval (Alg. 2, Initialize)."""
        return self.sample(self.intervals[int(self.rng.integers(len(self.intervals)))])

    def sample(self, interval: Interval) -> float:
        """A point drawn uniformly from ``interval``."""
        return float(self.rng.uniform(interval.lo, interval.hi))

    def find(self, s: float) -> int:
        """Position of the interval holding ``s`` (the top end belongs to the last interval)."""
        for i, interval in enumerate(self.intervals):
            if s in interval or (i == len(self.intervals) - 1 and s == interval.hi):
                return i
        raise ConfigError(f"ratio {s} lies in no remaining interval "
                          f"{[(round(i.lo, 4), round(i.hi, 4)) for i in self.intervals]}")

    def split(self, s: float, eliminate: bool) -> list[Interval]:
        """Alg. 2 lines 1-5: split the interval holding ``s`` into S' = [lo, s) and S'' = [s, hi),
        both inheriting its rewards; drop S' when ``eliminate``. Returns the intervals to credit."""
        i = self.find(s)
        u = self.intervals[i]
        left, right = Interval(u.lo, s, list(u.rewards)), Interval(s, u.hi, list(u.rewards))
        parts = [p for p in ([right] if eliminate else [left, right]) if p.hi > p.lo]
        self.intervals[i:i + 1] = parts
        return parts

    def log_term(self) -> float:
        """max(log(xi psi eps), 0) of Eq. (17), with psi = xi / I^2 (Alg. 2, lines 6-7)."""
        psi = self.horizon / len(self.intervals) ** 2
        return max(math.log(self.horizon * psi * self.eps), 0.0)

    def index(self, interval: Interval) -> float:
        """Eq. (17): g + sqrt(rho (v + 2) log(xi psi eps) / (4 (h + 1)))."""
        return interval.mean() + float(efficient_ucbv_radius(interval.variance(), interval.pulls,
                                                             self.log_term(), self.rho))

    def update(self, s: float, reward: float, accuracy_change: float) -> float:
        """Alg. 2: credit ``reward`` (Eq. 15) to the ratio ``s`` just used; return the next ratio.
        ``accuracy_change`` (a^r - a^{r-1}) below ``delta`` eliminates the ratios under ``s``."""
        credited = self.split(s, eliminate=accuracy_change < self.delta)
        self.eps /= 2
        self.updates += 1
        for part in credited:
            part.rewards.append(float(reward))
        if self.explore and self.rng.random() < 1 / self.updates:
            chosen = self.intervals[int(self.rng.integers(len(self.intervals)))]
        else:
            chosen = self.intervals[_argmax(self.rng, [self.index(p) for p in self.intervals])]
        return self.sample(chosen)
