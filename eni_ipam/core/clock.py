"""Injected time: the only module that may read the OS clock.

The core asks a :class:`Clock` for time and sleeps through it, so tests and the simulator can run
on a virtual clock (the event loop's time under ``looptime`` or the simulator's virtual loop) and
finish in milliseconds. :class:`LoopClock`, the production clock, reads the running event loop's
monotonic time. The rate limiter's token buckets read and wait on the same injected clock, so rate
limiting and everything else agree on one timeline.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable
from typing import Protocol


class Handle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Where the core reads time and waits."""

    def monotonic(self) -> float:
        """Seconds on a monotonic timeline (only differences are meaningful)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on this clock's timeline."""
        ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Handle:
        """Run ``callback`` (synchronously, on the event loop) after ``delay`` seconds."""
        ...

    def now_utc(self) -> datetime.datetime:
        """Wall-clock time, for timestamps shown to people and written to resources only."""
        ...

    def cpu_seconds(self) -> float:
        """CPU seconds this process has used (only differences are meaningful), for spending no more
        than a share of a core on periodic work. A virtual clock answers a constant: nothing adapts."""
        ...


class LoopClock:
    """The running event loop's clock; wall time from the OS only for display timestamps.

    ``measure_cpu=False`` (the simulator, the soaks: virtual time) makes :meth:`cpu_seconds`
    constant, so what adapts to CPU cost stays deterministic there."""

    def __init__(self, *, measure_cpu: bool = True) -> None:
        self._measure_cpu = measure_cpu

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))

    def call_later(self, delay: float, callback: Callable[[], None]) -> Handle:
        return asyncio.get_running_loop().call_later(max(delay, 0.0), callback)

    def now_utc(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.UTC)

    def cpu_seconds(self) -> float:
        return time.process_time() if self._measure_cpu else 0.0


_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


def suspend_aware_seconds() -> float:
    """Seconds on a monotonic timeline that also counts time the machine was suspended
    (``CLOCK_BOOTTIME`` on Linux; ``time.monotonic()`` elsewhere). ``CLOCK_MONOTONIC`` — the event
    loop's clock — already counts a stopped process and a stalled loop, but not a suspended VM: a
    leadership term (:class:`~eni_ipam.core.fence.Fence`) must count all three."""
    if _BOOTTIME is not None:
        return time.clock_gettime(_BOOTTIME)
    return time.monotonic()  # noqa: TID251 -- this module is where the OS clock is read
