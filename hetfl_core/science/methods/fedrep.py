"""FedRep (Collins et al., 2021): learn the head first, then the shared representation.

Each round a client (i) trains its private head for ``head_epochs`` epochs with the body
frozen, then (ii) trains the body for the round's E epochs with the head frozen
(FedRep, Alg. 1, lines 5-9), keeps the head and uploads the body for averaging.
The paper uses 10 head epochs and 1 body epoch on CIFAR (``head_epochs=10``; default 1).
Both phases leave each epoch's partial batch out, as PFLlib's FedRep (``drop_last``).
"""
from __future__ import annotations

from ..personalization import layer_of
from ..system import training_flops
from ..training import steps_for_epochs
from ..options import Option
from .base import register
from .fedper import FedPer


@register
class FedRep(FedPer, name="fedrep", label="FedRep",
             color="#1b9e77", marker="s", reads_hardware_tiers=False):
    """FedRep: private head trained first, then the shared body (Collins et al. 2021)"""

    option_specs = {**FedPer.option_specs,
                    "head_epochs": Option(1.0, "local epochs on the head before the body's, each round", 0, 10_000,
                                          low_open=True)}

    def client_step(self, client, plan, state, generator):
        """Head steps with the body frozen, then the round's steps on the body (Alg. 1, l. 5-9)."""
        head_steps = steps_for_epochs(client.n_train, self.config.batch_size, self.options["head_epochs"],
                                      bool(self.options["drop_last"]))
        model = self.model_with(state.get("private"))
        head = yield self.local_sgd(model, client, head_steps, generator, params=self.private_names)
        body = yield self.local_sgd(model, client, plan.local_steps, generator, params=self.shared_names)
        head_layers = {layer_of(n) for n in self.private_names}
        body_layers = {layer_of(n) for n in self.shared_names}
        flops = (training_flops(self.costs, head.samples, trainable=head_layers)
                 + training_flops(self.costs, body.samples, trainable=body_layers))
        return self.report(client, model, plan, body.loss, flops), self.kept(model)
