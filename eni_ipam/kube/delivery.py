"""Delivery: the ENIPool of every maintained Node handed to the NodeManager as a NodeResource.

Role: the source (:mod:`~eni_ipam.kube.source`) calls :meth:`Delivery.deliver` on every event that
may change what the manager sees of a node (the pool's spec, the addresses its agent reports used,
its handshake answers, the node's pending pods) and :meth:`Delivery.forget` when a node leaves (its
Node went or stopped being selected, its pool was deleted). :meth:`Delivery.depart` takes a node out
of the manager for good before its pool's finalizer goes (:mod:`~eni_ipam.kube.pools`).

Invariants:

* The manager gets a resource only when it differs from the last one it got for that node: never
  for the controller's own status writes (a status write, its event, a pass, another status write
  would loop).
* A pool whose spec or status is invalid is not handed over; the manager keeps what it had, and the
  refusal is logged once per version of the pool (not once per event), naming the field.
* Of the pools naming one instance only the holder (:mod:`~eni_ipam.kube.instances`) is handed over;
  the others leave the manager and publish a ``DuplicateInstance`` status. A pool that stops naming
  an instance, or leaves, hands the instance's other pools over again.
* A node taken out of the manager leaves its :class:`~eni_ipam.core.manager.Departure` behind until
  the term ends, so that its pool's finalizer can wait for a pass still running.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import structlog

from eni_ipam.core.manager import Departure, NodeManager
from eni_ipam.core.spec import NodeResource
from eni_ipam.errors import ConfigError
from eni_ipam.kube.informer import Informer
from eni_ipam.kube.instances import InstanceIndex, duplicate_status
from eni_ipam.kube.projection import PoolInfo
from eni_ipam.kube.resources import resource_from_pool
from eni_ipam.kube.status import StatusWriter

log = structlog.get_logger("eni_ipam.kube.delivery")


class Delivery:
    def __init__(
        self,
        *,
        pools: Informer[PoolInfo],
        maintained: Callable[[str, PoolInfo], bool],
        pending_pods: Mapping[str, int],
        writer: StatusWriter,
    ) -> None:
        """``pools``: the ENIPool informer; ``maintained``: whether the source maintains a pool
        of that name (its Node is here and selected, the pool is that Node's, not being deleted);
        ``pending_pods``: the pods waiting on each node; ``writer``: where statuses go."""
        self.manager: NodeManager | None = None
        """The manager while leading (:meth:`begin`); None otherwise."""
        self.instances = InstanceIndex(pools, maintained=maintained)
        self._pools = pools
        self._maintained = maintained
        self._pending_pods = pending_pods
        self._writer = writer
        self._delivered: dict[str, NodeResource] = {}
        self._leaving: dict[str, Departure] = {}
        """Nodes that left the manager; their pool's finalizer waits for their last pass."""
        self._said: dict[str, str] = {}
        """What was last logged of a pool not handed over: the version refused, or ``duplicate:HOLDER``."""

    def begin(self, manager: NodeManager) -> None:
        """A term begins: pools go to ``manager`` from now on."""
        self.manager = manager

    def end(self) -> None:
        """The term ended: the manager and what it was given are forgotten."""
        self.manager = None
        self._delivered.clear()
        self._leaving.clear()

    def index(self, name: str, obj: PoolInfo | None) -> None:
        """Pool ``name`` names ``obj``'s instance now (``obj`` None: none, the pool is going)."""
        freed = self.instances.index(name, obj)
        if freed and self.manager is not None:
            self._redeliver(freed, but=name)  # the instance may be free for another pool now

    def deliver(self, name: str, obj: PoolInfo) -> None:
        """Hand ``obj`` to the manager if the source maintains it, it holds its instance, it is valid
        and the manager sees something new in it."""
        assert self.manager is not None
        if not self._maintained(name, obj):
            return  # only the pools of selected Nodes are maintained (a stale pool waits for the GC)
        holder = self.instances.holder(name, obj)
        if holder != name:
            self._duplicate(name, obj, holder)
            return
        try:
            resource = resource_from_pool(obj, pending_pods=self._pending_pods.get(name, 0))
        except ConfigError as exc:
            version = obj.resource_version
            if self._said.get(name) != version:  # once per version, not once per event
                self._said[name] = version
                log.warning("pool_invalid", pool=name, field=exc.field, error=exc.message)
            return
        self._said.pop(name, None)
        if self._delivered.get(name) == resource:
            return  # only our own status changed
        self._delivered[name] = resource
        self.manager.upsert(resource)

    def forget(self, name: str) -> None:
        """Node ``name`` leaves the manager (its pool, if any, is no longer maintained)."""
        self._delivered.pop(name, None)
        self._writer.forget(name)
        self._leave(name)
        self._redeliver(self.instances.instance(name), but=name)

    def depart(self, name: str) -> Departure | None:
        """Take node ``name`` out of the manager before its pool's record goes: the handle of its last
        pass (None when it has none to wait for)."""
        departure = self.manager.delete(name) if self.manager is not None else None
        departure = departure or self._leaving.pop(name, None)
        self._delivered.pop(name, None)
        return departure

    def _leave(self, name: str) -> None:
        departure = self.manager.delete(name) if self.manager is not None else None
        if departure is not None:
            self._leaving[name] = departure

    def _duplicate(self, name: str, obj: PoolInfo, holder: str) -> None:
        instance = obj.instance_id
        if name in self._delivered or (self.manager is not None and name in self.manager.nodes):
            self._delivered.pop(name, None)
            self._leave(name)
        if self._said.get(name) != f"duplicate:{holder}":
            self._said[name] = f"duplicate:{holder}"
            log.warning("pool_duplicate_instance", pool=name, instance=instance, held_by=holder)
        self._writer.publish(name, duplicate_status(instance, holder))

    def _redeliver(self, instance: str, *, but: str) -> None:
        if not instance or self.manager is None:
            return
        for other in self.instances.rivals(instance, but=but):
            pool = self._pools.store.get(other)
            if pool is not None and not pool.deleting:
                self.deliver(other, pool)
