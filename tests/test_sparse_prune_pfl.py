"""The lightweight personalised method of Tan et al. 2025 (hetfl_core/science/methods/sparse_prune_pfl.py)."""
import math

import numpy as np
import pytest
import torch

from hetfl_core import RunConfig
from hetfl_core.science import dca, system
from hetfl_core.runtime.engine import build_simulation, run
from hetfl_core.science.methods.base import seeded_generator
from hetfl_core.science.errors import ConfigError
from hetfl_core.science.personalization import paper_split, split_layers
from hetfl_core.science.models import build_model, count_parameters

from test_cli import cli


def lenet():
    return build_model("lenet5", (1, 28, 28), 10)


@pytest.mark.parametrize("split,layers,percent", [
    ("first:1", ["conv1"], 0.25), ("first:2", ["conv1", "conv2"], 4.17),
    ("first:3", ["conv1", "conv2", "conv3"], 82.15), ("conv", ["conv1", "conv2", "conv3"], 82.15),
    ("first:4", ["conv1", "conv2", "conv3", "fc1"], 98.62)])
def test_table_iii_parameter_counts(split, layers, percent):
    model = lenet()
    assert count_parameters(model) == 61_706
    assert split_layers(model, split) == layers
    base = sum(p.numel() for n, p in model.named_parameters() if n.rsplit(".", 1)[0] in layers)
    assert 100 * base / 61_706 == pytest.approx(percent, abs=0.01)
    if split == "conv":
        assert base == 50_692


def test_resnet_split_keeps_the_last_block_and_classifier_private():
    """The paper's ResNet split (§5) on the spec's ResNet-mini (16/32/64 channels, 1 input channel):
    private = layers.2 (conv 32->64: 18,432; conv 64->64: 36,864; shortcut 2,048; three BNs 384)
    + classifier (650) = 58,378 of 77,754; every batch-norm layer sits with its own block."""
    model = build_model("resnet", (1, 14, 14), 10)
    assert count_parameters(model) == 77_754
    base = split_layers(model, "last-block")
    assert "stem_bn" in base and "layers.1.shortcut.1" in base
    assert not any(name.startswith(("layers.2", "classifier")) for name in base)
    private = sum(p.numel() for n, p in model.named_parameters() if n.rsplit(".", 1)[0] not in base)
    assert private == 58_378
    everything = set(split_layers(model, "all"))      # FedAvg shares the batch-norm layers too
    assert sum(p.numel() for n, p in model.named_parameters() if n.rsplit(".", 1)[0] in everything) == 77_754
    assert split_layers(lenet(), "all") == split_layers(lenet(), "first:5")
    with pytest.raises(ConfigError, match="residual blocks"):
        split_layers(lenet(), "last-block")


def config(**options):
    opts = {"allocation": "fixed", "k": 0.3, "r": 0.5, **options}
    return RunConfig(method="sparse-prune-pfl", dataset="digits", model="cnn", partition="dirichlet", alpha=0.5,
                     clients=4, rounds=2, local_steps=1, lr=0.05, options=opts)


def first_reports(sim, round_idx=1):
    """One round's plans, reports and the cost model's charges (before aggregation)."""
    ids = list(range(sim.config.clients))
    sim.cost_model.start_round(round_idx, ids)
    plans = sim.method.configure_round(round_idx, ids)
    reports = [sim.method.client_update(sim.data.clients[c], plans[c], seeded_generator(0, round_idx, c)) for c in ids]
    return plans, reports, sim.cost_model.charge([(c, plans[c]) for c in ids], reports)


def test_one_round_top_k_pruning_latency_and_eq6():
    sim = build_simulation(config().validate())
    m = sim.method
    before = {n: p.detach().clone() for n, p in m.model.named_parameters()}
    plans, reports, charges = first_reports(sim)
    for rep, charge in zip(reports, charges):
        # top-k sends exactly ceil(k d_B) values
        assert rep.extra["sent_values"] == math.ceil(0.3 * m.d_base)
        assert int((rep.vector != 0).sum()) <= rep.extra["sent_values"]
        # the private part keeps at most ceil(r d_P) non-zeros after the step (decision (b))
        private = torch.cat([t.flatten() for t in m.private.clients[rep.client_id].values()])
        assert private.numel() == m.d_private
        assert int((private != 0).sum()) <= math.ceil(0.5 * m.d_private)
        # latency and energy from the wireless cost model's formulas (Eqs. 7, 10-14), equal shares
        dev = charge.hardware
        assert charge.share == pytest.approx(0.25)
        assert rep.uplink_bits == pytest.approx(float(dca.upload_bits(0.3, m.d_base)))
        assert charge.time_s == pytest.approx(rep.flops / dev.flops_per_s + rep.uplink_bits / dev.uplink_bps)
        assert charge.energy_j == pytest.approx(system.compute_energy(dev, rep.flops)
                                                + dev.tx_power_w * rep.uplink_bits / dev.uplink_bps)
    m.aggregate(1, reports)
    total = sum(r.n_samples for r in reports)
    step = sum(r.vector * r.n_samples / total for r in reports)
    after = torch.cat([p.detach().flatten() for n, p in m.model.named_parameters() if n in m.shared_names])
    start = torch.cat([before[n].flatten() for n in m.shared_names])
    assert torch.allclose(after, start - 0.05 * step, atol=1e-6)          # Eq. (6)
    for n in m.private_names:                                             # private part never leaves
        assert torch.equal(dict(m.model.named_parameters())[n].detach(), before[n])


def test_compute_time_follows_eq12():
    sim = build_simulation(config(k=1.0, r=0.5).validate())
    m = sim.method
    _, (rep, *_), (charge, *_) = first_reports(sim)
    d = m.d_base + m.d_private
    cycles = 32 * sim.cost_model.cycles_per_sample * (m.d_base + 0.5 * m.d_private) / d
    assert rep.flops / sim.cost_model.flops_per_cycle == pytest.approx(cycles)
    compute_s = cycles / sim.cost_model.cpu_hz(0)
    assert charge.time_s == pytest.approx(compute_s + rep.uplink_bits / charge.hardware.uplink_bps)


def test_every_split_computes_on_the_same_devices():
    """C of (12) is calibrated once per model, on the paper's split: LG-FedAvg's small shared head or
    FedAvg's whole model must not buy a faster or slower CPU. The same work costs the same FLOPs."""
    def first_round(**options):
        sim = build_simulation(config(k=1.0, r=1.0, **options).replace(model="lenet5", dataset="mnist-5k",
                                                                       clients=4).validate())
        _, (report, *_), (charge, *_) = first_reports(sim)
        return sim, report, charge

    fedper, fedper_report, fedper_charge = first_round()
    for split in ("fc", "all", "first:1"):
        other, report, charge = first_round(split=split)
        assert other.method.d_base != fedper.method.d_base
        assert other.cost_model.cycles_per_sample == fedper.cost_model.cycles_per_sample
        assert report.flops == pytest.approx(fedper_report.flops)
        assert charge.hardware.flops_per_s == fedper_charge.hardware.flops_per_s
    resnet = build_model("resnet", (1, 14, 14), 10)
    assert paper_split("resnet", resnet) == "last-block" and paper_split("lenet5", lenet()) == "conv"


def test_dense_decoupling_equals_fedper():
    """FLPDSP(1, 1) with one local step is FedPer: w - eta sum gamma g = sum gamma (w - eta g)."""
    ours = run(config(k=1.0, r=1.0).replace(rounds=3).validate())
    fedper = run(RunConfig(method="fedper", dataset="digits", model="cnn", partition="dirichlet", alpha=0.5,
                           clients=4, rounds=3, local_steps=1, lr=0.05, options={"head_layers": 2}).validate())
    a = [h["acc_personal"] for h in ours["history"]]
    b = [h["acc_personal"] for h in fedper["history"]]
    assert np.allclose(a, b)


def test_dca_rounds_meet_the_deadline():
    result = run(config(allocation="dca").replace(rounds=3).validate())
    for row in result["history"]:
        shares = [c["share"] for c in row["clients"]]
        assert sum(shares) == pytest.approx(1.0)
        assert all(dca.K_MIN - 1e-9 <= c["k"] <= 1 and dca.R_MIN - 1e-9 <= c["r"] <= 1 for c in row["clients"])


@pytest.mark.parametrize("options,needle", [
    ({"split": "middle"}, "split"), ({"allocation": "greedy"}, "allocation"), ({"k": 0}, "k must"),
    ({"r": 1.5}, "r must"), ({"prune_scope": "all", "allocation": "dca"}, "FedAvg-P"),
    ({"bits": "huffman"}, "bits")])
def test_bad_options_fail_at_once(options, needle):
    with pytest.raises(ConfigError, match=needle):
        config(**options).validate()


@pytest.mark.slow
def test_cli_smoke(tmp_path):
    out = cli("run", "sparse-prune-pfl", "--dataset", "digits", "--model", "cnn", "--clients", "4", "--rounds", "2",
              "--local-steps", "1", "--quiet", tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "sparse-prune-pfl: 2 rounds" in out.stdout + out.stderr


def test_the_cell_is_the_configs_and_dca_needs_it():
    with pytest.raises(ConfigError, match="bandwidth_high_mhz"):
        config().replace(bandwidth_high_mhz=5.0).validate()
    with pytest.raises(ConfigError, match="system wireless"):
        config(allocation="dca").replace(system="compute").validate()
    with pytest.raises(ConfigError, match="unknown system"):
        config().replace(system="satellite").validate()
    fixed = run(config().replace(system="compute", rounds=1).validate())      # fixed (k, r) runs on tiers too
    assert fixed["history"][0]["clients"][0]["tier"] == "high" and "share" not in fixed["history"][0]["clients"][0]
