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
* A pool's spec is validated once per version (:class:`ParsedSpecs`): the events that change only
  its status (the controller's own writes among them) or its node's pending pods cost a comparison
  of the spec with the one validated, not a validation.
* Of the pools naming one instance only the holder (:mod:`~eni_ipam.kube.instances`) is handed over;
  the others leave the manager and publish a ``DuplicateInstance`` status. A pool that stops naming
  an instance, or leaves, hands the instance's other pools over again.
* The instance the manager is given, and that the pools are indexed by, is the Node's
  (``as_node_says``), never a value edited into the pool's spec: a typo there names another node's
  instance, and would take that node's addresses or leave this one without any. The pool writer puts
  the spec back (:mod:`~eni_ipam.kube.pools`).
* A node taken out of the manager leaves its :class:`~eni_ipam.core.manager.Departure` behind until
  the term ends, so that its pool's finalizer can wait for a pass still running.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import structlog

from eni_ipam.core.manager import Departure, NodeManager
from eni_ipam.core.spec import NodeResource, NodeSpec
from eni_ipam.errors import ConfigError
from eni_ipam.kube.informer import Informer
from eni_ipam.kube.instances import InstanceIndex, duplicate_status
from eni_ipam.kube.projection import PoolInfo
from eni_ipam.kube.resources import instance_and_spec, resource_from_pool
from eni_ipam.kube.status import StatusWriter

log = structlog.get_logger("eni_ipam.kube.delivery")


@dataclasses.dataclass(slots=True)
class _Parsed:
    """What validating one version of a pool's spec gave: its instance and node spec, or the refusal
    (``field``, ``message``)."""

    generation: int
    raw: object
    instance_id: str
    spec: NodeSpec | None
    refusal: tuple[str, str]


def _parse(pool: PoolInfo) -> _Parsed:
    try:
        instance_id, spec = instance_and_spec(pool)
    except ConfigError as exc:
        return _Parsed(pool.generation, pool.spec, "", None, (exc.field, exc.message))
    return _Parsed(pool.generation, pool.spec, instance_id, spec, ("", ""))


class ParsedSpecs:
    """Each pool's spec as last validated, by pool name: a spec seen before costs a comparison, not
    a validation.

    Every status the controller writes comes back as a watch event of the pool, as does every report
    of its node agent, and a change of a node's pending pods hands its pool over again: the spec in
    all of them is the one validated already. It is validated again only when the pool's
    ``metadata.generation`` or the spec itself differs from the version validated. The API server
    moves the generation of a custom resource with every change to its spec, and never for a status
    write (ENIPools have a status subresource), so the generation tells apart values that Python
    finds equal but the validator does not (``1``, ``1.0``, ``true``); comparing the specs covers a
    pool made anew under the same name (its generation starts at 1 again) and an object that carries
    no generation.

    A refusal is kept too: an invalid spec raises the same :class:`~eni_ipam.errors.ConfigError` (a
    new one, with the same field and message) each time it is read, without being validated again.

    Held per pool: the spec as the informer's latest projection holds it (that very object once it has
    been read, not an older copy), its instance and its node spec, one object for equal specs
    (:meth:`~eni_ipam.core.spec.NodeSpec.fields`); not the validated model (a kilobyte a pool).
    """

    def __init__(self) -> None:
        self._kept: dict[str, _Parsed] = {}

    def read(self, pool: PoolInfo) -> tuple[str, NodeSpec]:
        """``pool``'s instance and node spec.

        Raises:
            ConfigError: a spec value is invalid (as :func:`~eni_ipam.kube.resources.spec_from_pool`).
        """
        raw = pool.spec
        kept = self._kept.get(pool.name)
        if kept is None or kept.generation != pool.generation or (kept.raw is not raw and kept.raw != raw):
            kept = self._kept[pool.name] = _parse(pool)
        else:
            kept.raw = raw  # the older, equal copy goes with the projection that held it
        if kept.spec is None:
            raise ConfigError(*kept.refusal)
        return kept.instance_id, kept.spec

    def forget(self, name: str) -> None:
        self._kept.pop(name, None)

    def clear(self) -> None:
        self._kept.clear()


def _as_it_is(name: str, pool: PoolInfo) -> PoolInfo:
    return pool


class Delivery:
    def __init__(
        self,
        *,
        pools: Informer[PoolInfo],
        maintained: Callable[[str, PoolInfo], bool],
        pending_pods: Mapping[str, int],
        writer: StatusWriter,
        as_node_says: Callable[[str, PoolInfo], PoolInfo] = _as_it_is,
    ) -> None:
        """``pools``: the ENIPool informer; ``maintained``: whether the source maintains a pool
        of that name (its Node is here and selected, the pool is that Node's, not being deleted);
        ``pending_pods``: the pods waiting on each node; ``writer``: where statuses go;
        ``as_node_says``: the pool with the fields that follow its Node (instance, type, zone) as the
        Node gives them."""
        self.manager: NodeManager | None = None
        self._as_node_says = as_node_says
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
        self.specs = ParsedSpecs()

    def begin(self, manager: NodeManager) -> None:
        """A term begins: pools go to ``manager`` from now on."""
        self.manager = manager

    def end(self) -> None:
        """The term ended: the manager and what it was given are forgotten."""
        self.manager = None
        self._delivered.clear()
        self._leaving.clear()
        self.specs.clear()  # the pools deleted until the next term are not seen: nothing is kept of them

    def index(self, name: str, obj: PoolInfo | None) -> None:
        """Pool ``name`` names ``obj``'s instance now (``obj`` None: none, the pool is going)."""
        if obj is None:
            self.specs.forget(name)
        else:
            obj = self._as_node_says(name, obj)
        freed = self.instances.index(name, obj)
        if freed and self.manager is not None:
            self._redeliver(freed, but=name)  # the instance may be free for another pool now

    def deliver(self, name: str, obj: PoolInfo) -> None:
        """Hand ``obj`` to the manager if the source maintains it, it holds its instance, it is valid
        and the manager sees something new in it."""
        assert self.manager is not None
        if not self._maintained(name, obj):
            return  # only the pools of selected Nodes are maintained (a stale pool waits for the GC)
        obj = self._as_node_says(name, obj)
        holder = self.instances.holder(name, obj)
        if holder != name:
            self._duplicate(name, obj, holder)
            return
        try:
            resource = resource_from_pool(
                obj, pending_pods=self._pending_pods.get(name, 0), read_spec=self.specs.read
            )
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
        self.manager.upsert(resource, listed=obj.listed)

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
