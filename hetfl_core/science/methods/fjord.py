"""FjORD (Horvath et al., 2021): ordered dropout over nested widths.

A client of maximal width w_max trains its w_max sub-model (the first ceil(w_max n_l)
units of every hidden layer) for E local epochs with one SGD optimiser. For every
minibatch it samples a width p uniformly from the levels not above w_max (HeteroFL's
``widths``, or 1/P..1 under ``width_budget``) and drops the units past the first
ceil(p n_l), whose weights then get no gradient on that batch (Sec. 3.1 ordered dropout;
Sec. 3.2 and Alg. 1). The server sets each entry to the data-weighted mean over the
clients that hold it (Alg. 1, the nested FedAvg over clients with p_max >= p).

No masking trick, Scaler or clipping by default; the options are HeteroFL's. Scores:
``acc_global``, the full-width global model; ``acc_widths`` (beside ``widths``,
ascending), the global model cut to each level on the whole test set, FjORD's
accuracy-per-width (Sec. 4); ``acc_personal``, each client's w_max sub-model on the
client's own test split, pooled. FjORD's knowledge-distillation variant (Sec. 3.3) is not
implemented.

Kept on purpose: the Flower baseline (baselines/fjord, client.py ``evaluate``; dataset.py
``load_data`` gives every client the whole CIFAR-10 test set as its ``valloader``) scores
each client at its p_max on the *global* test set. Here ``acc_personal`` stays on the
client's own split, as for every other method of the package, so that FjORD's personal
score compares with theirs; under Flower's IID split the two estimate the same accuracy,
under a non-IID split only the own split measures how the client's model serves its data.
``client_test="global"`` adds the baseline's number as ``acc_clients_global``: the mean over
the clients of the global model at their p_max on the whole test set.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F

from ..models import kept_units
from ..options import Option
from ..submodel import hidden_output_hook, hidden_units, kept_fractions_of_indices
from ..system import training_flops
from ..training import evaluate
from .base import register
from .heterofl import HeteroFL

#: FjORD's own defaults of HeteroFL's options
OWN_DEFAULTS = {"label_mask": False, "scaler": False, "clip_norm": None, "weighting": "samples",
                "personal_eval": "submodel"}


@register
class FjORD(HeteroFL, name="fjord", label="FjORD", color="#e6550d", marker="<"):
    """FjORD: ordered dropout, per-batch sampled nested widths (Horvath et al. 2021)

    Trains its clients sequentially: every minibatch draws its own width and drops units
    through a forward hook, so clients at one step run different sub-networks.
    """

    option_specs = {**{key: dataclasses.replace(spec, default=OWN_DEFAULTS.get(key, spec.default))
                       for key, spec in HeteroFL.option_specs.items()},
                    "client_test": Option("own", "own: acc_personal only, each client's p_max model on "
                                          "its own test split; global: also acc_clients_global, the "
                                          "Flower baseline's score (each client at p_max on the whole "
                                          "test set, averaged over clients)", choices=("own", "global"))}

    def client_step(self, client, plan, state, generator):
        """E epochs, one optimiser, each batch at a width p drawn from a generator seeded by
        the first draw of ``generator`` (which then draws the minibatches)."""
        levels = [w for w in self.levels if w <= plan.width + 1e-9]
        model, idx = self.cut(plan.width, self.round_idx)
        seed = int(torch.randint(2 ** 62, (1,), generator=generator))
        widths = torch.Generator().manual_seed(seed)
        units, sub_units = hidden_units(self.model), hidden_units(model)
        base_loss = self.training_loss(client)
        scale = self.options["scaler"]
        active, flops = {}, [0.0]
        kept = {p: kept_fractions_of_indices(self.model, self.indices(p, self.round_idx))
                for p in levels}

        def ordered_dropout_loss(m, xb, yb):
            p = levels[int(torch.randint(len(levels), (1,), generator=widths))]
            for name, n_sub in sub_units.items():
                first = kept_units(units[name], p)
                keep = (torch.arange(n_sub, device=xb.device) < first).to(xb.dtype)
                active[name] = keep / p if scale else keep
            flops[0] += training_flops(self.costs, len(yb), keep=kept[p])
            return base_loss(m, xb, yb) if base_loss else F.cross_entropy(m(xb), yb)

        def drop(name, mod, out):
            if not mod.training:
                return out
            return out * active[name].view(1, -1, *([1] * (out.dim() - 2)))

        with hidden_output_hook(model, drop):
            result = yield self.local_sgd(model, client, plan.local_steps, generator,
                                          loss=ordered_dropout_loss)
        return self.report(client, plan, model, idx, result.loss, flops[0]), state

    def extra_metrics(self) -> dict:
        """``acc_widths``: the global model at every width level on the whole test set, in
        the order of ``widths``."""
        x, y = self.data.dataset.x_test, self.data.dataset.y_test
        accs = [evaluate(self.width_model(p), x, y)[0] / len(y) for p in self.levels]
        out = {"acc_widths": accs, "widths": list(self.levels)}
        if self.options["client_test"] == "global":    # a client at p_max scores the level's model
            at_level = dict(zip(self.levels, accs))
            out["acc_clients_global"] = float(np.mean([at_level[self.widths[k]] for k in range(len(self.data.clients))]))
        return out
