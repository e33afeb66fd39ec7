"""Energy: computing on a CPU and transmitting on the uplink (Tan et al. 2025, Eqs. 11, 13)."""
from __future__ import annotations

from .devices import DeviceProfile

__all__ = ["compute_energy", "transmit_energy"]


def compute_energy(device: DeviceProfile, flops: float) -> float:
    """Joules to compute ``flops``: zeta f^2 per cycle (Tan et al. 2025, Eq. 13: zeta f^3 tau)."""
    cycles = flops / device.flops_per_cycle
    return device.energy_coeff * device.cpu_hz ** 2 * cycles


def transmit_energy(device: DeviceProfile, seconds: float) -> float:
    """Joules of transmitting for ``seconds`` at the device's power (Tan et al. 2025, Eq. 11)."""
    return device.tx_power_w * seconds
