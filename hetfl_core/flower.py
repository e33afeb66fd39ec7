"""Any hetfl method on Flower: a ``ServerApp`` and a ``ClientApp`` built from a :class:`RunConfig`.

The ``ServerApp`` runs hetfl's round loop (:func:`hetfl_core.engine.run`) with the
method as its strategy: ``configure_round`` plans each round and ``aggregate`` folds the
replies in, and the sampling, simulated clock, costs and history are the engine's, so a run
gives the same history under Flower as under the engine. Each planned client's train step
is a Flower ``Message`` to a node, whose ``ClientApp`` runs the method's ``client_update``
there::

    server: plan_k, method state  --train message-->  node k: client_update(client k, plan_k)
    server: aggregate(reports)    <--reply----------  report_k, what client_update changed

A method keeps its clients' state (personal heads, masks, bandit statistics) in its own
attributes, so the server holds that state and ships the method's attributes with the plan;
the node sends back the report and the attributes its ``client_update`` changed (per key,
for a dict of per-client entries), which the server applies before the next client.
Clients train one after another, because a ``client_update`` may read what the previous
client changed, exactly as in the engine. Each node deals the federation from the config
(the same seed gives the same partition) and trains the client the message names.

    python -m hetfl_core run fedper --dataset digits --engine flower
"""
from __future__ import annotations

import functools
import io
import json
import pickle
import time

import torch

from .config import RunConfig
from .devices import resolve_device
from .engine import build_data, build_simulation, run_rounds, seeded_generator
from .errors import HetflError

__all__ = ["server_app", "client_app", "run_flower"]

_NOT_SHIPPED = ("data",)   # each node deals its own copy of the data from the config


def _dumps(value) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _loads(blob: bytes, device: torch.device):
    return torch.load(io.BytesIO(blob), map_location=device, weights_only=False)


def _fingerprints(state: dict) -> dict:
    """Each attribute's pickled bytes, and each entry's for a dict (to find what changed)."""
    return {name: {key: pickle.dumps(v) for key, v in value.items()} if isinstance(value, dict)
            else pickle.dumps(value) for name, value in state.items()}


def _changes(before: dict, state: dict) -> dict:
    """What changed in the method's attributes: ``{name: ("set", value)}`` or, for a dict,
    ``{name: ("entries", {key: value}, [removed keys])}``."""
    after = _fingerprints(state)
    changes = {}
    for name, print_after in after.items():
        print_before = before.get(name)
        if print_before == print_after:
            continue
        if isinstance(print_after, dict) and isinstance(print_before, dict):
            changed = {key: state[name][key] for key, p in print_after.items() if print_before.get(key) != p}
            changes[name] = ("entries", changed, [key for key in print_before if key not in print_after])
        else:
            changes[name] = ("set", state[name])
    return changes


def _apply(method, changes: dict) -> None:
    for name, change in changes.items():
        if change[0] == "set":
            setattr(method, name, change[1])
        else:
            entries = getattr(method, name)
            entries.update(change[1])
            for key in change[2]:
                del entries[key]


def _method_state(method) -> dict:
    return {name: value for name, value in vars(method).items() if name not in _NOT_SHIPPED}


@functools.lru_cache(maxsize=4)
def _node_data(config_json: str):
    """The federation a node deals from the config, kept for the next message of the run."""
    return build_data(RunConfig.from_dict(json.loads(config_json)))


def client_app():
    """A Flower ``ClientApp`` whose train step is a hetfl method's ``client_update``."""
    from flwr.app import ConfigRecord, Message, RecordDict
    from flwr.clientapp import ClientApp

    from .methods import get_method

    app = ClientApp()

    @app.train()
    def train(msg: Message, context) -> Message:
        """Rebuild the method from the shipped state, train the named client, reply with its
        report and the state it changed."""
        task = msg.content["hetfl"]
        config_json = task["config"]
        config = RunConfig.from_dict(json.loads(config_json))
        round_idx, k = int(task["round"]), int(task["client"])
        method = object.__new__(get_method(config.method))
        device = resolve_device(config.device)   # the node's own GPU, wherever the server computes
        state = _loads(task["state"], device)
        vars(method).update(state, data=_node_data(config_json), device=device)
        before = _fingerprints(state)
        report = method.client_update(method.data.clients[k], _loads(task["plan"], device),
                                      seeded_generator(config.seed, round_idx, k))
        reply = ConfigRecord({"report": _dumps(report), "changes": _dumps(_changes(before, _method_state(method)))})
        return Message(RecordDict({"hetfl": reply}), reply_to=msg)

    return app


def _wait_for_nodes(grid, count: int, timeout_s: float = 300) -> list[int]:
    """The grid's node ids once ``count`` nodes have connected (nodes connect in their own time)."""
    deadline = time.monotonic() + timeout_s
    while len(nodes := sorted(grid.get_node_ids())) < count:
        if time.monotonic() > deadline:
            raise HetflError(f"{len(nodes)} of {count} Flower nodes connected within {timeout_s:.0f} s")
        time.sleep(0.1)
    return nodes


def _grid_updates(grid, nodes: list[int]):
    """The engine's ``client_updates`` over a Flower grid: client k trains on node k (modulo
    the number of nodes), so a client's messages always go to the same node."""
    from flwr.app import ConfigRecord, Message, RecordDict

    def updates(sim, round_idx, jobs):
        config_json = json.dumps(sim.config.to_dict())
        for k, plan in jobs:
            task = ConfigRecord({"config": config_json, "round": round_idx, "client": k,
                                 "plan": _dumps(plan), "state": _dumps(_method_state(sim.method))})
            message = Message(RecordDict({"hetfl": task}), dst_node_id=nodes[k % len(nodes)], message_type="train",
                              group_id=str(round_idx))
            (reply,) = grid.send_and_receive([message])
            if reply.has_error():
                raise HetflError(f"client {k} failed on its Flower node in round {round_idx}: {reply.error.reason}")
            result = reply.content["hetfl"]
            _apply(sim.method, _loads(result["changes"], sim.method.device))
            yield _loads(result["report"], sim.method.device)

    return updates


def server_app(configs: list[RunConfig], nodes: int, on_run=None):
    """A Flower ``ServerApp`` that runs ``configs`` one after another, each with its method as
    the strategy, once ``nodes`` nodes have connected; ``on_run(result, method)`` receives
    each run's ``{"config", "history"}`` and its trained method."""
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def main(grid, context) -> None:
        """hetfl's round loop, each client's update on a Flower node."""
        updates = _grid_updates(grid, _wait_for_nodes(grid, nodes))
        for config in configs:
            sim = build_simulation(config)
            result = run_rounds(sim, client_updates=updates)
            if on_run is not None:
                on_run(result, sim.method)

    return app


def run_flower(configs: list[RunConfig], nodes: int | None = None, cpus_per_client: float = 1,
               gpus_per_client: float = 0, on_run=None) -> list[dict]:
    """Run ``configs`` in one Flower simulation (``nodes`` virtual nodes, by default one per
    client of the largest run, each client's train step holding ``cpus_per_client`` CPUs and
    ``gpus_per_client`` GPUs) and return each ``{"config", "history"}`` as
    :func:`hetfl_core.engine.run` does; ``on_run`` as in :func:`server_app`."""
    from flwr.simulation import run_simulation

    for config in configs:
        config.validate()
    nodes = nodes or max(c.clients for c in configs)
    results: list = []

    def record(result, method):
        results.append(result)
        if on_run is not None:
            on_run(result, method)

    run_simulation(server_app(configs, nodes, record), client_app(), num_supernodes=nodes,
                   backend_config={"client_resources": {"num_cpus": cpus_per_client, "num_gpus": float(gpus_per_client)},
                                   "init_args": {"include_dashboard": False, "log_to_driver": False}})
    if len(results) < len(configs):
        raise HetflError(f"the Flower simulation ended after {len(results)} of {len(configs)} runs "
                           f"(see Flower's log above)")
    return results
