"""The ladder of the arena's reference cell (book/arena.md): its leaderboard at each rung.

The arena makes no claim of one method against one rival in its reference cell; it ranks
every method by its final personalised accuracy (:func:`hetfl_core.book.arena.leaderboard`).
So this claim's terms read differently from the other chapters':

* ``rivals`` are the leaderboard's contestants, every method of the arena
  (:data:`hetfl_core.book.arena.METHODS`, in its order), each its own label;
* ``value(runs, rival)`` is the contestant's own per-seed final personalised accuracy
  (points), the arena's ``acc`` column, not a difference, so that the methods ordered by
  its mean over the seeds are the reference cell's leaderboard
  (:func:`hetfl_core.book.ladder.arena_settling`: one board per rung, and Kendall's tau
  between consecutive boards);
* ``method`` names what the boards rank (the personalised accuracy), and the criterion
  only asks whether a contestant learned at all: its accuracy above chance, one label in
  the dataset's number of classes.

Each run is the arena's reference cell (image task, Dirichlet alpha 0.5, medium device
heterogeneity, the wireless cell as everyone's cost model) at the rung's budget, with
the options the arena sets for a run of that many rounds (OFA-FL's capacities by tier
and its schedule scaled to the rounds, :func:`hetfl_core.book.arena.method_options`) and the
global model scored after the last round only, as the arena scores it.

The learning rates: the arena tunes each method's rate in the reference cell on its first
seed (:func:`hetfl_core.book.arena.run_arena`). The ladder's runs are fixed before any of them
runs, so each method keeps the rate the book-scale arena chose for it (:data:`ARENA_LRS`,
the ``lr`` column of the chapter's reference leaderboard) at every rung; at book scale
the chapter names any method whose tuned rate differs from its rate here. A longer
budget may favour a smaller rate than a short one; the ladder does not retune, so a
method whose rate no longer suits the longer budget can lose rank on the ladder for that
reason.
"""
from __future__ import annotations

import numpy as np

from ...runtime.config import RunConfig
from ..report import final, more_than, per_seed
from .claims import PTS, ClaimSpec, register

#: every method of the arena, in its order (:data:`hetfl_core.book.arena.METHODS`; kept here so
#: that importing the ladder does not import the arena; a test checks they are equal)
ARENA_METHODS = ("fedlps", "heroes", "ofafl", "srp-pfed", "sparse-prune-pfl", "fedavg", "fedprox",
                 "heterofl", "fedrolex", "fjord", "fedper", "fedrep", "lg-fedavg", "ditto", "local")
#: the image learning rate each method runs at on every rung: the rate the book-scale arena
#: tunes for it in the reference cell (``arena.run_arena("book").lrs[("image", m)]``), fixed
#: here before the ladder runs; book/arena.md prints any method whose tuned rate differs
ARENA_LRS = {"fedlps": 0.3, "heroes": 0.1, "ofafl": 0.3, "srp-pfed": 0.3, "sparse-prune-pfl": 0.1,
             "fedavg": 0.3, "fedprox": 0.3, "heterofl": 1.0, "fedrolex": 1.0, "fjord": 0.3,
             "fedper": 0.3, "fedrep": 0.3, "lg-fedavg": 0.03, "ditto": 0.3, "local": 0.3}


def arena_setting(scale: str) -> RunConfig:
    """The arena's reference cell at ``scale`` (:func:`hetfl_core.book.arena.settings`: its
    image task at Dirichlet alpha 0.5 and medium heterogeneity): 10 clients, half of them a
    round, 14 rounds of 5 local steps on 2000 samples of Fashion-MNIST at 14x14 at book
    scale; 50 clients, a fifth a round, 200 rounds of 10 steps on every sample of
    full-resolution Fashion-MNIST at the arena's own paper scale."""
    from ..arena import settings

    return settings(scale).image


def arena_run(config: RunConfig) -> RunConfig:
    """A rung's run as the arena makes it (:func:`hetfl_core.book.arena._config`): the options
    the arena sets for a run of these rounds (:func:`hetfl_core.book.arena.method_options`) and
    the global model scored after the last round only."""
    from ..arena import method_options
    from ..chapter import with_baselines

    config = config.replace(eval_global_every=config.rounds)
    return with_baselines(config.with_options(**method_options(config.method, config)), "authors")


def own_runs(rival: str) -> tuple[str, ...]:
    """What a contestant's value reads: its own runs, so a contestant whose run diverged
    leaves the others' places at that rung standing."""
    return (rival,)


def accuracy(runs: dict, rival: str) -> np.ndarray:
    """Per seed, the contestant ``rival``'s final personalised accuracy in points: the
    arena's ``acc`` (:func:`hetfl_core.book.arena.run_metrics`), by which its leaderboard ranks."""
    return 100 * per_seed(runs[rival], final)


def _classes() -> int:
    """The number of labels of the reference cell's dataset (from its registered metadata,
    without loading it)."""
    from ...science.data.datasets import DATASET_INFO

    return DATASET_INFO[arena_setting("book").dataset].classes


register(ClaimSpec(
    "arena", "reference cell", "the reference cell's leaderboard (final personalised accuracy)",
    "Leaderboards, the reference cell", "no paper (the arena is this book's)", None,
    "personalised accuracy", ARENA_METHODS,
    {m: (m, {}, {"lr": ARENA_LRS[m]}) for m in ARENA_METHODS}, arena_setting, accuracy,
    more_than(100 / _classes(), PTS, f"personalised accuracy (chance: one label in {_classes()})"),
    paper_global_last_two=False, adapt=arena_run, reads=own_runs))
