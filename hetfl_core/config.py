"""The configuration of one run, and the book's three scales.

A :class:`RunConfig` names everything that changes a run's numbers; two equal configs
give identical histories, and :mod:`hetfl_core.experiments` caches results by it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field

from .errors import ConfigError

__all__ = ["RunConfig", "SCALES", "check_scale", "by_scale"]

SCALES = ("smoke", "book", "paper")


def check_scale(scale: str) -> str:
    """Return ``scale`` if it is one of :data:`SCALES`, else raise :class:`ConfigError`."""
    if scale not in SCALES:
        raise ConfigError(f"unknown scale {scale!r}; choose one of: {', '.join(SCALES)}")
    return scale


def by_scale(scale: str, *, smoke, book, paper=None):
    """Pick the value for ``scale``: ``by_scale(scale, smoke=2, book=30, paper=500)``.

    ``paper`` defaults to the ``book`` value where a chapter has no larger setting.
    """
    return {"smoke": smoke, "book": book, "paper": book if paper is None else paper}[check_scale(scale)]


@dataclass
class RunConfig:
    """One federated run.

    Data: ``dataset`` (see ``python -m hetfl_core list``), ``train_samples`` (a seeded
    subset of the training pool, ``None`` for all), ``partition`` (``iid``, ``dirichlet``,
    ``shards``, ``quantity``, ``natural`` for text corpora) with ``alpha`` (Dirichlet / quantity concentration) and
    ``classes_per_client`` (shards), each client's ``test_fraction`` and ``val_fraction``.

    Federation: ``clients`` in all, a ``participation`` fraction sampled each round,
    ``rounds``, ``heterogeneity`` of the devices (``none``, ``low``, ``medium``, ``high``).

    Local training: ``model``, SGD with ``lr``, ``momentum``, ``weight_decay`` and
    ``batch_size``, for ``local_epochs`` epochs or, if set, exactly ``local_steps`` steps.

    Evaluation: every ``eval_every`` rounds and after the last; ``eval_global=False`` skips
    scoring the global model on the dataset's whole test set (the costliest part of an
    evaluation) where only personalised accuracy is read.

    ``device`` is where models and data live (``cpu``, ``cuda``, ``cuda:N``, ``mps``,
    ``auto``; see :mod:`hetfl_core.devices`).

    ``options`` holds the method's own hyperparameters (e.g. ``{"mu": 0.01}`` for FedProx);
    each method lists its options and defaults.
    """

    method: str = "fedavg"
    dataset: str = "fashion-mnist"
    model: str = "cnn"
    partition: str = "dirichlet"
    alpha: float = 0.5
    classes_per_client: int = 2
    clients: int = 20
    participation: float = 1.0
    rounds: int = 20
    local_epochs: float = 1.0
    local_steps: int | None = None
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0
    train_samples: int | None = None
    test_fraction: float = 0.2
    val_fraction: float = 0.0
    heterogeneity: str = "none"
    eval_every: int = 1
    eval_global: bool = True
    seed: int = 0
    device: str = "cpu"
    options: dict = field(default_factory=dict)

    def validate(self) -> "RunConfig":
        """Check every field; raise :class:`ConfigError` with one line naming the first bad one."""
        from .data import PARTITIONS, canonical_dataset_name
        from .devices import check_device
        from .methods import get_method
        from .models import MODELS
        from .system import HETEROGENEITY

        method_cls = get_method(self.method)
        check_device(self.device)
        self.dataset = canonical_dataset_name(self.dataset)
        if self.model not in MODELS:
            raise ConfigError(f"unknown model {self.model!r}; choose one of: {', '.join(MODELS)}")
        if self.partition not in PARTITIONS:
            raise ConfigError(f"unknown partition {self.partition!r}; choose one of: {', '.join(PARTITIONS)}")
        if self.heterogeneity not in HETEROGENEITY:
            raise ConfigError(f"unknown heterogeneity {self.heterogeneity!r}; "
                              f"choose one of: {', '.join(HETEROGENEITY)}")
        checks = [
            (self.rounds >= 1, f"rounds must be >= 1, got {self.rounds}"),
            (self.clients >= 1, f"clients must be >= 1, got {self.clients}"),
            (self.alpha > 0, f"alpha must be > 0, got {self.alpha}"),
            (self.classes_per_client >= 1, f"classes_per_client must be >= 1, got {self.classes_per_client}"),
            (0 < self.participation <= 1, f"participation must be in (0, 1], got {self.participation}"),
            (self.local_epochs > 0, f"local_epochs must be > 0, got {self.local_epochs}"),
            (self.local_steps is None or self.local_steps >= 1, f"local_steps must be >= 1, got {self.local_steps}"),
            (self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}"),
            (self.lr > 0, f"lr must be > 0, got {self.lr}"),
            (0 <= self.momentum < 1, f"momentum must be in [0, 1), got {self.momentum}"),
            (self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}"),
            (self.train_samples is None or self.train_samples >= 1,
             f"train_samples must be >= 1, got {self.train_samples}"),
            (0 <= self.test_fraction < 1, f"test_fraction must be in [0, 1), got {self.test_fraction}"),
            (0 <= self.val_fraction < 1 and self.test_fraction + self.val_fraction < 1,
             f"val_fraction must be in [0, 1 - test_fraction), got {self.val_fraction}"),
            (self.eval_every >= 1, f"eval_every must be >= 1, got {self.eval_every}"),
            (isinstance(self.eval_global, bool), f"eval_global must be true or false, got {self.eval_global!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        method_cls.check_config(self)
        return self

    def replace(self, **changes) -> "RunConfig":
        """A copy with some fields changed (``options`` merged, not replaced)."""
        options = {**self.options, **changes.pop("options", {})}
        return dataclasses.replace(self, options=options, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "RunConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(values) - names
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(sorted(unknown))}")
        return cls(**values)

    def key(self, salt: str = "") -> str:
        """A stable hash of the whole config (and ``salt``), for caching."""
        text = json.dumps(self.to_dict(), sort_keys=True, default=str) + salt
        return hashlib.sha256(text.encode()).hexdigest()[:20]
