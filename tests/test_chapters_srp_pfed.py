"""The SRP-pFed chapter's machinery (hetfl_core.chapters.srp_pfed), on hand-made histories."""
import math

import numpy as np
import pytest

from hetfl_core.chapters import srp_pfed as ch
from hetfl_core.report import Ledger

SRP = {"candidates": 10, "k": 2, "decay": 0.9}


def history(accs, times=None, clusters=None, late=None, uplink=100.0):
    """A run's history: round t has accuracy accs[t-1], time times[t-1], one client per
    entry of clusters[t-1] (its cluster index)."""
    times = times or [10.0 * (t + 1) for t in range(len(accs))]
    clusters = clusters or [[0, 0] for _ in accs]
    rows = []
    for t, (a, s, cs) in enumerate(zip(accs, times, clusters), start=1):
        clients = [{"id": i, "cluster": c, "rate": 0.5, "time_s": 1.0 + i,
                    "late": bool(late and late[t - 1][i]), "probs": [0.1] * 10}
                   for i, c in enumerate(cs)]
        rows.append({"round": t, "acc_personal": a, "time_s": s, "uplink_bits": uplink * t,
                     "downlink_bits": 2 * uplink * t, "flops": 1e6 * t, "clients": clients})
    return {"config": {"options": {"window": None}}, "history": rows}


def test_reinforcement_change_is_relative():
    b = lambda loss: 1 / (1 + math.exp(loss))
    assert ch.reinforcement_change(0.3, 0.05) == pytest.approx((b(0.3) - b(0.35)) / b(0.3))
    assert 0.02 < ch.reinforcement_change(0.3, 0.05) < 0.04       # a few percent, not 1%


def test_simulate_walks_returns_distributions_and_is_seeded():
    kw = dict(candidates=5, decay=0.9, seed=3)
    finals, trace, best = ch.simulate_walks("shared", 2, 3, 6, **kw)
    assert finals.shape == (3, 5) and trace.shape == (6, 5)
    assert np.allclose(finals.sum(1), 1) and best == 1               # p = 0.4 on {0.2, ..., 1}
    assert np.array_equal(finals, ch.simulate_walks("shared", 2, 3, 6, **kw)[0])


def test_memberships_count_each_client_at_its_latest_round():
    r = history([0.1, 0.2, 0.3], clusters=[[0, 0], [1, 0], [1, 1]])
    shares = ch.memberships(r, 2, [1, 2, 3])
    assert shares.tolist() == [[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]


def test_equal_time_compares_at_the_shorter_runs_end():
    sync = history([0.1, 0.2, 0.3], times=[10, 20, 30])
    semi = history([0.15, 0.25, 0.35], times=[5, 10, 15],
                   late=[[False, True], [False, True], [False, False]])
    assert ch.equal_time(sync, semi) == (15.0, pytest.approx(10.0), pytest.approx(35.0))
    assert ch.end_time(semi) == 15.0 and ch.late_share(semi) == pytest.approx(2 / 6)


def test_traffic_to_target_is_inf_when_never_reached():
    r = history([0.1, 0.5], uplink=8e6)
    assert ch.traffic_mb_to(r, 50) == pytest.approx(6.0)           # round 2: 2 + 4 MB
    assert ch.traffic_mb_to(r, 60) == math.inf


def test_plan_shares_runs_and_thins_evaluation_only_for_unshared_figures():
    plan = ch.make_plan("book", "digits", 0, 30, SRP)
    c = plan.configs
    assert c[("fig7b", 2)].key() == c[("tab3", "dir(1)", "SRP-pFed", 0)].key()
    assert c[("tab7", "RM+CL", 0)].key() == c[("fig7b", 2)].key()
    assert c[("fig7b", 4)].eval_every == 30 and c[("fig7b", 2)].eval_every == 10
    assert len(plan.distinct()) < len(c) and plan.seeds == [0, 1, 2]
    assert plan.seeds7 == [0, 1, 2] and all(("tab7", v, 2) in c for v in ch.ABLATION)
    for m in ("FedAvg", "SRP-pFed"):      # Table IV's headline pair on every seed
        pair = [c[("tab4", "writers", m, s)] for s in plan.seeds]
        assert [x.seed for x in pair] == [0, 1, 2] and pair[0].key() == \
            c[("tab4", "writers", m)].key()


def fake_results(plan):
    """Every planned result, SRP-pFed 20 points above the others, RM+CL best."""
    out = {}
    for key in plan.configs:
        acc = 0.5
        if "SRP-pFed" in key:
            acc = 0.7
        if key[0] == "tab7":
            acc = 0.6 + 0.02 * list(ch.ABLATION).index(key[1])
        clusters = [[0, 0], [0, 1]] if key[0] == "tab7" else None
        up = 30.0 if "SRP-pFed" in key or key[0] != "tab3" else 100.0
        out[key] = history([acc - 0.1, acc], clusters=clusters, uplink=up)
    return out


def test_ledger_verdicts_come_from_the_runs():
    plan = ch.make_plan("smoke", "digits", 0, 2, SRP)
    results = fake_results(plan)
    sync = history([0.5, 0.6], times=[10, 20])
    semi = history([0.5, 0.58], times=[5, 10])
    ledger = ch.build_ledger(results, plan, [sync], [semi], "smoke")
    verdicts = {c.statement[:30]: c.per_seed for c in ledger.claims}
    assert all(c.verdict == "indicative" for c in ledger.claims)        # 1 seed: never counted
    assert len(ledger.claims) == 20 and all(c.seeds == 1 for c in ledger.claims)
    assert verdicts["under strong label skew SRP-pF"] == "all"     # +20 points
    assert verdicts["SRP-pFed needs less communicat"] == "all"     # 90 vs 600 bits to 50%
    assert verdicts["SRP-pFed is the most accurate "] == "all"
    assert verdicts["reinforced memory with cluster"] == "all"     # RM+CL is last, highest
    assert verdicts["with K = 2 the clients later s"] == "all"     # 50% / 50%
    assert verdicts["the semi-asynchronous variant "] == "all"     # -2 points >= -5
    # at 10 s the semi-async run has 58%, the synchronous one 50%
    assert verdicts["at equal simulated time the se"] == "all"
    assert ledger.claims[-1].values == [pytest.approx(8.0)]
    # Table IV and Fig. 6 (writers) and Table VI (verse topics): SRP-pFed 20 points above
    assert verdicts["under the writers' style shift"] == "all"
    assert verdicts["SRP-pFed ends above FedRep"] == "all"
    assert verdicts["FedRep leads early"] == "none"
    top1 = [c for c in ledger.claims if c.statement.startswith("SRP-pFed is the most")]
    assert [c.ref for c in top1] == ["Table III", "Table IV", "Table VI"]
    # the probe at 3x the rounds: +20 points at both lengths
    assert "at 3x the rounds (seed 0): 20.0 → 20.0 points, the criterion passes at both lengths" in top1[0].why
    assert all(c.per_seed == "all" for c in top1)
    tau = [c for c in ledger.claims if c.statement.startswith("the methods' ordering")]
    assert len(tau) == 2 and all(c.values == [pytest.approx(5 / 15)] for c in tau)


def test_plan_has_the_stand_in_tasks_and_fig5_only_when_asked():
    plan = ch.make_plan("book", "fashion-mnist", 0, 30, SRP)
    c = plan.configs
    assert "fig5" not in plan.tasks
    assert c[("tab4", "writers", "Ditto")].partition == "writers"
    assert c[("tab4", "iid", "SRP-pFed")].dataset == "mnist-5k"
    text = c[("tab6", "books", "LG-FedAvg")]
    assert (text.dataset, text.model, text.partition) == ("bible-topics", "embbag", "natural")
    assert text.options["head_layers"] == 1 and c[("tab3", "iid", "Ditto", 0)].method == "ditto"
    with_fig5 = ch.make_plan("book", "fashion-mnist", 0, 30, SRP, cifar100="cifar100")
    assert with_fig5.configs[("fig5", "dir(0.1)", "SRP-pFed")].dataset == "cifar100"
    assert len(with_fig5.configs) == len(c) + 4 * len(ch.FIG5_METHODS)
    probe = c[("probe", "SRP-pFed")]
    assert (probe.rounds, probe.partition, probe.alpha) == (60, "dirichlet", 1.0)  # 2x


def test_table3_top1_runs_the_first_seeds_comparator_on_every_seed():
    """Ditto is the most accurate rival on the first seed in every partition; the further
    seeds run SRP-pFed and Ditto only, and each seed's value is the lead at the worst
    partition: 10 (seed 0), 2 (dir(10), seed 1), -2 (dir(1), seed 2)."""
    plan = ch.make_plan("book", "fashion-mnist", 0, 30, SRP)
    before = set(plan.configs)
    results = fake_results(plan)
    for sp in ch.SPLITS:
        results[("tab3", sp, "Ditto", 0)] = history([0.5, 0.6])
    assert ch.top1_rivals(results, plan) == {sp: "Ditto" for sp in ch.SPLITS}
    new = ch.add_top1_seeds(plan, results)
    assert set(new) == {("tab3", sp, m, s) for sp in ch.SPLITS for m in ("Ditto", "SRP-pFed")
                        for s in (1, 2)} - before
    assert len(new) == 14 and all(new[k].seed == k[3] for k in new)
    srp = {(sp, s): 0.7 for sp in ch.SPLITS for s in (1, 2)}
    srp[("dir(10)", 1)], srp[("dir(1)", 2)] = 0.62, 0.58
    for (sp, s), acc in srp.items():
        results[("tab3", sp, "SRP-pFed", s)] = history([0.5, acc])
        results[("tab3", sp, "Ditto", s)] = history([0.5, 0.6])
    ledger = Ledger("srp_pfed", "SRP-pFed")
    ch._table3_claim(ledger, results, plan)
    (top1,) = ledger.claims
    assert top1.headline and top1.values == pytest.approx([10.0, 2.0, -2.0])
    assert top1.verdict == "inconclusive"


def test_table4_headline_pairs_srp_pfed_and_fedavg_on_every_seed():
    plan = ch.make_plan("book", "fashion-mnist", 0, 30, SRP)
    results = fake_results(plan)
    for s, gap in zip(plan.seeds, (0.08, 0.06, 0.07)):
        results[("tab4", "writers", "FedAvg", s)] = history([0.5, 0.6])
        results[("tab4", "writers", "SRP-pFed", s)] = history([0.5, 0.6 + gap])
    ledger = Ledger("srp_pfed", "SRP-pFed")
    ch._writers_claims(ledger, results, plan)
    row = next(c for c in ledger.claims if c.headline)
    assert row.ref == "Table IV, non-IID" and row.values == pytest.approx([8.0, 6.0, 7.0])
    assert row.verdict == "holds"                   # at least 3 points on every seed


def test_kendall_tau():
    assert ch.kendall_tau([1, 2, 3], [10, 20, 30]) == 1.0
    assert ch.kendall_tau([1, 2, 3], [30, 20, 10]) == -1.0
    assert ch.kendall_tau([1, 2, 3, 4], [1, 2, 4, 3]) == pytest.approx(4 / 6)


def test_fig5_adds_its_row_only_when_run():
    plan = ch.make_plan("smoke", "digits", 0, 2, SRP, cifar100="digits")
    run = history([0.5, 0.6])
    ledger = ch.build_ledger(fake_results(plan), plan, [run], [run], "smoke")
    assert [c.ref for c in ledger.claims].count("Fig. 5 / Table III (CIFAR-100)") == 1
    assert len(ledger.claims) == 21


def test_element_weights_and_the_disjoint_halves_counterexample():
    halves = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
    a = ch.element_weights(np.array([10.0, 10.0]), halves)
    assert np.array_equal(a, halves)                       # each half has one sharer
    assert ch.paper_mask_bias(a) == 4                      # d_w, not d_w (1 - 1/2)
    assert ch.paper_mask_bias(halves / 2) == 2             # literal Eq. 4: d_w (1 - p_bar)
    assert ch.uncovered_fraction(halves) == 0.0
    partial = np.array([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    assert ch.uncovered_fraction(partial) == 0.5
    assert np.allclose(ch.element_weights(np.array([1.0, 3.0]), partial).sum(0), [1, 1, 0, 0])


def test_repaired_bound_holds_on_quadratics_and_fedavg_has_no_mask_terms():
    kw = dict(reps=2, rounds=10, dim=8)
    terms = ("start", "mismatch", "fused", "steps", "noise")
    srp = ch.bound_check(**kw)
    assert srp["lhs"] <= sum(srp[k] for k in terms)
    assert srp["fused"] > 0 and 0 < srp["mismatch"] <= srp["hetero"] + srp["uncovered"]
    # full participation with full masks: the aggregation weights are the data shares, so
    # the mismatch is exactly 0 (the previous bound's heterogeneity term is not)
    fedavg = ch.bound_check(rates=(1.0,), per_round=8, **kw)
    assert fedavg["mismatch"] < 1e-20 and fedavg["fused"] == 0 and fedavg["hetero"] > 1
    assert fedavg["lhs"] <= sum(fedavg[k] for k in terms)


def test_drift_needs_the_fused_start_term():
    # personal models far from the global one, coupled curvature: the per-round drift
    # inequality holds with 2 delta and fails without it
    far = ch.bound_check(reps=1, rounds=10, dim=8, coupled=True, spread=5.0, rates=(0.2, 0.4),
                         noise=0.0)
    assert far["drift_ratio"] <= 1 + 1e-9
    assert far["drift_without_delta"] > 0.5


def test_cluster_figure_has_at_most_three_panels_a_row_and_a_colour_bar(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = []
    monkeypatch.setattr(ch.plt, "show", lambda: shown.append(plt.gcf()))
    plan = ch.make_plan("smoke", "digits", 0, 4, {"candidates": 10, "k": 2, "decay": 0.9})

    def walk(k):
        return {"history": [{"round": t, "clients": [
            {"id": i, "cluster": (i + t) % k, "probs": [0.1] * 10} for i in range(3)]}
            for t in range(1, 5)]}

    results = {("fig7b", kk): walk(kk) for kk in plan.sweep_k}
    lines = ch.plot_clusters(results, plan, [1, 4], 10)
    fig = shown[-1]
    assert len(lines) == len([kk for kk in plan.sweep_k if kk >= 2])
    assert fig.get_size_inches()[0] <= 10
    assert max(ax.get_subplotspec().colspan.stop for ax in fig.axes
               if ax.get_subplotspec()) <= 3
    assert any(ax.get_label() == "<colorbar>" for ax in fig.axes)
    assert fig.legends and not any(ax.get_legend() for ax in fig.axes)
    plt.close("all")
