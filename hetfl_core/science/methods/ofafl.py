"""OFA-FL (Varma et al., 2023): once-for-all federated learning with nested lottery tickets.

One global network theta_g and a chain of nested masks m[r], one per density ratio r of
``ratios`` (R, descending from 1.0). Each client i has a fixed capacity C[i] in R.

Server, each round t (Alg. 1, corrected; see ``hetfl_core.science.lottery``):

    if n < s-1 and prune_trigger(t):                       # Sec. 3.7: fixed W, P or convergence
        n += 1; m[R[n]] <- Prune(theta_g, m[R[n-1]], R[n]/R[n-1])    # Alg. 2
        theta_g <- Reinitialize(theta_init, theta_g, m[R[n]])        # Alg. 3, partial rewinding
    S <- clients with C[i] among the pruned ratios          # the others sit out
    theta_i <- LocalUpdate(D_i, theta_g, m[C[i]], smaller pruned masks)   # Alg. 4
    theta_g <- per-coordinate, sample-size-weighted mean over the clients holding it

Client (Alg. 4): on each batch, the loss is the plain mean of the losses of its own
sub-network m[C[i]] * theta and of every smaller pruned one on the same batch; weights
outside its own mask stay zero.

Resolutions of the paper's gaps (Alg. 1-4, Sec. 3): r_relative = R[n]/R[n-1]; magnitudes
over the parent's support with exact top-k; only weights are pruned, biases rewound whole
(``rewind_unmasked``); aggregation as in the text, not Alg. 3's plain mean. Defaults are
the paper's CIFAR-10 setting (R = [1, .8, .6, .4, .2], W = 200, P = 50; MNIST's schedule
is not given). Training FLOPs are charged as the paper computes (J dense passes per
batch; ``flops_model="sparse"``: an ideal sparse kernel). Variants: ``ltp``
(:mod:`~hetfl_core.science.methods.ltp`) drops the joint loss; ``ofa-oneshot`` prunes every ratio
at once.
"""
from __future__ import annotations

import torch

from ..options import Option
from ..errors import ConfigError
from ..lottery import (FLOPS_MODELS, ConvergenceTrigger, FixedSchedule, check_ratios, keep_fraction,
                       prune_within, rewind, training_cost)
from ..masks import apply_mask, prunable
from ..system import dense_bits
from ..training import clone_model, evaluate
from .base import ClientPlan, ClientReport, register
from .fedavg import FedAvg
from .aggregate import average_over_holders, masked_upload


def default_capacities(ratios: list[float], n_clients: int) -> list[float]:
    """Clients dealt to the ratios in equal blocks, largest first (10 clients, 5 ratios: 2 each)."""
    return [ratios[i * len(ratios) // n_clients] for i in range(n_clients)]


def capacities_by_tier(ratios: list[float], hardware) -> list[float]:
    """Each client's capacity: the largest ratio not above its hardware's FLOP/s over the
    reference hardware's (else the smallest), the fastest client holding the full model when
    no client reaches it (the warm-up needs one full-model client)."""
    from ..system import REFERENCE_HARDWARE

    caps = []
    for d in hardware:
        fits = [r for r in ratios if r <= d.flops_per_s / REFERENCE_HARDWARE.flops_per_s + 1e-9]
        caps.append(max(fits) if fits else min(ratios))
    if 1.0 not in caps:
        caps[max(range(len(hardware)), key=lambda i: hardware[i].flops_per_s)] = 1.0
    return caps


@register
class OFAFL(FedAvg, name="ofafl", label="OFA-FL", color="#2ca02c", marker="D"):
    """OFA-FL: one model, nested lottery-ticket masks per ratio, joint sub-network loss (Varma et al. 2023)"""
    server_state = ("capacity", "trigger", "test_set")   # the pruning schedule's

    option_specs = {
        "ratios": Option([1.0, 0.8, 0.6, 0.4, 0.2], "R: the density ladder, from 1.0 strictly down", 0, 1,
                         low_open=True),
        "capacities": Option(None, "each client's capacity C[i], one of the ratios; by-tier: from its "
                             "hardware's speed; None: spread evenly"),
        "scope": Option("global", "prune over the whole model or layer by layer", choices=("global", "layer")),
        "schedule": Option("fixed", "prune on a fixed schedule or when the validation loss converges",
                           choices=("fixed", "convergence")),
        "warmup": Option(200, "W: rounds before the first pruning", 0, 10_000_000),
        "every": Option(50, "P: rounds between prunings (schedule fixed)", 1, 10_000_000),
        "delta": Option(1e-3, "the validation-loss change that counts as converged", 0, 1e6),
        "min_gap": Option(5, "fewest rounds between prunings (schedule convergence)", 0, 10_000_000),
        "rewind_unmasked": Option(True, "rewind the weights a pruning removes to theta_init (Alg. 3)"),
        "test_samples": Option(None, "score on this many global test samples (None: all)", 1, 10 ** 9, kind=int),
        "flops_model": Option("masked-dense", "charge each loss's training FLOPs as the paper runs it, dense "
                              "over m * theta ('masked-dense'), or as an ideal sparse kernel would, scaled "
                              "by each layer's density ('sparse')", choices=FLOPS_MODELS),
    }
    joint = True   # Alg. 4's averaged loss; LTP sets False

    @classmethod
    def arena_options(cls, config) -> dict:
        """Capacities by hardware tier, and the paper's schedule (W=200, P=50 of a 500-round
        run) scaled to the run's rounds, W = rounds/5 and P = rounds/10, so every ratio is
        pruned by half-way."""
        return {"capacities": "by-tier", "warmup": max(1, config.rounds // 5),
                "every": max(1, config.rounds // 10)}

    @classmethod
    def check_options(cls, options):
        super().check_options(options)
        o = {**cls.defaults, **options}
        ratios = check_ratios(o["ratios"])
        if o["capacities"] not in (None, "by-tier") and (isinstance(o["capacities"], str) or
                                                        not all(float(c) in ratios for c in o["capacities"])):
            raise ConfigError(f"every capacity must be one of the ratios {ratios}, got {o['capacities']}")

    @classmethod
    def check_config(cls, config):
        super().check_config(config)
        caps = config.options.get("capacities")
        caps = None if caps == "by-tier" else caps
        if caps is not None and len(caps) != config.clients:
            raise ConfigError(f"capacities lists {len(caps)} clients, the run has {config.clients}")
        if caps is not None and 1.0 not in [float(c) for c in caps]:
            raise ConfigError("at least one client must hold the full model (capacity 1.0): it trains the warm-up")
        if config.options.get("schedule") == "convergence" and config.val_fraction <= 0:
            raise ConfigError("schedule 'convergence' watches a validation loss: set val_fraction > 0")

    def setup(self, sim):
        super().setup(sim)
        o = self.options
        self.ratios = check_ratios(o["ratios"])
        caps = capacities_by_tier(self.ratios, self.hardware) if o["capacities"] == "by-tier" else \
            o["capacities"] or default_capacities(self.ratios, self.config.clients)
        self.capacity = {k: float(c) for k, c in enumerate(caps)}
        self.initial = {n: p.detach().clone() for n, p in self.model.named_parameters()}
        self.prunable = prunable(self.model)
        weights = dict(self.model.named_parameters())
        self.masks = {1.0: {n: torch.ones_like(weights[n]) for n in self.prunable}}  # m[r] for pruned r
        self.trigger = FixedSchedule(o["warmup"], o["every"]) if o["schedule"] == "fixed" else \
            ConvergenceTrigger(o["delta"], o["min_gap"])
        self.mask_news = set()  # ratios whose mask changed this round (clients download it)
        x, y = self.data.dataset.x_test, self.data.dataset.y_test
        if o["test_samples"] is not None and o["test_samples"] < len(y):
            keep = torch.randperm(len(y), generator=torch.Generator().manual_seed(self.config.seed))[:o["test_samples"]]
            x, y = x[keep], y[keep]
        self.test_set = (x, y)

    # -- server ---------------------------------------------------------------
    @property
    def pruned(self) -> list[float]:
        """R_pruned: the ratios that exist so far, descending."""
        return [r for r in self.ratios if r in self.masks]

    def prune_next(self) -> None:
        """One pruning event (Alg. 1, l. 10-14): carve R[n] out of R[n-1], rewind its survivors."""
        n = len(self.pruned)
        parent = self.masks[self.ratios[n - 1]]
        params = dict(self.model.named_parameters())
        weights = {k: p.detach() for k, p in params.items() if k in parent}
        child = prune_within(weights, parent, keep_fraction(self.ratios, n),
                             self.options["scope"])
        self.masks[self.ratios[n]] = child
        rewind(params, self.initial, child, self.options["rewind_unmasked"])
        self.mask_news = {r for r in self.pruned if r <= self.ratios[n - 1]}

    def smallest_loss(self) -> float | None:
        """Validation loss of the current smallest sub-network (the convergence trigger's signal)."""
        xs = [c.x_val for c in self.data.clients if len(c.y_val)]
        ys = [c.y_val for c in self.data.clients if len(c.y_val)]
        if not ys:
            return None
        _, loss = evaluate(self.sub_network(self.pruned[-1]), torch.cat(xs), torch.cat(ys))
        return loss / sum(len(y) for y in ys)

    def configure_round(self, round_idx, client_ids):
        """Prune if the trigger fires; plan only the clients whose ratio exists (the rest sit out)."""
        self.mask_news = set()
        if len(self.pruned) < len(self.ratios):
            converging = isinstance(self.trigger, ConvergenceTrigger)
            signal = self.smallest_loss() if converging else None
            if self.trigger(round_idx, len(self.pruned) - 1, signal):
                self.prune_next()
        return {k: ClientPlan(self.local_steps(self.data.clients[k]),
                              ratio=self.capacity[k])
                for k in client_ids if self.capacity[k] in self.masks}

    # -- client ---------------------------------------------------------------
    def smaller_masks(self, ratio: float) -> list[dict]:
        """m_i: the masks of the pruned ratios below the client's own (empty without the joint loss)."""
        return [self.masks[r] for r in self.pruned if r < ratio] if self.joint else []

    def client_step(self, client, plan: ClientPlan, state, generator):
        """Alg. 4: train own * theta on the mean loss of the own and every smaller sub-network."""
        own = self.masks[plan.ratio]
        smaller = self.smaller_masks(plan.ratio)
        model = self.sub_network(plan.ratio)
        result = yield self.local_sgd(model, client, plan.local_steps, generator, masks=own,
                                      sub_masks=smaller)
        values, held, n_held = masked_upload(model, own)
        flops = training_cost(self.costs, [own, *smaller], result.samples, self.options["flops_model"])
        news = [r for r in self.mask_news if r <= plan.ratio]
        mask_bits = float(sum(m.numel() for m in own.values())) if news else 0.0
        return ClientReport(client.client_id, client.n_train, weights=values, held=held, loss=result.loss,
                            flops=flops,
                            uplink_bits=dense_bits(n_held), downlink_bits=dense_bits(n_held) + mask_bits,
                            local_steps=plan.local_steps, ratio=plan.ratio,
                            extra={"losses_per_step": 1 + len(smaller)}), state

    def aggregate(self, round_idx, reports):
        """Sec. 3.6: theta_g[p] <- sum_{i holds p} n_i theta_i[p] / sum_{i holds p} n_i."""
        average_over_holders(self.model, reports)

    # -- evaluation -------------------------------------------------------------
    def sub_network(self, ratio: float):
        """The deployable model for ``ratio``: m[ratio] * theta_g (one stored model serves all)."""
        model = clone_model(self.model)
        apply_mask(model, self.masks[ratio])
        return model

    def personal_model(self, client_id):
        """The client's own sub-network; before its ratio exists, the smallest one there is."""
        cap = self.capacity[client_id]
        return self.sub_network(cap if cap in self.masks else self.pruned[-1])

    def global_model(self):
        """None: :meth:`extra_metrics` scores every ratio."""
        return None

    def extra_metrics(self) -> dict:
        """a_r(t) on the global test set for every r in R (None while r is not pruned yet),
        ``acc_ratios[0]`` being the full network's; with ``test_samples``, on a fixed seeded
        subset (scoring s sub-networks every round is the dominant cost of a small run)."""
        x, y = self.test_set
        scores = [evaluate(self.sub_network(r), x, y) if r in self.masks else None for r in self.ratios]
        accs = [None if s is None else s[0] / len(y) for s in scores]
        return {"acc_ratios": accs, "ratios": self.ratios}

    @classmethod
    def planned_metrics(cls, config, acc: float) -> dict:
        """Every ratio of the config's density ladder scored ``acc`` (:meth:`extra_metrics`'s shape)."""
        ratios = check_ratios({**cls.defaults, **config.options}["ratios"])
        return {"acc_ratios": [acc] * len(ratios), "ratios": ratios}


@register
class OFAOneShot(OFAFL, name="ofa-oneshot", label="OFA-FL (one-shot)",
                 color="#98df8a", marker="D"):
    """One-shot nested pruning of every ratio at once, then OFA-FL training (Varma et al. 2023 baseline)"""

    option_specs = {**OFAFL.option_specs,
                    "oneshot_rewind": Option(True, "rewind the smallest mask's weights after the one-shot pruning")}

    def prune_next(self) -> None:
        """All of R[1:] from |theta_g| at once (nested); rewind the smallest mask's weights."""
        from ..lottery import oneshot_masks

        weights = {k: p.detach() for k, p in self.model.named_parameters() if k in self.prunable}
        for r, m in zip(self.ratios[1:], oneshot_masks(weights, self.ratios[1:], self.options["scope"])):
            self.masks[r] = m
        if self.options["oneshot_rewind"]:
            rewind(dict(self.model.named_parameters()), self.initial, self.masks[self.ratios[-1]],
                   self.options["rewind_unmasked"])
        self.mask_news = set(self.ratios)
