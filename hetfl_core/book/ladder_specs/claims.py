"""What a claim on the ladder is (:class:`ClaimSpec`), where the claims are kept
(:data:`SPECS`, :func:`register`) and the ladder's rungs (:data:`RUNGS`): the chapters'
modules of :mod:`hetfl_core.book.ladder_specs` import them from here."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ...runtime.config import RunConfig
from ..report import Criterion

#: the rungs, cheapest first: the book scale's configuration, 2x, 4x and 8x its rounds,
#: and the paper's federation
RUNGS = ("book", "x2", "x4", "x8", "paper")
#: the points on the percent scale (how accuracy differences print)
PTS = " points"


@dataclass(eq=False)
class ClaimSpec:
    """One headline claim on the ladder.

    ``methods`` maps each label the claim needs (the method, its rivals, any run its value
    reads, e.g. the run that sets a target) to ``(registered name, options)`` or
    ``(registered name, options, changes to the setting)`` (a level of a sweep; the changes
    may be a function of the rung's configuration, e.g. half its rounds);
    ``setting(scale)`` is the chapter's configuration at ``"book"`` and ``"paper"`` scale
    (``"smoke"`` for a test's toy); ``value(runs, rival)`` is the claim's per-seed paired
    value from ``runs`` (label -> the results of :attr:`seeds`, in order) against one rival,
    as the chapter's cell ``cell`` computes it; ``criterion`` the chapter's criterion.
    ``paper_value`` is the paper's number on the value's scale (a line on the plot), or
    ``None``. ``paper_eval_every`` evaluates the paper rung every so many rounds (``None``:
    as the chapter's paper scale does); ``paper_global_last_two`` scores the global model on
    the whole test set after the last two rounds only at the paper rung (the final global
    accuracy, a mean of the last two, stays defined; no claim on the ladder reads it
    earlier), where every round's scoring is a sixth of a paper-scale run's time.
    ``fields`` names the history fields ``value`` reads that a run stored before they were
    kept may lack (:data:`hetfl_core.book.ladder.HISTORY_FIELDS`): such a run is computed again.

    A claim the chapter judges case by case (``book.state(..., cases=...)``, judged by
    :func:`~hetfl_core.book.report.judge_cases`) has ``per_case=True``: its ``value(runs,
    rival)`` returns a dict from each case's name (as the chapter names it) to that case's
    per-seed paired values, and it holds when at least ``k`` cases hold (``None``: every
    case, the chapter's default).

    ``adapt(config)``, where given, completes each rung's configuration last (e.g. a pruning
    schedule scaled to the rung's rounds, or the options the arena sets for a run of that
    many rounds); ``None`` leaves it as the rung made it, so a claim without it keeps its
    run keys.

    ``reads(rival)``, where given, names the labels whose runs the value against ``rival``
    reads (the arena's contestant reads its own runs only); ``None``: every label (a value
    may read any run, e.g. a target or a budget common to all). A diverged run leaves
    unjudged only the rivals whose value reads it (:meth:`labels_read`)."""

    chapter: str
    ref: str
    statement: str
    cell: str
    paper: str
    paper_value: float | None
    method: str
    rivals: tuple[str, ...]
    methods: Mapping[str, tuple[str, dict]]
    setting: Callable[[str], RunConfig]
    value: Callable[[dict, str], np.ndarray | dict]
    criterion: Criterion
    unit: str = PTS
    digits: int = 1
    seeds: tuple[int, ...] = (0, 1, 2)
    rungs: tuple[str, ...] = RUNGS
    base_scale: str = "book"
    paper_eval_every: int | None = None
    paper_global_last_two: bool = True
    fields: tuple[str, ...] = ()
    per_case: bool = False
    k: int | None = None
    adapt: Callable[[RunConfig], RunConfig] | None = None
    reads: Callable[[str], tuple[str, ...]] | None = None

    def labels_read(self, rival: str) -> tuple[str, ...]:
        """The labels whose runs the value against ``rival`` reads, in :attr:`methods`'
        order: :attr:`reads`'s, else every label."""
        if self.reads is None:
            return tuple(self.methods)
        wanted = set(self.reads(rival))
        unknown = wanted - set(self.methods)
        if unknown:
            raise ValueError(f"claim {self.ref!r} of {self.chapter}: its value against {rival!r} "
                             f"reads {sorted(unknown)}, which are not among its methods")
        return tuple(label for label in self.methods if label in wanted)

    @property
    def name(self) -> str:
        """The claim's reference within its chapter, e.g. ``"Table I"``."""
        return self.ref


#: chapter -> its claims on the ladder, in the chapter's order
SPECS: dict[str, list[ClaimSpec]] = {}


def register(spec: ClaimSpec) -> ClaimSpec:
    """Add ``spec`` to :data:`SPECS` (a claim already there under its chapter and ``ref`` is
    replaced)."""
    claims = SPECS.setdefault(spec.chapter, [])
    claims[:] = [c for c in claims if c.ref != spec.ref] + [spec]
    return spec
