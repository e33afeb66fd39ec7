"""``by_scale``: every call names a paper value; ``ALL`` means every sample."""
import pytest

from hetfl_core import ALL, ConfigError, by_scale


@pytest.mark.parametrize("scale,expected", [("smoke", 2), ("book", 30), ("paper", 500)])
def test_each_scale_picks_its_value(scale, expected):
    assert by_scale(scale, smoke=2, book=30, paper=500) == expected


@pytest.mark.parametrize("scale", ["smoke", "book", "paper"])
def test_missing_paper_value_is_an_error_at_every_scale(scale):
    with pytest.raises(ConfigError, match=r"rounds \(test_by_scale.py:\d+\) has no paper value"):
        rounds = by_scale(scale, smoke=2, book=30)  # noqa: F841


def test_the_error_is_one_line():
    with pytest.raises(ConfigError) as err:
        by_scale("smoke", smoke=2, book=30)
    assert "\n" not in str(err.value)


def test_all_means_every_sample():
    assert by_scale("paper", smoke=300, book=2000, paper=ALL) is None
    assert by_scale("book", smoke=300, book=2000, paper=ALL) == 2000
    assert by_scale("smoke", smoke=ALL, book=2000, paper=ALL) is None
    assert repr(ALL) == "ALL"


@pytest.mark.parametrize("where", ["smoke", "book", "paper"])
def test_none_is_refused_as_ambiguous(where):
    values = {"smoke": 1, "book": 2, "paper": 3, where: None}
    with pytest.raises(ConfigError, match="give ALL"):
        train_samples = by_scale("book", **values)  # noqa: F841


def test_unknown_scale_is_an_error():
    with pytest.raises(ConfigError, match="unknown scale"):
        by_scale("huge", smoke=1, book=2, paper=3)
