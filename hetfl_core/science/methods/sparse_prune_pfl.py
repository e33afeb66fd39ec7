"""Lightweight personalised FL (Tan et al., 2025): a shared base with top-k sparsified
gradients, a private part pruned by magnitude, and per-round DCA resource allocation.

Algorithm 1, one round t (full participation by default):

    server: draw the round's channel, power and CPU; choose (k_n, r_n, l_n) by Alg. 2
            (:func:`hetfl_core.science.dca.solve_dca`) and broadcast w^B_t, k_n, r_n
    client n:
        prune      r-mask keeps the ceil(r d_P) largest |w| of the private vector,
                   w^P <- w^P (.) r-mask                                         (3)
        gradient   at the pruned model w^ = [w^B; w^P (.) r-mask]               (2)
        private    w^P_{n,t+1} = w^P - eta g^P (.) r-mask (pruned entries stay 0)  (4)
        sparsify   g~^B = top_k(g^B) with ceil(k d_B) entries, uploaded with indices  (5)
    server: w^B_{t+1} = w^B_t - eta sum_n gamma_n g~^B_n                        (6)

With ``local_steps`` > 1 (Algorithm 1 takes one step) the client runs several masked SGD
steps and uploads the pseudo-gradient (w^B_t - w^B_local) / eta.

Latency and energy are the run's cost model: under ``system="wireless"`` (this method's
default) :class:`hetfl_core.science.system.WirelessCost` charges compute cycles b C (d_B + r d_P)
/ d on a CPU of omega Hz (12), the FDMA uplink rate at the share l W (7) and the energies
(11) and (13), from the FLOPs the method reports (the dense model's times (d_B + r d_P) / d),
its upload bits (9) (or (8), ``bits="exact"``) and the shares its server policy sets. The
round lasts as long as its slowest client.

Options give the ablations under the same cell: ``allocation`` ("uniform": equal shares
with each client's best (k, r); "fixed": the given ``k``, ``r`` with the cost model's
shares), ``split`` ("conv": the paper's base; "fc": LG-FedAvg's shared FC; "all": FedAvg;
"first:N": Table III; "last-block": a ResNet's last block and classifier private, Figs.
4-5), ``prune_scope="all"`` (FedAvg-P). The band (10 MHz per 100 clients, Sec. VI, unless
``RunConfig.bandwidth_mhz`` says otherwise) belongs to the cell; ``deadline_s`` fixes
tau_max (else :func:`hetfl_core.science.dca.calibrate_deadline`). ``theta_warmup_rounds`` > 0
runs that many rounds at k = r = 1 and then sets theta1 / theta2 from their gradients and
private weights (:meth:`SparsePrunePFL.record_warmup`) instead of ``theta_ratio``.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .. import dca
from ..compression import flatten, top_k, unflatten
from ..options import Option
from ..errors import ConfigError
from ..masks import magnitude_mask
from ..personalization import split_parameter_names
from ..system import FLOAT_BITS, index_bits, training_flops
from .base import ClientPlan, ClientReport, register
from .fedper import FedPer

#: the range a warmed-up theta1 / theta2 is clipped to
THETA_CLIP = (1e-3, 1e3)


@register
class SparsePrunePFL(FedPer, name="sparse-prune-pfl", label="Lightweight PFL", color="#8c564b", marker="v"):
    """Lightweight PFL: top-k base gradients, pruned private part, DCA (k, r, bandwidth) (Tan et al. 2025)

    Its masked local SGD trains batched where the run batches clients: the pruning to
    r_n comes before the phase, the top-k and warm-up measurements after it.
    """
    server_state = ("gamma", "_mean_round", "warmup")   # the DCA's

    option_specs = {
        "split": Option("conv", "the shared base: conv, fc, all, first:N, last:N or last-block"),
        "allocation": Option("dca", "how (k, r, bandwidth) are chosen (Alg. 2, or the baselines)",
                             choices=("dca", "uniform", "fixed")),
        "k": Option(1.0, "top-k fraction of base gradients uploaded (allocation fixed)", dca.K_MIN, 1),
        "r": Option(1.0, "density of the pruned private part (allocation fixed)", dca.R_MIN, 1),
        "prune_scope": Option("private", "prune the private part, or the whole model (FedAvg-P)",
                              choices=("private", "all")),
        "theta_ratio": Option(10.0, "theta1 / theta2 of the objective (31a): pruning against sparsification", 0, 1e9,
                              low_open=True),
        "theta_warmup_rounds": Option(0, "rounds at k = r = 1 whose gradients and private weights set theta1 / "
                                      "theta2 (0: the fixed theta_ratio)", 0, 10_000),
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
    def arena_options(cls, config) -> dict:
        """On the character LSTM the shared base is the embedding and the LSTM and the
        classifier stays private (``split="first:2"``; the default splits convolutions)."""
        return {"split": "first:2"} if config.model.startswith("charlstm") else {}

    @classmethod
    def check_options(cls, options):
        super().check_options(options)
        o = {**cls.defaults, **options}
        split = o["split"]
        if split not in ("conv", "fc", "all", "last-block") and not any(
                split.startswith(p) and split[len(p):].isdigit() for p in ("first:", "last:")):
            raise ConfigError(f"split must be conv, fc, all, first:N, last:N or last-block, got {split!r}")
        if o["prune_scope"] == "all" and o["allocation"] != "fixed":
            raise ConfigError("prune_scope=all (FedAvg-P) needs allocation=fixed")
        if o["theta_warmup_rounds"] and o["allocation"] == "fixed":
            raise ConfigError("theta_warmup_rounds sets theta1 / theta2 for an allocation: it needs allocation dca "
                              "or uniform")

    @classmethod
    def check_config(cls, config):
        super().check_config(config)
        if config.system == "compute" and {**cls.defaults, **config.options}["allocation"] != "fixed":
            raise ConfigError("sparse-prune-pfl's allocation splits the wireless cell's band: run it with "
                              "system wireless (its default) or with allocation fixed")
        warmup = {**cls.defaults, **config.options}["theta_warmup_rounds"]
        if warmup >= config.rounds:
            raise ConfigError(f"theta_warmup_rounds must be below rounds ({config.rounds}), got {warmup}")

    def setup(self, sim):
        super().setup(sim)
        o = self.options
        self.prune_names = self.private_names if o["prune_scope"] == "private" else self.shared_names + \
            self.private_names
        params = dict(self.model.named_parameters())
        self.d_base = sum(params[n].numel() for n in self.shared_names)
        self.d_private = sum(params[n].numel() for n in self.private_names)
        self.gamma = np.array([c.n_train for c in self.data.clients], float)
        self.flops_per_sample = training_flops(self.costs, 1)
        self._mean_round = None
        self.theta_ratio = float(o["theta_ratio"])
        self.warmup = {"rounds_done": 0, "grad_sq": {}, "private_norm": 0.0}

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
            o = self.options
            self._mean_round = dca.RoundSystem.mean_of(
                self.cost_model, self.gamma / self.gamma.sum(), self.d_base, self.d_private, self.samples_per_round(),
                seed=self.config.seed, deadline_s=o["deadline_s"], deadline_position=float(o["deadline_position"]))
        return self._mean_round

    def round_system(self, client_ids) -> dca.RoundSystem:
        """What the server knows of this round of the cell when it allocates: the cost
        model's draw (CPUs scaled by tier) for the participants ``client_ids``."""
        system = self.mean_round().with_state(self.cost_model.state, self.options["energy_budget_j"])
        return system.subset(np.array(client_ids))

    def configure_round(self, round_idx, client_ids):
        """(k_n, r_n, l_n) among the participants on this round's draw of the cell: Alg. 2
        (DCA), or equal shares with each client's best (k, r) (``uniform``). With
        ``allocation="fixed"``, and in warm-up rounds, the cost model splits the band."""
        o = self.options
        warming = self.warmup["rounds_done"] < o["theta_warmup_rounds"]
        if o["allocation"] == "fixed" or warming:
            k, r = (1.0, 1.0) if warming else (float(o["k"]), float(o["r"]))
            return {cid: ClientPlan(self.local_steps(self.data.clients[cid]), ratio=r,
                                    extra={"k": k, "r": r, "relaxed": False, **({"warmup": True} if warming else {})})
                    for cid in client_ids}
        solve = dca.solve_dca if o["allocation"] == "dca" else dca.uniform_allocation
        alloc = solve(self.round_system(client_ids), self.theta_ratio)
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

    def client_step(self, client, plan: ClientPlan, state: dict, generator: torch.Generator):
        """Prune (3), masked local step(s) at the pruned model (2, 4), top-k of the base gradient (5)."""
        k, r = plan.extra["k"], plan.extra["r"]
        model = self.model_with(state.get("private"))
        params = dict(model.named_parameters())

        def flat(names, copy=False):
            return flatten({n: params[n].detach().clone() if copy
                            else params[n].detach() for n in names})

        masks = None
        if r < 1 and self.prune_names:
            masks = magnitude_mask(
                {n: params[n].detach() for n in self.prune_names}, r)
        if masks:
            with torch.no_grad():
                for n, m in masks.items():
                    params[n].mul_(m)
        start = flat(self.shared_names, copy=True)
        start_private = (flat(self.private_names, copy=True)
                         if plan.extra.get("warmup") else None)
        result = yield self.local_sgd(model, client, plan.local_steps, generator, masks=masks)
        gradient = (start - flat(self.shared_names)) / self.config.lr
        measured = {} if start_private is None else self.warmup_measurements(
            gradient, start_private, params, plan.local_steps)
        theta = ({"theta_ratio": self.theta_ratio}
                 if self.options["theta_warmup_rounds"] else {})
        sent, nnz = top_k(gradient, k)
        pruned_base = self.options["prune_scope"] == "all"
        kept_base = self.d_base * (r if pruned_base else 1.0)
        bits = self.upload_bits(k, max(1, round(kept_base)))
        # (12): the cycles are proportional to the parameters computed on,
        # d_B + r d_P of d
        computed = kept_base + r * self.d_private
        flops = (self.flops_per_sample * result.samples * computed
                 / (self.d_base + self.d_private))
        extra = {"k": k, "r": r, "sent_values": nnz,
                 "relaxed": plan.extra["relaxed"], **measured, **theta}
        report = ClientReport(client.client_id, client.n_train, vector=sent,
                              loss=result.loss, flops=flops, uplink_bits=bits,
                              downlink_bits=float(self.d_base * FLOAT_BITS),
                              local_steps=plan.local_steps, ratio=r, extra=extra)
        return report, self.kept(model)

    def warmup_measurements(self, base_step, start_private, params, steps: int) -> dict:
        """A warm-up round's ||g||^2 (A3, Eq. 21: the mean gradient per local step over the
        whole model) and ||w^P|| (Eq. 22 on the private part, the norm Proposition 2 bounds)."""
        private = flatten({n: params[n].detach() for n in self.private_names}) if self.private_names \
            else torch.zeros(0)
        private_step = (start_private - private) / self.config.lr if self.private_names else torch.zeros(0)
        grad_sq = (float(base_step.pow(2).sum()) + float(private_step.pow(2).sum())) / steps ** 2
        return {"grad_sq": grad_sq, "private_norm": float(private.norm())}

    # -- server: Eq. (6) --------------------------------------------------------
    def aggregate(self, round_idx, reports):
        """Eq. (6): w^B_{t+1} = w^B_t - eta sum_n gamma_n g~^B_n (no renormalisation by k)."""
        total = float(sum(r.n_samples for r in reports))
        step = sum(r.vector * (r.n_samples / total) for r in reports)
        params = dict(self.model.named_parameters())
        shared = {n: params[n] for n in self.shared_names}
        with torch.no_grad():
            for name, delta in unflatten(step, shared).items():
                params[name].sub_(self.config.lr * delta)
        if any("grad_sq" in r.extra for r in reports):
            self.record_warmup(reports)

    def record_warmup(self, reports) -> None:
        """Keep a warm-up round's measurements; after the last, set theta1 / theta2 from them.

        Under the corrected Theorem 1, theta1 = 2 L1 M / (eta T) and theta2 = min(2, 3 - L2
        eta) G^2 / T: the paper's (3 - L2 eta) G^2 / T of (31a) on 1/L2 <= eta <= 3/L2, and
        2 G^2 / T for the usual eta < 1/L2, where Props. 2 and 3's G^2 replacements run the
        wrong way (see the chapter); there theta1 / theta2 = L1 M / (eta G^2). The warm-up
        estimates G^2 = max_n mean_t ||g_{n,t}||^2 (21), L1 = G (16) and M = max_{n,t}
        ||w^P_{n,t}|| (22), so the ratio is M / (eta G), clipped to :data:`THETA_CLIP` so one
        outlying round cannot remove either term of (31a).
        """
        w = self.warmup
        for r in reports:
            w["grad_sq"].setdefault(r.client_id, []).append(r.extra["grad_sq"])
            w["private_norm"] = max(w["private_norm"], r.extra["private_norm"])
        w["rounds_done"] += 1
        if w["rounds_done"] == self.options["theta_warmup_rounds"]:
            g = math.sqrt(max(float(np.mean(v)) for v in w["grad_sq"].values()))
            ratio = w["private_norm"] / (self.config.lr * g) if g > 0 else THETA_CLIP[1]
            self.theta_ratio = float(np.clip(ratio, *THETA_CLIP))

    def global_model(self):
        return self.model if not self.private_names else None
