"""The demo's live view as README.md shows it: ``make plots`` (``python -m tests.demo_screen``)
runs the demo's cluster, workload included, for half a virtual minute and writes its last frame,
as text, between the README's ``demo-screen`` markers. The tests check the README's copy has the
view's shape; this module is what makes it, so the picture is the view's and not drawn by hand."""

from __future__ import annotations

import asyncio
import io
import logging
import random
import sys
from pathlib import Path

import structlog
from rich.console import Console

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.app.demo import build, local_cluster, workload
from eni_ipam.app.view import Frame, Watcher, screen
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.settings import Settings
from eni_ipam.simulator.simloop import run_virtual

README = Path(__file__).resolve().parent.parent / "README.md"
START, END = "<!-- demo-screen: make plots -->", "<!-- /demo-screen -->"
WIDTH, HEIGHT = 100, 30


def frame(*, nodes: int = 50, seed: int = 1, seconds: int = 30) -> Frame:
    """The view's frame after ``seconds`` of the demo on virtual time (a node's pods asking more
    than its instance holds, so a reason shows)."""

    async def main() -> Frame:
        clock = LoopClock(measure_cpu=False)
        metrics = Metrics(process=False)
        settings = Settings(release_excess_ips=True, excess_ip_release_delay=20.0, resync_interval=30.0)
        cloud, specs = build(nodes, seed, clock, metrics=metrics)
        provider = cloud.provider
        manager, store, side = local_cluster(
            provider, settings, specs, metrics=metrics, clock=clock, seed=seed
        )
        watcher = Watcher(lambda: manager, metrics, clock=clock, title="eni-ipam demo")
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(manager.run()),
            asyncio.create_task(workload(side, store, random.Random(seed + 1), stop)),
        ]
        try:
            with watcher.diverting():
                last = watcher.sample()
                for n in range(seconds):
                    await asyncio.sleep(1)
                    if n == seconds // 3:
                        side.update("node-007", used=60)
                    last = watcher.sample()
            return last
        finally:
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    result: Frame = run_virtual(main())
    return result


def text(shown: Frame, width: int = WIDTH, height: int = HEIGHT) -> str:
    console = Console(file=io.StringIO(), width=width, height=height, record=True, force_terminal=True)
    console.print(screen(shown, width, height))
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())


def block(readme: str) -> str:
    """The README's copy of the screen (between the markers, without the code fence)."""
    inside = readme.split(START, 1)[1].split(END, 1)[0]
    return inside.strip("\n").removeprefix("```text\n").removesuffix("\n```")


def main() -> int:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    readme = README.read_text()
    head, rest = readme.split(START, 1)
    tail = rest.split(END, 1)[1]
    README.write_text(f"{head}{START}\n```text\n{text(frame())}\n```\n{END}{tail}")
    print(f"demo screen written to {README}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
