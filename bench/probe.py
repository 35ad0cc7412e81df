"""Measuring a running event loop from inside: stalls, CPU and memory, by phase.

:class:`LoopProbe` is a task that sleeps ``tick`` seconds over and over and records how late each wake
came: the lateness is the longest the loop could not run anything (a stall), measured, not reasoned
about. Stalls are kept with their time, so a phase's worst stall is read afterwards
(:meth:`LoopProbe.worst`). :func:`rss_mb`, :func:`peak_rss_mb` and :func:`cpu_seconds` read the
process's own figures from the kernel.
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import resource
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, suppress


def rss_mb() -> float:
    """Resident set size now (Linux ``/proc/self/status``, VmRSS)."""
    return _status_kb("VmRSS") / 1024


def peak_rss_mb() -> float:
    """The largest resident set so far (VmHWM)."""
    return _status_kb("VmHWM") / 1024


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def cpu_seconds() -> float:
    """CPU seconds this process used, every thread included (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class LoopProbe:
    """A task measuring how late the loop wakes it (see the module docstring). It also times the
    garbage collector's passes, which stop every thread: a stall is then told from a long pause."""

    def __init__(self, tick: float = 0.001, *, explain_over: float = 0.08) -> None:
        self.tick = tick
        self.explain_over = explain_over
        """A watchdog thread notes where the loop's thread is once it has not woken the probe for
        this long: a stall's figure comes with the code that caused it."""
        self.explained: list[tuple[float, str]] = []
        self._beat = time.perf_counter()
        self._loop_thread = threading.get_ident()
        self._watching = threading.Event()
        self._times: list[float] = []
        self._lates: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self.gc_pauses: list[tuple[int, float]] = []
        """(generation, seconds) of every collection of the oldest generation, and any other over 10 ms."""
        self._gc_started = 0.0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="bench-loop-probe")
        gc.callbacks.append(self._on_gc)
        self._loop_thread = threading.get_ident()
        self._watching.set()
        threading.Thread(target=self._watch, name="bench-stall-watchdog", daemon=True).start()

    def _watch(self) -> None:
        noted = 0.0
        while self._watching.is_set():
            time.sleep(0.01)
            beat = self._beat
            if time.perf_counter() - beat > self.explain_over and beat != noted:
                noted = beat
                frame = sys._current_frames().get(self._loop_thread)
                if frame is not None:
                    stack = traceback.extract_stack(frame)[-8:]
                    where = " < ".join(
                        f"{f.name} ({f.filename.rsplit('/', 1)[-1]}:{f.lineno})" for f in reversed(stack)
                    )
                    self.explained.append((beat, where))

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        seconds = time.perf_counter() - self._gc_started
        if info["generation"] == 2 or seconds > 0.01:
            self.gc_pauses.append((info["generation"], seconds))

    async def stop(self) -> None:
        self._watching.clear()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(self.tick)
            woke = self._beat = time.perf_counter()
            late = woke - before - self.tick
            if late > 0.005:  # keep only what matters: most wakes are on time
                self._times.append(woke)
                self._lates.append(late)

    def explain(self, since: float) -> list[tuple[float, str]]:
        """Where the loop's thread was during each stall the watchdog saw since ``since``: (seconds
        after ``since`` the stall began, the innermost frames)."""
        return [(t - since, where) for t, where in self.explained if t >= since]

    def stalls(self, since: float, *, over: float) -> list[tuple[float, float]]:
        """Every stall longer than ``over`` since ``since``: (seconds after ``since``, its length)."""
        return [
            (t - since, late)
            for t, late in zip(self._times, self._lates, strict=True)
            if t >= since and late > over
        ]

    def worst(self, since: float, until: float | None = None) -> float:
        """The longest stall (seconds) whose end fell in ``[since, until]`` (perf_counter times)."""
        lo = bisect.bisect_left(self._times, since)
        hi = bisect.bisect_right(self._times, until if until is not None else float("inf"))
        return max(self._lates[lo:hi], default=0.0)


class Phase:
    """Wall time, CPU time and the worst loop stall of one stretch of a run."""

    def __init__(self, probe: LoopProbe | None) -> None:
        self.probe = probe
        self.started = self.ended = 0.0
        self.cpu_started = self.cpu = 0.0

    @property
    def wall(self) -> float:
        return self.ended - self.started

    @property
    def stall(self) -> float:
        return self.probe.worst(self.started, self.ended) if self.probe else 0.0


@contextmanager
def phase(probe: LoopProbe | None = None) -> Iterator[Phase]:
    """Time the block: wall, process CPU, and (with a probe) the worst stall that ended in it."""
    measured = Phase(probe)
    measured.started, measured.cpu_started = time.perf_counter(), cpu_seconds()
    try:
        yield measured
    finally:
        measured.ended = time.perf_counter()
        measured.cpu = cpu_seconds() - measured.cpu_started
