"""The writers partition: a FEMNIST stand-in with one fixed handwriting style per client."""
import numpy as np
import pytest
import torch

from hetfl_core import RunConfig, run
from hetfl_core.science.data import (PARTITIONS, WRITER_ROTATION, WRITER_SCALE, apply_style,
                                     load_dataset, make_federated, writer_styles)
from hetfl_core.science.errors import ConfigError


def deal(partition, seed=0):
    return make_federated(load_dataset("digits"), partition, 5, seed, val_fraction=0.1)


def test_listed():
    assert "writers" in PARTITIONS


def test_shapes_and_labels_match_the_iid_deal():
    writers, iid = deal("writers"), deal("iid")
    for a, b in zip(writers.clients, iid.clients):
        for split in ("train", "val", "test"):
            assert getattr(a, f"x_{split}").shape == getattr(b, f"x_{split}").shape
            assert torch.equal(getattr(a, f"y_{split}"), getattr(b, f"y_{split}"))
    assert all(np.array_equal(p, q) for p, q in zip(writers.partition_indices, iid.partition_indices))


def test_iid_has_no_style_shift_and_writers_do():
    iid, writers = deal("iid"), deal("writers")
    x = load_dataset("digits").x_train
    for k, client in enumerate(iid.clients):
        assert torch.equal(client.x_train, x[np.sort(client_rows(iid, k, x))])
    assert iid.styles is None
    assert all(not torch.allclose(a.x_train, b.x_train, atol=1e-3)
               for a, b in zip(writers.clients, iid.clients))


def client_rows(data, k, x):
    """Rows of the pool whose images are client ``k``'s training images."""
    flat = x.flatten(1)
    return [int(torch.nonzero((flat == row).all(1))[0]) for row in data.clients[k].x_train.flatten(1)]


def test_styles_fixed_by_seed_different_across_clients_and_in_range():
    a, b, c = writer_styles(8, 0), writer_styles(8, 0), writer_styles(8, 1)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert len(np.unique(a[:, 0])) == 8 and len(np.unique(a[:, 1])) == 8
    assert np.all(np.abs(a[:, 0]) <= WRITER_ROTATION)
    assert np.all((a[:, 1] >= WRITER_SCALE[0]) & (a[:, 1] <= WRITER_SCALE[1]))
    assert np.array_equal(deal("writers", 3).styles, writer_styles(5, 3))
    again = deal("writers")
    assert all(torch.equal(p.x_test, q.x_test) for p, q in zip(deal("writers").clients, again.clients))


def test_apply_style():
    x = load_dataset("digits").x_train[:4]
    assert torch.allclose(apply_style(x, 0.0, 1.0), x, atol=1e-5)
    turned = apply_style(apply_style(x, 90.0, 1.0), -90.0, 1.0)
    assert torch.allclose(turned, x, atol=1e-4)  # quarter turns map the pixel grid onto itself
    big = apply_style(x, 0.0, 1.2)
    assert big.shape == x.shape and not torch.allclose(big, x)
    with pytest.raises(ConfigError):
        apply_style(torch.zeros(3, 10, dtype=torch.long), 10.0, 1.0)


def test_a_run_on_writers():
    result = run(RunConfig(method="fedavg", dataset="digits", model="cnn", partition="writers",
                           clients=4, rounds=1))
    assert result["history"][-1]["acc_personal"] is not None
