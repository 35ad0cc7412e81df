"""What a start trusts and what it proves (docs/decisions/0034), replayed without real runtimes: the
agent in this process, its CNI API on its socket as the plugin calls it, libcni's cache as files and
Docker's API as a small server (:func:`tests.agent.fake_docker`).

* a newer slot of the state file damaged after its acknowledgement: no address it lists is handed out
  again;
* an older valid copy of the state file put back: what the runtimes hold since is added to it;
* a full disk during a rebuild: the agent starts and serves, refuses changes until the disk has
  room, and the damaged file it set aside is not what fills the disk (a real tmpfs, as root);
* Docker not answering at the start: only what the driver handed Docker is withheld, ADDs are served
  from the rest, and when nothing else is left the answer names the pool and Docker's socket;
* the pods of a Kubernetes node: an address a pod holds is never handed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from eni_ipam.agent.config import agent_config_from_mapping
from eni_ipam.agent.daemon import Agent
from eni_ipam.kube.api import ENIPOOLS, PODS
from eni_ipam_testkit.fake_kube import FakeKube
from tests.agent import agent_paths, docker_network, fake_docker
from tests.agent.conftest import enipool_status
from tests.agent.test_daemon import running_agent
from tests.agent.test_runtime import write_entry
from tests.agent.test_start import docker_path, request_pool, running
from tests.kube.conftest import make_api
from tests.waiting import until

__all__ = ["docker_path"]  # a fixture, used here

pytestmark = pytest.mark.timeout(30)
CIDR = "10.99.0.0/28"  # 10.99.0.2-14 handed out; 10.99.0.1 is the router
MIRROR = "libnetwork-addresses.json"
"""What the driver handed Docker (eni_ipam/agent/mirror.py), beside the state file."""


def container(name: str) -> str:
    """A container ID as runtimes make them (64 hexadecimal digits), from a short name."""
    return name.encode().hex().ljust(64, "0")[:64]


def make_agent(tmp_path: Path, **more: Any) -> Agent:
    config = agent_config_from_mapping(
        {
            "node_source": "memory",
            **agent_paths(tmp_path),
            "oci_state_dirs": [str(tmp_path / "runc")],
            "pools": {"default": {"cidr": CIDR}},
            **more,
        }
    )
    for directory in ("state", "cni-cache", "runc", "netns"):
        (tmp_path / directory).mkdir(exist_ok=True)
    Path(config.socket).unlink(missing_ok=True)
    agent = Agent(config, node="n1")
    agent.startup.first_read, agent.startup.retry = 0.3, 0.05
    return agent


async def post(agent: Agent, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    connector = aiohttp.UnixConnector(path=agent.config.socket)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(f"http://agent{path}", json=body) as answer,
    ):
        return answer.status, await answer.json(content_type=None)


async def add(agent: Agent, name: str, tmp_path: Path) -> str:
    """A CNI ADD as podman's plugin sends it (a namespace that exists); the address handed out."""
    netns = tmp_path / "netns" / name
    netns.touch()
    body = {
        "containerID": container(name),
        "ifname": "eth0",
        "netns": str(netns),
        "network": "podnet",
        "podName": name,
    }
    status, answer = await post(agent, "/v1/cni/add", body)
    assert status == 200, answer
    address: str = answer["ips"][0]["address"]
    return address


async def refused(agent: Agent, name: str) -> dict[str, Any]:
    status, answer = await post(agent, "/v1/cni/add", {"containerID": container(name), "ifname": "eth0"})
    assert status == 503, answer
    error: dict[str, Any] = answer["error"]
    return error


def ran(tmp_path: Path, name: str, address: str) -> None:
    """What the runtime leaves of a container it ran: libcni's cache entry, its namespace."""
    write_entry(tmp_path / "cni-cache", container(name), address, netns=str(tmp_path / "netns" / name))


def owners(agent: Agent) -> dict[str, str]:
    return {a.address: a.owner for a in agent.allocator.allocations()}


def slots(path: Path) -> tuple[bytes, bytes]:
    raw = path.read_bytes()
    half = len(raw) // 2
    return raw[:half], raw[half:]


# -- finding 1: a damaged newer slot ------------------------------------------------------------------


async def test_a_newer_slot_damaged_after_its_acknowledgement_hands_none_of_its_addresses_out(
    tmp_path: Path,
) -> None:
    """ADD a, ADD b, 10 bytes of the newer slot (generation 2) overwritten at offset 300, restart, ADD
    c: c gets neither a's address nor b's. (No runtime holds anything: the state file is all there is.)"""
    async with running(make_agent(tmp_path)) as agent:
        a = await add(agent, "a", tmp_path)
        b = await add(agent, "b", tmp_path)
    path = tmp_path / "state" / "allocations.json"
    older, newer = slots(path)
    assert b'"generation": 1,' in older and b'"generation": 2,' in newer and b.encode() in newer
    damaged = bytearray(path.read_bytes())
    damaged[len(older) + 300 : len(older) + 310] = b"#" * 10
    path.write_bytes(bytes(damaged))
    async with running(make_agent(tmp_path)) as agent:
        c = await add(agent, "c", tmp_path)
        assert c not in (a, b), f"c got {c}, which the damaged slot acknowledged to a ({a}) or b ({b})"
        assert owners(agent) == {
            a: f"cni:{container('a')}:eth0",
            b: f"cni:{container('b')}:eth0",
            c: owners(agent)[c],
        }
    suspect = sorted(p.name for p in path.parent.glob("allocations.json.suspect-*"))
    assert suspect == ["allocations.json.suspect-1"]  # the damaged file, kept as it was
    assert (path.parent / suspect[0]).read_bytes() == bytes(damaged)


async def test_an_address_a_damaged_slot_lost_is_adopted_from_the_runtime_that_holds_it(
    tmp_path: Path,
) -> None:
    """Damage that makes b's own entry unreadable: libcni's cache, read at every start, has it."""
    async with running(make_agent(tmp_path)) as agent:
        a = await add(agent, "a", tmp_path)
        ran(tmp_path, "a", a)
        b = await add(agent, "b", tmp_path)
        ran(tmp_path, "b", b)
    path = tmp_path / "state" / "allocations.json"
    raw = bytearray(path.read_bytes())
    at = raw.index(f'"address": "{b}"'.encode(), len(raw) // 2)
    raw[at : at + 30] = b"\0" * 30  # b's address line, gone
    path.write_bytes(bytes(raw))
    async with running(make_agent(tmp_path)) as agent:
        assert owners(agent)[b] == f"cni:{container('b')}:eth0"
        c = await add(agent, "c", tmp_path)
        assert c not in (a, b)


# -- finding 2: an older valid copy put back ----------------------------------------------------------


async def test_an_older_valid_copy_put_back_is_completed_from_libcni_and_docker(
    tmp_path: Path, docker_path: str
) -> None:
    socket = docker_path
    endpoints: dict[str, str] = {}
    async with (
        fake_docker(lambda: [docker_network(CIDR, endpoints)], socket),
        running(make_agent(tmp_path, docker_socket=socket)) as agent,
    ):
        _, pool = await post(agent, "/IpamDriver.RequestPool", request_pool(CIDR))  # long ago
        a = await add(agent, "a", tmp_path)
        ran(tmp_path, "a", a)
        state_dir = tmp_path / "state"
        backup = {p.name: p.read_bytes() for p in state_dir.iterdir() if p.is_file() and p.suffix == ".json"}
        b = await add(agent, "b", tmp_path)
        ran(tmp_path, "b", b)
        _, got = await post(agent, "/IpamDriver.RequestAddress", {"PoolID": pool["PoolID"]})
        d = got["Address"].split("/")[0]
        endpoints["c1"] = d
    for name, data in backup.items():  # the whole state directory put back, as a volume would be
        (state_dir / name).write_bytes(data)
    assert "libnetwork.json" in backup and b.encode() not in backup["allocations.json"]
    async with (
        fake_docker(lambda: [docker_network(CIDR, endpoints)], socket),
        running(make_agent(tmp_path, docker_socket=socket)) as agent,
    ):
        assert owners(agent)[b] == f"cni:{container('b')}:eth0"
        assert owners(agent)[d].startswith("libnetwork:")
        fresh = {await add(agent, f"new{n}", tmp_path) for n in range(3)}
        assert not fresh & {a, b, d}, f"handed out again: {sorted(fresh & {a, b, d})}"


# -- finding 3: a full disk -------------------------------------------------------------------------


@contextlib.contextmanager
def small_tmpfs(path: Path, size: int) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes mounted at ``path`` (mount(2) called from this process: no
    subprocess); skips, saying why, where this process may not mount one."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)  # not find_library: it runs ldconfig
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        print("small_tmpfs: not root, no tmpfs: skipped")
        pytest.skip("a full disk needs a tmpfs of its own, which needs root")
    options = f"size={size},mode=0700".encode()
    if libc.mount(b"tmpfs", str(path).encode(), b"tmpfs", 0, options) != 0:
        why = os.strerror(ctypes.get_errno())
        print(f"small_tmpfs: mount failed ({why}): skipped")
        pytest.skip(f"cannot mount a tmpfs here: {why}")
    try:
        yield path
    finally:
        libc.umount2(str(path).encode(), 2)  # MNT_DETACH


def fill(directory: Path, leave: int) -> Path:
    """A file filling ``directory``'s filesystem but for about ``leave`` bytes."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\xaa" * 4096)
        assert shutil.disk_usage(directory).free < 4096
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    finally:
        os.close(fd)
    return filler


@pytest.mark.parametrize(
    ("state", "free_kib"), [("corrupt", 64), ("corrupt", 0), ("missing", 0)], ids=["64KiB", "full", "missing"]
)
async def test_a_rebuild_on_a_full_disk_serves_and_refuses_changes_until_there_is_room(
    tmp_path: Path, state: str, free_kib: int
) -> None:
    """The state corrupt or missing and the disk nearly or wholly full: the agent starts and serves what
    it rebuilt; when its file cannot be written, every change is refused (state_unwritable, undone)
    until there is room. The corrupt file set aside keeps its evidence but not its blocks."""
    with small_tmpfs(tmp_path / "state", 512 * 1024) as state_dir:
        async with running(make_agent(tmp_path)) as agent:  # a previous run: a, b in the file
            a = await add(agent, "a", tmp_path)
            ran(tmp_path, "a", a)
            b = await add(agent, "b", tmp_path)
        ran(tmp_path, "b", b)  # written by the runtime once the ADD answered
        path = state_dir / "allocations.json"
        if state == "corrupt":
            raw = bytearray(path.read_bytes())
            raw[10:20] = raw[len(raw) // 2 + 10 : len(raw) // 2 + 20] = b"#" * 10  # both slots
            path.write_bytes(bytes(raw))
        else:
            path.unlink()
        filler = fill(state_dir, free_kib * 1024)
        agent = make_agent(tmp_path)
        async with running(agent):
            assert owners(agent) == {a: f"cni:{container('a')}:eth0", b: f"cni:{container('b')}:eth0"}
            aside = list(state_dir.glob("allocations.json.corrupt-*"))
            if state == "corrupt":
                assert len(aside) == 1
            if free_kib:  # the evidence made small gave the new file its room
                assert agent.readiness()[0], agent.readiness()
                assert aside[0].stat().st_size < 4096 and b"#" * 10 in aside[0].read_bytes()
                assert path.exists() and await add(agent, "c", tmp_path) not in (a, b)
                return
            ready, why = agent.readiness()
            assert not ready and "the state file cannot be written" in why and "No space left" in why
            assert agent.metrics.sample("eni_ipam_agent_state_writable") == 0  # EniIpamAgentStateUnwritable
            error = await refused(agent, "c")
            assert error["code"] == "state_unwritable" and "change undone" in error["msg"]
            status, answer = await post(
                agent, "/v1/cni/del", {"containerID": container("a"), "ifname": "eth0"}
            )
            assert status == 503 and answer["error"]["code"] == "state_unwritable"
            assert a in owners(agent)  # undone: nothing lost
            filler.unlink()  # the operator makes room
            c = await add(agent, "c", tmp_path)
            assert c not in (a, b) and agent.readiness()[0]
            assert agent.metrics.sample("eni_ipam_agent_state_writable") == 1
            assert {x.address for x in agent.allocator.allocations()} == {a, b, c}
            assert agent.allocator.state_error == ""
        assert path.exists()


# -- the hung dockerd ---------------------------------------------------------------------------------


async def hung_docker(socket: str) -> Callable[[], Awaitable[None]]:
    """Docker's socket accepting connections and never answering (dockerd stopped or stuck); returns
    what ends it."""
    held: list[asyncio.StreamWriter] = []

    async def never(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_unix_server(never, socket)

    async def end() -> None:
        server.close()
        for writer in held:
            writer.close()
        await asyncio.to_thread(Path(socket).unlink, missing_ok=True)

    return end


async def test_with_docker_hung_at_the_start_only_what_it_was_handed_is_withheld(
    tmp_path: Path, docker_path: str
) -> None:
    """The state file lost, dockerd not answering at the start: the mirror says which addresses the
    driver handed Docker; those alone are withheld, ADDs are served from the rest, and once only they
    are left the answer names the pool and the socket (pool_withheld, never pool_exhausted)."""
    socket = docker_path
    endpoints: dict[str, str] = {}
    async with (
        fake_docker(lambda: [docker_network(CIDR, endpoints)], socket),
        running(make_agent(tmp_path, docker_socket=socket)) as agent,
    ):
        a = await add(agent, "a", tmp_path)
        ran(tmp_path, "a", a)
        _, pool = await post(agent, "/IpamDriver.RequestPool", request_pool(CIDR))
        for n in range(2):
            _, got = await post(agent, "/IpamDriver.RequestAddress", {"PoolID": pool["PoolID"]})
            endpoints[f"c{n}"] = got["Address"].split("/")[0]
    (tmp_path / "state" / "allocations.json").write_bytes(b"{garbage")
    docker = set(endpoints.values())
    agent = make_agent(tmp_path, docker_socket=socket)
    end = await hung_docker(socket)
    async with running(agent):
        ready, why = agent.readiness()
        assert ready and f"pool default: 2 withheld while Docker's API on {socket} does not answer" in why
        unread = {"source": "docker"}
        assert agent.metrics.sample("eni_ipam_agent_source_unread", unread) == 1  # the rebuild incomplete
        fresh = {await add(agent, f"new{n}", tmp_path) for n in range(10)}  # all 13 but a and Docker's 2
        assert not fresh & (docker | {a})
        error = await refused(agent, "one-more")
        assert error["code"] == "pool_withheld", error
        assert "pool default" in error["msg"] and f"Docker's API on {socket}" in error["msg"]
        ready, why = agent.readiness()
        assert not ready and why.startswith("pool default: no address can be handed out: 2 withheld")
        status, answer = await post(agent, "/v1/cni/status", {})
        assert status == 503 and answer["error"]["code"] == "pool_withheld"
        await end()
        async with fake_docker(lambda: [docker_network(CIDR, endpoints)], socket):  # dockerd answers
            await until(lambda: not agent.allocator.withheld(), limit=5)
            assert agent.metrics.sample("eni_ipam_agent_source_unread", unread) == 0
            assert {owners(agent)[d] for d in docker} == {f"libnetwork:{pool['PoolID']}"}
            assert (await refused(agent, "one-more"))["code"] == "pool_exhausted"  # now truly full
    assert (tmp_path / "state" / MIRROR).exists()  # what said which addresses were Docker's


# -- the pods of a Kubernetes node ------------------------------------------------------------------


async def test_an_address_a_pod_on_this_node_holds_is_never_handed_out(
    kube: FakeKube, tmp_path: Path
) -> None:
    """The state lost, and a pod's address in no runtime this agent reads (its libcni cache gone with
    the node's disk, say): the API server's pods say it is held."""
    pool = [f"10.0.0.{n}" for n in range(10, 13)]
    controller = make_api(kube)
    controller.allowed = frozenset(controller.allowed) | {("", "pods/status", "patch")}  # the kubelet's
    await controller.create(ENIPOOLS, {"metadata": {"name": "n1"}, "spec": {"instanceID": "i-1"}})
    await controller.patch(ENIPOOLS, "n1", {"status": enipool_status(pool)}, status=True)
    kube.add_object("namespaces", {"metadata": {"name": "ns"}})
    for name, node, ip in (("web", "n1", "10.0.0.10"), ("away", "n2", "10.0.0.11")):
        spec = {"nodeName": node, "containers": [{"name": "c", "image": "busybox:1"}]}
        status = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}
        kube.add_object("pods", {"metadata": {"name": name, "namespace": "ns"}, "spec": spec})
        await controller.patch(PODS, name, {"status": status}, namespace="ns", status=True)  # the kubelet
    try:
        async with running_agent(kube, tmp_path, sweep_interval="0s") as agent:  # no sweep: the start alone
            await until(lambda: agent.readiness()[0], limit=10)
            await until(lambda: agent.metrics.sample("eni_ipam_agent_source_unread", {"source": "pods"}) == 0)
            got = [agent.allocator.allocate_next(f"cni:p{n}:eth0")[0] for n in range(2)]
            assert sorted(a.address for a in got if a is not None) == ["10.0.0.11", "10.0.0.12"]
            with pytest.raises(Exception, match="withheld while a pod on this node holds them"):
                agent.allocator.allocate_next("cni:p3:eth0")
    finally:
        await controller.close()
