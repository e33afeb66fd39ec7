"""FedAvg against its reference semantics (PFLlib's clientavg/serveravg; McMahan et al.
2017, Alg. 1): E epochs of plain minibatch SGD from the broadcast model on every
sampled client, then the data-weighted average of the client models; every client is
scored with the global model on its own test split, pooled."""
import copy
import math

import pytest
import torch

from .literal_reference import (UNEVEN_SIZES, client_stream, max_diff, module_state, pfllib_average,
                                train_epochs, whole_epochs)
from .pfl_reference import (TOL, assert_scores_close, assert_state_close, build, global_scores,
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


def pfllib_fedavg(sim, start_module, participants, drop_last=True, prox_mu=0.0):
    """PFLlib's FedAvg (or FedProx) written as its code runs: per client a copy of the global
    module, ``SGD(lr)`` (FedProx: the gradient plus mu (w - w_t)), E passes of a shuffling,
    ``drop_last`` loader, then the zeroed global plus each model times n_k / n."""
    config = sim.config
    glob = copy.deepcopy(start_module)
    for t, ids in enumerate(participants, start=1):
        uploads, weights = [], []
        for k in ids:
            client = sim.data.clients[k]
            local = copy.deepcopy(glob)
            centre = module_state(glob)

            def proximal(module, centre=centre):
                return 0.5 * prox_mu * sum(((p - centre[n]) ** 2).sum() for n, p in module.named_parameters())
            optimizer = torch.optim.SGD(local.parameters(), lr=config.lr)
            train_epochs(local, client, config.batch_size, whole_epochs(config.local_epochs), optimizer,
                         client_stream(config, t, k), drop_last, proximal if prox_mu else None)
            uploads.append(local)
            weights.append(client.n_train)
        pfllib_average(glob, uploads, weights)
    return glob


@pytest.mark.parametrize("drop_last", [True, False], ids=["pfllib-drop-last", "partial-batch-kept"])
def test_fedavg_matches_pfllib_literally_on_uneven_clients(drop_last):
    """Uneven clients (56, 36, 10, 72 samples, batch 16): PFLlib's loader drops each partial
    batch and client 2 takes no step yet is averaged in with its n_k (the default); the
    option ``drop_last=False`` keeps the partial batches."""
    participants = [[0, 1, 2, 3], [0, 2, 3]]
    options = {} if drop_last else {"drop_last": False}
    sim, _ = build(tiny_config("fedavg", sizes=UNEVEN_SIZES, options=options))
    start = copy.deepcopy(sim.method.model)
    rows = [sim.round(t, clients=ids) for t, ids in enumerate(participants, start=1)]
    theirs = pfllib_fedavg(sim, start, participants, drop_last=drop_last)
    assert max_diff(sim.method.model, module_state(theirs)) <= TOL
    steps = {c["id"]: c["local_steps"] for c in rows[0]["clients"]}
    assert steps == ({0: 3, 1: 2, 2: 0, 3: 4} if drop_last else {0: 4, 1: 3, 2: 1, 3: 5})
    assert all(math.isfinite(r["loss"]) for r in rows)
    other = pfllib_fedavg(sim, start, participants, drop_last=not drop_last)
    assert max_diff(sim.method.model, module_state(other)) > 1e-3      # the loader matters
