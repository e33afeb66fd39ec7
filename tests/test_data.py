import numpy as np
import pytest
import torch

from hetfl_core import data as hd
from hetfl_core.errors import ConfigError, DatasetUnavailable


def labels(n_per_class=100, classes=10):
    return np.repeat(np.arange(classes), n_per_class)


def entropy(counts):
    p = counts / counts.sum(1, keepdims=True)
    return float(-(p * np.log(np.where(p > 0, p, 1))).sum(1).mean())


def check_exact_cover(parts, n):
    joined = np.concatenate(parts)
    assert len(joined) == n and len(np.unique(joined)) == n  # disjoint and complete


@pytest.mark.parametrize("partition", [p for p in hd.PARTITIONS if p != "natural"])
def test_partitions_are_disjoint_complete_and_seeded(partition):
    y = labels()
    parts = hd.partition_labels(y, partition, 10, np.random.default_rng(0), alpha=0.5, classes_per_client=2)
    check_exact_cover(parts, len(y))
    again = hd.partition_labels(y, partition, 10, np.random.default_rng(0), alpha=0.5, classes_per_client=2)
    other = hd.partition_labels(y, partition, 10, np.random.default_rng(1), alpha=0.5, classes_per_client=2)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other))


def test_natural_partition_gives_one_client_per_group():
    groups = np.array([1, 0, 0, 2, 0, 1])
    parts = hd.natural_partition(groups, 3)
    assert [p.tolist() for p in parts] == [[1, 2, 4], [0, 5], [3]]
    assert [p.tolist() for p in hd.natural_partition(groups, 2)] == [[1, 2, 4], [0, 5]]
    with pytest.raises(ConfigError, match="3 natural clients"):
        hd.natural_partition(groups, 4)
    with pytest.raises(ConfigError, match="natural clients"):
        hd.partition_labels(labels(), "natural", 3, np.random.default_rng(0))


def test_shards_give_exactly_k_classes():
    y = labels()
    for k in (1, 2, 3):
        parts = hd.shards_partition(y, k, 10, np.random.default_rng(0))
        assert [len(np.unique(y[p])) for p in parts] == [k] * 10


def test_dirichlet_skew_grows_as_alpha_shrinks():
    y = labels(200)
    skewed = hd.class_counts(y, hd.dirichlet_partition(y, 0.1, 10, np.random.default_rng(0)), 10)
    mild = hd.class_counts(y, hd.dirichlet_partition(y, 100.0, 10, np.random.default_rng(0)), 10)
    assert entropy(skewed) < entropy(mild) - 0.8
    assert entropy(mild) > 0.95 * np.log(10)


def test_quantity_skew_keeps_labels_iid_but_sizes_unequal():
    y = labels(200)
    parts = hd.quantity_skew_partition(len(y), 10, np.random.default_rng(0), alpha=0.5)
    sizes = np.array([len(p) for p in parts])
    assert sizes.max() > 2 * sizes.min()
    big = parts[int(sizes.argmax())]
    assert len(np.unique(y[big])) == 10


def test_bad_partition_parameters_fail_clearly():
    y = labels()
    with pytest.raises(ConfigError, match="alpha"):
        hd.dirichlet_partition(y, 0.0, 5, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="classes_per_client"):
        hd.shards_partition(y, 11, 5, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="unknown partition"):
        hd.partition_labels(y, "bogus", 5, np.random.default_rng(0))


def test_clients_split_their_own_share():
    ds = hd.load_dataset("digits")
    fed = hd.make_federated(ds, "shards", 6, seed=0, classes_per_client=2, test_fraction=0.2, val_fraction=0.1)
    total = 0
    for client, part in zip(fed.clients, fed.partition_indices):
        total += len(part)
        n = client.n_train + len(client.y_val) + len(client.y_test)
        assert n == len(part)
        own = set(ds.y_train[part].tolist())
        assert set(client.y_test.tolist()) <= own and set(client.y_train.tolist()) <= own
    assert total == len(ds.y_train)


def test_train_samples_subsets_the_pool():
    ds = hd.load_dataset("digits")
    fed = hd.make_federated(ds, "iid", 5, seed=0, train_samples=500)
    assert sum(len(p) for p in fed.partition_indices) == 500


@pytest.mark.parametrize("name,shape,n_total,n_test", [("digits", (1, 8, 8), 1797, 359), ("mnist-5k", (1, 28, 28), 5000, 1000),
                                                        ("fashion-mnist", (1, 28, 28), 70000, 10000)])
def test_offline_datasets_load(name, shape, n_total, n_test):
    ds = hd.load_dataset(name)
    assert ds.input_shape == shape and ds.num_classes == 10
    assert len(ds.y_train) + len(ds.y_test) == n_total and len(ds.y_test) == n_test
    assert set(ds.y_test.unique().tolist()) == set(range(10))
    assert abs(float(ds.x_train.mean())) < 1e-3  # standardised


@pytest.mark.parametrize("name,source", [("mnist-5k-14", "mnist-5k"), ("fashion-mnist-14", "fashion-mnist")])
def test_half_resolution_sets_average_each_2x2_block(name, source):
    small, full = hd.load_dataset(name), hd.load_dataset(source)
    assert small.input_shape == (1, 14, 14) and torch.equal(small.y_test, full.y_test)
    i = len(full.y_train) // 2
    assert float(small.x_train[i, 0, 3, 5]) == pytest.approx(float(full.x_train[i, 0, 6:8, 10:12].mean()), abs=1e-6)


def test_unknown_dataset_names_the_choices():
    with pytest.raises(ConfigError, match="fashion-mnist"):
        hd.load_dataset("imagenet")


def test_unavailable_dataset_says_what_to_use(tmp_path, monkeypatch):
    monkeypatch.setenv("HETFL_DATA", str(tmp_path))
    hd.datasets._CACHE.clear()
    with pytest.raises(DatasetUnavailable) as err:
        hd.load_dataset("mnist")
    message = str(err.value)
    assert "\n" not in message and "mnist-5k" in message
