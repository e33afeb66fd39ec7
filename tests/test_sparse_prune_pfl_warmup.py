"""theta1 / theta2 from a warm-up (sparse-prune-pfl's ``theta_warmup_rounds``) and the real
FedPer on the wireless cell against the method at k = r = 1."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from hetfl_core import RunConfig
from hetfl_core.runtime.engine import build_simulation, run
from hetfl_core.science.errors import ConfigError
from hetfl_core.science.methods.sparse_prune_pfl import THETA_CLIP


def config(rounds=4, **options):
    return RunConfig(method="sparse-prune-pfl", dataset="digits", model="cnn", partition="dirichlet",
                     alpha=0.5, clients=4, rounds=rounds, local_steps=2, lr=0.05,
                     options={"allocation": "dca", **options})


def records(result, key):
    return [[c.get(key) for c in row["clients"]] for row in result["history"]]


def test_no_warmup_is_the_fixed_ratio_bit_for_bit():
    plain = run(config(rounds=3).validate())
    zero = run(config(rounds=3, theta_warmup_rounds=0).validate())
    assert plain["history"] == zero["history"]
    assert all(v is None for row in records(zero, "theta_ratio") for v in row)


def test_warmup_rounds_are_dense_and_set_the_ratio_by_the_rule():
    result = run(config(rounds=4, theta_warmup_rounds=2).validate())
    rows = result["history"]
    warm, after = rows[:2], rows[2:]
    assert all(c["k"] == 1 and c["r"] == 1 and "grad_sq" in c for row in warm for c in row["clients"])
    assert not any("grad_sq" in c for row in after for c in row["clients"])
    grad_sq = {}
    for row in warm:
        for c in row["clients"]:
            grad_sq.setdefault(c["id"], []).append(c["grad_sq"])
    g = math.sqrt(max(np.mean(v) for v in grad_sq.values()))
    m = max(c["private_norm"] for row in warm for c in row["clients"])
    expected = float(np.clip(m / (0.05 * g), *THETA_CLIP))
    ratios = {c["theta_ratio"] for row in after for c in row["clients"]}
    assert len(ratios) == 1 and ratios.pop() == pytest.approx(expected)
    assert expected != 10.0 and THETA_CLIP[0] < expected < THETA_CLIP[1]


def test_record_warmup_hand_worked():
    """Two clients over two rounds: mean ||g||^2 4 and 5, so G = sqrt 5; M = 3; eta = 0.1:
    theta1 / theta2 = M / (eta G) = 3 / (0.1 sqrt 5) = 13.416."""
    sim = build_simulation(config(rounds=3, theta_warmup_rounds=2).replace(lr=0.1).validate())
    method = sim.method

    def report(cid, g2, norm):
        return SimpleNamespace(client_id=cid, extra={"grad_sq": g2, "private_norm": norm})
    method.record_warmup([report(0, 4.0, 3.0), report(1, 1.0, 2.0)])
    assert method.theta_ratio == 10.0                 # not yet: one of two rounds
    method.record_warmup([report(0, 4.0, 1.0), report(1, 9.0, 2.5)])
    assert method.theta_ratio == pytest.approx(3 / (0.1 * math.sqrt(5)))


@pytest.mark.parametrize("options,rounds,needle", [
    ({"theta_warmup_rounds": 2, "allocation": "fixed"}, 4, "needs allocation"),
    ({"theta_warmup_rounds": 4}, 4, "below rounds"), ({"theta_warmup_rounds": -1}, 4, "theta_warmup_rounds")])
def test_bad_warmup_fails_at_once(options, rounds, needle):
    with pytest.raises(ConfigError, match=needle):
        config(rounds=rounds, **options).validate()


def test_real_fedper_on_the_cell_equals_the_method_at_k_r_1():
    """FedPer (the library's plug-in, conv body shared, FC head private) under the wireless cell
    and sparse-prune-pfl at k = r = 1 with the conv base reach the same accuracies, two local
    steps: the server's w - eta sum gamma (w - w_n) / eta is FedAvg's weighted mean. Their costs
    differ only in the upload: 32 bits a value against Eq. (9)'s 33 at k = 1."""
    ours = run(config(rounds=3, allocation="fixed", k=1.0, r=1.0, split="conv").validate())
    fedper = run(RunConfig(method="fedper", system="wireless", dataset="digits", model="cnn",
                           partition="dirichlet", alpha=0.5, clients=4, rounds=3, local_steps=2,
                           lr=0.05, options={"head_layers": 2}).validate())
    a = [h["acc_personal"] for h in ours["history"]]
    b = [h["acc_personal"] for h in fedper["history"]]
    assert np.allclose(a, b)
    bits = ours["history"][0]["uplink_bits"] / fedper["history"][0]["uplink_bits"]
    assert bits == pytest.approx(33 / 32)
    assert ours["history"][0]["flops"] == pytest.approx(fedper["history"][0]["flops"])
