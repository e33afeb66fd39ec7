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

from ..options import Option
from ..system import dense_bits, training_flops
from ..training import LocalSGD, clone_model
from .aggregate import weighted_average
from .base import ClientPlan, ClientReport, Method, register


#: PFLlib's loader (``DataLoader(drop_last=True)``), the default of the methods matched to it
DROP_LAST = Option(True, "leave each epoch's last partial batch out, as PFLlib's DataLoader("
                   "drop_last=True): a client smaller than a batch takes no step")


@register
class FedAvg(Method, name="fedavg", label="FedAvg",
             color="#1f77b4", marker="o", reads_hardware_tiers=False):
    """FedAvg: local SGD, data-weighted model averaging (McMahan et al. 2017)"""

    option_specs = {"drop_last": DROP_LAST}

    def client_step(self, client, plan: ClientPlan, state: dict, generator: torch.Generator):
        """Local update (Alg. 1, ClientUpdate): E epochs of SGD from the broadcast model,
        which the client sends back (FedAvg keeps no state on a client)."""
        model = clone_model(self.model)
        result = yield self.local_sgd(model, client, plan.local_steps, generator)
        bits = dense_bits(sum(p.numel() for p in model.parameters()))
        return ClientReport(client.client_id, client.n_train, weights=model.state_dict(),
                            loss=result.loss, flops=training_flops(self.costs, result.samples),
                            uplink_bits=bits, downlink_bits=bits,
                            local_steps=plan.local_steps), state

    def local_sgd(self, model: nn.Module, client, steps: int, generator: torch.Generator,
                  prox_mu: float = 0.0, **options) -> LocalSGD:
        """``steps`` SGD steps on the client's data with the run's optimiser settings, as a
        phase for the engine to run (``result = yield self.local_sgd(...)``).

        ``options`` are :class:`~hetfl_core.science.training.LocalSGD`'s (``params`` limits training
        to some parameter names, ``masks`` keeps masked weights at zero, ...); ``prox_mu`` > 0
        adds the proximal term (prox_mu/2)||w - w_t||^2 towards the broadcast model w_t
        (FedProx, Eq. 2); a method with a ``clip_norm`` option clips the gradients' global
        norm to it, one with ``drop_last`` leaves each epoch's partial batch out. The rate is
        the round's (:meth:`~hetfl_core.science.methods.base.Method.lr_at`). A ``prox_center`` among
        ``options`` replaces w_t.
        """
        settings = {"clip_norm": self.options.get("clip_norm"),
                    "drop_last": bool(self.options.get("drop_last", False)), **options}
        if "prox_center" not in settings:
            settings["prox_center"] = self.prox_center(prox_mu)
        return LocalSGD(model, client, steps, generator, self.config.batch_size, self.round_lr,
                        momentum=self.round_momentum, weight_decay=self.config.weight_decay,
                        prox_mu=prox_mu, **settings)

    def prox_center(self, prox_mu: float) -> dict | None:
        """A copy of the broadcast weights w_t, the proximal term's centre (``None`` without it)."""
        return {k: v.detach().clone() for k, v in self.model.named_parameters()} if prox_mu else None

    def aggregate(self, round_idx, reports):
        """w_{t+1} = sum_k n_k / n * w^k_{t+1}, for every tensor the clients sent."""
        state = weighted_average([r.weights for r in reports], [r.n_samples for r in reports])
        self.model.load_state_dict(state, strict=False)


@register
class FedProx(FedAvg, name="fedprox", label="FedProx",
              color="#6baed6", marker="s", reads_hardware_tiers=False):
    """FedProx: FedAvg plus a proximal term mu/2 ||w - w_t||^2 (Li et al. 2020)"""

    option_specs = {"mu": Option(0.01, "proximal coefficient mu of (mu/2)||w - w_t||^2 (FedProx, Eq. 2)",
                                 0, 1e4),
                    "drop_last": DROP_LAST}
    step_like_options = ("mu",)

    def local_sgd(self, *args, **kwargs) -> LocalSGD:
        """FedAvg's local SGD on h_k(w) = F_k(w) + (mu/2)||w - w_t||^2 (FedProx, Eq. 2)."""
        return super().local_sgd(*args, **kwargs, prox_mu=self.options["mu"])
