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
from . import bits, clock, cost_model, devices, energy, flops, wireless
from .bits import *  # noqa: F401,F403
from .clock import *  # noqa: F401,F403
from .cost_model import *  # noqa: F401,F403
from .devices import *  # noqa: F401,F403
from .energy import *  # noqa: F401,F403
from .flops import *  # noqa: F401,F403
from .wireless import *  # noqa: F401,F403

__all__ = [*flops.__all__, *bits.__all__, *devices.__all__, *clock.__all__, *wireless.__all__,
           *energy.__all__, *cost_model.__all__]
