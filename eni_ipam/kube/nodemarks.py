"""What eni-ipam writes on Nodes: the max-pods annotation and its two taints.

Role: the scheduler, the kubelet's configuration and an autoscaler read Nodes, not ENIPools. So:

* ``eni-ipam.io/max-pods`` (annotation, the controller): the most pods the Node can run with an
  address each, plus the host-network ones (:attr:`~eni_ipam.core.model.NodeStatus.max_pods`).
* ``eni-ipam.io/no-room:NoSchedule`` (taint, the controller, opt-in: ``kubernetes.no_room_taint``):
  while the Node has no address for one more pod and cannot get one
  (:attr:`~eni_ipam.core.model.NodeStatus.no_room`), with hysteresis: put on after
  ``no_room_after`` seconds without room, taken off after ``room_after`` seconds with room.
* ``eni-ipam.io/not-ready:NoSchedule`` (taint, put on by whoever registers the Node — the kubelet's
  ``--register-with-taints``, Karpenter's ``startupTaints`` — and taken off once by the node agent,
  when its pool holds its minimum and it serves: :func:`lift_startup_taint`).

Invariants: a taint is added or removed by a merge patch carrying the ``resourceVersion`` it was
computed from (a list is replaced whole by a merge patch: a conditional write never drops a taint
someone added meanwhile; a 409 re-reads); no taint or annotation of anyone else is ever changed;
:class:`NodeMarks` writes only what differs from what the Node carries (its projection), one Node at
a time, under a token bucket, and retries a failed write after a backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import random
import sys
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from eni_ipam.core.backoff import Backoff
from eni_ipam.core.clock import Clock
from eni_ipam.core.model import NodeStatus
from eni_ipam.core.ratelimit import Bucket, RateLimiter
from eni_ipam.kube import errors
from eni_ipam.kube.api import NODES, KubeApi
from eni_ipam.kube.informer import EMIT_SLICE, Informer
from eni_ipam.kube.projection import MAX_PODS_ANNOTATION, NodeInfo
from eni_ipam.kube.settings import KubeSettings

__all__ = [
    "MAX_PODS_ANNOTATION",
    "NO_ROOM_TAINT",
    "STARTUP_TAINT",
    "NodeMarks",
    "lift_startup_taint",
    "taint_patch",
]

log = structlog.get_logger("eni_ipam.kube.nodemarks")

STARTUP_TAINT = "eni-ipam.io/not-ready"
"""The startup taint the node agent removes once its pool is ready and it serves."""

NO_ROOM_TAINT = "eni-ipam.io/no-room"
"""The taint the controller keeps on a Node with no room for one more pod (opt-in)."""

EFFECT = "NoSchedule"
"""Both taints only keep new pods away: what runs on the Node stays."""

OPERATION = "node"
"""The token bucket Node writes take from."""


def _taints(node: Mapping[str, Any]) -> list[Any]:
    taints = (node.get("spec") or {}).get("taints")
    return list(taints) if isinstance(taints, list) else []


def _has(taints: list[Any], key: str) -> bool:
    return any(isinstance(t, Mapping) and t.get("key") == key for t in taints)


def taint_patch(node: Mapping[str, Any], key: str, *, present: bool) -> dict[str, Any] | None:
    """The merge patch that puts taint ``key`` (``NoSchedule``) on the whole Node ``node``
    (``present``) or takes it off, conditional on the resourceVersion it was read at; None when the
    Node is already so. Every other taint is kept as it is."""
    taints = _taints(node)
    if _has(taints, key) == present:
        return None
    if present:
        taints.append({"key": key, "effect": EFFECT})
    else:
        taints = [t for t in taints if not (isinstance(t, Mapping) and t.get("key") == key)]
    version = (node.get("metadata") or {}).get("resourceVersion")
    return {"metadata": {"resourceVersion": version}, "spec": {"taints": taints}}


async def set_taint(api: KubeApi, name: str, key: str, *, present: bool, attempts: int = 3) -> bool:
    """Put taint ``key`` on Node ``name`` or take it off; True when it changed the Node. A 409 (the
    Node changed since it was read) reads it again, up to ``attempts`` times. Raises
    :class:`~eni_ipam.kube.errors.KubeError` (404 when the Node is gone, 409 after the last attempt)."""
    for attempt in range(attempts):
        node = await api.get(NODES, name)
        patch = taint_patch(node, key, present=present)
        if patch is None:
            return False
        try:
            await api.patch(NODES, name, patch)
        except errors.KubeConflict:
            if attempt == attempts - 1:
                raise
            continue
        return True
    return False  # pragma: no cover - the loop returns or raises


async def lift_startup_taint(api: KubeApi, node: str, *, key: str = STARTUP_TAINT) -> bool:
    """Take the startup taint off Node ``node`` (the node agent, once; True when it was there)."""
    removed = await set_taint(api, node, key, present=False)
    log.info("startup_taint_lifted" if removed else "startup_taint_absent", node=node, taint=key)
    return removed


class NodeMarks:
    """The controller's writer of Nodes: the max-pods annotation and the no-room taint.

    The source tells it every status published (:meth:`observe`, synchronous) and every change of a
    Node (:meth:`changed`); while leading, :meth:`run` makes each Node carry what its last status
    calls for."""

    def __init__(
        self,
        api: KubeApi,
        *,
        nodes: Informer[NodeInfo],
        settings: KubeSettings,
        clock: Clock,
        rng: random.Random,
        on_taint: Callable[[str, bool], None] | None = None,
        tainted_gauge: Any = None,
    ) -> None:
        """``on_taint``: told ``(node, tainted)`` after each no-room taint written (the Event);
        ``tainted_gauge``: set to the number of Nodes that are to carry the taint."""
        self.api = api
        self._nodes = nodes
        self.settings = settings
        self.clock = clock
        self.rng = rng
        self._on_taint = on_taint
        self._gauge = tainted_gauge
        self.limiter = RateLimiter(
            {OPERATION: Bucket(burst=float(settings.status_burst), refill=settings.status_qps)}, clock=clock
        )
        self._max_pods: dict[str, str] = {}
        """The annotation each Node's last status calls for."""
        self._no_room_since: dict[str, float] = {}
        """Nodes without room → since when (on the clock's timeline), while they have none."""
        self._room_since: dict[str, float] = {}
        """Tainted Nodes with room again → since when, while they have it."""
        self.tainted: set[str] = set()
        """The Nodes that are to carry the no-room taint."""
        self._seen: set[str] = set()
        """Nodes whose status was observed this term: the first observation adopts a no-room taint the
        Node already carries (the previous leader's), so a new term does not take it off and put it
        back."""
        self._due: list[tuple[float, str]] = []
        self._todo: set[str] = set()
        self._wake = asyncio.Event()

    # -- what the source tells it (synchronous) ---------------------------------------------------

    def observe(self, name: str, status: NodeStatus) -> None:
        """Node ``name``'s pool published ``status``."""
        if self.settings.max_pods_annotation and status.max_pods > 0:
            wanted = sys.intern(str(status.max_pods))
            if self._max_pods.get(name) != wanted:
                self._max_pods[name] = wanted
                self._queue(name)
        if self.settings.no_room_taint:
            now = self.clock.monotonic()
            if name not in self._seen:
                self._seen.add(name)
                node = self._nodes.store.get(name)
                if node is not None and NO_ROOM_TAINT in node.taints:
                    self._taint(name, True)
            if status.no_room:
                self._room_since.pop(name, None)
                self._no_room_since.setdefault(name, now)
            else:
                self._no_room_since.pop(name, None)
                if name in self.tainted:
                    self._room_since.setdefault(name, now)
            self._judge(name, now)

    def changed(self, name: str) -> None:
        """Node ``name`` changed (or was first seen): someone may have taken off what it should carry."""
        if name in self._max_pods or name in self.tainted:
            self._queue(name)

    def forget(self, name: str) -> None:
        """Node ``name`` is gone or no longer maintained."""
        self._max_pods.pop(name, None)
        self._no_room_since.pop(name, None)
        self._room_since.pop(name, None)
        self._seen.discard(name)
        self._taint(name, False)
        self._todo.discard(name)

    def clear(self) -> None:
        """The term ended: the next leader judges every Node afresh from its statuses."""
        self._max_pods.clear()
        self._no_room_since.clear()
        self._room_since.clear()
        self._seen.clear()
        self.tainted.clear()
        self._count()
        self._todo.clear()
        self._due.clear()

    # -- hysteresis -------------------------------------------------------------------------------

    def _judge(self, name: str, now: float) -> None:
        """Taint or untaint ``name`` once its state has held long enough; else come back then."""
        since = self._no_room_since.get(name)
        if since is not None and name not in self.tainted:
            if now - since >= self.settings.no_room_after:
                self._taint(name, True)
                self._queue(name)
            else:
                self._at(since + self.settings.no_room_after, name)
        back = self._room_since.get(name)
        if back is not None and name in self.tainted:
            if now - back >= self.settings.room_after:
                self._taint(name, False)
                del self._room_since[name]
                self._queue(name)
            else:
                self._at(back + self.settings.room_after, name)

    def _taint(self, name: str, tainted: bool) -> None:
        if tainted:
            self.tainted.add(name)
        else:
            self.tainted.discard(name)
        self._count()

    def _count(self) -> None:
        if self._gauge is not None:
            self._gauge.set(len(self.tainted))

    def _at(self, when: float, name: str) -> None:
        heapq.heappush(self._due, (when, name))
        self._wake.set()

    def _queue(self, name: str) -> None:
        self._todo.add(name)
        self._wake.set()

    # -- writing (leader only) --------------------------------------------------------------------

    async def run(self) -> None:
        """Write what the Nodes should carry until cancelled."""
        backoff = Backoff(initial=1.0, maximum=60.0, rng=self.rng)
        while True:
            await self._wait()
            now = self.clock.monotonic()
            while self._due and self._due[0][0] <= now:
                self._judge(heapq.heappop(self._due)[1], now)
            todo, self._todo = self._todo, set()
            failed = False
            for n, name in enumerate(sorted(todo)):
                if n and n % EMIT_SLICE == 0:
                    await asyncio.sleep(0)
                try:
                    await self._write(name)
                except errors.KubeNotFound:
                    continue  # the Node went; its DELETED event forgets it
                except errors.KubeError as exc:
                    log.warning("node_write_failed", node=name, error=str(exc))
                    self._todo.add(name)
                    failed = True
            if failed:
                await self.clock.sleep(backoff.next_delay())
                self._wake.set()
            else:
                backoff.reset()

    async def _wait(self) -> None:
        """Until something is queued or the next hysteresis deadline."""
        if self._todo:
            return
        self._wake.clear()
        if not self._due:
            await self._wake.wait()
            return
        delay = max(0.0, self._due[0][0] - self.clock.monotonic())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):  # the loop's clock, which the injected one reads
                await self._wake.wait()

    async def _write(self, name: str) -> None:
        node = self._nodes.store.get(name)
        if node is None:
            return
        wanted = self._max_pods.get(name)
        if wanted is not None and node.max_pods != wanted:
            await self.limiter.acquire(OPERATION)
            await self.api.patch(NODES, name, {"metadata": {"annotations": {MAX_PODS_ANNOTATION: wanted}}})
            log.info("node_max_pods_set", node=name, max_pods=int(wanted))
        taint = name in self.tainted
        if taint != (NO_ROOM_TAINT in node.taints):
            await self.limiter.acquire(OPERATION)
            if await set_taint(self.api, name, NO_ROOM_TAINT, present=taint):
                log.warning("node_no_room_tainted" if taint else "node_no_room_untainted", node=name)
                if self._on_taint is not None:
                    self._on_taint(name, taint)
