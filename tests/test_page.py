"""Printed output wrapped at the page's code column (hetfl_core.page)."""
from hetfl_core.page import COLUMN, say


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
