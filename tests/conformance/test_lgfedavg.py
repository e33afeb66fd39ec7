"""LG-FedAvg against the authors' semantics (Liang et al. 2020, Alg. 1; their main_lg.py):
every client's model starts from a FedAvg-trained model; each round a sampled client
trains its whole model (own body, current global head) for E epochs, the server averages
the global layers (the head) and writes them into every client's model; each client is
scored with its own model. Here the FedAvg warm start is the run's first rounds."""
import copy

import numpy as np

from hetfl_core.personalization import head_parameter_names
from hetfl_core.system import dense_bits

from .pfl_reference import (assert_scores_close, assert_state_close, build, round_orders, scores,
                            sgd, tiny_config, weighted_mean)


def reference_lg(sim, start, participants, fedavg_rounds, weighting="n"):
    """The authors' run: ``fedavg_rounds`` FedAvg rounds, then LG-FedAvg rounds. Returns
    every client's model and the per-round scores (current models) and best-so-far
    per-client accuracies (the authors' report)."""
    config, model = sim.config, copy.deepcopy(sim.method.model)
    head = head_parameter_names(sim.method.model)
    clients = sim.data.clients
    w = dict(start)
    local = None
    history, best = [], None

    def train(params, t, k):
        c = clients[k]
        orders = round_orders(config, t, k, c.n_train)
        return sgd(model, params, c.x_train, c.y_train, orders, config.lr)

    def average(states, ids):
        weights = [clients[k].n_train for k in ids] if weighting == "n" else [1.0] * len(ids)
        return weighted_mean(states, weights)

    for t, ids in enumerate(participants, start=1):
        if t <= fedavg_rounds:
            w = average([train(w, t, k) for k in ids], ids)
            continue
        if local is None:                          # every client starts from the FedAvg model
            local = {k: dict(w) for k in range(len(clients))}
        trained = {k: train(local[k], t, k) for k in ids}
        new_head = average([{n: trained[k][n] for n in head} for k in ids], ids)
        for k in range(len(clients)):
            local[k] = {**trained.get(k, local[k]), **new_head}
        scored = scores(model, [(local[k], c.x_test, c.y_test) for k, c in enumerate(clients)])
        history.append(scored)
        best = scored[2] if best is None else list(np.maximum(best, scored[2]))
    return local, history, best


def run(config, participants):
    sim, start = build(config)
    rows = [sim.round(t, clients=ids) for t, ids in enumerate(participants, start=1)]
    return sim, start, rows


def test_lg_fedavg_matches_the_authors_run_with_its_fedavg_warm_start():
    participants = [[0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2], [1, 2]]   # 3 never trains under LG
    config = tiny_config("lg-fedavg", rounds=4, options={"fedavg_share": 0.5})
    sim, start, rows = run(config, participants)
    assert sim.method.fedavg_rounds == 2
    local, history, _ = reference_lg(sim, start, participants, fedavg_rounds=2)
    for k in range(4):
        assert_state_close(dict(sim.method.personal_model(k).named_parameters()), local[k])
    for row, scored in zip(rows[2:], history):
        assert_scores_close(row, *scored)


def test_the_warm_start_rounds_are_charged_as_fedavg_rounds():
    participants = [[0, 1, 2, 3]] * 3
    sim, start, rows = run(tiny_config("lg-fedavg", rounds=3), participants)   # share 0.8: 2 + 1
    fedavg_sim, _, fedavg_rows = run(tiny_config("fedavg", rounds=3), participants)
    model = sim.method.model
    every = sum(p.numel() for p in model.parameters())
    head = sum(p.numel() for n, p in model.named_parameters() if n in head_parameter_names(model))
    per_round = np.diff([0.0] + [r["uplink_bits"] for r in rows])
    assert list(per_round) == [4 * dense_bits(every)] * 2 + [4 * dense_bits(head)]
    for ours, theirs in zip(rows[:2], fedavg_rows[:2]):        # the same work, the same bill
        assert ours["flops"] == theirs["flops"] and ours["time_s"] == theirs["time_s"]
    assert rows[2]["flops"] > rows[1]["flops"]


def test_unweighted_head_average_is_a_deviation_kept_on_purpose():
    """The authors divide the summed heads by m; the package weights them by n_k. With
    unequal clients the package matches the weighted reference and not the authors'."""
    participants = [[0, 1, 2, 3]] * 3
    sim, start, rows = run(tiny_config("lg-fedavg", rounds=3, sizes=[60, 100, 40, 80],
                                       options={"fedavg_share": 0.34}), participants)
    weighted, history, _ = reference_lg(sim, start, participants, fedavg_rounds=1)
    unweighted, _, _ = reference_lg(sim, start, participants, fedavg_rounds=1, weighting="count")
    ours = dict(sim.method.personal_model(0).named_parameters())
    assert_state_close(ours, weighted[0])
    name = head_parameter_names(sim.method.model)[0]
    assert float((ours[name].detach() - unweighted[0][name]).abs().max()) > 1e-4
    assert_scores_close(rows[-1], *history[-1])


def test_current_models_are_scored_not_the_best_so_far():
    """The authors report, per client, the best model so far chosen on the test set; the
    package scores each client's current model (an honest score, never above the authors')."""
    participants = [[0, 1, 2, 3]] * 4
    config = tiny_config("lg-fedavg", rounds=4, options={"fedavg_share": 0.25})
    sim, start, rows = run(config, participants)
    _, history, best = reference_lg(sim, start, participants, fedavg_rounds=1)
    assert np.allclose(rows[-1]["acc_clients"], history[-1][2], atol=1e-5)
    assert all(b >= a - 1e-12 for a, b in zip(rows[-1]["acc_clients"], best))


def test_no_warm_start_is_the_random_start_variant():
    participants = [[0, 1, 2, 3], [0, 2]]
    sim, start, rows = run(tiny_config("lg-fedavg", options={"fedavg_share": 0.0}), participants)
    assert sim.method.fedavg_rounds == 0
    local, history, _ = reference_lg(sim, start, participants, fedavg_rounds=0)
    for k in range(4):
        assert_state_close(dict(sim.method.personal_model(k).named_parameters()), local[k])
    assert_scores_close(rows[-1], *history[-1])
