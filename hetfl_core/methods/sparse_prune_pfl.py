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

Latency and energy follow the paper's model (Sec. III) through
:mod:`hetfl_core.system`: compute cycles b C (d_B + r d_P) / d on a CPU of omega Hz (12)
as FLOPs = 2 x cycles, the FDMA uplink rate ``shannon_rate`` at the share l W (7), upload
bits (9) (``bits="exact"``: values plus ``index_bits(..., "binomial")``, Eq. 8),
``compute_energy`` (13) and ``transmit_energy`` (11). The round lasts as long as its
slowest client.

Options turn the method into its ablations and into the paper's baselines under the same
latency model: ``allocation`` ("dca", "uniform": equal shares with each client's best
(k, r), "fixed": the given ``k``, ``r`` with equal shares), ``split`` ("conv": the
paper's base = conv layers; "fc": LG-FedAvg's shared FC; "all": FedAvg; "first:N": the
first N layers, Table III; "last-block": a ResNet's last block and classifier private,
Figs. 4-5), ``prune_scope="all"`` (FedAvg-P: prune the whole model).
``calibration_split`` names the split on which the CPU constant C of (12) is calibrated
(default "paper": the paper's split for the model, :func:`paper_split`), so that every
method on the same model computes on the same devices whatever it shares.
``bandwidth_mhz`` defaults to the paper's 10 MHz per 100 clients (Sec. VI);
``bandwidth_high_mhz`` makes it dynamic, U[low, high] per round; ``deadline_s`` fixes
tau_max (else it is calibrated, see :class:`hetfl_core.dca.WirelessScenario`).
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from .. import dca
from ..compression import flatten, top_k, unflatten
from ..config import Option
from ..engine import ClientPlan, ClientReport
from ..errors import ConfigError
from ..masks import magnitude_mask
from ..models import structured_units
from ..personalization import layer_of
from ..system import (DeviceProfile, FLOAT_BITS, client_time, compute_energy, index_bits,
                      transmit_energy)
from . import register
from .fedper import FedPer

ALLOCATIONS = ("dca", "uniform", "fixed")


def split_layers(model: nn.Module, split: str) -> list[str]:
    """The layers of the shared base for a ``split`` name (Table III's LeNet-5 splits).

    ``"conv"``: every conv layer (the paper's choice: conv1-3 of LeNet-5, 82.15% of the
    weights); ``"fc"``: every linear layer (LG-FedAvg); ``"all"``: every layer (FedAvg);
    ``"first:N"``: the first N layers in forward order (Table III: 1, 2, 3, 4);
    ``"last:N"``: the last N layers (LG-FedAvg's shared head on any model: ``last:1`` for
    the LoRA transformer, whose first four "layers" are layer 0's adapters);
    ``"last-block"``: everything but a ResNet's last residual block, pooling and classifier
    (the paper's ResNet-18 split, §5): whole blocks, their batch-norm layers included.
    """
    owners = [name for name, module in model.named_modules() if any(True for _ in module.parameters(recurse=False))]
    if split == "all":          # every parameter, batch-norm layers included
        return owners
    if split == "last-block":
        blocks = getattr(model, "layers", None)
        if not isinstance(blocks, nn.Sequential) or len(blocks) < 2:
            raise ConfigError("split last-block needs a model built of residual blocks (model resnet)")
        private = (f"layers.{len(blocks) - 1}.", "classifier.")
        return [name for name in owners if not (name + ".").startswith(private)]
    units = structured_units(model, include_output=True)
    if split == "conv":
        return [n for n, m, _ in units if isinstance(m, nn.Conv2d)]
    if split == "fc":
        return [n for n, m, _ in units if isinstance(m, nn.Linear)]
    if split.startswith(("first:", "last:")):
        count = int(split.split(":", 1)[1])
        if not 1 <= count <= len(units):
            raise ConfigError(f"split {split.split(':')[0]}:N needs N in 1..{len(units)} for this model, got {count}")
        return [n for n, _, _ in (units[:count] if split.startswith("first:") else units[-count:])]
    raise ConfigError(f"unknown split {split!r}; choose conv, fc, all, first:N, last:N or last-block")


PAPER_SPLITS = {"resnet": "last-block", "lora-transformer": "first:4"}


def paper_split(model_name: str, model: nn.Module) -> str:
    """The paper's split for a model (§5): a ResNet's last block private, the LoRA encoder's
    first-layer adapters shared, otherwise the conv layers shared (every layer for a model
    without any)."""
    if model_name in PAPER_SPLITS:
        return PAPER_SPLITS[model_name]
    return "conv" if any(isinstance(m, nn.Conv2d) for m in model.modules()) else "all"


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
        "bandwidth_mhz": Option(None, "total uplink bandwidth W (None: 10 MHz per 100 clients, Sec. VI)", 0, 1e6,
                                low_open=True, kind=float),
        "bandwidth_high_mhz": Option(None, "with it W ~ U[bandwidth_mhz, this] each round", 0, 1e6,
                                     low_open=True, kind=float),
        "deadline_s": Option(None, "the round deadline tau_max (None: calibrated)", 0, 1e9, low_open=True,
                             kind=float),
        "deadline_position": Option(0.5, "where the calibrated deadline sits between the least feasible one "
                                    "at (k_min, r_min) and at (1, 1)", 0, 1),
        "energy_budget_j": Option(None, "each client's energy budget per round, joules (None: none)", 0, 1e9,
                                  low_open=True, kind=float),
        "bits": Option("approx", "upload bits: Eq. (9) approx or Eq. (8) exact", choices=("approx", "exact")),
        "calibration_split": Option("paper", "the split that calibrates the CPU constant C of (12)"),
    }

    @classmethod
    def check_options(cls, options):
        super().check_options(options)
        o = {**cls.defaults, **options}
        _check_split("split", o["split"])
        if o["calibration_split"] != "paper":
            _check_split("calibration_split", o["calibration_split"])
        if o["prune_scope"] == "all" and o["allocation"] != "fixed":
            raise ConfigError("prune_scope=all (FedAvg-P) needs allocation=fixed")
        if o["bandwidth_high_mhz"] is not None and (o["bandwidth_mhz"] is None
                                                    or o["bandwidth_high_mhz"] < o["bandwidth_mhz"]):
            raise ConfigError("bandwidth_high_mhz needs bandwidth_mhz and must be >= it")

    def __init__(self, config, data, devices):
        super().__init__(config, data, devices)
        o = self.options
        self.prune_names = self.private_names if o["prune_scope"] == "private" else self.shared_names + \
            self.private_names
        params = dict(self.model.named_parameters())
        self.d_base = sum(params[n].numel() for n in self.shared_names)
        self.d_private = sum(params[n].numel() for n in self.private_names)
        self.gamma = np.array([c.n_train for c in data.clients], float)
        band = 0.1e6 * config.clients if o["bandwidth_mhz"] is None else float(o["bandwidth_mhz"]) * 1e6
        if o["bandwidth_high_mhz"] is not None:
            band = (band, float(o["bandwidth_high_mhz"]) * 1e6)
        samples = self.samples_per_round()
        reference = str(o["calibration_split"])
        reference = paper_split(config.model, self.model) if reference == "paper" else reference
        calibration_d_base = sum(params[n].numel() for n in self.split_parameters(reference))
        self.scenario = dca.WirelessScenario(self.gamma, self.d_base, self.d_private, band,
                                             batch=samples, seed=config.seed, deadline_s=o["deadline_s"],
                                             deadline_position=float(o["deadline_position"]),
                                             energy_budget_j=o["energy_budget_j"],
                                             calibration_d_base=calibration_d_base)

    def samples_per_round(self) -> int:
        """b in (12): samples a client processes per round (local steps x batch)."""
        steps = self.local_steps(max(self.data.clients, key=lambda c: c.n_train))
        return steps * self.config.batch_size

    def split_parameters(self, split: str) -> list[str]:
        """The parameter names in the shared base of a ``split`` (see :func:`split_layers`)."""
        layers = set(split_layers(self.model, split))
        return [n for n, _ in self.model.named_parameters() if layer_of(n) in layers]

    def choose_shared(self):
        """The base B (Table III's split): the parameters the server aggregates."""
        return self.split_parameters(str(self.options["split"]))

    # -- server: Alg. 2 -------------------------------------------------------
    def allocate(self, system: dca.RoundSystem) -> dca.Allocation:
        """This round's (k, r, l): Alg. 2 (DCA), equal shares with the best (k, r), or fixed."""
        mode, theta1 = self.options["allocation"], float(self.options["theta_ratio"])
        if mode == "dca":
            return dca.solve_dca(system, theta1)
        if mode == "uniform":
            return dca.uniform_allocation(system, theta1)
        return dca.fixed_allocation(system, float(self.options["k"]), float(self.options["r"]))

    def configure_round(self, round_idx, client_ids):
        """Draw the round's wireless state and allocate (k_n, r_n, l_n) among the participants."""
        system = self.scenario.draw()
        idx = np.array(client_ids)
        system = dca.RoundSystem(system.gamma[idx] / system.gamma[idx].sum(), system.tx_power_w[idx],
                                 system.gain[idx], system.cpu_hz[idx], system.bandwidth_hz, system.d_base,
                                 system.d_private, system.batch, system.cycles_per_sample, system.deadline_s,
                                 system.energy_coeff,
                                 None if system.energy_budget_j is None else system.energy_budget_j[idx],
                                 system.noise_psd, system.value_bits)
        alloc = self.allocate(system)
        rates = system.rate(alloc.share)
        plans = {}
        for i, cid in enumerate(client_ids):
            device = DeviceProfile("wireless", flops_per_s=2.0 * system.cpu_hz[i], uplink_bps=float(rates[i]),
                                   downlink_bps=math.inf, energy_coeff=system.energy_coeff,
                                   tx_power_w=float(system.tx_power_w[i]))
            plans[cid] = ClientPlan(self.local_steps(self.data.clients[cid]), ratio=float(alloc.r[i]),
                                    extra={"k": float(alloc.k[i]), "r": float(alloc.r[i]),
                                           "share": float(alloc.share[i]), "device": device,
                                           "relaxed": bool(alloc.relaxed)})
        return plans

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
        # (12): cycles = b C (params computed on) / d;  FLOPs = 2 x cycles (footnote 5)
        computed = kept_base + r * self.d_private
        flops = 2.0 * result.samples * self.scenario.cycles_per_sample * computed / (self.d_base + self.d_private)
        device = plan.extra["device"]
        seconds = client_time(device, flops, bits, 0.0)
        comm = bits / device.uplink_bps
        joules = compute_energy(device, flops) + transmit_energy(device, comm)
        return ClientReport(client.client_id, client.n_train, sent, result.loss, flops=flops, uplink_bits=bits,
                            downlink_bits=float(self.d_base * FLOAT_BITS), local_steps=plan.local_steps,
                            ratio=r, time_s=seconds,
                            extra={"k": k, "r": r, "share": plan.extra["share"], "sent_values": nnz,
                                   "energy_j": joules, "relaxed": plan.extra["relaxed"]})

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
