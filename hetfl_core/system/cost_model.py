"""The run's cost model: what a round costs each client in time and energy.

It is chosen by the run's configuration (``RunConfig.system``), never by the method, so
every method runs under either:

* ``"compute"`` - each client is a device of a heterogeneity tier with fixed link rates;
  a round costs download + compute + upload (:func:`~hetfl_core.system.client_time`), and
  the energy of computing and of transmitting at the device's power.
* ``"wireless"`` - Tan et al. 2025's cell (Sec. III, Table II): the clients share a band
  W by FDMA; each round redraws fading, transmit power and CPU frequency
  (:class:`~hetfl_core.system.WirelessCell`); a client's upload runs at the Shannon rate
  of its share (Eq. 7), computing at its CPU frequency (Eq. 12) and the energy is Eq. (11)
  + Eq. (13). The download is not charged (the paper's model has none). A tier of the
  run's heterogeneity scales the drawn CPU frequency. The band is split equally among the
  round's participants (``bandwidth_policy="equal"``), or to minimise the round's latency
  (``"min-time"``), unless the method's server policy sets each client's share in its plan
  (sparse-prune-pfl's DCA, Alg. 2).

A method may steer the model - set a client's bandwidth share, or run a client on another
device this round (``ClientPlan.bandwidth_share``, ``ClientPlan.device``) - and a method
whose client stops early may cap its time (``ClientReport.time_s``), but the engine
charges every method through the same functions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..streams import STREAMS
from .clock import client_time, transfer_time
from .devices import REFERENCE_DEVICE, DeviceProfile
from .energy import compute_energy, transmit_energy
from .wireless import WirelessCell, calibrate_cycles_per_sample, round_time_shares, shannon_rates

__all__ = ["SYSTEMS", "BANDWIDTH_POLICIES", "Charge", "CostModel", "ComputeCost", "WirelessCost", "compute_noise"]

#: the cost models a run can choose (``RunConfig.system``)
SYSTEMS = ("compute", "wireless")
#: how the wireless cell's band is split when the method does not split it
BANDWIDTH_POLICIES = ("equal", "min-time")


@dataclass(frozen=True)
class Charge:
    """What one client's round cost: the device it ran on, seconds, joules and (wireless)
    its share of the band."""

    device: DeviceProfile
    time_s: float
    energy_j: float
    share: float | None = None


class CostModel:
    """Charges each participant of a round (see the module docstring)."""

    name = ""

    def __init__(self, devices: list[DeviceProfile]):
        self.devices = devices

    def start_round(self, round_idx: int, client_ids: list[int]) -> None:
        """Draw the round's state (nothing for a static model)."""

    def device(self, client_id: int, share: float | None = None) -> DeviceProfile:
        """The client's device as it is this round."""
        return self.devices[client_id]

    def shares(self, jobs: list, reports: list) -> list:
        """Each participant's share of a shared band (``None``: the model has no shared band)."""
        return [None] * len(jobs)

    def compute_factor(self, client_id: int) -> float:
        """What this round's compute time of the client is scaled by (1: as profiled)."""
        return 1.0

    def charge(self, jobs: list, reports: list) -> list[Charge]:
        """The :class:`Charge` of each ``(client_id, plan)`` job given its report: download,
        compute and upload on the round's device (the plan's, if it names one), and the
        energy of computing and of transmitting the upload."""
        charges = []
        for (k, plan), report, share in zip(jobs, reports, self.shares(jobs, reports), strict=True):
            device = plan.device or self.device(k, share)
            seconds = report.time_s if report.time_s is not None else client_time(
                device, report.flops * self.compute_factor(k), report.uplink_bits, report.downlink_bits)
            joules = compute_energy(device, report.flops) + \
                transmit_energy(device, transfer_time(report.uplink_bits, device.uplink_bps))
            charges.append(Charge(device, seconds, joules, None if share is None else float(share)))
        return charges


def compute_noise(seed: int, time_noise: float, round_idx: int, client_id: int) -> float:
    """The factor on a client's compute time in a round: exactly 1 without ``time_noise``,
    else ``exp(s Z - s^2 / 2)`` with ``s = time_noise`` and ``Z ~ N(0, 1)`` drawn from
    ``(seed, STREAMS["time_noise"], round, client)``, a log-normal of mean 1 (devices whose iteration times
    fluctuate around their profile, as Heroes' testbed draws them)."""
    if not time_noise:
        return 1.0
    z = np.random.default_rng([seed, STREAMS["time_noise"], round_idx, client_id]).standard_normal()
    return math.exp(time_noise * z - time_noise * time_noise / 2)


class ComputeCost(CostModel):
    """Tiered devices with fixed link rates (``system="compute"``); with ``time_noise``
    each client's compute time in a round is scaled by :func:`compute_noise`."""

    name = "compute"

    def __init__(self, devices: list[DeviceProfile], *, seed: int = 0, time_noise: float = 0.0):
        super().__init__(devices)
        self.seed, self.time_noise, self.round_idx = seed, time_noise, 0

    def start_round(self, round_idx, client_ids):
        self.round_idx = round_idx

    def compute_factor(self, client_id):
        return compute_noise(self.seed, self.time_noise, self.round_idx, client_id)


class WirelessCost(CostModel):
    """Tan et al. 2025's wireless cell (``system="wireless"``).

    ``flops_per_sample`` is the training cost of one sample on the whole dense model, so
    that Eq. (12)'s cycles are ``flops x C / flops_per_sample``; C is calibrated on
    ``d_reference`` weights (the model's shared base in the paper's split) and ``batch``
    samples per round (:func:`~hetfl_core.system.calibrate_cycles_per_sample`).
    """

    name = "wireless"

    def __init__(self, devices, *, seed: int, bandwidth_hz, flops_per_sample: float, d_reference: int, batch: int,
                 policy: str = "equal"):
        super().__init__(devices)
        self.cell = WirelessCell(len(devices), seed, bandwidth_hz)
        self.cycles_per_sample = calibrate_cycles_per_sample(self.cell, d_reference, batch)
        self.flops_per_cycle = flops_per_sample / self.cycles_per_sample
        self.speed = [d.flops_per_s / REFERENCE_DEVICE.flops_per_s for d in devices]   # a tier scales the CPU
        self.policy = policy
        self.state = self.cell.mean_state()

    def start_round(self, round_idx, client_ids):
        """Draw the round's band, fading, power and CPU frequencies (one draw for every client)."""
        self.state = self.cell.draw()

    def cpu_hz(self, client_id: int) -> float:
        """omega_n this round (a slower tier scales it down)."""
        return float(self.state.cpu_hz[client_id]) * self.speed[client_id]

    def device(self, client_id, share=None):
        """The client this round: its CPU, power and the uplink rate of ``share`` of the band
        (the download is free: its rate is infinite, so it costs no time)."""
        state = self.state
        snr = state.gain[client_id] * state.tx_power_w[client_id] / (state.noise_psd * state.bandwidth_hz)
        rate = math.inf if share is None else float(shannon_rates(float(share), state.bandwidth_hz, snr))
        return DeviceProfile(self.devices[client_id].tier, flops_per_s=self.cpu_hz(client_id) * self.flops_per_cycle,
                             uplink_bps=rate, downlink_bps=math.inf, energy_coeff=self.cell.energy_coeff,
                             flops_per_cycle=self.flops_per_cycle, tx_power_w=float(self.state.tx_power_w[client_id]))

    def shares(self, jobs, reports) -> np.ndarray:
        """Each participant's share of the band: the plans' where the method set them, else the policy's."""
        planned = [plan.bandwidth_share for _, plan in jobs]
        if all(s is not None for s in planned):
            return np.array(planned, float)
        if self.policy == "equal" or any(s is not None for s in planned):
            free = 1.0 - sum(s for s in planned if s is not None)
            n_free = sum(s is None for s in planned)
            return np.array([free / n_free if s is None else s for s in planned], float)
        ids = [k for k, _ in jobs]
        compute_s = [r.flops / self.device(k).flops_per_s for k, r in zip(ids, reports)]
        return round_time_shares(self.state.snr[ids], self.state.bandwidth_hz,
                                 [r.uplink_bits for r in reports], compute_s)
