"""Heroes (Yan et al.): enhanced neural composition + adaptive local update frequency.

One round of Alg. 1 (server) and Alg. 2 (client), with this book's choices where the paper leaves a gap:

    for each sampled client n:  p_n = widest p with mu_n(p) <= mu_max      (l. 6-11, mended)
    tau_l = tau*  for the client l finishing first at tau*                  (l. 12-14, Eq. 27)
    for n in [l] + others by decreasing width:
        S_n = the p_n^2 least-trained blocks                                (l. 20, Sec. II-B)
        tau_n in Eq. (24)'s window, minimising the block-count variance     (l. 16-19, Eq. 21)
        c_i += tau_n for i in S_n                                           (l. 21-22)
    client n: compose W = v . u_{S_n} (Eq. 4), tau_n SGD steps on (v, u_{S_n}),
              estimate F_n, L_n, sigma_n^2, G_n^2                           (Alg. 2)
    server: v = mean over clients, u^i = mean over the clients that trained i (Eq. 5)

The factors are trained directly, so the paper's "decomposition" is exact. mu_n and nu_n
come from the shared device model (:mod:`hetfl_core.science.system`), so the controller's T_n
(Eq. 19) is what the engine charges, unless the run's ``time_noise`` makes compute times
fluctuate as the paper's devices do: the controller then plans with the expected times.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ..composition import (COMPOSED_MODELS, Selection, aggregate_blocks, build_composed,
                           least_trained, subgrid_selection)
from ..options import Option
from ..errors import ConfigError
from ..frequency import (block_variance, heroes_widths, plan_frequencies, step_flops,
                         tau_calibrated, tau_eps, tau_raw, width_profiles)
from ..models import build_model
from ..streams import STREAMS
from ..system import dense_bits, training_flops, transfer_time
from ..training import clone_model, steps_for_epochs
from .. import composition
from .base import ClientPlan, ClientReport, layers_of, register, seeded_generator
from .fedavg import FedAvg


@register
class Heroes(FedAvg, name="heroes", label="Heroes", color="#9467bd", marker="s"):
    """Heroes: enhanced neural composition + adaptive local update frequency (Yan et al.)

    A composed model's forward reads its block selection, an attribute: where the run
    batches clients, the phases of one selection train together (the phase's ``group``),
    and Alg. 2's estimates are taken before and after the phase. The composed LSTM trains
    sequentially (its recurrence is an ``nn.LSTM``, :func:`~hetfl_core.runtime.batched.batchable_model`).
    """
    state_types = (Selection, *layers_of(composition))   # the composed models and their blocks
    server_state = ("widths", "estimates", "block_counts", "group_counts")   # Alg. 1's

    option_specs = {
        "max_width": Option(4, "P: each layer's channels in P groups, widths 1/P..1 (must divide every channel count)",
                            1, 1024),
        "selection": Option("free", "how a client's blocks are chosen",
                            choices=("free", "subgrid", "random")),
        "frequency": Option("adaptive", "local steps: adaptive per client (Alg. 1 l. 12-22) or fixed",
                            choices=("adaptive", "fixed")),
        "tau_mode": Option("calibrated", "how the first client's steps tau* are set (Eq. 25 calibrated, raw, "
                           "or to reach a loss eps)", choices=("calibrated", "raw", "eps")),
        "tau0": Option(None, "first-round local steps (None: the run's local steps)", 1, 10_000_000, kind=int),
        "tau_max": Option(None, "most local steps a client runs (None: 2 tau0)", 1, 10_000_000, kind=int),
        "width_budget": Option(1.2, "per-iteration time budget mu_max, in units of the full model's time on "
                               "the fastest device", 0, 1e6, low_open=True),
        "rho": Option(0.1, "fraction of the window Eq. (24) allows around tau*", 0, 1, high_open=True),
        "eps": Option(None, "the loss target of tau_mode eps", 0, 1e6, low_open=True, kind=float),
        "beta2": Option(0.0, "the gradient-noise term of tau_mode eps", 0, 1e6),
        "estimator_batches": Option(4, "batches estimating the loss, smoothness and noise", 2, 10_000),
    }

    @classmethod
    def check_options(cls, options):
        super().check_options(options)
        o = {**cls.defaults, **options}
        if o["tau_mode"] == "eps" and o["eps"] is None:
            raise ConfigError("tau_mode='eps' needs a loss target eps > 0")

    @classmethod
    def check_config(cls, config):
        super().check_config(config)
        if config.model not in COMPOSED_MODELS:
            raise ConfigError(f"{cls.name} composes models {', '.join(COMPOSED_MODELS)}, not {config.model!r}")
        if config.weight_decay:
            raise ConfigError(f"{cls.name} updates only the trained blocks: weight_decay must be 0")
        P = int(config.options.get("max_width", cls.defaults["max_width"]))
        channels = build_model(config.model, (1, 8, 8), 2)  # channel counts must split into P groups
        if any(m.weight.shape[0] % P for m in channels.modules() if isinstance(m, torch.nn.Conv2d)):
            raise ConfigError(f"max_width={P} must divide every channel count of {config.model}")

    # -- model and costs ------------------------------------------------------
    def n_blocks(self) -> int:
        return self.P ** 2

    def build_model(self, width: float = 1.0):
        self.P = int(self.options["max_width"])
        return build_composed(self.config.model, self.data.input_shape, self.data.num_classes, self.P,
                              self.n_blocks())

    def setup(self, sim):
        super().setup(sim)
        P = self.P
        self.model.selection = self.full_selection()
        self.block_counts = np.zeros(self.model.n_blocks)   # c_i, cumulative local iterations (Alg. 1)
        self.group_counts = {"head": np.zeros(P), "cls": np.zeros(P)}
        self.width_costs = width_profiles(self.config, self.data, P)
        self.tau0 = int(self.options["tau0"] or self.config.local_steps or steps_for_epochs(
            int(np.median([c.n_train for c in self.data.clients])), self.config.batch_size, self.config.local_epochs))
        self.tau_max = int(self.options["tau_max"] or 2 * self.tau0)
        self.widths = heroes_widths(self.config, self.data, self.hardware, P, float(self.options["width_budget"]))
        self.estimates: list[dict] = []   # per round: means of F, L, S = G^2 + 18 sigma^2
        self.round_info: dict = {}

    def full_selection(self) -> Selection:
        return Selection.full(self.P)

    def exchange_bits(self, p: int) -> float:
        """E(v) + E(u) of Eq. (18) at width p: the bits of each of the upload and the download."""
        return dense_bits(self.model.upload_numel(Selection(p, tuple(range(p * p)), tuple(range(p)),
                                                            tuple(range(p)))))

    # -- server ---------------------------------------------------------------
    def deadline_tau(self, round_idx: int) -> tuple[int, float | None]:
        """tau for the deadline client l: tau_0 in round 1 (no estimates yet) or with fixed
        frequency, else by ``tau_mode`` (Eq. 25 raw, calibrated, or eps), clipped to
        [1, tau_max]. Also returns the raw formula's value (None before any estimate)."""
        if not self.estimates:
            return self.tau0, None
        e, first = self.estimates[-1], self.estimates[0]
        raw = tau_raw(e["F"], e["L"], e["S"], self.config.lr, self.config.rounds)
        if self.options["frequency"] == "fixed":
            return self.tau0, raw
        mode = self.options["tau_mode"]
        if mode == "raw":
            tau = raw
        elif mode == "calibrated":
            tau = tau_calibrated(self.tau0, e["F"], e["L"], e["S"], first["F"], first["L"], first["S"])
        else:
            tau = tau_eps(float(self.options["eps"]), e["L"], e["S"], float(self.options["beta2"]), self.config.lr)
        return int(min(max(round(tau), 1), self.tau_max)), raw

    def select(self, p: int, round_idx: int, client_id: int) -> Selection:
        """Sec. II-B: the p^2 least-trained blocks and the p least-trained head and
        classifier groups (``free``); one least-trained group set A with blocks A x A
        (``subgrid``); or p^2 random blocks (``random``)."""
        mode = self.options["selection"]
        if mode == "subgrid":
            A = subgrid_selection(self.block_counts, self.P, p)
            return Selection(p, tuple(a * self.P + b for a in A for b in A), A, A)
        if mode == "random":
            g = np.random.default_rng([self.config.seed, round_idx, client_id, STREAMS["random_blocks"]])
            pick = lambda n, m: tuple(sorted(int(i) for i in g.choice(n, m, replace=False)))  # noqa: E731
            return Selection(p, pick(self.model.n_blocks, p * p), pick(self.P, p), pick(self.P, p))
        return Selection(p, least_trained(self.block_counts, p * p), least_trained(self.group_counts["head"], p),
                         least_trained(self.group_counts["cls"], p))

    def commit(self, sel: Selection, tau: int) -> None:
        """Alg. 1 l. 21-22: c_i += tau for the client's blocks (and groups), at once."""
        self.block_counts[list(sel.blocks)] += tau
        self.group_counts["head"][list(sel.head)] += tau
        self.group_counts["cls"][list(sel.cls)] += tau

    def configure_round(self, round_idx, client_ids):
        """Alg. 1 l. 5-22: widths, the deadline client's tau, then blocks and taus of the others."""
        tau_l, raw = self.deadline_tau(round_idx)
        widths = [self.widths[k] for k in client_ids]
        hardware = [self.hardware[k] for k in client_ids]
        mu = [step_flops(self.width_costs[p], self.config.batch_size, self.model.composition_macs(p))
              / d.flops_per_s for p, d in zip(widths, hardware)]                   # Eq. (17)
        nu = [transfer_time(bits, d.uplink_bps) + transfer_time(bits, d.downlink_bps)
              for bits, d in zip(map(self.exchange_bits, widths), hardware)]     # Eq. (18), download added
        taus, sels, l = plan_frequencies(
            mu, nu, widths, tau_l, float(self.options["rho"]), self.block_counts,
            select=lambda n: self.select(widths[n], round_idx, client_ids[n]),
            commit=lambda n, sel, tau: self.commit(sel, tau),
            adaptive=self.options["frequency"] == "adaptive")
        self.round_info = {"tau_l": tau_l, "tau_raw": raw, "deadline_client": client_ids[l],
                           "block_var": block_variance(self.block_counts),
                           "block_spread": float(self.block_counts.max() - self.block_counts.min())}
        return {k: ClientPlan(taus[n], width=widths[n] / self.P, extra={"selection": sels[n]})
                for n, k in enumerate(client_ids)}

    # -- client ---------------------------------------------------------------
    def gradient_statistics(self, model, x, y) -> tuple[float, torch.Tensor, float, float]:
        """Alg. 2's estimates on M fixed batches: mean loss F_n, mean gradient g, sigma_n^2 =
        mean ||g_j - g||^2 and G_n^2 = mean ||g_j||^2, in flattened parameter space."""
        M = int(self.options["estimator_batches"])
        grads, losses = [], []
        for xb, yb in zip(torch.tensor_split(x, M), torch.tensor_split(y, M)):
            if len(yb) == 0:
                continue
            model.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
            losses.append(loss.item())
        g = torch.stack(grads)
        mean = g.mean(0)
        sigma2 = float(((g - mean) ** 2).sum(1).mean())
        return float(np.mean(losses)), mean, sigma2, float((g ** 2).sum(1).mean())

    def client_step(self, client, plan: ClientPlan, state, generator):
        """Alg. 2: compose the client's model from (v, u_S), run tau SGD steps on the factors,
        estimate F_n, L_n, sigma_n^2, G_n^2, send the factors back."""
        sel: Selection = plan.extra["selection"]
        model = clone_model(self.model)
        model.selection = sel
        extra = {"p": sel.p, "blocks": list(sel.blocks), **self.round_info}
        estimate = self.options["frequency"] == "adaptive"
        if estimate:
            order = torch.randperm(client.n_train, generator=seeded_generator(self.config.seed, client.client_id))
            xs = order[: int(self.options["estimator_batches"]) * self.config.batch_size]
            x, y = client.x_train[xs], client.y_train[xs]
            start = torch.cat([p.detach().flatten() for p in model.parameters()])
            F0, g0, sigma2, G2 = self.gradient_statistics(model, x, y)
        # the composed model's forward reads its selection besides its parameters: the
        # phases of one selection train together
        result = yield self.local_sgd(model, client, plan.local_steps, generator, group=(sel,))
        if estimate:
            end = torch.cat([p.detach().flatten() for p in model.parameters()])
            _, g1, _, _ = self.gradient_statistics(model, x, y)
            step = float((end - start).norm())
            L = float((g1 - g0).norm()) / step if step > 0 else float("nan")
            extra.update(F=F0, L=L, sigma2=sigma2, G2=G2)
        model.zero_grad(set_to_none=True)
        bits = self.exchange_bits(sel.p)
        flops = training_flops(self.width_costs[sel.p], result.samples) + \
            6.0 * self.model.composition_macs(sel.p) * plan.local_steps
        return ClientReport(client.client_id, client.n_train, weights=model.state_dict(), selection=sel,
                            loss=result.loss,
                            flops=flops, uplink_bits=bits, downlink_bits=bits,
                            local_steps=plan.local_steps, width=plan.width, extra=extra), state

    # -- aggregation ----------------------------------------------------------
    def aggregate(self, round_idx, reports):
        """Eq. (5) (basis over all participants, each block over its trainers), then the
        PS's estimates of F, L and S = G^2 + 18 sigma^2 as client means (Alg. 1 l. 25)."""
        aggregate_blocks(self.model, [(r.selection, r.weights) for r in reports])
        stats = [r.extra for r in reports if "F" in r.extra and math.isfinite(r.extra["L"])]
        if stats:
            self.estimates.append({"F": float(np.mean([s["F"] for s in stats])),
                                   "L": float(np.mean([s["L"] for s in stats])),
                                   "S": float(np.mean([s["G2"] + 18 * s["sigma2"] for s in stats]))})
