"""Local-only training: every client trains its own model, from the same initial model, on
its own data, with no communication: the floor any personalised method must beat."""
from __future__ import annotations

from ..personalization import PrivateStore, copy_parameters, load_parameters
from ..system import training_flops
from ..training import clone_model
from .base import ClientReport, register
from .fedavg import FedAvg


@register
class LocalOnly(FedAvg, name="local", label="Local",
                color="#08306b", marker="x", reads_hardware_tiers=False):
    """Local-only training: no communication, the personalisation floor"""
    state_types = (PrivateStore,)                    # the clients' private parameters
    client_state = ("private",)                      # each client's own model

    option_specs = {}     # FedAvg's drop_last is PFLlib's; local training keeps every sample

    def setup(self, sim):
        super().setup(sim)
        self.private = PrivateStore()
        self.names = [n for n, _ in self.model.named_parameters()]

    def client_step(self, client, plan, state, generator):
        """The client's own model trained and kept; nothing sent."""
        model = load_parameters(clone_model(self.model), state.get("private"))
        result = yield self.local_sgd(model, client, plan.local_steps, generator)
        report = ClientReport(client.client_id, client.n_train, loss=result.loss,
                              flops=training_flops(self.costs, result.samples),
                              uplink_bits=0.0, downlink_bits=0.0, local_steps=plan.local_steps)
        return report, {"private": copy_parameters(model, self.names)}

    def aggregate(self, round_idx, reports):
        """Nothing to aggregate."""

    def global_model(self):
        return None

    def personal_model(self, client_id):
        return self.private.load_into(client_id, clone_model(self.model))
