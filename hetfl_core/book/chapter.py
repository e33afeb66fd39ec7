"""What every chapter of the book shares, through one :class:`Chapter` that a chapter makes
in its first code cell: its parameters checked (:func:`check_parameters`), its scale, its
sweeps, the caption under a reproduction (what it ran with, how to rerun it) and its ledger::

    book = Chapter("heroes", "Heroes", globals())
    runs = book.sweep({(m, s): base.replace(method=m, seed=s) for m in methods for s in seeds})
    book.caption(runs)
    book.claim("Table II", "Heroes is more accurate than FedAvg", paper="+10.46 points", ...)
    book.ledger.show(); book.ledger.save()

Printed output that fits the page (:func:`say`) and the summary that closes a paper
chapter, written from its ledger (:func:`summary_markdown`).

Besides: a chapter's recorded paper-scale run (:func:`paper_scale_markdown`), and its plan,
the runs it asks for and what they cost, found without training (:func:`plan_chapter`,
:func:`measure_speed`).
"""
from __future__ import annotations

import ast
import contextlib
import functools
import json
import math
import os
import sys
import tempfile
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..runtime.config import SCALES, SEED_LIMIT
from ..science.errors import ConfigError
from ..science.options import check_value

__all__ = ["COLUMN", "say", "first_clause", "summary_markdown",
           "SEED_LIMIT", "BASELINES", "SIMPLIFIED_BASELINES", "with_baselines",
           "injected_parameters", "check_parameters", "config_choices", "ParameterError",
           "caption_text", "caption", "rerun_command", "Chapter", "PAPER_RESULTS_ENV",
           "paper_results_dir", "paper_scale_markdown", "device_name", "provenance",
           "PLAN_SKIP", "RunSpeed", "enter_plan_mode", "evaluations", "measure_speed",
           "scored_every_round",
           "plan_chapter", "plan_skipped", "planned_result", "split_claim", "training_samples"]

#: how a chapter runs the baselines it compares with (its ``baselines`` parameter):
#: ``authors``, as the methods' authors ran them (every method's default), or
#: ``simplified``, without the parts of their training and scoring that the papers leave
#: to the authors' code (:data:`SIMPLIFIED_BASELINES`), to show what those parts change
BASELINES = ("authors", "simplified")

#: the options that run a baseline simplified: HeteroFL and FedRolex without the masking
#: trick, the Scaler and clipping, averaged by data size and scored with each client's
#: sub-model; FedBABU fine-tuning only the head; Ditto starting from the first global model;
#: LG-FedAvg without its warm start. (FjORD runs as its authors ran it: it has no such option.)
_WIDTH_SIMPLIFIED = {"label_mask": False, "scaler": False, "clip_norm": None,
                     "weighting": "samples", "personal_eval": "submodel"}
SIMPLIFIED_BASELINES = {
    "heterofl": _WIDTH_SIMPLIFIED,
    "fedrolex": _WIDTH_SIMPLIFIED,
    "fedbabu": {"finetune": "head", "finetune_steps": 10, "finetune_momentum": 0.0,
                "finetune_when": "every"},
    "ditto": {"personal_start": "global"},
    "lg-fedavg": {"fedavg_share": 0.0},
}


def with_baselines(config, baselines: str = "authors"):
    """``config`` as the ``baselines`` setting (:data:`BASELINES`) runs it: for
    ``simplified``, with the options of :data:`SIMPLIFIED_BASELINES` over its own."""
    if baselines not in BASELINES:
        raise ConfigError(f"baselines must be one of {', '.join(BASELINES)}, got {baselines!r}")
    options = SIMPLIFIED_BASELINES.get(config.method) if baselines == "simplified" else None
    return config.with_options(**options) if options else config


def injected_parameters(history: Sequence[str]) -> set[str]:
    """Names papermill assigned: the cell it injects starts with ``# Parameters``."""
    return {target.id for source in history if source.lstrip().startswith("# Parameters")
            for node in ast.parse(source).body if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name)}


def declaration(name: str, annotation) -> dict:
    """A parameter's annotation (``int``, ``str | None``, or their text) as the declaration
    that :func:`~hetfl_core.science.options.check_value` checks, as it checks config fields and
    method options: its one type and whether ``None`` is allowed."""
    if isinstance(annotation, str):
        annotation = eval(annotation, {"typing": typing})      # from __future__ annotations
    args = typing.get_args(annotation) or (annotation,)
    kinds = [a for a in args if a not in (None, type(None))]
    if len(kinds) != 1 or kinds[0] not in (int, float, str, bool):
        raise ValueError(f"parameter {name}: declare one of int, float, str or bool, optionally "
                         f"'| None', not {annotation!r}")
    return {"kind": kinds[0], "optional": len(kinds) < len(args)}


class ParameterError(ConfigError):
    """A chapter parameter that is wrong. A notebook (and papermill's report of the failed
    cell) shows it as one line, ``ConfigError: ...``: IPython prints what
    ``_render_traceback_`` returns in place of a traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"ConfigError: {self}"]


def config_choices() -> dict[str, tuple]:
    """The run settings (:class:`~hetfl_core.runtime.config.RunConfig` fields) that take one of a
    finite set of names, and those names: a chapter parameter of the same name is checked
    against them by :func:`check_parameters` before any cell runs, unless the chapter gives
    its own rule for it."""
    from ..runtime.config import MODEL_INPUTS
    from ..science.data import PARTITIONS
    from ..science.system import BANDWIDTH_POLICIES, HETEROGENEITY, SYSTEMS

    return {"heterogeneity": tuple(HETEROGENEITY), "partition": tuple(PARTITIONS),
            "model": tuple(MODEL_INPUTS), "system": tuple(SYSTEMS),
            "bandwidth_policy": tuple(BANDWIDTH_POLICIES)}


def check_parameters(namespace: dict, history: Sequence[str] | None = None, **rules) -> None:
    """Check a chapter's parameters: the annotated names of ``namespace`` (``seed: int = 0``
    in its parameters cell, so that papermill's ``--help-notebook`` shows each type).

    * each value has its declared type (an ``int`` passes for a ``float``);
    * ``scale`` is one of :data:`~hetfl_core.runtime.config.SCALES`, ``seed`` an integer in
      ``[0, 2**32)``, ``dataset`` a known dataset, and a parameter named after a run
      setting with a finite set of values (``heterogeneity``, ``partition``, ``model``,
      ``system``, ``bandwidth_policy``: :func:`config_choices`) one of those values;
    * ``rules`` adds a rule per name: a ``(low, high)`` pair of inclusive bounds (``None``
      for no bound) or a list of allowed values, e.g. ``lr=(1e-6, 10)``;
    * a name papermill injected (found in ``history``, default the kernel's ``In``) that
      is not declared is an error (papermill itself only warns).

    Raises :class:`ParameterError` (a :class:`~hetfl_core.science.errors.ConfigError`) with one
    line naming the parameter.
    """
    declared = dict(namespace.get("__annotations__", {}))
    if not declared:
        raise ParameterError("the parameters cell declares no parameters (write 'seed: int = 0')")
    history = namespace.get("In", []) if history is None else history
    unknown = sorted(injected_parameters(history) - set(declared))
    if unknown:
        raise ParameterError(f"unknown parameter(s) {', '.join(unknown)}; this chapter takes: "
                             f"{', '.join(declared)}")
    for name, annotation in declared.items():
        if name not in namespace:
            raise ParameterError(f"parameter {name} is declared but has no value")
        meta = declaration(name, annotation)
        if name == "seed":
            meta.update(low=0, high=SEED_LIMIT, high_open=True)
        if isinstance(rules.get(name), tuple):
            meta["low"], meta["high"] = rules[name]
        try:
            check_value(f"parameter {name}", namespace[name], meta)
        except ConfigError as exc:
            raise ParameterError(str(exc)) from None
    choices = {"scale": SCALES, "baselines": BASELINES, **config_choices()}
    for name, allowed in choices.items():
        if name in declared and name not in rules and namespace[name] not in allowed:
            raise ParameterError(f"parameter {name} must be one of {', '.join(allowed)}, "
                                 f"got {namespace[name]!r}")
    if namespace.get("dataset") is not None and "dataset" in declared:    # None: the chapter's default
        from ..science.data import canonical_dataset_name

        try:
            canonical_dataset_name(namespace["dataset"])
        except ConfigError as exc:
            raise ParameterError(f"parameter dataset: {exc}") from None
    for name, rule in rules.items():
        if name not in declared:
            raise ValueError(f"a rule for {name!r}, which is not a declared parameter")
        if not isinstance(rule, tuple) and namespace[name] not in rule:
            raise ParameterError(f"parameter {name} must be one of {', '.join(map(repr, rule))}, "
                                 f"got {namespace[name]!r}")


#: RunConfig fields a caption names, in this order: (field, prefix, how a value prints, suffix)
_CAPTION_FIELDS = (("dataset", "", "{}", ""), ("model", "", "{}", ""), ("partition", "", "{}", ""),
                   ("alpha", "α=", "{}", ""), ("classes_per_client", "", "{}", " classes per client"),
                   ("clients", "", "{}", " clients"), ("participation", "", "{:.0%}", " per round"),
                   ("rounds", "", "{}", " rounds"), ("local_steps", "", "{}", " local steps"),
                   ("local_epochs", "", "{}", " local epochs"), ("lr", "lr ", "{}", ""),
                   ("heterogeneity", "", "{}", " hardware heterogeneity"))
#: a count's noun when the count is one
_SINGULAR = {" classes per client": " class per client", " clients": " client", " rounds": " round",
             " local steps": " local step", " local epochs": " local epoch"}


def _values(configs, name: str) -> list:
    return list(dict.fromkeys(getattr(c, name) for c in configs))


def caption_text(configs, notebook: str, scale: str, seed: int = 0, baselines: str = "authors") -> str:
    """What a reproduction ran with (a field the runs vary prints its values joined by "/")
    and the command that reruns the chapter as it ran (:func:`rerun_command`), e.g. ``"Ran
    at scale book with fashion-mnist, cnn, dirichlet, α=0.5, 20 clients, ..., seeds 0–2;
    methods: fedavg, heterofl. Rerun as shown: `jupytext ... -p scale book -p seed 0` (...)"``."""
    from ..runtime.config import RunConfig
    from .report import PARTITION_PARAMETERS

    configs = [c if isinstance(c, RunConfig) else RunConfig.from_dict(c["config"]) for c in configs]
    if not configs:
        raise ValueError("a caption needs the configurations the reproduction ran")
    parts = []
    for name, prefix, form, suffix in _CAPTION_FIELDS:
        used = [c for c in configs if c.partition in PARTITION_PARAMETERS.get(name, (c.partition,))]
        if name == "local_epochs":
            used = [c for c in used if c.local_steps is None]
        # a whole number of epochs prints as one ("1 local epoch", not "1.0")
        values = [int(v) if isinstance(v, float) and v.is_integer() and name == "local_epochs" else v
                  for v in _values(used, name) if v is not None]
        if name == "heterogeneity" and values == ["none"]:
            parts.append("identical hardware")
        elif values:
            if values == [1]:
                suffix = _SINGULAR.get(suffix, suffix)   # "1 local epoch", not "1 local epochs"
            parts.append(prefix + "/".join(form.format(v) for v in values) + suffix)
    seeds = sorted(_values(configs, "seed"))
    seed_text = f"seed {seeds[0]}" if len(seeds) == 1 else \
        (f"seeds {seeds[0]}–{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1))
         else "seeds " + ", ".join(map(str, seeds)))
    methods = ", ".join(_values(configs, "method"))
    command = rerun_command(notebook, scale, seed, baselines)
    other = "" if scale == "paper" else " (`-p scale paper` runs it at the paper's scale)"
    return (f"Ran at scale {scale} with {', '.join(parts)}, {seed_text}; methods: {methods}. "
            f"Rerun as shown: `{command}`{other}.")


def caption(configs, notebook: str, scale: str, seed: int = 0, baselines: str = "authors") -> None:
    """Display :func:`caption_text` under a reproduction (as a small italic paragraph)."""
    from IPython.display import Markdown, display

    display(Markdown(f"<small>{caption_text(configs, notebook, scale, seed, baselines)}</small>"))


def rerun_command(notebook: str, scale: str, seed: int = 0, baselines: str = "authors") -> str:
    """The shell command, run from the repository's root, that reruns chapter ``notebook``
    (``book/<notebook>.md``) at ``scale`` with ``seed`` (and ``baselines`` unless the
    default): jupytext writes the notebook to papermill, which runs it into ``out.ipynb``."""
    other = "" if baselines == "authors" else f" -p baselines {baselines}"
    return (f"jupytext --to ipynb -o - book/{notebook}.md | papermill - out.ipynb "
            f"-p scale {scale} -p seed {seed}{other}")


class Chapter:
    """One executed chapter: it checks the chapter's parameters (:func:`check_parameters`),
    knows its scale and seed, runs its grids (:meth:`sweep`), writes the caption under a
    reproduction (:meth:`caption`) and keeps its claims (:attr:`ledger`).

    ``namespace`` is the chapter's ``globals()``: its annotated names are its parameters;
    ``rules`` are passed to :func:`check_parameters` (``rounds=(1, None)``, ...);
    ``why_where_missed`` and ``seeds_named`` are the ledger's
    (:class:`~hetfl_core.book.report.Ledger`).

    A claim is stated where its evidence is (:meth:`state`, :meth:`headline`), as the
    ledger prints it, ``"Fig. 5a: Heroes waits least"``, in the section :meth:`section`
    named last::

        book.section("heroes-fig4a")
        book.headline("Fig. 5a: Heroes waits least", "2.86 s vs 5.96 s",
                      values=gap, criterion=more_than(1, "×", "waiting ratio", log=True))
    """

    def __init__(self, name: str, title: str, namespace: dict, *, why_where_missed: bool = False,
                 seeds_named: bool = False, **rules):
        from .report import Ledger

        check_parameters(namespace, **rules)
        self.name, self.title = name, title
        self.scale = namespace.get("scale", "book")
        self.seed = namespace.get("seed", 0)
        self.baselines = namespace.get("baselines", "authors")
        self.parameters = {k: namespace[k] for k in namespace.get("__annotations__", {})}
        self.ledger = Ledger(name, title, self.scale, self.parameters,
                             why_where_missed=why_where_missed, seeds_named=seeds_named)
        #: what every claim stated from here on gets unless told otherwise (:meth:`section`)
        self.where: dict = {}

    def by_scale(self, **values):
        """The value for this chapter's scale (:func:`~hetfl_core.runtime.config.by_scale`, which
        checks the ``smoke``, ``book`` and ``paper`` values)."""
        from ..runtime.config import by_scale

        return by_scale(self.scale, **values)

    def sweep(self, grid, **kwargs):
        """Run a grid (a ``dict`` of :class:`~hetfl_core.runtime.config.RunConfig`, or a list) with
        :func:`~hetfl_core.runtime.experiments.sweep`, each configuration as the chapter's
        ``baselines`` parameter says (:func:`with_baselines`); a dict comes back as a dict
        with the same keys, equal configurations run once. No progress bar unless asked for
        (``progress=True``, named after the chapter): a notebook rerun with papermill would
        keep the bar as an output."""
        import warnings

        from ..runtime.experiments import LocalRunsWarning, sweep

        kwargs.setdefault("desc", self.name)
        kwargs.setdefault("progress", False)
        # a page shows a warning with the path of the library's file on the machine that
        # ran it: the note that a plug-in's runs run here is printed as one plain line
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always", LocalRunsWarning)
            if isinstance(grid, dict):
                done = sweep({key: with_baselines(c, self.baselines) for key, c in grid.items()},
                             **kwargs)
            else:
                done = sweep([with_baselines(c, self.baselines) for c in grid], **kwargs)
        for note in notes:
            if issubclass(note.category, LocalRunsWarning):
                print(f"Note: {note.message}")
            else:
                warnings.warn_explicit(note.message, note.category, note.filename, note.lineno)
        return done

    def caption(self, runs) -> None:
        """The caption under a reproduction (:func:`caption`) for ``runs``: results or
        configurations, as a list or as the dict :meth:`sweep` returns."""
        runs = list(runs.values()) if isinstance(runs, dict) else list(runs)
        caption(runs, self.name, self.scale, self.seed, self.baselines)

    def section(self, label: str, kind: str | None = None) -> "_Section":
        """The section whose evidence the claims stated from here on rest on (its MyST
        label, ``"heroes-fig4a"``), and their ``kind`` if not a paper claim, until the next
        call; as ``with book.section(...):``, only for the claims inside the block."""
        return _Section(self, {"section": label, **({} if kind is None else {"kind": kind})})

    def claim(self, *args, **kwargs):
        """Add a claim to the chapter's ledger (:meth:`~hetfl_core.book.report.Ledger.claim`), in
        the current :meth:`section`."""
        return self.ledger.claim(*args, **{**self.where, **kwargs})

    def claim_cases(self, *args, **kwargs):
        """Add an "in at least k of m cases" claim to the chapter's ledger
        (:meth:`~hetfl_core.book.report.Ledger.claim_cases`), in the current :meth:`section`."""
        return self.ledger.claim_cases(*args, **{**self.where, **kwargs})

    def state(self, claim: str, paper: str, values=None, criterion=None, *,
              cases: dict | None = None, k: int | None = None, **kwargs) -> None:
        """State a claim and display its one-row verdict where it is made, also from inside
        a loop or a collapsed cell; returns nothing, so a cell that ends with it shows the
        row once. ``claim`` reads as the ledger prints it, where the paper says it and
        what: ``"Fig. 5a: Heroes waits least"`` (:func:`split_claim`); ``paper`` is what
        the paper reports. The claim is judged from ``values`` against ``criterion``
        (:meth:`claim`), or with ``cases`` (case -> per-seed values) it is an "in at least
        ``k`` of the cases" claim (:meth:`claim_cases`); ``k`` defaults to every case. It
        lies in the current :meth:`section`; other keywords are
        :meth:`~hetfl_core.book.report.Ledger.claim`'s."""
        from IPython.display import display

        ref, statement = split_claim(claim)
        if criterion is None:
            raise TypeError(f"claim {claim!r} needs a criterion")
        if cases is None:
            if k is not None:
                raise ValueError("k (at least k of the cases) needs cases")
            display(self.claim(ref, statement, paper, values, criterion, **kwargs))
        else:
            if values is not None:
                raise ValueError("a claim is judged from its values or from its cases, not both")
            display(self.claim_cases(ref, statement, paper, cases, len(cases) if k is None else k,
                                     criterion, **kwargs))

    def headline(self, *args, **kwargs) -> None:
        """State a headline claim (:meth:`state`): one the verdict box at the top of the
        chapter shows."""
        self.state(*args, headline=True, **kwargs)

    def show_paper_scale(self) -> None:
        """Display the chapter's paper-scale ledger beside this run's
        (:func:`paper_scale_markdown`), where one is recorded."""
        from IPython.display import Markdown, display

        display(Markdown(paper_scale_markdown(self.name, self.ledger.to_dict())))

    def show_summary(self) -> None:
        """Display the chapter's closing summary, written from its ledger
        (:func:`summary_markdown`)."""
        from IPython.display import Markdown, display

        display(Markdown(summary_markdown(self.ledger)))


class _Section:
    """What :meth:`Chapter.section` returns: the chapter's claims are in the section from
    the call on; used as a context manager, only until the block ends."""

    def __init__(self, chapter: Chapter, where: dict):
        self.chapter, self.before = chapter, chapter.where
        chapter.where = where

    def __enter__(self) -> "_Section":
        return self

    def __exit__(self, *exc) -> None:
        self.chapter.where = self.before


def split_claim(claim: str) -> tuple[str, str]:
    """A claim as the ledger prints it, ``"Fig. 5a: Heroes waits least"``, split at its
    first ``": "`` into where the paper says it and what it says."""
    ref, sep, statement = claim.partition(": ")
    if not sep or not ref.strip() or not statement.strip():
        raise ValueError(f"a claim reads 'where: what', as 'Fig. 5a: Heroes waits least', "
                         f"got {claim!r}")
    return ref, statement


# -- a paper-scale run, recorded with where and when it ran ------------------------------------
#: where paper-scale results live: ``$HETFL_PAPER_RESULTS``, or ``results/paper`` of the
#: repository (written by ``tools/paper_run.py``)
PAPER_RESULTS_ENV = "HETFL_PAPER_RESULTS"


def device_name() -> str:
    """The accelerator runs here use (``device="auto"`` picks it), or the CPU, in words."""
    import platform

    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda})"
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def provenance(command: str, wall_s: float, paths: Sequence[str] = ("hetfl_core",)) -> dict:
    """Where, when and how a recorded result was computed: the repository's commit (marked
    ``(with uncommitted changes)`` when any of ``paths`` differs from it), the package's
    source hash (:func:`~hetfl_core.runtime.experiments.source_hash`), the device
    (:func:`device_name`), the date (UTC), the command and the wall time in seconds."""
    import datetime
    import subprocess

    from ..runtime.experiments import source_hash

    root = Path(__file__).resolve().parents[2]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", *paths], cwd=root, capture_output=True,
                           text=True).stdout.strip()
    return {"commit": commit + (" (with uncommitted changes)" if dirty else ""),
            "source_hash": source_hash(), "device": device_name(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": command, "wall_s": round(wall_s, 1)}


def paper_results_dir() -> Path:
    """The directory of recorded paper-scale runs (:data:`PAPER_RESULTS_ENV`)."""
    return Path(os.environ.get(PAPER_RESULTS_ENV) or Path(__file__).resolve().parents[2] / "results" / "paper")


def paper_scale_markdown(chapter: str, ledger: dict, directory=None) -> str:
    """Markdown for a chapter's recorded paper-scale run beside ``ledger`` (this run's):
    where, when and how it ran (device, date, commit, source hash, command, wall time), a
    warning when the package's source has changed since (its results are then stale), and
    per claim the verdict here and at paper scale; or a line saying none is recorded."""
    from ..runtime.experiments import source_hash
    from .report import markdown_table

    path = Path(directory or paper_results_dir()) / f"{chapter}.json"
    if not path.is_file():
        return (f"*No paper-scale run of this chapter is recorded yet: "
                f"`python tools/paper_run.py {chapter}` runs it (on a GPU, hours) and records "
                f"it in `results/paper/{chapter}.json`.*")
    record = json.loads(path.read_text())
    how = record["provenance"]
    text = (f"**At the paper's scale** ({how['device']}, {how['date']}, commit "
            f"`{how['commit'][:10]}`, {how['wall_s'] / 3600:.1f} h; `{how['command']}`).")
    now = source_hash()
    if how["source_hash"] != now:
        text += (f" **Stale:** the package's source has changed since it ran (source hash "
                 f"`{how['source_hash']}`, now `{now}`); rerun it to trust it.")
    here = {(c["ref"], c["statement"]): c["verdict"] for c in ledger["claims"]}
    rows = [[f"{c['ref']}: {c['statement']}", here.get((c["ref"], c["statement"]), "—"),
             c["verdict"], c["measured"].split("; ", 1)[0]]
            for c in record["ledger"]["claims"] if c.get("kind", "paper") == "paper"]
    return text + "\n\n" + markdown_table(
        rows, ["claim", f"{ledger.get('scale', 'this')} scale", "paper scale",
               "measured at paper scale"])


# -- planning a chapter without training it ---------------------------------------------------
#: the environment variable that puts a chapter's kernel in plan mode: the JSON-lines file
#: where every run a sweep asks for is recorded (:func:`plan_chapter` sets it)
PLAN_ENV = "HETFL_PLAN_FILE"


#: the tag of a chapter's code cell that plan mode does not run: a cell that starts no sweep
#: and reads what a stand-in result (:func:`planned_result`) does not have (a method's own
#: per-client records, replayed against the method), or trains outside a sweep; and the
#: cells that use its results. Its own computation is not in the plan.
PLAN_SKIP = "plan-skip"


def plan_skipped(chapter) -> list[int]:
    """The numbers (1-based, among the chapter's code cells) of chapter ``chapter``'s code
    cells tagged :data:`PLAN_SKIP`, which plan mode passes over."""
    import jupytext

    code = [c for c in jupytext.read(Path(chapter)).cells if c.cell_type == "code"]
    return [i for i, c in enumerate(code, 1) if PLAN_SKIP in c.metadata.get("tags", [])]


def training_samples(config) -> float:
    """Training samples one run of ``config`` processes: the participants per round times
    the rounds times the samples each trains on a visit (``local_steps x batch_size``, or
    ``local_epochs`` times its share of the training pool). Nominal: it ignores the model's
    size and methods that train twice a visit (Ditto), so it compares plans with each other."""
    per_round = max(1, round(config.clients * config.participation))
    if config.local_steps:
        local = config.local_steps * config.batch_size
    else:
        pool = config.train_samples or _pool_size(config.dataset)
        share = pool * (1 - config.test_fraction - config.val_fraction) / config.clients
        local = config.local_epochs * share
    return float(per_round * config.rounds * local)


def evaluations(config) -> tuple[int, int]:
    """How many times one run of ``config`` scores its personalised models and its global
    model (:func:`~hetfl_core.runtime.engine.evaluation_due`, round by round)."""
    from ..runtime.engine import evaluation_due

    due = [evaluation_due(config, t) for t in range(1, config.rounds + 1)]
    return sum(personal for personal, _ in due), sum(personal and global_ for personal, global_ in due)


def scored_every_round(config):
    """``config`` with every round scored: each client's model after every round, and the
    global model on the whole test set at every scoring (``eval_every=1``,
    ``eval_global=True``, ``eval_global_every=None``, the engine's defaults). A chapter
    scores less at paper scale where no claim reads the rest; the plan prices both."""
    return config.replace(eval_every=1, eval_global=True, eval_global_every=None)


@functools.cache
def _pool_size(dataset: str) -> int:
    from ..science.data import load_dataset

    return len(load_dataset(dataset).y_train)


#: code cells run before the chapter's own in plan mode (the plan cell and the injected
#: parameters), so that :func:`_cell` counts the chapter's code cells
_PLAN_OFFSET = 0


def _cell() -> str:
    """"code cell N": which of the chapter's code cells is running (plan mode runs in a kernel)."""
    from IPython import get_ipython

    return f"code cell {get_ipython().execution_count - _PLAN_OFFSET}"


class PlannedRow(dict):
    """A history row of a planned run; a key it lacks (a method's own per-client entry) is
    ``nan``, so that a chapter's cell reading it runs on."""

    def __missing__(self, key):
        return math.nan


def planned_result(config) -> dict:
    """The stand-in result plan mode returns for a run it does not train: its config and a
    history of one :class:`PlannedRow` per round whose numbers are made up but ordinary
    (accuracy rising from 0.3 to 0.7, a second and a megabit a round, a loss of 1/round),
    the same for every method, so that a cell deriving a target, a ranking or a later grid
    from the results runs on and its runs are planned; marked ``planned``. Never shown:
    a planned chapter's ledger is thrown away. Each round's ``clients`` carry the engine's
    own per-client fields (id, tier, time, energy, steps, width, ratio, FLOPs, uplink):
    clients dealt in turn, their tiers those of the config's heterogeneity in turn; each
    row has the method's own metrics in their shape (its ``planned_metrics``). Configs of
    one shape (method, rounds, clients, participants, tiers, steps, those metrics) share
    their rows, read-only (a paper-scale grid holds thousands of rounds per run)."""
    from ..science.methods import METHODS
    from ..science.system import HETEROGENEITY

    method = METHODS.get(config.method)
    participants = max(1, round(config.clients * config.participation))
    tiers = tuple(name for name, *_ in HETEROGENEITY.get(config.heterogeneity, [("high",)]))
    metrics = (lambda acc: method.planned_metrics(config, acc)) if method is not None else (lambda acc: {})
    shape = (config.rounds, participants, config.clients, tiers, config.local_steps or 1,
             json.dumps(metrics(0.5), sort_keys=True, default=str))
    if shape not in _PLANNED_HISTORIES:
        _PLANNED_HISTORIES[shape] = _planned_history(*shape[:5], metrics)
    return {"config": config.to_dict(), "history": list(_PLANNED_HISTORIES[shape]), "planned": True}


#: plan mode's stand-in histories by shape (:func:`planned_result`)
_PLANNED_HISTORIES: dict[tuple, list] = {}


def _planned_history(rounds: int, participants: int, clients: int, tiers: tuple, steps: int,
                     metrics) -> list:
    """The rows of :func:`planned_result`'s stand-in history: ``metrics(acc)`` the method's
    own per-round entries."""
    history = []
    rows_of: dict[int, PlannedRow] = {}      # a client's row is the same every round
    for t in range(1, rounds + 1):
        acc = 0.3 + 0.4 * t / rounds
        ids = [((t - 1) * participants + j) % clients for j in range(participants)]
        for k in ids:
            if k not in rows_of:
                rows_of[k] = PlannedRow({"id": k, "tier": tiers[k % len(tiers)], "time_s": 1.0,
                                         "energy_j": 1.0, "local_steps": steps,
                                         "width": 1.0, "ratio": 1.0, "flops": 1e9, "uplink_bits": 1e6})
        clients_now = [rows_of[k] for k in ids]
        history.append(PlannedRow(
            {"round": t, "time_s": float(t), "round_time_s": 1.0, "idle_s": 0.0, "loss": 1.0 / t,
             "uplink_bits": 1e6 * t, "downlink_bits": 1e6 * t, "flops": 1e9 * t, "energy_j": float(t),
             "acc_global": acc, "loss_global": 1.0 / t, "acc_personal": acc, "loss_personal": 1.0 / t,
             "acc_clients": [acc] * participants, "clients": clients_now, **metrics(acc)}))
    return history


def _record(configs, where: str) -> list[dict]:
    """Plan mode's sweep: append each config to the plan file; return the cached result of
    each, or a stand-in (:func:`planned_result`) marked ``planned`` where it would have to train."""
    from ..runtime.experiments import load_cached

    results = []
    with open(os.environ[PLAN_ENV], "a") as out:
        for c in configs:
            cached = load_cached(c)
            out.write(json.dumps({"config": c.to_dict(), "key": c.key(), "cached": cached is not None,
                                  "where": f"{where}, {_cell()}"}) + "\n")
            results.append(cached if cached is not None else planned_result(c))
    return results


def _planning_sweep(configs, *args, **kwargs):
    """:func:`~hetfl_core.runtime.experiments.sweep` in plan mode: records, never trains."""
    results = _record(list(configs.values() if isinstance(configs, dict) else configs), kwargs.get("desc", "runs"))
    return dict(zip(configs, results)) if isinstance(configs, dict) else results


def _planning_run(config, *args, **kwargs):
    """:func:`~hetfl_core.runtime.experiments.run` (or ``run_cached``) in plan mode."""
    return _record([config], "run")[0]


def enter_plan_mode(offset: int = 0) -> None:
    """Make every sweep and run of this process record its configs instead of training
    (the first cell :func:`plan_chapter` runs in a chapter's kernel): each loaded module of
    the package that holds :func:`~hetfl_core.runtime.experiments.sweep`, ``run`` or ``run_cached``
    gets the recording version, and so does every later ``from ... import``."""
    from ..runtime import engine, experiments

    global _PLAN_OFFSET
    _PLAN_OFFSET = offset
    swaps = {id(experiments.sweep): _planning_sweep, id(experiments.run_cached): _planning_run,
             id(engine.run): _planning_run}
    for name, module in list(sys.modules.items()):
        if name == "hetfl_core" or name.startswith("hetfl_core."):
            for attr, value in list(vars(module).items()):
                if id(value) in swaps:
                    setattr(module, attr, swaps[id(value)])


def plan_chapter(chapter, scale: str = "paper", parameters: dict | None = None,
                 timeout: int = 120) -> tuple[list[dict], list[str]]:
    """The runs chapter ``chapter`` (a ``book/<name>.md`` path) asks for at ``scale``, found
    without training by executing it in plan mode (:func:`enter_plan_mode`), where a sweep
    returns each run's cached result or a stand-in (:func:`planned_result`). Cells that fail on it are
    passed over (a grid built from an earlier grid's results may be missed), and so is a cell
    computing for over ``timeout`` seconds outside a sweep (a check that trains a model).
    A code cell tagged :data:`PLAN_SKIP` is not run (:func:`plan_skipped` lists them).
    Returns the recorded runs (a dict per config: ``config``, ``key``, ``cached``, ``where``)
    and the first line of each cell's error."""
    from unittest import mock

    import jupytext
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    from ..science.errors import HetflError
    from papermill.parameterize import parameterize_notebook

    path = Path(chapter)
    if not path.exists():
        raise ConfigError(f"no chapter at {path}")
    if scale not in SCALES:
        raise ConfigError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    nb = jupytext.read(path)
    for cell in nb.cells:                 # as papermill's own reader leaves them
        cell.metadata.setdefault("tags", [])
        if cell.cell_type == "code" and PLAN_SKIP in cell.metadata["tags"]:
            cell.source = "pass  # " + PLAN_SKIP   # it reads what a stand-in lacks
    nb.metadata.setdefault("papermill", {})
    nb = parameterize_notebook(nb, {"scale": scale, **(parameters or {})})
    # the chapter's code cells come after this one and papermill's injected parameters
    # (and IPython counts the running cell as executed)
    nb.cells.insert(0, nbformat.v4.new_code_cell("import hetfl_core.book\n"
                                                 "hetfl_core.book.enter_plan_mode(offset=3)"))
    with tempfile.TemporaryDirectory() as tmp:
        plan_file = Path(tmp) / "plan.jsonl"
        plan_file.touch()
        # a planned chapter's ledger is not the chapter's, and its runs are not logged
        with mock.patch.dict(os.environ, {PLAN_ENV: str(plan_file), "HETFL_LEDGER_DIR": tmp}):
            os.environ.pop("HETFL_RUN_LOG", None)
            try:
                NotebookClient(nb, timeout=timeout, interrupt_on_timeout=True, kernel_name="python3",
                               allow_errors=True,
                               resources={"metadata": {"path": str(path.parent.resolve())}}).execute()
            except (DeadKernelError, AssertionError) as exc:   # nbclient asserts as it cleans up
                raise HetflError(f"the kernel planning {path.name} died (killed, or out of "
                                 f"memory): {type(exc).__name__}") from None
        records = [json.loads(line) for line in plan_file.read_text().splitlines() if line.strip()]
    errors = []
    for out in (out for cell in nb.cells for out in cell.get("outputs", []) if out.get("output_type") == "error"):
        first = (str(out.get("evalue") or "").splitlines() or [""])[0]
        errors.append(f"interrupted after {timeout} s of computing outside a sweep"
                      if out.get("ename") == "KeyboardInterrupt" else f"{out.get('ename')}: {first}")
    return records, errors


@dataclass(frozen=True)
class RunSpeed:
    """What one run of a config costs on this machine, measured by :func:`measure_speed`:
    seconds per training sample, seconds of a round's other work (sampling, sub-models,
    pruning, aggregation, charging), and seconds of a personalised scoring after a middle
    round and after the last (a method may do more then, e.g. FedBABU's fine-tuning) and of
    scoring the global model on the whole test set with the method's own scores of it."""

    per_sample: float
    per_round: float
    personal: float
    personal_last: float
    global_model: float

    def seconds(self, config) -> float:
        """The estimated seconds of one run of ``config``: its training samples, its rounds'
        other work and its scorings (:func:`evaluations`); data loading and start-up are not
        counted."""
        personal, global_ = evaluations(config)
        return (training_samples(config) * self.per_sample + config.rounds * self.per_round
                + (personal - 1) * self.personal + self.personal_last + global_ * self.global_model)


def measure_speed(config, steps: tuple[int, int] = (2, 6)) -> RunSpeed:
    """:class:`RunSpeed` of ``config``'s method, model and data on this machine (its device,
    one torch thread, as a sweep's run has). Training: after a round to warm up, one
    unscored round of two clients at ``steps[0]`` and one at ``steps[1]`` local steps; the
    difference of the two times is the extra samples' cost, the rest of the shorter round
    its other work (all of it, for a method whose work does not follow the local steps).
    Scoring: a run of two rounds, scored after each."""
    from ..runtime.engine import build_simulation, evaluate_method, score_global_model, single_thread
    from ..science.errors import ConfigError, DivergenceError

    short = config.replace(rounds=2, participation=min(1.0, 2 / config.clients), local_epochs=1,
                           eval_global_every=None)
    try:
        short.validate()
    except ConfigError:      # an option bound to the run's length (a warm-up of some rounds):
        short = short.replace(rounds=config.rounds)     # the run's own; two rounds are timed
    participants = max(1, round(short.clients * short.participation))

    def timed(work) -> float:
        start = time.perf_counter()
        with contextlib.suppress(DivergenceError):      # a diverged round took its time all the same
            work()
        return time.perf_counter() - start

    def score_global() -> None:            # what evaluate_method adds with score_global
        score_global_model(sim.method.global_model(), sim.data.dataset)
        sim.method.extra_metrics()

    with single_thread():                  # as a run of a sweep trains: one thread
        rounds = []
        for k in steps:
            sim = build_simulation(short.replace(local_steps=k))
            timed(lambda: sim.round(1, evaluate=False))          # warm-up
            rounds.append(timed(lambda: sim.round(2, evaluate=False)))
        sim = build_simulation(short.replace(local_steps=1))
        timed(lambda: sim.round(1, evaluate=False))
        personal = timed(lambda: evaluate_method(sim, score_global=False))
        timed(lambda: sim.round(2, evaluate=False))
        personal_last = timed(lambda: evaluate_method(sim, score_global=False))
        global_model = timed(score_global)
    per_sample = max(rounds[1] - rounds[0], 0.0) / ((steps[1] - steps[0]) * short.batch_size * participants)
    per_round = max(rounds[0] - per_sample * steps[0] * short.batch_size * participants, 0.0)
    return RunSpeed(per_sample, per_round, personal, personal_last, global_model)


# -- what a chapter prints and how it ends ------------------------------------------------
#: characters of the page's code column (and of its printed output) at 1280 px
COLUMN = 76


def say(*parts, sep: str = " ") -> None:
    """``print`` for a chapter's running text: ``parts`` (each ``str``-ed, joined by
    ``sep``), each line wrapped at :data:`COLUMN` characters with a two-space
    continuation indent, so that no printed line scrolls sideways; words longer than the
    column are left whole."""
    import textwrap

    for line in sep.join(map(str, parts)).split("\n"):
        print(textwrap.fill(line, COLUMN, subsequent_indent="  ", break_long_words=False,
                            break_on_hyphens=False) if line else "")


def first_clause(text: str, limit: int = 160) -> str:
    """The part of a claim's *why* before its first ``"; "``, cut at ``limit`` characters."""
    head = text.split("; ", 1)[0].strip()
    return head if len(head) <= limit else head[: limit - 1].rstrip() + "…"


def summary_markdown(ledger, title: str = "") -> str:
    """The summary that closes a paper chapter, from its ``ledger`` (a
    :class:`~hetfl_core.book.report.Ledger` or its saved ``dict``): the counts of the counted
    paper claims, then one line per counted claim grouped by verdict (what held, what
    failed, what the seeds could not decide); a claim that does not hold carries the first
    clause of its *why*. Uncounted claims and checks appear only in the counts, and every
    number comes from the ledger, so the summary cannot disagree with the table."""
    from .report import VERDICTS, Ledger, _counts, counts_sentence

    saved = ledger.to_dict() if isinstance(ledger, Ledger) else ledger
    claims = saved["claims"]
    papers = [c for c in claims if c.get("kind", "paper") == "paper"]
    lines = [f"**{title or saved.get('title', 'This chapter')} at scale "
             f"`{saved.get('scale') or '?'}`:** "
             + counts_sentence(_counts(saved), total=len(claims)), ""]
    heads = {"holds": "What held", "fails": "What failed",
             "inconclusive": "What the seeds could not decide"}
    for verdict in VERDICTS:
        rows = [c for c in papers if c["verdict"] == verdict]
        if not rows:
            continue
        lines += [f"{heads[verdict]}:", ""]
        for c in rows:
            line = f"- {c['ref']}: {c['statement']} ({c['measured']})"
            if verdict != "holds" and c.get("why"):
                line += f"; why: {first_clause(c['why'])}"
            lines.append(line + ".")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
