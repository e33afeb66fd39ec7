"""The arena (hetfl_core.book.arena) and its command line: metrics on hand-made histories, the
equal rules, a toy plug-in joining the smoke arena, and the 'arena' and 'plot' commands."""
import json
import math

import numpy as np
import pytest

from hetfl_core.book import arena
from hetfl_core.cli import main
from hetfl_core.science.errors import ConfigError
from hetfl_core.science.methods import METHODS, register
from hetfl_core.science.methods.fedavg import FedAvg


def run(accs, times, bits=(1.0, 1.0), clients=None, energy=None, method="fedavg", seed=0):
    """A run whose evaluated rounds have these accuracies, times and per-round bits."""
    rows = []
    for i, (a, t) in enumerate(zip(accs, times)):
        row = {"round": i + 1, "time_s": t, "acc_personal": a, "acc_global": None,
               "uplink_bits": bits[0] * (i + 1), "downlink_bits": bits[1] * (i + 1), "flops": 10.0 * (i + 1),
               "acc_clients": clients if clients is not None else [a]}
        if energy is not None:
            row["energy_j"] = energy * (i + 1)
        rows.append(row)
    return {"config": {"method": method, "seed": seed, "options": {}}, "history": rows}


def test_worst_share_is_the_mean_of_the_lowest_tenth_at_least_one_client():
    assert arena.worst_share([0.9, 0.1, 0.5, None]) == pytest.approx(0.1)
    accs = list(np.linspace(0, 1, 20))
    assert arena.worst_share(accs) == pytest.approx(np.mean(accs[:2]))
    assert math.isnan(arena.worst_share([None])) and math.isnan(arena.worst_share(None))


def test_pareto_front_keeps_the_undominated_points_cheapest_first():
    pts = [(1, 50), (2, 60), (3, 55), (0.5, 40), (2, 60), (math.inf, 99), (4, 70)]
    assert arena.pareto_front(pts) == [3, 0, 1, 4, 6]
    assert arena.pareto_front([(1, math.nan)]) == []


def test_log_ticks_label_plain_numbers_denser_over_a_short_range():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (narrow, wide) = plt.subplots(1, 2)
    for ax, (low, high) in ((narrow, (0.25, 1.1)), (wide, (0.5, 400.0))):
        ax.set_xscale("log")
        ax.set_xlim(low, high)
    assert arena.log_ticks(narrow) == pytest.approx([0.3, 0.5, 1.0])
    assert arena.log_ticks(wide) == pytest.approx([0.5, 1, 2, 5, 10, 20, 50, 100, 200])
    fig.canvas.draw()
    shown = [t.get_text() for t in narrow.get_xticklabels()
             if t.get_text() and 0.25 <= t.get_position()[0] <= 1.1]
    assert shown == ["0.3", "0.5", "1"]                 # not "3×10⁻¹"
    plt.close(fig)


def test_run_metrics_reads_target_budget_and_missing_energy():
    r = run([0.2, 0.6, 0.8], [10.0, 20.0, 30.0], clients=[0.1, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.95, 1.0])
    m = arena.run_metrics(r, target=0.6, budget=25.0)
    assert m["acc"] == 0.8 and math.isnan(m["acc_global"]) and m["worst10"] == pytest.approx(0.15)
    assert m["time_to_target"] == 20.0 and m["bits_to_target"] == 4.0 and m["flops_to_target"] == 20.0
    assert m["acc_at_budget"] == 0.6 and m["bits"] == 6.0 and m["time_s"] == 30.0
    assert math.isnan(m["energy_j"]) and math.isnan(m["energy_to_target"])
    never = arena.run_metrics(r, target=0.9, budget=29.0)
    assert never["time_to_target"] == math.inf and never["acc_at_budget"] == 0.6
    with pytest.raises(ValueError, match="first is at time_s 10"):
        arena.run_metrics(r, target=0.9, budget=5.0)     # not evaluated by the budget
    with_energy = arena.run_metrics(run([0.5], [1.0], energy=3.0), target=0.5, budget=1.0)
    assert with_energy["energy_j"] == 3.0 and with_energy["energy_to_target"] == 3.0


def test_targets_budget_is_the_median_finish_unless_a_run_is_not_yet_evaluated():
    from types import SimpleNamespace

    def arena_of(per_method):
        return SimpleNamespace(methods=list(per_method), runs=lambda scenario, m: per_method[m])

    quick = {"a": [run([0.5, 0.7], [1.0, 2.0])], "b": [run([0.4, 0.8], [2.0, 4.0])],
             "c": [run([0.5, 0.6], [3.0, 6.0])]}
    target, budget = arena.targets(arena_of(quick), None)
    assert target == pytest.approx(0.9 * 0.8) and budget == 4.0          # median of 2, 4, 6
    late = {**quick, "c": [run([0.6], [5.0])], "d": [run([0.3], [4.5])]}  # first evaluations 4.5, 5
    target, budget = arena.targets(arena_of(late), None)
    assert budget == 5.0 > np.median([2.0, 4.0, 5.0, 4.5])
    assert all(not math.isnan(arena.run_metrics(r, target, budget)["acc_at_budget"])
               for rs in late.values() for r in rs)


def test_pick_lr_takes_the_best_validation_accuracy_and_a_diverged_run_loses():
    def tuned(*vals):
        return {"history": [{"acc_val": v} for v in vals]}

    grid = {"image": (0.1, 0.3)}
    tuning = {("image", "a", 0.1): tuned(0.2, 0.5), ("image", "a", 0.3): tuned(0.9, 0.6),
              ("image", "b", 0.1): tuned(0.4), ("image", "b", 0.3): None,
              ("image", "c", 0.1): tuned(0.4), ("image", "c", 0.3): tuned(0.4)}
    assert arena.pick_lr(tuning, grid) == {("image", "a"): 0.3, ("image", "b"): 0.1, ("image", "c"): 0.1}


def test_tuning_starts_in_the_middle_and_widens_while_the_best_is_at_an_edge():
    def tuned(v):
        return {"history": [{"acc_val": v}]}

    grid = {"image": (0.03, 0.1, 0.3, 1.0)}
    assert arena.first_lrs(grid["image"]) == (0.1, 0.3) and arena.first_lrs((0.1,)) == (0.1,)
    assert arena.first_lrs((0.03, 0.1, 0.3, 1.0, 3.0)) == (0.1, 0.3)
    tuning = {("image", "up", 0.1): tuned(0.4), ("image", "up", 0.3): tuned(0.6),
              ("image", "down", 0.1): tuned(0.6), ("image", "down", 0.3): tuned(0.4),
              ("image", "inside", 0.03): tuned(0.3), ("image", "inside", 0.1): tuned(0.6),
              ("image", "inside", 0.3): tuned(0.5), ("image", "gone", 0.1): None,
              ("image", "gone", 0.3): None}
    assert sorted(arena.widen(tuning, grid)) == [("image", "down", 0.03), ("image", "gone", 0.03),
                                                 ("image", "up", 1.0)]
    tuning[("image", "up", 1.0)] = tuned(0.7)       # still rising at the grid's top: nothing left
    tuning[("image", "down", 0.03)] = tuned(0.5)    # bracketed: 0.03 < 0.1 > 0.3
    assert ("image", "up") not in {k[:2] for k in arena.widen(tuning, grid)}
    assert ("image", "down") not in {k[:2] for k in arena.widen(tuning, grid)}
    lrs = arena.pick_lr(tuning, grid)
    assert lrs[("image", "up")] == 1.0 and lrs[("image", "down")] == 0.1
    assert arena.lr_edges(lrs, grid) == {("image", "up"): "largest"}
    assert arena.lr_edges({("image", "a"): 0.03}, grid) == {("image", "a"): "smallest"}
    assert arena.lr_edges({("image", "a"): 0.1}, {"image": (0.1,)}) == {}


def test_a_plan_tunes_on_a_stand_in_rate_one_step_outwards():
    """Planned results (``plan`` records runs without training them) carry no accuracy: the
    tuning still asks for one rate more and picks a stand-in, so the plan records the runs
    the arena would make; a method whose runs all failed is not taken for a planned one."""
    planned = {"history": [], "planned": True}
    grid = {"image": (0.03, 0.1, 0.3, 1.0)}
    tuning = {("image", "p", 0.1): planned, ("image", "p", 0.3): planned,
              ("image", "gone", 0.1): None, ("image", "gone", 0.3): None}
    assert sorted(arena.widen(tuning, grid)) == [("image", "gone", 0.03), ("image", "p", 1.0)]
    tuning[("image", "p", 1.0)] = planned
    assert ("image", "p") not in {k[:2] for k in arena.widen(tuning, grid)}
    assert arena.pick_lr(tuning, grid) == {("image", "p"): 0.1}


def test_book_grid_brackets_and_the_sample_count_adds_every_run():
    s = arena.settings("book")
    for grid in s.lr_grid.values():
        ratios = np.diff(np.log(grid))
        assert len(grid) >= 4 and np.allclose(ratios, ratios[0], atol=0.2)
    assert s.lr_grid["image"][0] == 0.03 and s.lr_grid["image"][-1] >= 1.0
    one = arena.settings("smoke")
    c = one.image
    per_run = c.clients * c.participation * c.rounds * c.local_steps * 32
    assert arena.training_samples(one, ["fedavg"]) == {"image": per_run * (1 + 1 - 1)}
    n = arena.training_samples(s, ["fedavg"], lrs_per_method=2)["image"]
    assert n == 5 * s.image.rounds * s.image.local_steps * 32 * (2 + 9 * 3 - 1)


def test_tier_blind_methods_train_the_same_model_at_every_heterogeneity(tmp_path):
    from hetfl_core import RunConfig
    from hetfl_core.runtime.experiments import run_cached

    base = RunConfig(dataset="digits", model="wcnn", clients=4, rounds=2, local_steps=2, lr=0.1,
                     seed=3, system="wireless", train_samples=200, test_fraction=0.2,
                     val_fraction=0.1)

    def accs(method, het):
        r = run_cached(base.replace(method=method, heterogeneity=het), tmp_path)
        return [x.get("acc_personal") for x in r["history"]]

    for m in arena.TIER_BLIND:
        assert accs(m, "low") == accs(m, "high"), m
    assert arena.tier_blind("fedavg") and not arena.tier_blind("heterofl")
    assert not arena.tier_blind("toy-plugin")
    assert accs("heterofl", "low") != accs("heterofl", "high")


def test_majority_rate_is_the_most_frequent_test_label(tmp_path):
    import torch

    from hetfl_core import RunConfig
    from hetfl_core.runtime.engine import build_data

    config = RunConfig(dataset="digits", model="cnn", partition="dirichlet", alpha=0.1, clients=4,
                       seed=2)
    y = torch.cat([c.y_test for c in build_data(config).clients])
    assert arena.majority_rate(config) == pytest.approx(float(torch.bincount(y).max()) / len(y))
    assert 0.1 <= arena.majority_rate(config) < 1


def test_every_method_gets_the_same_clients_rounds_steps_and_seeds():
    s = arena.settings("book")
    lrs = {(t, m): 0.1 for t in ("image", "text") for m in arena.METHODS}
    grid = arena.run_configs(s, arena.METHODS, lrs)
    assert len(arena.scenarios(s)) == 10 and s.seeds >= 3
    own = {"method", "options", "lr", "system"}
    for scenario in arena.scenarios(s):
        configs = [c.to_dict() for (sc, _, _), c in grid.items() if sc == scenario]
        shared = [{k: v for k, v in c.items() if k not in own} for c in configs]
        seeds = sorted({c["seed"] for c in configs})
        assert all(sh == {**shared[0], "seed": sh["seed"]} for sh in shared)
        assert {c["method"] for c in configs} == set(arena.METHODS)
        assert len(configs) == len(arena.METHODS) * len(seeds)
    assert arena.SYSTEM == "wireless" and {c.system for c in grid.values()} == {"wireless"}
    counts = {}
    for sc, _, _ in grid:
        counts[sc] = counts.get(sc, 0) + 1
    assert all(n == 3 * len(arena.METHODS) for n in counts.values())    # 3 seeds in every cell


def test_ofa_capacities_follow_the_device_tiers():
    from hetfl_core.runtime.engine import build_simulation
    from hetfl_core.science.system import REFERENCE_HARDWARE

    s = arena.settings("book")
    for het in ("low", "medium", "high"):
        config = s.image.replace(heterogeneity=het, method="ofafl", dataset="digits", train_samples=300)
        options = arena.method_options("ofafl", config)
        assert options["capacities"] == "by-tier" and options["warmup"] == config.rounds // 5
        method = build_simulation(config.replace(options=options)).method
        caps = [method.capacity[k] for k in range(config.clients)]
        by_tier = {d.tier: c for d, c in zip(method.hardware, caps)}
        assert by_tier["high"] == 1.0 and by_tier["mid"] >= by_tier["low"]
        for d, c in zip(method.hardware, caps):  # never more than the device affords, but the smallest ratio
            assert c <= d.flops_per_s / REFERENCE_HARDWARE.flops_per_s + 1e-9 or c == 0.2
        if het == "medium":
            assert sorted(set(caps)) == [0.2, 0.4, 1.0] and caps.count(1.0) == 4    # tiers 1, 1/2, 1/4
    assert arena.method_options("sparse-prune-pfl", s.text.replace(method="sparse-prune-pfl")) == \
        {"split": "first:2"}
    assert arena.method_options("fedavg", s.image) == {}


def test_text_task_leaves_out_methods_that_cannot_run_an_lstm():
    s = arena.settings("book")
    grid = arena.tuning_configs(s, ["fedlps", "heterofl", "fedavg"])
    text = {m for t, m, _ in grid if t == "text"}
    assert "fedavg" in text and "fedlps" not in text and "heterofl" not in text


class Toy(FedAvg):
    """A toy plug-in: FedAvg that keeps the old model half-way (w <- (w + avg) / 2)."""

    name = "toy-half"
    summary = "toy: half-step FedAvg"
    defaults = {"step": 0.5}

    def aggregate(self, round_idx, reports):
        old = {k: v.clone() for k, v in self.model.state_dict().items()}
        super().aggregate(round_idx, reports)
        step = self.options["step"]
        self.model.load_state_dict({k: (1 - step) * old[k] + step * v for k, v in self.model.state_dict().items()})


def test_a_registered_toy_method_joins_the_smoke_arena(tmp_path):
    register(Toy)                         # the registry is restored after the test (conftest)
    runs = arena.run_arena("smoke", ["toy-half", "fedavg"], processes=1, directory=tmp_path, progress=False)
    rows = arena.leaderboard(runs)
    assert {r["method"] for r in rows} == {"toy-half", "fedavg"} and not runs.failed
    toy = next(r for r in rows if r["method"] == "toy-half")
    assert toy["lr"] == arena.settings("smoke").lr_grid["image"][0] and toy["seeds"] == 1
    assert 0 <= toy["mean"]["acc"] <= 1 and toy["mean"]["time_s"] > 0
    with pytest.raises(ConfigError, match="unknown method"):
        arena.run_arena("smoke", ["no-such-method"], processes=1, directory=tmp_path)


def test_cli_arena_writes_csv_json_png_and_reruns_from_the_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HETFL_CACHE", str(tmp_path / "cache"))
    log = tmp_path / "runs.jsonl"
    monkeypatch.setenv("HETFL_RUN_LOG", str(log))
    out = tmp_path / "out"
    args = ["arena", "--scale", "smoke", "--methods", "fedavg", "local", "--out", str(out), "--processes", "1",
            "--quiet"]
    assert main(args) == 0
    assert {p.name for p in out.iterdir()} == {"leaderboard.csv", "leaderboard.json", "pareto.png"}
    data = json.loads((out / "leaderboard.json").read_text())
    assert {r["method"] for r in data} == {"fedavg", "local"}
    assert (out / "leaderboard.csv").read_text().count("\n") == 3
    computed = [json.loads(line)["cached"] for line in log.read_text().splitlines()]
    log.write_text("")
    assert main(args) == 0
    again = [json.loads(line)["cached"] for line in log.read_text().splitlines()]
    assert not all(computed) and again and all(again)
    assert "Local" in capsys.readouterr().err


def test_cli_arena_loads_a_plugin_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HETFL_CACHE", str(tmp_path / "cache"))
    plugin = tmp_path / "my_method.py"
    plugin.write_text("from hetfl_core.science.methods import register\n"
                      "from hetfl_core.science.methods.fedavg import FedAvg\n\n\n"
                      "@register\nclass Mine(FedAvg):\n    name = 'mine-fedavg'\n    summary = 'mine'\n")
    try:
        assert main(["arena", "--plugin", str(plugin), "--methods", "mine-fedavg", "--out",
                     str(tmp_path / "o"), "--quiet"]) == 0
        assert "mine-fedavg" in (tmp_path / "o" / "leaderboard.csv").read_text()
    finally:
        METHODS.pop("mine-fedavg", None)
    assert main(["arena", "--plugin", str(tmp_path / "nope.py"), "--out", str(tmp_path / "o")]) == 2


def test_cli_plot_draws_any_runs_and_refuses_other_files(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(run([0.2, 0.5], [1.0, 2.0])))
    b.write_text(json.dumps(run([0.3, 0.4], [1.5, 3.0], method="fedper")))
    fig = tmp_path / "fig.png"
    assert main(["plot", str(a), str(b), "-o", str(fig)]) == 0
    assert fig.stat().st_size > 1000
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert main(["plot", str(bad), "-o", str(fig)]) == 2
    assert main(["plot", str(a), "-o", str(fig), "--y", "nonsense"]) == 2


class Fragile(FedAvg):
    """A toy that diverges on seed 1 at any rate above 0.05."""

    name = "toy-fragile"
    summary = "toy: diverges on seed 1 above lr 0.05"

    def client_step(self, client, plan, state, generator):
        report, state = yield from super().client_step(client, plan, state, generator)
        if self.config.seed == 1 and self.config.lr > 0.05:
            report.loss = float("nan")
        return report, state


def test_a_run_that_diverges_falls_back_one_rate_of_the_grid(tmp_path, monkeypatch):
    register(Fragile)
    import dataclasses

    real = arena.settings
    monkeypatch.setattr(arena, "settings", lambda scale, seed=0: dataclasses.replace(
        real(scale, seed), seeds=2, lr_grid={"image": (0.05, 0.1), "text": (1.0,)}))
    monkeypatch.setattr(arena, "pick_lr", lambda tuning, grid: {(t, m): max(grid[t]) for t, m, _ in tuning})
    runs = arena.run_arena("smoke", ["toy-fragile"], processes=1, directory=tmp_path, progress=False)
    lrs = {seed: r["config"]["lr"] for (_, _, seed), r in runs.results.items()}
    assert lrs == {0: 0.1, 1: 0.05} and not runs.failed
    row = arena.leaderboard(runs)[0]
    assert row["seeds"] == 2 and row["lr"] == 0.1 and row["lrs"] == [0.1, 0.05]


@pytest.mark.parametrize("args,needle", [
    (["--seed", "-1"], "seed must be an integer in [0, 2**32), got -1"),
    (["--seed", str(2 ** 32 - 1), "--scale", "book"], "the last of the arena's 3 seeds"),
    (["--processes", "0"], "processes must be an integer of at least 1"),
])
def test_cli_arena_refuses_bad_arguments_before_any_run(args, needle, tmp_path, monkeypatch,
                                                         capsys):
    monkeypatch.setenv("HETFL_CACHE", str(tmp_path / "cache"))
    out = str(tmp_path / "o")
    assert main(["arena", "--methods", "fedavg", "--out", out, "--quiet", *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]
    assert not (tmp_path / "o").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("content,needle", [
    ("import sys\nsys.exit(0)\n", "called sys.exit(0) while loading"),
    ("raise SystemExit('bye')\n", "called sys.exit('bye') while loading"),
    ("raise ValueError('two\\nlines')\n", "failed to load: ValueError: two lines"),
    (None, "is a directory"),
])
def test_cli_arena_reports_a_plugin_that_exits_or_is_a_directory(content, needle, tmp_path,
                                                                 monkeypatch, capsys):
    monkeypatch.setenv("HETFL_CACHE", str(tmp_path / "cache"))
    plugin = tmp_path / "plugin.py"
    if content is None:
        plugin.mkdir()
    else:
        plugin.write_text(content)
    out = str(tmp_path / "o")
    assert main(["arena", "--plugin", str(plugin), "--methods", "fedavg", "--out", out]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and not (tmp_path / "o").exists()


def test_a_plugin_methods_divergence_names_its_file_as_well_as_lr(tiny_config):
    from hetfl_core.runtime.engine import run
    from hetfl_core.science.errors import DivergenceError

    register(Fragile)
    with pytest.raises(DivergenceError) as err:
        run(tiny_config.replace(method="toy-fragile", seed=1, lr=0.1))
    message = str(err.value)
    assert "lr (now 0.1)" in message and "plug-in method toy-fragile" in message
    assert "test_arena.py" in message
    with pytest.raises(DivergenceError) as builtin:             # a package method: lr alone
        run(tiny_config.replace(lr=1e9, rounds=1))
    assert "plug-in" not in str(builtin.value)


def _rows(values: dict) -> list[dict]:
    """Leaderboard-shaped rows: ``values[(method, scenario)]`` per-seed accuracies."""
    return [{"method": m, "scenario": c, "values": {"acc": list(v)}} for (m, c), v in values.items()]


def test_score_table_keeps_the_cells_where_every_method_has_every_seed():
    rows = _rows({("a", "x"): [0.1, 0.2], ("b", "x"): [0.3, 0.4], ("a", "y"): [0.5, math.nan],
                  ("b", "y"): [0.6, 0.7], ("a", "z"): [0.1, 0.1]})
    methods, cells, values = arena.score_table(rows)
    assert methods == ["a", "b"] and cells == ["x"] and values.shape == (2, 1, 2)
    with pytest.raises(ValueError, match="every seed"):
        arena.score_table(rows, methods=["a", "c"])


def test_probability_of_improvement_is_paired_seeded_and_bootstrapped_within_cells():
    x = np.array([[1.0, 2.0, 3.0], [2.0, 3.0, 4.0]])
    y = np.array([[0.0, 2.0, 1.0], [1.0, 1.0, 1.0]])
    got = arena.probability_of_improvement(x, y, seed=3)
    assert got.probability == pytest.approx((2.5 / 3 + 1) / 2)         # a tie counts one half
    assert got == arena.probability_of_improvement(x, y, seed=3)        # seeded
    assert 0 <= got.low <= got.probability <= got.high <= 1 and (got.cells, got.seeds) == (2, 3)
    assert arena.probability_of_improvement(x, y, higher=False, seed=3).probability == \
        pytest.approx(1 - got.probability)
    # rliable's unpaired form: every run of X against every run of Y within a cell
    assert arena.probability_of_improvement([1.0, 3.0], [2.0, 0.0], paired=False).probability == 0.75
    # no difference between X and Y: the interval covers 1/2 in about 95% of draws
    rng = np.random.default_rng(0)
    covers = [arena.probability_of_improvement(rng.normal(size=(4, 5)), rng.normal(size=(4, 5)), reps=200,
                                               seed=i) for i in range(100)]
    assert 0.85 <= np.mean([c.low <= 0.5 <= c.high for c in covers]) <= 1.0
    with pytest.raises(ValueError):
        arena.probability_of_improvement(x, y[:, :2])


def test_critical_difference_ranks_tests_and_groups_the_methods():
    from scipy.stats import friedmanchisquare

    rng = np.random.default_rng(1)
    scores = {"good": rng.normal(2.0, 0.3, 12), "mid": rng.normal(1.0, 0.3, 12), "twin": rng.normal(1.0, 0.3, 12),
              "bad": rng.normal(0.0, 0.3, 12)}
    cd = arena.critical_difference(scores)
    assert cd.ranks[0] < cd.ranks[1] and cd.ranks[3] == max(cd.ranks) and sum(cd.ranks) == pytest.approx(10)
    assert cd.statistic == pytest.approx(friedmanchisquare(*scores.values()).statistic)
    assert cd.p_value < 0.01
    # Demšar's table: q_0.05 = 2.569 for 4 methods
    assert cd.difference == pytest.approx(2.569 * math.sqrt(4 * 5 / (6 * 12)), rel=1e-3)
    assert ["mid", "twin"] in [sorted(g) for g in cd.groups()] or any({"mid", "twin"} <= set(g) for g in cd.groups())
    assert not any({"good", "bad"} <= set(g) for g in cd.groups())
    with pytest.raises(ValueError):
        arena.critical_difference({"a": [1.0, 2.0]})
