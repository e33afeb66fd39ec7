"""The ladder of training budgets behind each headline claim (:mod:`hetfl_core.ladder`).

    python tools/ladder.py plan   [--chapter C] [--rung R] [--no-timing]
    python tools/ladder.py run    [--chapter C] [--rung R] [--until-s SECONDS] [--workers N]
                                  [--store DIR] [--device auto|cpu|cuda]
    python tools/ladder.py status [--store DIR]
    python tools/ladder.py ledger [--chapter C] [--store DIR]

``plan`` lists the pending runs in the order ``run`` computes them (cheapest rung first, a
claim's methods and seeds together) with their training samples and estimated CPU hours;
``run`` computes them, each stored the moment it finishes (``results/ladder/runs``), never
starting one it cannot expect to finish before ``--until-s``; a later call, here or on
another machine, continues from the stored runs. ``status`` says per claim which rungs are
done, pending or stale; ``ledger`` recomputes the ladder ledgers from the stored runs.
"""
from __future__ import annotations

import argparse
import math
import pathlib
import shlex
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class _Parser(argparse.ArgumentParser):
    def error(self, message):      # one line, exit 2
        self.exit(2, f"ladder: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tools/ladder.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plan = sub.add_parser("plan", help="the pending runs in order, with their cost")
    run = sub.add_parser("run", help="compute the pending runs, then the ledgers")
    status = sub.add_parser("status", help="per claim: rungs done, pending, stale")
    ledger = sub.add_parser("ledger", help="recompute the ladder ledgers from the stored runs")
    for p in (plan, run, status, ledger):
        p.add_argument("--store", default=None, help="the store (default results/ladder)")
    for p in (plan, run, ledger):
        p.add_argument("--chapter", default=None)
    for p in (plan, run):
        p.add_argument("--rung", default=None)
    plan.add_argument("--no-timing", action="store_true",
                      help="do not measure speeds that are not known yet (their cost shows —)")
    plan.add_argument("--device", default="cpu", help="the device to estimate for (default cpu)")
    run.add_argument("--until-s", type=float, default=None,
                     help="start no run that cannot be expected to finish within this many seconds")
    run.add_argument("--workers", type=int, default=1, help="worker processes (one torch thread each)")
    run.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def _plan(args) -> int:
    from hetfl_core import ladder
    from hetfl_core.book import training_samples

    device = ladder.resolve(args.device)
    todo = ladder.pending(args.chapter, args.rung, args.store, ladder.equivalence_digest(args.store))
    speeds = ladder.SpeedBook(args.store, measure=not args.no_timing)
    totals: dict[str, list[float]] = {}
    print(f"{'#':>4s} {'rung':6s} {'method':10s} {'seed':>4s} {'rounds':>6s} {'M samples':>10s} "
          f"{'est. h':>7s}  claims")
    for i, p in enumerate(todo, 1):
        samples = training_samples(p.config)
        hours = speeds.seconds(p.config, device) / 3600
        total = totals.setdefault(p.rung, [0, 0.0, 0.0, 0])
        total[0] += 1
        total[1] += samples
        if math.isnan(hours):
            total[3] += 1
        else:
            total[2] += hours
        print(f"{i:4d} {p.rung:6s} {p.config.method[:10]:10s} {p.config.seed:4d} {p.config.rounds:6d} "
              f"{samples / 1e6:10.2f} {'—' if math.isnan(hours) else f'{hours:7.2f}':>7s}  "
              f"{'; '.join(p.claims)}")
    print(f"\n{'rung':6s} {'runs':>5s} {'M samples':>10s} {'est. ' + device + ' h (1 thread)':>22s}")
    for rung, (runs, samples, hours, unknown) in totals.items():
        print(f"{rung:6s} {runs:5d} {samples / 1e6:10.2f} {hours:22.2f}"
              + (f"  ({unknown} run(s) not timed)" if unknown else ""))
    print(f"{'all':6s} {sum(t[0] for t in totals.values()):5d} "
          f"{sum(t[1] for t in totals.values()) / 1e6:10.2f} {sum(t[2] for t in totals.values()):22.2f}")
    return 0


def main(argv=None) -> int:
    from hetfl_core import ladder
    from hetfl_core.errors import ConfigError
    from hetfl_core.report import markdown_table

    args = _parser().parse_args(argv)
    try:
        if args.command in ("plan", "run", "ledger"):
            ladder.specs_of(args.chapter, getattr(args, "rung", None))   # refuse bad input first
        if args.command == "plan":
            return _plan(args)
        if args.command == "run":
            command = "python tools/ladder.py " + shlex.join(sys.argv[1:] if argv is None else argv)
            counts = ladder.run_pending(args.chapter, args.rung, args.until_s, args.workers, args.store,
                                        args.device, command, progress=not args.no_progress)
            return 1 if counts["failed"] else 0
        if args.command == "status":
            print(markdown_table(ladder.status_rows(args.store),
                                 ["chapter", "claim", "done", "pending", "stale"]))
            return 0
        paths = ladder.write_ledgers(args.chapter, args.store, ladder.equivalence_digest(args.store))
        print("wrote " + ", ".join(str(p) for p in paths))
        return 0
    except ConfigError as exc:
        print(f"ladder: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
