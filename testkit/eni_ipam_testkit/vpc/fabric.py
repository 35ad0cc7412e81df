"""The VPC fabric as commands: what the router namespace holds for each subnet and interface, and
the source/destination check in nftables. Pure functions from the description to ``ip``/``bridge``
lines and nft scripts; :mod:`~eni_ipam_testkit.vpc.harness` runs them.

How the router emulates the VPC (each decision is what EC2 does, as far as a node can tell):

* **One bridge per subnet** carries the subnet's router address (its ``.1``; ``fe80::1`` for IPv6)
  with a fixed MAC (a bridge otherwise takes its lowest port's, and would change it under the nodes'
  ARP caches as interfaces come and go). Each node interface's router end is a port of it.
* **Every packet passes the router.** Ports are ``isolated`` (no port reaches another port, only the
  bridge itself), do not learn, and get no flooded frames: two nodes of one subnet cannot talk at
  layer 2, so even their traffic is routed, and checked, as in a VPC, which has no broadcast domain.
* **The router answers ARP for the addresses it knows, and only those.** Each assigned address has a
  host route through its subnet's bridge and a permanent neighbour entry with its interface's MAC; a
  delegated prefix has a route through its interface's primary address. The subnet itself has no
  route (the router's address is added with ``noprefixroute``) and every VPC CIDR is
  ``unreachable``. ``proxy_arp_pvlan`` on the bridge then answers an ARP request for exactly the
  addresses with a route back out of that bridge. Proxy neighbour entries cannot: the kernel answers
  an IPv4 proxy entry only for a target routed through *another* device than the request's. For
  IPv6 they do answer on the same device, so each assigned IPv6 address gets one (``proxy_ndp``), and
  its routes go through the interface's EUI-64 link-local address, pinned to its MAC.
* **Frames reach only the owner**: static bridge fdb entries send each interface's MAC to its port.
  Nothing is resolved by asking the nodes, so a node claiming an address it was not assigned gets no
  traffic for it. ICMP redirects are off: the router forwards back out of the bridge a packet came in
  by, and a node must not learn a shortcut that a VPC would not give it.
* **The outside host** is beyond the router's link ``out``: ``203.0.113.0/24`` and, when a subnet has
  an IPv6 block, ``2001:db8::/64``, with a default route each way for IPv6 (the router's towards the
  outside host, the outside host's towards the router). Nothing is translated: IPv6 pods reach it
  with their own addresses, as a VPC's IPv6 has no NAT.
* **The source/destination check** (table ``bridge vpc_check``): at the bridge's prerouting hook,
  every frame arriving on a port jumps (a verdict map keyed by port) to that port's chain, which
  drops and counts (a named counter per port) an IPv4 packet whose source is not in the port's
  interval set of assigned addresses and prefixes, the same for IPv6 (the unspecified and link-local
  sources of neighbour discovery pass), and any frame that is neither IPv4, IPv6 nor ARP (a VLAN tag
  must not carry a packet past the check). A set is replaced whole in one transaction on every
  change, so a packet never meets a half-updated set.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Sequence

from eni_ipam_testkit.vpc.spec import (
    OUTSIDE_IPV4,
    ROUTER_LINK_LOCAL,
    InterfaceSpec,
    Network,
    SubnetSpec,
    derived_mac,
    link_local,
    parse_entry,
)

TABLE = "vpc_check"
"""The nft table of the check (family ``bridge``), in the router namespace."""
OUTSIDE_ROUTER_IPV4 = "203.0.113.1"
OUTSIDE_PREFIX = 24
OUTSIDE_ROUTER_IPV6 = "2001:db8::1"
OUTSIDE_PREFIX_IPV6 = 64
OUTSIDE_MTU = 1500
"""Traffic leaving a VPC through its gateway has an MTU of 1500, whatever the VPC's."""
OUTSIDE_LINK = "out"
"""The router's link to the outside host (the outside host's end is ``eth0``)."""


@dataclasses.dataclass(slots=True, kw_only=True)
class Port:
    """One attached interface: its router end (``name``, a port of ``bridge``) and its node end
    (``device`` in the node's namespace, with ``iface.mac_address``)."""

    node: str
    iface: InterfaceSpec
    name: str
    bridge: str
    device: str
    checked: bool = True

    @property
    def mac(self) -> str:
        return self.iface.mac_address

    def assigned(self) -> frozenset[Network]:
        return self.iface.assigned()


def router_mac(subnet_id: str) -> str:
    return derived_mac(f"vpc-router/{subnet_id}")


def router_base(
    subnets: Sequence[tuple[SubnetSpec, str]],
    vpc_cidrs: Sequence[str],
    outside_ns: str,
    mtu: int,
    *,
    outside_ipv6: str | None = None,
) -> list[str]:
    """``ip`` lines for the router namespace: a bridge per subnet (``(subnet, bridge name)``), the
    VPC's unreachable CIDRs, and the link to the outside host; with ``outside_ipv6`` (the outside
    host's IPv6 address) the link carries IPv6 too, and the router's IPv6 default route leads there."""
    lines = ["link set lo up"]
    for subnet, bridge in subnets:
        lines += [
            f"link add {bridge} address {router_mac(subnet.id)} mtu {mtu} type bridge",
            f"link set {bridge} up",
            f"addr add {subnet.router}/{subnet.network.prefixlen} dev {bridge} noprefixroute",
        ]
        if subnet.ipv6_cidr:
            lines += [
                f"addr add {ROUTER_LINK_LOCAL}/64 dev {bridge} nodad",
                f"route add unreachable {subnet.ipv6_cidr}",
            ]
    lines += [f"route add unreachable {cidr}" for cidr in vpc_cidrs]
    lines += [
        f"link add {OUTSIDE_LINK} mtu {OUTSIDE_MTU} type veth "
        f"peer name eth0 mtu {OUTSIDE_MTU} netns {outside_ns}",
        f"addr add {OUTSIDE_ROUTER_IPV4}/{OUTSIDE_PREFIX} dev {OUTSIDE_LINK}",
        f"link set {OUTSIDE_LINK} up",
    ]
    if outside_ipv6 is not None:
        lines += [
            f"addr add {OUTSIDE_ROUTER_IPV6}/{OUTSIDE_PREFIX_IPV6} dev {OUTSIDE_LINK} nodad",
            f"route add default via {outside_ipv6} dev {OUTSIDE_LINK}",
        ]
    return lines


def router_sysctls(bridges: Iterable[str], ipv6: bool) -> dict[str, str]:
    """The router's kernel settings: forwarding, no redirects, no reverse-path filter (the check is
    nft's), proxy ARP limited to routed addresses, and proxies answering at once (the default delays
    an answer to a broadcast request by up to 0.8 s)."""
    settings = {
        "net.ipv4.ip_forward": "1",
        "net.ipv4.conf.all.send_redirects": "0",
        "net.ipv4.conf.default.send_redirects": "0",
        "net.ipv4.conf.all.rp_filter": "0",
        "net.ipv4.conf.default.rp_filter": "0",
    }
    if ipv6:
        settings |= {"net.ipv6.conf.all.forwarding": "1", "net.ipv6.conf.all.proxy_ndp": "1"}
    for bridge in bridges:
        settings |= {
            f"net.ipv4.conf.{bridge}.send_redirects": "0",
            f"net.ipv4.conf.{bridge}.rp_filter": "0",
            f"net.ipv4.conf.{bridge}.proxy_arp_pvlan": "1",
            f"net.ipv4.neigh.{bridge}.proxy_delay": "0",
        }
        if ipv6:
            settings[f"net.ipv6.neigh.{bridge}.proxy_delay"] = "0"
    return settings


def outside_lines(outside_ipv4: str = OUTSIDE_IPV4, outside_ipv6: str | None = None) -> list[str]:
    """``ip`` lines for the outside host: its address (and ``outside_ipv6``, when given: see
    :data:`~eni_ipam_testkit.vpc.spec.OUTSIDE_IPV6`), and its way back through the router."""
    lines = [
        "link set lo up",
        "link set eth0 up",
        f"addr add {outside_ipv4}/{OUTSIDE_PREFIX} dev eth0",
        f"route add default via {OUTSIDE_ROUTER_IPV4} dev eth0",
    ]
    if outside_ipv6 is not None:
        lines += [
            f"addr add {outside_ipv6}/{OUTSIDE_PREFIX_IPV6} dev eth0 nodad",
            f"route add default via {OUTSIDE_ROUTER_IPV6} dev eth0",
        ]
    return lines


def port_links(port: Port, node_ns: str, mtu: int) -> list[str]:
    """``ip`` lines (router namespace) making the interface's veth pair: its node end DOWN and
    unaddressed with the interface's MAC, its router end an isolated port of its subnet's bridge."""
    return [
        f"link add {port.name} mtu {mtu} type veth peer name {port.device} address {port.mac} "
        f"mtu {mtu} netns {node_ns}",
        f"link set {port.name} master {port.bridge}",
        f"link set {port.name} type bridge_slave isolated on learning off flood off mcast_flood off "
        "bcast_flood off",
        f"link set {port.name} up",
    ]


def port_fdb(port: Port) -> list[str]:
    """``bridge`` lines: frames to the interface's MAC go to its port, and only there."""
    return [f"fdb replace {port.mac} dev {port.name} master static"]


def _ordered(networks: Iterable[Network], primary: Network) -> list[Network]:
    """The primary first (a prefix's route goes through it), then single addresses, then prefixes."""
    rest = sorted((n for n in networks if n != primary), key=lambda n: (n.version, n.num_addresses > 1, n))
    return [primary, *rest] if primary in networks else rest


def routes_added(port: Port, networks: Iterable[Network]) -> list[str]:
    """``ip`` lines (router namespace) delivering ``networks`` to the port's interface."""
    primary = parse_entry(port.iface.primary_ip)
    lines = []
    wanted = set(networks)
    if any(n.version == 6 for n in wanted):
        lines.append(
            f"neigh replace {link_local(port.mac)} lladdr {port.mac} dev {port.bridge} nud permanent"
        )
    for net in _ordered(wanted, primary):
        single = net.num_addresses == 1
        if net.version == 4 and single:
            lines += [
                f"route replace {net} dev {port.bridge} scope link",
                f"neigh replace {net.network_address} lladdr {port.mac} dev {port.bridge} nud permanent",
            ]
        elif net.version == 4:
            lines.append(f"route replace {net} via {port.iface.primary_ip} dev {port.bridge}")
        else:
            lines.append(f"route replace {net} via {link_local(port.mac)} dev {port.bridge}")
            if single:
                lines.append(f"neigh replace proxy {net.network_address} dev {port.bridge}")
    return lines


def routes_removed(port: Port, networks: Iterable[Network]) -> list[str]:
    """``ip`` lines (router namespace) undoing :func:`routes_added` for ``networks``."""
    primary = parse_entry(port.iface.primary_ip)
    lines = []
    for net in reversed(_ordered(set(networks), primary)):
        lines.append(f"route del {net} dev {port.bridge}")
        if net.num_addresses == 1:
            proxy = "proxy " if net.version == 6 else ""
            lines.append(f"neigh del {proxy}{net.network_address} dev {port.bridge}")
    return lines


def nft_base() -> str:
    """The check's table: the verdict map from port to port chain, hooked at bridge prerouting."""
    return (
        f"table bridge {TABLE} {{\n"
        "  map ports { type ifname : verdict; }\n"
        "  chain check {\n"
        "    type filter hook prerouting priority filter; policy accept;\n"
        "    iifname vmap @ports\n"
        "  }\n"
        "}\n"
    )


def _elements(networks: Iterable[Network], version: int) -> str:
    chosen = [n for n in networks if n.version == version]
    collapsed: Iterable[Network] = (
        ipaddress.collapse_addresses(n for n in chosen if isinstance(n, ipaddress.IPv4Network))
        if version == 4
        else ipaddress.collapse_addresses(n for n in chosen if isinstance(n, ipaddress.IPv6Network))
    )
    return ", ".join(str(n.network_address) if n.num_addresses == 1 else str(n) for n in collapsed)


def nft_port_sets(port: Port) -> str:
    """Replace the port's sets with what its interface holds now (one transaction)."""
    script = ""
    for version, name in ((4, f"a4_{port.name}"), (6, f"a6_{port.name}")):
        script += f"flush set bridge {TABLE} {name}\n"
        elements = _elements(port.assigned(), version)
        if elements:
            script += f"add element bridge {TABLE} {name} {{ {elements} }}\n"
    return script


def nft_port_rules(port: Port) -> str:
    """Replace the port's chain: the check when ``port.checked``, else only the ethertype rule (EC2's
    source/destination check switched off for the interface)."""
    chain, counter = f"port_{port.name}", f'counter name "drop_{port.name}" drop'
    script = (
        f"flush chain bridge {TABLE} {chain}\n"
        f"add rule bridge {TABLE} {chain} ether type != {{ ip, ip6, arp }} {counter}\n"
    )
    if port.checked:
        script += (
            f"add rule bridge {TABLE} {chain} ether type ip ip saddr != @a4_{port.name} {counter}\n"
            f"add rule bridge {TABLE} {chain} ether type ip6 ip6 saddr != @a6_{port.name} "
            f"ip6 saddr != {{ ::, fe80::/10 }} {counter}\n"
        )
    return script


def nft_port_added(port: Port) -> str:
    """The port's sets, counter and chain, and its entry in the verdict map."""
    return (
        f"add set bridge {TABLE} a4_{port.name} {{ type ipv4_addr; flags interval; }}\n"
        f"add set bridge {TABLE} a6_{port.name} {{ type ipv6_addr; flags interval; }}\n"
        f"add counter bridge {TABLE} drop_{port.name}\n"
        f"add chain bridge {TABLE} port_{port.name}\n"
        + nft_port_sets(port)
        + nft_port_rules(port)
        + f'add element bridge {TABLE} ports {{ "{port.name}" : jump port_{port.name} }}\n'
    )


def nft_port_removed(port: Port) -> str:
    """Everything :func:`nft_port_added` made, removed."""
    return (
        f'delete element bridge {TABLE} ports {{ "{port.name}" }}\n'
        f"flush chain bridge {TABLE} port_{port.name}\n"
        f"delete chain bridge {TABLE} port_{port.name}\n"
        f"delete set bridge {TABLE} a4_{port.name}\n"
        f"delete set bridge {TABLE} a6_{port.name}\n"
        f"delete counter bridge {TABLE} drop_{port.name}\n"
    )


def nft_outside() -> str:
    """The outside host's record of the sources it sees: a set per family, an element (with a
    packet counter) per source address, in a table of its own namespace. IPv6 link-local and
    unspecified sources (the router's own neighbour discovery on the link) are not recorded."""
    return (
        "table inet seen {\n"
        "  set v4 { type ipv4_addr; size 65535; flags dynamic; counter; }\n"
        "  set v6 { type ipv6_addr; size 65535; flags dynamic; counter; }\n"
        "  chain input {\n"
        "    type filter hook prerouting priority filter; policy accept;\n"
        '    iifname "eth0" update @v4 { ip saddr }\n'
        '    iifname "eth0" ip6 saddr != { ::, fe80::/10 } update @v6 { ip6 saddr }\n'
        "  }\n"
        "}\n"
    )
