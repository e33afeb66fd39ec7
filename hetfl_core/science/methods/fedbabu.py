"""FedBABU (Oh et al., 2022): train the body under a frozen random head, then fine-tune.

During federated training every client updates only the body; the head keeps its random
initialisation, shared by all, and the server averages the bodies (Sec. 4, Alg. 1).
Personalisation, the paper's evaluation protocol, fine-tunes the **whole network** on each
client's own training data from the final global model: ``finetune_epochs`` epochs (5, as
the paper's experiments) of SGD with momentum ``finetune_momentum`` (0.9), seeded per client.

Defaults follow what the authors' released code (jhoon-oh/FedBABU) computes:

* the server averages the bodies as sum_k w_k / m over the m participants
  (``weighting="count"``; main_fed.py's aggregation); ``weighting="samples"`` weights by
  n_k, as PFLlib's FedBABU does;
* the fine-tuning rate is ``finetune_lr_factor`` x the run's lr, 0.01 by default: the
  authors fine-tune at their training rate after its two x0.1 decays at R/2 and 3R/4
  (0.1 -> 1e-3 in their scripts), and without weight decay (``finetune_weight_decay`` 0);
* the training rate itself stays the run's constant lr unless ``lr_schedule="multistep"``,
  the authors' x0.1 after rounds R//2 and 3R//4.

Kept on purpose: fine-tuning starts from the **final** global model. The authors' notebook
fine-tunes the model saved at the round with the best test accuracy, a selection on the
test set that makes their personalised score optimistic.

As in the authors' code, the fine-tuning happens once, after the last round: earlier
evaluations score the global model (body + shared random head) on every client. Like
every evaluation, it is not charged to the run's time, traffic or FLOPs. Options for
other protocols: ``finetune_when="every"`` (a personalised curve), ``finetune="head"``
and ``finetune_steps`` (``finetune="head", finetune_steps=10, finetune_momentum=0,
finetune_when="every"`` is the behaviour of earlier versions of this class).
"""
from __future__ import annotations

from ..options import Option
from ..personalization import layer_of
from ..streams import STREAMS
from ..system import training_flops
from ..training import clone_model, local_sgd, multistep_factor, steps_for_epochs
from .aggregate import weighted_average
from .base import register, seeded_generator
from .fedper import FedPer


@register
class FedBABU(FedPer, name="fedbabu", label="FedBABU", color="#66c2a4", marker="D"):
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
                    "drop_last": Option(False, "leave each epoch's partial batch out (the "
                                        "authors' loader keeps it)"),
                    "finetune_when": Option("last", "fine-tune at the run's last evaluation only "
                                            "(last) or at every evaluation (every)",
                                            choices=("last", "every")),
                    "finetune_lr_factor": Option(0.01, "fine-tuning lr as a multiple of the run's lr "
                                                 "(0.01: the training lr after the authors' two x0.1 "
                                                 "decays)", 0, 1e4, low_open=True),
                    "finetune_weight_decay": Option(0.0, "weight decay of the fine-tuning (the "
                                                    "authors': none)", 0, 1),
                    "weighting": Option("count", "body averaging: count (sum/m, the authors' code) "
                                        "or samples (n_k-weighted)", choices=("count", "samples")),
                    "lr_schedule": Option("constant", "training lr: constant, or multistep (x0.1 "
                                          "after rounds R//2 and 3R//4, the authors' code)",
                                          choices=("constant", "multistep"))}

    def setup(self, sim):
        super().setup(sim)
        self.rounds_done = 0

    def client_step(self, client, plan, state, generator):
        """Train only the body of the global model (the head stays at its shared random
        init) and upload the body; nothing is kept on the client."""
        model = self.model_with(state.get("private"))
        result = yield self.local_sgd(model, client, plan.local_steps, generator, params=self.shared_names)
        body = {layer_of(n) for n in self.shared_names}
        flops = training_flops(self.costs, result.samples, trainable=body)
        return self.report(client, model, plan, result.loss, flops), state

    def lr_at(self, round_idx):
        """The run's lr, or with ``lr_schedule="multistep"`` x0.1 after rounds R//2 and 3R//4."""
        if self.options["lr_schedule"] == "multistep":
            rounds = self.config.rounds
            return self.config.lr * multistep_factor(round_idx, (rounds // 2, (3 * rounds) // 4))
        return self.config.lr

    def aggregate(self, round_idx, reports):
        """Average the bodies, sum_k w_k / m (``weighting="count"``) or n_k-weighted, and
        note the round."""
        counts = self.options["weighting"] == "count"
        weights = [1.0 if counts else r.n_samples for r in reports]
        self.model.load_state_dict(weighted_average([r.weights for r in reports], weights), strict=False)
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

    def finetune_lr(self) -> float:
        """The fine-tuning rate: ``finetune_lr_factor`` x the run's lr."""
        return float(self.options["finetune_lr_factor"]) * self.config.lr

    def personal_model(self, client_id):
        """The global model, fine-tuned on the client's own data when :meth:`finetune_due`."""
        model = clone_model(self.model)
        client = self.data.clients[client_id]
        steps = self.finetune_steps(client) if self.finetune_due() else 0
        if steps:
            names = self.private_names if self.options["finetune"] == "head" else None
            local_sgd(model, client.x_train, client.y_train, steps, self.config.batch_size,
                      self.finetune_lr(), seeded_generator(self.config.seed, STREAMS["finetune"], client_id),
                      momentum=float(self.options["finetune_momentum"]),
                      weight_decay=float(self.options["finetune_weight_decay"]), params=names)
        return model
