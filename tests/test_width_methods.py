import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hetfl_core import RunConfig
from hetfl_core.science import submodel as sm
from hetfl_core.runtime.engine import build_simulation
from hetfl_core.science.errors import ConfigError
from hetfl_core.science.models import build_model
from hetfl_core.science.system import dense_bits, training_flops

ROOT = Path(__file__).resolve().parent.parent
SHAPES = {"mlp": (1, 8, 8), "lenet5": (1, 28, 28), "cnn": (1, 28, 28), "wcnn": (1, 8, 8), "pcnn": (1, 8, 8)}


@pytest.mark.parametrize("name", sm.SUPPORTED_MODELS)
@pytest.mark.parametrize("width", [1.0, 0.5, 0.3])
@pytest.mark.parametrize("offset", [None, 5])
def test_extract_then_embed_is_exact(name, width, offset):
    shape = SHAPES[name]
    torch.manual_seed(0)
    full = build_model(name, shape, 10)
    rule = sm.first_units if offset is None else (lambda n, w: sm.rolling_units(n, w, offset))
    idx = sm.layer_indices(full, width, rule)
    sub = sm.extract(full, full.state_dict(), idx)
    small = build_model(name, shape, 10, width=width)
    small.load_state_dict(sub)  # shapes fit the width-w model
    values, held = sm.embed(full, sub, idx, like=full.state_dict())
    assert all(torch.equal(values[k], full.state_dict()[k]) for k in values)
    # the sub-model computes what the full model computes with the other units removed
    assert sum(int(h.sum()) for h in held.values()) == sum(p.numel() for p in small.parameters())
    again = sm.extract(full, values, idx)
    assert all(torch.equal(again[k], sub[k]) for k in sub)


def test_rolling_window_wraps_and_moves():
    assert sm.rolling_units(10, 0.3, 0).tolist() == [0, 1, 2]
    assert sm.rolling_units(10, 0.3, 9).tolist() == [0, 1, 9]
    assert sm.first_units(10, 0.25).tolist() == [0, 1, 2]


def one_round(method, ids, rounds_done=0, **overrides):
    base = dict(dataset="digits", model="cnn", partition="iid", clients=6, heterogeneity="medium")
    config = RunConfig(method=method, **{**base, **overrides})
    sim = build_simulation(config)
    for t in range(1, rounds_done + 2):
        before = {k: v.clone() for k, v in sim.method.model.state_dict().items()}
        sim.round(t, clients=ids, evaluate=False)
    return sim, before, sim.reports, sim.plans


def test_heterofl_widths_follow_capability():
    sim = build_simulation(RunConfig(method="heterofl", dataset="digits", model="cnn", clients=6,
                                     heterogeneity="medium"))
    for k, device in enumerate(sim.hardware):
        assert sim.method.widths[k] == {"high": 1.0, "mid": 0.5, "low": 0.25}[device.tier]


@pytest.mark.parametrize("weighting", ["count", "samples"])
def test_heterofl_averages_over_holders_and_leaves_the_rest(weighting):
    sim = build_simulation(RunConfig(method="heterofl", dataset="digits", model="cnn", clients=6,
                                     heterogeneity="medium", partition="dirichlet", alpha=0.3))
    slim = [k for k, w in sim.method.widths.items() if w < 1][:2]
    sim, before, reports, plans = one_round("heterofl", slim, partition="dirichlet", alpha=0.3,
                                            options={"weighting": weighting})
    assert reports[0].n_samples != reports[1].n_samples
    after = sim.method.model.state_dict()
    for name in after:
        held = sum(r.held[name] for r in reports)
        assert torch.equal(after[name][held == 0], before[name][held == 0])  # nobody holds: unchanged
        a = [1.0 if weighting == "count" else r.n_samples for r in reports]
        total = sum(w * r.held[name] for w, r in zip(a, reports))
        hand = sum(w * r.held[name] * r.weights[name] for w, r in zip(a, reports))
        mask = held > 0
        assert torch.allclose(after[name][mask], (hand / total.clamp_min(1e-12))[mask], atol=1e-6)
    assert any((sum(r.held[n] for r in reports) == 0).any() for n in after)


def test_masking_trick_neither_trains_nor_sends_absent_labels_rows():
    sim, before, reports, _ = one_round("heterofl", [0, 1, 2], partition="shards",
                                        classes_per_client=2)
    for r in reports:
        absent = ~sim.method.present_labels(r.client_id)
        assert absent.sum() == 8
        assert not r.held["classifier.weight"][absent].any()
        assert not r.held["classifier.bias"][absent].any()
        assert r.held["classifier.bias"][~absent].all()
    # rows of a label no participant holds keep their value; the others moved
    nobody = ~torch.stack([sim.method.present_labels(r.client_id) for r in reports]).any(0)
    after = sim.method.model.state_dict()
    assert nobody.any()
    assert torch.equal(after["classifier.bias"][nobody], before["classifier.bias"][nobody])
    assert not torch.equal(after["classifier.bias"][~nobody], before["classifier.bias"][~nobody])


def test_scaler_divides_hidden_outputs_by_the_width_only_while_training():
    sim = build_simulation(RunConfig(method="heterofl", dataset="digits", model="mlp", clients=4))
    model = sim.method.build_model(0.5)
    x = sim.data.clients[0].x_train[:5]
    plain = model.hidden[0](x.flatten(1))
    seen = {}
    with sim.method.scaled(model, 0.5):
        # registered after the Scaler's hook, so it sees the scaled output
        watch = model.hidden[0].register_forward_hook(lambda mod, inp, out: seen.update(out=out))
        model.train()
        model(x)
        assert torch.allclose(seen["out"], plain / 0.5)
        model.eval()
        model(x)
        assert torch.allclose(seen["out"], plain)
    model.train()
    model(x)   # the Scaler is gone after the context
    assert torch.allclose(seen["out"], plain)
    watch.remove()


def test_personal_scores_follow_personal_eval():
    """Default: the global model with the client's absent labels' logits at 0 (HeteroFL's
    local accuracy); "global": the global model; "submodel": the client's width sub-model."""
    config = RunConfig(method="heterofl", dataset="digits", model="cnn", partition="shards",
                       classes_per_client=2, clients=4, heterogeneity="medium")
    sim = build_simulation(config)
    c = sim.data.clients[0]
    present = sim.method.present_labels(0)
    with torch.no_grad():
        logits = sim.method.personal_model(0)(c.x_test)
        assert torch.equal(logits[:, ~present], torch.zeros_like(logits[:, ~present]))
        assert torch.equal(logits[:, present], sim.method.model(c.x_test)[:, present])
    for mode in ("global", "submodel"):
        sim = build_simulation(config.replace(options={"personal_eval": mode}))
        model = sim.method.personal_model(0)
        assert (model is sim.method.model) == (mode == "global")
        size = sum(p.numel() for p in model.parameters())
        assert size <= sum(p.numel() for p in sim.method.model.parameters())


def test_fjord_keeps_one_optimiser_over_its_local_epochs():
    """Momentum carries across steps: with momentum 0.9 the visit moves the model further
    than with a fresh optimiser per step would (measured against momentum 0, where both
    agree), and the client runs exactly its E epochs of batches."""
    moved = {}
    for momentum in (0.0, 0.9):
        sim, before, reports, _ = one_round("fjord", [0], momentum=momentum, local_epochs=1)
        after = sim.method.model.state_dict()
        moved[momentum] = sum(float((after[n] - before[n]).abs().sum()) for n in after)
        assert reports[0].local_steps == -(-sim.data.clients[0].n_train // 32)
    assert moved[0.9] > 2 * moved[0.0]


def test_smaller_width_costs_less_and_is_charged_by_the_formulas():
    sim, _, reports, plans = one_round("heterofl", [0, 1, 2, 3, 4, 5])
    for r in reports:
        idx = sim.method.indices(r.width, 1)
        model = build_model("cnn", (1, 8, 8), 10, width=r.width)
        assert r.uplink_bits == dense_bits(sum(p.numel() for p in model.parameters()))
        per_sample = training_flops(sim.method.costs, 1, keep=sm.kept_fractions_of_indices(sim.method.model, idx))
        samples = r.flops / per_sample  # charged for exactly the samples it trained on
        assert samples == pytest.approx(round(samples)) and 0 < round(samples) <= r.local_steps * 32
    widths = sorted({r.width for r in reports})
    assert len(widths) == 3
    flops = {w: min(r.flops / r.local_steps for r in reports if r.width == w) for w in widths}
    assert flops[0.25] < flops[0.5] < flops[1.0]
    bits = {w: min(r.uplink_bits for r in reports if r.width == w) for w in widths}
    assert bits[0.25] < bits[0.5] < bits[1.0]


def test_fedrolex_window_moves_between_rounds():
    sim, *_ = one_round("fedrolex", [0, 1])
    first = sim.method.indices(0.5, 1)
    second = sim.method.indices(0.5, 2)
    assert any(not torch.equal(first[k], second[k]) for k in first)
    assert all(len(first[k]) == len(second[k]) for k in first)


def test_fjord_trains_only_within_the_clients_max_width():
    sim = build_simulation(RunConfig(method="fjord", dataset="digits", model="cnn", clients=6,
                                     heterogeneity="medium"))
    slim = [k for k, w in sim.method.widths.items() if w == 0.5][:1]
    sim, before, reports, _ = one_round("fjord", slim)
    held = reports[0].held
    after = sim.method.model.state_dict()
    for name in after:
        assert torch.equal(after[name][held[name] == 0], before[name][held[name] == 0])
    assert reports[0].flops < training_flops(sim.method.costs, reports[0].local_steps * 32)


def test_unsupported_model_fails_before_training():
    with pytest.raises(ConfigError, match="needs a model"):
        RunConfig(method="heterofl", dataset="digits", model="resnet").validate()
    with pytest.raises(ConfigError, match="widths"):
        RunConfig(method="heterofl", dataset="digits", options={"widths": [1.5]}).validate()
    with pytest.raises(ConfigError, match="weighting"):
        RunConfig(method="heterofl", dataset="digits", options={"weighting": "mean"}).validate()
    with pytest.raises(ConfigError, match="clip_norm"):
        RunConfig(method="fedrolex", dataset="digits", options={"clip_norm": 0}).validate()
    with pytest.raises(ConfigError, match="direction"):
        RunConfig(method="fedrolex", dataset="digits", options={"direction": "up"}).validate()
    RunConfig(method="fjord", dataset="digits",
              options={"clip_norm": None, "label_mask": True}).validate()


@pytest.mark.parametrize("method", ["heterofl", "fedrolex", "fjord"])
@pytest.mark.slow
def test_width_methods_run_from_the_command_line(method, tmp_path):
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "hetfl_core", "run", method, "--dataset", "digits", "--clients", "4",
                           "--heterogeneity", "medium", "--rounds", "1", "--no-cache", "--quiet", "--out", str(out)],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert {c["width"] for c in json.loads(out.read_text())["history"][0]["clients"]} <= {1.0, 0.5, 0.25}
