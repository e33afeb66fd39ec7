"""FedRep against its reference semantics (Collins et al. 2021, Alg. 1 lines 5-9; PFLlib's
clientrep/serverrep): each round a client first trains its head for ``head_epochs`` with
the body frozen, then the body for E epochs with the head frozen (a fresh shuffle each
epoch), keeps the head and uploads the body for the data-weighted average."""
from hetfl_core.personalization import body_parameter_names

from hetfl_core.methods.base import seeded_generator

from .pfl_reference import (assert_scores_close, assert_state_close, batch_orders, build,
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
