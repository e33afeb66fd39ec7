"""P-UCBV (FedLPS Alg. 2), UCB1 and UCB-V against hand-worked cases."""
import math

import numpy as np
import pytest

from hetfl_core.science.bandits import (PUCBV, UCB1, UCBV, bernstein_radius, efficient_ucbv_radius,
                                        index_coverage, pucbv_reward, utility)
from hetfl_core.science.errors import ConfigError


def spans(agent):
    return [(round(i.lo, 6), round(i.hi, 6)) for i in agent.intervals]


def test_utility_is_ten_tanh():
    for x in (0.0, 0.3, 1.0, 20.0):
        assert utility(x) == pytest.approx(10 * math.tanh(0.175 * x))
    # Eq. (15): the gain in utility per second of local cost
    assert pucbv_reward(0.6, 0.4, 2.0) == pytest.approx((utility(0.6) - utility(0.4)) / 2)
    with pytest.raises(ConfigError):
        pucbv_reward(0.6, 0.4, 0.0)


def test_split_credits_both_parts_and_keeps_a_partition():
    agent = PUCBV(0.5, 1.0, n_intervals=5, horizon=40, seed=0)
    assert spans(agent) == [(0.5, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.0)]
    agent.update(0.75, reward=1.0, accuracy_change=0.02)   # accuracy rose: no elimination
    assert spans(agent) == [(0.5, 0.6), (0.6, 0.7), (0.7, 0.75), (0.75, 0.8), (0.8, 0.9), (0.9, 1.0)]
    assert [i.rewards for i in agent.intervals] == [[], [], [1.0], [1.0], [], []]
    # the intervals still partition [0.5, 1): contiguous, no overlap
    assert all(a.hi == b.lo for a, b in zip(agent.intervals, agent.intervals[1:]))


def test_accuracy_drop_eliminates_the_lower_part():
    agent = PUCBV(0.5, 1.0, n_intervals=5, horizon=40, delta=-0.05, seed=0)
    agent.update(0.75, reward=1.0, accuracy_change=0.02)
    agent.update(0.62, reward=0.5, accuracy_change=-0.10)   # a 10-point drop at s = 0.62
    assert spans(agent) == [(0.5, 0.6), (0.62, 0.7), (0.7, 0.75), (0.75, 0.8), (0.8, 0.9), (0.9, 1.0)]
    assert agent.intervals[1].rewards == [0.5]
    with pytest.raises(ConfigError, match="no remaining interval"):
        agent.find(0.61)
    # a drop smaller than |delta| eliminates nothing
    agent.update(0.85, reward=0.1, accuracy_change=-0.04)
    assert (0.8, 0.85) in spans(agent)


def test_index_matches_eq17_by_hand():
    agent = PUCBV(0.5, 1.0, n_intervals=5, horizon=40, rho=0.5, seed=0)
    agent.update(0.75, reward=1.0, accuracy_change=0.02)
    nxt = agent.update(0.62, reward=0.5, accuracy_change=-0.10)
    # two updates: eps = 1/4; I = 6 intervals; psi = xi / I^2; log(xi psi eps) = log(1600 / 36 / 4)
    log_term = math.log(40 * (40 / 36) * 0.25)
    assert agent.log_term() == pytest.approx(log_term)
    one_reward = 1.0 + math.sqrt(0.5 * (0 + 2) * log_term / (4 * 2))   # g = 1, v = 0, h = 1
    empty = math.sqrt(0.5 * 2 * log_term / 4)                         # g = v = 0, h = 0
    assert agent.index(agent.intervals[2]) == pytest.approx(one_reward)
    assert agent.index(agent.intervals[0]) == pytest.approx(empty)
    # the variance term: rewards 0 and 1 give g = 0.5, v = 0.25 (the 1/h variance), h = 2
    agent.intervals[4].rewards = [0.0, 1.0]
    assert agent.index(agent.intervals[4]) == pytest.approx(0.5 + math.sqrt(0.5 * 2.25 * log_term / 12))
    # the best index was one of the two intervals credited with reward 1
    assert 0.7 <= nxt < 0.8


def test_bonus_vanishes_once_log_term_is_negative():
    agent = PUCBV(0.5, 1.0, n_intervals=5, horizon=5, seed=0)
    agent.update(0.55, reward=0.2, accuracy_change=0.0)
    assert agent.log_term() == 0.0            # log(5 * 5/36 * 1/2) < 0
    assert agent.index(agent.intervals[0]) == pytest.approx(0.2)


def test_agent_is_seeded():
    a, b = PUCBV(seed=[3, 1]), PUCBV(seed=[3, 1])
    assert a.first_ratio() == b.first_ratio()
    assert a.update(0.7, 0.3, 0.0) == b.update(0.7, 0.3, 0.0)


def test_agent_settles_on_the_better_region():
    """Rewards peak at s = 0.8: after 60 pulls most proposals lie near it."""
    rng = np.random.default_rng(0)
    agent = PUCBV(0.5, 1.0, n_intervals=5, horizon=60, seed=1)
    s, late = agent.first_ratio(), []
    for t in range(60):
        reward = 1 - 4 * abs(s - 0.8) + 0.05 * rng.standard_normal()
        s = agent.update(s, reward, 0.0)
        if t >= 30:
            late.append(s)
    assert np.mean(np.abs(np.array(late) - 0.8) < 0.1) >= 0.7


@pytest.mark.parametrize("cls", [UCB1, UCBV])
def test_discrete_bandits_prefer_the_better_arm(cls):
    rng = np.random.default_rng(0)
    bandit = cls(2, seed=0)
    for _ in range(200):
        arm = bandit.select()
        bandit.update(arm, float(rng.random() < (0.8 if arm == 1 else 0.4)))
    pulls = [len(r) for r in bandit.rewards]
    assert pulls[1] > 2 * pulls[0]


def test_ucbv_radius_shrinks_with_low_variance():
    ucb1, ucbv = UCB1(2, seed=0), UCBV(2, reward_range=1.0, seed=0)
    for b in (ucb1, ucbv):
        for _ in range(50):
            b.update(0, 0.5)   # constant rewards: zero variance
        b.update(1, 0.5)
    # UCB-V's radius for arm 0 is 3 b ln t / h, UCB1's sqrt(2 ln t / h)
    log_t = math.log(51)
    assert ucbv.radius(0) == pytest.approx(3 * log_t / 50)
    assert ucb1.radius(0) == pytest.approx(math.sqrt(2 * log_t / 50))
    assert ucbv.radius(0) < ucb1.radius(0)


def test_bad_arguments_fail():
    with pytest.raises(ConfigError):
        PUCBV(0.8, 0.5)
    with pytest.raises(ConfigError):
        UCB1(0)


def test_radii_by_hand():
    assert bernstein_radius(0.25, 4, 2.0) == pytest.approx(math.sqrt(2 * 0.25 * 2 / 4) + 1.5)
    assert efficient_ucbv_radius(0.0, 3, 2.0, rho=0.5) == pytest.approx(math.sqrt(0.5 * 2 * 2 / 16))
    assert efficient_ucbv_radius(0.3, 3, -1.0) == 0.0           # the clipped log


def test_empirical_bernstein_covers_at_its_guarantee_and_the_mean_alone_does_not():
    for x, pulls in ((1.0, 10), (2.0, 50)):
        cov = index_coverage(pulls, x, log_term=0.0, streams=4000)
        assert cov["empirical Bernstein (UCB-V)"] >= 1 - 3 * math.exp(-x)
        assert 0.4 < cov["empirical mean"] < 0.6
        assert cov["Eq. (17)"] == cov["empirical mean"]          # zero bonus: greedy
    assert index_coverage(10, 1.0, log_term=1.0, streams=4000)["Eq. (17)"] > 0.9
    with pytest.raises(ConfigError):
        index_coverage(0, 1.0, 0.0)


def test_coverage_check_discriminates_at_x_ln30():
    """At x = ln 30 (guarantee 0.9) the full empirical Bernstein index covers, and each
    index with one term removed misses: the range term at few pulls, the variance term
    at many pulls of near-Bernoulli streams."""
    x = math.log(30)
    few = index_coverage(2, x, 0.0, streams=4000)
    many = index_coverage(1000, x, 0.0, streams=2000, concentrations=(0.1,))
    for cov in (few, many):
        assert cov["empirical Bernstein (UCB-V)"] >= 0.9
    assert few["UCB-V, no range term"] < 0.9 < few["UCB-V, no variance term"]
    assert many["UCB-V, no variance term"] < 0.9 < many["UCB-V, no range term"]
