"""A round's clients trained as one batch (hetfl_core.runtime.batched) give the sequential engine's
numbers: the same history and final models within 1e-5, for every method whose phases
allow it.

The runs are small and uneven on purpose: quantity-skewed clients of 8 to 100 samples, so
short last batches are padded, clients run out of steps at different times (epoch-based
steps, FedRep's head epochs), and momentum and weight decay carry optimiser state.
"""
import math

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from hetfl_core import RunConfig
from hetfl_core.runtime import batched
from hetfl_core.runtime.engine import build_simulation, run_rounds
from hetfl_core.science.errors import ConfigError
from hetfl_core.science.methods.base import METHODS

BASE = dict(dataset="digits", model="cnn", partition="quantity", alpha=0.5, clients=5, rounds=2,
            train_samples=300, local_steps=4, batch_size=16, lr=0.1, momentum=0.9,
            weight_decay=1e-3, seed=1)
OFA = {"warmup": 1, "every": 1, "ratios": [1.0, 0.6, 0.3]}
#: what a method runs with here besides BASE (none: BASE alone)
SETTINGS = {
    "fedprox": {"options": {"mu": 0.5}},
    "fedrep": {"options": {"head_epochs": 0.5}},
    "topk": {"options": {"k": 0.2}},
    "topk-ef": {"options": {"k": 0.2}},
    "srp-pfed": {"val_fraction": 0.2},
    "ofafl": {"options": OFA},
    "ltp": {"options": OFA},
    "ofa-oneshot": {"options": OFA},
    "ordered-mask": {"options": {"ratio": 0.5}},
    "random-mask": {"options": {"ratio": 0.6}},
    "fedlps": {"heterogeneity": "medium"},
    "heroes": {"model": "wcnn", "weight_decay": 0.0, "heterogeneity": "high"},
    "flanc": {"model": "wcnn", "weight_decay": 0.0, "heterogeneity": "high"},
    "prunefl": {"options": {"reconfigure_every": 1}},       # squared gradients after training
    "lotteryfl": {"options": {"acc_threshold": 0.0}},       # every client prunes in round 1
}
# lg-fedavg: round 1 a FedAvg warm-start round, round 2 LG-FedAvg's; oneshot: round 2 trains
# under the pruned mask
BUILT_IN = {name: cls for name, cls in METHODS.items() if cls.__module__.startswith("hetfl_core.science.methods.")}
#: the built-in methods whose phases train alone under their defaults (a loss of their own,
#: clipping, or a step that trains by itself); every other one trains batched
SEQUENTIAL = ("fedlps-code", "fedrolex", "fjord", "heterofl")
#: HeteroFL's and FedRolex's training without the label-masked loss and clipping: the
#: Scaler's hooks, grouped by rate, at three widths
PLAIN_WIDTHS = {"heterogeneity": "high", "options": {"label_mask": False, "clip_norm": None}}
BATCHABLE = tuple(sorted(set(BUILT_IN) - set(SEQUENTIAL)))
#: every batchable method, and runs that take other paths of the batched trainer
CASES = {
    **{name: SETTINGS.get(name, {}) for name in BATCHABLE},
    "fedavg-epochs": {"method": "fedavg", "local_steps": None, "local_epochs": 1.5},
    "fedlps-magnitude": {"method": "fedlps", "heterogeneity": "medium",
                         "options": {"pattern": "magnitude"}},
    "fedlps-random": {"method": "fedlps", "heterogeneity": "high",
                      "options": {"pattern": "random", "q_grad": "kept"}},
    "heterofl-plain": {"method": "heterofl", **PLAIN_WIDTHS},
    "fedrolex-plain": {"method": "fedrolex", **PLAIN_WIDTHS},
}
#: the phases a client's step yields, where more than one (each trains in its own batch)
PHASES = {"fedrep": 2, "ditto": 2}
SCORES = ("loss", "acc_global", "loss_global", "acc_personal", "loss_personal")


def config_of(case: str, **changes) -> RunConfig:
    """The case's run (``method`` defaults to the case's name), with ``changes``."""
    settings = {"method": case, **BASE, **SETTINGS.get(case, {}), **CASES.get(case, {}), **changes}
    return RunConfig(**settings)


def run_sim(config: RunConfig):
    sim = build_simulation(config)
    return sim, run_rounds(sim)["history"]


def spy_groups(monkeypatch, kinds: list | None = None) -> list:
    """Record the number of clients of every batched group trained (the real trainer runs),
    and in ``kinds`` the number of kinds of phase each call of ``train_phases`` holds:
    distinct parameter shapes and ``group`` (a width, a block selection)."""
    sizes = []
    real, real_phases = batched.train_group, batched.train_phases

    def counting(phases, *args, **kwargs):
        sizes.append(len(phases))
        return real(phases, *args, **kwargs)

    def sorting(phases):
        if kinds is not None:
            kinds.append(len({(tuple(p.shape for p in ph.model.parameters()), ph.group)
                              for ph in phases}))
        return real_phases(phases)

    monkeypatch.setattr(batched, "train_group", counting)
    monkeypatch.setattr(batched, "train_phases", sorting)
    return sizes


def close(a, b, tol=1e-5) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)


def assert_same_run(seq, bat, tol=1e-5):
    """Histories and every model that is scored (global and each client's) agree within ``tol``."""
    (sim_s, hist_s), (sim_b, hist_b) = seq, bat
    for row_s, row_b in zip(hist_s, hist_b, strict=True):
        for key in SCORES:
            assert close(row_s[key], row_b[key], tol), (key, row_s["round"], row_s[key], row_b[key])
        for a, b in zip(row_s["acc_clients"], row_b["acc_clients"], strict=True):
            assert close(a, b, tol)
        # each participant's record: costs, ratios, FedLPS's patterns and training accuracy
        for c_s, c_b in zip(row_s["clients"], row_b["clients"], strict=True):
            assert c_s.keys() == c_b.keys()
            for key, value in c_s.items():
                if isinstance(value, float):
                    assert close(value, c_b[key], tol), (key, value, c_b[key])
                elif not isinstance(value, list):
                    assert value == c_b[key], key
    models = [(sim_s.method.model, sim_b.method.model)]
    models += [(sim_s.method.personal_model(k), sim_b.method.personal_model(k))
               for k in range(sim_s.config.clients)]
    for model_s, model_b in models:
        pairs = zip(model_s.state_dict().items(), model_b.state_dict().items(), strict=True)
        for (name, p), (_, q) in pairs:
            assert torch.allclose(p, q, rtol=tol, atol=tol), (name, float((p - q).abs().max()))


NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(),
                             reason="no CUDA GPU on this machine (torch.cuda.is_available() is False)")
#: where the equality is checked: always the CPU, the GPU where there is one
DEVICES = ["cpu", pytest.param("cuda", marks=NO_CUDA)]


@pytest.fixture
def exact_cuda(monkeypatch):
    """On the GPU the batched kernels (grouped convolutions) sum in another order than one
    client's: agreement to 1e-4 in float32 with TensorFloat-32 off (it rounds to 10 bits)."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")      # matrix products in full float32
    yield
    torch.set_float32_matmul_precision(precision)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_batched_round_matches_sequential(case, device, monkeypatch, exact_cuda):
    config = config_of(case, device=device)
    seq = run_sim(config.replace(batched_clients=False))
    kinds = []
    sizes = spy_groups(monkeypatch, kinds)
    # on the CPU batching is asked for; on CUDA it is the default (None)
    bat = run_sim(config.replace(batched_clients=True if device == "cpu" else None))
    trained = sum(len(row["clients"]) for row in bat[1])
    phases = PHASES.get(config.method, 1)
    # every participant's every phase went through the batched trainer
    assert sum(sizes) == trained * phases > 0
    # together: one group a round and phase for each width or block selection in use
    # (OFA-FL's family: one per density ratio)
    assert len(kinds) <= config.rounds * phases
    assert len(sizes) <= sum(kinds) * (len(OFA["ratios"]) if "ratios" in config.options else 1)
    assert_same_run(seq, bat, tol=1e-5 if device == "cpu" else 1e-4)


def test_uneven_clients_pad_a_last_batch():
    """The equality above covers padding: some client has a short last batch and some
    client a different number of epoch-based steps."""
    sim = build_simulation(config_of("fedavg"))
    sizes = [c.n_train for c in sim.data.clients]
    assert any(n % BASE["batch_size"] for n in sizes)
    assert min(sizes) < BASE["local_steps"] * BASE["batch_size"]
    by_epochs = build_simulation(config_of("fedavg-epochs"))
    assert len({by_epochs.method.local_steps(c) for c in by_epochs.data.clients}) > 1


def test_a_client_smaller_than_a_batch_takes_no_step_on_either_path():
    """FedAvg's drop_last (PFLlib's loader): the 12-sample client takes no step, batched or
    not, and the round's loss is the mean over the clients that trained."""
    config = config_of("fedavg-epochs")
    sizes = {c.client_id: c.n_train for c in build_simulation(config).data.clients}
    for batched_on in (False, True):
        history = run_sim(config.replace(batched_clients=batched_on))[1]
        steps = {c["id"]: c["local_steps"] for row in history for c in row["clients"]}
        assert all(steps[k] == (0 if sizes[k] < BASE["batch_size"] else int(1.5 * (sizes[k] // 16)))
                   for k in steps)
        assert any(v == 0 for v in steps.values())
        assert all(np.isfinite(row["loss"]) and row["loss"] > 0 for row in history)


def test_sequential_path_when_off_or_on_cpu_by_default(monkeypatch):
    sizes = spy_groups(monkeypatch)
    run_sim(config_of("fedavg", rounds=1, batched_clients=False))
    run_sim(config_of("fedavg", rounds=1))      # None: off on the CPU
    assert sizes == []
    assert batched.uses_batched_clients(config_of("fedavg", device="cpu")) is False
    assert batched.uses_batched_clients(config_of("fedavg", batched_clients=True)) is True


def test_whether_a_phase_is_batched_follows_from_the_phase():
    """Cross-entropy (with masks, a proximal term, a penalty, frozen parameters) batches; a
    loss of the method's own, clipping, a forward hook with no ``group`` or a phase marked
    ``alone`` trains alone."""
    from hetfl_core.science.training import LocalSGD

    plain = LocalSGD(torch.nn.Linear(2, 2), None, 1, torch.Generator(), 4, 0.1,
                     penalty=lambda model: 0.0, prox_mu=0.1, params=["weight"])
    assert plain.batchable
    for change in ({"loss": lambda model, xb, yb: 0.0}, {"clip_norm": 1.0}, {"alone": True}):
        assert not LocalSGD(**{**vars(plain), **change}).batchable, change
    for register in ("register_forward_hook", "register_forward_pre_hook"):
        hooked = torch.nn.Sequential(torch.nn.Linear(2, 2))
        handle = getattr(hooked[0], register)(lambda *args: None)
        assert not LocalSGD(**{**vars(plain), "model": hooked}).batchable, register
        assert LocalSGD(**{**vars(plain), "model": hooked, "group": (0.5,)}).batchable, register
        handle.remove()
        assert LocalSGD(**{**vars(plain), "model": hooked}).batchable, register


def test_a_phase_trains_in_training_mode_on_both_paths():
    """A model handed over in eval mode trains in training mode batched as in ``local_sgd``:
    a hook that acts only while training acts on both paths."""
    from types import SimpleNamespace

    from hetfl_core.science.training import LocalSGD, clone_model

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    model[0].register_forward_hook(lambda mod, _inputs, out: out * 3 if mod.training else out)
    model.eval()
    client = SimpleNamespace(x_train=torch.randn(10, 3), y_train=torch.randint(2, (10,)))

    def phase(m):
        return LocalSGD(m, client, 3, torch.Generator().manual_seed(1), 4, 0.5, group=("x",))

    alone, together = clone_model(model), clone_model(model)
    phase(alone).run()
    batched.train_phases([phase(together)])
    for p, q in zip(alone.parameters(), together.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6), float((p - q).abs().max())
    assert not torch.allclose(alone[0].weight, model[0].weight)      # it trained


def test_a_module_held_outside_the_module_tree_is_seen():
    """The composed LSTM runs its recurrence in an ``nn.LSTM`` held as a plain attribute:
    a recurrent layer all the same, so the model trains sequentially; the composed CNN,
    which holds none, batches."""
    from hetfl_core.science.composition import ComposedCNN, ComposedLSTM

    lstm = ComposedLSTM((10,), 20, max_width=2)
    assert not any(isinstance(m, torch.nn.RNNBase) for m in lstm.modules())
    assert not batched.batchable_model(lstm)
    assert batched.batchable_model(ComposedCNN((1, 8, 8), 10))


@pytest.mark.parametrize("name", SEQUENTIAL)
def test_a_method_whose_phases_train_alone_never_reaches_the_batched_trainer(name, monkeypatch):
    sizes = spy_groups(monkeypatch)
    config = config_of(name, rounds=1, batched_clients=True)
    bat = run_sim(config)
    seq = run_sim(config.replace(batched_clients=False))
    assert sizes == []
    assert seq[1][0]["loss"] == bat[1][0]["loss"]


def test_a_model_with_batch_norm_trains_sequentially(monkeypatch):
    sizes = spy_groups(monkeypatch)
    config = config_of("fedavg", model="resnet", rounds=1, local_steps=1, clients=3,
                       batched_clients=True)
    seq = run_sim(config.replace(batched_clients=False))
    bat = run_sim(config)
    assert sizes == [] and seq[1][0]["loss"] == bat[1][0]["loss"]


def test_bad_value_is_a_config_error():
    with pytest.raises(ConfigError, match="batched_clients must be true or false or None, got 'ye"):
        RunConfig(batched_clients="yes").validate()


class HostReads(TorchFunctionMode):
    """Records every tensor call that reads a value back to the host or copies between
    devices: ``.item()``, ``.cpu()``, ``.to()``, ``.tolist()``, ``.numpy()``, and Python's
    ``bool``/``float``/``int`` of a tensor (each a synchronisation on a GPU)."""

    NAMES = {"item", "cpu", "to", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__"}

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in self.NAMES:
            self.calls.append(func.__name__)
        return func(*args, **(kwargs or {}))


def test_the_host_read_recorder_sees_a_read():
    """The recorder below could fail: a loop with one ``float(loss)`` is caught."""
    with HostReads() as reads:
        loss = torch.ones(3).sum()
        float(loss)
        if loss > 0:
            loss.to("cpu")
    assert reads.calls == ["__float__", "__bool__", "to"]


@pytest.mark.parametrize("case", ["fedavg", "fedprox", "fedrep", "ofafl", "fedlps"])
def test_training_loop_reads_nothing_back(case, monkeypatch):
    """Every SGD step of every batched phase runs without a host read or a device copy
    (the schedule moves to the device once per phase, before the loop)."""
    real, seen = batched._train_phase, []

    def recorded(*args, **kwargs):
        with HostReads() as reads:
            out = real(*args, **kwargs)
        seen.append(reads.calls)
        return out

    monkeypatch.setattr(batched, "_train_phase", recorded)
    run_sim(config_of(case, rounds=1, batched_clients=True))
    assert seen and all(calls == [] for calls in seen), seen


@NO_CUDA
def test_training_loop_never_synchronises_on_cuda(monkeypatch):
    """On the GPU: CUDA's own detector raises at any synchronising call inside the loop."""
    real = batched._train_phase

    def strict(*args, **kwargs):
        torch.cuda.set_sync_debug_mode("error")
        try:
            return real(*args, **kwargs)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(batched, "_train_phase", strict)
    run_sim(config_of("fedavg", rounds=1, device="cuda"))


def test_client_data_is_placed_on_the_device_once(monkeypatch):
    """The run's data moves to its device when the run is built (``place_data``), not per round."""
    from hetfl_core.science import devices

    from hetfl_core.runtime import engine
    calls = []
    real = devices.place_data
    monkeypatch.setattr(engine, "place_data", lambda *a: calls.append(1) or real(*a))
    run_sim(config_of("fedavg", rounds=2, batched_clients=True))
    assert calls == [1]


#: the compiled variants, where this machine can run them: the compiler's graph without its
#: code generation on the CPU (``aot_eager``), the real compiler and CUDA graphs on a GPU
VARIANT_CASES = [("compile", "cpu", "aot_eager"), ("fused", "cpu", "aot_eager"),
                 pytest.param("compile", "cuda", None, marks=NO_CUDA),
                 pytest.param("cudagraphs", "cuda", None, marks=NO_CUDA),
                 pytest.param("fused", "cuda", None, marks=NO_CUDA)]


@pytest.mark.parametrize("variant, device, backend", VARIANT_CASES)
@pytest.mark.parametrize("case", ["fedavg", "fedprox"])
def test_step_variants_give_the_same_run(case, variant, device, backend, exact_cuda):
    config = config_of(case, rounds=1, device=device, batched_clients=True)
    plain = run_sim(config)
    with batched.step_variant(variant, backend):
        other = run_sim(config)
    assert_same_run(plain, other, tol=1e-5 if device == "cpu" else 1e-4)


def test_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="unknown batched step variant 'fast'"):
        with batched.step_variant("fast"):
            pass
