"""The ladder's claims of OFA-FL (book/ofa_fl.md).

Each claim reads a run's accuracy at every density ratio of its once-for-all model
(``acc_ratios``, :func:`hetfl_core.science.lottery.ratio_summary`), so its runs store that field
(:attr:`ClaimSpec.fields`). A rung stretches the chapter's pruning schedule to its
rounds (:func:`stretch_schedule`): the warm-up and every period between prunings times
the same factor, as the chapter's probes stretch it, so that every rung prunes through
the whole ladder of ratios and gives its last ratio the same share of the run.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from ...runtime.config import ALL, RunConfig, by_scale
from ...science.errors import ConfigError
from ..report import at_least, at_most
from .claims import PTS, ClaimSpec, register

#: the stress ratios of Figs. 2-3 and the mild ratios of Table 2 (the chapter's
#: ``STRESS_R`` and ``TABLE2_R``)
STRESS_R = [1.0, 0.5, 0.25, 0.1, 0.05]
TABLE2_R = [1.0, 0.9, 0.8, 0.7, 0.6]
#: the variance's unit: squared points of accuracy across the ratios
PT2 = " pt²"


def ofa_schedule(scale: str, ratios, **fields) -> RunConfig:
    """The chapter's ``schedule(ratios, **fields)`` on its ``base`` (setup cell): ten IID
    clients of the paper's capacities, SGD with momentum 0.9 and weight decay 5e-4 at rate
    0.05, batch 20 and 5 local steps (the paper's batch 10 and one local epoch at paper
    scale); the first pruning after W rounds, then one every P, no tail: W=20, P=5 at book
    scale (the paper's Table 1 schedule divided by ten), W=200, P=50 at paper scale."""
    at = partial(by_scale, scale)
    warmup, every = at(smoke=(1, 1), book=(20, 5), paper=(200, 50))
    base = RunConfig(method="ofafl", model="mlp", partition="iid", clients=10, test_fraction=0.0,
                     lr=0.05, momentum=0.9, weight_decay=5e-4, batch_size=at(smoke=20, book=20, paper=10),
                     local_steps=at(smoke=2, book=5, paper=ALL))
    options = {"ratios": list(ratios), "warmup": warmup, "every": every,
               "test_samples": fields.pop("test_samples", None)}
    return base.replace(rounds=warmup + (len(ratios) - 1) * every, options=options, **fields)


def fig2_setting(scale: str) -> RunConfig:
    """Fig. 2's runs (the chapter's ``grid["fig2", ...]``): the MLP on MNIST (``mnist-5k``,
    every sample; digits at smoke scale) at the stress ratios."""
    at = partial(by_scale, scale)
    return ofa_schedule(scale, STRESS_R, dataset=at(smoke="digits", book="mnist-5k", paper="mnist-5k"),
                        train_samples=at(smoke=600, book=ALL, paper=ALL))


def table2_setting(scale: str) -> RunConfig:
    """Table 2's runs (``grid["table2", ...]``): the CIFAR-10 stand-in (Fashion-MNIST, the
    MLP; the small ResNet at paper scale), scored on 2000 test images at book scale, at the
    mild ratios 1.0 to 0.6."""
    at = partial(by_scale, scale)
    return ofa_schedule(scale, TABLE2_R, model=at(smoke="mlp", book="mlp", paper="resnet"),
                        dataset=at(smoke="digits", book="fashion-mnist", paper="fashion-mnist"),
                        train_samples=at(smoke=600, book=ALL, paper=ALL),
                        test_samples=at(smoke=ALL, book=2000, paper=ALL))


def stretch_schedule(config: RunConfig) -> RunConfig:
    """``config`` with its pruning schedule stretched to its rounds: the warm-up and the
    period between prunings times ``rounds / (warmup + (ratios - 1) * every)`` (the
    chapter's ``schedule(..., stretch=k)``); a schedule that already fills the rounds (the
    book and paper rungs) is unchanged. A stretch that is not a whole number is refused."""
    o = config.options
    length = o["warmup"] + (len(o["ratios"]) - 1) * o["every"]
    stretch, rest = divmod(config.rounds, length)
    if rest or stretch < 1:
        raise ConfigError(f"{config.rounds} rounds do not stretch a schedule of {length} rounds")
    return config.with_options(warmup=stretch * o["warmup"], every=stretch * o["every"])


#: the chapter's three methods (``METHODS``) with global pruning, as its claims read them
FIG2_METHODS = {"OFA-FL": ("ofafl", {"scope": "global"}), "LTP": ("ltp", {"scope": "global"}),
                "one-shot": ("ofa-oneshot", {"scope": "global"})}
TABLE2_METHODS = {"OFA-FL": ("ofafl", {"scope": "global"}), "LTP": ("ltp", {"scope": "global"})}


def reading(runs: list[dict], key: str, when: str) -> np.ndarray:
    """Per seed, a run's ``key`` (``"mean"`` or ``"var"`` across the ratios, in % or pt²)
    at reading ``when`` (``"max"``: the max-average round; ``"final"``): the chapter's
    ``reading_of``."""
    from ...science.lottery import ratio_summary

    return np.array([ratio_summary(r)[when][key] for r in runs], float)


def lead(key: str, when: str, runs: dict, rival: str) -> np.ndarray:
    """Per seed, OFA-FL's ``key`` at ``when`` minus the rival's: the chapter's
    ``lead_over(fig, "ofafl", ..., key, when)`` against that rival (``paired``)."""
    return reading(runs["OFA-FL"], key, when) - reading(runs[rival], key, when)


# The chapter pairs OFA-FL with the rival best on average (the flatter for a variance),
# chosen among LTP and one-shot pruning on its runs; the ladder judges both, each on its
# own (the paper's figures set OFA-FL against both).
register(ClaimSpec(
    "ofa_fl", "Fig. 2a", "OFA-FL's accuracy varies least across the ratios (max-average "
    "round, stress MLP)", "Fig. 2, the variance claim cell (max-average round)",
    "lowest variance", None, "OFA-FL", ("LTP", "one-shot"), FIG2_METHODS, fig2_setting,
    partial(lead, "var", "max"), at_most(0, what="var OFA-FL − var of the flatter rival"),
    unit=PT2, paper_global_last_two=False, adapt=stretch_schedule, fields=("acc_ratios",)))
register(ClaimSpec(
    "ofa_fl", "Figs. 2-3", "OFA-FL has the highest mean accuracy across the ratios (stress "
    "MLP)", "Fig. 2, the highest-mean claim cell", "highest mean", None, "OFA-FL",
    ("LTP", "one-shot"), FIG2_METHODS, fig2_setting, partial(lead, "mean", "max"),
    at_least(0, PTS, "OFA-FL − the rival best on average"),
    paper_global_last_two=False, adapt=stretch_schedule, fields=("acc_ratios",)))
# Table 2 reads the final round only: the paper rung scores once, after its last round
register(ClaimSpec(
    "ofa_fl", "Table 2", "OFA-FL's final accuracy varies less across the ratios 1.0 to 0.6 "
    "than LTP's", "Table 2, the claim cell", ".0001 vs .0004", 0.0001 - 0.0004, "OFA-FL",
    ("LTP",), TABLE2_METHODS, table2_setting, partial(lead, "var", "final"),
    at_most(0, what="var OFA-FL − var LTP"), unit=PT2, digits=3,
    paper_eval_every=table2_setting("paper").rounds, paper_global_last_two=False,
    adapt=stretch_schedule, fields=("acc_ratios",)))
