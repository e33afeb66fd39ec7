"""Golden histories: a handful of small runs must give the same history, bit for bit, as
the stored ones in ``tests/golden/histories.json``.

A change that is meant to move the numbers rewrites the file on purpose
(``python tests/test_golden.py --write``) and says why in its commit message.
"""
import json
import sys
from pathlib import Path

import pytest

from hetfl_core import RunConfig, run

GOLDEN = Path(__file__).parent / "golden" / "histories.json"
BASE = dict(dataset="digits", model="cnn", partition="dirichlet", alpha=0.5, clients=6, rounds=3,
            local_steps=3, batch_size=16, lr=0.05, heterogeneity="medium", val_fraction=0.1, seed=3)
CONFIGS = {
    "fedavg": RunConfig(method="fedavg", **BASE),
    "heterofl": RunConfig(method="heterofl", **BASE),
    "fedper": RunConfig(method="fedper", **BASE),
    "fedlps": RunConfig(method="fedlps", **BASE),
    "srp-pfed": RunConfig(method="srp-pfed", **BASE),
    "sparse-prune-pfl": RunConfig(method="sparse-prune-pfl", **BASE),
}


def history(name: str) -> list:
    """The run's history as JSON would store it (floats round-trip exactly)."""
    return json.loads(json.dumps(run(CONFIGS[name])["history"]))


def stored_keys(row: dict, golden_row: dict) -> dict:
    """``row`` restricted to the keys the golden row has (a key added since is not a change
    of the numbers), recursively into the per-client records."""
    out = {key: row.get(key, "<missing>") for key in golden_row}
    if "clients" in golden_row and isinstance(row.get("clients"), list):
        out["clients"] = [{key: c.get(key, "<missing>") for key in g}
                          for c, g in zip(row["clients"], golden_row["clients"])]
    return out


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_history_matches_golden(name):
    golden = json.loads(GOLDEN.read_text())
    assert name in golden, f"no golden history for {name}: run python tests/test_golden.py --write"
    rows = history(name)
    assert len(rows) == len(golden[name])
    for row, golden_row in zip(rows, golden[name]):
        assert stored_keys(row, golden_row) == golden_row, f"{name} round {golden_row['round']}"


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.write_text(json.dumps({name: history(name) for name in sorted(CONFIGS)}, indent=0) + "\n")
    print(f"wrote {GOLDEN}")
