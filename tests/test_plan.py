"""Planning a chapter without training it (``python -m hetfl_core plan``)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow     # servers, notebooks, processes or long runs: not in make test-fast

ROOT = Path(__file__).resolve().parents[1]
HEADER = (ROOT / "book" / "foundations.md").read_text().split("\n---\n", 1)[0] + "\n---\n"

CHAPTER = HEADER + '''
# A chapter

```{code-cell} ipython3
:tags: [parameters]

scale: str = "book"
seed: int = 0
```

```{code-cell} ipython3
from hetfl_core import RunConfig
from hetfl_core.book import Chapter
from hetfl_core.book.report import final

book = Chapter("tiny", "Tiny", globals())
rounds = book.by_scale(smoke=1, book=2, paper=3)
base = RunConfig(dataset="digits", clients=4, rounds=rounds, local_steps=2)
runs = book.sweep({(m, s): base.replace(method=m, seed=s)
                   for m in ("fedavg", "fedprox") for s in (seed, seed + 1)})
```

```{code-cell} ipython3
best = max(final(r) for r in runs.values())
assert not any(r.get("planned") for r in runs.values()), "needs trained runs"
```

```{code-cell} ipython3
from hetfl_core.runtime.experiments import sweep

more = sweep([base.replace(clients=8)])
```
'''


def test_a_chapter_is_planned_without_training(tmp_path, monkeypatch, capsys):
    from hetfl_core import cli
    from hetfl_core.book import plan_chapter, training_samples
    from hetfl_core import RunConfig

    monkeypatch.setenv("HETFL_CACHE", str(tmp_path / "cache"))
    chapter = tmp_path / "tiny.md"
    chapter.write_text(CHAPTER)
    records, errors = plan_chapter(chapter, "paper", {"seed": 5})
    assert [r["config"]["method"] for r in records] == ["fedavg", "fedavg", "fedprox", "fedprox", "fedavg"]
    assert [r["config"]["seed"] for r in records][:2] == [5, 6]
    assert {r["config"]["rounds"] for r in records} == {3}              # the paper scale's value
    assert records[-1]["config"]["clients"] == 8                         # past the failing cell
    assert records[0]["where"] == "tiny, code cell 2" and records[-1]["where"] == "runs, code cell 4"
    assert not any(r["cached"] for r in records)
    assert len(errors) == 1 and errors[0].startswith("AssertionError: needs trained runs")
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").rglob("*.json"))
    config = RunConfig.from_dict(records[0]["config"])
    assert training_samples(config) == 4 * 3 * 2 * config.batch_size    # all 4 clients a round
    with pytest.raises(Exception, match="scale must be one of"):
        plan_chapter(chapter, "huge")
    # the command without timing, on this plan: "—" for both estimates, no made-up number
    monkeypatch.setattr(cli, "plan_chapter", lambda *args, **kwargs: (records, errors))
    out = tmp_path / "plan.json"
    assert cli.main(["plan", str(chapter), "--no-timing", "--json", str(out)]) == 0
    last = [line for line in capsys.readouterr().out.splitlines() if line.startswith("all")][0].split()
    assert last[1:3] == ["5", "0"] and last[-2:] == ["—", "—"]
    runs = json.loads(out.read_text())["runs"]
    assert len(runs) == 5 and all(r["seconds"] is None is r["seconds_every_round_scored"] for r in runs)


def test_the_plan_command_lists_the_runs(tmp_path):
    """With timing, the table and the JSON price each run twice: as the chapter schedules
    its scorings, and with every round scored, which costs more."""
    chapter = tmp_path / "tiny.md"
    chapter.write_text(CHAPTER.replace("local_steps=2)", "local_steps=2, eval_every=3, eval_global=False)"))
    out = tmp_path / "plan.json"
    env = {**__import__("os").environ, "HETFL_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "hetfl_core", "plan", str(chapter), "--scale", "paper",
                           "--json", str(out)], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = [line for line in proc.stdout.splitlines() if line.startswith("all")][0].split()
    assert last[1:3] == ["5", "0"]                                        # 5 distinct runs, none cached
    assert "every round scored" in proc.stdout and float(last[-1]) >= float(last[-2])
    planned = json.loads(out.read_text())
    assert planned["scale"] == "paper"
    assert all(0 < r["seconds"] < r["seconds_every_round_scored"] for r in planned["runs"])
    assert "1 cell(s) did not finish in plan mode" in proc.stderr
    bad = subprocess.run([sys.executable, "-m", "hetfl_core", "plan", "no-such-chapter"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no chapter 'no-such-chapter'" in bad.stderr


def test_a_speed_is_measured_not_assumed():
    from hetfl_core import RunConfig
    from hetfl_core.book import measure_speed

    speed = measure_speed(RunConfig(dataset="digits", clients=4, rounds=5, local_steps=3))
    assert speed.personal > 0 and speed.personal_last > 0 and speed.global_model > 0
    assert speed.per_sample >= 0 and speed.per_round >= 0 and speed.per_sample + speed.per_round > 0


def test_a_speed_is_measured_for_a_method_whose_option_needs_more_rounds():
    """A warm-up of 5 rounds cannot run in the two timed rounds' config: the run's own
    length is kept (the lightweight chapter's warm-up run, planned at paper scale)."""
    from hetfl_core import RunConfig
    from hetfl_core.book import measure_speed

    config = RunConfig(method="sparse-prune-pfl", dataset="digits", clients=4, rounds=8,
                       local_steps=1, options={"allocation": "dca", "theta_warmup_rounds": 5})
    speed = measure_speed(config.validate())
    assert speed.per_sample + speed.per_round > 0 and speed.global_model > 0


def test_a_cell_that_computes_outside_a_sweep_is_interrupted_and_passed_over(tmp_path, monkeypatch):
    from hetfl_core.book import plan_chapter

    monkeypatch.setenv("HETFL_CACHE", str(tmp_path / "cache"))
    slow = CHAPTER.replace('assert not any(r.get("planned") for r in runs.values()), "needs trained runs"',
                           "import time\ntime.sleep(300)                # a check that trains by itself")
    chapter = tmp_path / "slow.md"
    chapter.write_text(slow)
    records, errors = plan_chapter(chapter, "smoke", timeout=20)     # importing torch on a loaded machine: s
    assert errors == ["interrupted after 20 s of computing outside a sweep"]
    assert records[-1]["config"]["clients"] == 8                         # the cell after it ran


def test_evaluations_counts_the_scorings_a_run_makes():
    from hetfl_core import RunConfig
    from hetfl_core.book import evaluations

    base = RunConfig(dataset="digits", rounds=14, eval_every=4)
    assert evaluations(base) == (4, 4)                              # rounds 4, 8, 12 and 14
    assert evaluations(base.replace(eval_global_every=14)) == (4, 1)   # the last only
    assert evaluations(base.replace(eval_global_every=8)) == (4, 2)    # 8 and 14
    assert evaluations(base.replace(eval_global=False)) == (4, 0)
    assert evaluations(base.replace(rounds=12)) == (3, 3)


def test_a_run_s_estimate_adds_up_its_samples_rounds_and_scorings():
    from hetfl_core import RunConfig
    from hetfl_core.book import RunSpeed, training_samples

    config = RunConfig(dataset="digits", clients=4, rounds=14, eval_every=4, local_steps=2, batch_size=8)
    speed = RunSpeed(per_sample=1e-3, per_round=0.5, personal=1.0, personal_last=10.0, global_model=100.0)
    assert training_samples(config) == 4 * 14 * 2 * 8
    expected = 0.896 + 14 * 0.5 + 3 * 1 + 10 + 4 * 100
    assert abs(speed.seconds(config) - expected) < 1e-9
    assert abs(speed.seconds(config.replace(eval_global_every=14)) - (expected - 300)) < 1e-9


def test_every_round_scored_prices_the_engine_s_default_schedule():
    from hetfl_core import RunConfig
    from hetfl_core.book import evaluations, scored_every_round

    sparse = RunConfig(dataset="digits", rounds=14, eval_every=4, eval_global=False)
    dense = scored_every_round(sparse.replace(eval_global_every=7))
    assert evaluations(dense) == (14, 14)
    assert dense == RunConfig(dataset="digits", rounds=14)      # every other field kept
    assert evaluations(scored_every_round(sparse)) == evaluations(RunConfig(dataset="digits", rounds=14))


def test_a_cell_reading_a_planned_runs_last_row_runs_on(tmp_path, monkeypatch):
    """A planned run's history has a row per round of ordinary numbers, so ``history[-1]``,
    a client's entry of it and a target derived from the results do not stop the cell
    (they raised IndexError on an empty history, and ValueError on nan)."""
    from hetfl_core.book import plan_chapter, planned_result
    from hetfl_core import RunConfig

    monkeypatch.setenv("HETFL_CACHE", str(tmp_path / "cache"))
    reading = CHAPTER.replace('assert not any(r.get("planned") for r in runs.values()), "needs trained runs"',
                              'end = [r["history"][-1]["time_s"] for r in runs.values()]\n'
                              'first = runs["fedavg", seed]["history"][-1]["clients"][0]["probs"]\n'
                              'target = 5 * int(100 * best / 5)   # a target from the results\n'
                              'assert end == [1.0] * 4 and first != first and target == 70')
    chapter = tmp_path / "reading.md"
    chapter.write_text(reading)
    records, errors = plan_chapter(chapter, "smoke")
    assert errors == [] and records[-1]["config"]["clients"] == 8
    result = planned_result(RunConfig(dataset="digits", clients=10, participation=0.3, rounds=4))
    assert [row["round"] for row in result["history"]] == [1, 2, 3, 4]
    assert len(result["history"][0]["clients"]) == 3 and result["planned"]


def test_a_stand_in_has_the_engines_client_fields_and_the_methods_own_metrics():
    """A stand-in's clients carry the engine's per-client fields (a chapter grouping clients
    by tier or id runs on) and its rows the method's own metrics in their shape (OFA-FL's
    accuracy per ratio)."""
    from hetfl_core import RunConfig
    from hetfl_core.book import planned_result
    from hetfl_core.science.system import HETEROGENEITY

    config = RunConfig(method="ofafl", dataset="digits", clients=10, participation=0.3, rounds=4,
                       heterogeneity="medium", options={"ratios": [1.0, 0.5, 0.25]})
    rows = planned_result(config)["history"]
    tiers = {name for name, *_ in HETEROGENEITY["medium"]}
    for row in rows:
        assert all(0 <= c["id"] < 10 and c["tier"] in tiers for c in row["clients"])
        assert row["acc_ratios"] == [row["acc_personal"]] * 3 and row["ratios"] == [1.0, 0.5, 0.25]
    assert len({c["id"] for row in rows for c in row["clients"]}) == 10     # every client visits
    fedavg = planned_result(config.replace(method="fedavg", options={}))["history"][0]
    assert fedavg["acc_ratios"] != fedavg["acc_ratios"]                  # nan: no such metric


def test_a_cell_tagged_plan_skip_is_not_run_in_plan_mode(tmp_path, monkeypatch):
    from hetfl_core.book import PLAN_SKIP, plan_chapter, plan_skipped

    monkeypatch.setenv("HETFL_CACHE", str(tmp_path / "cache"))
    skipping = CHAPTER.replace('```{code-cell} ipython3\nbest = max(',
                               f'```{{code-cell}} ipython3\n:tags: [{PLAN_SKIP}]\n\nbest = max(')
    assert skipping != CHAPTER
    chapter = tmp_path / "skipping.md"
    chapter.write_text(skipping)
    records, errors = plan_chapter(chapter, "paper")
    assert errors == [] and records[-1]["config"]["clients"] == 8
    assert plan_skipped(chapter) == [3]


@pytest.mark.parametrize("chapter", ["foundations", "baselines", "fedlps", "heroes", "ofa_fl",
                                     "srp_pfed", "lightweight_pfl", "arena"])
def test_every_cell_of_every_chapter_finishes_in_plan_mode_at_paper_scale(chapter, tmp_path, monkeypatch):
    """The paper scale's plan of each chapter runs every cell (a cell reading what a
    stand-in cannot give is tagged plan-skip) and asks for runs."""
    from hetfl_core.book import plan_chapter

    monkeypatch.setenv("HETFL_CACHE", str(tmp_path / "cache"))
    records, errors = plan_chapter(ROOT / "book" / f"{chapter}.md", "paper")
    assert errors == [] and records
