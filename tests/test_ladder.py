"""The ladder (hetfl_core.book.ladder, tools/ladder.py) on a toy claim of a few seconds a run:
resuming after a kill, staleness, the plan's order, atomic writes and bad input."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_cli import _alive, _descendants

from hetfl_core.book import ladder
from hetfl_core.science.data.fingerprint import dataset_fingerprint
from hetfl_core.science.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "tests" / "ladder" / "toy_specs.py"
TOOL = [sys.executable, str(ROOT / "tools" / "ladder.py")]
#: the tool in processes and the toy ladder they compute (a minute): not in make test-fast
SLOW = pytest.mark.slow


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


@SLOW
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


@SLOW
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_killing_the_tool_alone_ends_its_workers(tmp_path):
    """SIGKILL to the tool's process only (not its group, as `kill PID` does): its
    worker processes end too, instead of training on with no one to store their runs."""
    env = {**os.environ, ladder.SPECS_ENV: str(TOY)}
    process = subprocess.Popen([*TOOL, "run", "--chapter", "toy", "--no-progress", "--workers", "2",
                                "--store", str(tmp_path)], env=env, cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    def started(pid):
        """The process's start time (a pid reused meanwhile has another), or None when gone."""
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        except OSError:
            return None

    def spawned_workers():
        found = {}
        for pid in _descendants(process.pid):
            try:
                if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found[pid] = started(pid)
            except OSError:
                continue
        return found

    try:
        deadline = time.monotonic() + 300
        while len(workers := spawned_workers()) < 2 and time.monotonic() < deadline:
            assert process.poll() is None, "the tool ended before starting its workers"
            time.sleep(0.05)
        assert len(workers) >= 2
        os.kill(process.pid, signal.SIGKILL)
        process.wait()

        def alive():
            return [pid for pid, start in workers.items() if _alive(pid) and started(pid) == start]

        # a worker still importing torch when the tool died ends once its start-up reaches
        # the initializer (seconds, or a minute on a loaded machine); without the fix a
        # worker never ends
        deadline = time.monotonic() + 180
        while alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


@SLOW
def test_the_stored_history_is_compact_and_the_ledger_judges_every_rung(reference):
    for path in (reference / "runs").glob("*.json"):
        record = json.loads(path.read_text())
        assert path.stat().st_size < 8000
        assert set(record["provenance"]) >= {"commit", "source_hash", "device", "date", "command",
                                             "wall_s", "equivalence_digest", "data"}
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


@SLOW
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
    assert ladder.is_current({"config": record["config"],
                              "provenance": {**record["provenance"], "equivalence_digest": "d"}}, "d")


@SLOW
def test_a_run_on_other_data_or_of_unknown_data_is_stale(tmp_path, reference):
    """The store keeps the fingerprint of the data a run trained on: a run whose data differ
    from what a run loads now, or that was stored without a fingerprint, is not current."""
    record = json.loads(next(iter(sorted((reference / "runs").glob("*.json")))).read_text())
    digest = record["provenance"]["equivalence_digest"]
    assert record["provenance"]["data"] == dataset_fingerprint(record["config"]["dataset"])
    assert ladder.is_current(record, digest)
    other = {**record, "provenance": {**record["provenance"], "data": "0" * 16}}
    unknown = {**record, "provenance": {k: v for k, v in record["provenance"].items() if k != "data"}}
    assert not ladder.is_current(other, digest) and not ladder.is_current(unknown, digest)


@SLOW
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


@SLOW
def test_bad_input_is_one_line_from_the_tool(tmp_path):
    done = _tool("run", "--chapter", "nope", store=tmp_path, timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    from hetfl_core.book.ladder_specs import SPECS

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


@SLOW
def test_the_ladder_is_drawn_and_told_from_the_store(reference, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj.data))
    import matplotlib.pyplot as plt

    assert ladder.show_ladder("toy", "Toy 1", reference) is None   # a cell ending with it shows it once
    fig = plt.gcf()
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
    from hetfl_core.book import ladder
    from hetfl_core.book.report import bounded, judge, ratio, sooner

    rival, never = bounded([5.0, 6.0, 7.0], 60.0), bounded([float("inf")] * 3, 60.0)
    values = ladder._per_seed_values(ratio(rival, never))
    j = judge(values, sooner())
    assert j.verdict == "fails" and j.bounded == 3
    assert ladder._json_number(float("inf")) == "inf" and ladder._json_number(float("nan")) is None


# -- the chapters' specs, against the chapters' own code ----------------------------------------
def _cells(chapter: str) -> list[str]:
    """The code of each code cell of ``book/<chapter>.md``, its options (``:tags:`` lines,
    a front matter between ``---`` lines) left out."""
    import re

    cells = []
    for body in re.findall(r"```\{code-cell\}[^\n]*\n(.*?)\n```", (ROOT / "book" / f"{chapter}.md").read_text(), re.S):
        lines = body.split("\n")
        if lines[0].strip() == "---":
            lines = lines[lines.index("---", 1) + 1:]
        while lines and lines[0].startswith(":"):
            lines = lines[1:]
        cells.append("\n".join(lines))
    return cells


def chapter_code(chapter: str, names, until: str, **namespace) -> dict:
    """The chapter's own definitions of ``names`` (functions and assignments at the top
    level of a cell), each the last before ``until`` (in the claim's cell, the first that
    contains it), run in the chapter's order in ``namespace`` (with numpy, math and
    :mod:`hetfl_core.book.report`'s functions); returns the namespace."""
    import ast
    import math

    import numpy as np

    from hetfl_core.book import report
    from hetfl_core.runtime.experiments import by

    found, cells = {}, _cells(chapter)
    last = next((i for i, code in enumerate(cells) if until in code), None)
    assert last is not None, f"no cell of {chapter} contains {until!r}"
    for i, code in enumerate(cells[:last + 1]):
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue
        stop = code[:code.index(until)].count("\n") + 1 if i == last else math.inf
        for node in tree.body:
            bound = node.name if isinstance(node, ast.FunctionDef) else \
                node.targets[0].id if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) else None
            if bound in names and node.end_lineno < stop:
                found[bound] = (i, node.lineno, ast.get_source_segment(code, node))
    missing = set(names) - set(found)
    assert not missing, f"{chapter} defines no {sorted(missing)} before its claim"
    ns = {**{k: v for k, v in vars(report).items() if not k.startswith("_")}, "np": np,
          "math": math, "by": by, **namespace}
    for _, _, code in sorted(found.values()):
        exec(code, ns)
    return ns


_SMOKE: dict = {}


def smoke_runs(spec) -> tuple[dict, dict]:
    """The spec's runs at smoke scale (the toy setting of its chapter, every label and seed):
    the whole results (label -> one per seed, as a chapter has them) and the same runs as
    the ladder stores and reads them (:func:`~hetfl_core.book.ladder.compact_history`)."""
    from hetfl_core.runtime.engine import run

    whole, stored = {}, {}
    for label, (name, options, *level) in spec.methods.items():
        for seed in spec.seeds:
            config = spec.setting("smoke").replace(method=name, options=dict(options), seed=seed,
                                                   device="cpu", **(level[0] if level else {}))
            if config.key() not in _SMOKE:
                _SMOKE[config.key()] = run(config)
            result = _SMOKE[config.key()]
            whole.setdefault(label, []).append(result)
            record = {"fields": list(ladder.HISTORY_FIELDS),
                      "history": ladder.compact_history(result["history"])}
            stored.setdefault(label, []).append({"config": result["config"],
                                                 "history": ladder.expand_history(record)})
    return whole, stored


def assert_same_cases(ours: dict, theirs: dict) -> None:
    """Two claims' per-case values agree: the same cases, in order, and per seed the same
    values (a bound's shown value and both its bounds), to the store's 6 digits (a
    difference of two stored accuracies in points: to a thousandth)."""
    import numpy as np

    from hetfl_core.book.report import _span

    assert list(ours) == list(theirs)
    for case in ours:
        for a, b in zip(_span(ours[case]), _span(theirs[case])):
            assert np.allclose(a, b, rtol=1e-5, atol=1e-3, equal_nan=True), (case, a, b)


def _spec(chapter: str, ref: str):
    from hetfl_core.book.ladder_specs import SPECS

    return next(s for s in SPECS[chapter] if s.ref == ref)


def test_the_lightweight_pfl_claim_judges_opt_against_fedper_case_by_case():
    """The Figs. 2-3 claim's runs are the chapter's (FedPer with only its head option, on the
    wireless cell; OPT's allocation by DCA) in every case; its value is the chapter's
    ``gap_by_case``, and the ledger judges it case by case (judge_cases, every case), not
    by each seed's worst case."""
    import numpy as np

    from hetfl_core.book.ladder_specs.lightweight_pfl import LPFL_CASES, lpfl_gap_by_case
    from hetfl_core.book.report import at_least, judge, judge_cases

    spec = _spec("lightweight_pfl", "Figs. 2–3")
    assert spec.per_case and spec.k is None
    fedper = ladder.rung_config(spec, "book", "FedPer, alpha=0.1", 1)
    opt = ladder.rung_config(spec, "x4", "OPT, class-2", 0)
    assert set(fedper.options) == {"head_layers"} and fedper.system == "wireless"
    assert (fedper.partition, fedper.alpha, fedper.seed, fedper.rounds) == ("dirichlet", 0.1, 1, 40)
    assert opt.options["allocation"] == "dca" and opt.classes_per_client == 2 and opt.rounds == 160

    def runs_at(acc):
        return [{"history": [{"round": 1, "acc_personal": a}]} for a in acc]

    runs = {f"{m}, {c}": runs_at([0.80, 0.70, 0.75]) for m in ("OPT", "FedPer") for c in LPFL_CASES}
    runs["OPT, class-2"] = runs_at([0.75, 0.71, 0.70])      # -5, +1 and -5 points against FedPer
    runs["OPT, alpha=0.1"] = runs_at([0.79, 0.64, 0.735])   # -1, -6, -1.5
    gaps = lpfl_gap_by_case(runs, "FedPer")
    assert list(gaps) == list(LPFL_CASES)
    assert np.allclose(gaps["class-2"], [-5, 1, -5]) and np.allclose(gaps["class-4"], 0)
    row = ladder._judged_row(spec, {c: np.asarray(v, float) for c, v in gaps.items()})
    by_cases = judge_cases(gaps, len(LPFL_CASES), at_least(-2, " points"))
    assert row["verdict"] == by_cases.verdict and row["k"] == 4 and row["method"] == "cases, 4 of 4"
    assert {c: info["verdict"] for c, info in row["cases"].items()} == \
        {c: info["verdict"] for c, info in by_cases.cases.items()}
    assert row["values"] == [3, 3, 3]          # per seed, the cases whose gap is at least -2
    worst = judge(np.min(list(gaps.values()), axis=0), at_least(-2, " points")).verdict
    assert (row["verdict"], worst) == ("inconclusive", "fails")   # the two rules differ here


def test_the_stored_book_rung_of_figs_2_3_gives_the_chapters_verdict():
    """The committed ladder's book rung of Figs. 2-3, judged from its stored runs, is what
    the chapter's own claim cell (``gap_by_case``, every case) concludes from them."""
    from hetfl_core.book.ladder_specs.lightweight_pfl import LPFL_CASES
    from hetfl_core.book.report import judge_cases

    spec, store = _spec("lightweight_pfl", "Figs. 2–3"), ROOT / "results" / "ladder"
    runs = ladder.stored_runs(store)
    grid = {}
    for label in spec.methods:
        method, case = label.split(", ", 1)
        for seed in spec.seeds:
            key = ladder.run_key(ladder.rung_config(spec, "book", label, seed))
            if key not in runs:
                pytest.skip("the book rung of Figs. 2-3 is not stored")
            grid[(case, method, seed)] = {"history": ladder.expand_history(runs[key])}
    seeds, cases = list(spec.seeds), list(LPFL_CASES)
    ns = _lpfl_chapter_code({"seeds_of", "shared_seeds", "pick", "pct", "gaps",
                            "gap_by_case"}, 'book.headline("Figs. 2–3')
    theirs = ns["gap_by_case"](grid, cases, "OPT", "FedPer", ns["shared_seeds"](grid, cases, ["OPT", "FedPer"]))
    verdict = judge_cases(theirs, len(cases), spec.criterion).verdict
    ledger = ladder.build_ledger("lightweight_pfl", store)
    claim = next(c for c in ledger["claims"] if c["ref"] == "Figs. 2–3")
    assert claim["results"]["FedPer"]["book"]["verdict"] == verdict
    assert seeds == ns["shared_seeds"](grid, cases, ["OPT", "FedPer"])


def _lpfl_grid(runs: dict) -> dict:
    """The spec's runs keyed as the chapter's grid: (case, method, seed)."""
    return {(label.split(", ", 1)[1], label.split(", ", 1)[0], seed): result
            for label, results in runs.items() for seed, result in zip((0, 1, 2), results)}


def _lpfl_chapter_code(names: set, upto: str) -> dict:
    """:func:`chapter_code` of the lightweight chapter, with the names its settings cell
    imports that the extracted functions read."""
    from hetfl_core.science import data, masks, models, personalization

    return chapter_code("lightweight_pfl", names, upto, hd=data, build_model=models.build_model,
                        structured_units=masks.structured_units,
                        **{n: getattr(personalization, n) for n in
                           ("body_parameter_names", "head_parameter_names", "split_parameter_names")},
                        functools=__import__("functools"), dataclasses=__import__("dataclasses"))


def test_the_table_iv_spec_is_the_chapters_headline_row_at_smoke_scale():
    """Table IV's value is the chapter's ``case_ratios(runs, cases, "OPT", BASELINES, x2.get)``
    with X2 from ``fedper_targets``, on the same smoke runs read back from the store; the
    paper's fastest baseline is the chapter's ``case_ratios`` with that one rival. Its
    runs of OPT and FedPer are those of Figs. 2-3, and its baselines the chapter's
    ``config_for`` of ``METHODS``."""
    from hetfl_core.book.ladder_specs.lightweight_pfl import LPFL_CASES, PAPER_FASTEST, lpfl_setting

    spec = _spec("lightweight_pfl", "Table IV")
    whole, stored = smoke_runs(spec)
    grid, cases = _lpfl_grid(whole), list(LPFL_CASES)
    ns = _lpfl_chapter_code({"seeds_of", "shared_seeds", "pick", "pct", "case_costs",
                            "case_ratios", "fedper_targets", "BASELINES", "CASES",
                            "METHODS", "method_config", "split_model",
                            "baseline_split", "config_for"},
                            'book.headline("Table IV')
    targets = ns["fedper_targets"](grid, cases)
    x2 = {c: targets[c][0.9] for c in cases}
    theirs = ns["case_ratios"](grid, cases, "OPT", ns["BASELINES"], x2.get)
    rival, paper = spec.rivals
    assert_same_cases(spec.value(stored, rival), theirs)
    fixed = {}
    for c in cases:
        fixed.update({f"{c} ({PAPER_FASTEST[c]})": v for v in
                      ns["case_ratios"](grid, [c], "OPT", [PAPER_FASTEST[c]], x2.get).values()})
    assert_same_cases(spec.value(stored, paper), fixed)
    # the runs: the chapter's configurations (its base restated by the spec)
    base = lpfl_setting("book").replace(options={"theta_ratio": 10.0})
    for label in spec.methods:
        method, case = label.split(", ", 1)
        chapter = ns["config_for"](base, ns["METHODS"][method], seed=1, **ns["CASES"][case])
        assert ladder.run_key(ladder.rung_config(spec, "book", label, 1)) == ladder.run_key(chapter), label
    figs = _spec("lightweight_pfl", "Figs. 2–3")
    for label in figs.methods:
        assert ladder.rung_config(spec, "x2", label, 2) == ladder.rung_config(figs, "x2", label, 2)
    assert set(ns["BASELINES"]) == {m.split(", ")[0] for m in spec.methods} - {"OPT"}


def test_the_table_v_spec_is_the_chapters_headline_row_at_smoke_scale():
    """Table V's value is the chapter's ``case_ratios(res_runs, res_cases, "OPT", ["FedPer"],
    res_x2.get)`` on the same smoke runs; its runs the chapter's ``RES_METHODS`` on the
    ResNet base, at the book's two cases."""
    from hetfl_core.book.ladder_specs.lightweight_pfl import RESNET_CASES, lpfl_resnet_setting

    spec = _spec("lightweight_pfl", "Table V")
    whole, stored = smoke_runs(spec)
    grid, cases = _lpfl_grid(whole), list(RESNET_CASES)
    ns = _lpfl_chapter_code({"seeds_of", "shared_seeds", "pick", "pct", "case_costs",
                            "case_ratios", "fedper_targets", "RES_METHODS", "CASES",
                            "method_config", "split_model", "baseline_split",
                            "config_for"},
                      'book.headline("Table V')
    targets = ns["fedper_targets"](grid, cases)
    x2 = {c: targets[c][0.9] for c in cases}
    assert_same_cases(spec.value(stored, "FedPer"), ns["case_ratios"](grid, cases, "OPT", ["FedPer"], x2.get))
    base = lpfl_resnet_setting("book").replace(options={"theta_ratio": 10.0})
    for label in spec.methods:
        method, case = label.split(", ", 1)
        chapter = ns["config_for"](base, ns["RES_METHODS"][method], seed=0, **ns["CASES"][case])
        assert ladder.run_key(ladder.rung_config(spec, "book", label, 0)) == ladder.run_key(chapter), label
    assert ladder.rung_config(spec, "book", "OPT, class-4", 0).rounds == 30


def test_the_srp_top1_spec_is_the_chapters_headline_row_at_smoke_scale():
    """SRP-pFed's Table III top-1 value is the chapter's ``lead`` against its ``rivals`` (the
    paper's runner-up per partition), cases named as the chapter names them, on the same
    smoke runs; its runs are the chapter's ``config(split, method)``, and on dir(0.1)
    SRP-pFed's run is the label-skew claims'."""
    from hetfl_core.book.ladder_specs.srp_pfed import RUNNER_UP, srp_base

    spec = _spec("srp_pfed", "Table III")
    whole, stored = smoke_runs(spec)
    results = {("tab3", label.split(", ", 1)[1], label.split(", ", 1)[0], s): r
               for label, rs in whole.items() for s, r in zip(spec.seeds, rs)}
    ns = chapter_code("srp_pfed", {"rivals", "lead"}, 'book.headline("Table III: SRP-pFed is',
                      results=results, seeds=list(spec.seeds))
    assert ns["rivals"] == RUNNER_UP
    theirs = {f"{sp} ({ns['rivals'][sp]})": v for sp, v in ns["lead"].items()}
    assert_same_cases(spec.value(stored, spec.rivals[0]), theirs)
    from hetfl_core.science.methods.srp_pfed import SRPpFed

    ns = chapter_code("srp_pfed", {"SPLITS", "METHODS", "srp", "config"}, "rivals = {",
                      base=srp_base("book"), candidates=10, k=2, decay=0.9, seed=0,
                      SRPpFed=SRPpFed)
    for label in spec.methods:
        method, split = label.split(", ", 1)
        chapter = ns["config"](split, method, s=2)
        assert ladder.run_key(ladder.rung_config(spec, "book", label, 2)) == ladder.run_key(chapter), label
    skew = _spec("srp_pfed", "Table III, (0.1, 1)")
    assert ladder.rung_config(spec, "x2", "SRP-pFed, dir(0.1)", 1) == ladder.rung_config(skew, "x2", "SRP-pFed", 1)


def test_the_fedlps_fig9a_spec_is_the_chapters_headline_row_at_smoke_scale():
    """FedLPS's Fig. 9a value is the chapter's ``pat``, ``top`` and ``lead`` (the learned
    pattern against the heuristic best on average at each ratio), on the same smoke runs;
    its runs the chapter's pattern runs on ``side``, at the book's ratios."""
    from hetfl_core.book.ladder_specs.fedlps import FIG9A_RATIOS, fedlps_side_setting

    spec = _spec("fedlps", "Fig. 9a")
    whole, stored = smoke_runs(spec)
    runs = {("pattern", *label.split(", s="), s): r
            for label, rs in whole.items() for s, r in zip(spec.seeds, rs)}
    runs = {(a, p, float(r), s): v for (a, p, r, s), v in runs.items()}
    ratios = list(FIG9A_RATIOS)
    ns = chapter_code("fedlps", {"PATTERNS", "HEURISTICS", "pat", "top", "lead"},
                      'book.headline("Fig. 9a', runs=runs, pattern_ratios=ratios,
                      curve_ratios=ratios, pattern_seeds=list(spec.seeds))
    assert_same_cases(spec.value(stored, spec.rivals[0]), ns["lead"])
    side = fedlps_side_setting("book")
    for label, (name, options) in spec.methods.items():
        p, r = label.split(", s=")
        chapter = side.replace(method="fedlps", seed=1, options={"pattern": p, "ratio_rule": "fixed",
                                                                  "ratio": float(r)})
        assert ladder.run_key(ladder.rung_config(spec, "book", label, 1)) == ladder.run_key(chapter), label
    assert side.train_samples == 2000


@SLOW
def test_a_claim_judged_case_by_case_is_drawn_and_told_from_the_store(tmp_path, reference, monkeypatch):
    """A per-case claim (:attr:`ClaimSpec.per_case`) on the toy's runs: the ledger judges it
    with judge_cases, the sentence and table give each case's verdict, the figure draws it."""
    import shutil

    import matplotlib
    import numpy as np

    from hetfl_core.book.ladder_specs import SPECS
    from hetfl_core.book.report import at_least, final, judge_cases, per_seed

    matplotlib.use("Agg")
    toy = ladder.specs_of("toy")[0]

    def by_case(runs, rival):
        gap = 100 * (per_seed(runs["FedAvg"], final) - per_seed(runs[rival], final))
        return {"as is": gap, "ten points lower": gap - 10}

    spec = ladder.ClaimSpec("toy", "Toy cases", "FedAvg beats local training by cases", "none", "",
                            None, "FedAvg", ("Local",), toy.methods, toy.setting, by_case,
                            at_least(0, " points", "FedAvg − Local"), rungs=("book", "x2"), per_case=True)
    monkeypatch.setitem(SPECS, "toy", [*SPECS["toy"], spec])
    store = tmp_path / "store"
    shutil.copytree(reference, store)
    ladder.write_ledgers("toy", store)
    claim = next(c for c in ladder.load_ledger("toy", store)["claims"] if c["ref"] == "Toy cases")
    plain = next(c for c in ladder.load_ledger("toy", store)["claims"] if c["ref"] == "Toy 1")
    assert claim["per_case"] and not plain["per_case"]
    for rung, row in claim["results"]["Local"].items():
        gap = np.array(plain["results"]["Local"][rung]["values"], float)
        expected = judge_cases({"as is": gap, "ten points lower": gap - 10}, 2, spec.criterion)
        assert row["verdict"] == expected.verdict and row["k"] == 2
        assert np.allclose(row["cases"]["ten points lower"]["values"], gap - 10)
        assert row["values"] == [int(g >= 0) + int(g >= 10) for g in gap]
    sentence = ladder.ladder_sentence("toy", "Toy cases", directory=store)
    assert "case by case" in sentence and "ten points lower" in sentence
    assert f"[{claim['results']['Local']['book']['verdict']}, 2 of 2 cases needed]" in sentence
    assert "from book to x2 against the criterion's bound +0.00 (the claim's side: above)" in sentence
    table = ladder.ladder_markdown("toy", "Toy cases", store)
    assert "| case |" in table and "the claim: 2 of 2 cases" in table
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj.data))
    import matplotlib.pyplot as plt

    assert ladder.show_ladder("toy", "Toy cases", store) is None
    fig = plt.gcf()
    assert [line.get_label() for line in fig.axes[0].get_lines()][:2] == \
        ["as is (mean)", "ten points lower (mean)"]
    assert shown[-1] == sentence


def test_a_diverged_run_is_stored_and_its_rung_not_judged(tmp_path, monkeypatch):
    """A run whose loss leaves the reals is a result: stored (so it is not run again), and
    the rung it serves says "diverged", naming the run, instead of a verdict."""
    from hetfl_core.runtime import engine
    from hetfl_core.science.errors import DivergenceError

    real = engine.run

    def local_diverges(config, *args, **kwargs):
        if config.method == "local" and config.seed == 1 and config.rounds == 4:
            raise DivergenceError("local diverged in round 3 (client 0 loss nan): lower lr (now 0.1)")
        return real(config, *args, **kwargs)

    monkeypatch.setattr(engine, "run", local_diverges)
    said = []
    counts = ladder.run_pending("toy", workers=1, directory=tmp_path, progress=False, log=said.append)
    # Local's seed 2 at x2 comes after seed 1, whose divergence leaves its rung without a value
    assert counts == {"done": 11, "skipped": 0, "failed": 0, "moot": 1}
    assert "not needed: 1 run of a rung that cannot be judged now" in said
    assert ladder.pending("toy", directory=tmp_path) == []
    assert [r for r in ladder.status_rows(tmp_path) if r[0] == "toy"] == [["toy", "Toy 1", "book, x2", "—", "—"]]
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
    rows = {label: (runs, where) for label, _, runs, where in ladder.divergence_rows("toy", tmp_path)}
    assert rows == {"FedAvg": (6, []), "Local": (5, ["x2, seed 1, round 3"])}
    assert "| Local | mlp | 5 | 1 | x2, seed 1, round 3 |" in ladder.divergence_table("toy", tmp_path)


def test_fedlps_fig6_is_judged_level_by_level_as_the_chapter_judges_it():
    """Fig. 6's "always" row: per level (x = the classes a client lacks) the seeds' leads
    of FedLPS over the rival, every level needed (the chapter's cases), not each seed's
    worst level."""
    import numpy as np

    from hetfl_core.book.ladder_specs.fedlps import FIG6_CLASSES, fedlps_lead_by_level
    from hetfl_core.book.report import judge_cases

    spec = _spec("fedlps", "Fig. 6")
    assert spec.per_case and spec.k is None

    def runs_at(acc):
        return [{"history": [{"round": 1, "acc_personal": a}, {"round": 2, "acc_personal": a}]}
                for a in acc]

    runs = {f"{n}, c={c}": runs_at([0.70, 0.60, 0.65]) for n in ("FedAvg", "FedPer") for c in FIG6_CLASSES}
    for c, acc in zip(FIG6_CLASSES, ([0.72, 0.63, 0.66], [0.75, 0.65, 0.70], [0.69, 0.62, 0.64])):
        runs[f"FedLPS, c={c}"] = runs_at(acc)
    leads = fedlps_lead_by_level(runs, "FedPer")
    assert list(leads) == [f"x={10 - c}" for c in FIG6_CLASSES]
    assert np.allclose(leads["x=5"], [5, 5, 5]) and np.allclose(leads["x=0"], [-1, 2, -1])
    verdict = judge_cases(leads, len(leads), spec.criterion).verdict
    assert verdict != "holds"          # the IID end's mixed leads keep "every level" from holding


@SLOW
def test_a_verdict_says_when_longer_training_reads_otherwise(reference):
    """The verdict box and the scorecard carry the ladder's highest judged rung where its
    verdict differs from the chapter's, for the chapter's own comparator only."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from scorecard import scorecard_markdown, verdict_box_markdown   # beside build_book.py

    top = ladder.load_ledger("toy", reference)["claims"][0]["results"]["Local"]["x2"]["verdict"]
    other = "fails" if top != "fails" else "holds"
    claim = {"ref": "Toy 1", "statement": "FedAvg beats local training", "headline": True,
             "pairs": [["fedavg", "local"]], "verdict": other, "kind": "paper", "paper": "+5 points",
             "measured": "x", "criterion": "FedAvg − Local ≥ 0", "values": [1.0, 2.0, 3.0]}
    note = ladder.longer_training_note("toy", claim, reference)
    assert note.startswith(f"Longer training (the ladder): {top} at x2 against Local (mean ")
    assert ladder.longer_training_note("toy", {**claim, "verdict": top}, reference) is None
    assert ladder.longer_training_note("toy", {**claim, "headline": False}, reference) is None
    assert ladder.longer_training_note("toy", {**claim, "ref": "Toy 2"}, reference) is None
    second = {**claim, "ref": "Toy 0", "statement": "second in the chapter", "verdict": "holds",
              "headline": False}
    ledger = {"chapter": "toy", "title": "Toy", "scale": "book", "claims": [claim, second]}
    note_of = lambda c: ladder.longer_training_note("toy", c, reference)   # noqa: E731
    assert f"*{note}*" in verdict_box_markdown(ledger, note_of)
    card = scorecard_markdown({"toy": ledger}, ["toy"], lambda name, c: note_of(c))
    assert note in card
    assert card.index("Toy 1: FedAvg beats") < card.index("Toy 0: second")   # the chapter's order
    smoke = {**ledger, "scale": "smoke"}            # a toy's verdicts: no ladder beside them
    assert note not in verdict_box_markdown(smoke, note_of)
    assert note not in scorecard_markdown({"toy": smoke}, ["toy"], lambda name, c: note_of(c))


def test_srp_table7_is_rmcl_against_the_best_other_variant_by_the_best_accuracy():
    """Table VII's headline on the ladder: RM+CL's best accuracy over the rounds minus the
    best other variant's on average (the chapter's ``runner_up`` of ``best7``), per seed;
    the paper's runner-up RD+CL on its own; evaluations that did not run are left out."""
    import numpy as np

    from hetfl_core.book.ladder_specs.srp_pfed import ABLATION, rmcl_lead

    spec = _spec("srp_pfed", "Table VII")
    assert spec.rivals == ("the best other on average", "RD+CL") and set(spec.methods) == set(ABLATION)
    config = ladder.rung_config(spec, "x2", "RD", 1)
    assert (config.alpha, config.eval_every, config.rounds, config.options["sampler"]) == (10.0, 1, 60, "rd")

    def runs_at(*curves):
        return [{"history": [{"round": i + 1, "acc_personal": a} for i, a in enumerate(c)]}
                for c in curves]

    runs = {v: runs_at([0.5, None, 0.6], [0.5, 0.55, 0.5], [0.4, 0.45, 0.44]) for v in ABLATION}
    runs["RD"] = runs_at([0.5, 0.7, 0.6], [0.5, 0.6, 0.5], [0.4, 0.5, 0.44])      # best other: 60.0 mean
    runs["RM+CL"] = runs_at([0.65, 0.6, 0.6], [0.62, 0.61, 0.5], [0.4, 0.52, 0.5])
    assert np.allclose(rmcl_lead(runs, "the best other on average"), [-5, 2, 2])
    assert np.allclose(rmcl_lead(runs, "RD+CL"), [5, 7, 7])


def test_a_stale_diverged_rung_is_labelled_stale_and_ratios_read_plainly(tmp_path, monkeypatch):
    """The figure says which rungs are stale, a diverged one too, and a log axis of ratios
    reads 2, 3, not 2 x 10^0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    row = {"values": [2.0, 3.0, 2.5], "verdict": "holds", "stale": False}
    claim = {"ref": "Toy", "statement": "waits less", "rungs": ["book", "x2", "x4"], "method": "A",
             "paper_value": 2.1, "bound": 1.0, "log": True, "unit": "x", "per_case": False,
             "results": {"B": {"book": row, "x2": {**row, "values": [2.5, 3.5, 3.0]},
                               "x4": {"values": [], "verdict": "diverged", "stale": True,
                                      "diverged": ["A, seed 2: diverged in round 113"]}}}}
    monkeypatch.setattr(ladder, "_stored_claim", lambda chapter, ref, directory=None: claim)
    monkeypatch.setattr(ladder, "ladder_sentence", lambda *a, **k: "sentence")
    monkeypatch.setattr("IPython.display.display", lambda obj: None)
    assert ladder.show_ladder("toy", "Toy") is None
    ax = plt.gcf().axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert "diverged (stale)" in texts and texts.count("holds") == 2
    plt.gcf().canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels(which="both") if t.get_text()]
    assert labels and not any("10^" in t or "times" in t for t in labels)
    plt.close("all")


def test_stored_runs_are_read_again_where_a_file_changed(tmp_path):
    """The store is read once per process until a run file is added, removed or changed."""
    folder = tmp_path / "runs"
    folder.mkdir()

    def write(key, n):
        (folder / f"{key}.json").write_text(json.dumps({"key": key, "history": [[i] for i in range(n)]}))

    write("a-1", 1)
    first = ladder.stored_runs(tmp_path)
    first.pop("a-1")                                   # the caller's own dict
    assert list(ladder.stored_runs(tmp_path)) == ["a-1"]
    write("a-1", 3)                                    # changed in place
    write("b-2", 2)
    runs = ladder.stored_runs(tmp_path)
    assert len(runs["a-1"]["history"]) == 3 and list(runs) == ["a-1", "b-2"]
    (folder / "a-1.json").unlink()
    (folder / "c-3.json").write_text("{not json")    # a file that is not a whole record
    assert list(ladder.stored_runs(tmp_path)) == ["b-2"]
    assert ladder.stored_runs(tmp_path / "nowhere") == {}


def test_a_run_that_diverged_below_goes_first_and_a_judged_rung_needs_no_more(tmp_path):
    """Within a rung, the method and seed that diverged at a lower rung run first; once a
    run a rung needs has diverged (current), that rung's other runs are not pending."""
    from hetfl_core.runtime.experiments import source_hash

    spec = ladder.specs_of("toy")[0]
    (tmp_path / "runs").mkdir()

    def key(label, seed, rung):
        return ladder.run_key(ladder.rung_config(spec, rung, label, seed))

    def store(label, seed, rung, current=True):
        record = {"key": key(label, seed, rung), "config": ladder.rung_config(spec, rung, label, seed).to_dict(),
                  "fields": [], "history": [], "diverged": "local diverged in round 2 (client 0 loss nan)",
                  "provenance": {"source_hash": source_hash() if current else "000000000000",
                                 "data": dataset_fingerprint("digits"), "wall_s": 1.0, "commit": "c",
                                 "device": "cpu", "date": "2026-11-29 12:00 UTC"}}
        (tmp_path / "runs" / f"{record['key']}.json").write_text(json.dumps(record))

    store("Local", 1, "book")
    todo = ladder.pending("toy", directory=tmp_path)
    assert [p.rung for p in todo] == ["x2"] * 6                  # book is judged: "diverged"
    assert todo[0].key == key("Local", 1, "x2")                   # diverged below: first in x2
    assert [r for r in ladder.status_rows(tmp_path) if r[0] == "toy"] == [["toy", "Toy 1", "book", "x2", "—"]]
    assert ladder.build_ledger("toy", tmp_path)["claims"][0]["results"]["Local"]["book"]["verdict"] == "diverged"
    store("Local", 1, "book", current=False)                      # a stale divergence settles nothing
    todo = ladder.pending("toy", directory=tmp_path)
    assert [p.rung for p in todo] == ["book"] * 6 + ["x2"] * 6
    assert todo[6].key == key("Local", 1, "x2") and todo[0].key == key("FedAvg", 0, "book")
    store("Local", 2, "book")                                     # a current one beside the stale one
    row = ladder.build_ledger("toy", tmp_path)["claims"][0]["results"]["Local"]["book"]
    assert row["diverged"] == ["Local, seed 2: local diverged in round 2 (client 0 loss nan)"]
    assert row["stale"] is False and row["keys"] == [key("Local", 2, "book")]
    assert [r for r in ladder.status_rows(tmp_path) if r[0] == "toy"][0][2] == "book"


def test_a_contestant_that_diverged_leaves_the_others_rows_standing(tmp_path, monkeypatch):
    """A claim whose value against a rival reads that rival's runs only (the arena's board,
    ``ClaimSpec.reads``): the diverged contestant's row says "diverged" and its other runs
    are not needed, while the other contestant's runs stay pending and are judged once
    computed; a claim that reads every run (the default) leaves every row unjudged."""
    import dataclasses

    from hetfl_core.book.report import final, more_than, per_seed
    from hetfl_core.runtime.experiments import source_hash

    toy = ladder.specs_of("toy")[0]
    board = dataclasses.replace(
        toy, chapter="board", ref="Board", rivals=("FedAvg", "Local"),
        value=lambda runs, rival: 100 * per_seed(runs[rival], final),
        criterion=more_than(10, " points", "accuracy"), reads=lambda rival: (rival,))
    monkeypatch.setitem(ladder.SPECS, "board", [board])
    with pytest.raises(ValueError, match="reads \\['FedProx'\\]"):
        dataclasses.replace(board, reads=lambda rival: ("FedProx",)).labels_read("Local")
    (tmp_path / "runs").mkdir()
    config = ladder.rung_config(board, "book", "Local", 1)
    record = {"key": ladder.run_key(config), "config": config.to_dict(), "fields": [], "history": [],
              "diverged": "local diverged in round 2 (client 0 loss nan)",
              "provenance": {"source_hash": source_hash(), "data": dataset_fingerprint("digits"),
                             "wall_s": 1.0, "commit": "c", "device": "cpu", "date": "2026-11-29 12:00 UTC"}}
    (tmp_path / "runs" / f"{record['key']}.json").write_text(json.dumps(record))

    todo = ladder.pending("board", rung="book", directory=tmp_path)
    assert [(p.config.method, p.config.seed) for p in todo] == [("fedavg", 0), ("fedavg", 1), ("fedavg", 2)]
    assert [r for r in ladder.status_rows(tmp_path) if r[0] == "board"][0][2:4] == ["—", "book, x2"]
    rows = ladder.build_ledger("board", tmp_path)["claims"][0]["results"]
    assert rows == {"Local": rows["Local"]} and rows["Local"]["book"]["verdict"] == "diverged"
    ladder.write_ledgers("board", tmp_path)
    assert ladder.leaderboards("board", "Board", tmp_path) == {}       # no board before every row

    counts = ladder.run_pending("board", rung="book", directory=tmp_path, progress=False, log=lambda *a: None)
    assert counts["done"] == 3 and counts["moot"] == 0
    rows = ladder.build_ledger("board", tmp_path)["claims"][0]["results"]
    assert rows["Local"]["book"]["verdict"] == "diverged" and rows["Local"]["book"]["keys"] == [record["key"]]
    assert rows["FedAvg"]["book"]["verdict"] in ("holds", "inconclusive", "indicative")
    assert len(rows["FedAvg"]["book"]["values"]) == 3 and len(rows["FedAvg"]["book"]["keys"]) == 3
    assert [r for r in ladder.status_rows(tmp_path) if r[0] == "board"][0][2] == "book"
    assert list(ladder.leaderboards("board", "Board", tmp_path)["book"]) == ["FedAvg"]
    assert "| book | FedAvg |  | Local (seed 1, round 2) |" in ladder.arena_settling("board", "Board", tmp_path)

    every = dataclasses.replace(board, reads=None)       # each row reads every run
    monkeypatch.setitem(ladder.SPECS, "board", [every])
    rows = ladder.build_ledger("board", tmp_path)["claims"][0]["results"]
    assert rows["FedAvg"]["book"]["verdict"] == rows["Local"]["book"]["verdict"] == "diverged"
