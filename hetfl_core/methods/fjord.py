"""FjORD (Horvath et al., 2021): ordered dropout over nested widths.

A client of maximal width w_max samples, at every local step, a width p uniformly from
the width levels not above w_max (HeteroFL's ``widths``, or 1/P..1 under its
``width_budget`` rule) and trains the nested sub-model of the first ceil(p n_l)
units (FjORD, Alg. 1: ordered dropout). It uploads its w_max sub-model; the server
averages entries over holders as HeteroFL does.
"""
from __future__ import annotations

import torch

from ..submodel import embed, extract, kept_fractions_of_indices
from ..system import dense_bits, training_flops
from .base import ClientReport, register
from .heterofl import HeteroFL


@register
class FjORD(HeteroFL):
    """Per-step sampled nested widths (ordered dropout)."""

    name = "fjord"
    summary = "FjORD: ordered dropout, per-step sampled nested widths (Horvath et al. 2021)"

    def client_update(self, client, plan, generator):
        levels = [w for w in self.levels if w <= plan.width + 1e-9]
        working = {k: v.clone() for k, v in self.model.state_dict().items()}
        flops, loss_sum, samples = 0.0, 0.0, 0
        for _ in range(plan.local_steps):
            p = levels[int(torch.randint(len(levels), (1,), generator=generator))]
            idx = self.indices(p, self.round_idx)
            model = self.build_model(p)
            model.load_state_dict(extract(self.model, working, idx))
            result = self.local_train(model, client, 1, generator)
            working, _ = embed(self.model, model.state_dict(), idx, like=working)
            flops += training_flops(self.costs, result.samples, keep=kept_fractions_of_indices(self.model, idx))
            loss_sum, samples = loss_sum + result.loss * result.samples, samples + result.samples
        top = self.indices(plan.width, self.round_idx)
        sent = extract(self.model, working, top)
        values, held = embed(self.model, sent, top)
        n_params = sum(t.numel() for t in sent.values())
        return ClientReport(client.client_id, client.n_train, (values, held), loss_sum / max(samples, 1),
                            flops=flops, uplink_bits=dense_bits(n_params), downlink_bits=dense_bits(n_params),
                            local_steps=plan.local_steps, width=plan.width)
