"""FjORD against a reference round written from the Flower FjORD baseline's semantics
(adap/flower @ fdef7afb: baselines/fjord/fjord/models.py train and test,
od/samplers/fixed_od.py, od/layers, strategy.py fjord_average), on the tiny federation of
``test_heterofl``: digits, 4 clients of maximal widths 1, 1/2, 1/4, 2 rounds of 2 local
epochs with momentum and weight decay (so a fresh optimiser per step would show)."""
import torch

from . import width_reference as ref
from .test_heterofl import PARTICIPANTS, assert_scores_match, reference_config, run_package


def test_fjord_matches_the_reference_round():
    start, ours, row, sim = run_package("fjord")
    method = sim.method
    expected = ref.fjord_rounds(start, sim.data.clients, method.widths, method.levels,
                                PARTICIPANTS, reference_config())
    ref.assert_states_close(ours, expected)

    def at_own_width(client, x):
        p_max = method.widths[client.client_id]
        units = {n: ref.kept(expected[f"{n}.bias"].shape[0], p_max) for n in ref.HIDDEN}
        return ref.forward(expected, x, units=units)

    assert_scores_match(row, expected, sim, at_own_width)
    x, y = sim.data.dataset.x_test, sim.data.dataset.y_test
    assert row["widths"] == method.levels
    for p, acc in zip(method.levels, row["acc_widths"]):
        units = {n: ref.kept(expected[f"{n}.bias"].shape[0], p) for n in ref.HIDDEN}
        with torch.no_grad():
            want = (ref.forward(expected, x, units=units).argmax(1) == y).float().mean().item()
        assert abs(acc - want) <= 1e-5, p


def test_widths_are_sampled_per_batch_below_the_clients_maximum():
    """The draws in this setting: every allowed width within a visit, never above p_max
    (so the match above exercises ordered dropout, not one fixed width)."""
    _, _, _, sim = run_package("fjord", participants=PARTICIPANTS[:1])
    cfg = reference_config()
    for c in sim.data.clients:
        allowed = [p for p in sim.method.levels if p <= sim.method.widths[c.client_id]]
        batches, widths = ref.batch_orders(cfg["seed"], 1, c.client_id, c.n_train,
                                           cfg["batch_size"], cfg["epochs"], width_draw=True)
        drawn = {allowed[int(torch.randint(len(allowed), (1,), generator=widths))] for _ in batches}
        assert drawn == set(allowed), (allowed, drawn)


def test_client_test_global_adds_the_flower_baselines_score():
    """Kept on purpose: acc_personal scores each client's p_max model on its own split. The
    Flower baseline's client ``evaluate`` scores it on the whole test set; with
    ``client_test="global"`` that number is ``acc_clients_global`` (the mean over clients),
    computed here from the reference state. Under this non-IID split the two differ."""
    start, ours, row, sim = run_package("fjord", {"client_test": "global"})
    method = sim.method
    expected = ref.fjord_rounds(start, sim.data.clients, method.widths, method.levels,
                                PARTICIPANTS, reference_config())
    x, y = sim.data.dataset.x_test, sim.data.dataset.y_test
    per_client = []
    for c in sim.data.clients:
        p_max = method.widths[c.client_id]
        units = {n: ref.kept(expected[f"{n}.bias"].shape[0], p_max) for n in ref.HIDDEN}
        with torch.no_grad():
            per_client.append((ref.forward(expected, x, units=units).argmax(1) == y).float().mean().item())
    assert abs(row["acc_clients_global"] - sum(per_client) / len(per_client)) <= 1e-5
    assert abs(row["acc_clients_global"] - row["acc_personal"]) > 1e-3
    _, _, default, _ = run_package("fjord", participants=PARTICIPANTS[:1])
    assert "acc_clients_global" not in default
