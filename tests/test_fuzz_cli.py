"""Bad command lines, generated from the declarations: every RunConfig field (its type and
range) and every option of every method (its type, range and choices). Each must exit with code 2
and exactly one line on stderr, with no traceback, before any training. A new field or
option is fuzzed without editing this file."""
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hetfl_core import RunConfig
from hetfl_core.cli import main
from hetfl_core.science.methods import METHODS

FAST = ["--dataset", "digits", "--rounds", "1", "--clients", "2", "--quiet", "--no-cache"]
#: fields a method may need changed from the defaults to validate on digits
VARIANTS = ({}, {"model": "wcnn"}, {"val_fraction": 0.1})


def _base(method: str) -> list[str]:
    """The fast flags under which ``method``'s defaults validate (so a failure is the bad value's)."""
    for fields in VARIANTS:
        try:
            RunConfig(method=method, dataset="digits", clients=2, rounds=1, **fields).validate()
        except Exception:
            continue
        return FAST + [a for k, v in fields.items() for a in ("--" + k.replace("_", "-"), str(v))]
    raise AssertionError(f"no fast variant validates {method}")


def _bad_numbers(meta: dict) -> list[str]:
    kind, low, high = meta["kind"], meta["low"], meta["high"]
    bad = ["abc", "1e308"] if kind is float else ["abc", "2.5", "1" * 32]
    if kind is float:
        bad += ["inf", "-inf", "nan"]
    if low is not None:
        bad.append(str(low if meta["low_open"] else low - 1))
    if high is not None:
        bad.append(str(high if meta["high_open"] else high * 10))
    return bad


def _field_cases():
    for f in dataclasses.fields(RunConfig):
        meta = f.metadata
        if f.name in ("method", "options") or "kind" not in meta:   # not a command-line field
            continue
        flag = "--" + f.name.replace("_", "-")
        if meta["kind"] is bool:
            yield pytest.param(["fedavg", *FAST, f"{flag}=3"], f.name, id=f"{f.name}=3")
        elif meta["kind"] is str:
            yield pytest.param(["fedavg", *FAST, flag, "no-such-name"], f.name, id=f"{f.name}=no-such-name")
        else:
            for value in _bad_numbers(meta):
                yield pytest.param(["fedavg", *FAST, flag, value], f.name, id=f"{f.name}={value}")


def _bad_option_values(spec) -> list[str]:
    """JSON texts that the option declaration ``spec`` must refuse: wrong types, non-finite
    numbers, values just outside its range, a name outside its choices."""
    default = spec.default
    if spec.choices:
        return ['"no-such-choice"', "3"]
    if isinstance(default, (list, tuple)):
        return ["0.5", "abc"] + (['["a"]'] if default and isinstance(default[0], (int, float)) else [])
    kind = spec.kind or type(default)
    if kind is type(None):
        return ["Infinity", "NaN"]
    bad = {bool: ["abc", "3"], int: ["abc", "2.5", "[1]"], float: ["abc", "[1]", "NaN", "Infinity", "1=2"],
           str: ["3", "[1]"]}[kind]
    if kind in (int, float):
        bad += [] if spec.optional or default is None else ["null"]
        if spec.low is not None:
            bad.append(repr(spec.low if spec.low_open else spec.low - 1))
        if spec.high is not None:
            bad.append(repr(spec.high if spec.high_open else spec.high * 10 + 1))
    return bad


def _option_cases():
    for name in sorted(METHODS):
        base = _base(name)
        yield pytest.param([name, *base, "--option", "no_such_option=1"], "no_such_option", id=f"{name}:unknown")
        for key, spec in METHODS[name].option_specs.items():
            for value in _bad_option_values(spec):
                yield pytest.param([name, *base, "--option", f"{key}={value}"], key, id=f"{name}:{key}={value}")


def _other_cases():
    long_name = "a" * 300 + ".json"
    for out in ("", "/proc/x.json", "/etc/hostname/x.json", "/dev/full", "/tmp", f"/tmp/{long_name}"):
        yield pytest.param(["fedavg", *FAST, "--out", out], "--out", id=f"out={out[:20]}")
    yield pytest.param(["fedavg", *FAST, "--option", "mu"], "--option", id="option-without-value")
    yield pytest.param(["fedavg", *FAST, "--lr", "-inf"], "lr", id="lr=-inf-as-value")
    yield pytest.param(["no-such-method", *FAST], "method", id="unknown-method")
    for text in ("--model charlstm", "--model lenet5", "--partition natural", "--clients 5000",
                 "--partition shards --classes-per-client 11"):
        yield pytest.param(["fedavg", *FAST, *text.split()], text.split()[-2].lstrip("-").replace("-", "_"),
                           id=f"misfit{text}")


CASES = [*_field_cases(), *_option_cases(), *_other_cases()]


def test_enough_cases():
    assert len(CASES) >= 60


@pytest.mark.parametrize("argv, name", CASES)
def test_bad_invocation_exits_2_in_one_line(argv, name, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HETFL_CACHE", str(tmp_path))
    try:
        code = main(["run", *argv])
    except SystemExit as exc:          # argparse's own refusals
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert name in err or name.replace("_", "-") in err, err      # the line names the culprit


@pytest.mark.parametrize("args", [["--seed", "-1"], ["--option", "mu=abc"]])
@pytest.mark.slow
def test_real_process_exits_2_in_one_line(args, tmp_path):
    env = {**os.environ, "HETFL_CACHE": str(tmp_path), "PYTHONPATH": str(Path(__file__).parents[1])}
    proc = subprocess.run([sys.executable, "-m", "hetfl_core", "run", "fedprox", *FAST, *args],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
