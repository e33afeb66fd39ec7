"""LG-FedAvg (Liang et al., 2020): private local representations, a shared global head.

The mirror image of FedPer: each client keeps its body (the local representation) and
the server averages only the last ``head_layers`` layers. SRP-pFed's comparison keeps
LeNet-5's first two layers private, i.e. ``head_layers=3``.
"""
from __future__ import annotations

from ..options import Option
from ..personalization import head_parameter_names
from .base import register
from .fedper import FedPer


@register
class LGFedAvg(FedPer):
    """Private body, shared head."""

    name = "lg-fedavg"
    summary = "LG-FedAvg: private local body, shared global head (Liang et al. 2020)"
    option_specs = {"head_layers": Option(1, "layers at the top of the model shared by all (the rest stays local)",
                                          1, 1000)}

    def choose_shared(self):
        """The parameters the server aggregates: the head."""
        return head_parameter_names(self.model, self.options["head_layers"])
