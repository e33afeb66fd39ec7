"""The Heroes chapter's machinery (hetfl_core.chapters.heroes): its queries on hand-made
histories, and its claims' verdicts computed from every seed."""
import math

import numpy as np
import pytest

from hetfl_core import RunConfig
from hetfl_core.chapters import heroes as ch
from hetfl_core import plots, report
from hetfl_core.report import Ledger


def history(rows):
    """A run with the given ``(time_s, acc_global, uplink_bits, clients)`` rows."""
    return {"config": {"method": "heroes", "options": {}},
            "history": [{"round": i + 1, "time_s": t, "acc_global": a, "uplink_bits": b,
                         "downlink_bits": b, "clients": cl,
                         "idle_s": sum(max(c["time_s"] for c in cl) - c["time_s"] for c in cl)}
                        for i, (t, a, b, cl) in enumerate(rows)]}


def clients(*times, blocks=(0,), steps=1):
    return [{"time_s": t, "local_steps": steps, "blocks": list(blocks)} for t in times]


def test_variant_gives_full_model_methods_half_the_rounds():
    base = RunConfig(dataset="digits", model="pcnn", rounds=30)
    assert ch.variant("fedavg", base).rounds == 15
    assert ch.variant("heroes", base).rounds == 30
    enc = ch.variant("enc", base)
    assert enc.method == "heroes" and enc.options["frequency"] == "fixed"
    enc.options["frequency"] = "changed"                      # the table is not shared
    assert ch.VARIANTS["enc"]["options"]["frequency"] == "fixed"


def test_ratio_keeps_never_reached_apart():
    r = report.ratio([10, math.inf, 10, math.inf], [5, 5, math.inf, math.inf])
    assert r[0] == 2 and r[1] == math.inf and r[2] == 0 and math.isnan(r[3])
    criterion = ch.sooner("speedup")
    assert [criterion(v) for v in r] == [True, True, False, False]
    text = ch.ratio_text(r, other="FedAvg")
    assert "2.00×" in text and "only Heroes reached it on 1 of 4" in text
    assert "only FedAvg reached it on 1 of 4" in text and "neither reached it on 1 of 4" in text


def test_gap_to_best_is_to_the_baseline_best_on_average_unevaluated_seeds_censored():
    acc = {"heroes": np.array([0.5, 0.5, 0.5]), "fedavg": np.array([np.nan, 0.6, np.nan]),
           "flanc": np.array([0.4, 0.4, np.nan])}
    gap = ch.gap_to_best(acc, "heroes", ("fedavg", "flanc"))       # FedAvg: 0.6 on average
    assert math.isnan(gap[0]) and gap[1] == pytest.approx(-10) and math.isnan(gap[2])
    assert ch.best_accuracy({"a": np.array([np.nan]), "b": np.array([0.3, 0.5])}) == 0.4


def test_gap_to_best_does_not_take_each_seeds_best_baseline():
    """FedAvg and Flanc take turns as a seed's best: the comparator is FedAvg, the better
    on average, on every seed, so the row is not biased against Heroes (a per-seed maximum
    gives -2, -4, -3 points and fails)."""
    acc = {"heroes": np.array([0.80, 0.80, 0.80]), "fedavg": np.array([0.82, 0.70, 0.83]),
           "heterofl": np.array([0.60, 0.60, 0.60]), "flanc": np.array([0.70, 0.84, 0.70])}
    gap = ch.gap_to_best(acc, "heroes", ch.BASELINES)
    np.testing.assert_allclose(gap, [-2.0, 10.0, -3.0])
    ledger = Ledger("heroes", "Heroes")
    ch.claims_noniid(ledger, {"Γ=80": (10.0, acc)})
    (row,) = ledger.claims
    assert row.values == pytest.approx([-2.0, 10.0, -3.0])
    assert row.verdict == "inconclusive"


def test_resnet_costs_pair_each_seed_with_the_baseline_cheapest_on_average():
    """FedAvg reaches the target at round 3, 4, 3 and Flanc at 4, 3, 4: the comparator
    of both cost rows is FedAvg, the cheapest on average, on every seed (each seed's
    cheapest would give 1.5× on every seed)."""
    def run_of(accs):
        return history([(float(t), a, 1e6 * t, clients(1.0)) for t, a in enumerate(accs, 1)])
    curve = {3: [0.2, 0.3, 0.8, 0.8], 4: [0.2, 0.3, 0.5, 0.8]}
    results = {}
    for s, (fa, fl) in enumerate(((3, 4), (4, 3), (3, 4))):
        results[("heroes", s)] = run_of([0.2, 0.9, 0.9, 0.9])
        results[("fedavg", s)] = run_of(curve[fa])
        results[("flanc", s)] = run_of(curve[fl])
        results[("heterofl", s)] = run_of([0.2, 0.3, 0.4, 0.5])
    ledger = Ledger("heroes", "Heroes")
    ch.claims_resnet(ledger, results)
    acc, traffic, time = ledger.claims
    assert acc.values == pytest.approx([10.0, 10.0, 10.0]) and acc.verdict == "holds"
    assert acc.headline and acc.seeds == 3          # the headline row: one value per seed
    for row in (traffic, time):
        assert row.values == pytest.approx([1.5, 2.0, 1.5])
        assert row.verdict == "holds"


def test_queries_on_a_hand_made_history():
    r = history([(10.0, 0.2, 8e6, clients(4.0, 10.0, blocks=(0, 1), steps=2)),
                 (20.0, 0.6, 8e6, clients(9.0, 10.0, blocks=(1, 2), steps=3))])
    assert ch.idle_share(r, 1) == pytest.approx(0.6)
    assert ch.idle_share(r, 9) == pytest.approx(0.1)          # past the end: the last round
    assert ch.waiting_per_round(r) == pytest.approx((6 / 2 + 1 / 2) / 2)
    counts = ch.block_counters(r, 4)
    np.testing.assert_array_equal(counts[-1], [4, 10, 6, 0])   # two clients per round
    assert ch.least_and_spread(counts) == (0.0, pytest.approx(10 / 5))
    xs, ys = plots.series(r, x="traffic_bits", y=ch.Y)
    np.testing.assert_array_equal(xs, [16e6, 16e6])
    results = {("heroes", 0): r}
    assert ch.reach(results, ["heroes"], 0.5)["heroes"][0] == 20.0
    assert ch.reach(results, ["heroes"], 0.9)["heroes"][0] == math.inf
    columns = ch.budget_columns([r])
    assert list(columns.values())[2] == ("time_s", pytest.approx(20 / 3))
    table = ch.budget_table(results, ["heroes"], columns)
    assert math.isnan(table["heroes"]["6.67 s"][0]) and table["heroes"]["13.3 s"][0] == 0.2


def test_flanc_full_coefficient_is_its_width_p_blocks():
    full = list(ch.width_blocks(ch.GROUPS))
    r = history([(1.0, 0.1, 1.0, clients(1.0, blocks=full[:2], steps=5))])
    r["config"]["method"] = "flanc"
    counts = ch.full_coefficient_counters(r)
    assert counts.shape == (1, 16) and counts[0, :2].tolist() == [5, 5] and counts.sum() == 10


def test_claims_verdicts_come_from_every_seed():
    """Fig. 7 claims: one level where Heroes wins on both seeds, one where the seeds
    disagree, one where it loses; the why of a non-holding claim cites the numbers."""
    def level(h, f):
        out = {}
        for s, (a, b) in enumerate(zip(h, f)):
            for n, acc in (("heroes", a), ("fedavg", b), ("heterofl", 0.1), ("flanc", 0.1)):
                out[(n, s)] = history([(5.0, acc, 1.0, clients(5.0))])
        return out
    acc = ch.noniid_accuracy({"win": level([0.6, 0.7], [0.5, 0.5]),
                              "split": level([0.6, 0.4], [0.5, 0.5]),
                              "lose": level([0.4, 0.4], [0.5, 0.5])}, ["heroes", *ch.BASELINES])
    ledger = Ledger("heroes", "Heroes")
    ch.claims_noniid(ledger, acc)
    assert [c.per_seed for c in ledger.claims] == ["all", "some", "none"]
    assert ledger.claims[0].why == ""
    assert "Heroes 40.0%" in ledger.claims[2].why and "conjecture" not in ledger.claims[2].why


def test_claims_cnn_on_hand_made_runs():
    """Heroes reaches 80% at 2 s, FedAvg at 4 s: the speedup claim holds on both seeds;
    every claim gets a verdict and a non-holding one a measured why."""
    def run_of(name, seed):
        fast = name in ("heroes", "flanc", "enc", "heterofl")
        acc = (0.5, 0.8) if name == "heroes" else (0.3, 0.8 if not fast else 0.7)
        t = (1.0, 2.0) if fast else (2.0, 4.0)
        blocks = list(ch.width_blocks(4)) if name == "flanc" else list(range(16))
        steps = 3 if name == "heroes" else 2
        r = history([(t[i], acc[i], 1e6 * (i + 1), [
            {"time_s": t[i] - (0.1 if name == "heroes" else 0.5), "local_steps": steps,
             "blocks": blocks[:4 * (seed + 1)]},
            {"time_s": t[i], "local_steps": steps, "blocks": blocks}]) for i in range(2)])
        r["config"]["method"] = name
        return r
    results = {(n, s): run_of(n, s) for n in ch.LABELS for s in (0, 1)}
    ledger = Ledger("heroes", "Heroes")
    ch.claims_cnn(ledger, results, show_round=1)
    verdict = {f"{c.ref}: {c.statement}": c for c in ledger.claims}
    assert len(ledger.claims) == 10                      # speed rows vs FedAvg, HeteroFL, Flanc
    sooner = verdict["Fig. 4a, 6b: Heroes reaches the target sooner than FedAvg"]
    assert sooner.per_seed == "all" and sooner.values == [2.0, 2.0]
    assert verdict["Fig. 5a: Heroes waits least of all methods (Eq. 20, per client and "
                   "round)"].per_seed == "all"
    # exact device times: Heroes equalises them by construction, so the row is a check
    assert verdict["Fig. 5a: Heroes waits least of all methods (Eq. 20, per client and "
                   "round)"].kind == "invariant"
    waits = verdict["Fig. 5a: Heroes waits least of all methods (Eq. 20, per client and round)"]
    assert waits.values == pytest.approx([5.0, 5.0])   # every rival waits 0.25 s
    for r in results.values():
        r["config"]["time_noise"] = 0.3
    noisy = Ledger("heroes", "Heroes")
    ch.claims_cnn(noisy, results, show_round=1)
    kinds = {c.ref: c.kind for c in noisy.claims if c.ref in ("Fig. 2", "Fig. 5a")}
    assert kinds == {"Fig. 2": "paper", "Fig. 5a": "paper"}
    for c in ledger.claims:
        assert c.verdict == "indicative"                                 # 2 seeds
        assert c.per_seed == "all" or any(d.isdigit() for d in c.why)


@pytest.mark.parametrize("scale", ["smoke", "book"])
def test_width_methods_get_the_same_width_on_every_tier(scale):
    """The chapter compares width methods at equal per-device model sizes: HeteroFL (and
    FedRolex, FjORD in its place), Flanc, ENC-fixed and Heroes give each device tier the
    same width under the chapter's setting, and the tiers do differ."""
    base = ch.cnn_setting(scale)
    configs = {n: ch.variant(n, base) for n in ch.WIDTH_VARIANTS}
    configs.update({m: ch.variant("heterofl", base, method=m) for m in ("fedrolex", "fjord")})
    widths = ch.tier_widths(configs)
    assert len(widths["heroes"]) == 4 and len(set(widths["heroes"].values())) > 1
    for name, per_tier in widths.items():
        assert per_tier == widths["heroes"], name
    assert ch.tier_widths({"fedavg": ch.variant("fedavg", base)})["fedavg"] == \
        dict.fromkeys(widths["heroes"], 1.0)


def test_longer_probe_says_whether_a_gap_closes_narrows_or_widens():
    def ledger_with(values):
        ledger = Ledger("heroes", "Heroes")
        for ref, v in zip("abcd", values):
            ledger.claim(ref, "claim " + ref, "paper", v, report.at_least(0, " points"),
                         why="gap of 1 point")
        ledger.claim("e", "claim e", "paper", [5.0], report.at_most(1.0), why="gap of 1 point")
        return ledger
    main = ledger_with([[-4.0, -1.0], [-4.0, -1.0], [-4.0, -1.0], [2.0, 3.0]])
    probe = ledger_with([[1.0], [-2.0], [-8.0], [-1.0]])
    probe.claims[-1].values, probe.claims[-1].passes = [9.0], [False]
    ch.add_longer_probe(main, probe, 3, seed=7)
    why = [c.why for c in main.claims]
    assert why[0] == "gap of 1 point; at 3× the rounds (seed 7): 1.00 vs -4.00 here, the gap closes"
    assert why[1].endswith("the gap narrows") and why[2].endswith("the gap widens")
    assert why[3] == "gap of 1 point"                                  # holds: untouched
    assert why[4].endswith("9.00 vs 5.00 here, the gap widens")   # lower is better
    never, longer = ledger_with([[math.nan]] * 4), ledger_with([[-1.0]] * 4)
    ch.add_longer_probe(never, longer, 3, seed=0)
    assert never.claims[0].why.endswith("-1.00 vs — here, it still fails")
    speed = Ledger("heroes", "Heroes")
    speed.claim("s", "sooner", "paper", [0.0], ch.sooner("speedup"), why="0 of 1")
    for after, words in ((0.0, "only the baseline reached the target vs only the baseline "
                               "reached the target here, it still fails"),
                         (0.8, "0.80 vs only the baseline reached the target here, the gap "
                               "narrows")):
        faster = Ledger("heroes", "Heroes")
        faster.claim("s", "sooner", "paper", [after], ch.sooner("speedup"), why="1")
        speed.claims[0].why = "0 of 1"
        ch.add_longer_probe(speed, faster, 3, seed=0)
        assert speed.claims[0].why.endswith(words)


def test_speed_rows_give_waiting_time_to_target_and_speedup():
    def run_of(name, t_reach):
        r = history([(t_reach, 0.9, 1.0, clients(t_reach - 1, t_reach))])
        r["config"]["method"] = name
        return r
    rows = ch.speed_rows({"exact": {("heroes", 0): run_of("heroes", 2.0),
                                    ("fedavg", 0): run_of("fedavg", 6.0)}},
                         ["fedavg", "heroes"], 0.8)
    assert rows[0][:4] == ["exact", "FedAvg", "0.50 s", "6.0 s"]
    assert rows[0][4].startswith("3.00×") and rows[1][4] == "—"
