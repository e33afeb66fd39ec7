"""The ladder's Heroes claims (hetfl_core/book/ladder_specs/heroes.py) against the chapter
(book/heroes.md): the same runs, and on them the same values as the chapter's claim cells
compute, from the chapter's own code."""
from __future__ import annotations

import ast
import dataclasses
import json
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hetfl_core.book import ladder
from hetfl_core.runtime.config import by_scale
from hetfl_core.book.report import Bounded

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "book" / "heroes.md"
#: what the chapter's grid calls each of the ladder's labels
VARIANT = {"FedAvg": "fedavg", "pruning": "oneshot", "HeteroFL": "heterofl", "Flanc": "flanc",
           "ENC-fixed": "enc", "Heroes": "heroes"}
#: the chapter's definitions the tests read (functions, settings, constants)
NAMES = {"Y", "GROUPS", "SAME_WIDTHS", "VARIANTS", "LABELS", "BASELINES", "base", "res_base"}


def _spec(ref: str):
    return next(s for s in ladder.specs_of("heroes") if s.ref == ref)


def chapter_code(scale: str) -> dict:
    """The chapter's imports, parameters, settings and functions, executed at ``scale``
    (``book.by_scale`` picks its value; nothing runs): a namespace of the chapter's own code."""
    import jupytext

    cells = [c["source"] for c in jupytext.read(CHAPTER)["cells"] if c["cell_type"] == "code"]
    parameters = next(c for c in cells if c.startswith("scale: str"))
    ns = {"book": SimpleNamespace(by_scale=partial(by_scale, scale)), "say": print}
    exec(parameters, ns)
    for source in cells:
        for node in ast.parse(source).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not any(
                    a.name in ("subprocess", "importlib.util") for a in node.names):
                exec(compile(ast.Module([node], []), str(CHAPTER), "exec"), ns)
    ns["dataset"] = ns["canonical_dataset_name"](ns["dataset"])
    for source in cells:
        for node in ast.parse(source).body:
            named = isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in NAMES for t in node.targets)
            if isinstance(node, ast.FunctionDef) or named:
                exec(compile(ast.Module([node], []), str(CHAPTER), "exec"), ns)
    return ns


def _same_run(config, chapter_config) -> None:
    assert config.to_dict() == chapter_config.replace(device="cpu").to_dict()


@pytest.mark.parametrize("scale", ["smoke", "book", "paper"])
def test_the_specs_run_the_chapters_runs(scale):
    """At the book rung (with the chapter's scale as its base) and at the paper rung, each
    label's run is the chapter's run of that variant and seed: E1's and the ResNet's."""
    ch = chapter_code(scale)
    for ref, setting in (("Fig. 5a", ch["base"]), ("Fig. 4b (ResNet)", ch["res_base"])):
        spec = _spec(ref)
        rung = "paper" if scale == "paper" else "book"
        if scale == "smoke":
            spec = dataclasses.replace(spec, base_scale="smoke")
        for label in spec.methods:
            for seed in spec.seeds:
                _same_run(ladder.rung_config(spec, rung, label, seed),
                          ch["variant"](VARIANT[label], setting, seed=seed))
    table1 = _spec("Table I")
    assert set(table1.methods) == {"HeteroFL", "Flanc", "ENC-fixed"}
    assert {s.setting for s in ladder.specs_of("heroes") if s.ref != "Fig. 4b (ResNet)"} == \
        {_spec("Fig. 5a").setting}


def test_the_rungs_multiply_every_methods_rounds_and_halve_the_full_models():
    spec = _spec("Fig. 4a, 6b")
    for rung, k in (("book", 1), ("x2", 2), ("x4", 4), ("x8", 8)):
        assert ladder.rung_config(spec, rung, "Heroes", 0).rounds == 30 * k
        assert ladder.rung_config(spec, rung, "FedAvg", 0).rounds == 15 * k
        assert ladder.rung_config(spec, rung, "pruning", 0).rounds == 15 * k
        assert ladder.rung_config(spec, rung, "Flanc", 1).local_steps == 10   # the paper's tau_0 too
    paper = ladder.rung_config(spec, "paper", "FedAvg", 2)
    assert (paper.rounds, paper.clients, paper.train_samples, paper.eval_global_every) == \
        (60, 100, None, None)     # the global model scored at every evaluation: the claims read it


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    """Every Heroes claim's runs at smoke scale on the spec's seeds, whole (as the chapter
    reads them) and as the ladder stores them: ``(whole, stored, store)``, by run key."""
    from hetfl_core.runtime.engine import run

    store = tmp_path_factory.mktemp("store")
    whole = {}
    for spec in ladder.specs_of("heroes"):
        smoke = dataclasses.replace(spec, base_scale="smoke", rungs=("book",))
        for label in smoke.methods:
            for seed in smoke.seeds:
                config = ladder.rung_config(smoke, "book", label, seed)
                key = ladder.run_key(config)
                if key not in whole:
                    whole[key] = run(config)
                    ladder.store_run(whole[key], key, "test", 1.0, None, store)
    return whole, ladder.stored_runs(store), store


def _by_label(spec, runs: dict, stored: bool) -> dict:
    """{label: the seeds' results} of a smoke-scale spec, from ``runs`` (by key)."""
    out = {}
    for label in spec.methods:
        keys = [ladder.run_key(ladder.rung_config(spec, "book", label, s)) for s in spec.seeds]
        out[label] = [{"config": runs[k]["config"], "history": ladder.expand_history(runs[k])}
                      if stored else runs[k] for k in keys]
    return out


def _grid(spec, whole: dict) -> dict:
    """The chapter's grid part of a spec's runs: {(variant, seed): result}."""
    return {(VARIANT[label], seed): r for label, runs in _by_label(spec, whole, False).items()
            for seed, r in zip(spec.seeds, runs)}


def _arrays(values):
    """The arrays that make a value: a Bounded's three, else the values."""
    if isinstance(values, Bounded):
        return [values.low, values.high, values.shown]
    return [np.asarray(values, float)]


def _equal(mine, theirs, exact: bool = True) -> None:
    for a, b in zip(_arrays(mine), _arrays(theirs), strict=True):
        if exact:
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-4, equal_nan=True)


def _chapter_values(ch, spec, whole) -> tuple[str, object]:
    """The chapter's claim cell's value on the spec's runs, and the rival its rule picks."""
    results = _grid(spec, whole)
    inverse = {v: k for k, v in VARIANT.items()}
    if spec.ref == "Fig. 5a":
        w = {n: ch["per_seed"](ch["by"](results, n), ch["waiting"]) for n in ch["LABELS"]}
        least = ch["best_on_average"](w, [n for n in w if n != "heroes"], lower=True)
        return inverse[least], ch["waiting_ratio"](results)
    if spec.ref == "Fig. 4a (CNN)":
        acc = ch["at_budget"](results)[1]
        return inverse[ch["top_rival"](acc, ch["BASELINES"])], ch["accuracy_gap"](results)
    if spec.ref == "Fig. 4a, 6b":
        ch["results"], ch["target"] = results, 0.85 * ch["target_of"](results, theta=1)
        return "FedAvg", ch["paired_speedup"]("fedavg").values
    if spec.ref == "Table I":
        gaps, rival = ch["table1_gap"](results)
        return inverse[rival], gaps
    acc2 = ch["at_budget"](results)[1]                    # Fig. 4b (ResNet)
    return (inverse[ch["top_rival"](acc2, ("fedavg", "flanc"))],
            ch["gap_to_best"](acc2, "heroes", ("fedavg", "flanc")))


@pytest.mark.parametrize("ref", ["Fig. 5a", "Fig. 4a (CNN)", "Fig. 4a, 6b", "Table I",
                                 "Fig. 4b (ResNet)"])
def test_each_claims_value_is_the_chapters_on_the_same_runs(smoke_runs, ref):
    """On the smoke-scale runs, the spec's value against the rival the chapter's rule picks
    is the chapter's value, seed by seed; and from the stored runs (compact histories)
    the ladder computes the same values against every rival of the spec."""
    whole, stored, store = smoke_runs
    ch = chapter_code("smoke")
    spec = dataclasses.replace(_spec(ref), base_scale="smoke", rungs=("book",))
    rival, theirs = _chapter_values(ch, spec, whole)
    assert rival in spec.methods and len(_arrays(theirs)[0]) == len(spec.seeds)
    _equal(spec.value(_by_label(spec, whole, False), rival), theirs)
    got = ladder.ladder_values(spec, "book", stored)
    assert got is not None and set(got["values"]) == set(spec.rivals)
    for r in spec.rivals:
        _equal(got["values"][r], spec.value(_by_label(spec, whole, False), r), exact=False)


def test_the_stored_runs_keep_each_rounds_idle_time_and_participants(smoke_runs):
    whole, stored, _ = smoke_runs
    for key, result in whole.items():
        rows = ladder.expand_history(stored[key])
        assert [r["participants"] for r in rows] == [len(r["clients"]) for r in result["history"]]
        assert np.allclose([r["idle_s"] for r in rows], [r["idle_s"] for r in result["history"]])
    assert any(r["idle_s"] > 0 for result in whole.values() for r in result["history"])


def test_a_run_stored_without_a_field_its_claim_reads_is_pending(tmp_path):
    """A run stored before ``idle_s`` was kept still serves the claims that do not read it,
    and is computed again for the one that does (Fig. 5a)."""
    from hetfl_core.runtime.experiments import source_hash
    from hetfl_core.science.data.fingerprint import dataset_fingerprint

    spec = _spec("Fig. 5a")
    config = ladder.rung_config(spec, "book", "Heroes", 0)
    key = ladder.run_key(config)
    old = ("round", "time_s", "acc_personal", "acc_global", "uplink_bits", "downlink_bits")
    record = {"key": key, "config": config.to_dict(), "fields": list(old),
              "history": [[1, 1.0, None, 0.5, 8, 8]],
              "provenance": {"source_hash": source_hash(), "data": dataset_fingerprint(config.dataset)}}
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / f"{key}.json").write_text(json.dumps(record))
    planned = {p.key: p for p in ladder.planned_runs("heroes")}
    assert planned[key].fields == ("idle_s", "participants")
    assert key in {p.key for p in ladder.pending("heroes", directory=tmp_path)}
    assert not ladder.has_fields(record, spec.fields) and ladder.has_fields(record, ())
    record["fields"] = list(ladder.HISTORY_FIELDS)
    (tmp_path / "runs" / f"{key}.json").write_text(json.dumps(record))
    assert key not in {p.key for p in ladder.pending("heroes", directory=tmp_path)}


def test_the_cost_a_chapter_states_is_the_plans(tmp_path):
    """Before a plan is recorded the sentence says how to estimate the cost; after, it sums
    the plan's hours of the claim's runs, rung by rung."""
    spec = _spec("Table I")
    text = ladder.ladder_cost("heroes", "Table I", tmp_path)
    n = len(spec.methods) * len(spec.seeds) * len(spec.rungs)
    assert text.startswith(f"The ladder of Table I is {n} runs: 3 methods × 3 seeds at each")
    assert "not estimated yet (`python tools/ladder.py plan --chapter heroes`" in text

    class Speeds:                       # 6 minutes a run below the paper's rung, 12 there
        @staticmethod
        def seconds(config, device):
            return 720.0 if config.clients == 100 else 360.0

    path = ladder.write_plan("heroes", Speeds, "cpu", tmp_path)
    assert path == ladder.plan_path("heroes", tmp_path) and len(json.loads(path.read_text())["runs"]) == \
        len(ladder.planned_runs("heroes"))
    text = ladder.ladder_cost("heroes", "Table I", tmp_path)
    assert "about 5.4 CPU-hours on one thread (book 0.9, x2 0.9, x4 0.9, x8 0.9, paper 1.8)" in text
    assert "(all of them serve other claims of the chapter too)" in text   # E1's runs
    assert "serve other" not in ladder.ladder_cost("heroes", "Fig. 4b (ResNet)", tmp_path)
    assert "about" not in ladder.ladder_cost("heroes", "Fig. 5a", tmp_path / "elsewhere")
    assert "stored so far" not in text
    # the stored runs' own wall times, once some are stored (a run two rungs share counts once)
    keys = [ladder.run_key(ladder.rung_config(spec, "book", label, seed))
            for label in spec.methods for seed in spec.seeds][:2]
    (tmp_path / "runs").mkdir()
    for key, wall in zip(keys, (1800.0, 5400.0)):
        (tmp_path / "runs" / f"{key}.json").write_text(json.dumps(
            {"key": key, "history": [], "config": {}, "provenance": {"wall_s": wall}}))
    assert text + " The 2 runs of it stored so far took 2.0 hours of wall time, one thread each, on " \
        "the machines that computed them (sharing them with other work)." == \
        ladder.ladder_cost("heroes", "Table I", tmp_path)
    with pytest.raises(Exception, match="has no claim"):
        ladder.ladder_cost("heroes", "Table IX", tmp_path)
