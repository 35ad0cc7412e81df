"""How a long-running process of the project (the controller, the node agent, the demo) learns to stop.

Role: SIGINT and SIGTERM set one event that the process's task group watches; shutdown is then the
process's own orderly path (drain, write the last state, release the Lease), never an interrupt in
the middle of a cloud call.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM (where the loop supports signal handlers)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return stop
