"""An asyncio event loop on virtual time, for the simulator.

When the loop would sleep until its next timer, it jumps its clock there instead: a simulated hour
of reconciling takes milliseconds. Real I/O still works — the selector is polled without blocking
first — so only idle waiting is skipped. Everything that reads ``loop.time()`` (the injected
:class:`~eni_ipam.core.clock.LoopClock`, the rate limiter, ``asyncio.sleep``) sees the virtual clock.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any


class _VirtualSelector:
    def __init__(self, real: selectors.BaseSelector, loop: VirtualTimeLoop) -> None:
        self._real = real
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = self._real.select(0)
        if events or timeout == 0:
            return events
        if timeout is None:
            return self._real.select(None)  # nothing scheduled: only real I/O can wake us
        self._loop.advance(timeout)
        return []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self, start: float = 0.0) -> None:
        super().__init__()
        self._virtual_now = start
        real: Any = self._selector  # type: ignore[has-type]
        self._selector = _VirtualSelector(real, self)

    def time(self) -> float:
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        self._virtual_now += max(seconds, 0.0)


def run_virtual(coro: Any) -> Any:
    """Run ``coro`` to completion on a fresh virtual-time loop."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()
