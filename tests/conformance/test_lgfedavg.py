"""LG-FedAvg against the authors' semantics (Liang et al. 2020, Alg. 1; their main_lg.py):
every client's model starts from a FedAvg-trained model; each round a sampled client
trains its whole model (own body, current global head) for E epochs, the server averages
the global layers (the head) and writes them into every client's model; each client is
scored with its own model. Here the FedAvg warm start is the run's first rounds."""
import copy

import numpy as np

from hetfl_core.science.personalization import head_parameter_names
from hetfl_core.science.system import dense_bits

import pytest
import torch
from torch import nn

from .literal_reference import (UNEVEN_SIZES, client_stream, loader_epoch, max_diff, module_state,
                                sum_then_divide, whole_epochs)
from .pfl_reference import (TOL, assert_scores_close, assert_state_close, build, round_orders,
                            scores, sgd, tiny_config, weighted_mean)


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


#: the functional reference's optimiser: plain SGD at the run's lr in every round
PLAIN = {"warmup_lr": None, "local_momentum": None}


def run(config, participants):
    sim, start = build(config)
    rows = [sim.round(t, clients=ids) for t, ids in enumerate(participants, start=1)]
    return sim, start, rows


def test_lg_fedavg_matches_the_authors_run_with_its_fedavg_warm_start():
    participants = [[0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2], [1, 2]]   # 3 never trains under LG
    config = tiny_config("lg-fedavg", rounds=4, options={"fedavg_share": 0.5, **PLAIN})
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
                                       options={"fedavg_share": 0.34, **PLAIN}), participants)
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
    config = tiny_config("lg-fedavg", rounds=4, options={"fedavg_share": 0.25, **PLAIN})
    sim, start, rows = run(config, participants)
    _, history, best = reference_lg(sim, start, participants, fedavg_rounds=1)
    assert np.allclose(rows[-1]["acc_clients"], history[-1][2], atol=1e-5)
    assert all(b >= a - 1e-12 for a, b in zip(rows[-1]["acc_clients"], best))


def test_no_warm_start_is_the_random_start_variant():
    participants = [[0, 1, 2, 3], [0, 2]]
    sim, start, rows = run(tiny_config("lg-fedavg", options={"fedavg_share": 0.0, **PLAIN}), participants)
    assert sim.method.fedavg_rounds == 0
    local, history, _ = reference_lg(sim, start, participants, fedavg_rounds=0)
    for k in range(4):
        assert_state_close(dict(sim.method.personal_model(k).named_parameters()), local[k])
    assert_scores_close(rows[-1], *history[-1])


def authors_lg(sim, start_module, participants, fedavg_rounds, shared, weighting="count"):
    """main_fed.py then main_lg.py as they run: warm-start rounds train a copy of the global
    model with LocalUpdate's SGD(lr 0.1, its default, momentum 0.5); LG rounds train each
    user's own model with SGD(lr, momentum 0.5); both over a shuffling loader that keeps
    the partial batch. The server adds the states to the first one and divides by m
    (``weighting="n"``: the n_k-weighted sum the package keeps on purpose), over every key
    in the warm start and over the ``shared`` keys after it, which it writes into every
    user's model. Returns every user's final state."""
    config, clients = sim.config, sim.data.clients

    def train(net, k, t, lr):
        optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.5)
        stream = client_stream(config, t, k)
        for _ in range(whole_epochs(config.local_epochs)):
            for idx in loader_epoch(clients[k].n_train, config.batch_size, stream, drop_last=False):
                net.zero_grad()
                nn.functional.cross_entropy(net(clients[k].x_train[idx]), clients[k].y_train[idx]).backward()
                optimizer.step()
        return net.state_dict()

    def server(states, ids, names):
        if weighting == "count":
            return sum_then_divide(states, names)
        total = float(sum(clients[k].n_train for k in ids))
        out = copy.deepcopy(states[0])
        for n in names:
            out[n] = sum(s[n] * (clients[k].n_train / total) for s, k in zip(states, ids))
        return out

    glob = copy.deepcopy(start_module)
    for t, ids in enumerate(participants[:fedavg_rounds], start=1):
        states = [train(copy.deepcopy(glob), k, t, 0.1) for k in ids]
        glob.load_state_dict(server(states, ids, list(states[0])))
    users = [copy.deepcopy(glob) for _ in clients]
    for t, ids in enumerate(participants[fedavg_rounds:], start=fedavg_rounds + 1):
        states = [train(users[k], k, t, config.lr) for k in ids]
        new = server(states, ids, shared)
        for user in users:
            user.load_state_dict({n: new[n] for n in shared}, strict=False)
    return {k: module_state(u) for k, u in enumerate(users)}


@pytest.mark.parametrize("shared_part", ["top", "bottom"])
def test_lg_fedavg_matches_the_authors_code_literally(shared_part):
    """Uneven clients, the run's lr 0.05: the warm start at the released code's lr 0.1 and
    momentum 0.5, LG rounds at momentum 0.5; the top layers shared (the paper) or, with
    ``shared_part="bottom"``, the first ones (the released CIFAR CNN: conv1 and conv2 for
    ``--num_layers_keep 2``). The package keeps its n_k-weighted average: it matches that
    variant of the authors' loop and not their sum/m."""
    participants = [[0, 1, 2, 3], [0, 1, 2, 3], [0, 2, 3], [1, 2, 3]]
    config = tiny_config("lg-fedavg", rounds=4, sizes=UNEVEN_SIZES, lr=0.05,
                         options={"fedavg_share": 0.5, "shared_part": shared_part, "head_layers": 2})
    sim, _ = build(config)
    start = copy.deepcopy(sim.method.model)
    for t, ids in enumerate(participants, start=1):
        sim.round(t, clients=ids)
    shared = sim.method.shared_names
    layers = [n for n, _ in start.named_parameters()]
    assert shared == (layers[:4] if shared_part == "bottom" else layers[-4:])
    weighted = authors_lg(sim, start, participants, 2, shared, weighting="n")
    for k, expected in weighted.items():
        assert max_diff(sim.method.personal_model(k), expected) <= TOL
    by_count = authors_lg(sim, start, participants, 2, shared)
    assert max(max_diff(sim.method.personal_model(k), s) for k, s in by_count.items()) > 1e-4
