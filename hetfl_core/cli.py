"""Command line: ``python -m hetfl_core run METHOD ...``, ``python -m hetfl_core list`` and
``python -m hetfl_core list METHOD`` (a method's options, their defaults and its description).

Bad input (an unknown method or dataset, a value out of range) exits with code 2 and
one line, before any training starts.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from .config import RunConfig
from .errors import ConfigError, HetflError

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parse_option(text: str):
    if "=" not in text:
        raise ConfigError(f"--option takes KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m hetfl_core", description="Heterogeneous federated learning simulator.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    listing = sub.add_parser("list", help="list methods, datasets, models and partitions, or one method's options")
    listing.add_argument("method", nargs="?", help="show this method's options (--option KEY=VALUE) and description")
    run = sub.add_parser("run", help="run one method and write its history as JSON")
    run.add_argument("method")
    defaults = RunConfig()
    for f in dataclasses.fields(RunConfig):
        if f.name in ("method", "options"):
            continue
        default = getattr(defaults, f.name)
        if isinstance(default, bool):
            run.add_argument("--" + f.name.replace("_", "-"), dest=f.name, action=argparse.BooleanOptionalAction,
                             default=default, help=f"(default: {default})")
            continue
        kind = {int: int, float: float, str: str}.get(type(default), None)
        if f.name in ("local_steps", "train_samples"):
            kind = int
        run.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=kind, default=default,
                         help=f"(default: {default})")
    run.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                     help="a method option, e.g. --option mu=0.01 (repeatable)")
    run.add_argument("--out", type=Path, help="write {config, history} JSON here")
    run.add_argument("--no-cache", action="store_true", help="run even if the result is cached")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--engine", choices=("hetfl", "flower"), default="hetfl",
                     help="hetfl's round loop, or the same loop in Flower's simulation engine (not cached)")
    run.add_argument("--executor", choices=("process", "ray"), default=None,
                     help="where the run executes: this process, or a Ray task (default: $HETFL_EXECUTOR or process)")
    run.add_argument("--address", help="the Ray cluster's address (default: $HETFL_RAY_ADDRESS, else a local Ray)")
    return parser


def _list() -> None:
    from .data import DATASETS, PARTITIONS
    from .methods import METHODS
    from .models import MODELS

    width = max(map(len, [*METHODS, *DATASETS]))
    print("methods:")
    for name in sorted(METHODS):
        print(f"  {name:{width}s}  {METHODS[name].summary}")
    print("datasets:")
    for name, (_, text) in DATASETS.items():
        print(f"  {name:{width}s}  {text}")
    print("models:     " + ", ".join(MODELS))
    print("partitions: " + ", ".join(PARTITIONS))


def _describe(name: str) -> None:
    """One method: its summary, its options with their defaults, and its module's description."""
    import inspect

    from .methods import METHODS

    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; choose one of: {', '.join(sorted(METHODS))}")
    method = METHODS[name]
    print(f"{name}: {method.summary}")
    if method.defaults:
        print("options (--option KEY=VALUE; default shown):")
        for key, value in method.defaults.items():
            print(f"  {key}={json.dumps(value)}")
    else:
        print("options: none")
    doc = inspect.getdoc(inspect.getmodule(method))
    if doc:
        print()
        print(doc)


def main(argv=None) -> int:
    """Entry point; returns the exit code."""
    args = _build_parser().parse_args(argv)
    if args.command == "list":
        try:
            _describe(args.method) if args.method else _list()
        except ConfigError as exc:
            print(f"python -m hetfl_core: error: {exc}", file=sys.stderr)
            return 2
        return 0
    try:
        import torch

        torch.set_num_threads(1)
        fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig)
                  if f.name not in ("method", "options")}
        options = dict(_parse_option(o) for o in args.option)
        config = RunConfig(method=args.method, options=options, **fields).validate()
    except ConfigError as exc:
        print(f"python -m hetfl_core: error: {exc}", file=sys.stderr)
        return 2
    try:
        from .experiments import run_cached, sweep

        if args.engine == "flower":
            from .flower import run_flower

            result = run_flower([config])[0]
        elif (args.executor or os.environ.get("HETFL_EXECUTOR")) == "ray":
            result = sweep([config], executor="ray", address=args.address, progress=not args.quiet)[0]
        else:
            result = run_cached(config, progress=not args.quiet, use_cache=not args.no_cache)
    except HetflError as exc:
        print(f"python -m hetfl_core: error: {exc}", file=sys.stderr)
        return 1
    last = result["history"][-1]
    def pct(value):
        return "n/a" if value is None else f"{100 * value:.2f}%"

    print(f"{config.method}: {last['round']} rounds, global accuracy {pct(last['acc_global'])}, "
          f"personalised accuracy {pct(last['acc_personal'])}, simulated time {last['time_s']:.1f} s, "
          f"uplink {last['uplink_bits'] / 8e6:.2f} MB", file=sys.stderr)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return 0
