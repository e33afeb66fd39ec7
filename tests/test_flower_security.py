"""A Flower message is read without running anything it names: a crafted reply cannot run code
on the server, nor a crafted train message on a node."""
import io
import json
import os
from pathlib import Path

import pytest
import torch

from hetfl_core import RunConfig
from hetfl_core.runtime.engine import build_simulation
from hetfl_core.science.errors import HetflError
from hetfl_core.science.methods.base import ClientReport
from hetfl_core.runtime.flower import _dumps, _grid_updates, client_app, shared_state

pytestmark = pytest.mark.slow     # servers, notebooks, processes or long runs: not in make test-fast

NODE = 7
REFUSED_NAME = {"system": "posix.system", "open": "io.open"}   # how each call is pickled


class Hostile:
    """Unpickles as a call that creates the file ``path`` (``os.system("touch ...")`` or
    ``open(path, "w")``): what a crafted message carries to run code where it is read."""

    def __init__(self, path, call="system"):
        self.path, self.call = str(path), call

    def __reduce__(self):
        if self.call == "system":
            return os.system, (f"touch '{self.path}'",)
        return open, (self.path, "w")


@pytest.fixture
def flower_task(monkeypatch):
    """Flower's identity of the task in this process, which it sets in a run and every
    ``Message`` reads."""
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_task_id", "_run_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


def _fedavg():
    """A two-client FedAvg run: its config, its simulation and client 0's plan in round 1."""
    config = RunConfig(method="fedavg", dataset="digits", clients=2, rounds=1, local_steps=1)
    sim = build_simulation(config)
    return config, sim, sim.method.configure_round(1, [0])[0]


def _train_message(config, plan, shared, state):
    """The server's train message for client 0 in round 1, to node ``NODE``."""
    from flwr.app import ConfigRecord, Message, RecordDict

    task = ConfigRecord({"config": json.dumps(config.to_dict()), "round": 1, "client": 0,
                         "plan": plan, "shared": shared, "state": state})
    return Message(RecordDict({"hetfl": task}), dst_node_id=NODE, message_type="train",
                   group_id="1")


def _node_trains(message):
    """Node ``NODE``'s ClientApp handles ``message``."""
    from flwr.app import Context, RecordDict

    context = Context(run_id=1, node_id=NODE, node_config={}, state=RecordDict(), run_config={})
    return client_app()(message, context)


class ReplyingGrid:
    """A Flower grid with one node, which answers every train message with ``content``."""

    def __init__(self, content: dict):
        self.content = content
        self.sent = []

    def push_messages(self, messages):
        self.sent.extend(messages)
        return [str(len(self.sent))]

    def pull_messages(self, message_ids):
        from flwr.app import ConfigRecord, Message, RecordDict

        return [Message(RecordDict({"hetfl": ConfigRecord(self.content)}), reply_to=self.sent[-1])]

    def send_and_receive(self, messages, timeout=None):
        self.push_messages(messages)
        return self.pull_messages([])


def _raised(read) -> Exception | None:
    """What ``read()`` raised, if anything (checked after whether it ran the crafted code)."""
    try:
        read()
    except Exception as exc:
        return exc
    return None


def _server_reads(content: dict):
    """The server's copy of FedAvg reads client 0's reply ``content`` from node ``NODE``."""
    _, sim, plan = _fedavg()
    return next(_grid_updates(ReplyingGrid(content), [NODE])(sim, 1, [(0, plan)]))


def _honest_reply() -> dict:
    """What node ``NODE`` honestly replies for client 0 in round 1."""
    config, sim, plan = _fedavg()
    reply = _node_trains(_train_message(config, _dumps(plan), _dumps(shared_state(sim.method)),
                                        _dumps({})))
    return dict(reply.content["hetfl"])


def _assert_refused(refused, marker: Path, side: str, where: str, name: str) -> None:
    """``refused`` is a one-line HetflError naming ``where`` and the refused ``name``, and
    the payload never ran on ``side`` (its ``marker`` file is absent)."""
    assert not marker.exists(), f"the payload ran code on {side}"
    assert isinstance(refused, HetflError), refused
    message = str(refused)
    assert len(message.splitlines()) == 1, message
    assert where in message, message
    assert name in message, message


@pytest.mark.parametrize("call", ["system", "open"])
@pytest.mark.parametrize("part", ["report", "state"])
def test_a_crafted_reply_is_refused_by_the_server_and_runs_nothing(tmp_path, flower_task, part,
                                                                   call):
    marker = tmp_path / "ran"
    hostile = Hostile(marker, call)
    crafted = {"report": hostile, "state": {"private": hostile}}
    reply = {**_honest_reply(), part: _dumps(crafted[part])}
    _assert_refused(_raised(lambda: _server_reads(reply)), marker, "the server",
                    f"client 0's {part} from Flower node {NODE}", REFUSED_NAME[call])


@pytest.mark.parametrize("call", ["system", "open"])
@pytest.mark.parametrize("part", ["shared state", "state", "plan"])
def test_a_crafted_train_message_is_refused_by_the_node_and_runs_nothing(tmp_path, flower_task,
                                                                         part, call):
    marker = tmp_path / "ran"
    config, sim, plan = _fedavg()
    shared = shared_state(sim.method)
    evil = Hostile(marker, call)
    shipped = {"shared state": _dumps(shared), "state": _dumps({}), "plan": _dumps(plan)}
    shipped[part] = _dumps({"shared state": {**shared, "evil": evil}, "state": {"evil": evil},
                            "plan": evil}[part])
    message = _train_message(config, shipped["plan"], shipped["shared state"], shipped["state"])
    _assert_refused(_raised(lambda: _node_trains(message)), marker, "the node",
                    f"Flower node {NODE}: the server's {part} for client 0", REFUSED_NAME[call])


def test_an_honest_reply_is_read_and_a_wrong_shape_is_refused(flower_task):
    reply = _honest_reply()
    assert _server_reads(reply).client_id == 0
    other = ClientReport(1, 10, loss=0.0, flops=0.0, uplink_bits=0.0, downlink_bits=0.0,
                         local_steps=1)
    for part, value, words in [("report", {"loss": 0.0}, "is a dict, not a ClientReport"),
                               ("report", other, "is client 1's; refused"),
                               ("state", {"aggregate": 1}, "holds 'aggregate', which is no client"),
                               ("state", {"data": None}, "holds 'data', which is no client"),
                               ("report", b"not an archive", "is not a torch.save archive")]:
        crafted = {**reply, part: value if isinstance(value, bytes) else _dumps(value)}
        with pytest.raises(HetflError, match=words):
            _server_reads(crafted)


def test_reading_a_message_leaves_torchs_safe_globals_as_they_were(flower_task):
    before = torch.serialization.get_safe_globals()   # torch keeps them in a set: order varies
    _server_reads(_honest_reply())
    after = torch.serialization.get_safe_globals()
    assert len(after) == len(before) and set(after) == set(before)


def test_every_model_travels():
    """Every registered model's archive names only what a node or the server admits."""
    from hetfl_core.runtime.flower import shipped_types
    from hetfl_core.science.models import MODELS, build_model

    shapes = {"lenet5": (3, 32, 32), "lora-transformer": (35,)}
    with torch.serialization.safe_globals(list(shipped_types())):
        for model in MODELS:
            blob = io.BytesIO(_dumps(build_model(model, shapes.get(model, (1, 8, 8)), 10)))
            assert torch.serialization.get_unsafe_globals_in_checkpoint(blob) == [], model


def test_a_node_refuses_a_crafted_state_in_a_flower_simulation(tmp_path, monkeypatch):
    """End to end: the server ships a crafted state, the node refuses it unread, and the run
    ends with one line that names the client, the node and the refused type."""
    from hetfl_core.runtime import flower

    marker = tmp_path / "ran"
    shipped = flower.shared_state
    monkeypatch.setattr(flower, "shared_state",
                        lambda method: {**shipped(method), "evil": Hostile(marker)})
    config = RunConfig(method="fedavg", dataset="digits", clients=2, rounds=1, local_steps=1)
    with pytest.raises(HetflError) as refused:
        flower.run_flower([config])
    assert not marker.exists(), "the server's message ran code on a node"
    message = str(refused.value)
    assert len(message.splitlines()) == 1, message
    assert message.startswith("client 0 failed on Flower node "), message
    assert "the server's shared state for client 0 in round 1 names posix.system" in message, \
        message
