"""FedProx against its reference semantics (Li et al. 2020, Eq. 2 and Alg. 2; PFLlib's
PerturbedGradientDescent): each local step follows grad F_k(w) + mu (w - w_t), w_t the
round's broadcast model, then FedAvg's weighted average."""
import copy

from .literal_reference import UNEVEN_SIZES, max_diff, module_state
from .pfl_reference import TOL, assert_scores_close, assert_state_close, build, scores, tiny_config
from .test_fedavg import pfllib_fedavg, reference_fedavg, run_package


def test_fedprox_matches_the_reference_with_a_strong_pull():
    participants = [[0, 1, 2, 3], [1, 2]]
    config = tiny_config("fedprox", options={"mu": 0.5})
    sim, start, rows = run_package(config, participants)
    model, states = reference_fedavg(sim, start, 2, participants, prox_mu=0.5)
    assert_state_close(dict(sim.method.model.named_parameters()), states[-1])
    acc, loss, each = scores(model, [(states[-1], c.x_test, c.y_test) for c in sim.data.clients])
    assert_scores_close(rows[-1], acc, loss, each)
    # the pull is strong enough to matter: plain FedAvg lands elsewhere
    _, plain = reference_fedavg(sim, start, 2, participants)
    assert max(float((plain[-1][n] - states[-1][n]).abs().max()) for n in plain[-1]) > 1e-3


def test_fedprox_matches_pfllib_literally_on_uneven_clients():
    """PFLlib's FedProx loop (its loader drops the partial batch) on uneven clients."""
    participants = [[0, 1, 2, 3], [1, 2, 3]]
    sim, _ = build(tiny_config("fedprox", sizes=UNEVEN_SIZES, options={"mu": 0.5}))
    start = copy.deepcopy(sim.method.model)
    for t, ids in enumerate(participants, start=1):
        sim.round(t, clients=ids)
    theirs = pfllib_fedavg(sim, start, participants, prox_mu=0.5)
    assert max_diff(sim.method.model, module_state(theirs)) <= TOL
