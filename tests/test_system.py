import math

import numpy as np
import pytest

from hetfl_core.science import models, system
from hetfl_core.science.errors import ConfigError

LENET_MACS = {"conv1": 6 * 28 * 28 * 25, "conv2": 16 * 10 * 10 * 150, "conv3": 120 * 400,
              "fc1": 120 * 84, "classifier": 84 * 10}


@pytest.fixture
def lenet_costs():
    return system.profile_model(models.build_model("lenet5", (1, 28, 28), 10), (1, 28, 28))


def test_lenet_macs_per_layer_by_hand(lenet_costs):
    assert {c.name: c.macs for c in lenet_costs} == LENET_MACS
    assert sum(c.params for c in lenet_costs) == 61_706


def test_forward_and_training_flops_by_hand(lenet_costs):
    forward = 2 * sum(LENET_MACS.values())
    assert system.forward_flops(lenet_costs) == forward == 833_040
    first = 2 * LENET_MACS["conv1"]
    assert system.training_flops(lenet_costs, 10) == 10 * (2 * first + 3 * (forward - first))


def test_mlp_flops_by_hand():
    costs = system.profile_model(models.build_model("mlp", (1, 28, 28), 10), (1, 28, 28))
    macs = [784 * 200, 200 * 200, 200 * 10]
    assert [c.macs for c in costs] == macs
    assert system.training_flops(costs, 1) == 2 * (2 * macs[0] + 3 * macs[1] + 3 * macs[2])


def test_structured_keep_scales_outputs_and_next_inputs(lenet_costs):
    keep = {"conv2": 0.5}
    expected = 2 * (sum(LENET_MACS.values()) - 0.5 * LENET_MACS["conv2"] - 0.5 * LENET_MACS["conv3"])
    assert system.forward_flops(lenet_costs, keep=keep) == pytest.approx(expected)
    all_half = {c.name: 0.5 for c in lenet_costs[:-1]}
    m = LENET_MACS
    expected = 2 * (0.5 * m["conv1"] + 0.25 * (m["conv2"] + m["conv3"] + m["fc1"]) + 0.5 * m["classifier"])
    assert system.forward_flops(lenet_costs, keep=all_half) == pytest.approx(expected)



def test_training_flops_with_half_the_hidden_units_by_hand(lenet_costs):
    # the foundations chapter's exercise: 2 * 117,600 + 3 * 149,880 FLOPs per sample
    assert system.training_flops(lenet_costs, 1) == 2_263_920
    half = {c.name: 0.5 for c in lenet_costs[:-1]}
    assert system.training_flops(lenet_costs, 1, keep=half) == 684_840

def test_unstructured_density_scales_linearly(lenet_costs):
    density = {c.name: 0.3 for c in lenet_costs}
    assert system.training_flops(lenet_costs, 4, density=density) == pytest.approx(
        0.3 * system.training_flops(lenet_costs, 4))


def test_bits():
    assert system.dense_bits(1000) == 32_000
    assert system.index_bits(10, 1000, "position") == 10 * 10
    assert system.index_bits(10, 1000, "bitmap") == 1000
    assert system.index_bits(10, 1000, "min") == 100
    assert system.index_bits(500, 1000, "min") == 1000
    assert system.index_bits(2, 4, "binomial") == pytest.approx(math.log2(6))
    assert system.index_bits(0, 10) == 0 and system.index_bits(10, 10) == 0
    assert system.sparse_bits(10, 1000) == 10 * 32 + 100
    with pytest.raises(ConfigError):
        system.index_bits(11, 10)


def test_client_and_round_time_by_hand():
    device = system.HardwareProfile("x", flops_per_s=2e9, uplink_bps=1e6, downlink_bps=4e6)
    assert system.client_time(device, 4e9, 3e6, 8e6) == pytest.approx(2 + 3 + 2)
    assert system.round_time([1.0, 7.0, 3.0]) == 7.0
    assert system.round_time([]) == 0.0


def test_hardware_dealt_in_equal_tiers_and_seeded():
    hardware = system.make_hardware(12, "medium", np.random.default_rng(0))
    tiers = [d.tier for d in hardware]
    assert sorted(tiers.count(t) for t in ("high", "mid", "low")) == [4, 4, 4]
    speeds = {d.tier: d.flops_per_s for d in hardware}
    assert speeds["high"] == 2 * speeds["mid"] == 4 * speeds["low"]
    assert tiers == [d.tier for d in system.make_hardware(12, "medium", np.random.default_rng(0))]
    assert tiers != [d.tier for d in system.make_hardware(12, "medium", np.random.default_rng(1))]
    with pytest.raises(ConfigError):
        system.make_hardware(3, "extreme", np.random.default_rng(0))


def test_the_earlier_device_names_of_the_hardware_still_work(tiny_config):
    """Code written against the earlier names (``DeviceProfile``, ``make_devices``,
    ``REFERENCE_DEVICE``, ``sim.devices``, ``method.devices``) reads the same objects."""
    from hetfl_core.runtime.engine import build_simulation

    assert system.DeviceProfile is system.HardwareProfile
    assert system.REFERENCE_DEVICE is system.REFERENCE_HARDWARE
    rng = lambda: np.random.default_rng(0)  # noqa: E731
    assert system.make_devices(6, "medium", rng()) == system.make_hardware(6, "medium", rng())
    sim = build_simulation(tiny_config.replace(heterogeneity="medium"))
    assert sim.devices is sim.hardware is sim.method.devices is sim.method.hardware
    assert len({h.tier for h in sim.hardware}) == 3


def test_wireless_formulas_by_hand():
    assert system.path_loss_db(0.1) == pytest.approx(128.1 - 37.6)
    assert system.path_loss_db(1.0) == pytest.approx(128.1)
    assert system.dbm_to_watts(30) == pytest.approx(1.0)
    assert system.channel_gain(1.0) == pytest.approx(10 ** -12.81)
    # B log2(1 + p h / (N0 B)): SNR 15 over 1 MHz gives 4 Mbit/s
    assert system.shannon_rate(1e6, 1.5, 1e-3, 1e-10) == pytest.approx(4e6)
    assert system.shannon_rate(0, 1, 1, 1) == 0.0


def test_energy_by_hand():
    device = system.HardwareProfile("x", flops_per_s=2e9, uplink_bps=1, downlink_bps=1, energy_coeff=1e-28,
                                  tx_power_w=0.5)
    # 2e9 FLOPs = 1e9 cycles at 1 GHz: zeta f^2 cycles = 1e-28 * 1e18 * 1e9 = 0.1 J
    assert system.compute_energy(device, 2e9) == pytest.approx(0.1)
    assert system.transmit_energy(device, 4.0) == 2.0


def test_training_flops_of_a_frozen_body(lenet_costs):
    forward = {c.name: 2 * LENET_MACS[c.name] for c in lenet_costs}
    # only the classifier trains: forward everywhere plus the classifier's weight gradient
    head_only = system.training_flops(lenet_costs, 1, trainable={"classifier"})
    assert head_only == sum(forward.values()) + forward["classifier"]
    # frozen first layer: no weight gradient there, input gradients still flow to conv2..
    rest = system.training_flops(lenet_costs, 1, trainable={"conv2", "conv3", "fc1", "classifier"})
    assert rest == forward["conv1"] + 2 * forward["conv2"] + 3 * sum(
        forward[n] for n in ("conv3", "fc1", "classifier"))
