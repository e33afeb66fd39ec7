"""The configuration of one run, and the book's three scales.

A :class:`RunConfig` names everything that changes a run's numbers; two equal configs
give identical histories, and :mod:`hetfl_core.runtime.experiments` caches results by it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import linecache
import math
import numbers
import pathlib
import re
import sys
from dataclasses import dataclass, field

import numpy as np

from ..science.errors import ConfigError
from ..science.options import Option, accepted, check_value

__all__ = ["RunConfig", "SCALES", "ALL", "check_scale", "by_scale", "check_value", "accepted",
           "MODEL_INPUTS", "Option", "plain_value"]

SCALES = ("smoke", "book", "paper")


def check_scale(scale: str) -> str:
    """Return ``scale`` if it is one of :data:`SCALES`, else raise :class:`ConfigError`."""
    if scale not in SCALES:
        raise ConfigError(f"unknown scale {scale!r}; choose one of: {', '.join(SCALES)}")
    return scale


class _Every:
    """The type of :data:`ALL`."""

    def __repr__(self) -> str:
        return "ALL"


#: a ``by_scale`` value meaning every sample (``train_samples``, ``test_samples``) or no step
#: cap (``local_steps``): ``by_scale`` returns ``None`` for it, which :class:`RunConfig` reads so
ALL = _Every()
_MISSING = object()
_SETTING = re.compile(r"(\w+)\s*=\s*(?:\w+\s+or\s+)?by_scale\(")


def _setting(depth: int = 2) -> str:
    """The setting a ``by_scale`` call ``depth`` frames up sets, as ``name (file:line)``."""
    frame = sys._getframe(depth)
    where = f"{pathlib.Path(frame.f_code.co_filename).name}:{frame.f_lineno}"
    found = _SETTING.findall(linecache.getline(frame.f_code.co_filename, frame.f_lineno))
    return f"{found[-1]} ({where})" if found else f"the setting at {where}"


def by_scale(scale: str, *, smoke, book, paper=_MISSING):
    """Pick the value for ``scale``: ``by_scale(scale, smoke=2, book=30, paper=500)``.

    Every call gives all three values: a missing ``paper`` value is a :class:`ConfigError`
    at every scale (where the paper states no setting, the call gives the book value as
    ``paper=`` and says so). ``None`` is refused as ambiguous: :data:`ALL` means every
    sample (or no step cap) and is returned as ``None``.
    """
    if paper is _MISSING:
        raise ConfigError(f"by_scale for {_setting()} has no paper value: give paper= (the "
                          f"paper's setting, or the book value where the paper states none)")
    if smoke is None or book is None or paper is None:
        raise ConfigError(f"by_scale for {_setting()} has a None value: give ALL for every "
                          f"sample (or no step cap), or the value itself")
    value = {"smoke": smoke, "book": book, "paper": paper}[check_scale(scale)]
    return None if value is ALL else value


#: what each model reads: "image" (C, H, W), "chars" (character ids) or "tokens" (word ids)
MODEL_INPUTS = {"mlp": "image", "lenet5": "image", "cnn": "image", "wcnn": "image", "pcnn": "image",
                "resnet": "image", "charlstm": "chars", "charlstm-s": "chars", "embbag": "tokens",
                "lora-transformer": "tokens"}
#: the smallest image side a model reads (LeNet-5's three 5x5 convolutions need 28x28)
MIN_IMAGE_SIDE = {"lenet5": 28}
#: the upper bound of a seed (numpy's SeedSequence and torch take 32-bit seeds)
SEED_LIMIT = 2 ** 32


def _plain_number(name: str, value):
    """``value`` as a plain ``int`` or ``float`` when it is a number of another type (numpy's
    scalars, :class:`fractions.Fraction`); :class:`ConfigError` where a float would round it."""
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Number):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        plain = float(value)
        if plain != value and not math.isnan(plain):
            raise ConfigError(f"{name} must be a plain number; {value!r} is not exactly a float "
                              f"(the nearest is {plain!r}): give that")
        return plain
    return value


def plain_value(name: str, value):
    """``value`` in plain Python types, as JSON stores it and the cache key reads it: numpy's
    scalars and arrays and fractions become ``int``, ``float``, ``bool`` and lists, recursively
    into lists, tuples and dicts. A value JSON cannot hold (or a fraction a float would round)
    is a :class:`ConfigError` naming ``name``."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return type(value)(plain_value(f"each item of {name}", v) for v in value)
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {str(k): plain_value(f"{name}[{k!r}]", v) for k, v in value.items()}
    plain = _plain_number(name, value)
    if type(plain) in (bool, int, float):
        return plain
    raise ConfigError(f"{name} must be a number, a name, true/false, None, or a list or dict of "
                      f"them; got {type(value).__name__} {value!r:.60}")


def _json_default(value):
    """What :meth:`RunConfig.key` writes for a value JSON has no type for (one a config
    keeps as given, having no plain form): its plain form where there is one."""
    try:
        return plain_value("value", value)
    except ConfigError:
        return str(value)


def _normal(name: str, value, kind):
    """``value`` of a field of ``kind`` in its plain form (:meth:`RunConfig.__post_init__`):
    a plain ``str``, ``int``, ``float`` or ``bool``, an int as a float in a float field; as
    given where it has none (a fraction a float would round)."""
    if kind is str:
        return str(value) if isinstance(value, str) else value
    try:
        value = _plain_number(name, value)
    except ConfigError:
        return value
    if kind is float and type(value) is int and float(value) == value:
        return float(value)          # lr=1 and lr=1.0 are one config, with one key
    return value


def _plain_or_given(name: str, value):
    """:func:`plain_value`, or ``value`` as given where it has no plain form."""
    try:
        return plain_value(name, value)
    except ConfigError:
        return value


def _registered_dataset(name: str) -> str:
    """The registered name of dataset ``name`` (case and aliases folded), or ``name`` as
    given where none is registered."""
    from ..science.data import canonical_dataset_name

    try:
        return canonical_dataset_name(name)
    except ConfigError:
        return name


def _field(default, help: str, kind, low=None, high=None, *, low_open=False, high_open=False,
           optional=False):
    """A config field with its declaration (an :class:`Option`; ``kind`` is ``int``, ``float``,
    ``str`` or ``bool``) in its metadata, where ``run --help`` and :meth:`RunConfig.validate` read it."""
    option = Option(default, help, low, high, low_open, high_open, optional=optional, kind=kind)
    return field(default=default, metadata={"help": help, "option": option, **option.meta})


@dataclass(frozen=True)
class RunConfig:
    """One federated run: the data (``dataset``, a seeded ``train_samples`` subset, its
    ``partition`` among ``clients``, each client's test and validation share), the federation
    (``participation``, ``rounds``, the clients' hardware ``heterogeneity``, ``time_noise``, the cost model),
    local SGD (``model``, ``lr``, ``momentum``, ``weight_decay``, ``batch_size``, for
    ``local_epochs`` or exactly ``local_steps`` steps) and evaluation (every ``eval_every``
    rounds and after the last). Each field's meaning, type and range are declared beside it,
    shown by ``run --help`` and checked by :meth:`validate`.

    ``eval_global=False`` skips scoring the global model on the whole test set (the costliest
    part of an evaluation) where only personalised accuracy is read; ``eval_global_every``
    scores it less often (only at the end, for instance). ``batched_clients`` trains a round's
    clients as one vectorised batch (:mod:`hetfl_core.runtime.batched`); the numbers agree with the
    sequential path to float rounding. ``partition="given"`` deals the training pool by
    ``given_indices`` (one partition, made elsewhere, fed to two implementations). ``options``
    holds the method's own hyperparameters (``{"mu": 0.01}`` for FedProx; see ``list METHOD``).
    """

    method: str = _field("fedavg", "the federated method (see 'list')", str)
    dataset: str = _field("fashion-mnist", "the dataset (see 'list')", str)
    model: str = _field("cnn", "the model architecture", str)
    partition: str = _field("dirichlet", "how the training pool is dealt to clients", str)
    alpha: float = _field(0.5, "Dirichlet / quantity-skew concentration (smaller: more skewed); under "
                          "'dominant' the dominant class's share, under 'missing' the share of classes "
                          "a client lacks", float, 0, 1e6, low_open=True)
    classes_per_client: int = _field(2, "classes per client under the shards partition", int, 1, 100_000)
    clients: int = _field(20, "number of clients", int, 1, 100_000)
    participation: float = _field(1.0, "fraction of clients sampled each round", float, 0, 1, low_open=True)
    rounds: int = _field(20, "communication rounds", int, 1, 1_000_000)
    local_epochs: float = _field(1.0, "local epochs per round (unless local_steps is set)", float,
                                 0, 10_000, low_open=True)
    local_steps: int | None = _field(None, "exactly this many local SGD steps per round", int, 1, 10_000_000,
                                     optional=True)
    batch_size: int = _field(32, "local mini-batch size", int, 1, 1_000_000)
    lr: float = _field(0.05, "SGD learning rate", float, 0, 1e9, low_open=True)   # huge lr diverges in one line
    momentum: float = _field(0.0, "SGD momentum", float, 0, 1, high_open=True)
    weight_decay: float = _field(0.0, "SGD weight decay (L2 coefficient)", float, 0, 100)
    train_samples: int | None = _field(None, "a seeded subset of the training pool (None: all)", int,
                                       1, 10 ** 9, optional=True)
    test_fraction: float = _field(0.2, "each client's share held out for personalised testing", float,
                                  0, 1, high_open=True)
    val_fraction: float = _field(0.0, "each client's share held out for validation", float, 0, 1, high_open=True)
    heterogeneity: str = _field("none", "spread of the clients' hardware speeds (tiers)", str)
    system: str | None = _field(None, "the cost model: compute (tiered hardware, fixed links) or wireless (a shared "
                                "cell); None: the method's own (wireless for sparse-prune-pfl, else compute)", str,
                                optional=True)
    bandwidth_mhz: float | None = _field(None, "the wireless cell's uplink band W in MHz (None: 10 MHz per 100 "
                                         "clients)", float, 0, 1e6, low_open=True, optional=True)
    bandwidth_high_mhz: float | None = _field(None, "with it the band is drawn from U[bandwidth_mhz, this] each "
                                              "round", float, 0, 1e6, low_open=True, optional=True)
    bandwidth_policy: str = _field("equal", "how the wireless band is split when the method does not split it: "
                                   "equal, or min-time (the shares that end the round soonest)", str)
    time_noise: float = _field(0.0, "sd of a seeded log-normal factor (mean 1) on each client's compute time "
                               "per round under the compute cost model (0: the hardware model's exact times)", float, 0, 10)
    eval_every: int = _field(1, "evaluate every this many rounds (and after the last)", int, 1, 1_000_000)
    eval_global: bool = _field(True, "score the global model on the whole test set", bool)
    eval_global_every: int | None = _field(None, "score the global model every this many rounds (and after "
                                           "the last; None: at every evaluation)", int, 1, 1_000_000,
                                           optional=True)
    seed: int = _field(0, "the run's seed (every random choice derives from it)", int, 0, SEED_LIMIT,
                       high_open=True)
    device: str = _field("cpu", "the torch device models and data live on: cpu, cuda, cuda:N, mps or auto",
                         str)
    batched_clients: bool | None = _field(
        None, "train a round's clients together as one vectorised batch where the method allows "
        "it (None: on for CUDA, off on CPU)", bool, optional=True)
    options: dict = field(default_factory=dict, metadata={"help": "the method's own options (see 'list METHOD')"})
    given_indices: list | None = field(default=None, metadata={
        "help": "partition 'given': one list of training-pool indices per client (Python API)"})

    def __post_init__(self) -> None:
        """Normalise the values up front, once, so that a config is never changed later:
        numbers in plain Python types (``numpy.int64(3)`` as ``3``; a float field given an
        int, ``lr=1``, as ``1.0``), names as plain strings, the dataset's registered name
        (``"FMNIST"`` as ``"fashion-mnist"``), the options in plain types
        (:func:`plain_value`) and in a dict of the config's own. A value that has no plain
        form stays as given, for :meth:`validate` to refuse in one line."""
        for f in dataclasses.fields(self):
            if "kind" in f.metadata:
                object.__setattr__(self, f.name, _normal(f.name, getattr(self, f.name), f.metadata["kind"]))
        if isinstance(self.options, dict) and all(isinstance(k, str) for k in self.options):
            object.__setattr__(self, "options", {key: _plain_or_given(key, value)
                                                 for key, value in self.options.items()})
        if isinstance(self.dataset, str):
            object.__setattr__(self, "dataset", _registered_dataset(self.dataset))

    def validate(self) -> "RunConfig":
        """Check every field's type and range, the names, the model/dataset/partition fit and
        the method's options, before any data is loaded, and return the config itself,
        unchanged; raise :class:`ConfigError` with one line naming the first bad field and
        the values it accepts.

        The one point where a config is checked: :func:`~hetfl_core.runtime.engine.run`,
        :func:`~hetfl_core.runtime.experiments.run_cached`, :func:`~hetfl_core.runtime.experiments.sweep`
        and the Flower apps call it, and a config that passed is not checked again."""
        if self.__dict__.get("_valid"):
            return self
        self._check()
        object.__setattr__(self, "_valid", True)     # not a field: equality and key ignore it
        return self

    def _check(self) -> None:
        """:meth:`validate`'s checks, in the order their messages are met."""
        from ..science.data import DATASET_INFO, PARTITIONS, canonical_dataset_name
        from ..science.devices import check_device
        from ..science.methods.base import get_method
        from ..science.system import BANDWIDTH_POLICIES, HETEROGENEITY, SYSTEMS

        for f in dataclasses.fields(self):
            if "kind" in f.metadata:
                value = getattr(self, f.name)
                if f.metadata["kind"] in (int, float, bool):
                    value = _plain_number(f.name, value)     # a fraction a float would round
                check_value(f.name, value, f.metadata)
        if not isinstance(self.options, dict) or not all(isinstance(k, str) for k in self.options):
            raise ConfigError(f"options must be a dict of option name: value, got {self.options!r}")
        for key, value in self.options.items():
            plain_value(key, value)
        method_cls = get_method(self.method)
        check_device(self.device)
        canonical_dataset_name(self.dataset)
        for name, value, allowed in (("model", self.model, MODEL_INPUTS),
                                     ("partition", self.partition, PARTITIONS + ("given",)),
                                     ("heterogeneity", self.heterogeneity, HETEROGENEITY),
                                     ("system", "compute" if self.system is None else self.system, SYSTEMS),
                                     ("bandwidth_policy", self.bandwidth_policy, BANDWIDTH_POLICIES)):
            if value not in allowed:
                raise ConfigError(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")
        if self.bandwidth_high_mhz is not None and (self.bandwidth_mhz is None
                                                    or self.bandwidth_high_mhz < self.bandwidth_mhz):
            raise ConfigError("bandwidth_high_mhz needs bandwidth_mhz and must be at least it")
        if (self.partition == "given") != (self.given_indices is not None):
            raise ConfigError("partition 'given' and given_indices go together: set both or none")
        given = self.given_indices
        if given is not None and (not isinstance(given, (list, tuple)) or len(given) != self.clients):
            raise ConfigError(f"given_indices must be a list of {self.clients} index lists, "
                              f"one per client")
        if self.test_fraction + self.val_fraction >= 1:
            raise ConfigError(f"val_fraction must be in [0, 1 - test_fraction), got {self.val_fraction}")
        info = DATASET_INFO.get(self.dataset)
        if info is None:        # added to DATASETS by hand: no metadata to check the config against
            raise ConfigError(f"dataset {self.dataset!r} has no metadata (kind, side, classes, "
                              f"train_samples): add it with hetfl_core.science.data.register_dataset, "
                              f"not to DATASETS directly")
        self._check_fit(info)
        try:
            method_cls.check_config(self)
        except ConfigError:
            raise
        except (TypeError, ValueError) as exc:   # a method's own check met a value it cannot read
            raise ConfigError(f"{self.method} option value not understood ({exc}); "
                              f"see 'python -m hetfl_core list {self.method}'") from None

    def _check_fit(self, info) -> None:
        """The model, partition and client count against the dataset's metadata (no loading)."""
        from ..science.data import PARTITIONS, check_skew_level

        reads, side, classes, train_size = info
        if MODEL_INPUTS[self.model] != reads:
            fits = ", ".join(m for m, r in MODEL_INPUTS.items() if r == reads)
            raise ConfigError(f"model {self.model!r} cannot read {self.dataset} ({reads}); choose one of: {fits}")
        if side is not None and side < MIN_IMAGE_SIDE.get(self.model, 0):
            raise ConfigError(f"model {self.model!r} needs images of at least {MIN_IMAGE_SIDE[self.model]}x"
                              f"{MIN_IMAGE_SIDE[self.model]}, {self.dataset} has {side}x{side}: use --model cnn")
        if self.partition == "natural" and reads == "image":
            fits = ", ".join(p for p in PARTITIONS if p != "natural")
            raise ConfigError(f"partition 'natural' needs a text corpus with natural clients, {self.dataset} has "
                              f"none; choose one of: {fits}")
        if self.partition == "writers" and reads != "image":
            raise ConfigError(f"partition 'writers' styles images, {self.dataset} is text; use natural or iid")
        if self.partition in ("dominant", "missing") and classes is not None:
            check_skew_level(self.partition, self.alpha, classes)
        if self.partition == "shards" and classes is not None and self.classes_per_client > classes:
            raise ConfigError(f"classes_per_client must be in 1..{classes} ({self.dataset} has {classes} "
                              f"classes), got {self.classes_per_client}")
        pool = [n for n in (train_size, self.train_samples) if n is not None]
        if pool and self.clients > min(pool):
            raise ConfigError(f"clients must be at most the {min(pool)} training samples, got {self.clients}")

    def replace(self, **changes) -> "RunConfig":
        """A new config with some fields replaced, ``options`` too (``options={}``: none; to
        change some of the options and keep the others, :meth:`with_options`). An unknown
        field or an ``options`` that is not a dict is a :class:`ConfigError`."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(sorted(unknown))}")
        if "options" in changes and not isinstance(changes["options"], dict):
            raise ConfigError(f"replace(options=...) takes a dict of the method's options, "
                              f"got {changes['options']!r:.60}")
        return dataclasses.replace(self, **changes)

    def with_options(self, **options) -> "RunConfig":
        """A new config whose options are this one's with ``options`` merged in (each given
        option set, the others kept): ``base.with_options(mu=0.1)``."""
        return dataclasses.replace(self, options={**self.options, **options})

    def to_dict(self) -> dict:
        """Every field as a plain dict (JSON-ready); ``given_indices`` only when set, so that
        the configs that deal by name keep their keys."""
        values = dataclasses.asdict(self)
        if values["given_indices"] is None:
            del values["given_indices"]
        else:
            values["given_indices"] = [[int(i) for i in part] for part in values["given_indices"]]
        return values

    @classmethod
    def from_dict(cls, values: dict) -> "RunConfig":
        """A config from a ``{field: value}`` dict (as :meth:`to_dict` writes it)."""
        if not isinstance(values, dict):
            raise ConfigError(f"a config must be a dict of field: value, got {type(values).__name__} {values!r:.60}")
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(sorted(unknown))}")
        return cls(**values)

    def key(self, salt: str = "") -> str:
        """A stable hash of the whole config (and ``salt``), for caching: numbers hash by value,
        whatever their type (``numpy.int64(3)`` as ``3``; ``alpha=100`` as ``100.0``, as the
        config stores it), so equal configs have one key."""
        values = self.to_dict()
        for f in dataclasses.fields(self):
            value = values.get(f.name)
            if f.metadata.get("kind") is float and type(value) is int and float(value) == value:
                values[f.name] = float(value)
        text = json.dumps(values, sort_keys=True, default=_json_default) + salt
        return hashlib.sha256(text.encode()).hexdigest()[:20]
