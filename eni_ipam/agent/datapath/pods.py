"""The datapath as the plugin's API sees it: what an ADD, a DEL, a GC and a CHECK ask of it.

Only the default pool's addresses (the node's ENIPool: addresses of the node's interfaces) have a
datapath; a static pool's (a libnetwork network, a claim) are routed by whoever uses them.

What the plugin answers changes too: the gateway is the primary address of the interface that owns
the pod's address, not the subnet's router. ``ptp`` puts the gateway on the host side of the pod's
veth and routes the pod's whole subnet through it, so the pod sends everything to the host, which
routes it by the rules; that address is the node's own (on the interface the datapath set up), never
another host's, and inside the pod's subnet as ``ptp`` requires. The router's own address would be
taken by the host as one of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from eni_ipam.agent.datapath.datapath import Datapath
from eni_ipam.agent.types import DEFAULT_POOL, Allocation, Family


class PodRoutes:
    def __init__(self, datapath: Datapath) -> None:
        self.datapath = datapath

    @staticmethod
    def _routed(allocations: Sequence[Allocation]) -> list[Allocation]:
        return [a for a in allocations if a.pool == DEFAULT_POOL and a.family == Family.IPV4]

    def present(self, allocation: Allocation) -> Allocation:
        """The allocation as the plugin answers it (unchanged outside the default pool, and for an
        interface the pool no longer lists: its addresses are not handed out)."""
        owner = self.datapath.interfaces.get(allocation.interface_id)
        if not self._routed([allocation]) or owner is None or not owner.primary_ip:
            return allocation
        return dataclasses.replace(allocation, gateway=owner.primary_ip)

    async def added(self, allocations: Sequence[Allocation]) -> None:
        """Install the rules of an ADD's addresses (first removing any a crash left for the address).

        Raises:
            DatapathError: a rule could not be installed.
        """
        routed = self._routed(allocations)
        if not routed:
            return
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
