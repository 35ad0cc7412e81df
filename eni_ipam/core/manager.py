"""NodeManager: the cluster-wide reconciler that decides *when* each node is maintained.

It owns the shared cloud view (subnets with live free counts, security groups, instance limits),
the node table, and a priority queue served by a bounded pool of workers:

* **Start**: one full resync must succeed (retried with backoff) before any mutation; until then
  nodes are accepted but not maintained (``ready`` is false, ``/readyz`` says so).
* **Events**: an upsert triggers that node at once; triggers coalesce (one queued entry per node,
  a pass that is running gets one follow-up) and respect a minimum interval per node.
* **Ordering**: the queue serves the largest deficit first, then idle nodes, then the largest excess.
* **Periodic resync** (``resync_interval``): refresh the view, re-fetch any node's instance that is
  missing from it (never read "missing" as "needs nothing"), and trigger every node with work.
* **Failures**: a failed pass re-schedules only that node, with exponential backoff and jitter;
  workers never sleep on a node's behalf, so a failing node never slows the others.
* **Subnet accounting**: addresses are reserved from a subnet's free count before the call that
  takes them and returned if it fails, so concurrent nodes do not plan the same last addresses.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import random
from collections.abc import Iterator, Mapping
from typing import Protocol

import structlog

from eni_ipam.core import errors
from eni_ipam.core.backoff import Backoff
from eni_ipam.core.clock import Clock
from eni_ipam.core.config import Settings
from eni_ipam.core.gc import GarbageCollector
from eni_ipam.core.metrics import Metrics
from eni_ipam.core.model import CloudSnapshot, InstanceLimits, NodeResource, NodeStatus, SecurityGroup, Subnet
from eni_ipam.core.node import Node
from eni_ipam.core.provider import Provider

log = structlog.get_logger("eni_ipam.core.manager")

LIMITS_RETRY_INTERVAL = 60.0
"""An unknown instance type is asked about again at most once a minute."""
TOTALS_INTERVAL = 1.0
"""Cluster-wide gauges are recomputed at most once a second (O(nodes) each time)."""


class StatusSink(Protocol):
    """Where node statuses go (the memory store, or the Kubernetes status writer)."""

    def publish(self, name: str, status: NodeStatus) -> None:
        """Record the node's latest status. Must not block; may batch and write later."""
        ...


class _Reservation:
    """Handed to the caller of :meth:`NodeManager.reserve`; ``commit()`` keeps the addresses taken."""

    committed = False

    def commit(self) -> None:
        self.committed = True


class NodeManager:
    def __init__(
        self,
        *,
        provider: Provider,
        settings: Settings,
        metrics: Metrics,
        clock: Clock,
        status_sink: StatusSink,
        rng: random.Random | None = None,
    ) -> None:
        self.provider = provider
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.status_sink = status_sink
        self.rng = rng or random.Random()
        self.ready = False
        self.nodes: dict[str, Node] = {}
        self.subnets: dict[str, Subnet] = {}
        self.subnet_free: dict[str, int] = {}
        self.security_groups: Mapping[str, SecurityGroup] = {}
        self.limits: dict[str, InstanceLimits] = {}
        self._limits_misses: dict[str, float] = {}
        self._subnet_view: dict[str, Subnet] | None = None
        self._queue: asyncio.PriorityQueue[tuple[tuple[int, int], int, str]] = asyncio.PriorityQueue()
        self._seq = itertools.count()
        self._last_totals = float("-inf")
        self._resync_wakeup = asyncio.Event()
        self.last_resync: float | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Resync until it succeeds, then serve nodes until cancelled."""
        await self._initial_resync()
        async with asyncio.TaskGroup() as tg:
            for n in range(self.settings.parallel_workers):
                tg.create_task(self._worker(), name=f"eni-ipam-worker-{n}")
            tg.create_task(self._periodic_resync(), name="eni-ipam-resync")
            if self.settings.gc_interval > 0:
                collector = GarbageCollector(
                    self.provider,
                    cluster_name=self.settings.cluster_name,
                    clock=self.clock,
                    metrics=self.metrics,
                    interval=self.settings.gc_interval,
                    max_per_run=self.settings.gc_max_per_run,
                )
                tg.create_task(collector.run(), name="eni-ipam-gc")

    async def _initial_resync(self) -> None:
        backoff = Backoff(initial=self.settings.backoff_initial, maximum=60.0, rng=self.rng)
        while True:
            try:
                await self.resync()
                break
            except errors.EniIpamError as exc:
                delay = backoff.next_delay()
                log.warning("initial_resync_failed", error=str(exc), retry_in=round(delay, 3))
                await self.clock.sleep(delay)
        self.ready = True
        log.info("instances_api_ready", nodes=len(self.nodes), subnets=len(self.subnets))
        for node in list(self.nodes.values()):
            self.trigger(node)

    async def _periodic_resync(self) -> None:
        while True:
            await self.clock.sleep(self.settings.resync_interval)
            try:
                await self.resync()
            except errors.EniIpamError as exc:
                # The previous view stays; per-instance syncs keep nodes we touch accurate meanwhile.
                log.warning("resync_failed", error=str(exc))

    async def resync(self) -> None:
        """Full resync: refresh the shared view and every node's instance; trigger nodes with work."""
        started = self.clock.monotonic()
        try:
            snapshot = await self.provider.resync()
        except errors.EniIpamError:
            self.metrics.resync_failures.inc()
            raise
        self.metrics.resync.inc()
        self._apply(snapshot, started)
        self.last_resync = started
        # Deficit first (largest first), then idle, then excess (largest first): the queue orders them.
        for node in self.nodes.values():
            # A node blocked on the last view (no subnet room, at capacity) is planned again on the
            # fresh one: room may have come back (addresses released elsewhere, a node gone).
            node.blocked = ""
            node.recalculate()
            if node.has_work():
                self.trigger(node)
        self._update_totals(force=True)

    def _apply(self, snapshot: CloudSnapshot, started: float) -> None:
        self.subnets = dict(snapshot.subnets)
        self.subnet_free = {sid: s.available for sid, s in snapshot.subnets.items()}
        self._subnet_view = None
        self.security_groups = dict(snapshot.security_groups)
        self.limits.update(snapshot.limits)
        self.metrics.set_subnets(
            {s.id: (s.zone, s.available) for s in snapshot.subnets.values()}, replace=True
        )
        for node in self.nodes.values():
            instance = snapshot.instances.get(node.resource.spec.instance_id)
            if instance is not None:
                node.terminated = False
                node.set_instance(instance, seen_at=started)
            elif not node.terminated:
                node.needs_refresh = True  # missing from this resync: re-fetch, never assume "needs 0"

    # -- node table -----------------------------------------------------------------------------

    def upsert(self, resource: NodeResource) -> None:
        """A node was added or changed (spec, used addresses, handshake answers): maintain it soon."""
        node = self.nodes.get(resource.spec.name)
        if node is None:
            node = self.nodes[resource.spec.name] = Node(self, resource)
            log.info("node_added", node=node.name, instance=resource.spec.instance_id)
        else:
            if node.resource.spec.instance_id != resource.spec.instance_id:
                node.instance, node.needs_refresh, node.terminated = None, True, False
                node.view_time = float("-inf")
            node.resource = resource
        node.blocked = ""
        node.recalculate()
        if self.ready:
            self.trigger(node)

    def delete(self, name: str) -> Node | None:
        """Stop maintaining a node; returns it (a pass may still be running: see ``Node.running``)."""
        node = self.nodes.pop(name, None)
        if node is None:
            return None
        node.deleted = True
        if node.timer is not None:
            node.timer.cancel()
            node.timer = None
        self.metrics.remove_node(name)
        log.info("node_removed", node=name)
        return node

    # -- scheduling -----------------------------------------------------------------------------

    def trigger(self, node: Node, *, delay: float = 0.0) -> None:
        """Ask for a pass of ``node`` after ``delay`` seconds (earliest request wins; requests fold)."""
        if node.deleted:
            return
        if node.running:
            # A pass asking for another later (a release delay running out) arms a timer; only a
            # request for "now" makes the running pass go again when it ends. Marking it dirty for a
            # later request re-ran the node every trigger_min_interval until the delay was over.
            if delay > 0:
                self._arm(node, self.clock.monotonic() + delay)
            else:
                node.dirty = True
            return
        if node.queued:
            return
        due = max(self.clock.monotonic() + delay, node.not_before)
        if due <= self.clock.monotonic():
            self._enqueue(node)
        else:
            self._arm(node, due)

    def _arm(self, node: Node, due: float) -> None:
        if node.timer is not None and node.timer_due <= due:
            return
        if node.timer is not None:
            node.timer.cancel()

        def fire() -> None:
            node.timer = None
            node.timer_due = float("inf")
            if node.not_before > self.clock.monotonic():
                # A timer armed before a failure (a release delay) never runs the node sooner than
                # its backoff, or than the wait a cloud asked for.
                self._arm(node, node.not_before)
                return
            if not node.deleted and not node.queued:
                if node.running:
                    node.dirty = True
                else:
                    self._enqueue(node)

        node.timer = self.clock.call_later(due - self.clock.monotonic(), fire)
        node.timer_due = due

    def _enqueue(self, node: Node) -> None:
        node.queued = True
        s = node.stats
        if s.needed > 0:
            priority = (0, -s.needed)
        elif s.excess > 0 and self.settings.release_excess_ips:
            priority = (2, -s.excess)
        else:
            priority = (1, 0)
        self._queue.put_nowait((priority, next(self._seq), node.name))

    async def _worker(self) -> None:
        while True:
            _, _, name = await self._queue.get()
            node = self.nodes.get(name)
            if node is None or not node.queued:
                continue
            node.queued = False
            node.running = True
            node.dirty = False
            try:
                await node.maintain()
                node.backoff.reset()
                node.not_before = self.clock.monotonic() + self.settings.trigger_min_interval
            except errors.Fenced:
                # Mutations stopped (shutdown, or the lease was lost): not the node's failure, and no
                # retry; whoever reconciles next starts from a fresh resync.
                log.debug("maintenance_fenced", node=name)
                continue
            except Exception as exc:  # one node's failure, even a bug, never stops the others
                delay = node.backoff.next_delay()
                # A cloud that names its wait (Retry-After) is never retried sooner than it asked.
                delay = max(delay, getattr(exc, "retry_after", None) or 0.0)
                node.not_before = self.clock.monotonic() + delay
                reason = type(exc).__name__
                self.metrics.node_failures.labels(reason=reason).inc()
                log.warning(
                    "maintenance_failed",
                    node=name,
                    error=str(exc),
                    failures=node.backoff.failures,
                    retry_in=round(delay, 3),
                    exc_info=not isinstance(exc, errors.EniIpamError),
                )
                node.dirty = True
            finally:
                node.running = False
                self._update_totals()
            if node.dirty and not node.deleted:
                node.dirty = False
                self.trigger(node)

    # -- shared view ----------------------------------------------------------------------------

    def subnet_view(self) -> Mapping[str, Subnet]:
        """Subnets with their free counts net of reservations (what the planner must see)."""
        if self._subnet_view is None:
            self._subnet_view = {
                sid: dataclasses.replace(s, available=max(self.subnet_free.get(sid, 0), 0))
                for sid, s in self.subnets.items()
            }
        return self._subnet_view

    @contextlib.contextmanager
    def reserve(self, subnet_id: str, count: int) -> Iterator[_Reservation]:
        """Take ``count`` addresses off a subnet's free count for the duration of a call; they are
        given back unless the call commits them."""
        reservation = _Reservation()
        self._adjust_free(subnet_id, -count)
        try:
            yield reservation
        finally:
            if not reservation.committed:
                self._adjust_free(subnet_id, count)

    def release_to_subnet(self, subnet_id: str, count: int) -> None:
        self._adjust_free(subnet_id, count)

    def _adjust_free(self, subnet_id: str, delta: int) -> None:
        if subnet_id in self.subnet_free:
            self.subnet_free[subnet_id] += delta
            self._subnet_view = None
            subnet = self.subnets[subnet_id]
            self.metrics.set_subnets({subnet_id: (subnet.zone, max(self.subnet_free[subnet_id], 0))})

    async def limits_for(self, instance_type: str) -> InstanceLimits | None:
        known = self.limits.get(instance_type)
        if known is not None:
            return known
        now = self.clock.monotonic()
        if now - self._limits_misses.get(instance_type, float("-inf")) < LIMITS_RETRY_INTERVAL:
            return None
        try:
            limits = await self.provider.instance_limits(instance_type=instance_type)
        except errors.LimitsUnknown:
            self._limits_misses[instance_type] = now
            log.warning("instance_limits_unknown", instance_type=instance_type)
            return None
        self.limits[instance_type] = limits
        return limits

    # -- status and totals ----------------------------------------------------------------------

    def publish(self, node: Node) -> None:
        if node.deleted:
            return  # a pass that outlived its node: its pool's record is gone (or going)
        self.status_sink.publish(node.name, node.status())

    def _update_totals(self, *, force: bool = False) -> None:
        now = self.clock.monotonic()
        if force or now - self._last_totals >= TOTALS_INTERVAL:
            self._last_totals = now
            self.metrics.set_totals(n.stats for n in self.nodes.values())

    def busy(self) -> bool:
        """Whether any node still has work the reconciler could do (the simulator's "converged" test)."""
        return not self.ready or any(n.has_work() for n in self.nodes.values())
