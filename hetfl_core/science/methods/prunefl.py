"""PruneFL (Jiang et al., 2022): initial pruning on one strong client, then adaptive pruning.

One mask for every client (one ratio for all, as FedLPS describes it):

1. **Initial pruning** (PruneFL, Sec. IV-A): in round 1 the most capable sampled client
   trains the dense model on its own data (charged to it, so round 1 waits for it) and the
   server keeps the ``initial_density`` fraction of its largest weights (over the model).
2. **Adaptive pruning** (Sec. IV-B): every ``reconfigure_every`` rounds each client also
   sends the squared gradients g_j^2 of *every* weight, summed over one epoch of dense
   minibatches; the server sums them into importances and picks the mask M that
   maximises the loss decrease per unit of round time,

       M* = argmax_M  sum_{j in M} g_j^2 / T(M),   T(M) = c + |M| / n          (PruneFL, Eq. 8)

   |M|/n being the kept weights' round time relative to the dense model's (ideal sparse
   kernels) and c = ``overhead`` the fixed part. The best M of a size holds the largest
   g_j^2, so the search is over the size (:func:`adaptive_mask`). Rejoining weights
   restart from zero.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..options import Option
from ..compression import unflatten
from ..masks import apply_mask, layer_densities, magnitude_mask, mask_density, prunable
from ..system import dense_bits, training_flops
from ..streams import STREAMS
from ..training import clone_model
from .base import ClientPlan, ClientReport, register, seeded_generator
from .aggregate import weighted_average
from .fedavg import FedAvg


def adaptive_mask(importance: dict[str, torch.Tensor], overhead: float, min_density: float) -> dict[str, torch.Tensor]:
    """PruneFL's Eq. (8): the mask of the k largest importances, k maximising top_k-sum / (c + k/n).

    ``min_density`` bounds k from below (k >= ceil(min_density n)). Ties keep the lower index.
    """
    flat = torch.cat([v.flatten() for v in importance.values()]).double()
    n = flat.numel()
    order = torch.argsort(flat, descending=True, stable=True)
    gain = torch.cumsum(flat[order], 0)
    sizes = torch.arange(1, n + 1, dtype=torch.float64)
    score = gain / (overhead + sizes / n)
    first = max(1, int(torch.ceil(torch.tensor(min_density * n)).item()))
    k = first + int(torch.argmax(score[first - 1:]))
    keep = torch.zeros(n)
    keep[order[:k]] = 1.0
    return unflatten(keep, importance)


@register
class PruneFL(FedAvg, name="prunefl", label="PruneFL", color="#bcbd22", marker="s"):
    """PruneFL: initial pruning on a strong client, then adaptive gradient-based pruning (Jiang et al. 2022)

    Its masked local SGD trains batched where the run batches clients; the squared
    gradients of a reconfiguration round are taken after the phase, from the client's
    generator where the phase left it, on either path.
    """

    option_specs = {"initial_density": Option(0.5, "density the strong client's initial pruning keeps", 0, 1,
                                              low_open=True),
                    "reconfigure_every": Option(5, "rounds between adaptive reconfigurations", 1, 1_000_000),
                    "overhead": Option(1.0, "the fixed part of a round's time, in the unit of its per-weight cost",
                                       0, 1e6),
                    "min_density": Option(0.1, "the lowest density adaptive pruning may reach", 0, 1, low_open=True)}

    client_state = ("initial_flops",)   # the strong client's initial pruning, charged at its first visit

    def setup(self, sim):
        super().setup(sim)
        self.prunable = prunable(self.model)
        self.masks: dict | None = None
        self.mask_news = False
        self.initial_flops: dict[int, float] = {}

    def initial_pruning(self, client_id: int) -> None:
        """Sec. IV-A: the strong client trains the dense model once; keep its largest weights."""
        client = self.data.clients[client_id]
        model = clone_model(self.model)
        generator = seeded_generator(self.config.seed, STREAMS["round_zero"], client_id)
        result = self.local_sgd(model, client, self.local_steps(client), generator).run()
        params = dict(model.named_parameters())
        self.masks = magnitude_mask({n: params[n].detach() for n in self.prunable},
                                    float(self.options["initial_density"]), "global")
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                p.copy_(params[n] * self.masks.get(n, 1.0))
        self.initial_flops = {client_id: training_flops(self.costs, result.samples)}
        self.mask_news = True

    def configure_round(self, round_idx, client_ids):
        """Round 1: the most capable sampled client prunes first; then the mask is fixed between reconfigurations."""
        if self.masks is None:
            strong = max(client_ids, key=lambda k: (self.hardware[k].flops_per_s, -k))
            self.initial_pruning(strong)
        plans = super().configure_round(round_idx, client_ids)
        for plan in plans.values():
            plan.ratio = mask_density(self.masks)
            plan.extra["reconfigure"] = round_idx % int(self.options["reconfigure_every"]) == 0
        return plans

    def squared_gradients(self, model, client, generator) -> tuple[dict[str, torch.Tensor], int]:
        """Sum over one epoch of minibatches of g_j^2 for every prunable weight, pruned ones
        included (PruneFL accumulates squared stochastic gradients), and the samples used."""
        params = dict(model.named_parameters())
        total = {n: torch.zeros_like(params[n]) for n in self.prunable}
        order = torch.randperm(client.n_train, generator=generator)
        for start in range(0, client.n_train, self.config.batch_size):
            idx = order[start:start + self.config.batch_size]
            model.zero_grad(set_to_none=True)
            F.cross_entropy(model(client.x_train[idx]), client.y_train[idx]).backward()
            for n in self.prunable:
                total[n] += params[n].grad.detach() ** 2
        return total, client.n_train

    def client_step(self, client, plan: ClientPlan, state, generator):
        """Train under the shared mask; in a reconfiguration round also send dense squared gradients."""
        k = client.client_id
        model = clone_model(self.model)
        result = yield self.local_sgd(model, client, plan.local_steps, generator, masks=self.masks)
        density = layer_densities(self.masks)
        flops = training_flops(self.costs, result.samples, density=density) + state.get("initial_flops", 0.0)
        n_params = sum(p.numel() for p in model.parameters())
        kept = n_params - int(sum(m.numel() - m.sum() for m in self.masks.values()))
        mask_bits = float(sum(m.numel() for m in self.masks.values())) if self.mask_news else 0.0
        uplink = dense_bits(kept)
        importance = None
        if plan.extra["reconfigure"]:
            importance, samples = self.squared_gradients(model, client, generator)
            flops += training_flops(self.costs, samples)
            uplink += dense_bits(sum(v.numel() for v in importance.values()))
        report = ClientReport(k, client.n_train, weights=model.state_dict(), importance=importance,
                              loss=result.loss, flops=flops,
                              uplink_bits=uplink, downlink_bits=dense_bits(kept) + mask_bits,
                              local_steps=plan.local_steps, ratio=kept / n_params)
        return report, {}   # the initial pruning is charged once

    def aggregate(self, round_idx, reports):
        """FedAvg on the sparse model; on a reconfiguration round, the new mask of Eq. (8)."""
        weights = [r.n_samples for r in reports]
        self.model.load_state_dict(weighted_average([r.weights for r in reports], weights), strict=False)
        self.mask_news = False
        if reports and reports[0].importance is not None:
            importance = weighted_average([r.importance for r in reports], weights)
            self.masks = adaptive_mask(importance, float(self.options["overhead"]), float(self.options["min_density"]))
            self.mask_news = True
        apply_mask(self.model, self.masks)   # pruned weights are zero; rejoining ones restart from zero
