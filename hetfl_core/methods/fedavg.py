"""FedAvg (McMahan et al., 2017) and FedProx (Li et al., 2020).

Algorithm (FedAvg): the server broadcasts w_t; each sampled client k runs E epochs of
minibatch SGD from w_t on its data; the server sets

    w_{t+1} = sum_k (n_k / n) w_{t+1}^k,        n = sum_k n_k        (FedAvg, Alg. 1)

FedProx adds (mu/2)||w - w_t||^2 to each client's objective (FedProx, Eq. 2).

Both follow PFLlib's clients (the reference code the book matches them to) in leaving each
epoch's last partial batch out (``drop_last=True``, PFLlib's ``DataLoader``): a client of
n_k samples takes E x floor(n_k / B) steps, none when n_k < B, and is still averaged in
with weight n_k (its model unchanged), as PFLlib's server does. ``drop_last=False`` keeps
the partial batch (McMahan et al.'s Alg. 1 splits the data into batches of size B).
"""
from __future__ import annotations

import torch
from torch import nn

from ..batched import ClientJob, Phase, run_job
from ..options import Option
from ..system import dense_bits, training_flops
from ..training import LocalResult, clone_model, local_sgd
from .aggregate import weighted_average
from .base import ClientPlan, ClientReport, Method, register


#: PFLlib's loader (``DataLoader(drop_last=True)``), the default of the methods matched to it
DROP_LAST = Option(True, "leave each epoch's last partial batch out, as PFLlib's DataLoader("
                   "drop_last=True): a client smaller than a batch takes no step")


@register
class FedAvg(Method, name="fedavg", label="FedAvg", batchable=True,
             color="#1f77b4", marker="o", reads_device_tiers=False):
    """FedAvg: local SGD, data-weighted model averaging (McMahan et al. 2017)"""

    option_specs = {"drop_last": DROP_LAST}

    def local_train(self, model: nn.Module, client, steps: int, generator: torch.Generator,
                    params=None, masks: dict | None = None, loss_fn=None, prox_mu: float = 0.0) -> LocalResult:
        """``steps`` SGD steps on the client's data with the run's optimiser settings.

        ``params`` limits training to some parameter names; ``masks`` keeps masked weights
        at zero; ``loss_fn(model, xb, yb)`` replaces cross-entropy; ``prox_mu`` > 0 adds the
        proximal term (prox_mu/2)||w - w_t||^2 towards the broadcast model w_t (FedProx,
        Eq. 2); a method with a ``clip_norm`` option clips the gradients' global norm to it,
        one with ``drop_last`` leaves each epoch's partial batch out. The rate is the
        round's (:meth:`~hetfl_core.methods.base.Method.lr_at`).
        """
        return local_sgd(model, client.x_train, client.y_train, steps, self.config.batch_size,
                         self.round_lr, generator, momentum=self.round_momentum,
                         weight_decay=self.config.weight_decay, prox_center=self.prox_center(prox_mu),
                         prox_mu=prox_mu, params=params, masks=masks, loss_fn=loss_fn,
                         clip_norm=self.options.get("clip_norm"),
                         drop_last=bool(self.options.get("drop_last", False)))

    def phase(self, steps: int, params=None, masks: dict | None = None, sub_masks=(),
              prox_mu: float = 0.0) -> Phase:
        """One :meth:`local_train` call as a batched trainer's :class:`Phase`."""
        return Phase(steps, params, masks, self.prox_center(prox_mu), prox_mu, list(sub_masks),
                     drop_last=bool(self.options.get("drop_last", False)))

    def prox_center(self, prox_mu: float) -> dict | None:
        """A copy of the broadcast weights w_t, the proximal term's centre (``None`` without it)."""
        return {k: v.detach().clone() for k, v in self.model.named_parameters()} if prox_mu else None

    def client_update(self, client, plan: ClientPlan, generator: torch.Generator) -> ClientReport:
        """Local update: E epochs of SGD from the broadcast model (the :meth:`client_job`)."""
        return run_job(self, self.client_job(client, plan, generator))

    def client_job(self, client, plan: ClientPlan, generator: torch.Generator) -> ClientJob:
        """FedAvg's local update as a job: one phase on a copy of the broadcast model."""
        model = clone_model(self.model)

        def finish(results):
            n_params = sum(p.numel() for p in model.parameters())
            flops = training_flops(self.costs, results[0].samples)
            return ClientReport(client.client_id, client.n_train, model.state_dict(),
                                results[0].loss, flops=flops,
                                uplink_bits=dense_bits(n_params),
                                downlink_bits=dense_bits(n_params), local_steps=plan.local_steps)
        return ClientJob(client, model, generator, [self.phase(plan.local_steps)], finish)

    def aggregate(self, round_idx, reports):
        """w_{t+1} = sum_k n_k / n * w^k_{t+1}, for every tensor the clients sent."""
        state = weighted_average([r.update for r in reports], [r.n_samples for r in reports])
        self.model.load_state_dict(state, strict=False)


@register
class FedProx(FedAvg, name="fedprox", label="FedProx", batchable=True,
              color="#6baed6", marker="s", reads_device_tiers=False):
    """FedProx: FedAvg plus a proximal term mu/2 ||w - w_t||^2 (Li et al. 2020)"""

    option_specs = {"mu": Option(0.01, "proximal coefficient mu of (mu/2)||w - w_t||^2 (FedProx, Eq. 2)",
                                 0, 1e4),
                    "drop_last": DROP_LAST}
    step_like_options = ("mu",)

    def local_train(self, *args, **kwargs) -> LocalResult:
        """FedAvg's local SGD on h_k(w) = F_k(w) + (mu/2)||w - w_t||^2 (FedProx, Eq. 2)."""
        return super().local_train(*args, **kwargs, prox_mu=self.options["mu"])

    def phase(self, *args, **kwargs) -> Phase:
        """FedAvg's phase on the objective h_k of :meth:`local_train` (FedProx, Eq. 2)."""
        return super().phase(*args, **kwargs, prox_mu=self.options["mu"])
