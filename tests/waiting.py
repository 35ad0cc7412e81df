"""Waiting in tests: poll a condition on the event loop's clock (real or looptime's virtual one)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(check: Callable[[], object], limit: float = 10.0, *, poll: float = 0.01) -> None:
    """Return once ``check()`` is true; TimeoutError after ``limit`` seconds."""
    async with asyncio.timeout(limit):
        while not check():
            await asyncio.sleep(poll)
