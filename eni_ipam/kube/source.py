"""The Kubernetes node source: Nodes → ENIPools → the NodeManager, pending Pods → surge.

Three informers run on every replica, so a standby's caches are warm when it takes over:
Nodes (optionally by label selector), ENIPools, and Pods in phase Pending (field selector).

Role: :class:`KubeNodeSource` follows the informers and decides what each event asks for; the work
itself is done by one module per job, built here and fed by the handlers:

* :mod:`~eni_ipam.kube.pools`: the one writer of ENIPool objects. Every Node with a provider id
  gets an ENIPool; only its Node-derived fields (and the fields following ``node_defaults``, or the
  profile the Node's labels choose: every Node event re-ensures its pool) are kept up to date; a
  pool being deleted leaves the manager before its finalizer goes, once no pass of the node is
  running.
* :mod:`~eni_ipam.kube.delivery`: the ENIPool of every selected Node handed to the manager
  (``upsert``) when what the manager sees changes (the spec, the addresses the agent reports used,
  its handshake answers, the node's pending pods), never for the controller's own status writes.
* :mod:`~eni_ipam.kube.instances`: one instance, one pool (two pools naming one instance would hand
  out the same addresses).
* :mod:`~eni_ipam.kube.records`: what the pools publish, for a provider that keeps no cloud state.
* :mod:`~eni_ipam.kube.status`: the controller's status writes, ordered by need (this source tells
  the writer how many pods wait on each node) and skipped where the pools already hold them.

The decisions made here, while leading (:meth:`KubeNodeSource.lead`): a Node that goes or stops
being selected leaves the manager at once; a pool is maintained only while its Node is here and
selected, the pool is that Node's (a pool of an earlier Node of the same name, another uid, is left
to the garbage collector) and the Node is of the configured cloud (one of another cloud gets no
pool, and is said once); a pool deleted while its Node exists was deleted by hand, and is made again.

Handlers are synchronous: they only record, queue writes and hand pools over.

The informers keep projections (:mod:`~eni_ipam.kube.projection`), never whole objects: what is
read of a Node, a Pending Pod and an ENIPool is all that stays in memory.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import random
from collections.abc import Collection, Mapping
from typing import Any

import structlog

from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.core.clock import Clock
from eni_ipam.core.manager import NodeManager
from eni_ipam.core.model import NodeStatus
from eni_ipam.core.profiles import Profile, ProfileSet
from eni_ipam.core.provider import reads_node_store
from eni_ipam.core.records import NodeRecord
from eni_ipam.core.spec import NodeSpec
from eni_ipam.kube.api import ENIPOOLS, NODES, PODS, KubeApi
from eni_ipam.kube.crd import CrdState, CrdWatch
from eni_ipam.kube.delivery import Delivery
from eni_ipam.kube.events import EventRecorder, status_event
from eni_ipam.kube.informer import Informer
from eni_ipam.kube.nodemarks import NO_ROOM_TAINT, NodeMarks
from eni_ipam.kube.pools import PoolWriter
from eni_ipam.kube.projection import NodeInfo, PendingPod, PoolInfo, project_node, project_pod, project_pool
from eni_ipam.kube.records import PoolRecords
from eni_ipam.kube.resources import differs_from_node, node_fields, owned_by, provider_id_scheme
from eni_ipam.kube.settings import KubeSettings
from eni_ipam.kube.status import StatusWriter
from eni_ipam.kube.views import NodeView

log = structlog.get_logger("eni_ipam.kube.source")


def _version(kept: NodeInfo | PoolInfo | PendingPod) -> str:
    return kept.resource_version


DELIVER_SLICE = 100
"""Pools handed to the manager between two yields to the event loop when a term begins (each is a
validated spec and a node's first stats: about 10 ms for a slice)."""


class KubeNodeSource:
    def __init__(
        self,
        api: KubeApi,
        *,
        settings: KubeSettings,
        node_defaults: NodeSpec | None = None,
        profiles: Collection[Profile] = (),
        clock: Clock,
        metrics: Metrics,
        rng: random.Random | None = None,
        provider_id_schemes: Collection[str] = (),
        identity: str = "",
    ) -> None:
        """``provider_id_schemes``: the ``spec.providerID`` schemes of the configured provider's Nodes
        (``aws``); a Node of another cloud gets no pool. Empty: any scheme (and ``node-name`` ids).
        ``identity``: this replica's name, in the Events it sends. ``profiles``: node spec keys by
        Node labels (:mod:`~eni_ipam.core.profiles`): the Nodes keep the labels they name."""
        self.api = api
        self.settings = settings
        self.schemes = frozenset(provider_id_schemes)
        self.metrics = metrics
        self.instance_ids = settings.instance_ids or "provider-id"
        self.clock = clock
        self.rng = rng or random.Random()
        common: dict[str, Any] = {"clock": clock, "metrics": metrics, "watch_timeout": settings.watch_timeout}
        chosen = ProfileSet(tuple(profiles), node_defaults)
        self.nodes = Informer(
            api,
            NODES,
            project=functools.partial(project_node, label_keys=chosen.label_keys),
            version=_version,
            view=NodeView,
            labels=settings.node_selector,
            **common,
        )
        self.pools = Informer(api, ENIPOOLS, project=project_pool, version=_version, **common)
        self.pods = Informer(
            api, PODS, project=project_pod, version=_version, fields={"status.phase": "Pending"}, **common
        )
        self._foreign: set[str] = set()
        """Nodes whose provider id names another cloud (ignored, said once each)."""
        self.nodes.add_handler(self._on_node)
        self.pools.add_handler(self._on_pool)
        self.pods.add_handler(self._on_pod)
        self.pending_pods: collections.Counter[str] = collections.Counter()
        self._pod_nodes: dict[str, str] = {}
        self.events = EventRecorder(api, clock=clock)
        self._problems: dict[str, str] = {}
        """The Event reason each node's last status called for (only nodes with one)."""
        self.writer = StatusWriter(
            api,
            lookup=lambda name: self.pools.store.get(name),
            clock=clock,
            metrics=metrics,
            qps=settings.status_qps,
            burst=settings.status_burst,
            pending_pods=lambda name: self.pending_pods.get(name, 0),
            on_publish=self._on_status,
        )
        self.crd = CrdWatch(
            api,
            clock=clock,
            metrics=metrics,
            update=settings.update_crd,
            identity=identity,
            on_change=self._crd_changed,
            watch_timeout=settings.watch_timeout,
        )
        # Until the CRD is known to keep the status (nothing is said on the pools meanwhile).
        self.writer.hold(self.crd.state.problem(), say=False)
        self.records = PoolRecords(api, pools=self.pools, writer=self.writer, clock=clock, rng=self.rng)
        self.delivery = Delivery(
            pools=self.pools,
            maintained=self._maintained,
            pending_pods=self.pending_pods,
            writer=self.writer,
            as_node_says=self._as_node_says,
        )
        self.marks = NodeMarks(
            api,
            nodes=self.nodes,
            settings=settings,
            clock=clock,
            rng=self.rng,
            on_taint=self._on_taint,
            tainted_gauge=metrics.nodes_no_room_tainted,
        )
        self.pool_writer = PoolWriter(
            api,
            nodes=self.nodes,
            pools=self.pools,
            foreign=self._foreign_node,
            delivery=self.delivery,
            writer=self.writer,
            clock=clock,
            rng=self.rng,
            instance_ids=self.instance_ids,
            profiles=chosen,
            events=self.events,
            metrics=metrics,
        )

    @property
    def node_defaults(self) -> NodeSpec | None:
        """The spec keys a new ENIPool starts with (``node_defaults`` of the run configuration)."""
        return self.pool_writer.node_defaults

    @node_defaults.setter
    def node_defaults(self, value: NodeSpec | None) -> None:
        self.pool_writer.node_defaults = value

    @property
    def manager(self) -> NodeManager | None:
        """The manager pools are handed to while leading; None otherwise."""
        return self.delivery.manager

    @property
    def term(self) -> int:
        """Leadership terms begun (:class:`~eni_ipam.core.records.NodeRecords`)."""
        return self.records.term

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in (self.nodes, self.pools, self.pods))

    def node_records(self) -> list[NodeRecord] | None:
        """What every ENIPool's status publishes (None until the pools have been listed; see
        :class:`~eni_ipam.kube.records.PoolRecords`)."""
        return self.records.node_records()

    async def run(self) -> None:
        """Keep the caches current until cancelled (every replica runs this)."""
        async with asyncio.TaskGroup() as tg:
            for informer in (self.nodes, self.pools, self.pods):
                tg.create_task(informer.run(), name=f"eni-ipam-informer-{informer.kind.plural}")
            tg.create_task(self.crd.run(), name="eni-ipam-crd")

    async def lead(self, manager: NodeManager) -> None:
        """Feed ``manager`` and keep ENIPools in step with Nodes until cancelled (leader only).
        ``manager`` must publish its statuses to :attr:`writer`."""
        try:
            async with asyncio.TaskGroup() as tg:
                # The cloud's first listing needs no node: it runs while the nodes and pools are
                # learnt (at 100,000 nodes, each takes tens of seconds), unless the provider builds
                # its view from the pools themselves.
                from_store = reads_node_store(manager.provider)
                listing = (
                    None
                    if from_store
                    else tg.create_task(manager.first_listing(), name="eni-ipam-first-listing")
                )
                for informer in (self.nodes, self.pools, self.pods):
                    await informer.synced.wait()
                # The term's fresh list of the pools (tens of seconds at 100,000 pools) is what a
                # provider reading the node store builds its view from; for the others it only
                # tells the status writer what the pools already hold, so it runs beside the
                # delivery and the writer starts once it is done.
                term_listed = None
                if from_store:
                    await self.records.begin_term()
                else:
                    term_listed = tg.create_task(
                        self.records.begin_term(records=False), name="eni-ipam-term-list"
                    )
                self.delivery.begin(manager)
                # The manager runs while the pools are delivered (at 100,000 nodes, tens of seconds):
                # a pool whose status says it is short, or whose node has pods waiting, is served as
                # soon as it is delivered; the first listing is applied once every pool is.
                delivered = asyncio.Event()
                tg.create_task(manager.run(first=listing, known=delivered.wait()), name="eni-ipam-manager")
                for n, obj in enumerate(list(self.pools.store.values())):
                    if n and n % DELIVER_SLICE == 0:
                        await asyncio.sleep(0)  # 100,000 pools are not delivered in one go
                    self._on_pool("ADDED", obj, None)
                delivered.set()
                if term_listed is not None:
                    await term_listed
                for name in list(self.nodes.store):
                    self.pool_writer.queue(name, "ensure")
                tg.create_task(self.writer.run(), name="eni-ipam-status-writer")
                tg.create_task(self.pool_writer.run(), name="eni-ipam-pool-writer")
                tg.create_task(self.events.run(), name="eni-ipam-events")
                tg.create_task(self.marks.run(), name="eni-ipam-node-marks")
        finally:
            self.delivery.end()
            self.pool_writer.clear()
            self.marks.clear()
            self.events.clear()
            self._problems.clear()

    def _crd_changed(self, state: CrdState) -> None:
        """The ENIPool CRD changed state: statuses are held while it would prune them; once it keeps
        them, every maintained pool gets a pass, so what was held or pruned is written again."""
        if not state.current:
            self.writer.hold(state.problem(), say=state.state != "unknown")
            return
        self.writer.release()
        manager = self.manager
        if manager is not None:
            for name in list(self.pools.store):
                manager.trigger(name)

    # -- informer handlers (synchronous; they only record, queue and hand over) ---------------------

    def _on_node(self, event: str, obj: NodeInfo, old: NodeInfo | None) -> None:
        if self.manager is None:
            return
        name = obj.name
        if event == "DELETED":
            # Gone, or no longer selected: stop maintaining it now (its pool, if the Node is really
            # gone, follows through the garbage collector and the finalizer).
            self.pool_writer.node_gone(name)
            self.marks.forget(name)
            self._problems.pop(name, None)
            if name in self._foreign:
                self._foreign.discard(name)
                self.metrics.nodes_ignored.labels(reason="provider-id-scheme").set(len(self._foreign))
            self.delivery.forget(name)
            return
        self.pool_writer.queue(name, "ensure")
        self.marks.changed(name)
        pool = self.pools.store.get(name)
        if pool is not None and not pool.deleting:
            self.delivery.deliver(name, pool)  # newly selected, or re-selected

    def _on_pool(self, event: str, obj: PoolInfo, old: PoolInfo | None) -> None:
        self.writer.seen(obj)
        if self.manager is None:
            return
        name = obj.name
        if event == "DELETED":
            self.delivery.index(name, None)
            self.delivery.forget(name)
            node = self.nodes.store.get(name)
            # Its Node still here: someone deleted the pool, and it is made again.
            self.pool_writer.gone(name, by_hand=node is not None and owned_by(obj, node))
        elif obj.deleting:
            self.delivery.index(name, None)
            self.pool_writer.queue(name, "finalize")
        else:
            node = self.nodes.store.get(name)
            if node is not None and owned_by(obj, node) and differs_from_node(obj, self._node_fields(node)):
                # Someone edited a field that is the Node's: it is put back at once (meanwhile the
                # manager is given the Node's value, never the edited one).
                self.pool_writer.queue(name, "ensure")
            self.delivery.index(name, obj)
            self.delivery.deliver(name, obj)

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
                    self.delivery.deliver(node, pool)

    def _on_taint(self, name: str, tainted: bool) -> None:
        """The no-room taint went on Node ``name`` (an Event says why) or came off."""
        if not tainted:
            return
        node = self.nodes.store.get(name)
        self.events.warn(
            name,
            node.uid if node is not None else "",
            "NoAddressRoom",
            f"Node {name} has no address left for another pod and its pool cannot grow: tainted "
            f"{NO_ROOM_TAINT}:NoSchedule until room returns (kubectl get enipool {name} says why)",
        )

    def _on_status(self, name: str, status: NodeStatus) -> None:
        """A pool's status is published: its Node's marks follow it, and an Event is sent when it
        enters a state someone must act on."""
        self.marks.observe(name, status)
        event = status_event(status)
        reason = event[0] if event is not None else ""
        if self._problems.get(name, "") == reason:
            return
        if event is None:
            self._problems.pop(name, None)
            return
        self._problems[name] = reason
        node = self.nodes.store.get(name)
        self.events.warn(name, node.uid if node is not None else "", reason, event[1])

    # -- which pools are maintained ---------------------------------------------------------------

    def _maintained(self, name: str, pool: PoolInfo) -> bool:
        """Whether pool ``name`` is maintained: its Node is here (and selected) and of the configured
        cloud, the pool is that Node's and it is not being deleted."""
        node = self.nodes.store.get(name)
        if node is None or pool.deleting or not owned_by(pool, node):
            return False
        return not self._foreign_node(node)

    def _node_fields(self, node: NodeInfo) -> dict[str, str]:
        return node_fields(node, self.instance_ids)

    def _as_node_says(self, name: str, pool: PoolInfo) -> PoolInfo:
        """``pool`` with the fields that follow its Node as the Node gives them (the pool itself
        when they agree, when it is not that Node's, or when the Node gives no instance)."""
        node = self.nodes.store.get(name)
        if node is None or not owned_by(pool, node):
            return pool
        wanted = self._node_fields(node)
        if not differs_from_node(pool, wanted):
            return pool
        assert isinstance(pool.spec, Mapping)  # differs_from_node says no difference otherwise
        return dataclasses.replace(pool, spec={**pool.spec, **wanted})

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
