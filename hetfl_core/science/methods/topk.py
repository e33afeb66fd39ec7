"""FedAvg with top-k sparsified uploads, with and without error feedback.

A client trains as in FedAvg, forms its update u = w_local - w_t, and sends only the
``k`` fraction of entries of largest magnitude, with their positions
(``system.sparse_bits``). With error feedback (Stich et al., 2018) the unsent part is
remembered and added to the next update. The server applies the data-weighted average of
the sparse updates: w_{t+1} = w_t + sum_k (n_k / n) s_k.
"""
from __future__ import annotations

import torch

from ..compression import ErrorFeedback, error_feedback, flatten, top_k, unflatten
from ..options import Option
from ..system import dense_bits, sparse_bits, training_flops
from ..training import clone_model
from .base import ClientReport, register
from .fedavg import FedAvg


@register
class TopK(FedAvg, name="topk", label="Top-k", color="#dbdb8d", marker=">"):
    """FedAvg with top-k sparsified updates (values + indices on the uplink)"""

    option_specs = {"k": Option(0.1, "fraction of update entries uploaded (largest magnitudes)", 0, 1,
                                low_open=True)}
    error_feedback = False
    client_state = ("memory",)                       # each client's error-feedback residual

    def setup(self, sim):
        super().setup(sim)
        self.memory = ErrorFeedback()

    def client_step(self, client, plan, state, generator):
        """FedAvg's local update, then the top-k of u = w_local - w_t (with the residual
        memory e for EF, the client's state)."""
        model = clone_model(self.model)
        result = yield self.local_sgd(model, client, plan.local_steps, generator)
        start = {n: p.detach() for n, p in self.model.named_parameters()}
        update = flatten({n: p.detach() for n, p in model.named_parameters()}) - flatten(start)
        if self.error_feedback:
            sent, k, residual = error_feedback(update, state.get("memory"), self.options["k"])
            state = {"memory": residual}
        else:
            sent, k = top_k(update, self.options["k"])
        d = update.numel()
        return ClientReport(client.client_id, client.n_train, vector=sent, loss=result.loss,
                            flops=training_flops(self.costs, result.samples),
                            uplink_bits=sparse_bits(k, d), downlink_bits=dense_bits(d),
                            local_steps=plan.local_steps, extra={"sent_values": k}), state

    def aggregate(self, round_idx, reports):
        """w_{t+1} = w_t + sum_k n_k / n * s_k."""
        total = float(sum(r.n_samples for r in reports))
        step = sum(r.vector * (r.n_samples / total) for r in reports)
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, delta in unflatten(step, params).items():
                params[name].add_(delta)


@register
class TopKErrorFeedback(TopK, name="topk-ef", label="Top-k + EF",
                        color="#b5cf6b", marker="P"):
    """FedAvg with top-k sparsified updates and error feedback (Stich et al. 2018)"""
    state_types = (ErrorFeedback,)

    error_feedback = True
