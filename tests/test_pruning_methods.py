import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hetfl_core import RunConfig
from hetfl_core.runtime.engine import build_simulation
from hetfl_core.science.methods.base import seeded_generator
from hetfl_core.science.errors import ConfigError
from hetfl_core.science.masks import unit_masks_to_parameters

ROOT = Path(__file__).resolve().parent.parent


def rounds(method, n_rounds, ids, **options):
    sim = build_simulation(RunConfig(method=method, dataset="digits", model="cnn", partition="iid", clients=6,
                                     heterogeneity="medium", options=options))
    for t in range(1, n_rounds + 1):
        sim.round(t, clients=ids, evaluate=False)
    return sim, sim.reports


@pytest.mark.parametrize("method", ["ordered-mask", "random-mask"])
def test_masked_units_stay_zero_and_only_held_entries_move(method):
    sim = build_simulation(RunConfig(method=method, dataset="digits", model="cnn", clients=6, heterogeneity="medium"))
    slim = [k for k, r in sim.method.ratios.items() if r < 1][:1]
    before = {k: v.clone() for k, v in sim.method.model.state_dict().items()}
    sim, reports = rounds(method, 1, slim)
    held = reports[0].held
    values = reports[0].weights
    masks = unit_masks_to_parameters(sim.method.model, sim.method.units[slim[0]])
    for name, m in masks.items():
        assert float((values[name] * (1 - m)).abs().sum()) == 0  # masked weights trained as zero
    after = sim.method.model.state_dict()
    for name in after:
        assert torch.equal(after[name][held[name] == 0], before[name][held[name] == 0])
    assert reports[0].uplink_bits == 32 * sum(int(h.sum()) for h in held.values())


def test_oneshot_prunes_once_to_the_density_and_keeps_zeros():
    sim, reports = rounds("oneshot", 3, [0, 1, 2], density=0.3, prune_round=2)
    masks = sim.method.masks
    kept = sum(m.sum() for m in masks.values()) / sum(m.numel() for m in masks.values())
    assert abs(float(kept) - 0.3) < 0.01
    params = sim.method.model.state_dict()
    assert all(float((params[n] * (1 - m)).abs().sum()) == 0 for n, m in masks.items())
    dense = sum(p.numel() for p in sim.method.model.parameters())
    assert all(r.uplink_bits < 0.5 * 32 * dense for r in reports)


def test_oneshot_global_and_layerwise_differ():
    g, _ = rounds("oneshot", 1, [0], density=0.2, prune_round=1, scope="global")
    l, _ = rounds("oneshot", 1, [0], density=0.2, prune_round=1, scope="layer")
    assert any(not torch.equal(g.method.masks[n], l.method.masks[n]) for n in g.method.masks)
    with pytest.raises(ConfigError):
        RunConfig(method="oneshot", dataset="digits", options={"scope": "sideways"}).validate()


def test_smaller_ratio_trains_cheaper():
    sim, reports = rounds("ordered-mask", 1, list(range(6)))
    per_step = {r.ratio: r.flops / r.local_steps for r in reports}
    ratios = sorted(per_step)
    assert all(per_step[a] < per_step[b] for a, b in zip(ratios, ratios[1:]))


@pytest.mark.parametrize("method", ["ordered-mask", "random-mask", "oneshot", "lotteryfl"])
@pytest.mark.slow
def test_runs_from_the_command_line(method, tmp_path):
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "hetfl_core", "run", method, "--dataset", "digits", "--clients", "4",
                           "--heterogeneity", "medium", "--rounds", "2", "--no-cache", "--quiet", "--out", str(out)],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(out.read_text())["history"]) == 2


def test_lotteryfl_tickets_shrink_nested_to_the_target():
    sim = build_simulation(RunConfig(method="lotteryfl", dataset="digits", model="cnn", partition="shards", clients=4,
                                     local_epochs=3, batch_size=16, lr=0.1,
                                     options={"acc_threshold": 0.0, "target_density": 0.5}))
    history = []
    for t in range(1, 6):
        plans = sim.method.configure_round(t, [0])
        report = sim.method.client_update(sim.data.clients[0], plans[0], seeded_generator(0, t, 0))
        sim.method.aggregate(t, [report])
        history.append({n: m.clone() for n, m in sim.method.ticket(0).items()})
    density = [float(sum(m.sum() for m in h.values()) / sum(m.numel() for m in h.values())) for h in history]
    assert density[0] == pytest.approx(0.8, abs=0.01) and density[-1] == pytest.approx(0.5, abs=0.01)
    assert all(a >= b for a, b in zip(density, density[1:]))
    for older, newer in zip(history, history[1:]):  # a pruned weight never comes back
        assert all(bool((newer[n] <= older[n]).all()) for n in older)
    personal = dict(sim.method.personal_model(0).named_parameters())
    assert all(float((personal[n].detach() * (1 - m)).abs().sum()) == 0 for n, m in history[-1].items())


def test_lotteryfl_waits_for_the_accuracy_threshold():
    sim = build_simulation(RunConfig(method="lotteryfl", dataset="digits", model="cnn", clients=4,
                                     options={"acc_threshold": 1.0}))
    plans = sim.method.configure_round(1, [0])
    report = sim.method.client_update(sim.data.clients[0], plans[0], seeded_generator(0, 1, 0))
    assert all(bool((m == 1).all()) for m in sim.method.ticket(0).values())
    assert report.uplink_bits == 32 * sum(p.numel() for p in sim.method.model.parameters())


def test_prunefl_mask_maximises_importance_per_time():
    from hetfl_core.science.methods.prunefl import adaptive_mask

    importance = {"a": torch.tensor([4.0, 1.0]), "b": torch.tensor([[2.0, 3.0]])}
    # scores top-k sum / (c + k/4): c=1 -> 3.2, 4.67, 5.14, 5.0 (k=3); c=0 -> 16, 14, 12, 10 (k=1)
    keep = adaptive_mask(importance, overhead=1.0, min_density=0.1)
    assert keep["a"].tolist() == [1.0, 0.0] and keep["b"].tolist() == [[1.0, 1.0]]
    keep = adaptive_mask(importance, overhead=0.0, min_density=0.1)
    assert keep["a"].tolist() == [1.0, 0.0] and keep["b"].tolist() == [[0.0, 0.0]]
    keep = adaptive_mask(importance, overhead=0.0, min_density=0.5)  # at least 2 of 4
    assert keep["a"].tolist() == [1.0, 0.0] and keep["b"].tolist() == [[0.0, 1.0]]


def test_prunefl_strong_client_prunes_first_and_reconfiguration_costs_traffic():
    sim, reports = rounds("prunefl", 1, [0, 1, 2, 3], initial_density=0.4, reconfigure_every=2)
    method = sim.method
    kept = sum(m.sum() for m in method.masks.values()) / sum(m.numel() for m in method.masks.values())
    assert abs(float(kept) - 0.4) < 0.01
    params = {n: p.detach() for n, p in method.model.named_parameters()}
    assert all(float((params[n] * (1 - m)).abs().sum()) == 0 for n, m in method.masks.items())
    strong = max(range(4), key=lambda k: (method.hardware[k].flops_per_s, -k))
    by_id = {r.client_id: r for r in reports}
    others = [r.flops for k, r in by_id.items() if k != strong and r.n_samples == by_id[strong].n_samples]
    assert by_id[strong].flops > max([0.0] + others)  # charged for the initial dense training
    sim, reports = rounds("prunefl", 2, [0, 1], initial_density=0.4, reconfigure_every=2)
    dense = 32 * sum(p.numel() for p in sim.method.model.parameters())
    assert all(r.uplink_bits > dense for r in reports)  # kept values + dense squared gradients
    assert all(float((p.detach() * (1 - sim.method.masks[n])).abs().sum()) == 0
               for n, p in sim.method.model.named_parameters() if n in sim.method.masks)
