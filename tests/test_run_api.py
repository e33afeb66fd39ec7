"""What run() and RunConfig.replace promise a caller: the caller's torch thread count is
its own again after a run, and a wrong argument to replace is one ConfigError line (how
replace and with_options treat the options: tests/test_config.py)."""
import pytest
import torch

from hetfl_core import RunConfig, run
from hetfl_core.runtime.engine import single_thread
from hetfl_core.science.errors import ConfigError


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_run_gives_the_callers_thread_count_back(tiny_config, two_threads):
    seen = []
    run(tiny_config.replace(rounds=1), callback=lambda row: seen.append(torch.get_num_threads()))
    assert seen == [1] and torch.get_num_threads() == 2


def test_a_failed_run_gives_the_thread_count_back_too(tiny_config, two_threads):
    with pytest.raises(ConfigError):
        run(tiny_config.replace(clients=5000))
    assert torch.get_num_threads() == 2


def test_single_thread_called_plainly_sets_one_thread_for_good(two_threads):
    single_thread()                    # a worker process's start: no restoring
    assert torch.get_num_threads() == 1
    torch.set_num_threads(2)
    with single_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("changes,needle", [
    ({"options": None}, "takes a dict of the method's options, got None"),
    ({"options": [("mu", 1)]}, "takes a dict"),
    ({"round": 3}, "unknown config field(s): round"),
])
def test_replace_refuses_a_wrong_argument_in_one_line(changes, needle):
    config = RunConfig(method="fedprox", options={"mu": 0.1})
    with pytest.raises(ConfigError) as err:
        config.replace(**changes)
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert config.replace(rounds=3).options == {"mu": 0.1}
    assert config.replace(options={}).options == {}
