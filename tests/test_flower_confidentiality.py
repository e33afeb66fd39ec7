"""A Flower node receives the shared state, its plan and its own client's state, never
another client's state or data, and its run still gives the engine's history.

The server's side (:func:`hetfl_core.runtime.flower._grid_updates`) talks to a grid whose one node
runs hetfl's ``ClientApp`` in this process, so every message a node receives can be read
back and the method the node rebuilds can be looked at while it trains."""
import json

import pytest
import torch

from hetfl_core import RunConfig
from hetfl_core.runtime.engine import build_simulation, run_rounds
from hetfl_core.runtime.flower import _grid_updates, _loads, client_app
from hetfl_core.science.methods.base import client_entries

pytest.importorskip("flwr", reason="the Flower bridge needs flwr (pip install flwr)")

NODE = 7
#: methods whose clients keep state of their own: FedPer's heads, Ditto's personal models,
#: FedLPS's scores and kept sparse models (and its server's bandits), Top-k's residuals
METHODS = ("fedper", "ditto", "fedlps", "topk-ef")


@pytest.fixture
def flower_task(monkeypatch):
    """Flower's identity of the task in this process, which it sets in a run and every
    ``Message`` reads."""
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_task_id", "_run_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


class InProcessGrid:
    """A Flower grid with one node whose ``ClientApp`` answers each message as it is pushed;
    ``received`` keeps, for each message, the client it names and its decoded payloads."""

    def __init__(self):
        self.app = client_app()
        self.replies, self.received = {}, []

    def push_messages(self, messages):
        from flwr.app import Context, RecordDict

        ids = []
        for message in messages:
            task = message.content["hetfl"]
            self.received.append((int(task["client"]), {
                part: _loads(task[part], torch.device("cpu"), object, part)
                for part in ("shared", "state", "plan")}))
            context = Context(run_id=1, node_id=NODE, node_config={}, state=RecordDict(),
                              run_config={})
            ids.append(str(len(self.received)))
            self.replies[ids[-1]] = self.app(message, context)
        return ids

    def pull_messages(self, message_ids):
        return [self.replies.pop(i) for i in message_ids if i in self.replies]


def tensors(value):
    """Every tensor in ``value`` (nested dicts, lists, tuples and objects' attributes)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors(item)
    elif isinstance(value, torch.nn.Module):
        yield from value.state_dict().values()
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        yield from tensors(vars(value))


def watch_the_node(monkeypatch, cls, seen: list):
    """Wrap ``cls.client_update`` so that each call records what the method it runs on
    holds: the clients of its data and hardware, the samples of its dataset, whose entries
    its client-state attributes hold, and its server-only attributes."""
    update = cls.client_update

    def watched(self, client, plan, generator):
        seen.append({"client": client.client_id, "data": sorted(self.data.clients),
                     "hardware": sorted(self.hardware),
                     "samples": len(self.data.dataset.y_train) + len(self.data.dataset.y_test),
                     "states": {name: sorted(client_entries(getattr(self, name)))
                                for name in cls.client_state},
                     "server": {name: getattr(self, name, None)
                                for name in (*cls.server_state, "cost_model")}})
        return update(self, client, plan, generator)

    monkeypatch.setattr(cls, "client_update", watched)


@pytest.mark.parametrize("method", METHODS)
def test_a_node_receives_no_other_clients_state_or_data(method, flower_task, monkeypatch):
    config = RunConfig(method=method, dataset="digits", partition="iid", clients=4, rounds=2,
                       local_steps=2, participation=0.75)
    engine = run_rounds(build_simulation(config))
    sim = build_simulation(config)
    cls = type(sim.method)
    assert cls.client_state, f"{method} declares no client state: nothing to keep apart"
    grid, seen, others_sent = InProcessGrid(), [], 0
    watch_the_node(monkeypatch, cls, seen)
    updates = _grid_updates(grid, [NODE])

    def spied(sim, round_idx, jobs):
        """Before a round's messages leave: every client's state the server holds."""
        nonlocal others_sent
        held = {k: sim.method.client_state_of(k) for k in range(config.clients)}
        start = len(grid.received)
        for report in updates(sim, round_idx, jobs):
            yield report
        for k, received in grid.received[start:]:
            assert set(received["state"]) <= set(cls.client_state)
            for name, entry in received["state"].items():
                assert entry is not None and name in held[k]
            theirs = [t for j, state in held.items() if j != k for t in tensors(state)]
            others_sent += len(theirs)
            mine = list(tensors([received["shared"], received["state"], received["plan"]]))
            for other in theirs:   # no tensor of another client's state travels to node k
                assert not any(t.shape == other.shape and torch.equal(t, other) for t in mine)
            for name in cls.client_state:   # the shared state's containers are empty
                assert not client_entries(received["shared"][name])
            for name in (*cls.server_state, "cost_model"):
                assert received["shared"].get(name) is None

    flower = run_rounds(sim, client_updates=spied)
    assert json.dumps(flower["history"]) == json.dumps(engine["history"])
    assert others_sent > 0, "no other client held state when a message left: nothing tested"
    assert len(seen) == len(grid.received) == 2 * 3
    for node in seen:
        k = node["client"]
        assert node["data"] == node["hardware"] == [k] and node["samples"] == 0
        assert all(keys in ([], [k]) for keys in node["states"].values()), node["states"]
        assert all(value is None for value in node["server"].values()), node["server"]
