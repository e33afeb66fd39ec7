"""LG-FedAvg (Liang et al., 2020): private local representations, a shared global head.

The mirror image of FedPer: every client trains its whole model and keeps its body; the
server averages only the last ``head_layers`` layers (Alg. 1). SRP-pFed's comparison
keeps LeNet-5's first two layers private, i.e. ``head_layers=3``.

Which layers are global follows the paper: each device learns "compact local
representations" and the global model "only operates on local representations" (Liang
et al. 2020, abstract and Fig. 1), so the top layers are shared (``shared_part="top"``).
The released code agrees on its MLP (``weight_keys`` in forward order, the MNIST command's
``--num_layers_keep 3`` shares the top three of five layers) but not on its CIFAR CNN,
whose ``weight_keys`` list [fc1, fc2, fc3, conv2, conv1]: there ``--num_layers_keep 2``
shares conv1 and conv2 and keeps every fully connected layer local. ``shared_part="bottom"``
reproduces that split (the first ``head_layers`` layers shared).

The released code trains with SGD at momentum 0.5 in every round (``local_momentum``) and
runs the warm-start FedAvg without passing the run's rate, so at its default lr 0.1
(``warmup_lr``; ``None``: the run's lr).

The authors start every client from a FedAvg model; here the first ``fedavg_share`` of
the rounds (rounded, never the last) are plain FedAvg rounds, charged as such. The default
0.8 is the authors' MNIST recipe, 400 FedAvg then 100 LG-FedAvg rounds (CIFAR-10's, 1200
then 200, is 0.857); ``fedavg_share=0`` starts from the random initialisation.

Kept on purpose: averages are weighted by n_k (the authors': unweighted); the warm start
ends with the last FedAvg model, and each client is scored with its current model, where
the authors pick the FedAvg round, and per client the model, with the best test accuracy,
which makes their scores optimistic.
"""
from __future__ import annotations

import math

from ..options import Option
from ..personalization import head_parameter_names, split_parameter_names
from .base import register
from .fedavg import FedAvg
from .fedper import FedPer


@register
class LGFedAvg(FedPer, name="lg-fedavg", label="LG-FedAvg",
               color="#005a32", marker="^", reads_hardware_tiers=False):
    """LG-FedAvg: private local body, shared global head (Liang et al. 2020)"""

    option_specs = {"head_layers": Option(1, "layers shared by all (the rest stays local)", 1, 1000),
                    "shared_part": Option("top", "which layers are shared: top (the paper's global "
                                          "model over local representations) or bottom (the "
                                          "released CIFAR CNN's order)", choices=("top", "bottom")),
                    "warmup_lr": Option(0.1, "lr of the warm-start FedAvg rounds (the released "
                                        "code's default 0.1; None: the run's lr)", 0, 1e4,
                                        low_open=True, optional=True),
                    "local_momentum": Option(0.5, "SGD momentum of every local update (the "
                                             "released code's 0.5; None: the run's momentum)",
                                             0, 1, high_open=True, optional=True),
                    "fedavg_share": Option(0.8, "share of the run's rounds run as FedAvg first "
                                           "(the warm start of every client's model)", 0, 1,
                                           high_open=True)}

    def setup(self, sim):
        super().setup(sim)
        share = float(self.options["fedavg_share"])   # the last round is always an LG-FedAvg round
        self.fedavg_rounds = min(math.floor(share * self.config.rounds + 0.5), self.config.rounds - 1)
        if self.options["local_momentum"] is not None:
            self.round_momentum = float(self.options["local_momentum"])

    def lr_at(self, round_idx):
        """``warmup_lr`` in the warm-start FedAvg rounds (if set), the run's lr after them."""
        if round_idx <= self.fedavg_rounds and self.options["warmup_lr"] is not None:
            return float(self.options["warmup_lr"])
        return super().lr_at(round_idx)

    def choose_shared(self):
        """The parameters the server aggregates: the last ``head_layers`` layers, or with
        ``shared_part="bottom"`` the first ones."""
        layers = self.options["head_layers"]
        if self.options["shared_part"] == "bottom":
            head_parameter_names(self.model, layers)          # the same range check
            return split_parameter_names(self.model, f"first:{layers}")
        return head_parameter_names(self.model, layers)

    def configure_round(self, round_idx, client_ids):
        """FedAvg's plans, each marked as a warm-start (FedAvg) round or not."""
        plans = super().configure_round(round_idx, client_ids)
        for plan in plans.values():
            plan.extra["fedavg"] = round_idx <= self.fedavg_rounds
        return plans

    def client_step(self, client, plan, state, generator):
        """A FedAvg update in the warm-start rounds; afterwards FedPer's: train all, upload
        the head."""
        if plan.extra.get("fedavg"):
            return (yield from FedAvg.client_step(self, client, plan, state, generator))
        return (yield from super().client_step(client, plan, state, generator))
