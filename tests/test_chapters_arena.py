"""The arena chapter's machinery (hetfl_core.chapters.arena): its claims' verdicts from
hand-made runs, the "who wins where" map's winners, and the example plug-in."""
import numpy as np
import pytest

from hetfl_core import RunConfig, arena
from hetfl_core.chapters import arena as ch
from hetfl_core.experiments import run_cached
from hetfl_core.report import Ledger


def result(method, seed, acc, acc_global=None):
    return {"config": {"method": method, "seed": seed, "options": {}},
            "history": [{"round": 1, "time_s": 1.0, "acc_personal": acc, "acc_global": acc_global,
                         "uplink_bits": 8.0, "downlink_bits": 8.0, "flops": 1.0, "acc_clients": [acc]}]}


def fake_runs(accs: dict, methods) -> arena.ArenaRuns:
    """Runs in the reference scenario only: ``accs[method]`` lists each seed's accuracy."""
    s = arena.settings("book")
    results = {(s.reference, m, seed): result(m, seed, a, a) for m, values in accs.items()
               for seed, a in enumerate(values)}
    lrs = {("image", m): 0.1 for m in methods}
    return arena.ArenaRuns(s, tuple(methods), lrs, results, {}, {})


def test_claims_compare_each_paper_method_with_its_papers_baselines_per_seed():
    methods = ("fedlps", "heroes", "fedavg", "heterofl", "fedrolex", "fedper")
    runs = fake_runs({"fedlps": [0.8, 0.8, 0.8], "fedavg": [0.7, 0.7, 0.7], "heterofl": [0.9, 0.9, 0.9],
                      "fedrolex": [0.7, 0.9, 0.7], "fedper": [0.8, 0.8, 0.8],
                      "heroes": [0.5, 0.5, 0.5]}, methods)
    ledger = Ledger("arena", "The arena", scale="book")
    ch.claims(ledger, runs)
    verdicts = {c.statement.split(" on ")[0]: c.verdict for c in ledger.claims}
    assert verdicts == {"FedLPS beats FedAvg": "holds", "FedLPS beats HeteroFL": "fails",
                        "FedLPS beats FedRolex": "inconclusive", "FedLPS beats FedPer": "fails",
                        "Heroes beats FedAvg": "fails", "Heroes beats HeteroFL": "fails"}
    assert all(len(c.values) == 3 for c in ledger.claims)
    first = ledger.claims[0]
    assert first.values == pytest.approx([10.0, 10.0, 10.0]) and first.headline


def test_winners_and_win_counts_read_the_image_cells():
    rows = [{"task": "image", "skew": "α=0.1", "heterogeneity": "low", "method": m,
             "mean": {"acc": a, "acc_at_budget": b}} for m, a, b in
            (("fedavg", 0.5, 0.4), ("fedper", 0.7, 0.1), ("local", float("nan"), 0.6))]
    rows.append({"task": "text", "skew": "natural", "heterogeneity": "medium", "method": "local",
                 "mean": {"acc": 0.99, "acc_at_budget": 0.99}})
    assert arena.winners(rows) == {("α=0.1", "low"): ("fedper", 0.7)}
    assert ch.win_counts(rows, "acc_at_budget") == {"local": 1}


def test_rules_table_names_every_method_and_what_the_arena_sets():
    runs = fake_runs({}, arena.METHODS)
    rows = {r[0]: r for r in ch.rules_rows(runs)}
    assert set(rows) == {arena.label(m) for m in arena.METHODS}
    assert rows["OFA-FL"][2].startswith("capacity by device tier")
    assert rows["Lightweight PFL"][3] == "wireless" and rows["FedAvg"][3] == arena.SYSTEM


def test_fedavgm_with_zero_momentum_is_fedavg(tmp_path):
    name = ch.register_example()
    assert ch.register_example() == name
    base = RunConfig(dataset="digits", model="mlp", clients=4, rounds=3, local_steps=2, seed=1)
    plain = run_cached(base.replace(method="fedavg"), tmp_path)
    zero = run_cached(base.replace(method=name, options={"beta": 0.0}), tmp_path)
    momentum = run_cached(base.replace(method=name), tmp_path)
    acc = [[r["acc_global"] for r in x["history"]] for x in (plain, zero, momentum)]
    np.testing.assert_allclose(acc[0], acc[1], atol=1e-6)
    assert acc[2] != acc[0]


def test_a_leaderboard_is_an_accuracy_table_and_a_cost_table_of_at_most_seven_columns():
    values = {k: [0.5, 0.6, 0.7] for k in arena.COLUMNS}
    values["time_to_target"] = [10.0, float("inf"), 20.0]
    rows = [{"scenario": "cell", "rank": i + 1, "label": arena.label(m), "lrs": [0.1],
             "system": "wireless" if m == "sparse-prune-pfl" else arena.SYSTEM, "values": values}
            for i, m in enumerate(("fedavg", "sparse-prune-pfl"))]
    (acc_header, acc_rows), (cost_header, cost_rows) = ch.leaderboard_tables(rows, "cell")
    assert len(acc_header) <= 7 and len(cost_header) <= 7
    assert acc_header[:3] == ["#", "method", "lr"] and cost_header[:2] == ["#", "method"]
    assert acc_header[3:] == [arena.COLUMNS[k][0] for k in ch.ACCURACY]
    assert cost_header[2:] == [arena.COLUMNS[k][0] for k in ch.COST]
    assert set(ch.ACCURACY) | set(ch.COST) == set(ch.SHOWN)
    assert [len(r) for r in acc_rows + cost_rows] == [7] * 2 + [len(cost_header)] * 2
    assert acc_rows[1][1] == "Lightweight PFL †" and acc_rows[0][3] == "60.0 ± 10.0"
    assert cost_rows[0][cost_header.index("time to target (s)")] == "15.0 ± 7.1 (2/3)"
    assert ch.leaderboard_tables(rows, "another cell") == []
