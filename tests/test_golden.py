"""Golden histories: a handful of small runs must give the stored histories in
``tests/golden/histories.json``, on any CPU.

What holds where:

* on one machine (one torch, one CPU kernel path, one torch thread), a run gives the same
  history bit for bit every time;
* across machines, CPUs take different vector kernels (AVX2, AVX-512, NEON, ...), whose
  float sums round differently in the last bits of float32. So integers, names, ``None``,
  the structure and every stored key, and the counted quantities (:data:`EXACT`: bits,
  FLOPs, steps, accuracies, which are ratios of counts) compare exactly; every other float
  (losses, simulated times, a method's own scores) to a relative :data:`REL_TOL`.

Measured on an AVX-512 machine, the largest relative difference over these runs between
the ``avx2`` and the machine's own (AVX-512) kernel paths: ``loss_global`` 1.5e-7,
``val_loss`` 7.4e-8, ``loss_personal`` 2.4e-8, ``loss`` 1.2e-8; between the scalar path
(``ATEN_CPU_CAPABILITY=default``) and AVX-512: ``val_loss`` 1.5e-7, ``loss_global`` 1.5e-7,
``loss_personal`` 6.9e-8, ``probs`` 3.5e-9; every other key, accuracies included, identical.
Each test computes the goldens in a fresh process under ``ATEN_CPU_CAPABILITY=avx2``, under
``ATEN_CPU_CAPABILITY=default`` (torch's scalar kernels) and under the machine's own path,
so one machine checks three.

What the tolerance catches: ``lr`` times 1 + 1e-3 moves every run's losses by 1e-5 or more
(ten times the tolerance), ``lr`` times 1 + 1e-4 FedAvg's by 3e-6. A change of ``lr`` by one
float64 ulp (``numpy.nextafter(0.05, 1)``) changes nothing at all, not even bit for bit:
SGD's float32 arithmetic rounds both to the same float32. A change by one float32 ulp
(0.05 to 0.05000000447, relative 8.9e-8) moves FedAvg's ``loss`` by at most 5.8e-9 and its
``loss_global`` by 7.4e-8 relative: less than the kernel paths differ by (1.5e-7), so no
tolerance that passes every CPU can see it; such a change is caught on one machine only,
bit for bit.

A change that is meant to move the numbers rewrites the file on purpose
(``python tests/test_golden.py --write``) and says why in its commit message.
"""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hetfl_core import RunConfig, run

GOLDEN = Path(__file__).parent / "golden" / "histories.json"
ROOT = Path(__file__).resolve().parent.parent
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
#: the relative tolerance of a float that kernels round (about 7x the largest difference measured)
REL_TOL = 1e-6
#: float keys that count things: compared exactly on every CPU
EXACT = {"uplink_bits", "downlink_bits", "flops", "sent_values", "units", "magnitude_units",
         "local_steps", "width", "ratio", "acc_global", "acc_personal", "acc_clients", "acc_val",
         "train_acc"}
#: the kernel paths every test checks: name -> ATEN_CPU_CAPABILITY (None: the machine's own)
CAPABILITIES = {"avx2": "avx2", "scalar": "default", "native": None}


def history(name: str, **changes) -> list:
    """The run's history as JSON would store it (floats round-trip exactly)."""
    return json.loads(json.dumps(run(CONFIGS[name].replace(**changes))["history"]))


def mismatches(value, golden, key: str = "", where: str = "") -> list[str]:
    """Where ``value`` differs from ``golden``: each golden key must be there (a key added
    since is not a change of the numbers), lists as long, floats under :data:`EXACT` keys and
    every non-float equal, other floats within :data:`REL_TOL`."""
    if isinstance(golden, dict):
        if not isinstance(value, dict):
            return [f"{where}: {value!r:.40} is not a dict"]
        return [m for k in golden for m in (mismatches(value[k], golden[k], k, f"{where}.{k}")
                                            if k in value else [f"{where}.{k} is missing"])]
    if isinstance(golden, list):
        if not isinstance(value, list) or len(value) != len(golden):
            return [f"{where}: {value!r:.60} is not a list of {len(golden)}"]
        return [m for i, (v, g) in enumerate(zip(value, golden))
                for m in mismatches(v, g, key, f"{where}[{i}]")]
    if type(golden) is float and type(value) is float and key not in EXACT:
        same = math.isclose(value, golden, rel_tol=REL_TOL, abs_tol=1e-12)
    else:
        same = type(value) is type(golden) and value == golden
    return [] if same else [f"{where}: {value!r} != {golden!r}"]


def histories_in_a_process(capability: str | None) -> dict:
    """Every golden history, computed in a fresh process under ``ATEN_CPU_CAPABILITY=capability``
    (the machine's default where ``None``): torch picks its kernels once, at import."""
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    if capability:
        env["ATEN_CPU_CAPABILITY"] = capability
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--print"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def computed():
    """``computed(capability)``: the golden histories under that kernel path, computed once."""
    found = {}

    def get(capability: str) -> dict:
        if capability not in found:
            found[capability] = histories_in_a_process(CAPABILITIES[capability])
        return found[capability]

    return get


@pytest.mark.parametrize("capability", sorted(CAPABILITIES))
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_history_matches_golden(name, capability, computed):
    golden = json.loads(GOLDEN.read_text())
    assert name in golden, f"no golden history for {name}: run python tests/test_golden.py --write"
    problems = mismatches(computed(capability)[name], golden[name], where=name)
    assert not problems, f"{len(problems)} differences under {capability}: " + \
        "; ".join(problems[:6])


def test_the_tolerance_catches_a_small_change_of_the_learning_rate():
    golden = json.loads(GOLDEN.read_text())
    for name in sorted(CONFIGS):
        changed = mismatches(history(name, lr=0.05 * (1 + 1e-3)), golden[name], where=name)
        assert changed, f"lr * (1 + 1e-3) went unseen in {name}"
    assert mismatches(history("fedavg", lr=0.05 * (1 + 1e-4)), golden["fedavg"])


def test_exact_keys_and_structure_catch_what_the_tolerance_would_pass():
    golden = json.loads(GOLDEN.read_text())["fedavg"]
    nudged = json.loads(json.dumps(golden))
    nudged[0]["flops"] *= 1 + 1e-9                      # a count is never rounded differently
    nudged[1]["loss"] *= 1 + 1e-9                       # a loss may be
    del nudged[2]["clients"][0]["uplink_bits"]
    problems = mismatches(nudged, golden)
    assert len(problems) == 2 and "flops" in problems[0] and "uplink_bits" in problems[1]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.write_text(json.dumps({name: history(name) for name in sorted(CONFIGS)}, indent=0) + "\n")
    print(f"wrote {GOLDEN}")
elif __name__ == "__main__" and sys.argv[1:] == ["--print"]:
    print(json.dumps({name: history(name) for name in sorted(CONFIGS)}))
