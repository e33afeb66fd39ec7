"""FedRolex (Alam et al., 2022): a rolling sub-model window.

As HeteroFL, but in round t a client of width w trains units
{(t - 1) + j mod n_l : j < ceil(w n_l)} of every hidden layer, a window that moves by
one unit per round (FedRolex, Sec. 3, Eq. 4), so over n_l rounds every unit is trained
by every width and the large-width units are not left to the fast clients alone. The
server averages each entry over the clients that hold it (Sec. 3, plain mean).

Everything else is HeteroFL's, as the authors' code runs FedRolex: the masking trick, the
Scaler, gradient clipping at norm 1, the plain mean over holders, and the scores of the
full global model (``acc_global`` on the whole test set, ``acc_personal`` label-masked on
each client's test split); see :mod:`hetfl_core.methods.heterofl` for the options.

Deviations kept on purpose:

* **Window direction.** The paper's window starts at unit (t - 1) mod n_l and moves
  forward (``direction="forward"``, the default). The authors' code rolls the unit list
  the other way (start -(t - 1) mod n_l): the mirror image, which trains the same number
  of units per layer and visits every unit equally often; ``direction="backward"`` runs it.
* **Weights of biases and of the classifier.** The authors' code averages hidden-layer
  weight matrices plainly over holders (its default ``avg`` weighting), but weights the
  biases and the classifier by a running count of past updates of each entry that also
  grows with every earlier client of the same round, so the result depends on the order
  in which the server reads the clients. The paper states a plain mean over holders,
  which this method applies to every entry.
"""
from __future__ import annotations

from ..options import Option
from ..submodel import rolling_units
from .base import register
from .heterofl import HeteroFL


@register
class FedRolex(HeteroFL, name="fedrolex", label="FedRolex"):
    """FedRolex: rolling sub-model windows, averaged over holders (Alam et al. 2022)

    Trains its clients sequentially, for HeteroFL's reasons: per-width sub-model shapes,
    the Scaler's hooks, per-client label masks and gradient clipping.
    """

    option_specs = {**HeteroFL.option_specs,
                    "direction": Option("forward", "the window's move per round: forward (the "
                                        "paper's Eq. 4) or backward (the authors' code, its "
                                        "mirror image)", choices=("forward", "backward"))}

    def unit_rule(self, round_idx):
        """Window start = +-(round index - 1) (mod the layer's units)."""
        step = 1 if self.options["direction"] == "forward" else -1
        return lambda n, w: rolling_units(n, w, offset=step * (round_idx - 1))
