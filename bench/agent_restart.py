"""Benchmark 5b — an agent restart as the runtimes see it: from SIGKILL to listening, and to answering.

While the agent restarts, every container start of the node waits on the CNI plugin's retries
(docs/node.md, "Agent restarts"): the plugin's retry window (``eni_ipam.agent.cni.RETRY_WINDOW``) is
sized from the time a killed agent takes to answer an ADD again. Measured in one run, interleaved,
each restart a SIGKILL of a running agent:

* **the unit**: the ``ExecStart`` of deploy/systemd/eni-ipam-agent.service, started again
  ``RestartSec`` after the kill, as systemd's ``Restart=always`` does; a static pool
  (``node_source: memory``) and a state file of 50 allocations;
* **the DaemonSet**: the chart's container command (``eni-ipam-agent --config ...``), started again
  one second after the kill — the kubelet restarts a container that died for the first time without
  a back-off, once its pod lifecycle event generator (PLEG) has seen it gone, within its one-second
  relist period; the container runtime's own create and start are not included — with
  ``node_source: kubernetes`` against the fake API server (its own process), so the ADD is answered
  once the node's ENIPool has been read;

each on an idle host, a loaded host (every core but one busy, :mod:`bench.load`), and, for the unit,
a busy node (five loops a core, each in a scheduling group of its own: the end-to-end test's,
tests/e2e/test_agent_restart.py). Each restart's figures: kill → listening (the socket accepts a
connection), kill → answered (an ADD answered 200; the probe's ADD is the same owner's each time,
so it is idempotent), and the parts after the exec: exec → listening, listening → answered. The
agent runs with its bytecode cached, as an installed package has it.

Target: the plugin's retry window at least twice the slowest kill → answered of the unit on the
loaded host and on the busy node, and of the DaemonSet on the loaded host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import load

ROOT = Path(__file__).resolve().parents[1]
UNIT = ROOT / "deploy" / "systemd" / "eni-ipam-agent.service"
CRD = ROOT / "deploy" / "helm" / "eni-ipam" / "crds" / "enipools.eni-ipam.io.yaml"
VENV_BIN = Path(sys.executable).parent
KUBELET_RESTART = 1.0
"""Seconds from a container's death to the kubelet starting it again, at most: the generic PLEG's
relist period (the first restart of a container has no back-off)."""
BUSY_PER_CORE = 5
"""Loops a core on the busy node: the end-to-end test's (tests/e2e/test_agent_restart.py)."""
WINDOW_MARGIN = 2.0
"""The plugin's retry window must be at least this many times the slowest restart judged."""
HELD = 50
"""Allocations in the unit's state file (containers of the node holding addresses)."""
MIN_ROUNDS = 5
PROBE = {"containerID": "bench-restart-probe", "ifname": "eth0", "netns": "/var/run/netns/probe"}


@dataclasses.dataclass(frozen=True)
class Restarts:
    """One kind of restart on one host: its figures over the rounds (seconds)."""

    name: str
    host: str
    delay: float
    """The supervisor's delay between the kill and the start."""
    listening: tuple[float, ...]
    answered: tuple[float, ...]
    exec_to_listening: tuple[float, ...]
    listening_to_answered: tuple[float, ...]
    judged: bool
    """Whether the plugin's window is sized from this row (the target's rows)."""

    @property
    def key(self) -> str:
        return f"{self.name}, {self.host}"

    @staticmethod
    def median(values: tuple[float, ...]) -> float:
        return statistics.median(values) if values else float("nan")


@dataclasses.dataclass(frozen=True)
class RestartBench:
    rounds: int
    window: float
    """The plugin's retry window (seconds)."""
    rows: list[Restarts]
    skipped: str = ""

    @property
    def judged(self) -> bool:
        return not self.skipped and self.rounds >= MIN_ROUNDS

    def slowest(self) -> float:
        """The slowest kill → answered of the rows the window is sized from."""
        return max((max(r.answered) for r in self.rows if r.judged and r.answered), default=0.0)

    def met(self) -> bool:
        return self.window >= WINDOW_MARGIN * self.slowest()


def unit_service() -> dict[str, str]:
    """The unit's ``[Service]`` settings (the last value of each key)."""
    settings: dict[str, str] = {}
    section = ""
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and line and not line.startswith(("#", ";")):
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return settings


def _window() -> float:
    from eni_ipam.agent import cni

    return cni.RETRY_WINDOW


def measure(rounds: int) -> RestartBench:
    window = _window()
    with tempfile.TemporaryDirectory(prefix="eni-bench-restart-") as tmp:
        root = Path(tmp)
        service = unit_service()
        delay = float(service["RestartSec"].removesuffix("s"))
        env = _environment(root)
        unit_dir, ds_dir = root / "unit", root / "ds"
        unit_command = shlex.split(
            service["ExecStart"]
            .replace("/opt/eni-ipam/bin/", f"{VENV_BIN}/")
            .replace("%H", "bench")
            .replace("/etc/eni-ipam-agent/config.yaml", str(unit_dir / "agent.yaml"))
        )
        # The chart's container: its command, NODE_NAME from the downward API.
        ds_command = [f"{VENV_BIN}/eni-ipam-agent", "--config", str(ds_dir / "agent.yaml")]
        with contextlib.ExitStack() as stack:
            api = stack.enter_context(_api_server(root / "kube"))
            unit = stack.enter_context(_Agent.running(unit_dir, unit_command, _unit_config(unit_dir), env))
            ds_config = _daemonset_config(ds_dir, api)
            daemonset = stack.enter_context(
                _Agent.running(ds_dir, ds_command, ds_config, {**env, "NODE_NAME": "bench"})
            )
            loaded = stack.enter_context(load.loops(load.other_cores()))
            busy = stack.enter_context(load.loops(load.per_core(BUSY_PER_CORE)))
            plan = [
                ("the unit", "idle", unit, delay, None, False),
                ("the unit", "loaded host", unit, delay, loaded, True),
                ("the unit", "busy node", unit, delay, busy, True),
                ("the DaemonSet", "idle", daemonset, KUBELET_RESTART, None, False),
                ("the DaemonSet", "loaded host", daemonset, KUBELET_RESTART, loaded, True),
            ]
            samples: dict[int, list[tuple[float, float, float, float]]] = {n: [] for n in range(len(plan))}
            for _ in range(rounds):
                for n, (_, _, agent, wait, host_load, _) in enumerate(plan):
                    if host_load is not None:
                        host_load.on()
                    try:
                        samples[n].append(agent.restart(wait))
                    finally:
                        if host_load is not None:
                            host_load.off()
    rows = [
        Restarts(
            name=name,
            host=host,
            delay=wait,
            listening=tuple(s[0] for s in samples[n]),
            answered=tuple(s[1] for s in samples[n]),
            exec_to_listening=tuple(s[2] for s in samples[n]),
            listening_to_answered=tuple(s[3] for s in samples[n]),
            judged=judged,
        )
        for n, (name, host, _, wait, _, judged) in enumerate(plan)
    ]
    return RestartBench(rounds, window, rows)


def _environment(root: Path) -> dict[str, str]:
    """The agent's environment: its bytecode cached in a directory of the run's (an installed package
    has it compiled; a checkout may forbid writing it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return env


POOL_CIDR = "10.233.0.0/24"
POOL = [f"10.233.0.{n}" for n in range(10, 250)]


def _paths(directory: Path) -> dict[str, Any]:
    return {
        "socket": str(directory / "run" / "agent.sock"),
        "state_dir": str(directory / "state"),
        "cni_cache_dir": str(directory / "cache"),
        "server": {"host": "127.0.0.1", "port": 0, "probe_port": 0},
        "claims": False,
        "sweep_interval": "0s",
    }


def _unit_config(directory: Path) -> dict[str, Any]:
    return {
        **_paths(directory),
        "node_source": "memory",
        "pools": {"default": {"cidr": POOL_CIDR, "ranges": [f"{POOL[0]}-{POOL[-1]}"]}},
    }


def _daemonset_config(directory: Path, kubeconfig: Path) -> dict[str, Any]:
    return {**_paths(directory), "node_source": "kubernetes", "kubernetes": {"kubeconfig": str(kubeconfig)}}


class _Agent:
    """A real agent process, killed and started again by :meth:`restart`."""

    def __init__(self, directory: Path, command: list[str], env: dict[str, str]) -> None:
        self.directory = directory
        self.socket = directory / "run" / "agent.sock"
        self.command = command
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.log = directory / "agent.log"

    @classmethod
    @contextlib.contextmanager
    def running(
        cls, directory: Path, command: list[str], config: dict[str, Any], env: dict[str, str]
    ) -> Iterator[_Agent]:
        """The agent started with ``command`` and ``config`` (at ``directory/agent.yaml``, which
        ``command`` names), answering, holding :data:`HELD` allocations; stopped at the end."""
        directory.mkdir(parents=True)
        (directory / "agent.yaml").write_text(json.dumps(config))
        agent = cls(directory, command, env)
        try:
            agent._start()
            agent._answered()
            for n in range(HELD):  # the node's containers, held across every restart
                _post(agent.socket, {**PROBE, "containerID": f"held-{n}"})
            yield agent
        finally:
            if agent.process is not None:
                agent.process.send_signal(signal.SIGTERM)
                try:
                    agent.process.wait(20)
                except subprocess.TimeoutExpired:
                    agent.process.kill()
                    agent.process.wait()

    def _start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )

    def restart(self, delay: float) -> tuple[float, float, float, float]:
        """SIGKILL, ``delay``, start; (kill → listening, kill → answered, exec → listening, listening →
        answered), seconds."""
        assert self.process is not None
        self.process.kill()
        killed = time.perf_counter()
        self.process.wait(10)
        time.sleep(max(0.0, killed + delay - time.perf_counter()))
        started = time.perf_counter()
        self._start()
        listening = self._listening() - killed
        answered = self._answered() - killed
        return listening, answered, listening - (started - killed), answered - listening

    def _listening(self) -> float:
        """When the socket accepted a connection (as the plugin connects: every 2 ms here)."""
        deadline = time.perf_counter() + 60
        while True:
            with socket.socket(socket.AF_UNIX) as probe:
                try:
                    probe.connect(str(self.socket))
                    return time.perf_counter()
                except OSError:
                    pass
            assert self.process is not None
            if self.process.poll() is not None or time.perf_counter() > deadline:
                raise RuntimeError(f"the agent did not listen: {self.log.read_text()[-2000:]}")
            time.sleep(0.002)

    def _answered(self) -> float:
        """When an ADD was answered 200 (sent again while not ready, as the plugin does)."""
        deadline = time.perf_counter() + 60
        while True:
            status = _post(self.socket, PROBE)
            if status == 200:
                return time.perf_counter()
            if time.perf_counter() > deadline:
                raise RuntimeError(f"the agent answered {status}: {self.log.read_text()[-2000:]}")
            time.sleep(0.01)


def _post(path: Path, body: dict[str, str]) -> int:
    """POST an ADD on the agent's socket; the answer's status (0: no whole answer)."""
    payload = json.dumps(body).encode()
    request = (
        f"POST /v1/cni/add HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode() + payload
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(60)
        try:
            client.connect(str(path))
            client.sendall(request)
            answer = b""
            while chunk := client.recv(65536):
                answer += chunk
        except OSError:
            return 0
    parts = answer.split(b" ", 2)
    return int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else 0


@contextlib.contextmanager
def _api_server(directory: Path) -> Iterator[Path]:
    """The fake API server in its own process, serving the node's ENIPool; its kubeconfig."""
    directory.mkdir(parents=True)
    kubeconfig = directory / "kubeconfig"
    code = f"from bench.agent_restart import serve_api; serve_api({str(kubeconfig)!r})"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"the fake API server did not start: {line!r}")
        yield kubeconfig
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def serve_api(kubeconfig: str) -> None:
    """The fake API server with the ENIPool CRD and node ``bench``'s pool, until stdin closes."""
    import asyncio

    import lightkube

    from eni_ipam.agent.metrics import AgentMetrics
    from eni_ipam.kube.api import ENIPOOLS, KubeApi
    from eni_ipam_testkit.fake_kube import FakeKube

    async def main() -> None:
        async with FakeKube() as server:
            await server.apply_manifest(CRD.read_text())
            client = lightkube.AsyncClient(lightkube.KubeConfig.from_dict(server.kubeconfig()))
            api = KubeApi(client, metrics=AgentMetrics())
            await api.create(ENIPOOLS, {"metadata": {"name": "bench"}, "spec": {"instanceID": "i-bench"}})
            status = {
                "pool": {a: {"interface": "eni-1", "subnet": "s-1"} for a in POOL},
                "subnets": {"s-1": {"cidr": POOL_CIDR}},
            }
            await api.patch(ENIPOOLS, "bench", {"status": status}, status=True)
            await api.close()
            server.write_kubeconfig(kubeconfig)
            print("ready", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    asyncio.run(main())
