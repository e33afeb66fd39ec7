"""The report layer: history queries, formatting, the source printer and the claim ledger."""
import ast
import json
import math
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from hetfl_core.book import report
from hetfl_core.science.methods.fedavg import FedAvg
from hetfl_core.book.report import Ledger, above_chance, at_least, at_most, is_true

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import scorecard  # noqa: E402  (the site's verdict boxes and scorecard, beside build_book.py)


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
    assert report.mean_sd([1.0, 3.0]) == (2.0, pytest.approx(2 ** 0.5))       # sample sd, ddof=1
    assert math.isnan(report.mean_sd([1.0])[1])
    assert report.mean_sd([1.0, math.inf])[0] == math.inf
    assert report.fmt(np.float64(0.77312), 1, "%", 100) == "77.3%"
    assert report.fmt(math.inf) == "never" and report.fmt(None) == "—" and report.fmt(math.nan) == "—"
    assert report.fmt(np.int64(12345)) == "12,345"
    assert report.fmt_mean_sd([0.7, 0.8, 0.9], 1, "%", 100) == "80.0 ± 10.0% (3 seeds)"
    assert report.fmt_mean_sd([5.0]) == "5.0 (1 seed)"
    assert report.fmt_mean_sd([5.0, math.inf, 7.0]) == "6.0 ± 1.4; never on 1 of 3 seeds"
    assert report.fmt_mean_sd([math.inf, math.inf]) == "never (2 seeds)"
    # no finite value besides the never-reached seeds: a dash, not an IndexError or "nan ± nan"
    assert report.fmt_mean_sd([-math.inf]) == "— (1 seed)"
    assert report.fmt_mean_sd([math.nan, math.inf]) == "—; never on 1 of 2 seeds"
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


@pytest.mark.parametrize("passes, verdict", [
    ([True] * 4, "holds"), ([False] * 4, "fails"), ([True, False, True], "indicative"),
    ([True] * 3, "indicative"), ([True], "indicative"), ([False, False], "indicative"),
    ([True] * 5 + [False], "inconclusive"), ([True] * 8 + [False], "holds")])
def test_verdict_of_per_seed_outcomes_is_a_sign_test(passes, verdict):
    # P(k or more of n pass | a fair coin) must be at most 10% to hold: 4 of 4 (6.25%)
    # holds, 8 of 9 (2.0%) does, 5 of 6 (10.9%) does not; on 3 seeds (3 of 3: 12.5%) the
    # test can decide nothing, so it is indicative
    assert report.verdict_of(passes) == verdict


def _simulated_verdicts(effect_sd: float, n: int, trials: int, seed: int) -> dict[str, float]:
    """How often each verdict comes out for per-seed values drawn N(margin + effect, 1)."""
    rng = np.random.default_rng(seed)
    crit = at_least(0.0)
    out = {"holds": 0, "fails": 0, "inconclusive": 0}
    for values in rng.normal(effect_sd, 1.0, size=(trials, n)):
        out[report.judge(values, crit).verdict] += 1
    return {k: v / trials for k, v in out.items()}


@pytest.mark.parametrize("n", [3, 5])
def test_rule_says_holds_at_most_ten_percent_of_the_time_on_the_margin(n):
    rates = _simulated_verdicts(0.0, n, 4000, seed=n)
    # exactly 10% in expectation; 4000 trials give a standard error of 0.5 points
    assert rates["holds"] <= 0.115 and rates["fails"] <= 0.115
    assert rates["holds"] >= 0.085                                   # not a rule that never holds


@pytest.mark.slow
def test_rule_gains_power_with_seeds_where_unanimity_loses_it():
    power = {n: _simulated_verdicts(1.0, n, 4000, seed=10 + n)["holds"] for n in (3, 5, 10)}
    assert power[3] < power[5] < power[10]
    assert power[10] > 0.9
    rng = np.random.default_rng(0)
    unanimity = {n: float(np.mean((rng.normal(1.0, 1.0, (4000, n)) >= 0).all(1))) for n in (3, 10)}
    assert unanimity[10] < unanimity[3]                               # the old rule, for contrast


def test_a_one_sided_bound_uses_the_sample_sd_and_the_t_quantile():
    from scipy.stats import t

    j = report.judge([1.0, 2.0, 6.0], at_least(0.0))
    half = t.ppf(0.9, 2) * np.std([1.0, 2.0, 6.0], ddof=1) / np.sqrt(3)
    assert j.interval == pytest.approx((3.0 - half, 3.0 + half))
    assert j.method == "t-interval" and j.verdict == "holds"      # 3 - 2.48 > 0


def test_ratios_are_judged_on_the_log_scale():
    crit = at_least(2.0, "×", "speed-up", log=True)
    j = report.judge([1.9, 2.5, 3.0, 2.2], crit)
    logs = np.log([1.9, 2.5, 3.0, 2.2])
    assert j.interval[0] == pytest.approx(np.exp(logs.mean() - report._t_quantile(4)
                                                 * logs.std(ddof=1) / 2))
    assert report.judge([3.0, 3.1, 2.9], crit).verdict == "holds"
    assert report.judge([1.0, 1.1, 0.9], crit).verdict == "fails"
    with pytest.raises(ValueError):
        at_least(0.0, log=True)


def test_censored_seeds_are_left_out_and_all_censored_is_untestable():
    crit = at_most(1.0)
    assert report.judge([math.nan] * 3, crit).verdict == "untestable"
    j = report.judge([0.5, math.nan, 0.4, 0.45], crit)
    assert (j.n, j.censored, j.method) == (3, 1, "t-interval") and j.verdict == "holds"
    # a target only one side reached is an infinite ratio: judged per seed (sign test)
    j = report.judge([0.0, 0.1, 0.2, 0.1], at_most(1.0))
    assert j.verdict == "holds"
    assert report.judge([math.inf] * 4, at_most(1.0)).verdict == "fails"
    assert report.judge([math.inf, 0.5, 0.5], at_most(1.0)).method == "sign test, needs 4 seeds"


def test_a_pass_close_to_the_margin_is_narrow():
    values = [0.5, 1.5, 1.0]                     # mean 1, half-width t(0.9, 2) * 0.5 / sqrt(3)
    half = report._t_quantile(3) * 0.5 / np.sqrt(3)
    just = report.judge(values, at_least(1.0 - half - 0.01 * half))
    clear = report.judge(values, at_least(0.0))
    assert just.verdict == "holds" and just.narrow
    assert clear.verdict == "holds" and not clear.narrow


def test_ledger_verdicts_come_from_the_interval_of_every_seed():
    ledger = Ledger("toy", "Toy paper", scale="smoke")
    a = ledger.claim("Table I", "A beats B", "+5 points", [2.0, 3.0, 1.5], at_least(0, " pts", "A − B"),
                     unit=" pts")
    b = ledger.claim("Table I", "A beats B by 2", "+5 points", [2.0, 3.0, 1.0], at_least(2, " pts"),
                     why=report.Why("learning rates tried for B", 3, "B was tuned more"))
    c = ledger.claim("Fig. 2", "A is faster", "2x", [math.inf] * 4, at_most(10.0, " s"))
    d = ledger.claim("Fig. 3", "A first", "first", [True], is_true("A reaches the target first"))
    e = ledger.claim("Fig. 4", "A converges", "yes", [1.0, 2.0, 1.5], at_least(5), why="short runs")
    f = ledger.claim("Fig. 5", "A's masks nest", "nested", [True] * 4, is_true("nested"), kind="invariant")
    assert (a.verdict, b.verdict, c.verdict, d.verdict, e.verdict) == \
        ("holds", "inconclusive", "fails", "indicative", "fails")
    assert a.measured == "2.2 ± 0.8 pts (3 seeds)" and a.interval_text.startswith("[1.")
    assert c.measured == "never (4 seeds)"
    assert d.verdict_text == "indicative (1 seed)" and d.measured == "1 of 1 seed"
    assert b.why == "B was tuned more (learning rates tried for B = 3.00)"   # a named diagnostic
    assert b.diagnostics == {"learning rates tried for B": "3.00"}
    assert e.why == "conjecture: short runs"                         # no number: labelled
    assert c.why == "conjecture: not investigated"
    assert a.why == ""
    assert not f.counted and a.counted and not d.counted
    assert ledger.counts() == {"holds": 1, "fails": 2, "inconclusive": 1, "indicative": 1,
                               "untestable": 0}
    text = ledger.markdown()
    assert "4 counted paper claims: 1 holds, 2 fail, 1 is inconclusive; 1 indicative" in text
    assert "1 not the paper's" in text and "(invariant)" in text
    assert "**inconclusive**" in text and "indicative (1 seed)" in text


class _Cells(HTMLParser):
    """The table structure of rendered HTML: per ``<tbody>``, its rows, each a list of
    ``(tag, colspan, text)`` cells; and the text inside each ``<details>``."""

    def __init__(self):
        super().__init__()
        self.bodies, self.header, self.details, self.classes = [], [], [], []
        self.cell, self.in_details, self.in_body = None, 0, False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.classes.append(attrs.get("class", ""))
        elif tag == "tbody":
            self.bodies.append([])
            self.in_body = True
        elif tag == "tr" and self.in_body:
            self.bodies[-1].append([])
        elif tag in ("td", "th"):
            self.cell = [tag, int(attrs.get("colspan", 1)), ""]
        elif tag == "details":
            self.in_details += 1
            self.details.append("")

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell:
            (self.bodies[-1][-1] if tag == "td" else self.header).append(tuple(self.cell))
            self.cell = None
        elif tag == "details":
            self.in_details -= 1
        elif tag == "tbody":
            self.in_body = False

    def handle_data(self, data):
        if self.cell:
            self.cell[2] += data
        if self.in_details:
            self.details[-1] += data


def rendered(markdown: str) -> _Cells:
    """``markdown`` rendered as MyST renders a cell's Markdown output (CommonMark, raw HTML
    kept), then parsed."""
    from markdown_it import MarkdownIt

    cells = _Cells()
    cells.feed(MarkdownIt("commonmark").render(markdown))
    return cells


def test_a_ledger_is_a_row_per_claim_with_its_criterion_and_why_folded_beneath():
    ledger = Ledger("toy", "Toy paper", scale="smoke")
    ledger.claim("Table I", "A beats B", "+5 points", [2.0, 3.0, 1.5],
                 at_least(0, " pts", "A − B"), unit=" pts")
    ledger.claim("Fig. 2", "- a list marker", "1. first", [-1.0, -2.0, -1.5], at_least(0, " pts"),
                 unit=" pts", why="B was tuned on 3 learning rates")
    ledger.claim("Fig. 3", "A never misses", "always", [1.0, 2.0, 3.0, math.inf], at_least(0),
                 measured="2.0 ± 1.0 (3 seeds); never on 1 of 4 seeds")
    assert [len(r) for r in ledger.rows()] == [len(Ledger.HEADER)] * 3 == [4] * 3
    assert [len(d) for d in ledger.details()] == [len(Ledger.DETAIL)] * 3 == [4] * 3
    html = rendered(ledger.markdown())
    assert html.classes == ["table hetfl-folded " + report.LEDGER_CLASS]
    assert [c[2] for c in html.header] == list(Ledger.HEADER)
    assert len(html.bodies) == 3                                  # a <tbody> per claim
    for body, claim in zip(html.bodies, ledger.claims):
        row, detail = body                                         # the row, the folded line
        assert [c[0] for c in row] == ["td"] * 4 and all(c[1] == 1 for c in row)
        assert [c[2].strip() for c in row] == [f"{claim.ref}: {claim.statement}", claim.paper,
                                               claim.measured.split("; ")[0], claim.verdict_text]
        assert len(detail) == 1 and detail[0][1] == 4                # one cell, the full width
    first, second, third = html.details
    assert "A − B ≥ 0 pts" in first and ledger.claims[0].interval_text in first
    assert "B was tuned on 3 learning rates" in second and "≥ 0 pts" in second
    assert "This book in full:" not in first and "never on 1 of 4 seeds" in third
    with pytest.raises(ValueError):
        report.folded_table([["a", "b"]], ["x", "y"], [], ["why"], "why")


def test_a_why_that_restates_the_claims_own_values_is_a_conjecture():
    ledger = Ledger("toy", "Toy")
    restated = ledger.claim("Table II", "A beats B", "+5 points", [-1.0, -2.0, -1.5], at_least(0),
                            why="A is 1.5 points behind B")
    cited = ledger.claim("Table II", "A beats B", "+5 points", [-1.0, -2.0, -1.5], at_least(0),
                         why="B's local loss is 0.31 lower after 20 rounds (Fig. 3)")
    figure_only = ledger.claim("Table II", "A beats B", "+5 points", [-1.0, -2.0, -1.5], at_least(0),
                               why="see Fig. 4 and Table III")
    named = ledger.claim("Table II", "A beats B", "+5 points", [-1.0, -2.0, -1.5], at_least(0),
                         why=report.Why("B's local loss lead after 20 rounds", 0.31, "B fits faster"))
    mapping = ledger.claim("Table II", "A beats B", "+5 points", [-1.0, -2.0, -1.5], at_least(0),
                           why={"mask overlap": [0.39, 0.41, 0.38]})
    assert restated.why.startswith("conjecture: ")
    # a new number is not yet a named diagnostic: a plain text is a conjecture
    assert cited.why.startswith("conjecture: B's local loss")
    assert figure_only.why.startswith("conjecture: ")
    assert named.why == "B fits faster (B's local loss lead after 20 rounds = 0.31)"
    assert mapping.why == "mask overlap = 0.39, 0.41, 0.38 per seed"
    assert mapping.diagnostics == {"mask overlap": "0.39, 0.41, 0.38 per seed"}
    assert report.cites_a_diagnostic("at 3x the rounds: -5.0 → -2.0", "-5.0 points")
    with pytest.raises(ValueError):
        report.Why(" ", 1.0)


def test_chance_level_needs_a_margin():
    with pytest.raises(ValueError):
        above_chance(10.0, 0.0)
    crit = above_chance(10.0, 5.0, "%")
    assert crit.text == "accuracy ≥ chance 10% + 5%"
    assert not crit(14.9) and crit(15.0)
    assert crit.bound == 15.0 and crit.op == ">="
    ledger = Ledger("toy", "Toy")
    assert ledger.claim("Fig. 1", "the smallest net learns", "yes", [20.7, 12.0, 14.0],
                        crit).verdict == "inconclusive"


def test_saved_ledgers_make_the_verdict_box_and_the_scorecard(tmp_path):
    one = Ledger("alpha", "Alpha", scale="smoke")
    one.claim("Table I", "A beats B", "+5", [1.0, 2.0, 1.5], at_least(0), section="alpha-table1",
              headline=True)
    one.claim("Fig. 2", "A is fast", "2x", [math.inf] * 4, at_most(1.0))
    one.claim("Fig. 3", "A is small", "1 MB", [0.5], at_most(1.0))
    two = Ledger("beta", "Beta", scale="smoke")
    two.claim("Eq. 3", "a | b", "x", [0.0, 0.1, -0.1], at_least(1), why="the bound is loose by 3x")
    two.claim("Fig. 9", "our guess", "—", [1.0, 2.0, 3.0], at_least(0), kind="prediction")
    one.save(tmp_path)
    two.save(tmp_path)
    saved = json.loads((tmp_path / "alpha.json").read_text())
    assert saved["claims"][1]["values"] == ["inf"] * 4
    ledgers = report.load_ledgers(tmp_path)
    box = scorecard.verdict_box_markdown(ledgers["alpha"])
    assert "2 counted paper claims: 1 holds, 1 fails, 0 are inconclusive; 1 indicative" in box
    assert "{ref}`Evidence <alpha-table1>`" in box and "A is fast" not in box    # headline claims only
    assert "A is small" not in box                                                # never uncounted ones
    card = scorecard.scorecard_markdown(ledgers, ["beta", "alpha"])
    counts = card.split("## Every claim")[0]
    assert counts.index("Beta") < counts.index("Alpha")
    # by chance, on the margin: 10% + 10% per t-interval claim, 1/16 + 1/16 for 4 yes/no seeds
    chance = 2 * 0.2 + 2 / 16
    assert f"| **all papers** |  | 1 | 2 | 0 | 1 | 0 | 1 | {chance:.1f} |" in card
    assert f"about {0.2 + 2 / 16:.1f} decisive verdicts (holds or fails) among these 2" in box
    assert report.chance_of({"values": [1] * 3, "method": "cases, 2 of 2"}) == \
        pytest.approx(report._cases_chance(2, 2, 3))
    assert "Eq. 3: a | b" in card and "{ref}`evidence <alpha-table1>`" in card
    assert "our guess (prediction)" in card
    every = rendered(card.split("## Every claim")[1])
    assert every.classes == ["table hetfl-folded " + report.LEDGER_CLASS] * 2   # one a paper
    assert [len(b) for b in every.bodies] == [2] * 5                   # a claim: row and fold
    assert all(len(row) == len(Ledger.HEADER) for row, _ in every.bodies)
    first = next(d for d in every.details if "A beats B" not in d and "1, 2, 1.5" in d)
    assert f"(80% power): {saved['claims'][0]['detectable']}" in first
    assert saved["claims"][0]["detectable"] == report.fmt(report.detectable_effect(0.5, 3))
    fast = next(d for d in every.details if "never" in d)               # A is fast: never, 4x
    assert "never, never, never, never" in fast and "inf" not in fast


def test_ratio_keeps_never_reached_apart_and_more_than_is_strict():
    r = report.ratio([10.0, math.inf, 10.0, math.inf, 0.0], [5.0, 5.0, math.inf, math.inf, 0.0])
    assert r[0] == 2.0 and r[1] == math.inf and r[2] == 0.0 and math.isnan(r[3]) and math.isnan(r[4])
    crit = report.more_than(0, " pts", "drop")
    assert crit.text == "drop > 0 pts" and not crit(0.0) and crit(0.1)


def test_the_comparator_is_the_rival_best_on_average_not_each_seeds_best():
    # the rivals' per-seed best alternates: b wins seeds 1 and 3, c seed 2, b on average
    acc = {"b": np.array([80.0, 70.0, 82.0]), "c": np.array([75.0, 78.0, 74.0]),
           "gone": np.array([np.nan, np.nan, np.nan])}
    assert report.best_on_average(acc, ["c", "b", "gone"]) == "b"
    assert report.best_on_average(acc, ["c", "b"], lower=True) == "c"
    assert report.best_on_average({"a": np.array([1.0, math.inf]), "b": np.array([5.0, 5.0])},
                                  ["a", "b"], lower=True) == "b"        # a never reached once
    assert report.best_on_average({"a": [np.nan, 2.0], "b": [1.0, 1.0]}, "ab") == "a"
    with pytest.raises(ValueError):
        report.best_on_average(acc, [])


def test_a_fixed_comparator_is_unbiased_where_a_per_seed_maximum_is_not():
    """Three rivals exactly as accurate as the method: the per-seed best of them beats it
    by about 0.85 sd, the rival best on average (chosen once) by far less, and the rule
    says *holds* at a margin of 0 at most about 10% of the time."""
    rng = np.random.default_rng(7)
    per_seed_max, fixed, holds = [], [], 0
    trials = 2000
    for _ in range(trials):
        method = rng.normal(size=5)
        rivals = {n: rng.normal(size=5) for n in "abc"}
        per_seed_max.append(np.mean(method - np.max(list(rivals.values()), axis=0)))
        d = method - rivals[report.best_on_average(rivals, "abc")]
        fixed.append(d.mean())
        holds += report.judge(d, at_least(0)).verdict == "holds"
    assert np.mean(per_seed_max) < -0.75
    assert -0.5 < np.mean(fixed) < 0 and holds / trials <= 0.1


def test_probe_note_says_whether_the_gap_closes_narrows_stays_or_widens():
    from hetfl_core.book.report import at_least, probe_note

    crit = at_least(0, " points")
    assert probe_note([-5.0], [1.0], crit, [0]).endswith("the gap closes: the criterion passes")
    assert probe_note([-5.0], [-2.0], crit, [0]).endswith("-5.0 → -2.0 points, the gap narrows")
    assert probe_note([-5.0], [-5.5], crit, [0]).endswith("the gap stays")
    assert probe_note([-5.0], [-9.0], crit, [1, 2]).startswith("at 3x the rounds (seeds 1, 2)")
    assert probe_note([-5.0], [-9.0], crit, [0]).endswith("the gap widens")
    assert probe_note([2.0], [3.0], crit, [0]).endswith("the criterion passes at both lengths")
    assert probe_note([5.0], [2.0], at_least(-10), [0], higher_is_better=False).endswith("at both lengths")


def test_a_comparison_judged_by_two_ledgers_is_listed_side_by_side(tmp_path):
    chapter = Ledger("fedlps", "FedLPS", scale="book")
    chapter.claim("Table I", "FedLPS beats FedAvg", "+8.6", [1.0, 2.0, 1.5], at_least(0),
                  pairs=[("fedlps", "fedavg")])
    chapter.claim("Table I", "FedLPS beats FedPer", "+1", [1.0, 2.0, 1.5], at_least(0),
                  pairs=[("fedlps", "fedper")])
    arena = Ledger("arena", "Arena", scale="book")
    arena.claim("Table I", "FedLPS beats FedAvg (image)", "ahead", [-1.0, -2.0, -1.5, -1.2],
                at_least(0), pairs=[("fedlps", "fedavg")])
    chapter.save(tmp_path)
    arena.save(tmp_path)
    ledgers = report.load_ledgers(tmp_path)
    text = report.judged_twice_markdown(ledgers, ["fedlps", "arena"])
    assert text.count("fedlps vs fedavg (**disagree**)") == 2        # one row per ledger
    assert "fedper" not in text                                       # judged once only
    assert "seeds, criterion" not in text and "seeds, setting" in text   # 3 vs 4 seeds
    twice = rendered(text)
    assert [len(row) for row, _ in twice.bodies] == [4, 4]             # comparison ... verdict
    assert all("3 seeds" in d or "4 seeds" in d for d in twice.details)
    assert "The same comparison, judged twice" in scorecard.scorecard_markdown(ledgers)
    alone = {"fedlps": ledgers["fedlps"]}
    assert report.judged_twice_markdown(alone) == ""


def test_values_print_as_phrases_not_python_and_one_takes_the_singular():
    assert report.listing({"FedAvg": "75%", "Heroes": 0.3}) == "FedAvg 75%, Heroes 0.3"
    assert report.listing({"image": "0.1, 0.3"}, sep="; ", between=": ") == "image: 0.1, 0.3"
    assert report.listing({}) == "none"
    assert report.numbers([25.0, 20.0, 3.0]) == "25, 20, 3"
    assert report.numbers(np.array([[0.1234, 1.0]]), "{:.2f}") == "0.12, 1.00"
    assert report.of_seeds(1, 1) == "1 of 1 seed" and report.of_seeds(2, 3) == "2 of 3 seeds"
    assert at_most(1, " points", "gap").text == "gap ≤ 1 point"
    assert at_least(2, " points", "gap").text == "gap ≥ 2 points"
    assert at_least(1, "%").text == "value ≥ 1%"


def test_final_total_and_mean_finite_read_a_history():
    import math

    from hetfl_core.book.report import final, mean_finite, total

    result = {"history": [{"round": 1, "acc_personal": 0.5, "time_s": 2.0},
                          {"round": 2, "acc_personal": None, "time_s": 4.0},
                          {"round": 3, "acc_personal": 0.7, "time_s": 7.0, "uplink_bits": 8.0,
                           "downlink_bits": 2.0}]}
    assert final(result) == 0.7 and abs(final(result, last=2) - 0.6) < 1e-12
    assert abs(final(result, last=5) - 0.6) < 1e-12          # fewer evaluations than asked: all of them
    assert total(result, "time_s") == 7.0 and total(result, "traffic_bits") == 10.0
    assert math.isnan(total({"history": []}, "time_s")) and math.isnan(final({"history": []}))
    with pytest.raises(ValueError):
        final(result, last=0)
    assert mean_finite([1.0, math.inf, math.nan, 3.0]) == 2.0 and math.isnan(mean_finite([math.inf]))


def test_sooner_judges_a_ratio_of_costs_on_the_log_scale():
    from hetfl_core.book.report import judge, ratio, sooner

    crit = sooner("time to 70%")
    assert crit(1.5) and not crit(1.0) and not crit(0.8)
    assert sooner(factor=1 / 0.312)(3.3) and not sooner(factor=1 / 0.312)(3.0)
    assert judge(ratio([4.0, 5.0, 6.0], [2.0, 2.1, 1.9]), crit).verdict == "holds"
    assert judge(ratio([1.0, 1.0, 1.0], [2.0, 2.1, 1.9]), crit).verdict == "fails"


def test_two_claims_on_one_comparison_say_in_which_settings_their_runs_differ(tmp_path):
    from hetfl_core import RunConfig

    base = RunConfig(dataset="digits", partition="shards", classes_per_client=2, clients=20,
                     rounds=20, local_steps=5)
    chapter_runs = [base.replace(method=m, seed=s) for m in ("fedlps", "fedavg") for s in (0, 1, 2)]
    arena_runs = {(m, s): base.replace(method=m, seed=s, partition="dirichlet", alpha=0.5, rounds=30,
                                       lr=lr) for m, lr in (("fedlps", 0.1), ("fedavg", 0.3)) for s in (0,)}
    setting = report.setting_of(chapter_runs)
    assert setting["dataset"] == "digits" and setting["classes_per_client"] == "2"
    assert "alpha" not in setting and setting["seeds"] == "0/1/2" and setting["rounds"] == "20"
    assert report.setting_of(arena_runs)["lr"] == "0.1/0.3"
    chapter = Ledger("fedlps", "FedLPS: learnable sparsity", scale="book")
    chapter.claim("Table I", "FedLPS beats FedAvg", "+8.6", [1.0, 2.0, 1.5], at_least(0),
                  pairs=[("fedlps", "fedavg")], runs=chapter_runs)
    arena = Ledger("arena", "Arena", scale="book")
    arena.claim("A", "FedLPS beats FedAvg", "ahead", [-1.0], at_least(0), pairs=[("fedlps", "fedavg")],
                runs=arena_runs)
    chapter.save(tmp_path)
    arena.save(tmp_path)
    text = report.judged_twice_markdown(report.load_ledgers(tmp_path), ["fedlps", "arena"])
    assert "partition: shards (FedLPS) vs dirichlet (Arena)" in text
    assert "rounds: 20 (FedLPS) vs 30 (Arena)" in text and "seeds: 0/1/2 (FedLPS) vs 0 (Arena)" in text
    assert "setting and metric (see each claim)" not in text


def test_a_claim_left_as_a_cells_value_shows_its_verdict_line():
    ledger = Ledger("a", "A")
    c = ledger.claim("Table I", "FedLPS beats FedAvg", "+8.6", [1.0, 2.0, 3.0], at_least(0))
    assert c._repr_markdown_() == "Table I: FedLPS beats FedAvg: **holds** (2.0 ± 1.0 (3 seeds))"


# -- the rule on never-reached targets, cases, zero spread and invariants ---------------------
def _costs_with_horizon(rng, n: int, speedup: float, missing: float, method_misses: bool = False):
    """Per-seed costs of a method and a rival to a common target, with a true speed-up
    (log-sd 0.2) and one horizon for both, set so that the slower side misses it on a
    share ``missing`` of seeds: the bounded speed-ups (rival / method)."""
    from scipy.stats import norm

    method = np.exp(rng.normal(0.0, 0.1, n))
    rival = method * np.exp(rng.normal(math.log(speedup), 0.2, n))
    slow = method if method_misses else rival
    centre = 0.0 if method_misses else math.log(speedup)
    horizon = math.exp(centre + norm.ppf(1 - missing) * math.hypot(0.1, 0.2))
    rival_seen, method_seen = np.where(rival > horizon, math.inf, rival), np.where(method > horizon, math.inf, method)
    if slow is rival:
        method_seen = np.minimum(method_seen, horizon)
    return report.ratio(report.bounded(rival_seen, horizon), report.bounded(method_seen, horizon)), \
        report.ratio(rival_seen, method_seen)


def test_a_true_speedup_holds_when_the_rival_misses_the_target_on_some_seeds():
    """2x faster, the rival missing the target on 30% of seeds, 3 seeds: the horizon makes
    each miss a lower bound on the speed-up, so the claim holds nearly always (the plain
    infinite ratios, judged by a sign test that cannot decide on 3 seeds, held 35%)."""
    rng = np.random.default_rng(11)
    crit = report.sooner("time to the target")
    bounded, plain = zip(*(_costs_with_horizon(rng, 3, 2.0, 0.3) for _ in range(1500)))
    holds = np.mean([report.judge(v, crit).verdict == "holds" for v in bounded])
    old = np.mean([report.judge(v, crit).verdict == "holds" for v in plain])
    assert holds > 0.95 and old < 0.4
    assert sum(report.judge(v, crit).verdict == "fails" for v in bounded) == 0
    # exactly on the margin (1.5x, claimed > 1.5x), the bounds keep the rule's 10% at most
    margin = [_costs_with_horizon(rng, 3, 1.5, 0.3)[0] for _ in range(1500)]
    verdicts = [report.judge(v, report.sooner(factor=1.5)).verdict for v in margin]
    assert verdicts.count("holds") / 1500 <= 0.115 and verdicts.count("fails") / 1500 <= 0.115


def test_a_method_that_never_reaches_the_target_fails_a_sooner_claim():
    rival = report.bounded([5.3, 4.6, 25.6], 60.0)
    never = report.bounded([math.inf] * 3, 60.0)
    j = report.judge(report.ratio(rival, never), report.sooner(factor=1 / 0.312))
    assert j.verdict == "fails" and j.bounded == 3 and j.interval[0] == 0.0
    assert report.judge(report.ratio(rival, never), report.sooner()).verdict == "fails"
    # the rival never reaching it: a lower bound horizon / method cost, on every seed
    j = report.judge(report.ratio(never, rival), report.sooner())
    assert j.verdict == "holds" and j.interval[1] == math.inf
    # neither reached it: no bound either way, censored
    assert report.judge(report.ratio(never, never), report.sooner()).verdict == "untestable"
    # a rival that misses can never make the claim fail; a method that misses, never hold
    mixed = report.ratio(report.bounded([10.0, math.inf, 10.0], 12.0), report.bounded([11.0, 6.0, 12.5], 13.0))
    assert report.judge(mixed, report.sooner(factor=3.0)).verdict != "holds"
    ledger = Ledger("toy", "Toy")
    c = ledger.claim("Fig. 4", "A reaches it sooner", "3.2x", report.ratio(rival, never),
                     report.sooner(factor=1 / 0.312))
    assert c.verdict == "fails" and "3 of 3 seeds bounded by the run's horizon" in c.measured
    assert c.verdict_text == "fails (3 of 3 seeds bounded by the horizon)"
    assert c.values == [0.0, 0.0, 0.0]


def test_a_slower_method_fails_when_it_misses_the_target_on_some_seeds():
    rng = np.random.default_rng(12)
    crit = report.sooner()
    draws = [_costs_with_horizon(rng, 3, 0.5, 0.3, method_misses=True)[0] for _ in range(1000)]
    verdicts = [report.judge(v, crit).verdict for v in draws]
    assert verdicts.count("fails") / len(draws) > 0.9 and "holds" not in verdicts


def test_bounds_are_checked_and_carried_by_differences_and_ratios(tmp_path):
    with pytest.raises(ValueError, match="horizon"):
        report.bounded([math.inf, 1.0], [0.0, 5.0])
    with pytest.raises(ValueError, match="beyond"):
        report.bounded([7.0], 5.0)
    a, b = report.bounded([1.0, math.inf], 5.0), report.bounded([2.0, 3.0], 5.0)
    gap = b - a
    assert list(gap.low) == [1.0, -math.inf] and list(gap.high) == [1.0, -2.0]
    assert list((2 * gap).high) == [2.0, -4.0] and list(gap.shown) == [1.0, -math.inf]
    runs = [run_of([0.2, 0.5, 0.7]), run_of([0.2, 0.3, 0.4])]
    costs = report.costs_to_target(runs, 0.6)
    assert list(costs.shown) == [30.0, math.inf] and list(costs.low) == [30.0, 30.0]


def test_count_rows_are_judged_case_by_case_at_the_rules_level():
    """"At least 3 of 4 cases" on 3 seeds: false with 2 cases clear and 2 exactly on the
    margin, barely true with 3 on the margin and 1 clearly lost: each wrong verdict about
    10% or less (a t-interval on the per-seed counts gave 23% and 81%)."""
    rng = np.random.default_rng(13)
    crit = at_least(0.0)
    false_holds = barely_fails = 0
    trials = 600
    for _ in range(trials):
        clear, margin = rng.normal(4.0, 1.0, (2, 3)), rng.normal(0.0, 1.0, (3, 3))
        lost = rng.normal(-4.0, 1.0, 3)
        false_claim = {"a": clear[0], "b": clear[1], "c": margin[0], "d": margin[1]}
        barely_true = {"a": margin[0], "b": margin[1], "c": margin[2], "d": lost}
        false_holds += report.judge_cases(false_claim, 3, crit).verdict == "holds"
        barely_fails += report.judge_cases(barely_true, 3, crit).verdict == "fails"
    assert false_holds / trials <= 0.13 and barely_fails / trials <= 0.13
    j = report.judge_cases({"a": [5.0, 6.0, 5.5], "b": [4.0, 5.0, 6.0], "c": [-5.0, -6.0, -5.5]}, 2, crit)
    assert j.verdict == "holds" and j.cases["c"]["verdict"] == "fails" and j.method == "cases, 2 of 3"
    assert report.judge_cases({"a": [-5.0, -6.0, -5.5], "b": [-4.0, -5.0, -6.0]}, 2, crit).verdict == "fails"
    assert report.judge_cases({"a": [1.0], "b": [2.0]}, 1, crit).verdict == "indicative"
    with pytest.raises(ValueError):
        report.judge_cases({"a": [1.0]}, 2, crit)
    ledger = Ledger("toy", "Toy")
    c = ledger.claim_cases("Table V", "OPT saves latency in every case", "30-50%",
                           {"2 classes": [0.6, 0.7, 0.65], "4 classes": [0.7, 0.72, 0.69]}, 2,
                           at_most(0.8, "x", "latency, OPT / FedPer"), digits=2)
    assert c.verdict == "holds" and c.values == [2.0, 2.0, 2.0] and "2 of 2 cases hold" in c.measured
    assert c.interval_text.startswith("2 classes: [") and set(c.cases) == {"2 classes", "4 classes"}


def test_a_zero_width_interval_on_the_margin_decides_nothing():
    assert report.judge([3.0, 3.0, 3.0], at_least(3)).verdict == "inconclusive"
    assert report.judge([3.0, 3.0, 3.0], report.more_than(3)).verdict == "inconclusive"
    clear = report.judge([4.0, 4.0, 4.0], at_least(3))
    assert clear.verdict == "holds" and clear.method == "t-interval, zero spread"
    assert report.judge([0.79] * 3, at_most(0.8)).verdict == "holds"
    assert report.judge([2.0] * 3, at_least(3)).verdict == "fails"


def test_the_rule_holds_about_ten_percent_of_the_time_exactly_on_the_margin():
    rng = np.random.default_rng(14)
    draws = rng.normal(0.0, 1.0, (3000, 3))
    verdicts = [report.judge(v, at_least(0.0)).verdict for v in draws]
    assert 0.085 <= verdicts.count("holds") / 3000 <= 0.115
    assert 0.085 <= verdicts.count("fails") / 3000 <= 0.115


def test_an_invariant_is_checked_on_every_seed_never_judged():
    ledger = Ledger("toy", "Toy")
    nested = ledger.claim("Sec. 3", "masks nest", "nested", [True] * 3, is_true("nested"), kind="invariant")
    assert nested.verdict == "checked" and nested.verdict_text == "checked on 3 of 3 seeds"
    runs = [{"config": {"method": "a", "seed": s}, "history": []} for s in (4, 5, 6)]
    broken = ledger.claim("Sec. 3", "one cluster", "1", [1.0, 2.0, 1.0], at_most(1.0), kind="invariant",
                          runs=runs)
    assert broken.verdict == "violated" and broken.verdict_text == "fails on seed 5"
    assert "**fails on seed 5**" in ledger.markdown() and not broken.counted
    # a yes/no paper claim on 3 seeds: the sign test cannot decide, so it is indicative
    yes = ledger.claim("Fig. 1", "A first", "first", [True] * 3, is_true("A first"))
    assert yes.verdict == "indicative" and yes.verdict_text == "indicative (3 seeds; a sign test needs 4)"
    assert report.sign_test_seeds() == 4


def test_not_yet_evaluated_is_not_censored():
    r = run_of([None, 0.5, None, 0.7])
    assert report.value_by(r, 35.0) == 0.5 and report.value_by(r, 40.0) == 0.7
    with pytest.raises(ValueError, match="first is at time_s 20"):
        report.value_by(r, 15.0)
    assert report.common_budget([r, run_of([0.1, 0.2])]) == 20.0
    acc = {"early": np.array([0.7, np.nan, 0.71]), "late": np.array([0.5, 0.55, 0.52]),
           "slow": np.array([0.4, 0.45, 0.42])}
    assert report.best_on_average(acc, acc) == "early"
    assert report.comparator(acc, acc) == "late" and report.comparator(acc, acc, lower=True) == "slow"
    with pytest.raises(ValueError, match="every seed"):
        report.comparator(acc, ["early"])


def _runs(method, finals):
    return [{"config": {"method": method, "seed": s, "dataset": "digits"},
             "history": [{"round": 1, "time_s": 10.0, "uplink_bits": 1.0, "downlink_bits": 1.0,
                          "acc_personal": a}]} for s, a in enumerate(finals)]


def test_a_paired_claim_writes_its_own_text_pairs_and_setting():
    mine, theirs = _runs("fedlps", [0.8, 0.82, 0.79]), _runs("fedavg", [0.7, 0.71, 0.7])
    gap = report.paired(mine, theirs, report.final, scale=100, unit=" points")
    ledger = Ledger("toy", "Toy")
    c = ledger.claim("Table I", "FedLPS beats FedAvg", "+8.6 points", gap, at_least(0, " points"))
    assert c.verdict == "holds" and c.pairs == [["fedlps", "fedavg"]] and c.setting["seeds"] == "0/1/2"
    assert c.measured == "10.0 ± 1.0 points (3 seeds); fedlps 80.3 ± 1.5, fedavg 70.3 ± 0.6"
    named = report.paired(mine, theirs, report.final, scale=100, names=("FedLPS", "FedAvg"))
    assert named.measured().endswith("; FedLPS 80.3 ± 1.5, FedAvg 70.3 ± 0.6")
    speed = report.paired(mine, theirs, report.first_reach, 0.75, speedup=True)
    assert isinstance(speed.values, report.Bounded) and np.isposinf(speed.values.high).all()
    assert list(speed.values.low) == [1.0] * 3            # the rival's horizon / the method's cost
    with pytest.raises(ValueError, match="seeds"):
        report.paired(mine, theirs[:2], report.final)


def test_chance_and_the_smallest_detectable_effect_come_from_the_rule():
    from scipy.stats import nct

    assert report.judge([1.0, 2.0, 3.0], at_least(0)).chance == pytest.approx((0.1, 0.1))
    effect = report.detectable_effect(1.0, 3)
    q = report._t_quantile(3)
    assert nct.sf(q, 2, effect * math.sqrt(3)) == pytest.approx(0.8)
    assert report.detectable_effect(1.0, 8) < effect and math.isnan(report.detectable_effect(1.0, 1))
    # every case on the margin: "every case of 2" holds with P = 0.1², fails with 1 - 0.95²
    assert report._cases_chance(2, 2, 3) == pytest.approx((0.01, 1 - 0.95 ** 2))


def test_the_claim_argument_counter_reads_a_chapters_code_cells(tmp_path):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "claim_arguments", Path(__file__).resolve().parents[1] / "tools" / "claim_arguments.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    chapter = tmp_path / "ch.md"
    header = (Path(__file__).resolve().parents[1] / "book" / "foundations.md").read_text().split("\n---\n", 1)[0]
    chapter.write_text(header + "\n---\n\n# Ch\n\n"
                       "```{code-cell} ipython3\n%matplotlib inline\nbook.claim('T', 's', 'p', gap, crit)\n"
                       "ledger.claim('T', 's', 'p', values=v, criterion=c, why=w, unit=' pts')\n```\n\n"
                       "```{code-cell} ipython3\nx = 1\n```\n")
    assert sorted(tool.chapter_arguments(chapter)) == [5, 7]
    assert tool.main([str(chapter)]) == 0
    stated = tmp_path / "stated.md"
    stated.write_text(header + "\n---\n\n# Ch\n\n```{code-cell} ipython3\n"
                      "book.state('T', 's', 'p', gap, crit)\nbook.claim_cases('T', 's', 'p', cases=c, k=2)\n```\n")
    assert tool.chapter_arguments(stated, ("claim",)) == []
    assert sorted(tool.chapter_arguments(stated)) == [5, 5]
    assert tool.main(["--calls", "state,claim_cases", str(stated)]) == 0
    assert tool.main(["--calls", "claim", str(stated)]) == 1
    # a chapter's own wrapper counts, under its own name; its forwarding call does not
    wrapped = tmp_path / "wrapped.md"
    wrapped.write_text(header + "\n---\n\n# Ch\n\n```{code-cell} ipython3\n"
                       "def probed(*args, probe=None, **kwargs):\n    book.state(*args, **kwargs)\n\n\n"
                       "def twice(a, b):\n    probed(a, b)\n```\n\n```{code-cell} ipython3\n"
                       "probed('T: s', 'p', v, c, probe=q, why=w)\ntwice(1, 2)\n"
                       "book.headline('T: s', 'p', v, c)\n```\n")
    assert sorted(tool.chapter_arguments(wrapped)) == [2, 2, 4, 6]   # twice(1, 2), probed(a, b)


def test_plural_counts_a_noun_without_hedging():
    import numpy as np

    from hetfl_core.book.report import plural

    assert plural(3, "seed") == "3 seeds"
    assert plural(1, "seed") == "1 seed"
    assert plural(np.int64(1), "seed") == "1 seed"
    assert plural(1.0, "local epoch") == "1 local epoch"
    assert plural(2.5, "local epoch") == "2.5 local epochs"
    assert plural(0, "round") == "0 rounds"
    assert plural(2, "class per client", "classes per client") == "2 classes per client"
    with pytest.raises(TypeError, match="count must be a number"):
        plural("3", "seed")


def test_the_verdict_box_says_nothing_of_chance_when_no_claim_is_counted():
    """At smoke scale every row rests on one seed: the box then gives no chance count
    ("about 0.0 decisive verdicts among these 0" read as nonsense)."""
    verdict_box_markdown = scorecard.verdict_box_markdown
    one_seed = Ledger("toy", "Toy", scale="smoke")
    one_seed.claim("Fig. 1", "A beats B", "+3", [2.0], at_least(0))
    assert "chance alone" not in verdict_box_markdown(one_seed.to_dict())
    counted = Ledger("toy", "Toy", scale="book")
    counted.claim("Fig. 1", "A beats B", "+3", [2.0, 2.5, 3.0], at_least(0))
    assert "chance alone would give about 0.2 decisive verdicts (holds or fails) among these 1" \
        in verdict_box_markdown(counted.to_dict())


def test_show_source_breaks_wide_lines_after_commas_inside_brackets(capsys):
    import ast

    source = (
        "def f(alpha, beta):\n"
        "    total = combine(alpha_values, beta_values, 'a, string', gamma_values)      # why\n"
        "    rows = [\n"
        "        first_function(alpha), second_function(beta), third_function(alpha, beta)]\n"
        "    return {'key': total, 'rows': rows, 'text': f'{alpha}, {beta}', 'n': len(rows)}\n"
        "    # a long comment line, with commas, that no break can shorten, is left as it is\n")
    fitted = report.fit_source(source, width=60)
    assert ast.dump(ast.parse(fitted)) == ast.dump(ast.parse(source))     # same code
    lines = fitted.splitlines()
    assert lines[1] == "    total = combine(alpha_values, beta_values, 'a, string',"
    assert lines[2] == "                    gamma_values)  # why"   # under its bracket
    assert lines[4] == "        first_function(alpha), second_function(beta),"  # hanging
    assert lines[5] == "        third_function(alpha, beta)]"
    assert lines[-1] == source.splitlines()[-1]                         # no comma to break
    assert all(len(line) <= 60 for line in lines[:-1])
    assert report.fit_source("x = 1\n") == "x = 1\n"
    report.show_source(report.mean_finite, width=40)
    printed = capsys.readouterr().out.splitlines()
    ast.parse("\n".join(printed))
    assert printed[1:3] == ["    v = np.asarray(list(values),", "                   dtype=float)"]


def test_a_claim_shows_its_values_in_the_criterions_unit_and_digits():
    """Unless told otherwise, a claim's values show in its criterion's unit, and a ratio
    judged on the log scale as a plain number with two decimals."""
    ledger = report.Ledger("demo", "Demo")
    gap = ledger.claim("T", "a", "p", [1.234, 2.0, 3.0], report.at_least(0, " points"))
    assert gap.measured == "2.1 ± 0.9 points (3 seeds)" and gap.interval_text.endswith(" points")
    speed = ledger.claim("T", "b", "p", [1.5, 2.0, 2.5], report.more_than(1, "×", log=True))
    assert speed.measured == "2.00 ± 0.50 (3 seeds)" and speed.criterion == "value > 1×"
    told = ledger.claim("T", "c", "p", [1.5, 2.0, 2.5], report.more_than(1, "×", log=True),
                        unit="×", digits=1)
    assert told.measured == "2.0 ± 0.5× (3 seeds)"
    cases = ledger.claim_cases("T", "d", "p", {"x": [1.0, 2.0, 3.0]}, 1, report.at_least(0, "%"))
    assert "x 2.0 ± 1.0%" in cases.measured


def test_a_ledger_can_keep_a_why_only_where_a_seed_misses_and_name_the_seeds():
    """why_where_missed: a claim every seed passes, held or indicative, keeps no why;
    seeds_named: a measured text given without its seed count gets it."""
    plain = report.Ledger("demo", "Demo")
    quiet = report.Ledger("demo", "Demo", why_where_missed=True, seeds_named=True)
    for ledger in (plain, quiet):
        ledger.claim("T", "held", "p", [2.0, 2.1, 1.9], report.at_least(0), why="a reason",
                     measured="about 2")
        ledger.claim("T", "missed", "p", [2.0, -1.0, 1.9], report.at_least(0), why="a reason")
        ledger.claim("T", "counted", "p", [2.0, 2.1, 1.9], report.at_least(0),
                     measured="2 on 3 seeds")
    assert [c.why for c in plain.claims] == ["a reason", "conjecture: a reason", ""]
    assert [c.why for c in quiet.claims] == ["", "conjecture: a reason", ""]
    assert [c.measured for c in plain.claims][::2] == ["about 2", "2 on 3 seeds"]
    assert [c.measured for c in quiet.claims][::2] == ["about 2 (3 seeds)", "2 on 3 seeds"]
