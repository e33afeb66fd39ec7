"""FedPer (Arivazhagan et al., 2019): a shared body, a private head per client.

Each round a client loads the global body and its own head, trains both for E epochs,
keeps the head and uploads the body; the server averages bodies weighted by data size.
The client's model (global body + own head) is its personalised model; no head is shared,
so there is no global model. Like PFLlib's FedPer, each epoch's last partial batch is left
out (``drop_last``, see :mod:`~hetfl_core.methods.fedavg`).
"""
from __future__ import annotations

import torch

from ..batched import ClientJob, run_job
from ..options import Option
from ..personalization import PrivateStore, body_parameter_names
from ..system import dense_bits, training_flops
from ..training import clone_model
from .base import ClientPlan, ClientReport, register
from .fedavg import DROP_LAST, FedAvg


@register
class FedPer(FedAvg, name="fedper", label="FedPer", batchable=True,
             color="#17becf", marker="o", reads_device_tiers=False):
    """FedPer: shared body, private head (Arivazhagan et al. 2019)"""
    state_types = (PrivateStore,)                    # the clients' private parameters
    client_state = ("private",)                      # each client's head
    server_state = ("_working",)       # the last client's working copy stays

    option_specs = {"head_layers": Option(1, "layers at the top of the model kept private (the head)", 1, 1000),
                    "drop_last": DROP_LAST}

    def setup(self, sim):
        super().setup(sim)
        self.private = PrivateStore()
        self.shared_names = self.choose_shared()
        self.private_names = [n for n, _ in self.model.named_parameters() if n not in set(self.shared_names)]
        self._working = None

    def choose_shared(self) -> list[str]:
        """The parameters the server aggregates: the body."""
        return body_parameter_names(self.model, self.options["head_layers"])

    def client_model(self, client_id: int):
        """The global model with the client's private part written in (a model of its own)."""
        return self.private.load_into(client_id, clone_model(self.model))

    def working_model(self, client_id: int):
        """:meth:`client_model`'s contents in one kept copy (a tenth of a deep copy's cost),
        overwritten by the next call: it serves one ``client_update`` at a time."""
        if self._working is None:
            self._working = clone_model(self.model)
        with torch.no_grad():
            for mine, source in zip(self._working.parameters(), self.model.parameters()):
                mine.copy_(source)
                mine.grad = None
            for mine, source in zip(self._working.buffers(), self.model.buffers()):
                mine.copy_(source)
        return self.private.load_into(client_id, self._working)

    def client_update(self, client, plan: ClientPlan, generator: torch.Generator) -> ClientReport:
        """Train body and head locally; keep the private part, upload the shared part."""
        model = self.working_model(client.client_id)
        return run_job(self, self.job_on(model, client, plan, generator))

    def client_job(self, client, plan: ClientPlan, generator: torch.Generator) -> ClientJob:
        """:meth:`client_update` as a job, on a model of the client's own."""
        return self.job_on(self.client_model(client.client_id), client, plan, generator)

    def job_on(self, model, client, plan: ClientPlan, generator: torch.Generator) -> ClientJob:
        """The local update of ``model`` (global body, the client's head) as a job."""
        def finish(results):
            self.private.save(client.client_id, model, self.private_names)
            flops = training_flops(self.costs, results[0].samples)
            return self.report(client, model, plan, results[0].loss, flops)
        return ClientJob(client, model, generator, [self.phase(plan.local_steps)], finish)

    def report(self, client, model, plan, loss, flops) -> ClientReport:
        """A report that uploads (and was sent) only the shared parameters."""
        params = dict(model.named_parameters())
        shared = {n: params[n].detach().clone() for n in self.shared_names}
        bits = dense_bits(sum(t.numel() for t in shared.values()))
        return ClientReport(client.client_id, client.n_train, shared, loss, flops=flops, uplink_bits=bits,
                            downlink_bits=bits, local_steps=plan.local_steps)

    def global_model(self):
        return None

    def personal_model(self, client_id):
        return self.client_model(client_id)
