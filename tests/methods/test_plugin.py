"""A method is one file: a plug-in written to one ``.py`` file and loaded the way ``arena
--plugin`` loads it registers with the style and capabilities its class declares, joins the
Flower allow-list with its state's classes, passes the method contract and runs."""
import textwrap

import pytest

PLUGIN = textwrap.dedent('''
    """Server momentum on FedAvg, as one plug-in file."""
    import torch

    from hetfl_core.science.methods.aggregate import weighted_average
    from hetfl_core.science.methods.base import register
    from hetfl_core.science.methods.fedavg import FedAvg
    from hetfl_core.science.options import Option


    class Velocity:
        """The server's momentum buffer, one tensor per parameter."""

        def __init__(self):
            self.buffer = {}


    @register
    class ServerMomentum(FedAvg, name="toy-fedavgm", label="FedAvgM (toy)",
                         color="#123456", marker="*", reads_hardware_tiers=False):
        """FedAvgM: FedAvg with server momentum beta on the averaged update (Hsu et al. 2019)"""
        option_specs = {"beta": Option(0.9, "server momentum", 0, 1, high_open=True)}
        state_types = (Velocity,)

        def setup(self, sim):
            super().setup(sim)
            self.velocity = Velocity()

        def aggregate(self, round_idx, reports):
            """v <- beta v + (w_t - avg_k w^k);  w_{t+1} = w_t - v."""
            average = weighted_average([r.weights for r in reports], [r.n_samples for r in reports])
            state = self.model.state_dict()
            for key, value in average.items():
                if not torch.is_floating_point(value):
                    state[key] = value
                    continue
                step = state[key] - value
                old = self.velocity.buffer.get(key, torch.zeros_like(step))
                self.velocity.buffer[key] = self.options["beta"] * old + step
                state[key] = state[key] - self.velocity.buffer[key]
            self.model.load_state_dict(state)
''')


@pytest.fixture
def plugin(tmp_path):
    """The plug-in's class, loaded from its file as ``--plugin FILE`` loads it."""
    from hetfl_core.cli import _load_plugin
    from hetfl_core.science.methods import METHODS

    path = tmp_path / "fedavgm.py"
    path.write_text(PLUGIN)
    assert "toy-fedavgm" not in METHODS
    _load_plugin(str(path))
    return METHODS["toy-fedavgm"]


def test_a_plugin_declares_its_style_and_capabilities_on_its_class(plugin):
    from hetfl_core.book import arena, plots

    from hetfl_core.runtime import flower
    assert plots.method_style("toy-fedavgm") == {"color": "#123456", "marker": "*"}
    assert plots.method_style("FedAvgM (toy)") == plots.method_style("toy-fedavgm")
    assert plots.METHOD_STYLES[plots.method_key("toy-fedavgm")] == ("#123456", "*")
    assert arena.tier_blind("toy-fedavgm") and not arena.tier_blind("heterofl")
    assert plugin.reads_hardware_tiers is False
    velocity = plugin.state_types[0]
    assert velocity.__name__ == "Velocity" and velocity in flower.shipped_types()


def test_a_subclass_of_the_plugin_inherits_none_of_its_facts(plugin):
    child = type("Child", (plugin,), {}, name="toy-child")
    assert (child.label, child.color, child.marker, child.reads_hardware_tiers) == \
        ("toy-child", None, "o", True)
    assert child.state_types == plugin.state_types       # its state is its parent's


@pytest.mark.parametrize("check", ["has_a_style_of_its_own", "lists_and_checks_its_options",
                                   "runs_from_the_command_line", "gives_the_same_numbers_twice"])
def test_the_plugin_passes_the_contract(plugin, check, method_config, tmp_path, monkeypatch):
    import test_contract

    getattr(test_contract, check)("toy-fedavgm", method_config, tmp_path, monkeypatch)


def test_the_plugin_runs_and_its_momentum_changes_the_numbers(plugin, method_config):
    from hetfl_core import run

    config = method_config("toy-fedavgm", rounds=3)        # momentum first acts in round 2
    moved = run(config)["history"]
    plain = run(config.replace(options={"beta": 0.0}))["history"]
    fedavg = run(config.replace(method="fedavg"))["history"]
    assert len(moved) == 3 and 0 <= moved[-1]["acc_personal"] <= 1
    assert plain[-1]["loss"] == pytest.approx(fedavg[-1]["loss"], rel=1e-6)    # beta 0 is FedAvg
    assert moved[-1]["loss"] != plain[-1]["loss"]
