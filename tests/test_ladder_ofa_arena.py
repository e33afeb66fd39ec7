"""The ladder's claims of OFA-FL and of the arena's reference cell: their runs restate the
chapters' (the chapters' own code builds the comparison), their values at smoke scale are
the chapters' computations on the same runs, stored runs keep what the claims read, and
the arena's leaderboards and their settling are rendered from a small store."""
from __future__ import annotations

import dataclasses
import json
import re
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from hetfl_core.book import ladder
from hetfl_core.runtime.config import ALL, RunConfig, by_scale
from hetfl_core.book.ladder_specs import SPECS
from hetfl_core.book.ladder_specs.arena import ARENA_LRS, ARENA_METHODS

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (0, 1)


def spec(chapter: str, ref: str):
    return next(s for s in SPECS[chapter] if s.ref == ref)


def chapter_cell(chapter: str, marker: str) -> str:
    """The source of the code cell of ``book/<chapter>.md`` that contains ``marker``,
    without its cell options."""
    text = (ROOT / "book" / f"{chapter}.md").read_text()
    cells = re.findall(r"```\{code-cell\}[^\n]*\n(.*?)\n```", text, flags=re.S)
    found = [c for c in cells if marker in c]
    assert len(found) == 1, f"{len(found)} cells of {chapter} contain {marker!r}"
    source = found[0]
    if source.startswith("---\n"):                      # a YAML block of options
        source = source.split("\n---\n", 1)[1]
    lines = source.split("\n")
    while lines and (lines[0].startswith(":") or not lines[0].strip()):
        lines.pop(0)
    return "\n".join(lines)


def ofa_chapter(scale: str, **extra) -> dict:
    """The OFA-FL chapter's setup at ``scale``: its constants, ``schedule``, ``grid_of``
    and the data dicts, run from the chapter's own cells."""
    from hetfl_core.science import data as hd

    setup = chapter_cell("ofa_fl", "METHODS = [")
    constants = "\n".join(line for line in setup.split("\n")
                          if re.match(r"(PAPER_R|STRESS_R|TABLE2_R|METHODS|LABEL) = ", line))
    ns = {"ALL": ALL, "RunConfig": RunConfig, "np": np,
          "book": type("Book", (), {"by_scale": staticmethod(partial(by_scale, scale))})(),
          "dataset": hd.canonical_dataset_name("mnist-5k"),
          "cifar_dataset": hd.canonical_dataset_name("fashion-mnist"),
          "cifar_model": by_scale(scale, smoke="mlp", book="mlp", paper="resnet"), **extra}
    exec(constants, ns)
    ns["seeds"] = list(SEEDS)
    exec(chapter_cell("ofa_fl", "def grid_of("), ns)
    return ns


@pytest.mark.parametrize("scale", ["smoke", "book", "paper"])
def test_the_ofa_fl_runs_are_the_chapters(scale):
    ch = ofa_chapter(scale)
    grids = {"Fig. 2a": ch["grid_of"]("fig2", ch["schedule"](ch["STRESS_R"], **ch["mnist"])),
             "Table 2": ch["grid_of"]("table2", ch["schedule"](ch["TABLE2_R"], **ch["cifar"]),
                                      methods=["ofafl", "ltp"])}
    grids["Figs. 2-3"] = grids["Fig. 2a"]
    for ref, grid in grids.items():
        s = spec("ofa_fl", ref)
        fig = next(iter(grid))[0]
        assert len(s.methods) * len(SEEDS) == len(grid)
        for label, (name, options) in s.methods.items():
            for seed in SEEDS:
                mine = s.setting(scale).replace(method=name, seed=seed).with_options(**options)
                assert mine == grid[(fig, name, "global", seed)], (ref, label, seed)


def test_the_ofa_fl_rungs_stretch_the_schedule():
    plan = ladder.planned_runs("ofa_fl")
    assert len(plan) == 5 * (9 + 6)        # Fig. 2's 3 methods x 3 seeds (two claims), Table 2's 2 x 3
    fig2 = [p for p in plan if "ofa_fl: Fig. 2a" in p.claims]
    assert all(p.claims == ("ofa_fl: Fig. 2a", "ofa_fl: Figs. 2-3") for p in fig2)
    assert all(p.fields == ("acc_ratios",) for p in plan)
    by_rung = {p.rung: p.config for p in fig2}
    assert [(c.rounds, c.options["warmup"], c.options["every"]) for c in by_rung.values()] == \
        [(40, 20, 5), (80, 40, 10), (160, 80, 20), (320, 160, 40), (400, 200, 50)]
    assert by_rung["paper"].local_steps is None and by_rung["paper"].batch_size == 10
    assert all(c.eval_every == 1 and c.eval_global for c in by_rung.values())   # every round: max reading
    table2 = {p.rung: p.config for p in plan if "ofa_fl: Table 2" in p.claims}
    assert table2["paper"].model == "resnet" and table2["paper"].eval_every == 400
    assert table2["x4"].options["test_samples"] == 2000


def smoke_grid(tail: int = 0) -> dict:
    """The chapter's smoke runs of the three claims on two seeds, computed, keyed as its
    grid (fig, method, scope, seed); ``tail`` rounds after the last pruning (the chapter's
    ``TAIL``, 0 at smoke scale), where the max-average round can differ from the last."""
    from hetfl_core.runtime.engine import run

    ch = ofa_chapter("smoke")
    ch["TAIL"] = tail
    grid = {**ch["grid_of"]("fig2", ch["schedule"](ch["STRESS_R"], **ch["mnist"])),
            **ch["grid_of"]("table2", ch["schedule"](ch["TABLE2_R"], **ch["cifar"]),
                            methods=["ofafl", "ltp"])}
    return {key: run(config.replace(device="cpu")) for key, config in grid.items()}


@pytest.fixture(scope="module")
def ofa_smoke_runs():
    """The chapter's smoke runs (:func:`smoke_grid`), computed once."""
    return smoke_grid()


@pytest.fixture(scope="module")
def ofa_tail_runs():
    """The smoke runs with 6 rounds after the last pruning."""
    return smoke_grid(tail=6)


#: per claim: the chapter's ``lead_over`` arguments (figure, rivals, key, reading, unit, lower)
CALLS = {"Fig. 2a": ("fig2", ["ltp", "ofa-oneshot"], "var", "max", " pt²", True),
         "Figs. 2-3": ("fig2", ["ltp", "ofa-oneshot"], "mean", "max", " points", False),
         "Table 2": ("table2", ["ltp"], "var", "final", " pt²", True)}
LABELS = {"ofafl": "OFA-FL", "ltp": "LTP", "ofa-oneshot": "one-shot"}


def chapter_leads(runs: dict, only: str | None = None) -> dict:
    """The chapter's own claim values (its ``lead_over`` cell, run as it is) on ``runs``:
    per claim, the rival it pairs with and the per-seed values; ``only`` offers it that one
    rival (the chapter's pairing with it)."""
    from hetfl_core.science import lottery
    from hetfl_core.runtime.experiments import by
    from hetfl_core.book.report import best_on_average, paired

    ns = ofa_chapter("smoke", lottery=lottery, by=by, runs=runs, paired=paired,
                     best_on_average=best_on_average)
    exec(chapter_cell("ofa_fl", "def reading_of("), ns)
    exec(chapter_cell("ofa_fl", "def lead_over("), ns)
    out = {}
    for ref, (fig, rivals, key, reading, unit, lower) in CALLS.items():
        if only is not None and only not in rivals:
            continue
        got = ns["lead_over"](fig, "ofafl", [only] if only else rivals, key, reading, unit,
                              lower=lower)
        out[ref] = (got.rival, np.asarray(got.values, float))
    return out


def smoke_runs_of(s, ofa_smoke_runs: dict, fig: str) -> dict:
    """The claim's runs (label -> the seeds' results) out of the chapter's grid."""
    return {label: [ofa_smoke_runs[(fig, name, "global", seed)] for seed in SEEDS]
            for label, (name, _) in s.methods.items()}


@pytest.mark.parametrize("which", ["ofa_smoke_runs", "ofa_tail_runs"])
def test_the_ofa_fl_values_are_the_chapters(which, request):
    """Against the rival the chapter picks (best on average) and against each rival on its
    own, the claim's per-seed values are the chapter's, exactly."""
    from hetfl_core.science.lottery import ratio_summary

    grid = request.getfixturevalue(which)
    for only in (None, "ltp", "ofa-oneshot"):
        for ref, (rival, values) in chapter_leads(grid, only).items():
            s = spec("ofa_fl", ref)
            runs = smoke_runs_of(s, grid, CALLS[ref][0])
            assert LABELS[rival] in s.rivals
            got = s.value(runs, LABELS[rival])
            assert got.shape == (len(SEEDS),) and np.array_equal(got, values), (ref, only)
    assert set(chapter_leads(grid, "ofa-oneshot")) == {"Fig. 2a", "Figs. 2-3"}
    if which == "ofa_tail_runs":     # the readings differ there: the values tell them apart
        assert any(ratio_summary(r)["max"]["round"] != r["config"]["rounds"] for r in grid.values())


def test_a_stored_ofa_fl_run_keeps_its_ratio_accuracies(ofa_smoke_runs, tmp_path):
    """Through the store (compact history) the ladder's values are the chapter's, to the
    store's 6 significant digits; a record without ``acc_ratios`` (as written before it
    was stored) counts as not stored for these claims only."""
    leads = chapter_leads(ofa_smoke_runs)
    for ref in ("Fig. 2a", "Table 2"):
        s = dataclasses.replace(spec("ofa_fl", ref), base_scale="smoke", seeds=SEEDS, rungs=("book",))
        fig = "table2" if ref == "Table 2" else "fig2"
        for label, (name, _) in s.methods.items():
            for seed in SEEDS:
                key = ladder.run_key(ladder.rung_config(s, "book", label, seed))
                ladder.store_run(ofa_smoke_runs[(fig, name, "global", seed)], key, "test", 1.0, None, tmp_path)
        stored = ladder.stored_runs(tmp_path)
        got = ladder.ladder_values(s, "book", stored)
        rival, values = leads[ref]
        assert got is not None, f"{ref}: the stored runs do not serve the claim"
        assert np.allclose(got["values"][LABELS[rival]], values, atol=1e-3), ref
        record = stored[got["keys"][0]]
        assert record["fields"] == [*ladder.HISTORY_FIELDS, "acc_ratios"]
        old = {**record, "fields": list(ladder.HISTORY_FIELDS),
               "history": [row[:len(ladder.HISTORY_FIELDS)] for row in record["history"]]}
        assert ladder.ladder_values(s, "book", {**stored, record["key"]: old}) is None
        assert ladder.has_fields(old, ()) and not ladder.has_fields(old, ("acc_ratios",))


def test_stored_records_of_the_other_chapters_stay_valid():
    """The records stored before ``acc_ratios`` was kept still serve the claims that do not
    read it: their rungs are computed from them."""
    runs = ladder.stored_runs()
    if not runs:
        pytest.skip("no stored ladder runs in this checkout")
    s = spec("lightweight_pfl", "Figs. 2–3")
    assert s.fields == () and s.adapt is None
    got = ladder.ladder_values(s, "book", runs)       # judged case by case: per case, 3 seeds
    assert got is not None and all(v.shape == (3,) for v in got["values"]["FedPer"].values())


def test_the_arena_runs_are_the_arenas():
    from hetfl_core.book import arena

    assert ARENA_METHODS == arena.METHODS
    s = spec("arena", "reference cell")
    assert s.rivals == arena.METHODS
    for scale, rung in (("book", "book"), ("paper", "paper")):
        settings = arena.settings(scale)
        for m in arena.METHODS:
            want = arena._config(settings, settings.reference, m, ARENA_LRS[m], 2)
            assert ladder.rung_config(s, rung, m, 2) == want.replace(device="cpu"), (rung, m)
    x4 = ladder.rung_config(s, "x4", "ofafl", 0)
    assert (x4.rounds, x4.local_steps, x4.eval_global_every) == (56, 10, 56)
    assert (x4.options["warmup"], x4.options["every"]) == (56 // 5, 56 // 10)


def test_the_arena_value_is_its_leaderboard(tmp_path):
    """On a smoke arena, the claim's value per method is the leaderboard's personalised
    accuracy on the same runs, and ordering by its mean is the leaderboard's order."""
    from hetfl_core.book import arena

    methods = ["fedavg", "local", "fedper"]
    runs = arena.run_arena("smoke", methods, processes=1, directory=tmp_path, progress=False)
    rows = arena.leaderboard(runs)
    reference = runs.settings.reference
    s = spec("arena", "reference cell")
    by_label = {m: runs.runs(reference, m) for m in methods}
    board = [r["method"] for r in rows if r["scenario"] == reference.name]
    for row in rows:
        if row["scenario"] == reference.name:
            assert np.allclose(s.value(by_label, row["method"]), 100 * np.asarray(row["values"]["acc"]))
    means = {m: float(np.mean(s.value(by_label, m))) for m in methods}
    assert sorted(methods, key=lambda m: -means[m]) == board


def fake_record(config: RunConfig, acc: float) -> dict:
    """A stored run of ``config`` whose personalised accuracy ends at ``acc``."""
    from hetfl_core.runtime.experiments import source_hash
    from hetfl_core.science.data.fingerprint import dataset_fingerprint

    key = ladder.run_key(config)
    history = [{"round": config.rounds, "time_s": 1.0, "acc_personal": acc, "acc_global": None,
                "uplink_bits": 8, "downlink_bits": 8}]
    return {"key": key, "config": config.to_dict(), "fields": list(ladder.HISTORY_FIELDS),
            "history": ladder.compact_history(history),
            "provenance": {"commit": "c", "source_hash": source_hash(), "device": "CPU",
                           "date": "2026-01-01 00:00 UTC", "command": "test", "wall_s": 1.0,
                           "equivalence_digest": None, "data": dataset_fingerprint(config.dataset)}}


def small_store(tmp_path: Path, boards: dict) -> Path:
    """A store holding the arena's reference cell at the rungs of ``boards`` (rung -> the
    methods best first): each method's accuracy falls by a point a place, the seeds'
    values spread around it."""
    s = spec("arena", "reference cell")
    (tmp_path / "runs").mkdir(parents=True)
    for rung, order in boards.items():
        for place, m in enumerate(order):
            for seed in s.seeds:
                record = fake_record(ladder.rung_config(s, rung, m, seed), 0.8 - 0.01 * place + 0.001 * seed)
                (tmp_path / "runs" / f"{record['key']}.json").write_text(json.dumps(record))
    ladder.write_ledgers("arena", tmp_path)
    return tmp_path


def test_the_arena_leaderboard_is_rendered_per_rung_from_a_small_store(tmp_path):
    from hetfl_core.book.arena import label

    book = list(ARENA_METHODS)
    x2 = book[:]
    x2[0], x2[1] = x2[1], x2[0]                # one pair swapped
    x4 = book[::-1]                            # every pair swapped
    store = small_store(tmp_path, {"book": book, "x2": x2, "x4": x4})
    text = ladder.arena_settling(directory=store)
    lines = [line for line in text.splitlines() if line.startswith("| book") or line.startswith("| x")]
    assert [line.split(" | ")[1].split(" > ") for line in lines] == [book, x2, x4]
    pairs = len(book) * (len(book) - 1) // 2
    assert f"| x2 | {' > '.join(x2)} | {ladder._fmt(1 - 2 / pairs)} |" in text
    assert text.rstrip().endswith(f"| {ladder._fmt(-1 + 2 / pairs)} |")   # x2 to x4: all but one pair
    shown = ladder.arena_settling(directory=store, label=label)
    assert f"| book | {' > '.join(label(m) for m in book)} |" in shown
    sentence = ladder.settling_sentence(directory=store, label=label)
    assert sentence.startswith(f"Leader: {label(book[0])} at book, {label(x2[0])} at x2, "
                               f"{label(x4[0])} at x4.")
    assert "has not settled" in sentence and "Not yet computed: x8, paper." in sentence
    values = ladder.load_ledger("arena", store)["claims"][0]["results"][book[0]]["book"]["values"]
    assert values == pytest.approx([80.0, 80.1, 80.2])
    settled = small_store(tmp_path / "settled", {"book": book, "x2": x2})
    assert f"has settled (τ ≥ {ladder.SETTLED_TAU:g} from book to x2)" in ladder.settling_sentence(directory=settled)


def test_the_plan_table_counts_the_planned_runs(tmp_path):
    store = small_store(tmp_path, {"book": list(ARENA_METHODS)})
    rows = {r[0]: r[1:] for r in ladder.plan_rows("arena", store)}
    plan = ladder.planned_runs("arena")
    assert rows["book"][:2] == [45, 45] and rows["x2"][:2] == [45, 0]
    assert rows["all"][0] == len(plan) == 225
    from hetfl_core.book import training_samples

    assert rows["paper"][2] == pytest.approx(sum(training_samples(p.config) for p in plan
                                                 if p.rung == "paper") / 1e6)
    assert "| book | 45 | 45 |" in ladder.plan_markdown("arena", store)
