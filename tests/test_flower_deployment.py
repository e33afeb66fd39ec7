"""hetfl on a real Flower deployment: a SuperLink and two SuperNodes on loopback, a run started
with ``flwr run``.

The app in ``tests/flower_app`` runs ``hetfl_core.runtime.flower_app`` (its ServerApp reads the hetfl
config and the output path from the run config); its history must be the engine's. The app in
``tests/flower_app_hostile`` adds a SuperNode whose ClientApp answers with a crafted pickle,
which the ServerApp must refuse without running it.

Every process runs in its own process group with a temporary ``FLWR_HOME``; all of them, and
what they started, are ended when a test ends, passed or failed.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="the Flower deployment test needs flwr (pip install flwr)")
tomli_w = pytest.importorskip("tomli_w", reason="the Flower deployment test needs tomli_w")

from hetfl_core import RunConfig, run  # noqa: E402

pytestmark = pytest.mark.slow     # servers, notebooks, processes or long runs: not in make test-fast

REPO = Path(__file__).resolve().parents[1]
CONNECTION = "hetfl-local"
START_TIMEOUT_S = 60
RUN_TIMEOUT_S = 300


def _command(name: str) -> str:
    """The path of a Flower command, next to this Python or on the PATH."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"the Flower command {name} is not installed")
    return found


def _prepend(entry: str, variable: str) -> str:
    """The environment's search path ``variable`` with ``entry`` first."""
    return os.pathsep.join(filter(None, [entry, os.environ.get(variable)]))


def _free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that are free now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _wait_for_port(port: int, process: subprocess.Popen, log: Path, timeout_s: float) -> None:
    """Return once ``port`` accepts connections; fail if ``process`` exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{process.args[0]} exited with {process.returncode}:\n"
                        f"{log.read_text()[-3000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    pytest.fail(f"nothing listened on 127.0.0.1:{port} within {timeout_s} s:\n"
                f"{log.read_text()[-3000:]}")


def _descendants(pid: int) -> list[int]:
    """The ids of the processes below ``pid`` (children, their children, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, pending = [], [pid]
    while pending:
        below = children.get(pending.pop(), [])
        found += below
        pending += below
    return found


def _signal_group(group: int, signum: int) -> None:
    """Send ``signum`` to the process group ``group`` if any of it is left."""
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        pass


class Deployment:
    """A SuperLink and two SuperNodes on loopback, and ``flwr`` commands against them."""

    def __init__(self, root: Path):
        self.root = root
        self.home = root / "flwr-home"
        self.processes: list[subprocess.Popen] = []
        commands = str(Path(_command("flower-superlink")).parent)   # Flower starts helpers by name
        self.env = {**os.environ, "FLWR_HOME": str(self.home), "FLWR_TELEMETRY_ENABLED": "0",
                    "FLWR_DISABLE_UPDATE_CHECK": "1",
                    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
                    "PATH": _prepend(commands, "PATH"),
                    "PYTHONPATH": _prepend(str(REPO), "PYTHONPATH")}

    def _start(self, name: str, args: list[str]) -> tuple[subprocess.Popen, Path]:
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen([_command(args[0]), *args[1:]], stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=self.env, cwd=self.root, start_new_session=True)
        self.processes.append(process)
        return process, log

    def start(self, node_configs: list[str]) -> None:
        """Start the SuperLink, wait for its port, then one SuperNode per node config."""
        self.home.mkdir(parents=True)
        link_port, *node_ports = _free_ports(1 + len(node_configs))
        connection = {"superlink": {"default": CONNECTION, CONNECTION: {
            "address": f"127.0.0.1:{link_port}", "insecure": True}}}
        (self.home / "config.toml").write_text(tomli_w.dumps(connection))
        link, log = self._start("superlink", [
            "flower-superlink", "--insecure", "--host", "127.0.0.1", "--port", str(link_port),
            "--disable-runtime-dependency-installation"])
        _wait_for_port(link_port, link, log, START_TIMEOUT_S)
        for index, (port, node_config) in enumerate(zip(node_ports, node_configs)):
            extra = ["--node-config", node_config] if node_config else []
            self._start(f"supernode-{index}", [
                "flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{link_port}",
                "--host", "127.0.0.1", "--port", str(port),
                "--max-wait-time", str(START_TIMEOUT_S), *extra])

    def flwr(self, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
        """A ``flwr`` command against this deployment's SuperLink."""
        return subprocess.run([_command("flwr"), *args], capture_output=True, text=True,
                              env=self.env, cwd=self.root, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)

    def run(self, app: Path, overrides: dict) -> tuple[str, str]:
        """``flwr run`` the app with run config ``overrides``, streaming its log until the run
        ends; return the run's final status and the streamed log."""
        override_file = self.root / f"{app.name}-run-config.toml"
        override_file.write_text(tomli_w.dumps(overrides))
        started = self.flwr("run", str(app), CONNECTION, "--run-config", str(override_file),
                            "--stream", timeout_s=RUN_TIMEOUT_S)
        output = started.stdout + started.stderr
        match = re.search(r"Successfully started run (\d+)", output)
        assert started.returncode == 0 and match, f"flwr run failed:\n{output[-3000:]}"
        listed = self.flwr("ls", CONNECTION, "--run-id", match.group(1), "--format", "json")
        assert "{" in listed.stdout, f"flwr ls failed:\n{listed.stdout}{listed.stderr}"
        runs = json.loads(listed.stdout[listed.stdout.index("{"):])["runs"]
        return runs[0]["status"], output

    def logs(self) -> str:
        """The SuperLink's and the SuperNodes' own logs, for a failure message."""
        return "\n".join(f"--- {log.name}\n{log.read_text()[-2000:]}"
                         for log in sorted(self.root.glob("*.log")))

    def stop(self) -> None:
        """End every process this deployment started and what they started (Flower starts its
        SuperExec in a session of its own), politely first, then by force."""
        below = {pid for process in self.processes for pid in _descendants(process.pid)}
        for process in self.processes:
            _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for process in self.processes:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def deployment(tmp_path):
    """A deployment to start in ``tmp_path``, ended after the test whatever its outcome."""
    started = Deployment(tmp_path)
    try:
        yield started
    finally:
        started.stop()


def _config(**changes) -> RunConfig:
    """A small FedPer run on digits: 4 clients, half of them each round, 2 rounds."""
    settings = dict(method="fedper", dataset="digits", model="cnn", partition="iid", clients=4,
                    participation=0.5, rounds=2, local_steps=2, train_samples=400)
    return RunConfig(**{**settings, **changes})


def test_a_flower_deployment_gives_the_engines_history(deployment, tmp_path):
    config = _config()
    output = tmp_path / "run.json"
    deployment.start(["", ""])
    status, log = deployment.run(REPO / "tests" / "flower_app", {
        "hetfl-config": json.dumps(config.to_dict()), "output": str(output), "nodes": 2})
    assert status == "finished:completed", f"{status}\n{log[-3000:]}\n{deployment.logs()}"
    deployed = json.loads(output.read_text())
    engine = json.loads(json.dumps(run(config)))
    assert deployed["config"] == engine["config"]
    assert len(deployed["history"]) == config.rounds
    for mine, theirs in zip(engine["history"], deployed["history"], strict=True):
        assert mine.keys() == theirs.keys()
        for key in mine:
            if key.startswith("loss") and mine[key] is not None:
                assert theirs[key] == pytest.approx(mine[key], rel=1e-5, abs=0), \
                    (mine["round"], key)
            else:
                assert theirs[key] == mine[key], (mine["round"], key)


def test_a_hostile_nodes_crafted_reply_is_refused(deployment, tmp_path):
    config = _config(clients=2, participation=1.0, rounds=1)
    marker, output = tmp_path / "the-node-ran-code-on-the-server", tmp_path / "run.json"
    deployment.start(["", "hostile=1"])
    status, log = deployment.run(REPO / "tests" / "flower_app_hostile", {
        "hetfl-config": json.dumps(config.to_dict()), "output": str(output), "nodes": 2,
        "marker": str(marker)})
    assert not marker.exists(), "the hostile node's pickle ran on the server"
    assert status == "finished:failed", status
    refusal = re.search(r"HetflError: .*refused", log, re.IGNORECASE)
    assert refusal, f"no refusal in the ServerApp's log:\n{log[-3000:]}"
    assert not output.exists()
