"""Federated partitions: which training samples each client holds.

Partitioners return one index array per client and draw every random choice from the
``numpy.random.Generator`` they are given. The ``writers`` partition gives every client
a fixed handwriting style (:func:`writer_styles`, :func:`apply_style`).
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import ConfigError
from ..streams import STREAMS

__all__ = ["iid_partition", "dirichlet_partition", "shards_partition", "quantity_skew_partition",
           "dominant_class_partition", "missing_class_partition", "check_skew_level", "natural_partition", "PARTITIONS", "partition_labels", "WRITER_ROTATION", "WRITER_SCALE",
           "writer_styles", "apply_style", "class_counts", "given_partition"]


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
    order = iter(np.concatenate([rng.permutation(classes) for _ in range(
        -(-n_clients * classes_per_client // len(classes)) + 1)]).tolist())
    held: list[list[int]] = []
    for _ in range(n_clients):
        mine: list[int] = []
        while len(mine) < classes_per_client:
            c = next(order)
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


def _largest_size(demand, labels: np.ndarray, start: int) -> int:
    """The largest size n <= ``start`` whose per-class demand ``demand(n)`` fits the class pools."""
    available = np.unique(labels, return_counts=True)[1]
    for n in range(start, 0, -1):
        if np.all(demand(n).sum(0) <= available):
            return n
    raise ConfigError("the classes are too small for this partition: use fewer clients")


def _deal_counts(labels: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Deal ``counts[k, c]`` distinct samples of class ``c`` to client ``k`` (seeded order)."""
    classes = np.unique(labels)
    shares: list[list[int]] = [[] for _ in range(len(counts))]
    for j, c in enumerate(classes):
        idx = rng.permutation(np.flatnonzero(labels == c))
        for k, part in enumerate(np.split(idx, np.cumsum(counts[:, j]))[:-1]):
            shares[k].extend(part.tolist())
    return [np.sort(np.array(s, dtype=np.int64)) for s in shares]


def check_skew_level(partition: str, level: float, n_classes: int) -> None:
    """Raise :class:`ConfigError` unless ``level`` is a valid Gamma (``dominant``: a share
    in [1/C, 1]) or phi (``missing``: a share of classes that leaves each client one)."""
    if partition == "dominant" and not 1 / n_classes - 1e-9 <= level <= 1:
        raise ConfigError(f"alpha is the dominant class's share under partition 'dominant' and must be in "
                          f"[1/{n_classes}, 1], got {level}")
    if partition == "missing" and not (0 <= level and n_classes - int(round(level * n_classes)) >= 1):
        raise ConfigError(f"alpha is the share of classes a client lacks under partition 'missing' and must "
                          f"leave each client one of the {n_classes} classes, got {level}")


def dominant_class_partition(labels: np.ndarray, share: float, n_clients: int,
                             rng: np.random.Generator) -> list[np.ndarray]:
    """Heroes' CIFAR-10 skew (Yan et al., Sec. VI-A): a share ``share`` (the paper's
    Gamma) of every client's samples comes from one class, the rest evenly from the
    others; ``share = 1/C`` is IID. Client ``k``'s class is the ``k mod C``-th of a seeded
    shuffle of the classes. Every client gets the same number of samples, the most the
    class pools allow; samples beyond that stay unused."""
    labels = np.asarray(labels)
    classes = np.unique(labels)
    C = len(classes)
    check_skew_level("dominant", share, C)
    dominant = rng.permutation(C)[np.arange(n_clients) % C]
    rows = np.full((n_clients, C), (1 - share) / (C - 1))
    rows[np.arange(n_clients), dominant] = share

    def demand(n):
        exact = rows * n
        counts = np.floor(exact + 1e-9).astype(int)
        rest = n - counts.sum(1)
        for k in range(n_clients):      # largest remainders first, ties to the classes after k's own
            after = (np.arange(C) - dominant[k]) % C
            counts[k, np.lexsort((after, -(exact[k] - counts[k])))[:rest[k]]] += 1
        return counts

    return _deal_counts(labels, demand(_largest_size(demand, labels, len(labels) // n_clients)), rng)


def missing_class_partition(labels: np.ndarray, missing: float, n_clients: int,
                            rng: np.random.Generator) -> list[np.ndarray]:
    """Heroes' ImageNet-100 skew (Yan et al., Sec. VI-A): every client lacks
    ``round(missing C)`` of the ``C`` classes (the paper's phi) and holds the same number
    of samples of each class it has. Its classes are a window of ``C - round(missing C)``
    consecutive classes of a seeded shuffle, starting at ``k mod C`` for client ``k``, so
    the window rotates over the clients and every class is held about equally often."""
    labels = np.asarray(labels)
    classes = np.unique(labels)
    C = len(classes)
    check_skew_level("missing", missing, C)
    held = C - int(round(missing * C))
    order = rng.permutation(C)
    mask = np.zeros((n_clients, C), dtype=int)
    for k in range(n_clients):
        mask[k, order[(k + np.arange(held)) % C]] = 1
    per_class = _largest_size(lambda n: mask * n, labels, len(labels) // (n_clients * held))
    return _deal_counts(labels, mask * per_class, rng)


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


def given_partition(assignment, n_samples: int, n_clients: int) -> list[np.ndarray]:
    """An explicit client -> training-sample indices assignment, checked and sorted.

    ``assignment`` holds one sequence of indices into the training pool per client (from
    another library's partitioner, say, so that one partition feeds two implementations).
    Every client needs at least one sample; no index may repeat or fall outside the pool.
    """
    if assignment is None:
        raise ConfigError("partition 'given' needs given_indices: one list of sample indices "
                          "per client")
    if len(assignment) != n_clients:
        raise ConfigError(f"given_indices has {len(assignment)} clients, the run has {n_clients}")
    parts = []
    for k, indices in enumerate(assignment):
        part = np.asarray(indices)
        if part.ndim != 1 or not len(part) or not np.issubdtype(part.dtype, np.integer):
            raise ConfigError(f"given_indices[{k}] must be a non-empty list of integer indices")
        if part.min() < 0 or part.max() >= n_samples:
            raise ConfigError(f"given_indices[{k}] has an index outside the {n_samples} "
                              f"training samples")
        parts.append(np.sort(part.astype(np.int64)))
    every = np.concatenate(parts)
    if len(np.unique(every)) != len(every):
        raise ConfigError("given_indices deals some training sample to more than one client "
                          "(or twice)")
    return parts


#: the partitioners by name (seeded); ``"given"`` (an explicit assignment, Python API only)
#: is accepted besides them
PARTITIONS = ("iid", "dirichlet", "shards", "quantity", "natural", "writers", "dominant", "missing")


def partition_labels(labels: np.ndarray, partition: str, n_clients: int, rng: np.random.Generator,
                     alpha: float = 0.5, classes_per_client: int = 2,
                     groups: np.ndarray | None = None, given=None) -> list[np.ndarray]:
    """Dispatch to a partitioner by name (one of :data:`PARTITIONS`, or ``"given"`` with the
    assignment ``given``: :func:`given_partition`)."""
    labels = np.asarray(labels)
    if partition == "given":
        return given_partition(given, len(labels), n_clients)
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
    if partition == "dominant":   # alpha: the dominant class's share
        return dominant_class_partition(labels, alpha, n_clients, rng)
    if partition == "missing":    # alpha: the share of classes each client lacks
        return missing_class_partition(labels, alpha, n_clients, rng)
    raise ConfigError(f"unknown partition {partition!r}; choose one of: {', '.join(PARTITIONS)}, given")


# --------------------------------------------------------------------------- writers

#: the writers partition's style range: rotation in degrees (+-) and scale factors
WRITER_ROTATION = 30.0
WRITER_SCALE = (0.8, 1.2)


def writer_styles(n_clients: int, seed: int) -> np.ndarray:
    """Each client's handwriting style, ``(n_clients, 2)``: a rotation in degrees, uniform
    in +-:data:`WRITER_ROTATION`, and a scale, uniform in :data:`WRITER_SCALE`. Drawn from
    the run seed alone (its own stream), so the same seed gives the same writers."""
    rng = np.random.default_rng([seed, STREAMS["writers"]])
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
