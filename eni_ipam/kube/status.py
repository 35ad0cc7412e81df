"""Pool status writes: coalesced, ordered by need, rate limited, each replacing the controller's fields.

The manager publishes a node's status after every pass (``publish`` never blocks). Writes are
coalesced per node — only the latest status of a node is ever written — and wait in a priority
queue: pools of nodes with pending pods first (most pods first), then nodes in deficit (largest
deficit first), then the rest in the order they came. Every write spends a token of one bucket
(``status_qps``/``status_burst``), so a fresh start over 100,000 pools (hours at 10 writes a
second) reaches the nodes that wait for addresses first, and a status published while the queue
is long overtakes everything less urgent.

What a write needs of its pool is the informer's projection (:class:`~eni_ipam.kube.projection.
PoolInfo`): the digest of the controller-owned fields as stored, the conditions' transition times,
the generation and the resourceVersion. A status whose digest equals the stored one is not sent
and spends no token, so a new leader, or a restarted process, that computes what the pools already
hold writes nothing. The write itself (:func:`~eni_ipam.kube.resources.status_ops`) is a JSON patch
replacing each controller field whole; it never names the node agent's fields, so an agent writing
``used`` or ``releaseAnswers`` at the same moment loses nothing, and it needs no old content.

A write the server stores otherwise than it was written (a CRD older than the controller prunes
the fields its schema lacks: the chart installs a CRD once and never upgrades it) would be written
again at every pass, for ever. So when a write's answer has another digest than the write, the
writer remembers the pair for that pool and does not write the same status onto the same stored one
again; the first such write of a term is logged as a warning naming the cause. The pair is kept only
for pools whose writes were altered (none with a current CRD).

The writer keeps no written object. A projection more recent than the informer's — a write's
answer, a re-read after a conflict, a pool as the list made at the start of a term saw it — is kept
only until the informer has caught up with it (its resourceVersion reaches that one's), so a status
is compared with the latest the controller knows of, not with a cache that lags: at the start of a
term, the previous leader's last writes may not have reached this replica's watch yet.

Writes are a leader's, as its cloud calls are: ``may_write`` (the leadership term, from the
service) is asked before each one. While it says no — a leader resumed after a pause, before its
renew loop has run — what is queued stays queued, unwritten, and the next round is tried
``HOLD_RETRY`` seconds later; a stale view written over the new leader's would stay until the
pool's next change.

Failures: a 409 (only a pool without any status is written conditionally; or an injected fault) is
re-read and recomputed, up to ``MAX_ATTEMPTS`` times, then queued for the next round. A pool that
is gone (404) is dropped; a write the server refuses (422, 403) is logged and dropped, unless it is a
field-by-field write to a pool whose status was removed meanwhile (re-read, then written whole).
Other failures are queued again and retried after a backoff.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
from collections.abc import Callable

import structlog

from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.core.backoff import Backoff
from eni_ipam.core.clock import Clock
from eni_ipam.core.model import NodeStatus
from eni_ipam.core.ratelimit import Bucket, RateLimiter
from eni_ipam.kube import errors
from eni_ipam.kube.api import ENIPOOLS, KubeApi
from eni_ipam.kube.projection import PoolInfo, project_pool
from eni_ipam.kube.resources import held_ops, status_ops, written_digest

log = structlog.get_logger("eni_ipam.kube.status")

MAX_ATTEMPTS = 3
"""Conflicts retried at once per write; after that the status waits for the next round."""
OPERATION = "status"
HOLD_RETRY = 1.0
"""Seconds between rounds while writes are held (``may_write`` says no): a renewal comes every
``retry_period`` (2 s by default), or the term ends and the writer is reset."""
YIELD_EVERY = 256
"""Statuses checked between two yields to the event loop when none needs a write (a hand-over
compares every pool's status; the lease must still be renewed meanwhile)."""

Rank = tuple[int, int, int]


def _caught_up(cached: PoolInfo, written: PoolInfo) -> bool:
    """Whether the informer's ``cached`` projection is at least as recent as ``written``
    (resourceVersions of one etcd are increasing integers; anything else counts as caught up)."""
    a, b = cached.resource_version, written.resource_version
    return not (a.isdigit() and b.isdigit()) or int(a) >= int(b)


def _no_pods(name: str) -> int:
    return 0


class StatusWriter:
    def __init__(
        self,
        api: KubeApi,
        *,
        lookup: Callable[[str], PoolInfo | None],
        clock: Clock,
        metrics: Metrics,
        qps: float = 10.0,
        burst: int = 50,
        batch_window: float = 0.2,
        pending_pods: Callable[[str], int] = _no_pods,
        on_publish: Callable[[str, NodeStatus], None] | None = None,
    ) -> None:
        """Args:
        lookup: the ENIPool's projection as last seen by the informer (None when there is none).
        batch_window: seconds changes gather before they are written.
        pending_pods: how many pods wait for an address on a node (its status goes first).
        on_publish: told of every status published, before it is queued (it must not block).
        """
        self.on_publish = on_publish
        self.api = api
        self.lookup = lookup
        self.pending_pods = pending_pods
        self.clock = clock
        self.metrics = metrics
        self.batch_window = batch_window
        self.limiter = RateLimiter({OPERATION: Bucket(burst=float(burst), refill=qps)}, clock=clock)
        self.pending: dict[str, NodeStatus] = {}
        """The latest unwritten status of each pool."""
        self._heap: list[tuple[Rank, int, int, str]] = []
        """``(rank, arrival, token, pool)``: a pool published again gets a new entry, the old one stays
        in the heap and is skipped (its token is no longer the pool's)."""
        self._place: dict[str, tuple[int, int]] = {}
        """Each pending pool's ``(arrival, token)``: its place in line is kept while it waits, so a
        node whose status keeps changing is not sent to the back of the line each time."""
        self._seq = itertools.count()
        self._ahead: dict[str, PoolInfo] = {}
        """Projections more recent than the informer's, until it has caught up (the module doc)."""
        self._altered: dict[str, tuple[bytes, bytes]] = {}
        """``(digest written, digest stored)`` of the last write of a pool that the server stored
        otherwise (the module doc)."""
        self.may_write: Callable[[], bool] = lambda: True
        """Whether this process may write now (its leadership term is proven); the module doc."""
        self._lapsed = False
        """Whether the last round stopped because ``may_write`` said no."""
        self._say = True
        """Whether held statuses are replaced by a Ready condition saying why."""
        self._held = ""
        """Why statuses are held (empty: they are written): the pools' CRD would prune them."""
        self._marked: set[str] = set()
        """Pools whose Ready condition says why their statuses are held (while they are)."""
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()  # one round at a time (the shutdown flush races the loop's)
        self.backoff = Backoff(initial=1.0, maximum=60.0, rng=random.Random())

    # StatusSink
    def publish(self, name: str, status: NodeStatus) -> None:
        if self.on_publish is not None:
            self.on_publish(name, status)
        self.pending[name] = status
        arrival = self._place[name][0] if name in self._place else next(self._seq)
        token = next(self._seq)
        self._place[name] = (arrival, token)
        heapq.heappush(self._heap, (self._rank(name, status), arrival, token, name))
        if len(self._heap) > 2 * len(self._place) + 64:  # nodes republished while the line is long
            self._heap = [entry for entry in self._heap if self._live(entry)]
            heapq.heapify(self._heap)
        self._wake.set()

    def _live(self, entry: tuple[Rank, int, int, str]) -> bool:
        place = self._place.get(entry[3])
        return place is not None and place[1] == entry[2]

    def _rank(self, name: str, status: NodeStatus) -> Rank:
        pods, needed = self.pending_pods(name), status.stats.needed
        if pods > 0:
            return (0, -pods, -needed)
        if needed > 0:
            return (1, -needed, 0)
        return (2, 0, 0)

    def _top(self) -> tuple[str, NodeStatus] | None:
        """The most urgent pending status, left in the queue (None when nothing is pending)."""
        while self._heap:
            if self._live(self._heap[0]):
                name = self._heap[0][3]
                return name, self.pending[name]
            heapq.heappop(self._heap)  # superseded or forgotten
        return None

    def _pop(self) -> tuple[str, NodeStatus] | None:
        """The most urgent pending status, taken out of the queue."""
        top = self._top()
        if top is not None:
            heapq.heappop(self._heap)
            del self._place[top[0]], self.pending[top[0]]
        return top

    @property
    def held(self) -> str:
        """Why statuses are not written (empty: they are)."""
        return self._held

    def hold(self, reason: str, *, say: bool = True) -> None:
        """Write no status until :meth:`release`, only a ``Ready`` condition saying ``reason`` on each
        pool a status is published for (once a pool): the ENIPool CRD in the cluster would prune
        what is written (:mod:`~eni_ipam.kube.crd`). Statuses published meanwhile wait, coalesced.
        ``say=False``: not even the condition (the CRD has not been read yet: nothing to say)."""
        if reason != self._held or say != self._say:
            self._held, self._say = reason, say
            self._marked.clear()
            self._wake.set()

    def release(self) -> None:
        """Write statuses again, what was written while the CRD pruned it included (the pairs of
        :attr:`_altered` were made under another schema)."""
        if self._held:
            self._held = ""
            self._marked.clear()
            self._altered.clear()
            self._wake.set()

    def reset(self) -> None:
        """Drop everything queued and remembered (leadership ended: the next term starts clean)."""
        self._marked.clear()
        self.pending.clear()
        self._heap.clear()
        self._place.clear()
        self._ahead.clear()
        self._altered.clear()

    def remember(self, pool: PoolInfo) -> None:
        """``pool`` as read elsewhere than through the informer (the list made at the start of a
        term): kept until the informer has caught up with it, if it is more recent than what the
        informer and the writer already have."""
        known = self._current(pool.name)
        if known is None or not _caught_up(known, pool):
            self._ahead[pool.name] = pool

    def seen(self, pool: PoolInfo) -> None:
        """The informer has ``pool``: a more recent projection of it is no longer kept once the
        informer is at least that recent (its handler calls this on every pool event)."""
        ahead = self._ahead.get(pool.name)
        if ahead is not None and _caught_up(pool, ahead):
            del self._ahead[pool.name]

    def forget(self, name: str) -> None:
        """The pool is gone: drop what was queued and remembered for it."""
        self.pending.pop(name, None)
        self._place.pop(name, None)
        self._ahead.pop(name, None)
        self._altered.pop(name, None)
        self._marked.discard(name)

    async def run(self) -> None:
        """Write until cancelled; after a round with failures, back off before the next."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self.clock.sleep(self.batch_window)
            if await self.flush():
                self.backoff.reset()
            else:
                await self.clock.sleep(self.backoff.next_delay())
            if self._lapsed:  # leadership unproven: what waits is tried again shortly
                await self.clock.sleep(HOLD_RETRY)
                self._wake.set()

    async def flush(self) -> bool:
        """Write everything pending, most urgent first, including what is published meanwhile;
        False when some write failed (it is queued again, for the next round)."""
        async with self._lock:
            self._lapsed = False
            if self._held:
                return await self._mark_held() if self._say else True
            failed: dict[str, NodeStatus] = {}
            checked = 0
            while (top := self._top()) is not None:
                checked += 1
                if checked % YIELD_EVERY == 0:
                    await asyncio.sleep(0)
                if not self._changes(*top):
                    self._pop()  # the pool already says so: no write, no token
                    continue
                await self.limiter.acquire(OPERATION)
                # Taken once the token is there: a status more urgent than the one that was on top
                # may have come while it was awaited, and it goes first.
                if not self.may_write():
                    self._lapsed = True  # left queued: written once the term is proven again
                    log.info("status_writes_held", reason="leadership term lapsed", pending=len(self.pending))
                    break
                item = self._pop()
                if item is not None and not await self._write(*item):
                    failed[item[0]] = item[1]
            for name, status in failed.items():
                if name not in self.pending:  # unless a newer status came meanwhile
                    self.publish(name, status)
            for name, ahead in list(self._ahead.items()):
                cached = self.lookup(name)
                if cached is not None and _caught_up(cached, ahead):
                    del self._ahead[name]
            return not failed

    async def _mark_held(self) -> bool:
        """While held: each pool with a pending status gets a ``Ready`` condition saying why (once);
        the statuses stay queued. False when a write failed (it is tried again next round)."""
        ok = True
        reason = self._held
        for name in [name for name in self.pending if name not in self._marked]:
            current = self._current(name)
            if current is None:
                continue
            await self.limiter.acquire(OPERATION)
            if self._held != reason or name not in self.pending:
                return ok  # released, or held for another reason, meanwhile
            if not self.may_write():
                self._lapsed = True  # a leader's write too: after the next renewal
                return ok
            ops = held_ops(self.pending[name], current, now=self.clock.now_utc(), message=reason)
            try:
                answer = await self.api.json_patch(ENIPOOLS, name, ops, status=True)
            except errors.KubeNotFound:
                self.forget(name)
                continue
            except errors.KubeError as exc:
                self._failed(name, exc)
                ok = False
                continue
            self._ahead[name] = project_pool(answer)
            self._marked.add(name)
            self.metrics.status_writes.labels(outcome="held").inc()
        return ok

    def _current(self, name: str) -> PoolInfo | None:
        """The most recent projection of the pool: the informer's, or one it has not caught up with."""
        cached, ahead = self.lookup(name), self._ahead.get(name)
        if ahead is None:
            return cached
        if cached is not None and _caught_up(cached, ahead):
            del self._ahead[name]
            return cached
        return ahead

    def _changes(self, name: str, status: NodeStatus) -> bool:
        """Whether writing ``status`` would change the pool (a gone pool needs no write)."""
        current = self._current(name)
        return (
            current is not None
            and status_ops(status, current, now=self.clock.now_utc(), stored_as=self._altered.get(name))
            is not None
        )

    async def _write(self, name: str, status: NodeStatus) -> bool:
        """Write ``status`` if it changes the pool; False when it failed and should be retried.
        Its token is spent; conflicts are retried at once, without another."""
        current = self._current(name)
        invalid: errors.KubeInvalid | None = None  # a field-by-field write refused once
        for _ in range(MAX_ATTEMPTS):
            if current is None:
                return True  # the pool is gone
            ops = status_ops(status, current, now=self.clock.now_utc(), stored_as=self._altered.get(name))
            if ops is None:
                return True  # the pool already says so
            try:
                answer = await self.api.json_patch(ENIPOOLS, name, ops, status=True)
            except errors.KubeConflict:
                self.metrics.status_writes.labels(outcome="conflict").inc()
            except errors.KubeNotFound:
                self.forget(name)
                return True
            except errors.KubeInvalid as exc:
                if current.has_status and invalid is None:
                    # The status may have been removed since it was read: a field cannot be added
                    # to a missing status. Read it again; written whole if it is gone.
                    invalid = exc
                else:
                    self._refused(name, exc)
                    return True
            except errors.KubeForbidden as exc:
                self._refused(name, exc)
                return True
            except errors.KubeError as exc:
                self._failed(name, exc)
                return False
            else:
                stored = self._ahead[name] = project_pool(answer)
                self._stored(name, written_digest(ops), stored.digest)
                self.metrics.status_writes.labels(outcome="ok").inc()
                return True
            try:
                current = project_pool(await self.api.get(ENIPOOLS, name, status=True))
            except errors.KubeNotFound:
                self.forget(name)
                return True
            except errors.KubeError as exc:
                self._failed(name, exc)
                return False
            self._ahead[name] = current  # newer than the informer's, until it catches up
            if invalid is not None and current.has_status:
                self._refused(name, invalid)  # the status is there: the server refuses the values
                return True
        self._failed(name, None)
        return False

    def _stored(self, name: str, written: bytes, stored: bytes) -> None:
        """Remember a write the server stored otherwise than it was written (the module doc)."""
        if written == stored:
            self._altered.pop(name, None)
            return
        if not self._altered:
            log.warning(
                "status_stored_otherwise",
                node=name,
                cause="the API server changed the status written (an ENIPool CRD older than the "
                "controller prunes the fields it lacks: apply the chart's crds/ before upgrading)",
            )
        self._altered[name] = (written, stored)

    def _refused(self, name: str, exc: errors.KubeError) -> None:
        # Retrying the same write cannot help (an old CRD schema, missing RBAC): say so, drop it.
        self.metrics.status_writes.labels(outcome="failed").inc()
        log.error("status_write_refused", node=name, error=str(exc))

    def _failed(self, name: str, exc: errors.KubeError | None) -> None:
        self.metrics.status_writes.labels(outcome="failed").inc()
        log.warning("status_write_failed", node=name, error=str(exc) if exc else "conflicts persisted")
