"""FedRep against its reference semantics (Collins et al. 2021, Alg. 1 lines 5-9; PFLlib's
clientrep/serverrep): each round a client first trains its head for ``head_epochs`` with
the body frozen, then the body for E epochs with the head frozen (a fresh shuffle each
epoch), keeps the head and uploads the body for the data-weighted average."""
from hetfl_core.science.personalization import body_parameter_names

from hetfl_core.science.methods.base import seeded_generator

import copy

from .literal_reference import UNEVEN_SIZES, max_diff, pfllib_split_rounds
from .pfl_reference import (TOL, assert_scores_close, assert_state_close, batch_orders, build,
                            epoch_steps, sgd, tiny_config)
from .test_fedper import reference_split_round


def test_fedrep_matches_the_reference_head_then_body():
    participants = [[0, 1, 2, 3], [0, 3]]
    sim, start = build(tiny_config("fedrep", options={"head_epochs": 2.0}))
    rows = [sim.round(t, clients=ids) for t, ids in enumerate(participants, start=1)]
    config = sim.config
    shared = body_parameter_names(sim.method.model)
    head = [n for n in start if n not in shared]

    def train(model, params, c, t, k):
        stream = seeded_generator(config.seed, t, k)   # one stream: head epochs, then body
        n, batch = c.n_train, config.batch_size
        head_batches = batch_orders(stream, n, batch, epoch_steps(n, batch, 2.0))
        body_batches = batch_orders(stream, n, batch, epoch_steps(n, batch))
        params = sgd(model, params, c.x_train, c.y_train, head_batches, config.lr, trainable=head)
        return sgd(model, params, c.x_train, c.y_train, body_batches, config.lr, trainable=shared)

    body, private, history = reference_split_round(sim, start, participants, shared, train)
    assert_state_close(dict(sim.method.model.named_parameters()), body)
    for k in range(4):
        assert_state_close(dict(sim.method.personal_model(k).named_parameters()), private[k])
    for row, scored in zip(rows, history):
        assert_scores_close(row, *scored)


def test_fedrep_matches_pfllib_literally_on_uneven_clients():
    """PFLlib's FedRep loop: head passes with the body frozen, then body passes with the head
    frozen, both over the drop_last loader, on uneven clients."""
    participants = [[0, 1, 2, 3], [0, 2, 3]]
    sim, _ = build(tiny_config("fedrep", sizes=UNEVEN_SIZES, options={"head_epochs": 2.0}))
    start = copy.deepcopy(sim.method.model)
    for t, ids in enumerate(participants, start=1):
        sim.round(t, clients=ids)
    method = sim.method
    theirs = pfllib_split_rounds(sim, start, participants, method.shared_names,
                                 [(method.private_names, 2.0), (method.shared_names, sim.config.local_epochs)])
    for k, expected in theirs.items():
        assert max_diff(method.personal_model(k), expected) <= TOL
