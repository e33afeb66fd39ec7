"""Energy: computing on a CPU and transmitting on the uplink (Tan et al. 2025, Eqs. 11, 13)."""
from __future__ import annotations

from .clock import compute_time
from .hardware import HardwareProfile

__all__ = ["cpu_energy", "compute_energy", "transmit_energy"]


def cpu_energy(energy_coeff, cpu_hz, seconds):
    """Tan et al. 2025, Eq. (13): E^Comp = zeta omega^3 tau^Comp, element-wise."""
    return energy_coeff * cpu_hz ** 3 * seconds


def compute_energy(hardware: HardwareProfile, flops: float) -> float:
    """Joules to compute ``flops`` on ``hardware``: Eq. (13) over its compute time."""
    return cpu_energy(hardware.energy_coeff, hardware.cpu_hz, compute_time(hardware, flops))


def transmit_energy(hardware: HardwareProfile, seconds: float) -> float:
    """Joules of transmitting for ``seconds`` at the hardware's power (Tan et al. 2025, Eq. 11)."""
    return hardware.tx_power_w * seconds
