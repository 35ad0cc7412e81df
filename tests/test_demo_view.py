"""The demo's screens: today's plain lines stay as they were; the live view is checked on a virtual
console of a fixed size (its rows, its reasons, that it fits)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eni_ipam._infra.metrics import Metrics
from eni_ipam.app.demo import build, local_cluster, render
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.settings import Settings
from eni_ipam.simulator.simloop import run_virtual
from providers.sim.provider import SimProvider

GOLDEN = Path(__file__).resolve().parent / "golden"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _settled(nodes: int, seed: int, seconds: float, look: Callable[..., Any]) -> Any:
    """The demo's cluster after ``seconds`` of virtual time (no workload), given to ``look``."""

    async def main() -> Any:
        clock = LoopClock(measure_cpu=False)
        metrics = Metrics(process=False)
        cloud, specs = build(nodes, seed, clock)
        provider = SimProvider(cloud, clock=clock, metrics=metrics)
        manager, _, side = local_cluster(provider, Settings(), specs, metrics=metrics, clock=clock, seed=seed)
        task = asyncio.create_task(manager.run())
        try:
            await asyncio.sleep(seconds)
            return look(manager=manager, cloud=cloud, metrics=metrics, side=side)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    return run_virtual(main())


def test_plain_lines_are_unchanged_on_a_terminal_and_off_it() -> None:
    def plain(*, manager: Any, cloud: Any, **_: Any) -> tuple[str, str]:
        lines, screen = io.StringIO(), _Terminal()
        render(manager, cloud.calls, 30.0, lines)
        render(manager, cloud.calls, 30.0, screen)
        return lines.getvalue(), screen.getvalue()

    lines, screen = _settled(30, 3, 30.0, plain)
    assert lines == (GOLDEN / "demo_plain_lines.txt").read_text()
    assert screen == (GOLDEN / "demo_plain_screen.txt").read_text()
