"""tools/divergence_probe.py: a traced round trains exactly as an untraced one, and bad
input is one line."""
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import divergence_probe  # noqa: E402

from hetfl_core.book.ladder_specs import SPECS  # noqa: E402
from hetfl_core.runtime.engine import build_simulation  # noqa: E402


def smoke_config(chapter, ref, label, **changes):
    """The ladder's run of ``label`` for claim ``ref``, at the smoke scale's setting."""
    spec = next(s for s in SPECS[chapter] if s.ref == ref)
    name, options, *_ = spec.methods[label]
    return spec.setting("smoke").replace(method=name, options=options, **changes)


@pytest.mark.parametrize("chapter, ref, label, changes", [
    ("heroes", "Table I", "ENC-fixed", {}),                    # composed factors, plain SGD
    ("fedlps", "Table I", "FedLPS", {}),                         # a penalty of the method's own
    ("heroes", "Table I", "Flanc", {"momentum": 0.5}),
    ("fedlps", "Table I", "FedPer", {"momentum": 0.5, "weight_decay": 1e-3}),
])
def test_a_traced_round_trains_as_the_run_does(chapter, ref, label, changes):
    config = smoke_config(chapter, ref, label, **changes)
    plain, traced = build_simulation(config), build_simulation(config)
    for sim in (plain, traced):
        sim.round(1)
    expected = plain.round(2)
    row, phases, diverged = divergence_probe.traced_round(traced, 2)
    assert diverged is None and row["loss"] == expected["loss"]
    for k in range(config.clients):          # every client's model is the untraced run's
        mine = traced.method.personal_model(k).state_dict()
        theirs = plain.method.personal_model(k).state_dict()
        assert all(torch.equal(mine[n], theirs[n]) for n in theirs)
    assert [client for client, _ in phases] == [c["id"] for c in expected["clients"]]
    for (_, steps), record in zip(phases, expected["clients"], strict=True):
        assert len(steps) == record["local_steps"] > 0
        assert all(s["grad"] > 0 and s["weight"] > 0 and s["loss"] > 0 for s in steps)
    # the training module is as it was
    assert divergence_probe.training.local_sgd.__module__ == "hetfl_core.science.training"


def test_the_probe_names_a_divergence_and_the_round_it_happened_in():
    config = smoke_config("heroes", "Table I", "ENC-fixed", lr=1e4)
    sim = build_simulation(config)
    row, phases, diverged = divergence_probe.traced_round(sim, 1)
    assert row is None and diverged.startswith("heroes diverged in round 1 (client ")
    assert any(s["loss"] != s["loss"] or s["loss"] > 1e3 for _, steps in phases for s in steps)


@pytest.mark.parametrize("args, says", [
    (["nonesuch", "Table I", "book", "X", "0"], "no chapter 'nonesuch' on the ladder"),
    (["heroes", "Table Z", "book", "Heroes", "0"], "no claim 'Table Z' in heroes"),
    (["heroes", "Table I", "book", "Nobody", "0"], "names no method 'Nobody'"),
    (["heroes", "Table I", "book", "ENC-fixed", "0", "--steps-at", "999"], "past the run's 30 rounds"),
    (["heroes", "Table I", "book", "ENC-fixed", "0", "--every", "0"], "--every must be at least 1"),
    (["heroes", "Table I", "book", "ENC-fixed", "0", "--set", "lr"], "--set takes FIELD=VALUE, got 'lr'"),
    (["heroes", "Table I", "book", "ENC-fixed", "0", "--dense-twin"], "give --steps-at ROUND"),
    (["heroes", "Table I", "book", "ENC-fixed", "0", "--set", "nonesuch=1"], "--set nonesuch=1: "),
    (["heroes", "Table I", "book", "ENC-fixed", "0", "--set", "lr=-1"], "--set lr=-1: "),
])
def test_bad_input_is_one_line(args, says):
    with pytest.raises(SystemExit) as stop:
        divergence_probe.main(args)
    message = str(stop.value.code)
    assert message.startswith("error: ") and says in message and "\n" not in message


def test_a_saved_probe_is_read_by_the_chapter_and_marked_stale_on_other_code(tmp_path, monkeypatch):
    import json
    import shutil

    from hetfl_core.book.ladder import STORE_ENV, divergence_note, probe_path

    shutil.copy(ROOT / "results" / "ladder" / "digests.json", tmp_path / "digests.json")
    monkeypatch.setenv(STORE_ENV, str(tmp_path))
    assert "No probe of ENC-fixed's seed 0 at the book rung is stored" in divergence_note(
        "heroes", "ENC-fixed", "book", 0)
    assert divergence_probe.main(["heroes", "Table I", "book", "ENC-fixed", "0", "--rounds", "3",
                                  "--steps-at", "2", "--save"]) == 0
    path = probe_path("heroes", "ENC-fixed", "book", 0)
    record = json.loads(path.read_text())
    assert [r["round"] for r in record["rounds"]] == [1, 2, 3] and record["diverged"] is None
    assert len(record["traced"]) == 8 and all(len(p["steps"]) == 10 for p in record["traced"])
    note = divergence_note("heroes", "ENC-fixed", "book", 0)
    assert note.startswith("Re-run round by round (`python tools/divergence_probe.py heroes 'Table I' book")
    assert "ENC-fixed's global model's parameter norm goes from" in note and "(round 1)" in note
    assert "In round 2, client" in note and "Stale" not in note
    record["provenance"].update(source_hash="000000000000", equivalence_digest="0" * 64)
    path.write_text(json.dumps(record))
    assert "**Stale:** it was computed on source 000000000000" in divergence_note("heroes", "ENC-fixed", "book", 0)


def _probe(tmp_path, traced, rounds, at, diverged, scope="global model"):
    import json

    from hetfl_core.book.ladder import probe_path

    record = {"scope": scope, "steps_at": at, "rounds": rounds, "traced": traced, "diverged": diverged,
              "config": {"dataset": "digits"},
              "provenance": {"command": "python tools/divergence_probe.py x", "source_hash": "0"}}
    path = probe_path("c", "M", "x4", 1, tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def _steps(*losses):
    return [{"loss": v, "logit": 10.0, "grad": 2.0 * (i + 1), "weight": 1.0} for i, v in enumerate(losses)]


def test_the_note_follows_the_worst_client_to_where_its_loss_stops_being_finite(tmp_path):
    from hetfl_core.book.ladder import divergence_note

    rounds = [{"round": r, "norm": 10.0 + r, "largest": 1.0 + r / 10} for r in (1, 2)]
    traced = [{"client": 4, "steps": _steps(0.5, 0.4, 0.3)},
              {"client": 9, "steps": _steps(0.1, 2.0, float("inf"), float("nan"))}]
    _probe(tmp_path, traced, rounds, 3, "m diverged in round 3 (client 9 loss nan)")
    note = divergence_note("c", "M", "x4", 1, tmp_path)
    assert ("over the rounds before the traced one, M's global model's parameter norm goes from 11 "
            "(round 1) to 12 (round 2), never changing by more than 9.09% from one round to the next, "
            "and the largest weight stays between 1.1 and 1.2.") in note
    assert "client 9 starts its local training at loss 0.1" in note
    assert "its loss goes 0.1 → 2 → not finite, its gradient norm from 2 to 6" in note
    assert "while the round's other participant stays below loss 0.5" in note
    assert note.endswith("The run stops there: m diverged in round 3 (client 9 loss nan). **Stale:** it "
                         "was computed on source 0; `python tools/divergence_probe.py x` computes it again.")
    assert "dense twin" not in note
    from hetfl_core.book.ladder import twin_ends

    assert twin_ends("c", "M", "x4", 1, tmp_path) is None
    for step, dense in zip(traced[1]["steps"], (0.1, 1.5, 0.9, 0.7)):
        step["dense_loss"] = dense
    _probe(tmp_path, traced, rounds, 3, "m diverged in round 3 (client 9 loss nan)")
    assert ("Its dense twin, trained from the same start on the same batches with each composed weight as "
            "one plain parameter instead of a product of factors, goes "
            "0.1 → 1.5 → 0.9 → 0.7.") in divergence_note("c", "M", "x4", 1, tmp_path)
    from hetfl_core.book.ladder import twin_ends

    ends = twin_ends("c", "M", "x4", 1, tmp_path)
    assert ends["client"] == 9 and ends["factored"] != ends["factored"]        # not finite: nan
    assert (ends["dense_peak"], ends["dense_last"]) == (1.5, 0.7)


def test_a_blow_up_that_stays_finite_is_followed_into_the_next_round(tmp_path):
    from hetfl_core.book.ladder import divergence_note

    rounds = [{"round": 1, "norm": 5.0, "largest": 1.0}, {"round": 2, "norm": 6.0, "largest": 1.5},
              {"round": 3, "norm": 900.0, "largest": 450.0}]
    traced = [{"client": 8, "steps": _steps(0.2, 50.0, 1.4e4)}]
    _probe(tmp_path, traced, rounds, 3, "m diverged in round 4 (client 0 loss nan)", "clients' models")
    note = divergence_note("c", "M", "x4", 1, tmp_path)
    assert ("the largest parameter norm among M's clients' models goes from 5 (round 1) to 6 (round 2), "
            "never changing by more than 20% from one round to the next, and the largest weight stays "
            "between 1 and 1.5.") in note
    assert "its loss goes 0.2 → 50 → 1.4e+04" in note and "not finite" not in note
    assert "it leaves weights up to 450, and the next round stops: m diverged in round 4" in note


def test_a_long_climb_is_shown_by_its_start_and_its_last_steps(tmp_path):
    from hetfl_core.book.ladder import divergence_note

    traced = [{"client": 3, "steps": _steps(*[float(v) for v in range(1, 15)], float("nan"))}]
    _probe(tmp_path, traced, [{"round": 1, "norm": 5.0, "largest": 1.0}], 2, "m diverged in round 2 (x)")
    assert ("its loss goes 1 → 2 → … (6 steps) … → 9 → 10 → 11 → 12 → 13 → 14 → not finite"
            in divergence_note("c", "M", "x4", 1, tmp_path))


def test_a_re_run_with_a_changed_config_is_kept_apart_and_told_how_it_ended(tmp_path, monkeypatch):
    import json
    import shutil

    from hetfl_core.book.ladder import STORE_ENV, divergence_note, probe_path

    shutil.copy(ROOT / "results" / "ladder" / "digests.json", tmp_path / "digests.json")
    monkeypatch.setenv(STORE_ENV, str(tmp_path))
    spec = next(s for s in SPECS["heroes"] if s.ref == "Table I")
    monkeypatch.setattr(spec, "setting", smoke_setting)        # two rounds, six clients
    assert divergence_probe.main(["heroes", "Table I", "book", "ENC-fixed", "0", "--set", "lr=0.02",
                                  "--save"]) == 0
    path = probe_path("heroes", "ENC-fixed", "book", 0, variant="lr=0.02")
    assert path.name == "heroes-enc-fixed-book-s0-lr-0-02.json" and not probe_path(
        "heroes", "ENC-fixed", "book", 0).exists()
    record = json.loads(path.read_text())
    assert record["changes"] == {"lr": 0.02} and record["config"]["lr"] == 0.02
    note = divergence_note("heroes", "ENC-fixed", "book", 0, variant="lr=0.02")
    rounds = record["config"]["rounds"]
    assert note.startswith("Re-run round by round with lr 0.02 (`python tools/divergence_probe.py heroes")
    assert "over its rounds, ENC-fixed's global model's parameter norm goes from" in note
    assert f"It does not diverge in its {rounds} rounds, and its last scored global accuracy is " in note
    assert f"(round {rounds})." in note
    assert "with lr=0.03 is stored" in divergence_note("heroes", "ENC-fixed", "book", 0, variant="lr=0.03")


def smoke_setting(scale):
    from hetfl_core.book.ladder_specs.heroes import heroes_setting

    return heroes_setting("smoke")


@pytest.mark.parametrize("ref, label", [("Table I", "ENC-fixed"), ("Fig. 4b (ResNet)", "Flanc")])
def test_the_dense_twin_starts_where_the_composed_model_is_and_leaves_the_run_alone(ref, label):
    """The twin's first step sees the composed model's own weights (the same loss, bit for
    bit), and the run trains as it would without the twin."""
    config = smoke_config("heroes", ref, label)
    plain, traced = build_simulation(config), build_simulation(config)
    for sim in (plain, traced):
        sim.round(1)
    expected = plain.round(2)
    row, phases, _ = divergence_probe.traced_round(traced, 2, twins=True)
    assert row["loss"] == expected["loss"]
    for k in range(config.clients):
        mine, theirs = traced.method.personal_model(k).state_dict(), plain.method.personal_model(k).state_dict()
        assert all(torch.equal(mine[n], theirs[n]) for n in theirs)
    for _, steps in phases:
        assert all("dense_loss" in s for s in steps)
        assert steps[0]["dense_loss"] == steps[0]["loss"]
        assert any(s["dense_loss"] != s["loss"] for s in steps[1:])      # then their paths part
    assert divergence_probe.dense_twin(torch.nn.Linear(2, 2)) is None
