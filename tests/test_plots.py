"""The book's palette: one colour and marker per method, stable across figures."""
import matplotlib
import pytest

matplotlib.use("Agg")

from hetfl_core.book import plots  # noqa: E402


def test_no_colour_is_used_twice():
    """(Each registered method's own style is a check of the method contract,
    tests/methods/test_contract.py.)"""
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


def test_never_reached_bars_get_a_cross_on_the_axis_not_a_number():
    import math

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    plots.grouped_bars({"target": {"FedAvg": 12.0, "HeteroFL": math.nan}}, ax=ax, fmt="{:.0f}")
    texts = [t.get_text() for t in ax.texts]
    assert "never" in texts and "nan" not in texts and "12" in texts
    # one convention: a cross on the axis, no bar with a height (FedLPS Fig. 3.4's)
    crosses = [line for line in ax.lines if line.get_marker() == "x"]
    assert len(crosses) == 1 and list(crosses[0].get_ydata()) == [0]
    assert matplotlib.colors.to_hex(crosses[0].get_color()) == plots.METHOD_STYLES["heterofl"][0]
    finite = [p.get_height() for p in ax.patches if math.isfinite(p.get_height())]
    assert finite == [12.0]
    plt.close("all")


def test_spare_colours_are_far_apart():
    """No two spare colours within 25 units of each other in CIELAB (the previous set held
    four purples within 20)."""
    import itertools

    import matplotlib.colors

    def lab(colour):
        rgb = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
               for c in matplotlib.colors.to_rgb(colour)]
        xyz = [sum(m * c for m, c in zip(row, rgb)) / white for row, white in zip(
            ((0.4124, 0.3576, 0.1805), (0.2126, 0.7152, 0.0722), (0.0193, 0.1192, 0.9505)),
            (0.9505, 1.0, 1.089))]
        f = [v ** (1 / 3) if v > 0.008856 else 7.787 * v + 16 / 116 for v in xyz]
        return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])

    def distance(a, b):
        return sum((x - y) ** 2 for x, y in zip(lab(a), lab(b))) ** 0.5

    assert min(distance(a, b) for a, b in itertools.combinations(plots.SPARE_COLOURS, 2)) > 25
    assert distance("#756bb1", "#6b6ecf") < 25          # the check tells two purples apart


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


# -- the 'plot' command with bad input: exit 2, one line, nothing drawn or written --------------
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from hetfl_core.cli import main  # noqa: E402

GOOD = {"config": {"method": "fedavg"},
        "history": [{"round": t, "time_s": 1.5 * t, "uplink_bits": 8e6 * t, "acc_personal": 0.2 * t}
                    for t in (1, 2, 3)]}


def _row(**changes):
    return {**GOOD, "history": [{**GOOD["history"][0], **changes}]}


BAD_RUNS = [
    ('{"config": {}, "history": [1]}', "config.method"),
    ('{"config": {"method": "fedavg"}, "history": [null]}', "history row 1 is not a dict"),
    ('{"config": {"method": "fedavg"}, "history": [1]}', "history row 1 is not a dict"),
    (json.dumps({**GOOD, "config": {"method": 1}}), "config.method"),
    (json.dumps({**GOOD, "config": {"seed": 0}}), "config.method"),
    (json.dumps(_row(acc_personal="a")), "acc_personal must be a finite number"),
    (json.dumps(_row(time_s="a")), "time_s must be a finite number"),
    (json.dumps(_row(round=None)), "round must be a finite number"),
    (json.dumps(_row(uplink_bits=True)), "uplink_bits must be a finite number"),
    (json.dumps(_row(acc_personal=None)), "no round has acc_personal"),
    ("[" * 100_000, "RecursionError"),
    ("[{}]", "no config and history"),
]


@pytest.mark.parametrize("text,needle", BAD_RUNS, ids=[n for _, n in BAD_RUNS])
def test_plot_refuses_a_bad_run_file_in_one_line(text, needle, tmp_path, capsys):
    run_file, fig = tmp_path / "run.json", tmp_path / "fig.png"
    run_file.write_text(text)
    assert main(["plot", str(run_file), "-o", str(fig)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and not fig.exists()


def _good_run(tmp_path) -> Path:
    path = tmp_path / "fedavg.json"
    path.write_text(json.dumps(GOOD))
    return path


@pytest.mark.parametrize("out,needle", [
    ("fig.xyz", "format 'xyz' names no image format"), ("adir", "is a directory"),
    ("", "needs a file name"), ("/dev/full", "not a regular file"),
    ("newdir/", "names a directory"),
    ("link.png", "symbolic link"),
])
def test_plot_refuses_a_bad_output_before_drawing(out, needle, tmp_path, monkeypatch, capsys):
    import matplotlib.figure

    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "precious.txt").write_text("keep")
    (tmp_path / "link.png").symlink_to(tmp_path / "precious.txt")
    drawn = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda *a, **k: drawn.append(a))
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["plot", str(_good_run(tmp_path)), "-o", out]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and not drawn
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({*before, "fedavg.json"})
    assert (tmp_path / "precious.txt").read_text() == "keep" and not Path("/dev/full.png").exists()


@pytest.mark.parametrize("out,written", [("fnoext", "fnoext.png"), ("fig.svg", "fig.svg"),
                                         ("f.PDF", "f.PDF")])
def test_plot_reports_the_path_it_wrote(out, written, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["plot", str(_good_run(tmp_path)), "-o", out]) == 0
    assert capsys.readouterr().err.strip().splitlines() == [f"wrote {written}"]
    assert (tmp_path / written).stat().st_size > 1000
    assert out == written or not (tmp_path / out).exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []    # no temp file


@pytest.mark.slow
def test_plot_of_a_pipe_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    argv = [sys.executable, "-m", "hetfl_core", "plot", str(fifo), "-o", str(tmp_path / "f.png")]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"python -m hetfl_core: error: {fifo}: not a regular file"]


def test_panels_and_plot_cases_draw_one_panel_per_case():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hetfl_core.book import plots

    fig, axes = plots.panels(5)
    assert len(axes) == 5 and len(fig.axes) == 5
    fig, axes = plots.panels(4)
    assert axes[0].get_gridspec().get_geometry() == (2, 2)
    plt.close("all")
    run = lambda m, s: {"config": {"method": m}, "history": [
        {"round": r, "acc_personal": 0.1 * r + 0.01 * s} for r in (1, 2, 3)]}
    fig = plots.plot_cases({"case A": {"FedAvg": [run("fedavg", 0), run("fedavg", 1)]},
                            "case B": {"FedAvg": [run("fedavg", 0)], "Ditto": []}}, title="t")
    assert [ax.get_title() for ax in fig.axes] == ["case A", "case B"]
    assert all(ax.get_legend() is None for ax in fig.axes) and fig.legends
    assert len(fig.axes[0].collections) == 1 and not fig.axes[1].collections   # a band over 2 seeds only
    plt.close("all")
    import pytest

    with pytest.raises(ValueError):
        plots.panels(0)


def test_a_critical_difference_diagram_labels_every_method_with_its_rank():
    import matplotlib.pyplot as plt

    from hetfl_core.book import arena, plots

    cd = arena.critical_difference({"fedavg": [0.8, 0.7, 0.9], "fedlps": [0.6, 0.5, 0.7], "local": [0.7, 0.6, 0.8]})
    fig, ax = plt.subplots()
    plots.plot_critical_difference(cd, ax, labels={"fedavg": "FedAvg"})
    texts = [t.get_text() for t in ax.texts]
    assert "FedAvg (1.00)" in texts and "fedlps (3.00)" in texts and any(t.startswith("CD = ") for t in texts)
    plt.close(fig)


def test_distinct_colours_keep_variants_off_the_methods_colours():
    """The rule picks the spare farthest from the methods drawn: beside OPT's brown the
    first pick is not sienna, and no pick repeats."""
    brown = plots.method_style("OPT")["color"]
    picks = plots.distinct_colours(3, [brown])
    assert len(set(picks)) == 3 and set(picks) <= set(plots.SPARE_COLOURS)
    nearest = min(plots.SPARE_COLOURS, key=lambda c: plots.colour_distance(c, brown))
    assert nearest not in picks
    assert plots.colour_distance("#000000", "#ffffff") > 99
    with pytest.raises(ValueError, match="n must be an integer"):
        plots.distinct_colours(len(plots.SPARE_COLOURS) + 1)


def test_legible_text_reads_at_least_8_points_at_the_page_width():
    import matplotlib.pyplot as plt
    import matplotlib.text

    fig, axes = plots.panels(3)
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="a line")
        ax.set_title("a panel")
    plots.legend_below(fig, axes)
    shown = min(fig.dpi, plots.PAGE_WIDTH_PX / fig.get_figwidth()) / 96
    fig.canvas.draw()
    small = [t for t in fig.findobj(matplotlib.text.Text) if t.get_text()]
    assert min(t.get_fontsize() for t in small) * shown < 8      # 10 in wide: too small
    plots.legible(fig)
    fig.canvas.draw()
    texts = [t for t in fig.findobj(matplotlib.text.Text) if t.get_text()]
    texts += [t for ax in axes for t in ax.get_xticklabels() + ax.get_yticklabels()]
    assert min(t.get_fontsize() for t in texts) * shown >= 8 - 1e-9
    plt.close(fig)
