"""The plug-in base: a method's class keywords, and its two-step construction (the
constructor, then ``setup`` once the run is built)."""
import pytest
import torch

from hetfl_core import run
from hetfl_core.runtime.engine import build_simulation, run_rounds
from hetfl_core.science.methods import METHODS, register
from hetfl_core.science.methods.fedavg import FedAvg


class SetupProbe(FedAvg, name="toy-setup-probe", label="Setup probe"):
    """A toy that records its setup calls and the rounds it plans."""

    def setup(self, sim):
        super().setup(sim)
        self.setup_calls = getattr(self, "setup_calls", 0) + 1
        self.saw = {"this method": sim.method is self, "its cost model": self.cost_model is sim.cost_model,
                    "no round yet": not sim.plans and not sim.reports}
        self.planned_after_setup = []

    def configure_round(self, round_idx, client_ids):
        self.planned_after_setup.append(round_idx)
        return super().configure_round(round_idx, client_ids)


def test_setup_runs_once_on_the_built_run_before_round_1(tiny_config):
    register(SetupProbe)
    sim = build_simulation(tiny_config.replace(method="toy-setup-probe", rounds=3))
    method = sim.method
    assert method.setup_calls == 1 and all(method.saw.values()), method.saw
    run_rounds(sim)
    assert method.setup_calls == 1 and method.planned_after_setup == [1, 2, 3]


class ConstructorOnly(FedAvg):
    """A plug-in written against the constructor alone: no setup, attributes for its names."""

    name = "toy-constructor-only"
    defaults = {"beta": 0.5}

    def __init__(self, config, data, devices):
        super().__init__(config, data, devices)
        self.velocity = {n: torch.zeros_like(p) for n, p in self.model.state_dict().items()}

    def aggregate(self, round_idx, reports):
        before = {n: p.clone() for n, p in self.model.state_dict().items()}
        super().aggregate(round_idx, reports)
        for n, p in self.model.state_dict().items():
            self.velocity[n] = self.options["beta"] * self.velocity[n] + (p - before[n])


def test_a_plugin_without_setup_runs_and_gets_the_cost_model(tiny_config):
    register(ConstructorOnly)
    config = tiny_config.replace(method="toy-constructor-only")
    sim = build_simulation(config)
    assert sim.method.cost_model is sim.cost_model
    assert ConstructorOnly.label == "toy-constructor-only"
    history = run(config)["history"]
    assert len(history) == config.rounds and history[-1]["acc_personal"] is not None


def test_the_constructor_does_no_per_client_work(tiny_config, monkeypatch):
    """FedLPS scores w^0 on every client's training set (its a_k^{-1}) in setup, not when
    it is constructed."""
    from hetfl_core.science.methods import fedlps

    scored = []
    real = fedlps.evaluate
    monkeypatch.setattr(fedlps, "evaluate", lambda model, x, y, **kw: scored.append(len(y)) or real(model, x, y, **kw))
    sim = build_simulation(tiny_config.replace(method="fedlps"))
    assert scored == [c.n_train for c in sim.data.clients]
    scored.clear()
    fresh = fedlps.FedLPS(sim.config, sim.data, sim.hardware)
    assert scored == [] and not hasattr(fresh, "previous_accuracy") and fresh.cost_model is None
    fresh.setup(sim)
    assert scored == [c.n_train for c in sim.data.clients] and set(fresh.previous_accuracy) == {0, 1, 2, 3}


def test_class_keywords_name_label_and_capabilities():
    class Mine(FedAvg, name="toy-mine", label="Mine", reads_hardware_tiers=False):
        """Mine: a toy."""

    class Derived(Mine, name="toy-derived"):
        """Derived: a toy that changes nothing yet."""

    assert (Mine.name, Mine.label, Mine.reads_hardware_tiers, Mine.summary) == \
        ("toy-mine", "Mine", False, "Mine: a toy.")
    assert (Derived.name, Derived.label, Derived.reads_hardware_tiers) == ("toy-derived", "toy-derived", True)
    register(Mine)
    assert METHODS["toy-mine"] is Mine


def test_a_class_keyword_and_a_body_attribute_of_one_name_are_refused():
    with pytest.raises(TypeError, match="gives marker twice"):
        class Twice(FedAvg, name="toy-twice", marker="x"):
            marker = "x"
