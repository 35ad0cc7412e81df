"""End to end on a host without Kubernetes: real podman and a real dockerd take their containers'
addresses from one standalone ``eni-ipam agent``, set up exactly as docs/node.md says ("A podman host",
"A Docker host").

The set-up is read from those two sections at test time, so the page and the test cannot drift apart:

- ``/etc/eni-ipam-agent/config.yaml`` of both sections (the Docker host's is the podman host's plus
  ``docker_socket`` and ``docker_ipam_driver``; the test checks that), ``/etc/cni/net.d/10-eni.conflist``,
  ``/etc/containers/containers.conf.d/50-eni-ipam.conf``, ``/etc/docker/plugins/eni-ipam.spec`` and the
  ``docker network create`` command;
- the agent is started with the ``ExecStart`` of ``deploy/systemd/eni-ipam-agent.service``, and counts
  as started once its ``ExecStartPost`` (wait for the socket) returns, as systemd would do;
- the plugin is built by ``scripts/build_cni_plugin.py --interpreter /usr/bin/python3`` as the page says
  (``.venv/bin/eni-ipam-cni`` if the script is missing).

What the test changes, and only that: every path goes into a temporary directory (the configuration
directories, the agent's socket and state, the plugin directory, podman's storage, dockerd's
``--data-root``/``--exec-root``/socket), the driver's name in Docker is made unique
(``/etc/docker/plugins/eni-ipam-e2e-<hex>.spec``, removed afterwards), the pool's range is 10 addresses
(so that a leak would exhaust it), the sweep runs every 2 s with a 3 s grace, and the metrics port is
any free one. Settings of podman that let it run in a sandbox and keep it apart from the host's podman
are added to containers.conf (:func:`sandbox_containers_conf`); dockerd runs privately (``--iptables=false
--bridge=none``, its own config file). The Docker network's macvlan parent is a veth pair made for
the test. Containers run a static busybox (Debian's ``busybox-static``) imported as an image: no
registry is reachable.

The scenarios: containers started in parallel get distinct pool addresses, the ones seen inside;
``--ip`` is honoured (and a taken or foreign address refused); addresses leaked by podman and by
Docker while the agent was down come back through the sweep, so the pool fills again; a Docker
network removed while the agent was down gets its pool back.

Needs root, network namespaces, and Debian's podman, docker.io, busybox-static and
containernetworking-plugins (``make node-runtimes``, which ``make e2e`` runs). Each setup step that
cannot run here skips the tests that need it, saying why; a failure of the agent, the plugin or the
driver fails them.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from tests.deploy.test_systemd_unit import service
from tests.e2e.dockerd import HOST_LEFTOVERS, host_paths_restored, start_dockerd, stop_dockerd, unmount_under

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "node.md"
BUILD_PLUGIN = ROOT / "scripts" / "build_cni_plugin.py"
VENV_BIN = Path(sys.executable).parent
"""The venv's bin directory: the documented ``/opt/eni-ipam/bin``."""

PODMAN_SECTION = "A podman host"
DOCKER_SECTION = "A Docker host"
AGENT_CONFIG = "/etc/eni-ipam-agent/config.yaml"
CONFLIST = "/etc/cni/net.d/10-eni.conflist"
CONTAINERS_CONF = "/etc/containers/containers.conf.d/50-eni-ipam.conf"
DOCKER_SPEC = "/etc/docker/plugins/eni-ipam.spec"
INSTALL_BIN = "/opt/eni-ipam/bin/"
DOC_SOCKET = "/run/eni-ipam/agent.sock"
DOCKER_PLUGINS = Path("/etc/docker/plugins")
DEBIAN_PYTHON = "/usr/bin/python3"
CNI_DIR = Path("/usr/lib/cni")
CNI_CACHE = Path("/var/lib/cni/results")

SWEEP_INTERVAL = 2.0
SWEEP_GRACE = 3.0
"""Three sweeps see an owner gone before it is released: a Docker container being started holds an
address before its endpoint shows in Docker's API, and 9 of them starting at once on 2 cores take
seconds. (The default, 60 s, is meant to cover that and more.)"""
SWEPT_WITHIN = 2 * SWEEP_INTERVAL + SWEEP_GRACE + 10.0
"""Seconds within which a leaked address must be free again: the first sweep sees it, the first sweep
at least the grace later releases it; and slack for a loaded 2-core machine."""
RANGE = "10.99.0.10-10.99.0.19"
"""The pool's range in the test: 10 addresses, so that what leaked would exhaust it."""
PARALLEL = 6
LEAKED = 4
DOCKER_RELEASE_RETRIES = 60.0
"""Seconds allowed to a Docker command while the driver is unreachable: Docker retries each call for
about 15 s before it gives up (a container's removal takes 15 s, a network's 30 s)."""
IMAGE = "eni-e2e-busybox:latest"


# --- small helpers --------------------------------------------------------------------------------

T = TypeVar("T")
R = TypeVar("R", bound="Runtime")


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (at most ``timeout`` seconds); ``check``: AssertionError with its output if it fails."""
    args = [str(a) for a in cmd]
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{shlex.join(args)}: not done within {timeout:g}s") from None
    if check and done.returncode != 0:
        raise AssertionError(
            f"{shlex.join(args)} exited {done.returncode}: {(done.stderr or done.stdout).strip()[-2000:]}"
        )
    return done


def until(
    what: str, check: Callable[[], T], limit: float, *, poll: float = 0.2, seen: Callable[[], object] = str
) -> T:
    """``check()``'s first true value; after ``limit`` seconds, AssertionError naming ``what`` and what
    ``seen()`` shows then."""
    deadline = time.perf_counter() + limit
    while True:
        value = check()
        if value:
            return value
        if time.perf_counter() > deadline:
            raise AssertionError(f"not within {limit:g}s: {what} {seen()}".rstrip())
        time.sleep(poll)


def parallel(fn: Callable[[], T], n: int) -> list[T]:
    """``fn()`` n times at once (as an orchestrator starts containers); every result, or the first error."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
        return [f.result() for f in [pool.submit(fn) for _ in range(n)]]


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def http_get(socket_path: Path, path: str, timeout: float = 10.0) -> Any:
    """``GET path`` on a unix socket (HTTP/1.0: the answer ends with the connection); its JSON body."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(str(socket_path))
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1:2]
    assert status == [b"200"], f"GET {path}: {head[:200]!r} {body[:500]!r}"
    return json.loads(body)


def is_static(path: Path) -> bool:
    """Whether the ELF file at ``path`` has no program interpreter (runs in an empty root filesystem)."""
    data = path.read_bytes()
    if data[:5] != b"\x7fELF\x02":  # 64-bit ELF only; anything else is not what Debian ships here
        return False
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    types = (struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum))
    return 3 not in types  # PT_INTERP


def busybox_image(directory: Path) -> Path:
    """A tar of a root filesystem holding only a static busybox and its applets (``/bin``)."""
    busybox = Path("/bin/busybox")
    if not busybox.is_file():
        pytest.skip("/bin/busybox is missing (apt-get install busybox-static; make node-runtimes)")
    if not is_static(busybox):
        pytest.skip("/bin/busybox is not statically linked (apt-get install busybox-static)")
    rootfs = directory / "rootfs"
    for sub in ("bin", "etc", "proc", "sys", "dev", "tmp", "run"):
        (rootfs / sub).mkdir(parents=True, exist_ok=True)
    shutil.copy2(busybox, rootfs / "bin" / "busybox")
    applets = run([busybox, "--list"], timeout=10).stdout.split()
    for applet in applets:
        if applet != "busybox" and "/" not in applet:
            (rootfs / "bin" / applet).symlink_to("busybox")
    tar = directory / "busybox.tar"
    with tarfile.open(tar, "w") as archive:
        for child in sorted(rootfs.iterdir()):
            archive.add(child, arcname=child.name)
    return tar


# --- docs/node.md ---------------------------------------------------------------------------------

FILE_BLOCK = re.compile(r"^`(/[^`\s]+)`:\n\n```[a-z]*\n(.*?)^```$", re.M | re.S)
"""A file of the page: its path on a line of its own, then its content in a fenced block."""


def doc_section(title: str) -> str:
    text = DOCS.read_text()
    start = text.find(f"\n## {title}\n")
    assert start != -1, f"docs/node.md has no section '## {title}'"
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def doc_files(title: str) -> dict[str, str]:
    """The files the section shows, by path."""
    return {m[1]: m[2] for m in FILE_BLOCK.finditer(doc_section(title))}


def doc_file(title: str, path: str) -> str:
    files = doc_files(title)
    assert path in files, f"docs/node.md, '{title}', shows no file {path} (it shows {sorted(files)})"
    return files[path]


def doc_command(title: str, prefix: str) -> list[str]:
    """The first shell command of the section that starts with ``prefix`` (continuations joined)."""
    for block in re.findall(r"^```sh\n(.*?)^```$", doc_section(title), re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith(prefix):
                return shlex.split(line, comments=True)
    raise AssertionError(f"docs/node.md, '{title}', has no command starting with {prefix!r}")


def unit_service() -> dict[str, str]:
    """The ``[Service]`` settings of the systemd unit (the last of each key)."""
    return {key: values[-1] for key, values in service().items()}


def toml(tables: dict[str, dict[str, Any]]) -> str:
    """A TOML file of flat tables (strings, booleans, numbers, lists of strings)."""
    lines = []
    for name, table in tables.items():
        lines.append(f"[{name}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in table.items()]
        lines.append("")
    return "\n".join(lines)


# --- the agent --------------------------------------------------------------------------------------


@dataclass
class Node:
    """The host: the agent (as the systemd unit runs it), its files, and the runtimes set up so far."""

    root: Path
    config: dict[str, Any]
    config_path: Path
    socket: Path
    log: Path
    plugin_dir: Path
    image_tar: Path
    driver: str
    """The libnetwork driver's name in Docker (unique to this run)."""
    docker_socket: Path
    process: subprocess.Popen[bytes] | None = None
    runtimes: dict[str, Runtime] = field(default_factory=dict)

    def _command(self, value: str) -> list[str]:
        """A command line of the unit, with the documented paths replaced by this host's."""
        replaced = (
            value.replace(INSTALL_BIN, f"{VENV_BIN}/")
            .replace(AGENT_CONFIG, str(self.config_path))
            .replace(DOC_SOCKET, str(self.socket))
            .replace("%H", socket.gethostname())
        )
        return shlex.split(replaced)

    def start(self, *, answering: bool = True) -> None:
        """Start the agent as systemd would: ExecStart, then ExecStartPost until it returns (the agent
        listens: it is started); and, with ``answering``, until it answers too (it has restored, and
        logged what it found)."""
        service = unit_service()
        limit = float(service.get("TimeoutStartSec", "90").removesuffix("s"))
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self._command(service["ExecStart"]),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        post = subprocess.Popen(
            self._command(service["ExecStartPost"]),
            stdin=subprocess.DEVNULL,
            env={**os.environ, "MAINPID": str(self.process.pid)},  # as systemd sets it
        )
        try:
            deadline = time.perf_counter() + limit
            while post.poll() is None:
                if self.process.poll() is not None:
                    raise AssertionError(f"the agent exited ({self.process.returncode}):\n{tail(self.log)}")
                if time.perf_counter() > deadline:
                    raise AssertionError(f"ExecStartPost still waiting after {limit:g}s:\n{tail(self.log)}")
                time.sleep(0.05)
            if post.returncode != 0:
                agent = self.process.poll()
                raise AssertionError(
                    f"ExecStartPost exited {post.returncode} (agent: {agent}):\n{tail(self.log)}"
                )
        finally:
            if post.poll() is None:
                post.kill()
                post.wait(10)
        if answering:
            self.status()

    def kill(self) -> None:
        """SIGKILL: the agent is down, as after a crash; its socket file stays behind."""
        assert self.process is not None and self.process.poll() is None, "the agent is not running"
        self.process.kill()
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def ensure_running(self) -> None:
        if self.process is None or self.process.poll() is not None:
            self.start()

    def status(self) -> dict[str, Any]:
        answer: dict[str, Any] = http_get(self.socket, "/v1/status")
        return answer

    def allocations(self) -> dict[str, str]:
        """Address → owner."""
        return {a["address"]: a["owner"] for a in self.status()["allocations"]}

    def pool(self) -> list[str]:
        addresses: list[str] = self.status()["pools"]["default"]["addresses"]
        return addresses

    def log_size(self) -> int:
        return self.log.stat().st_size

    def events(self, since: int = 0) -> list[dict[str, Any]]:
        """The agent's log lines (JSON) from byte ``since`` on."""
        with self.log.open("rb") as f:
            f.seek(since)
            lines = f.read().decode(errors="replace").splitlines()
        out = []
        for line in lines:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict):
                    out.append(event)
        return out

    def swept(self, since: int) -> set[str]:
        return {e["key"] for e in self.events(since) if e.get("event") == "sweep_released"}

    def leaks(self) -> list[str]:
        """Allocations no live container holds (per the runtimes set up); empty when none."""
        views = {name: rt.view() for name, rt in self.runtimes.items()}
        out = []
        for address, owner in sorted(self.allocations().items()):
            held = any(rt.holds(views[name], address, owner) for name, rt in self.runtimes.items())
            if not held:
                out.append(f"{address} ({owner})")
        return out

    def wait_clean(self) -> None:
        """Until nothing is allocated (what a previous test left is swept meanwhile)."""
        until(
            "an empty pool before the test",
            lambda: not self.allocations(),
            SWEPT_WITHIN,
            seen=self.allocations,
        )


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    """The agent of docs/node.md, running (one for both runtimes); skips where this host cannot host it."""
    require_netns_host("podman, dockerd and network namespaces need root")
    with running_node("eni-nr-", make_node) as this:
        yield this


@contextlib.contextmanager
def running_node(
    prefix: str, make: Callable[[Path], Node], *, before_stop: Callable[[Node], None] | None = None
) -> Iterator[Node]:
    """The agent ``make`` sets up in a fresh directory (short: unix socket paths are limited to 107
    bytes), started; on the way out stopped, its log's last lines printed, the directory removed."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    this: Node | None = None
    try:
        this = make(root)
        this.start()
        yield this
    finally:
        if this is not None:
            if before_stop is not None:
                before_stop(this)
            this.stop()
            print(f"agent log (last lines):\n{tail(this.log, 15)}")
        shutil.rmtree(root, ignore_errors=True)


def make_node(root: Path) -> Node:
    """The agent's files from the page (relocated into ``root``), the plugin, the image; not started."""
    podman_config = yaml.safe_load(doc_file(PODMAN_SECTION, AGENT_CONFIG))
    docker_config = yaml.safe_load(doc_file(DOCKER_SECTION, AGENT_CONFIG))
    extra = {k: v for k, v in docker_config.items() if k not in podman_config}
    assert {k: docker_config.get(k) for k in podman_config} == podman_config, (
        "the Docker host's config.yaml must be the podman host's plus its Docker keys"
    )
    assert set(extra) == {"docker_socket", "docker_ipam_driver"}, extra
    assert docker_config["socket"] == DOC_SOCKET, "the page's socket is the unit's"
    assert docker_config["docker_ipam_driver"] == "eni-ipam", "the page's driver name is its spec file's"

    driver = f"eni-ipam-e2e-{uuid.uuid4().hex[:8]}"
    docker_socket = root / "docker" / "docker.sock"
    keys = {"docker_socket": str(docker_socket), "docker_ipam_driver": driver}
    return relocated_node(root, docker_config, driver=driver, docker_api=docker_socket, **keys)


def require_netns_host(why_root: str) -> None:
    """Skip, saying why, unless this host can run containers in network namespaces: root, the
    ``ip``, ``nsenter`` and ``mount`` commands, and ``ip netns add`` working."""
    if os.geteuid() != 0:
        pytest.skip(why_root)
    for tool in ("ip", "nsenter", "mount"):
        if shutil.which(tool) is None:
            pytest.skip(f"the {tool} command is missing")
    probe = f"eni-e2e-{uuid.uuid4().hex[:8]}"
    added = run(["ip", "netns", "add", probe], check=False, timeout=10)
    if added.returncode != 0:
        pytest.skip(f"no network namespaces here: ip netns add: {added.stderr.strip()}")
    run(["ip", "netns", "del", probe], check=False, timeout=10)


def relocated_node(
    root: Path,
    documented: dict[str, Any],
    *,
    driver: str,
    docker_api: Path,
    pool_range: str = RANGE,
    **more: Any,
) -> Node:
    """An agent configured as ``documented`` (a page's config.yaml) with every path in ``root``, any
    free port, the test's sweep, ``pool_range`` and ``more``; its configuration file written, the
    plugin built, the image made; not started."""
    config = {
        **documented,
        "socket": str(root / "run" / "agent.sock"),
        "state_dir": str(root / "state"),
        "server": {**documented["server"], "port": 0, "probe_port": 0},  # any free ports
        "sweep_interval": f"{SWEEP_INTERVAL:g}s",
        "sweep_grace": f"{SWEEP_GRACE:g}s",
        "pools": {"default": {**documented["pools"]["default"], "ranges": [pool_range]}},
        **more,
    }
    config_path = root / "etc" / "config.yaml"
    config_path.parent.mkdir(parents=True)
    config_path.write_text(yaml.safe_dump(config))
    plugin_dir = root / "cni-bin"
    plugin_dir.mkdir()
    build_plugin(plugin_dir / "eni-ipam-cni")
    return Node(
        root=root,
        config=config,
        config_path=config_path,
        socket=Path(config["socket"]),
        log=root / "agent.log",
        plugin_dir=plugin_dir,
        image_tar=busybox_image(root / "image"),
        driver=driver,
        docker_socket=docker_api,
    )


def build_plugin(output: Path) -> None:
    """The plugin as docs/node.md builds it (``--interpreter /usr/bin/python3`` when that is Python 3.11+)."""
    if not BUILD_PLUGIN.is_file():
        output.symlink_to(VENV_BIN / "eni-ipam-cni")  # until scripts/build_cni_plugin.py exists
        return
    interpreter = sys.executable
    if Path(DEBIAN_PYTHON).is_file():
        recent = run([DEBIAN_PYTHON, "-c", "import sys; print(sys.version_info >= (3, 11))"], check=False)
        if recent.stdout.strip() == "True":
            interpreter = DEBIAN_PYTHON
    run(
        [sys.executable, BUILD_PLUGIN, "--output", output, "--interpreter", interpreter],
        timeout=60,
    )
    version = run([output], env={**os.environ, "CNI_COMMAND": "VERSION"}, timeout=20)
    assert "supportedVersions" in version.stdout, version.stdout


# --- the runtimes -----------------------------------------------------------------------------------

ADDRESS = re.compile(r"\binet (\d+\.\d+\.\d+\.\d+)/(\d+)")


class Runtime:
    """What the tests do with podman and Docker alike."""

    name = ""
    cli: list[str]
    env: dict[str, str] | None = None
    run_args: list[str]
    seen: set[str]
    refusals: dict[str, str]

    def cmd(self, *args: str, timeout: float = 60.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run([*self.cli, *args], timeout=timeout, env=self.env, check=check)

    def try_start(self, ip: str | None = None) -> subprocess.CompletedProcess[str]:
        done = self.cmd(
            "run", "-d", *self.run_args, *(["--ip", ip] if ip else []), IMAGE, "sleep", "600", check=False
        )
        if done.returncode == 0:
            self.seen.add(done.stdout.strip())
        return done

    def start(self, ip: str | None = None) -> str:
        done = self.try_start(ip)
        assert done.returncode == 0, f"{self.name} run failed: {done.stderr.strip()[-2000:]}"
        return done.stdout.strip()

    def inside(self, cid: str) -> tuple[str, str]:
        """The container's address (``ip addr`` inside it) and its default route."""
        shown = self.cmd("exec", cid, "ip", "-4", "-o", "addr", "show", "dev", "eth0", timeout=30).stdout
        match = ADDRESS.search(shown)
        assert match, f"no IPv4 address on eth0 inside {cid[:12]}: {shown!r}"
        route = self.cmd("exec", cid, "ip", "-4", "route", "show", "default", timeout=30).stdout.strip()
        return match[1], route

    def containers(self, *, all_states: bool = False) -> set[str]:
        listed = self.cmd("ps", "-q", "--no-trunc", *(["-a"] if all_states else []), timeout=30).stdout
        return set(listed.split())

    def remove(self, cid: str, *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        raise NotImplementedError

    def remove_all(self) -> None:
        ids = self.containers(all_states=True)
        self.seen |= ids
        for done in parallel_map(lambda cid: self.remove(cid, timeout=DOCKER_RELEASE_RETRIES), sorted(ids)):
            if done.returncode != 0:
                print(f"{self.name} rm: {done.stderr.strip()}")

    def view(self) -> Any:
        """This runtime's own view of what holds an address (for :meth:`holds`)."""
        raise NotImplementedError

    def holds(self, view: Any, address: str, owner: str) -> bool:
        raise NotImplementedError

    def owner(self, cid: str) -> str | None:
        """The agent's owner for the container's address (None: any owner of this runtime's kind)."""
        raise NotImplementedError


def parallel_map(fn: Callable[[str], T], items: Sequence[str]) -> list[T]:
    if not items:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(items)) as pool:
        return list(pool.map(fn, items))


class Podman(Runtime):
    name = "podman"
    refusals = {"taken": "agent error already_allocated", "foreign": "agent error not_in_pool"}
    """What `podman run --ip` says when the address is taken, or not the pool's (docs/node.md)."""

    def __init__(self, cli: list[str], env: dict[str, str], network: str) -> None:
        self.cli, self.env, self.network = cli, env, network
        self.run_args = []  # the network is containers.conf's default_network, as on the page
        self.seen = set()

    def remove(self, cid: str, *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return self.cmd("rm", "-f", "-t", "0", cid, timeout=timeout, check=False)

    def view(self) -> set[str]:
        return self.containers()

    def holds(self, view: Any, address: str, owner: str) -> bool:
        return any(owner == f"cni:{cid}:eth0" for cid in view)

    def owner(self, cid: str) -> str | None:
        return f"cni:{cid}:eth0"


class Docker(Runtime):
    name = "docker"
    refusals = {"taken": "Address already in use", "foreign": "requested address is out of range"}
    """What `docker run --ip` says when the address is taken, or not the pool's (docs/node.md)."""

    def __init__(self, cli: list[str], env: dict[str, str], network: str) -> None:
        self.cli, self.env, self.network = cli, env, network
        self.run_args = ["--network", network]
        self.seen = set()
        self.create_args: list[str] = []
        """``docker network create ...`` as on the page, for this host."""

    def create_network(self) -> None:
        self.cmd(*self.create_args, timeout=60)

    def has_network(self) -> bool:
        return self.network in self.cmd("network", "ls", "--format", "{{.Name}}").stdout.split()

    def remove(self, cid: str, *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return self.cmd("rm", "-f", cid, timeout=timeout, check=False)

    def view(self) -> set[str]:
        """The addresses Docker's endpoints hold on the network."""
        done = self.cmd("network", "inspect", self.network, "--format", "{{json .Containers}}", check=False)
        if done.returncode != 0:
            return set()
        endpoints = json.loads(done.stdout or "null") or {}
        return {e["IPv4Address"].split("/")[0] for e in endpoints.values() if e.get("IPv4Address")}

    def holds(self, view: Any, address: str, owner: str) -> bool:
        return owner.startswith("libnetwork:") and address in view

    def owner(self, cid: str) -> str | None:
        return None

    def address(self, cid: str) -> str:
        """Docker's own record of the container's address on the network."""
        fmt = f'{{{{(index .NetworkSettings.Networks "{self.network}").IPAddress}}}}'
        return self.cmd("inspect", "--format", fmt, cid).stdout.strip()


@pytest.fixture(scope="module")
def podman(node: Node) -> Iterator[Podman]:
    """podman as on the page (CNI backend, the page's conflist and containers.conf), its storage private."""
    binary = shutil.which("podman")
    if binary is None:
        pytest.skip("podman is not installed (apt-get install podman; make node-runtimes)")
    if not (CNI_DIR / "bridge").is_file():
        pytest.skip(f"{CNI_DIR / 'bridge'} is missing (apt-get install containernetworking-plugins)")
    conflist = json.loads(doc_file(PODMAN_SECTION, CONFLIST))
    bridge = conflist["plugins"][0]
    assert bridge["ipam"]["type"] == "eni-ipam-cni" and bridge["ipam"]["socket"] == DOC_SOCKET
    if Path("/sys/class/net", bridge["bridge"]).exists():
        pytest.skip(f"this host already has an interface {bridge['bridge']}; not touching it")

    home = node.root / "podman"
    netd = home / "net.d"
    netd.mkdir(parents=True)
    bridge["ipam"]["socket"] = str(node.socket)
    (netd / Path(CONFLIST).name).write_text(json.dumps(conflist, indent=2))

    tables = tomllib.loads(doc_file(PODMAN_SECTION, CONTAINERS_CONF))
    assert tables["network"]["network_backend"] == "cni", tables
    for name, table in sandbox_containers_conf(home, netd, node.plugin_dir).items():
        clash = set(table) & set(tables.get(name, {}))
        assert not clash, f"the test would override the page's [{name}] {sorted(clash)}"
        tables[name] = {**tables.get(name, {}), **table}
    conf = home / "containers.conf"
    conf.write_text(toml(tables))
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}

    with contextlib.ExitStack() as cleanup:
        cleanup.callback(unmount_under, home)
        cleanup.enter_context(host_paths_restored(Path("/run/runc"), Path("/run/crun")))
        cleanup.callback(run, ["ip", "link", "del", bridge["bridge"]], check=False, timeout=10)
        runtime = working_podman(binary, home, env, conflist["name"], node.image_tar)
        cleanup.callback(forget_cni_cache, runtime)
        cleanup.callback(runtime.cmd, "rmi", "-af", check=False)
        cleanup.callback(runtime.remove_all)
        cleanup.callback(agent_back, node)
        networks = runtime.cmd("network", "ls", "--format", "{{.Name}}").stdout.split()
        assert conflist["name"] in networks, f"podman does not see the page's network: {networks}"
        node.runtimes["podman"] = runtime
        cleanup.callback(node.runtimes.pop, "podman", None)
        yield runtime


def working_podman(binary: str, home: Path, env: dict[str, str], network: str, image: Path) -> Podman:
    """podman with the image imported and able to run a container (overlay storage, else vfs)."""
    failures = []
    for driver in ("overlay", "vfs"):
        cli = [binary, "--root", str(home / f"storage-{driver}"), "--runroot", str(home / f"run-{driver}")]
        candidate = Podman([*cli, "--storage-driver", driver], env, network)
        imported = candidate.cmd("import", "--change", "ENV PATH=/bin", str(image), IMAGE, check=False)
        if imported.returncode != 0:
            failures.append(f"{driver}: podman import: {imported.stderr.strip()[-500:]}")
            continue
        probe = candidate.cmd("run", "--rm", "--network", "none", IMAGE, "true", check=False)
        if probe.returncode == 0:
            return candidate
        failures.append(f"{driver}: podman run: {probe.stderr.strip()[-500:]}")
        candidate.cmd("rm", "-af", "-t", "0", check=False)
        candidate.cmd("rmi", "-af", check=False)
    pytest.skip("podman cannot run containers here: " + " | ".join(failures))


def forget_cni_cache(podman: Podman) -> None:
    """libcni's cache entries (in the host's directory) that DELs failing on purpose left behind."""
    for cid in podman.seen:
        for entry in CNI_CACHE.glob(f"{podman.network}-{cid}-*"):
            entry.unlink(missing_ok=True)


def sandbox_containers_conf(home: Path, netd: Path, plugin_dir: Path) -> dict[str, dict[str, Any]]:
    """What the test adds to the page's containers.conf: the relocated directories (``/etc/cni/net.d``,
    the plugin's ``/usr/lib/cni``), and settings that let podman run in a sandbox, apart from the host's."""
    return {
        "network": {"network_config_dir": str(netd), "cni_plugin_dirs": [str(plugin_dir), str(CNI_DIR)]},
        "engine": {
            # No systemd needed: cgroups directly, events to a file.
            "cgroup_manager": "cgroupfs",
            "events_logger": "file",
            "events_logfile_path": str(home / "events.log"),
            # Locks in files under tmp_dir, not in the shared memory segment of the host's podman.
            "lock_type": "file",
            "tmp_dir": str(home / "tmp"),
            # runc when there is one (docker.io brings it): crun refuses hybrid cgroup hierarchies.
            **({"runtime": "runc"} if shutil.which("runc") else {}),
        },
        # Podman raises RLIMIT_NOFILE and RLIMIT_NPROC to their maximum by default, which needs
        # CAP_SYS_RESOURCE; a sandbox may not grant it.
        "containers": {"default_ulimits": ["nofile=1024:1024", "nproc=4096:4096"]},
    }


@pytest.fixture(scope="module")
def docker(node: Node) -> Iterator[Docker]:
    """A private dockerd with the page's driver registration and network; skips where it cannot run."""
    dockerd = shutil.which("dockerd")
    cli_binary = "/usr/bin/docker" if Path("/usr/bin/docker").is_file() else shutil.which("docker")
    if dockerd is None or cli_binary is None:
        pytest.skip("dockerd or docker is not installed (apt-get install docker.io; make node-runtimes)")
    spec_text = doc_file(DOCKER_SECTION, DOCKER_SPEC)
    assert spec_text.strip() == f"unix://{DOC_SOCKET}", spec_text
    create = doc_command(DOCKER_SECTION, "docker network create")
    network = create[-1]

    home = node.root / "docker"
    home.mkdir(parents=True, exist_ok=True)
    (home / "client").mkdir()
    sock = node.docker_socket
    env = {**os.environ, "DOCKER_CONFIG": str(home / "client")}
    runtime = Docker([cli_binary, "-H", f"unix://{sock}"], env, network)
    log = home / "dockerd.log"
    with contextlib.ExitStack() as cleanup:
        # The driver's registration, as on the page but under this run's unique name.
        spec = DOCKER_PLUGINS / f"{node.driver}.spec"
        cleanup.enter_context(host_paths_restored(spec, DOCKER_PLUGINS))
        DOCKER_PLUGINS.mkdir(parents=True, exist_ok=True)
        spec.write_text(spec_text.replace(DOC_SOCKET, str(node.socket)))
        cleanup.enter_context(host_paths_restored(*HOST_LEFTOVERS))

        daemon = start_dockerd(dockerd, home, sock)
        cleanup.callback(stop_dockerd, daemon, home)

        deadline = time.perf_counter() + 60
        while runtime.cmd("version", "--format", "{{.Server.Version}}", check=False, timeout=10).returncode:
            if daemon.poll() is not None:
                pytest.skip(f"dockerd cannot run here (exited {daemon.returncode}):\n{tail(log, 8)}")
            if time.perf_counter() > deadline:
                pytest.skip(f"dockerd did not answer within 60 s:\n{tail(log, 8)}")
            time.sleep(0.25)
        cleanup.callback(runtime.remove_all)
        imported = runtime.cmd("import", "--change", "ENV PATH=/bin", str(node.image_tar), IMAGE, check=False)
        if imported.returncode != 0:
            pytest.skip(f"docker import failed: {imported.stderr.strip()}")
        probe = runtime.cmd("run", "--rm", "--network", "none", IMAGE, "true", check=False)
        if probe.returncode != 0:
            pytest.skip(f"Docker cannot run containers here: {probe.stderr.strip()[-800:]}")

        # The macvlan parent: the page's eth1 is the host's interface on the pool's subnet.
        parent = f"eni-e2e-{uuid.uuid4().hex[:4]}"
        made = run(["ip", "link", "add", parent, "type", "veth", "peer", "name", parent + "p"], check=False)
        if made.returncode != 0:
            pytest.skip(f"cannot create a veth pair as the macvlan parent: {made.stderr.strip()}")
        cleanup.callback(run, ["ip", "link", "del", parent], check=False, timeout=10)
        run(["ip", "link", "set", parent, "up"], timeout=10)
        run(["ip", "link", "set", parent + "p", "up"], timeout=10)

        args = [f"parent={parent}" if a == "parent=eth1" else a for a in create[1:]]
        runtime.create_args = [node.driver if a == "eni-ipam" else a for a in args]
        assert f"parent={parent}" in runtime.create_args and node.driver in runtime.create_args, create
        runtime.create_network()
        cleanup.callback(runtime.cmd, "network", "rm", network, check=False, timeout=DOCKER_RELEASE_RETRIES)
        cleanup.callback(runtime.remove_all)  # before the network goes
        cleanup.callback(agent_back, node)  # Docker releases through it
        node.runtimes["docker"] = runtime
        cleanup.callback(node.runtimes.pop, "docker", None)
        yield runtime


def agent_back(node: Node) -> None:
    """The agent running again (after a test that stopped it failed), so removals release cleanly."""
    try:
        node.ensure_running()
    except AssertionError as exc:
        print(f"the agent does not start again: {exc}")


@pytest.fixture(params=["podman", "docker"])
def runtime(request: pytest.FixtureRequest, node: Node) -> Iterator[Runtime]:
    """Each runtime in turn, with an empty pool at the start and no container left at the end."""
    rt: Runtime = request.getfixturevalue(request.param)
    yield from fresh(node, rt)


def fresh(node: Node, rt: R) -> Iterator[R]:
    node.ensure_running()
    if isinstance(rt, Docker) and not rt.has_network():
        rt.create_network()  # a test removed it
    node.wait_clean()
    try:
        yield rt
    finally:
        agent_back(node)
        rt.remove_all()


@pytest.fixture
def podman_fresh(node: Node, podman: Podman) -> Iterator[Podman]:
    yield from fresh(node, podman)


@pytest.fixture
def docker_fresh(node: Node, docker: Docker) -> Iterator[Docker]:
    yield from fresh(node, docker)


def gateway(node: Node) -> str:
    cidr = ipaddress.ip_network(node.config["pools"]["default"]["cidr"])
    return str(node.config["pools"]["default"].get("gateway") or next(cidr.hosts()))


def check_held(node: Node, rt: Runtime, ids: Sequence[str]) -> dict[str, str]:
    """Each container's address inside it is a pool address the agent lists for it, with the pool's
    gateway as its default route; container → address."""
    pool = set(node.pool())
    allocations = node.allocations()
    seen: dict[str, str] = {}
    for cid in ids:
        address, route = rt.inside(cid)
        assert address in pool, f"{rt.name} {cid[:12]}: {address} is not a pool address"
        assert f"default via {gateway(node)}" in route, f"{rt.name} {cid[:12]}: default route {route!r}"
        owner = allocations.get(address, "")
        expected = rt.owner(cid)
        if expected is None:  # Docker: the network's pool owns it, and Docker agrees on the address
            assert owner.startswith("libnetwork:"), f"{address}: the agent lists owner {owner!r}"
            assert isinstance(rt, Docker) and rt.address(cid) == address
        else:
            assert owner == expected, f"{address}: the agent lists owner {owner!r}, not {expected!r}"
        seen[cid] = address
    return seen


# --- the scenarios ----------------------------------------------------------------------------------


def test_containers_started_in_parallel_get_distinct_pool_addresses(node: Node, runtime: Runtime) -> None:
    started = time.perf_counter()
    ids = parallel(runtime.start, PARALLEL)
    took = time.perf_counter() - started
    held = check_held(node, runtime, ids)
    assert len(set(held.values())) == PARALLEL, f"addresses handed out twice: {held}"
    ours = {a for a, owner in node.allocations().items() if owner.startswith(("cni:", "libnetwork:"))}
    assert ours == set(held.values()), f"the agent lists {sorted(ours)}, the containers hold {held}"
    print(f"{runtime.name}: {PARALLEL} containers started at once in {took:.1f}s: {sorted(held.values())}")


def test_a_requested_address_is_honoured_and_a_taken_or_foreign_one_refused(
    node: Node, runtime: Runtime
) -> None:
    pool = node.pool()
    wanted = pool[-1]  # not what automatic allocation would pick first
    cid = runtime.start(ip=wanted)
    assert check_held(node, runtime, [cid]) == {cid: wanted}
    before = node.allocations()

    taken = runtime.try_start(ip=wanted)
    assert taken.returncode != 0, f"a second container got {wanted} too"
    assert runtime.refusals["taken"] in taken.stderr, taken.stderr
    cidr = ipaddress.ip_network(node.config["pools"]["default"]["cidr"])
    foreign = str(cidr.network_address + 250)  # in the subnet, outside the pool's range
    refused = runtime.try_start(ip=foreign)
    assert refused.returncode != 0, f"{foreign} is outside the pool's range, yet handed out"
    assert runtime.refusals["foreign"] in refused.stderr, refused.stderr

    assert node.allocations() == before, "a refused request changed the allocations"
    # as docs/node.md says: the refused containers were created, and stay there, not running
    assert len(runtime.containers(all_states=True) - runtime.containers()) == 2
    print(f"{runtime.name}: --ip {wanted} honoured; refused: {taken.stderr.strip()[-200:]!r}; "
          f"{refused.stderr.strip()[-200:]!r}")  # fmt: skip


def restart_and_sweep(
    node: Node, runtime: Runtime, keep: str, held: dict[str, str], leaked: dict[str, str]
) -> None:
    """Start the agent again after ``leaked`` (container → its owner in the agent) lost their release
    while it was down: they are restored as leaked, then swept within SWEPT_WITHIN while ``keep``
    keeps its address, and the pool is whole again (no "no available addresses on this pool")."""
    mark = node.log_size()
    started = time.perf_counter()
    node.start()
    restored = node.allocations()
    for cid, owner in leaked.items():
        assert restored.get(held[cid]) == owner, f"{held[cid]} was not restored as leaked"
    until(
        "every allocation held by a live container; leaks:",
        lambda: not node.leaks(),
        SWEPT_WITHIN,
        seen=node.leaks,
    )
    took = time.perf_counter() - started
    swept = node.swept(mark)
    for cid, owner in leaked.items():
        assert f"{owner}|{held[cid]}" in swept, f"the sweep did not release {held[cid]}: {swept}"
    assert check_held(node, runtime, [keep]) == {keep: held[keep]}, "the live container lost its address"

    free = len(node.pool()) - 1
    again = parallel(runtime.start, free)
    assert len(set(check_held(node, runtime, again).values())) == free
    print(
        f"{runtime.name}: {LEAKED} leaked addresses swept {took:.1f}s after the agent returned; pool refilled"
    )


def test_podman_addresses_leaked_while_the_agent_was_down_are_swept(node: Node, podman_fresh: Podman) -> None:
    podman = podman_fresh
    keep = podman.start()
    leaked_ids = parallel(podman.start, LEAKED)
    held = check_held(node, podman, [keep, *leaked_ids])

    node.kill()
    for cid in leaked_ids:
        removed = podman.remove(cid)
        assert removed.returncode == 0, removed.stderr
        # The DEL failed ("Unable to clean up network", logged by `podman rm` or by the container's
        # cleanup process), so libcni kept its cache entry; podman never tries again.
        assert (CNI_CACHE / f"{podman.network}-{cid}-eth0").exists(), f"{cid[:12]}: the DEL did not fail?"
    assert podman.containers() == {keep}

    restart_and_sweep(node, podman, keep, held, {cid: f"cni:{cid}:eth0" for cid in leaked_ids})


def test_docker_addresses_leaked_while_the_agent_was_down_are_swept(node: Node, docker_fresh: Docker) -> None:
    docker = docker_fresh
    keep = docker.start()
    leaked_ids = parallel(docker.start, LEAKED)
    held = check_held(node, docker, [keep, *leaked_ids])
    owner = node.allocations()[held[keep]]

    node.kill()
    log = node.root / "docker" / "dockerd.log"
    mark_docker = log.stat().st_size
    started = time.perf_counter()
    removed = parallel_map(lambda cid: docker.remove(cid, timeout=DOCKER_RELEASE_RETRIES), leaked_ids)
    assert all(r.returncode == 0 for r in removed), [r.stderr for r in removed]
    took = time.perf_counter() - started
    print(f"docker: {LEAKED} containers removed while the agent was down in {took:.1f}s")
    with log.open("rb") as f:
        f.seek(mark_docker)
        dockerd_said = f.read().decode(errors="replace")
    for cid in leaked_ids:  # Docker gave up on the release, and will not try again
        assert f"Failed to release ip address {held[cid]}" in dockerd_said, dockerd_said[-2000:]
    assert docker.containers() == {keep}

    restart_and_sweep(node, docker, keep, held, dict.fromkeys(leaked_ids, owner))


def test_docker_network_removed_while_the_agent_was_down_gets_its_pool_back(
    node: Node, docker_fresh: Docker
) -> None:
    docker = docker_fresh
    cid = docker.start()
    pool_id = node.allocations()[check_held(node, docker, [cid])[cid]].removeprefix("libnetwork:")
    docker.remove(cid)
    until("the container's address released", lambda: not node.allocations(), 10)

    node.kill()
    started = time.perf_counter()
    docker.cmd("network", "rm", docker.network, timeout=DOCKER_RELEASE_RETRIES)
    print(f"docker: network removed while the agent was down in {time.perf_counter() - started:.1f}s")

    mark = node.log_size()
    node.start()
    until(
        f"the sweep releasing pool {pool_id}",
        lambda: f"pool:{pool_id}" in node.swept(mark),
        SWEPT_WITHIN,
    )
    # Without the release, the same subnet would overlap the stale pool: the page's command works again.
    docker.create_network()
    cid = docker.start()
    check_held(node, docker, [cid])
