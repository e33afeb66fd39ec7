"""Bit-for-bit evidence that a change left every method's numbers alone.

Every registered method runs one small configuration (:data:`BASE`, a second on digits),
and so does every *variant*: each non-default choice of an option declared with
``choices`` and each boolean option flipped, generated from the methods' declarations, so a
new method or option is covered without editing this file. The histories are compared with
exact float equality of every field.

``python tools/equivalence.py record [--out FILE]``
    writes every history (default: ``tests/golden/histories.json``, the goldens
    ``tests/test_golden.py`` compares against), with the torch version and CPU kernel path
    that computed them.
``python tools/equivalence.py check [--against FILE | --against-commit REV] [--only NAME ...]``
    recomputes them from this checkout and prints, per configuration, ``equal`` or the first
    differing round and field, then ``N of N methods bit-identical``; the exit status is 1
    on any difference. ``--against-commit REV`` computes REV's histories in a temporary
    ``git worktree`` of REV (this file's configurations, REV's package), so "these histories
    equal those of commit X" is one command.
``python tools/equivalence.py print``
    writes what ``record`` stores to stdout, computed by the ``hetfl_core`` that imports
    first (``record`` and ``check`` run it in a fresh process with this checkout first on
    ``PYTHONPATH``, ``--against-commit`` with REV's, so an installed copy never stands in).

Bit-for-bit holds on one machine (one torch, one CPU kernel path, one torch thread); across
CPUs the last bits of float32 sums differ, which ``tests/test_golden.py`` allows for.

Importable (by file path; this file needs only ``hetfl_core``'s public API, so it runs
against older commits too): :func:`configurations`, :func:`histories`, :func:`digest`,
:func:`first_difference`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "histories.json"
#: the run every configuration shares: four clients on digits, three rounds of two steps
BASE = dict(dataset="digits", model="cnn", partition="dirichlet", alpha=0.5, clients=4, rounds=3,
            local_steps=2, batch_size=16, lr=0.05, heterogeneity="medium", val_fraction=0.1, seed=3)
#: what a method needs besides :data:`BASE` (Flanc and Heroes compose one of their own models;
#: FedBABU fine-tunes one epoch, not five, to keep the run short)
NEEDS = {"flanc": {"model": "wcnn"}, "heroes": {"model": "wcnn"},
         "fedbabu": {"options": {"finetune_epochs": 1.0}}}
#: what an option's value needs besides itself ("option=value" -> the other options)
COMPANIONS = {"tau_mode=eps": {"eps": 2.0}, "prune_scope=all": {"allocation": "fixed"},
              "sampler=fixed": {"fixed_rates": [0.5, 1.0]}}


def variants(cls) -> dict[str, dict]:
    """``{suffix: options}`` of a method class: each option declared with ``choices``, at every
    choice but its default, and each boolean option at the value it does not default to
    (with the options the value needs, :data:`COMPANIONS`)."""
    found = {}
    for key, spec in sorted(cls.option_specs.items()):
        if isinstance(spec.default, bool):
            values = [not spec.default]
        else:
            values = [c for c in getattr(spec, "choices", ()) if c != spec.default]
        for value in values:
            suffix = f"{key}={json.dumps(value).strip(chr(34))}"
            found[suffix] = {key: value, **COMPANIONS.get(suffix, {})}
    return found


def configurations(methods=None) -> dict:
    """``{name: RunConfig}``: every registered method (or those in ``methods``, given by
    registered name) at :data:`BASE`, and its :func:`variants` as ``"method[option=value]"``."""
    from hetfl_core import RunConfig
    from hetfl_core.science.methods import METHODS

    chosen = sorted(METHODS) if methods is None else list(methods)
    unknown = [m for m in chosen if m not in METHODS]
    if unknown:
        raise SystemExit(f"equivalence: no registered method {', '.join(unknown)}")
    out = {}
    for method in chosen:
        settings = {**BASE, **NEEDS.get(method, {})}
        own = settings.pop("options", {})
        out[method] = RunConfig(method=method, options=own, **settings)
        for suffix, options in variants(METHODS[method]).items():
            out[f"{method}[{suffix}]"] = RunConfig(method=method, options={**own, **options}, **settings)
    return out


def histories(methods=None) -> dict[str, list]:
    """``{name: history}`` of every configuration (:func:`configurations`), each history as
    JSON stores it (floats round-trip exactly). A configuration the code refuses or fails
    on gives ``["error", "<its one line>"]`` instead, which no history equals."""
    from hetfl_core import run

    out = {}
    for name, config in configurations(methods).items():
        try:
            out[name] = json.loads(json.dumps(run(config)["history"]))
        except Exception as exc:      # an older commit may refuse a newer option
            out[name] = ["error", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"]
    return out


def digest(found: dict) -> str:
    """A sha256 (hex) of ``found`` as canonical JSON (sorted keys, no spaces, floats as
    Python writes them back exactly): equal histories, equal digests."""
    text = json.dumps(found, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def first_difference(value, expected, where: str = "") -> str | None:
    """Where ``value`` first differs from ``expected`` (``"round 2: loss 2.29 != 2.30"``),
    exact equality of every float, ``None`` if nowhere; a history's list index is its round."""
    if isinstance(expected, dict) and isinstance(value, dict):
        for key in list(expected) + [k for k in value if k not in expected]:
            if key not in value or key not in expected:
                return f"{where}{key} is {'missing' if key not in value else 'new'}"
            found = first_difference(value[key], expected[key], f"{where}{key}.")
            if found:
                return found
        return None
    if isinstance(expected, list) and isinstance(value, list):
        if len(value) != len(expected):
            return f"{where.rstrip('.') or 'history'} has {len(value)} entries, not {len(expected)}"
        for i, (v, e) in enumerate(zip(value, expected)):
            label = f"round {e['round']}: " if not where and isinstance(e, dict) and "round" in e \
                else f"{where.rstrip('.')}[{i}]."
            found = first_difference(v, e, label)
            if found:
                return found
        return None
    if type(value) is type(expected) and (value == expected or value != value and expected != expected):
        return None
    return f"{where.rstrip('.')} {value!r} != {expected!r}"


def compare(found: dict, expected: dict) -> tuple[list[str], int, int]:
    """The report lines of ``found`` against ``expected``, the number of configurations equal
    and the number compared (a configuration on one side only counts as a difference)."""
    lines, equal = [], 0
    names = sorted(set(found) | set(expected))
    width = max(map(len, names), default=0)
    for name in names:
        if name not in expected:
            why = "not in the other histories"
        elif name not in found:
            why = "missing here"
        else:
            why = first_difference(found[name], expected[name])
        equal += why is None
        lines.append(f"{name:<{width}}  {'equal' if why is None else why}")
    return lines, equal, len(names)


def in_a_process(root: Path, methods=None, env_changes: dict | None = None) -> dict:
    """The histories of the package in ``root`` (this file's configurations), computed in a
    fresh interpreter with ``env_changes`` (``None`` values unset), as ``record`` stores them
    (``torch``, ``cpu_capability``, ``digest``, ``histories``)."""
    env = dict(os.environ)
    for key, value in (env_changes or {}).items():
        env.pop(key, None) if value is None else env.__setitem__(key, value)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    only = ["--only", *methods] if methods else []
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "print", *only], env=env,
                          cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"equivalence: computing the histories in {root} failed:\n{done.stderr[-3000:]}")
    body = json.loads(done.stdout)
    package = Path(body.pop("package"))
    if package.parent != Path(root).resolve():      # an installed copy took the import
        raise SystemExit(f"equivalence: the histories came from {package}, not from {root}")
    return body


def of_commit(rev: str, methods=None) -> dict:
    """The histories of commit ``rev``, computed in a temporary detached ``git worktree``."""
    with tempfile.TemporaryDirectory(prefix="equivalence-") as tmp:
        tree = Path(tmp) / "tree"
        added = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev],
                               capture_output=True, text=True)
        if added.returncode != 0:
            raise SystemExit(f"equivalence: no worktree of {rev!r}: {added.stderr.strip().splitlines()[-1]}")
        try:
            return in_a_process(tree, methods)["histories"]
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           capture_output=True)


def recorded_with() -> dict:
    """The torch version and CPU kernel path computing here (bit-for-bit holds within one)."""
    import torch

    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def load(path: Path) -> dict:
    """The histories stored in ``path`` (as :func:`main`'s ``record`` writes them)."""
    if not path.is_file():
        raise SystemExit(f"equivalence: no file {path}; write it with: python tools/equivalence.py record")
    return json.loads(path.read_text())["histories"]


def main(argv=None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="tools/equivalence.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    record = sub.add_parser("record", help="write every configuration's history")
    record.add_argument("--out", type=Path, default=GOLDEN)
    check = sub.add_parser("check", help="recompute and compare bit for bit")
    against = check.add_mutually_exclusive_group()
    against.add_argument("--against", type=Path, default=GOLDEN, metavar="FILE")
    against.add_argument("--against-commit", metavar="REV")
    printing = sub.add_parser("print", help="the histories as JSON on stdout")
    for command in (record, check, printing):
        command.add_argument("--only", nargs="+", metavar="METHOD", help="these registered methods only")
    args = parser.parse_args(argv)

    if args.command == "print":
        import hetfl_core

        found = histories(args.only)
        package = str(Path(hetfl_core.__file__).resolve().parent)
        print(json.dumps({**recorded_with(), "digest": digest(found), "histories": found, "package": package}))
        return 0
    if args.command == "record":
        found = in_a_process(ROOT, args.only)["histories"]
        failed = [f"{name}: {found[name][1]}" for name in found if found[name][:1] == ["error"]]
        if failed:
            print("equivalence: not recorded, these configurations fail:\n" + "\n".join(failed))
            return 1
        body = {**recorded_with(), "digest": digest(found), "histories": found}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(body, indent=0) + "\n")
        print(f"wrote {len(found)} histories to {args.out} (digest {digest(found)[:12]})")
        return 0
    if args.against_commit:
        expected, other = of_commit(args.against_commit, args.only), f"commit {args.against_commit}"
    else:
        expected, other = load(args.against), str(args.against)
        if args.only:       # "method" and its variants "method[option=value]"
            expected = {k: v for k, v in expected.items() if k.split("[")[0] in args.only}
    found = in_a_process(ROOT, args.only)["histories"]
    lines, equal, compared = compare(found, expected)
    print("\n".join(lines))
    print(f"{equal} of {compared} methods bit-identical to {other} (each option variant counted "
          f"as a method)")
    return 0 if equal == compared else 1


if __name__ == "__main__":
    sys.exit(main())
