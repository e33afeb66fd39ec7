"""FedRolex (Alam et al., 2022): a rolling sub-model window.

As HeteroFL, but in round t a client of width w trains units
{(t - 1) + j mod n_l : j < ceil(w n_l)} of every hidden layer, a window that moves by
one unit per round (FedRolex, Eq. 4), so over n_l rounds every unit is trained by every
width and the large-width units are not left to the fast clients alone.
"""
from __future__ import annotations

from ..submodel import rolling_units
from .base import register
from .heterofl import HeteroFL


@register
class FedRolex(HeteroFL):
    """HeteroFL with the rolling window of units."""

    name = "fedrolex"
    summary = "FedRolex: rolling sub-model windows, averaged over holders (Alam et al. 2022)"

    def unit_rule(self, round_idx):
        """Window start = round index - 1 (mod the layer's units)."""
        return lambda n, w: rolling_units(n, w, offset=round_idx - 1)
