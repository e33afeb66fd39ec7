"""Lightweight personalised FL (Tan et al., 2025): a shared base with top-k sparsified
gradients, a private part pruned by magnitude, and per-round DCA resource allocation.

Algorithm 1, one round t (full participation by default):

    server: draw the round's channel, power and CPU; choose (k_n, r_n, l_n) by Alg. 2
            (:func:`hetfl_core.dca.solve_dca`) and broadcast w^B_t, k_n, r_n
    client n:
        prune      r-mask keeps the ceil(r d_P) largest |w| of the private vector,
                   w^P <- w^P (.) r-mask                                         (3)
        gradient   at the pruned model w^ = [w^B; w^P (.) r-mask]               (2)
        private    w^P_{n,t+1} = w^P - eta g^P (.) r-mask (pruned entries stay 0)  (4)
        sparsify   g~^B = top_k(g^B) with ceil(k d_B) entries, uploaded with indices  (5)
    server: w^B_{t+1} = w^B_t - eta sum_n gamma_n g~^B_n                        (6)

With ``local_steps`` > 1 (the paper's Algorithm 1 takes one step) the client runs several masked SGD steps and uploads
the pseudo-gradient (w^B_t - w^B_local) / eta; with one step it is the gradient itself.

Latency and energy are the run's cost model: under ``system="wireless"`` (this method's
default) :class:`hetfl_core.system.WirelessCost` charges compute cycles b C (d_B + r d_P)
/ d on a CPU of omega Hz (12), the FDMA uplink rate at the share l W (7) and the energies
(11) and (13); the method reports the FLOPs it computed (the dense model's training FLOPs
times (d_B + r d_P) / d) and its upload bits (9) (``bits="exact"``: values plus
``index_bits(..., "binomial")``, Eq. 8), and its server policy sets each client's share.
The round lasts as long as its slowest client.

Options turn the method into its ablations under the same cell: ``allocation`` ("dca",
"uniform": equal shares with each client's best (k, r), "fixed": the given ``k``, ``r``
with the cost model's shares), ``split`` ("conv": the paper's base = conv layers; "fc":
LG-FedAvg's shared FC; "all": FedAvg; "first:N": the first N layers, Table III;
"last-block": a ResNet's last block and classifier private, Figs. 4-5),
``prune_scope="all"`` (FedAvg-P: prune the whole model). The band (10 MHz per 100 clients,
Sec. VI, unless ``RunConfig.bandwidth_mhz`` says otherwise) belongs to the cell;
``deadline_s`` fixes tau_max (else it is calibrated, see :func:`hetfl_core.dca.calibrate_deadline`).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from .. import dca
from ..compression import flatten, top_k, unflatten
from ..config import Option
from ..engine import ClientPlan, ClientReport
from ..errors import ConfigError
from ..masks import magnitude_mask
from ..personalization import split_parameter_names
from ..system import FLOAT_BITS, index_bits, training_flops
from . import register
from .fedper import FedPer

ALLOCATIONS = ("dca", "uniform", "fixed")


def _check_split(option: str, split: str) -> None:
    if split not in ("conv", "fc", "all", "last-block") and not any(split.startswith(p) and split[len(p):].isdigit()
                                                                   for p in ("first:", "last:")):
        raise ConfigError(f"{option} must be conv, fc, all, first:N, last:N or last-block, got {split!r}")


@register
class SparsePrunePFL(FedPer):
    """Shared base with top-k gradients, pruned private part, DCA allocation (Alg. 1 + Alg. 2)."""

    name = "sparse-prune-pfl"
    summary = "Lightweight PFL: top-k base gradients, pruned private part, DCA (k, r, bandwidth) (Tan et al. 2025)"
    option_specs = {
        "split": Option("conv", "the shared base: conv, fc, all, first:N, last:N or last-block"),
        "allocation": Option("dca", "how (k, r, bandwidth) are chosen (Alg. 2, or the baselines)",
                             choices=ALLOCATIONS),
        "k": Option(1.0, "top-k fraction of base gradients uploaded (allocation fixed)", dca.K_MIN, 1),
        "r": Option(1.0, "density of the pruned private part (allocation fixed)", dca.R_MIN, 1),
        "prune_scope": Option("private", "prune the private part, or the whole model (FedAvg-P)",
                              choices=("private", "all")),
        "theta_ratio": Option(10.0, "theta1 / theta2 of the objective (31a): pruning against sparsification", 0, 1e9,
                              low_open=True),
        "deadline_s": Option(None, "the round deadline tau_max (None: calibrated)", 0, 1e9, low_open=True,
                             kind=float),
        "deadline_position": Option(0.5, "where the calibrated deadline sits between the least feasible one "
                                    "at (k_min, r_min) and at (1, 1)", 0, 1),
        "energy_budget_j": Option(None, "each client's energy budget per round, joules (None: none)", 0, 1e9,
                                  low_open=True, kind=float),
        "bits": Option("approx", "upload bits: Eq. (9) approx or Eq. (8) exact", choices=("approx", "exact")),
    }

    default_system = "wireless"

    @classmethod
    def check_options(cls, options):
        super().check_options(options)
        o = {**cls.defaults, **options}
        _check_split("split", o["split"])
        if o["prune_scope"] == "all" and o["allocation"] != "fixed":
            raise ConfigError("prune_scope=all (FedAvg-P) needs allocation=fixed")

    @classmethod
    def check_config(cls, config):
        super().check_config(config)
        if config.system == "compute" and {**cls.defaults, **config.options}["allocation"] != "fixed":
            raise ConfigError("sparse-prune-pfl's allocation splits the wireless cell's band: run it with "
                              "system wireless (its default) or with allocation fixed")

    def __init__(self, config, data, devices):
        super().__init__(config, data, devices)
        o = self.options
        self.prune_names = self.private_names if o["prune_scope"] == "private" else self.shared_names + \
            self.private_names
        params = dict(self.model.named_parameters())
        self.d_base = sum(params[n].numel() for n in self.shared_names)
        self.d_private = sum(params[n].numel() for n in self.private_names)
        self.gamma = np.array([c.n_train for c in data.clients], float)
        self.flops_per_sample = training_flops(self.costs, 1)
        self._mean_round = None

    def samples_per_round(self) -> int:
        """b in (12): samples a client processes per round (local steps x batch)."""
        steps = self.local_steps(max(self.data.clients, key=lambda c: c.n_train))
        return steps * self.config.batch_size

    def choose_shared(self):
        """The base B (Table III's split): the parameters the server aggregates."""
        return split_parameter_names(self.model, str(self.options["split"]))

    # -- server: Alg. 2 -------------------------------------------------------
    def mean_round(self) -> dca.RoundSystem:
        """The cell on its mean channel with this split and the deadline tau_max (calibrated
        on first use unless ``deadline_s`` is given)."""
        if self._mean_round is None:
            o, cell = self.options, self.cost_model.cell
            system = dca.round_system(cell.mean_state(), self.gamma / self.gamma.sum(), self.d_base,
                                      self.d_private, self.samples_per_round(),
                                      self.cost_model.cycles_per_sample, 1.0, cell.energy_coeff)
            deadline = o["deadline_s"] if o["deadline_s"] is not None else \
                dca.calibrate_deadline(cell, system, float(o["deadline_position"]), self.config.seed)
            self._mean_round = dataclasses.replace(system, deadline_s=float(deadline))
        return self._mean_round

    def allocate(self, system: dca.RoundSystem) -> dca.Allocation:
        """This round's (k, r, l): Alg. 2 (DCA), equal shares with the best (k, r), or fixed."""
        mode, theta1 = self.options["allocation"], float(self.options["theta_ratio"])
        if mode == "dca":
            return dca.solve_dca(system, theta1)
        if mode == "uniform":
            return dca.uniform_allocation(system, theta1)
        return dca.fixed_allocation(system, float(self.options["k"]), float(self.options["r"]))

    def configure_round(self, round_idx, client_ids):
        """Alg. 2 on this round's draw of the cell: (k_n, r_n, l_n) among the participants.
        With ``allocation="fixed"`` the cost model splits the band."""
        o = self.options
        if o["allocation"] == "fixed":
            k, r = float(o["k"]), float(o["r"])
            return {cid: ClientPlan(self.local_steps(self.data.clients[cid]), ratio=r,
                                    extra={"k": k, "r": r, "relaxed": False}) for cid in client_ids}
        idx = np.array(client_ids)
        budget = o["energy_budget_j"]
        system = dca.with_state(self.mean_round(), self.cost_model.state, budget)
        system = dataclasses.replace(system, gamma=system.gamma[idx] / system.gamma[idx].sum(),
                                     tx_power_w=system.tx_power_w[idx], gain=system.gain[idx],
                                     cpu_hz=np.array([self.cost_model.cpu_hz(int(c)) for c in idx]),
                                     energy_budget_j=None if budget is None else system.energy_budget_j[idx])
        alloc = self.allocate(system)
        return {cid: ClientPlan(self.local_steps(self.data.clients[cid]), ratio=float(alloc.r[i]),
                                bandwidth_share=float(alloc.share[i]),
                                extra={"k": float(alloc.k[i]), "r": float(alloc.r[i]), "relaxed": bool(alloc.relaxed)})
                for i, cid in enumerate(client_ids)}

    # -- client: Alg. 1 ---------------------------------------------------------
    def upload_bits(self, k: float, n_values: int) -> float:
        """Eq. (9) by default; Eq. (8) (values + binomial index code) with ``bits="exact"``."""
        if self.options["bits"] == "exact":
            nnz = max(1, math.ceil(k * n_values))
            return nnz * (FLOAT_BITS + 1) + index_bits(nnz, n_values, "binomial")
        return float(dca.upload_bits(k, n_values))

    def client_update(self, client, plan: ClientPlan, generator: torch.Generator) -> ClientReport:
        """Prune (3), masked local step(s) at the pruned model (2, 4), top-k of the base gradient (5)."""
        k, r = plan.extra["k"], plan.extra["r"]
        model = self.working_model(client.client_id)
        params = dict(model.named_parameters())
        masks = magnitude_mask({n: params[n].detach() for n in self.prune_names}, r) \
            if r < 1 and self.prune_names else None
        if masks:
            with torch.no_grad():
                for n, m in masks.items():
                    params[n].mul_(m)
        start = flatten({n: params[n].detach().clone() for n in self.shared_names})
        result = self.local_train(model, client, plan.local_steps, generator, masks=masks)
        self.private.save(client.client_id, model, self.private_names)
        gradient = (start - flatten({n: params[n].detach() for n in self.shared_names})) / self.config.lr
        sent, nnz = top_k(gradient, k)
        kept_base = self.d_base * (r if self.options["prune_scope"] == "all" else 1.0)
        bits = self.upload_bits(k, max(1, round(kept_base)))
        # (12): the cycles are proportional to the parameters computed on, d_B + r d_P of d
        computed = kept_base + r * self.d_private
        flops = self.flops_per_sample * result.samples * computed / (self.d_base + self.d_private)
        return ClientReport(client.client_id, client.n_train, sent, result.loss, flops=flops, uplink_bits=bits,
                            downlink_bits=float(self.d_base * FLOAT_BITS), local_steps=plan.local_steps,
                            ratio=r, extra={"k": k, "r": r, "sent_values": nnz, "relaxed": plan.extra["relaxed"]})

    # -- server: Eq. (6) --------------------------------------------------------
    def aggregate(self, round_idx, reports):
        """Eq. (6): w^B_{t+1} = w^B_t - eta sum_n gamma_n g~^B_n (no renormalisation by k)."""
        total = float(sum(r.n_samples for r in reports))
        step = sum(r.update * (r.n_samples / total) for r in reports)
        params = dict(self.model.named_parameters())
        shared = {n: params[n] for n in self.shared_names}
        with torch.no_grad():
            for name, delta in unflatten(step, shared).items():
                params[name].sub_(self.config.lr * delta)

    def global_model(self):
        return self.model if not self.private_names else None
