"""A loaded host for the benchmarks that time a process start: CPU-bound loops, switched on and off
between measurements so that idle and loaded figures are taken interleaved, in one run.

Each loop runs in a session of its own, as the host's other work runs in services (cgroups) of its
own: with the kernel's per-session scheduling groups (autogroup) or per-service cgroups, a loop
started from the benchmark's own session would compete only with the benchmark's other children,
and leave the measured process alone.

* :func:`other_cores` — every core but one busy: the loaded host of docs/PERFORMANCE.md.
* :func:`per_core` — ``n`` loops a core: a busy node, where the measured process gets a share of
  the CPU among them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

LOOP = "while True: pass"


def other_cores() -> int:
    """Loops that keep every core but one busy (one, on a single core)."""
    return max(1, (os.cpu_count() or 1) - 1)


def per_core(n: int) -> int:
    return n * (os.cpu_count() or 1)


class Load:
    """``count`` CPU-bound loops, stopped until :meth:`on`."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._loops: list[subprocess.Popen[bytes]] = []
        self._running = False

    def start(self) -> None:
        for _ in range(self.count):
            loop = subprocess.Popen([sys.executable, "-c", LOOP], start_new_session=True)
            os.kill(loop.pid, signal.SIGSTOP)
            self._loops.append(loop)

    def on(self) -> None:
        self._signal(signal.SIGCONT)
        self._running = True

    def off(self) -> None:
        if self._running:
            self._signal(signal.SIGSTOP)
            self._running = False

    def stop(self) -> None:
        for loop in self._loops:
            loop.kill()
            loop.wait(10)
        self._loops.clear()

    def _signal(self, sig: signal.Signals) -> None:
        for loop in self._loops:
            with contextlib.suppress(ProcessLookupError):
                os.kill(loop.pid, sig)


@contextlib.contextmanager
def loops(count: int, *, running: bool = False) -> Iterator[Load]:
    """:class:`Load` of ``count`` loops for the block (running from the start if ``running``); killed
    on every way out."""
    load = Load(count)
    try:
        load.start()
        if running:
            load.on()
        yield load
    finally:
        load.stop()
