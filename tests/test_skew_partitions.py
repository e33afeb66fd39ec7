"""Heroes' two non-IID schemes (Yan et al., Sec. VI-A): a dominant class with share Gamma,
and a share phi of missing classes with equal volume per present class."""
import numpy as np
import pytest

from hetfl_core import RunConfig
from hetfl_core.science import data as hd
from hetfl_core.science.errors import ConfigError


def uneven_labels(classes=10, seed=0):
    """Classes of 80 to 120 samples, as a real data set's."""
    sizes = np.random.default_rng(seed).integers(80, 121, classes)
    return np.repeat(np.arange(classes), sizes)


def counts(y, parts, classes=10):
    return np.stack([np.bincount(y[p], minlength=classes) for p in parts])


@pytest.mark.parametrize("share", [0.1, 0.4, 0.8, 1.0])
def test_dominant_class_share_is_gamma_and_the_rest_even(share):
    y = uneven_labels()
    parts = hd.dominant_class_partition(y, share, 20, np.random.default_rng(0))
    joined = np.concatenate(parts)
    assert len(parts) == 20 and len(np.unique(joined)) == len(joined)     # disjoint
    c = counts(y, parts)
    n = c.sum(1)
    assert (n == n[0]).all() and n[0] >= 0.8 * len(y) / 20                # equal, most of the pool
    top = c.max(1)
    assert np.abs(top - share * n).max() <= 1                            # Gamma of each client
    rest = np.sort(c, 1)[:, :-1] if share > 0.1 else c
    assert (rest.max(1) - rest.min(1)).max() <= 1                         # the others even
    dominant = c.argmax(1) if share > 0.1 else None
    if dominant is not None:                                             # each class twice
        assert sorted(np.bincount(dominant, minlength=10)) == [2] * 10


def test_missing_classes_window_rotates_with_equal_volume():
    y = uneven_labels()
    parts = hd.missing_class_partition(y, 0.4, 20, np.random.default_rng(0))
    c = counts(y, parts)
    present = c > 0
    assert (present.sum(1) == 6).all()                                   # 4 of 10 missing
    assert all(len(set(row[row > 0])) == 1 for row in c)                 # equal volume
    assert sorted(present.sum(0)) == [12] * 10                           # rotated evenly
    joined = np.concatenate(parts)
    assert len(np.unique(joined)) == len(joined)


@pytest.mark.parametrize("partition, level", [("dominant", 0.4), ("missing", 0.4)])
def test_skew_partitions_are_fixed_by_the_seed(partition, level):
    y = uneven_labels()
    first = hd.partition_labels(y, partition, 20, np.random.default_rng(3), alpha=level)
    again = hd.partition_labels(y, partition, 20, np.random.default_rng(3), alpha=level)
    other = hd.partition_labels(y, partition, 20, np.random.default_rng(4), alpha=level)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


@pytest.mark.parametrize("partition, level, needle", [
    ("dominant", 0.05, "dominant class's share"), ("dominant", 1.5, "dominant class's share"),
    ("missing", 0.97, "share of classes a client lacks")])
def test_bad_levels_fail_with_one_line_before_loading(partition, level, needle):
    with pytest.raises(ConfigError, match=needle) as exc:
        RunConfig(dataset="mnist-5k-14", model="pcnn", partition=partition, alpha=level).validate()
    assert "\n" not in str(exc.value)
