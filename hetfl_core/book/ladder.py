"""The ladder: each headline claim judged again on a ladder of training budgets.

A chapter judges its claims at the book's scale, a laptop's budget; a claim that fails
there may only have trained too little. The ladder reruns the runs behind each headline
claim on the same seeds at growing budgets (:data:`RUNGS`): the book's configuration, then
2, 4 and 8 times its rounds (local epochs rising toward the paper's where the paper's are
more), and a top rung at the paper's federation (its clients, participation, every
training sample, its rounds and epochs). Each claim's per-seed value is computed as the
chapter computes it and judged by the same rule (:func:`hetfl_core.book.report.judge`).

The runs are computed once, by ``tools/ladder.py``, and stored in the repository with
their provenance (:func:`store_dir`): ``runs/<key>.json`` per finished run, written
atomically the moment it finishes, ``<chapter>.json``, the chapter's ladder ledger, and
``plans/<chapter>.json``, the estimated cost of its runs (``tools/ladder.py plan``).
The chapters only read the store (:func:`show_ladder`, :func:`ladder_sentence`,
:func:`ladder_cost`): a result whose package source has changed since it ran is marked
stale (unless the golden histories of every method are unchanged,
:func:`equivalence_digest`), with the command that refreshes it.

A claim's rivals are fixed here, in :data:`SPECS`, before any ladder run: where the chapter
pairs the method with the best of many, the book-scale best and the paper's strongest
of the chapter's baselines, each judged on its own.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import shlex
import sys
import textwrap
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..runtime.config import RunConfig
from ..science.errors import ConfigError
from .ladder_specs import PTS, RUNGS, SPECS, ClaimSpec, register  # noqa: F401  (the claims, registered)
from .report import Bounded, judge, judge_cases, plural

__all__ = ["RUNGS", "ClaimSpec", "SPECS", "register", "chapters", "specs_of", "rung_config",
           "pending", "claim_name", "store_dir", "run_key", "compact_history", "store_run", "stored_runs",
           "is_current", "equivalence_digest", "ladder_values", "build_ledger", "write_ledgers",
           "load_ledger", "show_ladder", "ladder_sentence", "ladder_markdown", "arena_settling",
           "longer_training_note", "matching_claim", "plan_path", "write_plan", "load_plan", "ladder_cost", "show_ladder_cost",
           "probe_path", "load_probe", "divergence_note", "divergence_rows", "divergence_table",
           "twin_ends",
           "kendall_tau", "leaderboards", "left_off_boards", "settling_sentence", "plan_rows", "plan_markdown",
           "SETTLED_TAU", "OPTIONAL_HISTORY_FIELDS", "STORE_ENV", "SPECS_ENV"]

#: the rounds each rung below the paper's runs, as a multiple of the book scale's
FACTORS = {"book": 1, "x2": 2, "x4": 4, "x8": 8}
#: where the store lies: ``$HETFL_LADDER_STORE``, or ``results/ladder`` of the repository
STORE_ENV = "HETFL_LADDER_STORE"
#: a Python file whose :func:`register` calls add claims to :data:`SPECS` (tests use it)
SPECS_ENV = "HETFL_LADDER_SPECS"
#: the history fields a stored run keeps (what the claims' queries read); a run stored
#: before a field was added lacks it (its record names its own ``fields``), which only a
#: claim that reads it (:attr:`ClaimSpec.fields`) minds
HISTORY_FIELDS = ("round", "time_s", "acc_personal", "acc_global", "uplink_bits", "downlink_bits",
                  "idle_s", "participants")
#: stored fields computed from a whole history row: ``participants`` is the number of the
#: round's participants (its ``clients`` list, which is not stored)
STORED_DERIVED = {
    "participants": lambda row: len(row["clients"]) if row.get("clients") is not None
    else row.get("participants"),
}
#: the history fields a stored run keeps after those where its history has them (a method's
#: own metrics, e.g. OFA-FL's accuracy per density ratio); a record without one counts as
#: not stored only for a claim that reads it (:attr:`ClaimSpec.fields`)
OPTIONAL_HISTORY_FIELDS = ("acc_ratios",)


_LOADED_EXTRA: set[str] = set()


def _load_extra_specs() -> None:
    """Import the file named by ``$HETFL_LADDER_SPECS`` once (its ``register`` calls)."""
    path = os.environ.get(SPECS_ENV)
    if not path or path in _LOADED_EXTRA:
        return
    if not Path(path).is_file():
        raise ConfigError(f"${SPECS_ENV} names {path}, which is not a file")
    _LOADED_EXTRA.add(path)
    module_spec = importlib.util.spec_from_file_location("hetfl_ladder_extra_specs", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)


def chapters() -> list[str]:
    """The chapters with claims on the ladder."""
    _load_extra_specs()

    return list(SPECS)


def specs_of(chapter: str | None = None, rung: str | None = None) -> list[ClaimSpec]:
    """The claims of ``chapter`` (every chapter's for ``None``) that have ``rung`` (any for
    ``None``); an unknown chapter, or a rung none of its claims has, is a one-line
    :class:`ConfigError`."""
    known = chapters()
    if chapter is not None and chapter not in known:
        raise ConfigError(f"no ladder for chapter {chapter!r}; chapters: {', '.join(known)}")
    selected = [chapter] if chapter else known
    every_rung = sorted({r for c in selected for s in SPECS[c] for r in s.rungs}, key=_rung_order)
    if rung is not None and rung not in every_rung:
        raise ConfigError(f"unknown rung {rung!r}" + (f" for {chapter}" if chapter else "")
                          + f"; rungs: {', '.join(every_rung)}")
    return [s for c in ([chapter] if chapter else known) for s in SPECS[c]
            if rung is None or rung in s.rungs]


def _rung_order(rung: str) -> int:
    return RUNGS.index(rung) if rung in RUNGS else len(RUNGS)


# -- the rungs --------------------------------------------------------------------------------
def rung_config(spec: ClaimSpec, rung: str, label: str, seed: int) -> RunConfig:
    """The configuration of ``label``'s run on ``seed`` at ``rung``: the book scale's with
    :data:`FACTORS` times its rounds and its local epochs (or steps) multiplied as much but
    no further than the paper's, or the paper scale's (evaluated every
    :attr:`ClaimSpec.paper_eval_every` rounds where given, the global model after the last
    two rounds only where :attr:`ClaimSpec.paper_global_last_two`), completed by
    :attr:`ClaimSpec.adapt` where given. Always on ``device="cpu"``: the
    device a run is computed on is recorded in its provenance, not in its key."""
    if rung not in spec.rungs:
        raise ConfigError(f"claim {spec.ref!r} of {spec.chapter} has no rung {rung!r}; "
                          f"rungs: {', '.join(spec.rungs)}")
    name, options, *level = spec.methods[label]
    level = level[0] if level else {}
    if rung == "paper":
        config = spec.setting("paper")
        if spec.paper_eval_every is not None:
            config = config.replace(eval_every=spec.paper_eval_every)
        if spec.paper_global_last_two and config.rounds > 2:
            config = config.replace(eval_global_every=config.rounds - 1)
    else:
        base, paper, k = spec.setting(spec.base_scale), spec.setting("paper"), FACTORS[rung]
        changes = {"rounds": base.rounds * k}
        if base.local_steps is not None:
            top = paper.local_steps or base.local_steps
            changes["local_steps"] = max(base.local_steps, min(base.local_steps * k, top))
        elif paper.local_epochs > base.local_epochs:
            changes["local_epochs"] = min(base.local_epochs * k, paper.local_epochs)
        config = base.replace(**changes)
    if callable(level):            # changes that follow the rung's setting (half its rounds)
        level = level(config)
    # the claim's options completed by the rung's own (a schedule the setting holds)
    config = config.replace(method=name, seed=seed, device="cpu", **level).with_options(**options)
    return spec.adapt(config) if spec.adapt is not None else config


@dataclass(frozen=True)
class PlannedRun:
    """One run the ladder needs: its key, configuration, the claims and rung it serves, and
    the history fields beyond every stored run's that those claims read (:attr:`ClaimSpec.fields`)."""

    key: str
    config: RunConfig
    rung: str
    claims: tuple[str, ...]
    fields: tuple[str, ...] = ()


def run_key(config: RunConfig) -> str:
    """A stored run's name: the method and a hash of its whole configuration (on the CPU,
    :func:`rung_config`), e.g. ``fedlps-3f2a...``; not of the package's source, which its
    provenance records (:func:`is_current`)."""
    import re

    method = re.sub(r"[^A-Za-z0-9._+-]", "_", config.method).lstrip(".")[:60] or "method"
    return f"{method}-{config.replace(device='cpu').key()}"


def claim_name(spec: ClaimSpec) -> str:
    """How a planned run names a claim it serves: ``"chapter: ref"``."""
    return f"{spec.chapter}: {spec.ref}"


def planned_runs(chapter: str | None = None, rung: str | None = None) -> list[PlannedRun]:
    """Every run the ladder's claims need, in the order they run: cheapest rung first, and
    within a rung claim by claim, all of a claim's methods and seeds together; a run two
    claims share appears once, where the first needs it."""
    specs = specs_of(chapter, rung)
    order: dict[str, PlannedRun] = {}
    for r in sorted({r for s in specs for r in s.rungs}, key=_rung_order):
        if rung is not None and r != rung:
            continue
        for spec in specs:
            if r not in spec.rungs:
                continue
            for label in spec.methods:
                for seed in spec.seeds:
                    config = rung_config(spec, r, label, seed)
                    key = run_key(config)
                    claim = claim_name(spec)
                    if key in order:
                        if claim not in order[key].claims:
                            known = order[key]
                            order[key] = PlannedRun(key, config, r, known.claims + (claim,),
                                                    tuple(dict.fromkeys(known.fields + spec.fields)))
                    else:
                        order[key] = PlannedRun(key, config, r, (claim,), tuple(spec.fields))
    return list(order.values())


# -- the store ----------------------------------------------------------------------------------
def store_dir(directory: str | os.PathLike | None = None) -> Path:
    """The ladder's store: ``directory``, ``$HETFL_LADDER_STORE``, or ``results/ladder`` of
    the repository."""
    if directory is not None:
        return Path(directory)
    return Path(os.environ.get(STORE_ENV) or Path(__file__).resolve().parents[2] / "results" / "ladder")


def _rounded(value):
    """A history number kept compact: an integer as is, a float to 6 significant digits, a
    list (a per-ratio accuracy) element by element."""
    if isinstance(value, float):
        return float(f"{value:.6g}") if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def stored_fields(history: list[dict]) -> tuple[str, ...]:
    """The fields a stored run keeps: :data:`HISTORY_FIELDS`, then each of
    :data:`OPTIONAL_HISTORY_FIELDS` that some row of ``history`` holds (not ``None``)."""
    extra = tuple(f for f in OPTIONAL_HISTORY_FIELDS if any(row.get(f) is not None for row in history))
    return HISTORY_FIELDS + extra


def compact_history(history: list[dict], fields=HISTORY_FIELDS) -> list[list]:
    """A run's history as rows of ``fields`` (a list per round; a field of
    :data:`STORED_DERIVED` computed from the row), floats to 6 significant digits: a few
    kilobytes where the whole history (per-client rows) is megabytes."""
    return [[_rounded(STORED_DERIVED[f](row) if f in STORED_DERIVED else row.get(f)) for f in fields]
            for row in history]


def has_fields(record: dict, fields) -> bool:
    """Whether a stored run keeps every history field of ``fields`` (a run stored before a
    field was added to :data:`HISTORY_FIELDS` lacks it)."""
    return set(fields) <= set(record.get("fields", ()))


def expand_history(stored: dict) -> list[dict]:
    """The history rows (dicts) of a stored run, as :mod:`hetfl_core.book.report`'s queries read them."""
    fields = stored["fields"]
    return [dict(zip(fields, row)) for row in stored["history"]]


def store_run(result: dict, key: str, command: str, wall_s: float, digest: str | None,
              directory=None) -> Path:
    """Write one finished run to ``runs/<key>.json`` of the store, atomically (whole or not
    at all): its configuration, its compact history (:func:`compact_history`) and its
    provenance (:func:`hetfl_core.book.provenance`, with the equivalence digest); the
    optional fields (:data:`OPTIONAL_HISTORY_FIELDS`) only where the history has them; a run
    that diverged keeps ``diverged``, the round and client where its loss left the reals."""
    from .chapter import provenance
    from ..runtime.experiments import write_atomic

    how = provenance(command, wall_s)
    how["equivalence_digest"] = digest
    if result.get("data"):
        how["data"] = result["data"]
    fields = stored_fields(result["history"])
    record = {"key": key, "config": result["config"], "fields": list(fields),
              "history": compact_history(result["history"], fields), "provenance": how}
    if result.get("diverged"):
        record["diverged"] = result["diverged"]
    path = store_dir(directory) / "runs" / f"{key}.json"
    write_atomic(path, json.dumps(record, separators=(",", ":")).encode())
    return path


#: the last read of each store's run files: folder -> {file name: (its size, mtime and inode,
#: its record or ``None`` where it is not one)}
_STORED: dict[str, dict[str, tuple[tuple, dict | None]]] = {}


def stored_runs(directory=None) -> dict[str, dict]:
    """Every stored run of the store, by key (a file that is not a whole record is left out).

    A chapter asks for them many times, and the tool after every run it stores: a file is
    read again only where it is new or changed since the last read in this process (its
    size, modification time and inode tell); the caller gets a dict of its own, the records
    are shared and read only."""
    folder = store_dir(directory) / "runs"
    try:
        found = sorted((e.name, e.stat()) for e in os.scandir(folder) if e.name.endswith(".json") and e.is_file())
    except OSError:                                  # no store yet
        return {}
    before = _STORED.get(str(folder), {})
    now = {}
    for name, st in found:
        signature = (st.st_size, st.st_mtime_ns, st.st_ino)
        known = before.get(name)
        now[name] = known if known is not None and known[0] == signature else \
            (signature, _read_run(folder / name))
    _STORED[str(folder)] = now
    return {name[:-len(".json")]: record for name, (_, record) in now.items() if record is not None}


def _read_run(path: Path) -> dict | None:
    """The stored run in ``path``, or ``None`` where the file is not a whole record of one."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(record, dict) and record.get("key") == path.stem and "history" in record
    return record if ok else None


# -- staleness ----------------------------------------------------------------------------------
_DIGEST: dict[str, str | None] = {}


def _equivalence_module():
    """``tools/equivalence.py`` of the repository, where it exists (it computes every
    registered method's golden history), or ``None``."""
    path = Path(__file__).resolve().parents[2] / "tools" / "equivalence.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("hetfl_equivalence", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module if hasattr(module, "histories") and hasattr(module, "digest") else None


def equivalence_digest(directory=None, compute: bool = True) -> str | None:
    """The digest of every registered method's golden history for the current source
    (``tools/equivalence.py``'s ``digest(histories())``), or ``None`` where that tool is
    missing. Computed once per process and kept in the store's ``digests.json`` by source
    hash, so a later process reads it; ``compute=False`` only reads (a chapter never trains)."""
    from ..runtime.experiments import source_hash, write_atomic

    now = source_hash()
    if now in _DIGEST:
        return _DIGEST[now]
    path = store_dir(directory) / "digests.json"
    known = json.loads(path.read_text()) if path.is_file() else {}
    if now in known or not compute:
        _DIGEST[now] = known.get(now)
        return _DIGEST[now]
    module = _equivalence_module()
    digest = module.digest(module.histories()) if module is not None else None
    _DIGEST[now] = digest
    if digest is not None:
        known[now] = digest
        write_atomic(path, json.dumps(known, indent=1, sort_keys=True).encode())
    return digest


def _current_data(dataset: str) -> str | None:
    """The fingerprint of ``dataset`` as this process loads it, or ``None`` where it cannot
    be loaded here (then no stored run on it can be checked, and none is current)."""
    from ..science.data.fingerprint import dataset_fingerprint
    from ..science.errors import ConfigError, DatasetUnavailable

    try:
        return dataset_fingerprint(dataset)
    except (ConfigError, DatasetUnavailable, OSError):
        return None


def is_current(record: dict, digest: str | None, fingerprints: dict | None = None) -> bool:
    """Whether a stored run still stands for the current code and data: it was trained on
    the data a run loads now (the provenance's ``data``, the fingerprint of the dataset in
    the process that trained it, equals :func:`_current_data`; a run stored without one is
    not current), and its source hash is the current
    :func:`~hetfl_core.runtime.experiments.source_hash`, or its equivalence digest equals
    the current one (``digest``; every method's golden history unchanged). ``fingerprints``,
    where given, keeps each dataset's current fingerprint between calls (computing one may
    load the data)."""
    from ..runtime.experiments import source_hash

    how = record.get("provenance", {})
    code = how.get("source_hash") == source_hash() or (
        digest is not None and how.get("equivalence_digest") == digest)
    if not code or how.get("data") is None:     # the data last: reading them may load them
        return False
    dataset = record.get("config", {}).get("dataset", "")
    if fingerprints is None:
        return how["data"] == _current_data(dataset)
    if dataset not in fingerprints:
        fingerprints[dataset] = _current_data(dataset)
    return how["data"] == fingerprints[dataset]


def refresh_command(chapter: str, rung: str | None = None) -> str:
    """The command that computes (or refreshes) a chapter's ladder, run from the repository's root."""
    return f"python tools/ladder.py run --chapter {chapter}" + (f" --rung {rung}" if rung else "")


# -- the ledger -----------------------------------------------------------------------------------
def ladder_values(spec: ClaimSpec, rung: str, runs: Mapping[str, dict], current=None) -> dict | None:
    """The claim's per-seed values at ``rung`` against each rival, from stored runs (key ->
    record); for a claim judged case by case (:attr:`ClaimSpec.per_case`), per rival a dict
    from each case to its per-seed values. A rival is left out while a run its value reads
    (:meth:`ClaimSpec.labels_read`) is not stored or lacks a history field the claim reads
    (:attr:`ClaimSpec.fields`); ``None`` when every rival is. Where a run a rival's value
    reads diverged, its value is ``None`` and ``diverged[rival]`` names the runs (label,
    seed, where), whether or not its other runs are stored (the ladder does not compute
    those, :func:`pending`). ``keys[rival]`` are the runs behind a rival's row (a diverged
    row's: the diverged runs), ``keys`` the union. Given ``current(record)`` (whether a
    stored run stands for the current code, :func:`is_current`), a current diverged run is
    reason enough and a stale one is named only where no current one is."""
    stored: dict[str, list[str]] = {}
    missing: set[str] = set()
    failed: dict[str, list[tuple[str, str]]] = {}
    results: dict[str, list[dict]] = {}
    for label in spec.methods:
        results[label] = []
        for seed in spec.seeds:
            key = run_key(rung_config(spec, rung, label, seed))
            if key not in runs or not has_fields(runs[key], spec.fields):
                missing.add(label)
                continue
            stored.setdefault(label, []).append(key)
            if runs[key].get("diverged"):
                failed.setdefault(label, []).append((key, f"{label}, seed {seed}: {runs[key]['diverged']}"))
            else:
                results[label].append({"config": runs[key]["config"], "history": expand_history(runs[key])})
    values, diverged, rival_keys = {}, {}, {}
    for rival in spec.rivals:
        read = spec.labels_read(rival)
        bad = [d for label in read for d in failed.get(label, [])]
        if bad:            # no paired value where a run has none: the row is not judged
            now = [d for d in bad if current is not None and current(runs[d[0]])]
            reasons = now or bad
            values[rival], diverged[rival] = None, [why for _, why in reasons]
            rival_keys[rival] = [k for k, _ in reasons]
        elif not missing.intersection(read):
            got = spec.value(results, rival)
            rival_keys[rival] = [k for label in read for k in stored[label]]
            if not spec.per_case:
                values[rival] = _per_seed_values(got)
                continue
            if not isinstance(got, Mapping) or not got:
                raise ConfigError(f"claim {spec.ref!r} of {spec.chapter} is judged case by case, but "
                                  f"its value against {rival} is not a dict of cases")
            values[rival] = {case: _per_seed_values(v) for case, v in got.items()}
    if not values:
        return None
    keys = list(dict.fromkeys(k for ks in rival_keys.values() for k in ks))
    return {"keys": keys, "values": values, "diverged": diverged, "rival_keys": rival_keys}


def _per_seed_values(values):
    """A claim's per-seed values as the rule takes them: a :class:`~hetfl_core.book.report.Bounded`
    (a target never reached, bounded by the run's horizon) kept as it is, else floats."""
    return values if isinstance(values, Bounded) else np.asarray(values, float)


def _json_number(v: float):
    """A float for JSON: ``None`` for nan, ``"inf"``/``"-inf"`` for the infinities."""
    return None if math.isnan(v) else (v if math.isfinite(v) else ("inf" if v > 0 else "-inf"))


def _shown(values) -> list:
    """Per-seed values as the ledger stores them (JSON numbers; a bound's shown value)."""
    shown = values.shown if isinstance(values, Bounded) else values
    return [_json_number(v) for v in map(float, shown)]


def _judged_row(spec: ClaimSpec, values) -> dict:
    """One rival's judgement at one rung: the verdict by the chapter's rule and what it
    rests on. A plain claim: its per-seed values, :func:`~hetfl_core.book.report.judge`'s
    verdict and interval. A claim judged case by case: per case its per-seed values, verdict
    and interval (:func:`~hetfl_core.book.report.judge_cases`'s, at its Bonferroni levels), and
    as the row's values, per seed, the number of cases whose value passes the criterion (as
    the chapter's ledger shows them)."""
    if not spec.per_case:
        j = judge(values, spec.criterion)
        return {"values": _shown(values), "bounded": int(j.bounded), "verdict": j.verdict,
                "method": j.method, "interval": list(j.interval) if j.interval else None}
    k = len(values) if spec.k is None else spec.k
    j = judge_cases(values, k, spec.criterion)
    cases = {}
    for name, v in values.items():
        info = j.cases[name]
        cases[name] = {"values": _shown(v),
                       "bounded": int((v.low != v.high).sum()) if isinstance(v, Bounded) else 0,
                       "verdict": info["verdict"],
                       "interval": [_json_number(float(b)) for b in info["interval"]]
                       if info["interval"] else None}
    shown = [v.shown if isinstance(v, Bounded) else v for v in values.values()]
    passing = np.sum([[spec.criterion(x) for x in v] for v in shown], axis=0)
    return {"values": [int(n) for n in passing], "bounded": int(j.bounded), "verdict": j.verdict,
            "method": j.method, "interval": None, "k": k, "cases": cases}


def _diverged_row(spec: ClaimSpec, diverged: list[str]) -> dict:
    """A rung not judged because a run it needs diverged: no values, the verdict
    ``diverged`` and the runs that did (label, seed, round and client)."""
    return {"values": [], "bounded": 0, "verdict": "diverged", "method": "none", "interval": None,
            "diverged": list(diverged), **({"k": spec.k, "cases": {}} if spec.per_case else {})}


def build_ledger(chapter: str, directory=None, digest: str | None = None) -> dict:
    """A chapter's ladder ledger from the stored runs: per claim, per rival and rung, the
    per-seed values, the verdict (:func:`~hetfl_core.book.report.judge`, or for a claim judged
    case by case :func:`~hetfl_core.book.report.judge_cases` with each case's values and verdict:
    the chapter's rule), the interval, whether a run behind it is stale, and the provenance
    of its runs (commits, source hashes, devices, dates, wall time)."""
    runs = stored_runs(directory)
    claims, fingerprints = [], {}
    for spec in specs_of(chapter):
        rows = {}
        for rung in spec.rungs:
            got = ladder_values(spec, rung, runs, lambda r: is_current(r, digest, fingerprints))
            if got is None:
                continue
            # the budget: the claim's method's run (the first run where no label is the method)
            label = spec.method if spec.method in spec.methods else next(iter(spec.methods))
            config = rung_config(spec, rung, label, spec.seeds[0])
            for rival, values in got["values"].items():
                keys = got["rival_keys"][rival]
                records = [runs[k] for k in keys]
                how = [r["provenance"] for r in records]
                stale = [r["key"] for r in records if not is_current(r, digest)]
                rows.setdefault(rival, {})[rung] = {
                    **(_diverged_row(spec, got["diverged"][rival]) if values is None
                       else _judged_row(spec, values)),
                    "stale": bool(stale), "keys": keys,
                    "budget": {"rounds": config.rounds, "local_epochs": config.local_epochs,
                               "local_steps": config.local_steps, "clients": config.clients,
                               "participation": config.participation,
                               "train_samples": config.train_samples},
                    "provenance": {"commits": sorted({h["commit"] for h in how}),
                                   "source_hashes": sorted({h["source_hash"] for h in how}),
                                   "devices": sorted({h["device"] for h in how}),
                                   "dates": [min(h["date"] for h in how), max(h["date"] for h in how)],
                                   "wall_s": round(sum(h["wall_s"] for h in how), 1)}}
        claims.append({"ref": spec.ref, "statement": spec.statement, "cell": spec.cell,
                       "paper": spec.paper, "paper_value": spec.paper_value,
                       "criterion": spec.criterion.text, "bound": spec.criterion.bound,
                       "op": spec.criterion.op, "log": spec.criterion.log, "unit": spec.unit,
                       "method": spec.method,
                       "per_case": spec.per_case, "k": spec.k,
                       "rivals": list(spec.rivals), "seeds": list(spec.seeds),
                       "rungs": list(spec.rungs), "results": rows})
    return {"chapter": chapter, "claims": claims}


def write_ledgers(chapter: str | None = None, directory=None, digest: str | None = None) -> list[Path]:
    """Recompute and write ``<chapter>.json`` of the store for ``chapter`` (every chapter for
    ``None``) from the stored runs."""
    from ..runtime.experiments import write_atomic

    paths = []
    for name in ([chapter] if chapter else chapters()):
        path = store_dir(directory) / f"{name}.json"
        write_atomic(path, json.dumps(build_ledger(name, directory, digest), indent=1).encode())
        paths.append(path)
    return paths


def load_ledger(chapter: str, directory=None) -> dict | None:
    """A chapter's stored ladder ledger, or ``None`` when none is stored."""
    path = store_dir(directory) / f"{chapter}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _find_claim(chapter: str, claim_ref: str, directory=None) -> tuple[dict | None, dict | None]:
    """The stored ladder ledger of ``chapter`` and its entry for ``claim_ref`` (``None`` for
    what is not stored); a claim that is not on the ladder is a :class:`ConfigError`."""
    refs = [s.ref for s in specs_of(chapter)]
    if claim_ref not in refs:
        raise ConfigError(f"the ladder of {chapter} has no claim {claim_ref!r}; claims: {', '.join(refs)}")
    ledger = load_ledger(chapter, directory)
    claim = next((c for c in (ledger or {}).get("claims", []) if c["ref"] == claim_ref), None)
    return ledger, claim


def _as_floats(values) -> np.ndarray:
    return np.array([math.nan if v is None else float(v) for v in values], float)


def _stale_now(claim_rows: dict, directory=None) -> dict:
    """``claim_rows`` with each rung's ``stale`` recomputed against the current source (the
    ledger file may have been written under older code); reads only the store."""
    runs = stored_runs(directory)
    digest = equivalence_digest(directory, compute=False)
    for by_rung in claim_rows.values():
        for row in by_rung.values():
            keys = row.get("keys", [])
            row["stale"] = any(k not in runs or not is_current(runs[k], digest) for k in keys)
    return claim_rows


def _stored_claim(chapter: str, claim_ref: str, directory=None) -> dict | None:
    """The claim's entry of the stored ladder ledger, its rungs' staleness recomputed
    against the current source (:func:`_stale_now`); ``None`` when nothing is stored."""
    _, claim = _find_claim(chapter, claim_ref, directory)
    if claim is None or not claim["results"]:
        return None
    _stale_now(claim["results"], directory)
    return claim


def _nothing_stored(chapter: str, claim_ref: str) -> str:
    return (f"No ladder of {chapter}'s claim {claim_ref} is stored yet: "
            f"`{refresh_command(chapter)}` computes it (hours; `python tools/ladder.py plan "
            f"--chapter {chapter}` lists the runs and their cost).")


def ladder_sentence(chapter: str, claim_ref: str, rival: str | None = None, directory=None) -> str:
    """One sentence, with numbers, on whether the claim's gap closes, widens or holds as the
    budget grows, from the stored ladder only (stale rungs marked); or a sentence saying
    nothing is stored yet, with the command that computes it."""
    claim = _stored_claim(chapter, claim_ref, directory)
    if claim is None:
        return _nothing_stored(chapter, claim_ref)
    if claim.get("per_case"):
        return _cases_sentence(chapter, claim, rival)
    parts = []
    for name, by_rung in claim["results"].items():
        if rival is not None and name != rival:
            continue
        rungs = [r for r in claim["rungs"] if r in by_rung]
        means = [_mean(by_rung[r]["values"], claim["log"]) for r in rungs]
        steps = ", ".join((f"diverged at {r} ({'; '.join(by_rung[r]['diverged'])})"
                           if by_rung[r].get("diverged") else f"{_fmt(m)} at {r}")
                          + (" (stale)" if by_rung[r]["stale"] else "")
                          + f" [{by_rung[r]['verdict']}]" for r, m in zip(rungs, means))
        rungs_judged = [r for r in rungs if not by_rung[r].get("diverged")]
        means = [m for r, m in zip(rungs, means) if r in rungs_judged]
        rungs = rungs_judged
        if len(rungs) < 2:
            trend = "only one judged rung is stored, so no trend yet"
        else:
            trend = _trend(means[0], means[-1], claim)
        parts.append(f"{claim['method']} − {name}" if not _is_ratio(claim) else
                     f"{claim['method']} against {name}")
        parts[-1] += f" (mean over {len(claim['seeds'])} seeds): {steps}; {trend}"
    return f"{claim['ref']} on the ladder: " + "; ".join(parts) + "." + _missing_tail(chapter, claim)


def _series(case: str) -> str:
    """A case's name without the comparator the chapter names after it: ``"alpha=0.5
    (LG-FedAvg)"`` and ``"alpha=0.5 (FedPer)"`` are one case, whose comparator (chosen at
    each rung by the chapter's rule) changed."""
    return re.sub(r" \([^()]*\)$", "", case)


def _compared_to(claim: dict, rival: str) -> str:
    return f"{claim['method']} − {rival}" if not _is_ratio(claim) else f"{claim['method']} against {rival}"


def _missing_tail(chapter: str, claim: dict) -> str:
    missing = [r for r in claim["rungs"] if not any(r in b for b in claim["results"].values())]
    return f" Not yet computed: {', '.join(missing)} (`{refresh_command(chapter)}`)." if missing else ""


def _cases_sentence(chapter: str, claim: dict, rival: str | None = None) -> str:
    """:func:`ladder_sentence` of a claim judged case by case: per rival and rung the
    claim's verdict and each case's mean and verdict, then each case's trend from the
    first stored rung to the last."""
    parts = []
    for name, by_rung in claim["results"].items():
        if rival is not None and name != rival:
            continue
        steps = []
        rungs = [r for r in claim["rungs"] if r in by_rung and not by_rung[r].get("diverged")]
        for r in (r for r in claim["rungs"] if r in by_rung):
            row = by_rung[r]
            if row.get("diverged"):
                steps.append(f"diverged at {r} ({'; '.join(row['diverged'])})"
                             + (" (stale)" if row["stale"] else ""))
                continue
            cases = ", ".join(f"{case} {_fmt(_mean(c['values'], claim['log']))} ({c['verdict']})"
                              for case, c in row["cases"].items())
            steps.append(f"at {r}" + (" (stale)" if row["stale"] else "")
                         + f" [{row['verdict']}, {row['k']} of {len(row['cases'])} cases needed]: {cases}")
        if len(rungs) < 2:
            trend = "only one judged rung is stored, so no trend yet"
        else:
            first, last = (by_rung[r]["cases"] for r in (rungs[0], rungs[-1]))
            ends = {_series(c): v for c, v in first.items()}
            moves = []
            for c, v in last.items():
                if _series(c) not in ends:
                    continue
                a, b = (_mean(x["values"], claim["log"]) for x in (ends[_series(c)], v))
                moves.append(f"{_series(c)} " + (f"{_verb(a, b, claim)} ({_fmt(a)} → {_fmt(b)})"
                                                 if math.isfinite(a) and math.isfinite(b) else
                                                 "infinite or undefined at an end"))
            aim, what, upward = _aim(claim)
            against = "" if aim is None else f" against {what} {_fmt(aim)}" + (
                "" if upward is None else f" (the claim's side: {'above' if upward else 'below'})")
            trend = f"from {rungs[0]} to {rungs[-1]}{against}: " + (
                ", ".join(moves) or "no case at both ends")
        parts.append(f"{_compared_to(claim, name)} (mean over {len(claim['seeds'])} seeds, case by "
                     f"case) " + "; ".join(steps) + f"; {trend}")
    return f"{claim['ref']} on the ladder: " + "; ".join(parts) + "." + _missing_tail(chapter, claim)


def _is_ratio(claim: dict) -> bool:
    return claim["unit"].strip() in ("×", "x")


def _numbers(values) -> np.ndarray:
    """Stored per-seed values as floats (``None``: nan; ``"inf"``: an unreached target)."""
    return _as_floats([math.inf if x == "inf" else -math.inf if x == "-inf" else x for x in values])


def _mean(values, log: bool = False) -> float:
    """The mean of the seeds' values that are not nan: geometric for a ratio (``log``), as
    :func:`~hetfl_core.book.report.judge` averages it, where every value is finite and positive."""
    v = _numbers(values)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return math.nan
    if log and np.isfinite(v).all() and (v > 0).all():
        return float(np.exp(np.mean(np.log(v))))
    return float(np.mean(v))


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "—"
    if math.isinf(value):
        return "∞" if value > 0 else "−∞"
    return f"{value:+.2f}" if abs(value) < 10 else f"{value:+.1f}"


def _aim(claim: dict) -> tuple[float | None, str, bool | None]:
    """What a trend is read against: the paper's number, or where the paper gives none the
    criterion's bound; its name; and for the bound, whether the claim's side is above it
    (``None``: the paper's number, or a ledger that does not record the direction)."""
    if claim["paper_value"] is not None:
        return claim["paper_value"], "the paper's", None
    op = claim.get("op")
    return claim.get("bound"), "the criterion's bound", \
        (op in (">=", ">")) if op in (">=", ">", "<=", "<") else None


def _verb(first: float, last: float, claim: dict) -> str:
    """How the value moves from ``first`` to ``last`` against :func:`_aim`: ``improves`` or
    ``worsens`` (toward or away from the claim's side of the bound), or ``closes`` or
    ``widens`` (its gap to the paper's number); ``holds`` for a change under 1 point (a
    tenth, for a ratio)."""
    aim, _, upward = _aim(claim)
    tolerance = 0.1 * max(abs(aim), 1e-9) if _is_ratio(claim) else 1.0
    if upward is not None:
        return "holds" if abs(last - first) < tolerance else \
            "improves" if (last > first) == upward else "worsens"
    before, after = abs(aim - first), abs(aim - last)
    return "holds" if abs(after - before) < tolerance else "closes" if after < before else "widens"


def _trend(first: float, last: float, claim: dict) -> str:
    """How the value moves from the first stored rung to the last: whether its gap to the
    paper's number closes, widens or holds, or, where the paper gives none, whether it
    improves (moves to the claim's side of the criterion's bound), worsens or holds
    (:func:`_verb`)."""
    if not (math.isfinite(first) and math.isfinite(last)):
        return "an infinite or undefined value at an end, so no trend"
    aim, what, upward = _aim(claim)
    if aim is None:
        return f"{_fmt(first)} → {_fmt(last)}"
    verb = _verb(first, last, claim)
    if upward is None:
        return f"the gap to {what} {_fmt(aim)} {verb} ({_fmt(first)} → {_fmt(last)})"
    return (f"against {what} {_fmt(aim)} (the claim's side: {'above' if upward else 'below'}) "
            f"it {verb} ({_fmt(first)} → {_fmt(last)})")


def ladder_markdown(chapter: str, claim_ref: str, directory=None) -> str:
    """A table of the claim's ladder: per rival and rung the budget, the mean and per-seed
    values, the verdict and a stale mark; or the sentence saying nothing is stored."""
    from .report import markdown_table

    claim = _stored_claim(chapter, claim_ref, directory)
    if claim is None:
        return _nothing_stored(chapter, claim_ref)
    per_case = claim.get("per_case", False)
    rows = []
    for rival, by_rung in claim["results"].items():
        for rung in claim["rungs"]:
            if rung not in by_rung:
                rows.append([rival, rung, "—", *(["—"] if per_case else []), "not computed", "—", ""])
                continue
            row = by_rung[rung]
            b = row["budget"]
            local = (f"{b['local_steps']} step" if b["local_steps"] else f"{b['local_epochs']:g} epoch")
            plural = "" if local.startswith("1 ") else "s"
            budget = f"{b['rounds']} rounds × {local}{plural}, {b['clients']} clients"
            stale = "stale" if row["stale"] else ""
            if row.get("diverged"):
                rows.append([rival, rung, budget, *(["—"] if per_case else []), "; ".join(row["diverged"]),
                             row["verdict"], stale])
                continue
            if not per_case:
                rows.append([rival, rung, budget, ", ".join(_fmt(v) for v in _numbers(row["values"])),
                             row["verdict"], stale])
                continue
            for case, c in row["cases"].items():
                rows.append([rival, rung, budget, case, ", ".join(_fmt(v) for v in _numbers(c["values"])),
                             c["verdict"], stale])
            rows.append([rival, rung, budget, f"the claim: {row['k']} of {len(row['cases'])} cases",
                         "cases passing: " + ", ".join(map(str, row["values"])), row["verdict"], stale])
    return markdown_table(rows, ["rival", "rung", "budget", *(["case"] if per_case else []),
                                 "per seed", "verdict", ""])


def show_ladder(chapter: str, claim_ref: str, directory=None):
    """Draw the claim's paired value against the budget from the store only: per seed (dots)
    and their mean (a line) for each rival (and, for a claim judged case by case, each
    case), the paper's number as a dashed line, the criterion's bound dotted, the verdict
    above each rung, stale rungs hollow and so labelled; with :func:`ladder_sentence` under
    it. Says so (with the command) when nothing is stored. Returns nothing, so that a cell
    ending with it shows the figure once (under a non-interactive backend ``plt.gcf()``
    still holds it)."""
    import matplotlib
    import matplotlib.pyplot as plt
    from IPython.display import Markdown, display

    claim = _stored_claim(chapter, claim_ref, directory)
    if claim is None:
        display(Markdown(f"*{_nothing_stored(chapter, claim_ref)}*"))
        return None
    _, ax = plt.subplots(figsize=(7, 3.6), constrained_layout=True)
    rungs = claim["rungs"]
    (_draw_cases if claim.get("per_case") else _draw_rivals)(ax, claim)
    if claim["paper_value"] is not None:
        ax.axhline(claim["paper_value"], color="0.3", ls="--", lw=1, label="the paper")
    if claim.get("bound") is not None:
        ax.axhline(claim["bound"], color="0.3", ls=":", lw=1, label="the criterion's bound")
    plotted = np.concatenate([c.get_offsets()[:, 1] for c in ax.collections] or [np.ones(1)])
    if claim["log"] and (plotted > 0).all():
        ax.set_yscale("log")        # ratios: the paper's 212x and a 4x on one page
        plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)   # 3, not 3 x 10^0
        ax.yaxis.set_minor_formatter(plain)
    ax.set_xticks(range(len(rungs)), rungs)
    ax.set_xlabel("training budget (rung)")
    ax.set_ylabel(f"paired value ({claim['unit'].strip() or 'value'})")
    # a claim judged case by case has its verdicts above the axes, under the title
    pad = 6 + 10 * len(claim["results"]) if claim.get("per_case") else 6
    ax.set_title(textwrap.fill(f"{claim['ref']}: {claim['statement']}", 64), fontsize=10, pad=pad)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    plt.show()
    display(Markdown(ladder_sentence(chapter, claim_ref, directory=directory)))


def _draw_rivals(ax, claim: dict) -> None:
    """The ladder of a plain claim: per rival (a colour) the seeds' values (dots, hollow
    where stale) and their mean (a line) at each rung, the verdict above each mean."""
    rungs = claim["rungs"]
    for i, (rival, by_rung) in enumerate(claim["results"].items()):
        xs, means = [], []
        for x, rung in enumerate(rungs):
            if rung not in by_rung:
                continue
            row = by_rung[rung]
            offset = x + 0.08 * (i - (len(claim["results"]) - 1) / 2)
            if row.get("diverged"):     # no value: named on the axis, no point on the line
                ax.annotate("diverged" + (" (stale)" if row.get("stale") else ""), (offset, 0),
                            xycoords=("data", "axes fraction"),
                            xytext=(0, 4 + 10 * i), textcoords="offset points", ha="center",
                            fontsize=8, color=f"C{i}")
                continue
            v = _numbers(row["values"])
            finite = v[np.isfinite(v)]
            ax.scatter([offset] * finite.size, finite, s=18, color=f"C{i}",
                       facecolors="none" if row["stale"] else f"C{i}", alpha=0.7)
            xs.append(offset)
            means.append(_mean(row["values"], claim["log"]))
            at = means[-1] if np.isfinite(means[-1]) else (finite.max() if finite.size else None)
            if at is None:          # no seed with a finite value to place the verdict by
                continue
            ax.annotate(row["verdict"] + (" (stale)" if row["stale"] else ""), (offset, at),
                        xytext=(0, 8 + 10 * i), textcoords="offset points", ha="center",
                        fontsize=8, color=f"C{i}")
        ax.plot(xs, means, "-o", color=f"C{i}", label=f"{claim['method']} vs {rival} (mean)")


def _draw_cases(ax, claim: dict) -> None:
    """The ladder of a claim judged case by case: per rival (a marker) and case (a colour)
    the seeds' values (dots, hollow where stale) and their mean (a line) at each rung, and
    above each rung the claim's verdict against each rival."""
    rungs, markers = claim["rungs"], "osD^v<>"
    rivals = list(claim["results"])
    series = list(dict.fromkeys(_series(c) for by_rung in claim["results"].values()
                                for row in by_rung.values() for c in row["cases"]))
    for i, rival in enumerate(rivals):
        by_rung = claim["results"][rival]
        for j, name in enumerate(series):
            xs, means = [], []
            for x, rung in enumerate(rungs):
                row = by_rung.get(rung)
                case = next((c for c in (row or {}).get("cases", {}) if _series(c) == name), None)
                if case is None:
                    continue
                v = _numbers(row["cases"][case]["values"])
                finite = v[np.isfinite(v)]
                offset = x + 0.06 * (j - (len(series) - 1) / 2) + 0.03 * i
                ax.scatter([offset] * finite.size, finite, s=14, color=f"C{j}", marker=markers[i % 7],
                           facecolors="none" if row["stale"] else f"C{j}", alpha=0.6)
                xs.append(offset)
                means.append(_mean(row["cases"][case]["values"], claim["log"]))
            label = name if len(rivals) == 1 else f"{name}, vs {rival}"
            ax.plot(xs, means, ls="-" if i == 0 else "--", marker=markers[i % 7], color=f"C{j}",
                    label=f"{label} (mean)")
        for x, rung in enumerate(rungs):
            if rung in by_rung:
                row = by_rung[rung]
                text = row["verdict"] + (" (stale)" if row["stale"] else "")
                ax.annotate(text if len(rivals) == 1 else f"{rival}: {text}", (x, 1.0),
                            xycoords=("data", "axes fraction"), xytext=(0, 2 + 10 * i),
                            textcoords="offset points", ha="center", fontsize=8)


# -- what the ladder says beside a chapter's verdict ------------------------------------------
def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def matching_claim(claim: dict, ladder_claims: list[dict]) -> dict | None:
    """The ladder's entry for a chapter ledger's ``claim``: the one whose reference is the
    claim's (or extends it, e.g. ``"Table III, (0.1, 1), traffic"``) and whose statement
    shares the most words with the claim's; ``None`` where no reference matches."""
    ref = claim["ref"]
    candidates = [c for c in ladder_claims if c["ref"] == ref or c["ref"].startswith(ref + ",")]
    if not candidates:
        return None
    words = _words(claim.get("statement", ""))
    return max(candidates, key=lambda c: (len(words & _words(c["statement"])), c["ref"] == ref))


def _reading(row: dict, claim: dict) -> str:
    """A rung's value for a sentence: the seeds' mean (or, judged case by case, the cases
    that pass per seed)."""
    if "cases" in row:
        return "cases passing per seed: " + ", ".join(map(str, row["values"]))
    return f"mean {_fmt(_mean(row['values'], claim['log']))}{claim['unit']}"


def longer_training_note(chapter: str, claim: dict, directory=None) -> str | None:
    """What the ladder's longest computed budget says of a chapter ledger's ``claim`` (a
    saved claim, :class:`~hetfl_core.book.report.Ledger`), where it says something else than the
    chapter's verdict: per rival (the chapter's own comparators, its claim's ``pairs``,
    where the ladder judges them), the verdict at its highest judged rung above the book's
    with the value there, and a rung above that whose runs diverged. ``None`` where the claim
    is not on the ladder, nothing above the book rung is stored, or every rival's highest
    rung gives the chapter's verdict, or the claim is not a headline claim (the ladder's
    claims are the headline ones; other claims may share a reference). Reads the store only."""
    if not claim.get("headline"):
        return None
    ledger = load_ledger(chapter, directory)
    entry = matching_claim(claim, (ledger or {}).get("claims", []))
    if entry is None or not entry["results"]:
        return None
    _stale_now(entry["results"], directory)
    # the chapter's own comparators (its claim's pairs) where the ladder judges them
    spec = next((sp for sp in specs_of(chapter) if sp.ref == entry["ref"]), None)
    named = {r for _, r in claim.get("pairs") or []}
    own = [r for r in entry["results"] if spec is not None and r in spec.methods
           and spec.methods[r][0] in named]
    parts, diverged = [], set()
    for rival, by_rung in entry["results"].items():
        if own and rival not in own:
            continue
        computed = [r for r in entry["rungs"] if r in by_rung]
        judged = [r for r in computed if not by_rung[r].get("diverged")]
        diverged.update(r for r in computed if by_rung[r].get("diverged") and
                        (not judged or entry["rungs"].index(r) > entry["rungs"].index(judged[-1])))
        if not judged or judged[-1] == entry["rungs"][0]:
            continue
        row = by_rung[judged[-1]]
        if row["verdict"] != claim["verdict"]:
            parts.append(f"{row['verdict']} at {judged[-1]} against {rival} ({_reading(row, entry)}"
                         + (", stale" if row["stale"] else "") + ")")
    if not parts:
        return None
    tail = (f"; its runs diverge at {', '.join(sorted(diverged, key=_rung_order))}" if diverged else "")
    return "Longer training (the ladder): " + "; ".join(parts) + tail + "."


# -- the plan's cost, for a chapter to state ---------------------------------------------------
def plan_path(chapter: str, directory=None) -> Path:
    """Where ``tools/ladder.py plan`` records a chapter's estimated cost: ``plans/<chapter>.json``
    of the store."""
    return store_dir(directory) / "plans" / f"{chapter}.json"


def write_plan(chapter: str, speeds: "SpeedBook", device: str = "cpu", directory=None) -> Path:
    """Record the estimated cost of every run of ``chapter``'s ladder, stored or not (what
    ``tools/ladder.py plan`` estimates, :class:`SpeedBook`): per run key its rung, method,
    seed, training samples and estimated hours on ``device`` (one thread; ``None`` where
    unknown), with the date and device, in :func:`plan_path`. A chapter reads it
    (:func:`ladder_cost`) and never trains."""
    from .chapter import training_samples
    from ..runtime.experiments import write_atomic

    runs = {}
    for p in planned_runs(chapter):
        seconds = speeds.seconds(p.config, device)
        runs[p.key] = {"rung": p.rung, "method": p.config.method, "seed": p.config.seed,
                       "samples": training_samples(p.config),
                       "hours": None if math.isnan(seconds) else round(seconds / 3600, 5),
                       "claims": list(p.claims)}
    record = {"chapter": chapter, "device": device,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": runs}
    path = plan_path(chapter, directory)
    write_atomic(path, json.dumps(record, indent=1).encode())
    return path


def load_plan(chapter: str, directory=None) -> dict | None:
    """A chapter's recorded plan (:func:`write_plan`), or ``None`` when none is recorded."""
    path = plan_path(chapter, directory)
    return json.loads(path.read_text()) if path.is_file() else None


def _hours(hours: float) -> str:
    return f"{hours:.1f}" if hours < 100 else f"{hours:,.0f}"


def ladder_cost(chapter: str, claim_ref: str, directory=None) -> str:
    """One sentence on what the claim's ladder costs: its runs (methods x seeds at each
    rung), their training samples (computed from the specs) and the CPU hours that
    ``tools/ladder.py plan`` estimated for them (:func:`load_plan`), per rung; the runs it
    shares with the chapter's other claims; or, where the plan has not estimated every run
    of the current specs, the command that does."""
    from .chapter import training_samples

    _find_claim(chapter, claim_ref, directory)          # a claim not on the ladder: ConfigError
    spec = next(s for s in specs_of(chapter) if s.ref == claim_ref)
    configs = {r: [rung_config(spec, r, label, seed) for label in spec.methods for seed in spec.seeds]
               for r in spec.rungs}
    keys = {r: [run_key(c) for c in cs] for r, cs in configs.items()}
    n = sum(len(k) for k in keys.values())
    samples = sum(training_samples(c) for cs in configs.values() for c in cs)
    claim = f"{chapter}: {claim_ref}"
    shared = {p.key for p in planned_runs(chapter) if claim in p.claims and len(p.claims) > 1}
    text = (f"The ladder of {claim_ref} is {plural(n, 'run')}: {plural(len(spec.methods), 'method')} × "
            f"{plural(len(spec.seeds), 'seed')} at each of its {len(spec.rungs)} rungs "
            f"({', '.join(spec.rungs)}), {samples / 1e6:.1f} million training samples in all")
    if shared:
        text += (f" ({'all' if len(shared) == n else len(shared)} of them serve other claims of the "
                 "chapter too)")
    record = load_plan(chapter, directory) or {"runs": {}}
    known = record["runs"]
    hours = {r: [known.get(k, {}).get("hours") for k in ks] for r, ks in keys.items()}
    command = f"`python tools/ladder.py plan --chapter {chapter}`"
    stored = stored_runs(directory)
    took = [stored[k]["provenance"].get("wall_s") for k in dict.fromkeys(k for ks in keys.values() for k in ks)
            if k in stored]
    took = [t for t in took if t is not None]
    measured = (f" The {plural(len(took), 'run')} of it stored so far took {_hours(sum(took) / 3600)} hours "
                "of wall time, one thread each, on the machines that computed them (sharing them "
                "with other work).") if took else ""
    if any(h is None for hs in hours.values() for h in hs):
        return text + f"; their CPU time is not estimated yet ({command} estimates it)." + measured
    per_rung = {r: sum(hs) for r, hs in hours.items()}
    return (text + f"; about {_hours(sum(per_rung.values()))} CPU-hours on one thread ("
            + ", ".join(f"{r} {_hours(h)}" for r, h in per_rung.items())
            + f"), as {command} estimated them ({record['device']}, {record['date']})." + measured)


def show_ladder_cost(chapter: str, claim_ref: str, directory=None) -> None:
    """Display :func:`ladder_cost` as Markdown."""
    from IPython.display import Markdown, display

    display(Markdown(ladder_cost(chapter, claim_ref, directory)))


# -- why a run diverged: the stored probes ---------------------------------------------------
def probe_path(chapter: str, label: str, rung: str, seed: int, directory=None,
               variant: str | None = None) -> Path:
    """Where ``tools/divergence_probe.py --save`` keeps its probe of one ladder run: the
    store's ``probes/<chapter>-<label>-<rung>-s<seed>.json`` (names made file-safe), with
    ``-<variant>`` before ``.json`` for a re-run with its config changed (``lr=0.025``)."""
    def safe(text):
        return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()

    tail = f"-{safe(variant)}" if variant else ""
    return store_dir(directory) / "probes" / f"{chapter}-{safe(label)}-{rung}-s{seed}{tail}.json"


def load_probe(chapter: str, label: str, rung: str, seed: int, directory=None,
               variant: str | None = None) -> dict | None:
    """The stored probe of that run, or ``None`` where none is stored (or it is not whole)."""
    path = probe_path(chapter, label, rung, seed, directory, variant)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and "rounds" in record else None


def _blow_up(traced: list[dict]) -> tuple[dict, int | None] | None:
    """The traced participant whose loss rose the most (or first stopped being finite), and
    the step where it stopped being finite (``None``: it stayed finite)."""
    def worst(phase):
        losses = [s["loss"] for s in phase["steps"]]
        return max((math.inf if not math.isfinite(v) else v) for v in losses) if losses else -math.inf

    if not traced:
        return None
    phase = max(traced, key=worst)
    bad = [i for i, s in enumerate(phase["steps"]) if not math.isfinite(s["loss"])]
    return phase, (bad[0] if bad else None)


def twin_ends(chapter: str, label: str, rung: str, seed: int, directory=None) -> dict | None:
    """Where the stored probe traced a dense twin (``--dense-twin``), the traced round's
    worst participant's last loss (``factored``, ``nan`` where it stopped being finite) and
    its twin's largest and last losses (``dense_peak``, ``dense_last``); else ``None``."""
    record = load_probe(chapter, label, rung, seed, directory)
    found = _blow_up((record or {}).get("traced") or [])
    if found is None:
        return None
    steps = found[0]["steps"]
    dense = [s["dense_loss"] for s in steps if "dense_loss" in s]
    if not dense:
        return None
    last = steps[-1]["loss"]
    return {"client": found[0]["client"], "factored": last if math.isfinite(last) else math.nan,
            "dense_peak": max(dense), "dense_last": dense[-1]}


def _loss_path(losses: list[float]) -> str:
    """Losses step by step, ``a → b → … → not finite``; more than ten shown by the first two
    and the last seven."""
    shown = [f"{v:.3g}" if math.isfinite(v) else "not finite" for v in losses]
    if len(shown) > 10:                     # the start, then the last steps before the end
        shown = shown[:2] + [f"… ({len(shown) - 9} steps) …"] + shown[-7:]
    return " → ".join(shown)


def divergence_note(chapter: str, label: str, rung: str, seed: int, directory=None,
                    variant: str | None = None) -> str:
    """What the stored probe (``tools/divergence_probe.py --save``) of ``label``'s diverged
    run (``rung``, ``seed``) found, in a few sentences of Markdown with its numbers: how the
    global model moved over the rounds before the traced one, how the traced round's worst
    participant went step by step, and where the run stopped. A probe computed on other code (neither its source
    hash nor its equivalence digest current, :func:`is_current`) is marked stale with the
    command that refreshes it; where none is stored, the sentence gives that command.
    ``variant`` names a re-run with its config changed (``"lr=0.025"``, the probe's
    ``--set``): the note says so, and where it did not diverge, how it ended."""
    record = load_probe(chapter, label, rung, seed, directory, variant)
    if record is None:
        setting = f" --set {variant}" if variant else ""
        return (f"No probe of {label}'s seed {seed} at the {rung} rung{setting and ' with ' + variant} "
                f"is stored: `python tools/divergence_probe.py {chapter} CLAIM {rung} '{label}' {seed}"
                f"{setting} --steps-at ROUND --save` computes one.")
    how = record["provenance"]
    stale = "" if is_current(record, equivalence_digest(directory, compute=False)) else (
        f" **Stale:** it was computed on source {how.get('source_hash')}; `{how['command']}` "
        f"computes it again.")
    at = record["steps_at"]
    before = [r for r in record["rounds"] if at is None or r["round"] < at]
    changed = ", ".join(f"{k} {v}" for k, v in (record.get("changes") or {}).items())
    parts = [f"Re-run round by round{' with ' + changed if changed else ''} (`{how['command']}`)"]
    if before:
        first, last = before[0], before[-1]
        largest = [r["largest"] for r in before]
        whose = (f"{label}'s global model's parameter norm"
                 if record.get("scope", "global model") == "global model" else
                 f"the largest parameter norm among {label}'s clients' models")
        changes = [abs(b["norm"] / a["norm"] - 1) for a, b in zip(before, before[1:]) if a["norm"] > 0]
        most = f", never changing by more than {100 * max(changes):.3g}% from one round to the next" \
            if changes else ""
        over = "the rounds before the traced one" if at is not None else "its rounds"
        parts.append(f": over {over}, {whose} goes from {first['norm']:.3g} "
                     f"(round {first['round']}) to {last['norm']:.3g} (round {last['round']}){most}, "
                     f"and the largest weight stays between {min(largest):.3g} and {max(largest):.3g}.")
    else:
        parts.append(".")
    found = _blow_up(record.get("traced") or [])
    if found is not None:
        phase, bad = found
        steps = phase["steps"][: (bad + 1) if bad is not None else None]
        path = _loss_path([s["loss"] for s in steps])
        grads = [s["grad"] for s in steps if math.isfinite(s.get("grad", math.nan))]
        others = [max(s["loss"] for s in p["steps"]) for p in record["traced"]
                  if p is not phase and p["steps"]]
        logit = steps[0].get("logit", math.nan)       # not known where the method has its own loss
        parts.append(f" In round {at}, client {phase['client']} starts its local training at loss "
                     f"{steps[0]['loss']:.3g}" + (f" with logits up to {logit:.3g}" if math.isfinite(logit) else "")
                     + f"; step by step its loss goes {path}")
        if grads:
            parts.append(f", its gradient norm from {grads[0]:.3g} to {max(grads):.3g}")
        if others:
            who = ("the round's other participant stays" if len(others) == 1 else
                   f"the round's {len(others)} other participants stay")
            parts.append(f", while {who} below loss {max(others):.3g}")
        parts.append(".")
        dense = [s["dense_loss"] for s in phase["steps"] if "dense_loss" in s]
        if dense:
            parts.append(f" Its dense twin, trained from the same start on the same batches with each "
                         f"composed weight as one plain parameter instead of a product of factors, goes "
                         f"{_loss_path(dense)}.")
    after = [r for r in record["rounds"] if at is not None and r["round"] == at]
    if record.get("diverged"):
        parts.append(f" Averaged into the global model, it leaves weights up to {after[0]['largest']:.3g}, "
                     f"and the next round stops: {record['diverged']}." if after else
                     f" The run stops there: {record['diverged']}.")
    elif record["rounds"] and record["rounds"][-1]["round"] == record.get("config", {}).get("rounds"):
        scored = [r for r in record["rounds"] if r.get("acc") is not None]
        parts.append(f" It does not diverge in its {record['rounds'][-1]['round']} rounds"
                     + (f", and its last scored global accuracy is {100 * scored[-1]['acc']:.1f}% "
                        f"(round {scored[-1]['round']})" if scored else "") + ".")
    return "".join(parts) + stale


def divergence_rows(chapter: str, directory=None) -> list[tuple[str, str, int, list[str]]]:
    """For each method (as the chapter's claims name it) and model of ``chapter``'s ladder:
    ``(label, model, current runs, where its runs diverged)``: how many of its stored runs
    are current (:func:`is_current`; a run two claims share counts once) and, for each of
    them that diverged, its rung, seed and round."""
    stored, digest, data = stored_runs(directory), equivalence_digest(directory, compute=False), {}
    seen, table, keys = set(), {}, _Keys()
    for spec in specs_of(chapter):
        for rung in spec.rungs:
            for (label, seed), key in keys(claim_name(spec), rung).items():
                record = stored.get(key)
                if key in seen or record is None:
                    continue
                seen.add(key)
                if not is_current(record, digest, data):
                    continue
                row = table.setdefault((label, record["config"].get("model", "")), [0, []])
                row[0] += 1
                if record.get("diverged"):
                    found = re.search(r"round (\d+)", record["diverged"])
                    row[1].append(f"{rung}, seed {seed}" + (f", round {found[1]}" if found else ""))
    return [(label, model, runs, where) for (label, model), (runs, where) in table.items()]


def divergence_table(chapter: str, directory=None) -> str:
    """:func:`divergence_rows` as a Markdown table."""
    from .report import markdown_table

    rows = [[label, model, runs, len(where), "; ".join(where) or "—"]
            for label, model, runs, where in divergence_rows(chapter, directory)]
    return markdown_table(rows, ["method", "model", "current runs", "diverged", "where"],
                          align=["l", "l", "r", "r", "l"])


# -- the arena: does the ranking settle? ------------------------------------------------------
def kendall_tau(first: list[str], second: list[str]) -> float:
    """Kendall's tau between two rankings of the same names (1: same order, -1: reversed)."""
    common = [n for n in first if n in second]
    pos = {n: second.index(n) for n in common}
    concordant = discordant = 0
    for i in range(len(common)):
        for j in range(i + 1, len(common)):
            if pos[common[i]] < pos[common[j]]:
                concordant += 1
            else:
                discordant += 1
    pairs = concordant + discordant
    return (concordant - discordant) / pairs if pairs else math.nan


#: the ranking has settled when Kendall's tau between the boards of the last two stored
#: rungs is at least this: at most one pair of contestants in twenty swapped
SETTLED_TAU = 0.9


def leaderboards(chapter: str = "arena", claim_ref: str = "reference cell", directory=None) -> dict | None:
    """``{rung: {contestant: mean value}}`` for each stored rung, best first (the mean over
    the seeds of each rival's value, :func:`arena_settling`'s boards), less the contestants
    whose run diverged there (:func:`left_off_boards`); a rung is stored once every
    contestant has its row. ``None`` when nothing is stored."""
    claim = _stored_claim(chapter, claim_ref, directory)
    return None if claim is None else _boards(claim)[0]


def left_off_boards(chapter: str = "arena", claim_ref: str = "reference cell",
                    directory=None) -> dict[str, dict[str, list[str]]]:
    """``{rung: {contestant: the runs that diverged}}``: the contestants a stored rung's
    board leaves out because a run of theirs diverged there (:func:`leaderboards`)."""
    claim = _stored_claim(chapter, claim_ref, directory)
    return {} if claim is None else _boards(claim)[1]


def _boards(claim: dict) -> tuple[dict, dict]:
    """A stored claim's boards (:func:`leaderboards`) and the contestants each leaves out
    (:func:`left_off_boards`), over the rungs where every contestant has its row."""
    boards, left_off = {}, {}
    for rung in claim["rungs"]:
        rows = {r: b[rung] for r, b in claim["results"].items() if rung in b}
        if not all(r in rows for r in claim["rivals"]):
            continue
        scores = {r: _mean(row["values"], claim["log"]) for r, row in rows.items() if not row.get("diverged")}
        if scores:
            boards[rung] = dict(sorted(scores.items(), key=lambda kv: -kv[1]))
        out = {r: row["diverged"] for r, row in rows.items() if row.get("diverged")}
        if out:
            left_off[rung] = out
    return boards, left_off


def _run_named(reason: str) -> str:
    """``"Label, seed 2: label diverged in round 102 (...)"`` as ``"seed 2, round 102"``."""
    seed, rnd = re.search(r"seed (\d+)", reason), re.search(r"round (\d+)", reason)
    return ", ".join(p for p in (seed and f"seed {seed[1]}", rnd and f"round {rnd[1]}") if p) or reason


def arena_settling(chapter: str = "arena", claim_ref: str = "reference cell", directory=None,
                   label=None) -> str:
    """The arena's leaderboard at each stored rung (methods by mean value, best first) and
    Kendall's tau between consecutive rungs: whether the ranking settles as budgets grow;
    ``label`` maps a contestant to its display name."""
    from .report import markdown_table

    claim = _stored_claim(chapter, claim_ref, directory)
    if claim is None:
        return _nothing_stored(chapter, claim_ref)
    boards, out = _boards(claim)
    boards = {rung: list(board) for rung, board in boards.items()}
    name = label or (lambda n: n)
    rows, previous = [], None
    for rung, board in boards.items():
        tau = "" if previous is None else _fmt(kendall_tau(boards[previous], board))
        left = "; ".join(f"{name(c)} ({'; '.join(map(_run_named, why))})"
                         for c, why in out.get(rung, {}).items())
        rows.append([rung, " > ".join(map(name, board)), tau, *([left or "—"] if out else [])])
        previous = rung
    return markdown_table(rows, ["rung", "leaderboard (best first)", "Kendall τ to the rung before",
                                 *(["left out: a run diverged"] if out else [])])


def settling_sentence(chapter: str = "arena", claim_ref: str = "reference cell", directory=None,
                      label=None) -> str:
    """Whether the ranking settles, in one sentence from the store: the leader at each
    stored rung, Kendall's tau between consecutive rungs, and whether the last step's tau
    reaches :data:`SETTLED_TAU`; ``label`` maps a contestant to its display name. Says
    so (with the command) when nothing, or one rung only, is stored."""
    claim = _stored_claim(chapter, claim_ref, directory)
    if claim is None:
        return _nothing_stored(chapter, claim_ref)
    boards, out = _boards(claim)
    name = label or (lambda n: n)
    rungs = list(boards)
    leaders = ", ".join(f"{name(next(iter(boards[r])))} at {r}" for r in rungs)
    if len(rungs) < 2:
        return (f"Leader: {leaders}; only one rung is stored, so whether the ranking settles "
                f"is not known yet (`{refresh_command(chapter)}`).")
    taus = [kendall_tau(list(boards[a]), list(boards[b])) for a, b in zip(rungs, rungs[1:])]
    steps = ", ".join(f"{a} → {b} {_fmt(t)}" for a, b, t in zip(rungs, rungs[1:], taus))
    last = taus[-1]
    verdict = (f"the ranking has settled (τ ≥ {SETTLED_TAU:g} from {rungs[-2]} to {rungs[-1]})"
               if last >= SETTLED_TAU else
               f"the ranking has not settled (τ < {SETTLED_TAU:g} from {rungs[-2]} to {rungs[-1]})")
    spec = next(s for s in specs_of(chapter) if s.ref == claim_ref)
    missing = [r for r in spec.rungs if r not in boards]
    tail = f" Not yet computed: {', '.join(missing)}." if missing else ""
    if out:
        tail = (" Left out where a run of theirs diverged (τ compares the contestants both "
                "boards rank): " + "; ".join(f"{', '.join(map(name, by))} at {r}"
                                             for r, by in out.items()) + "." + tail)
    return f"Leader: {leaders}. Kendall τ between consecutive rungs: {steps}; {verdict}.{tail}"


def plan_rows(chapter: str | None = None, directory=None, device: str = "cpu") -> list[list]:
    """The ladder's planned cost per rung, from the plan (:func:`planned_runs`) and the
    store: the runs, how many are stored and current, the nominal training samples
    (millions, :func:`~hetfl_core.book.training_samples`) and the estimated hours on one
    ``device`` thread (:class:`SpeedBook`, from stored runs' wall times and measured
    speeds only; ``nan`` where no run of a shape has been timed), with the count of runs
    not timed. A row per rung, then ``all``."""
    from .chapter import training_samples

    runs = stored_runs(directory)
    digest = equivalence_digest(directory, compute=False)
    speeds = SpeedBook(directory, measure=False)
    totals: dict[str, list] = {}
    for p in planned_runs(chapter):
        row = totals.setdefault(p.rung, [0, 0, 0.0, 0.0, 0])
        row[0] += 1
        row[1] += p.key in runs and is_current(runs[p.key], digest) and has_fields(runs[p.key], p.fields)
        row[2] += training_samples(p.config) / 1e6
        seconds = speeds.seconds(p.config, device)
        if math.isnan(seconds):
            row[4] += 1
        else:
            row[3] += seconds / 3600
    rows = [[rung, *row] for rung, row in totals.items()]
    rows.append(["all", *(sum(r[i] for r in rows) for i in range(1, 6))])
    return rows


def plan_markdown(chapter: str | None = None, directory=None, device: str = "cpu") -> str:
    """:func:`plan_rows` as a table: hours marked "≥" where some runs are not timed yet
    (``python tools/ladder.py plan`` times them)."""
    from .report import markdown_table

    table = []
    for rung, n, stored, samples, hours, untimed in plan_rows(chapter, directory, device):
        shown = "—" if untimed == n else f"{'≥ ' if untimed else ''}{hours:.1f}"
        table.append([rung, n, stored, f"{samples:.1f}", shown, untimed or ""])
    return markdown_table(table, ["rung", "runs", "stored (current)", "M training samples",
                                  f"est. {device} hours (1 thread)", "runs not timed"])


# -- computing the pending runs ---------------------------------------------------------------
class _Keys:
    """The run keys of each claim's methods and seeds at each rung, computed once:
    ``keys(claim, rung)`` maps ``(label, seed)`` to the run's key; ``specs`` maps each
    claim's name (:func:`claim_name`) to its spec."""

    def __init__(self):
        self.specs, self.known = {claim_name(s): s for s in specs_of()}, {}

    def __call__(self, claim: str, rung: str) -> dict[tuple[str, int], str]:
        if (claim, rung) not in self.known:
            spec = self.specs[claim]
            self.known[(claim, rung)] = {(label, seed): run_key(rung_config(spec, rung, label, seed))
                                         for label in spec.methods for seed in spec.seeds}
        return self.known[(claim, rung)]


def _diverged_at(keys: dict[tuple[str, int], str], runs: Mapping[str, dict], digest: str | None,
                 fingerprints: dict, labels=None) -> bool:
    """Whether one of a claim's runs at a rung (``keys``, :class:`_Keys`; of ``labels``
    only, where given) is stored, current (:func:`is_current`) and diverged: a row that reads
    it can have no value, whatever its other runs would give."""
    return any(runs.get(k, {}).get("diverged") and is_current(runs[k], digest, fingerprints)
               for (label, _), k in keys.items() if labels is None or label in labels)


def _unjudged_rivals(spec: ClaimSpec, keys: dict[tuple[str, int], str], runs: Mapping[str, dict],
                     digest: str | None, fingerprints: dict) -> set[str]:
    """The rivals of ``spec`` whose value at a rung (``keys``) reads a current diverged run."""
    return {rival for rival in spec.rivals
            if _diverged_at(keys, runs, digest, fingerprints, spec.labels_read(rival))}


def _diverged_below(planned: PlannedRun, keys: _Keys, runs: Mapping[str, dict]) -> bool:
    """Whether the same method and seed of one of the run's claims diverged at a lower rung
    (stored, current or not): likely to diverge again, so it runs first in its rung."""
    for claim in planned.claims:
        spec = keys.specs[claim]
        if planned.rung not in spec.rungs:
            continue
        for which, key in keys(claim, planned.rung).items():
            if key == planned.key and any(runs.get(keys(claim, r)[which], {}).get("diverged")
                                          for r in spec.rungs[:spec.rungs.index(planned.rung)]):
                return True
    return False


def pending(chapter: str | None = None, rung: str | None = None, directory=None,
            digest: str | None = None) -> list[PlannedRun]:
    """The planned runs (:func:`planned_runs`) not stored, stored under code whose results
    may differ (:func:`is_current`), or stored without a history field one of their claims
    reads (:func:`has_fields`), in the order they will run: the plan's, except that within a
    rung a run whose method and seed diverged at a lower rung goes first. A run every claim
    of which already has a current diverged run at its rung is left out: it could not give
    that rung a value (:func:`ladder_values`)."""
    runs = stored_runs(directory)
    keys = _Keys()
    todo = [p for p in planned_runs(chapter, rung)
            if p.key not in runs or not is_current(runs[p.key], digest)
            or not has_fields(runs[p.key], p.fields)]
    todo.sort(key=lambda p: (_rung_order(p.rung), not _diverged_below(p, keys, runs)))
    return _without_moot(todo, keys, runs, digest)


def _without_moot(todo: list[PlannedRun], keys: _Keys, runs, digest) -> list[PlannedRun]:
    """``todo`` less the runs that no row can use: in each of its claims, every rival whose
    value reads the run (:meth:`~ClaimSpec.labels_read`) reads a current diverged run at
    the run's rung."""
    unjudged: dict[tuple[str, str], set[str]] = {}
    fingerprints: dict = {}

    def moot(claim: str, rung: str, key: str) -> bool:
        spec, at = keys.specs[claim], keys(claim, rung)
        if (claim, rung) not in unjudged:
            unjudged[(claim, rung)] = _unjudged_rivals(spec, at, runs, digest, fingerprints)
        labels = {label for (label, _), k in at.items() if k == key}
        readers = [r for r in spec.rivals if labels.intersection(spec.labels_read(r))] or spec.rivals
        return all(r in unjudged[(claim, rung)] for r in readers)

    return [p for p in todo if not all(moot(c, p.rung, p.key) for c in p.claims)]


def _shape(config: RunConfig, device: str) -> str:
    """What a run's speed per training sample depends on: method, options, model, data, device."""
    return json.dumps([config.method, sorted(config.options), config.model, config.dataset,
                       config.batch_size, config.clients, config.train_samples, device])


class SpeedBook:
    """Seconds per nominal training sample (:func:`~hetfl_core.book.training_samples`) of
    each run shape on a device: from the stored runs' wall times where one of that shape
    ran there, else measured (:func:`~hetfl_core.book.measure_speed`, a few short rounds)
    and kept in the store's ``speeds.json``. ``measure=False`` estimates nothing new."""

    def __init__(self, directory=None, measure: bool = True):
        self.path = store_dir(directory) / "speeds.json"
        self.measure = measure
        self.known: dict[str, float] = json.loads(self.path.read_text()) if self.path.is_file() else {}
        for record in stored_runs(directory).values():
            config = RunConfig.from_dict(record["config"])
            device = "cuda" if "CUDA" in record["provenance"]["device"] else "cpu"
            self.learn(config, device, record["provenance"]["wall_s"], save=False)

    def learn(self, config: RunConfig, device: str, wall_s: float, save: bool = True) -> None:
        """Record that a whole run of ``config`` took ``wall_s`` seconds on ``device``."""
        from .chapter import training_samples
        from ..runtime.experiments import write_atomic

        self.known[_shape(config, device)] = wall_s / max(training_samples(config), 1.0)
        if save:
            write_atomic(self.path, json.dumps(self.known, indent=1, sort_keys=True).encode())

    def seconds(self, config: RunConfig, device: str) -> float:
        """The estimated seconds of a run of ``config`` on ``device`` (nan: unknown and not measured)."""
        from .chapter import measure_speed, training_samples
        from ..runtime.experiments import write_atomic

        shape = _shape(config, device)
        if shape not in self.known:
            if not self.measure:
                return math.nan
            speed = measure_speed(config.replace(device=device))
            self.known[shape] = speed.seconds(config) / max(training_samples(config), 1.0)
            write_atomic(self.path, json.dumps(self.known, indent=1, sort_keys=True).encode())
        from .chapter import training_samples as samples

        return self.known[shape] * samples(config)


def _compute(config: dict, device: str) -> tuple[dict, float]:
    """One run in a worker process (one torch thread), on ``device``: its result and wall
    time. A run whose training diverges (:class:`~hetfl_core.science.errors.DivergenceError`) is a
    result too: no history, and ``diverged`` the message naming its round and client."""
    from ..runtime.engine import run
    from ..science.data.fingerprint import dataset_fingerprint
    from ..science.errors import DivergenceError

    start = time.perf_counter()
    config = RunConfig.from_dict(config).replace(device=device)
    try:
        result = run(config)
    except DivergenceError as exc:
        result = {"config": config.to_dict(), "history": [], "diverged": str(exc).split(":")[0]}
    result["data"] = dataset_fingerprint(config.dataset)   # the copy this process trained on
    return result, time.perf_counter() - start


class _InThisProcess:
    """An executor of one worker that is this process: a run is computed when submitted
    (no start-up of a worker process, and nothing left running when the tool is stopped)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @staticmethod
    def submit(function, *args):
        from concurrent.futures import Future

        future = Future()
        try:
            future.set_result(function(*args))
        except Exception as exc:        # the run's failure, reported as a pool's would be
            future.set_exception(exc)
        return future


def resolve(device: str) -> str:
    """``auto``: ``cuda`` where a GPU is, else ``cpu``; ``cpu`` and ``cuda`` as they are."""
    if device not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"--device must be auto, cpu or cuda, got {device!r}")
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def run_pending(chapter: str | None = None, rung: str | None = None, until_s: float | None = None,
                workers: int = 1, directory=None, device: str = "auto", command: str = "",
                progress: bool = True, log=print) -> dict:
    """Compute the pending runs (:func:`pending`) in plan order in ``workers`` processes
    (one: in this process),
    each written to the store the moment it finishes (:func:`store_run`); a run is started
    only if, by its estimated time (:class:`SpeedBook`), it can finish within ``until_s``
    seconds of the call. A run that diverges leaves out the queued runs that only its rung's
    claims need (:func:`pending`). Then rewrite the ladder ledgers. Returns counts: ``done``,
    ``skipped`` (would pass the deadline), ``failed`` and ``moot`` (left out)."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from multiprocessing import get_context

    from tqdm import tqdm

    from ..runtime.experiments import _die_with_parent

    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    if until_s is not None and until_s <= 0:
        raise ConfigError(f"--until-s must be a positive number of seconds, got {until_s}")
    device = resolve(device)
    specs_of(chapter, rung)                           # a bad chapter or rung fails before any compute
    start = time.monotonic()
    deadline = None if until_s is None else start + until_s
    digest = equivalence_digest(directory)
    todo = pending(chapter, rung, directory, digest)
    log(f"{plural(len(todo), 'run')} pending" + (f" for {chapter}" if chapter else "")
        + (f" at rung {rung}" if rung else "") + f"; device {device}, {plural(workers, 'worker')}")
    speeds = SpeedBook(directory, measure=deadline is not None)
    counts = {"done": 0, "skipped": 0, "failed": 0, "moot": 0}
    keys = _Keys()
    bar = tqdm(total=len(todo), desc="ladder", unit="run", disable=not progress)
    queue = list(todo)
    # a worker ends with the tool, even when only the tool's process is killed
    pool = _InThisProcess() if workers == 1 else \
        ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                            initializer=_die_with_parent, initargs=(os.getpid(),))
    with pool:
        running: dict = {}
        while queue or running:
            while queue and len(running) < workers:
                planned = queue.pop(0)
                if deadline is not None:
                    estimate = speeds.seconds(planned.config, device)
                    if not math.isnan(estimate) and time.monotonic() + estimate > deadline:
                        counts["skipped"] += 1
                        bar.update()
                        continue
                running[pool.submit(_compute, planned.config.to_dict(), device)] = planned
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                planned = running.pop(future)
                try:
                    result, wall = future.result()
                except Exception as exc:      # one failed run does not stop the others
                    counts["failed"] += 1
                    log(f"failed: {planned.key} ({', '.join(planned.claims)}): "
                        f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                else:
                    store_run(result, planned.key, command, wall, digest, directory)
                    if result.get("diverged"):
                        log(f"diverged: {planned.key} ({', '.join(planned.claims)}): {result['diverged']}")
                        kept = _without_moot(queue, keys, stored_runs(directory), digest)
                        if len(kept) < len(queue):
                            log(f"not needed: {plural(len(queue) - len(kept), 'run')} of a rung that "
                                "cannot be judged now")
                            counts["moot"] += len(queue) - len(kept)
                            bar.update(len(queue) - len(kept))
                            queue = kept
                    else:
                        speeds.learn(planned.config, device, wall)
                    counts["done"] += 1
                bar.update()
    bar.close()
    write_ledgers(chapter, directory, digest)
    log(f"stored {plural(counts['done'], 'run')}; {counts['skipped']} left for later (would pass the "
        f"deadline); {counts['failed']} failed; {counts['moot']} not needed (a rung that diverged)")
    return counts


def status_rows(directory=None) -> list[list[str]]:
    """Per chapter and claim, which rungs are done, pending and stale (from the store only)."""
    runs = stored_runs(directory)
    digest = equivalence_digest(directory, compute=False)
    rows, fingerprints, claim_keys = [], {}, _Keys()
    for spec in specs_of():
        state = {"done": [], "pending": [], "stale": []}
        for rung in spec.rungs:
            at = claim_keys(claim_name(spec), rung)
            unjudged = _unjudged_rivals(spec, at, runs, digest, fingerprints)
            # a rival judged "diverged" needs none of its other runs
            keys = [k for (label, _), k in at.items()
                    if any(label in spec.labels_read(r) for r in spec.rivals if r not in unjudged)]
            if any(k not in runs or not has_fields(runs[k], spec.fields) for k in keys):
                state["pending"].append(rung)
            elif any(not is_current(runs[k], digest) for k in keys):
                state["stale"].append(rung)
            else:
                state["done"].append(rung)
        rows.append([spec.chapter, spec.ref, *(", ".join(state[s]) or "—" for s in state)])
    return rows


# -- the command line (tools/ladder.py, python -m hetfl_core ladder) -------------------------
#: what the ladder's command line does
COMMAND_LINE = """The ladder of training budgets behind each headline claim (:mod:`hetfl_core.book.ladder`).

    python tools/ladder.py plan   [--chapter C] [--rung R] [--no-timing]
    python tools/ladder.py run    [--chapter C] [--rung R] [--until-s SECONDS] [--workers N]
                                  [--store DIR] [--device auto|cpu|cuda]
    python tools/ladder.py status [--store DIR]
    python tools/ladder.py ledger [--chapter C] [--store DIR]

``plan`` lists the pending runs in the order ``run`` computes them (cheapest rung first, a
claim's methods and seeds together) with their training samples and estimated CPU hours,
and (timed, for every rung) records each chapter's whole ladder's estimated cost in
``results/ladder/plans/<chapter>.json``, which the chapter states (``ladder_cost``);
``run`` computes them, each stored the moment it finishes (``results/ladder/runs``), never
starting one it cannot expect to finish before ``--until-s``; a later call, here or on
another machine, continues from the stored runs. ``status`` says per claim which rungs are
done, pending or stale; ``ledger`` recomputes the ladder ledgers from the stored runs.
"""



class _Parser(argparse.ArgumentParser):
    def error(self, message):      # one line, exit 2
        self.exit(2, f"ladder: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    """The ladder's command line (:data:`COMMAND_LINE`)."""
    parser = _Parser(prog="tools/ladder.py", description=COMMAND_LINE.split("\n\n")[0])
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
    """``plan``: the pending runs in order with their samples and estimated hours, and the totals per rung."""
    from .chapter import training_samples

    ladder = sys.modules[__name__]

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
              + (f"  ({plural(unknown, 'run')} not timed)" if unknown else ""))
    print(f"{'all':6s} {sum(t[0] for t in totals.values()):5d} "
          f"{sum(t[1] for t in totals.values()) / 1e6:10.2f} {sum(t[2] for t in totals.values()):22.2f}")
    if not args.no_timing and args.rung is None:      # the whole ladder's cost, for the chapters
        for chapter in [args.chapter] if args.chapter else ladder.chapters():
            print(f"wrote {ladder.write_plan(chapter, speeds, device, args.store)}")
    return 0


def main(argv=None) -> int:
    """``tools/ladder.py`` and ``python -m hetfl_core ladder``: the commands of
    :data:`COMMAND_LINE`; returns the exit code (2, one line, for bad input)."""
    from .report import markdown_table

    ladder = sys.modules[__name__]

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
