"""Command line: ``python -m hetfl_core run METHOD ...``, ``list [METHOD]`` (the methods,
datasets, models and partitions, or one method's options and description), ``arena`` (the
benchmark of :mod:`hetfl_core.book.arena`: a leaderboard and a Pareto figure), ``plot RUN.json ...
-o FIG.png`` and ``plan CHAPTER`` (a chapter's runs and their estimated cost).

Bad input (an unknown method or dataset, a value out of range, a dataset that is not
installed, an output path that cannot be written) exits with code 2 and one line, before
any training starts.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import inspect
import io
import json
import math
import os
import sys
from contextlib import suppress
from pathlib import Path

from .book.chapter import (BASELINES, PLAN_SKIP, measure_speed, plan_chapter, plan_skipped,
                           scored_every_round, training_samples)
from .runtime.config import SCALES, RunConfig, accepted
from .science.data import DATASETS, PARTITIONS
from .runtime.engine import system_of
from .science.errors import ConfigError, DatasetUnavailable, HetflError
from .runtime.experiments import cache_path, check_writable, run_cached, sweep, write_atomic
from .science.methods import METHODS
from .science.models import MODELS
from .science.system import BANDWIDTH_POLICIES, HETEROGENEITY, SYSTEMS

__all__ = ["main"]

#: RunConfig fields that only the Python API sets
_API_ONLY = ("method", "options", "given_indices")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parse_option(text: str):
    """``KEY=VALUE`` as ``(key, value)``: the value read as JSON where it parses, else a string."""
    if "=" not in text:
        raise ConfigError(f"--option takes KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _build_parser() -> argparse.ArgumentParser:
    choices = {"dataset": DATASETS, "model": MODELS, "partition": PARTITIONS, "heterogeneity": HETEROGENEITY,
               "system": SYSTEMS, "bandwidth_policy": BANDWIDTH_POLICIES}
    parser = _Parser(prog="python -m hetfl_core", description="Heterogeneous federated learning simulator.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    listing = sub.add_parser("list", help="list methods, datasets, models and partitions, or one method's options")
    listing.add_argument("method", nargs="?", help="show this method's options (--option KEY=VALUE) and description")
    run = sub.add_parser("run", help="run one method and write its history as JSON")
    run.add_argument("method", help=f"the federated method; one of: {', '.join(sorted(METHODS))}")
    for f in dataclasses.fields(RunConfig):
        if f.name in _API_ONLY:
            continue
        values = f"one of: {', '.join(choices[f.name])}" if f.name in choices else accepted(f.metadata)
        kind = {"action": argparse.BooleanOptionalAction} if f.metadata["kind"] is bool else \
            {"type": f.metadata["kind"], "metavar": f.name.upper()}
        run.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=f.default,
                         help=f"{f.metadata['help']}; {values} (default: {f.default})", **kind)
    run.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                     help="a method option, e.g. --option mu=0.01 (repeatable; see 'list METHOD')")
    run.add_argument("--out", help="write {config, history} JSON here (checked writable before "
                     "training; a symbolic link is refused, a file is replaced whole)")
    run.add_argument("--no-cache", action="store_true", help="run even if the result is cached")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--engine", choices=("hetfl", "flower"), default="hetfl",
                     help="hetfl's round loop, or the same loop in Flower's simulation engine (not cached)")
    run.add_argument("--executor", choices=("process", "ray"), default=None,
                     help="where the run executes: this process, or a Ray task (default: $HETFL_EXECUTOR or process)")
    run.add_argument("--address", help="the Ray cluster's address (default: $HETFL_RAY_ADDRESS, else a local Ray)")
    arena = sub.add_parser("arena", help="run the arena (every method on one benchmark) and write its leaderboard")
    arena.add_argument("--scale", choices=SCALES, default="smoke",
                       help="the arena's size (default: smoke, seconds)")
    arena.add_argument("--methods", nargs="+", metavar="METHOD",
                       help="the methods to run (default: the arena's fifteen); any registered method")
    arena.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                       help="a Python file that registers a method (repeatable); runs then stay in this process")
    arena.add_argument("--out", default="arena", help="directory for leaderboard.csv/.json and pareto.png")
    arena.add_argument("--processes", type=int, default=2, help="worker processes (default: 2)")
    arena.add_argument("--seed", type=int, default=0, help="the first seed (default: 0)")
    arena.add_argument("--baselines", choices=BASELINES, default="authors",
                       help="the baselines as their authors ran them (default) or simplified "
                            "(hetfl_core.book.SIMPLIFIED_BASELINES)")
    arena.add_argument("--quiet", action="store_true", help="no progress bar")
    plot = sub.add_parser("plot", help="draw accuracy against rounds, time and traffic for saved runs")
    plot.add_argument("runs", nargs="+", metavar="RUN.json", help="files written by 'run --out'")
    plot.add_argument("-o", "--out", required=True, metavar="FIG.png",
                      help="the figure to write: its extension names the format (.png is added to a "
                           "name without one); a symbolic link is refused, a file replaced whole")
    plot.add_argument("--y", default="acc_personal", help="what to plot (default: acc_personal)")
    ladder = sub.add_parser("ladder", add_help=False,
                            help="the headline claims on a ladder of training budgets: plan, run, "
                                 "status, ledger (as tools/ladder.py)")
    ladder.add_argument("arguments", nargs=argparse.REMAINDER)
    plan = sub.add_parser("plan", help="list a chapter's runs at a scale and estimate their cost, "
                                       "without training")
    plan.add_argument("chapter", help="a chapter's name (heroes, fedlps, ...) or its book/*.md file")
    plan.add_argument("--scale", choices=SCALES, default="paper",
                      help="the scale to plan (default: paper)")
    plan.add_argument("-p", "--parameter", nargs=2, action="append", default=[],
                      metavar=("NAME", "VALUE"), help="a chapter parameter, as papermill's -p "
                      "(repeatable; the value is read as Python, else as text)")
    plan.add_argument("--no-timing", action="store_true",
                      help="skip measuring each model's training speed on this machine")
    plan.add_argument("--json", metavar="FILE", help="also write the planned runs as JSON here")
    plan.add_argument("--cell-timeout", type=int, default=120, metavar="SECONDS",
                      help="interrupt a cell that computes this long outside a sweep (default: 120)")
    return parser


def _join_negative(argv: list[str]) -> list[str]:
    """``--lr -inf`` as ``--lr=-inf``: argparse reads a value that starts with ``-`` and is
    not a plain number (``-inf``, ``-1e5``) as an unknown option."""
    out = []
    for token in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and token.startswith("-"):
            with suppress(ValueError):
                float(token)
                out[-1] += "=" + token
                continue
        out.append(token)
    return out


def _check_out(text: str, flag: str = "--out", devices: bool = True,
               example: str = "run.json") -> Path:
    """The output path ``text``, refused in one line before any work where it cannot be written,
    names a directory, or is a symbolic link (never followed: in a shared folder it could point
    at any file), or a device (a device that refuses a write, where ``devices`` is true)."""
    if not text:
        raise ConfigError(f"{flag} needs a file name, got an empty path")
    path = Path(text)
    if os.path.basename(text) in ("", ".", ".."):
        raise ConfigError(f"{flag} {text} names a directory; give a file name such as "
                          f"{path / example}")
    check_writable(path.parent, flag, path.name)      # the folder, and the name's length
    if path.is_symlink():
        raise ConfigError(f"{flag} {path} is a symbolic link; give the file itself "
                          f"(links are not followed)")
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a directory; give a file name such as "
                          f"{path / example}")
    if path.exists() and not path.is_file():
        if not devices:
            raise ConfigError(f"{flag} {path} is not a regular file; give a file name")
        try:                       # a device: an empty write reaches it (/dev/full refuses even that)
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
            with open(fd, "wb", buffering=0) as device:
                device.write(b"")
        except OSError as exc:
            raise ConfigError(f"{flag} {path} cannot be written: {exc.strerror}") from None
    return path


def _write_out(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``: a device (``/dev/null``) directly, a file whole by
    :func:`~hetfl_core.runtime.experiments.write_atomic` (a link put there since the check is replaced)."""

    if path.exists() and not path.is_symlink() and not path.is_file():
        with open(os.open(path, os.O_WRONLY | os.O_NOFOLLOW), "wb") as device:
            device.write(data)
    else:
        write_atomic(path, data)


def _list(name: str | None) -> int:
    """``list``: the methods, datasets, models and partitions; or, given a method's ``name``,
    its summary, its options (default, accepted values, meaning) and its module's description."""
    if name is None:
        width = max(map(len, [*METHODS, *DATASETS]))
        print("methods:")
        for method in sorted(METHODS):
            print(f"  {method:{width}s}  {METHODS[method].summary}")
        print("datasets:")
        for dataset, (_, text) in DATASETS.items():
            print(f"  {dataset:{width}s}  {text}")
        print("models:     " + ", ".join(MODELS))
        print("partitions: " + ", ".join(PARTITIONS))
        return 0
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; choose one of: {', '.join(sorted(METHODS))}")
    method = METHODS[name]
    print(f"{name}: {method.summary}")
    if method.option_specs:
        print("options (--option KEY=VALUE; default shown, then the accepted values and the meaning):")
        for key, spec in method.option_specs.items():
            print(f"  {key}={json.dumps(spec.default)}  {spec.accepted()}" + (f"; {spec.help}" if spec.help else ""))
    else:
        print("options: none")
    doc = inspect.getdoc(inspect.getmodule(method))
    if doc:
        print()
        print(doc)
    return 0


def main(argv=None) -> int:
    """Entry point; returns the exit code: 0, 2 for a bad configuration or a missing dataset
    (one line, before any training where it can be known), 1 for a failure while running,
    130 on Ctrl-C."""
    args = _build_parser().parse_args(_join_negative(sys.argv[1:] if argv is None else list(argv)))
    commands = {"list": lambda a: _list(a.method), "run": _run, "arena": _arena, "plot": _plot,
                "plan": _plan, "ladder": _ladder}
    try:
        return commands[args.command](args)
    except HetflError as exc:      # bad input is found also after the data loads, before training
        print(f"python -m hetfl_core: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, (ConfigError, DatasetUnavailable)) else 1
    except KeyboardInterrupt:
        caches = args.command == "arena" or (args.command == "run" and not args.no_cache
                                             and args.engine == "hetfl")
        print("python -m hetfl_core: interrupted" + (" (finished runs are cached)" if caches else ""),
              file=sys.stderr)
        return 130


def _ladder(args) -> int:
    """``ladder``: the ladder's own command line (:func:`hetfl_core.book.ladder.main`)."""
    from .book.ladder import main as ladder_main

    return ladder_main(args.arguments)


def _run(args) -> int:
    """``run``: validate, check the outputs, run (or read the cache), report, write ``--out``."""
    if args.engine == "flower":
        ignored = [flag for flag, given in (("--executor ray", args.executor == "ray"),
                                            ("--address", args.address is not None)) if given]
        if ignored:
            raise ConfigError(f"--engine flower runs in Flower's own simulation and cannot take "
                              f"{' or '.join(ignored)}; drop {'them' if len(ignored) > 1 else 'it'}"
                              f", or use --engine hetfl")
    fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig) if f.name not in _API_ONLY}
    options = dict(_parse_option(o) for o in args.option)
    config = RunConfig(method=args.method, options=options, **fields).validate()
    out = None if args.out is None else _check_out(args.out)
    if args.engine == "flower":
        from .runtime.flower import run_flower

        result = run_flower([config], progress=not args.quiet)[0]
    elif (args.executor or os.environ.get("HETFL_EXECUTOR")) == "ray":
        result = sweep([config], executor="ray", address=args.address, progress=not args.quiet)[0]
    else:
        result = run_cached(config, progress=not args.quiet, use_cache=not args.no_cache)
    last = result["history"][-1]

    def pct(value):
        return "n/a" if value is None else f"{100 * value:.2f}%"

    print(f"{config.method}: {last['round']} rounds, global accuracy {pct(last['acc_global'])}, "
          f"personalised accuracy {pct(last['acc_personal'])}, simulated time {last['time_s']:.1f} s, "
          f"uplink {last['uplink_bits'] / 8e6:.2f} MB, energy {last.get('energy_j', float('nan')):.3g} J "
          f"({system_of(config)} cost model)", file=sys.stderr)
    if out is not None:
        try:
            _write_out(out, json.dumps(result, indent=1).encode())
        except OSError as exc:
            kept = f"the run is cached at {cache_path(config)}" if not args.no_cache else "the run was not cached"
            raise HetflError(f"could not write --out {out}: {exc.strerror or exc}; {kept}") from None
    return 0


def _load_plugin(path: str) -> None:
    """Import a Python file that registers methods (``@register``); any failure, ``sys.exit``
    included, is one :class:`ConfigError` line naming the file."""
    file = _regular_file(path, f"--plugin {path}", "; give the .py file that registers the method")
    spec = importlib.util.spec_from_file_location(f"hetfl_plugin_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SystemExit as exc:     # would end the arena silently, with its exit code
        raise ConfigError(f"--plugin {path} called sys.exit({exc.code!r}) while loading; "
                          f"a plug-in file registers methods and returns") from None
    except Exception as exc:      # the user's file: report it in one line
        why = " ".join(str(exc).split())
        raise ConfigError(f"--plugin {path} failed to load: {type(exc).__name__}: {why}") from None


def _arena(args) -> int:
    """``arena``: check its arguments, load the plug-ins, tune and run the grid (cached), write
    the leaderboard and the Pareto figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .book import arena

    arena.check_arguments(args.scale, args.processes, args.seed)
    for path in args.plugin:
        _load_plugin(path)
    out = Path(args.out)
    check_writable(out, "--out")
    processes = 1 if args.plugin else args.processes    # spawned workers would not know a plug-in
    runs = arena.run_arena(args.scale, args.methods, processes=processes, seed=args.seed,
                           progress=not args.quiet, baselines=args.baselines)
    rows = arena.leaderboard(runs)
    csv_path, json_path = arena.write_leaderboard(rows, out)
    reference = [r for r in rows if r["scenario"] == runs.settings.reference.name]
    axes = arena.plot_pareto(reference)
    axes[0].figure.suptitle(runs.settings.reference.name)
    axes[0].figure.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=5, fontsize=8)
    png = out / "pareto.png"
    axes[0].figure.savefig(png, dpi=120)
    plt.close(axes[0].figure)
    for (task, m), why in runs.unsupported.items():
        print(f"{m} does not run the {task} task: {why}", file=sys.stderr)
    for key, why in runs.failed.items():
        print(f"failed: {key}: {why}", file=sys.stderr)
    print(f"{runs.settings.reference.name}:", file=sys.stderr)
    for r in reference:
        print(f"  {r['rank']:2d}. {r['label']:16s} {100 * r['mean']['acc']:5.1f}%  "
              f"{r['mean']['time_s']:8.1f} s  {r['mean']['bits'] / 8e6:8.2f} MB", file=sys.stderr)
    print(f"wrote {csv_path}, {json_path} and {png}", file=sys.stderr)
    return 1 if runs.failed else 0


def _regular_file(path: str, name: str, hint: str = "") -> Path:
    """``path`` if a regular file is there; else a :class:`ConfigError` naming it as ``name``
    and what is there (never a pipe that would block a read), then ``hint``."""
    file = Path(path)
    if not file.exists():
        raise ConfigError(f"{name}: no such file")
    if not file.is_file():
        raise ConfigError(f"{name} is a directory{hint}" if file.is_dir() else f"{name}: not a regular file{hint}")
    return file


def _read_run(path: str, y: str) -> dict:
    """The run ``{config, history}`` saved at ``path`` by ``run --out``, every value the plot
    reads checked (one line naming the file and what is wrong, never a traceback)."""
    file = _regular_file(path, path)
    try:
        result = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(f"{path}: not a run's JSON ({type(exc).__name__})") from None
    history = result.get("history") if isinstance(result, dict) else None
    if not (isinstance(history, list) and history and isinstance(result.get("config"), dict)):
        raise ConfigError(f"{path}: not a run's JSON (no config and history)")
    method = result["config"].get("method")
    if not isinstance(method, str) or not method:
        raise ConfigError(f"{path}: config.method must be a method's name, got {method!r:.40}")
    for i, row in enumerate(result["history"], 1):
        if not isinstance(row, dict):
            raise ConfigError(f"{path}: history row {i} is not a dict of values, got {row!r:.40}")
        for key in ("round", "time_s", "uplink_bits", y):
            value = row.get(key)
            number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            if not number and not (key == y and value is None):   # None: not evaluated
                raise ConfigError(f"{path}: history row {i}: {key} must be a finite number, "
                                  f"got {value!r:.40}")
    if all(row.get(y) is None for row in result["history"]):
        raise ConfigError(f"{path}: no round has {y}; choose another --y")
    return result


def _plot(args) -> int:
    """``plot``: accuracy against rounds, simulated time and traffic, one line per file. ``-o``
    is checked before anything is read or drawn: a regular file (never a device) whose
    extension names a format matplotlib writes (``.png`` is appended to a name without one)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backend_bases import FigureCanvasBase

    from .book.plots import Y_AXES, legend_below, plot_curves

    if args.y not in Y_AXES:
        raise ConfigError(f"--y must be one of: {', '.join(Y_AXES)}; got {args.y!r}")
    text = args.out
    if text and os.path.basename(text) not in ("", ".", "..") and not os.path.lexists(text) \
            and not Path(text).suffix:
        text += ".png"
    out = _check_out(text, "-o", devices=False, example="runs.png")
    formats = FigureCanvasBase.get_supported_filetypes()
    fmt = out.suffix[1:].lower()
    if fmt not in formats:
        what = f"format {fmt!r}" if fmt else "no extension"
        raise ConfigError(f"-o {out}: {what} names no image format; end it in one of: "
                          f"{', '.join('.' + f for f in sorted(formats))}")
    results = [_read_run(path, args.y) for path in args.runs]
    names = [Path(p).stem for p in args.runs]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8), constrained_layout=True)
    for ax, x in zip(axes, ("round", "time_s", "uplink_bits")):
        for i, (name, result) in enumerate(zip(names, results)):   # a method's colour, a file's line style
            plot_curves([result], x=x, y=args.y, ax=ax, ls=("-", "--", ":", "-.")[i % 4],
                        label=lambda r, n=name: n if r["config"]["method"] in n else f"{r['config']['method']} ({n})")
    legend_below(fig, axes)
    image = io.BytesIO()
    fig.savefig(image, format=fmt, dpi=120)
    plt.close(fig)
    try:
        _write_out(out, image.getvalue())
    except OSError as exc:
        raise HetflError(f"could not write -o {out}: {exc.strerror or exc}") from None
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _chapter_path(name: str):
    """``book/<name>.md`` of the checkout this package runs from, or the file given."""
    given = Path(name)
    if given.suffix == ".md" and given.exists():
        return given
    for root in (Path.cwd(), Path(__file__).resolve().parents[1]):
        path = root / "book" / f"{name}.md"
        if path.exists():
            return path
    raise ConfigError(f"no chapter {name!r}: give a chapter's name (as book/<name>.md in the "
                      "checkout) or the path of its .md file")


def _parameter_value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _finite(x: float):
    """``x``, or ``None`` for a nan (JSON has no nan)."""
    return None if math.isnan(x) else x


def _plan(args) -> int:
    """``plan``: execute a chapter in plan mode (:func:`hetfl_core.book.plan_chapter`), then
    list its distinct runs per sweep with their training samples and, measured on this
    machine, an estimate of the time they would take."""
    path = _chapter_path(args.chapter)
    params = {name: _parameter_value(value) for name, value in args.parameter}
    print(f"planning {path} at scale {args.scale} (the chapter runs, its sweeps only record)...",
          file=sys.stderr)
    if args.cell_timeout < 1:
        raise ConfigError(f"--cell-timeout must be at least 1 second, got {args.cell_timeout}")
    records, errors = plan_chapter(path, args.scale, params, timeout=args.cell_timeout)
    distinct = {}
    for r in records:
        distinct.setdefault(r["key"], r)
    speeds: dict[tuple, object] = {}               # measured once per method, options, model and data
    untimed: set[str] = set()                      # methods this process does not know
    cost: dict[str, tuple[float, float, float]] = {}   # key -> (training samples, seconds to run,
    #                                                   seconds with every round scored)
    groups: dict[str, list] = {}                   # the sweep that asked for each run
    for key, r in distinct.items():
        c = RunConfig.from_dict(r["config"])
        shape = (c.method, repr(sorted(c.options.items())), c.model, c.dataset, c.batch_size, c.clients,
                 c.test_fraction, c.val_fraction, c.train_samples)
        if c.method not in METHODS:             # a plug-in the chapter registers in its own kernel
            untimed.add(c.method)
        elif not args.no_timing and shape not in speeds and not r["cached"]:
            speeds[shape] = measure_speed(c)
        speed = speeds.get(shape)
        cost[key] = (training_samples(c), speed.seconds(c) if speed else float("nan"),
                     speed.seconds(scored_every_round(c)) if speed else float("nan"))
        groups.setdefault(r["where"], []).append(key)
    w = max([28, *(len(where) for where in groups)])
    print(f"{'sweep':{w}s} {'runs':>5s} {'cached':>6s} {'to train: M samples':>20s} {'est. CPU h':>11s}"
          f" {'every round scored':>19s}")
    print(f"{'':{w}s} {'':5s} {'':6s} {'':20s} {'(1 thread)':>11s} {'(CPU h)':>19s}")

    def hours(todo, column):
        timed = [cost[k][column] for k in todo if not math.isnan(cost[k][column])]   # nan: not timed
        return "—" if todo and not timed else f"{sum(timed) / 3600:.2f}"

    for where, keys in [*groups.items(), ("all", list(distinct))]:
        todo = [k for k in keys if not distinct[k]["cached"]]
        print(f"{where:{w}s} {len(keys):5d} {len(keys) - len(todo):6d} "
              f"{sum(cost[k][0] for k in todo) / 1e6:20.2f} {hours(todo, 1):>11s} {hours(todo, 2):>19s}")
    if untimed and not args.no_timing:
        print(f"not timed (registered in the chapter only): {', '.join(sorted(untimed))}; the "
              "estimates leave their runs out", file=sys.stderr)
    from .book.report import plural

    skipped = plan_skipped(path)
    if skipped:
        print(f"{plural(len(skipped), 'code cell')} tagged {PLAN_SKIP} not run in plan mode "
              f"(numbers {', '.join(map(str, skipped))}: they read a method's per-client "
              "records, which a stand-in lacks, or train outside a sweep; their own "
              "computation is not counted)", file=sys.stderr)
    if errors:
        print(f"{len(errors)} cell(s) did not finish in plan mode (an error on the stand-in "
              "(nan) results of planned runs, or a cell interrupted while computing outside a sweep); "
              f"a grid built from their results may be missing. First: {errors[0]}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as out:
            runs = [{**r, "seconds": _finite(cost[k][1]), "seconds_every_round_scored": _finite(cost[k][2])}
                    for k, r in distinct.items()]
            json.dump({"chapter": str(path), "scale": args.scale, "runs": runs, "errors": errors},
                      out, indent=1)
    if args.no_timing:
        return 0
    import torch

    where = "this machine's GPU" if torch.cuda.is_available() else "this machine's CPU, one thread"
    print(f"Times are measured on {where} for each method, its options, model and data: the "
          "cost of a training sample and of a round's other work (rounds of two clients at 2 and "
          "6 local steps), and of each scoring (personalised models, the global model on the "
          "whole test set), times a run's samples, rounds and scorings; data loading and start-up "
          "are not counted. \"Every round scored\" prices the same runs with every client's model "
          "and the global model scored after every round (what a chapter's evaluation settings "
          "save). A sweep runs two at a time by default, so the wall time is about half. "
          "On a GPU machine the same command measures the GPU.")
    return 0
