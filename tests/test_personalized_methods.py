import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hetfl_core import RunConfig, run
from hetfl_core.runtime.engine import build_simulation
from hetfl_core.science.methods.base import seeded_generator
from hetfl_core.science.errors import ConfigError
from hetfl_core.science.personalization import body_parameter_names, head_parameter_names
from hetfl_core.science.system import dense_bits, sparse_bits

ROOT = Path(__file__).resolve().parent.parent
PERSONAL = ["fedper", "fedrep", "lg-fedavg", "fedbabu", "local", "topk", "topk-ef"]


def one_round(method, **options):
    config = RunConfig(method=method, dataset="digits", model="cnn", partition="shards", clients=4, rounds=1,
                       options=options)
    sim = build_simulation(config)
    before = {k: v.clone() for k, v in sim.method.model.state_dict().items()}
    ids = [0, 1, 2, 3]
    sim.round(1, clients=ids, evaluate=False)
    return sim, before, sim.reports


def numel(model, names):
    params = dict(model.named_parameters())
    return sum(params[n].numel() for n in names)


def test_split_of_lenet_and_cnn():
    sim = build_simulation(RunConfig(dataset="digits", model="cnn", clients=2))
    model = sim.method.model
    assert head_parameter_names(model) == ["classifier.weight", "classifier.bias"]
    assert set(body_parameter_names(model)) | set(head_parameter_names(model)) == {n for n, _ in model.named_parameters()}


def test_fedper_shares_bodies_keeps_heads():
    sim, before, reports = one_round("fedper")
    method = sim.method
    body = method.shared_names
    assert all(set(r.weights) == set(body) for r in reports)
    assert all(r.uplink_bits == dense_bits(numel(method.model, body)) for r in reports)
    m0, m1 = method.personal_model(0), method.personal_model(1)
    p0, p1 = dict(m0.named_parameters()), dict(m1.named_parameters())
    assert all(torch.equal(p0[n], p1[n]) for n in body)
    assert not torch.equal(p0["classifier.weight"], p1["classifier.weight"])
    # the global head is never trained
    assert torch.equal(method.model.state_dict()["classifier.weight"], before["classifier.weight"])
    assert method.global_model() is None


def test_lg_fedavg_never_uploads_its_body():
    sim, before, reports = one_round("lg-fedavg")
    head = head_parameter_names(sim.method.model)
    assert all(set(r.weights) == set(head) for r in reports)
    assert all(r.uplink_bits == dense_bits(numel(sim.method.model, head)) for r in reports)
    after = sim.method.model.state_dict()
    for name in body_parameter_names(sim.method.model):
        assert torch.equal(after[name], before[name])  # the global body is untouched


def test_fedrep_trains_head_then_body_and_charges_less_than_full_training():
    sim, before, reports = one_round("fedrep", head_epochs=1.0)
    fedper_sim, _, fedper_reports = one_round("fedper")
    assert all(r.flops < 2 * f.flops for r, f in zip(reports, fedper_reports))
    assert not torch.equal(sim.method.model.state_dict()["conv1.weight"], before["conv1.weight"])


def test_fedbabu_head_stays_frozen_during_training():
    sim, before, _ = one_round("fedbabu", finetune="head", finetune_steps=5)
    after = sim.method.model.state_dict()
    assert torch.equal(after["classifier.weight"], before["classifier.weight"])
    assert not torch.equal(after["conv1.weight"], before["conv1.weight"])
    tuned = sim.method.personal_model(0).state_dict()
    assert not torch.equal(tuned["classifier.weight"], before["classifier.weight"])
    assert torch.equal(tuned["conv1.weight"], after["conv1.weight"])


def test_fedbabu_fine_tunes_the_whole_network_after_the_last_round_only():
    sim, before, _ = one_round("fedbabu")               # the run's one round is its last
    after = sim.method.model.state_dict()
    tuned = sim.method.personal_model(0).state_dict()
    assert not torch.equal(tuned["classifier.weight"], after["classifier.weight"])
    assert not torch.equal(tuned["conv1.weight"], after["conv1.weight"])
    longer = build_simulation(sim.config.replace(rounds=2))
    longer.round(1, clients=[0, 1, 2, 3], evaluate=False)   # not the last round: no fine-tune yet
    untouched = longer.method.personal_model(0).state_dict()
    assert all(torch.equal(untouched[n], v) for n, v in longer.method.model.state_dict().items())


def test_lg_fedavg_warm_start_rounds_upload_everything():
    config = RunConfig(method="lg-fedavg", dataset="digits", model="cnn", partition="shards", clients=4, rounds=5)
    sim = build_simulation(config)
    assert sim.method.fedavg_rounds == 4                # 0.8 of 5 rounds
    sim.round(1, clients=[0, 1], evaluate=False)
    assert all(set(r.weights) == set(sim.method.model.state_dict()) for r in sim.reports)
    with pytest.raises(ConfigError, match="fedavg_share"):
        RunConfig(method="lg-fedavg", dataset="digits", options={"fedavg_share": 1.0}).validate()


def test_local_only_sends_nothing_and_keeps_models_apart():
    sim, before, reports = one_round("local")
    assert all(r.uplink_bits == 0 and r.downlink_bits == 0 for r in reports)
    assert all(torch.equal(v, before[k]) for k, v in sim.method.model.state_dict().items())
    a, b = sim.method.personal_model(0).state_dict(), sim.method.personal_model(1).state_dict()
    assert not torch.equal(a["conv1.weight"], b["conv1.weight"])


@pytest.mark.parametrize("method", ["topk", "topk-ef"])
def test_topk_sends_exactly_k_values(method):
    sim, before, reports = one_round(method, k=0.05)
    d = sum(p.numel() for p in sim.method.model.parameters())
    k = int(np.ceil(0.05 * d))
    for r in reports:
        assert int((r.vector != 0).sum()) == k
        assert r.uplink_bits == sparse_bits(k, d) and r.downlink_bits == dense_bits(d)
    changed = sum(int((sim.method.model.state_dict()[n] != before[n]).sum()) for n in before)
    assert 0 < changed <= len(reports) * k


@pytest.mark.parametrize("method", PERSONAL)
@pytest.mark.slow
def test_every_method_runs_from_the_command_line(method, tmp_path):
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "hetfl_core", "run", method, "--dataset", "digits", "--clients", "4",
                           "--rounds", "1", "--no-cache", "--quiet", "--out", str(out)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(out.read_text())["history"]) == 1


@pytest.mark.slow
def test_fedper_beats_fedavg_on_pathological_split():
    gaps = []
    for seed in (0, 1, 2):
        accs = {}
        for method in ("fedavg", "fedper"):
            config = RunConfig(method=method, dataset="digits", model="cnn", partition="shards", classes_per_client=2,
                               clients=10, rounds=6, lr=0.1, local_epochs=2, batch_size=16, seed=seed)
            accs[method] = run(config)["history"][-1]["acc_personal"]
        gaps.append(accs["fedper"] - accs["fedavg"])
    assert min(gaps) > 0.1, gaps


@pytest.mark.parametrize("method", ["fedper", "fedrep", "lg-fedavg"])
def test_a_clients_step_trains_a_model_of_its_own(method):
    """Client 0's step leaves the global model, and so client 1's model, as they were."""
    sim, _, _ = one_round(method)
    m = sim.method
    before = {n: p.detach().clone() for n, p in m.client_model(1).named_parameters()}
    plans = m.configure_round(2, [0, 1])
    report = m.client_update(sim.data.clients[0], plans[0], seeded_generator(0, 2, 0))
    assert report.local_steps > 0
    after = dict(m.client_model(1).named_parameters())
    assert all(torch.equal(before[n], after[n].detach()) for n in before)
    assert m.client_model(1) is not m.client_model(1)        # the public model is the client's own copy
