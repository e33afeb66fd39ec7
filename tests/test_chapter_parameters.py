"""A chapter's bad parameter, as a notebook shows it: one line, no traceback (papermill
copies the cell's traceback into its own report, so this shortens that report too)."""
import pytest

from hetfl_core.book import ParameterError, check_parameters
from hetfl_core.science.errors import ConfigError


def test_a_bad_parameter_is_a_config_error_that_renders_as_one_line():
    with pytest.raises(ConfigError) as err:
        check_parameters({"__annotations__": {"seed": "int"}, "seed": -1}, history=[])
    assert isinstance(err.value, ParameterError)
    line = "ConfigError: parameter seed must be an integer in [0, 2**32), got -1"
    assert err.value._render_traceback_() == [line]


def test_ipython_shows_the_failed_cell_as_that_one_line(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        result = shell.run_cell("from hetfl_core.book import check_parameters\n"
                                "seed: int = 0\nseed = -1\n"
                                "check_parameters(globals(), history=[])\n")
    finally:
        InteractiveShell.clear_instance()
    assert isinstance(result.error_in_exec, ConfigError)
    shown = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert shown == ["ConfigError: parameter seed must be an integer in [0, 2**32), got -1"]


def test_a_run_setting_with_a_finite_set_of_values_is_checked_before_any_cell_runs():
    """``-p heterogeneity foo`` fails in the parameters check, naming the values it takes,
    not later inside a run's config; a chapter's own rule for the name replaces the
    library's list."""
    def check(value, **rules):
        check_parameters({"__annotations__": {"heterogeneity": "str"}, "heterogeneity": value},
                         history=[], **rules)

    with pytest.raises(ParameterError, match=r"parameter heterogeneity must be one of .*edge.*got 'foo'"):
        check("foo")
    check("edge")
    with pytest.raises(ParameterError, match="got 'edge'"):
        check("edge", heterogeneity=["low", "medium", "high"])
    with pytest.raises(ParameterError, match="parameter partition must be one of"):
        check_parameters({"__annotations__": {"partition": "str"}, "partition": "dirichelt"}, history=[])
