import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture
def tiny_config():
    """A FedAvg run on sklearn's digits that takes about a second."""
    from hetfl_core import RunConfig

    return RunConfig(dataset="digits", model="cnn", partition="iid", clients=4, rounds=2, lr=0.05)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HETFL_CACHE", str(tmp_path / "runs"))
    return tmp_path / "runs"
