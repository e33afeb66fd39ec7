"""FedProx against its reference semantics (Li et al. 2020, Eq. 2 and Alg. 2; PFLlib's
PerturbedGradientDescent): each local step follows grad F_k(w) + mu (w - w_t), w_t the
round's broadcast model, then FedAvg's weighted average."""
from .pfl_reference import assert_scores_close, assert_state_close, scores, tiny_config
from .test_fedavg import reference_fedavg, run_package


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
