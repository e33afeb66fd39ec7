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


def cell(skew, het, accs):
    """Image rows of one cell: ``accs[method]`` lists each seed's accuracy."""
    return [{"task": "image", "skew": skew, "heterogeneity": het, "method": m,
             "values": {"acc": v, "acc_at_budget": v},
             "mean": {"acc": float(np.mean(v)), "acc_at_budget": float(np.mean(v))}}
            for m, v in accs.items()]


def test_win_counts_need_a_judged_lead_and_count_tier_blind_methods_once_per_skew():
    rows = []
    for het in ("low", "medium", "high"):      # FedPer (tier-blind) wins every tier of α=0.1
        rows += cell("α=0.1", het, {"fedper": [0.8, 0.81, 0.82], "fedavg": [0.5, 0.52, 0.51]})
    for het in ("low", "high"):                # HeteroFL (reads tiers) wins two tiers of α=0.5
        rows += cell("α=0.5", het, {"heterofl": [0.7, 0.72, 0.71], "fedavg": [0.5, 0.5, 0.52]})
    rows += cell("α=0.5", "medium", {"heterofl": [0.7, 0.5, 0.72], "fedavg": [0.6, 0.6, 0.6]})
    judged = ch.judged_winners(rows)
    assert judged[("α=0.1", "low")][2] == "holds" and judged[("α=0.1", "low")][3] == "fedavg"
    unclear = judged[("α=0.5", "medium")]
    assert unclear[0] == "heterofl" and unclear[2] != "holds"
    assert ch.win_counts(rows) == {"heterofl": 2, "fedper": 1}
    two = cell("near-IID", "low", {"fedrep": [0.8, 0.9], "fedavg": [0.1, 0.2]})
    assert ch.judged_winners(two)[("near-IID", "low")][2] == "indicative"
    assert ch.win_counts(two) == {}


def test_identical_groups_find_methods_with_the_same_accuracy_on_every_seed():
    rows = [{"scenario": "t", "method": m, "values": {"acc": v}} for m, v in
            (("fedavg", [0.1, 0.2]), ("fedprox", [0.1, 0.2]), ("ditto", [0.1, 0.3]),
             ("majority", [0.1, 0.2]))]
    assert ch.identical_groups(rows, "t") == [["fedavg", "fedprox", "majority"]]


def test_level_check_and_plugin_demo_run_the_reference_cell_again(tmp_path, monkeypatch):
    monkeypatch.setenv("HETFL_CACHE", str(tmp_path))
    runs = arena.run_arena("smoke", ["fedavg"], processes=1, directory=tmp_path, progress=False)
    level = ch.levelled_off(runs, processes=1)
    assert len(level["short"]) == len(level["long"]) == runs.settings.seeds
    pairs = zip(level["short"], level["long"])
    assert level["gain"] == pytest.approx([100 * (b - a) for a, b in pairs])
    assert level["short"] == [arena.run_metrics(r, 0, 0)["acc"] for r in
                              runs.runs(runs.settings.reference, "fedavg")]
    name = ch.register_example()
    demo = ch.plugin_demo(runs, name, processes=1)
    assert [d["method"] for d in demo] == [name, "fedavg"]
    assert demo[1]["acc"] == level["short"][0]


def test_rules_table_names_every_method_and_what_the_arena_sets():
    runs = fake_runs({}, arena.METHODS)
    rows = {r[0]: r for r in ch.rules_rows(runs)}
    assert set(rows) == {arena.label(m) for m in arena.METHODS}
    assert rows["OFA-FL"][2].startswith("capacity by device tier")
    assert rows["Lightweight PFL"][3] == "yes" and rows["HeteroFL"][3] == "yes"
    assert rows["FedAvg"][3] == "no"


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


def test_server_predictions_read_the_server_model_on_the_pooled_test_splits(tmp_path):
    config = RunConfig(dataset="digits", model="cnn", clients=4, rounds=2, local_steps=2, seed=1,
                       method="fedavg")
    p = ch.server_predictions(config)
    assert 1 <= p["distinct"] <= 10 and 0 < p["top_share"] <= 1 and 0.1 <= p["majority"] < 1
    assert p["server_acc"] == pytest.approx(p["acc"], abs=1e-6)    # FedAvg scores its server model


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
    assert acc_rows[1][1] == "Lightweight PFL" and acc_rows[0][3] == "60.0 ± 10.0"
    assert cost_rows[0][cost_header.index("time to target (s)")] == "15.0 ± 7.1 (2/3)"
    assert ch.leaderboard_tables(rows, "another cell") == []
