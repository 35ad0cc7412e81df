"""The one writer of ENIPool objects: a pool for every Node, kept in step with it, and its finalizer.

Role: the source's handlers (:mod:`~eni_ipam.kube.source`) only queue work by pool name; while
leading, :meth:`PoolWriter.run` does the writes, one at a time and in order, and retries the ones
that failed after a backoff.

* ``ensure``: every Node with an instance id gets an ENIPool (spec from the Node's defaults: the
  most specific profile matching its labels merged over ``node_defaults``, or ``node_defaults``
  alone; owned by the Node, carrying the :data:`~eni_ipam.kube.resources.FINALIZER`). Of an
  existing pool only the Node-derived fields (instance, type, zone), the fields that still follow
  the Node's defaults and the profile it follows are brought up to date: people's edits to the rest
  of the spec stay. A relabelled Node's pool so moves to its new profile's values, field by field,
  through the same ownership as a change of ``node_defaults``. A pool deleted by hand while its
  Node exists is made again, and an event on the Node says so. A Node without an instance id (no
  ``spec.providerID`` yet) gets no pool: it is logged at warning and said in an Event once it
  becomes so, and counted in ``eni_ipam_nodes_ignored{reason="no-provider-id"}`` while it is.
* ``finalize``: a pool being deleted (its Node went, and the garbage collector deletes what the Node
  owned) leaves the manager first; its finalizer is removed only once no pass of that node is
  running (waiting at most :data:`PASS_WAIT`), so no address is handed out after the pool's record
  is gone.

Invariants: a queued ``finalize`` is never turned back into an ``ensure`` (but a pool that is gone
gets an ``ensure``: its Node may still be there); no pool is made for a Node of another cloud, and
a pool of an earlier Node of the same name (another uid) is left to the garbage collector.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import structlog

from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.core.backoff import Backoff
from eni_ipam.core.clock import Clock
from eni_ipam.core.profiles import ProfileSet
from eni_ipam.core.spec import NodeSpec
from eni_ipam.kube import errors
from eni_ipam.kube.api import ENIPOOLS, KubeApi
from eni_ipam.kube.delivery import Delivery
from eni_ipam.kube.events import EventRecorder
from eni_ipam.kube.informer import EMIT_SLICE, Informer
from eni_ipam.kube.projection import NodeInfo, PoolInfo, project_pool
from eni_ipam.kube.resources import (
    FINALIZER,
    defaults_patch,
    merge_patches,
    node_fields_patch,
    owned_by,
    pool_for_node,
    profile_patch,
)
from eni_ipam.kube.status import StatusWriter

log = structlog.get_logger("eni_ipam.kube.pools")

PASS_WAIT = 60.0
"""Seconds a finalizer waits for a running pass of the node to end before it is removed anyway."""


class PoolWriter:
    def __init__(
        self,
        api: KubeApi,
        *,
        nodes: Informer[NodeInfo],
        pools: Informer[PoolInfo],
        foreign: Callable[[NodeInfo], bool],
        delivery: Delivery,
        writer: StatusWriter,
        clock: Clock,
        rng: random.Random,
        instance_ids: str,
        node_defaults: NodeSpec | None = None,
        profiles: ProfileSet | None = None,
        events: EventRecorder,
        metrics: Metrics,
    ) -> None:
        """``nodes``, ``pools``: the informers of both kinds; ``foreign``: whether a Node is of another cloud
        (it gets no pool); ``delivery``: takes a node out of the manager before its finalizer goes."""
        self.api = api
        self._nodes, self._pools = nodes, pools
        self._foreign = foreign
        self._delivery = delivery
        self._writer = writer
        self.clock = clock
        self.rng = rng
        self.instance_ids = instance_ids
        self.profiles = profiles if profiles is not None else ProfileSet((), node_defaults)
        """The spec keys pools follow: ``node_defaults`` and the profiles merged over them."""
        self._todo: dict[str, str] = {}  # pool name → "ensure" or "finalize"
        self._wake = asyncio.Event()
        self._deleted_by_hand: set[str] = set()
        """Pools deleted while their Node exists: recreated, with an event saying so."""
        self._events = events
        self._metrics = metrics
        self._without_id: set[str] = set()
        """Nodes seen without an instance id (no provider id yet): they get no pool."""

    @property
    def node_defaults(self) -> NodeSpec | None:
        """The spec keys a pool no profile matches starts with (``node_defaults``)."""
        return self.profiles.defaults

    @node_defaults.setter
    def node_defaults(self, value: NodeSpec | None) -> None:
        self.profiles = ProfileSet(self.profiles.profiles, value)

    def queue(self, name: str, action: str) -> None:
        """Ask for ``action`` (``ensure`` or ``finalize``) on pool ``name``."""
        if self._todo.get(name) != "finalize":  # a finalize is never downgraded
            self._todo[name] = action
        self._wake.set()

    def gone(self, name: str, *, by_hand: bool) -> None:
        """Pool ``name`` is gone; ``by_hand``: its Node is still here (someone deleted the pool)."""
        if by_hand:
            self._deleted_by_hand.add(name)
        self._todo[name] = "ensure"  # the Node may still be there (re-created): a new pool then
        self._wake.set()

    def node_gone(self, name: str) -> None:
        """Node ``name`` is gone or no longer selected: its pool is not made again."""
        self._deleted_by_hand.discard(name)
        self._has_id(name, True)

    def clear(self) -> None:
        """The term ended: what is queued is the next leader's to find again, and the Nodes without
        an instance id are counted afresh by the next term (a standby counts none; a Node deleted
        meanwhile is never counted again)."""
        self._todo.clear()
        self._without_id.clear()
        self._metrics.nodes_ignored.labels(reason="no-provider-id").set(0)

    async def run(self) -> None:
        """Do the queued writes until cancelled (leader only)."""
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
        node = self._nodes.store.get(name)
        if node is None:
            return  # no Node (or not selected): the pool, if any, is people's or goes with its Node
        if self._foreign(node):
            return  # a Node of another cloud: no pool
        pool = self._pools.store.get(name)
        profile, defaults = self.profiles.choose(dict(node.labels))
        if pool is None:
            body = pool_for_node(node, defaults, instance_ids=self.instance_ids, profile=profile)
            self._has_id(name, body is not None, node)
            if body is None:
                return
            try:
                created = await self.api.create(ENIPOOLS, body)
            except errors.KubeConflict:
                return  # created meanwhile; its event follows
            log.info("pool_created", pool=name, instance=created["spec"]["instanceID"], profile=profile)
            if name in self._deleted_by_hand:
                self._deleted_by_hand.discard(name)
                await self._recreated(node)
            return
        if pool.deleting or not owned_by(pool, node):
            return  # a pool of an earlier Node of this name: the GC deletes it, then a new one is made
        moved = profile_patch(pool, profile)
        patch = merge_patches(
            node_fields_patch(pool, node, instance_ids=self.instance_ids),
            defaults_patch(pool, defaults),
            moved,
        )
        if patch.get("spec") or patch.get("metadata"):
            if not patch.get("spec"):
                patch.pop("spec", None)
            await self.api.patch(ENIPOOLS, name, patch)
            if moved is not None:
                log.info("pool_profile_changed", pool=name, profile=profile, was=pool.profile)
            log.info("pool_updated", pool=name, fields=sorted(patch.get("spec", {})))

    async def _recreated(self, node: NodeInfo) -> None:
        """Say on the Node, as an event, that its pool was deleted by hand and made again."""
        name = node.name
        log.warning("pool_recreated", pool=name)
        self._events.warn(
            name,
            node.uid,
            "PoolRecreated",
            f"ENIPool {name} was deleted while its Node exists; eni-ipam created it again from "
            "node_defaults and the Node's profile (edits made to the deleted pool are not restored)",
        )

    def _has_id(self, name: str, has: bool, node: NodeInfo | None = None) -> None:
        """Whether Node ``name`` has an instance id now: a change is logged (and, to none, said in an
        Event), and the Nodes without one are counted."""
        if has == (name not in self._without_id):
            return
        if has:
            self._without_id.discard(name)
            if node is not None:
                log.info("node_provider_id_set", node=name)
        else:
            self._without_id.add(name)
            log.warning("node_without_provider_id", node=name)
            self._events.warn(
                name,
                node.uid if node is not None else "",
                "NoProviderID",
                f"Node {name} has no usable spec.providerID (none, or one with a space or a control "
                "character), so eni-ipam gives it no ENIPool and no addresses: the cloud's controller "
                "manager sets it when it initialises the Node (check that it runs, and that kubelet "
                "was started with --cloud-provider=external)",
            )
        self._metrics.nodes_ignored.labels(reason="no-provider-id").set(len(self._without_id))

    async def _finalize(self, name: str) -> None:
        departure = self._delivery.depart(name)
        if departure is not None and departure.running:
            try:
                async with asyncio.timeout(PASS_WAIT):  # the loop's clock, which the injected one reads
                    await departure.idle()  # a pass in flight finishes before the record may go
            except TimeoutError:
                log.warning("pool_released_during_pass", pool=name, waited=PASS_WAIT)
        self._writer.forget(name)
        pool = self._pools.store.get(name)
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
