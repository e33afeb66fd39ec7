"""Hardware: the simulated compute and links of a client, the heterogeneity tiers, and a
client's capability. ("Device" in the package means the torch device a run computes on,
:mod:`hetfl_core.science.devices`.)"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import ConfigError

__all__ = ["HardwareProfile", "REFERENCE_HARDWARE", "HETEROGENEITY", "make_hardware", "capability",
           "DeviceProfile", "REFERENCE_DEVICE", "make_devices"]

@dataclass(frozen=True)
class HardwareProfile:
    """A client's simulated hardware.

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


#: The fastest hardware of every scenario: 1 GFLOP/s of training, 10 Mbit/s up, 40 Mbit/s down.
REFERENCE_HARDWARE = HardwareProfile("high", 1e9, 10e6, 40e6)

#: Heterogeneity level -> tiers as (name, compute scale, bandwidth scale) of the reference hardware.
HETEROGENEITY = {
    "none": [("high", 1.0, 1.0)],
    "low": [("high", 1.0, 1.0), ("mid", 0.7, 0.7), ("low", 0.5, 0.5)],
    "medium": [("high", 1.0, 1.0), ("mid", 0.5, 0.5), ("low", 0.25, 0.25)],
    "high": [("high", 1.0, 1.0), ("mid", 0.25, 0.25), ("low", 0.0625, 0.0625)],
    # Heroes' four edge devices (laptop, AGX Xavier, Xavier NX, TX2): iteration times 1, 1.6, 2.5, 4 x
    "edge": [("laptop", 1.0, 1.0), ("agx", 0.625, 0.625), ("nx", 0.4, 0.4), ("tx2", 0.25, 0.25)],
}


def make_hardware(n_clients: int, heterogeneity: str, rng: np.random.Generator,
                  reference: HardwareProfile = REFERENCE_HARDWARE) -> list[HardwareProfile]:
    """Each client's hardware: a tier of ``HETEROGENEITY[heterogeneity]`` in equal
    proportions, shuffled."""
    if heterogeneity not in HETEROGENEITY:
        raise ConfigError(f"unknown heterogeneity {heterogeneity!r}; choose one of: {', '.join(HETEROGENEITY)}")
    tiers = HETEROGENEITY[heterogeneity]
    order = rng.permutation(np.arange(n_clients) % len(tiers))
    return [replace(reference, tier=name, flops_per_s=reference.flops_per_s * compute,
                    uplink_bps=reference.uplink_bps * bandwidth, downlink_bps=reference.downlink_bps * bandwidth)
            for name, compute, bandwidth in (tiers[t] for t in order)]


def capability(hardware: HardwareProfile, fleet) -> float:
    """``hardware``'s training throughput over the fastest of ``fleet`` (1 for the fastest).

    Width methods (HeteroFL, FjORD, Heroes' budget) and ratio methods (FedLPS, the unit
    mask) size a client's model by it."""
    return hardware.flops_per_s / max(h.flops_per_s for h in fleet)


#: the earlier names of :class:`HardwareProfile`, :data:`REFERENCE_HARDWARE` and
#: :func:`make_hardware`, kept for code written against them
DeviceProfile = HardwareProfile
REFERENCE_DEVICE = REFERENCE_HARDWARE
make_devices = make_hardware
