"""The book's palette: one colour and marker per method, stable across figures."""
import matplotlib

matplotlib.use("Agg")

from hetfl_core import plots  # noqa: E402
from hetfl_core.methods import METHODS  # noqa: E402


def test_every_registered_method_has_its_own_style():
    styles = {name: tuple(plots.method_style(name).values()) for name in METHODS}
    assert all(plots.method_key(name) in plots.METHOD_STYLES for name in METHODS), \
        [n for n in METHODS if plots.method_key(n) not in plots.METHOD_STYLES]
    assert len(set(styles.values())) == len(styles)                       # colour and marker decode
    colours = [c for c, _ in plots.METHOD_STYLES.values()]
    assert len(set(colours)) == len(colours)                              # no colour used twice


def test_display_names_and_labels_map_to_their_method():
    assert plots.method_style("LG-FedAvg") == plots.method_style("lg-fedavg")
    assert plots.method_style("OPT") == plots.method_style("sparse-prune-pfl")
    assert plots.method_style("ENC-fixed") == plots.method_style("enc")
    assert plots.method_style("OFA-FL, r=0.5") == plots.method_style("ofafl")
    assert plots.method_style("FedAvg (seed 2)") == plots.method_style("fedavg")
    assert plots.method_style("something else") == plots.method_style("something else")


def test_curves_and_bars_take_the_palette():
    import matplotlib.pyplot as plt

    run = {"config": {"method": "fedlps"}, "history": [{"round": t, "acc_personal": 0.1 * t} for t in (1, 2, 3)]}
    fig, ax = plt.subplots()
    plots.plot_curves([run], ax=ax)
    assert ax.lines[0].get_color() == plots.METHOD_STYLES["fedlps"][0]
    fig, ax = plt.subplots()
    plots.grouped_bars({"iid": {"FedAvg": 0.5, "HeteroFL": 0.4}}, ax=ax)
    assert matplotlib.colors.to_hex(ax.patches[0].get_facecolor()) == plots.METHOD_STYLES["fedavg"][0]
    plt.close("all")


def test_never_reached_bars_get_a_stub_not_a_number():
    import math

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    plots.grouped_bars({"target": {"FedAvg": 12.0, "HeteroFL": math.nan}}, ax=ax, fmt="{:.0f}")
    texts = [t.get_text() for t in ax.texts]
    assert "never" in texts and "nan" not in texts and "12" in texts
    plt.close("all")


def test_spare_colours_are_no_methods_and_one_legend_goes_under_the_figure():
    import matplotlib.pyplot as plt

    assert not set(plots.SPARE_COLOURS) & {c for c, _ in plots.METHOD_STYLES.values()}
    fig, axes = plt.subplots(1, 2, layout="constrained")
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="FedAvg")
        ax.legend()
    axes[1].plot([0, 1], [1, 0], label="FedLPS")
    plots.legend_below(fig, axes)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["FedAvg", "FedLPS"]
    assert all(ax.get_legend() is None for ax in axes)
    plt.close("all")
