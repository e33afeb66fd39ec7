"""sweep() refuses arguments of the wrong type before any run, with one line each."""
import pytest

from hetfl_core.science.errors import ConfigError
from hetfl_core.runtime.experiments import sweep


@pytest.mark.parametrize("configs, needle", [
    ("fedavg", "an iterable of RunConfig"),
    ([None], "item 0 is None"),
    ([dict], "item 0 is the class dict"),
    ([{"method": "fedavg"}], "RunConfig.from_dict"),
    (42, "an iterable of RunConfig"),
])
def test_configs_that_are_not_runconfigs_are_refused(configs, needle, cache):
    with pytest.raises(ConfigError, match=needle) as err:
        sweep(configs, progress=False)
    assert "\n" not in str(err.value)


def test_a_bare_runconfig_is_refused_with_the_fix(tiny_config, cache):
    with pytest.raises(ConfigError, match=r"one RunConfig.*\[config\]"):
        sweep(tiny_config, progress=False)


@pytest.mark.parametrize("processes", ["2", 2.5, 0, -1, True])
def test_processes_must_be_a_whole_number(processes, tiny_config, cache):
    with pytest.raises(ConfigError, match="processes must be a whole number >= 1") as err:
        sweep([tiny_config], processes=processes, progress=False)
    assert "\n" not in str(err.value) and not list(cache.glob("*.json"))


def test_processes_none_means_the_default(tiny_config, cache):
    assert sweep([tiny_config], processes=None, progress=False)[0]["history"]


@pytest.mark.parametrize("directory", [123, 4.5, b"bytes"])
def test_directory_must_be_a_path(directory, tiny_config):
    with pytest.raises(ConfigError, match="directory must be a path"):
        sweep([tiny_config], directory=directory, progress=False)


def test_an_unwritable_directory_argument_is_blamed_not_the_environment(tiny_config, cache):
    with pytest.raises(ConfigError) as err:
        sweep([tiny_config], directory="/proc/x", progress=False)
    assert "directory argument" in str(err.value) and "HETFL_CACHE" not in str(err.value)


@pytest.mark.parametrize("changes, needle", [
    ({"executor": 3}, "executor must be"),
    ({"address": 6379}, "address must be"),
    ({"gpus_per_run": "1"}, "gpus_per_run must be a number"),
    ({"gpus_per_run": -1}, "gpus_per_run must be a number >= 0"),
])
def test_other_arguments_of_the_wrong_type_are_refused(changes, needle, tiny_config, cache):
    with pytest.raises(ConfigError, match=needle):
        sweep([tiny_config], progress=False, **changes)


def test_gpus_per_run_without_ray_is_a_warning(tiny_config, cache):
    with pytest.warns(UserWarning, match="gpus_per_run applies to executor='ray' only"):
        sweep([], gpus_per_run=1, executor="process", progress=False)
