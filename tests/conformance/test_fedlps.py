"""``fedlps-code`` against the semantics of the FedLPS authors' released code
(sunnyxuejj/FedLPS-main @ b499bbbe, Models.py @ 27b236be), written here from what that
code computes: per visit, fresh N(0, 1) scores sorted in descending order; per step, the
rows of the units whose sigma(score) is strictly above the smallest of the top
max(int(s n), 1) are kept, the other rows are zeroed for the step and restored after it;
the loss is the cross-entropy plus lambda times the mean over unit pairs of
(Q_i - sigma(sum |w_j|))^2, whose gradient reaches only the kept units' scores; the
upload is local minus server weights with dropped rows zeroed; the server adds the
unweighted mean of the uploads and N(0, sd^2) noise; a client is scored with the sparse
state after its last visit above ratio 0.25, else with the dense global model.

The reference is plain SGD with ``torch.autograd.grad`` on the package's initial weights
and minibatch orders, and the same seeded draws for the scores and the noise. Then one
test per difference from the paper that ``fedlps-code`` keeps on purpose, and one per
difference from the released code that it keeps."""
import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from hetfl_core.science.methods.base import seeded_generator
from hetfl_core.science.errors import ConfigError
from hetfl_core.science.models import structured_units

from hetfl_core.science.methods.fedlps_code import CODE_TIERS

from .literal_fedlps import fedlps_code_rounds
from .literal_reference import UNEVEN_SIZES
from .pfl_reference import (assert_scores_close, assert_state_close, build, round_orders, scores,
                            skewed_assignment, tiny_config)

LAM, NOISE, DECAY, EPOCHS = 1.0, 1e-3, 0.998, 2
SIZES = [60, 100, 40, 80]
PARTICIPANTS = [[0, 1, 2], [0, 2, 3], [1, 2, 3]]


def code_config(**options):
    """The tiny federation under fedlps-code: dynamic tiers of the "high" level (the run's
    tiers; the code's five: the literal test and the tier test), ratio =
    the round's tier (no bandit), two local epochs to keep the test fast."""
    settings = dict(ratio_rule="capability", epochs=float(EPOCHS), lam=LAM, noise=NOISE,
                    lr_decay=DECAY, tiers="run")     # these draws cover every case checked below
    return tiny_config("fedlps-code", sizes=SIZES, rounds=len(PARTICIPANTS), heterogeneity="high",
                       options={**settings, **options})


def first_scores(layers: dict, seed: int, round_idx: int, client: int) -> dict:
    """A visit's starting scores: N(0, 1) per unit, sorted descending, from the run's stream."""
    g = seeded_generator(seed, 53, round_idx, client)
    out = {}
    for name, n in layers.items():
        draws = torch.randn(n, generator=g)
        out[name] = draws.sort(descending=True).values
    return out


def kept_rows(q: torch.Tensor, ratio: float) -> torch.Tensor:
    """Units strictly above the smallest of the top max(int(s n), 1) sigmoid scores."""
    s = torch.sigmoid(q)
    top = max(int(ratio * len(s)), 1)
    return (s > s.sort(descending=True).values[top - 1]).float()


def visit(model, w, q, c, batches, lr, ratio):
    """One client visit; returns the sparse local state, its row masks and the scores."""
    layers = list(q)
    p = {n: t.clone() for n, t in w.items()}
    for idx in batches:
        m = {n: kept_rows(q[n], ratio) for n in layers}
        shape = {n: (-1,) + (1,) * (p[f"{n}.weight"].dim() - 1) for n in layers}
        sparse = {n: t.clone() for n, t in p.items()}
        for n in layers:
            sparse[f"{n}.weight"] = p[f"{n}.weight"] * m[n].view(shape[n])
        leaves = {n: t.detach().requires_grad_() for n, t in sparse.items()}
        qs = {n: q[n].detach().requires_grad_() for n in layers}
        loss = F.cross_entropy(functional_call(model, leaves, (c.x_train[idx],)), c.y_train[idx])
        for n in layers:
            target = torch.sigmoid(sparse[f"{n}.weight"].abs().reshape(len(q[n]), -1).sum(1))
            loss = loss + LAM * ((qs[n].unsqueeze(1) - target.unsqueeze(0)) ** 2).mean()
        grads = torch.autograd.grad(loss, list(leaves.values()) + list(qs.values()))
        g = dict(zip(list(leaves) + [f"q:{n}" for n in layers], grads))
        with torch.no_grad():
            new = {n: leaves[n] - lr * g[n] for n in leaves}
            for n in layers:    # dropped rows: not trained, back at their value before the step
                row = m[n].view(shape[n])
                new[f"{n}.weight"] = row * new[f"{n}.weight"] + (1 - row) * p[f"{n}.weight"]
                q[n] = q[n] - lr * m[n] * g[f"q:{n}"]
            last = {n: t.clone() for n, t in new.items()}
            for n in layers:
                last[f"{n}.weight"] = new[f"{n}.weight"] * m[n].view(shape[n])
            p = new
    return last, m


def reference_fedlps_code(sim, start, ratios):
    """The released code's rounds; the global state and the scores after each round."""
    config, model = sim.config, copy.deepcopy(sim.method.model)
    layers = {n: k for n, _, k in structured_units(model)}
    steps = {k: EPOCHS * c.n_train // config.batch_size for k, c in enumerate(sim.data.clients)}
    w, kept, history = dict(start), {}, []
    for t, ids in enumerate(PARTICIPANTS, start=1):
        lr = config.lr * DECAY ** (t - 1)
        deltas = []
        for k in ids:
            c = sim.data.clients[k]
            q = first_scores(layers, config.seed, t, k)
            batches = round_orders(config, t, k, c.n_train, steps[k])
            last, m = visit(model, w, q, c, batches, lr, ratios[t][k])
            delta = {n: last[n] - w[n] for n in w}
            for n in layers:
                shape = (-1,) + (1,) * (w[f"{n}.weight"].dim() - 1)
                delta[f"{n}.weight"] = delta[f"{n}.weight"] * m[n].view(shape)
            deltas.append(delta)
            if ratios[t][k] > 0.25:
                kept[k] = last
        g = seeded_generator(config.seed, 59, t)
        w = {n: w[n] + sum(d[n] for d in deltas) / len(deltas)
             + NOISE * torch.randn(w[n].shape, generator=g) for n in w}
        held = [(kept.get(k, w), c.x_test, c.y_test) for k, c in enumerate(sim.data.clients)]
        history.append((w, scores(model, held), set(kept)))
    return history


@pytest.fixture(scope="module")
def package_run():
    """fedlps-code on the tiny federation, round by round, with the ratios it trained at."""
    sim, start = build(code_config())
    rows, ratios = [], {}
    for t, ids in enumerate(PARTICIPANTS, start=1):
        rows.append(sim.round(t, clients=ids))
        ratios[t] = {k: plan.ratio for k, plan in sim.plans.items()}
    return sim, start, rows, ratios


def test_fedlps_code_matches_the_released_round_for_round(package_run):
    sim, start, rows, ratios = package_run
    history = reference_fedlps_code(sim, start, ratios)
    for row, (w, (acc, loss, each), kept) in zip(rows, history):
        assert_scores_close(row, acc, loss, each)
    assert_state_close(dict(sim.method.model.named_parameters()), history[-1][0])
    assert set(sim.method.personal) == history[-1][2]


def test_the_run_covers_every_tier_and_a_dense_scored_client(package_run):
    """The comparison above means something: ratios at, above and below 0.25 were
    trained, some client is scored with a kept model older than its last visit, and some
    with the dense global model."""
    sim, _, rows, ratios = package_run
    trained = {r for per_round in ratios.values() for r in per_round.values()}
    assert min(trained) < 0.25 and max(trained) == 1.0 and 0.25 in trained
    assert set(range(sim.config.clients)) - set(sim.method.personal), "all have a kept model"
    last = {k: r for t in sorted(ratios) for k, r in ratios[t].items()}
    assert any(last[k] <= 0.25 for k in sim.method.personal), "no kept model outlived a visit"


# -- differences from the paper the variant keeps on purpose -----------------------------
def test_scores_restart_sorted_and_get_no_task_gradient():
    """lam = 0: the scores never move, so every client in every visit keeps the first
    int(s n) - 1 units of every layer (the paper learns Q from the task loss)."""
    sim, _ = build(code_config(lam=0.0, capability="fixed"))
    for t, ids in enumerate(PARTICIPANTS[:2], start=1):
        sim.round(t, clients=ids, evaluate=False)
        for report in sim.reports:
            kept = [(max(int(report.ratio * n) - 1, 0), n)
                    for _, _, n in structured_units(sim.method.model)]
            expected = "".join("1" * j + "0" * (n - j) for j, n in kept)
            assert report.extra["units"] == expected


def test_only_weight_rows_are_masked():
    """Dropped units' rows do not move, but their biases do (a dropped unit outputs
    act(b), and b trains), in the paper's Eq. (5) every weight of a dropped unit is zero."""
    sim, _ = build(code_config(noise=0.0, capability="fixed"))
    sim.round(1, clients=[0, 1, 2, 3], evaluate=False)
    moved, dropped_total = 0, 0
    for report in sim.reports:
        start = 0
        for name, _, n in structured_units(sim.method.model):
            bits = report.extra["units"][start:start + n]
            dropped = [j for j, bit in enumerate(bits) if bit == "0"]
            start += n
            update = report.weights
            assert all(float(update[f"{name}.weight"][j].abs().max()) == 0.0 for j in dropped)
            moved += sum(float(update[f"{name}.bias"][j].abs()) > 0 for j in dropped)
            dropped_total += len(dropped)
    assert dropped_total and moved, f"{moved} of {dropped_total} dropped units' biases moved"


def test_aggregation_is_the_unweighted_mean_plus_seeded_noise():
    sim, start = build(code_config(noise=0.0))
    sim.round(1, clients=[0, 1, 2, 3], evaluate=False)
    mean = {n: start[n] + sum(r.weights[n] for r in sim.reports) / 4 for n in start}
    assert_state_close(dict(sim.method.model.named_parameters()), mean)
    total = sum(r.n_samples for r in sim.reports)
    weighted = {n: start[n] + sum(r.n_samples * r.weights[n] for r in sim.reports) / total
                for n in start}
    assert max(float((mean[n] - weighted[n]).abs().max()) for n in start) > 1e-4
    noisy, _ = build(code_config())
    noisy.round(1, clients=[0, 1, 2, 3], evaluate=False)
    gap = torch.cat([(p.detach() - mean[n]).flatten()
                     for n, p in noisy.method.model.named_parameters()])
    assert abs(float(gap.std()) - NOISE) < 1e-4


def test_no_proximal_term_decayed_lr_and_five_epochs():
    with pytest.raises(ConfigError, match="no option mu"):
        build(tiny_config("fedlps-code", options={"mu": 1.0}))
    sim, _ = build(tiny_config("fedlps-code", local_epochs=1.0))
    plans = sim.method.configure_round(3, [0])
    assert plans[0].local_steps == 5 * sim.data.clients[0].n_train // sim.config.batch_size
    assert plans[0].extra["lr"] == pytest.approx(sim.config.lr * 0.998 ** 2)


@pytest.mark.parametrize("tiers, expected", [("code", CODE_TIERS), ("run", (0.0625, 0.25, 1.0))])
def test_tiers_are_redrawn_every_round_from_the_codes_five(tiers, expected):
    """By default a round's capability is drawn from FedLPS.py's ``mask_rate_list``
    {1/16, 1/8, 1/4, 1/2, 1} (of the fastest device, whose links every tier keeps);
    ``tiers="run"`` draws from the run's device tiers ("high": 1, 1/4, 1/16)."""
    sim, _ = build(code_config(tiers=tiers))
    plans = [sim.method.configure_round(t, [0])[0] for t in range(1, 41)]
    assert {p.extra["capability"] for p in plans} == set(expected)
    fastest = max(sim.method.hardware, key=lambda d: d.flops_per_s)
    for plan in plans:
        device = plan.hardware or sim.method.hardware[0]
        assert device.flops_per_s == pytest.approx(fastest.flops_per_s * plan.extra["capability"])
        if tiers == "code":
            assert (device.uplink_bps, device.downlink_bps) == (fastest.uplink_bps, fastest.downlink_bps)


def test_a_kept_model_outlives_later_visits_at_or_below_a_quarter():
    """The released code refreshes the kept model only on visits above ratio 0.25 and keeps
    scoring the older one after a low visit (the paper keeps every visit's model)."""
    sim, _ = build(code_config(capability="fixed", ratio_rule="fixed", ratio=0.5))
    sim.round(1, clients=[0], evaluate=False)
    kept = {n: v.clone() for n, v in sim.method.personal[0].items()}
    sim.method.options["ratio"] = 0.25
    sim.method.proposed[0] = 0.25
    sim.round(2, clients=[0], evaluate=False)
    assert all(torch.equal(kept[n], v) for n, v in sim.method.personal[0].items())
    assert sim.method.personal_model(1) is sim.method.model


# -- differences from the released code the variant keeps -------------------------------
def test_scores_pool_clients_where_the_released_code_averages_them(package_run):
    """acc_personal pools the clients' test samples; the released code reports the
    unweighted mean of the clients' accuracies, which is the mean of ``acc_clients``."""
    *_, rows, _ = package_run
    row = rows[-1]
    assert row["acc_personal"] != pytest.approx(float(np.mean(row["acc_clients"])), abs=1e-9)


def test_iid_runs_although_the_released_code_has_no_iid_path():
    sim, _ = build(code_config().replace(partition="iid", given_indices=None, clients=3))
    sim.round(1, evaluate=False)
    assert all(r.loss == r.loss for r in sim.reports)


@pytest.mark.filterwarnings("ignore:Using a target size")      # the code's (n, 1) vs (n,) MSELoss
def test_fedlps_code_matches_the_literal_released_loop_on_uneven_clients():
    """The port of Hetero_Client.update_weights_leanable and agg/avg.py (literal_fedlps) on
    56, 36, 10 and 72 training samples with batch 16 (every client a partial batch, one
    client nothing but one), two epochs, momentum and weight decay: the global state and
    every kept model within 1e-5."""
    config = code_config(tiers="code").replace(given_indices=skewed_assignment(4, UNEVEN_SIZES), momentum=0.5,
                                   weight_decay=1e-3)
    sim, start = build(config)
    assert [c.n_train for c in sim.data.clients] == [56, 36, 10, 72]
    rates = {}
    for t, ids in enumerate(PARTICIPANTS, start=1):
        sim.round(t, clients=ids, evaluate=False)
        rates[t] = {k: plan.ratio for k, plan in sim.plans.items()}
    assert len({r for per_round in rates.values() for r in per_round.values()}) > 1
    ours = dict(sim.method.model.named_parameters())
    theirs, kept = fedlps_code_rounds(sim, start, PARTICIPANTS, rates, LAM, NOISE, EPOCHS, DECAY)
    assert_state_close(ours, theirs)
    silent, _ = fedlps_code_rounds(sim, start, PARTICIPANTS, rates, LAM, 0.0, EPOCHS, DECAY)
    assert max(float((ours[n].detach() - silent[n]).abs().max()) for n in silent) > 1e-3   # noise draws match
    assert set(sim.method.personal) == set(kept)
    for k, state in kept.items():
        assert_state_close(sim.method.personal[k], state)
