"""NodeManager: the cluster-wide reconciler that decides *when* each node is maintained.

It owns the node table, the shared :class:`~eni_ipam.core.view.CloudView`, and a priority queue
served by a bounded pool of workers. Each node's scheduling state (queued, running, dirty, timer,
not-before, backoff) lives in the manager's private slot for it; a :class:`~eni_ipam.core.node.Node`
never sees it, and a pass reports back only through its :class:`~eni_ipam.core.node.PassResult`.

* **Start**: one full resync must succeed (retried with backoff) before nodes are maintained
  (``ready`` is false until then, ``/readyz`` says so). Meanwhile a new leader serves the nodes
  known to wait for addresses (pods pending, or a pool short by its last published status: at most
  :data:`TAKEOVER_PASSES` of them), each on a fresh read of its own instance and the provider's
  shared view (subnets, groups; :class:`~eni_ipam.core.provider.SharedViewReader`): at 100,000
  nodes the first listing takes a minute, and a pod should not wait for it (decision 0041).
* **Events**: an upsert triggers that node at once; triggers coalesce (one queued entry per node,
  a pass that is running gets one follow-up) and respect a minimum interval per node.
* **Ordering**: the queue serves the largest deficit first (pods waiting for an address count with
  it), then idle nodes, then the largest excess.
* **Periodic resync** (``resync_interval``): refresh the view, re-fetch any node's instance that is
  missing from it (never read "missing" as "needs nothing"), and trigger every node with work. The
  interval adapts so that resyncs take at most ``resync_cpu_share`` of a core
  (:func:`resync_interval`); between them, each change is read back per instance.
* **Failures**: a failed pass re-schedules only that node, with exponential backoff and jitter, and
  never sooner than a cloud's Retry-After; workers never sleep on a node's behalf, so a failing node
  never slows the others.
* **Removal**: :meth:`NodeManager.delete` returns a :class:`Departure` whose ``idle()`` completes when
  the node's last pass has ended, so a caller can wait for it instead of polling.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
from collections.abc import Awaitable, Iterable, Iterator, Mapping
from typing import Protocol

import structlog

from eni_ipam.core import errors
from eni_ipam.core.backoff import Backoff
from eni_ipam.core.clock import Clock, Handle
from eni_ipam.core.gc import GarbageCollector
from eni_ipam.core.model import CloudSnapshot, CreateInterface, Instance, NodeStatus
from eni_ipam.core.node import NEVER, Node, NodeEnv, PassResult
from eni_ipam.core.observe import Observer, failure_reason
from eni_ipam.core.planner import first_new_interface
from eni_ipam.core.pressure import Thresholds
from eni_ipam.core.provider import Provider, SharedViewReader, shared_view_reader
from eni_ipam.core.readypool import ReadyPool
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeResource
from eni_ipam.core.view import CloudView
from eni_ipam.core.watermarks import needed_ips
from eni_ipam.errors import EniIpamError

log = structlog.get_logger("eni_ipam.core.manager")

SLICE_WORK = 200
"""Nodes recomputed between two yields to the event loop in a resync's apply (about 5 ms of work):
at 100,000 nodes the first apply recomputes every node, and nothing else may wait seconds for it."""
SLICE_VISITS = 5000
"""Nodes merely looked at (and passed over) between two yields (also about 5 ms)."""
SLICE_TRIGGERS = 1000
"""Nodes queued between two yields after the first resync (a few ms)."""

TAKEOVER_PASSES = 200
"""The most nodes served before the first full listing is applied. Each costs two describe calls
(the instance, its interfaces) from the buckets the listing draws on too (100 tokens, 20 a second):
200 nodes take those buckets about five seconds, so the listing is hardly slowed, while the nodes
that wait longest (pods pending) are served at once. The rest are served when the listing lands."""

MAX_RESYNC_INTERVAL = 900.0
"""However costly a resync, the next one comes within 15 minutes: it is the safety net for changes
made outside eni-ipam, and its cost grows with the cluster, not with time."""


def resync_interval(*, floor: float, cost: float, share: float) -> float:
    """Seconds until the next full resync after one that cost ``cost`` CPU seconds: long enough that
    resyncs take at most ``share`` of one core on average, never shorter than ``floor``
    (``resync_interval``) nor longer than :data:`MAX_RESYNC_INTERVAL` (unless ``floor`` is)."""
    if share <= 0 or cost <= 0:
        return floor
    return max(floor, min(cost / share, MAX_RESYNC_INTERVAL))


Listed = tuple[CloudSnapshot, float]
"""A full view of the cloud, and when (on the clock's timeline) its listing began."""


class StatusSink(Protocol):
    """Where node statuses go (the memory store, or the Kubernetes status writer)."""

    def publish(self, name: str, status: NodeStatus) -> None:
        """Record the node's latest status. Must not block; may batch and write later."""
        ...


class _Slot:
    """The manager's scheduling state of one node."""

    __slots__ = (
        "_idle",
        "backoff",
        "deleted",
        "dirty",
        "failure",
        "node",
        "not_before",
        "queued",
        "running",
        "timer",
    )

    def __init__(self, node: Node) -> None:
        self.node = node
        self.backoff: Backoff | None = None
        self.failure = ""
        """Why the last pass failed (:func:`~eni_ipam.core.observe.failure_reason`), while in backoff."""
        """Made at the node's first failure, dropped at its next success (most nodes never fail)."""
        self.queued = False
        self.running = False
        self.dirty = False
        """Asked for "now" while a pass ran: one more pass when it ends."""
        self.deleted = False
        self.not_before = NEVER
        """No pass before this time (the minimum interval, or a failure's backoff)."""
        self.timer: tuple[Handle, float] | None = None
        """The armed timer and when it fires."""
        self._idle: asyncio.Event | None = None
        """Made only when someone waits for the running pass to end (ten thousand nodes need none)."""

    def start(self) -> None:
        self.queued = False
        self.running = True
        self.dirty = False

    def stop(self) -> None:
        self.running = False
        if self._idle is not None:
            self._idle.set()
            self._idle = None

    async def idle(self) -> None:
        if self.running:
            if self._idle is None:
                self._idle = asyncio.Event()
            await self._idle.wait()

    def has_work(self) -> bool:
        if self.node.stopped:
            return False
        return self.queued or self.running or self.timer is not None or self.node.wants_pass()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """Where one node stands in the manager's schedule (a read-only snapshot)."""

    queued: bool
    running: bool
    failures: int
    """Passes that failed in a row (the backoff's exponent)."""
    not_before: float
    """No pass before this time on the clock's timeline (minimum interval or backoff)."""
    timer_due: float | None
    """When an armed timer asks for the next pass, if one is armed."""


class Departure:
    """A node that left the manager; its last pass may still be running."""

    def __init__(self, slot: _Slot) -> None:
        self._slot = slot

    @property
    def running(self) -> bool:
        return self._slot.running

    async def idle(self) -> None:
        """Return once no pass of the node is running (at once if none is)."""
        await self._slot.idle()


class _NodeTable(Mapping[str, Node]):
    """Read-only name → :class:`Node` view of the manager's slots."""

    def __init__(self, slots: dict[str, _Slot]) -> None:
        self._slots = slots

    def __getitem__(self, name: str) -> Node:
        return self._slots[name].node

    def __iter__(self) -> Iterator[str]:
        return iter(self._slots)

    def __len__(self) -> int:
        return len(self._slots)


class NodeManager:
    def __init__(
        self,
        *,
        provider: Provider,
        settings: Settings,
        metrics: Observer,
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
        thresholds = (
            Thresholds(
                enter=settings.subnet_pressure_enter,
                leave=settings.subnet_pressure_leave,
                hold=settings.subnet_pressure_hold,
            )
            if settings.subnet_pressure_enabled
            else None
        )
        self.view = CloudView(provider, clock=clock, metrics=metrics, pressure=thresholds)
        if self.view.pressure is not None:
            self.view.pressure.on_change(self._pressure_changed)
            self.view.room_back = self._room_back
        self._room_back_subnets: set[str] = set()
        """Subnets under pressure that addresses went back to since the blocked nodes were woken."""
        self.ready_pool = ReadyPool(
            provider,
            settings=settings,
            view=self.view,
            clock=clock,
            metrics=metrics,
            demand=self._ready_demand,
            waiting=self._nodes_waiting,
            known_interfaces=self._known_interfaces,
        )
        """The pool of ready interfaces; it runs, and nodes take from it, only when enabled (a
        disabled one deletes what garbage collection finds of an earlier enabled one)."""
        self._env = NodeEnv(
            provider=provider,
            view=self.view,
            settings=settings,
            metrics=metrics,
            clock=clock,
            ready=self.ready_pool if settings.ready_interfaces_enabled else None,
        )
        self._slots: dict[str, _Slot] = {}
        self.nodes: Mapping[str, Node] = _NodeTable(self._slots)
        """The nodes maintained, by name (read-only)."""
        self._queue: asyncio.PriorityQueue[tuple[int, int, int, str]] = asyncio.PriorityQueue()
        self._seq = itertools.count()
        self.next_resync_in = settings.resync_interval
        """Seconds the periodic resync waits next (adapted to the last resync's CPU cost)."""
        self._wanting: set[str] = set()
        """Nodes that wanted a pass when their stats last changed: a resync that passes over a node
        still triggers it when it is here, so no node with work is ever left without a pass."""
        self._by_instance: dict[str, _Slot | tuple[_Slot, ...]] = {}
        """Nodes by their instance id (a tuple where several nodes name one instance): how a resync
        finds the nodes of the instances that changed without looking at every node."""
        self._revisit: set[str] = set()
        """Nodes the next resync looks at whatever its listing says: those left
        :attr:`~eni_ipam.core.node.Node.unsure` since the last one (what a fresh view can change
        without the instance changing). A node whose instance changed needs no entry: the listing
        names it."""
        self._waiting = 0
        """Nodes queued for a pass that has not started (the backlog)."""
        self._in_backoff = 0
        """Nodes whose last pass failed."""
        self._deficits: dict[str, float] = {}
        """Nodes short of addresses, with when their deficit began on the clock (blocked ones too)."""
        self._listed_at: float | None = None
        """When the last full listing of the cloud succeeded (until one has: when :meth:`run` began),
        for ``eni_ipam_resync_age_seconds``: a resync that hangs, or fails for good, shows there."""
        metrics.report_schedule(
            waiting=lambda: self._waiting,
            in_backoff=lambda: self._in_backoff,
            oldest_deficit=self._oldest_deficit,
            since_resync=self._since_listed,
        )
        self._takeover: set[str] | None = set()
        """Nodes served before the first full listing is applied (:meth:`upsert`'s hint); None
        once it is."""
        self._first_admitted = asyncio.Event()
        self._resync_lock = asyncio.Lock()
        """One full resync at a time: two at once would list the cloud twice for one view, and
        their parsing would share the CPU the loop needs."""
        self._applied: Mapping[str, Instance] | None = None
        """The ``instances`` of the last snapshot applied in full (the base of the next one's
        :class:`~eni_ipam.core.model.Changes`)."""

    @property
    def ready(self) -> bool:
        """The initial resync has succeeded: nodes are being maintained."""
        return self.view.ready

    # -- lifecycle ------------------------------------------------------------------------------

    async def run(
        self, *, first: Awaitable[Listed | None] | None = None, known: Awaitable[object] | None = None
    ) -> None:
        """Resync until it succeeds, then serve nodes until cancelled.

        ``first``: the cloud's listing already under way (:meth:`first_listing`, started while the
        nodes were still being learnt): the first resync applies it rather than list again; if it
        failed, the resync is retried as usual.

        ``known``: done once every node is known (upserted). The first resync is applied only then,
        so that every node takes its instance from the listing rather than from a read of its own;
        the nodes admitted to a head start (:meth:`upsert`) are served meanwhile."""
        if self._listed_at is None:
            self._listed_at = self.clock.monotonic()
        async with asyncio.TaskGroup() as tg:
            for n in range(self.settings.parallel_workers):
                tg.create_task(self._worker(), name=f"eni-ipam-worker-{n}")
            reader = shared_view_reader(self.provider) if not self.ready else None
            shared = None
            if reader is not None:
                shared = tg.create_task(self._shared_view(reader), name="eni-ipam-shared-view")
            await self._initial_resync(first, known)
            if shared is not None:
                shared.cancel()  # the full listing landed first: the shared view is not needed
            tg.create_task(self._periodic_resync(), name="eni-ipam-resync")
            if self.settings.gc_interval > 0:
                collector = GarbageCollector(
                    self.provider,
                    cluster_name=self.settings.cluster_name,
                    clock=self.clock,
                    metrics=self.metrics,
                    interval=self.settings.gc_interval,
                    max_per_run=self.settings.gc_max_per_run,
                    ready=self.ready_pool.drain,
                )
                tg.create_task(collector.run(), name="eni-ipam-gc")
            if self.settings.ready_interfaces_enabled:
                tg.create_task(self.ready_pool.run(), name="eni-ipam-ready-pool")

    async def _shared_view(self, reader: SharedViewReader) -> None:
        """Once a node is admitted (:meth:`_admit`), read the shared view, then serve the nodes
        admitted (and those admitted until the first full listing lands). A start where no node
        waits makes no call here. A failure is logged and leaves them to the listing: this is a
        head start, never a condition of one."""
        await self._first_admitted.wait()
        try:
            snapshot = await reader.shared_view()
        except EniIpamError as exc:
            log.warning("shared_view_failed", error=str(exc))
            return
        if self.ready:
            return
        self.view.apply_shared(snapshot)
        admitted = self._takeover or ()
        log.info("takeover_passes", nodes=len(admitted), subnets=len(snapshot.subnets))
        for name in list(admitted):
            self.trigger(name)

    def _admit(self, resource: NodeResource, listed: int | None) -> None:
        """Before the first full listing: admit the node to a pass on a fresh read of its instance
        when pods wait on it or, by ``listed`` (the addresses its pool held when its status was last
        written: a hint, never planned on), its spec asks for more than that."""
        admitted = self._takeover
        if admitted is None or resource.name in admitted or len(admitted) >= TAKEOVER_PASSES:
            return
        spec = resource.spec
        short = listed is not None and needed_ips(
            available=listed,
            used=resource.used,
            pre_allocate=spec.pre_allocate,
            min_allocate=spec.min_allocate,
            max_allocate=spec.max_allocate,
        )
        if resource.pending_pods > 0 or short:
            admitted.add(resource.name)
            self._first_admitted.set()
            if self.view.shared:
                self.trigger(resource.name)

    async def _initial_resync(
        self, first: Awaitable[Listed | None] | None, known: Awaitable[object] | None
    ) -> None:
        backoff = Backoff(initial=self.settings.backoff_initial, maximum=60.0, rng=self.rng)
        while True:
            try:
                if first is None:
                    listed: Listed | None = await self.list_cloud()
                else:
                    listed, first = await first, None  # its failure was logged where it ran
                if known is not None:
                    await known
                    known = None
                if listed is not None:
                    snapshot, started = listed
                    await self.apply_resync(snapshot, started=started)
                    break
                delay = backoff.next_delay()
            except EniIpamError as exc:
                delay = backoff.next_delay()
                log.warning("initial_resync_failed", error=str(exc), retry_in=round(delay, 3))
            await self.clock.sleep(delay)
        self._takeover = None
        log.info("instances_api_ready", nodes=len(self._slots), subnets=len(self.view.subnets))
        for n, slot in enumerate(list(self._slots.values())):
            if n and n % SLICE_TRIGGERS == 0:
                await asyncio.sleep(0)
            self._trigger(slot)

    async def _periodic_resync(self) -> None:
        while True:
            await self.clock.sleep(self.next_resync_in)
            try:
                await self.resync()
            except EniIpamError as exc:
                # The previous view stays; per-instance syncs keep nodes we touch accurate meanwhile.
                log.warning("resync_failed", error=str(exc))

    def _since_listed(self) -> float:
        return 0.0 if self._listed_at is None else self.clock.monotonic() - self._listed_at

    async def list_cloud(self) -> Listed:
        """The first half of a resync: the cloud's full view, and when its listing began.

        Raises:
            EniIpamError: the listing failed (counted in the resync metrics)."""
        started = self.clock.monotonic()
        try:
            snapshot = await self.provider.resync()
        except EniIpamError:
            self.metrics.resync_finished(ok=False)
            raise
        self._listed_at = self.clock.monotonic()
        self.metrics.resync_finished(ok=True)
        return snapshot, started

    async def first_listing(self) -> Listed | None:
        """:meth:`list_cloud` for :meth:`run`'s ``first``, to start before the nodes are known: a
        failure is logged and reported as None (the first resync is then retried), never raised
        into the caller's task group."""
        try:
            return await self.list_cloud()
        except EniIpamError as exc:
            log.warning("initial_resync_failed", error=str(exc))
            return None

    @property
    def resyncing(self) -> bool:
        """A full resync is under way (another waits for it to end)."""
        return self._resync_lock.locked()

    async def resync(self) -> None:
        """Full resync: refresh the shared view and every node's instance; trigger nodes with work.
        A resync asked for while one runs waits for it, then lists anew (its listing begins after
        the call, as the caller asked)."""
        async with self._resync_lock:
            await self._resync()

    async def _resync(self) -> None:
        cpu = self.clock.cpu_seconds()
        snapshot, started = await self.list_cloud()
        await self.apply_resync(snapshot, started=started)
        # The process's CPU while the resync ran: the resync's own cost, and a little of what ran
        # beside it (an overestimate, so the share is kept).
        cost = self.clock.cpu_seconds() - cpu
        interval = resync_interval(
            floor=self.settings.resync_interval, cost=cost, share=self.settings.resync_cpu_share
        )
        if interval != self.next_resync_in:
            log.info("resync_interval_adapted", seconds=round(interval, 1), resync_cpu=round(cost, 3))
        self.next_resync_in = interval

    async def apply_resync(self, snapshot: CloudSnapshot, *, started: float) -> None:
        """The second half of a resync: take ``snapshot`` (listed from ``started`` on) as the view,
        update every node from it, and trigger the nodes with work. It yields to the event loop
        every :data:`SLICE_WORK` nodes recomputed (or :data:`SLICE_VISITS` looked at), so that other
        work (passes, events, scrapes) is never held up long; a node added meanwhile gets its own
        pass, one removed meanwhile is skipped.

        Proportional to what changed: a provider hands back the very same :class:`Instance` object
        for an instance that did not change, and a node already holding it, with nothing else to
        learn from the fresh view, is passed over: its stats stand, its series stand. What a fresh
        view can change without the instance changing is visited anyway: a node blocked on the last
        view (subnet room may be back) or reporting a shortfall, one that must re-read its instance,
        a terminated one, and
        every node of an instance type whose limits the resync changed.

        A node whose instance changed but that has no work gets no pass; its status is published
        at once, so its pool as the node side reads it is never older than the last resync."""
        changed_types = self.view.apply(snapshot)
        instances = snapshot.instances
        applied, self._applied = self._applied, None  # until this one is applied in full
        changes = snapshot.changes
        revisit, self._revisit = self._revisit, set()
        slots: Iterable[_Slot]
        if changes is not None and changes.since is applied and applied is not None and not changed_types:
            # Only what changed: the nodes of the instances that are not the objects the last
            # snapshot held, and the ones recalculated or left unsure since.
            slots = self._changed_slots(changes.instance_ids, revisit)
        else:
            slots = list(self._slots.values())
        work = visits = 0
        # Deficit first (largest first), then idle, then excess (largest first): the queue orders them.
        for slot in slots:
            visits += 1
            if work >= SLICE_WORK or visits >= SLICE_VISITS:
                work = visits = 0
                await asyncio.sleep(0)
            if slot.deleted:
                continue
            node = slot.node
            instance = instances.get(node.instance_id)
            if not node.learns_from(instance, changed_types=changed_types):
                continue
            work += 1
            pool_changed = node.observe(instance, seen_at=started)
            self._recalculate(node)
            if slot.has_work():
                self._trigger(slot)
            elif pool_changed:
                # The pool changed behind our back (addresses added or removed by someone else):
                # no pass will publish it, so it is published now (a pass is never running here,
                # or it would have work).
                self.status_sink.publish(node.name, node.status())
            if not node.unsure:
                # The next resync looks at it again when its instance changes, or when a pass or an
                # event leaves it unsure.
                self._revisit.discard(node.name)
        self._applied = instances
        for name in list(self._wanting):
            wanting = self._slots.get(name)
            if wanting is None:
                self._wanting.discard(name)
            elif wanting.has_work():
                self._trigger(wanting)
        # A set or dict keeps the table of its largest size: a start where every node wanted a pass
        # (and was short) would keep 40 bytes a node in each for good.
        self._wanting = set(self._wanting)
        self._deficits = dict(self._deficits)
        self.view.publish(self._subnets_in_use())
        self.metrics.show_totals()

    def _subnets_in_use(self) -> set[str]:
        """The subnets some node's instance has an interface in (about 15 ms at 100,000 nodes, once
        a resync: cheaper than keeping counts right through every pass, removal and replacement)."""
        return {
            i.subnet_id
            for slot in self._slots.values()
            if (instance := slot.node.instance) is not None
            for i in instance.interfaces
        }

    def _changed_slots(self, instance_ids: Iterable[str], revisit: Iterable[str]) -> Iterator[_Slot]:
        """The nodes of ``instance_ids``, then those named in ``revisit`` (each once), found as the
        apply asks for them: between its yields to the loop, however many there are."""
        seen: set[str] = set()
        for instance_id in instance_ids:
            held = self._by_instance.get(instance_id)
            for slot in held if isinstance(held, tuple) else (held,) if held is not None else ():
                seen.add(slot.node.name)
                yield slot
        for name in revisit:
            named = self._slots.get(name)
            if named is not None and name not in seen:
                yield named

    def _index(self, instance_id: str, slot: _Slot) -> None:
        held = self._by_instance.get(instance_id)
        if held is None:
            self._by_instance[instance_id] = slot
        elif isinstance(held, tuple):
            if slot not in held:
                self._by_instance[instance_id] = (*held, slot)
        elif held is not slot:
            self._by_instance[instance_id] = (held, slot)

    def _unindex(self, instance_id: str, slot: _Slot) -> None:
        held = self._by_instance.get(instance_id)
        if held is slot:
            del self._by_instance[instance_id]
        elif isinstance(held, tuple):
            rest = tuple(s for s in held if s is not slot)
            self._by_instance[instance_id] = rest[0] if len(rest) == 1 else rest

    # -- node table -----------------------------------------------------------------------------

    def upsert(self, resource: NodeResource, *, listed: int | None = None) -> None:
        """A node was added or changed (spec, used addresses, handshake answers): maintain it soon.

        ``listed``: the addresses the node's pool held by its last published status, if known. A
        hint for the time before the first full listing (:meth:`_admit`); never planned on."""
        name = resource.name
        slot = self._slots.get(name)
        if slot is None:
            slot = self._slots[name] = _Slot(Node(resource, self._env))
            self._index(resource.instance_id, slot)
            # A term's start adds every node (100,000 lines at 100,000 nodes): said once, in sum,
            # by ``instances_api_ready``; a node joining afterwards is said on its own.
            (log.info if self.ready else log.debug)("node_added", node=name, instance=resource.instance_id)
        else:
            if slot.node.instance_id != resource.instance_id:
                self._unindex(slot.node.instance_id, slot)
                self._index(resource.instance_id, slot)
            slot.node.update(resource)
        self._recalculate(slot.node)
        if self.ready:
            self._trigger(slot)
        else:
            self._admit(resource, listed)

    def delete(self, name: str) -> Departure | None:
        """Stop maintaining a node. Returns None for an unknown node; otherwise a handle whose
        ``idle()`` waits for a pass still running."""
        slot = self._slots.pop(name, None)
        if slot is None:
            return None
        slot.deleted = True
        self._wanting.discard(name)
        self._revisit.discard(name)
        self._deficits.pop(name, None)
        self._waiting -= slot.queued
        self._in_backoff -= slot.backoff is not None
        self._unindex(slot.node.instance_id, slot)
        self._disarm(slot)
        self.metrics.remove_node(name)
        log.info("node_removed", node=name)
        return Departure(slot)

    def trigger(self, name: str) -> None:
        """Ask for a pass of node ``name`` as soon as its minimum interval or backoff allows."""
        slot = self._slots.get(name)
        if slot is not None:
            self._trigger(slot)

    def schedule(self, name: str) -> Schedule | None:
        """Node ``name``'s place in the schedule, or None for an unknown node."""
        slot = self._slots.get(name)
        if slot is None:
            return None
        return Schedule(
            queued=slot.queued,
            running=slot.running,
            failures=slot.backoff.failures if slot.backoff is not None else 0,
            not_before=slot.not_before,
            timer_due=slot.timer[1] if slot.timer is not None else None,
        )

    def _oldest_deficit(self) -> float:
        """Seconds the longest-standing open deficit has lasted (0: no node is short)."""
        if not self._deficits:
            return 0.0
        return max(self.clock.monotonic() - min(self._deficits.values()), 0.0)

    def held(self) -> tuple[object, ...]:
        """What the manager keeps for its nodes, short of the services it shares (the provider, the
        metrics, the clock) and of the provider's last listing it refers to: the nodes, the cloud
        view and the tables it finds nodes by (what a memory measurement adds up)."""
        queued = self._queue._queue  # type: ignore[attr-defined]
        return (
            self.nodes,
            self.view,
            self._by_instance,
            self._revisit,
            self._wanting,
            self._deficits,
            queued,
        )

    def busy(self) -> bool:
        """Whether any node still has work the reconciler could do (the simulator's "converged" test)."""
        return not self.ready or any(slot.has_work() for slot in self._slots.values())

    # -- scheduling -----------------------------------------------------------------------------

    def _trigger(self, slot: _Slot) -> None:
        if slot.deleted:
            return
        if slot.running:
            slot.dirty = True  # one more pass when this one ends
            return
        if slot.queued:
            return
        now = self.clock.monotonic()
        if slot.not_before <= now:
            self._enqueue(slot)
        else:
            self._arm(slot, slot.not_before)

    def _arm(self, slot: _Slot, due: float) -> None:
        """Make sure a pass is asked for at ``due`` at the latest (the earliest timer wins)."""
        if slot.timer is not None:
            if slot.timer[1] <= due:
                return
            slot.timer[0].cancel()

        def fire() -> None:
            slot.timer = None
            if slot.not_before > self.clock.monotonic():
                # A timer armed before a failure (a release delay) never runs the node sooner than
                # its backoff, or than the wait a cloud asked for.
                self._arm(slot, slot.not_before)
                return
            if not slot.deleted and not slot.queued:
                if slot.running:
                    slot.dirty = True
                else:
                    self._enqueue(slot)

        slot.timer = (self.clock.call_later(due - self.clock.monotonic(), fire), due)

    def _disarm(self, slot: _Slot) -> None:
        if slot.timer is not None:
            slot.timer[0].cancel()
            slot.timer = None

    def _enqueue(self, slot: _Slot) -> None:
        slot.queued = True
        self._waiting += 1
        s = slot.node.stats
        waiting = slot.node.resource.pending_pods
        if s.needed > 0 or waiting > 0:
            # Pods waiting for an address count with the deficit: their node is served first.
            rank, key = 0, -(s.needed + waiting)
        elif s.excess > 0 and (self.settings.release_excess_ips or slot.node.pressured):
            rank, key = 2, -s.excess
        else:
            rank, key = 1, 0
        # One flat tuple an entry (a nested priority tuple would add 56 bytes a queued node).
        self._queue.put_nowait((rank, key, next(self._seq), slot.node.name))

    async def _worker(self) -> None:
        while True:
            *_, name = await self._queue.get()
            slot = self._slots.get(name)
            if slot is None or not slot.queued:
                continue
            if not self.ready and (not self.view.shared or name not in (self._takeover or ())):
                # Not admitted before the first full listing: set aside; the listing's apply
                # triggers every node.
                slot.queued = False
                self._waiting -= 1
                continue
            slot.start()
            self._waiting -= 1
            began = self.clock.monotonic()
            try:
                result = await slot.node.maintain()
            except BaseException:  # cancelled
                slot.stop()
                raise
            self._finish(slot, result, seconds=self.clock.monotonic() - began)
            # A pass with nothing to call finishes without ever waiting, and a queue with nodes in
            # it hands the next one over at once: without this, one worker would run a start's
            # hundred thousand passes back to back while nothing else (the lease, a scrape) runs.
            await asyncio.sleep(0)

    def _finish(self, slot: _Slot, result: PassResult, *, seconds: float) -> None:
        """Act on a pass's result (after ``seconds``): publish, then schedule what comes next."""
        node = slot.node
        self.metrics.pass_finished(seconds=seconds)
        error = result.error
        delay = self._count_outcome(slot, error)
        self._set_gauges(node)  # with the node's failing series as the outcome left it
        if result.status is not None and not slot.deleted:
            # A pass that outlived its node publishes nothing: its pool's record is gone (or going).
            # Published while the pass still counts as running: an event the status causes (the
            # node side's answer) makes one follow-up pass, after the minimum interval.
            self.status_sink.publish(node.name, result.status)
        slot.stop()
        now = self.clock.monotonic()
        if error is None:
            slot.not_before = now + self.settings.trigger_min_interval
        elif isinstance(error, errors.Lapsed):
            # Leadership is not proven right now (the process was paused): not the node's failure,
            # so no backoff grows. Retried a first-retry delay later: if the lease is gone by then,
            # this manager is cancelled with its term; if it was renewed, the pass goes ahead.
            log.debug("maintenance_lapsed", node=node.name)
            slot.not_before = now + self.settings.backoff_initial
            slot.dirty = True
        elif isinstance(error, errors.Fenced):
            # Mutations stopped (shutdown, or the lease was lost): not the node's failure, and no
            # retry; whoever reconciles next starts from a fresh resync.
            log.debug("maintenance_fenced", node=node.name)
            return
        else:
            assert delay is not None and slot.backoff is not None  # a failure of the node's: counted
            # A cloud that names its wait (Retry-After) is never retried sooner than it asked.
            delay = max(delay, getattr(error, "retry_after", None) or 0.0)
            slot.not_before = now + delay
            self.metrics.pass_failed(reason=type(error).__name__)
            log.warning(
                "maintenance_failed",
                node=node.name,
                error=str(error),
                failures=slot.backoff.failures,
                retry_in=round(delay, 3),
                exc_info=error if not isinstance(error, EniIpamError) else False,
            )
            slot.dirty = True
        if result.again_at is not None and not slot.deleted:
            self._arm(slot, result.again_at)
        if slot.dirty and not slot.deleted:
            slot.dirty = False
            self._trigger(slot)

    def _count_outcome(self, slot: _Slot, error: Exception | None) -> float | None:
        """Keep the node's backoff with its pass's outcome: a success clears it, a failure of the
        node's own (not a lapsed or stopped fence) grows it and records its reason. The failure's
        next delay, else None."""
        if error is None:
            if slot.backoff is not None and not slot.deleted:
                self._in_backoff -= 1
            slot.backoff = None
            return None
        if isinstance(error, errors.Fenced):  # Lapsed too: not the node's failure
            return None
        if slot.backoff is None:
            self._in_backoff += not slot.deleted
            slot.backoff = Backoff(
                initial=self.settings.backoff_initial, maximum=self.settings.backoff_max, rng=self.rng
            )
        slot.failure = failure_reason(error)
        return slot.backoff.next_delay()

    def _pressure_changed(self, subnet_id: str, under: bool) -> None:
        """A subnet entered or left pressure: its nodes' watermarks change (shrink, or are restored),
        so each is recalculated and, with work, queued; the queue serves those short first, then
        those with the most spare to give back."""
        for slot in list(self._slots.values()):
            node = slot.node
            if slot.deleted or not node.in_subnet(subnet_id):
                continue
            self._recalculate(node)
            if slot.has_work():
                self._trigger(slot)

    def _room_back(self, subnet_id: str) -> None:
        """Addresses went back to a subnet under pressure (a node gave its spare back): the nodes
        blocked on it are woken at once rather than at the next full resync. Once per loop turn
        whatever the number of unassigns, and only the nodes left unsure (blocked among them) are
        looked at."""
        if not self._room_back_subnets:
            self.clock.call_later(0.0, self._wake_blocked)
        self._room_back_subnets.add(subnet_id)

    def _wake_blocked(self) -> None:
        subnets, self._room_back_subnets = self._room_back_subnets, set()
        for name in list(self._revisit):
            slot = self._slots.get(name)
            if slot is None or slot.deleted:
                continue
            node = slot.node
            if node.blocked and any(node.in_subnet(sid) for sid in subnets):
                node.room_back()
                self._recalculate(node)
                if slot.has_work():
                    self._trigger(slot)

    # -- the pool of ready interfaces -----------------------------------------------------------

    def _nodes_waiting(self) -> bool:
        """Whether a node waits for addresses now: a pass queued, or one running for a node in
        deficit. The pool refills only when none does."""
        if self._waiting > 0:
            return True
        slots = self._slots
        return any((slot := slots.get(name)) is not None and slot.running for name in self._deficits)

    def _known_interfaces(self) -> int:
        """Interfaces attached to the nodes' instances, as the view holds them."""
        return sum(
            len(s.node.instance.interfaces) for s in self._slots.values() if s.node.instance is not None
        )

    def _ready_demand(self) -> list[CreateInterface]:
        """The first new interface a fresh node would get, for every kind of node there is (same
        spec object, instance type, subnet, zone and primary groups: planned once)."""
        view = self.view
        subnets = view.planner_subnets()
        planned: dict[tuple[object, ...], CreateInterface | None] = {}
        for slot in self._slots.values():
            node = slot.node
            instance = node.instance
            if instance is None or node.terminated:
                continue
            primary = instance.primary()
            groups = primary.security_groups if primary is not None else ()
            kind = (id(node.resource.spec), instance.type, instance.subnet_id, instance.zone, groups)
            if kind in planned:
                continue
            limits = view.known_limits(instance.type)
            planned[kind] = (
                first_new_interface(
                    node.resource.spec,
                    instance,
                    limits,
                    subnets,
                    view.security_groups,
                    prefix_delegation=self.settings.prefix_delegation,
                )
                if limits is not None
                else None
            )
        return [request for request in planned.values() if request is not None]

    # -- stats and totals -----------------------------------------------------------------------

    def _recalculate(self, node: Node) -> None:
        node.recalculate()
        self._set_gauges(node)

    def _set_gauges(self, node: Node) -> None:
        """The node's series, and with them the cluster totals (kept equal to their sums); and
        whether the node wants a pass (what every resync asks of the nodes it passes over)."""
        slot = self._slots.get(node.name)
        if slot is not None and slot.node is node:  # a removed node's series stay removed
            stats, demand = node.stats, node.demand()
            if demand != stats.needed:  # pods wait beyond the free addresses, or beyond the instance
                stats = dataclasses.replace(stats, needed=demand)
            failing = (slot.failure, slot.backoff.failures) if slot.backoff is not None else None
            self.metrics.set_node(node.name, stats, capacity=node.capacity_limit(), failing=failing)
            if node.unsure:
                self._revisit.add(node.name)
            if node.deficit_since is None:
                self._deficits.pop(node.name, None)
            else:
                self._deficits[node.name] = node.deficit_since
            if node.wants_pass():
                self._wanting.add(node.name)
            else:
                self._wanting.discard(node.name)
