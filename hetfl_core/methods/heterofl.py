"""HeteroFL (Diao et al., 2021): static nested sub-models sized to each client.

A client of capability c (its FLOP/s relative to the fastest device) trains the
sub-model of width w = the widest of ``widths`` not above c, made of the *first*
ceil(w n_l) units of every hidden layer (HeteroFL, Sec. 3.1). The server averages each
parameter entry over the clients that hold it, weighted by data size, and leaves
entries no participant holds unchanged (HeteroFL, Eq. 3 with sample weights).

With the option ``width_budget`` a client's width is instead the one Heroes gives the
same device (Yan et al., Alg. 1 l. 6-11), p/P of every layer, so that the methods are
compared at equal per-device model sizes.
"""
from __future__ import annotations

import torch

from ..frequency import heroes_widths
from ..options import Option
from ..errors import ConfigError
from ..submodel import SUPPORTED_MODELS, embed, extract, first_units, layer_indices, kept_fractions_of_indices
from ..system import capability, dense_bits, training_flops
from .aggregate import average_over_holders
from .base import ClientPlan, ClientReport, register
from .fedavg import FedAvg


@register
class HeteroFL(FedAvg):
    """Width by capability, first-k units, averaging over holders."""

    name = "heterofl"
    summary = "HeteroFL: nested first-k width sub-models by capability, averaged over holders (Diao et al. 2021)"
    option_specs = {"widths": Option([1.0, 0.5, 0.25], "the width levels; a client gets the largest its capability "
                                     "allows", 0, 1, low_open=True),
                    "width_budget": Option(None, "None: widths by capability; a number: Heroes' width rule, "
                                           "p/P with the widest p whose step time fits this many full-model "
                                           "steps of the fastest device", 0, 1e6, low_open=True, kind=float),
                    "max_width": Option(4, "P of the width_budget rule: widths 1/P..1", 1, 1024)}

    @classmethod
    def check_config(cls, config):
        super().check_config(config)
        if not config.options.get("widths", cls.defaults["widths"]):
            raise ConfigError("widths must be a non-empty list of values in (0, 1], got []")
        if config.model not in SUPPORTED_MODELS:
            raise ConfigError(f"{cls.name} needs a model of {', '.join(SUPPORTED_MODELS)}, got {config.model!r}")

    def __init__(self, config, data, devices):
        super().__init__(config, data, devices)
        self.widths = {}
        if self.options["width_budget"] is not None:
            # the per-device widths of Heroes (Alg. 1 l. 6-11), so both compare at equal model sizes
            P = int(self.options["max_width"])
            self.levels = [p / P for p in range(1, P + 1)]
            for k, p in enumerate(heroes_widths(config, data, devices, P, float(self.options["width_budget"]))):
                self.widths[k] = p / P
        else:
            levels = sorted((float(w) for w in self.options["widths"]), reverse=True)
            self.levels = sorted(set(levels))
            for k, device in enumerate(devices):
                self.widths[k] = next((w for w in levels if w <= capability(device, devices) + 1e-9), levels[-1])
        self.round_idx = 0

    def unit_rule(self, round_idx: int):
        """Which units a sub-model keeps: the first ones."""
        return first_units

    def indices(self, width: float, round_idx: int) -> dict:
        return layer_indices(self.model, width, self.unit_rule(round_idx))

    def configure_round(self, round_idx, client_ids):
        """Each client's width from its capability (static across rounds)."""
        self.round_idx = round_idx
        return {k: ClientPlan(self.local_steps(self.data.clients[k]), width=self.widths[k]) for k in client_ids}

    def client_update(self, client, plan: ClientPlan, generator: torch.Generator) -> ClientReport:
        """Cut the sub-model, train it, send it back (its entries and where they go)."""
        idx = self.indices(plan.width, self.round_idx)
        model = self.build_model(plan.width)
        model.load_state_dict(extract(self.model, self.model.state_dict(), idx))
        result = self.local_train(model, client, plan.local_steps, generator)
        values, held = embed(self.model, model.state_dict(), idx)
        n_params = sum(p.numel() for p in model.parameters())
        return ClientReport(client.client_id, client.n_train, (values, held), result.loss,
                            flops=training_flops(self.costs, result.samples, keep=kept_fractions_of_indices(self.model, idx)),
                            uplink_bits=dense_bits(n_params), downlink_bits=dense_bits(n_params),
                            local_steps=plan.local_steps, width=plan.width)

    def aggregate(self, round_idx, reports):
        """Per entry: sum_k n_k held_k w_k / sum_k n_k held_k; unchanged where nobody holds it."""
        average_over_holders(self.model, reports)

    def personal_model(self, client_id):
        """The client's current sub-model."""
        width = self.widths[client_id]
        idx = self.indices(width, max(self.round_idx, 1))
        model = self.build_model(width)
        model.load_state_dict(extract(self.model, self.model.state_dict(), idx))
        return model
