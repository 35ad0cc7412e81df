"""Client-side token buckets, one per API operation.

EC2 throttles per account and region with one token bucket per API (burst, then a refill rate per
second). Spending our own tokens first means the cloud's buckets are never the ones that say no,
so ``RequestLimitExceeded`` becomes rare instead of routine. Buckets run on ``aiolimiter``, which
reads the event loop's clock: under a virtual clock, waits cost no real time.

``share`` scales every bucket when several controllers (other clusters, Karpenter, Terraform) spend
the same account's budget: a share of 0.5 keeps half of each bucket for them.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from heapq import heappop

from aiolimiter import AsyncLimiter


@dataclasses.dataclass(frozen=True, slots=True)
class Bucket:
    burst: float
    """Tokens the bucket holds when full."""
    refill: float
    """Tokens added per second."""

    def scaled(self, share: float) -> Bucket:
        return Bucket(burst=max(self.burst * share, 1.0), refill=max(self.refill * share, 1e-6))


# EC2's published request buckets for the operations eni-ipam calls (Amazon EC2 API reference,
# "Request throttling"). Describe calls are always filtered or paginated, which puts them in the
# 100 / 20 non-mutating category rather than the 50 / 10 unfiltered one.
EC2_BUCKETS: Mapping[str, Bucket] = {
    "AssignPrivateIpAddresses": Bucket(100, 5),
    "UnassignPrivateIpAddresses": Bucket(100, 5),
    "CreateNetworkInterface": Bucket(100, 5),
    "DeleteNetworkInterface": Bucket(100, 5),
    "ModifyNetworkInterfaceAttribute": Bucket(100, 5),
    "AttachNetworkInterface": Bucket(50, 5),
    "DetachNetworkInterface": Bucket(50, 5),
    "CreateTags": Bucket(100, 10),
    "DescribeNetworkInterfaces": Bucket(100, 20),
    "DescribeInstances": Bucket(100, 20),
    "DescribeSubnets": Bucket(100, 20),
    "DescribeVpcs": Bucket(100, 20),
    "DescribeSecurityGroups": Bucket(100, 20),
    "DescribeInstanceTypes": Bucket(100, 20),
}

DEFAULT_BUCKET = Bucket(50, 5)
"""EC2's generic mutating bucket: the safe guess for an operation not in the table."""


MIN_WAKE = 1e-6
"""Shortest wait for tokens, in seconds (see :class:`_Bucket`)."""


class _Bucket(AsyncLimiter):
    """aiolimiter's leaky bucket whose wake-up always lies in the future.

    aiolimiter schedules its next wake-up at ``last_check + needed / rate``. Float rounding can
    leave ``needed`` a hair above zero, which puts that moment on "now". Real time moves on by
    itself, so the next check succeeds. A virtual clock (the simulator's loop, looptime) only moves
    when the loop idles, and a timer that is always due keeps it busy: the bucket never drains and
    every waiter hangs. Waiting at least :data:`MIN_WAKE` lets the clock move.
    This is aiolimiter 1.3's ``_wake_next`` with that one change.
    """

    def _wake_next(self, *_args: object) -> None:
        heap, handle, self._waker_handle = self._waiters, self._waker_handle, None
        if handle is not None:
            handle.cancel()
        while heap and heap[0][-1].done():
            heappop(heap)
        if not heap:
            return
        amount, _, fut = heap[0]
        self._leak()
        needed = amount - self.max_rate + self._level
        if needed <= 0:
            heappop(heap)
            fut.set_result(None)  # its done-callback calls _wake_next for the next waiter
            return
        wake_at = self._last_check + max(needed / self._rate_per_sec, MIN_WAKE)
        self._waker_handle = self._loop.call_at(wake_at, self._wake_next)


class RateLimiter:
    """Per-operation token buckets. ``await limiter.acquire(op)`` returns the seconds it waited."""

    def __init__(
        self,
        buckets: Mapping[str, Bucket] = EC2_BUCKETS,
        *,
        default: Bucket = DEFAULT_BUCKET,
        share: float = 1.0,
    ) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {share}")
        self._buckets = {op: b.scaled(share) for op, b in buckets.items()}
        self._default = default.scaled(share)
        self._limiters: dict[str, AsyncLimiter] = {}

    def bucket(self, operation: str) -> Bucket:
        return self._buckets.get(operation, self._default)

    async def acquire(self, operation: str) -> float:
        limiter = self._limiters.get(operation)
        if limiter is None:
            b = self.bucket(operation)
            # aiolimiter's leaky bucket: capacity max_rate, drained at max_rate / time_period per second.
            limiter = self._limiters[operation] = _Bucket(b.burst, b.burst / b.refill)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await limiter.acquire()
        return loop.time() - started
