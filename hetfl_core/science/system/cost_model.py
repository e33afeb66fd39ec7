"""The run's cost model: what a round costs each client in time and energy.

It is chosen by the run's configuration (``RunConfig.system``), never by the method:

* ``"compute"`` - each client's hardware is of a heterogeneity tier with fixed link rates;
  a round costs download + compute + upload (:func:`~hetfl_core.science.system.client_time`), and
  the energy of computing and of transmitting at the hardware's power.
* ``"wireless"`` - Tan et al. 2025's cell (Sec. III, Table II), :class:`WirelessCost`: the
  upload runs at the Shannon rate of the client's share of the band (Eq. 7), computing at
  its CPU frequency (Eq. 12), the energy is Eq. (11) + Eq. (13), and the download is not
  charged (the paper's model has none).

A method may set a client's bandwidth share or run a client on other hardware this round
(``ClientPlan.bandwidth_share``, ``ClientPlan.hardware``), and a method whose client stops
early may cap its time (``ClientReport.time_s``), but the engine charges every method
through the same functions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from ..models import build_model
from ..personalization import paper_split, split_parameter_names
from ..streams import STREAMS
from .clock import client_time, compute_time, transfer_time
from .hardware import REFERENCE_HARDWARE, HardwareProfile
from .energy import compute_energy, transmit_energy
from .flops import profile_model, training_flops
from .wireless import CellState, WirelessCell, calibrate_cycles_per_sample, round_time_shares, shannon_rates

__all__ = ["SYSTEMS", "BANDWIDTH_POLICIES", "Charge", "CostModel", "ComputeCost", "WirelessCost", "compute_noise"]

#: how the wireless cell's band is split when the method does not split it
BANDWIDTH_POLICIES = ("equal", "min-time")


@dataclass(frozen=True)
class Charge:
    """What one client's round cost: the hardware it ran on, seconds, joules and (wireless)
    its share of the band."""

    hardware: HardwareProfile
    time_s: float
    energy_j: float
    share: float | None = None


class CostModel:
    """Charges each participant of a round (see the module docstring)."""

    def __init__(self, hardware: list[HardwareProfile]):
        self.hardware = hardware

    def start_round(self, round_idx: int, client_ids: list[int]) -> None:
        """Draw the round's state (nothing for a static model)."""

    def hardware_of(self, client_id: int, share: float | None = None) -> HardwareProfile:
        """The client's hardware as it is this round."""
        return self.hardware[client_id]

    def shares(self, jobs: list, reports: list) -> list:
        """Each participant's share of a shared band (``None``: the model has no shared band)."""
        return [None] * len(jobs)

    def compute_factor(self, client_id: int) -> float:
        """What this round's compute time of the client is scaled by (1: as profiled)."""
        return 1.0

    def charge(self, jobs: list, reports: list) -> list[Charge]:
        """The :class:`Charge` of each ``(client_id, plan)`` job given its report: download,
        compute and upload on the round's hardware (the plan's, if it names one), and the
        energy of computing and of transmitting the upload."""
        charges = []
        for (k, plan), report, share in zip(jobs, reports, self.shares(jobs, reports), strict=True):
            hardware = plan.hardware or self.hardware_of(k, share)
            seconds = report.time_s if report.time_s is not None else client_time(
                hardware, report.flops * self.compute_factor(k), report.uplink_bits, report.downlink_bits)
            joules = compute_energy(hardware, report.flops) + \
                transmit_energy(hardware, transfer_time(report.uplink_bits, hardware.uplink_bps))
            charges.append(Charge(hardware, seconds, joules, None if share is None else float(share)))
        return charges


def compute_noise(seed: int, time_noise: float, round_idx: int, client_id: int) -> float:
    """The factor on a client's compute time in a round: exactly 1 without ``time_noise``,
    else ``exp(s Z - s^2 / 2)`` with ``s = time_noise`` and ``Z ~ N(0, 1)`` drawn from
    ``(seed, STREAMS["time_noise"], round, client)``, a log-normal of mean 1 (hardware whose iteration times
    fluctuate around their profile, as Heroes' testbed draws them)."""
    if not time_noise:
        return 1.0
    z = np.random.default_rng([seed, STREAMS["time_noise"], round_idx, client_id]).standard_normal()
    return math.exp(time_noise * z - time_noise * time_noise / 2)


class ComputeCost(CostModel):
    """Tiered hardware with fixed link rates (``system="compute"``); with ``time_noise``
    each client's compute time in a round is scaled by :func:`compute_noise`."""

    def __init__(self, hardware: list[HardwareProfile], *, seed: int = 0, time_noise: float = 0.0):
        super().__init__(hardware)
        self.seed, self.time_noise, self.round_idx = seed, time_noise, 0

    @classmethod
    def from_run(cls, config, data, method) -> ComputeCost:
        """The run's tiered hardware (``method.hardware``) with its seed and ``time_noise``."""
        return cls(method.hardware, seed=config.seed, time_noise=config.time_noise)

    def start_round(self, round_idx, client_ids):
        self.round_idx = round_idx

    def compute_factor(self, client_id):
        return compute_noise(self.seed, self.time_noise, self.round_idx, client_id)


class WirelessCost(CostModel):
    """Tan et al. 2025's wireless cell (``system="wireless"``): the clients share a band W
    by FDMA; each round redraws fading, transmit power and CPU frequency
    (:class:`~hetfl_core.science.system.WirelessCell`), and a tier of the run's heterogeneity scales
    the drawn CPU frequency. The band is split equally among the round's participants
    (``policy="equal"``), or to minimise the round's latency (``"min-time"``), unless the
    method's plans set each client's share (sparse-prune-pfl's DCA, Alg. 2).

    ``flops_per_sample`` is the training cost of one sample on the whole dense model, so
    that Eq. (12)'s cycles are ``flops x C / flops_per_sample``; C is calibrated on
    ``d_reference`` weights (the model's shared base in the paper's split) and ``batch``
    samples per round (:func:`~hetfl_core.science.system.calibrate_cycles_per_sample`). ``state``
    is the round's draw of the cell with each CPU frequency scaled by its client's tier.
    """

    def __init__(self, hardware, *, seed: int, bandwidth_hz, flops_per_sample: float, d_reference: int, batch: int,
                 policy: str = "equal"):
        super().__init__(hardware)
        self.cell = WirelessCell(len(hardware), seed, bandwidth_hz)
        self.cycles_per_sample = calibrate_cycles_per_sample(self.cell, d_reference, batch)
        self.flops_per_cycle = flops_per_sample / self.cycles_per_sample
        self.speed = np.array([d.flops_per_s / REFERENCE_HARDWARE.flops_per_s for d in hardware])  # a tier scales the CPU
        self.policy = policy
        self.state = self.tiered(self.cell.mean_state())

    @classmethod
    def from_run(cls, config, data, method) -> WirelessCost:
        """The cell of a run: its band (``bandwidth_mhz``, a range up to ``bandwidth_high_mhz``,
        else 0.1 MHz per client, Sec. VI), and C calibrated on the plain architecture of
        ``config.model`` - the shared base of the paper's split (Sec. V), its training FLOPs
        per sample, and the samples the largest client computes per round under ``method``."""
        band = 0.1e6 * config.clients if config.bandwidth_mhz is None else config.bandwidth_mhz * 1e6
        if config.bandwidth_high_mhz is not None:
            band = (band, config.bandwidth_high_mhz * 1e6)
        with torch.random.fork_rng():      # the plain architecture (a method may train another, e.g. composed)
            plain = build_model(config.model, data.input_shape, data.num_classes)
        params = dict(plain.named_parameters())
        reference = split_parameter_names(plain, paper_split(config.model, plain))
        batch = method.local_steps(max(data.clients, key=lambda c: c.n_train)) * config.batch_size
        flops_per_sample = training_flops(profile_model(plain, data.input_shape, dtype=data.dataset.x_train.dtype), 1)
        return cls(method.hardware, seed=config.seed, bandwidth_hz=band, flops_per_sample=flops_per_sample,
                   d_reference=sum(params[n].numel() for n in reference), batch=batch, policy=config.bandwidth_policy)

    def tiered(self, state: CellState) -> CellState:
        """``state`` with each client's CPU frequency scaled by its tier."""
        return replace(state, cpu_hz=state.cpu_hz * self.speed)

    def start_round(self, round_idx, client_ids):
        """Draw the round's band, fading, power and CPU frequencies (one draw for every client)."""
        self.state = self.tiered(self.cell.draw())

    def cpu_hz(self, client_id: int) -> float:
        """omega_n this round (a slower tier scales it down)."""
        return float(self.state.cpu_hz[client_id])

    def hardware_of(self, client_id, share=None):
        """The client this round: its CPU, power and the uplink rate of ``share`` of the band
        (the download is free: its rate is infinite, so it costs no time)."""
        state = self.state
        rate = math.inf if share is None else float(shannon_rates(float(share), state.bandwidth_hz,
                                                                  state.snr[client_id]))
        return HardwareProfile(self.hardware[client_id].tier, flops_per_s=self.cpu_hz(client_id) * self.flops_per_cycle,
                             uplink_bps=rate, downlink_bps=math.inf, energy_coeff=self.cell.energy_coeff,
                             flops_per_cycle=self.flops_per_cycle, tx_power_w=float(state.tx_power_w[client_id]))

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
        compute_s = [compute_time(self.hardware_of(k), r.flops) for k, r in zip(ids, reports)]
        return round_time_shares(self.state.snr[ids], self.state.bandwidth_hz,
                                 [r.uplink_bits for r in reports], compute_s)


#: the cost models a run can choose (``RunConfig.system``), each built by its ``from_run``
SYSTEMS = {"compute": ComputeCost, "wireless": WirelessCost}
