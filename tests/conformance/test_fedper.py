"""FedPer against its reference semantics (Arivazhagan et al. 2019, Sec. 3 and Alg. 1-2;
PFLlib's clientper/serverper): every client starts from the initial model, trains body
and head together for E epochs from the global body and its own head, keeps the head and
uploads the body; the server averages bodies weighted by n_k. Each client is scored with
the current global body and its own (possibly stale) head."""
import copy

from hetfl_core.science.personalization import body_parameter_names

from .literal_reference import UNEVEN_SIZES, max_diff, pfllib_split_rounds
from .pfl_reference import (TOL, assert_scores_close, assert_state_close, build, round_orders,
                            scores, sgd, tiny_config, weighted_mean)


def reference_split_round(sim, start, participants, shared, train):
    """Rounds of a shared/private split method: ``train(model, params, client, t, k)`` is a
    client's local update; the server averages the ``shared`` names weighted by n_k."""
    model = copy.deepcopy(sim.method.model)
    body = {n: start[n] for n in shared}
    own = {n: v for n, v in start.items() if n not in shared}
    private = {k: dict(own) for k in range(len(sim.data.clients))}
    history = []
    for t, ids in enumerate(participants, start=1):
        uploads, sizes = [], []
        for k in ids:
            c = sim.data.clients[k]
            params = train(model, {**body, **private[k]}, c, t, k)
            private[k] = {n: v for n, v in params.items() if n not in shared}
            uploads.append({n: params[n] for n in shared})
            sizes.append(c.n_train)
        body = weighted_mean(uploads, sizes)
        history.append(scores(model, [({**body, **private[k]}, c.x_test, c.y_test)
                                      for k, c in enumerate(sim.data.clients)]))
    return body, private, history


def test_fedper_matches_the_reference_including_a_client_that_sat_out():
    participants = [[0, 1, 2], [1, 2, 3]]       # client 0 keeps a stale head, 3 its initial one
    sim, start = build(tiny_config("fedper"))
    rows = [sim.round(t, clients=ids) for t, ids in enumerate(participants, start=1)]
    config = sim.config

    def train(model, params, c, t, k):
        orders = round_orders(config, t, k, c.n_train)
        return sgd(model, params, c.x_train, c.y_train, orders, config.lr)

    shared = body_parameter_names(sim.method.model)
    body, private, history = reference_split_round(sim, start, participants, shared, train)
    assert_state_close(dict(sim.method.model.named_parameters()), body)
    for k in range(4):
        assert_state_close(dict(sim.method.personal_model(k).named_parameters()), private[k])
    for row, scored in zip(rows, history):
        assert_scores_close(row, *scored)


def test_fedper_matches_pfllib_literally_on_uneven_clients():
    """PFLlib's FedPer loop (drop_last loader; client 2, smaller than a batch, keeps its
    model and is averaged in with its n_k) against every client's personal model."""
    participants = [[0, 1, 2, 3], [0, 2, 3], [1, 2]]
    sim, _ = build(tiny_config("fedper", rounds=3, sizes=UNEVEN_SIZES))
    start = copy.deepcopy(sim.method.model)
    for t, ids in enumerate(participants, start=1):
        sim.round(t, clients=ids)
    names = [n for n, _ in start.named_parameters()]
    theirs = pfllib_split_rounds(sim, start, participants, sim.method.shared_names,
                                 [(names, sim.config.local_epochs)])
    for k, expected in theirs.items():
        assert max_diff(sim.method.personal_model(k), expected) <= TOL
