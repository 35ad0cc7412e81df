"""Leader election on a coordination.k8s.io Lease, with client-go's rules, on the injected clock.

The rules (k8s.io/client-go/tools/leaderelection):

* A candidate tries to acquire every ``retry_period`` (jittered ×1.2). It may take the lease when
  nobody holds it, when it holds it already, or when the record has not changed for
  ``lease_duration`` *as observed locally* — the candidate times the record from when it last saw
  it change, on its own monotonic clock, so clock skew between machines does not matter.
* Writes are conditional on the record's resourceVersion: of two candidates, one wins and the
  other gets 409 and keeps waiting.
* The leader renews every ``retry_period``. If no renewal succeeds within ``renew_deadline``,
  leadership is lost: the ``on_lost`` callback runs at once (it closes the mutation fence) and
  the leader's work is cancelled. ``renew_deadline < lease_duration`` means the old leader has
  stopped before any candidate may take over.
* That switch is thrown by the renew loop, which a paused process (SIGSTOP, a frozen VM) does not
  run until after it resumes, while its other tasks may run first. So every successful attempt
  also reports a *term* through ``on_renewed``: the attempt's start plus the renew deadline, read
  on the fence's clock, which the fence checks at each request (:class:`~eni_ipam.core.fence.Fence`).
  The attempt's start is before the write lands and before any standby can see it, so the term
  ends at least ``lease_duration - renew_deadline`` before a standby may take over.

Departures from client-go, each shortening failover without weakening a rule: a candidate that
knows when the holder's lease runs out (as seen here) wakes then rather than at its next jittered
retry. Failover after a leader dies therefore takes at most ``lease_duration`` plus one
candidate's retry (``retry_period × 2.2``, the time to see the leader's last renewal) plus one
request: 19.4 s with the defaults (15 s, 2 s).
* On shutdown the leader releases the lease (empty holder, duration 1 s) so a standby takes over
  after its next retry instead of after a whole lease duration.

After losing the lease the elector becomes a candidate again; the work it runs when leading is
started afresh each time (the reconciler rebuilds its state from a resync).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import random
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.core.clock import Clock
from eni_ipam.errors import ConfigError
from eni_ipam.kube import errors
from eni_ipam.kube.api import LEASES, KubeApi, Obj

log = structlog.get_logger("eni_ipam.kube.lease")

RELEASE_TIMEOUT = 5.0
"""Seconds the release at shutdown may take: the pod's grace period must cover it."""
JITTER = 1.2
"""client-go's JitterFactor: candidates spread their attempts over [retry, retry × 2.2)."""
EXPIRY_MARGIN = 0.05
"""Seconds a candidate waking for a lease's expiry waits beyond it, so it does not find the lease
a hair short of expired and sleep a whole retry more."""


def micro_time(moment: datetime.datetime) -> str:
    """RFC 3339 with microseconds, as Kubernetes' MicroTime is written."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclasses.dataclass(frozen=True)
class LeaseRecord:
    holder: str
    lease_duration: int
    acquire_time: str
    renew_time: str
    transitions: int

    @classmethod
    def from_spec(cls, spec: dict[str, Any] | None) -> LeaseRecord:
        spec = spec or {}
        return cls(
            holder=spec.get("holderIdentity") or "",
            lease_duration=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime") or "",
            renew_time=spec.get("renewTime") or "",
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_duration,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }


class LeaderElector:
    def __init__(
        self,
        api: KubeApi,
        *,
        name: str,
        namespace: str,
        identity: str,
        clock: Clock,
        metrics: Metrics,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        release_on_cancel: bool = True,
        rng: random.Random | None = None,
        term_clock: Callable[[], float] | None = None,
    ) -> None:
        """``term_clock``: where a renewal's start is read for the term it grants (``on_renewed``);
        the mutation fence's own clock, so that both ends of a term are read on one timeline.
        Default: ``clock.monotonic``."""
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ConfigError("kubernetes", "need lease_duration > renew_deadline > retry_period > 0")
        self.api = api
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.clock = clock
        self.metrics = metrics
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.release_on_cancel = release_on_cancel
        """client-go's ReleaseOnCancel; tests turn it off to act out a crashed leader."""
        self.rng = rng or random.Random()
        self.term_clock = term_clock or clock.monotonic
        self.leading = False
        self.observed: LeaseRecord | None = None
        self._observed_at = float("-inf")
        self._version = ""
        self._on_renewed: Callable[[float], None] | None = None

    @property
    def observed_at(self) -> float:
        """When (on the clock's monotonic timeline) the lease record was last seen to change."""
        return self._observed_at

    @property
    def leader(self) -> str:
        """The holder as last observed ("" when none)."""
        return self.observed.holder if self.observed else ""

    async def run(
        self,
        lead: Callable[[], Coroutine[Any, Any, None]],
        *,
        on_lost: Callable[[], None],
        on_renewed: Callable[[float], None] | None = None,
    ) -> None:
        """Compete for the lease until cancelled; while leading, run ``lead()``.

        ``on_lost`` runs synchronously the moment leadership ends for any reason other than
        ``lead()`` finishing (renewal failed, or cancellation), before ``lead()`` is cancelled.
        ``on_renewed(until)`` runs after every successful acquisition or renewal (before
        ``lead()`` starts, for the first): leadership is proven until ``until`` on the term clock,
        the attempt's start plus ``renew_deadline`` (:meth:`~eni_ipam.core.fence.Fence.renewed`).
        On cancellation the lease is released if held. An exception from ``lead()`` propagates
        (after the release).
        """
        self._on_renewed = on_renewed
        try:
            while True:
                await self._acquire()
                if not await self._lead(lead, on_lost):
                    return  # lead() finished of its own accord: step down (the lease is released below)
        finally:
            if self.leading:
                self._set_leading(False)
                on_lost()
                if self.release_on_cancel:
                    await asyncio.shield(self._release())

    # -- phases -----------------------------------------------------------------------------------

    async def _acquire(self) -> None:
        while not await self._try_acquire_or_renew():
            await self.clock.sleep(self._next_attempt_in())
        self._set_leading(True)
        log.info("leader_elected", identity=self.identity, lease=f"{self.namespace}/{self.name}")

    async def _lead(self, lead: Callable[[], Coroutine[Any, Any, None]], on_lost: Callable[[], None]) -> bool:
        """Run ``lead()`` while renewing; True when leadership was lost, False when ``lead()`` ended."""
        async with asyncio.TaskGroup() as tg:
            work = tg.create_task(lead(), name="eni-ipam-leader-work")
            renewing = tg.create_task(self._renew_until_lost(), name="eni-ipam-lease-renew")
            done, _ = await asyncio.wait({work, renewing}, return_when=asyncio.FIRST_COMPLETED)
            if renewing in done:  # renewal failed: stop mutating now, then stop the work
                self._set_leading(False)
                on_lost()
                work.cancel()
                return True
            renewing.cancel()
        return False

    async def _renew_until_lost(self) -> None:
        """Renew every ``retry_period``; return when no renewal succeeded within ``renew_deadline``
        or another holder was seen."""
        while True:
            await self.clock.sleep(self.retry_period)
            deadline = self.clock.monotonic() + self.renew_deadline
            while True:
                remaining = deadline - self.clock.monotonic()
                if remaining <= 0:
                    log.warning("leader_lost", identity=self.identity, reason="renew deadline passed")
                    return
                try:
                    async with asyncio.timeout(remaining):
                        renewed = await self._try_acquire_or_renew()
                except TimeoutError:
                    renewed = False
                if renewed:
                    break
                if self.leader and self.leader != self.identity:
                    log.warning("leader_lost", identity=self.identity, reason=f"taken by {self.leader}")
                    return
                await self.clock.sleep(min(self.retry_period, max(deadline - self.clock.monotonic(), 0)))

    # -- one attempt --------------------------------------------------------------------------------

    def _next_attempt_in(self) -> float:
        """A candidate's wait: client-go's jittered retry, cut short to the moment the holder's
        lease runs out as seen here, when that comes first (a whole retry saved at failover)."""
        wait = self.retry_period * (1 + self.rng.random() * JITTER)
        if self.observed is not None and self.observed.holder:
            duration = self.observed.lease_duration or self.lease_duration
            expires_in = self._observed_at + duration - self.clock.monotonic()
            if expires_in > 0:  # once expired, a failed attempt (the API down) waits a whole retry
                wait = min(wait, expires_in + EXPIRY_MARGIN)
        return wait

    async def _try_acquire_or_renew(self) -> bool:
        started = self.term_clock()  # before the write: no standby can have seen it yet
        if await self._attempt():
            if self._on_renewed is not None:
                self._on_renewed(started + self.renew_deadline)
            return True
        return False

    async def _attempt(self) -> bool:
        now = micro_time(self.clock.now_utc())
        try:
            lease = await self.api.get(LEASES, self.name, namespace=self.namespace)
        except errors.KubeNotFound:
            record = LeaseRecord(self.identity, self._duration(), now, now, 0)
            try:
                created = await self.api.create(LEASES, self._body(record, version=""))
            except errors.KubeError as exc:
                log.info("lease_create_failed", error=str(exc))
                return False
            self._observe(record, created)
            return True
        except errors.KubeError as exc:
            log.info("lease_get_failed", error=str(exc))
            return False

        current = LeaseRecord.from_spec(lease.get("spec"))
        if self.observed != current:
            self._observe(current, lease)
        # The version of what was just read, even when only metadata changed (a label): an update
        # based on an older one would be refused for ever.
        self._version = str(lease.get("metadata", {}).get("resourceVersion", ""))
        mine = current.holder == self.identity
        # Expiry by the holder's own duration, as written in the record (client-go): during a
        # rollout that shortens it, the old leader keeps its longer term until it renews.
        duration = current.lease_duration or self.lease_duration
        if current.holder and not mine and self._observed_at + duration > self.clock.monotonic():
            return False  # held by another, and its lease has not run out as seen from here
        record = LeaseRecord(
            holder=self.identity,
            lease_duration=self._duration(),
            acquire_time=current.acquire_time if mine else now,
            renew_time=now,
            transitions=current.transitions if mine else current.transitions + 1,
        )
        try:
            updated = await self.api.replace(LEASES, self._body(record, version=self._version))
        except errors.KubeError as exc:  # 409: another candidate wrote first
            log.info("lease_update_failed", error=str(exc))
            return False
        self._observe(record, updated)
        return True

    async def _release(self) -> None:
        """Give the lease up (empty holder, 1 s), read fresh first: a renewal cancelled in flight may
        have landed without this process seeing its new resourceVersion."""
        if not self.observed or self.observed.holder != self.identity:
            return
        try:
            async with asyncio.timeout(RELEASE_TIMEOUT):
                lease = await self.api.get(LEASES, self.name, namespace=self.namespace)
                current = LeaseRecord.from_spec(lease.get("spec"))
                if current.holder != self.identity:
                    return  # someone else holds it already: nothing of ours to release
                now = micro_time(self.clock.now_utc())
                record = LeaseRecord("", 1, now, now, current.transitions)
                version = str(lease.get("metadata", {}).get("resourceVersion", ""))
                await self.api.replace(LEASES, self._body(record, version=version))
            log.info("lease_released", identity=self.identity)
        except (errors.KubeError, TimeoutError) as exc:  # the lease then expires on its own
            log.warning("lease_release_failed", error=str(exc) or type(exc).__name__)

    # -- helpers -------------------------------------------------------------------------------------

    def _duration(self) -> int:
        return max(int(self.lease_duration), 1)

    def _body(self, record: LeaseRecord, *, version: str) -> Obj:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if version:
            metadata["resourceVersion"] = version
        return {"metadata": metadata, "spec": record.to_spec()}

    def _observe(self, record: LeaseRecord, obj: Obj) -> None:
        self.observed = record
        self._observed_at = self.clock.monotonic()
        self._version = str(obj.get("metadata", {}).get("resourceVersion", ""))

    def _set_leading(self, leading: bool) -> None:
        self.leading = leading
        self.metrics.leader.set(1 if leading else 0)
