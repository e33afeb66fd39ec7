"""data/partitions.py against the partitioners of Flower Datasets (flwr-datasets), as a
property oracle. flwr-datasets is not a dependency, so its partitioners' documented
semantics are written here independently, on plain label arrays:

* ``IidPartitioner``: shuffle, then cut into ``num_partitions`` contiguous pieces whose
  sizes differ by at most one;
* ``DirichletPartitioner``: for each class, proportions ~ Dirichlet(alpha) over the
  partitions, cut at ``int(cumsum(p) * n_c)``; redrawn until every partition has
  ``min_partition_size``; with ``self_balancing`` (its default) a partition already above
  the average size gets no more samples;
* ``PathologicalPartitioner`` (``class_assignment_mode="random"``): each partition draws
  ``num_classes_per_partition`` distinct classes; each class's samples are split into
  near-equal pieces among the partitions holding it;
* ``ShardPartitioner`` (McMahan et al. 2017): sort by label, cut into equal shards, deal
  ``num_shards_per_partition`` random shards to each partition.

Exact equality is impossible (the two draw their random numbers differently), so the
tests compare properties: sizes, classes per client, and the effect of alpha averaged
over seeds. The ``partition="given"`` hook then feeds one oracle partition to a run.
"""
import numpy as np
import pytest

from hetfl_core import RunConfig
from hetfl_core.science.data.partitions import dirichlet_partition, iid_partition, shards_partition
from hetfl_core.runtime.engine import build_simulation
from hetfl_core.science.errors import ConfigError

LABELS = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 200))
CLIENTS, SEEDS = 10, 30


def oracle_iid(n, clients, rng):
    order = rng.permutation(n)
    sizes = [n // clients + (i < n % clients) for i in range(clients)]
    return np.split(order, np.cumsum(sizes)[:-1])


def oracle_dirichlet(labels, clients, alpha, rng, min_size=10, self_balancing=False):
    average = len(labels) / clients
    while True:
        parts = [[] for _ in range(clients)]
        for c in np.unique(labels):
            idx = np.flatnonzero(labels == c)
            p = rng.dirichlet(np.full(clients, alpha))
            if self_balancing:
                p = np.where([len(q) > average for q in parts], 0.0, p)
                p = p / p.sum()
            for k, piece in enumerate(np.split(idx, (np.cumsum(p) * len(idx)).astype(int)[:-1])):
                parts[k] += piece.tolist()
        if min(len(q) for q in parts) >= min_size:
            return [np.array(q, dtype=np.int64) for q in parts]


def oracle_pathological(labels, clients, per_client, rng):
    classes = np.unique(labels)
    held = [rng.choice(classes, per_client, replace=False) for _ in range(clients)]
    parts = [[] for _ in range(clients)]
    for c in classes:
        holders = [k for k in range(clients) if c in held[k]]
        pieces = np.array_split(np.flatnonzero(labels == c), max(len(holders), 1))
        for k, piece in zip(holders, pieces):
            parts[k] += piece.tolist()
    return [np.array(q, dtype=np.int64) for q in parts]


def oracle_shards(labels, clients, per_client, rng):
    ordered = np.argsort(labels, kind="stable")
    size = len(labels) // (clients * per_client)
    picks = rng.permutation(clients * per_client).reshape(clients, per_client)
    return [np.concatenate([ordered[s * size:(s + 1) * size] for s in row]) for row in picks]


def classes_per_client(parts, labels=LABELS):
    return [len(np.unique(labels[p])) for p in parts]


def size_spread(parts):
    sizes = np.array([len(p) for p in parts])
    return sizes.std() / sizes.mean()


def assert_a_partition(parts, n):
    every = np.concatenate(parts)
    assert len(np.unique(every)) == len(every) and every.min() >= 0 and every.max() < n


def test_iid_sizes_are_the_oracles():
    for seed in range(3):
        ours = iid_partition(len(LABELS) + seed, 7, np.random.default_rng(seed))
        theirs = oracle_iid(len(LABELS) + seed, 7, np.random.default_rng(seed))
        assert sorted(map(len, ours)) == sorted(map(len, theirs))
        assert_a_partition(ours, len(LABELS) + seed)
        assert sum(map(len, ours)) == len(LABELS) + seed


@pytest.mark.parametrize("alpha", [0.1, 0.5, 5.0])
def test_dirichlet_matches_the_oracle_without_self_balancing(alpha):
    """Same classes per client and size spread as flwr-datasets' DirichletPartitioner with
    ``self_balancing=False``, averaged over seeds; its default (balancing on) gives fewer
    classes and more even sizes at small alpha."""
    rngs = [np.random.default_rng(s) for s in range(3 * SEEDS)]
    ours = [dirichlet_partition(LABELS, alpha, CLIENTS, rng) for rng in rngs[:SEEDS]]
    theirs = [oracle_dirichlet(LABELS, CLIENTS, alpha, rng) for rng in rngs[SEEDS:2 * SEEDS]]
    for parts in ours:
        assert_a_partition(parts, len(LABELS))
        assert min(map(len, parts)) >= 10
        assert sum(map(len, parts)) == len(LABELS)
    mean_classes = [np.mean([np.mean(classes_per_client(p)) for p in side])
                    for side in (ours, theirs)]
    mean_spread = [np.mean([size_spread(p) for p in side]) for side in (ours, theirs)]
    assert abs(mean_classes[0] - mean_classes[1]) <= 0.4, mean_classes
    assert abs(mean_spread[0] - mean_spread[1]) <= 0.08, mean_spread
    if alpha == 0.5:
        balanced = [oracle_dirichlet(LABELS, CLIENTS, alpha, rng, self_balancing=True)
                    for rng in rngs[2 * SEEDS:]]
        assert np.mean([size_spread(p) for p in balanced]) < mean_spread[0] - 0.05


def test_smaller_alpha_fewer_classes_on_both_sides():
    def mean_classes(partitioner):
        return [np.mean([np.mean(classes_per_client(partitioner(a, s))) for s in range(10)])
                for a in (0.05, 0.3, 3.0, 300.0)]
    rng = np.random.default_rng
    ours = mean_classes(lambda a, s: dirichlet_partition(LABELS, a, CLIENTS, rng(s)))
    theirs = mean_classes(lambda a, s: oracle_dirichlet(LABELS, CLIENTS, a, rng(s)))
    for side in (ours, theirs):
        assert all(x <= y for x, y in zip(side, side[1:]))
        assert side[0] < 4 and side[-1] == 10


@pytest.mark.parametrize("per_client", [1, 2, 3])
def test_shards_is_the_pathological_partitioner(per_client):
    """The ``shards`` partition has flwr-datasets' PathologicalPartitioner's properties:
    exactly k classes per client, each class split near-equally among its holders, every
    sample of a held class dealt; it also spreads the classes more evenly over the clients
    (holder counts within 2 of each other)."""
    for seed in range(5):
        for parts in (shards_partition(LABELS, per_client, CLIENTS, np.random.default_rng(seed)),
                      oracle_pathological(LABELS, CLIENTS, per_client,
                                          np.random.default_rng(seed))):
            assert_a_partition(parts, len(LABELS))
            assert classes_per_client(parts) == [per_client] * CLIENTS
            held = [set(np.unique(LABELS[p])) for p in parts]
            for c in set().union(*held):
                pieces = [int((LABELS[p] == c).sum()) for p, h in zip(parts, held) if c in h]
                assert max(pieces) - min(pieces) <= 1 and sum(pieces) == int((LABELS == c).sum())

    def holder_spread(parts):
        holders = [sum(c in set(LABELS[p]) for p in parts) for c in range(10)]
        return max(holders) - min(holders)
    ours = [holder_spread(shards_partition(LABELS, per_client, CLIENTS, np.random.default_rng(s)))
            for s in range(10)]
    theirs = [holder_spread(oracle_pathological(LABELS, CLIENTS, per_client,
                                                np.random.default_rng(s))) for s in range(10)]
    assert max(ours) <= 2 and np.mean(ours) < np.mean(theirs)


def test_mcmahan_shards_differ_from_ours():
    """flwr-datasets' ShardPartitioner gives equal sizes and at most 2 classes per client
    with 2 shards (two shards may share a class); ours fixes the classes, not the sizes."""
    theirs = oracle_shards(LABELS, CLIENTS, 2, np.random.default_rng(0))
    assert len(set(map(len, theirs))) == 1 and max(classes_per_client(theirs)) <= 2
    ours = shards_partition(LABELS, 2, CLIENTS, np.random.default_rng(0))
    assert classes_per_client(ours) == [2] * CLIENTS


def test_given_feeds_an_oracle_partition_to_a_run():
    config = RunConfig(dataset="digits", model="cnn", clients=5, rounds=1, partition="iid")
    labels = build_simulation(config).data.dataset.y_train.numpy()
    parts = oracle_dirichlet(labels, 5, 0.5, np.random.default_rng(7))
    given = [p.tolist() for p in parts]
    sim = build_simulation(config.replace(partition="given", given_indices=given))
    for k, client in enumerate(sim.data.clients):
        assert np.array_equal(sim.data.partition_indices[k], np.sort(parts[k]))
        assert client.n_train + len(client.y_test) == len(parts[k])
        held = sorted(client.y_train.tolist() + client.y_test.tolist())
        assert held == sorted(labels[parts[k]].tolist())


@pytest.mark.parametrize("bad, message", [
    (dict(partition="given"), "go together"),
    (dict(given_indices=[[0], [1], [2]]), "go together"),
    (dict(partition="given", given_indices=[[0], [1]]), "list of 3"),
    (dict(partition="given", given_indices=[[0, 1], [1], [2]]), "more than one client"),
    (dict(partition="given", given_indices=[[0], [], [2]]), "non-empty"),
    (dict(partition="given", given_indices=[[0], [1], [10 ** 6]]), "outside"),
])
def test_given_rejects_a_bad_assignment(bad, message):
    with pytest.raises(ConfigError, match=message):
        build_simulation(RunConfig(dataset="digits", model="cnn", clients=3, rounds=1, **bad))
