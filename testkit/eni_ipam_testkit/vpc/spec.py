"""What an emulated VPC is built from: VPC CIDRs, subnets, nodes and their interfaces, as plain data.

A :class:`VpcSpec` is what the in-memory cloud knows of a VPC and its nodes, and nothing else:
:meth:`VpcSpec.from_sim` reads it from a :class:`~providers.sim.SimCloud`, and a test may write one
by hand. It is validated when made, so a harness is never half built from a description EC2 could
not hold.

Invariants (checked on construction, ``ValueError`` naming the culprit otherwise):

* every subnet lies inside one of the VPC's IPv4 CIDRs, and no two subnets overlap; no CIDR (of
  either family) holds the outside host's address (:data:`OUTSIDE_IPV4`, :data:`OUTSIDE_IPV6`);
* every node has exactly one interface at device index 0 (its primary), and no two interfaces of
  a node share a device index;
* every address an interface holds (its primary address, its secondary addresses and prefixes, of
  either family) lies in its subnet's CIDR of that family, is not the subnet's router address, and
  is held by no other interface: EC2 never assigns an address twice;
* interface ids and MAC addresses are unique. An interface given no MAC gets a locally
  administered unicast one derived from its id (:func:`derived_mac`), so the same description
  always builds the same devices.

Addresses are strings as every cloud API speaks them; a secondary entry with a ``/`` is a delegated
prefix (``"10.0.1.32/28"``, ``"2600:1f14::/80"``). Nothing here is IPv4-only: a subnet may carry an
IPv6 CIDR, and an interface's entries may be of either family.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from providers.sim.cloud import SimCloud

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

OUTSIDE_IPV4 = "203.0.113.10"
"""The outside host: an address of TEST-NET-3 (RFC 5737), outside any VPC a test declares."""
OUTSIDE_IPV6 = "2001:db8::10"
"""The outside host's IPv6 address: of the documentation range (RFC 3849), outside every IPv6 block a
test declares. A VPC's IPv6 has no NAT: a pod reaches it with its own address."""

ROUTER_LINK_LOCAL = "fe80::1"
"""The VPC router's IPv6 address on every subnet: nodes route IPv6 through a link-local address,
as on EC2."""

_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_MAC = re.compile(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}")


def derived_mac(interface_id: str) -> str:
    """A locally administered unicast MAC address derived from ``interface_id`` (``02:…``): stable
    across runs, so a failing test is rebuilt with the same devices."""
    digest = hashlib.sha256(interface_id.encode()).digest()
    return ":".join(f"{b:02x}" for b in (0x02, *digest[:5]))


def link_local(mac: str) -> str:
    """The EUI-64 IPv6 link-local address of a device with ``mac`` (what the kernel gives a device
    brought up with the default address generation): the router's next hop towards it."""
    octets = [int(part, 16) for part in mac.split(":")]
    eui = [octets[0] ^ 0x02, *octets[1:3], 0xFF, 0xFE, *octets[3:]]
    return str(ipaddress.IPv6Address(bytes([0xFE, 0x80, *([0] * 6), *eui])))


def parse_entry(entry: str) -> Network:
    """An address (as a /32 or /128) or a prefix, strictly: host bits set in a prefix are an error."""
    return ipaddress.ip_network(entry, strict=True)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SubnetSpec:
    """A subnet: its router is its first address (``.1``), as on AWS."""

    id: str
    cidr: str
    """The IPv4 CIDR."""
    ipv6_cidr: str = ""
    """The IPv6 CIDR (a /64 on EC2), if the subnet has one."""

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.cidr)

    @property
    def ipv6_network(self) -> ipaddress.IPv6Network | None:
        return ipaddress.IPv6Network(self.ipv6_cidr) if self.ipv6_cidr else None

    @property
    def router(self) -> str:
        """The router's IPv4 address: the subnet's first address."""
        return str(self.network.network_address + 1)

    def networks(self) -> tuple[Network, ...]:
        """The subnet's CIDRs, IPv4 first."""
        v6 = self.ipv6_network
        return (self.network,) if v6 is None else (self.network, v6)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class InterfaceSpec:
    """A network interface as the cloud reports it."""

    id: str
    device_index: int
    subnet: str
    """The subnet's id."""
    primary_ip: str
    addresses: tuple[str, ...] = ()
    """Secondary addresses and delegated prefixes (``"10.0.1.32/28"``), of either family."""
    mac: str = ""
    """``""``: derived from the id (:func:`derived_mac`)."""

    @property
    def mac_address(self) -> str:
        """The MAC address the node's device carries: the given one, else the derived one."""
        return self.mac.lower() if self.mac else derived_mac(self.id)

    def assigned(self) -> frozenset[Network]:
        """Everything the interface holds, as networks: the primary address and every entry."""
        return frozenset(parse_entry(e) for e in (self.primary_ip, *self.addresses))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NodeSpec:
    """A node (an instance) and the interfaces attached to it."""

    name: str
    interfaces: tuple[InterfaceSpec, ...]

    def primary(self) -> InterfaceSpec:
        return next(i for i in self.interfaces if i.device_index == 0)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class VpcSpec:
    """A VPC, its subnets and its nodes. Validated on construction (see the module docstring)."""

    cidrs: tuple[str, ...]
    """The VPC's IPv4 CIDRs (the primary one and any added)."""
    subnets: tuple[SubnetSpec, ...]
    nodes: tuple[NodeSpec, ...]

    def __post_init__(self) -> None:
        check(self)

    def subnet(self, id: str) -> SubnetSpec:
        """Raises: KeyError for an unknown subnet."""
        for subnet in self.subnets:
            if subnet.id == id:
                return subnet
        raise KeyError(id)

    def node(self, name: str) -> NodeSpec:
        """Raises: KeyError for an unknown node."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def interfaces(self) -> Iterable[tuple[NodeSpec, InterfaceSpec]]:
        for node in self.nodes:
            for iface in node.interfaces:
                yield node, iface

    @classmethod
    def from_sim(
        cls,
        cloud: SimCloud,
        instances: Sequence[str] | Mapping[str, str],
        *,
        vpc_cidrs: Sequence[str] | None = None,
        macs: Mapping[str, str] | None = None,
    ) -> VpcSpec:
        """The VPC of ``instances`` as ``cloud`` holds it now: every subnet of their VPC (with its
        IPv6 block, if it has one), and their attached interfaces with their addresses and prefixes,
        IPv6 /80s included (inspection only: no EC2 call is made or counted).

        Args:
            instances: instance ids (each node named after its instance), or node name → instance id.
            vpc_cidrs: the VPC's CIDRs; by default the instances' VPC's CIDR as the cloud holds it.
            macs: MAC addresses by interface id. Otherwise the cloud's, when its model reports one
                (``mac_address``), else derived from the id.

        Raises:
            KeyError: an unknown instance. ValueError: no instance, instances of different VPCs, or
                a description the harness cannot hold (see :func:`check`).
        """
        by_name = dict(instances) if isinstance(instances, Mapping) else {i: i for i in instances}
        macs = macs or {}
        nodes: list[NodeSpec] = []
        vpcs: set[str] = set()
        for name, instance_id in by_name.items():
            instance = cloud.instance_view(instance_id)
            vpcs.add(instance.vpc_id)
            interfaces = []
            for iface in instance.interfaces:
                reported = str(getattr(iface, "mac_address", "") or getattr(iface, "mac", "") or "")
                interfaces.append(
                    InterfaceSpec(
                        id=iface.id,
                        device_index=iface.device_index,
                        subnet=iface.subnet_id,
                        primary_ip=iface.primary_ip,
                        addresses=(*iface.addresses, *iface.prefixes, *iface.ipv6_prefixes),
                        mac=macs.get(iface.id, reported),
                    )
                )
            nodes.append(NodeSpec(name=name, interfaces=tuple(interfaces)))
        if len(vpcs) != 1:
            raise ValueError(f"the instances must be of one VPC, not {sorted(vpcs)}")
        (vpc,) = vpcs
        # The cloud offers no free listing of its VPCs and subnets; the test kit's one reader of its
        # tables does (eni_ipam_testkit.ec2_wire.tables), where a Describe call would be counted.
        # Imported here: its package brings botocore, which nothing else of the harness needs.
        from eni_ipam_testkit.ec2_wire.tables import Tables

        tables = Tables(cloud)
        if vpc_cidrs is None:
            vpc_cidrs = [tables.vpcs.rows[vpc].cidr]
        views = {s: cloud.subnet_view(s) for s, record in tables.subnets.rows.items() if record.vpc_id == vpc}
        subnets = tuple(
            SubnetSpec(id=s, cidr=view.cidr, ipv6_cidr=view.ipv6_cidr) for s, view in sorted(views.items())
        )
        return cls(cidrs=tuple(vpc_cidrs), subnets=subnets, nodes=tuple(nodes))


def check(spec: VpcSpec) -> None:
    """Raise ``ValueError`` naming the first broken invariant of ``spec`` (see the module docstring)."""
    vpc = [ipaddress.IPv4Network(c) for c in spec.cidrs]
    if not vpc:
        raise ValueError("a VPC needs at least one CIDR")
    outside = ipaddress.IPv4Address(OUTSIDE_IPV4)
    if any(outside in c for c in vpc):
        raise ValueError(f"the VPC's CIDRs must not hold the outside host's address {OUTSIDE_IPV4}")
    outside6 = ipaddress.IPv6Address(OUTSIDE_IPV6)
    for subnet in spec.subnets:
        block = subnet.ipv6_network
        if block is not None and outside6 in block:
            raise ValueError(
                f"subnet {subnet.id}: {subnet.ipv6_cidr} holds the outside host's address {OUTSIDE_IPV6}"
            )
    subnets: dict[str, SubnetSpec] = {}
    for subnet in spec.subnets:
        if subnet.id in subnets:
            raise ValueError(f"subnet {subnet.id}: declared twice")
        if not any(subnet.network.subnet_of(c) for c in vpc):
            raise ValueError(f"subnet {subnet.id}: {subnet.cidr} is outside the VPC's CIDRs {spec.cidrs}")
        for other in subnets.values():
            for mine, theirs in zip(subnet.networks(), other.networks(), strict=False):
                if mine.overlaps(theirs):
                    raise ValueError(f"subnet {subnet.id}: {mine} overlaps subnet {other.id}")
        subnets[subnet.id] = subnet
    names: set[str] = set()
    ids: set[str] = set()
    macs: dict[str, str] = {}
    holders: list[tuple[Network, str]] = []
    for node in spec.nodes:
        if not _NODE_NAME.fullmatch(node.name):
            raise ValueError(f"node {node.name!r}: a name of letters, digits, '.', '_' and '-' (at most 63)")
        if node.name in names:
            raise ValueError(f"node {node.name}: declared twice")
        names.add(node.name)
        indexes = [i.device_index for i in node.interfaces]
        if indexes.count(0) != 1:
            raise ValueError(f"node {node.name}: needs exactly one interface at device index 0")
        if len(set(indexes)) != len(indexes) or min(indexes) < 0:
            raise ValueError(f"node {node.name}: device indexes must be distinct and non-negative")
        for iface in node.interfaces:
            if iface.id in ids:
                raise ValueError(f"interface {iface.id}: declared twice")
            ids.add(iface.id)
            check_interface(iface, subnets, holders)
            holders.extend((n, iface.id) for n in iface.assigned())
            mac = iface.mac_address
            if mac in macs:
                raise ValueError(f"interface {iface.id}: MAC {mac} is also {macs[mac]}'s")
            macs[mac] = iface.id


def check_interface(
    iface: InterfaceSpec, subnets: Mapping[str, SubnetSpec], holders: Iterable[tuple[Network, str]]
) -> None:
    """Raise ``ValueError`` unless ``iface`` fits its subnet and holds nothing of another interface."""
    subnet = subnets.get(iface.subnet)
    if subnet is None:
        raise ValueError(f"interface {iface.id}: unknown subnet {iface.subnet!r}")
    if not _MAC.fullmatch(iface.mac_address) or int(iface.mac_address[:2], 16) & 1:
        raise ValueError(f"interface {iface.id}: {iface.mac!r} is not a unicast MAC address")
    if ipaddress.ip_address(iface.primary_ip).version != 4:
        raise ValueError(f"interface {iface.id}: the primary address {iface.primary_ip} is not IPv4")
    check_entries(iface.id, subnet, (iface.primary_ip, *iface.addresses), holders)


def check_entries(
    interface_id: str, subnet: SubnetSpec, entries: Iterable[str], holders: Iterable[tuple[Network, str]]
) -> None:
    """Raise ``ValueError`` unless every entry is an address or prefix of ``subnet``'s CIDR of its
    family, not the router's, and overlaps nothing in ``holders`` (network, holding interface)."""
    held = list(holders)
    router = ipaddress.ip_network(subnet.router)
    seen: list[Network] = []
    for entry in entries:
        try:
            net = parse_entry(entry)
        except ValueError as e:
            raise ValueError(f"interface {interface_id}: {entry!r} is no address or prefix: {e}") from None
        home = subnet.network if net.version == 4 else subnet.ipv6_network
        if home is None or not net.subnet_of(home):  # type: ignore[arg-type]
            raise ValueError(f"interface {interface_id}: {entry} is outside subnet {subnet.id}")
        if net.overlaps(router):
            raise ValueError(f"interface {interface_id}: {entry} holds the router's address {subnet.router}")
        for other, owner in [*held, *((s, interface_id) for s in seen)]:
            if other.version == net.version and other.overlaps(net):
                raise ValueError(f"interface {interface_id}: {entry} overlaps {other} of {owner}")
        seen.append(net)
