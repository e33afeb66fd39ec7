"""A dataset dealt to its clients: each client's train, validation and test split."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import ConfigError
from ..streams import STREAMS
from .partitions import apply_style, partition_labels, writer_styles
from .storage import ArrayDataset

__all__ = ["ClientData", "FederatedData", "split_client", "make_federated"]


@dataclass
class ClientData:
    """One client's local data: train, validation and test splits of its own distribution."""

    client_id: int
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    x_val: torch.Tensor = field(default_factory=lambda: torch.empty(0))
    y_val: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))

    @property
    def n_train(self) -> int:
        return len(self.y_train)


def split_client(indices: np.ndarray, test_fraction: float, val_fraction: float,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split one client's indices into (train, val, test), keeping at least one train sample."""
    idx = rng.permutation(indices)
    n = len(idx)
    n_test = int(round(test_fraction * n)) if n > 1 else 0
    n_val = int(round(val_fraction * n)) if n > 2 else 0
    n_test = min(n_test, n - 1)
    n_val = min(n_val, n - 1 - n_test)
    return np.sort(idx[n_test + n_val:]), np.sort(idx[n_test:n_test + n_val]), np.sort(idx[:n_test])


@dataclass
class FederatedData:
    """A dataset dealt to clients, plus the global test set."""

    dataset: ArrayDataset
    clients: list[ClientData]
    partition_indices: list[np.ndarray]
    styles: np.ndarray | None = None   # the writers partition: (rotation deg, scale) per client

    @property
    def num_classes(self) -> int:
        return self.dataset.num_classes

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.dataset.input_shape

    def class_counts(self) -> np.ndarray:
        """Clients x classes counts of the local training data."""
        return np.stack([np.bincount(c.y_train.numpy(), minlength=self.num_classes)
                         for c in self.clients])


def make_federated(dataset: ArrayDataset, partition: str, n_clients: int, seed: int, *,
                   alpha: float = 0.5, classes_per_client: int = 2, train_samples: int | None = None,
                   test_fraction: float = 0.2, val_fraction: float = 0.0,
                   given=None) -> FederatedData:
    """Deal ``dataset`` to ``n_clients`` and give each client its own train/val/test split.

    ``partition="given"`` deals by ``given``: one list of indices into the training pool
    (after ``train_samples``' subset, if any) per client.

    ``train_samples`` keeps a seeded random subset of the pool first (for fast runs). Each
    client's test split comes from its own share, so personalised accuracy is measured on
    the client's own distribution; the dataset's test set stays the global test set.

    ``partition="writers"`` (a stand-in for FEMNIST's writers) deals the samples IID and
    gives each client a fixed style, :func:`writer_styles`, applied to all its splits; the
    global test set keeps the unstyled images. ``"iid"`` is the same deal with no style.
    """
    rng = np.random.default_rng([seed, STREAMS["deal"]])
    labels = dataset.y_train.numpy()
    pool = np.arange(len(labels))
    if train_samples is not None and train_samples < len(pool):
        pool = np.sort(rng.choice(pool, size=train_samples, replace=False))
    if n_clients > len(pool):
        raise ConfigError(f"{n_clients} clients but only {len(pool)} training samples: use fewer clients")
    groups = None if dataset.groups is None else dataset.groups.numpy()[pool]
    dealt = partition_labels(labels[pool], partition, n_clients, rng, alpha=alpha,
                             classes_per_client=classes_per_client, groups=groups, given=given)
    parts = [pool[p] for p in dealt]
    styles = writer_styles(n_clients, seed) if partition == "writers" else None
    clients = []
    for k, part in enumerate(parts):
        tr, va, te = split_client(part, test_fraction, val_fraction, rng)
        x, y = dataset.x_train, dataset.y_train
        style = (lambda i: x[i]) if styles is None else (lambda i: apply_style(x[i], *styles[k]))
        clients.append(ClientData(k, style(tr), y[tr], style(te), y[te], style(va), y[va]))
    return FederatedData(dataset, clients, parts, styles)
