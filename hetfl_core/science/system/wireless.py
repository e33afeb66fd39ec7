"""The wireless uplink of a cell: path loss, channel gain and the Shannon rate
(Tan et al. 2025, Sec. III and Table II)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import lambertw

from ..errors import ConfigError
from ..streams import STREAMS
from .bits import topk_upload_bits
from .clock import compute_seconds

__all__ = ["NOISE_PSD", "path_loss_db", "dbm_to_watts", "channel_gain", "shannon_rate", "shannon_rates",
           "min_shares", "min_round_time", "round_time_shares", "CellState", "WirelessCell",
           "calibrate_cycles_per_sample"]

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
    """Uplink rate R = B log2(1 + p h / (N0 B)) in bit/s (Tan et al. 2025, Eq. 7 with B = l W):
    one client on the whole of a band ``bandwidth_hz`` (:meth:`CellState.rates`)."""
    if bandwidth_hz <= 0:
        return 0.0
    return float(CellState(bandwidth_hz, gain, tx_power_w, math.nan, noise_psd_w_per_hz).rates(1.0))


#: AWGN power spectral density, -174 dBm/Hz (Tan et al. 2025, Table II), in W/Hz.
NOISE_PSD = dbm_to_watts(-174.0)


def shannon_rates(share, bandwidth_hz: float, snr) -> np.ndarray:
    """Eq. (7) for many clients at once: l W log2(1 + a / l), with a = h p / (N0 W) each
    client's SNR on the whole band (0 bit/s at a zero share)."""
    share = np.asarray(share, float)
    a = np.asarray(snr, float).reshape((-1,) + (1,) * (share.ndim - 1)) if share.ndim else np.asarray(snr, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = share * bandwidth_hz * np.log2(1 + a / share)
    return np.where(share > 0, out, 0.0)


def min_shares(snr, bandwidth_hz: float, bits, seconds) -> np.ndarray:
    """The smallest share l_n with R_n(l_n) >= bits_n / seconds_n, in closed form.

    l W log2(1 + a / l) = c has, with y = 1 + a / l and q = c ln 2 / (a W), ln y = q (y - 1),
    whose root y > 1 is y = -W_{-1}(-q e^{-q}) / q (Lambert W, lower branch), so l = a / (y - 1).
    Clients that cannot make it even with the whole band get ``inf``.
    """
    a = np.asarray(snr, float)
    seconds = np.broadcast_to(np.asarray(seconds, float), a.shape)
    bits = np.broadcast_to(np.asarray(bits, float), a.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = bits / np.where(seconds > 0, seconds, np.nan) * math.log(2) / (a * bandwidth_hz)
        y = -np.real(lambertw(-q * np.exp(-q), -1)) / q
        share = a / (y - 1)
    ok = (seconds > 0) & (shannon_rates(np.ones(a.shape), bandwidth_hz, a) * seconds >= bits * (1 - 1e-12))
    return np.where(ok, np.minimum(share, 1.0), np.inf)


def min_round_time(snr, bandwidth_hz: float, bits, compute_s, iters: int = 60) -> float:
    """The shortest synchronous round when the band is split to suit it: the smallest T
    with sum_n min_share_n(bits_n, T - compute_n) <= 1 (bisection on T)."""
    comp = np.broadcast_to(np.asarray(compute_s, float), np.shape(snr))
    lo = float(comp.max())
    hi = lo + 1.0
    while np.sum(min_shares(snr, bandwidth_hz, bits, hi - comp)) > 1:
        hi = lo + 2 * (hi - lo)
    for _ in range(iters):
        mid = (lo + hi) / 2
        if np.sum(min_shares(snr, bandwidth_hz, bits, mid - comp)) > 1:
            lo = mid
        else:
            hi = mid
    return hi


def round_time_shares(snr, bandwidth_hz: float, bits, compute_s) -> np.ndarray:
    """Bandwidth shares that minimise the round's latency (the slowest client's compute plus
    upload): the shares at :func:`min_round_time`, the spare band spread in proportion."""
    comp = np.broadcast_to(np.asarray(compute_s, float), np.shape(snr))
    if not np.any(np.asarray(bits, float) > 0):
        return np.full(np.shape(snr), 1.0 / max(1, np.size(snr)))
    shares = min_shares(snr, bandwidth_hz, bits, min_round_time(snr, bandwidth_hz, bits, comp) - comp)
    return shares / shares.sum()


@dataclass(frozen=True)
class CellState:
    """One round of the cell: the band W, and per client the channel gain h (path loss
    times fading), transmit power p and CPU frequency omega."""

    bandwidth_hz: float
    gain: np.ndarray
    tx_power_w: np.ndarray
    cpu_hz: np.ndarray
    noise_psd: float = NOISE_PSD

    @property
    def snr(self) -> np.ndarray:
        """a_n = h_n p_n / (N0 W): the SNR a client would have on the whole band (Eq. 7 at l = 1)."""
        return self.gain * self.tx_power_w / (self.noise_psd * self.bandwidth_hz)

    def rates(self, share) -> np.ndarray:
        """Eq. (7) for every client at its bandwidth share l_n (a number, one per client, or
        a row of shares per client): :func:`shannon_rates` of :attr:`snr`."""
        return shannon_rates(np.asarray(share, float), self.bandwidth_hz, self.snr)

    def subset(self, idx) -> CellState:
        """The same round for the clients ``idx`` only."""
        return CellState(self.bandwidth_hz, self.gain[idx], self.tx_power_w[idx], self.cpu_hz[idx], self.noise_psd)


class WirelessCell:
    """Tan et al. 2025's cell (Sec. III, Table II), one :class:`CellState` per round.

    Clients sit uniformly in a disc of ``radius_m`` (at least ``min_distance_m`` from the
    base station) for the whole run; every round redraws Rayleigh fading (Exp(1) power
    gain), transmit power U[20, 28] dBm and CPU frequency U[0.5, 3] GHz. ``bandwidth_hz``
    is a number or a ``(low, high)`` range drawn uniformly per round (dynamic bandwidth).
    """

    def __init__(self, n_clients: int, seed: int, bandwidth_hz=2e6, *, radius_m: float = 200.0,
                 min_distance_m: float = 10.0, power_dbm=(20.0, 28.0), cpu_hz=(0.5e9, 3.0e9),
                 energy_coeff: float = 1e-28):
        self.n = int(n_clients)
        place = np.random.default_rng([seed, STREAMS["cell"], 0])
        distance = np.maximum(radius_m * np.sqrt(place.random(self.n)), min_distance_m)
        self.path_gain = np.array([channel_gain(m / 1000) for m in distance])
        self.bandwidth, self.power_dbm, self.cpu_range = bandwidth_hz, power_dbm, cpu_hz
        self.energy_coeff = energy_coeff
        self.rng = np.random.default_rng([seed, STREAMS["cell"], 2])

    def mean_state(self) -> CellState:
        """The cell without fading, at the mean power, CPU and band."""
        return CellState(float(np.mean(self.bandwidth)), self.path_gain,
                         np.full(self.n, dbm_to_watts(float(np.mean(self.power_dbm)))),
                         np.full(self.n, float(np.mean(self.cpu_range))))

    def draw(self, rng: np.random.Generator | None = None) -> CellState:
        """The next round's band (if dynamic), fading, power and CPU (from ``rng`` if given,
        else the cell's own stream)."""
        rng = self.rng if rng is None else rng
        band = rng.uniform(*self.bandwidth) if np.ndim(self.bandwidth) else self.bandwidth
        fading = rng.exponential(1.0, self.n)
        power = np.array([dbm_to_watts(x) for x in rng.uniform(*self.power_dbm, self.n)])
        cpu = rng.uniform(*self.cpu_range, self.n)
        return CellState(float(band), self.path_gain * fading, power, cpu)


def calibrate_cycles_per_sample(cell: WirelessCell, d_reference: int, batch: int,
                                value_bits: int = 32) -> float:
    """The CPU constant C of Tan et al. 2025's Eq. (12) (cycles per sample for the whole
    model) that makes the median compute time of a dense round equal the median upload
    time of ``d_reference`` values at k = 1 (Eq. 9) over equal shares of the mean channel.

    Table II's C belongs to the paper's hardware; the book calibrates it so that computing
    and uploading both matter, as they do in the paper's figures."""
    if d_reference <= 0:
        raise ConfigError(f"the calibration base must hold at least one weight, got {d_reference}")
    mean = cell.mean_state()
    comm = topk_upload_bits(1.0, d_reference, value_bits) / mean.rates(np.full(cell.n, 1 / cell.n))
    comp_per_cycle = compute_seconds(batch, mean.cpu_hz)    # Eq. (12) at C = 1, the whole model
    return float(np.median(comm) / np.median(comp_per_cycle))
