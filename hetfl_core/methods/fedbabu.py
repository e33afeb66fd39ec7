"""FedBABU (Oh et al., 2022): train the body with a frozen random head, fine-tune the head.

During federated training every client updates only the body; the head keeps its random
initialisation, shared by all (FedBABU, Alg. 1). For evaluation each client fine-tunes
the head on its own training data for ``finetune_steps`` steps (seeded, so repeatable);
the global model is the body with the frozen head.
"""
from __future__ import annotations

from ..options import Option
from ..personalization import layer_of
from ..system import training_flops
from ..training import clone_model
from .base import register, seeded_generator
from .fedper import FedPer


@register
class FedBABU(FedPer):
    """Body-only federated training; head fine-tuned locally at evaluation."""

    name = "fedbabu"
    summary = "FedBABU: body trained under a frozen head, head fine-tuned locally (Oh et al. 2022)"
    option_specs = {**FedPer.option_specs,
                    "finetune_steps": Option(10, "SGD steps fine-tuning the head before each evaluation", 0,
                                             1_000_000)}

    def client_update(self, client, plan, generator):
        """Train only the body (the head stays at its shared random init); upload the body."""
        model = clone_model(self.model)
        result = self.local_train(model, client, plan.local_steps, generator, params=self.shared_names)
        flops = training_flops(self.costs, result.samples, trainable={layer_of(n) for n in self.shared_names})
        return self.report(client, model, plan, result.loss, flops)

    def global_model(self):
        return self.model

    def personal_model(self, client_id):
        """The global body with a head fine-tuned on the client's own data."""
        model = clone_model(self.model)
        steps = int(self.options["finetune_steps"])
        if steps:
            client = self.data.clients[client_id]
            self.local_train(model, client, steps, seeded_generator(self.config.seed, 7, client_id),
                             params=self.private_names)
        return model
