"""LTP: progressive lottery-ticket pruning without the joint loss (OFA-FL's ablation).

The "LTH pruning" baseline of Varma et al. (2023, Sec. 3.8): everything as OFA-FL, except
that a client's loss is only its own sub-network's, L = [l(d; own * theta)]; comparing
with ``ofafl`` isolates Alg. 4's averaged loss.
"""
from __future__ import annotations

from .base import register
from .ofafl import OFAFL


@register
class LTP(OFAFL, name="ltp", label="LTP", color="#525252", marker="D"):
    """Lottery-ticket pruning into nested masks, own-sub-network loss only (OFA-FL's LTP baseline)"""

    joint = False
