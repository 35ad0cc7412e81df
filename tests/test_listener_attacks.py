"""The attacks that once got the controller and the agent restarted, replayed on the real processes.

A slow reader (connections pipelining 200 requests on a 1 KB receive buffer and never reading) and a
slow requester (one whole request just inside every deadline, its answers read) each take every slot
of ``eni-ipam run``'s endpoint, of ``eni-ipam agent``'s TCP endpoint and of the agent's unix socket,
renewing what the server closes, while kubelet's probes and the CNI plugin's calls go on:

* the liveness and readiness probes, asked where the chart's probes ask (``server.probe_port``),
  answer 200 throughout, on the controller and on the agent (decision 0043) — while the same
  ``/healthz`` on the public port is refused, which shows the attack holds the slots;
* a call on the unix socket from another process (as the CNI plugin makes, a new process each time)
  is answered throughout, as the slots are shared fairly between processes;
* every connection of the attack is closed within the documented bounds: at most a lifetime (30
  times ``read_timeout``), one more deadline and a little slack after it opened.

Deadlines are short (``read_timeout`` 0.3 s: a lifetime of 9 s) so that the attack outlives them.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench.agent_soak import AgentProcess, AgentSoakConfig, free_ports, http
from tests.test_run_bounds import controller

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

READ_TIMEOUT = 0.3
LIMIT = 8
LIFETIME = 30 * READ_TIMEOUT
"""The documented lifetime of a connection (eni_ipam.adapters.guard.LIFETIME_READ_TIMEOUTS)."""
BOUND = LIFETIME + 2 * READ_TIMEOUT + 2.0
"""The longest an attack's connection may stay open: its lifetime, the deadline of the answer that
passes it, and slack for a loaded machine."""
ATTACK_SECONDS = LIFETIME + 4.0
CLOSED = select.POLLRDHUP | select.POLLHUP | select.POLLERR


def held_by_server(port: int) -> set[int]:
    """The client ports of the TCP connections a process still holds on its ``port`` (127.0.0.1).

    A client that never reads cannot see a graceful close: the FIN waits behind the unread answers.
    The kernel's table can: a socket the server closed has no inode any more (or is gone)."""
    held = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, inode = fields[1], fields[2], fields[9]
        if int(local.split(":")[1], 16) == port and inode != "0":
            held.add(int(remote.split(":")[1], 16))
    return held


@dataclass
class Attack:
    """Connections held as the attacker held them, renewed as the server closes them."""

    connect: Callable[[], socket.socket]
    request: bytes
    slow_read: bool
    """True: 200 requests pipelined on a 1 KB receive buffer, never read. False: one whole request
    every two thirds of the deadline, its answers read."""
    server_port: int | None = None
    """A TCP listener's port: whether the server still holds a connection is read from the kernel."""
    connections: int = 2 * LIMIT
    lived: list[float] = field(default_factory=list)
    """How long each connection the server closed was open."""
    opened: int = 0

    def run(self, stop: threading.Event) -> None:
        open_: dict[socket.socket, list[float]] = {}  # socket → [opened at, next request at]
        poller = select.poll()
        while not stop.is_set():
            now = time.perf_counter()
            while len(open_) < self.connections:
                try:
                    sock = self.connect()
                except OSError:
                    break
                self.opened += 1
                sock.setblocking(False)
                with contextlib.suppress(OSError):
                    sock.send(self.request * 200 if self.slow_read else self.request)
                open_[sock] = [now, now + READ_TIMEOUT * 2 / 3]
                poller.register(sock, CLOSED | (0 if self.slow_read else select.POLLIN))
            if self.server_port is not None:
                held = held_by_server(self.server_port)
                for sock in [s for s, (opened, _) in open_.items() if now - opened > 0.1]:
                    if sock.getsockname()[1] not in held:  # closed by the server, FIN or not
                        self.lived.append(time.perf_counter() - open_.pop(sock)[0])
                        poller.unregister(sock)
                        sock.close()
            for fd, events in poller.poll(20):
                sock = next(s for s in open_ if s.fileno() == fd)
                gone = bool(events & (select.POLLHUP | select.POLLERR))
                if not gone and events & (select.POLLIN | select.POLLRDHUP) and not self.slow_read:
                    try:
                        gone = sock.recv(65536) == b""
                    except OSError:
                        gone = True
                elif events & select.POLLRDHUP:
                    gone = True
                if gone:
                    self.lived.append(time.perf_counter() - open_.pop(sock)[0])
                    poller.unregister(sock)
                    sock.close()
            if not self.slow_read:
                now = time.perf_counter()
                for sock, times in open_.items():
                    if now >= times[1]:
                        times[1] = now + READ_TIMEOUT * 2 / 3
                        with contextlib.suppress(OSError):
                            sock.send(self.request)
            time.sleep(0.01)  # a refused connection is not renewed in a tight loop
        now = time.perf_counter()
        for sock, (opened, _) in open_.items():
            self.lived.append(now - opened)  # still open: it must not be older than the bound either
            sock.close()


def tcp(port: int, *, slow_read: bool) -> Callable[[], socket.socket]:
    def connect() -> socket.socket:
        sock = socket.socket()
        if slow_read:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        sock.settimeout(2)
        try:
            sock.connect(("127.0.0.1", port))
        except OSError:
            sock.close()
            raise
        return sock

    return connect


def unix(path: str, *, slow_read: bool) -> Callable[[], socket.socket]:
    def connect() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX)
        if slow_read:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        sock.settimeout(2)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            raise
        return sock

    return connect


GET_METRICS = b"GET /metrics HTTP/1.1\r\nHost: e\r\n\r\n"
GET_READYZ = b"GET /readyz HTTP/1.1\r\nHost: e\r\n\r\n"
GET_STATUS = b"GET /v1/status HTTP/1.1\r\nHost: agent\r\n\r\n"

OTHER_PROCESS = """
import json, socket, sys, time
path, until = sys.argv[1], time.time() + float(sys.argv[2])
answers = []
while time.time() < until:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        try:
            s.connect(path)
            s.sendall(b"GET /v1/status HTTP/1.1\\r\\nHost: agent\\r\\nConnection: close\\r\\n\\r\\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            answers.append(data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "none")
        except OSError as exc:
            answers.append(type(exc).__name__)
    time.sleep(0.25)
print(json.dumps(answers))
"""
"""A client of the socket in a process of its own, as the CNI plugin is: its status codes, in order."""


@dataclass
class Probes:
    """kubelet's probes, every quarter second on a fresh connection, and the same /healthz on the
    public port to show the attack holds its slots."""

    probe_ports: list[int]
    public_ports: list[int]
    answers: list[tuple[int, str, int]] = field(default_factory=list)
    public: list[int] = field(default_factory=list)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            for port in self.probe_ports:
                for path in ("/healthz", "/readyz"):
                    self.answers.append((port, path, http(port, "GET", path)[0]))
            for port in self.public_ports:
                self.public.append(http(port, "GET", "/healthz")[0])
            time.sleep(0.25)


@contextlib.contextmanager
def agent(directory: Path) -> Iterator[AgentProcess]:
    config = AgentSoakConfig(
        max_connections=LIMIT, read_timeout=READ_TIMEOUT, http_max_connections=LIMIT, files=4096
    )
    (directory / "state").mkdir()
    process = AgentProcess(directory, config, directory / "state")
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0


def test_probes_and_other_clients_are_served_while_every_listener_is_attacked_and_attackers_age_out(
    tmp_path: Path,
) -> None:
    port, probe_port = free_ports(2)
    server = {"max_connections": LIMIT, "read_timeout": f"{READ_TIMEOUT}s", "probe_port": probe_port}
    with (
        controller(tmp_path, port, server=server, ready_port=probe_port),
        tempfile.TemporaryDirectory(prefix="eni-attack-") as directory,
        agent(Path(directory)) as node,
    ):
        attacks = {
            f"{name} {kind}": Attack(connect(slow_read=slow), request, slow, server_port=server_port)
            for name, connect, request, server_port in (
                ("controller", lambda **kw: tcp(port, **kw), GET_METRICS, port),
                ("agent tcp", lambda **kw: tcp(node.port, **kw), GET_METRICS, node.port),
                ("agent socket", lambda **kw: unix(node.sock, **kw), GET_STATUS, None),
            )
            for kind, slow in (("slow reader", True), ("slow requester", False))
        }
        attacks["controller slow requester"].request = GET_READYZ
        attacks["agent tcp slow requester"].request = GET_READYZ
        probes = Probes([probe_port, node.probe_port], [port, node.port])
        stop = threading.Event()
        threads = [threading.Thread(target=a.run, args=(stop,)) for a in attacks.values()]
        for t in threads:
            t.start()
        time.sleep(1.0)  # every slot taken
        other = subprocess.Popen(
            [sys.executable, "-c", OTHER_PROCESS, node.sock, str(ATTACK_SECONDS - 2)],
            stdout=subprocess.PIPE,
        )
        prober = threading.Thread(target=probes.run, args=(stop,))
        prober.start()
        try:
            time.sleep(ATTACK_SECONDS - 1.0)
            out, _ = other.communicate(timeout=30)
        finally:
            stop.set()
            for t in [*threads, prober]:
                t.join(30)

    # kubelet's probes: every one answered 200, on both processes, for the whole attack.
    assert len(probes.answers) >= 20 and {a[2] for a in probes.answers} == {200}, probes.answers
    # the attack held the public slots: the same /healthz there was refused (503) or cut off (0)
    assert set(probes.public) - {200}, "the attack never filled the public slots: it proved nothing"
    # another process on the socket: answered throughout (its fair share of the slots)
    calls = json.loads(out)
    assert len(calls) >= 10 and set(calls) == {"200"}, calls
    # every connection of the attack closed within the bounds, many renewed (served, then closed)
    for name, attack in attacks.items():
        assert attack.lived and max(attack.lived) <= BOUND, (name, max(attack.lived), BOUND)
        assert attack.opened > attack.connections, (name, attack.opened)
