"""A simulated node side for ``demo`` and ``simulate``: uses pool addresses and answers the handshake.

It plays the part of the node agent: a node "uses" ``used`` addresses, taken from its pool lowest
device index first, in address order (addresses it already uses stay in use); addresses the
reconciler marked, or that were answered ready or released, are never handed out. It answers
``marked-for-release`` at once: ``ready-for-release`` when the address is unused, else
``do-not-release``; and forgets a ``released`` entry once the address has left the pool.
"""

from __future__ import annotations

import dataclasses

from eni_ipam.core.model import NodeStatus, ReleaseState, address_key
from eni_ipam.core.spec import NodeResource, NodeSpec
from eni_ipam.store.memory import MemoryStore


class SimulatedNodeSide:
    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.answering = True
        """False plays every node agent down: the handshake gets no answers (nothing is released)."""
        self.down: set[str] = set()
        """The nodes whose agent is down: their handshake gets no answers."""
        store.observe(self._on_status)

    def add(self, resource: NodeResource) -> None:
        self.store.put(resource)

    def update(
        self,
        name: str,
        *,
        spec: NodeSpec | None = None,
        used: int | None = None,
        pending_pods: int | None = None,
        instance_id: str | None = None,
        agent: str | None = None,
    ) -> None:
        """Change a node in one event: its spec, the addresses its pods use, its pending pods, its
        instance, its agent (``up`` or ``down``)."""
        if agent == "down":
            self.down.add(name)
        elif agent == "up":
            self.down.discard(name)
        resource = self.store.resources[name]
        if spec is not None:
            resource = dataclasses.replace(resource, spec=spec)
        if instance_id is not None:
            resource = dataclasses.replace(resource, instance_id=instance_id)
        if pending_pods is not None:
            resource = dataclasses.replace(resource, pending_pods=pending_pods)
        if used is not None:
            resource = dataclasses.replace(resource, used=used)
        if used is not None or agent is not None:  # an agent back up answers what waited
            status = self.store.statuses.get(name)
            if status is not None:
                resource = self._settle(resource, status)
        self.store.put(resource)

    def _on_status(self, name: str, status: NodeStatus) -> None:
        resource = self.store.resources.get(name)
        if resource is None:
            return
        settled = self._settle(resource, status)
        if settled != resource:
            self.store.put(settled)

    def _settle(self, resource: NodeResource, status: NodeStatus) -> NodeResource:
        index = {i.id: i.device_index for i in status.interfaces}
        order = {e.address: (index.get(e.interface_id, 0), address_key(e.address)) for e in status.pool}
        pool = sorted(order, key=order.__getitem__)
        in_pool = set(pool)
        flagged = {a for a in status.release if a not in resource.in_use}
        keep = [a for a in pool if a in resource.in_use][: resource.used]
        in_use = set(keep)
        for address in pool:
            if len(in_use) >= resource.used:
                break
            if address not in in_use and address not in flagged:
                in_use.add(address)
        if not self.answering or resource.name in self.down:
            return dataclasses.replace(resource, in_use=frozenset(in_use))
        answers: dict[str, ReleaseState] = {}
        for address, state in status.release.items():
            if state == ReleaseState.MARKED:
                unused = address in in_pool and address not in in_use
                answers[address] = ReleaseState.READY if unused else ReleaseState.DO_NOT_RELEASE
            elif state == ReleaseState.RELEASED and address in in_pool:
                answers[address] = resource.release_answers.get(address, ReleaseState.READY)
        return dataclasses.replace(resource, in_use=frozenset(in_use), release_answers=answers)
