"""HeteroFL against a reference round written from the authors' code's semantics
(diaoenmao/HeteroFL-...-Heterogeneous-Clients @ cc40f3e4: src/fed.py split_model/combine,
src/models/conv.py, src/modules/modules.py Scaler, src/train_classifier_fed.py Local.train
and test), on a tiny federation: digits, 4 clients of widths 1, 1/2, 1/4 with unequal
data sizes and missing labels, 2 rounds of 2 local epochs, SGD with momentum and weight
decay."""
import pytest
import torch

from hetfl_core import RunConfig
from hetfl_core.runtime.engine import build_simulation

from . import width_reference as ref
from .pfl_reference import tiny_config

SETTING = dict(dataset="digits", model="cnn", partition="dirichlet", alpha=0.3, clients=4,
               heterogeneity="medium", seed=1, local_epochs=2, batch_size=32, lr=0.05,
               momentum=0.5, weight_decay=1e-3)
PARTICIPANTS = [[0, 1, 2, 3], [1, 3]]      # round 2 leaves the other clients' entries alone
SCORES = ("acc_global", "loss_global", "acc_personal", "loss_personal")


def run_package(method: str, options: dict | None = None, init: dict | None = None,
                participants: list[list[int]] = PARTICIPANTS):
    """The package's run over ``participants`` (one list per round): (initial state, final
    state, last row, simulation)."""
    config = RunConfig(method=method, rounds=len(participants), options=options or {}, **SETTING)
    sim = build_simulation(config)
    if init is not None:
        sim.method.model.load_state_dict(init)
    start = {k: v.clone() for k, v in sim.method.model.state_dict().items()}
    for t, ids in enumerate(participants, start=1):
        row = sim.round(t, clients=ids, evaluate=t == len(participants))
    return start, {k: v.clone() for k, v in sim.method.model.state_dict().items()}, row, sim


def reference_config() -> dict:
    """The optimiser and batching settings the reference takes."""
    return {"lr": SETTING["lr"], "momentum": SETTING["momentum"],
            "weight_decay": SETTING["weight_decay"], "batch_size": SETTING["batch_size"],
            "epochs": SETTING["local_epochs"], "seed": SETTING["seed"]}


def reference(sim, start: dict, participants=PARTICIPANTS, **kwargs) -> dict:
    """The reference HeteroFL/FedRolex rounds from ``start`` on ``sim``'s clients and widths."""
    return ref.heterofl_rounds(start, sim.data.clients, sim.method.widths, participants,
                               reference_config(), **kwargs)


def assert_scores_match(row: dict, state: dict, sim, personal) -> None:
    """The package's scores equal the reference's on ``state`` (within 1e-5)."""
    data = sim.data
    want = ref.scores(state, data.dataset.x_test, data.dataset.y_test, data.clients, personal)
    for key in SCORES:
        assert row[key] == pytest.approx(want[key], abs=1e-5), key


def test_the_setting_exercises_every_rule():
    sim = build_simulation(RunConfig(method="heterofl", **SETTING))
    clients = sim.data.clients
    assert len({c.n_train for c in clients}) == len(clients)        # count vs data weights differ
    assert any(len(c.y_train.unique()) < sim.data.num_classes for c in clients)   # masks act
    assert set(sim.method.widths.values()) == {1.0, 0.5, 0.25}      # the Scaler and nesting act


def test_heterofl_matches_the_authors_round():
    start, ours, row, sim = run_package("heterofl")
    expected = reference(sim, start)
    ref.assert_states_close(ours, expected)
    assert_scores_match(row, expected, sim, ref.label_masked(expected, sim.data.num_classes))


@pytest.mark.parametrize("off", [{"label_mask": False}, {"scaler": False}, {"clip_norm": None},
                                 {"weighting": "samples"}])
def test_each_rule_of_the_authors_is_needed_for_the_match(off):
    """Each earlier behaviour, kept as an option, moves the global state away from the
    reference: every rule is exercised by the match above."""
    start, ours, _, sim = run_package("heterofl", off, participants=PARTICIPANTS[:1])
    expected = reference(sim, start, PARTICIPANTS[:1])
    assert max((ours[n] - expected[n]).abs().max().item() for n in expected) > 1e-3, off


def test_submodel_scores_are_an_option_not_the_reference():
    """``personal_eval="submodel"`` (each client's width sub-model, unmasked) scores a
    different model than the authors' local accuracy; the global score is unchanged."""
    _, _, row, _ = run_package("heterofl")
    _, _, sub, _ = run_package("heterofl", {"personal_eval": "submodel"})
    assert sub["acc_global"] == row["acc_global"]
    assert sub["loss_personal"] != pytest.approx(row["loss_personal"], abs=1e-3)


def test_lr_milestones_drop_the_rate_after_those_rounds():
    """``lr_milestones`` is the authors' MultiStepLR stepped once per round: round 2 of a run
    with milestone 1 trains at lr x lr_gamma, exactly as a run whose rate is set to that."""
    scheduled = build_simulation(tiny_config("heterofl", options={"lr_milestones": [1], "lr_gamma": 0.2}))
    by_hand = build_simulation(tiny_config("heterofl"))
    for t in (1, 2):
        if t == 2:
            by_hand.method.lr_at = lambda round_idx: 0.1 * 0.2
        scheduled.round(t, clients=[0, 1, 2, 3])
        by_hand.round(t, clients=[0, 1, 2, 3])
    ours, theirs = scheduled.method.model.state_dict(), by_hand.method.model.state_dict()
    assert all(torch.equal(ours[n], theirs[n]) for n in ours)
    assert scheduled.method.round_lr == pytest.approx(0.02)


def test_dynamic_rate_mode_redraws_every_clients_width_each_round():
    """``rate_mode="dynamic"`` is fed.py's ``make_model_rate`` in 'dynamic' mode: every round
    each client's width is drawn afresh from the levels with their shares of the fixed
    assignment as probabilities; the round then trains exactly as a fixed run whose
    widths are the drawn ones."""
    rounds = 12
    dynamic = build_simulation(RunConfig(method="heterofl", rounds=rounds, options={"rate_mode": "dynamic"},
                                         **SETTING))
    fixed = dict(dynamic.method.assigned)
    drawn = []
    for t in range(1, rounds + 1):
        plans = dynamic.method.configure_round(t, list(range(4)))
        drawn.append({k: plan.width for k, plan in plans.items()})
    assert set().union(*(d.values() for d in drawn)) == set(fixed.values())
    assert any(d != fixed for d in drawn)                           # widths move
    assert len({d[2] for d in drawn}) > 1                           # also one client's over rounds
    assert dynamic.method.redraw_widths(5) == drawn[4]              # seeded per round
    # one trained round at the drawn widths equals a fixed run with those widths
    one = build_simulation(RunConfig(method="heterofl", rounds=1, options={"rate_mode": "dynamic"}, **SETTING))
    by_hand = build_simulation(RunConfig(method="heterofl", rounds=1, **SETTING))
    by_hand.method.widths = one.method.redraw_widths(1)
    assert by_hand.method.widths != fixed
    one.round(1, clients=[0, 1, 2, 3], evaluate=False)
    by_hand.round(1, clients=[0, 1, 2, 3], evaluate=False)
    ours, theirs = one.method.model.state_dict(), by_hand.method.model.state_dict()
    assert all(torch.equal(ours[n], theirs[n]) for n in ours)


def test_fixed_rate_mode_keeps_the_capability_widths():
    sim = build_simulation(RunConfig(method="heterofl", rounds=3, **SETTING))
    for t in (1, 2, 3):
        plans = sim.method.configure_round(t, list(range(4)))
        assert {k: p.width for k, p in plans.items()} == sim.method.assigned
