"""Heroes: neural composition (Eq. 4-5), the frequency controller (Alg. 1, Eqs. 17-27),
the method plug-ins, and the paper's claims at a small fixed scale."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hetfl_core import RunConfig
from hetfl_core.science.composition import (ComposedConv2d, ComposedCNN, ComposedResNet, Selection,
                                            aggregate_blocks, default_rank, least_trained,
                                            subgrid_selection, width_blocks)
from hetfl_core.science.errors import ConfigError
from hetfl_core.science.frequency import (block_variance, completion_times, frequency_window,
                                          plan_frequencies, tau_calibrated, tau_raw,
                                          variance_minimising_tau, waiting_time, width_for_budget)
from hetfl_core.science.models import build_model, count_parameters
from hetfl_core.science.system import make_hardware, profile_model


# --------------------------------------------------------------------------- composition

def test_composed_weight_is_grid_of_block_products():
    torch.manual_seed(0)
    layer = ComposedConv2d(base_in=2, base_out=3, kernel=3, n_blocks=9, rank=2)
    blocks, p = (1, 3, 5, 7), 2
    W = layer.weight(blocks, p)
    assert W.shape == (6, 4, 3, 3)
    for j, s in enumerate(blocks):
        a, b = divmod(j, p)                      # input group a, output group b
        piece = torch.einsum("or,rikl->oikl", layer.u[s], layer.v)
        assert torch.allclose(W[b * 3:(b + 1) * 3, a * 2:(a + 1) * 2], piece)


def test_full_composed_layer_is_a_dense_conv():
    torch.manual_seed(1)
    layer = ComposedConv2d(2, 3, 3, n_blocks=16, max_width=4)
    x = torch.randn(2, 8, 5, 5)
    sel = Selection.full(4)
    assert torch.allclose(layer(x, sel), F.conv2d(x, layer.weight(sel.blocks, 4), padding=1), atol=1e-6)


def test_fig1_selection_takes_the_four_least_trained_of_nine():
    counts = [9, 6, 10, 5, 11, 7, 12, 8, 13]   # Fig. 1: the blocks with counts 6, 5, 7, 8
    assert least_trained(counts, 4) == (1, 3, 5, 7)
    assert least_trained([2, 1, 1, 2], 2) == (1, 2)   # ties go to the lower index
    assert subgrid_selection(np.arange(16), 4, 2) == (0, 1)
    assert width_blocks(1) == (0,) and width_blocks(2) == (1, 2, 3, 4)


@pytest.mark.parametrize("cls,twin,shape", [(ComposedCNN, "wcnn", (1, 12, 12)), (ComposedResNet, "resnet", (1, 8, 8))])
def test_parameter_count_matches_formula(cls, twin, shape):
    P, C = 4, 10
    model = cls(shape, C, max_width=P)
    base = [c // P for c in (16, 32, 64)]
    expected = P * base[0] * shape[0] * 9 + P * C * base[-1] + C      # head groups, classifier groups, bias
    for _, layer in model.composed_layers():
        I, O, k = layer.base_in, layer.base_out, layer.kernel
        R = default_rank(I, O, k)
        expected += R * I * k * k + P * P * O * R                      # basis + P^2 blocks
    assert count_parameters(model) == expected == model.upload_numel(Selection.full(P))


@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_composed_cnn_is_its_dense_twin_so_flops_match(p):
    """At width p the composed CNN computes exactly wcnn(width=p/P) with weights v . u,
    so its FLOPs are the twin's (system.forward_flops) and the composition adds
    p^2 O R I k^2 multiply-adds per layer."""
    torch.manual_seed(p)
    P, shape = 4, (1, 12, 12)
    model = ComposedCNN(shape, 10, max_width=P)
    sel = Selection(p, least_trained(np.random.rand(16), p * p), (0, 2, 3)[:p] if p < 4 else (0, 1, 2, 3),
                    tuple(range(p)))
    model.selection = sel
    twin = build_model("wcnn", shape, 10, width=p / P)
    with torch.no_grad():
        twin.convs[0].weight.copy_(model.head.weight[list(sel.head)].flatten(0, 1))
        for conv, composed in zip(twin.convs[1:], model.convs):
            conv.weight.copy_(composed.weight(sel.blocks, p))
        for conv in twin.convs:
            conv.bias.zero_()
        twin.classifier.weight.copy_(model.classifier.weight[list(sel.cls)].permute(1, 0, 2).flatten(1))
        twin.classifier.bias.copy_(model.classifier.bias)
    x = torch.randn(3, *shape)
    assert torch.allclose(model(x), twin(x), atol=1e-5)
    macs = sum(l.macs for l in profile_model(twin, shape))
    by_hand = 12 * 12 * 4 * p * 9 + 6 * 6 * 8 * p * 4 * p * 9 + 3 * 3 * 16 * p * 8 * p * 9 + 16 * p * 10
    assert macs == by_hand
    assert model.composition_macs(p) == p * p * (8 * 8 * 4 * 9 + 16 * 16 * 8 * 9)


def test_aggregation_touches_only_a_blocks_trainers():
    torch.manual_seed(0)
    model = ComposedCNN((1, 8, 8), 10, max_width=2)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    states = []
    for value in (4.0, 2.0):     # Fig. 3: one block trained by two clients with values 4 and 2
        states.append({k: torch.full_like(v, value) for k, v in before.items()})
    sel_a = Selection(1, (0,), (0,), (0,))
    sel_b = Selection(1, (1,), (1,), (0,))
    aggregate_blocks(model, [(sel_a, states[0]), (sel_b, states[1])])
    after = model.state_dict()
    u = after["convs.0.u"]
    assert torch.all(u[0] == 4) and torch.all(u[1] == 2)                      # one trainer each
    assert torch.equal(u[2:], before["convs.0.u"][2:])                        # nobody: unchanged
    assert torch.all(after["convs.0.v"] == 3)                                 # basis: mean over all
    assert torch.all(after["classifier.weight"][0] == 3)                      # group 0: both -> (4+2)/2
    assert torch.equal(after["classifier.weight"][1], before["classifier.weight"][1])
    assert torch.all(after["head.weight"][0] == 4) and torch.all(after["head.weight"][1] == 2)


# --------------------------------------------------------------------------- controller

def test_width_rule_takes_the_widest_feasible_and_at_least_one():
    times = {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}
    assert width_for_budget(times.get, 2.5, 4) == 2
    assert width_for_budget(times.get, 0.5, 4) == 1   # the printed loop would return 2 (spec A5)
    assert width_for_budget(times.get, 9.0, 4) == 4


def test_frequency_window_eq24():
    # deadline 10 s, rho 2 s, 1 s per iteration, 1 s upload: 7 <= tau <= 9
    assert frequency_window(10.0, 2.0, 1.0, 1.0) == (7, 9)
    assert frequency_window(10.0, 2.0, 1.0, 12.0) == (1, 1)     # upload misses the deadline
    assert frequency_window(10.0, 0.1, 3.0, 0.0) == (3, 3)      # empty integer window -> tau_b


def test_variance_minimising_tau_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(200):
        counts = rng.integers(0, 50, 16).astype(float)
        m = int(rng.choice([1, 4, 9, 16]))
        blocks = tuple(sorted(rng.choice(16, m, replace=False)))
        ta = int(rng.integers(1, 10)); tb = ta + int(rng.integers(0, 20))

        def var(t):
            c = counts.copy(); c[list(blocks)] += t
            return block_variance(c)
        best = min(var(t) for t in range(ta, tb + 1))
        assert math.isclose(var(variance_minimising_tau(counts, blocks, ta, tb)), best, abs_tol=1e-9)


def test_tau_rules():
    assert math.isclose(tau_raw(F=2.0, L=1.0, S=6.0, eta=0.1, H=4), math.sqrt(12 * 2 / (0.01 * 4 * 6)))
    assert tau_calibrated(20, 1.0, 2.0, 3.0, 1.0, 2.0, 3.0) == 20          # first round: tau_0
    assert math.isclose(tau_calibrated(20, 0.25, 2.0, 3.0, 1.0, 2.0, 3.0), 10)  # loss / 4 -> tau / 2


def fig2_clients():
    """Twelve clients of the four edge tiers, each at its width's iteration time."""
    devices = make_hardware(12, "edge", np.random.default_rng(0))
    speed = np.array([d.flops_per_s for d in devices]) / 1e9
    return speed


def test_fig2_adaptive_frequencies_equalise_completion_times():
    speed = fig2_clients()
    work = {4: 1.0, 3: 9 / 16, 2: 4 / 16, 1: 1 / 16}                       # FLOPs ~ p^2
    widths = [width_for_budget(lambda p: work[p] / s, 1.2, 4) for s in speed]
    assert sorted(set(widths)) == [2, 3, 4]
    mu = np.array([work[p] / s for p, s in zip(widths, speed)])
    nu = np.full(12, 0.5)
    counts = np.zeros(16)
    plan = lambda adaptive: plan_frequencies(                                # noqa: E731
        mu, nu, widths, 20, 0.1, counts.copy(), select=lambda n: Selection(widths[n], least_trained(
            counts, widths[n] ** 2), (), ()), commit=lambda n, s, t: None, adaptive=adaptive)
    fixed, _, _ = plan(False)
    adaptive, _, l = plan(True)
    # identical tau on the full model: strongest device 4x faster than the weakest (Fig. 2a)
    full = completion_times([20] * 12, 1.0 / speed, nu)
    assert full.max() / full.min() >= 2
    t_fixed, t_adapt = completion_times(fixed, mu, nu), completion_times(adaptive, mu, nu)
    deadline = t_adapt[l]
    assert np.all(t_adapt <= deadline + 1e-9) and np.all(t_adapt >= 0.9 * deadline - 1e-9)
    assert waiting_time(t_adapt) < 0.5 * waiting_time(t_fixed)


def simulate_counts(rule, rounds=60, seed=0):
    """Block counters over rounds: 8 clients per round of widths drawn from (4, 3, 2, 2)."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(16)
    for _ in range(rounds):
        for p in rng.choice([4, 3, 2, 2], 8):
            tau = int(rng.integers(5, 21))
            counts[list(rule(counts, p))] += tau
    return counts


def test_enhanced_composition_keeps_block_training_balanced():
    """Claim: enhanced composition trains every block (spread bounded by a few taus), while
    fixed nested blocks (the leading p x p grid) leave the wide blocks far behind."""
    enhanced = simulate_counts(lambda c, p: least_trained(c, p * p))
    nested = simulate_counts(lambda c, p: tuple(a * 4 + b for a in range(p) for b in range(p)))
    assert enhanced.max() - enhanced.min() <= 2 * 20
    assert nested.max() - nested.min() >= 10 * 2 * 20
    assert enhanced.min() > 0.5 * enhanced.mean()


# --------------------------------------------------------------------------- methods

def small(method, **kw):
    options = kw.pop("options", {})
    base = dict(method=method, dataset="digits", model="wcnn", partition="iid", clients=8, participation=0.5,
                rounds=3, local_steps=6, heterogeneity="edge", lr=0.1, seed=0, options=options)
    base.update(kw)
    return RunConfig(**base)


@pytest.mark.parametrize("options,needle", [({"selection": "best"}, "selection"), ({"rho": 1.5}, "rho"),
                                            ({"tau_mode": "eps"}, "eps"), ({"frequency": "x"}, "frequency")])
def test_bad_options_fail_with_one_line(options, needle):
    with pytest.raises(ConfigError, match=needle):
        small("heroes", options=options).validate()
    with pytest.raises(ConfigError, match="compose"):
        small("heroes", model="mlp").validate()


def test_heroes_run_counts_traffic_and_adapts():
    from hetfl_core.runtime.engine import run

    h = run(small("heroes", rounds=3))["history"]
    clients = h[-1]["clients"]
    assert {c["p"] for c in clients} <= {2, 3, 4}
    times = [c["time_s"] for c in clients]
    assert max(times) - min(times) <= 0.1 * max(times) + 1e-9      # within rho of the deadline
    # claim (traffic half of Fig. 6a/8a): the composed factors cost less per round than the
    # dense model (FedAvg) and than HeteroFL's width-sliced sub-models on the same devices
    fedavg = run(small("fedavg", rounds=3))["history"][-1]
    heterofl = run(small("heterofl", rounds=3, options={"widths": [1.0, 0.75, 0.5, 0.25]}))["history"][-1]
    assert h[-1]["uplink_bits"] < 0.6 * fedavg["uplink_bits"]
    assert h[-1]["uplink_bits"] < 0.9 * heterofl["uplink_bits"]


@pytest.mark.slow
def test_cli_smoke_run(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "run.json"
    env = dict(os.environ, PYTHONPATH=str(root), HETFL_CACHE=str(tmp_path / "runs"))
    proc = subprocess.run([sys.executable, "-m", "hetfl_core", "run", "heroes", "--dataset", "digits", "--model",
                           "wcnn", "--clients", "4", "--rounds", "2", "--local-steps", "3", "--heterogeneity", "edge",
                           "--quiet", "--out", str(out)], capture_output=True, text=True, env=env, cwd=root,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(out.read_text())["history"]) == 2


def test_composed_lstm_runs_at_every_width_and_counts_its_upload():
    from hetfl_core.science.composition import ComposedLSTM

    model = ComposedLSTM((40,), 76)
    x = torch.randint(0, 76, (3, 40))
    for p in (1, 2, 4):
        model.selection = Selection(p, least_trained(np.arange(16)[::-1], p * p), tuple(range(p)), tuple(range(p)))
        model(x).sum().backward()
        assert model.recurrent.u.grad[list(model.selection.blocks)].abs().sum() > 0
        model.zero_grad()
    assert count_parameters(model) == model.upload_numel(Selection.full(4))


def test_shakespeare_parser_and_missing_files(tmp_path):
    from hetfl_core.science.errors import DatasetUnavailable
    from hetfl_core.science.data.shakespeare import encode, load_shakespeare, parse_play

    text = "ACT I.\n\nScene I. A heath.\n\n[Enter Kent.]\n\nKent.\nI thought the King\nhad more affected.\n\n" \
           "GLOUCESTER.\nIt did always seem so.\n\nOsw. Ay, madam.\n\nKent.\nIs not this your son?\n"
    roles = parse_play(text)
    assert roles == {"Kent": "I thought the King had more affected. Is not this your son?",
                     "GLOUCESTER": "It did always seem so.", "Osw": "Ay, madam."}
    assert encode("ab")[0] != encode("ab")[1] and encode("\u00e9")[0] == encode("~")[0]
    with pytest.raises(DatasetUnavailable, match="shakespeare.sh"):
        load_shakespeare(tmp_path)


@pytest.mark.parametrize("method", ["heterofl", "fedrolex", "fjord", "flanc", "heroes"])
def test_width_methods_share_heroes_width_rule(method):
    """With the same width budget, every width method gives each device tier the width
    Heroes gives it (the Heroes chapter compares sub-model schemes at equal sizes), and
    the tiers do differ."""
    from hetfl_core.runtime.engine import build_simulation

    def tier_widths(config):
        sim = build_simulation(config)
        plans = sim.method.configure_round(1, list(range(config.clients)))
        widths = {}
        for k, plan in plans.items():
            widths.setdefault(sim.hardware[k].tier, set()).add(round(plan.width, 6))
        return widths

    budget = {"width_budget": 1.2, "max_width": 4}
    heroes = tier_widths(small("heroes", model="pcnn", options=budget))
    assert all(len(w) == 1 for w in heroes.values()) and len(set.union(*heroes.values())) > 1
    assert tier_widths(small(method, model="pcnn", options=budget)) == heroes
