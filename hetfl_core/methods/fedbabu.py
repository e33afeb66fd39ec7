"""FedBABU (Oh et al., 2022): train the body under a frozen random head, then fine-tune.

During federated training every client updates only the body; the head keeps its random
initialisation, shared by all, and the server averages the bodies weighted by n_k
(Sec. 4, Alg. 1). Personalisation, the paper's evaluation protocol, fine-tunes the
**whole network** on each client's own training data from the final global model:
``finetune_epochs`` epochs (5, as the paper's experiments) of SGD at the run's learning
rate with momentum ``finetune_momentum`` (0.9, the authors' optimiser), seeded per client.

As in the authors' code, the fine-tuning happens once, after the last round: earlier
evaluations score the global model (body + shared random head) on every client. Like
every evaluation, it is not charged to the run's time, traffic or FLOPs. Options for
other protocols: ``finetune_when="every"`` (a personalised curve), ``finetune="head"``
and ``finetune_steps`` (``finetune="head", finetune_steps=10, finetune_momentum=0,
finetune_when="every"`` is the behaviour of earlier versions of this class).
"""
from __future__ import annotations

from ..batched import ClientJob
from ..options import Option
from ..personalization import layer_of
from ..streams import STREAMS
from ..system import training_flops
from ..training import clone_model, local_sgd, steps_for_epochs
from .base import register, seeded_generator
from .fedper import FedPer


@register
class FedBABU(FedPer, name="fedbabu", label="FedBABU", batchable=True, color="#66c2a4", marker="D"):
    """FedBABU: body trained under a frozen head, then fine-tuned locally (Oh et al. 2022)"""

    option_specs = {**FedPer.option_specs,
                    "finetune": Option("full", "what personalisation fine-tunes: full (body and "
                                       "head, the paper) or head", choices=("full", "head")),
                    "finetune_epochs": Option(5.0, "fine-tuning epochs on the client's own "
                                              "training data", 0, 10_000),
                    "finetune_steps": Option(None, "exactly this many fine-tuning steps (None: "
                                             "finetune_epochs)", 0, 1_000_000, kind=int),
                    "finetune_momentum": Option(0.9, "SGD momentum of the fine-tuning", 0, 1,
                                                high_open=True),
                    "finetune_when": Option("last", "fine-tune at the run's last evaluation only "
                                            "(last) or at every evaluation (every)",
                                            choices=("last", "every"))}

    def setup(self, sim):
        super().setup(sim)
        self.rounds_done = 0

    def job_on(self, model, client, plan, generator):
        """Train only the body of ``model`` (the global one; the head stays at its shared
        random init) and upload the body."""
        def finish(results):
            body = {layer_of(n) for n in self.shared_names}
            flops = training_flops(self.costs, results[0].samples, trainable=body)
            return self.report(client, model, plan, results[0].loss, flops)
        return ClientJob(client, model, generator,
                         [self.phase(plan.local_steps, params=self.shared_names)], finish)

    def aggregate(self, round_idx, reports):
        """Average the bodies (FedAvg over the shared part) and note the round."""
        super().aggregate(round_idx, reports)
        self.rounds_done = round_idx

    def global_model(self):
        return self.model

    def finetune_due(self) -> bool:
        """Whether this evaluation scores fine-tuned models: after the last round, or always."""
        return self.options["finetune_when"] == "every" or self.rounds_done >= self.config.rounds

    def finetune_steps(self, client) -> int:
        """``finetune_steps`` if set, else ``finetune_epochs`` epochs of the client's data."""
        if self.options["finetune_steps"] is not None:
            return int(self.options["finetune_steps"])
        epochs = float(self.options["finetune_epochs"])
        return steps_for_epochs(client.n_train, self.config.batch_size, epochs) if epochs else 0

    def personal_model(self, client_id):
        """The global model, fine-tuned on the client's own data when :meth:`finetune_due`."""
        model = clone_model(self.model)
        client = self.data.clients[client_id]
        steps = self.finetune_steps(client) if self.finetune_due() else 0
        if steps:
            names = self.private_names if self.options["finetune"] == "head" else None
            local_sgd(model, client.x_train, client.y_train, steps, self.config.batch_size,
                      self.config.lr, seeded_generator(self.config.seed, STREAMS["finetune"], client_id),
                      momentum=float(self.options["finetune_momentum"]),
                      weight_decay=self.config.weight_decay, params=names)
        return model
