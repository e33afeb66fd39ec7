"""Datasets, their storage, the text corpora, and federated partitions.

* :mod:`~hetfl_core.data.storage` - the data root, arrays on disk, :class:`ArrayDataset`;
* :mod:`~hetfl_core.data.datasets` - the named datasets (:data:`DATASETS`),
  :func:`load_dataset`, and :func:`register_dataset` to add one;
* :mod:`~hetfl_core.data.shakespeare`, :mod:`~hetfl_core.data.bible` - the offline text corpora;
* :mod:`~hetfl_core.data.partitions` - IID, Dirichlet, shards, quantity skew, natural and writers;
* :mod:`~hetfl_core.data.federated` - a dataset dealt to its clients (:func:`make_federated`).

Every public name is importable from ``hetfl_core.data``.
"""
from .datasets import (DATASET_INFO, DATASETS, KINDS, DatasetInfo, canonical_dataset_name,
                       load_dataset, register_dataset)
from .federated import ClientData, FederatedData, make_federated, split_client
from .partitions import (PARTITIONS, WRITER_ROTATION, WRITER_SCALE, apply_style, check_skew_level, class_counts,
                         dirichlet_partition, dominant_class_partition, iid_partition, missing_class_partition,
                         natural_partition, partition_labels, quantity_skew_partition, shards_partition, writer_styles)
from .storage import ArrayDataset, data_root, stored_arrays

__all__ = [
    "ArrayDataset", "ClientData", "FederatedData", "DATASETS", "DATASET_INFO", "PARTITIONS", "data_root",
    "stored_arrays", "canonical_dataset_name", "load_dataset", "register_dataset", "DatasetInfo",
    "KINDS",
    "iid_partition", "dirichlet_partition", "shards_partition",
    "quantity_skew_partition", "dominant_class_partition", "missing_class_partition", "check_skew_level",
    "natural_partition", "partition_labels", "split_client", "make_federated",
    "class_counts", "WRITER_ROTATION", "WRITER_SCALE", "writer_styles", "apply_style",
]
