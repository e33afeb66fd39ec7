"""FedLPS (Xue et al.): learnable personalised sparsity with P-UCBV sparse ratios.

Algorithm 1 of the paper, as hooks:

* ``configure_round`` (lines 3-4): send omega^r and each client's ratio s_k^r; the client
  caps it at its capability, s = min(s, z_k) (Sec. III-B);
* ``client_step`` (lines 17-27): train the weights and the per-unit importance scores Q
  jointly on L = CE(sparse model) + mu L_pr + lambda L_ir (Eqs. 6-9), the pattern being
  the top-s units of Q in every hidden layer (Eq. 4), recomputed at every step; keep the
  sparse model for inference (line 24) and upload the sparse residual (Eq. 12) with the
  local cost T (Eq. 14) and the mean training accuracy a;
* ``aggregate`` (line 8 and lines 9-15): omega^{r+1} = omega^r - sum_k p_k w_hat_k (Eq. 13),
  then each participant's P-UCBV agent (Alg. 2, :class:`hetfl_core.science.bandits.PUCBV`) turns
  (T, a) into the reward of Eq. (15) and proposes the next ratio.

Choices where the paper is silent or wrong (this book's resolutions):

* the step gamma(Q - tau) of Eq. (4) passes no gradient, so Q is trained through the
  straight-through mask P + sigma(Q) - stopgrad(sigma(Q)) (``q_grad="kept"``: to kept
  units only);
* Eq. (8) prints omega for Q; it is ||Q - sigma(|omega|_J)||^2 with |omega|_J detached;
* a unit is switched off by zeroing its output after the activation (its weights then
  get no gradient, and it may come back when its score rises);
* Q starts at sigma(|omega^0|_J) plus N(0, 1e-6) noise and persists on the client;
* mu uses the (mu/2)||.||^2 form with mu = 1e-3 (the paper's is 1; the released code
  has no L_pr, and 1e-3 is its FedProx baseline's); the output layer is never masked;
  ratios are unit fractions per layer, k_l = max(1, floor(s J_l)).

Options beyond the paper, for its ablations: ``pattern`` (the heuristics ``random`` per
round, ``ordered`` first-k, ``magnitude`` top-|w|_J), ``ratio_rule`` (``capability``:
s = z, the RCR rule; ``fixed``: s = ``ratio``, uncapped), ``capability`` and
``aggregation`` (``holders``: as HeteroFL). ``ucb_xi`` sets xi of Eq. (17) by hand: with
the paper's xi = R / (K eps) a short run has xi psi eps < 1 from the first index, so the
bonus is zero and the bandit is greedy.
"""
from __future__ import annotations

import numpy as np
import torch

from ..bandits import PUCBV, pucbv_reward
from ..options import Option
from ..errors import ConfigError
from ..masks import (ScoredNetwork, kept_fractions_of_units, masked_copy, pattern_string, top_units,
                     unit_magnitudes, unit_masks_to_parameters)
from ..models import structured_units
from ..streams import STREAMS
from ..system import capability, compute_time, dense_bits, training_flops, transfer_time
from ..training import clone_model, evaluate
from .base import ClientPlan, ClientReport, register, seeded_generator
from .fedavg import FedAvg

#: Models whose hidden unit layers form a chain (each layer feeds the next one).
SUPPORTED_MODELS = ("mlp", "cnn", "lenet5", "wcnn")
PATTERNS = ("learned", "random", "ordered", "magnitude")


def pucbv_horizon(config) -> float:
    """xi = R / (K eps) of Alg. 2, line 1: the rounds per selected-client slot of a run."""
    return config.rounds / max(1, round(config.participation * config.clients))


@register
class FedLPS(FedAvg, name="fedlps", label="FedLPS", color="#d62728", marker="o"):
    """FedLPS: learnable personalised unit sparsity, P-UCBV sparse ratios (Xue et al.)"""
    client_state = ("scores", "personal")           # each client's Q and its kept sparse model
    server_state = ("agents", "proposed", "previous_accuracy", "ratios")   # P-UCBV's

    option_specs = {
        "mu": Option(1e-3, "mu of the (mu/2)||.||^2 regulariser L_pr (Eqs. 6-9)", 0, 1e4),
        "lam": Option(1.0, "lambda of the importance loss L_ir (Eqs. 6-9)", 0, 1e4),
        "pattern": Option("learned", "which units a ratio keeps", choices=PATTERNS),
        "ratio_rule": Option("pucbv", "how each client's sparse ratio is chosen",
                             choices=("pucbv", "capability", "fixed")),
        "ratio": Option(0.5, "every client's ratio under ratio_rule fixed", 0, 1, low_open=True),
        "capability": Option("fixed", "hardware tiers fixed or redrawn every round", choices=("fixed", "dynamic")),
        "aggregation": Option("eq13", "Eq. (13), or each entry averaged over its holders",
                              choices=("eq13", "holders")),
        "q_grad": Option("all", "units whose scores get the straight-through gradient", choices=("all", "kept")),
        "alpha": Option(1.0, "weight of the upload time in the local cost T (Eq. 14)", 0, 1e6),
        "arm_range": Option([0.5, 1.0], "[low, high] of P-UCBV's ratios (Alg. 2)", 0, 1),
        "intervals": Option(5, "P-UCBV's intervals over arm_range (Alg. 2)", 1, 10_000),
        "rho": Option(0.5, "P-UCBV's Efficient-UCBV constant rho (Alg. 2)", 0, 1e6, low_open=True),
        "delta": Option(-0.05, "P-UCBV's elimination threshold on the change of training accuracy", -1, 0),
        "explore": Option(False, "the authors' code's epsilon-greedy step (a random interval w.p. 1/n)"),
        "ucb_xi": Option(None, "P-UCBV's xi of Eq. (17); None: R / (K eps) of this run (Alg. 2, line 1)",
                         0, 1e9, low_open=True, kind=float),
    }
    step_like_options = ("mu",)   # L_pr is a proximal term (Eqs. 6-9)

    @classmethod
    def check_config(cls, config):
        super().check_config(config)
        if config.model not in SUPPORTED_MODELS:
            raise ConfigError(f"{cls.name} needs a chain model ({', '.join(SUPPORTED_MODELS)}), got {config.model!r}")

    @classmethod
    def check_options(cls, options):
        super().check_options(options)
        arms = {**cls.defaults, **options}["arm_range"]
        if len(arms) != 2 or not arms[0] < arms[1]:
            raise ConfigError(f"arm_range must be [low, high] with 0 <= low < high <= 1, got {arms}")

    def setup(self, sim):
        super().setup(sim)
        o = self.options
        self.layers = [name for name, _, _ in structured_units(self.model)]
        self.consumers = {c.input_layer: c.name for c in self.costs if c.input_layer in self.layers}
        self.tiers = list({d.tier: d for d in self.hardware}.values())
        self.scores = {}
        if o["pattern"] == "learned":
            target = unit_magnitudes(self.model)
            for k in range(len(self.hardware)):
                g = seeded_generator(self.config.seed, STREAMS["learned_scores"], k)
                self.scores[k] = {n: torch.sigmoid(t)
                                  + 1e-3 * torch.randn(t.shape, generator=g).to(t.device)
                                  for n, t in target.items()}
        horizon = o["ucb_xi"] or pucbv_horizon(self.config)
        self.agents, self.proposed = {}, {}
        for k, d in enumerate(self.hardware):
            if o["ratio_rule"] == "pucbv":
                self.agents[k] = PUCBV(*o["arm_range"], n_intervals=int(o["intervals"]), horizon=horizon,
                                       rho=o["rho"], delta=o["delta"], explore=o["explore"],
                                       seed=[self.config.seed, STREAMS["pucbv"], k])
                self.proposed[k] = self.agents[k].first_ratio()
            else:
                self.proposed[k] = float(o["ratio"]) if o["ratio_rule"] == "fixed" else self.capability(d)
        # a_k^{-1}: the initial global model's accuracy on each client's data (Alg. 2)
        self.previous_accuracy = {c.client_id: evaluate(self.model, c.x_train, c.y_train)[0] / max(c.n_train, 1)
                                  for c in self.data.clients}
        self.ratios = {k: min(self.proposed[k], self.capability(d)) if o["ratio_rule"] == "pucbv"
                       else self.proposed[k] for k, d in enumerate(self.hardware)}
        self.personal: dict[int, dict] = {}

    def capability(self, hardware) -> float:
        """z_k: ``hardware``'s FLOP/s relative to the fastest client's."""
        return capability(hardware, self.hardware)

    # -- server ------------------------------------------------------------------------------
    def configure_round(self, round_idx, client_ids):
        """Alg. 1 lines 3-4 and the client's cap s = min(s, z) (Sec. III-B)."""
        plans = {}
        for k in client_ids:
            hardware = self.hardware[k]
            if self.options["capability"] == "dynamic":   # resources change between rounds
                rng = np.random.default_rng([self.config.seed, STREAMS["dynamic_tiers"], round_idx, k])
                hardware = self.tiers[int(rng.integers(len(self.tiers)))]
            z, rule = self.capability(hardware), self.options["ratio_rule"]
            proposed = z if rule == "capability" else self.proposed[k]
            ratio = {"pucbv": min(proposed, z), "capability": z, "fixed": proposed}[rule]
            self.ratios[k] = ratio
            plans[k] = ClientPlan(self.local_steps(self.data.clients[k]), ratio=ratio,
                                  extra={"proposed": proposed, "capability": z},
                                  hardware=None if hardware is self.hardware[k] else hardware)   # the engine charges it
        return plans

    def aggregate(self, round_idx, reports):
        """Eq. (13), then Alg. 1 lines 9-15: each participant's P-UCBV agent proposes s_k^{r+1}."""
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                step = sum(r.n_samples * r.weights[name] for r in reports)
                if self.options["aggregation"] == "holders":
                    weight = sum(r.n_samples * r.held[name] for r in reports)
                    p.sub_(torch.where(weight > 0, step / weight.clamp_min(1e-12), torch.zeros_like(p)))
                else:
                    p.sub_(step / sum(r.n_samples for r in reports))
        self.update_agents(reports)

    def update_agents(self, reports) -> None:
        """Alg. 1 lines 9-15: reward each participant's P-UCBV agent (Eq. 15) for its ratio."""
        for r in reports:
            k, acc = r.client_id, r.extra["train_acc"]
            if k in self.agents:
                reward = pucbv_reward(acc, self.previous_accuracy[k], r.extra["cost_s"])
                self.proposed[k] = self.agents[k].update(r.extra["proposed"], reward,
                                                         acc - self.previous_accuracy[k])
            self.previous_accuracy[k] = acc

    # -- client ------------------------------------------------------------------------------
    def round_scores(self, learned: dict | None, generator: torch.Generator) -> dict:
        """The scores that rank units: the client's ``learned`` Q, or a heuristic pattern's
        constant scores."""
        pattern = self.options["pattern"]
        if pattern == "learned":
            return learned
        units = {n: k for n, _, k in structured_units(self.model)}
        if pattern == "ordered":
            return {n: -torch.arange(k, dtype=torch.float32) for n, k in units.items()}
        if pattern == "random":
            return {n: torch.rand(k, generator=generator) for n, k in units.items()}
        return unit_magnitudes(self.model)   # magnitude: replaced by the live |w|_J in training

    def support(self, keep: dict) -> dict[str, torch.Tensor]:
        """The entries a client with unit pattern ``keep`` trains: kept rows (and biases) of
        masked layers, restricted to columns that read kept units."""
        held = {n: torch.ones_like(p) for n, p in self.model.named_parameters()}
        held.update(unit_masks_to_parameters(self.model, keep))
        readers = {consumer: layer for layer, consumer in self.consumers.items()}
        for name, p in self.model.named_parameters():
            layer = name.rsplit(".", 1)[0]
            if layer in readers and p.dim() > 1:
                cols = keep[readers[layer]].float()
                cols = cols.repeat_interleave(p.shape[1] // cols.numel())
                held[name] = held[name] * cols.view(1, -1, *([1] * (p.dim() - 2)))
        return held

    def client_step(self, client, plan: ClientPlan, state, generator):
        """Alg. 1 lines 17-27: joint SGD on weights and scores (Eqs. 10-11) of the scored
        network, then Q and the sparse model kept (the client's state), the residual of
        Eq. (12) over the trained support and the local cost of Eq. (14)."""
        o, state = self.options, dict(state)
        mode = {"learned": "learned", "magnitude": "magnitude"}.get(o["pattern"], "fixed")
        scored = ScoredNetwork(clone_model(self.model), self.round_scores(state.get("scores"), generator),
                               plan.ratio, self.consumers, mode=mode, q_grad=o["q_grad"])
        center = {f"net.{n}": p.detach().clone() for n, p in self.model.named_parameters()}
        names = [n for n, p in scored.named_parameters() if p.requires_grad]
        # Eq. (9): cross-entropy + lambda L_imp (+ L_pr, the proximal term)
        importance = (lambda model: o["lam"] * model.importance_loss()) if mode == "learned" else None
        result = yield self.local_sgd(scored, client, plan.local_steps, generator, params=names,
                                      penalty=importance, group=(mode, o["q_grad"]),
                                      prox_mu=o["mu"], prox_center=center)
        keep = scored.pattern()
        if mode == "learned":
            state["scores"] = {n: q.detach().clone() for n, q in scored.score_values().items()}
        local = dict(scored.net.named_parameters())
        held = self.support(keep)
        unit_mask = unit_masks_to_parameters(self.model, keep)
        with torch.no_grad():
            residual = {n: (g - local[n]) * held[n] for n, g in self.model.named_parameters()}   # Eq. (12)
            state["personal"] = {n: local[n].detach() * unit_mask.get(n, 1.0) for n in local}  # line 24
        flops = training_flops(self.costs, result.samples, keep=kept_fractions_of_units(keep))
        up = dense_bits(int(sum(h.sum() for h in held.values()))) + sum(len(v) for v in keep.values())
        magnitude = top_units(unit_magnitudes(scored.net), plan.ratio)
        return self.report(client, plan, residual, result.loss, flops, up,
                           result.correct / max(result.samples, 1), keep, held=held,
                           magnitude_units=pattern_string(magnitude)), state

    def report(self, client, plan, weights, loss, flops, up, acc, keep, held=None,
               **extra) -> ClientReport:
        """The client's report of ``weights`` (and where it ``held`` them) with the local
        cost T of Eq. (14) and the training accuracy a that P-UCBV's reward reads (Eq. 15)."""
        hardware = plan.hardware or self.hardware[client.client_id]
        cost = compute_time(hardware, flops) + self.options["alpha"] * transfer_time(up, hardware.uplink_bps)
        down = dense_bits(sum(p.numel() for p in self.model.parameters()))
        return ClientReport(client.client_id, client.n_train, weights=weights, held=held, loss=loss,
                            flops=flops, uplink_bits=up,
                            downlink_bits=down, local_steps=plan.local_steps, ratio=plan.ratio,
                            extra={"proposed": plan.extra["proposed"], "capability": plan.extra["capability"],
                                   "train_acc": acc, "cost_s": cost, "units": pattern_string(keep), **extra})

    # -- models --------------------------------------------------------------------------------
    def unit_pattern(self, client_id: int) -> dict[str, torch.Tensor]:
        """The pattern the client's scores give now (a random pattern: its round-zero draw)."""
        fixed = seeded_generator(self.config.seed, STREAMS["round_zero"], client_id)
        return top_units(self.round_scores(self.scores.get(client_id), fixed), self.ratios[client_id])

    def personal_model(self, client_id):
        """The sparse model the client kept (Alg. 1 line 24); before its first round, omega^r under its mask."""
        if client_id not in self.personal:
            return masked_copy(self.model, unit_masks_to_parameters(self.model, self.unit_pattern(client_id)))
        model = clone_model(self.model)
        with torch.no_grad():
            params = dict(model.named_parameters())
            for n, value in self.personal[client_id].items():
                params[n].copy_(value)
        return model
