"""The host's links, policy rules and routes, as the datapath reads and changes them (netlink).

Role: the only module that speaks netlink (pyroute2's asyncio client, plus one raw message pyroute2
does not encode: a device's IPv4 reverse-path filter, set through ``RTM_SETLINK`` rather than
``/proc/sys``, so the agent needs ``CAP_NET_ADMIN`` and no writable ``/proc``). It works in the
network namespace of the process.

Invariants: :meth:`Netlink.rules` and :meth:`Netlink.routes` return only what carries
:data:`~eni_ipam.agent.datapath.plan.PROTOCOL`, and only such rules and routes are ever deleted; adding
what exists and deleting what is gone are not errors (a reconcile after a crash meets both).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import ipaddress
import socket
import struct
from typing import Any

from pyroute2 import AsyncIPRoute
from pyroute2.netlink.exceptions import NetlinkError

from eni_ipam.agent.datapath.errors import DatapathError
from eni_ipam.agent.datapath.plan import MAIN_TABLE, PRIORITIES, PROTOCOL, Route, Rule

SCOPE_LINK = 253
IFA_F_NOPREFIXROUTE = 0x200
LOOSE = 2
"""``rp_filter`` 2: an answer is accepted on any interface the source is reachable through."""


@dataclasses.dataclass(frozen=True, slots=True)
class Link:
    index: int
    name: str
    mac: str
    mtu: int
    up: bool
    addresses: tuple[str, ...]
    """``address/prefix`` of every address on the link."""


class Netlink:
    """One netlink connection of the agent (open with ``async with``)."""

    def __init__(self) -> None:
        self._ipr: AsyncIPRoute | None = None

    async def __aenter__(self) -> Netlink:
        self._ipr = AsyncIPRoute()
        await self._ipr.setup_endpoint()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ipr is not None:
            self._ipr.close()
            self._ipr = None

    @property
    def ipr(self) -> AsyncIPRoute:
        if self._ipr is None:
            raise RuntimeError("Netlink used outside its `async with`")
        return self._ipr

    # -- links -------------------------------------------------------------------------------------

    async def links(self) -> dict[str, Link]:
        """Every link with a MAC address, by MAC (lowercase)."""
        addresses: dict[int, list[str]] = {}
        async for message in await self.ipr.get_addr():
            addresses.setdefault(message["index"], []).append(
                f"{message.get('address')}/{message['prefixlen']}"
            )
        found: dict[str, Link] = {}
        async for message in await self.ipr.get_links():
            mac = str(message.get("address") or "").lower()
            if not mac or mac == "00:00:00:00:00:00":
                continue
            index = message["index"]
            found[mac] = Link(
                index=index,
                name=str(message.get("ifname")),
                mac=mac,
                mtu=int(message.get("mtu") or 0),
                up=bool(message["flags"] & 1),
                addresses=tuple(addresses.get(index, ())),
            )
        return found

    async def set_up(self, link: Link, *, mtu: int, address: str) -> None:
        """Bring ``link`` up with ``mtu`` and ``address`` (``ip/prefix``, without a prefix route)."""
        try:
            if link.mtu != mtu or not link.up:
                await self.ipr.link("set", index=link.index, state="up", mtu=mtu)
            if address not in link.addresses:
                ip, _, prefix = address.partition("/")
                with contextlib.suppress(NetlinkError):  # EEXIST: the same address with other flags
                    await self.ipr.addr(
                        "add",
                        index=link.index,
                        address=ip,
                        prefixlen=int(prefix),
                        IFA_FLAGS=IFA_F_NOPREFIXROUTE,
                    )
        except NetlinkError as exc:
            raise DatapathError(f"cannot set up {link.name} ({link.mac}): {exc.args[-1]}") from None

    def loosen_rp_filter(self, link: Link) -> None:
        """Set the device's IPv4 reverse-path filter to loose (``rp_filter`` 2)."""
        try:
            _set_ipv4_conf(link.index, _RP_FILTER, LOOSE)
        except OSError as exc:
            raise DatapathError(f"cannot set rp_filter of {link.name}: {exc.strerror}") from None

    # -- rules -------------------------------------------------------------------------------------

    async def rules(self) -> set[Rule]:
        """The datapath's rules (of :data:`PROTOCOL`, at its priorities)."""
        found: set[Rule] = set()
        for family in (socket.AF_INET, socket.AF_INET6):
            async for message in await self.ipr.get_rules(family=family):
                if message.get("FRA_PROTOCOL") != PROTOCOL or message.get("priority") not in PRIORITIES:
                    continue
                found.add(
                    Rule(
                        priority=int(message.get("priority")),
                        table=int(message.get("table")),
                        source=str(message.get("src") or ""),
                        destination=str(message.get("dst") or ""),
                        mark=int(message.get("fwmark") or 0),
                    )
                )
        return found

    async def add_rule(self, rule: Rule) -> None:
        try:
            await self.ipr.rule("add", **_rule_fields(rule))
        except NetlinkError as exc:
            if exc.code != errno.EEXIST:
                raise DatapathError(f"cannot add the rule {_show(rule)}: {exc.args[-1]}") from None

    async def delete_rule(self, rule: Rule) -> None:
        try:
            await self.ipr.rule("del", **_rule_fields(rule))
        except NetlinkError as exc:
            if exc.code not in (errno.ENOENT, errno.ESRCH):
                raise DatapathError(f"cannot delete the rule {_show(rule)}: {exc.args[-1]}") from None

    # -- routes ------------------------------------------------------------------------------------

    async def routes(self, macs: dict[int, str]) -> set[Route]:
        """The datapath's routes (of :data:`PROTOCOL`, any table), their device named by MAC
        (``macs``: link index → MAC; a route through a link not in it has an empty MAC)."""
        found: set[Route] = set()
        for family in (socket.AF_INET, socket.AF_INET6):
            async for message in await self.ipr.get_routes(family=family):
                if message["proto"] != PROTOCOL:
                    continue
                destination = f"{message.get('dst') or ('::' if family == socket.AF_INET6 else '0.0.0.0')}"
                found.add(
                    Route(
                        table=int(message.get("table")),
                        destination=f"{destination}/{message['dst_len']}",
                        gateway=str(message.get("gateway") or ""),
                        mac=macs.get(int(message.get("oif") or 0), ""),
                        source=str(message.get("prefsrc") or ""),
                    )
                )
        return found

    async def host_route(self, address: str) -> int | None:
        """The link index of the main table's host route to ``address`` (``address/32``, or ``/128``)
        made by another program than the datapath (``ptp``'s route to a pod's veth), or None."""
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        length = ipaddress.ip_address(address).max_prefixlen
        async for message in await self.ipr.get_routes(family=family, table=MAIN_TABLE):
            if message["proto"] == PROTOCOL or message["dst_len"] != length:
                continue
            if message.get("dst") == address and message.get("oif"):
                return int(message.get("oif"))
        return None

    async def replace_route(self, route: Route, index: int) -> None:
        fields: dict[str, Any] = {
            "dst": route.destination,
            "table": route.table,
            "oif": index,
            "proto": PROTOCOL,
        }
        if route.gateway:
            fields["gateway"] = route.gateway
        else:
            fields["scope"] = SCOPE_LINK
        if route.source:
            fields["prefsrc"] = route.source
        try:
            await self.ipr.route("replace", **fields)
        except NetlinkError as exc:
            raise DatapathError(
                f"cannot set the route {route.destination} in table {route.table}: {exc.args[-1]}"
            ) from None

    async def delete_route(self, route: Route) -> None:
        fields: dict[str, Any] = {"dst": route.destination, "table": route.table, "proto": PROTOCOL}
        if not route.gateway:
            fields["scope"] = SCOPE_LINK  # the kernel matches the scope: the default would miss the route
        try:
            await self.ipr.route("del", **fields)
        except NetlinkError as exc:
            if exc.code not in (errno.ENOENT, errno.ESRCH):
                raise DatapathError(
                    f"cannot delete the route {route.destination} from table {route.table}: {exc.args[-1]}"
                ) from None


def _rule_fields(rule: Rule) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "priority": rule.priority,
        "table": rule.table,
        "FRA_PROTOCOL": PROTOCOL,
        "family": socket.AF_INET6 if rule.family == 6 else socket.AF_INET,
    }
    if rule.source:
        fields["src"] = rule.source
        fields["src_len"] = ipaddress.ip_address(rule.source).max_prefixlen
    if rule.destination:
        fields["dst"] = rule.destination
        fields["dst_len"] = ipaddress.ip_address(rule.destination).max_prefixlen
    if rule.mark:
        fields["fwmark"] = rule.mark
        fields["fwmask"] = rule.mark
    return fields


def _show(rule: Rule) -> str:
    selector = (
        f"from {rule.source}" if rule.source else f"to {rule.destination}" if rule.destination else "all"
    )
    mark = f" fwmark {rule.mark:#x}/{rule.mark:#x}" if rule.mark else ""
    return f"{rule.priority}: {selector}{mark} lookup {rule.table}"


# -- an IPv4 device setting over raw netlink ----------------------------------------------------------

_RTM_SETLINK = 19
_NLM_F_REQUEST = 0x1
_NLM_F_ACK = 0x4
_NLMSG_ERROR = 0x2
_NLA_F_NESTED = 0x8000
_IFLA_AF_SPEC = 26
_IFLA_INET_CONF = 1
_RP_FILTER = 8
"""``IPV4_DEVCONF_RP_FILTER`` (include/uapi/linux/ip.h)."""


def _attribute(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("HH", length, kind) + payload + b"\0" * ((4 - length % 4) % 4)


def _set_ipv4_conf(index: int, setting: int, value: int) -> None:
    """Set one ``net.ipv4.conf.<device>`` value of device ``index`` (``IFLA_AF_SPEC`` → ``AF_INET`` →
    ``IFLA_INET_CONF``, the kernel's ``inet_set_link_af``): pyroute2 encodes that attribute as the
    flat array the kernel dumps, not as the nested one it accepts."""
    conf = _attribute(setting, struct.pack("I", value))
    spec = _attribute(
        _IFLA_AF_SPEC | _NLA_F_NESTED,
        _attribute(socket.AF_INET | _NLA_F_NESTED, _attribute(_IFLA_INET_CONF | _NLA_F_NESTED, conf)),
    )
    body = struct.pack("BxHiII", socket.AF_UNSPEC, 0, index, 0, 0) + spec
    message = struct.pack("IHHII", 16 + len(body), _RTM_SETLINK, _NLM_F_REQUEST | _NLM_F_ACK, 1, 0) + body
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.settimeout(2.0)
        sock.bind((0, 0))
        sock.send(message)
        answer = sock.recv(65536)
    kind = struct.unpack_from("H", answer, 4)[0]
    (error,) = struct.unpack_from("i", answer, 16) if kind == _NLMSG_ERROR else (0,)
    if error:
        raise OSError(-error, errno.errorcode.get(-error, str(-error)))
