"""The demo's live view as README.md shows it: ``make plots`` (``python -m tests.demo_screen``)
runs the demo's cluster, workload included, for half a virtual minute and writes its last frame,
as text, between the README's ``demo-screen`` markers. The tests check the README's copy has the
view's shape; this module is what makes it, so the picture is the view's and not drawn by hand."""

from __future__ import annotations

import asyncio
import io
import logging
import sys
from pathlib import Path

import structlog
from rich.console import Console

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.app.demo import running
from eni_ipam.app.view import Frame, Watcher, screen
from eni_ipam.core.clock import LoopClock
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
        async with running(nodes=nodes, seed=seed, clock=clock, metrics=metrics) as demo:
            watcher = Watcher(lambda: demo.manager, metrics, clock=clock, title="eni-ipam demo")
            with watcher.diverting():
                last = watcher.sample()
                for n in range(seconds):
                    await asyncio.sleep(1)
                    if n == seconds // 3:
                        demo.side.update("node-007", used=60)
                    last = watcher.sample()
            return last

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
