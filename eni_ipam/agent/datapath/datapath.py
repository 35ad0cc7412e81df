"""The datapath the agent drives: the host's routing kept equal to the plan of its pool and pods.

Three entry points, all on the agent's event loop:

* :meth:`Datapath.reconcile`: compare the host with the plan of the pool's interfaces (the ENIPool
  status) and the held addresses, and change only the difference: at the start (after the
  allocator's restore, before the socket serves), when the status's interfaces change (an interface
  attached gets its table, a detached one loses it), and periodically (what someone changed by hand,
  or a crash between two steps, is put back);
* :meth:`Datapath.add`: the rules of addresses an ADD just allocated, before the answer (a few
  hundred microseconds of netlink);
* :meth:`Datapath.remove`: the rules of released addresses.

Invariants: the host never holds a rule or route of the datapath's protocol that the plan does not
(after a reconcile); a pod's rules exist before its ADD is answered, or the ADD fails; the three
entry points run one at a time, and a reconcile takes the held addresses once it runs (an ADD or a
DEL during a reconcile would otherwise meet a plan made before it: the reconcile would delete the
new pod's rules, or put back a released one's); an interface
whose Linux device is not found (not attached yet, or no MAC in the status) is named by
:meth:`Datapath.unready`, so that the agent hands out none of its addresses.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence

import structlog

from eni_ipam.agent.datapath.netlink import Link, Netlink
from eni_ipam.agent.datapath.nft import SnatTable
from eni_ipam.agent.datapath.plan import (
    FROM_POD_PRIORITY,
    MAIN_TABLE,
    TO_POD_PRIORITY,
    Interface,
    Plan,
    Rule,
    plan,
    pod_rules,
)
from eni_ipam.agent.datapath.settings import DatapathSettings

log = structlog.get_logger("eni_ipam.agent.datapath")

VACATED_POLL = 0.02
"""Seconds between two looks for a previous pod's host route (:meth:`Datapath.vacated`)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Changes:
    """What one reconcile changed on the host."""

    rules_added: int = 0
    rules_deleted: int = 0
    routes_set: int = 0
    routes_deleted: int = 0
    devices_set_up: int = 0
    snat_written: bool = False
    missing_devices: tuple[str, ...] = ()
    """Interfaces (ids) whose Linux device was not found by MAC."""

    @property
    def any(self) -> bool:
        return bool(
            self.rules_added
            or self.rules_deleted
            or self.routes_set
            or self.routes_deleted
            or self.devices_set_up
            or self.snat_written
        )


class Datapath:
    """The node's datapath (see the module's description)."""

    def __init__(
        self, settings: DatapathSettings, *, netlink: Netlink, snat: SnatTable | None = None
    ) -> None:
        self.settings = settings
        self.netlink = netlink
        self.snat = snat if snat is not None else SnatTable()
        self.interfaces: dict[str, Interface] = {}
        self._missing: set[str] = set()
        self._problem = ""
        self._lock = asyncio.Lock()
        """Held by each reconcile, add, remove, check and clear, and each look of :meth:`vacated`: one
        change of the host at a time, and one use of the netlink socket (which serves one dump at a
        time: a second is refused with EBUSY)."""

    def set_interfaces(self, interfaces: Iterable[Interface]) -> bool:
        """Take the pool's interfaces (from the ENIPool status); whether they changed."""
        fresh = {i.id: i for i in interfaces}
        if fresh == self.interfaces:
            return False
        self.interfaces = fresh
        return True

    def unready(self) -> set[str]:
        """Interfaces whose addresses must not be handed out: their device was not found at the last
        reconcile, or they lack what finding it takes (a MAC)."""
        lacking = {i.id for i in self.interfaces.values() if not i.mac and not i.primary}
        return lacking | (self._missing & set(self.interfaces))

    def problem(self) -> str:
        """Why the datapath is not as planned (for ``/readyz``); empty when it is."""
        return self._problem

    async def reconcile(self, pods: Mapping[str, str] | Callable[[], Mapping[str, str]]) -> Changes:
        """Make the host hold exactly the plan of the interfaces and ``pods`` (address → interface id;
        or a callable returning them, called once this reconcile has its turn: the addresses held
        then, not those of when it was asked for).

        Raises:
            DatapathError: the host refused a change (what was changed before stays; the next reconcile
                goes on from there).
        """
        async with self._lock:
            held = pods() if callable(pods) else pods
            wanted = plan(self.interfaces.values(), held, self.settings)
            try:
                changes = await self._apply(wanted)
            except Exception as exc:
                self._problem = f"datapath not reconciled: {exc}"
                raise
        self._missing = set(changes.missing_devices)
        self._problem = (
            f"no device found for interface {', '.join(sorted(self._missing))} (by MAC)"
            if self._missing
            else ""
        )
        if changes.any or changes.missing_devices:
            log.info("datapath_reconciled", **dataclasses.asdict(changes))
        return changes

    async def add(self, pods: Sequence[tuple[str, str]]) -> None:
        """Install the rules of ``pods`` (address, interface id), just allocated.

        Raises:
            DatapathError: a rule could not be added (those added are removed again).
        """
        added: list[Rule] = []
        async with self._lock:
            try:
                for address, interface_id in pods:
                    for rule in pod_rules(address, self.interfaces.get(interface_id), self.settings):
                        await self.netlink.add_rule(rule)
                        added.append(rule)
            except Exception:
                for rule in added:
                    await self.netlink.delete_rule(rule)
                raise

    async def vacated(self, addresses: Iterable[str], *, limit: float) -> list[str]:
        """Wait until no host route to ``addresses`` is left from their previous pods; the addresses
        whose route is still there after ``limit`` seconds.

        ``ptp`` releases a pod's address (the IPAM DEL) before it deletes the pod's veth, whose host
        route goes with it. An address handed out again in between finds that route still there:
        the new pod's ``ptp`` takes the existing route for its own (it ignores "file exists"), and the
        route then goes with the old veth, leaving the new pod unreachable.
        """
        waiting = list(addresses)
        deadline = asyncio.get_running_loop().time() + limit
        while True:
            async with self._lock:  # each look is a dump of the one netlink socket: one at a time
                waiting = [a for a in waiting if await self.netlink.host_route(a) is not None]
            if not waiting or asyncio.get_running_loop().time() >= deadline:
                return waiting
            await asyncio.sleep(VACATED_POLL)

    async def remove(self, addresses: Iterable[str]) -> None:
        """Delete the rules of released ``addresses`` (whatever table their ``from`` rule names).

        Raises:
            DatapathError: a rule could not be deleted (the next reconcile tries again).
        """
        gone = list(addresses)
        async with self._lock:
            for address in gone:
                await self.netlink.delete_rule(Rule(TO_POD_PRIORITY, MAIN_TABLE, destination=address))
                await self.netlink.delete_rule(Rule(FROM_POD_PRIORITY, 0, source=address))

    async def check(self, address: str, interface_id: str) -> str:
        """What a held address lacks of its rules (empty: nothing), for the plugin's CHECK."""
        async with self._lock:
            present = await self.netlink.rules()
        missing = [
            r
            for r in pod_rules(address, self.interfaces.get(interface_id), self.settings)
            if r not in present
        ]
        return ", ".join(f"{r.priority}" for r in missing)

    async def clear(self) -> Changes:
        """Remove everything the datapath made (rules, routes, the SNAT table): the datapath turned off."""
        async with self._lock:
            self.interfaces = {}
            return await self._apply(plan((), {}, self.settings), snat_off=True)

    # -- internals ---------------------------------------------------------------------------------

    async def _apply(self, wanted: Plan, *, snat_off: bool = False) -> Changes:
        links = await self.netlink.links()
        missing = tuple(
            sorted(i.id for i in self.interfaces.values() if i.mac and i.mac not in links and i.subnet)
        )
        devices_set_up = 0
        for device in wanted.devices:
            link = links.get(device.mac)
            if link is None:
                continue
            if not link.up or link.mtu != device.mtu or device.address not in link.addresses:
                devices_set_up += 1
            await self.netlink.set_up(link, mtu=device.mtu, address=device.address)
        for mac in wanted.loose_rp_filter:
            link = links.get(mac)
            if link is not None:
                self.netlink.loosen_rp_filter(link)
        links = await self.netlink.links() if devices_set_up else links
        by_index = {link.index: link.mac for link in links.values()}
        present_routes = await self.netlink.routes(by_index)
        wanted_routes = {r for r in wanted.routes if r.mac in links}
        routes_deleted = 0
        # Routes through a gateway after the route to the gateway's link, and gone before it.
        for route in sorted(present_routes - wanted_routes, key=lambda r: (not r.gateway, r)):
            await self.netlink.delete_route(route)
            routes_deleted += 1
        routes_set = 0
        for route in sorted(wanted_routes - present_routes, key=lambda r: (bool(r.gateway), r)):
            await self.netlink.replace_route(route, links[route.mac].index)
            routes_set += 1
        present_rules = await self.netlink.rules()
        wanted_rules = set(wanted.rules)
        rules_deleted = 0
        for rule in sorted(present_rules - wanted_rules):
            await self.netlink.delete_rule(rule)
            rules_deleted += 1
        rules_added = 0
        for rule in sorted(wanted_rules - present_rules):
            await self.netlink.add_rule(rule)
            rules_added += 1
        snat_written = False
        if snat_off or wanted.snat is None:
            snat_written = await self.snat.remove()
        else:
            primary: Link | None = links.get(wanted.snat.device_mac)
            if primary is not None:
                snat_written = await self.snat.ensure(wanted.snat, primary.name)
        return Changes(
            rules_added=rules_added,
            rules_deleted=rules_deleted,
            routes_set=routes_set,
            routes_deleted=routes_deleted,
            devices_set_up=devices_set_up,
            snat_written=snat_written,
            missing_devices=missing,
        )
