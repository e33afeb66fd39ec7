"""HeteroFL (Diao et al., 2021): static nested sub-models sized to each client.

A client of capability c (its FLOP/s relative to the fastest device) trains the
sub-model of width w = the widest of ``widths`` not above c, made of the *first*
ceil(w n_l) units of every hidden layer (HeteroFL, Sec. 3.1). By default the method runs
as its authors ran it:

* **Scaler** (Sec. 3, ``scaler``): while training, every hidden layer's output is divided
  by w, so a sub-model's activations keep the full model's scale; in tests, the identity.
* **Masking trick** (Sec. 4, ``label_mask``): a client's logits of the labels absent from
  its training data are set to 0 before the cross-entropy, and it does not send their
  classifier rows: they are neither trained nor averaged by it.
* **Aggregation** (Sec. 3.1, Eq. 3, ``weighting``): each entry is the plain mean over the
  participants that hold it; entries nobody holds keep their value.
* **Gradient clipping** (``clip_norm``) at norm 1 before every local step: the authors'
  training code does it; the paper does not mention it.
* **Scores** (Sec. 4, ``personal_eval``): the full-width global model, in test mode:
  ``acc_global`` on the whole test set; ``acc_personal`` (and ``loss_personal``,
  ``acc_clients``, ``acc_val``) on each client's own test split with the logits of labels
  it does not train on set to 0, pooled over clients: the paper's "local" accuracy.

The options switch each of these off for ablations (see their help). Deviations kept on
purpose: the width levels are 1, 1/2, 1/4 by capability, fixed for the run (the paper's
five levels are the ``widths`` option). The authors' ``model_split_mode='dynamic'``
(fed.py ``make_model_rate``, called by ``distribute`` every round: ``torch.multinomial(
proportion, num_users, replacement=True)`` over the rate levels) is ``rate_mode="dynamic"``:
each round every client's width is drawn afresh, independently, with the levels' shares of
the capability assignment as the proportions (the authors' ``proportion`` comes from their
``model_mode`` string, which sets the fixed mode's shares too); the authors decay the lr by x0.1 at fixed
rounds (their global MultiStepLR), here ``lr_milestones`` (empty by default: the run's
lr throughout; FedRolex's code steps its schedule before each round, so its milestone m
is ``lr_milestones`` m - 1); the width models have no batch
normalisation, so the paper's static BN has nothing to do, and the Scaler acts in full
(the authors' batch norm after it absorbs most of its effect). With ``width_budget`` a
client's width is the one Heroes gives the same device (Yan et al., Alg. 1 l. 6-11), so
the methods compare at equal per-device model sizes.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..frequency import heroes_widths
from ..options import Option
from ..streams import STREAMS
from ..errors import ConfigError
from ..models import structured_units
from ..submodel import (SUPPORTED_MODELS, embed, extract, first_units, hidden_output_hook,
                        kept_fractions_of_indices, layer_indices)
from ..system import capability, dense_bits, training_flops
from .aggregate import average_over_holders
from .base import ClientPlan, ClientReport, register
from .fedavg import FedAvg

__all__ = ["HeteroFL", "LabelMasked"]


class LabelMasked(nn.Module):
    """A model whose logits of the labels not in ``present`` (a boolean vector over the
    classes) are set to 0, as HeteroFL's masking trick does in training and local tests."""

    def __init__(self, model: nn.Module, present: torch.Tensor):
        super().__init__()
        self.model = model
        self.register_buffer("present", present)

    def forward(self, x):
        """The wrapped model's logits with the absent labels' set to 0."""
        return self.model(x).masked_fill(~self.present, 0.0)


@register
class HeteroFL(FedAvg, name="heterofl", label="HeteroFL", color="#ff7f0e", marker="^"):
    """HeteroFL: nested first-k width sub-models by capability, averaged over holders (Diao et al. 2021)

    Trains its clients sequentially under its defaults: the label-masked loss and gradient
    clipping are not in the batched SGD. Without them (``label_mask`` and ``clip_norm``
    off) the clients of one width train together, the Scaler's hooks grouped by its rate.
    """
    state_types = (LabelMasked,)                     # the label-masked sub-models
    server_state = ("widths", "assigned")   # every client's width

    option_specs = {
        "lr_milestones": Option([], "rounds after which the lr is multiplied by lr_gamma (the "
                                "authors' MultiStepLR, e.g. [150, 250] on CIFAR-10; empty: "
                                "constant)", 1, 10**9, kind=int),
        "lr_gamma": Option(0.1, "the factor of each lr_milestones drop", 0, 1, low_open=True),
        "rate_mode": Option("fixed", "fixed: each client's width for the run; dynamic: every "
                            "client's width redrawn each round from the levels' shares (the "
                            "authors' model_split_mode='dynamic')", choices=("fixed", "dynamic")),
        "widths": Option([1.0, 0.5, 0.25], "the width levels; a client gets the largest its "
                         "capability allows", 0, 1, low_open=True),
        "width_budget": Option(None, "None: widths by capability; a number: Heroes' width rule, "
                               "p/P with the widest p whose step time fits this many full-model "
                               "steps of the fastest device", 0, 1e6, low_open=True, kind=float),
        "max_width": Option(4, "P of the width_budget rule: widths 1/P..1", 1, 1024),
        "label_mask": Option(True, "masking trick: logits of labels absent from a client's "
                             "training data set to 0 in its loss, and their classifier rows "
                             "not sent"),
        "scaler": Option(True, "Scaler: hidden outputs divided by the width while training"),
        "clip_norm": Option(1.0, "clip the local gradients to this global L2 norm (None: "
                            "no clipping)", 0, 1e6, low_open=True, optional=True, kind=float),
        "weighting": Option("count", "each entry's mean over its holders: plain (count) or by "
                            "data size (samples)", choices=("count", "samples")),
        "personal_eval": Option("global-masked", "acc_personal: the global model label-masked per "
                                "client, the global model, or each client's width sub-model",
                                choices=("global-masked", "global", "submodel")),
    }

    @classmethod
    def check_config(cls, config):
        super().check_config(config)
        if not config.options.get("widths", cls.defaults["widths"]):
            raise ConfigError("widths must be a non-empty list of values in (0, 1], got []")
        if config.model not in SUPPORTED_MODELS:
            raise ConfigError(f"{cls.name} needs a model of {', '.join(SUPPORTED_MODELS)}, got {config.model!r}")

    def setup(self, sim):
        super().setup(sim)
        self.widths = {}
        if self.options["width_budget"] is not None:
            P = int(self.options["max_width"])
            self.levels = [p / P for p in range(1, P + 1)]
            budget = float(self.options["width_budget"])
            for k, p in enumerate(heroes_widths(self.config, self.data, self.hardware, P, budget)):
                self.widths[k] = p / P
        else:
            levels = sorted((float(w) for w in self.options["widths"]), reverse=True)
            self.levels = sorted(set(levels))
            for k, hardware in enumerate(self.hardware):
                self.widths[k] = next((w for w in levels if w <= capability(hardware, self.hardware) + 1e-9), levels[-1])
        self.assigned = dict(self.widths)    # the capability assignment (rate_mode's shares)
        self.classifier = structured_units(self.model, include_output=True)[-1][0]
        self.round_idx = 0

    def indices(self, width: float, round_idx: int) -> dict:
        """The kept units of every hidden layer at ``width`` in round ``round_idx``: the first ones."""
        return layer_indices(self.model, width, first_units)

    def present_labels(self, client_id: int) -> torch.Tensor:
        """Boolean vector over the classes: the labels in the client's training data."""
        present = torch.zeros(self.data.num_classes, dtype=torch.bool, device=self.device)
        present[self.data.clients[client_id].y_train.unique().to(self.device)] = True
        return present

    def training_loss(self, client):
        """The local loss: cross-entropy, on label-masked logits under ``label_mask``."""
        if not self.options["label_mask"]:
            return None
        present = self.present_labels(client.client_id)
        return lambda model, xb, yb: F.cross_entropy(model(xb).masked_fill(~present, 0.0), yb)

    def scaler_rate(self, width: float) -> float:
        """What the Scaler divides hidden outputs by at ``width`` while training: the
        width, or 1 with ``scaler`` off."""
        return width if self.options["scaler"] else 1.0

    def scaled(self, model: nn.Module, width: float):
        """Context: the Scaler (hidden outputs / width while training) on ``model`` when on."""
        rate = self.scaler_rate(width)
        return hidden_output_hook(model, lambda _name, mod, out: out / rate if mod.training
                                  else out)

    def configure_round(self, round_idx, client_ids):
        """Each client's width: fixed for the run, or under ``rate_mode="dynamic"`` every
        client's redrawn for this round (:meth:`redraw_widths`)."""
        self.round_idx = round_idx
        if self.options["rate_mode"] == "dynamic":
            self.widths = self.redraw_widths(round_idx)
        return {k: ClientPlan(self.local_steps(self.data.clients[k]), width=self.widths[k]) for k in client_ids}

    def redraw_widths(self, round_idx: int) -> dict:
        """fed.py ``make_model_rate`` ('dynamic'): every client's width drawn independently
        from the levels with probabilities their shares of the capability assignment."""
        levels = sorted(set(self.assigned.values()))
        shares = np.array([sum(w == level for w in self.assigned.values()) for level in levels], dtype=float)
        rng = np.random.default_rng([self.config.seed, STREAMS["dynamic_rates"], round_idx])
        drawn = rng.choice(len(levels), size=len(self.assigned), p=shares / shares.sum())
        return {k: levels[i] for k, i in zip(sorted(self.assigned), drawn)}

    def report(self, client, plan, model: nn.Module, idx: dict, loss: float, flops: float) -> ClientReport:
        """The trained sub-model sent back in global shapes (its ``weights`` and where the
        client ``held`` them); under
        ``label_mask`` the classifier rows of labels absent from the client's data are not held."""
        values, held = embed(self.model, model.state_dict(), idx)
        if self.options["label_mask"]:
            absent = ~self.present_labels(client.client_id)
            for kind in ("weight", "bias"):
                name = f"{self.classifier}.{kind}"
                if name in held:
                    held[name][absent] = 0
        bits = dense_bits(sum(p.numel() for p in model.parameters()))
        return ClientReport(client.client_id, client.n_train, weights=values, held=held, loss=loss, flops=flops,
                            uplink_bits=bits, downlink_bits=bits, local_steps=plan.local_steps,
                            width=plan.width)

    def cut(self, width: float, round_idx: int) -> tuple[nn.Module, dict]:
        """The global model cut to ``width`` by the :meth:`indices` of round ``round_idx``, and
        those indices."""
        idx = self.indices(width, round_idx)
        model = self.build_model(width)
        model.load_state_dict(extract(self.model, self.model.state_dict(), idx))
        return model, idx

    def client_step(self, client, plan: ClientPlan, state, generator: torch.Generator):
        """Cut the sub-model, train it, send it back (its entries and where they go)."""
        model, idx = self.cut(plan.width, self.round_idx)
        with self.scaled(model, plan.width):
            # the Scaler's hooks hold the rate: the phases of one rate train together
            result = yield self.local_sgd(model, client, plan.local_steps, generator,
                                          loss=self.training_loss(client),
                                          group=(self.scaler_rate(plan.width),))
        flops = training_flops(self.costs, result.samples, keep=kept_fractions_of_indices(self.model, idx))
        return self.report(client, plan, model, idx, result.loss, flops), state

    def aggregate(self, round_idx, reports):
        """Per entry: sum_k a_k held_k w_k / sum_k a_k held_k, a_k = 1 (``count``) or n_k
        (``samples``); unchanged where nobody holds it."""
        ones = [1.0] * len(reports) if self.options["weighting"] == "count" else None
        average_over_holders(self.model, reports, ones)

    def personal_model(self, client_id):
        """What ``acc_personal`` scores for the client (``personal_eval``): the global model
        with its absent labels masked, the global model, or the client's width sub-model."""
        mode = self.options["personal_eval"]
        if mode == "global-masked":
            return LabelMasked(self.model, self.present_labels(client_id))
        if mode == "global":
            return self.model
        return self.width_model(self.widths[client_id])

    def width_model(self, width: float) -> nn.Module:
        """The global model cut to ``width`` by the :meth:`indices` of the current round."""
        return self.cut(width, max(self.round_idx, 1))[0]
