"""The ladder's claims of Lightweight personalised FL (book/lightweight_pfl.md)."""
from __future__ import annotations

from functools import partial

import numpy as np

from ..config import ALL, RunConfig, by_scale
from ..report import at_least, final, per_seed
from .base import PTS, ClaimSpec, register


def lpfl_setting(scale: str) -> RunConfig:
    """The chapter's ``base`` (its settings cell) at the default parameters: OPT's method
    on Fashion-MNIST with LeNet-5, 10 clients, 40 rounds of 2 local steps at book scale;
    100 clients, 100 rounds of 1 step and every training sample at paper scale (Sec. V),
    personalised models scored every second round. Its options (``theta_ratio``) are
    OPT's (:func:`_lpfl_methods`): a baseline's options replace the base's in the chapter."""
    at = partial(by_scale, scale)
    dataset = at(smoke="digits", book="fashion-mnist", paper="fashion-mnist")
    return RunConfig(
        method="sparse-prune-pfl", dataset=dataset, model="cnn" if scale == "smoke" else "lenet5",
        clients=at(smoke=10, book=10, paper=100), rounds=at(smoke=2, book=40, paper=100),
        local_steps=at(smoke=1, book=2, paper=1), lr=0.05, batch_size=32, seed=0,
        train_samples=at(smoke=400, book=4000, paper=ALL), eval_every=at(smoke=1, book=2, paper=2),
        eval_global=False)


#: the cases of Figs. 2-3 (the chapter's ``CASES``): a level each
LPFL_CASES = {"class-4": {"partition": "shards", "classes_per_client": 4},
              "class-2": {"partition": "shards", "classes_per_client": 2},
              "alpha=0.5": {"partition": "dirichlet", "alpha": 0.5},
              "alpha=0.1": {"partition": "dirichlet", "alpha": 0.1}}


def _fedper_head(model: str, dataset: str) -> int:
    """FedPer's ``head_layers`` whose private part is closest to the convolutional split
    (the chapter's ``baseline_split(model, dataset, "fedper", "conv")``): the head that
    differs from it in the fewest parameters."""
    from ..data import load_dataset
    from ..masks import structured_units
    from ..models import build_model
    from ..personalization import body_parameter_names, split_parameter_names

    data = load_dataset(dataset)
    net = build_model(model, data.input_shape, data.num_classes)
    wanted = set(split_parameter_names(net, "conv"))
    sizes = {n: p.numel() for n, p in net.named_parameters()}
    costs = {h: sum(sizes[n] for n in wanted ^ set(body_parameter_names(net, h)))
             for h in range(1, len(structured_units(net, include_output=True)))}
    return min(costs, key=lambda h: (costs[h], h))


def _lpfl_methods() -> dict:
    """OPT (``method_config(base, allocation="dca")``) and FedPer (``config_for``: the
    wireless cell, equal bandwidth, the head nearest the conv split) in every case."""
    opt = {"theta_ratio": 10.0, "split": "conv", "allocation": "dca", "k": 1.0, "r": 1.0,
           "prune_scope": "private"}
    head = _fedper_head("lenet5", "fashion-mnist")
    methods = {}
    for case, level in LPFL_CASES.items():
        methods[f"OPT, {case}"] = ("sparse-prune-pfl", opt, level)
        methods[f"FedPer, {case}"] = ("fedper", {"head_layers": head},
                                      {**level, "system": "wireless", "bandwidth_policy": "equal"})
    return methods


def lpfl_worst_case_gap(runs: dict, rival: str) -> np.ndarray:
    """Per seed, OPT's final personalised accuracy minus the rival's in its worst case
    (points): the chapter's ``gap_by_case`` of the Figs. 2-3 row, every case at once."""
    gaps = [100 * (per_seed(runs[f"OPT, {c}"], final) - per_seed(runs[f"{rival}, {c}"], final))
            for c in LPFL_CASES]
    return np.min(gaps, axis=0)


# FedPer is the rival the row names (the paper's "negligible loss" against it)
register(ClaimSpec(
    "lightweight_pfl", "Figs. 2–3", "OPT's final accuracy is within 2 points of FedPer's "
    "(same rounds, every case)", "Figs. 2–3, the OPT − FedPer claim cell", "negligible loss",
    None, "OPT", ("FedPer",), _lpfl_methods(), lpfl_setting, lpfl_worst_case_gap,
    at_least(-2, PTS, "OPT − FedPer, worst case")))
