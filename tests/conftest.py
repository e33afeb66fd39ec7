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


@pytest.fixture
def method_config():
    """``method_config(name, **changes)``: a one-second run of method ``name`` on digits,
    with the settings the method requires (flanc and heroes compose wcnn; srp-pfed clusters
    on a validation split)."""
    from hetfl_core import RunConfig

    def make(method, **changes):
        needs = {"flanc": {"model": "wcnn"}, "heroes": {"model": "wcnn"}, "srp-pfed": {"val_fraction": 0.2}}
        settings = dict(dataset="digits", model="cnn", partition="iid", clients=3, rounds=1, local_steps=2)
        return RunConfig(method=method, **{**settings, **needs.get(method, {}), **changes})

    return make


@pytest.fixture(scope="session")
def local_ray():
    """One local Ray (2 CPUs, no dashboard) shared by every test that needs it: starting Ray
    costs seconds."""
    from hetfl_core.runtime.ray_executor import connect

    ray = connect(cpus=2)
    yield ray
    ray.shutdown()


@pytest.fixture(autouse=True)
def registry_unchanged():
    """A test that registers a toy method takes it out again: other tests iterate over every
    registered method (Flower, the plot styles)."""
    from hetfl_core.science.methods import METHODS

    before = dict(METHODS)
    yield
    METHODS.clear()
    METHODS.update(before)
