"""Ditto against the authors' semantics (Li et al. 2021, Alg. 1; their trainers_MTL/ditto.py):
in each local iteration a sampled client takes one personal step
v_k <- v_k - lr (grad F_k(v_k) + lambda (v_k - w^t)) and then one global step
w_k <- w_k - lr grad F_k(w_k), both on the same minibatch; the server averages the w_k.
Every v_k starts at the initial model w^0, and every client, visited or not, is scored
with its v_k."""
import copy

import pytest

from .literal_reference import UNEVEN_SIZES, ditto_rounds, ditto_stream, max_diff, module_state
from .pfl_reference import (TOL, assert_scores_close, assert_state_close, build, global_scores,
                            round_orders, scores, sgd, tiny_config, weighted_mean)

LAM = 0.5


def reference_ditto(sim, start, participants, weighting="n", personal_start="initial"):
    """The authors' run; returns the global model, every v_k, and the per-round scores."""
    config, model = sim.config, copy.deepcopy(sim.method.model)
    clients = sim.data.clients
    w, personal, history = dict(start), {}, []
    for t, ids in enumerate(participants, start=1):
        uploads = []
        for k in ids:
            c = clients[k]
            v = personal.get(k, dict(start) if personal_start == "initial" else dict(w))
            mine = dict(w)
            for batch in round_orders(config, t, k, c.n_train):
                # the personal step, then the global step, on the same batch
                v = sgd(model, v, c.x_train, c.y_train, [batch], config.lr, prox=(LAM, w))
                mine = sgd(model, mine, c.x_train, c.y_train, [batch], config.lr)
            personal[k] = v
            uploads.append(mine)
        weights = [clients[k].n_train for k in ids] if weighting == "n" else [1.0] * len(ids)
        w = weighted_mean(uploads, weights)
        unseen = start if personal_start == "initial" else w
        held = [(personal.get(k, unseen), c.x_test, c.y_test) for k, c in enumerate(clients)]
        history.append((scores(model, held), global_scores(model, w, sim)))
    return w, personal, history


def run(config, participants):
    sim, start = build(config)
    rows = [sim.round(t, clients=ids) for t, ids in enumerate(participants, start=1)]
    return sim, start, rows


PARTICIPANTS = [[0, 1], [1, 2]]      # client 3 never takes part, client 0 only in round 1


def test_ditto_matches_the_authors_alternating_steps_and_scoring():
    sim, start, rows = run(tiny_config("ditto", options={"lam": LAM}), PARTICIPANTS)
    w, personal, history = reference_ditto(sim, start, PARTICIPANTS)
    assert_state_close(dict(sim.method.model.named_parameters()), w)
    for k in range(4):
        ours = dict(sim.method.personal_model(k).named_parameters())
        assert_state_close(ours, personal.get(k, start))
    for row, (personal_scores, global_) in zip(rows, history):
        assert_scores_close(row, *personal_scores)
        assert_scores_close(row, *global_, None, key="global")


def test_unweighted_average_is_a_deviation_kept_on_purpose():
    """The authors sample clients in proportion to n_k and average unweighted; the package
    samples uniformly and weights by n_k. With unequal clients the package matches the
    weighted reference, not the unweighted one."""
    participants = [[0, 1, 2, 3]]
    config = tiny_config("ditto", rounds=1, sizes=[60, 100, 40, 80], options={"lam": LAM})
    sim, start, rows = run(config, participants)
    weighted, personal, history = reference_ditto(sim, start, participants)
    unweighted, _, _ = reference_ditto(sim, start, participants, weighting="count")
    ours = {n: p.detach() for n, p in sim.method.model.named_parameters()}
    assert_state_close(ours, weighted)
    assert max(float((ours[n] - unweighted[n]).abs().max()) for n in ours) > 1e-4
    assert_scores_close(rows[0], *history[0][0])


@pytest.mark.parametrize("start", ["initial", "global"])
def test_personal_start_option(start):
    """``personal_start="global"`` (not the default) starts v_k at the first global model the
    client receives and scores a never-visited client with the global model."""
    config = tiny_config("ditto", options={"lam": LAM, "personal_start": start})
    sim, start_params, rows = run(config, PARTICIPANTS)
    _, personal, history = reference_ditto(sim, start_params, PARTICIPANTS, personal_start=start)
    assert_state_close(dict(sim.method.personal_model(2).named_parameters()), personal[2])
    assert_scores_close(rows[-1], *history[-1][0])
    other = "global" if start == "initial" else "initial"
    _, _, elsewhere = reference_ditto(sim, start_params, PARTICIPANTS, personal_start=other)
    assert abs(rows[-1]["loss_personal"] - elsewhere[-1][0][1]) > 1e-3      # the two starts differ


UNEVEN_PARTICIPANTS = [[0, 1, 2, 3], [0, 2, 3]]


def uneven_ditto(**changes):
    """Ditto on the uneven federation (56, 36, 10, 72 training samples, batch 16), two
    epochs per visit, and the package's module before any round."""
    sim, _ = build(tiny_config("ditto", sizes=UNEVEN_SIZES, local_epochs=2.0, options={"lam": LAM}, **changes))
    start = copy.deepcopy(sim.method.model)
    for t, ids in enumerate(UNEVEN_PARTICIPANTS, start=1):
        sim.round(t, clients=ids, evaluate=False)
    return sim, start


def test_ditto_matches_the_literal_loop_on_uneven_clients():
    """The code's loop (personal step, then global step, per batch; w^t plus the mean diff)
    on the package's batches: global and every personal model within 1e-5."""
    sim, start = uneven_ditto()
    glob, personal = ditto_rounds(sim, start, UNEVEN_PARTICIPANTS, LAM)
    assert max_diff(sim.method.model, module_state(glob)) <= TOL
    for k in range(4):
        assert max_diff(sim.method.personal_model(k), module_state(personal[k])) <= TOL
    unweighted, _ = ditto_rounds(sim, start, UNEVEN_PARTICIPANTS, LAM, weighting="count")
    assert max_diff(sim.method.model, module_state(unweighted)) > 1e-4      # listed: n_k weights


def test_the_codes_batch_stream_is_a_kept_deviation():
    """The code draws each visit's ``local_iters`` batches from one ``gen_batch`` stream per
    client for the whole run (full batches only; a client smaller than a batch gets all its
    samples each time); the package takes E fresh passes per visit with the partial batch.
    With as many iterations as the package's steps the two runs differ."""
    sim, start = uneven_ditto()
    streams = {}

    def code_batches(config, t, k, client):
        steps = sim.method.local_steps(client)
        if k not in streams:
            streams[k] = ditto_stream(client.n_train, config.batch_size, 10 * steps)
        return [next(streams[k]) for _ in range(steps)]

    first = list(ditto_stream(10, 16, 3))
    assert all(sorted(b.tolist()) == list(range(10)) for b in first)          # n < B: every sample
    assert [len(b) for b in ditto_stream(36, 16, 5)] == [16, 16, 16, 16, 16]  # partial batch dropped
    glob, _ = ditto_rounds(sim, start, UNEVEN_PARTICIPANTS, LAM, batches=code_batches)
    assert max_diff(sim.method.model, module_state(glob)) > 1e-3
