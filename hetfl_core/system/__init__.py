"""The system model shared by every method: FLOPs, bits, devices, time, the wireless cell
and energy, one function per formula, and the run's cost model built from them.

* :mod:`~hetfl_core.system.flops` - :func:`forward_flops`, :func:`training_flops`;
* :mod:`~hetfl_core.system.bits` - :func:`dense_bits`, :func:`sparse_bits`, :func:`index_bits`,
  :func:`topk_upload_bits`;
* :mod:`~hetfl_core.system.devices` - :class:`DeviceProfile`, the tiers, :func:`capability`;
* :mod:`~hetfl_core.system.clock` - :func:`compute_seconds` (Eq. 12), :func:`client_time`,
  :func:`round_time`;
* :mod:`~hetfl_core.system.wireless` - :func:`shannon_rate`, :class:`WirelessCell`, the
  bandwidth-share solvers;
* :mod:`~hetfl_core.system.energy` - :func:`cpu_energy` (Eq. 13), :func:`compute_energy`,
  :func:`transmit_energy`;
* :mod:`~hetfl_core.system.cost_model` - ``"compute"`` and ``"wireless"``: what a round
  costs each client, chosen by the run's configuration.
"""
from .bits import FLOAT_BITS, dense_bits, index_bits, sparse_bits, topk_upload_bits
from .clock import client_time, compute_seconds, compute_time, round_time, transfer_time
from .cost_model import BANDWIDTH_POLICIES, SYSTEMS, Charge, ComputeCost, CostModel, WirelessCost, compute_noise
from .devices import HETEROGENEITY, REFERENCE_DEVICE, DeviceProfile, capability, make_devices
from .energy import compute_energy, cpu_energy, transmit_energy
from .flops import LayerCost, forward_flops, profile_model, training_flops
from .wireless import (NOISE_PSD, CellState, WirelessCell, calibrate_cycles_per_sample, channel_gain, dbm_to_watts,
                       min_round_time, min_shares, path_loss_db, round_time_shares, shannon_rate, shannon_rates)

__all__ = [
    "LayerCost", "profile_model", "forward_flops", "training_flops", "FLOAT_BITS", "dense_bits",
    "index_bits", "sparse_bits", "topk_upload_bits", "DeviceProfile", "REFERENCE_DEVICE", "HETEROGENEITY",
    "make_devices", "capability", "compute_seconds", "compute_time", "transfer_time", "client_time", "round_time",
    "path_loss_db", "dbm_to_watts", "channel_gain", "shannon_rate", "shannon_rates", "min_shares",
    "min_round_time", "round_time_shares", "NOISE_PSD", "CellState", "WirelessCell",
    "calibrate_cycles_per_sample", "cpu_energy", "compute_energy", "transmit_energy", "SYSTEMS", "BANDWIDTH_POLICIES",
    "Charge", "CostModel", "ComputeCost", "WirelessCost", "compute_noise",
]
