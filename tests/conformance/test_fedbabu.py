"""FedBABU against the authors' semantics (Oh et al. 2022, Alg. 1; their main_fed.py and
personalisation notebook, and PFLlib's clientbabu/serverbabu): clients train only the
body under the shared random head, the server averages bodies weighted by n_k; after the
last round each client fine-tunes the whole network from the final global model (5
epochs, the run's lr, momentum 0.9) and is scored with it. Before that, the global model
(body + random head) is what every client holds and is scored with."""
import copy

from hetfl_core.methods.base import seeded_generator
from hetfl_core.personalization import body_parameter_names

from .pfl_reference import (assert_scores_close, assert_state_close, batch_orders, build,
                            epoch_steps, global_scores, round_orders, scores, sgd, tiny_config,
                            weighted_mean)


def reference_fedbabu(sim, start, participants, epochs=5.0, momentum=0.9, part="full", steps=None):
    """The authors' run: the global model after each round, and the fine-tuned clients."""
    config, model = sim.config, copy.deepcopy(sim.method.model)
    clients = sim.data.clients
    body = body_parameter_names(sim.method.model)
    w, states = dict(start), []
    for t, ids in enumerate(participants, start=1):
        uploads = []
        for k in ids:
            c = clients[k]
            orders = round_orders(config, t, k, c.n_train)
            uploads.append(sgd(model, w, c.x_train, c.y_train, orders, config.lr, trainable=body))
        bodies = [{n: u[n] for n in body} for u in uploads]
        w = {**w, **weighted_mean(bodies, [clients[k].n_train for k in ids])}
        states.append(w)

    def finetune(w_final, k):
        c = clients[k]
        count = steps if steps is not None else epoch_steps(c.n_train, config.batch_size, epochs)
        stream = seeded_generator(config.seed, 7, k)
        batches = batch_orders(stream, c.n_train, config.batch_size, count)
        names = None if part == "full" else [n for n in start if n not in body]
        return sgd(model, w_final, c.x_train, c.y_train, batches, config.lr, trainable=names,
                   momentum=momentum)

    return model, states, finetune


def run(config, participants):
    sim, start = build(config)
    rows = [sim.round(t, clients=ids) for t, ids in enumerate(participants, start=1)]
    return sim, start, rows


PARTICIPANTS = [[0, 1, 2, 3], [0, 1, 3]]


def test_fedbabu_matches_the_authors_training_and_full_fine_tune():
    sim, start, rows = run(tiny_config("fedbabu"), PARTICIPANTS)
    model, states, finetune = reference_fedbabu(sim, start, PARTICIPANTS)
    assert_state_close(dict(sim.method.model.named_parameters()), states[-1])
    clients = sim.data.clients
    # round 1 (not the last): every client is scored with the global model
    assert_scores_close(rows[0], *scores(model, [(states[0], c.x_test, c.y_test) for c in clients]))
    assert_scores_close(rows[0], *global_scores(model, states[0], sim), None, key="global")
    # after the last round: the whole network fine-tuned per client from the final global model
    tuned = {k: finetune(states[-1], k) for k in range(len(clients))}
    for k in range(len(clients)):
        assert_state_close(dict(sim.method.personal_model(k).named_parameters()), tuned[k])
    held = [(tuned[k], c.x_test, c.y_test) for k, c in enumerate(clients)]
    assert_scores_close(rows[-1], *scores(model, held))
    assert_scores_close(rows[-1], *global_scores(model, states[-1], sim), None, key="global")


def test_head_only_fine_tune_variant():
    """``finetune="head", finetune_steps=10, finetune_momentum=0, finetune_when="every"``: the
    head-only fine-tune at every evaluation (not the paper's protocol; kept as an option)."""
    options = dict(finetune="head", finetune_steps=10, finetune_momentum=0.0, finetune_when="every")
    sim, start, rows = run(tiny_config("fedbabu", options=options), PARTICIPANTS)
    model, states, finetune = reference_fedbabu(sim, start, PARTICIPANTS, momentum=0.0, part="head",
                                                steps=10)
    clients = sim.data.clients
    for row, w in zip(rows, states):
        tuned = [finetune(w, k) for k in range(len(clients))]
        held = [(p, c.x_test, c.y_test) for p, c in zip(tuned, clients)]
        assert_scores_close(row, *scores(model, held))
    body = body_parameter_names(sim.method.model)
    ours = dict(sim.method.personal_model(1).named_parameters())
    assert_state_close(ours, states[-1], names=body)             # the body stays the global one
    full = reference_fedbabu(sim, start, PARTICIPANTS)[2](states[-1], 1)
    assert max(float((ours[n].detach() - full[n]).abs().max()) for n in body) > 1e-4


def test_fine_tuning_is_not_charged():
    """Fine-tuning happens at evaluation, which no method is charged for: the bill is the
    training's, whatever the fine-tune."""
    rows = run(tiny_config("fedbabu"), PARTICIPANTS)[2]
    none = run(tiny_config("fedbabu", options={"finetune_epochs": 0.0}), PARTICIPANTS)[2]
    keys = ("flops", "uplink_bits", "downlink_bits", "time_s", "energy_j")
    assert all(rows[-1][k] == none[-1][k] for k in keys)
    assert rows[-1]["acc_personal"] != none[-1]["acc_personal"]
