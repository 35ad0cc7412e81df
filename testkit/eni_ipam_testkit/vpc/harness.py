"""The emulated VPC: network namespaces built from a :class:`~eni_ipam_testkit.vpc.spec.VpcSpec`,
changed as the cloud changes, and always removed.

Namespaces (``enivpc-<pid>-<token>-<role>``, :mod:`~eni_ipam_testkit.vpc.shell`): ``router`` (the VPC
fabric and its source/destination check, :mod:`~eni_ipam_testkit.vpc.fabric`), ``outside`` (a host
beyond the VPC, :data:`~eni_ipam_testkit.vpc.spec.OUTSIDE_IPV4`, and
:data:`~eni_ipam_testkit.vpc.spec.OUTSIDE_IPV6` when a subnet has an IPv6 block, answering through
the router, translating nothing), one
``node-<name>`` per node, and any a test adds (:meth:`EmulatedVpc.add_namespace`). Nothing is made
in the namespace the test runs in, so all traffic stays inside the harness's namespaces and removing
them removes every link and nft table with them.

Invariants:

* Each node interface is a veth pair whose node end carries the interface's MAC. Devices are named
  ``ens5``, ``ens6``… in an order that is *not* the device-index order (for two or more interfaces;
  shuffled by :attr:`EmulatedVpc.seed`), and created in name order, so a datapath that guesses a
  device from its index or its ifindex fails: it must find devices by MAC. All are DOWN and
  unaddressed but the primary, which is configured as a node's primary is: its address with the
  subnet's route, up, and the default route through the subnet's router. When the primary's subnet
  has an IPv6 block, the node also has what EC2's router advertisements give it: an IPv6 default
  route through the router's link-local address on the primary device (``proto ra``, metric
  :data:`RA_METRIC`), unless the harness is built with ``router_advertisements=False``.
* The router's routes, neighbour entries, fdb entries and check sets hold exactly what the
  interfaces hold now (:meth:`~EmulatedVpc.assign`, :meth:`~EmulatedVpc.unassign`,
  :meth:`~EmulatedVpc.attach`, :meth:`~EmulatedVpc.detach`, :meth:`~EmulatedVpc.update`), and every
  change is validated first as EC2 validates it: a change EC2 would refuse raises ``ValueError`` and
  changes nothing.
* :meth:`~EmulatedVpc.drops` counts, per interface, every packet the check dropped since the
  harness was built: a detached interface keeps its count, so a drop cannot be hidden by a detach.
* :meth:`~EmulatedVpc.close` (the context manager's exit, on every way out) kills the processes left
  in the harness's namespaces and deletes the namespaces; :meth:`~EmulatedVpc.start` first sweeps
  the namespaces of harnesses whose process is gone.

The methods block (each runs a few short processes); from an event loop call them through
``asyncio.to_thread``. A lock serialises changes, so threads may share a harness.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import secrets
import select
import subprocess
import threading
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Self

from eni_ipam_testkit.vpc import fabric, probes, shell
from eni_ipam_testkit.vpc.fabric import Port
from eni_ipam_testkit.vpc.spec import (
    OUTSIDE_IPV4,
    OUTSIDE_IPV6,
    ROUTER_LINK_LOCAL,
    InterfaceSpec,
    Network,
    NodeSpec,
    VpcSpec,
    check_entries,
    check_interface,
    link_local,
    parse_entry,
)

DEFAULT_MTU = 9001
"""The MTU of every interface in a VPC (jumbo frames), as on EC2."""
FIRST_DEVICE = 5
"""Node devices are ``ens5``, ``ens6``…, as on Nitro instances."""
RA_METRIC = 2048
"""The metric of the IPv6 default route a node learns from the router's advertisements: above the
1024 of ``ip route add``, so a test may still add its own default route beside it (the kernel refuses
a second route of one metric) and that one wins."""
NODE_SYSCTLS: dict[str, str] = {
    "net.ipv4.ip_forward": "1",
    "net.ipv4.conf.all.rp_filter": "1",
    "net.ipv4.conf.default.rp_filter": "1",
}
"""A node namespace's kernel settings, whatever the host's: forwarding on, as a Kubernetes node
needs, and strict reverse-path filtering, the strictest a distribution ships, so that a datapath
which needs it loosened on its interfaces must do so itself (the kernel applies the looser of ``all``
and the device's own). Loose filtering still drops every packet arriving on a device without an
IPv4 address unless the route back to its source leaves through that device: a datapath gives each
interface its primary address, or routes answers back through it."""


def _entry(net: Network) -> str:
    """An assigned network as EC2 writes it: a bare address, or a prefix in CIDR form."""
    return str(net.network_address) if net.num_addresses == 1 else str(net)


class EmulatedVpc:
    """A VPC in network namespaces: a router with the source/destination check, an outside host,
    the nodes with their interfaces. Use it as a context manager::

        with EmulatedVpc(spec) as vpc:
            vpc.run(vpc.node_ns("n1"), "ip", "link")
            assert vpc.ping(vpc.node_ns("n1"), vpc.outside_ip)
            assert vpc.drops() == {...: 0}
    """

    def __init__(
        self,
        spec: VpcSpec,
        *,
        mtu: int = DEFAULT_MTU,
        seed: int | None = None,
        echo_port: int = probes.ECHO_PORT,
        node_sysctls: Mapping[str, str] = NODE_SYSCTLS,
        router_advertisements: bool = True,
    ) -> None:
        """Describe the VPC; :meth:`start` (or ``with``) builds it.

        Args:
            spec: the VPC, its subnets and nodes.
            mtu: the MTU of the node interfaces and the subnets' bridges.
            seed: orders the node devices' names; random (and kept in :attr:`seed`) by default.
            echo_port: the port of the outside host's echo service (:meth:`observed_source`).
            node_sysctls: the node namespaces' kernel settings (:data:`NODE_SYSCTLS` by default).
            router_advertisements: a node whose primary interface's subnet has an IPv6 block gets
                the IPv6 default route EC2's router advertisements give it (through ``fe80::1`` on
                its primary device); ``False``: no IPv6 route at all, a test configures its own.
        """
        token = secrets.token_hex(3)
        self.prefix = f"{shell.PREFIX}-{os.getpid()}-{token}"
        """Every namespace of this harness is named ``<prefix>-<role>``."""
        self.seed = seed if seed is not None else int(token, 16)
        self.mtu = mtu
        self.echo_port = echo_port
        self._node_sysctls = dict(node_sysctls)
        self.router_ns = f"{self.prefix}-router"
        self.outside_ns = f"{self.prefix}-outside"
        self.outside_ip = OUTSIDE_IPV4
        self.ipv6 = any(s.ipv6_cidr for s in spec.subnets)
        """Whether a subnet has an IPv6 block: the router then forwards IPv6."""
        self.outside_ipv6: str | None = OUTSIDE_IPV6 if self.ipv6 else None
        """The outside host's IPv6 address, when a subnet has an IPv6 block (else it has none)."""
        self._router_advertisements = router_advertisements
        self._vpc_cidrs = spec.cidrs
        self._subnets = {s.id: s for s in spec.subnets}
        self._bridges = {s.id: f"b{n}" for n, s in enumerate(spec.subnets)}
        self._nodes = {n.name: n for n in spec.nodes}
        self._ports: dict[str, Port] = {}
        self._retired: dict[str, int] = {}
        self._serial = 0
        # The highest device number each node has had: an attached device never reuses a name.
        self._device_high = dict.fromkeys(self._nodes, FIRST_DEVICE - 1)
        self._extra: list[str] = []
        self._processes: list[subprocess.Popen[str]] = []
        self._lock = threading.RLock()
        self._started = False
        self._closed = False

    # -- life cycle ------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def start(self) -> None:
        """Sweep stale namespaces, then build the VPC. On failure everything built is removed.

        Raises:
            VpcError: a command failed (its output says why). RuntimeError: started twice.
        """
        with self._lock:
            if self._started:
                raise RuntimeError("an EmulatedVpc starts once")
            self._started = True
            shell.sweep_stale()
            try:
                self._build()
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        """Stop the harness's processes and remove its namespaces (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for process in self._processes:
                if process.poll() is None:
                    process.kill()
            for process in self._processes:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=5)
                for pipe in (process.stdin, process.stdout, process.stderr):
                    if pipe is not None:
                        pipe.close()
            shell.remove_namespaces(self.namespaces())

    def namespaces(self) -> list[str]:
        """Every namespace this harness makes (or made)."""
        return [self.router_ns, self.outside_ns, *(self.node_ns(n) for n in self._nodes), *self._extra]

    def _build(self) -> None:
        shell.ip_batch(None, [f"netns add {ns}" for ns in self.namespaces()])
        ipv6 = self.ipv6
        if ipv6 and not os.path.isdir("/proc/sys/net/ipv6"):
            raise shell.VpcError("a subnet has an IPv6 CIDR, but this kernel has IPv6 disabled")
        if ipv6:
            # The router and the outside host are up long before any node: their devices' link-local
            # addresses need no duplicate address detection (while it runs, the kernel sends no
            # neighbour solicitation through the device, and a first packet waits a second).
            for ns in (self.router_ns, self.outside_ns):
                shell.sysctl(ns, {"net.ipv6.conf.default.accept_dad": "0"})
        ports = self._initial_ports()
        router = fabric.router_base(
            [(s, self._bridges[s.id]) for s in self._subnets.values()],
            self._vpc_cidrs,
            self.outside_ns,
            self.mtu,
            outside_ipv6=self.outside_ipv6,
        )
        fdb: list[str] = []
        nft = fabric.nft_base()
        for port in ports:
            router += fabric.port_links(port, self.node_ns(port.node), self.mtu)
        for port in ports:
            router += fabric.routes_added(port, port.assigned())
            fdb += fabric.port_fdb(port)
            nft += fabric.nft_port_added(port)
            self._ports[port.iface.id] = port
        shell.ip_batch(self.router_ns, router)
        shell.bridge_batch(self.router_ns, fdb)
        shell.sysctl(self.router_ns, fabric.router_sysctls(self._bridges.values(), ipv6))
        shell.nft(self.router_ns, nft)
        for node in self._nodes.values():
            shell.sysctl(self.node_ns(node.name), self._node_sysctls | self._booted(node))
            shell.ip_batch(self.node_ns(node.name), self._node_lines(node))
        shell.ip_batch(self.outside_ns, fabric.outside_lines(self.outside_ip, self.outside_ipv6))
        shell.nft(self.outside_ns, fabric.nft_outside())
        self.serve_echo(self.outside_ns, self.echo_port)

    def _initial_ports(self) -> list[Port]:
        """The initial interfaces' ports, in device-name order (the order their devices are made)."""
        rng = random.Random(self.seed)
        ports = []
        for node in self._nodes.values():
            interfaces = sorted(node.interfaces, key=lambda i: i.device_index)
            names = [f"ens{FIRST_DEVICE + n}" for n in range(len(interfaces))]
            order = list(range(len(interfaces)))
            while len(order) > 1 and order == sorted(order):
                rng.shuffle(order)
            self._device_high[node.name] = FIRST_DEVICE + len(interfaces) - 1
            by_name = sorted(zip((names[k] for k in order), interfaces, strict=True), key=lambda p: p[0])
            ports += [self._new_port(node.name, iface, device) for device, iface in by_name]
        return ports

    def _new_port(self, node: str, iface: InterfaceSpec, device: str) -> Port:
        self._serial += 1
        return Port(
            node=node, iface=iface, name=f"p{self._serial}", bridge=self._bridges[iface.subnet], device=device
        )

    def _booted(self, node: NodeSpec) -> dict[str, str]:
        """The primary device's IPv6 settings as on an instance up for a while: its link-local
        address past duplicate address detection (without which the node solicits no neighbour,
        so its first IPv6 packets would wait a second or two). Devices brought up later (by a
        datapath) go through detection, as on EC2."""
        if not self.ipv6:
            return {}
        return {f"net.ipv6.conf.{self._ports[node.primary().id].device}.accept_dad": "0"}

    def _node_lines(self, node: NodeSpec) -> list[str]:
        primary = node.primary()
        subnet = self._subnets[primary.subnet]
        device = self._ports[primary.id].device
        lines = [
            "link set lo up",
            f"addr add {primary.primary_ip}/{subnet.network.prefixlen} dev {device}",
            f"link set {device} up",
            f"route add default via {subnet.router} dev {device}",
        ]
        if self._router_advertisements and subnet.ipv6_cidr:
            lines.append(
                f"route add default via {ROUTER_LINK_LOCAL} dev {device} proto ra metric {RA_METRIC}"
            )
        return lines

    # -- names -----------------------------------------------------------------------------------

    def node_ns(self, node: str) -> str:
        """The namespace of ``node``."""
        return f"{self.prefix}-node-{node}"

    def add_namespace(self, label: str) -> str:
        """A new, empty namespace (loopback up) removed with the harness: a pod's, for instance,
        for a CNI plugin to set up (``CNI_NETNS=/run/netns/<name>``). Returns its name.

        Raises:
            ValueError: the label is taken or not a plain name.
        """
        with self._lock:
            name = f"{self.prefix}-ns-{label}"
            if name in self._extra or not label.replace("-", "").replace("_", "").isalnum():
                raise ValueError(f"namespace label {label!r} is taken or not a plain name")
            self._extra.append(name)
            shell.ip_batch(None, [f"netns add {name}"])
            shell.ip_batch(name, ["link set lo up"])
            return name

    def device(self, interface_id: str) -> str:
        """The name of the interface's device in its node's namespace.

        Raises:
            KeyError: not attached.
        """
        return self._ports[interface_id].device

    def mac(self, interface_id: str) -> str:
        """The MAC address of the interface's device.

        Raises:
            KeyError: not attached.
        """
        return self._ports[interface_id].mac

    def router(self, subnet_id: str) -> str:
        """The subnet's router address (its first address).

        Raises:
            KeyError: unknown subnet.
        """
        return self._subnets[subnet_id].router

    @property
    def spec(self) -> VpcSpec:
        """The VPC as the harness holds it now (changes included)."""
        with self._lock:
            nodes = tuple(
                NodeSpec(
                    name=name,
                    interfaces=tuple(
                        sorted(
                            (p.iface for p in self._ports.values() if p.node == name),
                            key=lambda i: i.device_index,
                        )
                    ),
                )
                for name in self._nodes
            )
            return VpcSpec(cidrs=self._vpc_cidrs, subnets=tuple(self._subnets.values()), nodes=nodes)

    # -- changes ---------------------------------------------------------------------------------

    def assign(self, interface_id: str, addresses: Iterable[str]) -> None:
        """Assign secondary addresses or prefixes (either family) to an attached interface, as
        ``AssignPrivateIpAddresses`` (or ``AssignIpv6Addresses``) would.

        Raises:
            KeyError: not attached. ValueError: an entry outside its subnet, or held already.
        """
        with self._lock:
            port = self._ports[interface_id]
            entries = list(addresses)
            check_entries(interface_id, self._subnets[port.iface.subnet], entries, self._holders())
            added = {parse_entry(e) for e in entries}
            port.iface = dataclasses.replace(
                port.iface, addresses=(*port.iface.addresses, *(_entry(n) for n in sorted(added, key=str)))
            )
            shell.ip_batch(self.router_ns, fabric.routes_added(port, added))
            shell.nft(self.router_ns, fabric.nft_port_sets(port))

    def unassign(self, interface_id: str, addresses: Iterable[str]) -> None:
        """Take secondary addresses or prefixes back from an attached interface.

        Raises:
            KeyError: not attached. ValueError: an entry it does not hold as a secondary.
        """
        with self._lock:
            port = self._ports[interface_id]
            gone = {parse_entry(e) for e in addresses}
            held = {parse_entry(e) for e in port.iface.addresses}
            if not gone <= held:
                missing = ", ".join(sorted(_entry(n) for n in gone - held))
                raise ValueError(f"interface {interface_id} holds no secondary {missing}")
            port.iface = dataclasses.replace(
                port.iface, addresses=tuple(e for e in port.iface.addresses if parse_entry(e) not in gone)
            )
            shell.nft(self.router_ns, fabric.nft_port_sets(port))
            shell.ip_batch(self.router_ns, fabric.routes_removed(port, gone))

    def attach(self, node: str, interface: InterfaceSpec) -> str:
        """Attach an interface (with what it holds) to ``node``: its device appears in the node's
        namespace, DOWN and unaddressed, named after the highest ``ens<N>`` the node has had.
        Returns the device's name.

        Raises:
            KeyError: unknown node. ValueError: an interface of that id is attached, the node's
                device index is taken (or 0), or the interface does not fit its subnet or holds
                another's address.
        """
        with self._lock:
            if node not in self._nodes:
                raise KeyError(node)
            if interface.id in self._ports:
                raise ValueError(f"interface {interface.id} is attached to {self._ports[interface.id].node}")
            if interface.device_index <= 0 or any(
                p.node == node and p.iface.device_index == interface.device_index
                for p in self._ports.values()
            ):
                raise ValueError(f"node {node}: device index {interface.device_index} is not free")
            check_interface(interface, self._subnets, self._holders())
            if any(p.mac == interface.mac_address for p in self._ports.values()):
                raise ValueError(f"interface {interface.id}: MAC {interface.mac_address} is taken")
            self._device_high[node] += 1
            port = self._new_port(node, interface, f"ens{self._device_high[node]}")
            shell.ip_batch(
                self.router_ns,
                fabric.port_links(port, self.node_ns(node), self.mtu)
                + fabric.routes_added(port, port.assigned()),
            )
            shell.bridge_batch(self.router_ns, fabric.port_fdb(port))
            shell.nft(self.router_ns, fabric.nft_port_added(port))
            self._ports[interface.id] = port
            return port.device

    def detach(self, interface_id: str) -> InterfaceSpec:
        """Detach an interface: its device leaves the node, the fabric forgets its addresses (they
        stay with the interface, as on EC2). Its drop count is kept. Returns the interface as held.

        Raises:
            KeyError: not attached. ValueError: the primary interface (EC2 cannot detach it).
        """
        with self._lock:
            port = self._ports[interface_id]
            if port.iface.device_index == 0:
                raise ValueError(f"interface {interface_id} is its node's primary: it cannot be detached")
            lines = [f"link del {port.name}", *fabric.routes_removed(port, port.assigned())]
            if any(n.version == 6 for n in port.assigned()):
                lines.append(f"neigh del {link_local(port.mac)} dev {port.bridge}")
            shell.ip_batch(self.router_ns, lines)
            # The link is gone, so the counter cannot move any more between reading and deleting it.
            self._retired[interface_id] = self._retired.get(interface_id, 0) + self._counters().get(
                port.name, 0
            )
            shell.nft(self.router_ns, fabric.nft_port_removed(port))
            del self._ports[interface_id]
            return port.iface

    def update(self, spec: VpcSpec) -> None:
        """Bring the harness to ``spec`` (the same VPC and nodes, as :meth:`VpcSpec.from_sim` reads
        them after the cloud changed): detach, unassign, assign and attach what differs, in that
        order (an address may move between interfaces). An interface whose attachment changed
        (node, device index, subnet, primary address, MAC) is detached and attached again.

        Raises:
            ValueError: ``spec`` has other CIDRs or nodes, a subnet the harness was not built with
                (or with another CIDR), or a change is refused.
        """
        with self._lock:
            unknown = [s.id for s in spec.subnets if self._subnets.get(s.id) != s]
            if spec.cidrs != self._vpc_cidrs or {n.name for n in spec.nodes} != set(self._nodes) or unknown:
                raise ValueError(
                    "update() changes interfaces and addresses; the VPC's CIDRs, its nodes and its "
                    f"subnets stay as built (subnets not built: {unknown})"
                )
            wanted = {i.id: (n.name, i) for n, i in spec.interfaces()}
            moved = {
                id
                for id, (node, iface) in wanted.items()
                if id in self._ports and _attachment(self._ports[id]) != _attachment_of(node, iface)
            }
            for id in [i for i in self._ports if i not in wanted or i in moved]:
                self.detach(id)
            changes = [(id, p.assigned(), wanted[id][1].assigned()) for id, p in self._ports.items()]
            for id, have, want in changes:
                if have - want:
                    self.unassign(id, [_entry(n) for n in have - want])
            for id, have, want in changes:
                if want - have:
                    self.assign(id, [_entry(n) for n in want - have])
            for id, (node, iface) in wanted.items():
                if id not in self._ports:
                    self.attach(node, iface)

    def set_source_dest_check(self, interface_id: str, enabled: bool) -> None:
        """Switch the check of one interface on or off (EC2's ``SourceDestCheck`` attribute). Off,
        its packets pass whatever their source, uncounted: what a test runs to show that a failure
        comes from the check and from nothing else.

        Raises:
            KeyError: not attached.
        """
        with self._lock:
            port = self._ports[interface_id]
            port.checked = enabled
            shell.nft(self.router_ns, fabric.nft_port_rules(port))

    def _holders(self) -> list[tuple[Network, str]]:
        """What every interface holds (attached or detached by the harness), with its holder."""
        return [(n, p.iface.id) for p in self._ports.values() for n in p.assigned()]

    # -- observation -----------------------------------------------------------------------------

    def _counters(self) -> dict[str, int]:
        """Packets dropped by each port's check, by port name."""
        listed = json.loads(
            shell.nft_json(self.router_ns, "list", "counters", "table", "bridge", fabric.TABLE)
        )
        counters = (item["counter"] for item in listed["nftables"] if "counter" in item)
        return {c["name"].removeprefix("drop_"): int(c["packets"]) for c in counters}

    def drops(self) -> dict[str, int]:
        """Packets the source/destination check dropped, by interface id: every interface attached
        now or since the harness was built (a detached one keeps its count)."""
        with self._lock:
            counts = self._counters()
            result = dict(self._retired)
            for id, port in self._ports.items():
                result[id] = result.get(id, 0) + counts.get(port.name, 0)
            return result

    def outside_sources(self) -> dict[str, int]:
        """Packets the outside host received, by source address: what reached it, after the node's
        SNAT and the router (which translates nothing)."""
        seen: dict[str, int] = {}
        for name in ("v4", "v6"):
            listed = json.loads(shell.nft_json(self.outside_ns, "list", "set", "inet", "seen", name))
            for item in listed["nftables"]:
                for element in item.get("set", {}).get("elem", []):
                    elem = element["elem"]
                    seen[str(elem["val"])] = int(elem.get("counter", {}).get("packets", 0))
        return seen

    # -- commands and probes ---------------------------------------------------------------------

    def run(
        self,
        namespace: str,
        *argv: str,
        check: bool = True,
        timeout: float = 30.0,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command in ``namespace`` (any: the harness's or a CNI plugin's) and wait for it.

        Raises:
            VpcError: with ``check``, the command failed.
        """
        return shell.run(shell.in_netns(namespace, argv), check=check, timeout=timeout, input=input)

    def spawn(self, namespace: str, *argv: str, **popen: Any) -> subprocess.Popen[str]:
        """Start a command in ``namespace`` in the background; it is killed when the harness closes."""
        with self._lock:
            process: subprocess.Popen[str] = subprocess.Popen(
                shell.in_netns(namespace, argv), text=True, **popen
            )
            self._processes.append(process)
            return process

    def serve_echo(self, namespace: str, port: int = probes.ECHO_PORT, *, timeout: float = 10.0) -> None:
        """Start a TCP service in ``namespace`` answering each connection with the peer's address;
        return once it listens.

        Raises:
            VpcError: it did not start within ``timeout`` seconds.
        """
        process = self.spawn(
            namespace, *probes.echo_server_argv(port), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert process.stdout is not None
        # The server writes its one line at once: readable means the line, or EOF when it died.
        ready, _, _ = select.select([process.stdout], [], [], timeout)
        if ready and process.stdout.readline().strip() == "ready":
            return
        process.kill()
        _, err = process.communicate()
        raise shell.VpcError(f"the echo service in {namespace} did not start: {err.strip()}")

    def ping(
        self, namespace: str, address: str, *, source: str | None = None, count: int = 1, timeout: float = 1.0
    ) -> bool:
        """Whether ``address`` answers a ping from ``namespace`` within ``timeout`` seconds."""
        done = self.run(namespace, *probes.ping_argv(address, source, count, timeout), check=False)
        return done.returncode == 0

    def connect(
        self,
        namespace: str,
        address: str,
        port: int = probes.ECHO_PORT,
        *,
        source: str | None = None,
        timeout: float = 1.0,
    ) -> str | None:
        """Connect from ``namespace`` to an echo service (:meth:`serve_echo`) at ``address``: the
        address it saw the connection come from, or ``None`` when the connection failed."""
        argv = probes.echo_client_argv(address, port, source, timeout)
        done = self.run(namespace, *argv, check=False, timeout=timeout + 10)
        return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None

    def observed_source(
        self, namespace: str, *, source: str | None = None, timeout: float = 1.0, family: int = 4
    ) -> str | None:
        """The source address the outside host sees a connection from ``namespace`` come from (to its
        IPv6 address with ``family=6``), or ``None`` when the connection failed.

        Raises:
            ValueError: ``family=6`` in a VPC without IPv6 (the outside host has no IPv6 address).
        """
        target = self.outside_ip if family == 4 else self.outside_ipv6
        if target is None or family not in (4, 6):
            raise ValueError(f"the outside host has no IPv{family} address here")
        return self.connect(namespace, target, self.echo_port, source=source, timeout=timeout)


def _attachment(port: Port) -> tuple[object, ...]:
    return (port.node, port.iface.device_index, port.iface.subnet, port.iface.primary_ip, port.mac)


def _attachment_of(node: str, iface: InterfaceSpec) -> tuple[object, ...]:
    return (node, iface.device_index, iface.subnet, iface.primary_ip, iface.mac_address)
