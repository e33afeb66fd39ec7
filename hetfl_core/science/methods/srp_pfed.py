"""SRP-pFed (Hu et al., 2024): sparsified random partial model updates for personalised FL.

Per round (Alg. 1 and 2, synchronous)::

    server:  Pi <- h / sum h;  P_t <- K rates drawn from Pi         (Eq. 7, SAMPLEUPDATERATE)
             broadcast (w_g, P_t)                                    (full model down)
    client:  for p in P_t: m(p) <- shared mask of w_i at rate p      (Eqs. 2-3)
                           w[p] <- m(p) * w_g + (1 - m(p)) * w_i     (Eq. 5)
             keep the w[p] of lowest loss on local validation data  (Eq. 8, CLIENTCLUSTERING)
             train all weights from it for E epochs                  (LOCALUPDATE)
             upload m * w_i and m, and the loss                      (sparse uplink)
    server:  w_g <- masked average of the shared parts               (Eq. 4)
             h <- lambda h + b(t) on P_t, b = 1/(1 + e^{L_t})        (Eq. 6)

The rate sampler is :class:`hetfl_core.science.reinforced_walk.ReinforcedRateWalk`; masks,
fusion and aggregation are in :mod:`hetfl_core.science.partial_update`. Where the paper is
ambiguous, an option keeps the other reading: the update rate p is the *shared* fraction
(Eq. 3; the abstract calls it the personal one); the largest-|w| entries are personal
(Eq. 2); the whole model is ranked (``scope``); the aggregation is element-wise
normalised (Eq. 4 divides by the total data size: ``agg="paper_eq4"``); K distinct rates
(Sec. III-B's draws may repeat: ``replacement``); L_t is the data-weighted mean loss
(Eq. 6 sums it: ``loss_agg="sum"``; ``credit``); lambda = 0.9 (Eq. 6 gives none);
clustering on a validation split, not the test split (Sec. V-C, ``cluster_eval``). A
client's local model starts as the first global model it receives, so in its first
round it picks the lowest rate (Fig. 8's single cluster at round 0).

``window`` (simulated seconds) gives the semi-asynchronous variant of Sec. III-D: the
server aggregates the uploads that arrived within the window and drops late ones; a late
client still keeps its trained local model.
"""
from __future__ import annotations

import numpy as np
import torch

from ..options import Option
from ..errors import ConfigError
from ..partial_update import fuse, mask_size, masked_aggregate, update_rate_mask
from ..reinforced_walk import ReinforcedRateWalk, rate_grid
from ..streams import STREAMS
from ..system import client_time, dense_bits, forward_flops, sparse_bits, training_flops
from ..training import clone_model, evaluate
from .base import ClientPlan, ClientReport, register
from .fedavg import FedAvg


@register
class SRPpFed(FedAvg, name="srp-pfed", label="SRP-pFed",
              color="#e377c2", marker="^", reads_hardware_tiers=False):
    """SRP-pFed: random partial updates, reinforced-memory rate walk, clustering (Hu et al. 2024)"""
    client_state = ("local",)                        # each client's full model w_i
    server_state = ("walk",)           # the reinforced walk over the rates

    option_specs = {
        "candidates": Option(10, "number of candidate update rates (an even grid in (0, 1])", 1, 10_000),
        "k": Option(2, "K: rates drawn each round (Eq. 7), at most candidates", 1, 10_000),
        "decay": Option(0.9, "lambda of the walk's update h <- lambda h + b (Eq. 6)", 0, 1,
                        low_open=True, high_open=True),
        "sampler": Option("rm", "the rate sampler: reinforced walk, random, or fixed rates",
                          choices=("rm", "rd", "fixed")),
        "fixed_rates": Option(None, "the rates of sampler fixed (None otherwise)"),
        "scope": Option("global", "rank the whole model or layer by layer (Eq. 2)", choices=("global", "layer")),
        "personal": Option("largest", "which entries stay personal (Eq. 2: the largest |w|)",
                           choices=("largest", "smallest")),
        "agg": Option("element", "element-wise normalised aggregation, or Eq. (4) as printed",
                      choices=("element", "paper_eq4")),
        "loss_agg": Option("mean", "L_t: data-weighted mean or sum of losses (Eq. 6)", choices=("mean", "sum")),
        "credit": Option("shared", "one credit for all drawn rates, or per rate", choices=("shared", "per_rate")),
        "replacement": Option(False, "draw the K rates with replacement (Sec. III-B's inverse-CDF draws)"),
        "cluster_eval": Option("val", "the split CLIENTCLUSTERING scores fusions on (Eq. 8)",
                               choices=("val", "train", "test")),
        "window": Option(None, "seconds of a semi-asynchronous window (Sec. III-D; None: synchronous)", 0, 1e9,
                         low_open=True, kind=float),
    }

    @classmethod
    def check_options(cls, options):
        super().check_options(options)
        cls.make_walk({**cls.defaults, **options})  # k within candidates, fixed_rates

    @classmethod
    def check_config(cls, config):
        super().check_config(config)
        if {**cls.defaults, **config.options}["cluster_eval"] == "val" and config.val_fraction <= 0:
            raise ConfigError("srp-pfed clusters on each client's validation split: set val_fraction > 0 "
                              "(e.g. --val-fraction 0.1) or the option cluster_eval=train")

    @staticmethod
    def make_walk(o: dict) -> ReinforcedRateWalk:
        """A client's reinforced rate walk from the method's options ``o``."""
        return ReinforcedRateWalk(rate_grid(int(o["candidates"])), k=int(o["k"]), decay=float(o["decay"]),
                                  mode=o["sampler"], replacement=bool(o["replacement"]), loss_agg=o["loss_agg"],
                                  credit=o["credit"], fixed=o["fixed_rates"])

    def setup(self, sim):
        super().setup(sim)
        self.walk = self.make_walk(self.options)
        self.local: dict[int, dict[str, torch.Tensor]] = {}  # w_i, every client's full model
        self.sampled: list[int] = [len(self.walk.rates) - 1]  # before round 1 the personal model is w_g
        self.d = sum(p.numel() for p in self.model.parameters())

    # -- server ------------------------------------------------------------------
    def configure_round(self, round_idx, client_ids):
        """SAMPLEUPDATERATE (Alg. 2): P_t drawn from Pi = h / sum h (Eq. 7), sent with w_g."""
        rng = np.random.default_rng([self.config.seed, STREAMS["rate_walk"], round_idx])
        self.sampled = self.walk.sample(rng)
        self.probs = self.walk.probs()
        rates = [self.walk.rates[x] for x in self.sampled]
        return {k: ClientPlan(self.local_steps(self.data.clients[k]), extra={"rates": rates}) for k in client_ids}

    def aggregate(self, round_idx, reports):
        """Eq. 4 over the uploads that arrived, then the memory update of Eq. 6."""
        arrived = [r for r in reports if not r.extra["late"]]
        if arrived:
            uploads = [(r.n_samples, r.held, r.weights)
                       for r in arrived]
            new = masked_aggregate(self.global_weights(), uploads,
                                   self.options["agg"])
            with torch.no_grad():
                for name, p in self.model.named_parameters():
                    p.copy_(new[name])
        self.walk.update(self.sampled,
                         [r.extra["val_loss"] for r in arrived],
                         [r.n_samples for r in arrived],
                         [self.walk.rates.index(r.extra["rate"])
                          for r in arrived])

    # -- client ------------------------------------------------------------------
    def global_weights(self) -> dict[str, torch.Tensor]:
        """A copy of the global model's weights."""
        return {n: p.detach().clone() for n, p in self.model.named_parameters()}

    def local_weights(self, client_id: int) -> dict[str, torch.Tensor]:
        """w_i: the client's model; a new client's is the global model it first receives."""
        return self.local.get(client_id) or self.global_weights()

    def local_of(self, kept: dict | None) -> dict[str, torch.Tensor]:
        """w_i from what the client keeps (``kept``); a new client's is the global model."""
        return kept or self.global_weights()

    def cluster_data(self, client):
        """The samples a client's cluster is scored on: the ``cluster_eval`` split (``val``
        falls back to the training data of a client without a validation split)."""
        split = self.options["cluster_eval"]
        if split == "val" and len(client.y_val):
            return client.x_val, client.y_val
        if split == "test":
            return client.x_test, client.y_test
        return client.x_train, client.y_train

    def client_cluster(self, client, rates, w_i: dict):
        """CLIENTCLUSTERING (Eq. 8): the fusion of the client's model ``w_i`` with the
        global one of lowest local loss over the rates P_t.

        Rates are tried in ascending order and a later one replaces the best only if its
        loss is strictly lower. Returns (model, mask, rate, loss).
        """
        w_g = self.global_weights()
        x, y = self.cluster_data(client)
        model, best = clone_model(self.model), None
        for p in sorted(rates):
            mask = update_rate_mask(w_i, p, self.options["scope"],
                                    self.options["personal"])
            fused = fuse(w_g, w_i, mask)
            model.load_state_dict(fused, strict=False)
            loss = evaluate(model, x, y)[1] / max(len(y), 1)
            if best is None or loss < best[3]:
                best = (fused, mask, p, loss)
        model.load_state_dict(best[0], strict=False)
        return model, best[1], best[2], best[3]

    def client_step(self, client, plan: ClientPlan, state, generator: torch.Generator):
        """Cluster, train every weight (LOCALUPDATE), upload the shared part m * w_i with m;
        the client keeps w_i (its state)."""
        rates = plan.extra["rates"]
        w_i = self.local_of(state.get("local"))
        model, mask, rate, loss = self.client_cluster(client, rates, w_i)
        result = yield self.local_sgd(model, client, plan.local_steps, generator)
        trained = {n: p.detach().clone() for n, p in model.named_parameters()}
        shared = {n: trained[n] * mask[n] for n in trained}
        nnz = mask_size(mask)
        n_eval = len(self.cluster_data(client)[1]) * len(rates)
        flops = training_flops(self.costs, result.samples) + forward_flops(self.costs) * n_eval
        up = sparse_bits(nnz, self.d)
        down = dense_bits(self.d + len(rates))
        seconds = client_time(self.hardware[client.client_id], flops, up, down)
        window = self.options["window"]
        late = window is not None and seconds > float(window)
        extra = {"rate": rate, "cluster": sorted(rates).index(rate), "val_loss": loss,
                 "late": late, "probs": self.probs.tolist()}
        time_s = None if window is None else min(seconds, float(window))
        return ClientReport(client.client_id, client.n_train, weights=shared, held=mask, loss=result.loss,
                            flops=flops, uplink_bits=up, downlink_bits=down,
                            local_steps=plan.local_steps, ratio=nnz / self.d, extra=extra,
                            time_s=time_s), {"local": trained}

    # -- evaluation ----------------------------------------------------------------
    def personal_model(self, client_id):
        """The client's clustering fusion of the current global model at the last P_t."""
        if client_id not in self.local:
            return self.model
        client = self.data.clients[client_id]
        rates = [self.walk.rates[x] for x in self.sampled]
        return self.client_cluster(client, rates, self.local_weights(client_id))[0]
