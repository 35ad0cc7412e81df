"""Tests of the domain core; :func:`manager_running` runs a manager alone for a test's block."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from eni_ipam.core.manager import NodeManager


@contextlib.asynccontextmanager
async def manager_running(manager: NodeManager, **run: Any) -> AsyncIterator[None]:
    """``manager.run(**run)`` for the block, cancelled and awaited after it."""
    task = asyncio.create_task(manager.run(**run))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
