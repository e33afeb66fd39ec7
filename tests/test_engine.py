import numpy as np
import pytest
import torch

from hetfl_core import RunConfig, run
from hetfl_core.runtime.engine import build_simulation
from hetfl_core.science.methods.base import seeded_generator
from hetfl_core.science.errors import ConfigError, DivergenceError
from hetfl_core.science.methods.fedavg import FedAvg, weighted_average

KEYS = {"round", "time_s", "acc_global", "acc_personal", "loss", "uplink_bits", "downlink_bits", "flops", "clients"}


def test_same_config_same_numbers_other_seed_other_numbers(tiny_config):
    a, b = run(tiny_config), run(tiny_config)
    assert a["history"] == b["history"]       # every field, wall-clock free, to the bit
    c = run(tiny_config.replace(seed=1))
    assert c["history"][-1]["loss"] != a["history"][-1]["loss"]


def test_history_rows_and_costs(tiny_config):
    config = tiny_config.replace(heterogeneity="medium")
    sim = build_simulation(config)
    n_params = sum(p.numel() for p in sim.method.model.parameters())
    history = run(config)["history"]
    assert all(KEYS <= set(row) for row in history)
    previous_time = 0.0
    for i, row in enumerate(history, start=1):
        assert row["uplink_bits"] == i * config.clients * 32 * n_params
        assert row["downlink_bits"] == row["uplink_bits"]
        slowest = max(c["time_s"] for c in row["clients"])
        assert row["time_s"] == pytest.approx(previous_time + slowest)
        assert row["idle_s"] == pytest.approx(sum(slowest - c["time_s"] for c in row["clients"]))
        previous_time = row["time_s"]
    assert history[1]["flops"] == pytest.approx(2 * history[0]["flops"])
    assert 0 <= history[-1]["acc_personal"] <= 1


def test_one_round_changes_the_global_model(tiny_config):
    sim = build_simulation(tiny_config)
    before = {k: v.clone() for k, v in sim.method.model.state_dict().items()}
    ids = [0, 1]
    sim.round(1, clients=ids, evaluate=False)
    reports = sim.reports
    after = sim.method.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    expected = weighted_average([r.weights for r in reports], [r.n_samples for r in reports])
    n0, n1 = reports[0].n_samples, reports[1].n_samples
    for k in after:
        hand = (n0 * reports[0].weights[k] + n1 * reports[1].weights[k]) / (n0 + n1)
        assert torch.allclose(after[k], hand, atol=1e-6) and torch.allclose(expected[k], hand, atol=1e-6)


def distance_to_global(config):
    sim = build_simulation(config)
    client = sim.data.clients[0]
    plan = sim.method.configure_round(1, [0])[0]
    report = sim.method.client_update(client, plan, seeded_generator(0, 1, 0))
    start = sim.method.model.state_dict()
    return sum(float(((report.weights[k] - start[k]) ** 2).sum()) for k in start)


def test_fedprox_keeps_local_model_closer(tiny_config):
    config = tiny_config.replace(local_steps=30)
    assert distance_to_global(config.replace(method="fedprox", options={"mu": 1.0})) < \
        0.8 * distance_to_global(config)


def test_divergence_is_one_clear_line(tiny_config):
    with pytest.raises(DivergenceError) as err:
        run(tiny_config.replace(lr=1e8, rounds=3, local_steps=20))
    assert "\n" not in str(err.value) and "lr" in str(err.value)


def test_a_mu_option_is_fedprox_own(tiny_config):
    """FedAvg's local step has no proximal term: a FedAvg subclass with an option named mu
    trains exactly as FedAvg does, and only FedProx's own mu pulls towards w_t."""
    from hetfl_core.science.methods import register

    @register
    class WithMu(FedAvg, name="toy-with-mu"):
        """A FedAvg that only declares an option called mu."""

        defaults = {"mu": 1.0}

    config = tiny_config.replace(local_steps=30)
    assert distance_to_global(config.replace(method="toy-with-mu")) == distance_to_global(config)
    assert distance_to_global(config.replace(method="fedprox", options={"mu": 1.0})) != distance_to_global(config)


def test_divergence_names_the_options_the_method_declares_step_like(tiny_config):
    """The hint names FedProx's mu where it is set; a method that declares none is told lr
    alone; a plug-in's own step-like option is named as well."""
    from hetfl_core.science.methods import register

    with pytest.raises(DivergenceError) as prox:
        run(tiny_config.replace(method="fedprox", options={"mu": 1e4}, rounds=3, local_steps=20))
    assert "mu (now 10000.0)" in str(prox.value)
    with pytest.raises(DivergenceError) as plain:
        run(tiny_config.replace(lr=1e8, rounds=3, local_steps=20))
    assert "lr (now 100000000.0)" in str(plain.value) and "mu" not in str(plain.value)

    @register
    class Blows(FedAvg, name="toy-blows"):
        """A toy whose local loss is never finite."""

        defaults = {"gain": 3.0, "spare": 0.0}
        step_like_options = ("gain", "spare")

        def client_step(self, client, plan, state, generator):
            report, state = yield from super().client_step(client, plan, state, generator)
            report.loss = float("inf")
            return report, state

    with pytest.raises(DivergenceError) as own:
        run(tiny_config.replace(method="toy-blows"))
    assert "gain (now 3.0)" in str(own.value) and "spare" not in str(own.value)


def test_partial_participation_samples_the_right_number(tiny_config):
    history = run(tiny_config.replace(clients=10, participation=0.3, rounds=3))["history"]
    assert all(len(row["clients"]) == 3 for row in history)
    assert len({tuple(c["id"] for c in row["clients"]) for row in history}) > 1


def test_eval_global_off_skips_only_the_global_score(tiny_config):
    on, off = run(tiny_config), run(tiny_config.replace(eval_global=False))
    assert all(row["acc_global"] is None for row in off["history"])
    assert all(row["acc_global"] is not None for row in on["history"])
    assert [r["acc_personal"] for r in off["history"]] == [r["acc_personal"] for r in on["history"]]


def test_eval_global_every_scores_the_global_model_less_often(tiny_config):
    config = tiny_config.replace(method="fjord", rounds=4, eval_every=1)
    every, sparse = run(config), run(config.replace(eval_global_every=3))
    scored = [row["round"] for row in sparse["history"] if row["acc_global"] is not None]
    assert scored == [3, 4]                     # every third round, and after the last
    assert [("acc_widths" in row) for row in sparse["history"]] == [False, False, True, True]
    for a, b in zip(every["history"], sparse["history"]):
        assert a["acc_personal"] == b["acc_personal"]
        if b["acc_global"] is not None:
            assert (a["acc_global"], a["acc_widths"]) == (b["acc_global"], b["acc_widths"])


def test_invalid_configs_fail_before_training():
    for bad in [dict(rounds=0), dict(alpha=0.0), dict(participation=1.5), dict(lr=-1), dict(method="nope"),
                dict(dataset="nope"), dict(options={"foo": 1}), dict(heterogeneity="extreme"),
                dict(eval_global="no"), dict(eval_global_every=0)]:
        with pytest.raises(ConfigError):
            RunConfig(**{"dataset": "digits", **bad}).validate()


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fedavg_learns_digits(seed):
    config = RunConfig(dataset="digits", model="cnn", partition="iid", clients=10, rounds=10, lr=0.1,
                       local_epochs=3, batch_size=16, seed=seed)
    history = run(config)["history"]
    assert history[-1]["acc_personal"] >= 0.8
    assert history[-1]["acc_personal"] > history[0]["acc_personal"] + 0.4


@pytest.mark.slow
def test_iid_beats_pathological_split_on_global_accuracy():
    scores = {}
    for partition in ("iid", "shards"):
        accs = [run(RunConfig(dataset="digits", model="cnn", partition=partition, classes_per_client=1,
                              clients=10, rounds=8, lr=0.1, local_epochs=3, batch_size=16,
                              seed=s))["history"][-1]["acc_global"]
                for s in (0, 1)]
        scores[partition] = np.mean(accs)
    assert scores["iid"] > scores["shards"] + 0.1


def test_each_personalised_model_is_built_once_an_evaluation(tiny_config):
    """A personalised model can cost a fine-tuning (FedBABU): the test and validation splits
    are scored with one build of it."""
    from hetfl_core.runtime.engine import evaluate_method

    sim = build_simulation(tiny_config.replace(method="fedbabu", val_fraction=0.2))
    built = []
    personal_model = sim.method.personal_model
    sim.method.personal_model = lambda client_id: built.append(client_id) or personal_model(client_id)
    row = evaluate_method(sim)
    assert sorted(built) == list(range(tiny_config.clients))
    assert row["acc_val"] is not None and row["acc_personal"] is not None
