"""Energy: computing on a CPU and transmitting on the uplink (Tan et al. 2025, Eqs. 11, 13)."""
from __future__ import annotations

from .clock import compute_time
from .devices import DeviceProfile

__all__ = ["cpu_energy", "compute_energy", "transmit_energy"]


def cpu_energy(energy_coeff, cpu_hz, seconds):
    """Tan et al. 2025, Eq. (13): E^Comp = zeta omega^3 tau^Comp, element-wise."""
    return energy_coeff * cpu_hz ** 3 * seconds


def compute_energy(device: DeviceProfile, flops: float) -> float:
    """Joules to compute ``flops`` on ``device``: Eq. (13) over its compute time."""
    return cpu_energy(device.energy_coeff, device.cpu_hz, compute_time(device, flops))


def transmit_energy(device: DeviceProfile, seconds: float) -> float:
    """Joules of transmitting for ``seconds`` at the device's power (Tan et al. 2025, Eq. 11)."""
    return device.tx_power_w * seconds
