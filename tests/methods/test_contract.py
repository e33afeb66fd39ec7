"""The method contract: every registered method (a plug-in too, once registered) passes
every check, in the manner of scikit-learn's ``parametrize_with_checks``.

A check takes the method's name and the ``method_config`` factory (a one-second run on
digits with what the method requires). The Flower round trip is checked for all methods
at once in ``tests/test_flower.py`` (one Flower simulation start for all of them).
"""
import json

import pytest

from hetfl_core import run
from hetfl_core.science.methods import METHODS


def runs_from_the_command_line(method, method_config, tmp_path, monkeypatch):
    """``python -m hetfl_core run METHOD`` trains and writes a history with an accuracy."""
    from hetfl_core.cli import main

    monkeypatch.setenv("HETFL_CACHE", str(tmp_path / "runs"))
    config = method_config(method)
    path = tmp_path / "run.json"
    args = ["--dataset", config.dataset, "--model", config.model, "--val-fraction", str(config.val_fraction)]
    assert main(["run", method, *args, "--clients", "4", "--rounds", "2", "--local-steps", "2",
                 "--heterogeneity", "medium", "--quiet", "--out", str(path)]) == 0
    history = json.loads(path.read_text())["history"]
    assert len(history) == 2 and history[-1]["acc_personal"] is not None


def charges_under_both_cost_models(method, method_config, tmp_path, monkeypatch):
    """The cost model is the config's: the method runs on the wireless cell and on the tiers,
    charged time and energy by the same functions, and trains the same under both."""
    rows = {}
    for cost_model in ("compute", "wireless"):
        if method == "sparse-prune-pfl" and cost_model == "compute":
            config = method_config(method, system=cost_model, options={"allocation": "fixed"})
        else:
            config = method_config(method, system=cost_model, heterogeneity="medium")
        rows[cost_model] = run(config)["history"][-1]
        assert rows[cost_model]["time_s"] > 0 and rows[cost_model]["energy_j"] > 0
        assert all(c["time_s"] > 0 for c in rows[cost_model]["clients"])
    assert sum(c["share"] for c in rows["wireless"]["clients"]) == pytest.approx(1.0)
    if method != "sparse-prune-pfl":    # the cost model charges; it trains nothing (DCA reads it by design)
        assert rows["compute"]["acc_personal"] == rows["wireless"]["acc_personal"]


def runs_on_the_resolved_device(method, method_config, tmp_path, monkeypatch):
    """``device="auto"`` puts the model and every client's data on one device."""
    from hetfl_core.science.devices import resolve_device
    from hetfl_core.runtime.engine import build_simulation

    config = method_config(method, device="auto")
    sim = build_simulation(config)
    device = resolve_device("auto")
    assert {p.device for p in sim.method.model.parameters()} == {device}
    assert all(c.x_train.device == device and c.y_test.device == device for c in sim.data.clients)
    row = run(config)["history"][-1]
    assert row["flops"] > 0 and 0 <= row["acc_personal"] <= 1


def gives_the_same_numbers_twice(method, method_config, tmp_path, monkeypatch):
    """Same config, same history, to the bit, on one machine."""
    config = method_config(method, rounds=2, heterogeneity="high")
    assert run(config)["history"] == run(config)["history"]


def lists_and_checks_its_options(method, method_config, tmp_path, monkeypatch):
    """Each option is declared with a description; an unknown one is refused by name."""
    from hetfl_core.science.errors import ConfigError

    cls = METHODS[method]
    assert cls.summary and cls.name == method and cls.label
    assert cls.label not in {METHODS[m].label for m in METHODS if m != method}   # one name a method
    assert set(cls.defaults) == set(cls.option_specs)
    assert all(spec.help for spec in cls.option_specs.values()), method
    with pytest.raises(ConfigError, match="no_such_option"):
        method_config(method, options={"no_such_option": 1}).validate()


def has_a_style_of_its_own(method, method_config, tmp_path, monkeypatch):
    """The book's figures draw it in its own colour and marker, declared on its class
    (``color``, ``marker``; ``plots.METHOD_STYLES`` reads them)."""
    from hetfl_core.book import plots

    key = plots.method_key(method)
    assert key in plots.METHOD_STYLES, method
    others = {plots.METHOD_STYLES[plots.method_key(m)] for m in METHODS if m != method
              if plots.method_key(m) in plots.METHOD_STYLES}
    assert plots.METHOD_STYLES[key] not in others


def declares_what_each_client_keeps(method, method_config, tmp_path, monkeypatch):
    """After a round, every attribute it names in ``client_state`` and ``server_state``
    exists, each ``client_state`` one holds entries by client id, and no other attribute
    is a dict keyed by client ids (which a Flower node would receive whole)."""
    from hetfl_core.runtime.engine import build_simulation
    from hetfl_core.science.methods.base import client_entries

    sim = build_simulation(method_config(method, clients=5))
    sim.round(1)
    m, ids = sim.method, set(range(5))
    for name in m.client_state:
        assert set(client_entries(getattr(m, name))) <= ids, (method, name)
    assert all(hasattr(m, name) for name in m.server_state), method
    for name, value in vars(m).items():
        keys = list(value) if isinstance(value, dict) else []
        per_client = len(keys) > 1 and 0 in keys and all(type(k) is int for k in keys) \
            and set(keys) <= ids
        assert not per_client or name in (*m.client_state, *m.server_state), \
            f"{method}.{name} is keyed by client id: name it in client_state or server_state"


CHECKS = [runs_from_the_command_line, charges_under_both_cost_models, runs_on_the_resolved_device,
          gives_the_same_numbers_twice, lists_and_checks_its_options, has_a_style_of_its_own,
          declares_what_each_client_keeps]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("method", sorted(METHODS))
def test_contract(method, check, method_config, tmp_path, monkeypatch):
    check(method, method_config, tmp_path, monkeypatch)


@pytest.mark.parametrize("missing", ["client_step", "aggregate"])
def test_a_method_must_say_how_a_client_trains_and_how_the_server_folds(missing, method_config):
    """``Method`` is abstract in its two hooks: a subclass missing one cannot be built."""
    from hetfl_core.runtime.engine import build_simulation
    from hetfl_core.science.methods.base import Method

    def never_called(self, *args):
        raise AssertionError("never called")

    hooks = {hook: never_called for hook in ("client_step", "aggregate") if hook != missing}
    Partial = type("Partial", (Method,), hooks, name="toy-partial")
    with pytest.raises(TypeError, match=f"abstract method {missing}"):
        Partial(method_config("fedavg"), build_simulation(method_config("fedavg")).data, [])
