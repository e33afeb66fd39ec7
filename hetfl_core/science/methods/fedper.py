"""FedPer (Arivazhagan et al., 2019): a shared body, a private head per client.

Each round a client loads the global body and its own head, trains both for E epochs,
keeps the head and uploads the body; the server averages bodies weighted by data size.
The client's model (global body + own head) is its personalised model; no head is shared,
so there is no global model. Like PFLlib's FedPer, each epoch's last partial batch is left
out (``drop_last``, see :mod:`~hetfl_core.science.methods.fedavg`).
"""
from __future__ import annotations

from ..options import Option
from ..personalization import PrivateStore, body_parameter_names, copy_parameters, load_parameters
from ..system import dense_bits, training_flops
from ..training import clone_model
from .base import ClientPlan, ClientReport, register
from .fedavg import DROP_LAST, FedAvg


@register
class FedPer(FedAvg, name="fedper", label="FedPer",
             color="#17becf", marker="o", reads_hardware_tiers=False):
    """FedPer: shared body, private head (Arivazhagan et al. 2019)"""
    state_types = (PrivateStore,)                    # the clients' private parameters
    client_state = ("private",)                      # each client's head

    option_specs = {"head_layers": Option(1, "layers at the top of the model kept private (the head)", 1, 1000),
                    "drop_last": DROP_LAST}

    def setup(self, sim):
        super().setup(sim)
        self.private = PrivateStore()
        self.shared_names = self.choose_shared()
        self.private_names = [n for n, _ in self.model.named_parameters() if n not in set(self.shared_names)]

    def choose_shared(self) -> list[str]:
        """The parameters the server aggregates: the body."""
        return body_parameter_names(self.model, self.options["head_layers"])

    def client_model(self, client_id: int):
        """The global model with the client's private part written in (a model of its own)."""
        return self.model_with(self.private.clients.get(client_id))

    def model_with(self, private: dict | None):
        """The global model with ``private`` (a client's kept tensors) written in, a copy."""
        return load_parameters(clone_model(self.model), private)

    def client_step(self, client, plan: ClientPlan, state, generator):
        """Train body and head locally; keep the private part, upload the shared part."""
        model = self.model_with(state.get("private"))
        result = yield self.local_sgd(model, client, plan.local_steps, generator)
        flops = training_flops(self.costs, result.samples)
        return self.report(client, model, plan, result.loss, flops), self.kept(model)

    def kept(self, model) -> dict:
        """The client's new state: the private part of its trained ``model``."""
        return {"private": copy_parameters(model, self.private_names)}

    def report(self, client, model, plan, loss, flops) -> ClientReport:
        """A report that uploads (and was sent) only the shared parameters."""
        params = dict(model.named_parameters())
        shared = {n: params[n].detach().clone() for n in self.shared_names}
        bits = dense_bits(sum(t.numel() for t in shared.values()))
        return ClientReport(client.client_id, client.n_train, weights=shared, loss=loss, flops=flops, uplink_bits=bits,
                            downlink_bits=bits, local_steps=plan.local_steps)

    def global_model(self):
        return None

    def personal_model(self, client_id):
        return self.client_model(client_id)
