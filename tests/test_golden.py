"""Golden histories: every registered method and every option variant its declarations
name (``tools/equivalence.py``: a short run on digits each) must give the stored histories
in ``tests/golden/histories.json``, bit for bit where they were recorded and on any CPU
within a tolerance.

What holds where:

* on one machine (one torch, one CPU kernel path, one torch thread), a run gives the same
  history bit for bit every time;
* across machines, CPUs take different vector kernels (AVX2, AVX-512, NEON, ...), whose
  float sums round differently in the last bits of float32. So integers, names, ``None``,
  the structure and every stored key, and the counted quantities (:data:`EXACT`: bits,
  FLOPs, steps, accuracies, which are ratios of counts) compare exactly; every other float
  (losses, simulated times, a method's own scores) to a relative :data:`REL_TOL`.

Measured on an AVX-512 machine over every configuration, the largest relative difference
from the machine's own (AVX-512) kernel path: under ``avx2``, Heroes' Alg. 2 estimates ``L``
4.6e-7, ``sigma2`` 1.7e-7 and ``G2`` 1.5e-7, ``val_loss`` and ``loss_global`` 1.5e-7,
``loss`` 1.1e-7; under the scalar path (``ATEN_CPU_CAPABILITY=default``) ``L`` 4.7e-7,
``G2`` 3.9e-7, ``sigma2`` 2.8e-7, ``tau_raw`` 1.6e-7, ``loss_global`` 1.5e-7; every
counted key, accuracies included, identical. (Over the six runs the goldens held before,
without Heroes, the largest was 1.5e-7.)
Each test computes the goldens in a fresh process under ``ATEN_CPU_CAPABILITY=avx2``, under
``ATEN_CPU_CAPABILITY=default`` (torch's scalar kernels) and under the machine's own path,
so one machine checks three. A process whose torch version and kernel path are the ones
the goldens were recorded with compares every field exactly (bit for bit); others use the
tolerance. The machine's own path is the fast check; the other two are marked ``slow``.

What the tolerance catches: ``lr`` times 1 + 1e-3 moves the probed runs (:data:`LR_PROBES`)
by 3.3e-6 (FedAvg) to 1.7e-5 (SRP-pFed) relative at their largest change, three to
seventeen times the tolerance; ``lr`` times 1 + 1e-4 by 4.5e-7 (FedAvg) to 1.7e-6, which the
tolerance sees in some runs only. A change of ``lr`` by one float64 ulp
(``numpy.nextafter(0.05, 1)``) changes nothing at all, not even bit for bit: SGD's float32
arithmetic rounds both to the same float32. Changes below what the kernel paths differ by
(1.5e-7) no tolerance that passes every CPU can see; they are caught on one machine only,
bit for bit.

A change that is meant to move the numbers rewrites the file on purpose
(``python tools/equivalence.py record``) and says why in its commit message.
"""
import importlib.util
import json
import math
from pathlib import Path

import pytest

from hetfl_core import run

ROOT = Path(__file__).resolve().parent.parent
_SPEC = importlib.util.spec_from_file_location("equivalence", ROOT / "tools" / "equivalence.py")
equivalence = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(equivalence)
GOLDEN = equivalence.GOLDEN
CONFIGS = equivalence.configurations()
#: the relative tolerance of a float that kernels round (about 2x the largest difference measured,
#: Heroes' estimates; 7x that of every loss)
REL_TOL = 1e-6
#: float keys that count things: compared exactly on every CPU
EXACT = {"uplink_bits", "downlink_bits", "flops", "sent_values", "units", "magnitude_units",
         "local_steps", "width", "ratio", "acc_global", "acc_personal", "acc_clients", "acc_val",
         "train_acc"}
#: the kernel paths the tests check: name -> ATEN_CPU_CAPABILITY (None: the machine's own)
CAPABILITIES = {"avx2": "avx2", "scalar": "default", "native": None}
#: the methods whose sensitivity to a small change of the learning rate is checked
LR_PROBES = ("fedavg", "fedlps", "fedper", "heterofl", "sparse-prune-pfl", "srp-pfed")


def golden() -> dict:
    """The stored goldens (``torch``, ``cpu_capability``, ``digest``, ``histories``)."""
    return json.loads(GOLDEN.read_text())


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


@pytest.fixture(scope="module")
def computed():
    """``computed(capability)``: what ``tools/equivalence.py print`` gives under that kernel
    path in a fresh process (torch picks its kernels once, at import), computed once."""
    found = {}

    def get(capability: str) -> dict:
        if capability not in found:
            found[capability] = equivalence.in_a_process(
                ROOT, env_changes={"ATEN_CPU_CAPABILITY": CAPABILITIES[capability]})
        return found[capability]

    return get


@pytest.mark.parametrize("capability", [pytest.param(c, marks=[pytest.mark.slow] if c != "native" else [])
                                        for c in sorted(CAPABILITIES)])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_history_matches_golden(name, capability, computed):
    stored = golden()
    assert name in stored["histories"], f"no golden history for {name}: run python tools/equivalence.py record"
    here = computed(capability)
    expected, found = stored["histories"][name], here["histories"][name]
    if (here["torch"], here["cpu_capability"]) == (stored["torch"], stored["cpu_capability"]):
        why = equivalence.first_difference(found, expected)
        assert why is None, f"{name} is not bit-identical under {capability}: {why}"
    else:
        problems = mismatches(found, expected, where=name)
        assert not problems, f"{len(problems)} differences under {capability}: " + "; ".join(problems[:6])


def test_the_goldens_are_those_of_every_configuration_and_their_digest():
    """The file holds every configuration's history and no other, under its own digest."""
    stored = golden()
    assert set(stored["histories"]) == set(CONFIGS)
    assert stored["digest"] == equivalence.digest(stored["histories"])


@pytest.mark.slow
def test_the_tolerance_catches_a_small_change_of_the_learning_rate():
    stored = golden()["histories"]
    for name in LR_PROBES:
        changed = mismatches(history(name, lr=0.05 * (1 + 1e-3)), stored[name], where=name)
        assert changed, f"lr * (1 + 1e-3) went unseen in {name}"


def test_exact_keys_and_structure_catch_what_the_tolerance_would_pass():
    stored = golden()["histories"]["fedavg"]
    nudged = json.loads(json.dumps(stored))
    nudged[0]["flops"] *= 1 + 1e-9                      # a count is never rounded differently
    nudged[1]["loss"] *= 1 + 1e-9                       # a loss may be
    del nudged[2]["clients"][0]["uplink_bits"]
    problems = mismatches(nudged, stored)
    assert len(problems) == 2 and "flops" in problems[0] and "uplink_bits" in problems[1]
    assert equivalence.first_difference(nudged, stored) == f"round 1: flops {nudged[0]['flops']!r} != " \
        f"{stored[0]['flops']!r}"


def test_the_bit_for_bit_comparison_names_the_first_difference():
    stored = golden()["histories"]["fedavg"]
    nudged = json.loads(json.dumps(stored))
    nudged[1]["loss"] = math.nextafter(nudged[1]["loss"], math.inf)     # one float64 ulp
    assert mismatches(nudged, stored) == []
    assert equivalence.first_difference(nudged, stored).startswith("round 2: loss ")
    assert equivalence.first_difference(stored, stored) is None
    assert equivalence.digest({"fedavg": nudged}) != equivalence.digest({"fedavg": stored})
    lines, equal, compared = equivalence.compare({"fedavg": nudged, "new": []}, {"fedavg": stored})
    assert (equal, compared) == (0, 2) and lines[0].split()[:3] == ["fedavg", "round", "2:"]
