"""The datapath as the plugin's API sees it: what an ADD, a DEL, a GC and a CHECK ask of it.

Only the default pool's addresses (the node's ENIPool: addresses of the node's interfaces) have a
datapath; a static pool's (a libnetwork network, a claim) are routed by whoever uses them.

What the plugin answers changes too: the address with its subnet's prefix, and as gateway the
subnet's reserved fourth address (:func:`~eni_ipam.agent.datapath.plan.pod_gateway`) instead of its
router. ``ptp`` puts the gateway on the host's end of the veth and routes the pod's whole subnet and
its default route through it, so the pod sends everything to the host, which routes it by the
rules; with the router as gateway the host would take its own router's address. An IPv6 address
(of the node's /80) is answered as it is: its pod routes through the link-local gateway ``ptp`` sets,
and it gets the same rules as an IPv4 one.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Sequence

from eni_ipam.agent.datapath.datapath import Datapath
from eni_ipam.agent.datapath.errors import DatapathError
from eni_ipam.agent.datapath.plan import pod_gateway
from eni_ipam.agent.types import DEFAULT_POOL, Allocation

PREVIOUS_POD_GRACE = 2.0
"""Seconds an ADD waits for the veth of the pod that held its address before (``ptp`` deletes it
just after its IPAM DEL: milliseconds, unless that DEL is stuck)."""


class PodRoutes:
    def __init__(self, datapath: Datapath) -> None:
        self.datapath = datapath

    @staticmethod
    def _routed(allocations: Sequence[Allocation]) -> list[Allocation]:
        """The addresses the datapath routes: the default pool's (the cloud's), of either family (an
        IPv6 pod of a secondary interface needs its rule as an IPv4 one does)."""
        return [a for a in allocations if a.pool == DEFAULT_POOL]

    def present(self, allocation: Allocation) -> Allocation:
        """The allocation as the plugin answers it (unchanged outside the default pool)."""
        if not self._routed([allocation]):
            return allocation
        network = ipaddress.ip_network(f"{allocation.address}/{allocation.prefix_length}", strict=False)
        gateway = pod_gateway(network)
        return allocation if gateway is None else dataclasses.replace(allocation, gateway=str(gateway))

    async def added(self, allocations: Sequence[Allocation], *, existing: bool = False) -> None:
        """Install the rules of an ADD's addresses (first removing any a crash left for the address).
        Addresses just allocated (not ``existing``: the owner's again) are first waited for until
        their previous pod's veth has left the host (:meth:`Datapath.vacated`), at most
        :data:`PREVIOUS_POD_GRACE` seconds.

        Raises:
            DatapathError: a rule could not be installed, or a previous pod's veth is still there.
        """
        routed = self._routed(allocations)
        if not routed:
            return
        if not existing:
            lingering = await self.datapath.vacated((a.address for a in routed), limit=PREVIOUS_POD_GRACE)
            if lingering:
                raise DatapathError(
                    f"the host still routes {', '.join(lingering)} to the veth of the pod that held it "
                    f"before (its DEL is not finished after {PREVIOUS_POD_GRACE:g} s); try again later"
                )
        await self.datapath.remove(a.address for a in routed)
        await self.datapath.add([(a.address, a.interface_id) for a in routed])

    async def released(self, allocations: Sequence[Allocation]) -> None:
        """Delete the rules of released addresses.

        Raises:
            DatapathError: a rule could not be deleted (the next reconcile does it).
        """
        await self.datapath.remove(a.address for a in self._routed(allocations))

    async def missing(self, allocations: Sequence[Allocation]) -> str:
        """What the held addresses lack of their rules (empty: nothing), for CHECK."""
        lacking = []
        for allocation in self._routed(allocations):
            absent = await self.datapath.check(allocation.address, allocation.interface_id)
            if absent:
                lacking.append(f"{allocation.address} (rules {absent})")
        return ", ".join(lacking)
