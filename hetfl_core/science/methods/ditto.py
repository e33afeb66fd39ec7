"""Ditto (Li et al., 2021): a FedAvg global model and a personal model pulled towards it.

Ditto's personalised objective (Li et al. 2021, Sec. 3.1, Eq. 2) is, for every client k,
the bi-level problem

    min_{v_k}  h_k(v_k; w*) = F_k(v_k) + (lambda/2) ||v_k - w*||^2,
    s.t.       w* in argmin_w G(F_1(w), ..., F_K(w))        (G: FedAvg's objective)

and its solver (Ditto, Alg. 1) alternates the two levels in each round t: a sampled
client k (i) runs FedAvg's local update from the broadcast w^t and uploads it, and (ii)
takes as many SGD steps on its personal model v_k, which the server never sees, with the
proximal gradient nabla F_k(v_k) + lambda (v_k - w^t) (lambda = 0: local training). As in
the authors' code, every v_k starts at w^0, which also scores a client not yet visited.

Where this class differs from the authors' code:

* They take one personal step, then one global step, on the **same** minibatch; here the
  global steps run first and the personal steps replay the same minibatches: the same
  numbers, since the personal step reads only v_k, the batch and the fixed w^t.
* ``personal_start="global"`` (not the default) starts v_k from the first global model
  the client receives, and scores a never-visited client with the current global model.
* Kept on purpose: clients are sampled uniformly and uploads weighted by n_k; the authors
  sample proportionally to n_k and average unweighted (the same expected aggregate).

Costs: both trainings' FLOPs, the dense download and upload of w. The Ditto paper tunes
lambda per data set (the authors' code may pick it per client from {0.1, 1, 2}) and
SRP-pFed does not give its value; the default is 0.1.
"""
from __future__ import annotations

import torch

from ..options import Option
from ..personalization import PrivateStore, copy_parameters, load_parameters
from ..system import training_flops
from ..training import clone_model, steps_for_epochs
from .base import ClientPlan, register
from .fedavg import FedAvg


@register
class Ditto(FedAvg, name="ditto", label="Ditto", color="#4292c6", marker="P", reads_hardware_tiers=False):
    """Ditto: FedAvg global model plus personal models pulled to it (Li et al. 2021)

    A visit trains two models, the global copy, then v_k on the same minibatches: two
    phases, each batched with the other clients' where the run batches clients.
    """
    state_types = (PrivateStore,)                    # the clients' private parameters
    client_state = ("private",)                      # each client's personal model v_k

    option_specs = {"lam": Option(0.1, "lambda of the personal objective h_k's (lambda/2)||v_k - w*||^2", 0, 1e4),
                    "personal_epochs": Option(None, "epochs on the personal model (None: the global update's steps)",
                                              0, 10_000, low_open=True, kind=float),
                    "personal_start": Option(
                        "initial", "where v_k starts: initial (w^0, Alg. 1 and the authors' code) "
                        "or global (the first global model the client receives)",
                        choices=("initial", "global"))}

    def setup(self, sim):
        super().setup(sim)
        self.private = PrivateStore()
        self.names = [n for n, _ in self.model.named_parameters()]
        self.initial = clone_model(self.model)   # w^0, every v_k's start (Alg. 1's v_k^0)

    def client_step(self, client, plan: ClientPlan, state: dict, generator: torch.Generator):
        """Alg. 1: FedAvg's update from w^t, then as many proximal steps on v_k on the same
        batches (or ``personal_epochs`` epochs)."""
        same_batches = torch.Generator().set_state(generator.get_state())
        report, state = yield from super().client_step(client, plan, state, generator)
        epochs, batch = self.options["personal_epochs"], self.config.batch_size
        steps = plan.local_steps if epochs is None else steps_for_epochs(client.n_train, batch, float(epochs))
        personal = self.personal_of(state.get("private"))
        mine = yield self.local_sgd(personal, client, steps, same_batches,
                                    prox_mu=float(self.options["lam"]))
        report.flops += training_flops(self.costs, mine.samples)
        report.extra["personal_loss"] = mine.loss
        return report, {**state, "private": copy_parameters(personal, self.names)}

    def personal_of(self, private: dict | None):
        """v_k from the client's kept ``private`` tensors; before its first visit, its start
        (w^0, or the global model)."""
        start = self.initial if self.options["personal_start"] == "initial" else self.model
        return load_parameters(clone_model(start), private)

    def personal_model(self, client_id):
        """v_k; before the client's first visit, its start (w^0, or the global model)."""
        return self.personal_of(self.private.clients.get(client_id))
