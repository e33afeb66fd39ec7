"""A chapter's recorded paper-scale run, shown beside its ledger (hetfl_core.book.paper_scale_markdown)
and recorded by tools/paper_run.py."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from hetfl_core.book import paper_scale_markdown
from hetfl_core.runtime.experiments import source_hash

pytestmark = pytest.mark.slow     # servers, notebooks, processes or long runs: not in make test-fast

ROOT = Path(__file__).resolve().parents[1]


def claim(verdict, statement="A beats B"):
    return {"ref": "Table I", "statement": statement, "verdict": verdict, "kind": "paper",
            "measured": f"A − B +1.0 points; more", "values": [1.0, 1.2, 0.8]}


def record(tmp_path, source):
    provenance = {"commit": "0123456789abcdef", "source_hash": source, "device": "NVIDIA H100",
                  "date": "2026-12-01 10:00 UTC", "command": "jupytext ... -p scale paper",
                  "wall_s": 5400.0}
    ledger = {"chapter": "alpha", "scale": "paper",
              "claims": [claim("holds"), {**claim("holds", "an invariant"), "kind": "invariant"}]}
    (tmp_path / "alpha.json").write_text(json.dumps({"ledger": ledger, "provenance": provenance}))


def test_no_recorded_run_says_how_to_make_one(tmp_path):
    text = paper_scale_markdown("alpha", {"scale": "book", "claims": []}, tmp_path)
    assert "No paper-scale run" in text and "tools/paper_run.py alpha" in text


def test_a_recorded_run_shows_where_and_when_and_each_paper_claim_beside_this_run(tmp_path):
    record(tmp_path, source_hash())
    text = paper_scale_markdown("alpha", {"scale": "book", "claims": [claim("fails")]}, tmp_path)
    assert "NVIDIA H100" in text and "2026-12-01" in text and "`0123456789`" in text and "1.5 h" in text
    assert "Stale" not in text
    row = next(line for line in text.splitlines() if line.startswith("| Table I: A beats B"))
    assert "| fails | holds |" in row and "A − B +1.0 points" in row
    assert "an invariant" not in text                       # only the paper's claims


def test_a_run_of_other_source_is_marked_stale(tmp_path):
    record(tmp_path, "000000000000")
    text = paper_scale_markdown("alpha", {"scale": "book", "claims": []}, tmp_path)
    assert "**Stale:**" in text and "000000000000" in text and source_hash() in text
    assert "| Table I: A beats B | — | holds |" in text     # not judged in this run


def test_paper_run_refuses_an_unknown_chapter_and_records_provenance():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "paper_run.py"), "nonesuch"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "no chapter 'nonesuch'" in done.stderr
    sys.path.insert(0, str(ROOT / "tools"))
    import paper_run

    how = paper_run.provenance("fedlps", "cmd", 12.34)
    assert how["source_hash"] == source_hash() and how["wall_s"] == 12.3 and how["command"] == "cmd"
    assert len(how["commit"].split()[0]) == 40 and ("CPU" in how["device"] or "CUDA" in how["device"])
