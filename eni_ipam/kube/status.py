"""Pool status writes: coalesced, batched, rate limited, with optimistic concurrency.

The manager publishes a node's status after every pass (``publish`` never blocks). Writes are
coalesced per node — only the latest status of a node is ever written — and flushed in batches
after a short window, each write spending a token of one bucket (``status_qps``/``status_burst``)
so a thousand nodes converging at start-up do not flood the API server.

Each write is a JSON merge patch of the controller's own status fields, conditional on the
resourceVersion it was computed from. On 409 the object is re-read and the patch recomputed
(the agent may have written ``used`` meanwhile; those fields are never in our patch), up to
``MAX_ATTEMPTS`` times; then the status is queued again for the next batch. A write that would
change nothing is not sent. A pool that is gone (404) is dropped; a write the server refuses
(422, 403) is logged and dropped; other failures are retried with the next batch, after a backoff.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import structlog

from eni_ipam._infra.metrics import Metrics
from eni_ipam.core.backoff import Backoff
from eni_ipam.core.clock import Clock
from eni_ipam.core.model import NodeStatus
from eni_ipam.core.ratelimit import Bucket, RateLimiter
from eni_ipam.kube import errors
from eni_ipam.kube.api import ENIPOOLS, KubeApi, Obj
from eni_ipam.kube.resources import status_patch

log = structlog.get_logger("eni_ipam.kube.status")

MAX_ATTEMPTS = 3
"""Conflicts retried at once per write; after that the status waits for the next batch."""
OPERATION = "status"


def _newer(a: Obj | None, b: Obj | None) -> Obj | None:
    """The more recent of two versions of one object (resourceVersions of one etcd are increasing
    integers; anything else falls back to ``b``, the one seen last)."""
    if a is None or b is None:
        return a or b
    va, vb = (str(o.get("metadata", {}).get("resourceVersion", "")) for o in (a, b))
    if va.isdigit() and vb.isdigit():
        return a if int(va) > int(vb) else b
    return b


class StatusWriter:
    def __init__(
        self,
        api: KubeApi,
        *,
        lookup: Callable[[str], Obj | None],
        clock: Clock,
        metrics: Metrics,
        qps: float = 10.0,
        burst: int = 50,
        batch_window: float = 0.2,
    ) -> None:
        """Args:
        lookup: the ENIPool as last seen by the informer (None when there is none).
        batch_window: seconds changes gather before a batch is written.
        """
        self.api = api
        self.lookup = lookup
        self.clock = clock
        self.metrics = metrics
        self.batch_window = batch_window
        self.limiter = RateLimiter({OPERATION: Bucket(burst=float(burst), refill=qps)}, clock=clock)
        self.pending: dict[str, NodeStatus] = {}
        self._written: dict[str, Obj] = {}
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()  # one batch at a time (the shutdown flush races the loop's)
        self._failed_batch = False
        self.backoff = Backoff(initial=1.0, maximum=60.0, rng=random.Random())

    # StatusSink
    def publish(self, name: str, status: NodeStatus) -> None:
        self.pending[name] = status
        self._wake.set()

    def reset(self) -> None:
        """Drop everything queued and cached (leadership ended: the next term starts clean)."""
        self.pending.clear()
        self._written.clear()

    def forget(self, name: str) -> None:
        """The pool is gone: drop what was queued for it."""
        self.pending.pop(name, None)
        self._written.pop(name, None)

    async def run(self) -> None:
        """Write batches until cancelled; after a batch with failures, back off before the next."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self.clock.sleep(self.batch_window)
            if await self.flush():
                self.backoff.reset()
            else:
                await self.clock.sleep(self.backoff.next_delay())

    async def flush(self) -> bool:
        """Write everything queued now; False when some write failed (it is queued again)."""
        async with self._lock:
            self._failed_batch = False
            batch, self.pending = self.pending, {}
            for name, status in batch.items():
                if name in self.pending:
                    continue  # a newer status arrived while this batch ran; it goes in the next one
                await self.limiter.acquire(OPERATION)
                await self._write(name, status)
            return not self._failed_batch

    async def _write(self, name: str, status: NodeStatus) -> None:
        current = _newer(self._written.get(name), self.lookup(name))
        for _ in range(MAX_ATTEMPTS):
            if current is None:
                return  # the pool is gone
            patch = status_patch(status, current, now=self.clock.now_utc())
            if patch is None:
                return
            try:
                self._written[name] = await self.api.patch(ENIPOOLS, name, patch, status=True)
            except errors.KubeConflict:
                self.metrics.status_writes.labels(outcome="conflict").inc()
                try:
                    current = await self.api.get(ENIPOOLS, name, status=True)
                except errors.KubeNotFound:
                    return
                except errors.KubeError as exc:
                    self._failed(name, status, exc)
                    return
                continue
            except errors.KubeNotFound:
                self.forget(name)
                return
            except (errors.KubeInvalid, errors.KubeForbidden) as exc:
                # Retrying the same write cannot help (an old CRD schema, missing RBAC): say so, drop it.
                self.metrics.status_writes.labels(outcome="failed").inc()
                log.error("status_write_refused", node=name, error=str(exc))
                return
            except errors.KubeError as exc:
                self._failed(name, status, exc)
                return
            self.metrics.status_writes.labels(outcome="ok").inc()
            return
        self._failed(name, status, None)

    def _failed(self, name: str, status: NodeStatus, exc: errors.KubeError | None) -> None:
        self.metrics.status_writes.labels(outcome="failed").inc()
        log.warning("status_write_failed", node=name, error=str(exc) if exc else "conflicts persisted")
        self.pending.setdefault(name, status)  # try again with the next batch (unless newer is queued)
        self._failed_batch = True
        self._wake.set()
