"""Datasets, their storage, the text corpora, and federated partitions.

* :mod:`~hetfl_core.science.data.storage` - the data root, arrays on disk, :class:`ArrayDataset`;
* :mod:`~hetfl_core.science.data.datasets` - the named datasets (:data:`DATASETS`),
  :func:`load_dataset`, and :func:`register_dataset` to add one;
* :mod:`~hetfl_core.science.data.shakespeare`, :mod:`~hetfl_core.science.data.bible` - the offline text corpora;
* :mod:`~hetfl_core.science.data.partitions` - IID, Dirichlet, shards, quantity skew, natural and writers;
* :mod:`~hetfl_core.science.data.federated` - a dataset dealt to its clients (:func:`make_federated`).

Every public name of the modules but the corpora's is importable from ``hetfl_core.science.data``.
"""
from . import datasets, federated, partitions, storage
from .datasets import *  # noqa: F401,F403
from .federated import *  # noqa: F401,F403
from .partitions import *  # noqa: F401,F403
from .storage import *  # noqa: F401,F403

__all__ = [*datasets.__all__, *federated.__all__, *partitions.__all__, *storage.__all__]
