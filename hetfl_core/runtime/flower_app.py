"""A Flower app that a deployment runs with ``flwr run``: one hetfl run, its clients on SuperNodes.

The app's ``pyproject.toml`` names this module's ``server`` and ``client`` as its components and
gives the run in its ``[tool.flwr.app.config]`` (``tests/flower_app/pyproject.toml`` is one)::

    [tool.flwr.app.components]
    serverapp = "hetfl_core.runtime.flower_app:server"
    clientapp = "hetfl_core.runtime.flower_app:client"

    [tool.flwr.app.config]
    hetfl-config = '{"method": "fedavg", "dataset": "digits", "clients": 4, "rounds": 2}'
    output = "/tmp/hetfl-flower-run.json"
    nodes = 2

The ServerApp reads the :class:`~hetfl_core.runtime.config.RunConfig` from ``hetfl-config`` (JSON, the
fields :meth:`RunConfig.to_dict` writes; the ones left out keep their defaults), waits for
``nodes`` SuperNodes, runs the config through :func:`hetfl_core.runtime.flower.server_app` and writes
the run's ``{"config", "history"}`` as JSON to ``output``, a path on the ServerApp's machine
(give it absolute: the ServerApp's working directory is the SuperLink's). hetfl_core must be
importable where the ServerApp and the ClientApps run; the app bundle itself holds no code.
"""
from __future__ import annotations

import json
from pathlib import Path

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from .config import RunConfig
from .engine import single_thread
from ..science.errors import ConfigError
from .experiments import write_atomic
from .flower import client_app, server_app

__all__ = ["server", "client", "read_run_config"]

server = ServerApp()
client = ClientApp()
_client_update = client_app()


def read_run_config(run_config: dict) -> tuple[RunConfig, Path, int]:
    """The hetfl config, the output path and the node count from a Flower run config."""
    missing = [key for key in ("hetfl-config", "output") if not run_config.get(key)]
    if missing:
        raise ConfigError(f"the Flower run config lacks {', '.join(missing)} "
                          f"(set them under [tool.flwr.app.config] or with flwr run --run-config)")
    try:
        values = json.loads(run_config["hetfl-config"])
    except json.JSONDecodeError as err:
        raise ConfigError(f"hetfl-config is not JSON: {err}") from None
    config = RunConfig.from_dict(values)
    config.validate()
    try:
        nodes = int(run_config.get("nodes") or config.clients)
    except (TypeError, ValueError):
        raise ConfigError(f"nodes must be a whole number, got {run_config['nodes']!r}") from None
    if nodes < 1:
        raise ConfigError(f"nodes must be at least 1, got {nodes}")
    return config, Path(run_config["output"]).expanduser(), nodes


@server.main()
def main(grid: Grid, context: Context) -> None:
    """Run the configured hetfl run with each client's update on a SuperNode and write it."""
    config, output, nodes = read_run_config(dict(context.run_config))
    app = server_app([config], nodes, on_run=lambda run, _: write_atomic(output, json.dumps(run).encode()))
    app(grid, context)


@client.train()
def train(msg: Message, context: Context) -> Message:
    """The method's ``client_update`` for the client the message names, on one torch thread
    (:class:`~hetfl_core.runtime.engine.single_thread`)."""
    with single_thread():
        return _client_update(msg, context)
