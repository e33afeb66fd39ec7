"""Time: compute time plus transfer time, and the synchronous round that waits for its
slowest participant."""
from __future__ import annotations

from .hardware import HardwareProfile

__all__ = ["compute_seconds", "compute_time", "transfer_time", "client_time", "round_time"]


def compute_seconds(work, speed, computed=1, total=1):
    """Tan et al. 2025, Eq. (12): tau^Comp = b C (d_B + r d_P) / (omega d), element-wise.

    ``work`` is b C cycles (or FLOPs) for the whole model, ``speed`` omega Hz (or FLOP/s),
    and ``computed`` of ``total`` parameters are computed on (d_B + r d_P of d)."""
    return work * computed / (speed * total)


def compute_time(hardware: HardwareProfile, flops: float) -> float:
    """Seconds to compute ``flops`` on ``hardware`` (:func:`compute_seconds` at its FLOP/s)."""
    return compute_seconds(flops, hardware.flops_per_s)


def transfer_time(bits: float, rate_bps: float) -> float:
    """Seconds to send ``bits`` at ``rate_bps``."""
    return bits / rate_bps if bits else 0.0


def client_time(hardware: HardwareProfile, flops: float, uplink_bits: float, downlink_bits: float) -> float:
    """A client's round: download, compute, upload (FLOPs / capacity + bits / bandwidth)."""
    return (transfer_time(downlink_bits, hardware.downlink_bps) + compute_time(hardware, flops)
            + transfer_time(uplink_bits, hardware.uplink_bps))


def round_time(client_times) -> float:
    """A synchronous round ends when its slowest participant is done (0 without participants)."""
    return max(client_times, default=0.0)
