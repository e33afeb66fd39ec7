"""The FedLPS chapter's machinery (hetfl_core.chapters.fedlps): the plan, its queries on
hand-made histories, and its claims' verdicts computed from every seed."""
import math

import numpy as np
import pytest

from hetfl_core.chapters import fedlps as ch
from hetfl_core.report import Ledger


def run(accs, times=None, flops=None, clients=()):
    """A run whose evaluations give ``accs`` (fractions; ``None``: not evaluated)."""
    times = times or [10.0 * (i + 1) for i in range(len(accs))]
    flops = flops or [1e9 * (i + 1) for i in range(len(accs))]
    return {"config": {"method": "fedlps", "options": {}},
            "history": [{"round": i + 1, "acc_personal": a, "acc_global": None,
                         "time_s": t, "flops": f, "clients": list(clients)}
                        for i, (a, t, f) in enumerate(zip(accs, times, flops))]}


def test_plan_at_smoke_shares_equal_configs_and_covers_every_figure():
    plan = ch.make_plan("smoke", "digits", 0, "medium")
    keys = {k[0] for k in plan.configs}
    assert keys == {"main", "ablation", "pattern", "noniid", "hetero", "explore", "long", "code"}
    assert plan.configs[("long", "FedLPS")].rounds == 3 * plan.base.rounds
    assert len(plan.class_levels) > 1 and len(plan.levels) > 1 and len(plan.curve_ratios) > 1
    distinct = {c.key() for c in plan.configs.values()}
    assert len(distinct) < len(plan.configs)          # e.g. P-UCBV-Fix is a Fig. 6 point
    assert plan.configs[("noniid", "FedLPS", 10, 0)].classes_per_client == 10


def test_final_acc_is_the_mean_of_the_last_two_evaluations_in_percent():
    assert math.isclose(ch.final_acc(run([0.1, None, 0.5, 0.7, None])), 60.0)
    assert math.isnan(ch.final_acc(run([None, None])))


def test_time_to_reports_never_as_inf():
    runs = {"FedLPS": [run([0.2, 0.6]), run([0.2, 0.3])]}
    t = ch.time_to(runs, {"target": 50.0})["target"]["FedLPS"]
    assert t[0] == 20.0 and t[1] == math.inf


def test_jaccard_and_chosen_ratios():
    assert ch.jaccard("1100", "1010") == 1 / 3
    assert ch.jaccard("0000", "0000") == 0
    r = run([0.5], clients=[{"capability": 1.0, "ratio": 0.6},
                            {"capability": 0.5, "ratio": 0.5}])
    got = ch.chosen_ratios([r, r])
    assert list(got) == [0.5, 1.0] and list(got[1.0]) == [0.6, 0.6]


def test_fig6_rows_take_one_value_per_seed_over_the_levels():
    plan = ch.make_plan("smoke", "digits", 0, "medium")       # class levels 2 and 10
    ledger = Ledger("fedlps", "FedLPS")
    # levels x seeds: a row per number of classes per client (2, 10), a column per seed
    noniid = {"FedAvg": np.array([[40.0, 42.0, 41.0], [90.0, 88.0, 89.0]]),
              "FedPer": np.array([[60.0, 61.0, 62.0], [50.0, 52.0, 51.0]]),
              "FedLPS": np.array([[70.0, 72.0, 74.0], [46.0, 47.0, 49.0]])}
    chain = {"10 classes": {n: np.array([60.0 - 10 * i - (i == 3)])
                            for i, n in enumerate(ch.DECOMPOSITION)}}
    ch._fig6_claims(ledger, noniid, plan, stale=2.5, chain=chain)
    grows, every = ledger.claims
    # the lead over FedPer at x=8 minus the lead at the IID end, per seed
    assert grows.values == [14.0, 16.0, 14.0] and grows.verdict == "holds"
    # FedAvg is the rival best on average (65.0 vs 56.0); each seed's worst level
    assert every.values == [-44.0, -41.0, -40.0] and every.verdict == "fails"
    assert every.seeds == 3 and every.headline
    rising = {n: np.array([10.0 * i]) for i, n in enumerate(ch.DECOMPOSITION)}
    assert ch.chain_summary(rising).endswith("; no step loses)")


def test_book_plan_puts_three_seeds_under_every_headline_figure():
    plan = ch.make_plan("book", "fashion-mnist", 0, "medium")
    assert plan.seeds == [0, 1, 2] and plan.pattern_seeds == [0, 1, 2]
    for c in plan.class_levels:
        for n in ("FedAvg", "FedPer", "FedLPS"):
            assert [plan.configs[("noniid", n, c, s)].seed for s in plan.seeds] == [0, 1, 2]
    for r in plan.pattern_ratios:
        for p in ch.PATTERNS:
            assert all(("pattern", p, r, s) in plan.configs for s in plan.seeds)
    # what pays for them: one seed for Table II and the exploring bandits, two device
    # levels, Fig. 9b on Fig. 9a's ratios, the probe at twice the rounds
    assert plan.few == [0] and plan.explore_seeds == [0]
    assert plan.levels == ["low", "high"] and plan.curve_ratios == plan.pattern_ratios
    assert plan.configs[("long", "FedLPS")].rounds == 2 * plan.base.rounds


def test_staleness_counts_rounds_since_the_last_visit():
    r = {"history": [{"round": 1, "clients": [{"id": 0}, {"id": 1}]},
                     {"round": 2, "clients": [{"id": 0}]},
                     {"round": 3, "clients": [{"id": 2}]}]}
    assert ch.staleness(r) == (1 + 2 + 0) / 3


def test_time_to_accuracy_claims_keep_never_reached_apart():
    ledger = Ledger("fedlps", "FedLPS")
    inf = math.inf
    tta = {"0.9 x FedAvg": {"FedLPS": np.array([10.0, inf]), "FedAvg": np.array([40.0, 40.0]),
                            "HeteroFL": np.array([30.0, 30.0])},
           "0.9 x FedPer": {"FedLPS": np.array([inf, inf]), "FedAvg": np.array([inf, inf]),
                            "HeteroFL": np.array([inf, inf]),
                            "FedRolex": np.array([inf, inf]), "FedPer": np.array([50.0, inf])}}
    within = {"FedLPS": np.array([50.0, 60.0]), "FedAvg": np.array([40.0, np.nan]),
              "FedPer": np.array([45.0, 70.0])}
    ch._fig345_claims(ledger, within, 1e9, tta, {"0.9 x FedAvg": 60.0, "0.9 x FedPer": 70.0})
    fig3, first, second = ledger.claims
    assert fig3.per_seed == "some"                      # a nan baseline is left out
    assert first.per_seed == "some"                     # never reached on seed 2
    assert second.per_seed == "none" and "never" in second.why


def test_table2_claims_are_judged_per_seed():
    ledger = Ledger("fedlps", "FedLPS")
    col = lambda acc, flops: {"acc": np.array(acc), "flops": np.array(flops)}
    t2 = {"RCR-Fix": col([80, 80], [1.0, 1.0]), "P-UCBV-Fix": col([78.5, 81], [0.9, 0.8]),
          "RCR-Dyn": col([70, 70], [1.0, 1.0]), "P-UCBV-Dyn": col([71, 71], [0.9, 1.1])}
    explored = {"eps-greedy": col([79, 82], [0.8, 0.8])}
    ch._table2_claims(ledger, t2, {0.5: np.array([0.5]), 1.0: np.array([0.6, 0.7])},
                      explored, bonus=[0.0], xi=4.0, share=1 / 3)
    flops, acc = ledger.claims
    assert flops.per_seed == "some"                     # Dyn used more on seed 2
    assert acc.per_seed == "some" and acc.values == [-1.5, 1.0]
    assert "s = 0.65" in acc.why
    assert "xi = R/(K eps) = 4" in acc.why and "eps-greedy 80.5" in acc.why
    assert "only for 33% of the clients" in acc.why


def test_bandit_share_is_the_share_of_clients_above_half_capability():
    for heterogeneity, share in (("low", 2 / 3), ("medium", 1 / 3), ("high", 1 / 3)):
        plan = ch.make_plan("smoke", "digits", 0, heterogeneity)
        assert ch.bandit_share(plan.side) == pytest.approx(share)


def test_table1_probe_says_whether_the_gap_closes():
    plan = ch.make_plan("smoke", "digits", 0, "medium")
    long = {"FedLPS": {"short": 60.0, "long": 75.0}, "FedPer": {"short": 70.0, "long": 78.0}}
    text = ch._probe_text(long, plan)
    assert f"{plan.probe_rounds} rounds" in text and "closes (-10.0 → -3.0 points)" in text
    long["FedLPS"]["long"] = 60.0
    assert "widens" in ch._probe_text(long, plan)


def test_bonus_of_eq17_is_zero_from_the_first_index_at_small_xi():
    plan = ch.make_plan("book", "digits", 0, "medium")         # R = 20, K = 20, eps = 1/4
    assert ch.bonus_schedule(plan.base, 3) == [0.0, 0.0, 0.0]   # xi = 4
    paper = ch.bonus_schedule(plan.base, 3, xi=10.0)            # 100/36 x 1/2 > 1
    assert paper[0] == math.log(100 / 36 / 2) and paper[1] == 0.0


def test_learned_pattern_loses_more_to_the_mask_than_a_shared_ordered_one():
    """At the IID end the dense global model of FedLPS, seen through each client's own
    learned pattern, loses more accuracy than through the ordered pattern every client
    shares (the mask step only: whether the scored model falls less with the ordered
    pattern is measured by the chapter's "The released code" section)."""
    from hetfl_core import RunConfig
    cfg = RunConfig(dataset="fashion-mnist", model="cnn", partition="shards",
                    classes_per_client=10, clients=10, participation=0.3, rounds=10,
                    batch_size=20, lr=0.1, momentum=0.5, train_samples=1000,
                    heterogeneity="medium", eval_every=10, seed=0)
    drop = {}
    for pattern in ("learned", "ordered"):
        d = ch.mask_decomposition(cfg.replace(
            options={"ratio_rule": "fixed", "ratio": 0.5, "pattern": pattern}))
        dense, masked = (d[n].mean() for n in ch.DECOMPOSITION[:2])
        drop[pattern] = dense - masked
    assert drop["learned"] >= drop["ordered"] + 2, drop


def test_fig5_draws_never_reached_as_a_stub_and_methods_in_their_colours(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hetfl_core import plots

    shown = []
    monkeypatch.setattr(ch.plt, "show", lambda: shown.append(plt.gcf()))
    tta = {"0.9 x FedAvg": {"FedAvg": np.array([10.0, 20.0]),
                            "FedLPS": np.array([5.0, math.inf])}}
    ch.plot_time_to(tta, {"0.9 x FedAvg": 80.0})
    ax = shown[-1].axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert "never" in texts and "15" in texts and not any("inf" in t for t in texts)
    colour = matplotlib.colors.to_hex(ax.patches[0].get_facecolor())
    assert colour == plots.method_style("FedAvg")["color"]
    ch.plot_noniid({"FedAvg": np.array([50.0, 60.0]), "FedLPS": np.array([55.0, 58.0])},
                   ch.make_plan("smoke", "digits", 0, "medium"))
    lines = shown[-1].axes[0].lines
    assert [ln.get_color() for ln in lines] == [plots.method_style(n)["color"]
                                                for n in ("FedAvg", "FedLPS")]
    plt.close("all")


def test_explore_table_reads_the_greedy_and_exploring_runs_on_the_fig9_seeds():
    plan = ch.make_plan("smoke", "digits", 0, "medium")
    visits = [{"ratio": 0.5, "capability": 1.0}, {"ratio": 0.25, "capability": 0.25}]
    results = {("ablation", "P-UCBV-Fix", 0): run([0.5, 0.6], clients=visits)}
    results.update({("explore", n, 0): run([0.7, 0.8], clients=visits)
                    for n in ch.EXPLORATION})
    table = ch.explore_table(results, plan)
    greedy, *exploring = table.values()
    assert np.allclose(greedy["acc"], [55.0]) and np.allclose(greedy["share"], [75.0])
    assert all(np.allclose(v["acc"], [75.0]) for v in exploring)


def test_released_code_rows_judge_the_paper_claims_on_fedlps_code():
    plan = ch.make_plan("smoke", "digits", 0, "medium")       # class levels 2 and 10
    t1 = {n: {"acc": np.array([50.0, 52.0, 51.0])} for n in ch.MAIN}
    code = {"t1": {"fedlps-code (released code)": {"acc": np.array([60.0, 61.0, 62.0])}},
            "ends": {"FedAvg": np.array([40.0, 90.0]), "FedPer": np.array([60.0, 50.0]),
                     "FedLPS": np.array([70.0, 46.0]), "fedlps-code": np.array([72.0, 80.0])}}
    ledger = Ledger("fedlps", "FedLPS")
    ch._released_claims(ledger, code, t1, plan)
    best, beats, always = ledger.claims
    assert all(c.statement.endswith("(released code)") and c.kind == "paper"
               for c in ledger.claims)
    assert best.verdict == "holds" and best.values == [10.0, 9.0, 11.0]
    assert always.values == [-10.0] and "80.0%" in always.measured and "46.0%" in always.measured


def test_table1_compares_with_the_baseline_best_on_average_not_each_seeds_best():
    """FedAvg and HeteroFL take turns as the best baseline of a seed: the comparator is
    FedAvg, the better on average, on every seed (a per-seed maximum would give
    -2, -4, -3 and fail the row)."""
    plan = ch.make_plan("smoke", "digits", 0, "medium")
    col = lambda *acc: {"acc": np.array(acc), "flops": np.ones(3)}
    t1 = {"FedLPS": col(80.0, 80.0, 80.0), "FedAvg": col(82.0, 70.0, 83.0),
          "HeteroFL": col(70.0, 84.0, 70.0), "FedRolex": col(60.0, 60.0, 60.0),
          "FedPer": col(75.0, 75.0, 75.0)}
    t1["FedLPS"]["flops"] = np.full(3, 0.4)
    long = {"FedLPS": {"short": 60.0, "long": 75.0}, "FedPer": {"short": 70.0, "long": 78.0}}
    ledger = Ledger("fedlps", "FedLPS")
    ch._table1_claims(ledger, t1, {1.0: np.array([0.5])}, plan, long)
    most, beats, flops = ledger.claims
    assert most.values == [-2.0, 10.0, -3.0] and most.pairs == [["fedlps", "fedavg"]]
    assert most.verdict == "inconclusive"
    assert beats.values == [-2.0, 10.0, -3.0] and beats.verdict == "inconclusive"
    assert flops.kind == "invariant"


def test_time_headline_and_fig3_pair_each_seed_with_one_fixed_rival():
    ledger = Ledger("fedlps", "FedLPS")
    inf = math.inf
    tta = {"0.9 x FedAvg": {n: np.array([10.0, 10.0, 10.0])
                            for n in ("FedLPS", "FedAvg", "HeteroFL")},
           "0.9 x FedPer": {"FedLPS": np.array([2.0, 2.0, 2.0]),
                            "FedAvg": np.array([10.0, 50.0, 12.0]),       # 24 s on average
                            "HeteroFL": np.array([50.0, 11.0, 50.0]),
                            "FedRolex": np.array([inf, inf, inf]),
                            "FedPer": np.array([30.0, 30.0, 30.0])}}
    within = {"FedLPS": np.array([55.0, 55.0, 55.0]), "FedAvg": np.array([50.0, 60.0, 50.0]),
              "FedPer": np.array([58.0, 52.0, 40.0])}
    ch._fig345_claims(ledger, within, 1e9, tta, {"0.9 x FedAvg": 60.0, "0.9 x FedPer": 70.0})
    fig3, _, fastest = ledger.claims
    assert fig3.values == [5.0, -5.0, 5.0]
    assert fastest.values == [5.0, 25.0, 6.0]
    assert fastest.verdict == "holds"                  # each seed's fastest: 5, 5.5, 6


def test_fig9a_compares_with_the_heuristic_best_on_average_at_each_ratio():
    plan = ch.make_plan("smoke", "digits", 0, "medium")       # pattern ratio 0.5
    r = plan.pattern_ratios[0]
    pat = {"learned": {r: np.array([70.0, 70.0, 70.0])},
           "random": {r: np.array([72.0, 60.0, 73.0])},        # best on average
           "ordered": {r: np.array([60.0, 74.0, 60.0])},
           "magnitude": {r: np.array([65.0, 65.0, 65.0])}}
    overlap = {r: {"between": np.array([0.3, 0.3, 0.3]), "random": 0.33}}
    probe = [{"layer": "conv1", "changed": 2, "kept": 8, "target_min": 0.49,
              "target_max": 0.51}]
    curve = (np.array([[60.0], [65.0]]), np.array([[10.0], [12.0]]))
    ledger = Ledger("fedlps", "FedLPS")
    ch._fig9_claims(ledger, pat, overlap, probe, curve, plan)
    learned = ledger.claims[0]
    assert learned.values == [-2.0, 10.0, -3.0]
    assert learned.verdict == "inconclusive"           # a per-seed maximum: -2, -4, -3
