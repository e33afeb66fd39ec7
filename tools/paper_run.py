"""Run a chapter at the paper's scale and record its ledger with where and when it ran.

``python tools/paper_run.py CHAPTER [-p NAME VALUE ...]`` executes ``book/CHAPTER.md`` with
papermill at ``scale="paper"`` (plan it first: ``python -m hetfl_core plan CHAPTER --scale
paper``; on a CPU a paper-scale chapter takes days, on a GPU hours), then writes
``results/paper/CHAPTER.json``: the chapter's ledger and its provenance (the commit, the
package's source hash, the device, the date, the command and the wall time). The chapter's
last cell shows it beside the ledger of the scale it runs at
(:func:`hetfl_core.book.paper_scale_markdown`), marked stale once the source hash no longer
matches. Nothing is written if the chapter fails.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def provenance(chapter: str, command: str, wall_s: float) -> dict:
    """Where, when and how the chapter ran (:func:`hetfl_core.book.provenance`), the commit
    marked when the package or the chapter has uncommitted changes."""
    from hetfl_core.book import provenance as run_provenance

    return run_provenance(command, wall_s, ["hetfl_core", f"book/{chapter}.md"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapter")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[],
                        metavar=("NAME", "VALUE"), help="a chapter parameter (papermill -p)")
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "results" / "paper")
    args = parser.parse_args(argv)
    source = ROOT / "book" / f"{args.chapter}.md"
    if not source.is_file():
        parser.error(f"no chapter {args.chapter!r} (book/{args.chapter}.md)")
    extra = [x for name, value in args.parameter for x in ("-p", name, value)]
    command = (f"jupytext --to ipynb -o - book/{args.chapter}.md | papermill - out.ipynb "
               f"-p scale paper {shlex.join(extra)}").strip()
    with tempfile.TemporaryDirectory() as tmp:
        notebook = pathlib.Path(tmp) / f"{args.chapter}.ipynb"
        bindir = pathlib.Path(sys.executable).parent
        subprocess.run([str(bindir / "jupytext"), "--to", "ipynb", "-o", str(notebook), str(source)],
                       check=True)
        env = {**os.environ, "HETFL_LEDGER_DIR": tmp}
        start = time.perf_counter()
        done = subprocess.run([str(bindir / "papermill"), str(notebook), str(notebook), "-p", "scale",
                               "paper", *extra, "--cwd", str(ROOT / "book")], env=env)
        wall = time.perf_counter() - start
        ledger = pathlib.Path(tmp) / f"{args.chapter}.json"
        if done.returncode or not ledger.is_file():
            print(f"{args.chapter} failed at paper scale after {wall:.0f} s; nothing recorded",
                  file=sys.stderr)
            return 1
        args.out.mkdir(parents=True, exist_ok=True)
        record = {"ledger": json.loads(ledger.read_text()),
                  "provenance": provenance(args.chapter, command, wall)}
        target = args.out / f"{args.chapter}.json"
        target.write_text(json.dumps(record, indent=1))
    print(f"recorded {target} ({wall / 3600:.2f} h)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
