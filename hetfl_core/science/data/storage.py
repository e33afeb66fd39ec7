"""Where datasets live and how they are held: the data root, arrays on disk, a dataset in memory."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

__all__ = ["ArrayDataset", "data_root", "stored_arrays"]


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
