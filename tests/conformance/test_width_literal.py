"""HeteroFL, FedRolex and FjORD against literal ports of their authors' loops
(:mod:`.literal_width`: an ``nn.Module`` per client, ``torch.optim.SGD``, the authors'
index bookkeeping and server sums) on uneven clients: 56, 36, 10 and 72 training
samples with batch 16, so every client has a partial batch and client 2 has only one,
smaller than a batch (the authors' loaders keep it: no ``drop_last``); widths 1, 1, 1/4,
1/2; momentum and weight decay; two rounds of two epochs, the second with a subset."""
import copy

import pytest
import torch

from . import literal_width as lit
from .literal_reference import UNEVEN_SIZES
from .pfl_reference import build, tiny_config

PARTICIPANTS = [[0, 1, 2, 3], [0, 2, 3]]
TOL = 1e-5


def run(method: str, options: dict | None = None, participants=PARTICIPANTS):
    """The package's rounds on the uneven federation: (simulation, initial state, final state)."""
    config = tiny_config(method, sizes=UNEVEN_SIZES, rounds=len(participants), heterogeneity="medium",
                         local_epochs=2.0, momentum=0.5, weight_decay=1e-3, options=options or {})
    sim, _ = build(config)
    start = copy.deepcopy(sim.method.model.state_dict())
    for t, ids in enumerate(participants, start=1):
        sim.round(t, clients=ids, evaluate=False)
    return sim, start, sim.method.model.state_dict()


def largest_difference(ours: dict, theirs: dict) -> float:
    """max |ours - theirs| over every tensor."""
    return max(float((ours[k] - theirs[k]).abs().max()) for k in theirs)


def test_the_federation_is_uneven_and_mixed():
    sim, _, _ = run("heterofl", participants=PARTICIPANTS[:1])
    sizes = [c.n_train for c in sim.data.clients]
    assert all(n % sim.config.batch_size for n in sizes) and min(sizes) < sim.config.batch_size
    assert set(sim.method.widths.values()) == {1.0, 0.5, 0.25}


def test_heterofl_matches_the_literal_port():
    sim, start, ours = run("heterofl")
    theirs = lit.heterofl_rounds(sim, start, PARTICIPANTS)
    assert largest_difference(ours, theirs) <= TOL


@pytest.mark.parametrize("off", [{"label_mask": False}, {"scaler": False}, {"clip_norm": None}])
def test_heterofl_options_match_the_port_with_that_rule_off(off):
    """Each ablation option is the authors' loop with that line removed, and each rule
    moves the state (the port with the rule on is far)."""
    sim, start, ours = run("heterofl", off, PARTICIPANTS[:1])
    assert largest_difference(ours, lit.heterofl_rounds(sim, start, PARTICIPANTS[:1], options=off)) <= TOL
    assert largest_difference(ours, lit.heterofl_rounds(sim, start, PARTICIPANTS[:1])) > 1e-3


def test_fedrolex_matches_the_literal_port_with_the_codes_roll():
    """``direction="backward"`` is the code's ``torch.roll(arange(n), rounds % n)[:k]``
    (unsorted there, sorted here: the same set of units)."""
    sim, start, ours = run("fedrolex", {"direction": "backward"})
    theirs = lit.heterofl_rounds(sim, start, PARTICIPANTS, outputs=lit.rolled_outputs)
    assert largest_difference(ours, theirs) <= TOL
    assert largest_difference(ours, lit.heterofl_rounds(sim, start, PARTICIPANTS)) > 1e-3   # the roll acts


def test_fjord_matches_the_flower_port():
    """``fjord_average`` weights by n_k: the package's plain-mean option is far from the port."""
    sim, start, ours = run("fjord")
    theirs = lit.fjord_rounds(sim, start, PARTICIPANTS)
    assert largest_difference(ours, theirs) <= TOL
    plain, plain_start, plain_state = run("fjord", {"weighting": "count"})
    assert largest_difference(plain_state, lit.fjord_rounds(plain, plain_start, PARTICIPANTS)) > 1e-3
