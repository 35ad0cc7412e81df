"""Client-side token buckets, one per API operation.

EC2 throttles per account and region with one token bucket per API (burst, then a refill rate per
second). Spending our own tokens first means the cloud's buckets are never the ones that say no,
so ``RequestLimitExceeded`` becomes rare instead of routine.

A :class:`TokenBucket` reads time from the injected :class:`~eni_ipam.core.clock.Clock` and waits
through it, so under a virtual clock waits cost no real time. Its invariants:

* it starts full (``burst`` tokens) and refills ``refill`` tokens per second, never above ``burst``;
  so by any time ``T`` after its first use it has granted at most ``burst + refill * T`` tokens;
* waiters are served first come, first served; an arrival never overtakes a waiter;
* a token is taken only at the moment it is granted, so a cancelled waiter spends none, and it
  hands its turn on to the waiter behind it;
* a wait for a missing token is never shorter than :data:`MIN_WAIT`: a wait that float rounding
  put on "now" would keep a virtual clock, which only moves when the loop idles, from ever moving.

``share`` scales every bucket when several controllers (other clusters, Karpenter, Terraform) spend
the same account's budget: a share of 0.5 keeps half of each bucket for them.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Mapping

from eni_ipam.core.clock import Clock, LoopClock


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
    "AssignIpv6Addresses": Bucket(100, 5),
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


MIN_WAIT = 1e-6
"""Shortest wait for a missing token, in seconds: one tick of a microsecond virtual clock."""


class TokenBucket:
    """One token bucket on an injected clock, with a first-come first-served queue of waiters.

    Only the waiter at the head of the queue watches the clock: it sleeps until its token is due,
    takes it and wakes the next. The others wait for their turn without timers, so a thousand
    waiters cost one timer, not a thousand.
    """

    def __init__(self, bucket: Bucket, clock: Clock) -> None:
        if bucket.burst < 1 or bucket.refill <= 0:
            raise ValueError(f"a bucket needs burst >= 1 and refill > 0, got {bucket}")
        self.burst = float(bucket.burst)
        self.refill = float(bucket.refill)
        self._clock = clock
        self._tokens = self.burst
        self._last: float | None = None  # the clock is first read on first use (it may need a loop)
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def tokens(self) -> float:
        """Tokens in the bucket now (fractional while it refills)."""
        self._refill()
        return self._tokens

    async def acquire(self) -> None:
        """Take one token, waiting behind earlier callers until one is there."""
        if not self._waiters:
            self._refill()
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return
        turn = asyncio.get_running_loop().create_future()
        self._waiters.append(turn)
        try:
            if self._waiters[0] is not turn:
                await turn  # resolved when every earlier waiter has its token or has left
            while True:
                self._refill()
                if self._tokens >= 1.0:
                    self._tokens -= 1.0
                    return
                await self._clock.sleep(max((1.0 - self._tokens) / self.refill, MIN_WAIT))
        finally:
            # Taking the token and leaving the queue happen with no await between them, so a
            # cancellation either finds the token not taken or the waiter already served.
            if self._waiters and self._waiters[0] is turn:
                self._pass_turn()
            elif not turn.done():
                turn.cancel()  # a waiter that left before its turn: skipped when the turn comes

    def _pass_turn(self) -> None:
        """Hand the head of the queue to the next waiter still waiting.

        Invariant: the head of the queue is a waiter still waiting whose turn has come (or who found
        the queue empty); those behind it wait for their turn or have left (their futures are done).
        """
        waiters = self._waiters
        waiters.popleft()
        while waiters and waiters[0].done():
            waiters.popleft()
        if waiters:
            waiters[0].set_result(None)

    def _refill(self) -> None:
        now = self._clock.monotonic()
        if self._last is None:
            self._last = now
        elif now > self._last:  # a clock that steps back refills nothing and takes nothing back
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.refill)
            self._last = now


class RateLimiter:
    """Per-operation token buckets. ``await limiter.acquire(op)`` returns the seconds it waited.

    Buckets are made on an operation's first call; ``clock`` (the running loop's by default) is the
    timeline every bucket refills and waits on.
    """

    def __init__(
        self,
        buckets: Mapping[str, Bucket] = EC2_BUCKETS,
        *,
        default: Bucket = DEFAULT_BUCKET,
        share: float = 1.0,
        clock: Clock | None = None,
    ) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {share}")
        self._buckets = {op: b.scaled(share) for op, b in buckets.items()}
        self._default = default.scaled(share)
        self._clock: Clock = clock if clock is not None else LoopClock()
        self._live: dict[str, TokenBucket] = {}

    def bucket(self, operation: str) -> Bucket:
        return self._buckets.get(operation, self._default)

    async def acquire(self, operation: str) -> float:
        live = self._live.get(operation)
        if live is None:
            live = self._live[operation] = TokenBucket(self.bucket(operation), self._clock)
        started = self._clock.monotonic()
        await live.acquire()
        return self._clock.monotonic() - started
