"""The sparse-pattern baselines of FedLPS's ablation (Fig. 9a): fixed unit masks.

Each client trains the global model with some output units of every hidden layer
switched off, at a ratio equal to its capability (its FLOP/s relative to the fastest
device) or a fixed ``ratio``, in an **ordered** pattern (the first units, as HeteroFL) or
a **random** one (seeded per client, fixed for the run). The server knows every pattern,
so a client sends only its kept entries, each averaged over the clients that hold it. A
client's personal model is the global model under its own mask.
"""
from __future__ import annotations

from ..options import Option
from ..masks import kept_fractions_of_units, masked_copy, ordered_units, random_units, unit_masks_to_parameters
from ..streams import STREAMS
from ..system import capability, dense_bits, training_flops
from .base import ClientPlan, ClientReport, register, seeded_generator
from .fedavg import FedAvg
from .aggregate import average_over_holders, masked_upload


@register
class OrderedMask(FedAvg, name="ordered-mask", label="Ordered mask",
                  color="#969696", marker="<"):
    """Ordered unit mask: first-k units at the client's ratio (FedLPS pattern baseline)"""

    option_specs = {"ratio": Option(None, "every client's kept fraction of units (None: its capability)", 0, 1,
                                    low_open=True, kind=float)}
    client_state = ("units",)                        # each client's unit pattern
    server_state = ("ratios",)         # every client's kept fraction

    def setup(self, sim):
        super().setup(sim)
        fixed = self.options["ratio"]
        self.ratios = {k: float(fixed) if fixed is not None else capability(d, self.hardware)
                       for k, d in enumerate(self.hardware)}
        self.units = {k: self.pattern(k, r) for k, r in self.ratios.items()}

    def pattern(self, client_id: int, ratio: float) -> dict:
        """The client's kept units per layer."""
        return ordered_units(self.model, ratio)

    def configure_round(self, round_idx, client_ids):
        return {k: ClientPlan(self.local_steps(self.data.clients[k]), ratio=self.ratios[k]) for k in client_ids}

    def client_step(self, client, plan, state, generator):
        """Train the global model under the client's unit mask (its state, fixed for the
        run); send the kept entries."""
        units = state["units"]
        masks = unit_masks_to_parameters(self.model, units)
        model = masked_copy(self.model, masks)
        result = yield self.local_sgd(model, client, plan.local_steps, generator, masks=masks)
        values, held, kept = masked_upload(model, masks)
        return ClientReport(client.client_id, client.n_train, weights=values, held=held, loss=result.loss,
                            flops=training_flops(self.costs, result.samples,
                                                 keep=kept_fractions_of_units(units)),
                            uplink_bits=dense_bits(kept), downlink_bits=dense_bits(kept),
                            local_steps=plan.local_steps, ratio=plan.ratio), state

    def aggregate(self, round_idx, reports):
        """Each entry averaged over the clients whose mask holds it."""
        average_over_holders(self.model, reports)

    def personal_model(self, client_id):
        """The global model under the client's mask."""
        return masked_copy(self.model, unit_masks_to_parameters(self.model, self.units[client_id]))


@register
class RandomMask(OrderedMask, name="random-mask", label="Random mask",
                 color="#bdbdbd", marker="v"):
    """Random unit mask at the client's ratio, fixed per client (FedLPS pattern baseline)"""

    def pattern(self, client_id, ratio):
        return random_units(self.model, ratio, seeded_generator(self.config.seed, STREAMS["random_units"], client_id))
