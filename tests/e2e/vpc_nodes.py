"""Two Kubernetes-like nodes in an emulated VPC, with the node datapath on: the topology of
``tests/e2e/test_datapath.py`` (and of ``bench/datapath_soak.py``, which runs that test's soak).

What :func:`built` makes, and removes on every way out:

* **The cloud**: the in-memory cloud (``providers/sim``'s ``SimCloud``): a VPC ``10.0.0.0/16`` with
  four subnets (``subnet-a`` … ``subnet-d``, ``10.0.1.0/24`` … ``10.0.4.0/24``) and two m5.xlarge
  instances (four interfaces of 15 addresses at most), each with three interfaces: device 0 in
  subnet-a, 1 in subnet-b, 2 in subnet-c, two secondary addresses each. The test plays the
  controller's part on it with the cloud's own EC2 operations (:class:`Controller`: addresses
  assigned, interfaces created, attached and detached), and writes each node's ENIPool status as
  the controller does: ``NodeStatus`` of the instance's attached interfaces rendered by
  ``eni_ipam.kube.resources.status_ops``, the JSON patch ``eni-ipam run`` sends.
* **The emulated VPC** (``eni_ipam_testkit.vpc``) built from the cloud (``VpcSpec.from_sim``), and
  following it (``update``) before a status names what changed: the router with EC2's
  source/destination check, the outside host, a namespace per node whose interfaces are veths with
  the cloud's MACs.
* **The fake API server** (``FakeKube``, the chart's ENIPool CRD), run on an event loop of its own
  (:class:`Loop`) in a thread of the test. It listens on the test's loopback; each node reaches it on
  its own loopback, through a forwarder whose listening socket is made in the node's namespace.
* **Per node**: a mount namespace of its own, where ``/var/lib/cni`` is the node's directory (libcni's
  cache is per host, and an agent's start adopts what it finds there: two nodes sharing it would
  take each other's pods); the agent (``eni-ipam-agent``, ``ip netns exec <node namespace>``, in that
  mount namespace) with the datapath on, its own state directory and socket, following its ENIPool;
  a private containerd driven over CRI, and podman with its CNI backend, both entered into the node's
  network and mount namespaces with ``nsenter`` (``ip netns exec`` remounts ``/sys``, without the
  cgroup hierarchy a runtime needs). Their network is the standard ``ptp`` plugin with
  ``ipam: {type: eni-ipam-cni, socket: <the node's agent socket>}``.

**Dual stack** (``built(dual=True)``; the default world has no IPv6 of the cloud's): each subnet has
its IPv6 /64 (:func:`ipv6_subnet`) in the cloud, each instance's device-1 interface a /80 of it
(``AssignIpv6Addresses``, as a pool with ``first_interface_index: 1`` would have it: pods of a
secondary interface, which only the datapath's rules get past the check); the emulated VPC routes
and checks them, and gives each node the IPv6 default route of EC2's router advertisements; the
agents run with ``ipv6: true`` and the pods' network asks for ``family: dual``, so every pod gets
an IPv4 address and an IPv6 address of its node's /80 (:attr:`Pod.ipv6`).

Pods are reached through their process (``/proc/<pid>/ns/net``), which names their network
namespace from any mount namespace. Probes (:func:`probe`) are one process per source: it connects
to every target's echo service at once and prints what each saw as the connection's source address.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import datetime
import ipaddress
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Coroutine, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
import yaml

from eni_ipam.core.clock import LoopClock
from eni_ipam.core.model import Interface, NodeStatus, PoolEntries, ReleaseState
from eni_ipam.kube.api import ENIPOOLS, KubeApi
from eni_ipam.kube.projection import project_pool
from eni_ipam.kube.resources import status_ops
from eni_ipam_testkit.fake_kube import FakeKube
from eni_ipam_testkit.vpc import EmulatedVpc, VpcSpec
from eni_ipam_testkit.vpc import missing as vpc_missing
from eni_ipam_testkit.vpc.probes import echo_server_argv
from providers.sim import SimCloud
from tests.conftest import CRD
from tests.e2e.cri import RuntimeService
from tests.e2e.dockerd import host_paths_restored, terminate
from tests.e2e.test_containerd import (
    PAUSE_IMAGE,
    merge,
    overlay_works,
    pause_image,
    processes_of,
    sandbox_settings,
    toml_document,
)
from tests.e2e.test_node_runtimes import (
    CNI_DIR,
    VENV_BIN,
    build_plugin,
    busybox_image,
    run,
    sandbox_containers_conf,
    tail,
    toml,
)
from tests.kube.conftest import make_api

T = TypeVar("T")

VPC_CIDR = "10.0.0.0/16"
SUBNETS = {
    "subnet-a": "10.0.1.0/24",
    "subnet-b": "10.0.2.0/24",
    "subnet-c": "10.0.3.0/24",
    "subnet-d": "10.0.4.0/24",
}
INSTANCE_TYPE = "m5.xlarge"
"""Four interfaces of 15 addresses: three attached at first, room for one more."""
NODES = {"n1": "i-1", "n2": "i-2"}
FIRST_INTERFACES = (("subnet-a", 0), ("subnet-b", 1), ("subnet-c", 2))
"""Each instance's interfaces at first: (subnet, device index)."""
SECONDARIES = 2
"""Secondary addresses per interface at first."""
IPV6_DEVICE = 1
"""The device index of the interface that holds each node's IPv6 /80 in a dual-stack world."""
NETWORK = "eni-pods"
# The datapath's documented numbers (eni_ipam/agent/datapath/plan.py), written out: the test reads
# the kernel's tables against them.
ROUTE_TABLE_BASE = 30_000
PRIORITIES = {"to": 512, "mark": 1024, "from": 1536}
PROTOCOL = "234"
SNAT_MARK = 0x80
ECHO_PORT = 7
PROBE_TIMEOUT = 2.0
"""Seconds a probe expected to pass may take (a first packet may wait for its neighbour entries)."""
CONTAINERD_NAMESPACE = "k8s.io"
IMAGE = "eni-e2e-busybox:latest"
RUN_NETNS = Path("/run/netns")
CRI = "io.containerd.grpc.v1.cri"


def conflist(socket_path: Path, *, dual: bool = False) -> dict[str, Any]:
    """The pods' network on every node: ``ptp`` makes the veth pair and the host route; the address
    (with its subnet's prefix, and the subnet's fourth address as gateway, which ``ptp`` puts on the
    host's end) comes from the node's agent, which adds the pod's rules before it answers. With
    ``dual``, an IPv6 address too (of the node's /80, its first address the gateway)."""
    ipam: dict[str, Any] = {"type": "eni-ipam-cni", "socket": str(socket_path)}
    if dual:
        ipam["family"] = "dual"
    return {
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "plugins": [
            {
                "type": "ptp",
                "ipMasq": False,
                "ipam": ipam,
            }
        ],
    }


def agent_config(node: NodeHost) -> dict[str, Any]:
    """The agent of a Kubernetes node with the datapath on; the sweep off: the fake API server has no
    Pods, so the sweep's judge (by pod UID) would release every address (its own test is elsewhere).
    A dual-stack node's agent hands out IPv6 addresses too (``ipv6: true``)."""
    config: dict[str, Any] = {
        "node_source": "kubernetes",
        "kubernetes": {"kubeconfig": str(node.kubeconfig)},
        "socket": str(node.socket),
        "state_dir": str(node.root / "state"),
        "server": {"host": "127.0.0.1", "port": 0, "probe_port": 0},
        "claims": False,
        "sweep_interval": "0s",
        "report_interval": "200ms",
        "datapath": {"enabled": True, "vpc_cidrs": [VPC_CIDR], "interval": "2s"},
    }
    if node.ipv6:
        config["ipv6"] = True
    return config


# --- skipping ----------------------------------------------------------------------------------------


def require_host() -> None:
    """Skip, saying why, unless this host can build the topology."""
    reason = vpc_missing()
    if reason is not None:
        pytest.skip(reason)
    for tool in ("nsenter", "unshare", "mount", "umount"):
        if shutil.which(tool) is None:
            pytest.skip(f"the {tool} command is missing")
    for tool in ("containerd", "ctr", "podman"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (make node-runtimes)")
    for plugin in ("ptp", "loopback"):
        if not (CNI_DIR / plugin).is_file():
            pytest.skip(f"{CNI_DIR / plugin} is missing (apt-get install containernetworking-plugins)")
    probe = f"eni-dp-{uuid.uuid4().hex[:8]}"
    added = run(["ip", "netns", "add", probe], check=False, timeout=10)
    if added.returncode != 0:
        pytest.skip(f"no network namespaces here: ip netns add: {added.stderr.strip()}")
    run(["ip", "netns", "del", probe], check=False, timeout=10)


# --- an event loop of the test's own -----------------------------------------------------------------


class Loop:
    """An asyncio loop in a thread: the fake API server, the forwarders, the cloud's operations and
    the controller's writes run there while the test itself blocks on processes."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="vpc-nodes-loop", daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        """Cancel what still runs on the loop (relays of connections a client never closed), then stop."""

        async def cancelled() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.run(cancelled(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()


_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000


def listening_socket_in(netns: str) -> socket.socket:
    """A TCP socket listening on 127.0.0.1 (any port) of the named network namespace: made by a
    thread that enters the namespace (a socket stays in the namespace it was made in)."""
    made: list[socket.socket] = []
    failed: list[BaseException] = []

    def inside() -> None:
        try:
            fd = os.open(RUN_NETNS / netns, os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns into {netns}")
            finally:
                os.close(fd)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sock.listen(64)
            sock.setblocking(False)
            made.append(sock)
        except BaseException as exc:  # handed to the caller
            failed.append(exc)

    thread = threading.Thread(target=inside)  # ends with its namespace: no other thread is touched
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]


async def forward(sock: socket.socket, port: int) -> asyncio.Server:
    """Serve ``sock`` by relaying every connection to 127.0.0.1:``port`` of the test's namespace."""

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            pass

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                w.close()

    return await asyncio.start_server(relay, sock=sock)


# --- the controller's part ---------------------------------------------------------------------------


@dataclasses.dataclass
class Controller:
    """The in-memory cloud, the emulated VPC following it, and the ENIPools' statuses written from it
    as the controller writes them (``status_ops``: one JSON patch of the controller's fields)."""

    loop: Loop
    cloud: SimCloud
    kube: FakeKube
    api: KubeApi
    vpc: EmulatedVpc | None = None
    dual: bool = False
    """The cloud holds IPv6 (each subnet's /64, each device-1 interface's /80): read as it is."""
    release: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    """Addresses marked for release, by node."""

    def interfaces(self, node: str) -> tuple[Interface, ...]:
        """The instance's attached interfaces, as the cloud reports them."""
        return tuple(self.cloud.instance_view(NODES[node]).interfaces)

    def spec(self) -> VpcSpec:
        """The VPC as the cloud holds it, with IPv6 added (the in-memory cloud has none): each subnet
        ``10.0.N.0/24`` has ``2600:1f14:0:N::/64``, each interface one address of it
        (:func:`ipv6_of`), so that the check covers IPv6 too. In a dual-stack world, the cloud's own
        IPv6 (its subnets' blocks, its interfaces' /80s), as it holds it."""
        spec = VpcSpec.from_sim(self.cloud, NODES, vpc_cidrs=[VPC_CIDR])
        if self.dual:
            return spec
        subnets = tuple(dataclasses.replace(s, ipv6_cidr=ipv6_subnet(s.cidr)) for s in spec.subnets)
        nodes = tuple(
            dataclasses.replace(
                n,
                interfaces=tuple(
                    dataclasses.replace(i, addresses=(*i.addresses, ipv6_of(i.primary_ip)))
                    for i in n.interfaces
                ),
            )
            for n in spec.nodes
        )
        return VpcSpec(cidrs=spec.cidrs, subnets=subnets, nodes=nodes)

    def follow(self) -> None:
        """The emulated VPC made the cloud's again."""
        assert self.vpc is not None
        self.vpc.update(self.spec())

    def publish(self, node: str) -> None:
        """Write the node's ENIPool status from the cloud, as the controller does after a pass."""
        interfaces = self.interfaces(node)
        status = NodeStatus(
            pool=PoolEntries(interfaces),
            interfaces=interfaces,
            subnets={i.subnet_id: SUBNETS[i.subnet_id] for i in interfaces},
            release=dict.fromkeys(sorted(self.release.get(node, ())), ReleaseState.MARKED),
        )

        async def write() -> None:
            current = await self.api.get(ENIPOOLS, node, status=True)
            ops = status_ops(status, project_pool(current), now=datetime.datetime.now(datetime.UTC))
            if ops:
                await self.api.json_patch(ENIPOOLS, node, ops, status=True)

        self.loop.run(write())

    def pool(self, node: str) -> dict[str, Any]:
        return self.loop.run(self.api.get(ENIPOOLS, node, status=True))

    def answers(self, node: str) -> dict[str, str]:
        """The agent's answers to the release marks (``status.releaseAnswers``)."""
        return dict((self.pool(node).get("status") or {}).get("releaseAnswers") or {})

    def assign(self, node: str, device_index: int, count: int) -> list[str]:
        """More secondary addresses on an interface: in the cloud, the VPC, then the status."""
        (iface,) = [i for i in self.interfaces(node) if i.device_index == device_index]
        added = self.loop.run(
            self.cloud.assign_private_ip_addresses(interface_id=iface.id, secondary_count=count)
        )
        self.follow()
        self.publish(node)
        return list(added)

    def attach(self, node: str, subnet: str, device_index: int, count: int) -> Interface:
        """A new interface with ``count`` secondary addresses, attached: in the cloud, the VPC (its
        device appears in the node's namespace), then the status."""

        async def make() -> str:
            iface = await self.cloud.create_network_interface(
                subnet_id=subnet, groups=["sg-1"], secondary_count=count
            )
            await self.cloud.attach_network_interface(
                interface_id=iface.id, instance_id=NODES[node], device_index=device_index
            )
            return iface.id

        interface_id = self.loop.run(make())
        self.follow()
        self.publish(node)
        (attached,) = [i for i in self.interfaces(node) if i.id == interface_id]
        return attached

    def mark(self, node: str, addresses: Iterable[str]) -> None:
        """Mark addresses for release (the handshake's first step): the agent hands none out again."""
        self.release.setdefault(node, set()).update(addresses)
        self.publish(node)

    def detach(self, node: str, interface_id: str) -> None:
        """Detach an interface whose addresses were all answered ready-for-release: in the cloud, the
        VPC (its device leaves the node), then the status without it or its marks."""
        (iface,) = [i for i in self.interfaces(node) if i.id == interface_id]
        self.loop.run(self.cloud.detach_network_interface(attachment_id=iface.attachment_id))
        self.release[node] = self.release.get(node, set()) - set(iface.addresses)
        self.follow()
        self.publish(node)


def ipv6_subnet(cidr: str) -> str:
    """The IPv6 /64 of the subnet ``10.0.N.0/24``: ``2600:1f14:0:N::/64``."""
    return f"2600:1f14:0:{ipaddress.ip_network(cidr).network_address.packed[2]:x}::/64"


def ipv6_of(primary_ip: str) -> str:
    """The IPv6 address of the interface whose primary address is ``10.0.N.H``: ``2600:1f14:0:N::H``."""
    octets = ipaddress.ip_address(primary_ip).packed
    return f"2600:1f14:0:{octets[2]:x}::{octets[3]:x}"


async def _cloud(*, dual: bool = False) -> SimCloud:
    cloud = SimCloud(LoopClock())
    cloud.add_vpc("vpc-1", VPC_CIDR)
    for subnet, cidr in SUBNETS.items():
        if dual:
            cloud.add_subnet(subnet, vpc="vpc-1", zone="z1", cidr=cidr, ipv6_cidr=ipv6_subnet(cidr))
        else:
            cloud.add_subnet(subnet, vpc="vpc-1", zone="z1", cidr=cidr)
    cloud.add_security_group("sg-1", vpc="vpc-1")
    interfaces = [
        {"index": index, "subnet": subnet, "secondary_ips": SECONDARIES} for subnet, index in FIRST_INTERFACES
    ]
    for instance in NODES.values():
        cloud.add_instance(
            instance, type=INSTANCE_TYPE, subnet="subnet-a", security_groups=["sg-1"], interfaces=interfaces
        )
        if dual:
            (eth1,) = [i for i in cloud.instance_view(instance).interfaces if i.device_index == IPV6_DEVICE]
            await cloud.assign_ipv6_addresses(interface_id=eth1.id, prefix_count=1)
    return cloud


# --- a node ------------------------------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class Pod:
    node: str
    runtime: str
    """``containerd`` or ``podman``."""
    id: str
    address: str
    pid: int
    ipv6: str = ""
    """Its IPv6 address, on a dual-stack node (:func:`pod_ipv6_address`)."""

    @property
    def netns(self) -> str:
        return f"/proc/{self.pid}/ns/net"

    @property
    def owner(self) -> str:
        return f"cni:{self.id}:eth0"

    def __str__(self) -> str:
        return f"{self.node}/{self.runtime} {self.address}"


class TryAgain(RuntimeError):
    """A start or stop the plugin said to try again later (CNI code 11): the agent down or not ready
    yet (restarted a moment ago), or every address of its pool taken or withheld."""


@dataclasses.dataclass(eq=False)
class NodeHost:
    """One node: its namespaces, its agent, its containerd and its podman."""

    name: str
    netns: str
    root: Path
    mount_ns: Path
    plugin: Path
    image_tar: Path
    kubeconfig: Path = Path()
    agent: subprocess.Popen[bytes] | None = None
    containerd: subprocess.Popen[bytes] | None = None
    cri: RuntimeService | None = None
    podman_cli: list[str] = dataclasses.field(default_factory=list)
    podman_env: dict[str, str] = dataclasses.field(default_factory=dict)
    echo: dict[str, subprocess.Popen[str]] = dataclasses.field(default_factory=dict)
    """The echo service of each pod (by pod id) and of the node (``""``)."""
    ipv6: bool = False
    """A dual-stack node: its agent hands out IPv6 addresses, its pods ask for both families."""

    @property
    def socket(self) -> Path:
        return self.root / "run" / "agent.sock"

    @property
    def log(self) -> Path:
        return self.root / "agent.log"

    def enter(self) -> list[str]:
        """A command prefix entering the node's network and mount namespaces."""
        return ["nsenter", f"--mount={self.mount_ns}", f"--net={RUN_NETNS / self.netns}", "--"]

    def sh(self, *argv: str, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """A command in the node's network namespace."""
        return run(["ip", "netns", "exec", self.netns, *argv], check=check, timeout=timeout)

    # -- the agent --

    def start_agent(self, *, timeout: float = 60.0) -> None:
        """Start the agent and wait until it serves ADDs (the pool seen, the datapath reconciled)."""
        assert self.agent is None or self.agent.poll() is not None, "the agent is running"
        config = self.root / "agent.yaml"
        config.write_text(yaml.safe_dump(agent_config(self)))
        argv = [
            "nsenter", f"--mount={self.mount_ns}", "--",
            "ip", "netns", "exec", self.netns,
            str(VENV_BIN / "eni-ipam-agent"), "--node", self.name, "--config", str(config),
        ]  # fmt: skip
        with self.log.open("ab") as log:
            self.agent = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        deadline = time.perf_counter() + timeout
        while True:
            if self.agent.poll() is not None:
                raise AssertionError(
                    f"{self.name}: the agent exited ({self.agent.returncode}):\n{tail(self.log)}"
                )
            with contextlib.suppress(OSError, ValueError):
                code, _ = unix_request(self.socket, "POST", "/v1/cni/status", {}, timeout=5)
                if code == 200:
                    return
            if time.perf_counter() > deadline:
                raise AssertionError(
                    f"{self.name}: the agent not ready within {timeout:g}s:\n{tail(self.log)}"
                )
            time.sleep(0.1)

    def kill_agent(self) -> None:
        """SIGKILL, as a crash: its socket file stays behind."""
        assert self.agent is not None and self.agent.poll() is None, f"{self.name}: the agent is not running"
        self.agent.kill()
        self.agent.wait(10)

    def stop_agent(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
            try:
                self.agent.wait(30)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait(10)

    def pause_agent(self, paused: bool) -> None:
        assert self.agent is not None and self.agent.poll() is None
        self.agent.send_signal(signal.SIGSTOP if paused else signal.SIGCONT)

    def allocations(self) -> dict[str, dict[str, Any]]:
        """The agent's allocations of the node's pool: address → its allocation (``GET /v1/status``)."""
        code, body = unix_request(self.socket, "GET", "/v1/status", None)
        assert code == 200, body
        return {a["address"]: a for a in body["allocations"] if a["pool"] == "default"}

    def release(self, owner: str) -> None:
        """A DEL through the agent's API (what a runtime's retried DEL does)."""
        container, _, ifname = owner.removeprefix("cni:").rpartition(":")
        code, body = unix_request(
            self.socket, "POST", "/v1/cni/del", {"containerID": container, "ifname": ifname}
        )
        assert code == 200, body

    # -- pods --

    def run_sandbox(self) -> Pod:
        """A pod sandbox started by containerd over CRI, as the kubelet asks for one.

        Raises:
            TryAgain: RunPodSandbox failed as the plugin said to try again later.
        """
        assert self.cri is not None
        name = f"pod-{uuid.uuid4().hex[:8]}"
        try:
            sandbox = self.cri.run_pod_sandbox(name=name, uid=str(uuid.uuid4()), namespace="e2e", timeout=120)
        except grpc.RpcError as exc:
            raise _refused(f"{self.name}: RunPodSandbox", str(exc.details())) from None
        status = self.cri.pod_sandbox_status(sandbox)
        assert status.pid, f"{self.name}: containerd reports no process for sandbox {sandbox[:12]}"
        ipv6 = pod_ipv6_address(status.pid) if self.ipv6 else ""
        return Pod(self.name, "containerd", sandbox, pod_address(status.pid), status.pid, ipv6)

    def stop_sandbox(self, pod: Pod) -> None:
        """StopPodSandbox and RemovePodSandbox, as the kubelet removes a pod.

        Raises:
            TryAgain: the DEL could not reach the agent (the kubelet calls again).
        """
        assert self.cri is not None
        try:
            self.cri.stop_pod_sandbox(pod.id, timeout=60)
            self.cri.remove_pod_sandbox(pod.id, timeout=60)
        except grpc.RpcError as exc:
            raise _refused(f"{self.name}: StopPodSandbox {pod.id[:12]}", str(exc.details())) from None

    def podman(
        self, *args: str, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        return run([*self.podman_cli, *args], env=self.podman_env, check=check, timeout=timeout)

    def run_container(self, ip: str | None = None) -> Pod:
        """A podman container on the node's network, at ``ip`` when given.

        Raises:
            TryAgain: the plugin said to try again later (the container is removed).
        """
        name = f"c-{uuid.uuid4().hex[:8]}"
        wanted = ["--ip", ip] if ip else []
        done = self.podman("run", "-d", "--name", name, *wanted, IMAGE, "sleep", "3600", check=False)
        if done.returncode != 0:
            self.podman("rm", "-f", "-t", "0", name, check=False)
            raise _refused(f"{self.name}: podman run", done.stderr.strip()[-600:])
        cid = done.stdout.strip()
        pid = int(self.podman("inspect", "-f", "{{.State.Pid}}", cid).stdout.strip())
        return Pod(
            self.name, "podman", cid, pod_address(pid), pid, pod_ipv6_address(pid) if self.ipv6 else ""
        )

    def remove_container(self, pod: Pod) -> None:
        """``podman rm -f``: podman runs the DEL once, and never again if it fails."""
        done = self.podman("rm", "-f", "-t", "0", pod.id, check=False)
        assert done.returncode == 0, f"{self.name}: podman rm {pod.id[:12]}: {done.stderr.strip()}"

    def start_pod(self, runtime: str, ip: str | None = None) -> Pod:
        return self.run_sandbox() if runtime == "containerd" else self.run_container(ip)

    def stop_pod(self, pod: Pod) -> None:
        self.stop_echo(pod.id)
        if pod.runtime == "containerd":
            self.stop_sandbox(pod)
        else:
            self.remove_container(pod)

    def serve_echo(self, pod: Pod | None = None) -> None:
        """The echo service (the peer's address back) in the pod's namespace, or the node's."""
        where = [f"--net={pod.netns}"] if pod is not None else [f"--net={RUN_NETNS / self.netns}"]
        process = subprocess.Popen(
            ["nsenter", *where, "--", *echo_server_argv(ECHO_PORT)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 10)
        if not (ready and process.stdout.readline().strip() == "ready"):
            process.kill()
            raise AssertionError(
                f"the echo service in {pod or self.name} did not start: {process.communicate()[1]}"
            )
        self.echo[pod.id if pod is not None else ""] = process

    def stop_echo(self, key: str) -> None:
        process = self.echo.pop(key, None)
        if process is not None:
            process.kill()
            process.communicate()

    # -- the datapath as the node holds it --

    def ip_batch(
        self, lines: Iterable[str], *, check: bool = True, family: str = ""
    ) -> subprocess.CompletedProcess[str]:
        """``ip -batch`` in the node's network namespace (one command a line, without the ``ip``);
        ``family``: ``-4`` or ``-6`` for every line."""
        argv = [
            "ip",
            "-n",
            self.netns,
            *([family] if family else []),
            *([] if check else ["-force"]),
            "-batch",
            "-",
        ]
        done = subprocess.run(
            argv, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0 or not check, f"{self.name}: ip -batch: {done.stderr.strip()}"
        return done

    def ip_json(self, *args: str) -> list[dict[str, Any]]:
        out = self.sh("ip", "-j", *args).stdout
        return json.loads(out) if out.strip() else []

    def nft_table(self) -> str:
        """``nft list table ip eni_ipam`` (empty: no such table)."""
        done = self.sh("nft", "list", "table", "ip", "eni_ipam", check=False)
        return done.stdout if done.returncode == 0 else ""


def _refused(what: str, details: str) -> Exception:
    """TryAgain when the plugin said to try again later (code 11), else an AssertionError with what
    the runtime said."""
    transient = (
        "the eni-ipam agent is not reachable",
        "agent error not_ready",
        "agent error pool_exhausted",
        "agent error pool_withheld",
    )
    if any(t in details for t in transient):
        return TryAgain(f"{what}: {details}")
    return AssertionError(f"{what} failed: {details}")


def pod_address(pid: int) -> str:
    """The IPv4 address on eth0 in the process's network namespace: one address of its subnet's
    prefix, whose default route is the subnet's fourth address (the pods' gateway on the host)."""
    return _pod_eth0(pid, "-4", gateway_offset=3)


def pod_ipv6_address(pid: int) -> str:
    """The global IPv6 address on eth0 in the process's network namespace (a dual-stack pod's): one
    address of its node's /80, whose default route is the /80's first address (the pods' IPv6
    gateway, on the host's end of the veth)."""
    return _pod_eth0(pid, "-6", gateway_offset=1)


def _pod_eth0(pid: int, family: str, *, gateway_offset: int) -> str:
    """The one global address of ``family`` on the pod's eth0, its default route checked to go
    through its network's address ``gateway_offset``."""
    enter = ["nsenter", f"--net=/proc/{pid}/ns/net", "ip", "-j", family]
    shown = json.loads(run([*enter, "addr", "show", "dev", "eth0", "scope", "global"], timeout=30).stdout)
    # ip -j lists the addresses the scope filters out as empty objects.
    found = [
        (a["local"], a["prefixlen"]) for link in shown for a in link.get("addr_info", []) if "local" in a
    ]
    assert len(found) == 1, f"pid {pid}: eth0 holds {found}, not one {family} address"
    address, prefix = found[0]
    gateway = str(ipaddress.ip_network(f"{address}/{prefix}", strict=False).network_address + gateway_offset)
    routes = json.loads(run([*enter, "route", "show", "default"], timeout=30).stdout)
    assert [r.get("gateway") for r in routes] == [gateway], f"pid {pid} ({address}): default routes {routes}"
    return str(address)


def unix_request(path: Path, method: str, target: str, body: Any, timeout: float = 10.0) -> tuple[int, Any]:
    """One HTTP/1.0 request on a unix socket: (status, JSON body)."""
    payload = b"" if body is None else json.dumps(body).encode()
    head = f"{method} {target} HTTP/1.0\r\nHost: localhost\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall(head.encode() + b"\r\n" + payload)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    raw_head, _, raw_body = b"".join(chunks).partition(b"\r\n\r\n")
    return int(raw_head.split(b" ", 2)[1]), json.loads(raw_body or b"null")


# --- probes ------------------------------------------------------------------------------------------

_CLIENT = """
import json, socket, sys, threading
timeout = float(sys.argv[1])
seen = {}
def probe(target):
    host, port = target.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as s:
            s.settimeout(timeout)
            data = b""
            while not data.endswith(b"\\n"):
                chunk = s.recv(256)
                if not chunk:
                    break
                data += chunk
        seen[target] = data.decode().strip() or None
    except OSError:
        seen[target] = None
threads = [threading.Thread(target=probe, args=(t,)) for t in sys.argv[2:]]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(seen))
"""


def probe(netns: str, addresses: Iterable[str], *, timeout: float = PROBE_TIMEOUT) -> dict[str, str | None]:
    """From the network namespace ``netns`` (a path), connect to the echo service of every address at
    once: address → the source address the far end saw, or None when it could not be reached."""
    targets = [f"{a}:{ECHO_PORT}" for a in addresses]
    if not targets:
        return {}
    argv = [
        "nsenter",
        f"--net={netns}",
        "--",
        sys.executable,
        "-I",
        "-S",
        "-c",
        _CLIENT,
        f"{timeout:g}",
        *targets,
    ]
    done = run(argv, timeout=timeout + 30)
    seen: dict[str, str | None] = json.loads(done.stdout)
    return {target.rsplit(":", 1)[0]: source for target, source in seen.items()}


# --- the datapath, expected and found ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Found:
    """What the node holds of the datapath, and what it should hold, in comparable lines."""

    rules: frozenset[str]
    routes: frozenset[str]
    snat: tuple[str, ...]
    """What is wrong with the SNAT table (empty: it is as it should be)."""
    expected_rules: frozenset[str]
    expected_routes: frozenset[str]

    def without(self, addresses: Iterable[str]) -> Found:
        """The same, not judging the rules of ``addresses``."""
        skipped = set(addresses)
        return dataclasses.replace(
            self,
            rules=frozenset(r for r in self.rules if rule_address(r) not in skipped),
            expected_rules=frozenset(r for r in self.expected_rules if rule_address(r) not in skipped),
        )

    def problems(self) -> list[str]:
        out = [f"stale rule: {r}" for r in sorted(self.rules - self.expected_rules)]
        out += [f"missing rule: {r}" for r in sorted(self.expected_rules - self.rules)]
        out += [f"stale route: {r}" for r in sorted(self.routes - self.expected_routes)]
        out += [f"missing route: {r}" for r in sorted(self.expected_routes - self.routes)]
        return out + [f"SNAT: {s}" for s in self.snat]


_RULE_ADDRESS = re.compile(r"(?:to|from) (\S+) lookup")


def rule_address(line: str) -> str:
    """The pod address a rule line names (empty for the mark rule)."""
    match = _RULE_ADDRESS.search(line)
    return match[1] if match else ""


def table_of(iface: Interface) -> int:
    return ROUTE_TABLE_BASE + 100 * iface.network_card + iface.device_index


def _rule_line(rule: Mapping[str, Any]) -> str:
    table = str(rule.get("table"))
    table = {"254": "main"}.get(table, table)
    if rule.get("fwmark"):
        mark, _, mask = str(rule["fwmark"]).partition("/")
        mask = mask or str(rule.get("fwmask") or mark)
        selector = f"fwmark {int(mark, 16):#x}/{int(mask, 16):#x}"
    elif rule.get("src", "all") != "all":
        selector = f"from {rule['src']}"
    else:
        selector = f"to {rule.get('dst')}"
    return f"{rule.get('priority')}: {selector} lookup {table}"


def _route_line(route: Mapping[str, Any]) -> str:
    via = f" via {route['gateway']}" if route.get("gateway") else ""
    src = f" src {route['prefsrc']}" if route.get("prefsrc") else ""
    return f"table {route.get('table')}: {route.get('dst')}{via} dev {route.get('dev')}{src}"


def inspect_datapath(
    host: NodeHost, vpc: EmulatedVpc, interfaces: Iterable[Interface], held: Mapping[str, str]
) -> Found:
    """The node's rules, routes and SNAT table of the datapath (protocol 234, table ``ip eni_ipam``)
    against what ``held`` (address → interface id: the agent's allocations) and the pool's
    ``interfaces`` need. On a dual-stack node, IPv6 rules too, and the IPv6 default route of the
    table of each interface with a /80."""
    attached = {i.id: i for i in interfaces}
    primary = next(i for i in attached.values() if i.device_index == 0 and i.network_card == 0)
    expected_rules = {f"{PRIORITIES['mark']}: fwmark {SNAT_MARK:#x}/{SNAT_MARK:#x} lookup main"}
    for address, interface_id in held.items():
        expected_rules.add(f"{PRIORITIES['to']}: to {address} lookup main")
        iface = attached.get(interface_id)
        if iface is not None and iface is not primary:
            expected_rules.add(f"{PRIORITIES['from']}: from {address} lookup {table_of(iface)}")
    expected_routes = set()
    for iface in attached.values():
        if iface is primary:
            continue
        device, table = vpc.device(iface.id), table_of(iface)
        cidr = SUBNETS[iface.subnet_id]
        router = str(ipaddress.ip_network(cidr).network_address + 1)
        expected_routes.add(f"table {table}: {cidr} dev {device} src {iface.primary_ip}")
        expected_routes.add(f"table {table}: default via {router} dev {device}")
        if iface.ipv6_prefixes:  # a dual-stack interface: its IPv6 pods leave through it too
            expected_routes.add(f"table {table}: default via fe80::1 dev {device}")
    families = ("-4", "-6") if host.ipv6 else ("-4",)
    rules = {
        _rule_line(r)
        for family in families
        for r in host.ip_json(family, "rule", "show")
        if str(r.get("protocol")) == PROTOCOL
    }
    routes = {
        _route_line(r)
        for family in ("-4", "-6")
        for r in host.ip_json(family, "route", "show", "table", "all", "proto", PROTOCOL)
    }
    table = host.nft_table()
    snat = []
    if not table:
        snat.append("the table ip eni_ipam is missing")
    else:
        snat_rule = re.compile(
            rf'oifname "{vpc.device(primary.id)}" snat (ip )?to {re.escape(primary.primary_ip)}\n'
        )
        if not snat_rule.search(table):
            snat.append(f"no rule SNATs to {primary.primary_ip} leaving through {vpc.device(primary.id)}")
        if VPC_CIDR not in table:
            snat.append(f"the VPC's {VPC_CIDR} is not kept from SNAT")
        pods = [a for a in held if a in table]
        snat += [f"the table names pod address {a}" for a in pods]
    return Found(
        frozenset(rules),
        frozenset(routes),
        tuple(snat),
        frozenset(expected_rules),
        frozenset(expected_routes),
    )


# --- the world ---------------------------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class World:
    loop: Loop
    controller: Controller
    vpc: EmulatedVpc
    nodes: dict[str, NodeHost]
    root: Path
    pods: list[Pod] = dataclasses.field(default_factory=list)
    """Every pod running now."""

    def interface_of(self, node: str, address: str) -> Interface | None:
        for iface in self.controller.interfaces(node):
            if address in iface.addresses:
                return iface
        return None

    def start(self, node: str, runtime: str, ip: str | None = None, *, echo: bool = False) -> Pod:
        host = self.nodes[node]
        pod = host.start_pod(runtime, ip)
        self.pods.append(pod)
        if echo:
            host.serve_echo(pod)
        return pod

    def stop(self, pod: Pod) -> None:
        self.nodes[pod.node].stop_pod(pod)
        with contextlib.suppress(ValueError):
            self.pods.remove(pod)

    def check_datapath(self, node: str) -> list[str]:
        """What the node's datapath holds that the agent's allocations do not need, and what they need
        that it lacks (empty: exactly what is needed)."""
        host = self.nodes[node]
        before = {
            a: alloc["interfaceID"] for a, alloc in host.allocations().items() if host.ipv6 or ":" not in a
        }
        interfaces = self.controller.interfaces(node)
        found = inspect_datapath(host, self.vpc, interfaces, before)
        after = {
            a: alloc["interfaceID"] for a, alloc in host.allocations().items() if host.ipv6 or ":" not in a
        }
        # Pods started or stopped while the node was read: only what was held (or free) throughout
        # is judged.
        return found.without(set(before) ^ set(after)).problems()

    def exact(self, limit: float = 15.0) -> dict[str, list[str]]:
        """Wait until every node's datapath is exactly what its held addresses need; what is wrong
        (by node) after ``limit`` seconds, empty when nothing is."""
        deadline = time.perf_counter() + limit
        while True:
            wrong = {n: p for n in self.nodes if (p := self.check_datapath(n))}
            if not wrong or time.perf_counter() > deadline:
                return wrong
            time.sleep(0.5)


@contextlib.contextmanager
def built(*, dual: bool = False) -> Iterator[World]:
    """The topology (module description), removed on the way out whatever happened; with ``dual``,
    the dual-stack world (IPv6 in the cloud, the VPC, the agents and the pods' network)."""
    require_host()
    root = Path(tempfile.mkdtemp(prefix="eni-dp-"))
    loop = Loop()
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, root, ignore_errors=True)
        stack.callback(loop.close)
        # What the runtimes make on the host whatever their roots (and libcni's directory, which each
        # node's mount namespace covers with its own).
        leftovers = [
            "/var/lib/cni",
            "/run/containerd/s",
            "/run/containerd/runc/k8s.io",
            "/run/containerd/runc",
        ]
        stack.enter_context(host_paths_restored(*map(Path, [*leftovers, "/run/containerd"])))
        Path("/var/lib/cni").mkdir(parents=True, exist_ok=True)

        cloud = loop.run(_cloud(dual=dual))
        kube = FakeKube()
        loop.run(kube.start())
        stack.callback(lambda: loop.run(kube.close()))
        loop.run(kube.apply_manifest(yaml.safe_load(CRD.read_text())))
        api = loop.run(_api(kube))
        stack.callback(lambda: loop.run(api.close()))
        controller = Controller(loop, cloud, kube, api, dual=dual)
        for node, instance in NODES.items():
            loop.run(api.create(ENIPOOLS, {"metadata": {"name": node}, "spec": {"instanceID": instance}}))

        # The default world's nodes configure IPv6 by hand (test_datapath.py): no advertised route.
        vpc = stack.enter_context(EmulatedVpc(controller.spec(), router_advertisements=dual))
        controller.vpc = vpc
        print(f"emulated VPC {vpc.prefix} (device order seed {vpc.seed})")
        for node in NODES:
            controller.publish(node)

        plugin_dir = root / "cni-bin"
        plugin_dir.mkdir()
        build_plugin(plugin_dir / "eni-ipam-cni")
        image_tar = busybox_image(root / "image")
        namespaces = root / "mnt"
        namespaces.mkdir()
        run(["mount", "--bind", namespaces, namespaces])
        stack.callback(run, ["umount", "-l", namespaces], check=False)
        run(["mount", "--make-private", namespaces])

        nodes: dict[str, NodeHost] = {}
        world = World(loop, controller, vpc, nodes, root)
        for node in NODES:
            host = nodes[node] = NodeHost(
                name=node,
                netns=vpc.node_ns(node),
                root=root / node,
                mount_ns=namespaces / node,
                plugin=plugin_dir / "eni-ipam-cni",
                image_tar=image_tar,
                ipv6=dual,
            )
            stack.enter_context(node_running(host, world))
        yield world


async def _api(kube: FakeKube) -> KubeApi:
    return make_api(kube)


@contextlib.contextmanager
def node_running(host: NodeHost, world: World) -> Iterator[NodeHost]:
    """The node's mount namespace, agent, containerd and podman; all stopped and removed after."""
    with contextlib.ExitStack() as stack:
        cni_state = host.root / "var-lib-cni"
        (cni_state / "results").mkdir(parents=True)
        host.mount_ns.touch()
        run(["unshare", f"--mount={host.mount_ns}", "--propagation", "slave",
             "mount", "--bind", cni_state, "/var/lib/cni"])  # fmt: skip
        stack.callback(run, ["umount", "-l", host.mount_ns], check=False)

        sock = listening_socket_in(host.netns)
        port = sock.getsockname()[1]
        server = world.loop.run(forward(sock, _port(world.controller.kube)))
        stack.callback(lambda: world.loop.run(_closed(server)))
        kubeconfig = world.controller.kube.kubeconfig()
        kubeconfig["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
        host.kubeconfig = host.root / "kubeconfig"
        host.kubeconfig.write_text(yaml.safe_dump(kubeconfig))
        host.kubeconfig.chmod(0o600)

        stack.callback(_stop_agent, host)
        host.start_agent()
        start_containerd(host, stack)
        start_podman(host, stack)
        stack.callback(_stop_pods, host, world)
        host.serve_echo()
        yield host


def _port(kube: FakeKube) -> int:
    return int(kube.url.rsplit(":", 1)[1])


async def _closed(server: asyncio.Server) -> None:
    server.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(server.wait_closed(), 5)


def _stop_pods(host: NodeHost, world: World) -> None:
    """The node's pods, with the agent up so that their DELs succeed, and its echo services."""
    with contextlib.suppress(AssertionError):
        if host.agent is None or host.agent.poll() is not None:
            host.start_agent()
        elif host.agent is not None:
            host.pause_agent(False)  # SIGCONT: harmless when it runs
    for pod in [p for p in world.pods if p.node == host.name]:
        try:
            world.stop(pod)
        except (AssertionError, TryAgain) as exc:
            print(f"{host.name}: stopping {pod}: {exc}")
    if host.cri is not None:
        with contextlib.suppress(grpc.RpcError):
            for sandbox in host.cri.list_pod_sandbox():
                with contextlib.suppress(grpc.RpcError):
                    host.cri.stop_pod_sandbox(sandbox, timeout=30)
                    host.cri.remove_pod_sandbox(sandbox, timeout=30)
    host.podman("rm", "-af", "-t", "0", check=False)
    for key in list(host.echo):
        host.stop_echo(key)


def _stop_agent(host: NodeHost) -> None:
    host.stop_agent()
    print(f"{host.name}: agent log (last lines):\n{tail(host.log, 12)}")
    errors = troubles(host.log)
    if errors:
        print(f"{host.name}: the agent's errors and tracebacks ({len(errors)} lines, the last 60):")
        print("\n".join(errors[-60:]))


def troubles(log: Path) -> list[str]:
    """The lines of an agent's log that are errors: JSON events of level error, and anything not JSON
    (a traceback)."""
    found = []
    with contextlib.suppress(FileNotFoundError):
        for line in log.read_text(errors="replace").splitlines():
            if not line.startswith("{") or '"level": "error"' in line:
                found.append(line)
    return found


def start_containerd(host: NodeHost, stack: contextlib.ExitStack) -> None:
    """A private containerd in the node's namespaces, the pods' network its CNI network."""
    binary, ctr = shutil.which("containerd"), shutil.which("ctr")
    assert binary is not None and ctr is not None
    home = host.root / "containerd"
    bin_dir, conf_dir = home / "cni-bin", home / "net.d"
    bin_dir.mkdir(parents=True)
    conf_dir.mkdir()
    for plugin in CNI_DIR.iterdir():
        (bin_dir / plugin.name).symlink_to(plugin)
    (bin_dir / "eni-ipam-cni").symlink_to(host.plugin)
    (conf_dir / "10-eni.conflist").write_text(json.dumps(conflist(host.socket, dual=host.ipv6), indent=2))
    snapshotter = "overlayfs" if overlay_works(home / "overlay-probe") else "native"
    tables: dict[str, Any] = {
        "version": 2,
        "plugins": {
            CRI: {
                "sandbox_image": PAUSE_IMAGE,
                "cni": {"bin_dir": str(bin_dir), "conf_dir": str(conf_dir), "max_conf_num": 1},
            }
        },
    }
    merge(tables, sandbox_settings(home, snapshotter))
    config = home / "config.toml"
    config.write_text(toml_document(tables))
    address = str(home / "containerd.sock")
    log = home / "containerd.log"
    with log.open("ab") as out:
        daemon = subprocess.Popen(
            [*host.enter(), binary, "--config", str(config)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    host.containerd = daemon

    def stop() -> None:
        """containerd, then the shims it left; until they are gone, with the sockets and state they
        keep on the host (/run/containerd), which removed sandboxes' shims clean up as they exit."""
        terminate(daemon)
        deadline = time.perf_counter() + 10
        while (shims := processes_of(address)) and time.perf_counter() < deadline:
            for pid in shims:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

    stack.callback(stop)
    service = host.cri = RuntimeService(address)
    stack.callback(service.close)
    deadline = time.perf_counter() + 60
    while True:
        try:
            service.version(timeout=2)
            break
        except grpc.RpcError as exc:
            if daemon.poll() is not None:
                pytest.skip(f"containerd cannot run here (exited {daemon.returncode}):\n{tail(log, 8)}")
            if time.perf_counter() > deadline:
                pytest.skip(f"containerd's CRI did not answer within 60 s ({exc.details()}):\n{tail(log, 8)}")
            time.sleep(0.25)
    image = pause_image(host.image_tar, home / "pause.tar")
    ctr_cli = [ctr, "--address", address, "--namespace", CONTAINERD_NAMESPACE]
    imported = run([*ctr_cli, "images", "import", "--snapshotter", snapshotter, image], check=False)
    if imported.returncode != 0:
        pytest.skip(f"ctr images import failed: {imported.stderr.strip()[-800:]}")


def start_podman(host: NodeHost, stack: contextlib.ExitStack) -> None:
    """podman with its CNI backend in the node's namespaces, the pods' network its default network."""
    binary = shutil.which("podman")
    assert binary is not None
    home = host.root / "podman"
    netd = home / "net.d"
    netd.mkdir(parents=True)
    (netd / "10-eni.conflist").write_text(json.dumps(conflist(host.socket, dual=host.ipv6), indent=2))
    tables = sandbox_containers_conf(home, netd, host.plugin.parent)
    tables["network"].update(network_backend="cni", default_network=NETWORK)
    conf = home / "containers.conf"
    conf.write_text(toml(tables))
    host.podman_env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    failures = []
    for driver in ("overlay", "vfs"):
        cli = [*host.enter(), binary, "--root", str(home / f"storage-{driver}"),
               "--runroot", str(home / f"run-{driver}"), "--storage-driver", driver]  # fmt: skip
        host.podman_cli = cli
        imported = host.podman("import", "--change", "ENV PATH=/bin", str(host.image_tar), IMAGE, check=False)
        if imported.returncode != 0:
            failures.append(f"{driver}: podman import: {imported.stderr.strip()[-500:]}")
            continue
        probe_run = host.podman("run", "--rm", "--network", "none", IMAGE, "true", check=False)
        if probe_run.returncode == 0:
            stack.callback(host.podman, "rmi", "-af", check=False)
            return
        failures.append(f"{driver}: podman run: {probe_run.stderr.strip()[-500:]}")
        host.podman("rmi", "-af", check=False)
    pytest.skip("podman cannot run containers here: " + " | ".join(failures))
