"""The Kubernetes node source: Nodes → ENIPools → the NodeManager, pending Pods → surge.

Three informers run on every replica, so a standby's caches are warm when it takes over:
Nodes (optionally by label selector), ENIPools, and Pods in phase Pending (field selector).

While leading (:meth:`KubeNodeSource.lead`):

* every Node with a provider id gets an ENIPool (spec from ``node_defaults``, owned by the Node,
  carrying the :data:`~eni_ipam.kube.resources.FINALIZER`); only the Node-derived fields
  (instance, type, zone) are kept up to date — people's edits to the rest of the spec stay;
* the ENIPool of every selected Node is handed to the manager (``upsert``) when what the manager
  sees changes — the spec, the addresses the agent reports used, its handshake answers, or the
  node's pending pods — and never for the controller's own status writes (that would loop); a
  Node that goes or stops being selected leaves the manager at once, and a pool of an earlier Node
  of the same name (another uid) is left to the garbage collector;
* an ENIPool being deleted (its Node went, and the garbage collector deletes what the Node owned)
  leaves the manager first; its finalizer is removed only once no pass of that node is running
  (waiting at most ``PASS_WAIT``), so no address is handed out after the pool's record is gone.

Handlers only queue work; one loop does the writes, in order, retrying failures with backoff.

The informers keep projections (:mod:`~eni_ipam.kube.projection`), never whole objects: what is
read of a Node, a Pending Pod and an ENIPool is all that stays in memory, and the list made at the
start of a term keeps only each pool's :class:`~eni_ipam.core.records.NodeRecord` (and, for the
status writer, the projection of a pool the informer has not caught up with). Statuses go to
the :class:`~eni_ipam.kube.status.StatusWriter`, which orders them by need (this source tells it how
many pods wait on each node) and skips those the pools already hold.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import random
from collections.abc import Collection
from typing import Any

import structlog

from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.core.backoff import Backoff
from eni_ipam.core.clock import Clock
from eni_ipam.core.manager import Departure, NodeManager
from eni_ipam.core.model import NodeStatus
from eni_ipam.core.provider import reads_node_store
from eni_ipam.core.records import NodeRecord
from eni_ipam.core.spec import NodeResource, NodeSpec
from eni_ipam.errors import ConfigError
from eni_ipam.kube import errors
from eni_ipam.kube.api import ENIPOOLS, EVENTS, NODES, PODS, KubeApi, Obj
from eni_ipam.kube.informer import EMIT_SLICE, Informer
from eni_ipam.kube.projection import NodeInfo, PendingPod, PoolInfo, project_node, project_pod, project_pool
from eni_ipam.kube.resources import (
    FINALIZER,
    defaults_patch,
    node_fields_patch,
    node_record,
    pool_for_node,
    provider_id_scheme,
    resource_from_pool,
)
from eni_ipam.kube.settings import KubeSettings
from eni_ipam.kube.status import StatusWriter
from eni_ipam.kube.views import NodeView

log = structlog.get_logger("eni_ipam.kube.source")

LISTED_TTL = 300.0
"""Seconds the list made at the start of a term is merged into the records at most, in case the
informer's version never passes it (no pool changes): by then its watch has long caught up."""


def _older(current: str, listed: str) -> bool:
    """Whether ``current`` is known to be an older resourceVersion than ``listed``."""
    return current.isdigit() and listed.isdigit() and int(current) < int(listed)


def _caught_up(current: str, listed: str) -> bool:
    """Whether the informer has seen everything the list saw (resourceVersions of one etcd)."""
    try:
        return int(current) >= int(listed)
    except ValueError:
        return False


def _version(kept: NodeInfo | PoolInfo | PendingPod) -> str:
    return kept.resource_version


def _union(a: NodeRecord, b: NodeRecord) -> NodeRecord:
    return dataclasses.replace(
        a,
        prefixes=tuple(dict.fromkeys((*a.prefixes, *b.prefixes))),
        ipv6_prefixes=tuple(dict.fromkeys((*a.ipv6_prefixes, *b.ipv6_prefixes))),
    )


DELIVER_SLICE = 100
"""Pools handed to the manager between two yields to the event loop when a term begins (each is a
validated spec and a node's first stats: about 10 ms for a slice)."""

PASS_WAIT = 60.0
"""Seconds a finalizer waits for a running pass of the node to end before it is removed anyway."""


class KubeNodeSource:
    def __init__(
        self,
        api: KubeApi,
        *,
        settings: KubeSettings,
        node_defaults: NodeSpec | None = None,
        clock: Clock,
        metrics: Metrics,
        rng: random.Random | None = None,
        provider_id_schemes: Collection[str] = (),
    ) -> None:
        """``provider_id_schemes``: the ``spec.providerID`` schemes of the configured provider's Nodes
        (``aws``); a Node of another cloud gets no pool. Empty: any scheme (and ``node-name`` ids)."""
        self.api = api
        self.settings = settings
        self.schemes = frozenset(provider_id_schemes)
        self.metrics = metrics
        self.instance_ids = settings.instance_ids or "provider-id"
        self.term = 0
        """Leadership terms begun (:class:`~eni_ipam.core.records.NodeRecords`)."""
        self.node_defaults = node_defaults
        """The spec keys a new ENIPool starts with (``node_defaults`` of the run configuration)."""
        self.clock = clock
        self.rng = rng or random.Random()
        common: dict[str, Any] = {"clock": clock, "metrics": metrics, "watch_timeout": settings.watch_timeout}
        self.nodes = Informer(
            api,
            NODES,
            project=project_node,
            version=_version,
            view=NodeView,
            labels=settings.node_selector,
            **common,
        )
        self.pools = Informer(api, ENIPOOLS, project=project_pool, version=_version, **common)
        self.pods = Informer(
            api, PODS, project=project_pod, version=_version, fields={"status.phase": "Pending"}, **common
        )
        self.nodes.add_handler(self._on_node)
        self.pools.add_handler(self._on_pool)
        self.pods.add_handler(self._on_pod)
        self.writer = StatusWriter(
            api,
            lookup=lambda name: self.pools.store.get(name),
            clock=clock,
            metrics=metrics,
            qps=settings.status_qps,
            burst=settings.status_burst,
            pending_pods=lambda name: self.pending_pods.get(name, 0),
        )
        self.manager: NodeManager | None = None
        self.pending_pods: collections.Counter[str] = collections.Counter()
        self._pod_nodes: dict[str, str] = {}
        self._delivered: dict[str, NodeResource] = {}
        # Left the manager; their pool's finalizer waits for their last pass.
        self._leaving: dict[str, Departure] = {}
        self._invalid: dict[str, str] = {}
        self._listed: dict[str, NodeRecord] = {}
        """The pools' records as a fresh list saw them when this term began (see :meth:`node_records`)."""
        self._listed_version = ""
        self._listed_at = 0.0
        self._todo: dict[str, str] = {}  # pool name → "ensure" or "finalize"
        self._wake = asyncio.Event()
        self._foreign: set[str] = set()
        """Nodes whose provider id names another cloud (ignored, said once each)."""
        self._pool_instance: dict[str, str] = {}
        self._instance_pools: dict[str, set[str]] = collections.defaultdict(set)
        """Pools by the instance they name: one instance, one pool holding addresses."""
        self._deleted_by_hand: set[str] = set()
        """Pools deleted while their Node exists: recreated, with an event saying so."""

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in (self.nodes, self.pools, self.pods))

    def node_records(self) -> list[NodeRecord] | None:
        """What every ENIPool's status publishes (None until the pools have been listed).

        The informer's cache may be behind what the previous leader wrote just before it stopped
        (a watch that was down, events still in flight). Until the cache has caught up with the list
        made when this term began, a pool's record is the union of both, so nothing the previous
        leader published is missed.
        """
        if not self.pools.synced.is_set():
            return None
        records = {r.name: r for r in map(node_record, self.pools.store.values()) if r is not None}
        if self._listed and (
            _caught_up(self.pools.resource_version, self._listed_version)
            or self.clock.monotonic() - self._listed_at > LISTED_TTL
        ):
            self._listed = {}
        for name, old in self._listed.items():
            current = records.get(name)
            records[name] = old if current is None else _union(current, old)
        return list(records.values())

    async def _list_pools_for_term(self) -> None:
        backoff = Backoff(initial=0.5, maximum=10.0, rng=self.rng)
        while True:
            try:
                records, version = await self.api.list(ENIPOOLS, project=self._term_record)
                break
            except errors.KubeError as exc:
                delay = backoff.next_delay()
                log.warning("pool_list_failed", error=str(exc), retry_in=round(delay, 3))
                await self.clock.sleep(delay)
        self._listed = {r.name: r for r in records if r is not None}
        self._listed_version, self._listed_at = version, self.clock.monotonic()

    def _term_record(self, obj: Obj) -> NodeRecord | None:
        """What the list made at the start of a term keeps of a pool: its record. A pool the
        informer has an older version of (the previous leader's last writes may still be on their
        way to its watch) is handed to the status writer too, so a status that pool already holds is
        not written again."""
        cached = self.pools.store.get(str(obj["metadata"]["name"]))
        listed = str(obj["metadata"].get("resourceVersion") or "")
        if cached is None or _older(cached.resource_version, listed):
            self.writer.remember(project_pool(obj))
        return node_record(obj)

    async def run(self) -> None:
        """Keep the caches current until cancelled (every replica runs this)."""
        async with asyncio.TaskGroup() as tg:
            for informer in (self.nodes, self.pools, self.pods):
                tg.create_task(informer.run(), name=f"eni-ipam-informer-{informer.kind.plural}")

    async def lead(self, manager: NodeManager) -> None:
        """Feed ``manager`` and keep ENIPools in step with Nodes until cancelled (leader only).
        ``manager`` must publish its statuses to :attr:`writer`."""
        try:
            async with asyncio.TaskGroup() as tg:
                # The cloud's first listing needs no node: it runs while the nodes and pools are
                # learnt (at 100,000 nodes, each takes tens of seconds), unless the provider builds
                # its view from the pools themselves.
                listing = (
                    None
                    if reads_node_store(manager.provider)
                    else tg.create_task(manager.first_listing(), name="eni-ipam-first-listing")
                )
                for informer in (self.nodes, self.pools, self.pods):
                    await informer.synced.wait()
                await self._list_pools_for_term()
                self.term += 1  # another leader may have changed every pool since our last term
                self.manager = manager
                for n, obj in enumerate(list(self.pools.store.values())):
                    if n and n % DELIVER_SLICE == 0:
                        await asyncio.sleep(0)  # 100,000 pools are not delivered in one go
                    self._on_pool("ADDED", obj, None)
                for name in list(self.nodes.store):
                    self._queue(name, "ensure")
                tg.create_task(manager.run(first=listing), name="eni-ipam-manager")
                tg.create_task(self.writer.run(), name="eni-ipam-status-writer")
                tg.create_task(self._work(), name="eni-ipam-pool-writer")
        finally:
            self.manager = None
            self._delivered.clear()
            self._leaving.clear()
            self._todo.clear()

    # -- informer handlers (synchronous; they only record and queue) --------------------------------

    def _on_node(self, event: str, obj: NodeInfo, old: NodeInfo | None) -> None:
        if self.manager is None:
            return
        name = obj.name
        if event == "DELETED":
            # Gone, or no longer selected: stop maintaining it now (its pool, if the Node is really
            # gone, follows through the garbage collector and the finalizer).
            self._deleted_by_hand.discard(name)
            if name in self._foreign:
                self._foreign.discard(name)
                self.metrics.nodes_ignored.labels(reason="provider-id-scheme").set(len(self._foreign))
            self._forget(name)
            return
        self._queue(name, "ensure")
        pool = self.pools.store.get(name)
        if pool is not None and not pool.deleting:
            self._deliver(name, pool)  # newly selected, or re-selected

    def _on_pool(self, event: str, obj: PoolInfo, old: PoolInfo | None) -> None:
        self.writer.seen(obj)
        manager = self.manager
        if manager is None:
            return
        name = obj.name
        if event == "DELETED":
            self._index(name, None)
            self._forget(name)
            node = self.nodes.store.get(name)
            if node is not None and _owned_by(obj, node):
                self._deleted_by_hand.add(name)  # its Node is still here: someone deleted the pool
            self._todo[name] = "ensure"  # the Node may still be there (re-created): a new pool then
            self._wake.set()
        elif obj.deleting:
            self._index(name, None)
            self._queue(name, "finalize")
        else:
            self._index(name, obj)
            self._deliver(name, obj)

    def _on_pod(self, event: str, obj: PendingPod, old: PendingPod | None) -> None:
        key = obj.key
        before = self._pod_nodes.pop(key, None)
        after = obj.node if event != "DELETED" else None  # no node for a host-network Pod
        if after:
            self._pod_nodes[key] = after
        if before == after:
            return
        for node, delta in ((before, -1), (after, +1)):
            if node:
                self.pending_pods[node] += delta
                if self.pending_pods[node] <= 0:
                    del self.pending_pods[node]
                pool = self.pools.store.get(node)
                if pool is not None and self.manager is not None and not pool.deleting:
                    self._deliver(node, pool)

    def _deliver(self, name: str, obj: PoolInfo) -> None:
        assert self.manager is not None
        node = self.nodes.store.get(name)
        if node is None or not _owned_by(obj, node):
            return  # only the pools of selected Nodes are maintained (a stale pool waits for the GC)
        if self._foreign_node(node):
            return
        holder = self._holder(name, obj)
        if holder != name:
            self._duplicate(name, obj, holder)
            return
        try:
            resource = resource_from_pool(obj, pending_pods=self.pending_pods.get(name, 0))
        except ConfigError as exc:
            version = obj.resource_version
            if self._invalid.get(name) != version:  # once per version, not once per event
                self._invalid[name] = version
                log.warning("pool_invalid", pool=name, field=exc.field, error=exc.message)
            return
        self._invalid.pop(name, None)
        if self._delivered.get(name) == resource:
            return  # only our own status changed
        self._delivered[name] = resource
        self.manager.upsert(resource)

    def _forget(self, name: str) -> None:
        self._delivered.pop(name, None)
        self.writer.forget(name)
        departure = self.manager.delete(name) if self.manager is not None else None
        if departure is not None:
            self._leaving[name] = departure
        self._redeliver_instance(self._pool_instance.get(name, ""), but=name)

    # -- one instance, one pool -----------------------------------------------------------------

    def _index(self, name: str, obj: PoolInfo | None) -> None:
        """Keep the instance index of pools current (``obj`` None: the pool is going)."""
        old = self._pool_instance.pop(name, None)
        if old is not None:
            self._instance_pools[old].discard(name)
            if not self._instance_pools[old]:
                del self._instance_pools[old]
        instance = obj.instance_id if obj is not None else None
        if isinstance(instance, str) and instance:
            self._pool_instance[name] = instance
            self._instance_pools[instance].add(name)
        if old is not None and old != instance and self.manager is not None:
            self._redeliver_instance(old, but=name)  # the instance may be free for another pool now

    def _holder(self, name: str, obj: PoolInfo) -> str:
        """The pool that holds ``obj``'s instance: the oldest live pool naming it (then by name)."""
        instance = obj.instance_id
        rivals = self._instance_pools.get(instance, set()) if isinstance(instance, str) else set()
        candidates = []
        for other in rivals | {name}:
            pool = obj if other == name else self.pools.store.get(other)
            node = self.nodes.store.get(other)
            if pool is None or node is None or pool.deleting or not _owned_by(pool, node):
                continue
            if self._foreign_node(node):
                continue
            candidates.append((pool.created, other))
        return min(candidates)[1] if candidates else name

    def _duplicate(self, name: str, obj: PoolInfo, holder: str) -> None:
        instance = obj.instance_id
        if name in self._delivered or (self.manager is not None and name in self.manager.nodes):
            self._delivered.pop(name, None)
            departure = self.manager.delete(name) if self.manager is not None else None
            if departure is not None:
                self._leaving[name] = departure
        if self._invalid.get(name) != f"duplicate:{holder}":
            self._invalid[name] = f"duplicate:{holder}"
            log.warning("pool_duplicate_instance", pool=name, instance=instance, held_by=holder)
        message = (
            f"instance {instance} is node {holder}'s already: its pool holds the addresses, and this "
            "pool gets none (two nodes on one instance would hand out the same addresses)"
        )
        self.writer.publish(name, NodeStatus(problem="DuplicateInstance", message=message))

    def _redeliver_instance(self, instance: str, *, but: str) -> None:
        if not instance or self.manager is None:
            return
        for other in sorted(self._instance_pools.get(instance, ())):
            pool = self.pools.store.get(other)
            if other != but and pool is not None and not pool.deleting:
                self._deliver(other, pool)

    # -- Nodes of another cloud -----------------------------------------------------------------

    def _foreign_node(self, node: NodeInfo) -> bool:
        """Whether ``node`` belongs to another cloud than the configured provider's (said once)."""
        name = node.name
        scheme = provider_id_scheme(node)
        foreign = bool(
            self.schemes and self.instance_ids == "provider-id" and scheme and scheme not in self.schemes
        )
        if foreign and name not in self._foreign:
            self._foreign.add(name)
            log.warning(
                "node_of_another_cloud",
                node=name,
                provider_id=node.provider_id,
                expected=sorted(self.schemes),
            )
        elif not foreign and name in self._foreign:
            self._foreign.discard(name)
        self.metrics.nodes_ignored.labels(reason="provider-id-scheme").set(len(self._foreign))
        return foreign

    def _queue(self, name: str, action: str) -> None:
        if self._todo.get(name) != "finalize":  # a finalize is never downgraded
            self._todo[name] = action
        self._wake.set()

    # -- the one writer of ENIPool objects ------------------------------------------------------------

    async def _work(self) -> None:
        backoff = Backoff(initial=1.0, maximum=60.0, rng=self.rng)
        while True:
            await self._wake.wait()
            self._wake.clear()
            failed: dict[str, str] = {}
            todo, self._todo = self._todo, {}
            for n, (name, action) in enumerate(todo.items()):
                if n and n % EMIT_SLICE == 0:
                    await asyncio.sleep(0)  # most pools need nothing: no call yields for them
                try:
                    if action == "finalize":
                        await self._finalize(name)
                    else:
                        await self._ensure(name)
                except errors.KubeError as exc:
                    log.warning("pool_write_failed", pool=name, action=action, error=str(exc))
                    failed[name] = action
            if failed:
                for name, action in failed.items():
                    self._todo.setdefault(name, action)
                await self.clock.sleep(backoff.next_delay())
                self._wake.set()
            else:
                backoff.reset()

    async def _ensure(self, name: str) -> None:
        node = self.nodes.store.get(name)
        if node is None:
            return  # no Node (or not selected): the pool, if any, is people's or goes with its Node
        if self._foreign_node(node):
            return  # a Node of another cloud: no pool
        pool = self.pools.store.get(name)
        if pool is None:
            body = pool_for_node(node, self.node_defaults, instance_ids=self.instance_ids)
            if body is None:
                log.debug("node_without_provider_id", node=name)
                return
            try:
                created = await self.api.create(ENIPOOLS, body)
            except errors.KubeConflict:
                return  # created meanwhile; its event follows
            log.info("pool_created", pool=name, instance=created["spec"]["instanceID"])
            if name in self._deleted_by_hand:
                self._deleted_by_hand.discard(name)
                await self._recreated(node)
            return
        if pool.deleting or not _owned_by(pool, node):
            return  # a pool of an earlier Node of this name: the GC deletes it, then a new one is made
        patch = node_fields_patch(pool, node, instance_ids=self.instance_ids) or {}
        defaults = defaults_patch(pool, self.node_defaults)
        if defaults is not None:
            patch = {**defaults, "spec": {**patch.get("spec", {}), **defaults.get("spec", {})}}
        if patch.get("spec") or patch.get("metadata"):
            if not patch.get("spec"):
                patch.pop("spec", None)
            await self.api.patch(ENIPOOLS, name, patch)
            log.info("pool_updated", pool=name, fields=sorted(patch.get("spec", {})))

    async def _recreated(self, node: NodeInfo) -> None:
        """Say on the Node, as an event, that its pool was deleted by hand and made again."""
        name = node.name
        now = self.clock.now_utc().strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            # "<node>-" and a server-made suffix: a generateName must itself be a DNS subdomain but
            # for a trailing "-" (a trailing "." is refused with 422 by the API server).
            "metadata": {"generateName": f"{name}-", "namespace": "default"},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Node",
                "name": name,
                "uid": node.uid,
            },
            "reason": "PoolRecreated",
            "message": (
                f"ENIPool {name} was deleted while its Node exists; eni-ipam created it again from "
                "node_defaults (edits made to the deleted pool are not restored)"
            ),
            "type": "Warning",
            "source": {"component": "eni-ipam"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        log.warning("pool_recreated", pool=name)
        try:
            await self.api.create(EVENTS, event)
        except errors.KubeError as exc:
            log.warning("event_failed", pool=name, error=str(exc))

    async def _finalize(self, name: str) -> None:
        departure = self.manager.delete(name) if self.manager is not None else None
        departure = departure or self._leaving.pop(name, None)
        self._delivered.pop(name, None)
        if departure is not None and departure.running:
            try:
                async with asyncio.timeout(PASS_WAIT):  # the loop's clock, which the injected one reads
                    await departure.idle()  # a pass in flight finishes before the record may go
            except TimeoutError:
                log.warning("pool_released_during_pass", pool=name, waited=PASS_WAIT)
        self.writer.forget(name)
        pool = self.pools.store.get(name)
        for _ in range(3):
            if pool is None:
                return
            finalizers = list(pool.finalizers)
            if FINALIZER not in finalizers:
                return
            finalizers.remove(FINALIZER)
            version = pool.resource_version
            try:
                await self.api.patch(
                    ENIPOOLS, name, {"metadata": {"finalizers": finalizers, "resourceVersion": version}}
                )
            except errors.KubeConflict:
                try:
                    pool = project_pool(await self.api.get(ENIPOOLS, name))
                except errors.KubeNotFound:
                    return
                continue
            except errors.KubeNotFound:
                return
            log.info("pool_released", pool=name)
            return


def _owned_by(pool: PoolInfo, node: NodeInfo) -> bool:
    """Whether ``pool`` belongs to this incarnation of ``node`` (a Node re-created under the same
    name has a new uid). Pools without a Node owner (made by hand) belong to the Node of their name."""
    uid = node.uid
    return not pool.node_owners or not uid or uid in pool.node_owners
