"""The foundations and baselines chapters' machinery (hetfl_core.chapters.foundations and
.baselines): closed forms against iteration, hand-worked costs, and the summaries on
made-up histories (no training)."""
import numpy as np
import pytest

from hetfl_core import RunConfig, data as hd, models, system
from hetfl_core.chapters import baselines as base_ch
from hetfl_core.chapters import foundations as ch

A, C, P = np.array([0.5, 1.0, 2.0]), np.array([-2.0, 0.5, 3.0]), np.array([0.2, 0.3, 0.5])


@pytest.mark.parametrize("steps", [1, 2, 5, 20])
def test_fedavg_fixed_point_matches_its_closed_form(steps):
    assert ch.fedavg_fixed_point(A, C, P, 0.3, steps) == pytest.approx(
        ch.fedavg_fixed_point_formula(A, C, P, 0.3, steps), abs=1e-9)


def test_one_local_step_finds_the_minimiser_and_many_drift_to_the_mean():
    optimum = (P * A * C).sum() / (P * A).sum()
    assert ch.fedavg_fixed_point_formula(A, C, P, 0.3, 1) == pytest.approx(optimum)
    drifted = ch.fedavg_fixed_point_formula(A, C, P, 0.3, 200)
    assert drifted == pytest.approx((P * C).sum(), abs=1e-6)
    assert abs(drifted - optimum) > 0.1


@pytest.mark.parametrize("mu", [0.01, 1.0, 100.0])
def test_fedprox_fixed_point_matches_its_closed_form(mu):
    assert ch.fedprox_fixed_point(A, C, P, mu) == pytest.approx(
        ch.fedprox_fixed_point_formula(A, C, P, mu), abs=1e-6)


def test_fedprox_fixed_point_limits():
    optimum = (P * A * C).sum() / (P * A).sum()
    assert ch.fedprox_fixed_point_formula(A, C, P, 1e6) == pytest.approx(optimum, abs=1e-4)
    assert ch.fedprox_fixed_point_formula(A, C, P, 1e-8) == pytest.approx((P * C).sum(), abs=1e-6)


def test_partition_summary_by_hand():
    counts = np.array([[50, 50, 0, 0], [97, 1, 1, 1], [10, 10, 10, 10]])
    held, smallest, largest = ch.partition_summary(counts)
    assert held == pytest.approx((2 + 1 + 4) / 3)
    assert (smallest, largest) == (40, 100)


def test_skewed_dirichlet_partition_is_disjoint_and_skewed():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), 200)
    parts = ch.skewed_dirichlet_partition(labels, 0.5, 0.5, 20, rng)
    everything = np.concatenate(parts)
    assert len(everything) == len(set(everything.tolist())) <= len(labels)
    sizes = np.array([len(p) for p in parts])
    assert sizes.min() >= 1 and sizes.max() > 3 * sizes.min()
    counts = hd.class_counts(labels, parts, 10)
    assert (counts > 0).sum(1).mean() < 10          # label skew kept


def test_lenet5_costs_match_the_hand_count_of_the_exercise():
    lenet = models.build_model("lenet5", (1, 28, 28), 10)
    costs = system.profile_model(lenet, (1, 28, 28))
    assert [l.macs for l in costs] == [117_600, 240_000, 48_000, 10_080, 840]
    assert system.training_flops(costs, 1) == 2_263_920
    half = {l.name: 0.5 for l in costs[:-1]}
    assert system.training_flops(costs, 1, keep=half) == 684_840


def row(t, acc, clients, idle=0.0):
    return {"round": t, "acc_global": acc, "acc_personal": acc, "time_s": 10.0 * t,
            "round_time_s": max(c["time_s"] for c in clients), "idle_s": idle,
            "uplink_bits": 8e6 * t, "downlink_bits": 8e6 * t, "flops": 1e9 * t,
            "clients": clients}


def client(tier, time, steps=3):
    return {"tier": tier, "time_s": time, "local_steps": steps}


def fake(partition, acc, n_clients=2, steps=3):
    clients = [client("high", 1.0, steps), client("low", 4.0, steps)][:n_clients]
    return {"config": {"partition": partition, "clients": n_clients},
            "history": [row(1, acc / 2, clients), row(2, acc, clients, idle=3.0)]}


def test_run_grid_and_the_accuracy_summary():
    base = RunConfig(dataset="digits", model="cnn", clients=4, rounds=2)
    grid = ch.run_grid(base, [0, 1], 0.1)
    assert len(grid) == 3 * 2 + 2 + 1
    assert grid[("central", "fedavg", 0)].clients == 1
    assert grid[("dirichlet", "fedprox", 1)].options["mu"] == 0.1
    results = {("central", "fedavg", 0): fake("iid", 0.9, 1, steps=10)}
    for s in (0, 1):
        results.update({("iid", "fedavg", s): fake("iid", 0.8),
                        ("shards", "fedavg", s): fake("shards", 0.5),
                        ("dirichlet", "fedavg", s): fake("dirichlet", 0.7),
                        ("dirichlet", "fedprox", s): fake("dirichlet", 0.72)})
    assert ch.sequential_steps(results[("central", "fedavg", 0)]) == 20
    text = "\n".join(ch.accuracy_summary(results, 0.1))
    assert "order by mean global accuracy: iid > dirichlet > shards" in text
    assert "90.0%" in text and "2.00, 2.00 points" in text


def test_straggler_summary_compares_tiers_with_their_nominal_speed():
    r = row(1, 0.5, [client("high", 1.0), client("high", 1.0), client("low", 5.0)], idle=8.0)
    assert {k: list(v) for k, v in ch.tier_times(r).items()} == {"high": [1.0, 1.0], "low": [5.0]}
    text = "\n".join(ch.straggler_summary(r, "medium"))
    assert "slowest/fastest client = 5.0x" in text
    assert "tier low  : mean 5.00 s = 5.0x the high tier (slower by 4.0x" in text
    assert "53% of the clients' time" in text          # 8 of 3 * 5 client-seconds


def test_baselines_grid_table_and_orderings():
    methods = base_ch.family_methods()
    assert methods[0] == "fedavg" and set(methods) <= set(base_ch.METHODS)
    base = RunConfig(dataset="digits", model="cnn", clients=4, rounds=2)
    grid = base_ch.run_grid(base, methods, 0, [0, 1, 2])
    assert len(grid) == 2 * len(methods) + 2 * sum(len(ms) for ms in base_ch.CLAIM_RUNS.values())
    accs = {"fedavg": 0.5, "fedrolex": 0.6, "heterofl": 0.62, "fedper": 0.8, "fedrep": 0.45}
    results = {key: fake(key[0], accs.get(key[1], 0.55) + 0.01 * key[2]) for key in grid}
    results[("dirichlet(0.5)", "fedrolex", 1)] = fake("dirichlet", 0.7)
    lines = base_ch.ordering_lines(results, [0, 1, 2])
    # gaps -2, +7, -2 points: the interval straddles 0; +30 on every seed; -5 on every seed
    assert "fedrolex >= heterofl on 1 of 3 seeds (inconclusive)" in lines[0]
    assert "(holds)" in lines[1] and "(fails)" in lines[2]
    assert "(indicative)" in base_ch.ordering_lines(results, [0, 1])[0]
    rows = base_ch.results_rows(results, methods, 0)
    assert len(rows) == len(methods) and all(len(r) == len(base_ch.RESULTS_HEADER) for r in rows)
    gaps = "\n".join(base_ch.family_gaps(results, methods, 0))
    assert "to 30.0 points (fedper)" in gaps and "1.00x FedAvg's simulated time" in gaps


def test_the_partition_exercise_shows_the_library_function():
    import json
    from pathlib import Path

    from hetfl_core.report import source_text

    book = Path(__file__).resolve().parents[1] / "book" / "foundations.md"
    text = book.read_text()
    assert source_text(ch.skewed_dirichlet_partition).strip() in text
