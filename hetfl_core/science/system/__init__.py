"""The system model shared by every method: FLOPs, bits, the clients' hardware, time, the wireless cell
and energy, one function per formula, and the run's cost model built from them.

* :mod:`~hetfl_core.science.system.flops`, :mod:`~hetfl_core.science.system.bits` - what a round computes and sends;
* :mod:`~hetfl_core.science.system.hardware` - :class:`HardwareProfile`, the tiers, :func:`capability`;
* :mod:`~hetfl_core.science.system.clock` - compute time (Eq. 12), transfer time and the synchronous round;
* :mod:`~hetfl_core.science.system.wireless` - the cell's Shannon rates (Eq. 7) and bandwidth-share solvers;
* :mod:`~hetfl_core.science.system.energy` - computing (Eq. 13) and transmitting (Eq. 11);
* :mod:`~hetfl_core.science.system.cost_model` - ``"compute"`` and ``"wireless"``: what a round
  costs each client, chosen by the run's configuration.
"""
from . import bits, clock, cost_model, energy, flops, hardware, wireless
from .bits import *  # noqa: F401,F403
from .clock import *  # noqa: F401,F403
from .cost_model import *  # noqa: F401,F403
from .energy import *  # noqa: F401,F403
from .flops import *  # noqa: F401,F403
from .hardware import *  # noqa: F401,F403
from .wireless import *  # noqa: F401,F403

__all__ = [*flops.__all__, *bits.__all__, *hardware.__all__, *clock.__all__, *wireless.__all__,
           *energy.__all__, *cost_model.__all__]
