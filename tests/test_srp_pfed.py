"""SRP-pFed: the reinforced-memory walk, masks, fusion, upload and aggregation by hand,
and the paper's qualitative claims at a small fixed scale."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hetfl_core import ConfigError, RunConfig, run
from hetfl_core.runtime.engine import build_simulation
from hetfl_core.science.partial_update import fuse, mask_size, masked_aggregate, update_rate_mask
from hetfl_core.science.reinforced_walk import ReinforcedRateWalk, inclusion_probabilities, rate_grid, reinforcement
from hetfl_core.science.system import dense_bits, sparse_bits

ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- the walk

def test_grid_and_reinforcement_by_hand():
    assert rate_grid(4) == [0.25, 0.5, 0.75, 1.0]
    assert reinforcement(0.0) == 0.5
    assert reinforcement(1.0) == pytest.approx(1 - 1 / (1 + math.exp(-1.0)))
    assert reinforcement(1e4) == 0.0


def test_memory_update_matches_eq6_by_hand():
    walk = ReinforcedRateWalk(rate_grid(4), k=2, decay=0.9)
    assert np.allclose(walk.probs(), 0.25)
    # two clients, losses 0.5 and 1.5 on 1 and 3 samples: L = (0.5 + 4.5) / 4 = 1.25
    bonus = walk.update([1, 3], [0.5, 1.5], [1, 3], chosen=[1, 1])
    b = 1 / (1 + math.exp(1.25))
    assert bonus == pytest.approx({1: b, 3: b})
    assert np.allclose(walk.memory, [0.9, 0.9 + b, 0.9, 0.9 + b])
    assert np.allclose(walk.probs(), np.array([0.9, 0.9 + b, 0.9, 0.9 + b]) / (3.6 + 2 * b))
    # literal sum: L = 2.0; per-rate credit: rate 3 was chosen by nobody and gets nothing
    literal = ReinforcedRateWalk(rate_grid(4), k=2, decay=0.5, loss_agg="sum")
    literal.update([0, 2], [0.5, 1.5], [1, 3])
    assert np.allclose(literal.memory, [0.5 + 1 / (1 + math.e ** 2), 0.5, 0.5 + 1 / (1 + math.e ** 2), 0.5])
    per_rate = ReinforcedRateWalk(rate_grid(4), k=2, decay=0.9, credit="per_rate")
    bonus = per_rate.update([1, 3], [0.5, 1.5], [1, 3], chosen=[1, 1])
    assert bonus == pytest.approx({1: reinforcement(1.25)})


def test_inclusion_probabilities_by_hand():
    pi = [0.1, 0.2, 0.3, 0.4]
    # successive sampling, K = 2: P[x] = pi_x + sum_{y != x} pi_y pi_x / (1 - pi_y)
    hand = [p + sum(q * p / (1 - q) for j, q in enumerate(pi) if j != i) for i, p in enumerate(pi)]
    assert np.allclose(inclusion_probabilities(pi, 2), hand)
    assert inclusion_probabilities(pi, 2).sum() == pytest.approx(2.0)
    assert np.allclose(inclusion_probabilities(pi, 2, replacement=True), 1 - (1 - np.array(pi)) ** 2)
    assert np.allclose(inclusion_probabilities(pi, 4), 1.0)


@pytest.mark.parametrize("k,replacement", [(1, False), (2, False), (2, True)])
def test_sampling_frequencies_match_the_probabilities(k, replacement):
    walk = ReinforcedRateWalk(rate_grid(4), k=k, replacement=replacement)
    walk.memory = np.array([1.0, 2.0, 3.0, 4.0])
    rng = np.random.default_rng(0)
    n = 10_000
    counts = np.zeros(4)
    for _ in range(n):
        draw = walk.sample(rng)
        assert draw == sorted(set(draw)) and (len(draw) == k or replacement)
        counts[draw] += 1
    expected = inclusion_probabilities(walk.probs(), k, replacement) * n
    # each count is binomial: 4 standard deviations
    assert np.all(np.abs(counts - expected) < 4 * np.sqrt(expected * (1 - expected / n)))


def test_rd_is_uniform_and_fixed_is_fixed():
    rd = ReinforcedRateWalk(rate_grid(5), k=2, mode="rd")
    rd.update([0, 1], [0.1], [1])
    assert np.allclose(rd.probs(), 0.2)
    fixed = ReinforcedRateWalk(rate_grid(10), k=1, mode="fixed", fixed=[0.7, 0.3])
    assert fixed.sample(np.random.default_rng(0)) == [2, 6]


@pytest.mark.parametrize("kwargs,needle", [
    (dict(k=5), "k must be"), (dict(decay=1.0), "decay"), (dict(mode="x"), "mode"),
    (dict(loss_agg="max"), "loss_agg"), (dict(mode="fixed", fixed=[0.33]), "fixed rates"),
])
def test_walk_rejects_bad_settings(kwargs, needle):
    with pytest.raises(ConfigError, match=needle):
        ReinforcedRateWalk(rate_grid(4), **kwargs)


# --------------------------------------------------------------------------- masks, fusion, aggregation

def random_weights(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"a.weight": torch.randn(4, 5, generator=g), "a.bias": torch.randn(4, generator=g),
            "b.weight": torch.randn(3, 4, generator=g)}


def test_mask_shares_the_smallest_magnitudes_and_is_nested():
    w = random_weights()
    flat = torch.cat([t.flatten() for t in w.values()]).abs()
    d = flat.numel()
    previous = None
    for p in (0.1, 0.3, 0.5, 1.0):
        m = update_rate_mask(w, p)
        assert mask_size(m) == round(p * d)
        shared = torch.cat([t.flatten() for t in m.values()]).bool()
        if not shared.all():
            assert flat[shared].max() <= flat[~shared].min()  # the largest |w| stay personal
        if previous is not None:
            assert torch.all(shared >= previous)  # nested in p
        previous = shared
    reverse = torch.cat([t.flatten() for t in update_rate_mask(w, 0.3, personal="smallest").values()]).bool()
    assert flat[reverse].min() >= flat[~reverse].max()
    layer = update_rate_mask(w, 0.5, scope="layer")
    assert all(int(m.sum()) == round(0.5 * m.numel()) for m in layer.values())


@pytest.mark.parametrize("personal", ["largest", "smallest"])
def test_mask_without_sorting_equals_the_stable_sort_on_ties(personal):
    """The k-th-value mask keeps exactly the entries a stable sort of |w| puts first: ties
    (rounded weights, a block of zeros, a -0.0) broken by position, and a NaN sorted."""
    from hetfl_core.science.partial_update import _ranked_mask, _sorted_mask
    g = torch.Generator().manual_seed(3)
    for trial in range(12):
        flat = torch.round(torch.randn(5000, generator=g) * 4) / 4
        flat[: 1000 * (trial % 3)] = 0.0
        flat[7] = -0.0
        if trial == 11:
            flat[100] = float("nan")
        for p in (0.01, 0.3, 0.5, 0.77, 0.9999, 1.0):
            k = max(1, round(p * flat.numel()))
            want = _sorted_mask(flat, k, personal) if k < flat.numel() else torch.ones_like(flat)
            assert torch.equal(_ranked_mask(flat, p, personal), want), (trial, p)


def test_fusion_is_m_wg_plus_one_minus_m_wi():
    w_g, w_i = random_weights(1), random_weights(2)
    m = update_rate_mask(w_i, 0.4)
    fused = fuse(w_g, w_i, m)
    for n in w_g:
        assert torch.equal(fused[n], torch.where(m[n].bool(), w_g[n], w_i[n]))


def test_aggregation_by_hand():
    old = {"w": torch.tensor([1.0, 2.0, 3.0])}
    uploads = [(1, {"w": torch.tensor([1.0, 1.0, 0.0])}, {"w": torch.tensor([10.0, 20.0, 0.0])}),
               (3, {"w": torch.tensor([1.0, 0.0, 0.0])}, {"w": torch.tensor([30.0, 0.0, 0.0])})]
    element = masked_aggregate(old, uploads)["w"]
    assert torch.allclose(element, torch.tensor([(10 + 90) / 4, 20.0, 3.0]))  # uncovered keeps its value
    literal = masked_aggregate(old, uploads, "paper_eq4")["w"]
    assert torch.allclose(literal, torch.tensor([25.0, 20 / 4, 0.0]))  # shrinks and zeroes


# --------------------------------------------------------------------------- the method

def srp_config(**changes):
    base = RunConfig(method="srp-pfed", dataset="digits", model="cnn", partition="shards", clients=4, rounds=1,
                     val_fraction=0.15, local_steps=3)
    return base.replace(**changes)


def one_round(config, rounds=1):
    sim = build_simulation(config)
    ids = list(range(config.clients))
    for t in range(1, rounds + 1):
        before = {n: p.detach().clone() for n, p in sim.method.model.named_parameters()}
        sim.round(t, clients=ids, evaluate=False)
    return sim, before, sim.reports


def test_round_one_every_client_picks_the_same_rate():
    sim, _, reports = one_round(srp_config())
    rates = [r.extra["rate"] for r in reports]
    assert len(set(rates)) == 1 and rates[0] == min(sim.method.walk.rates[x] for x in sim.method.sampled)
    assert all(r.extra["cluster"] == 0 for r in reports)


def test_clustered_model_is_the_fusion_and_upload_holds_exactly_the_masked_entries():
    sim, before, reports = one_round(srp_config(), rounds=2)
    method = sim.method
    client = sim.data.clients[0]
    w_g, w_i = method.global_weights(), method.local_weights(0)
    rates = [method.walk.rates[x] for x in method.sampled]
    model, mask, rate, _ = method.client_cluster(client, rates, w_i)
    assert torch.equal(mask["fc1.weight"], update_rate_mask(w_i, rate)["fc1.weight"])
    for n, p in model.named_parameters():
        assert torch.equal(p.detach(), mask[n] * w_g[n] + (1 - mask[n]) * w_i[n])
    for r in reports:
        sent_mask, values = r.held, r.weights
        nnz = mask_size(sent_mask)
        local = method.local[r.client_id]
        for n in values:
            assert torch.equal(values[n], local[n] * sent_mask[n])  # masked entries, nothing else
        assert nnz == round(r.extra["rate"] * method.d) and r.ratio == nnz / method.d
        assert r.uplink_bits == sparse_bits(nnz, method.d) < dense_bits(method.d)
        assert r.downlink_bits == dense_bits(method.d + len(rates))


def test_full_rate_is_fedavg():
    common = dict(dataset="digits", model="cnn", partition="dirichlet", alpha=0.5, clients=4, rounds=3,
                  val_fraction=0.15, local_steps=3, seed=1)
    srp = run(RunConfig(method="srp-pfed", options={"sampler": "fixed", "fixed_rates": [1.0], "k": 1}, **common))
    avg = run(RunConfig(method="fedavg", **common))
    for a, b in zip(srp["history"], avg["history"]):
        assert a["acc_global"] == pytest.approx(b["acc_global"], abs=1e-9)
        assert a["loss_global"] == pytest.approx(b["loss_global"], rel=1e-4)


def test_late_uploads_are_dropped_in_the_semi_async_variant():
    sim, before, reports = one_round(srp_config(options={"window": 1e-9}))
    assert all(r.extra["late"] for r in reports) and all(r.time_s == 1e-9 for r in reports)
    assert all(torch.equal(p, before[n]) for n, p in sim.method.model.named_parameters())
    assert sim.method.local  # the clients still trained their own models


@pytest.mark.parametrize("changes,needle", [
    (dict(val_fraction=0.0), "validation split"),
    (dict(options={"k": 11}), "k must be"),
    (dict(options={"agg": "mean"}), "agg must be"),
    (dict(options={"window": 0}), "window"),
    (dict(options={"sampler": "fixed"}), "fixed rates"),
])
def test_bad_options_fail_with_one_line(changes, needle):
    with pytest.raises(ConfigError, match=needle):
        srp_config(**changes).validate()


@pytest.mark.slow
def test_cli_smoke(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), HETFL_CACHE=str(tmp_path / "runs"))
    out = subprocess.run([sys.executable, "-m", "hetfl_core", "run", "srp-pfed", "--dataset", "digits",
                          "--rounds", "2", "--clients", "4", "--val-fraction", "0.1", "--quiet",
                          "--out", str(tmp_path / "r.json")], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert len(json.loads((tmp_path / "r.json").read_text())["history"]) == 2
