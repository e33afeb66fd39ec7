"""What the chapters print and how they end: output wrapped at the page's code column
(hetfl_core.book.say) and the summary written from a claim ledger (summary_markdown)."""
from hetfl_core.book import COLUMN, first_clause, say, summary_markdown
from hetfl_core.book.report import Ledger, at_least


def test_first_clause_stops_at_the_first_semicolon_and_cuts_long_text():
    assert first_clause("FedPer 85%; probe 3x") == "FedPer 85%"
    assert first_clause("x" * 50, limit=10) == "x" * 9 + "…"


def test_the_summary_counts_and_groups_the_counted_claims_by_verdict():
    ledger = Ledger("demo", "Demo", scale="book")
    ledger.claim("Fig. 1", "A beats B", "+2", [3.0, 3.1, 2.9], at_least(0), measured="+3")
    ledger.claim("Fig. 2", "A beats C", "+2", [-3.0, -3.1, -2.9], at_least(0),
                 measured="-3", why="C 90% vs A 87%; conjecture: too few rounds")
    ledger.claim("Fig. 3", "A beats D", "+2", [1.0], at_least(0), measured="+1")
    ledger.claim("Eq. 1", "a check", "-", [1.0, 1.0, 1.0], at_least(0), kind="invariant")
    text = summary_markdown(ledger)
    assert "2 counted paper claims: 1 holds, 1 fails, 0 are inconclusive" in text
    assert "1 indicative" in text and "1 not the paper's" in text
    held, failed = text.index("What held:"), text.index("What failed:")
    assert held < text.index("Fig. 1: A beats B (+3).") < failed
    assert "Fig. 2: A beats C (-3); why: conjecture: C 90% vs A 87%." in text
    assert "Fig. 3" not in text and "a check" not in text       # counted claims only
    assert "inconclusive:" not in text.replace("are inconclusive", "")


def test_say_wraps_long_lines_and_keeps_short_ones(capsys):
    say("short", 1, True)
    say("word " * 40)
    say("a\nb")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "short 1 True"
    long = lines[1:-2]
    assert len(long) > 1 and all(len(line) <= COLUMN for line in long)
    assert all(line.startswith("  word") for line in long[1:])
    assert " ".join(line.strip() for line in long) == ("word " * 40).strip()
    assert lines[-2:] == ["a", "b"]
