"""OFA-FL: nested lottery-ticket masks (hetfl_core.science.lottery) and the ofafl / ltp / ofa-oneshot methods."""
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from hetfl_core import RunConfig
from hetfl_core.runtime.engine import build_simulation
from hetfl_core.science.methods.base import seeded_generator
from hetfl_core.science.errors import ConfigError
from hetfl_core.science.lottery import (ConvergenceTrigger, FixedSchedule, is_nested, keep_fraction,
                                        mask_levels, masks_from_levels, max_average_round,
                                        oneshot_masks, prune_within, rewind, spread, storage_bits)
from hetfl_core.science.lottery import joint_loss

ROOT = Path(__file__).resolve().parent.parent
PAPER_R = [1.0, 0.8, 0.6, 0.4, 0.2]
STRESS_R = [1.0, 0.5, 0.25, 0.1, 0.05]


# -- hetfl_core.science.lottery -------------------------------------------------------------------------

def test_keep_fraction_is_the_corrected_r_relative_and_telescopes():
    assert [round(keep_fraction(PAPER_R, n), 4) for n in range(1, 5)] == [0.8, 0.75, 0.6667, 0.5]
    assert math.isclose(math.prod(keep_fraction(PAPER_R, n) for n in range(1, 5)), 0.2)
    with pytest.raises(ConfigError):
        keep_fraction(PAPER_R, 5)   # the paper's loop guard n < s would index R[s]


def test_prune_within_hand_worked_global_and_layerwise():
    w = {"a": torch.tensor([[3.0, -1.0], [0.5, 2.0]]), "b": torch.tensor([[-4.0, 0.1]])}
    ones = {n: torch.ones_like(t) for n, t in w.items()}
    g = prune_within(w, ones, 0.5, "global")       # top 3 of 6 magnitudes: 4, 3, 2
    assert g["a"].tolist() == [[1, 0], [0, 1]] and g["b"].tolist() == [[1, 0]]
    lw = prune_within(w, ones, 0.5, "layer")       # top half of each layer: {3, 2} and {4}
    assert lw["a"].tolist() == [[1, 0], [0, 1]] and lw["b"].tolist() == [[1, 0]]
    # inside a parent that already lost the 3: the survivors are 2, 0.5, -1, -4, 0.1; keep 2 of 5 -> 4 and 2
    parent = {"a": torch.tensor([[0.0, 1.0], [1.0, 1.0]]), "b": torch.ones(1, 2)}
    child = prune_within(w, parent, 0.4, "global")
    assert child["a"].tolist() == [[0, 0], [0, 1]] and child["b"].tolist() == [[1, 0]]


def test_progressive_masks_are_nested_and_hit_their_densities():
    gen = torch.Generator().manual_seed(0)
    w = {"l1": torch.randn(40, 30, generator=gen), "l2": torch.randn(10, 40, generator=gen) * 3}
    n = sum(t.numel() for t in w.values())
    for scope in ("global", "layer"):
        masks = [{k: torch.ones_like(t) for k, t in w.items()}]
        for j in range(1, len(STRESS_R)):
            masks.append(prune_within(w, masks[-1], keep_fraction(STRESS_R, j), scope))
        assert is_nested(masks)
        for r, m in zip(STRESS_R, masks):
            kept = sum(float(t.sum()) for t in m.values())
            assert abs(kept / n - r) <= len(STRESS_R) * len(w) / n
            if scope == "layer":   # layerwise: every layer at the ratio
                assert all(abs(float(t.mean()) - r) <= len(STRESS_R) / t.numel() for t in m.values())
    # global pruning gives the larger-magnitude layer more density than the ratio
    g = masks = [{k: torch.ones_like(t) for k, t in w.items()}]
    g = prune_within(w, masks[0], 0.2, "global")
    assert float(g["l2"].mean()) > 0.2 > float(g["l1"].mean())


def test_rewind_is_exact_on_the_mask_and_leaves_the_rest():
    init = {"w": torch.zeros(2, 3), "b": torch.zeros(2)}
    trained = {"w": torch.arange(6.0).reshape(2, 3) + 1, "b": torch.ones(2)}
    mask = {"w": torch.tensor([[1.0, 0, 1], [0, 0, 1]])}
    params = {k: v.clone() for k, v in trained.items()}
    rewind(params, init, mask)
    assert params["w"].tolist() == [[0, 2, 0], [4, 5, 0]] and params["b"].tolist() == [0, 0]
    params = {k: v.clone() for k, v in trained.items()}
    rewind(params, init, mask, rewind_unmasked=False)
    assert torch.equal(params["b"], trained["b"])


def test_oneshot_masks_are_global_top_r_and_nested():
    gen = torch.Generator().manual_seed(1)
    w = {"a": torch.randn(20, 10, generator=gen), "b": torch.randn(5, 20, generator=gen)}
    masks = oneshot_masks(w, PAPER_R)
    assert is_nested(masks)
    flat = torch.cat([t.abs().flatten() for t in w.values()])
    for r, m in zip(PAPER_R[1:], masks[1:]):
        k = math.ceil(r * flat.numel())
        kept = torch.cat([(t.abs() * m[n]).flatten() for n, t in w.items()])
        assert int(sum(x.sum() for x in m.values())) == k
        assert float(kept[kept > 0].min()) == float(flat.topk(k).values.min())


def test_levels_encode_nested_masks_in_log2_s_bits():
    gen = torch.Generator().manual_seed(2)
    masks = oneshot_masks({"a": torch.randn(30, 30, generator=gen)}, PAPER_R)
    levels = mask_levels(masks)
    assert int(levels["a"].max()) == len(PAPER_R) - 1
    back = masks_from_levels(levels, len(PAPER_R))
    assert all(torch.equal(x["a"], y["a"]) for x, y in zip(masks, back))
    n = 1000
    assert storage_bits(n, PAPER_R, "separate") == 32 * n * 3.0
    assert storage_bits(n, PAPER_R, "ofa") / (32 * n) == 1.09375
    assert storage_bits(n, PAPER_R, "bitmaps") / (32 * n) == 1.125


def test_fixed_schedule_and_convergence_trigger():
    fixed = FixedSchedule(warmup=3, every=2)
    fired, done = [], 0
    for t in range(1, 13):
        if fixed(t, done):
            fired.append(t)
            done += 1
    assert fired[:4] == [4, 6, 8, 10]
    trig = ConvergenceTrigger(delta=0.01, min_gap=2)
    losses = [None, 1.0, 0.5, 0.3, 0.295, 0.9, 0.5, 0.499]   # loss seen at the start of round t = 1..8
    fired = [t for t, loss in enumerate(losses, 1) if trig(t, 0, loss)]
    assert fired == [5, 8]   # fell by < delta after round 4; round 7 is inside min_gap; then stalls


def test_spread_reproduces_the_papers_variance_column():
    assert round(spread([58.95, 58.9, 58.79, 53.93, 45.34])[1], 2) == 27.89   # Table 1, LTP P=50, max
    assert round(spread([36.4, 36.4, 36.39, 34.66, 29.78])[1], 3) == 6.568    # Table 1, one-shot P=100, final
    assert max_average_round([[0.5, None], [0.9, 0.1], [0.6, 0.6], [0.7, 0.4]]) == 2


# -- the methods -----------------------------------------------------------------------------------

def simulation(method="ofafl", **options):
    opts = {"ratios": PAPER_R, "warmup": 1, "every": 1, **options}
    return build_simulation(RunConfig(method=method, dataset="digits", model="mlp", partition="iid", clients=10,
                                      local_steps=2, batch_size=16, momentum=0.9, test_fraction=0.0, options=opts))


def one_round(sim, t):
    plans = sim.method.configure_round(t, list(range(10)))
    reports = [sim.method.client_update(sim.data.clients[k], plans[k], seeded_generator(0, t, k)) for k in plans]
    return plans, reports


def train_rounds(sim, n_rounds):
    """Rounds 1..n_rounds with aggregation (enough for every ratio of PAPER_R to be pruned)."""
    for t in range(1, n_rounds + 1):
        _, reports = one_round(sim, t)
        sim.method.aggregate(t, reports)


def test_clients_join_once_their_ratio_exists_and_count_their_losses():
    sim = simulation()
    m = sim.method
    assert [m.capacity[k] for k in range(10)] == [1.0, 1.0, 0.8, 0.8, 0.6, 0.6, 0.4, 0.4, 0.2, 0.2]
    plans, reports = one_round(sim, 1)              # warm-up: only the two full clients
    assert sorted(plans) == [0, 1] and all(r.extra["losses_per_step"] == 1 for r in reports)
    m.aggregate(1, reports)
    plans, reports = one_round(sim, 2)              # first pruning: the 0.8 clients join
    assert m.pruned == [1.0, 0.8] and sorted(plans) == [0, 1, 2, 3]
    for t in (3, 4, 5):
        m.aggregate(t - 1, reports)
        plans, reports = one_round(sim, t)
    assert m.pruned == PAPER_R and sorted(plans) == list(range(10))
    losses = {r.client_id: r.extra["losses_per_step"] for r in reports}
    assert losses[0] == 5 and losses[9] == 1 and losses[4] == 3
    masks = [m.masks[r] for r in PAPER_R]
    assert is_nested(masks)


def test_client_trains_inside_its_mask_and_aggregation_leaves_the_rest():
    sim = simulation()
    m = sim.method
    train_rounds(sim, 5)
    own = m.masks[0.2]
    before = {n: p.detach().clone() for n, p in m.model.named_parameters()}
    _, reports = one_round(sim, 6)
    small = [r for r in reports if r.client_id == 9]
    values, held = small[0].weights, small[0].held
    for n, mask in own.items():
        assert float((values[n] * (1 - mask)).abs().sum()) == 0      # zero outside its budget
    m.aggregate(6, small)                                              # only the smallest client
    for n, p in m.model.named_parameters():
        outside = held[n] == 0
        assert torch.equal(p.detach()[outside], before[n][outside])
    assert small[0].uplink_bits == 32 * sum(int(h.sum()) for h in held.values())


def test_aggregation_of_full_clients_is_fedavg():
    sim = simulation(warmup=5)
    plans, reports = one_round(sim, 1)
    sim.method.aggregate(1, reports)
    n = [r.n_samples for r in reports]
    for name, p in sim.method.model.named_parameters():
        expected = sum(k * r.weights[name] for k, r in zip(n, reports)) / sum(n)
        assert torch.allclose(p.detach(), expected, atol=1e-6)


def test_joint_loss_gradient_is_the_mask_weighted_mean():
    torch.manual_seed(0)
    model = nn.Linear(4, 3, bias=False)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    m1 = {"weight": (torch.rand(3, 4) > 0.5).float()}
    loss = joint_loss(model, [m1], x, y)
    loss.backward()
    got = model.weight.grad.clone()
    w = model.weight.detach()
    g = []
    for mask in (torch.ones(3, 4), m1["weight"]):
        wj = (w * mask).requires_grad_()
        nn.functional.cross_entropy(x @ wj.T, y).backward()
        g.append(mask * wj.grad)
    assert torch.allclose(got, (g[0] + g[1]) / 2, atol=1e-6)   # (1/J) sum_j m_j * g_j


def test_one_stored_model_serves_every_ratio():
    sim = simulation()
    m = sim.method
    train_rounds(sim, 5)
    x = sim.data.dataset.x_test[:50]
    levels = mask_levels([m.masks[r] for r in PAPER_R])   # the stored form: theta_g and one level per weight
    params = dict(m.model.named_parameters())
    for j, r in enumerate(PAPER_R):
        deployed = {n: params[n].detach() * (lv >= j).float() for n, lv in levels.items()}
        out = torch.func.functional_call(m.model, {**dict(m.model.named_parameters()), **deployed}, (x,))
        assert torch.allclose(out, m.sub_network(r)(x))


def test_ltp_has_no_joint_loss_and_oneshot_prunes_all_at_once():
    sim = simulation("ltp")
    for t in range(1, 6):
        _, reports = one_round(sim, t)
        sim.method.aggregate(t, reports)
    assert all(r.extra["losses_per_step"] == 1 for r in reports)
    sim = simulation("ofa-oneshot", warmup=2)
    _, reports = one_round(sim, 1)
    sim.method.aggregate(1, reports)
    weights = {n: p.detach().clone() for n, p in sim.method.model.named_parameters() if n in sim.method.prunable}
    plans, _ = one_round(sim, 3)
    assert sim.method.pruned == PAPER_R and sorted(plans) == list(range(10))
    expected = oneshot_masks(weights, PAPER_R)
    assert all(torch.equal(expected[j][n], sim.method.masks[r][n]) for j, r in enumerate(PAPER_R) for n in weights)


def test_flops_models_differ_by_the_density_factor():
    """masked-dense (default): J dense passes per batch; sparse: each pass scaled by layer density."""
    from hetfl_core.science.system import training_flops

    flops = {}
    for model in ("masked-dense", "sparse"):
        sim = simulation(scope="layer", flops_model=model)
        train_rounds(sim, 4)
        _, reports = one_round(sim, 5)
        flops[model] = {r.client_id: r.flops for r in reports}
    m = sim.method
    samples = 2 * 16                                              # local_steps * batch_size
    dense = training_flops(m.costs, samples)
    assert flops["masked-dense"][9] == pytest.approx(dense)       # the 0.2 client: one dense pass
    assert flops["masked-dense"][0] == pytest.approx(5 * dense)   # a full client: five losses
    # layerwise masks hold every layer at r, so an ideal sparse kernel costs r of a dense pass
    assert flops["sparse"][9] == pytest.approx(0.2 * dense, rel=1e-3)
    assert flops["sparse"][0] == pytest.approx(sum(PAPER_R) * dense, rel=1e-3)
    with pytest.raises(ConfigError):
        simulation(flops_model="dense")


def test_options_are_checked():
    for bad in ({"ratios": [0.8, 0.5]}, {"ratios": [1.0, 0.5, 0.6]}, {"scope": "row"}, {"schedule": "never"},
                {"capacities": [1.0, 0.3]}, {"every": 0}):
        with pytest.raises(ConfigError):
            RunConfig(method="ofafl", dataset="digits", model="mlp", clients=2, options=bad).validate()
    with pytest.raises(ConfigError, match="val_fraction"):
        RunConfig(method="ofafl", dataset="digits", model="mlp", options={"schedule": "convergence"}).validate()


def test_convergence_schedule_prunes_in_a_run():
    from hetfl_core.runtime.engine import run

    result = run(RunConfig(method="ofafl", dataset="digits", model="mlp", partition="iid", clients=10, rounds=10,
                           local_steps=3, batch_size=16, momentum=0.9, test_fraction=0.0, val_fraction=0.1,
                           options={"ratios": PAPER_R, "schedule": "convergence", "min_gap": 2, "delta": 0.2}))
    pruned = [sum(a is not None for a in row["acc_ratios"]) for row in result["history"]]
    events = [t for t in range(1, len(pruned)) if pruned[t] > pruned[t - 1]]
    assert pruned[0] == 1 and pruned[-1] > 2 and pruned == sorted(pruned)
    assert all(b - a > 2 for a, b in zip(events, events[1:]))   # min_gap rounds between prunings


@pytest.mark.slow
def test_cli_runs_ofafl(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), HETFL_CACHE=str(tmp_path / "runs"))
    out = subprocess.run([sys.executable, "-m", "hetfl_core", "run", "ofafl", "--dataset", "digits", "--model", "mlp",
                          "--partition", "iid", "--clients", "10", "--rounds", "2", "--local-steps", "2", "--quiet",
                          "--option", "warmup=1", "--option", "every=1"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "global accuracy" in out.stderr


def test_a_warm_up_round_that_samples_no_full_client_keeps_the_model():
    """Before the first pruning only full-capacity clients train; a round whose sample holds
    none of them sends nothing, and the model stays as it was (it used to fail to aggregate)."""
    sim = simulation(warmup=5)
    before = {n: p.detach().clone() for n, p in sim.method.model.named_parameters()}
    slow = [k for k in range(10) if sim.method.capacity[k] < 1.0][:2]
    plans = sim.method.configure_round(0, slow)
    assert not plans
    sim.method.aggregate(0, [])
    assert all(torch.equal(before[n], p) for n, p in sim.method.model.named_parameters())
