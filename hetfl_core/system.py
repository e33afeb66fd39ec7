"""The system model shared by every method: devices, time, energy, FLOPs and bits.

One function per formula, and every method calls the same ones:

* :func:`forward_flops`, :func:`training_flops` - exact multiply-add counts of a model,
  dense or under structured (unit) or unstructured (weight) sparsity;
* :func:`dense_bits`, :func:`sparse_bits` - what a message costs on the wire;
* :func:`client_time`, :func:`round_time` - compute time plus transfer time, and the
  synchronous round that waits for its slowest participant;
* :func:`shannon_rate`, :func:`path_loss_db`, :func:`channel_gain` - a wireless uplink;
* :func:`compute_energy`, :func:`transmit_energy` - the energy of a round.

FLOP convention: a multiply-add is 2 FLOPs; only conv, linear and LSTM matrix products
are counted (activations, pooling, normalisation and bias additions are below 2% for the
models here and are left out, as in the papers). A training step on one sample costs the
forward pass F, the gradient with respect to the weights F, and the gradient with respect
to the layer's input F, except in the first layer, which needs no input gradient.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from .errors import ConfigError

__all__ = [
    "LayerCost", "profile_model", "forward_flops", "training_flops", "FLOAT_BITS", "dense_bits",
    "index_bits", "sparse_bits", "DeviceProfile", "REFERENCE_DEVICE", "HETEROGENEITY",
    "make_devices", "compute_time", "transfer_time", "client_time", "round_time",
    "path_loss_db", "dbm_to_watts", "channel_gain", "shannon_rate", "compute_energy",
    "transmit_energy",
]

# --------------------------------------------------------------------------- FLOPs


@dataclass(frozen=True)
class LayerCost:
    """Multiply-adds of one layer for one sample, and what feeds it."""

    name: str
    kind: str          # "conv", "linear" or "lstm"
    macs: int          # multiply-adds per sample, forward
    params: int        # trainable scalars of the layer
    in_units: int
    out_units: int
    input_layer: str | None  # the previous unit layer feeding this one, if any


def profile_model(model: nn.Module, in_shape, dtype=torch.float32) -> list[LayerCost]:
    """Per-layer costs of ``model`` on one input of shape ``in_shape`` (forward order).

    Traced with forward hooks on a single sample, so strides, padding and pooling are
    exactly what the model does. For integer inputs (the LSTM) pass ``dtype=torch.long``.
    In a residual network a layer's ``input_layer`` is the unit layer called just before
    it, so structured keep fractions are exact for chains and approximate across skips.
    """
    records: list[LayerCost] = []
    previous: list[str | None] = [None]

    def hook(name):
        def run(module, inputs, output):
            params = sum(p.numel() for p in module.parameters(recurse=False))
            if isinstance(module, nn.Conv2d):
                per_out = module.in_channels // module.groups * math.prod(module.kernel_size)
                macs, n_in, n_out, kind = output[0].numel() * per_out, module.in_channels, module.out_channels, "conv"
            elif isinstance(module, nn.Linear):
                positions = output.numel() // output.shape[-1]
                macs, n_in, n_out, kind = positions * module.in_features * module.out_features, \
                    module.in_features, module.out_features, "linear"
            else:  # nn.LSTM, batch_first: 4 gates of (input + hidden) x hidden per step and layer
                out = output[0]
                steps = out.shape[1] if module.batch_first else out.shape[0]
                h, macs, size_in = module.hidden_size, 0, module.input_size
                for _ in range(module.num_layers):
                    macs += steps * 4 * h * (size_in + h)
                    size_in = h
                n_in, n_out, kind = module.input_size, h, "lstm"
            records.append(LayerCost(name, kind, int(macs), int(params), n_in, n_out, previous[0]))
            previous[0] = name
        return run

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules()
               if isinstance(m, (nn.Conv2d, nn.Linear, nn.LSTM))]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros((1, *in_shape), dtype=dtype, device=next(model.parameters()).device))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return records


def _layer_scale(layer: LayerCost, keep: dict | None, density: dict | None) -> float:
    scale = 1.0
    if keep:
        scale *= keep.get(layer.name, 1.0)
        if layer.input_layer is not None:
            scale *= keep.get(layer.input_layer, 1.0)
    if density:
        scale *= density.get(layer.name, 1.0)
    return scale


def forward_flops(costs: list[LayerCost], keep: dict | None = None, density: dict | None = None) -> float:
    """FLOPs of one forward pass on one sample.

    ``keep[name]`` is the fraction of a layer's output units kept (structured sparsity:
    the next layer loses the same fraction of its inputs); ``density[name]`` the fraction
    of a layer's weights kept (unstructured sparsity, charged as an ideal sparse kernel).
    """
    return 2.0 * sum(l.macs * _layer_scale(l, keep, density) for l in costs)


def training_flops(costs: list[LayerCost], n_samples: int, keep: dict | None = None,
                   density: dict | None = None, trainable: set | None = None) -> float:
    """FLOPs of training on ``n_samples`` samples: forward + weight gradient + input gradient.

    Every layer costs its forward pass F. A trainable layer adds its weight gradient (F);
    a layer adds its input gradient (F) when some trainable layer lies before it, since
    the gradient must flow through it. With every layer trainable (``trainable=None``) the
    first layer costs 2F and the others 3F; with only the head trainable, the body costs
    just its forward pass.
    """
    names = [l.name for l in costs]
    is_trainable = [trainable is None or n in trainable for n in names]
    per_sample = 0.0
    for i, l in enumerate(costs):
        f = 2.0 * l.macs * _layer_scale(l, keep, density)
        per_sample += f * (1 + is_trainable[i] + any(is_trainable[:i]))
    return per_sample * n_samples


# --------------------------------------------------------------------------- bits

FLOAT_BITS = 32


def dense_bits(n_values: int, value_bits: int = FLOAT_BITS) -> float:
    """Bits of ``n_values`` dense values."""
    return float(n_values) * value_bits


def index_bits(nnz: int, total: int, coding: str = "min") -> float:
    """Bits that tell the receiver *which* ``nnz`` of ``total`` positions are sent.

    ``"position"``: each index in ceil(log2 total) bits; ``"bitmap"``: one bit per
    position; ``"min"``: the cheaper of the two (what an encoder would pick);
    ``"binomial"``: log2 C(total, nnz), the information-theoretic minimum (Tan et al. 2025, Eq. 8).
    """
    if nnz < 0 or nnz > total:
        raise ConfigError(f"cannot send {nnz} of {total} values")
    if nnz in (0, total):
        return 0.0
    position = nnz * math.ceil(math.log2(total))
    if coding == "position":
        return float(position)
    if coding == "bitmap":
        return float(total)
    if coding == "min":
        return float(min(position, total))
    if coding == "binomial":
        return (math.lgamma(total + 1) - math.lgamma(nnz + 1) - math.lgamma(total - nnz + 1)) / math.log(2)
    raise ConfigError(f"unknown index coding {coding!r}; choose position, bitmap, min or binomial")


def sparse_bits(nnz: int, total: int, value_bits: int = FLOAT_BITS, coding: str = "min") -> float:
    """Bits of a sparse message: ``nnz`` values plus their positions among ``total``."""
    return dense_bits(nnz, value_bits) + index_bits(nnz, total, coding)


# --------------------------------------------------------------------------- devices and time


@dataclass(frozen=True)
class DeviceProfile:
    """A client device.

    ``flops_per_s``: sustained training throughput; ``uplink_bps``/``downlink_bps``: link
    rates; ``energy_coeff``: effective switched capacitance zeta (J s^2), so that a cycle at
    frequency f costs zeta f^2 J; ``flops_per_cycle``: 2 (Tan et al. 2025, footnote 5);
    ``tx_power_w``: transmit power; ``tier``: the tier's name.
    """

    tier: str
    flops_per_s: float
    uplink_bps: float
    downlink_bps: float
    energy_coeff: float = 1e-28
    flops_per_cycle: float = 2.0
    tx_power_w: float = 0.2

    @property
    def cpu_hz(self) -> float:
        return self.flops_per_s / self.flops_per_cycle


#: The fastest device of every scenario: 1 GFLOP/s of training, 10 Mbit/s up, 40 Mbit/s down.
REFERENCE_DEVICE = DeviceProfile("high", 1e9, 10e6, 40e6)

#: Heterogeneity level -> tiers as (name, compute scale, bandwidth scale) of the reference device.
HETEROGENEITY = {
    "none": [("high", 1.0, 1.0)],
    "low": [("high", 1.0, 1.0), ("mid", 0.7, 0.7), ("low", 0.5, 0.5)],
    "medium": [("high", 1.0, 1.0), ("mid", 0.5, 0.5), ("low", 0.25, 0.25)],
    "high": [("high", 1.0, 1.0), ("mid", 0.25, 0.25), ("low", 0.0625, 0.0625)],
    # Heroes' four edge devices (laptop, AGX Xavier, Xavier NX, TX2): iteration times 1, 1.6, 2.5, 4 x
    "edge": [("laptop", 1.0, 1.0), ("agx", 0.625, 0.625), ("nx", 0.4, 0.4), ("tx2", 0.25, 0.25)],
}


def make_devices(n_clients: int, heterogeneity: str, rng: np.random.Generator,
                 reference: DeviceProfile = REFERENCE_DEVICE) -> list[DeviceProfile]:
    """Assign each client a tier of ``HETEROGENEITY[heterogeneity]`` in equal proportions, shuffled."""
    if heterogeneity not in HETEROGENEITY:
        raise ConfigError(f"unknown heterogeneity {heterogeneity!r}; choose one of: {', '.join(HETEROGENEITY)}")
    tiers = HETEROGENEITY[heterogeneity]
    order = rng.permutation(np.arange(n_clients) % len(tiers))
    devices = []
    for t in order:
        name, compute, bandwidth = tiers[int(t)]
        devices.append(replace(reference, tier=name, flops_per_s=reference.flops_per_s * compute,
                               uplink_bps=reference.uplink_bps * bandwidth,
                               downlink_bps=reference.downlink_bps * bandwidth))
    return devices


def compute_time(device: DeviceProfile, flops: float) -> float:
    """Seconds to compute ``flops`` on ``device``."""
    return flops / device.flops_per_s


def transfer_time(bits: float, rate_bps: float) -> float:
    """Seconds to send ``bits`` at ``rate_bps``."""
    return bits / rate_bps if bits else 0.0


def client_time(device: DeviceProfile, flops: float, uplink_bits: float, downlink_bits: float) -> float:
    """A client's round: download, compute, upload (FLOPs / capacity + bits / bandwidth)."""
    return (transfer_time(downlink_bits, device.downlink_bps) + compute_time(device, flops)
            + transfer_time(uplink_bits, device.uplink_bps))


def round_time(client_times) -> float:
    """A synchronous round ends when its slowest participant is done."""
    times = list(client_times)
    return max(times) if times else 0.0


# --------------------------------------------------------------------------- wireless and energy

def path_loss_db(distance_km: float) -> float:
    """3GPP urban macro path loss, 128.1 + 37.6 log10(d) dB with d in km (Tan et al. 2025, Table II)."""
    return 128.1 + 37.6 * math.log10(distance_km)


def dbm_to_watts(dbm: float) -> float:
    """Power in dBm to watts."""
    return 10 ** (dbm / 10) / 1000


def channel_gain(distance_km: float) -> float:
    """Linear channel power gain from the path loss."""
    return 10 ** (-path_loss_db(distance_km) / 10)


def shannon_rate(bandwidth_hz: float, tx_power_w: float, gain: float, noise_psd_w_per_hz: float) -> float:
    """Uplink rate R = B log2(1 + p h / (N0 B)) in bit/s (Tan et al. 2025, Eq. 7 with B = l W)."""
    if bandwidth_hz <= 0:
        return 0.0
    return bandwidth_hz * math.log2(1 + tx_power_w * gain / (noise_psd_w_per_hz * bandwidth_hz))


def compute_energy(device: DeviceProfile, flops: float) -> float:
    """Joules to compute ``flops``: zeta f^2 per cycle (Tan et al. 2025, Eq. 13: zeta f^3 tau)."""
    cycles = flops / device.flops_per_cycle
    return device.energy_coeff * device.cpu_hz ** 2 * cycles


def transmit_energy(device: DeviceProfile, seconds: float) -> float:
    """Joules of transmitting for ``seconds`` at the device's power (Tan et al. 2025, Eq. 11)."""
    return device.tx_power_w * seconds
