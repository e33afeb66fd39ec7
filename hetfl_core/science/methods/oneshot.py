"""One-shot global magnitude pruning, then FedAvg on the sparse model.

After ``prune_round - 1`` rounds of dense FedAvg the server keeps the ``density``
fraction of weights of largest magnitude, over the whole model (``scope="global"``) or
in every layer (``"layer"``), and training continues with that mask fixed (the
one-shot baseline of OFA-FL). The mask is broadcast once (one bit per weight); after
that both sides know it, so messages carry only the kept values.
"""
from __future__ import annotations

from ..options import Option
from ..masks import apply_mask, layer_densities, magnitude_mask, prunable
from ..system import dense_bits, training_flops
from ..training import clone_model
from .base import ClientPlan, ClientReport, register
from .fedavg import FedAvg


@register
class OneShotPruning(FedAvg, name="oneshot", label="One-shot pruning",
                     color="#7f7f7f", marker="o"):
    """One-shot magnitude pruning (global or layerwise) of the global model, then FedAvg"""

    option_specs = {"density": Option(0.5, "fraction of prunable weights kept", 0, 1, low_open=True),
                    "scope": Option("global", "rank weights over the whole model or layer by layer",
                                    choices=("global", "layer")),
                    "prune_round": Option(2, "the round in which the server prunes", 1, 1_000_000)}

    def setup(self, sim):
        super().setup(sim)
        self.masks: dict | None = None
        self.mask_news = False

    def configure_round(self, round_idx, client_ids):
        """In round ``prune_round`` the server prunes the global model once."""
        self.mask_news = False
        if round_idx == int(self.options["prune_round"]) and self.masks is None:
            params = dict(self.model.named_parameters())
            self.masks = magnitude_mask({n: params[n].detach() for n in prunable(self.model)},
                                        float(self.options["density"]), self.options["scope"])
            apply_mask(self.model, self.masks)
            self.mask_news = True
        return super().configure_round(round_idx, client_ids)

    def client_step(self, client, plan: ClientPlan, state, generator):
        """FedAvg's local update under the pruning mask (none before ``prune_round``)."""
        model = clone_model(self.model)
        result = yield self.local_sgd(model, client, plan.local_steps, generator, masks=self.masks)
        n_params = sum(p.numel() for p in model.parameters())
        if self.masks is None:
            kept, density, mask_bits = n_params, None, 0.0
        else:
            kept = n_params - int(sum(m.numel() - m.sum() for m in self.masks.values()))
            density = layer_densities(self.masks)
            mask_bits = float(sum(m.numel() for m in self.masks.values())) if self.mask_news else 0.0
        return ClientReport(client.client_id, client.n_train, weights=model.state_dict(), loss=result.loss,
                            flops=training_flops(self.costs, result.samples, density=density),
                            uplink_bits=dense_bits(kept), downlink_bits=dense_bits(kept) + mask_bits,
                            local_steps=plan.local_steps, ratio=kept / n_params), state
