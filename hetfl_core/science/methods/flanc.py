"""Flanc (Mei et al., 2022): the original neural composition, as Heroes describes it.

Every layer shares one basis v (averaged over all participants, Eq. 5), but each width
p = 1..P has its *own* coefficient u^(p) of p^2 blocks, trained and averaged only by the
clients of that width; the global model is basis times u^(P), learnt from the fast
clients alone. Widths follow Heroes' time budget; every client runs tau_0 local steps;
width p trains the first p groups of the first layer and classifier. Flanc's
orthogonality regulariser is off (the paper gives every width method the same widths).
"""
from __future__ import annotations

from ..composition import Selection, flanc_block_count, width_blocks
from ..options import Option
from .base import register
from .heroes import Heroes


@register
class Flanc(Heroes, name="flanc", label="Flanc", color="#a63603", marker=">"):
    """Flanc: shared basis, a separate coefficient per width, fixed tau (Mei et al. 2022)

    Trains batched as Heroes does: the clients of one width share a selection and train
    together.
    """

    option_specs = {**Heroes.option_specs,
                    "frequency": Option("fixed", "local steps: always fixed in Flanc", choices=("fixed",)),
                    "selection": Option("free", "blocks: always the width's own in Flanc", choices=("free",))}

    def n_blocks(self) -> int:
        return flanc_block_count(self.P)

    def full_selection(self) -> Selection:
        return self.width_selection(self.P)

    @staticmethod
    def width_selection(p: int) -> Selection:
        return Selection(p, width_blocks(p), tuple(range(p)), tuple(range(p)))

    def select(self, p, round_idx, client_id):
        """Width p always trains coefficient u^(p) and the first p groups."""
        return self.width_selection(p)
