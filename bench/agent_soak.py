"""The node agent under hostile and unlucky input, for real: ``python -m bench.agent_soak``.

A real ``eni-ipam agent`` process (static pool, state on disk, an open-file limit of 1,024 soft and
hard, as a container runtime may set) serves the real CNI plugin while every hostile input the agent is
known to meet is thrown at its socket, in random order: floods of idle connections, request heads and
bodies that never finish, oversized bodies, huge container ids, bad interface names, oversized
libnetwork options, nesting bombs — and at its TCP port (which any pod can reach when it listens on the
node's address): more idle connections than its file limit. It is restarted (SIGTERM and SIGKILL) with
a FIFO in the libcni cache and temporary files left in its state directory, its first start is refused
(exit 2) for a symbolic link planted at its lock file, and, as root, its state
directory (a tiny tmpfs) is filled up and freed again.

Invariants, checked after every step (any breach is a violation and ``make soak`` fails):

1. every hostile input is refused with its documented answer, and changes no allocation;
2. a valid ADD, DEL or CHECK is answered with success or "try again later" (CNI code 11, only
   while the disk is full or the agent restarts), never another error, and succeeds again once the
   hostile input stops;
3. every acknowledged ADD holds its address, on one owner, until its DEL, across restarts and kills;
4. the agent holds at most ``socket_max_connections`` connections on its socket and
   ``server.max_connections`` on its TCP port (plus its own files), whatever the flood; a flood of the
   TCP port is answered 503 beyond its limit and never stops a valid ADD on the socket; a flood of
   either by one process (idle connections, or slow readers pipelining requests they never read)
   never fails a valid ADD, CHECK or DEL (the plugin's process takes a fair share of the slots), and
   kubelet's probes, on their own listener, answer 200 throughout;
5. the state file stays small (no field of a request reaches it unbounded);
6. a start never blocks or fails (FIFO in the cache, leftovers, a full disk): ready within seconds,
   leftovers removed, SIGTERM exits 0; a link planted in the state directory stops it at once (exit
   2) and is never followed;
7. on a full disk, ADD and DEL answer code 11, CHECK is served, ``/readyz`` is unready after the
   failed write and ready again once space is back.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.report import publish, soak_arguments

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "RELIABILITY-node.md"
POOL_CIDR = "10.232.0.0/24"


@dataclasses.dataclass(frozen=True)
class AgentSoakConfig:
    seconds: float = 180.0
    """Real seconds of hostile input."""
    max_connections: int = 32
    read_timeout: float = 1.0
    http_max_connections: int = 16
    """The agent's ``server.max_connections`` (its TCP port)."""
    files: int = 1024
    """The agent's open-file limit, soft and hard (so raising the soft one at start cannot help): the
    TCP flood opens more connections than this."""
    restart_every: float = 15.0
    full_disk_every: float = 40.0
    """Seconds between full-disk episodes (root with a tmpfs only)."""
    seed: int = 5
    max_state_bytes: int = 256 * 1024


QUICK = AgentSoakConfig(seconds=12.0, restart_every=5.0, full_disk_every=8.0)


@dataclasses.dataclass
class AgentSoakReport:
    config: AgentSoakConfig
    hostile: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    valid: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    events: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    violations: list[str] = dataclasses.field(default_factory=list)
    max_fds: int = 0
    base_fds: int = 0
    max_state_bytes: int = 0
    max_start_seconds: float = 0.0
    full_disk: str = ""
    """Why no full-disk episode ran ("" when they did)."""
    real_seconds: float = 0.0

    def violate(self, what: str) -> None:
        if len(self.violations) < 50:
            self.violations.append(what)
        self.events["violations"] += 1


# -- the agent process ----------------------------------------------------------------------------


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports of 127.0.0.1 (all held until all are chosen: one at a time, the
    kernel may hand the same port out twice)."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]


class AgentProcess:
    """``eni-ipam agent`` in ``directory``; restartable, its state directory kept."""

    def __init__(
        self, directory: Path, config: AgentSoakConfig, state_dir: Path, options: dict[str, Any] | None = None
    ) -> None:
        self.directory = directory
        self.sock = str(directory / "agent.sock")
        self.port, self.probe_port = free_ports(2)
        """kubelet's probes' own listener (decision 0043)."""
        self.state_dir = state_dir
        self.cache = directory / "cache"
        self.cache.mkdir(exist_ok=True)
        self.config_path = directory / "agent.yaml"
        self.config_path.write_text(
            json.dumps(
                {
                    "node_source": "memory",
                    "socket": self.sock,
                    "state_dir": str(state_dir),
                    "cni_cache_dir": str(self.cache),
                    "server": {
                        "host": "127.0.0.1",
                        "port": self.port,
                        "probe_port": self.probe_port,
                        "max_connections": config.http_max_connections,
                        "read_timeout": f"{config.read_timeout}s",
                        **(options or {}).get("server", {}),
                    },
                    "claims": False,
                    "log_level": "error",
                    "sweep_interval": "0s",
                    "socket_max_connections": config.max_connections,
                    "socket_read_timeout": f"{config.read_timeout}s",
                    "pools": {"default": {"cidr": POOL_CIDR}},
                    **{k: v for k, v in (options or {}).items() if k != "server"},
                }
            )
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.files = config.files

    def start(self) -> float:
        """Start and wait until ``/healthz`` answers and the socket accepts; the seconds it took."""
        command = [sys.executable, "-m", "eni_ipam.cli", "agent", "--node", "soak"]
        command += ["--config", str(self.config_path)]
        started = time.perf_counter()
        files = self.files

        def limit_files() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))

        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=limit_files
        )
        deadline = started + 30
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"the agent exited {self.proc.returncode} at start: {err[-2000:]}")
            if http(self.probe_port, "GET", "/healthz")[0] == 200 and _connects(self.sock):
                return time.perf_counter() - started
            time.sleep(0.02)
        raise RuntimeError("the agent did not start within 30 s")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return -999
        finally:
            if self.proc.stderr:
                self.proc.stderr.close()

    def fds(self) -> int:
        assert self.proc is not None
        try:
            return len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        except OSError:
            return 0


def _connects(path: str) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(path)
            return True
        except OSError:
            return False


def http(port: int, method: str, path: str) -> tuple[int, str]:
    """One request to a TCP endpoint on 127.0.0.1 (the agent's, the controller's): its status and body;
    (0, reason) when it does not answer."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(f"{method} {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".encode())
            raw = read_all(s)
    except OSError as exc:
        return 0, str(exc)
    head, _, body = raw.partition(b"\r\n\r\n")
    parts = head.split()
    return (int(parts[1]) if len(parts) > 1 else 0), body.decode(errors="replace")


def read_all(s: socket.socket) -> bytes:
    """Everything the peer sends on ``s`` until it closes."""
    chunks = []
    while chunk := s.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def pending(s: socket.socket) -> bytes:
    """What the peer has sent on ``s`` so far (b"" once it closed, b"open" while it is silent)."""
    s.setblocking(False)
    try:
        return s.recv(65536)
    except BlockingIOError:
        return b"open"
    except OSError as exc:
        return str(exc).encode()


def unix_request(path: str, raw: bytes, timeout: float = 10.0) -> tuple[int, Any]:
    """Send ``raw`` whole on the agent's socket; (status, decoded body), (0, reason) when cut off."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        try:
            s.connect(path)
            s.sendall(raw)
            answer = read_all(s)
        except OSError as exc:
            return 0, str(exc)
    head, _, body = answer.partition(b"\r\n\r\n")
    parts = head.split()
    if len(parts) < 2:
        return 0, "no answer"
    try:
        return int(parts[1]), json.loads(body)
    except ValueError:
        return int(parts[1]), body[:200]


def post(route: str, body: bytes) -> bytes:
    return (
        f"POST {route} HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


# -- the soak -------------------------------------------------------------------------------------


class AgentSoak:
    def __init__(
        self,
        config: AgentSoakConfig,
        directory: Path,
        plugin: Path,
        state_dir: Path,
        agent_options: dict[str, Any] | None = None,
    ) -> None:
        """``agent_options``: configuration keys of the agent that override the soak's (to prove the
        soak catches an agent without its bounds)."""
        self.config = config
        self.rng = random.Random(config.seed)
        self.directory = directory
        self.plugin = plugin
        self.agent = AgentProcess(directory, config, state_dir, agent_options)
        self.report = AgentSoakReport(config)
        self.held: dict[str, str] = {}
        """Acknowledged ADDs not yet deleted: container id → address."""
        self.serial = 0
        self.tmpfs = state_dir if state_dir.parent == directory and os.path.ismount(state_dir) else None
        self.tcp_flood = config.files + 76
        """Connections of a TCP flood: more than the agent's file limit (1,100 with its 1,024)."""

    # -- valid requests through the real plugin --

    def cni(self, command: str, container: str, ifname: str = "eth0") -> tuple[int, dict[str, Any]]:
        conf = {
            "cniVersion": "1.0.0",
            "name": "soaknet",
            "type": "ptp",
            "ipam": {"type": "eni-ipam-cni", "socket": self.agent.sock},
        }
        if command == "CHECK":
            conf["prevResult"] = {"cniVersion": "1.0.0", "ips": [{"address": f"{self.held[container]}/24"}]}
        env = {
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": container,
            "CNI_NETNS": "/proc/1/ns/net",
            "CNI_IFNAME": ifname,
            "CNI_PATH": str(self.plugin.parent),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        }
        stdin = json.dumps(conf).encode()
        done = subprocess.run([str(self.plugin)], env=env, input=stdin, capture_output=True, timeout=60)
        try:
            out = json.loads(done.stdout) if done.stdout.strip() else {}
        except ValueError:
            out = {"code": -1, "msg": done.stdout[:200].decode(errors="replace")}
        return done.returncode, out

    def valid_add(self, *, must_succeed: bool = False) -> None:
        self.serial += 1
        container = f"soak{self.serial:06d}"
        rc, out = self.cni("ADD", container)
        if rc == 0:
            address = out["ips"][0]["address"].split("/")[0]
            if address in self.held.values():
                self.report.violate(f"ADD {container} got {address}, already held by another container")
            self.held[container] = address
            self.report.valid["ADD ok"] += 1
        elif out.get("code") == 11 and not must_succeed:
            self.report.valid["ADD try again later"] += 1
        else:
            self.report.violate(f"ADD {container}: rc {rc} {out}")

    def valid_del(self, *, must_succeed: bool = False) -> None:
        if not self.held:
            return
        container = self.rng.choice(sorted(self.held))
        rc, out = self.cni("DEL", container)
        if rc == 0:
            del self.held[container]
            self.report.valid["DEL ok"] += 1
        elif out.get("code") == 11 and not must_succeed:
            self.report.valid["DEL try again later"] += 1
        else:
            self.report.violate(f"DEL {container}: rc {rc} {out}")

    def valid_check(self) -> None:
        if not self.held:
            return
        container = self.rng.choice(sorted(self.held))
        rc, out = self.cni("CHECK", container)
        if rc == 0:
            self.report.valid["CHECK ok"] += 1
        elif out.get("code") == 11:
            self.report.valid["CHECK try again later"] += 1
        else:
            self.report.violate(f"CHECK {container}: rc {rc} {out}")

    # -- what the agent holds --

    def allocations(self) -> dict[str, str] | None:
        request = b"GET /v1/status HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
        status, body = unix_request(self.agent.sock, request)
        if status != 200 or not isinstance(body, dict):
            return None
        return {**body.get("ipv4", {}), **body.get("ipv6", {})}

    def check_invariants(self, where: str, *, flooded: bool = False) -> None:
        """``flooded``: the socket is full on purpose, so only what can be seen from outside is checked."""
        fds = self.agent.fds()
        self.report.max_fds = max(self.report.max_fds, fds)
        limit = self.config.max_connections + self.config.http_max_connections
        if fds > self.report.base_fds + limit + 8:
            self.report.violate(f"{where}: the agent holds {fds} files (limit {limit})")
        state = self.agent.state_dir / "allocations.json"
        size = state.stat().st_size if state.exists() else 0
        self.report.max_state_bytes = max(self.report.max_state_bytes, size)
        if size > self.config.max_state_bytes:
            self.report.violate(f"{where}: the state file is {size} bytes")
        if flooded:
            return
        held = self.allocations()
        if held is None:
            self.report.violate(f"{where}: /v1/status did not answer")
            return
        for container, address in self.held.items():
            if held.get(address) != f"cni:{container}:eth0":
                says = held.get(address)
                self.report.violate(f"{where}: acknowledged {container} → {address}, the agent says {says}")

    # -- hostile inputs: each returns None when refused as documented, else what went wrong --

    def refused(self, name: str, raw: bytes, status: int, text: str = "") -> None:
        before = self.allocations()
        got, body = unix_request(self.agent.sock, raw)
        self.report.hostile[name] += 1
        if got != status or (text and text not in json.dumps(body)):
            self.report.violate(f"{name}: expected {status} {text!r}, got {got} {str(body)[:200]}")
        if self.allocations() != before:
            self.report.violate(f"{name}: the allocations changed")

    def hostile_oversized_body(self) -> None:
        body = json.dumps({"containerID": "x", "ifname": "eth0", "netns": "/n" * 60_000}).encode()
        self.refused("body over 64 KiB", post("/v1/cni/add", body), 413)

    def hostile_huge_container_id(self) -> None:
        body = json.dumps({"containerID": "c" * 20_000, "ifname": "eth0", "netns": "/n"}).encode()
        self.refused("container id of 20,000 characters", post("/v1/cni/add", body), 400, "256")

    def hostile_nul_ifname(self) -> None:
        body = json.dumps({"containerID": "nul", "ifname": "eth\u00000", "netns": "/n"}).encode()
        self.refused("interface name with a NUL", post("/v1/cni/add", body), 400, "ifname")

    def hostile_long_ifname(self) -> None:
        body = json.dumps({"containerID": "long", "ifname": "e" * 16, "netns": "/n"}).encode()
        self.refused("interface name of 16 bytes", post("/v1/cni/add", body), 400, "ifname")

    def hostile_nesting(self) -> None:
        self.refused("JSON nested 60,000 deep", post("/v1/cni/add", b"[" * 60_000), 400)

    def hostile_options(self) -> None:
        options = {f"o{n}": "v" for n in range(100)}
        body = json.dumps({"AddressSpace": "eni-ipam-local", "Options": options}).encode()
        self.refused("100 libnetwork options", post("/IpamDriver.RequestPool", body), 400, "64")
        body = json.dumps({"AddressSpace": "eni-ipam-local", "Options": {"k": "v" * 50_000}}).encode()
        name = "libnetwork option of 50,000 characters"
        self.refused(name, post("/IpamDriver.RequestPool", body), 400, "4096")

    def hostile_half_body(self) -> None:
        conns = []
        for _ in range(8):
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(self.config.read_timeout * 4 + 5)
            s.connect(self.agent.sock)
            s.sendall(b'POST /v1/cni/add HTTP/1.1\r\nHost: a\r\nContent-Length: 500\r\n\r\n{"containerID":')
            conns.append(s)
        self.report.hostile["body that never finishes"] += len(conns)
        for s in conns:
            with s:
                try:
                    answer = read_all(s)
                except OSError as exc:
                    answer = str(exc).encode()
            if not answer.startswith(b"HTTP/1.1 408"):
                self.report.violate(f"half-sent body: expected 408, got {answer[:100]!r}")

    def hostile_trickle(self) -> None:
        conns = [socket.socket(socket.AF_UNIX) for _ in range(8)]
        for s in conns:
            s.connect(self.agent.sock)
            s.sendall(b"POST /v1/cni/add HTTP/1.1\r\n")
            s.setblocking(False)
        self.report.hostile["request head trickling in"] += len(conns)
        deadline = time.perf_counter() + self.config.read_timeout * 3 + 2
        open_ = set(range(len(conns)))
        while open_ and time.perf_counter() < deadline:
            for n in sorted(open_):
                try:
                    if conns[n].recv(65536) == b"":  # closed by the agent
                        open_.discard(n)
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    open_.discard(n)
                    continue
                with contextlib.suppress(OSError):
                    conns[n].send(b"X")
            time.sleep(self.config.read_timeout / 5)
        for s in conns:
            s.close()
        if open_:
            self.report.violate(f"{len(open_)} trickling connections still open after 3 read timeouts")

    def hostile_flood(self) -> None:
        """Four times the limit of idle connections: a valid ADD meanwhile succeeds (the plugin's
        process takes a slot from the flooding one: slots are shared fairly between processes), and
        again once they time out."""
        conns = []
        for _ in range(self.config.max_connections * 4):
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect(self.agent.sock)
            except OSError:
                s.close()
                continue
            conns.append(s)
        self.report.hostile["idle connection (flood)"] += len(conns)
        self.valid_add(must_succeed=True)
        self.check_invariants("during a flood", flooded=True)
        time.sleep(self.config.read_timeout * 2)
        for s in conns:
            s.close()
        self.valid_add(must_succeed=True)

    def hostile_tcp_flood(self) -> None:
        """More idle connections to the TCP port than the agent has files: beyond its limit each is
        answered 503 and closed, and a valid ADD on the socket meanwhile must succeed (not even "try
        again later": the socket is not what is flooded)."""
        conns = []
        for _ in range(self.tcp_flood):
            s = socket.socket()
            s.settimeout(1.0)
            try:
                s.connect(("127.0.0.1", self.agent.port))
            except OSError:
                s.close()
                continue
            conns.append(s)
        self.report.hostile["TCP connection (flood of the port)"] += len(conns)
        # A connect the kernel's backlog had no room for within a second (the agent accepts in bursts).
        self.report.events["TCP flood: connects timed out"] += self.tcp_flood - len(conns)
        try:
            time.sleep(0.5)  # the agent has taken every connection it would: its files are at their worst
            self.valid_add(must_succeed=True)
            self.check_invariants("during a TCP flood", flooded=True)
            # Each connection was refused (503), or served and then closed at the deadline, or is
            # still served; anything else, or no refusal at all, breaks the bound.
            answers = collections.Counter(pending(s)[:12] for s in conns)
            odd = {a: n for a, n in answers.items() if a not in (b"HTTP/1.1 503", b"", b"open")}
            if odd or not answers[b"HTTP/1.1 503"]:
                self.report.violate(f"TCP flood: answers {dict(answers)}, expected 503 beyond the limit")
        finally:
            for s in conns:
                s.close()

    def hostile_slow_read(self) -> None:
        """Twice the limit of connections on the socket and on the TCP port, each pipelining 200
        requests on a 1 KB receive buffer and never reading (the attack that held every slot and got
        the agent restarted): meanwhile every ADD, CHECK and DEL succeeds, kubelet's probes answer 200
        on their own listener, and the flood's connections are closed by the agent."""
        conns: list[socket.socket] = []
        for family, address, request, limit in (
            (
                socket.AF_UNIX,
                self.agent.sock,
                b"GET /v1/status HTTP/1.1\r\nHost: a\r\n\r\n",
                self.config.max_connections,
            ),
            (
                socket.AF_INET,
                ("127.0.0.1", self.agent.port),
                b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n",
                self.config.http_max_connections,
            ),
        ):
            for _ in range(limit * 2):
                s = socket.socket(family)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
                s.settimeout(1.0)
                try:
                    s.connect(address)
                    s.sendall(request * 200)
                except OSError:
                    s.close()
                    continue
                conns.append(s)
        self.report.hostile["slow reader (pipelined, never read)"] += len(conns)
        try:
            for _ in range(3):
                self.valid_add(must_succeed=True)
                self.valid_check()
                for path in ("/healthz", "/readyz"):
                    status = http(self.agent.probe_port, "GET", path)[0]
                    self.report.valid[f"probe {path} during a slow-read flood"] += 1
                    if status != 200:
                        self.report.violate(f"slow-read flood: the probe {path} answered {status}")
            self.valid_del(must_succeed=True)
            self.check_invariants("during a slow-read flood", flooded=True)
        finally:
            for s in conns:
                s.close()

    def hostile_plugin_inputs(self) -> None:
        """What a runtime could pass the plugin: a 300-character container id, a 16-byte interface."""
        for name, container, ifname in (
            ("plugin: container id of 300 characters", "c" * 300, "eth0"),
            ("plugin: interface name of 16 bytes", "shortid", "eth0123456789abc"),
        ):
            rc, out = self.cni("ADD", container, ifname)
            self.report.hostile[name] += 1
            if rc == 0 or out.get("code") != 4:
                self.report.violate(f"{name}: expected code 4, got rc {rc} {out}")

    # -- restarts and the disk --

    def restart(self, sig: int) -> None:
        (self.agent.cache / "a-fifo").unlink(missing_ok=True)
        os.mkfifo(self.agent.cache / "a-fifo")
        leftover = self.agent.state_dir / ".allocations.json.soak.tmp"
        with contextlib.suppress(OSError):
            leftover.write_text("left by a crash")
        rc = self.agent.stop(sig)
        if sig == signal.SIGTERM and rc != 0:
            self.report.violate(f"SIGTERM: the agent exited {rc}")
        self.report.events["SIGTERM" if sig == signal.SIGTERM else "SIGKILL"] += 1
        try:
            took = self.agent.start()
        except RuntimeError as exc:
            self.report.violate(f"restart: {exc}")
            took = self.agent.start()
        self.report.max_start_seconds = max(self.report.max_start_seconds, took)
        if leftover.exists():
            self.report.violate("a leftover temporary file survived the start")
        self.check_invariants("after a restart")

    def planted_lock(self) -> None:
        """A symbolic link planted at ``.lock`` before the agent starts: the start is refused at once
        (exit 2, naming the link), and nothing is created where the link points."""
        lock, target = self.agent.state_dir / ".lock", self.directory / "planted-by-a-link"
        lock.unlink(missing_ok=True)
        lock.symlink_to(target)
        try:
            self.agent.start()
        except RuntimeError as exc:
            if "exited 2" not in str(exc) or "symbolic link" not in str(exc):
                self.report.violate(f"a link at .lock: expected exit 2 naming it, got {exc}")
        else:
            self.report.violate("a link at .lock: the agent started")
            self.agent.stop()
        finally:
            lock.unlink(missing_ok=True)
        if target.exists():
            self.report.violate("a link at .lock: the agent created the file it points to")
        self.report.hostile["start: symbolic link at .lock"] += 1

    def full_disk(self) -> None:
        """Fill the state directory's disk. Changes that fit the state file's slots are written in
        place and succeed; a change that needs the file to grow (large recorded fields) cannot be
        written: it is answered 503 ``state_unwritable`` and undone, and ``/readyz`` turns unready."""
        assert self.tmpfs is not None
        filler = self.tmpfs / "filler"
        with open(filler, "wb") as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        self.report.events["full disk"] += 1
        self.valid_add()  # in place: succeeds, or code 11
        refused = False
        large: list[str] = []
        for _ in range(64):  # valid ADDs recording 4 KB each, until the file would have to grow
            self.serial += 1
            container = f"soak{self.serial:06d}"
            before = self.allocations()
            body = {"containerID": container, "ifname": "eth0", "netns": "/run/netns/" + "n" * 4000}
            status, answer = unix_request(self.agent.sock, post("/v1/cni/add", json.dumps(body).encode()))
            if status == 200:
                self.held[container] = answer["ips"][0]["address"]
                large.append(container)
                self.report.valid["ADD ok (full disk, in place)"] += 1
                continue
            if status != 503 or answer.get("error", {}).get("code") != "state_unwritable":
                self.report.violate(f"full disk: ADD expected 200 or 503 state_unwritable: {status} {answer}")
            elif self.allocations() != before:
                self.report.violate("full disk: a refused ADD changed the allocations")
            refused = True
            self.report.valid["ADD refused (full disk)"] += 1
            break
        if not refused:
            self.report.violate("full disk: the state file never had to grow (the episode proved nothing)")
        elif http(self.agent.port, "GET", "/readyz")[0] != 503:
            self.report.violate("full disk: /readyz still ready after a failed write")
        self.valid_check()
        self.valid_del()  # shrinks: in place, or code 11
        self.restart(signal.SIGKILL)  # a start on a full disk writes nothing, keeps everything, serves
        self.valid_check()
        filler.unlink()
        self.valid_add(must_succeed=True)
        for container in large:  # what made the file grow goes: the next episode starts as small
            if container in self.held:
                rc, out = self.cni("DEL", container)
                if rc != 0:
                    self.report.violate(f"DEL {container} after the full disk: rc {rc} {out}")
                self.held.pop(container)
        if http(self.agent.port, "GET", "/readyz")[0] != 200:
            self.report.violate("space is back: /readyz still unready after a successful write")

    # -- the run --

    def run(self) -> AgentSoakReport:
        self.planted_lock()  # before the clock starts: a refused start costs an interpreter's start
        started = time.perf_counter()
        self.report.max_start_seconds = self.agent.start()
        self.report.base_fds = self.agent.fds()
        hostile: list[Callable[[], None]] = [
            self.hostile_oversized_body,
            self.hostile_huge_container_id,
            self.hostile_nul_ifname,
            self.hostile_long_ifname,
            self.hostile_nesting,
            self.hostile_options,
            self.hostile_half_body,
            self.hostile_trickle,
            self.hostile_flood,
            self.hostile_tcp_flood,
            self.hostile_slow_read,
            self.hostile_plugin_inputs,
        ]
        next_restart = started + self.config.restart_every
        next_full = started + self.config.full_disk_every
        kills = 0

        def faults() -> None:
            """The restarts and full disks that are due (after any step: the first round of every
            hostile input may itself take longer than a short run)."""
            nonlocal next_restart, next_full, kills
            now = time.perf_counter()
            if now >= next_restart:
                kills += 1
                self.restart(signal.SIGKILL if kills % 2 else signal.SIGTERM)
                next_restart = now + self.config.restart_every
            if self.tmpfs is not None and now >= next_full:
                self.full_disk()
                next_full = time.perf_counter() + self.config.full_disk_every

        try:
            for action in hostile:  # each at least once, then at random
                self._step(action)
                faults()
            while time.perf_counter() - started < self.config.seconds:
                self._step(self.rng.choice(hostile))
                faults()
            while self.held:
                self.valid_del(must_succeed=True)
            self.check_invariants("at the end")
        finally:
            rc = self.agent.stop(signal.SIGTERM)
            if rc != 0:
                self.report.violate(f"final SIGTERM: the agent exited {rc}")
        self.report.real_seconds = time.perf_counter() - started
        return self.report

    def _step(self, action: Callable[[], None]) -> None:
        action()
        self.check_invariants(action.__name__)
        for _ in range(self.rng.randint(1, 3)):
            self.rng.choice([self.valid_add, self.valid_add, self.valid_del, self.valid_check])()
        self.check_invariants(f"valid requests after {action.__name__}")


@contextlib.contextmanager
def _state_dir(directory: Path) -> Iterator[tuple[Path, str]]:
    """A 2 MiB tmpfs for the state (so the disk can be filled) when root; a plain directory otherwise,
    with the reason the full-disk episodes do not run."""
    state = directory / "state"
    state.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        yield state, "not root: no tmpfs to fill"
        return
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(state)], capture_output=True)
    if done.returncode != 0:
        yield state, f"mount tmpfs failed: {done.stderr.decode().strip()[:200]}"
        return
    try:
        yield state, ""
    finally:
        subprocess.run(["umount", "-l", str(state)], capture_output=True)


def agent_soak(config: AgentSoakConfig, agent_options: dict[str, Any] | None = None) -> AgentSoakReport:
    # The TCP flood holds more connections than the agent's file limit: this process needs that many.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = config.files * 2 + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    with tempfile.TemporaryDirectory(prefix="eni-agent-soak-") as tmp:
        directory = Path(tmp)
        plugin = directory / "bin" / "eni-ipam-cni"
        plugin.parent.mkdir()
        build = [sys.executable, str(ROOT / "scripts" / "build_cni_plugin.py"), "--output", str(plugin)]
        subprocess.run([*build, "--interpreter", sys.executable], check=True, capture_output=True, timeout=60)
        with _state_dir(directory) as (state, why):
            soak = AgentSoak(config, directory, plugin, state, agent_options)
            soak.report.full_disk = why
            return soak.run()


def render(report: AgentSoakReport) -> str:
    c = report.config
    lines = [
        "# Reliability of the node agent",
        "",
        "Written by `make soak` (`python -m bench.agent_soak`, code in `bench/agent_soak.py`): a real",
        "`eni-ipam agent` serves the real CNI plugin while hostile input is thrown at its socket, it is",
        "restarted with a FIFO in the libcni cache and leftovers in its state directory, and its state",
        "directory is filled up; its TCP port is flooded with more connections than its open-file limit,",
        "and both the socket and the port with slow readers (requests pipelined, answers never read),",
        "while the plugin's ADDs must go on succeeding and kubelet's probes answering (they have a",
        "listener of their own, decision 0043). The invariants are in the module's docstring;",
        "`tests/bench/test_agent_soak.py` runs a short version in the test suite.",
        "",
        f"Set-up: {c.seconds:g} s of hostile input, `socket_max_connections: {c.max_connections}`,"
        f" `socket_read_timeout: {c.read_timeout:g}s`, `server.max_connections: {c.http_max_connections}`,"
        f" an open-file limit of {c.files} (soft and hard), a restart every {c.restart_every:g} s"
        f" (SIGKILL and SIGTERM in turn), a full disk every {c.full_disk_every:g} s"
        + (f" (not run: {report.full_disk})." if report.full_disk else "."),
        f"The run took {report.real_seconds:.0f} s.",
        "",
        "## Results",
        "",
        "| | |",
        "|---|---:|",
        f"| **invariant violations** | **{report.events['violations']}** |",
        f"| files the agent held at most (at rest: {report.base_fds}) | {report.max_fds} |",
        f"| largest state file (bytes) | {report.max_state_bytes} |",
        f"| slowest start, to serving (s) | {report.max_start_seconds:.2f} |",
        "",
        "Hostile inputs (each refused as documented, nothing changed):",
        "",
        "| input | count |",
        "|---|---:|",
    ]
    lines += [f"| {k} | {v} |" for k, v in sorted(report.hostile.items())]
    lines += ["", "Valid requests through the plugin:", "", "| request | count |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(report.valid.items())]
    lines += ["", "Events:", "", "| event | count |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(report.events.items()) if k != "violations"]
    if report.violations:
        lines += ["", "## Violations", ""] + [f"- {v}" for v in report.violations]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = soak_arguments("python -m bench.agent_soak", (__doc__ or "").splitlines()[0], OUT, argv)
    report = agent_soak(QUICK if args.quick else AgentSoakConfig())
    publish(render(report), args.out, quick=args.quick, name="agent soak")
    return 0 if not report.events["violations"] else 1


if __name__ == "__main__":
    sys.exit(main())
