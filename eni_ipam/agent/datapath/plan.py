"""What the host must hold for the node's pool and its pods: pure data in, pure data out.

:func:`plan` takes the pool's interfaces (as the ENIPool status publishes them), the held pod
addresses with the interface that owns each, and the settings, and returns a :class:`Plan`: the
interfaces to set up and their route tables, the policy rules, and the SNAT the node does. The
component (:mod:`~eni_ipam.agent.datapath.datapath`) compares it with what the host holds and
changes only the difference; nothing here reads or changes the host, so every case is a table test.

Family-generic: an IPv6 interface gets its table the same way, its default route through the
router's link-local address (``fe80::1`` on AWS) instead of the subnet's first address; a dual-stack
interface (an IPv4 subnet, and a /80 delegated to it) gets both default routes in its one table.
IPv6 pod addresses are the VPC's own, routed back to the node by the /80: they are never SNATed.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Mapping, Sequence

from eni_ipam.agent.datapath.settings import DatapathSettings

PROTOCOL = 234
"""The routing protocol number of every rule and route the datapath makes: what it may change or
remove. Other software's rules and routes (protocols ``kernel``, ``boot``, ``static``, ``dhcp``...)
are never touched, even at the same priorities."""
TO_POD_PRIORITY = 512
"""``to <pod> lookup main``: before any ``from`` rule, so pod-to-pod and host-to-pod traffic on the node
stays on the node (the VPC CNI's priority)."""
SNAT_PRIORITY = 1024
"""``fwmark <snat_mark> lookup main``: traffic leaving the VPC leaves through the primary interface."""
FROM_POD_PRIORITY = 1536
"""``from <pod> lookup <interface's table>``."""
PRIORITIES = (TO_POD_PRIORITY, SNAT_PRIORITY, FROM_POD_PRIORITY)
MAIN_TABLE = 254
IPV6_ROUTER = "fe80::1"
"""The router of every IPv6 subnet on AWS (link-local)."""
MAX_DEVICE_INDEX = 99
"""Device indexes per card a table id leaves room for (EC2 allows at most 50 interfaces per card)."""
POD_GATEWAY_OFFSET = 3
"""The pods' next hop is their subnet's fourth address (:func:`pod_gateway`)."""


def pod_gateway(
    network: ipaddress.IPv4Network | ipaddress.IPv6Network,
) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The next hop of the pods of ``network`` (an IPv4 subnet): its fourth address (network + 3).

    ``ptp`` takes the plugin's answer as ``address/prefix`` and ``gateway``, and needs the gateway
    inside the prefix: it adds the pod's default route through the gateway while the prefix's own
    route is the only one on the pod's interface (a /32 has none, and ``ptp`` then fails to delete
    it), and puts the gateway, as a /32, on the host's end of the veth. So the gateway is an address
    of the pod's subnet that no interface can ever hold: AWS reserves the first four addresses of
    every subnet (network, router, DNS, "future use"), Azure the same four. Not the router (.1): the
    host would hold its own router's address, and its route table's default route would point at
    itself; not .2, the Amazon DNS resolver in the subnet that starts the VPC. None for a network too
    small to have it, or an IPv6 one (whose pods route through the router's link-local address).
    """
    if network.version != 4 or network.num_addresses < 8:
        return None
    return network.network_address + POD_GATEWAY_OFFSET


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Interface:
    """One interface of the node's pool, as the ENIPool status publishes it."""

    id: str
    mac: str
    """Lowercase, colon-separated: how the interface is found as a Linux device."""
    device_index: int
    network_card: int = 0
    subnet: str
    """The subnet's CIDR (``10.0.2.0/24``)."""
    primary_ip: str
    ipv6_prefixes: tuple[str, ...] = ()
    """The IPv6 prefixes delegated to the interface (a node's /80): its pods' IPv6 addresses leave
    through it, by its table's IPv6 default route through the router's link-local address."""

    @property
    def primary(self) -> bool:
        """The instance's primary interface: the node's own, routed by the main table."""
        return self.device_index == 0 and self.network_card == 0

    @property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_network(self.subnet, strict=False)

    @property
    def router(self) -> str:
        """The subnet's router: its first address (IPv4), the router's link-local address (IPv6)."""
        network = self.network
        return IPV6_ROUTER if network.version == 6 else str(network.network_address + 1)


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Route:
    """A route of an interface's table: to the subnet on the link, or a default through the router."""

    table: int
    destination: str
    """A CIDR (``0.0.0.0/0`` for the default route)."""
    gateway: str
    """Empty for a route on the link."""
    mac: str
    """The device the route leaves through, by MAC."""
    source: str = ""
    """The preferred source (the interface's primary address), for routes on the link."""


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Rule:
    """A policy rule: ``from``/``to`` one address, or a firewall mark, looked up in ``table``."""

    priority: int
    table: int
    source: str = ""
    """An address (a /32 or /128 rule), or empty."""
    destination: str = ""
    mark: int = 0
    """Matched as ``fwmark mark/mark`` when non-zero."""

    @property
    def family(self) -> int:
        address = self.source or self.destination
        return 6 if address and ":" in address else 4


@dataclasses.dataclass(frozen=True, slots=True)
class Device:
    """How a secondary interface's Linux device is set up."""

    mac: str
    mtu: int
    address: str
    """The interface's primary address, with its subnet's prefix length (``10.0.2.10/24``), added
    without a prefix route: the subnet's route belongs to the interface's table, not to main."""


@dataclasses.dataclass(frozen=True, slots=True)
class Snat:
    """Traffic from the VPC's addresses to anywhere but ``keep`` leaves as ``to_address``."""

    keep: tuple[str, ...]
    """CIDRs traffic to which keeps its source (the VPC's and the excluded ones)."""
    sources: tuple[str, ...]
    """CIDRs pod addresses come from (the VPC's)."""
    device_mac: str
    """The primary interface, by MAC."""
    to_address: str
    mark: int


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    devices: tuple[Device, ...]
    """Secondary interfaces to bring up (the primary one is the host's own: left as it is)."""
    loose_rp_filter: tuple[str, ...]
    """MACs of the devices whose reverse-path filter must be loose: every interface of the pool
    (answers to SNATed traffic arrive on the primary one for pods of another interface)."""
    routes: tuple[Route, ...]
    rules: tuple[Rule, ...]
    snat: Snat | None
    unrouted: tuple[str, ...]
    """Pod addresses whose interface the pool does not list (yet): only their ``to`` rule is made."""

    def tables(self) -> set[int]:
        return {r.table for r in self.routes}


def table_id(interface: Interface, base: int) -> int:
    """The route table of a secondary interface: ``base + 100 × card + device index``.

    Raises:
        ValueError: a device index above :data:`MAX_DEVICE_INDEX` (two interfaces would share a table).
    """
    if not 0 <= interface.device_index <= MAX_DEVICE_INDEX:
        raise ValueError(
            f"{interface.id}: device index {interface.device_index} is beyond {MAX_DEVICE_INDEX}"
        )
    return base + 100 * interface.network_card + interface.device_index


def plan(interfaces: Iterable[Interface], pods: Mapping[str, str], settings: DatapathSettings) -> Plan:
    """What the host must hold for ``interfaces`` (the pool's) and ``pods`` (address → interface id).

    Interfaces without a MAC or a subnet cannot be found or routed and are left out (their pods are
    then ``unrouted``); so are interfaces whose device index no table id leaves room for.
    """
    usable: dict[str, Interface] = {}
    for interface in sorted(interfaces, key=lambda i: (i.network_card, i.device_index, i.id)):
        if not interface.mac or not interface.subnet:
            continue
        if not interface.primary and interface.device_index > MAX_DEVICE_INDEX:
            continue
        usable[interface.id] = interface
    devices: list[Device] = []
    routes: list[Route] = []
    tables: dict[str, int] = {}
    for interface in usable.values():
        if interface.primary:
            continue
        table = tables[interface.id] = table_id(interface, settings.route_table_base)
        network = interface.network
        devices.append(Device(interface.mac, settings.mtu, f"{interface.primary_ip}/{network.prefixlen}"))
        default = "::/0" if network.version == 6 else "0.0.0.0/0"
        routes.append(Route(table, str(network), "", interface.mac, interface.primary_ip))
        routes.append(Route(table, default, interface.router, interface.mac))
        if interface.ipv6_prefixes and network.version == 4:
            # A dual-stack interface: its IPv6 pods leave through the same device and table.
            routes.append(Route(table, "::/0", IPV6_ROUTER, interface.mac))
    rules: list[Rule] = []
    unrouted: list[str] = []
    for address, interface_id in sorted(pods.items(), key=lambda item: _key(item[0])):
        rules.append(Rule(TO_POD_PRIORITY, MAIN_TABLE, destination=address))
        owner = usable.get(interface_id)
        if owner is None:
            unrouted.append(address)
        elif not owner.primary:
            rules.append(Rule(FROM_POD_PRIORITY, tables[interface_id], source=address))
    primary = next((i for i in usable.values() if i.primary), None)
    snat = None
    if not settings.external_snat and primary is not None:
        rules.append(Rule(SNAT_PRIORITY, MAIN_TABLE, mark=settings.snat_mark))
        vpc = tuple(str(c) for c in settings.vpc_cidrs)
        keep = _collapse([*vpc, *(str(c) for c in settings.exclude_snat_cidrs)])
        snat = Snat(keep, _collapse(vpc), primary.mac, primary.primary_ip, settings.snat_mark)
    return Plan(
        devices=tuple(devices),
        loose_rp_filter=tuple(i.mac for i in usable.values()),
        routes=tuple(sorted(routes)),
        rules=tuple(sorted(rules)),
        snat=snat,
        unrouted=tuple(unrouted),
    )


def pod_rules(address: str, interface: Interface | None, settings: DatapathSettings) -> tuple[Rule, ...]:
    """The rules one pod address needs (what :func:`plan` makes for it)."""
    rules = [Rule(TO_POD_PRIORITY, MAIN_TABLE, destination=address)]
    if interface is not None and not interface.primary and interface.mac and interface.subnet:
        rules.append(Rule(FROM_POD_PRIORITY, table_id(interface, settings.route_table_base), source=address))
    return tuple(rules)


def _key(address: str) -> tuple[int, int]:
    parsed = ipaddress.ip_address(address)
    return parsed.version, int(parsed)


def _collapse(cidrs: Sequence[str]) -> tuple[str, ...]:
    """The CIDRs merged where they overlap or touch, IPv4 first (nftables refuses overlapping elements
    of an interval set)."""
    v4 = [ipaddress.IPv4Network(c) for c in cidrs if ":" not in c]
    v6 = [ipaddress.IPv6Network(c) for c in cidrs if ":" in c]
    merged: list[str] = [str(n) for n in ipaddress.collapse_addresses(v4)]
    merged += [str(n) for n in ipaddress.collapse_addresses(v6)]
    return tuple(merged)
