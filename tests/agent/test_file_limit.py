"""A real agent process under a low open-file limit while its TCP port is flooded.

Any pod can reach the agent's port when it listens on the node's address. A flood of connections there
must not take the files the CNI plugin's socket needs (an ADD must still be served), and the accept
errors a process out of files meets must be counted and logged in one structured line, not as a
traceback each time. The limit is set in the child before it starts (``preexec_fn``), hard limit
included, so raising the soft limit at start cannot help: the bounds must.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.agent_soak import http, read_all

pytestmark = [pytest.mark.system, pytest.mark.timeout(90)]
ROOT = Path(__file__).resolve().parents[2]
AGENT = [sys.executable, "-m", "eni_ipam.cli", "agent", "--node", "n1"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Agent:
    def __init__(self, directory: Path, files: int, **server: Any) -> None:
        self.sock = str(directory / "agent.sock")
        self.port = _free_port()
        config = {
            "node_source": "memory",
            "socket": self.sock,
            "state_dir": str(directory / "state"),
            "cni_cache_dir": str(directory / "cache"),
            "server": {"host": "127.0.0.1", "port": self.port, "probe_port": 0, **server},
            "claims": False,
            "log_level": "warning",
            "sweep_interval": "0s",
            "socket_max_connections": 16,
            "pools": {"default": {"cidr": "10.233.0.0/24"}},
        }
        (directory / "agent.yaml").write_text(json.dumps(config))
        self.stderr = directory / "stderr.log"

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))

        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        with open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen(
                [*AGENT, "--config", str(directory / "agent.yaml")],
                stdout=subprocess.DEVNULL,
                stderr=err,
                preexec_fn=limit,
                env=env,
            )
        deadline = time.perf_counter() + 30
        while time.perf_counter() < deadline:
            assert self.proc.poll() is None, self.stderr.read_text()
            if http(self.port, "GET", "/healthz")[0] == 200 and os.path.exists(self.sock):
                return
            time.sleep(0.05)
        raise AssertionError("the agent did not start: " + self.stderr.read_text())

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def agent(tmp_path: Path, files: int, **server: Any) -> Iterator[Agent]:
    running = Agent(tmp_path, files, **server)
    try:
        yield running
    finally:
        running.stop()


def served_once_free(port: int, path: str, within: float = 10.0) -> str:
    """``path``'s answer once the endpoint has a free slot again: the flood's served connections are
    closed by the client, and the server notices in its own time (slower on a busy machine)."""
    for _ in range(int(within / 0.1)):
        status, body = http(port, "GET", path)
        if status == 200:
            return body
        time.sleep(0.1)
    return http(port, "GET", path)[1]


def cni_add(path: str, container: str, timeout: float) -> bytes:
    body = json.dumps({"containerID": container, "ifname": "eth0", "netns": "/proc/1/ns/net"}).encode()
    request = (
        b"POST /v1/cni/add HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        try:
            s.connect(path)
            s.sendall(request)
            return read_all(s)
        except OSError as exc:
            return f"no answer: {exc}".encode()


@contextlib.contextmanager
def flood(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections to the port, held open without a byte sent."""
    held = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.settimeout(0.5)
            try:
                s.connect(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            held.append(s)
        yield held
    finally:
        for s in held:
            s.close()


def test_a_flood_of_the_tcp_port_leaves_the_cni_socket_serving_under_a_low_file_limit(tmp_path: Path) -> None:
    """1,100 connections to the TCP port of an agent limited to 160 files: the port serves 16 and
    refuses the rest, the process stays far from its limit, and a CNI ADD is answered at once."""
    with agent(tmp_path, files=160, max_connections=16, read_timeout="30s") as a:
        with flood(a.port, 1100) as held:
            time.sleep(0.5)
            fds = a.fds()
            started = time.perf_counter()
            answer = cni_add(a.sock, "c1", timeout=5)
            took = time.perf_counter() - started
        assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
        assert took < 2, took
        assert len(held) > 1000  # every connection was taken (and refused), none left in the backlog
        assert fds < 160 - 32, fds
        metrics = served_once_free(a.port, "/metrics")
        refused = [
            line
            for line in metrics.splitlines()
            if line.startswith('eni_ipam_http_connections_refused_total{reason="connection_limit"}')
        ]
        assert refused and float(refused[0].split()[-1]) >= 1000, metrics[-3000:]
    assert b"Traceback" not in a.stderr.read_bytes()


def test_accept_errors_of_a_process_out_of_files_are_one_structured_line_and_a_count(tmp_path: Path) -> None:
    """An agent whose limits do not fit its file limit (1,000 connections, 64 files): accept() fails
    with EMFILE for seconds; the log says so in one JSON line, with no traceback, and the count is
    exported once files are free again."""
    with agent(tmp_path, files=64, max_connections=1000, read_timeout="30s") as a:
        with flood(a.port, 300):
            time.sleep(3.5)  # asyncio retries accept() every second: three reports at least
        time.sleep(0.5)
        metrics = served_once_free(a.port, "/metrics")
    log = a.stderr.read_text()
    assert "Traceback" not in log and "out of system resource" not in log, log[:3000]
    lines = [json.loads(line) for line in log.splitlines() if line.strip()]  # every line is JSON
    events = [line["event"] for line in lines]
    assert events.count("accept_failed") == 1, events
    assert next(line for line in lines if line["event"] == "accept_failed")["error"] == "EMFILE"
    assert "file_limit_low" in events
    count = [
        ln for ln in metrics.splitlines() if ln.startswith('eni_ipam_accept_errors_total{error="EMFILE"}')
    ]
    assert count and float(count[0].split()[-1]) >= 3, metrics[-3000:]
