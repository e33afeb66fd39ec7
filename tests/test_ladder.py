"""The ladder (hetfl_core.ladder, tools/ladder.py) on a toy claim of a few seconds a run:
resuming after a kill, staleness, the plan's order, atomic writes and bad input."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hetfl_core import ladder
from hetfl_core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "tests" / "ladder" / "toy_specs.py"
TOOL = [sys.executable, str(ROOT / "tools" / "ladder.py")]


@pytest.fixture(autouse=True)
def toy_specs(monkeypatch):
    monkeypatch.setenv(ladder.SPECS_ENV, str(TOY))
    ladder.chapters()


def _tool(*args, store=None, **kwargs):
    env = {**os.environ, ladder.SPECS_ENV: str(TOY)}
    extra = ["--store", str(store)] if store else []
    return subprocess.run([*TOOL, *args, *extra], env=env, capture_output=True, text=True, cwd=ROOT,
                          **kwargs)


def _runs(store: Path) -> dict:
    """The stored runs by key, without their provenance (date, wall time differ)."""
    return {p.stem: {k: v for k, v in json.loads(p.read_text()).items() if k != "provenance"}
            for p in sorted((store / "runs").glob("*.json"))}


def _judged(store: Path) -> dict:
    """The toy ledger's values, verdicts, intervals and runs per rival and rung."""
    claim = ladder.load_ledger("toy", store)["claims"][0]
    return {rival: {rung: {k: row[k] for k in ("values", "verdict", "interval", "keys", "stale")}
                    for rung, row in by_rung.items()} for rival, by_rung in claim["results"].items()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The toy ladder computed without interruption (one process, as the tool runs it)."""
    store = tmp_path_factory.mktemp("reference")
    done = subprocess.run([*TOOL, "run", "--chapter", "toy", "--no-progress", "--store", str(store)],
                          env={**os.environ, ladder.SPECS_ENV: str(TOY)}, capture_output=True,
                          text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    return store


def test_resume_after_a_kill_computes_only_the_rest(tmp_path, reference):
    total = len(ladder.planned_runs("toy"))
    env = {**os.environ, ladder.SPECS_ENV: str(TOY)}
    process = subprocess.Popen([*TOOL, "run", "--chapter", "toy", "--no-progress", "--store", str(tmp_path)],
                               env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)
    folder, deadline = tmp_path / "runs", time.monotonic() + 600
    while not (folder.is_dir() and any(folder.glob("*.json"))) and time.monotonic() < deadline:
        assert process.poll() is None, "the tool ended before storing a run"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    kept = len(list(folder.glob("*.json")))
    assert 1 <= kept < total, f"the kill came too late to test resuming ({kept} of {total} stored)"
    done = _tool("run", "--chapter", "toy", "--no-progress", store=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    left = total - kept
    assert f"{left} run{'s' if left != 1 else ''} pending" in done.stdout
    assert _runs(tmp_path) == _runs(reference)
    assert _judged(tmp_path) == _judged(reference)
    assert _judged(tmp_path)["Local"].keys() == {"book", "x2"}


def test_the_stored_history_is_compact_and_the_ledger_judges_every_rung(reference):
    for path in (reference / "runs").glob("*.json"):
        record = json.loads(path.read_text())
        assert path.stat().st_size < 8000
        assert set(record["provenance"]) >= {"commit", "source_hash", "device", "date", "command",
                                             "wall_s", "equivalence_digest"}
        assert len(record["history"]) == record["config"]["rounds"]
    claim = ladder.load_ledger("toy", reference)["claims"][0]
    for rung, row in claim["results"]["Local"].items():
        assert len(row["values"]) == 3 and row["verdict"] in ("holds", "fails", "inconclusive")
        assert not row["stale"]


def _with_an_old_run(tmp_path, reference):
    """A copy of the reference store whose first run was computed under another source hash."""
    store = tmp_path / "store"
    shutil.copytree(reference, store)
    victim = next(iter(sorted((store / "runs").glob("*.json"))))
    record = json.loads(victim.read_text())
    record["provenance"]["source_hash"] = "0ld50urce000"
    record["provenance"]["equivalence_digest"] = None
    victim.write_text(json.dumps(record))
    return store, victim, record


def test_a_run_under_an_old_source_hash_is_stale(tmp_path, reference):
    store, victim, record = _with_an_old_run(tmp_path, reference)
    ladder.write_ledgers("toy", store)
    rung = next(r for r, row in ladder.load_ledger("toy", store)["claims"][0]["results"]["Local"].items()
                if victim.stem in row["keys"])
    assert ladder.load_ledger("toy", store)["claims"][0]["results"]["Local"][rung]["stale"]
    assert f"at {rung} (stale)" in ladder.ladder_sentence("toy", "Toy 1", directory=store)
    assert "stale" in ladder.ladder_markdown("toy", "Toy 1", directory=store)
    row = next(r for r in ladder.status_rows(store) if r[0] == "toy")
    assert rung in row[4] and rung not in row[2]
    assert [p.key for p in ladder.pending("toy", directory=store)] == [victim.stem]
    # the same golden histories (the equivalence digest) keep it current
    assert ladder.is_current({"provenance": {**record["provenance"], "equivalence_digest": "d"}}, "d")


def test_a_stale_ledger_file_is_marked_by_the_current_source(tmp_path, reference):
    """The ledger file was written when every run was current; a run's source hash changed since."""
    store, _, _ = _with_an_old_run(tmp_path, reference)
    assert "(stale)" in ladder.ladder_sentence("toy", "Toy 1", directory=store)


def test_nothing_stored_says_how_to_compute_it(tmp_path):
    text = ladder.ladder_sentence("toy", "Toy 1", directory=tmp_path)
    assert "No ladder" in text and "python tools/ladder.py run --chapter toy" in text
    assert "python tools/ladder.py run --chapter toy" in ladder.arena_settling("toy", "Toy 1", tmp_path)


def test_the_plan_runs_the_cheapest_rung_first_and_a_claims_seeds_together():
    plan = ladder.planned_runs("toy")
    rungs = [p.rung for p in plan]
    assert rungs == sorted(rungs, key=ladder.RUNGS.index)
    book = [(p.config.method, p.config.seed) for p in plan if p.rung == "book"]
    assert book == [("fedavg", 0), ("fedavg", 1), ("fedavg", 2), ("local", 0), ("local", 1), ("local", 2)]
    assert [p.config.rounds for p in plan] == [2] * 6 + [4] * 6
    for chapter in ("fedlps", "srp_pfed"):         # the real ladders: rounds grow rung by rung
        plan = ladder.planned_runs(chapter)
        assert [p.rung for p in plan] == sorted((p.rung for p in plan), key=ladder.RUNGS.index)
        by_rung = {p.rung: p.config for p in plan}
        assert [by_rung[r].rounds for r in ("book", "x2", "x4", "x8")] == \
            [by_rung["book"].rounds * k for k in (1, 2, 4, 8)]
        assert by_rung["paper"].clients == 100 and by_rung["paper"].train_samples is None
    plan = ladder.planned_runs("fedlps")
    epochs = {p.rung: p.config.local_epochs for p in plan}
    assert epochs == {"book": 1, "x2": 2, "x4": 4, "x8": 5, "paper": 5}   # toward the paper's 5
    shared = [p for p in plan if p.rung == "book" and "fedlps: Table I" in p.claims]
    assert len(shared) == 9 and all(len(p.claims) == 2 for p in shared)   # Table I and Figs. 4-5
    levels = [p.config.classes_per_client for p in plan if "fedlps: Fig. 6" in p.claims]
    assert sorted(set(levels)) == [2, 5, 10] and len(levels) == 5 * 27    # 3 methods x 3 levels x 3 seeds
    paper = [p for p in plan if p.rung == "paper" and "fedlps: Fig. 6" in p.claims and len(p.claims) > 1]
    assert len(paper) == 6       # at the paper scale, c=2 of FedLPS and FedPer is Table I's run


def test_a_run_is_stored_whole_or_not_at_all(tmp_path, monkeypatch):
    result = {"config": {"rounds": 1}, "history": [{"round": 1, "time_s": 0.123456789,
                                                    "acc_personal": 0.5, "acc_global": None,
                                                    "uplink_bits": 8, "downlink_bits": 8,
                                                    "idle_s": 0.25, "clients": [{}, {}]}]}
    path = ladder.store_run(result, "k1", "cmd", 1.0, None, tmp_path)
    assert json.loads(path.read_text())["history"] == [[1, 0.123457, 0.5, None, 8, 8, 0.25, 2]]

    def broken(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError):
        ladder.store_run(result, "k2", "cmd", 1.0, None, tmp_path)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["k1.json"]


def test_bad_input_is_one_line_from_the_tool(tmp_path):
    done = _tool("run", "--chapter", "nope", store=tmp_path, timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    from hetfl_core.ladder_specs import SPECS

    known = ", ".join(dict.fromkeys([*SPECS, "toy"]))    # the package's chapters, then the toy
    assert done.stderr.strip() == f"ladder: error: no ladder for chapter 'nope'; chapters: {known}"
    assert not (tmp_path / "runs").exists()


def _tool_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("ladder_tool", ROOT / "tools" / "ladder.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("args, message", [
    (("plan", "--chapter", "nope"), "no ladder for chapter 'nope'"),
    (("run", "--rung", "x3"), "unknown rung 'x3'"),
    (("plan", "--chapter", "toy", "--rung", "paper"), "unknown rung 'paper'"),
    (("run", "--chapter", "toy", "--workers", "0"), "--workers must be at least 1"),
    (("run", "--chapter", "toy", "--until-s", "-5"), "--until-s must be a positive number"),
    (("run", "--chapter", "toy", "--device", "tpu"), "--device must be auto, cpu or cuda"),
])
def test_bad_input_is_one_line_before_any_compute(tmp_path, capsys, args, message):
    assert _tool_module().main([*args, "--store", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and message in err
    assert not (tmp_path / "runs").exists()


def test_bad_input_in_the_library():
    with pytest.raises(ConfigError, match="no ladder for chapter"):
        ladder.specs_of("nope")
    with pytest.raises(ConfigError, match="unknown rung"):
        ladder.run_pending("toy", "x16")
    spec = ladder.specs_of("toy")[0]
    with pytest.raises(ConfigError, match="has no rung 'paper'"):
        ladder.rung_config(spec, "paper", "FedAvg", 0)


def test_kendall_tau():
    assert ladder.kendall_tau(["a", "b", "c"], ["a", "b", "c"]) == 1
    assert ladder.kendall_tau(["a", "b", "c"], ["c", "b", "a"]) == -1
    assert ladder.kendall_tau(["a", "b", "c"], ["b", "a", "c"]) == pytest.approx(1 / 3)


def test_a_claim_not_on_the_ladder_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="has no claim 'Toy 9'; claims: Toy 1"):
        ladder.ladder_sentence("toy", "Toy 9", directory=tmp_path)


def test_the_ladder_is_drawn_and_told_from_the_store(reference, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj.data))
    fig = ladder.show_ladder("toy", "Toy 1", reference)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["book", "x2"]
    values = {rung: row["values"] for rung, row in
              ladder.load_ledger("toy", reference)["claims"][0]["results"]["Local"].items()}
    sentence = shown[-1]
    assert sentence.startswith("Toy 1 on the ladder: FedAvg − Local (mean over 3 seeds): ")
    first, last = (sum(values[r]) / 3 for r in ("book", "x2"))
    assert f"{ladder._fmt(first)} at book" in sentence and f"{ladder._fmt(last)} at x2" in sentence
    verb = "holds" if abs(abs(5 - last) - abs(5 - first)) < 1 else \
        "closes" if abs(5 - last) < abs(5 - first) else "widens"
    assert f"the gap to the paper's +5.00 {verb}" in sentence
    board = ladder.arena_settling("toy", "Toy 1", reference)
    assert "| book | Local |" in board and "| x2 | Local | — |" in board   # one contestant: no pair to order


def test_a_never_reached_target_reaches_the_ladder_as_a_bound():
    """A claim's value that is a Bounded (a cost to a target never reached, bounded by the
    run's horizon) is judged as the chapters judge it, not flattened to inf."""
    from hetfl_core import ladder
    from hetfl_core.report import bounded, judge, ratio, sooner

    rival, never = bounded([5.0, 6.0, 7.0], 60.0), bounded([float("inf")] * 3, 60.0)
    values = ladder._per_seed_values(ratio(rival, never))
    j = judge(values, sooner())
    assert j.verdict == "fails" and j.bounded == 3
    assert ladder._json_number(float("inf")) == "inf" and ladder._json_number(float("nan")) is None


def test_the_lightweight_pfl_claim_judges_opt_against_fedper_in_its_worst_case():
    """The Figs. 2-3 claim's runs are the chapter's (FedPer with only its head option, on the
    wireless cell; OPT's allocation by DCA) in every case, and its value is the worst case's
    gap, per seed."""
    import numpy as np

    from hetfl_core.ladder_specs import SPECS
    from hetfl_core.ladder_specs.lightweight_pfl import LPFL_CASES, lpfl_worst_case_gap

    spec = next(s for s in SPECS["lightweight_pfl"] if s.ref == "Figs. 2–3")
    fedper = ladder.rung_config(spec, "book", "FedPer, alpha=0.1", 1)
    opt = ladder.rung_config(spec, "x4", "OPT, class-2", 0)
    assert set(fedper.options) == {"head_layers"} and fedper.system == "wireless"
    assert (fedper.partition, fedper.alpha, fedper.seed, fedper.rounds) == ("dirichlet", 0.1, 1, 40)
    assert opt.options["allocation"] == "dca" and opt.classes_per_client == 2 and opt.rounds == 160

    def runs_at(acc):
        return [{"history": [{"round": 1, "acc_personal": a}]} for a in acc]

    runs = {f"{m}, {c}": runs_at([0.8, 0.7]) for m in ("OPT", "FedPer") for c in LPFL_CASES}
    runs["OPT, class-2"] = runs_at([0.75, 0.71])        # -5 and +1 points against FedPer
    assert np.allclose(lpfl_worst_case_gap(runs, "FedPer"), [-5, 0])


def test_a_diverged_run_is_stored_and_its_rung_not_judged(tmp_path, monkeypatch):
    """A run whose loss leaves the reals is a result: stored (so it is not run again), and
    the rung it serves says "diverged", naming the run, instead of a verdict."""
    from hetfl_core import engine
    from hetfl_core.errors import DivergenceError

    real = engine.run

    def local_diverges(config, *args, **kwargs):
        if config.method == "local" and config.seed == 1 and config.rounds == 4:
            raise DivergenceError("local diverged in round 3 (client 0 loss nan): lower lr (now 0.1)")
        return real(config, *args, **kwargs)

    monkeypatch.setattr(engine, "run", local_diverges)
    counts = ladder.run_pending("toy", workers=1, directory=tmp_path, progress=False, log=lambda *_: None)
    assert counts == {"done": 12, "skipped": 0, "failed": 0}
    assert ladder.pending("toy", directory=tmp_path) == []
    diverged = [r for r in ladder.stored_runs(tmp_path).values() if r.get("diverged")]
    assert len(diverged) == 1 and diverged[0]["history"] == []
    rows = ladder.load_ledger("toy", tmp_path)["claims"][0]["results"]["Local"]
    assert rows["x2"]["verdict"] == "diverged" and rows["x2"]["values"] == []
    assert rows["x2"]["diverged"] == ["Local, seed 1: local diverged in round 3 (client 0 loss nan)"]
    assert rows["book"]["verdict"] != "diverged"
    assert "diverged at x2 (Local, seed 1: local diverged in round 3" in \
        ladder.ladder_sentence("toy", "Toy 1", directory=tmp_path)
    assert "| Local | x2 |" in ladder.ladder_markdown("toy", "Toy 1", directory=tmp_path)
    assert "| x2 |" not in ladder.arena_settling("toy", "Toy 1", tmp_path)
