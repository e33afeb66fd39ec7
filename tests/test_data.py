import numpy as np
import pytest
import torch

from hetfl_core.science import data as hd
from hetfl_core.science.errors import ConfigError, DatasetUnavailable


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


@pytest.mark.parametrize("name,shape,n_total,n_test", [
    ("digits", (1, 8, 8), 1797, 359), ("mnist-5k", (1, 28, 28), 5000, 1000),
    pytest.param("fashion-mnist", (1, 28, 28), 70000, 10000, marks=pytest.mark.slow)])
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


# -- registering a dataset -------------------------------------------------------------------
ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


@pytest.fixture
def registry():
    """The dataset registry as it was before the test (a test's datasets leave with it)."""
    saved = dict(hd.DATASETS), dict(hd.DATASET_INFO), dict(hd.datasets._CACHE)
    yield
    for live, before in zip((hd.DATASETS, hd.DATASET_INFO, hd.datasets._CACHE), saved):
        live.clear()
        live.update(before)


def tiny_images(n_train=40, n_test=10, classes=3, side=6):
    def load(root=None):
        g = torch.Generator().manual_seed(1)
        y = torch.arange(n_train + n_test) % classes
        x = torch.randn(n_train + n_test, 1, side, side, generator=g) + y.view(-1, 1, 1, 1)
        return hd.ArrayDataset("tiny", x[:n_train], y[:n_train], x[n_train:], y[n_train:], classes)

    return load


def test_package_datasets_are_registrations_with_their_metadata():
    assert list(hd.DATASETS) == list(hd.DATASET_INFO)
    assert hd.DATASET_INFO["digits"] == ("image", 8, 10, 1438)
    assert hd.DATASET_INFO["shakespeare"] == hd.DatasetInfo("chars", None, None, None)
    assert hd.DATASET_INFO["bible-pairs"].classes == 2
    assert hd.DATASET_INFO["svhn"].train_samples == 73257
    loader, description = hd.DATASETS["mnist-5k-14"]
    assert callable(loader) and "14x14" in description


def test_a_registered_dataset_validates_loads_and_runs(registry):
    from hetfl_core import RunConfig, run

    hd.register_dataset("tiny", tiny_images(), kind="image", side=6, classes=3, train_samples=40,
                        description="three classes of 6x6 noise")
    assert hd.DATASETS["tiny"][1] == "three classes of 6x6 noise"
    config = RunConfig(dataset="TINY", model="cnn", partition="iid", clients=4, rounds=1).validate()
    assert config.dataset == "tiny" and hd.load_dataset("tiny").input_shape == (1, 6, 6)
    assert len(run(config)["history"]) == 1
    with pytest.raises(ConfigError, match="clients must be at most the 40 training samples"):
        RunConfig(dataset="tiny", model="cnn", clients=41).validate()
    with pytest.raises(ConfigError, match="classes_per_client must be in 1..3"):
        RunConfig(dataset="tiny", model="cnn", partition="shards", classes_per_client=4).validate()
    with pytest.raises(ConfigError, match="lenet5.*6x6"):
        RunConfig(dataset="tiny", model="lenet5").validate()


@pytest.mark.parametrize("name,changes,needle", [
    ("digits", {}, "one of the package's datasets"), ("fmnist", {}, "package's datasets"),
    ("My Set", {}, "lower-case name"), ("", {}, "lower-case name"),
    ("t", {"loader": 3}, "callable"), ("t", {"kind": "audio"}, "kind must be one of: image, chars"),
    ("t", {"side": None}, "needs side"), ("t", {"side": 0}, "side must be an integer"),
    ("t", {"classes": 1}, "classes must be an integer"),
    ("t", {"train_samples": 2.5}, "train_samples"), ("t", {"description": "a\nb"}, "one line"),
])
def test_register_dataset_refuses_bad_metadata_in_one_line(registry, name, changes, needle):
    args = {"loader": tiny_images(), "kind": "image", "side": 6, "classes": 3, "train_samples": 40,
            "description": "tiny", **changes}
    loader = args.pop("loader")
    before = dict(hd.DATASET_INFO)
    with pytest.raises(ConfigError, match=needle) as err:
        hd.register_dataset(name, loader, **args)
    assert "\n" not in str(err.value) and hd.DATASET_INFO == before


def test_text_needs_no_side_and_unknown_sizes_are_none(registry):
    hd.register_dataset("words", tiny_images(), kind="tokens", classes=None, train_samples=None,
                        description="tokens")
    assert hd.DATASET_INFO["words"] == ("tokens", None, None, None)


def test_loaded_data_must_match_what_was_registered(registry):
    hd.register_dataset("tiny", tiny_images(n_train=40), kind="image", side=6, classes=3,
                        train_samples=50,
                        description="tiny")
    with pytest.raises(ConfigError, match="registered with train_samples=50, its loader gave 40"):
        hd.load_dataset("tiny")
    hd.register_dataset("tiny", tiny_images(side=6), kind="image", side=7, classes=3,
                        train_samples=40,
                        description="tiny, registered again")
    with pytest.raises(ConfigError, match="side=7, its loader gave 6"):
        hd.load_dataset("tiny")


def test_a_dataset_added_to_DATASETS_by_hand_is_one_config_error(registry):
    from hetfl_core import RunConfig

    hd.DATASETS["byhand"] = (tiny_images(), "added without metadata")
    with pytest.raises(ConfigError, match="has no metadata.*register_dataset") as err:
        RunConfig(dataset="byhand", model="cnn").validate()
    assert "\n" not in str(err.value)


def test_the_readme_dataset_example_runs_as_written(registry, capsys):
    import re

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Your own dataset", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "register_dataset(" in code and len(code.strip().splitlines()) <= 14
    exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})
    accuracy = float(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0 <= accuracy <= 1 and "blobs" in hd.DATASETS


def test_standardisation_is_the_same_on_any_number_of_threads():
    """Fashion-MNIST-sized statistics: equal bit for bit on one and on two torch threads
    (a float32 ``mean()`` is not), and equal to NumPy's float64 mean and sample deviation."""
    from hetfl_core.science.data.datasets import _standardise, training_moments

    g = torch.Generator().manual_seed(0)
    x = torch.rand(3_000_000, generator=g).reshape(3000, 1, 1000) ** 3
    test = torch.rand(10, 1, 1000, generator=g)
    previous = torch.get_num_threads()
    try:
        out = {}
        for threads in (1, 2):
            torch.set_num_threads(threads)
            out[threads] = (training_moments(x), *_standardise(x, test))
            assert torch.get_num_threads() == threads      # the caller's count comes back
    finally:
        torch.set_num_threads(previous)
    assert out[1][0] == out[2][0]
    assert torch.equal(out[1][1], out[2][1]) and torch.equal(out[1][2], out[2][2])
    values = x.numpy().astype(np.float64)
    mean, std = out[1][0]
    assert abs(mean - values.mean()) < 1e-12 and abs(std - values.std(ddof=1)) < 1e-9
