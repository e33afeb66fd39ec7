"""Federated partitions: which training samples each client holds.

Partitioners return one index array per client and draw every random choice from the
``numpy.random.Generator`` they are given. The ``writers`` partition gives every client
a fixed handwriting style (:func:`writer_styles`, :func:`apply_style`).
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import ConfigError

__all__ = ["iid_partition", "dirichlet_partition", "shards_partition", "quantity_skew_partition",
           "natural_partition", "PARTITIONS", "partition_labels", "WRITER_ROTATION", "WRITER_SCALE",
           "writer_styles", "apply_style", "class_counts"]


def iid_partition(n_samples: int, n_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle and deal the samples into ``n_clients`` equal shares (IID)."""
    return [np.sort(p) for p in np.array_split(rng.permutation(n_samples), n_clients)]


def dirichlet_partition(labels: np.ndarray, alpha: float, n_clients: int, rng: np.random.Generator,
                        min_size: int = 10, max_tries: int = 100) -> list[np.ndarray]:
    """Label skew: each class is split over clients by proportions ~ Dirichlet(alpha).

    Small ``alpha`` gives few classes per client; large ``alpha`` approaches IID. Redrawn
    until every client has at least ``min_size`` samples (Hsu et al., 2019).
    """
    if alpha <= 0:
        raise ConfigError(f"Dirichlet alpha must be > 0, got {alpha}")
    labels = np.asarray(labels)
    min_size = min(min_size, len(labels) // n_clients)
    for _ in range(max_tries):
        shares: list[list[int]] = [[] for _ in range(n_clients)]
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            proportions = rng.dirichlet(np.full(n_clients, alpha))
            cuts = (np.cumsum(proportions)[:-1] * len(idx)).astype(int)
            for client, part in enumerate(np.split(idx, cuts)):
                shares[client].extend(part.tolist())
        if min(len(s) for s in shares) >= min_size:
            return [np.sort(np.array(s, dtype=np.int64)) for s in shares]
    raise ConfigError(f"Dirichlet(alpha={alpha}) left a client with fewer than {min_size} samples "
                      f"in {max_tries} draws: raise alpha or lower the number of clients")


def shards_partition(labels: np.ndarray, classes_per_client: int, n_clients: int,
                     rng: np.random.Generator) -> list[np.ndarray]:
    """Pathological split: every client holds exactly ``classes_per_client`` classes.

    Classes are dealt from a shuffled cycle so that each class goes to about the same
    number of clients; each class's samples are then divided equally among its holders
    (McMahan et al., 2017, in the k-classes form of the papers).
    """
    labels = np.asarray(labels)
    classes = np.unique(labels)
    if not 1 <= classes_per_client <= len(classes):
        raise ConfigError(f"classes_per_client must be in 1..{len(classes)}, got {classes_per_client}")
    order = np.concatenate([rng.permutation(classes) for _ in range(
        -(-n_clients * classes_per_client // len(classes)) + 1)])
    held: list[list[int]] = []
    pos = 0
    for _ in range(n_clients):
        mine: list[int] = []
        while len(mine) < classes_per_client:
            c = int(order[pos]); pos += 1
            if c not in mine:
                mine.append(c)
        held.append(mine)
    shares: list[list[int]] = [[] for _ in range(n_clients)]
    for c in classes:
        holders = [k for k in range(n_clients) if int(c) in held[k]]
        if not holders:
            continue
        idx = rng.permutation(np.flatnonzero(labels == c))
        for k, part in zip(holders, np.array_split(idx, len(holders))):
            shares[k].extend(part.tolist())
    return [np.sort(np.array(s, dtype=np.int64)) for s in shares]


def quantity_skew_partition(n_samples: int, n_clients: int, rng: np.random.Generator,
                            alpha: float = 1.0, min_size: int = 10) -> list[np.ndarray]:
    """Quantity skew: IID labels, client sizes proportional to Dirichlet(alpha) draws."""
    if alpha <= 0:
        raise ConfigError(f"quantity-skew alpha must be > 0, got {alpha}")
    min_size = min(min_size, n_samples // n_clients)
    spare = n_samples - min_size * n_clients
    sizes = min_size + np.floor(rng.dirichlet(np.full(n_clients, alpha)) * spare).astype(int)
    sizes[: n_samples - sizes.sum()] += 1  # hand out the rounding remainder
    cuts = np.cumsum(sizes)[:-1]
    return [np.sort(p) for p in np.split(rng.permutation(n_samples), cuts)]


def natural_partition(groups: np.ndarray | None, n_clients: int) -> list[np.ndarray]:
    """One client per natural group (groups are numbered by decreasing size): the ``n_clients`` largest."""
    if groups is None:
        raise ConfigError("the natural partition needs a dataset with natural clients (a text corpus); "
                          "use iid, dirichlet, shards or quantity for image sets")
    groups = np.asarray(groups)
    available = int(groups.max()) + 1
    if n_clients > available:
        raise ConfigError(f"the dataset has {available} natural clients, fewer than the {n_clients} asked for")
    return [np.flatnonzero(groups == g) for g in range(n_clients)]


PARTITIONS = ("iid", "dirichlet", "shards", "quantity", "natural", "writers")


def partition_labels(labels: np.ndarray, partition: str, n_clients: int, rng: np.random.Generator,
                     alpha: float = 0.5, classes_per_client: int = 2,
                     groups: np.ndarray | None = None) -> list[np.ndarray]:
    """Dispatch to a partitioner by name (one of :data:`PARTITIONS`)."""
    labels = np.asarray(labels)
    if partition == "natural":
        return natural_partition(groups, n_clients)
    if partition in ("iid", "writers"):  # writers: IID labels, a style per client (make_federated)
        return iid_partition(len(labels), n_clients, rng)
    if partition == "dirichlet":
        return dirichlet_partition(labels, alpha, n_clients, rng)
    if partition == "shards":
        return shards_partition(labels, classes_per_client, n_clients, rng)
    if partition == "quantity":
        return quantity_skew_partition(len(labels), n_clients, rng, alpha)
    raise ConfigError(f"unknown partition {partition!r}; choose one of: {', '.join(PARTITIONS)}")


# --------------------------------------------------------------------------- writers

#: the writers partition's style range: rotation in degrees (+-) and scale factors


WRITER_ROTATION = 30.0
WRITER_SCALE = (0.8, 1.2)


def writer_styles(n_clients: int, seed: int) -> np.ndarray:
    """Each client's handwriting style, ``(n_clients, 2)``: a rotation in degrees, uniform
    in +-:data:`WRITER_ROTATION`, and a scale, uniform in :data:`WRITER_SCALE`. Drawn from
    the run seed alone (its own stream), so the same seed gives the same writers."""
    rng = np.random.default_rng([seed, 6])
    angles = rng.uniform(-WRITER_ROTATION, WRITER_ROTATION, n_clients)
    return np.stack([angles, rng.uniform(*WRITER_SCALE, n_clients)], axis=1)


def apply_style(x: torch.Tensor, angle: float, scale: float) -> torch.Tensor:
    """Images ``(N, C, H, W)`` rotated by ``angle`` degrees and magnified by ``scale`` about
    their centre (bilinear; uncovered pixels take the nearest border value, the background)."""
    if x.ndim != 4:
        raise ConfigError("the writers partition needs images (N, C, H, W); use natural for text")
    if len(x) == 0:
        return x
    a = np.deg2rad(angle)
    theta = torch.tensor([[np.cos(a), -np.sin(a), 0.0], [np.sin(a), np.cos(a), 0.0]],
                         dtype=x.dtype) / scale  # output -> input coordinates
    grid = torch.nn.functional.affine_grid(theta.expand(len(x), 2, 3), list(x.shape), align_corners=False)
    return torch.nn.functional.grid_sample(x, grid, mode="bilinear", padding_mode="border",
                                           align_corners=False)


def class_counts(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> np.ndarray:
    """A clients x classes matrix of sample counts (the heat maps of the book)."""
    labels = np.asarray(labels)
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])


# --------------------------------------------------------------------------- clients
