import torch

from hetfl_core import RunConfig, run
from hetfl_core.runtime.engine import build_simulation
from hetfl_core.science.methods.base import seeded_generator
from hetfl_core.science.methods import METHODS
from hetfl_core.science.system import dense_bits
from hetfl_core.science.training import local_sgd, clone_model


def one_round(**options):
    config = RunConfig(method="ditto", dataset="digits", model="cnn", partition="shards",
                       clients=4, rounds=1, options=options)
    sim = build_simulation(config)
    start = clone_model(sim.method.model)
    sim.round(1, clients=[0, 1, 2, 3], evaluate=False)
    return sim, start, sim.reports


def distance(a, b):
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    return sum(float(((pa[n] - pb[n]) ** 2).sum().detach()) for n in pa) ** 0.5


def test_registered_with_defaults():
    assert METHODS["ditto"].defaults["lam"] == 0.1


def test_lambda_zero_personal_is_local_training_from_the_initial_model():
    sim, start, reports = one_round(lam=0.0)
    client = sim.data.clients[0]
    model = clone_model(start)
    local_sgd(model, client.x_train, client.y_train, reports[0].local_steps, sim.config.batch_size,
              sim.config.lr, seeded_generator(0, 1, 0))
    mine = dict(sim.method.personal_model(0).named_parameters())
    assert all(torch.allclose(mine[n], p) for n, p in model.named_parameters())
    # ... which is also the global update it uploaded (same batches, no pull)
    assert all(torch.allclose(mine[n], reports[0].weights[n]) for n in mine)


def test_large_lambda_pulls_personal_to_global():
    far = one_round(lam=0.0)
    near = one_round(lam=1 / 0.05)  # lr * lam = 1: each step restarts at w^t
    d_far = distance(far[0].method.personal_model(1), far[1])
    d_near = distance(near[0].method.personal_model(1), near[1])
    assert d_near < 0.5 * d_far


def test_costs_and_global_model_is_fedavg():
    """Ditto's global step is FedAvg's on the same batches (Ditto keeps the partial batch,
    FedAvg's PFLlib default drops it, so FedAvg runs with drop_last=False here)."""
    sim, start, reports = one_round()
    n = sum(p.numel() for p in start.parameters())
    assert all(r.uplink_bits == dense_bits(n) == r.downlink_bits for r in reports)
    fedavg = build_simulation(sim.config.replace(method="fedavg", options={"drop_last": False}))
    plans = fedavg.method.configure_round(1, [0])
    single = fedavg.method.client_update(fedavg.data.clients[0], plans[0], seeded_generator(0, 1, 0))
    assert reports[0].flops == 2 * single.flops  # global and personal training
    assert all(torch.allclose(reports[0].weights[k], v) for k, v in single.weights.items())
    # a client that has not taken part yet is scored with the initial model w^0 (Alg. 1's v_k^0)
    partial = build_simulation(sim.config)
    partial.round(1, clients=[0, 1], evaluate=False)
    assert distance(start, partial.method.personal_model(3)) == 0.0
    assert distance(partial.method.model, partial.method.personal_model(3)) > 0.0
    later = build_simulation(sim.config.replace(options={"personal_start": "global"}))
    later.round(1, clients=[0, 1], evaluate=False)
    assert distance(later.method.model, later.method.personal_model(3)) == 0.0


def test_runs_two_rounds_on_digits():
    result = run(RunConfig(method="ditto", dataset="digits", model="cnn", clients=4, rounds=2,
                           partition="dirichlet", alpha=0.5))
    assert len(result["history"]) == 2
    assert result["history"][-1]["acc_personal"] > 0.1
    assert result["history"][-1]["acc_global"] is not None
