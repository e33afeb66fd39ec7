"""Flower as an oracle: its aggregation and its stock FedAvg strategy against this package.

Flower (flwr 1.41) ships the server side of FedAvg in both of its APIs: the legacy one
(``flwr.server.strategy``: ``aggregate``, ``aggregate_inplace`` and ``FedAvg.aggregate_fit``
over ``FitRes``) and the Message one (``flwr.serverapp.strategy``: ``aggregate_arrayrecords``
and ``FedAvg.start`` / ``aggregate_train`` over reply ``Message``s). Nothing of this
package's aggregation runs on the Flower side (``hetfl_core.runtime.flower`` reuses the package's
own fold, so it is no oracle):

* the folds of ``hetfl_core.science.methods.aggregate`` against Flower's functions on random
  updates with unequal example counts, to 1e-6;
* the engine's FedAvg against Flower's FedAvg strategy aggregating the updates of this
  package's local training (the client side) on the tiny digits federation with unequal
  sizes, full participation, 2 rounds: the global state after every round, to 1e-5. The
  Message-API strategy runs its own round loop (``start``: sampling, train messages,
  ``aggregate_train``) over an in-process grid; the legacy strategy's ``aggregate_fit``
  gets ``FitRes`` replies built as Flower's compatibility layer builds them.

Each comparison is shown able to fail: an equally weighted fold is off by far more than
the tolerance.
"""
from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.strategy import FedAvg as LegacyFedAvg
from flwr.server.strategy.aggregate import aggregate, aggregate_inplace
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords
from flwr.supercore.task_identity import TaskIdentity
from torch import nn

from hetfl_core.science.methods.aggregate import average_over_holders, weighted_average
from hetfl_core.science.methods.base import ClientPlan, seeded_generator

from .pfl_reference import TOL, build, tiny_config

pytestmark = pytest.mark.slow     # servers, notebooks, processes or long runs: not in make test-fast

#: agreement required of the folds (float32 sums in another order differ by ~1e-7)
FOLD_TOL = 1e-6
#: unequal example counts of the random updates, and the tiny federation's client sizes
EXAMPLES = [37, 120, 5, 64, 211]
SIZES = [60, 100, 40, 80]
ROUNDS = 2
#: node ids of the in-process grid: client k is node NODE_BASE + k
NODE_BASE = 1000
#: the identity the in-process ServerApp's messages carry (run, its node, its task)
SERVER_IDENTITY = {"run_id": 7, "node_id": SUPERLINK_NODE_ID, "task_id": 1}


# -- the folds ------------------------------------------------------------------------
def random_updates(seed: int = 0) -> list[dict]:
    """One float32 state dict per client, in a small CNN's shapes."""
    g = torch.Generator().manual_seed(seed)
    shapes = {"conv.weight": (6, 1, 3, 3), "conv.bias": (6,), "fc.weight": (10, 24),
              "fc.bias": (10,)}
    return [{n: torch.randn(s, generator=g) for n, s in shapes.items()} for _ in EXAMPLES]


def as_ndarrays(state: dict) -> list[np.ndarray]:
    """A state dict as Flower's ``NDArrays`` (a list in the state dict's order)."""
    return [t.numpy().copy() for t in state.values()]


def fit_res(state: dict, examples: int) -> FitRes:
    """A client's successful ``FitRes``, as a legacy ``ClientApp`` returns it."""
    return FitRes(Status(Code.OK, "Success"), ndarrays_to_parameters(as_ndarrays(state)),
                  examples, {})


def flower_aggregate(states: list[dict], examples: list[int]) -> list[np.ndarray]:
    """``flwr.server.strategy.aggregate.aggregate``: sum_k n_k x_k / sum_k n_k."""
    return aggregate([(as_ndarrays(s), n) for s, n in zip(states, examples)])


def flower_aggregate_inplace(states: list[dict], examples: list[int]) -> list[np.ndarray]:
    """``aggregate_inplace``, FedAvg's default fold, over (client proxy, ``FitRes``) pairs."""
    return aggregate_inplace([(None, fit_res(s, n)) for s, n in zip(states, examples)])


def flower_aggregate_arrayrecords(states: list[dict], examples: list[int]) -> list[np.ndarray]:
    """``aggregate_arrayrecords``, the Message API's fold, over reply contents weighted by
    their ``num-examples`` metric."""
    replies = [RecordDict({"arrays": ArrayRecord(s), "metrics": MetricRecord({"num-examples": n})})
               for s, n in zip(states, examples)]
    return list(aggregate_arrayrecords(replies, "num-examples").to_numpy_ndarrays())


FLOWER_FOLDS = [flower_aggregate, flower_aggregate_inplace, flower_aggregate_arrayrecords]


def gap(state: dict, arrays: list[np.ndarray]) -> float:
    """The largest absolute difference between a state dict and Flower's arrays."""
    assert len(state) == len(arrays)
    return max(float(np.abs(t.detach().numpy() - a).max()) for t, a in zip(state.values(), arrays))


@pytest.mark.parametrize("flower_fold", FLOWER_FOLDS, ids=lambda f: f.__name__)
def test_weighted_average_matches_flowers_fold(flower_fold):
    states = random_updates()
    assert gap(weighted_average(states, EXAMPLES), flower_fold(states, EXAMPLES)) <= FOLD_TOL


@pytest.mark.parametrize("flower_fold", FLOWER_FOLDS, ids=lambda f: f.__name__)
def test_an_equally_weighted_average_is_caught(flower_fold):
    states = random_updates()
    assert gap(weighted_average(states, [1] * len(states)), flower_fold(states, EXAMPLES)) > 1e-2


def holder_model(seed: int = 1) -> nn.Module:
    """A model in the shapes of :func:`random_updates`, with random values (those of the
    entries no report holds stay)."""
    model = nn.Module()
    model.conv, model.fc = nn.Conv2d(1, 6, 3), nn.Linear(24, 10)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return model


def holder_reports(held_fraction: float, seed: int = 2) -> list[SimpleNamespace]:
    """Reports with ``weights`` and where they are ``held``: each entry held with ``held_fraction``."""
    g = torch.Generator().manual_seed(seed)
    reports = []
    for state, n in zip(random_updates(seed), EXAMPLES):
        held = {k: (torch.rand(v.shape, generator=g) < held_fraction).float()
                for k, v in state.items()}
        reports.append(SimpleNamespace(weights=state, held=held, n_samples=n))
    return reports


def flower_average_over_holders(model, reports, examples) -> dict:
    """Flower has no holder-wise fold; composed from two of its weighted averages, the
    masked values' and the masks', whose common denominator cancels:
    sum_k n_k h_k x_k / sum_k n_k h_k; entries no report holds keep the model's value."""
    values = flower_aggregate([{k: r.held[k] * r.weights[k] for k in r.weights}
                               for r in reports], examples)
    shares = flower_aggregate([r.held for r in reports], examples)
    params = [p.detach().numpy() for p in model.parameters()]
    return {name: np.where(s > 0, v / np.where(s > 0, s, 1), p)
            for name, v, s, p in zip(dict(model.named_parameters()), values, shares, params)}


def test_average_over_holders_with_every_entry_held_is_flowers_fedavg():
    model = holder_model()
    reports = holder_reports(held_fraction=1.0)
    average_over_holders(model, reports)
    assert gap(dict(model.named_parameters()),
               flower_aggregate([r.weights for r in reports], EXAMPLES)) <= FOLD_TOL


@pytest.mark.parametrize("weighting", ["examples", "plain"])
def test_average_over_holders_matches_flowers_fold_per_entry(weighting):
    """Weighted by the reports' example counts, and the plain mean over holders (weights 1);
    some entries are held by no report."""
    model, reports = holder_model(), holder_reports(held_fraction=0.4)
    weights = EXAMPLES if weighting == "examples" else [1] * len(reports)
    expected = flower_average_over_holders(model, reports, weights)
    assert any((s == 0).any() for s in flower_aggregate([r.held for r in reports], weights))
    average_over_holders(model, reports, None if weighting == "examples" else weights)
    assert gap(dict(model.named_parameters()), list(expected.values())) <= FOLD_TOL


def test_an_equally_weighted_average_over_holders_is_caught():
    model, reports = holder_model(), holder_reports(held_fraction=0.4)
    expected = flower_average_over_holders(model, reports, EXAMPLES)
    average_over_holders(model, reports, [1] * len(reports))
    assert gap(dict(model.named_parameters()), list(expected.values())) > 1e-2


# -- Flower's FedAvg strategy driving this package's local training --------------------
def oracle_config():
    """The tiny digits federation with unequal client sizes and full participation."""
    return tiny_config("fedavg", sizes=SIZES, rounds=ROUNDS)


def train_client(sim, round_idx: int, k: int, state: dict):
    """The client side: this package's local FedAvg training of client ``k`` from the
    broadcast ``state``, with the engine's plan and minibatch stream."""
    method, client = sim.method, sim.data.clients[k]
    method.model.load_state_dict(state)
    return method.client_update(client, ClientPlan(method.local_steps(client)),
                                seeded_generator(sim.config.seed, round_idx, k))


class InProcessGrid(Grid):
    """A Flower grid whose nodes are the federation's clients, in this process: a train
    message to node ``NODE_BASE + k`` runs :func:`train_client` for client ``k`` and is
    answered as a ``ClientApp`` answers it (the trained arrays and a ``num-examples``
    metric). ``trained`` records who trained in each round."""

    def __init__(self, sim):
        self.sim, self.trained = sim, {}

    def get_node_ids(self):
        """One node per client."""
        return [NODE_BASE + k for k in range(self.sim.config.clients)]

    def send_and_receive(self, messages, *, timeout=None):
        """Each train message's reply, computed on the spot."""
        replies = []
        for msg in messages:
            assert msg.metadata.message_type == "train"
            round_idx = int(msg.content["config"]["server-round"])
            k = msg.metadata.dst_node_id - NODE_BASE
            self.trained.setdefault(round_idx, []).append(k)
            state = msg.content["arrays"].to_torch_state_dict()
            report = train_client(self.sim, round_idx, k, state)
            content = RecordDict({"arrays": ArrayRecord(report.weights),
                                  "metrics": MetricRecord({"num-examples": report.n_samples,
                                                           "train_loss": report.loss})})
            replies.append(Message(content, reply_to=msg))
        return replies

    def set_run(self, run_id):
        raise NotImplementedError

    @property
    def run(self):
        raise NotImplementedError

    def create_message(self, *args, **kwargs):
        raise NotImplementedError

    def push_messages(self, messages):
        raise NotImplementedError

    def pull_messages(self, message_ids):
        raise NotImplementedError


@contextmanager
def server_identity():
    """The process's task identity set as Flower's ServerApp runtime sets it (instruction
    messages carry it), and restored afterwards."""
    before = {key: getattr(TaskIdentity, f"_{key}") for key in SERVER_IDENTITY}
    for key, value in SERVER_IDENTITY.items():
        setattr(TaskIdentity, key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            setattr(TaskIdentity, f"_{key}", value)


def message_api_fedavg() -> tuple[list[dict], dict]:
    """``flwr.serverapp.strategy.FedAvg().start`` over the in-process grid: the global state
    after each round (from its ``evaluate_fn``) and the clients trained per round."""
    sim, start = build(oracle_config())
    grid = InProcessGrid(sim)
    states = {}

    def keep(round_idx, arrays):
        states[round_idx] = {n: t.clone() for n, t in arrays.to_torch_state_dict().items()}

    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=len(SIZES),
                      min_available_nodes=len(SIZES))
    with server_identity():
        strategy.start(grid, ArrayRecord(sim.method.model.state_dict()), num_rounds=ROUNDS,
                       evaluate_fn=keep)
    assert all(torch.equal(states[0][n], start[n]) for n in start)
    return [states[t] for t in range(1, ROUNDS + 1)], grid.trained


def legacy_fedavg(inplace: bool) -> list[dict]:
    """``flwr.server.strategy.FedAvg(inplace=...).aggregate_fit`` over ``FitRes`` replies of
    every client, round after round: the global state after each round."""
    sim, _ = build(oracle_config())
    strategy = LegacyFedAvg(inplace=inplace, min_fit_clients=len(SIZES),
                            min_available_clients=len(SIZES))
    names = list(sim.method.model.state_dict())
    parameters, states = ndarrays_to_parameters(as_ndarrays(sim.method.model.state_dict())), []
    for t in range(1, ROUNDS + 1):
        arrays = parameters_to_ndarrays(parameters)
        broadcast = {n: torch.from_numpy(a) for n, a in zip(names, arrays)}
        results = []
        for k in range(len(SIZES)):
            report = train_client(sim, t, k, broadcast)
            proxy = GridClientProxy(NODE_BASE + k, grid=None, run_id=0)
            results.append((proxy, fit_res(report.weights, report.n_samples)))
        parameters, _ = strategy.aggregate_fit(t, results, [])
        states.append({n: torch.from_numpy(a.copy())
                       for n, a in zip(names, parameters_to_ndarrays(parameters))})
    return states


def engine_fedavg(equal_weights: bool = False) -> list[dict]:
    """The engine's FedAvg on the same federation (every client in every round): the
    global state after each round; ``equal_weights`` replaces its fold by a plain mean."""
    sim, _ = build(oracle_config())
    if equal_weights:
        def plain_mean(round_idx, reports):
            state = weighted_average([r.weights for r in reports], [1.0] * len(reports))
            sim.method.model.load_state_dict(state, strict=False)
        sim.method.aggregate = plain_mean
    states = []
    for t in range(1, ROUNDS + 1):
        sim.round(t, clients=list(range(len(SIZES))), evaluate=False)
        states.append({n: p.detach().clone() for n, p in sim.method.model.state_dict().items()})
    return states


def state_gap(a: dict, b: dict) -> float:
    """The largest absolute difference between two state dicts with the same names."""
    assert a.keys() == b.keys()
    return max(float((a[n] - b[n]).abs().max()) for n in a)


@pytest.fixture(scope="module")
def engine_states():
    """The engine's FedAvg, round by round."""
    return engine_fedavg()


@pytest.fixture(scope="module")
def flower_states():
    """Flower's Message-API FedAvg over this package's local training, round by round."""
    return message_api_fedavg()


def test_engine_fedavg_matches_flowers_fedavg_strategy_round_for_round(engine_states,
                                                                       flower_states):
    states, trained = flower_states
    assert {t: sorted(ks) for t, ks in trained.items()} == {
        t: list(range(len(SIZES))) for t in range(1, ROUNDS + 1)}
    for t, (mine, theirs) in enumerate(zip(engine_states, states, strict=True), start=1):
        assert state_gap(mine, theirs) <= TOL, f"round {t}"


@pytest.mark.parametrize("inplace", [True, False], ids=["inplace", "copy"])
def test_engine_fedavg_matches_flowers_legacy_fedavg_round_for_round(engine_states, inplace):
    for t, (mine, theirs) in enumerate(zip(engine_states, legacy_fedavg(inplace), strict=True),
                                       start=1):
        assert state_gap(mine, theirs) <= TOL, f"round {t}"


def test_an_equally_weighted_engine_is_caught_by_flowers_fedavg(flower_states):
    """The strategy oracle can fail: a FedAvg whose server takes the plain mean of the
    client models (equal weights) is off by far more than the tolerance after round 1."""
    states, _ = flower_states
    misweighted = engine_fedavg(equal_weights=True)
    assert state_gap(misweighted[0], states[0]) > 100 * TOL
