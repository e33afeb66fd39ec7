"""FedRolex (Alam et al., 2022): a rolling sub-model window.

As HeteroFL, but in round t a client of width w trains units
{(t - 1) + j mod n_l : j < ceil(w n_l)} of every hidden layer, a window that moves by
one unit per round (FedRolex, Sec. 3, Eq. 4), so every unit is trained by every width.
The server averages each entry over the clients that hold it (Sec. 3, plain mean).
Everything else (masking trick, Scaler, clipping, scores, options) is HeteroFL's, as the
authors' code runs FedRolex: see :mod:`hetfl_core.science.methods.heterofl`.

Deviations kept on purpose:

* **Window direction.** The authors' code rolls the unit list the other way (start
  -(t - 1) mod n_l), the paper's mirror image: ``direction="backward"``.
* **Weights of biases and of the classifier.** The authors' code weights them (not the
  hidden weight matrices) by a running count of past updates of each entry that also
  grows with every earlier client of the round, so the result depends on the order in
  which the server reads the clients; the paper's plain mean applies to every entry here.
"""
from __future__ import annotations

from ..options import Option
from ..submodel import layer_indices, rolling_units
from .base import register
from .heterofl import HeteroFL


@register
class FedRolex(HeteroFL, name="fedrolex", label="FedRolex", color="#fdae6b", marker="v"):
    """FedRolex: rolling sub-model windows, averaged over holders (Alam et al. 2022)

    Trains its clients sequentially or batched as HeteroFL does.
    """

    option_specs = {**HeteroFL.option_specs,
                    "direction": Option("forward", "the window's move per round: forward (the "
                                        "paper's Eq. 4) or backward (the authors' code, its "
                                        "mirror image)", choices=("forward", "backward"))}

    def indices(self, width, round_idx):
        """The window of every hidden layer at ``width``, from unit +-(round_idx - 1) (mod its units)."""
        offset = (1 if self.options["direction"] == "forward" else -1) * (round_idx - 1)
        return layer_indices(self.model, width, lambda n, w: rolling_units(n, w, offset=offset))
