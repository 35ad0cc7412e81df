"""The demo's live view as README.md shows it: ``make plots`` (``python -m tests.demo_screen``)
runs the demo's cluster, workload included, for half a virtual minute and writes its last frame:
as text at 100 × 30 between the README's ``demo-screen`` markers, and at 80 × 24, 120 × 40 and
200 × 60 as ``docs/img/view-WxH.svg`` (rich's SVG export, a fixed title and id, so the same frame
gives the same bytes) and ``docs/img/view-WxH.txt`` (the same screen as text). The tests check the
committed copies are what this module draws now; it is what makes them, so the pictures are the
view's and not drawn by hand."""

from __future__ import annotations

import asyncio
import io
import logging
import sys
from importlib.metadata import version
from pathlib import Path

import structlog
from rich.console import Console

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.app.demo import running
from eni_ipam.app.view import Frame, Watcher, screen
from eni_ipam.core.clock import LoopClock
from eni_ipam.simulator.simloop import run_virtual

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
IMAGES = ROOT / "docs" / "img"
START, END = "<!-- demo-screen: make plots -->", "<!-- /demo-screen -->"
WIDTH, HEIGHT = 100, 30
SIZES = ((80, 24), (120, 40), (200, 60))
"""The terminal sizes docs/img shows the view at: the smallest it is made for, a common one, a large one."""


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


def _console(shown: Frame, width: int, height: int, *, pad: bool = False) -> Console:
    """A recording console of ``width`` × ``height`` with the frame drawn on it (``pad``: and blank
    lines down to its last line, as the terminal shows it)."""
    console = Console(
        file=io.StringIO(), width=width, height=height, record=True, force_terminal=True,
        color_system="truecolor", legacy_windows=False, _environ={},
    )  # fmt: skip
    drawn = screen(shown, width, height)
    console.print(drawn)
    if pad:
        console.print("\n" * max(height - len(drawn.renderables) - 1, 0), end="")
    return console


def text(shown: Frame, width: int = WIDTH, height: int = HEIGHT) -> str:
    console = _console(shown, width, height)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())


def svg(shown: Frame, width: int, height: int) -> str:
    """The frame as a terminal of ``width`` × ``height`` shows it, as an SVG: the same bytes for the
    same frame and the same rich (which the first line names)."""
    console = _console(shown, width, height, pad=True)
    drawn = console.export_svg(
        title=f"eni-ipam demo at {width} × {height}", unique_id=f"view-{width}x{height}"
    )
    return f"<!-- make plots (tests/demo_screen.py), rich {version('rich')} -->\n{drawn}"


def image(width: int, height: int, suffix: str) -> Path:
    """Where docs/img keeps the view at ``width`` × ``height`` (``.svg``, ``.txt``)."""
    return IMAGES / f"view-{width}x{height}{suffix}"


def pictures(shown: Frame) -> dict[Path, str]:
    """Every file ``make plots`` writes from the frame, with its text."""
    out = {}
    for width, height in SIZES:
        out[image(width, height, ".txt")] = text(shown, width, height) + "\n"
        out[image(width, height, ".svg")] = svg(shown, width, height)
    return out


def block(readme: str) -> str:
    """The README's copy of the screen (between the markers, without the code fence)."""
    inside = readme.split(START, 1)[1].split(END, 1)[0]
    return inside.strip("\n").removeprefix("```text\n").removesuffix("\n```")


def readme(shown: Frame, current: str) -> str:
    """``current`` (the README's text) with the frame's copy between the markers."""
    head, rest = current.split(START, 1)
    tail = rest.split(END, 1)[1]
    return f"{head}{START}\n```text\n{text(shown)}\n```\n{END}{tail}"


def main() -> int:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    shown = frame()
    README.write_text(readme(shown, README.read_text()))
    print(f"demo screen written to {README}", file=sys.stderr)
    for path, content in pictures(shown).items():
        path.write_text(content)
        print(f"live view written to {path.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
