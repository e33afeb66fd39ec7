"""FedLPS as the authors' released code computes it (``fedlps-code``).

The released code is sunnyxuejj/FedLPS-main at commit b499bbbe (``Models.py`` from its
parent 27b236be: the last commit deleted it). It differs from the paper's (Xue et al.)
Algorithm 1, which :class:`~hetfl_core.science.methods.fedlps.FedLPS` follows, in these places;
this variant computes each one as the released code does:

* **The pattern is not learned.** Each visit starts from fresh N(0, 1) scores sorted in
  descending order (Models.py:49; a new ``WeightLayer`` per visit, Hetero_Client.py:183-190),
  not the client's persistent Q (Alg. 1 line 18). The mask multiplies ``param.data``
  outside autograd and ``torch.heaviside`` has no derivative (Models.py:54-66,
  Hetero_Client.py:205-212), so the task loss gives Q no gradient (paper: Eqs. 10-11). Q's
  only gradient, on kept units (Hetero_Client.py:243-244), is lambda times an ``MSELoss``
  between Q of shape (n, 1) and sigma(sum |w| of each masked row) of shape (n,): the mean
  over all n x n pairs (Hetero_Client.py:162-172; Eq. 8 is per unit). So the kept units
  are the first ones in every visit, unless that contraction reorders the scores.
* **One unit too few.** k = max(int(s n), 1) scores pass ``topk``, then a strict
  ``nn.Threshold`` at the smallest keeps k - 1 (Models.py:55-60; Eq. 4 keeps s J_l).
* **Only weight rows are masked** (Models.py:16-31, 62-66; FedLPS.py:139-144): dropped
  rows are zeroed for the forward pass, get no gradient and are restored after every step
  (``weight_recover``, Hetero_Client.py:248); biases and the next layer's columns train,
  so a dropped unit outputs act(b) (Eq. 5 zeroes all its weights). The upload is local
  minus server weights, dropped rows zeroed (Hetero_Client.py:274-282; Eq. 12).
* **Aggregation**: the unweighted mean of omega^r + Delta_k plus N(0, ``noise``^2) on
  every parameter, from the run's seeded generator (agg/avg.py:9-24, options.py:35);
  Eq. (13) weights by p_k and adds no noise.
* **No proximal term** (``--fedprox`` is never set, options.py:60; Eqs. 6-9: mu = 1).
* **Learning rate** lr x ``lr_decay``^(r - 1) in round r (Hetero_Client.py:153-157,
  options.py:29; the paper: constant).
* **Tiers redrawn every round** (``model_split_mode='dynamic'``, options.py:95;
  FedLPS.py:34-45, 178; Sec. III-B fixes them): ``capability="dynamic"``, uniformly from
  the code's five tiers (``tiers="code"``, the default): capabilities 1/16, 1/8, 1/4, 1/2
  and 1 of the run's fastest hardware, with its links (FedLPS.py ``mask_rate_list`` with
  equal ``proportion``, and ``FLOPS_capacity`` 46528..744448 MFLOP/s, one link rate for
  all). ``tiers="run"`` draws from the run's distinct hardware tiers instead (e.g. 1, 1/4,
  1/16 under ``heterogeneity="high"``): it changes the share of visits above 1/4, which
  alone refresh a kept model (2 in 5 with the code's tiers, 1 in 3 there).
* **Five local epochs** per visit (script/*_FedLPS.sh ``--local_ep 5``,
  Hetero_Client.py:199; the paper: E local steps), unless the run sets ``local_steps``.
* **Scoring.** Only a visit at a ratio above ``keep_above`` = 0.25 replaces the client's
  kept model (Hetero_Client.py:261-267, ``mask_rate_list[2]``; Alg. 1 line 24: every
  visit); a client without one is scored with the *dense* global model
  (FedLPS.py:242-251). The released code reports the unweighted mean of the clients'
  accuracies (FedLPS.py:273-275; ``acc_clients`` holds them).
* **P-UCBV** keeps the epsilon-greedy step (``explore``, Hetero_Client.py:133-137), not
  its other quirks (a phantom zero reward per arm, the off-by-one crediting of
  FedLPS.py:222-227, an elimination test that never fires).
* **Data.** ``--iid`` (options.py:13) is never read: every run deals label-sorted shards
  (sampling.py:246-298); this variant runs on any partition.

The per-round tier, learning rate and epochs travel in the round's ``ClientPlan``.
"""
from __future__ import annotations

import dataclasses
from fractions import Fraction

import torch
import torch.nn.functional as F

from ..masks import kept_fractions_of_units
from ..models import structured_units
from ..options import Option
from ..streams import STREAMS
from ..system import dense_bits, training_flops
from ..training import clone_model, minibatch_indices, steps_for_epochs
from .base import ClientPlan, register, seeded_generator
from .fedlps import FedLPS

__all__ = ["FedLPSCode", "CODE_TIERS", "code_tiers", "released_scores", "released_units"]

#: FedLPS.py's ``mask_rate_list``: the tiers (capabilities) a round's redraw picks from
CODE_TIERS = (0.0625, 0.125, 0.25, 0.5, 1.0)

_SHARED = ("lam", "ratio_rule", "ratio", "capability", "alpha", "arm_range", "intervals", "rho",
           "delta", "explore", "ucb_xi")


def released_scores(units: dict[str, int], generator: torch.Generator) -> dict[str, torch.Tensor]:
    """A visit's fresh scores: per layer, N(0, 1) draws sorted in descending order
    (Models.py:49)."""
    return {n: torch.sort(torch.randn(k, generator=generator), descending=True).values
            for n, k in units.items()}


def released_units(q: torch.Tensor, ratio: float) -> torch.Tensor:
    """The units a score vector keeps: sigma(q) strictly above the smallest of the top
    max(int(ratio n), 1), i.e. k - 1 units (Models.py:55-60)."""
    s = torch.sigmoid(q.detach())
    k = max(int(ratio * q.numel()), 1)
    return s > torch.topk(s, k).values.min()


def code_tiers(hardware) -> list:
    """The released code's five tiers as hardware profiles: the fastest of ``hardware`` with its compute
    scaled by each of :data:`CODE_TIERS` (its links unchanged: the code gives every client
    the same link rates)."""
    fastest = max(hardware, key=lambda d: d.flops_per_s)
    return [dataclasses.replace(fastest, tier=f"code-{Fraction(z)}", flops_per_s=fastest.flops_per_s * z)
            for z in CODE_TIERS]


@register
class FedLPSCode(FedLPS, name="fedlps-code", label="FedLPS (released code)", color="#ff9896", marker="h"):
    """FedLPS as the authors' released code computes it (Xue et al.; FedLPS-main)

    Trains its clients sequentially: its own optimiser loop trains the scores Q with the
    weights, redraws the row masks every step and restores the dropped rows after it.
    """

    option_specs = {
        **{k: FedLPS.option_specs[k] for k in _SHARED},
        "lam": Option(1.0, "lambda of the released importance loss: mean over unit pairs (i, j) of "
                           "(Q_i - sigma(|w_j|))^2", 0, 1e4),
        "capability": dataclasses.replace(FedLPS.option_specs["capability"], default="dynamic"),
        "explore": dataclasses.replace(FedLPS.option_specs["explore"], default=True),
        "pattern": Option("ordered", "fixed: fresh scores sorted in descending order keep the "
                                     "first units", choices=("ordered",)),
        "epochs": Option(5.0, "local epochs per visit (the released scripts' 5), unless the run "
                              "sets local_steps; None: the run's local_epochs", 0, 1e4,
                         low_open=True, optional=True),
        "lr_decay": Option(0.998, "the learning rate is lr x lr_decay^(round - 1)", 0, 1,
                           low_open=True),
        "tiers": Option("code", "the tiers a dynamic round draws from: code (the released "
                                "code's capabilities 1/16, 1/8, 1/4, 1/2, 1 of the fastest hardware) "
                                "or run (the run's hardware tiers)", choices=("code", "run")),
        "noise": Option(1e-3, "sd of the Gaussian noise the server adds to every parameter", 0, 1),
        "keep_above": Option(0.25, "a visit refreshes the kept model only above this ratio", 0, 1),
    }
    step_like_options = ()   # no proximal term (see the module docstring)

    def setup(self, sim):
        super().setup(sim)
        self.units = {n: k for n, _, k in structured_units(self.model)}
        if self.options["tiers"] == "code":
            self.tiers = code_tiers(self.hardware)

    def local_steps(self, client) -> int:
        """``epochs`` passes over the client's data, unless the run sets ``local_steps`` or
        ``epochs`` is None."""
        if self.options["epochs"] is None or self.config.local_steps is not None:
            return super().local_steps(client)
        return steps_for_epochs(client.n_train, self.config.batch_size, self.options["epochs"])

    def configure_round(self, round_idx, client_ids):
        """FedLPS's plans (tier, ratio = min(P-UCBV, tier)), with the round's decayed lr."""
        plans = super().configure_round(round_idx, client_ids)
        lr = self.config.lr * self.options["lr_decay"] ** (round_idx - 1)
        for plan in plans.values():
            plan.extra.update(lr=lr, round=round_idx)
        return plans

    def client_step(self, client, plan: ClientPlan, state, generator):
        """One visit as Hetero_Client.update_weights_leanable runs it (see the module
        docstring): its own SGD loop, so the report comes back without a phase yielded."""
        o, k = self.options, client.client_id
        net = clone_model(self.model)
        params = dict(net.named_parameters())
        weights = {n: params[f"{n}.weight"] for n in self.units}
        scores = {n: q.to(self.device).requires_grad_() for n, q in released_scores(
            self.units, seeded_generator(self.config.seed, STREAMS["code_masks"], plan.extra["round"], k)).items()}
        optimizer = torch.optim.SGD([*net.parameters(), *scores.values()], lr=plan.extra["lr"],
                                    momentum=self.config.momentum,
                                    weight_decay=self.config.weight_decay)
        x, y, aside = client.x_train, client.y_train, {}
        correct = samples = 0
        total_loss = 0.0
        for idx in minibatch_indices(client.n_train, plan.local_steps, self.config.batch_size, generator):
            with torch.no_grad():
                for name, w in weights.items():          # weight_recover, then this step's mask
                    w.add_(aside.get(name, 0.0))
                keep = {name: released_units(q, plan.ratio) for name, q in scores.items()}
                rows = {name: keep[name].to(w.dtype).view(-1, *([1] * (w.dim() - 1)))
                        for name, w in weights.items()}
                aside = {name: w * (1 - rows[name]) for name, w in weights.items()}
                for name, w in weights.items():
                    w.mul_(rows[name])
            out = net(x[idx])
            task = F.cross_entropy(out, y[idx])
            targets = {name: torch.sigmoid(w.detach().abs().flatten(1).sum(1))
                       for name, w in weights.items()}
            importance = sum(((scores[name][:, None] - targets[name]) ** 2).mean()
                             for name in weights)
            optimizer.zero_grad(set_to_none=True)
            (task + o["lam"] * importance).backward()
            for name, w in weights.items():
                w.grad.mul_(rows[name])
                if scores[name].grad is not None:
                    scores[name].grad.mul_(keep[name].to(scores[name].dtype))
            optimizer.step()
            correct += int((out.argmax(1) == y[idx]).sum())
            total_loss += task.item() * len(idx)
            samples += len(idx)
        with torch.no_grad():   # local - server, dropped rows zeroed (Hetero_Client.py:274-282)
            update = {}
            for name, p in self.model.named_parameters():
                layer = name.rsplit(".", 1)[0]
                mask = rows[layer] if name.endswith(".weight") and layer in rows else 1.0
                update[name] = (params[name].detach() - p.detach()) * mask
            state = dict(state)
            if plan.ratio > o["keep_above"]:   # kept model: the sparse state after the last step
                state["personal"] = {name: p.detach().clone() for name, p in params.items()}
        flops = training_flops(self.costs, samples, keep=kept_fractions_of_units(keep))
        sent = sum(float((u != 0).sum()) if u.dim() > 1 else u.numel() for u in update.values())
        return self.report(client, plan, update, total_loss / max(samples, 1), flops,
                           dense_bits(int(sent)), correct / max(samples, 1), keep), state

    def aggregate(self, round_idx, reports):
        """omega^{r+1} = omega^r + mean_k Delta_k + N(0, noise^2) (agg/avg.py:9-24), then
        each participant's P-UCBV agent proposes its next ratio (Alg. 1 lines 9-15)."""
        noise = seeded_generator(self.config.seed, STREAMS["server_noise"], round_idx)
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                p.add_(sum(r.weights[name] for r in reports) / len(reports))
                if self.options["noise"]:
                    draw = torch.randn(p.shape, generator=noise).to(p.device)
                    p.add_(self.options["noise"] * draw)
        self.update_agents(reports)

    def personal_model(self, client_id):
        """The kept sparse model of the client's last visit above ``keep_above``, else the
        dense global model (FedLPS.py:242-251)."""
        if client_id not in self.personal:
            return self.model
        return super().personal_model(client_id)
