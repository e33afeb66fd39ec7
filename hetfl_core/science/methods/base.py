"""The method plug-in (:class:`Method`, hooks named after the steps of the papers'
pseudocode, in the spirit of Flower's ``Strategy``) and the registry that names the methods
(:func:`register`; ``python -m hetfl_core list`` prints it)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from ..devices import resolve_device
from ..errors import ConfigError
from ..models import build_model
from ..options import Option
from ..system import CostModel, HardwareProfile, profile_model
from ..training import multistep_factor, run_step, steps_for_epochs

if TYPE_CHECKING:
    from ..composition import Selection
    from ...runtime.config import RunConfig
    from ..data import ClientData, FederatedData
    from ...runtime.engine import Simulation

__all__ = ["ClientPlan", "ClientReport", "Method", "client_entries", "layers_of", "seeded_generator", "METHODS", "register", "get_method"]

#: name -> method class, filled by :func:`register` as the method files are imported
METHODS: dict[str, type] = {}


def register(cls=None, *, replace: bool = False):
    """Class decorator: make a :class:`Method` runnable by its ``name`` (``@register``, or
    ``@register(replace=True)``).

    A name taken by another class is refused (a plug-in must not silently stand in for a
    built-in method, whose cached runs it would be served) unless ``replace=True``; a class
    defined again in the same module under the same qualified name (a notebook cell run
    again, a reloaded plug-in) replaces its earlier self.
    """
    if cls is None:
        return lambda klass: register(klass, replace=replace)
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{cls.__qualname__} needs a non-empty string 'name' to be registered, "
                          f"got {name!r}")
    old = METHODS.get(name)
    where = (cls.__module__, cls.__qualname__)
    redefined = old is not None and (old.__module__, old.__qualname__) == where
    if old is not None and old is not cls and not redefined and not replace:
        raise ConfigError(f"method name {name!r} is taken by {old.__module__}.{old.__qualname__}; "
                          f"give {'.'.join(where)} another name (or register(replace=True))")
    METHODS[name] = cls
    return cls


def get_method(name: str):
    """The method class registered as ``name``, or :class:`ConfigError`."""
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; choose one of: {', '.join(sorted(METHODS))}")
    return METHODS[name]


@dataclass
class ClientPlan:
    """What the server asks of one client this round."""

    local_steps: int
    width: float = 1.0   # fraction of hidden units the client trains
    ratio: float = 1.0   # fraction of weights the client keeps (density)
    extra: dict = field(default_factory=dict)
    bandwidth_share: float | None = None   # the client's share of a wireless band (None: the cost model's)
    hardware: HardwareProfile | None = None    # the hardware the client runs on this round (None: its own)


@dataclass
class ClientReport:
    """What a client did and sent back, every field after ``n_samples`` by keyword.

    What it sends, each part typed and ``None`` where the method sends none of it:
    ``weights``, model entries by parameter name in the global model's shapes (its trained
    state, a part of it, or the change from the global model); ``held``, per entry of
    ``weights`` where (1) or how much the client holds it (a sub-model's or a mask's cover;
    ``None``: every entry whole); ``vector``, one flat vector over the model's parameters
    in place of ``weights`` (a sparsified change); ``importance``, per-parameter scores the
    server reshapes the model by (PruneFL's squared gradients); ``selection``, the part of
    a composed model the client trained (Heroes'
    :class:`~hetfl_core.science.composition.Selection`).

    What it did: its training ``loss``, ``flops``, the bits it received and sent,
    ``local_steps``, the ``width`` or ``ratio`` of its model, and ``extra`` (the method's
    own per-client values, recorded in the history). ``time_s`` is left ``None`` for the
    run's cost model to charge, or capped by a method whose client stops early (SRP-pFed's
    semi-asynchronous window)."""

    client_id: int
    n_samples: int
    _: KW_ONLY
    loss: float
    flops: float
    uplink_bits: float
    downlink_bits: float
    local_steps: int
    weights: dict[str, torch.Tensor] | None = None
    held: dict[str, torch.Tensor] | None = None
    vector: torch.Tensor | None = None
    importance: dict[str, torch.Tensor] | None = None
    selection: Selection | None = None
    width: float = 1.0
    ratio: float = 1.0
    extra: dict = field(default_factory=dict)
    time_s: float | None = None


def layers_of(module) -> tuple[type, ...]:
    """The :class:`torch.nn.Module` classes ``module`` defines (for a method's ``state_types``)."""
    return tuple(value for value in vars(module).values() if isinstance(value, type)
                 and issubclass(value, nn.Module) and value.__module__ == module.__name__)


def client_entries(container) -> dict:
    """The dict keyed by client id of a :attr:`Method.client_state` attribute: the attribute
    itself, or its ``clients``."""
    return container if isinstance(container, dict) else container.clients


def seeded_generator(*keys: int) -> torch.Generator:
    """A torch generator seeded from a tuple of integers (run seed, round, client, ...)."""
    seed = int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1)[0])
    return torch.Generator().manual_seed(seed)


#: the class facts a subclass does not inherit, and their defaults (``label``: the ``name``)
NOT_INHERITED = {"label": None, "color": None, "marker": "o", "reads_hardware_tiers": True}


class Method(ABC):
    """Base class of every federated method.

    :meth:`client_step` and :meth:`aggregate` are abstract; the other hooks default to
    the plain round (full model, E local epochs, the global model scored for everyone).
    :class:`~hetfl_core.science.methods.fedavg.FedAvg` implements the two, and most methods
    subclass it and override what their paper changes. A method names itself in its class
    keywords, ``class FedAvg(Method, name="fedavg", label="FedAvg",
    color="#1f77b4", marker="o", reads_hardware_tiers=False)`` (or as class attributes; these
    facts are the method's own, not inherited), and gives a docstring whose first line is its ``summary`` (what
    ``list`` shows) and ``option_specs`` (each option an :class:`~hetfl_core.science.options.Option`;
    a plug-in may give ``defaults`` alone, its options then typed like their defaults).

    The constructor draws the initial global model w^0; :meth:`setup` then builds the
    method's own state from the built run before round 1.
    """

    name = "method"
    #: the name in tables, legends and text ("LG-FedAvg"); default: ``name``
    label = ""
    summary = ""
    option_specs: dict[str, Option] = {}
    defaults: dict = {}
    #: the cost model the method runs under unless the config names one
    default_system = "compute"
    #: options that blow local SGD up when too large (a proximal coefficient), named by the
    #: message of a non-finite loss
    step_like_options: tuple[str, ...] = ()
    #: the figures' colour (hex) and marker (matplotlib's) for the method
    #: (:func:`hetfl_core.book.plots.method_style`); never inherited: a subclass is another method
    #: and draws in its own (none: a spare colour picked by its name)
    color: str | None = None
    marker = "o"
    #: whether the method's training reads the clients' hardware tiers (to size sub-models,
    #: capacities or an allocation); ``False`` says its accuracy is the same at every
    #: heterogeneity level and only its costs change (the arena runs it once). Never
    #: inherited: a subclass that does not declare it counts as reading them
    reads_hardware_tiers = True
    #: the classes besides tensors and plain data that the state a Flower node receives
    #: holds (the shared state or a client's own, not ``server_state``), which a Flower
    #: message may therefore carry (:func:`hetfl_core.runtime.flower.shipped_types`); inherited
    state_types: tuple = ()
    #: the attributes that hold each client's own state, each a dict keyed by client id or an
    #: object whose ``clients`` attribute is one (a :class:`~hetfl_core.science.personalization.PrivateStore`):
    #: personal heads, masks, scores. A client's step receives its own entries as its
    #: ``state`` and returns them (:meth:`client_state_of`, :meth:`set_client_state`), and a
    #: Flower node receives and sends back only those; inherited
    client_state: tuple[str, ...] = ()
    #: the attributes only the server reads (bandit statistics, every client's width or
    #: ratio; the cost model always): a Flower node receives ``None`` in their place; inherited
    server_state: tuple[str, ...] = ()

    @classmethod
    def arena_options(cls, config) -> dict:
        """The options the method runs with in the arena (:mod:`hetfl_core.book.arena`), where
        its defaults do not fit the arena's run of ``config`` (a schedule tied to the
        paper's rounds, a split for another model); none by default."""
        return {}

    def __init_subclass__(cls, name: str | None = None, label: str | None = None,
                          color: str | None = None,
                          marker: str | None = None, reads_hardware_tiers: bool | None = None, **kwargs):
        """Take the class keywords, reset the facts a subclass does not inherit
        (:data:`NOT_INHERITED`) unless the class gives them, derive ``defaults`` from
        ``option_specs`` (or specs from ``defaults``) and ``summary`` from the docstring."""
        super().__init_subclass__(**kwargs)
        given = {"name": name, "label": label, "color": color, "marker": marker,
                 "reads_hardware_tiers": reads_hardware_tiers}
        for key, value in given.items():
            if value is not None:
                if key in cls.__dict__:
                    raise TypeError(f"{cls.__qualname__} gives {key} twice, as a class keyword and in its body")
                setattr(cls, key, value)
        for key, default in NOT_INHERITED.items():   # a subclass is another method
            if key not in cls.__dict__:
                setattr(cls, key, cls.name if key == "label" else default)
        if "summary" not in cls.__dict__:
            cls.summary = (cls.__dict__.get("__doc__") or "").strip().split("\n", 1)[0]
        if "option_specs" in cls.__dict__:
            cls.defaults = {key: spec.default for key, spec in cls.option_specs.items()}
        elif "defaults" in cls.__dict__:
            cls.option_specs = {key: Option(value) for key, value in cls.defaults.items()}

    def __init__(self, config: RunConfig, data: FederatedData, hardware: list[HardwareProfile]):
        """Store the run's parameters and draw w^0 from the torch seed the engine has just set."""
        self.config = config
        self.options = {**self.defaults, **config.options}
        self.data = data
        self.hardware = hardware          # each client's simulated hardware
        self.device = resolve_device(config.device)   # the torch device the run computes on
        self.cost_model: CostModel | None = None   # the run's, from :meth:`setup`
        #: the learning rate of the round in progress (:meth:`lr_at`, set by the engine)
        self.round_lr = config.lr
        #: the SGD momentum of local training (the run's, unless the method's code fixes another)
        self.round_momentum = config.momentum
        self.model = self.build_model()
        self.costs = profile_model(self.model, data.input_shape, dtype=data.dataset.x_train.dtype)

    @property
    def devices(self) -> list[HardwareProfile]:
        """The earlier name of :attr:`hardware`, kept for plug-ins written against it."""
        return self.hardware

    def setup(self, sim: Simulation) -> None:
        """Build the method's state for the built run ``sim`` (a
        :class:`~hetfl_core.runtime.engine.Simulation`) once, before round 1, after
        ``super().setup(sim)``, which takes the run's cost model."""
        self.cost_model = sim.cost_model

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """Reject a config the method cannot run (default: check its options)."""
        cls.check_options(config.options)

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Reject unknown options and values their declarations refuse."""
        unknown = set(options) - set(cls.defaults)
        if unknown:
            known = ", ".join(cls.defaults) or "none"
            raise ConfigError(f"{cls.name} has no option {', '.join(sorted(unknown))} (its options: {known})")
        for key, value in options.items():
            cls.option_specs[key].check(key, value)

    def build_model(self, width: float = 1.0) -> nn.Module:
        """The run's model architecture at ``width``, on the run's device."""
        return build_model(self.config.model, self.data.input_shape, self.data.num_classes,
                           width=width).to(self.device)

    def lr_at(self, round_idx: int) -> float:
        """The learning rate of round ``round_idx`` (default: the run's ``lr`` throughout; a
        method with an ``lr_milestones`` option multiplies it by ``lr_gamma`` after each
        milestone round, a ``MultiStepLR`` stepped once per round)."""
        milestones = self.options.get("lr_milestones") or ()
        if not milestones:
            return self.config.lr
        return self.config.lr * multistep_factor(round_idx, milestones, float(self.options.get("lr_gamma", 0.1)))

    def local_steps(self, client: ClientData) -> int:
        """Local steps for ``client``: ``local_steps`` if set, else ``local_epochs`` epochs;
        with the method's ``drop_last`` option none for a client smaller than a batch, and
        floor(n / B) per epoch otherwise (:func:`~hetfl_core.science.training.steps_for_epochs`)."""
        drop_last = bool(self.options.get("drop_last", False))
        if self.config.local_steps is not None:
            return 0 if drop_last and client.n_train < self.config.batch_size else self.config.local_steps
        return steps_for_epochs(client.n_train, self.config.batch_size, self.config.local_epochs, drop_last)

    def configure_round(self, round_idx: int, client_ids: list[int]) -> dict[int, ClientPlan]:
        """Server: each sampled client's plan (default: full model, E local epochs); a client
        left out of the plans sits the round out."""
        return {k: ClientPlan(self.local_steps(self.data.clients[k])) for k in client_ids}

    @abstractmethod
    def client_step(self, client: ClientData, plan: ClientPlan, state: dict, generator: torch.Generator):
        """Client: train locally and return the report of the update and its costs, and the
        client's new state: ``return report, state``.

        ``state`` is the client's own state (:meth:`client_state_of`: its entry of each
        :attr:`client_state` attribute, by name), the only per-client state a step reads;
        the engine keeps what it returns (:meth:`set_client_state`). The step hands its
        training to the engine: ``result = yield LocalSGD(...)`` (a
        :class:`~hetfl_core.science.training.LocalSGD`; :meth:`FedAvg.local_sgd
        <hetfl_core.science.methods.fedavg.FedAvg.local_sgd>` builds one with the run's optimiser
        settings) gives back the :class:`~hetfl_core.science.training.LocalResult` once the engine
        has run it, alone or batched with the round's other clients; a step may yield
        several phases, and one that trains by itself may return its report without
        yielding. ``generator`` draws the client's minibatches.
        """

    def client_update(self, client: ClientData, plan: ClientPlan, generator: torch.Generator) -> ClientReport:
        """The client's :meth:`client_step` run here to its report, its phases one after
        another (:func:`~hetfl_core.science.training.run_step`), from the client's state and its
        new state kept: the sequential engine's and a Flower node's way to train one
        client."""
        k = client.client_id
        report, state = run_step(self.client_step(client, plan, self.client_state_of(k), generator))
        self.set_client_state(k, state)
        return report

    @abstractmethod
    def aggregate(self, round_idx: int, reports: list[ClientReport]) -> None:
        """Server: fold the reports into the global state."""

    def client_state_of(self, client_id: int) -> dict:
        """Client ``client_id``'s own state: its entry of each :attr:`client_state` attribute
        that has one, by attribute name."""
        return {name: entries[client_id] for name in self.client_state
                if client_id in (entries := client_entries(getattr(self, name)))}

    def set_client_state(self, client_id: int, state: dict) -> None:
        """Make ``state`` (as :meth:`client_state_of` gives it) client ``client_id``'s own
        state: an attribute ``state`` leaves out loses the client's entry."""
        for name in self.client_state:
            entries = client_entries(getattr(self, name))
            if name in state:
                entries[client_id] = state[name]
            else:
                entries.pop(client_id, None)

    def global_model(self) -> nn.Module | None:
        """The model scored on the global test set (``None`` if the method has none)."""
        return self.model

    def personal_model(self, client_id: int) -> nn.Module:
        """The model client ``client_id`` would use on its own data."""
        return self.model

    def extra_metrics(self) -> dict:
        """Method-specific scores of the global model, added to each history row that scores it."""
        return {}

    @classmethod
    def planned_metrics(cls, config, acc: float) -> dict:
        """The shape of :meth:`extra_metrics` for plan mode's stand-in result
        (:func:`hetfl_core.book.planned_result`), every score ``acc``: a chapter's cell reading
        them runs on without training."""
        return {}


