"""FedAvg against its reference semantics (PFLlib's clientavg/serveravg; McMahan et al.
2017, Alg. 1): E epochs of plain minibatch SGD from the broadcast model on every
sampled client, then the data-weighted average of the client models; every client is
scored with the global model on its own test split, pooled."""
import copy

import pytest

from .pfl_reference import (assert_scores_close, assert_state_close, build, global_scores,
                            round_orders, scores, sgd, tiny_config, weighted_mean)


def reference_fedavg(sim, start, rounds, participants, prox_mu=0.0):
    """The reference run: returns the global parameters after each round."""
    config, model = sim.config, copy.deepcopy(sim.method.model)
    w, states = dict(start), []
    for t in range(1, rounds + 1):
        locals_, sizes = [], []
        for k in participants[t - 1]:
            c = sim.data.clients[k]
            orders = round_orders(config, t, k, c.n_train)
            locals_.append(sgd(model, w, c.x_train, c.y_train, orders, config.lr,
                               prox=(prox_mu, w) if prox_mu else None))
            sizes.append(c.n_train)
        w = weighted_mean(locals_, sizes)
        states.append(w)
    return model, states


def run_package(config, participants):
    sim, start = build(config)
    rows = [sim.round(t, clients=ids) for t, ids in enumerate(participants, start=1)]
    return sim, start, rows


@pytest.mark.parametrize("sizes", [None, [60, 100, 40, 80]], ids=["equal", "unequal"])
def test_fedavg_matches_the_reference_round_for_round(sizes):
    participants = [[0, 1, 2, 3], [0, 2, 3]]
    sim, start, rows = run_package(tiny_config("fedavg", sizes=sizes), participants)
    model, states = reference_fedavg(sim, start, 2, participants)
    assert_state_close(dict(sim.method.model.named_parameters()), states[-1])
    for row, w in zip(rows, states):
        acc, loss, each = scores(model, [(w, c.x_test, c.y_test) for c in sim.data.clients])
        assert_scores_close(row, acc, loss, each)
        assert_scores_close(row, *global_scores(model, w, sim), None, key="global")
