"""Any hetfl method on Flower: a ``ServerApp`` and a ``ClientApp`` built from a :class:`RunConfig`.

The ``ServerApp`` runs hetfl's round loop (:func:`hetfl_core.runtime.engine.run`) with the
method as its strategy: ``configure_round`` plans each round and ``aggregate`` folds the
replies in, and the sampling, simulated clock, costs and history are the engine's, so a run
gives the same history under Flower as under the engine. Each planned client's train step
is a Flower ``Message`` to a node, whose ``ClientApp`` runs the method's ``client_step``
there, its phases one after another (``client_update``)::

    server: shared state, plan_k, state_k  --train message-->  node k: client_update(client k, plan_k)
    server: aggregate(reports)             <--reply----------  report_k, new state_k

What a node receives is the method's *shared* state (:func:`shared_state`: the global
model and the run's constants, the same for every node), its plan and its **own** client's
state (the client's entry of each attribute the method declares in ``client_state``:
personal heads, masks, scores); it never receives another client's state, nor what only
the server reads (the attributes in ``server_state``: bandit statistics, every client's
width or ratio, the cost model), and it deals from the config its own client's data and
hardware alone (:func:`build_own_client`; the others are dropped). It sends back the report
and its client's new state, which the server keeps for the client's next visit. A round's
clients therefore train independently: every message of a round leaves before the first
reply is awaited.

Every message carries tensors and plain data only. Each payload is a ``torch.save`` archive
read back with ``torch.load(weights_only=True)``, which builds nothing but tensors, plain
containers and the types on hetfl's list (:func:`shipped_types`: the plan, the report,
the config, hetfl's models and the containers of the state that travels, numpy arrays); an
archive that names any other class or function is refused in one line before anything in
it is built, so a node's reply cannot run code on the server, nor the server's message on
a node; a reply that reports for another client, or returns state that is no client state
of the method, is refused too.

    python -m hetfl_core run fedper --dataset digits --engine flower
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import io
import json
import threading
import time

import numpy as np
import torch

from .config import RunConfig
from ..science.devices import resolve_device
from .engine import build_data, build_hardware, build_simulation, run_rounds
from ..science.errors import HetflError
from ..science.methods.base import ClientPlan, ClientReport, seeded_generator

__all__ = ["server_app", "client_app", "run_flower", "shipped_types", "shared_state", "build_own_client"]


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
    the run's config, the model's layer costs and a hardware profile, the classes every
    registered method declares its shared or clients' state holds (its ``state_types``:
    private stores, error feedback, composed models), hetfl's models and torch's layers,
    and numpy's arrays and scalars. What only the server reads (bandits, schedules, the
    cost model) never travels, so none of its classes is on the list."""
    from ..science.methods import METHODS

    return _shipped_types(tuple(METHODS.values()))


@functools.lru_cache(maxsize=4)
def _shipped_types(methods: tuple) -> tuple:
    """:func:`shipped_types` for the registered method classes ``methods``."""
    from ..science import masks, models, transformer
    from ..science.methods.base import layers_of
    from ..science.system.hardware import HardwareProfile
    from ..science.system.flops import LayerCost

    hetfl = [ClientPlan, ClientReport, RunConfig, HardwareProfile, LayerCost]
    declared = [kind for cls in methods for kind in cls.state_types]
    hetfl_models = [layer for module in (models, masks, transformer) for layer in layers_of(module)]
    dtypes = [kind for kind in vars(np.dtypes).values()
              if isinstance(kind, type) and issubclass(kind, np.dtype)]
    numpy_types = [np.ndarray, np.dtype, *dtypes, np._core.multiarray._reconstruct,
                   np._core.multiarray.scalar]
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


#: what a node derives for itself from the config rather than receives: its own client's
#: data and hardware (the other clients' are dropped)
_DERIVED = ("data", "hardware")
#: what no node receives, whatever the method declares: the run's cost model
_SERVER_ONLY = ("cost_model",)


def _emptied(container):
    """A :attr:`~hetfl_core.science.methods.base.Method.client_state` container with no client's entry."""
    if isinstance(container, dict):
        return {}
    empty = copy.copy(container)
    empty.clients = {}
    return empty


def shared_state(method) -> dict:
    """What every node receives of ``method``, the same for all: its attributes (the global
    model, the run's options and constants) but the data and hardware (:data:`_DERIVED`),
    ``None`` for each attribute only the server reads (its ``server_state``, and the cost
    model, :data:`_SERVER_ONLY`) and an empty container for each that holds the clients'
    own state (its ``client_state``), of which a node receives its own client's entry
    apart (``client_state_of``)."""
    shared = {}
    for name, value in vars(method).items():
        if name in _DERIVED:
            continue
        if name in method.server_state or name in _SERVER_ONLY:
            value = None
        elif name in method.client_state:
            value = _emptied(value)
        shared[name] = value
    return shared


def build_own_client(config: RunConfig, client_id: int):
    """Client ``client_id``'s data (a :class:`~hetfl_core.science.data.FederatedData` that holds that
    client alone, under its id, and the dataset's shapes but none of its samples) and its
    hardware (``{client_id: profile}``), dealt from ``config`` as the server deals them."""
    data = build_data(config)
    dataset = dataclasses.replace(
        data.dataset, groups=None, **{name: getattr(data.dataset, name)[:0]
                                      for name in ("x_train", "y_train", "x_test", "y_test")})
    own = dataclasses.replace(data, dataset=dataset, clients={client_id: data.clients[client_id]},
                              partition_indices={client_id: data.partition_indices[client_id]},
                              styles=None)
    return own, {client_id: build_hardware(config)[client_id]}


@functools.lru_cache(maxsize=64)
def _node_client(config_json: str, client_id: int):
    """:func:`build_own_client`, kept for the client's next message in the run."""
    return build_own_client(RunConfig.from_dict(json.loads(config_json)), client_id)


def _check_state(state: dict, method_class, what: str) -> dict:
    """``state`` if each key names one of ``method_class``'s ``client_state`` attributes;
    otherwise a one-line :class:`HetflError` that begins with ``what``."""
    unknown = [name for name in state if name not in method_class.client_state]
    if unknown:
        raise HetflError(f"{what} holds {', '.join(map(repr, unknown))}, which is no client "
                         f"state of {method_class.name}; refused")
    return state


def _train(task, node_id: int) -> dict:
    """A node's side of a train message: the method rebuilt from the shared state (neither
    its constructor nor ``setup`` runs on the node) with the node's own client's data,
    hardware and state, that client trained, and the reply's ``{"report", "state"}`` archives
    (the client's new state); a message naming a type not shipped is refused unread."""
    from ..science.methods import get_method

    config_json = task["config"]
    config = RunConfig.from_dict(json.loads(config_json))
    round_idx, k = int(task["round"]), int(task["client"])
    cls = get_method(config.method)
    method = object.__new__(cls)
    device = resolve_device(config.device)   # the node's own GPU, wherever the server computes
    sent = f"Flower node {node_id}: the server's {{}} for client {k} in round {round_idx}"
    shared = _loads(task["shared"], device, dict, sent.format("shared state"))
    if not all(isinstance(name, str) and name.isidentifier() for name in shared):
        raise HetflError(f"{sent.format('shared state')} has a key that is no attribute name; "
                         f"refused")
    state = _check_state(_loads(task["state"], device, dict, sent.format("state")), cls,
                         sent.format("state"))
    plan = _loads(task["plan"], device, ClientPlan, sent.format("plan"))
    data, hardware = _node_client(config_json, k)
    vars(method).update(shared, data=data, hardware=hardware, device=device)
    method.set_client_state(k, state)
    generator = seeded_generator(config.seed, round_idx, k)
    report = method.client_update(data.clients[k], plan, generator)
    return {"report": _dumps(report), "state": _dumps(method.client_state_of(k))}


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
    """Client ``k``'s report and new state from its node's reply; a reply that names a type
    hetfl does not ship, reports for another client or holds state that is no client state
    of the method is refused unread."""
    if reply.has_error():
        raise HetflError(f"client {k} failed on Flower node {node} in round {round_idx}: "
                         f"{_node_reason(reply.error.reason)}")
    sent = f"client {k}'s {{}} from Flower node {node} in round {round_idx}"
    result = reply.content.get("hetfl")
    if result is None or "report" not in result or "state" not in result:
        raise HetflError(f"{sent.format('reply')} has no hetfl report and state; refused")
    state = _check_state(_loads(result["state"], method.device, dict, sent.format("state")),
                         type(method), sent.format("state"))
    report = _loads(result["report"], method.device, ClientReport, sent.format("report"))
    if report.client_id != k:
        raise HetflError(f"{sent.format('report')} is client {report.client_id}'s; refused")
    return report, state


def _grid_updates(grid, nodes: list[int], stop: threading.Event | None = None):
    """The engine's ``client_updates`` over a Flower grid: client k trains on node k (modulo
    the number of nodes), so a client's messages always go to the same node. A round's
    messages all leave before the first reply is awaited (its clients train independently,
    each from the same shared state); the replies are read in the clients' order. Setting
    ``stop`` ends the wait for a reply."""
    from flwr.app import ConfigRecord, Message, RecordDict

    stop = stop or threading.Event()

    def updates(sim, round_idx, jobs):
        method = sim.method
        config_json = json.dumps(sim.config.to_dict())
        shared = _dumps(shared_state(method))
        sent = []
        for k, plan in jobs:
            node = nodes[k % len(nodes)]
            task = ConfigRecord({"config": config_json, "round": round_idx, "client": k,
                                 "plan": _dumps(plan), "shared": shared,
                                 "state": _dumps(method.client_state_of(k))})
            message = Message(RecordDict({"hetfl": task}), dst_node_id=node, message_type="train",
                              group_id=str(round_idx))
            sent.append((k, node, list(grid.push_messages([message]))))
        for k, node, waiting in sent:
            while not (replies := list(grid.pull_messages(waiting))):
                if stop.wait(0.02):
                    raise _Stopped("stopped while waiting for a Flower node's reply")
            report, state = _read_reply(replies[0], method, k, node, round_idx)
            method.set_client_state(k, state)
            yield report

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
    :func:`hetfl_core.runtime.engine.run` does; ``on_run`` and ``progress`` as in :func:`server_app`.
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
