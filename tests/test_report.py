"""The report layer: history queries, formatting, the source printer and the claim ledger."""
import ast
import json
import math

import numpy as np
import pytest

from hetfl_core import report
from hetfl_core.methods.fedavg import FedAvg
from hetfl_core.report import Ledger, above_chance, at_least, at_most, is_true


def run_of(accs, step_s=10.0, bits=100.0):
    """A fake run whose round t (1-based) ends at t * step_s with accuracy accs[t-1]."""
    history = [{"round": t, "time_s": t * step_s, "uplink_bits": t * bits, "downlink_bits": t * bits,
                "acc_personal": a} for t, a in enumerate(accs, 1)]
    return {"config": {"method": "x"}, "history": history}


def test_history_queries():
    r = run_of([0.2, None, 0.5, 0.7])
    assert report.final(r) == 0.7
    assert report.value_at(r, 25.0) == 0.2                 # round 2 was not evaluated
    assert math.isnan(report.value_at(r, 5.0))
    assert report.first_reach(r, 0.5) == 30.0
    assert report.first_reach(r, 0.5, x="round") == 3
    assert report.first_reach(r, 0.5, x="traffic_bits") == 600.0
    assert report.first_reach(r, 0.9) == math.inf
    assert list(report.per_seed([r, run_of([0.1])], report.final)) == [0.7, 0.1]


def test_mean_sd_and_formatting():
    assert report.mean_sd([1.0, 3.0]) == (2.0, 1.0)
    assert report.mean_sd([1.0, math.inf])[0] == math.inf
    assert report.fmt(np.float64(0.77312), 1, "%", 100) == "77.3%"
    assert report.fmt(math.inf) == "never" and report.fmt(None) == "—" and report.fmt(math.nan) == "—"
    assert report.fmt(np.int64(12345)) == "12,345"
    assert report.fmt_mean_sd([0.7, 0.8, 0.9], 1, "%", 100) == "80.0 ± 8.2% (3 seeds)"
    assert report.fmt_mean_sd([5.0]) == "5.0 (1 seed)"
    assert report.fmt_mean_sd([5.0, math.inf, 7.0]) == "6.0 ± 1.0; never on 1 of 3 seeds"
    assert report.fmt_mean_sd([math.inf, math.inf]) == "never (2 seeds)"
    assert "np." not in report.fmt_mean_sd(np.array([1.0, 2.0]))
    assert report.compare(0.773, 0.774, 1, "", 100) == "77.3 < 77.4"
    assert report.compare(0.7731, 0.7734, 1, "", 100) == "77.3 = 77.3"    # equal as printed
    assert report.compare(2.0, 1.0) == "2.0 > 1.0"


def test_markdown_table_escapes_pipes_and_checks_rows():
    text = report.markdown_table([["|w|_J", 1.23456], ["a", None]], ["name", "value"], ["l", "r"])
    lines = text.splitlines()
    assert lines[1] == "|:---|---:|"
    assert lines[2] == r"| \|w\|_J | 1.2 |"
    assert lines[3] == "| a | — |"
    with pytest.raises(ValueError):
        report.markdown_table([[1, 2, 3]], ["a", "b"])


def test_source_text_is_valid_python_without_docstrings():
    text = report.source_text(FedAvg.aggregate)
    ast.parse(text)
    assert text.startswith("def aggregate(")
    assert '"""' not in text
    assert "weighted_average" in text
    assert '"""' in report.source_text(FedAvg.aggregate, docstring=True)
    ast.parse(report.source_text(FedAvg))                   # a class, methods' docstrings removed


@pytest.mark.parametrize("passes, verdict", [([True, True, True], "holds"), ([False, False], "fails"),
                                             ([True, False, True], "inconclusive"), ([True], "holds")])
def test_verdict_rule(passes, verdict):
    assert report.verdict_of(passes) == verdict


def test_ledger_verdicts_come_from_every_seed():
    ledger = Ledger("toy", "Toy paper", scale="smoke")
    a = ledger.claim("Table I", "A beats B", "+5 points", [2.0, 3.0, 1.0], at_least(0, " pts", "A − B"))
    b = ledger.claim("Table I", "A beats B by 2", "+5 points", [2.0, 3.0, 1.0], at_least(2, " pts"),
                     why="B was tuned on 3 learning rates")
    c = ledger.claim("Fig. 2", "A is faster", "2x", [math.inf, math.inf], at_most(10.0, " s"))
    d = ledger.claim("Fig. 3", "A first", "first", [True], is_true("A reaches the target first"))
    e = ledger.claim("Fig. 4", "A converges", "yes", [1.0, 2.0], at_least(5), why="short runs")
    assert (a.verdict, b.verdict, c.verdict, d.verdict) == ("holds", "inconclusive", "fails", "holds")
    assert a.measured == "2.0 ± 0.8 (3 seeds)" and c.measured == "never (2 seeds)"
    assert d.verdict_text == "holds (1 seed)" and d.measured == "1 of 1 seeds"
    assert b.why == "B was tuned on 3 learning rates"               # cites a number: kept
    assert e.why == "conjecture: short runs"                         # no number: labelled
    assert c.why == "conjecture: not investigated"
    assert a.why == ""
    assert ledger.counts() == {"holds": 2, "fails": 2, "inconclusive": 1}
    text = ledger.markdown()
    assert "5 claims: 2 holds, 2 fails, 1 inconclusive" in text
    assert "**inconclusive**" in text and "holds (1 seed)" in text


def test_chance_level_needs_a_margin():
    with pytest.raises(ValueError):
        above_chance(10.0, 0.0)
    crit = above_chance(10.0, 5.0, "%")
    assert crit.text == "accuracy ≥ chance 10% + 5%"
    assert not crit(14.9) and crit(15.0)
    ledger = Ledger("toy", "Toy")
    assert ledger.claim("Fig. 1", "the smallest net learns", "yes", [20.7, 12.0], crit).verdict == "inconclusive"


def test_saved_ledgers_make_the_verdict_box_and_the_scorecard(tmp_path):
    one = Ledger("alpha", "Alpha", scale="smoke")
    one.claim("Table I", "A beats B", "+5", [1.0, 2.0], at_least(0), section="alpha-table1", headline=True)
    one.claim("Fig. 2", "A is fast", "2x", [math.inf], at_most(1.0))
    two = Ledger("beta", "Beta", scale="smoke")
    two.claim("Eq. 3", "a | b", "x", [0.0], at_least(1), why="the bound is loose by 3x")
    one.save(tmp_path)
    two.save(tmp_path)
    saved = json.loads((tmp_path / "alpha.json").read_text())
    assert saved["claims"][1]["values"] == ["inf"]
    ledgers = report.load_ledgers(tmp_path)
    box = report.verdict_box_markdown(ledgers["alpha"])
    assert "**1 hold**, **1 fail** and **0 are inconclusive**" in box
    assert "{ref}`Evidence <alpha-table1>`" in box and "A is fast" not in box    # headline claims only
    card = report.scorecard_markdown(ledgers, ["beta", "alpha"])
    counts = card.split("## Every claim")[0]
    assert counts.index("Beta") < counts.index("Alpha")
    assert "| **all papers** |  | 3 | 1 | 2 | 0 |" in card
    assert r"a \| b" in card


def test_ratio_keeps_never_reached_apart_and_more_than_is_strict():
    r = report.ratio([10.0, math.inf, 10.0, math.inf, 0.0], [5.0, 5.0, math.inf, math.inf, 0.0])
    assert r[0] == 2.0 and r[1] == math.inf and r[2] == 0.0 and math.isnan(r[3]) and math.isnan(r[4])
    crit = report.more_than(0, " pts", "drop")
    assert crit.text == "drop > 0 pts" and not crit(0.0) and crit(0.1)


def test_probe_note_says_whether_the_gap_closes_narrows_stays_or_widens():
    from hetfl_core.report import at_least, probe_note

    crit = at_least(0, " points")
    assert probe_note([-5.0], [1.0], crit, [0]).endswith("the gap closes: the criterion passes")
    assert probe_note([-5.0], [-2.0], crit, [0]).endswith("-5.0 → -2.0 points, the gap narrows")
    assert probe_note([-5.0], [-5.5], crit, [0]).endswith("the gap stays")
    assert probe_note([-5.0], [-9.0], crit, [1, 2]).startswith("at 3x the rounds (seeds [1, 2])")
    assert probe_note([-5.0], [-9.0], crit, [0]).endswith("the gap widens")
    assert probe_note([2.0], [3.0], crit, [0]).endswith("the criterion passes at both lengths")
    assert probe_note([5.0], [2.0], at_least(-10), [0], higher_is_better=False).endswith("at both lengths")
