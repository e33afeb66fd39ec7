"""LotteryFL (Li et al., 2021): a personal lottery ticket per client.

Each client keeps its own unstructured mask m_k (all ones at first) and receives the
global weights under it; if its accuracy on its own data reaches ``acc_threshold`` and
its density is above ``target_density``, it prunes ``prune_rate`` of its remaining
weights by magnitude (layer by layer) and rewinds the survivors to theta_0 (LotteryFL,
Alg. 1, lines 6-11). It then trains under the mask and uploads its kept weights (and its
mask when it changed); the server averages each entry over the clients whose ticket
holds it. Defaults follow SRP-pFed's setting: 20% per pruning, down to 50% density.
"""
from __future__ import annotations

import torch

from ..options import Option
from ..masks import layer_densities, magnitude_mask, masked_copy, prunable
from ..system import dense_bits, training_flops
from ..training import evaluate
from .base import ClientReport, register
from .fedavg import FedAvg
from .aggregate import average_over_holders, masked_upload


@register
class LotteryFL(FedAvg, name="lotteryfl", label="LotteryFL", color="#8c6d31", marker="^"):
    """LotteryFL: personal lottery-ticket masks, pruned 20% at a time with rewinding (Li et al. 2021)

    Its masked local SGD trains batched where the run batches clients (each client under
    its own ticket); the accuracy check, pruning and rewinding come before the phase.
    """

    client_state = ("tickets",)                      # each client's lottery-ticket mask m_k

    option_specs = {"prune_rate": Option(0.2, "fraction of the remaining weights pruned at each pruning", 0, 1),
                    "target_density": Option(0.5, "density at which a client stops pruning", 0, 1),
                    "acc_threshold": Option(0.5, "local accuracy a client must reach before it prunes", 0, 1)}

    def setup(self, sim):
        super().setup(sim)
        self.initial = {n: p.detach().clone() for n, p in self.model.named_parameters()}
        self.prunable = prunable(self.model)
        self.tickets: dict[int, dict] = {}

    def ticket(self, client_id: int) -> dict:
        """The client's mask over the prunable weights (all ones before its first pruning)."""
        return self.tickets.get(client_id) or self.full_ticket()

    def full_ticket(self) -> dict:
        """The mask of a client not yet pruned: all ones over the prunable weights."""
        params = dict(self.model.named_parameters())
        return {n: torch.ones_like(params[n]) for n in self.prunable}

    def client_step(self, client, plan, state, generator):
        """Prune and rewind if accurate enough (Alg. 1, l. 6-11), then train under the
        ticket, the client's state."""
        k = client.client_id
        mask = state.get("tickets") or self.full_ticket()
        model = masked_copy(self.model, mask)
        kept = float(sum(m.sum() for m in mask.values()) / sum(m.numel() for m in mask.values()))
        x, y = (client.x_val, client.y_val) if len(client.y_val) else (client.x_train, client.y_train)
        correct, _ = evaluate(model, x, y)
        changed = False
        if correct / max(len(y), 1) >= self.options["acc_threshold"] and kept > self.options["target_density"] + 1e-9:
            density = max(self.options["target_density"], kept * (1 - self.options["prune_rate"]))
            params = dict(model.named_parameters())
            # the same relative rate in every layer: prune each layer to density / kept of its survivors
            new = {}
            for n, m in mask.items():
                survivors = params[n].detach().abs() * m  # pruned weights are zero: they rank last
                layer_keep = float(m.mean()) * density / kept
                new[n] = magnitude_mask({n: survivors}, max(layer_keep, 1e-6), "layer")[n] * m
            mask = new
            with torch.no_grad():
                for n, p in params.items():  # rewind the survivors to theta_0
                    p.copy_(self.initial[n] * mask.get(n, 1.0))
            changed = True
        result = yield self.local_sgd(model, client, plan.local_steps, generator, masks=mask)
        values, held, n_kept = masked_upload(model, mask)
        mask_bits = float(sum(m.numel() for m in mask.values())) if changed else 0.0
        n_params = sum(p.numel() for p in model.parameters())
        report = ClientReport(k, client.n_train, weights=values, held=held, loss=result.loss,
                              flops=training_flops(self.costs, result.samples, density=layer_densities(mask)),
                              uplink_bits=dense_bits(n_kept) + mask_bits, downlink_bits=dense_bits(n_kept),
                              local_steps=plan.local_steps, ratio=n_kept / n_params)
        return report, {"tickets": mask}

    def aggregate(self, round_idx, reports):
        """Each entry averaged over the clients whose ticket holds it."""
        average_over_holders(self.model, reports)

    def personal_model(self, client_id):
        """The global model under the client's ticket."""
        return masked_copy(self.model, self.ticket(client_id))
