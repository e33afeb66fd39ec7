"""The OFA-FL chapter's machinery (hetfl_core.chapters.ofa_fl), on synthetic histories:
no training."""
import numpy as np
import torch

from hetfl_core import RunConfig
from hetfl_core import report
from hetfl_core.chapters import ofa_fl as ofa

BASE = RunConfig(method="ofafl", model="mlp", dataset="digits", partition="iid", clients=10,
                 test_fraction=0.0, lr=0.05, batch_size=20, local_steps=1)


def study(seeds=(0, 1), warmup=1, every=1, tail=1):
    data = {"dataset": "digits"}
    return ofa.Study(BASE, data, dict(data), "mlp", list(seeds), warmup, every, tail)


def history(accs_by_round):
    """A run's history from per-round a_r lists (None: ratio not pruned yet)."""
    return {"history": [{"round": t, "acc_ratios": a} for t, a in enumerate(accs_by_round, 1)]}


def test_more_than_is_strict():
    crit = report.more_than(0, " points", "drop")
    assert not crit(0.0) and crit(0.1) and not crit(float("nan"))
    assert crit.text == "drop > 0 points"


def test_lead_above_chance_needs_the_winner_to_clear_chance():
    passes, crit, measured, why = ofa.lead_above_chance([20.7, 12.0], [10.0, 10.0], 10, 5,
                                                        "OFA-FL", "LTP")
    assert passes == [True, False]        # 12 beats 10 but is within 5 points of chance
    assert "chance 10 + 5" in crit.text and "OFA-FL − LTP > 0" in crit.text
    assert "ahead on 2 of 2 seeds" in why
    passes, _, _, why = ofa.lead_above_chance([11.0], [10.0], 10, 5, "OFA-FL", "LTP")
    assert passes == [False] and "OFA-FL and LTP within 5 points of chance" in why
    passes, _, _, why = ofa.lead_above_chance([60.0], [10.0], 10, 5, "OFA-FL", "LTP")
    assert passes == [True] and "LTP within 5 points of chance" in why


def test_study_grid_and_schedule():
    s = study(seeds=(3,), warmup=2, every=3, tail=4)
    counts = {g: len(c) for g, c in s.grids.items()}
    assert counts == {"fig2": 6, "fig3": 3, "table1-P": 3, "table1-2P": 3, "table2": 2,
                      "scope": 2, "probe-fig2": 3, "probe-table1-P": 1, "probe-table1-2P": 1}
    cfg = s.grids["table1-2P"][0]
    assert cfg.options["every"] == 6 and cfg.rounds == 2 + 4 * 6 + 4 and cfg.seed == 3
    k = ofa.STRETCH   # the probes stretch every part of the schedule
    cfg = s.grids["probe-table1-2P"][0]
    assert cfg.options["warmup"] == k * 2 and cfg.options["every"] == k * 6
    assert cfg.rounds == k * (2 + 4 * 6 + 4) and cfg.method == "ofafl"
    assert study(seeds=(3, 4), warmup=2, every=3, tail=4).grids["probe-fig2"][0].seed == 3
    assert {c.options["scope"] for c in s.grids["fig2"]} == {"global", "layer"}
    assert ofa.prune_rounds(s, "ofafl", ofa.PAPER_R, 6) == [3, 9, 15, 21]
    assert ofa.prune_rounds(s, "ofa-oneshot", ofa.PAPER_R, 6) == [3]


def test_stretch_note_says_whether_the_gap_closes_narrows_stays_or_widens():
    crit = report.at_least(0, " points", "gap")
    assert "closes" in ofa.stretch_note([-5.0], [0.5], crit, [0])
    assert "passes at both lengths" in ofa.stretch_note([0.2], [0.5], crit, [0])
    assert "narrows" in ofa.stretch_note([-5.0], [-2.0], crit, [0])
    assert "stays" in ofa.stretch_note([-5.0], [-5.5], crit, [0])
    assert "widens" in ofa.stretch_note([-5.0], [-8.0], crit, [0])
    # lower is better (an absolute difference that must stay under 3 points)
    little = report.at_most(3, " points", "|diff|")
    assert "widens" in ofa.stretch_note([4.0], [6.0], little, [0], higher_is_better=False)
    assert "narrows" in ofa.stretch_note([8.0], [5.0], little, [0], higher_is_better=False)
    note = ofa.stretch_note([-5.0, -4.0], [-2.0, -1.0], crit, [0, 1])
    assert note.startswith(f"at {ofa.STRETCH}x the rounds (seeds 0, 1): -4.5 → -1.5")


def test_flops_rows_charge_dense_passes_by_default():
    from hetfl_core import lottery
    from hetfl_core.masks import prunable
    from hetfl_core.models import build_model

    net = build_model("mlp", (1, 8, 8), 10)
    w = {k: p.detach() for k, p in net.named_parameters() if k in prunable(net)}
    chain = [{k: torch.ones_like(t) for k, t in w.items()}]
    for n in range(1, 3):
        chain.append(lottery.prune_within(w, chain[-1], lottery.keep_fraction([1, .5, .25], n),
                                          "layer"))
    rows = ofa.flops_rows(net, (1, 8, 8), chain, [1.0, 0.5, 0.25])
    # capacity, losses, masked dense (J dense passes), ideal sparse (sum of the densities)
    assert rows == [["1.0", "3", "3.00", "1.75"], ["0.5", "2", "2.00", "0.75"],
                    ["0.25", "1", "1.00", "0.25"]]


def test_drops_reads_the_full_network_at_each_pruning_round():
    run = history([[0.5, None], [0.4, 0.3], [0.45, 0.35], [0.3, 0.2]])
    assert np.allclose(ofa.drops(run, [2, 4]), [10.0, 15.0])


def fake_results(s, small_ofafl=0.10, small_ltp=0.09):
    """OFA-FL flat at 0.6 with its smallest ratio at ``small_ofafl``; LTP falling to
    ``small_ltp``; one-shot flat at 0.7."""
    out = {}
    for cfg in s.configs:
        k = len(cfg.options["ratios"])
        if cfg.method == "ofafl":
            last = [0.6] * (k - 1) + [small_ofafl]
        elif cfg.method == "ltp":
            last = list(np.linspace(0.7, small_ltp, k))
        else:
            last = [0.7] * k
        rounds = [[0.2] + [None] * (k - 1)] * cfg.options["warmup"]
        rounds += [last] * (cfg.rounds - len(rounds))
        out[cfg.key()] = history(rounds)
    return out


def test_ledger_judges_each_seed_and_the_chance_margin():
    s = study()
    s.results = fake_results(s)
    led = ofa.build_ledger(s, "smoke", 10.0, 10.0, ofa.CHANCE_MARGIN)
    passes = {f"{c.ref}: {c.statement}": c.passes for c in led.claims}
    assert len(led.claims) == 23 and all(len(c.values) == 2 for c in led.claims)
    assert all(c.verdict == "indicative" for c in led.claims)          # 2 seeds: never counted
    assert passes["Fig. 1: one stored model serves every ratio: the masks are nested"] == [True, True]
    small = [c for c in led.claims if c.statement.startswith("smallest sub-network")]
    # OFA-FL's 10% beats LTP's 9% on every seed, but it is at chance: no win
    assert [c.passes for c in small] == [[False, False], [False, False]]
    assert all("points of chance" in c.why for c in small)
    mean = [c for c in led.claims if "highest mean" in c.statement][0]
    assert mean.passes == [False, False] and "one-shot" in mean.why
    assert sum(c.headline for c in led.claims) in (2, 3, 4)
    s.results = fake_results(s, small_ofafl=0.5)
    small = [c for c in ofa.build_ledger(s, "smoke", 10.0, 10.0, 5.0).claims
             if c.statement.startswith("smallest sub-network")]
    assert [c.passes for c in small] == [[True, True], [True, True]]


def test_nesting_and_storage_rows():
    assert ofa.nesting_holds("mlp", (1, 8, 8), ofa.STRESS_R, 0)
    rows = ofa.storage_rows(1000, {"paper": ofa.PAPER_R})
    assert rows[0][0] == "paper" and rows[0][1] == "3.00" and len(rows[0]) == 5


def test_a_collapsed_network_does_not_win_a_variance_row():
    s = study(seeds=(0, 1, 2))
    s.results = fake_results(s)
    table2 = [c for c in ofa.build_ledger(s, "smoke", 10.0, 10.0, 5.0).claims
              if c.ref == "Table 2" and "variance" in c.statement][0]
    assert all(np.isfinite(table2.values))             # OFA-FL flat at 0.6 vs LTP: a fair win
    for cfg in s.configs:                               # OFA-FL collapses: flat at chance
        if cfg.method == "ofafl":
            rows = s.results[cfg.key()]["history"]
            for row in rows:
                row["acc_ratios"] = [None if a is None else 0.1 for a in row["acc_ratios"]]
    table2 = [c for c in ofa.build_ledger(s, "smoke", 10.0, 10.0, 5.0).claims
              if c.ref == "Table 2" and "variance" in c.statement][0]
    assert table2.values == ["inf"] * 3 and table2.per_seed == "none"
    assert f"more than {ofa.VARIANCE_GUARD:g} points behind fails" in table2.measured


def test_a_table_reproduction_splits_into_three_narrow_readings():
    ratios = [1.0, 0.5, 0.25]
    header = ofa.table_header(ratios)
    row = [5, "OFA-FL", "90", "80", "70", "1.5", "89", "79", "69", "2.5", "85", "3.5"]
    assert len(row) == len(header) == 12
    parts = ofa.reading_tables([row], ratios)
    assert [name for name, _, _ in parts] == ["max-avg round", "final round", "last five rounds"]
    assert [h for _, h, _ in parts] == [["method, P", "r=1.0", "r=0.5", "r=0.25", "var"]] * 2 \
        + [["method, P", "mean", "var"]]
    assert [r for _, _, r in parts] == [[["OFA-FL, P=5", "90", "80", "70", "1.5"]],
                                        [["OFA-FL, P=5", "89", "79", "69", "2.5"]],
                                        [["OFA-FL, P=5", "85", "3.5"]]]
    five = [row[:2] + row[2:5] * 2 + ["1.5"] + row[2:5] * 2 + ["2.5", "85", "3.5"]]
    assert all(len(h) <= 7 for _, h, _ in ofa.reading_tables(five, ofa.PAPER_R))


def test_table_rows_carry_the_papers_values_beside_the_books():
    s = study()
    s.results = fake_results(s)
    rows = ofa.table_rows(s, {1: "table1-P", 2: "table1-2P"}, ofa.METHODS)
    assert [r[:2] for r in rows] == [[p, ofa.LABEL[m]] for p in (1, 2) for m in ofa.METHODS]
    for row, (grid, m) in zip(rows, [(g, m) for g in ("table1-P", "table1-2P")
                                     for m in ofa.METHODS]):
        paper = ofa.PAPER_TABLES[grid][m]
        want = [*paper["max"][0], paper["max"][1], *paper["final"][0], paper["final"][1]]
        assert [c.split(" / ")[1] for c in row[2:14]] == [f"{v:g}" for v in want]
        assert all(c.endswith(" / —") for c in row[14:])   # no last-five reading
    ltp = rows[1]
    assert ltp[2].endswith(" / 58.95") and ltp[13].endswith(" / 0.4227")
    assert rows[3][6].endswith(" / 37.52")                   # OFA-FL, P=100, r=0.2
    assert rows[0][2].split(" / ")[0] == ofa.fmt(s.summary("table1-P", "ofafl")["acc"][0])
    two = ofa.table_rows(s, {1: "table2"}, ["ofafl", "ltp"])
    assert two[1][2].endswith(" / 79.72") and two[0][7].endswith(" / 0.0001")
    assert ofa.paper_cells("table2", "ofa-oneshot", 5) == [None] * 14    # not in Table 2
    assert ofa.with_paper("62.1", None) == "62.1 / —"
