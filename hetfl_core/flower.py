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

Every message carries tensors and plain data only. Each payload is a ``torch.save`` archive
read back with ``torch.load(weights_only=True)``, which builds nothing but tensors, plain
containers and the types on hetfl's list (:func:`shipped_types`: the plan, the report,
hetfl's models and the state its methods keep, numpy arrays); an archive that names any
other class or function is refused in one line before anything in it is built, so a node's
reply cannot run code on the server, nor the server's message on a node.

    python -m hetfl_core run fedper --dataset digits --engine flower
"""
from __future__ import annotations

import functools
import inspect
import io
import json
import pickle
import threading
import time

import numpy as np
import torch

from .config import RunConfig
from .devices import resolve_device
from .engine import build_data, build_simulation, run_rounds
from .errors import HetflError
from .methods.base import ClientPlan, ClientReport, seeded_generator

__all__ = ["server_app", "client_app", "run_flower", "shipped_types"]

_NOT_SHIPPED = ("data",)   # each node deals its own copy of the data from the config


def _dumps(value) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _torch_layers() -> list[type]:
    """Every layer class torch.nn defines (hetfl's models are built from them)."""
    found, pending = [], [torch.nn.Module]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.startswith("torch.nn.modules."):
            found.append(cls)
    return found


def shipped_types() -> tuple:
    """The classes and functions a Flower message may name besides tensors and plain data
    (``torch.load(weights_only=True)`` admits those by itself): the plan and the report,
    the run's config, cost model and devices, the classes every registered method declares
    its state holds (its ``state_types``: bandits, schedules, error feedback, private
    stores, ...), hetfl's models and torch's layers, and numpy's arrays, scalars and random
    generators."""
    from .methods import METHODS

    return _shipped_types(tuple(METHODS.values()))


@functools.lru_cache(maxsize=4)
def _shipped_types(methods: tuple) -> tuple:
    """:func:`shipped_types` for the registered method classes ``methods``."""
    from . import masks, models, transformer
    from .bandits import UCB1, UCBV
    from .config import RunConfig
    from .methods.base import layers_of
    from .system.cost_model import Charge, ComputeCost, WirelessCost
    from .system.devices import DeviceProfile
    from .system.flops import LayerCost
    from .system.wireless import CellState, WirelessCell
    from .training import LocalResult

    hetfl = [ClientPlan, ClientReport, RunConfig, DeviceProfile, LayerCost, Charge, ComputeCost,
             WirelessCost, CellState, WirelessCell, UCB1, UCBV, LocalResult]
    declared = [kind for cls in methods for kind in cls.state_types]
    hetfl_models = [layer for module in (models, masks, transformer) for layer in layers_of(module)]
    random_pickle = np.random._pickle
    dtypes = [kind for kind in vars(np.dtypes).values()
              if isinstance(kind, type) and issubclass(kind, np.dtype)]
    constructors = [getattr(random_pickle, f"__{kind}_ctor")
                    for kind in ("generator", "bit_generator", "randomstate")]
    numpy_types = [np.ndarray, np.dtype, *dtypes, np._core.multiarray._reconstruct,
                   np._core.multiarray.scalar, np.random.Generator, np.random.RandomState,
                   np.random.SeedSequence, *random_pickle.BitGenerators.values(), *constructors,
                   getattr(np.random.bit_generator, "__pyx_unpickle_SeedSequence")]
    return tuple(dict.fromkeys([*hetfl, *declared, *hetfl_models, *_torch_layers(), *numpy_types]))


_LOADING = threading.Lock()   # safe_globals widens one process-wide list while a load runs


def _loads(blob, device: torch.device, expected: type, what: str):
    """``blob`` read back by ``torch.load(weights_only=True)`` with :func:`shipped_types`
    admitted, as an instance of ``expected``; a blob naming any other class or function is
    refused before anything in it is built. Refusals are one :class:`HetflError` line that
    begins with ``what`` (who sent the blob and what it is)."""
    if not isinstance(blob, bytes):
        raise HetflError(f"{what} is a {type(blob).__name__}, not a torch.save archive; refused")
    with _LOADING:
        admitted = torch.serialization.get_safe_globals()
        with torch.serialization.safe_globals([t for t in shipped_types() if t not in admitted]):
            try:
                refused = torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(blob))
            except Exception as exc:   # not a zip archive, a truncated pickle
                raise HetflError(f"{what} is not a torch.save archive ({_first_line(exc)}); "
                                 f"refused") from None
            if refused:
                raise HetflError(f"{what} names {', '.join(sorted(refused))}, which hetfl does "
                                 f"not ship; refused without loading it")
            try:
                value = torch.load(io.BytesIO(blob), map_location=device, weights_only=True)
            except Exception as exc:
                raise HetflError(f"{what} could not be read safely ({_first_line(exc)}); "
                                 f"refused") from None
    if not isinstance(value, expected):
        raise HetflError(f"{what} is a {type(value).__name__}, not a {expected.__name__}; refused")
    return value


def _first_line(exc: Exception) -> str:
    """The line of ``exc``'s message that says what went wrong (torch's weights-only
    unpickler puts it after a paragraph of advice)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for index, line in enumerate(lines[:-1]):
        if line.startswith("Please file an issue") and "WeightsUnpickler error" in line:
            return lines[index + 1]
    return lines[0] if lines else type(exc).__name__


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


def _check_changes(changes: dict, method, what: str) -> dict:
    """``changes`` if each is one :func:`_changes` makes: a new value for one of the method's
    shipped attributes (or a new attribute the class does not define), or entries of a dict
    attribute; otherwise a one-line :class:`HetflError` that begins with ``what``."""
    if not isinstance(changes, dict):
        raise HetflError(f"{what} is a {type(changes).__name__}, not a dict of changes; refused")
    shipped = _method_state(method)
    for name, change in changes.items():
        settable = isinstance(name, str) and name.isidentifier() and name not in (*_NOT_SHIPPED, "device")
        if settable:   # not one of the class's functions, properties or nested classes
            found = inspect.getattr_static(type(method), name, None)
            settable = not (callable(found) or hasattr(found, "__get__"))
        kind = change[0] if isinstance(change, tuple) and change else None
        if settable and kind == "set" and len(change) == 2:
            continue
        if (settable and kind == "entries" and len(change) == 3
                and isinstance(shipped.get(name), dict) and isinstance(change[1], dict)
                and isinstance(change[2], list) and all(key in shipped[name] for key in change[2])):
            continue
        raise HetflError(f"{what} changes {name!r} in a way no client_update does; refused")
    return changes


def _method_state(method) -> dict:
    return {name: value for name, value in vars(method).items() if name not in _NOT_SHIPPED}


@functools.lru_cache(maxsize=4)
def _node_data(config_json: str):
    """The federation a node deals from the config, kept for the next message of the run."""
    return build_data(RunConfig.from_dict(json.loads(config_json)))


def _train(task, node_id: int) -> dict:
    """A node's side of a train message: the method rebuilt from the shipped state (neither its
    constructor nor ``setup`` runs on the node), the named client trained, and the reply's
    ``{"report", "changes"}`` archives; a state or plan naming a type not shipped is refused unread."""
    from .methods import get_method

    config_json = task["config"]
    config = RunConfig.from_dict(json.loads(config_json))
    round_idx, k = int(task["round"]), int(task["client"])
    method = object.__new__(get_method(config.method))
    device = resolve_device(config.device)   # the node's own GPU, wherever the server computes
    sent = f"Flower node {node_id}: the server's {{}} for client {k} in round {round_idx}"
    state = _loads(task["state"], device, dict, sent.format("state"))
    if not all(isinstance(name, str) and name.isidentifier() for name in state):
        raise HetflError(f"{sent.format('state')} has a key that is no attribute name; refused")
    plan = _loads(task["plan"], device, ClientPlan, sent.format("plan"))
    vars(method).update(state, data=_node_data(config_json), device=device)
    before = _fingerprints(state)
    generator = seeded_generator(config.seed, round_idx, k)
    report = method.client_update(method.data.clients[k], plan, generator)
    return {"report": _dumps(report), "changes": _dumps(_changes(before, _method_state(method)))}


def client_app():
    """A Flower ``ClientApp`` whose train step is a hetfl method's ``client_update``."""
    from flwr.app import ConfigRecord, Message, RecordDict
    from flwr.clientapp import ClientApp

    app = ClientApp()

    @app.train()
    def train(msg: Message, context) -> Message:
        reply = ConfigRecord(_train(msg.content["hetfl"], context.node_id))
        return Message(RecordDict({"hetfl": reply}), reply_to=msg)

    return app


class _Stopped(HetflError):
    """The run was stopped (Ctrl-C) while the server waited for a node."""


def _wait_for_nodes(grid, count: int, stop: threading.Event, timeout_s: float = 300) -> list[int]:
    """The grid's node ids once ``count`` nodes have connected (nodes connect in their own
    time), unless ``stop`` is set first."""
    deadline = time.monotonic() + timeout_s
    while len(nodes := sorted(grid.get_node_ids())) < count:
        if time.monotonic() > deadline:
            raise HetflError(f"{len(nodes)} of {count} Flower nodes connected within "
                             f"{timeout_s:.0f} s")
        if stop.wait(0.1):
            raise _Stopped("stopped while waiting for Flower nodes")
    return nodes


def _node_reason(reason: str) -> str:
    """The node's own error message from a Flower error reply's reason (which wraps it in
    the exception's class, Ray's task description and a traceback)."""
    lines = [line.strip() for line in str(reason).splitlines() if line.strip()]
    for line in reversed(lines):
        if "Message: " in line:
            return line.split("Message: ", 1)[1].removesuffix("'>")
    return lines[0] if lines else "no reason given"


def _read_reply(reply, method, k: int, node: int, round_idx: int):
    """Client ``k``'s report from its node's reply, with what its ``client_update`` changed
    applied to the server's ``method``; a reply that names a type hetfl does not ship, or
    changes the method in a way no ``client_update`` does, is refused unread."""
    if reply.has_error():
        raise HetflError(f"client {k} failed on Flower node {node} in round {round_idx}: "
                         f"{_node_reason(reply.error.reason)}")
    sent = f"client {k}'s {{}} from Flower node {node} in round {round_idx}"
    result = reply.content.get("hetfl")
    if result is None or "report" not in result or "changes" not in result:
        raise HetflError(f"{sent.format('reply')} has no hetfl report and changes; refused")
    changes = _loads(result["changes"], method.device, dict, sent.format("changes"))
    report = _loads(result["report"], method.device, ClientReport, sent.format("report"))
    _apply(method, _check_changes(changes, method, sent.format("changes")))
    return report


def _grid_updates(grid, nodes: list[int], stop: threading.Event | None = None):
    """The engine's ``client_updates`` over a Flower grid: client k trains on node k (modulo
    the number of nodes), so a client's messages always go to the same node; setting
    ``stop`` ends the wait for a reply."""
    from flwr.app import ConfigRecord, Message, RecordDict

    stop = stop or threading.Event()

    def updates(sim, round_idx, jobs):
        config_json = json.dumps(sim.config.to_dict())
        for k, plan in jobs:
            node = nodes[k % len(nodes)]
            task = ConfigRecord({"config": config_json, "round": round_idx, "client": k,
                                 "plan": _dumps(plan), "state": _dumps(_method_state(sim.method))})
            message = Message(RecordDict({"hetfl": task}), dst_node_id=node, message_type="train",
                              group_id=str(round_idx))
            waiting = set(grid.push_messages([message]))
            while not (replies := list(grid.pull_messages(waiting))):
                if stop.wait(0.02):
                    raise _Stopped("stopped while waiting for a Flower node's reply")
            yield _read_reply(replies[0], sim.method, k, node, round_idx)

    return updates


def server_app(configs: list[RunConfig], nodes: int, on_run=None,
               stop: threading.Event | None = None, progress: bool = False):
    """A Flower ``ServerApp`` that runs ``configs`` one after another, each with its method as
    the strategy, once ``nodes`` nodes have connected; ``on_run(result, method)`` receives
    each run's ``{"config", "history"}`` and its trained method. Setting ``stop`` ends the
    run while it waits for nodes or a reply; ``progress`` shows a progress bar per run."""
    from flwr.serverapp import ServerApp

    app = ServerApp()
    stop = stop or threading.Event()   # never set: the app waits as long as its nodes take

    @app.main()
    def main(grid, context) -> None:
        """hetfl's round loop, each client's update on a Flower node."""
        updates = _grid_updates(grid, _wait_for_nodes(grid, nodes, stop), stop)
        for config in configs:
            sim = build_simulation(config)
            result = run_rounds(sim, progress, client_updates=updates)
            if on_run is not None:
                on_run(result, sim.method)

    return app


def _run_stoppably(simulate, stop: threading.Event, drain_s: float = 20) -> None:
    """``simulate()`` on a thread of its own, so that Ctrl-C, which lands on this thread,
    stops the run in order: ``stop`` makes the ServerApp return, Flower then lets its
    nodes finish the message in hand and shuts Ray down (within ``drain_s`` seconds), and
    ``KeyboardInterrupt`` propagates. Cutting Flower off at Ctrl-C instead leaves a thread
    waiting on a Ray actor that shutdown took away, and the process never exits."""
    failure: list[BaseException] = []
    done = threading.Event()   # waited on rather than joined: Ctrl-C during a join marks the
                               # thread finished while it runs (CPython's bpo-45274 fix)

    def guarded() -> None:
        try:
            simulate()
        except BaseException as exc:   # handed to the caller's thread
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=guarded, name="hetfl-flower-simulation", daemon=True).start()
    try:
        done.wait()
    except KeyboardInterrupt:
        stop.set()
        done.wait(drain_s)
        raise
    finally:
        stop.set()
    if failure:
        raise failure[0]


def run_flower(configs: list[RunConfig], nodes: int | None = None, cpus_per_client: float = 1,
               gpus_per_client: float = 0, on_run=None, progress: bool = False) -> list[dict]:
    """Run ``configs`` in one Flower simulation (``nodes`` virtual nodes, by default one per
    client of the largest run, each client's train step holding ``cpus_per_client`` CPUs and
    ``gpus_per_client`` GPUs) and return each ``{"config", "history"}`` as
    :func:`hetfl_core.engine.run` does; ``on_run`` and ``progress`` as in :func:`server_app`.
    On Ctrl-C the server stops waiting, Ray is shut down and ``KeyboardInterrupt`` propagates."""
    from flwr.simulation import run_simulation

    for config in configs:
        config.validate()
    nodes = nodes or max(c.clients for c in configs)
    results: list = []
    stop = threading.Event()

    def record(result, method):
        results.append(result)
        if on_run is not None:
            on_run(result, method)

    resources = {"num_cpus": cpus_per_client, "num_gpus": float(gpus_per_client)}
    app = server_app(configs, nodes, record, stop, progress)
    _run_stoppably(lambda: run_simulation(
        app, client_app(), num_supernodes=nodes,
        backend_config={"client_resources": resources,
                        "init_args": {"include_dashboard": False, "log_to_driver": False}}), stop)
    if len(results) < len(configs):
        raise HetflError(f"the Flower simulation ended after {len(results)} of {len(configs)} runs "
                           f"(see Flower's log above)")
    return results
