"""The verse-topic task (an AG News stand-in) and its EmbeddingBag model."""
import numpy as np
import torch

from hetfl_core import RunConfig, run
from hetfl_core.science.data.bible import TOPIC_WORDS, TOPICS, load_corpus, topic_of_book
from hetfl_core.science.data import DATASETS, load_dataset, make_federated
from hetfl_core.science.models import MODELS, build_model


def test_listed():
    assert "bible-topics" in DATASETS and "embbag" in MODELS


def test_parts_of_the_canon():
    assert [topic_of_book(b) for b in (0, 16, 17, 21, 22, 38, 39, 65)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert len(TOPICS) == 4


def test_shapes_labels_and_groups():
    ds = load_dataset("bible-topics")
    assert ds.num_classes == 4 and ds.x_train.dtype == torch.int64
    assert ds.x_train.shape[1:] == ds.x_test.shape[1:] == (TOPIC_WORDS,)
    assert len(ds.y_train) + len(ds.y_test) == len(load_corpus())
    assert set(ds.y_train.tolist()) == set(ds.y_test.tolist()) == {0, 1, 2, 3}
    assert int(ds.groups.max()) + 1 == 66
    sizes = np.bincount(ds.groups.numpy())
    assert np.all(np.diff(sizes) <= 0)  # numbered by decreasing size
    assert int(ds.x_train.max()) < 4000


def test_natural_clients_are_books_each_of_one_topic():
    ds = load_dataset("bible-topics")
    data = make_federated(ds, "natural", 66, 0)
    assert len(data.clients) == 66
    assert sorted(np.concatenate(data.partition_indices).tolist()) == list(range(len(ds.y_train)))
    assert all(len(torch.unique(torch.cat([c.y_train, c.y_test]))) == 1 for c in data.clients)


def test_embbag_ignores_padding_and_runs():
    model = build_model("embbag", (TOPIC_WORDS,), 4)
    x = torch.tensor([[5, 6, 7] + [0] * (TOPIC_WORDS - 3)])
    assert torch.allclose(model(x), model(x[:, :3]))
    result = run(RunConfig(method="fedavg", dataset="bible-topics", model="embbag", partition="iid",
                           clients=4, rounds=2, train_samples=800, lr=0.1))
    assert result["history"][-1]["acc_personal"] > 0.25
