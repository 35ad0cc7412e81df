"""The demo's screens: today's plain lines stay as they were; the live view is checked on a virtual
console of a fixed size (its rows, its reasons, that it fits)."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import re
import socket
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import structlog
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

import eni_ipam.app.demo as demo_module
from eni_ipam.adapters.logging import configure, diverted
from eni_ipam.adapters.metrics import Metrics
from eni_ipam.app.demo import _demo, build, local_cluster, render
from eni_ipam.app.view import Frame, NodeRow, SubnetGauge, Watcher, screen
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.settings import Settings
from eni_ipam.simulator.simloop import run_virtual

GOLDEN = Path(__file__).resolve().parent / "golden"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _settled(nodes: int, seed: int, seconds: float, look: Callable[..., Any]) -> Any:
    """The demo's cluster after ``seconds`` of virtual time (no workload), given to ``look``."""

    async def main() -> Any:
        clock = LoopClock(measure_cpu=False)
        metrics = Metrics(process=False)
        cloud, specs = build(nodes, seed, clock, metrics=metrics)
        provider = cloud.provider
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


# -- the live view -------------------------------------------------------------------------------


def _row(name: str, *, needed: int = 0, reason: str = "", used: int = 4, available: int = 8) -> NodeRow:
    return NodeRow(
        name=name,
        instance_type="m5.large",
        available=available,
        used=used,
        needed=needed,
        excess=0,
        capacity=27,
        interfaces=1,
        reason=reason,
    )


def _frame(rows: tuple[NodeRow, ...], **more: Any) -> Frame:
    return Frame(title="eni-ipam demo", elapsed=12.0, ready=True, leader=True, nodes=rows, **more)


def _draw(frame: Frame, width: int, height: int) -> list[str]:
    """The frame on a virtual terminal of ``width`` × ``height``: its lines as a person sees them."""
    out = io.StringIO()
    console = Console(file=out, width=width, height=height, force_terminal=True, color_system="truecolor")
    console.print(screen(frame, width, height))
    return [Text.from_ansi(line).plain for line in out.getvalue().splitlines()]


def _fits(lines: list[str], width: int, height: int) -> None:
    assert len(lines) <= height, f"{len(lines)} lines on a terminal of {height}"
    too_wide = [line for line in lines if cell_len(line) > width]
    assert not too_wide, too_wide


def test_rows_sort_by_need_then_by_what_cannot_grow() -> None:
    rows = (
        _row("calm"),
        _row("short-2", needed=2),
        _row("full", reason="instance-limit", used=27, available=27),
        _row("short-9", needed=9),
    )
    lines = _draw(_frame(rows), 80, 24)
    order = [line.split()[0] for line in lines if line.startswith(("calm", "short", "full"))]
    assert order == ["short-9", "short-2", "full", "calm"]


def _demo_frame(nodes: int, *, full: str = "", first_name: str = "") -> Frame:
    """A frame of the demo's cluster after 20 virtual seconds; ``full``: that node's pods asked
    for far more addresses than its instance can hold, after the first frame; ``first_name``: the
    first node's name instead of ``node-000``."""

    async def main() -> Frame:
        clock = LoopClock(measure_cpu=False)
        metrics = Metrics(process=False)
        cloud, specs = build(nodes, 3, clock, metrics=metrics)
        if first_name:
            specs = [dataclasses.replace(specs[0], name=first_name), *specs[1:]]
        provider = cloud.provider
        manager, _, side = local_cluster(provider, Settings(), specs, metrics=metrics, clock=clock, seed=3)
        watcher = Watcher(lambda: manager, metrics, clock=clock, title="eni-ipam demo")
        task = asyncio.create_task(manager.run())
        try:
            watcher.sample()
            await asyncio.sleep(10)
            watcher.sample()
            if full:
                side.update(full, used=500)
            await asyncio.sleep(10)
            return watcher.sample()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    frame: Frame = run_virtual(main())
    return frame


def test_a_node_at_capacity_shows_its_reason_and_the_event() -> None:
    frame = _demo_frame(12, full="node-004")
    lines = _draw(frame, 80, 24)
    row = next(line for line in lines if line.startswith("node-004"))
    assert row.rstrip().endswith("instance-limit")
    heading = next(n for n, line in enumerate(lines) if line.startswith("node "))
    assert lines.index(row) == heading + 1, "a node short of addresses comes first"
    assert any("node-004 cannot grow: instance-limit" in e for e in frame.events)


@pytest.mark.parametrize(("width", "height"), [(80, 24), (200, 60)])
def test_a_subnet_under_pressure_is_marked_on_its_gauge_and_the_view_still_fits(
    width: int, height: int
) -> None:
    subnets = (SubnetGauge("s-calm", 200, 256), SubnetGauge("s-tight", 3, 256, pressure=True))
    lines = _draw(_frame((_row("n1"),), subnets=subnets), width, height)
    _fits(lines, width, height)
    tight = next(line for line in lines if "s-tight" in line)
    calm = next(line for line in lines if "s-calm" in line)
    assert tight.rstrip().endswith("3/256 pressure")
    assert "pressure" not in calm


def test_the_watcher_notes_a_subnet_entering_and_leaving_pressure() -> None:

    async def main() -> list[str]:
        metrics = Metrics(process=False)
        watcher = Watcher(lambda: None, metrics, clock=LoopClock(measure_cpu=False), title="t")
        gauge = metrics.subnet_pressure_state.labels(subnet="s-1", zone="z")
        gauge.set(1)
        watcher.sample()  # the first sample notes nothing: it is where the view starts
        for value in (0, 1):
            await asyncio.sleep(1)
            gauge.set(value)
            watcher.sample()
        return list(watcher.events)

    events: list[str] = run_virtual(main())
    assert [e.split("s  ", 1)[1] for e in events] == [
        "subnet s-1 no longer under pressure",
        "subnet s-1 under pressure: its nodes give spare addresses back",
    ]


@pytest.mark.parametrize(("width", "height"), [(80, 24), (200, 60)])
def test_the_view_fits_the_terminal(width: int, height: int) -> None:
    frame = _demo_frame(50)
    assert frame.subnets and frame.requests and frame.events
    lines = _draw(frame, width, height)
    _fits(lines, width, height)
    shown = {line.split()[0] for line in lines if line.startswith("node-")}
    if height < 50:
        more = next(line for line in lines if line.startswith("… "))
        assert more.startswith(f"… {50 - len(shown)} more")
    else:
        assert len(shown) == 50
    assert any(line.startswith("subnets: free addresses") for line in lines) or any(
        "subnets: free addresses" in line for line in lines
    )
    assert any("AssignPrivateIpAddresses" in line for line in lines)
    assert any("throttled" in line for line in lines)


def test_the_view_shrinks_with_the_terminal_rather_than_wrapping() -> None:
    frame = _demo_frame(50)
    for width, height in [(40, 8), (100, 30), (120, 40), (300, 100)]:
        _fits(_draw(frame, width, height), width, height)


@pytest.mark.parametrize(("width", "height"), [(80, 24), (40, 8), (200, 60)])
def test_a_status_line_shows_under_the_header_and_the_view_still_fits(width: int, height: int) -> None:
    status = "metrics on http://127.0.0.1:41234/metrics, not :9090: port 9090 is taken"
    lines = _draw(_frame((_row("n1"), _row("n2", needed=3)), status=status), width, height)
    _fits(lines, width, height)
    assert lines[0].startswith("eni-ipam demo")
    at = next(n for n, line in enumerate(lines) if line.startswith("!"))  # under the header's lines
    assert lines[at].startswith("! metrics on http://127.0.0.1:41234/metrics"[: width - 1])
    assert lines[at + 1].startswith("node "), "then the node table"
    assert not any(line.startswith("!") for line in _draw(_frame((_row("n1"),)), width, height)), (
        "no status: no line"
    )


def test_the_watcher_carries_its_status_into_every_frame() -> None:
    async def main() -> str:
        metrics = Metrics(process=False)
        watcher = Watcher(lambda: None, metrics, clock=LoopClock(), title="t", status="metrics off")
        return watcher.sample().status

    assert run_virtual(main()) == "metrics off"


def _gave_back(text: str) -> int:
    """Where the view left the alternate screen, checking it entered it, drew on it, and showed the
    cursor again as it left."""
    enter, leave = text.index("\x1b[?1049h"), text.rindex("\x1b[?1049l")
    assert enter < text.index("cannot grow") < leave
    assert text[:leave].endswith("\x1b[?25h"), "the cursor is shown again"
    return leave


def test_the_live_view_gives_the_terminal_back_and_prints_the_summary() -> None:
    out = _Terminal()
    rc = asyncio.run(_demo(nodes=8, duration=2.5, seed=3, port=0, out=out))
    text = out.getvalue()
    assert rc == 0
    leave = _gave_back(text)
    assert leave < text.index("summary: 8 nodes")
    assert "\x1b[H\x1b[2J" not in text, "no plain screen while the view is up"


def test_an_interrupted_view_still_gives_the_terminal_back() -> None:
    out = _Terminal()

    async def interrupted() -> None:
        demo = asyncio.create_task(_demo(nodes=8, duration=0, seed=3, port=0, out=out))
        await asyncio.sleep(1.5)
        demo.cancel()
        await asyncio.gather(demo, return_exceptions=True)

    asyncio.run(interrupted())
    text = out.getvalue()
    _gave_back(text)


@pytest.fixture
def default_port_taken(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The demo's default port, held by another process's listener (as Prometheus holds 9090)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port: int = taken.getsockname()[1]
        monkeypatch.setattr(demo_module, "DEFAULT_PORT", port)
        monkeypatch.setattr(demo_module, "PROMETHEUS_PORT", port)
        yield port


def test_the_live_view_shows_where_metrics_went_and_says_it_again_after(default_port_taken: int) -> None:
    out = _Terminal()
    asyncio.run(_demo(nodes=8, duration=1.5, seed=3, port=None, out=out))
    text = out.getvalue()
    leave = _gave_back(text)
    notice = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics, not :(\d+): port \d+ is taken", text)
    assert notice is not None and int(notice.group(2)) == default_port_taken
    assert int(notice.group(1)) != default_port_taken
    enter = text.index("\x1b[?1049h")
    shown = Text.from_ansi(text[enter:leave]).plain
    assert f"! metrics on http://127.0.0.1:{notice.group(1)}/metrics" in shown, "on the view itself"
    after = text[leave:]
    assert after.rstrip().endswith("--port N chooses"), "the last line after the summary"
    assert after.index("summary: 8 nodes") < after.rindex("metrics on http://127.0.0.1:")


def test_plain_on_a_terminal_prints_todays_screen() -> None:
    out = _Terminal()
    asyncio.run(_demo(nodes=8, duration=1.5, seed=3, port=0, out=out, plain=True))
    text = out.getvalue()
    assert "\x1b[?1049h" not in text
    assert text.startswith("\x1b[H\x1b[2Jeni-ipam demo")
    assert "node       type        avail  used  need excess ifaces" in text


def test_without_the_view_extra_the_demo_says_so_and_prints_plain_lines(monkeypatch: Any) -> None:
    monkeypatch.setattr(demo_module, "live_view_missing", lambda: "the live view needs the view extra")
    out = _Terminal()
    asyncio.run(_demo(nodes=8, duration=1.5, seed=3, port=0, out=out))
    text = out.getvalue()
    assert text.startswith("the live view needs the view extra\n\x1b[H\x1b[2Jeni-ipam demo")


def test_log_events_go_to_the_view_while_it_is_up_and_to_the_stream_after() -> None:
    stream = io.StringIO()
    configure(level="warning", json=True, stream=stream)
    try:
        events: list[Mapping[str, Any]] = []
        log = structlog.get_logger("test")
        with diverted(events.append):
            log.warning("subnet_gone", subnet="s-1")
            log.info("too_quiet")
        log.warning("after_the_view")
    finally:
        configure(level="warning")
    assert events == [{"subnet": "s-1", "event": "subnet_gone", "level": "warning"}]
    assert "subnet_gone" not in stream.getvalue() and "after_the_view" in stream.getvalue()


def test_the_readmes_demo_screen_is_a_frame_of_the_view() -> None:
    """The README shows what ``make plots`` captured from the view (tests/demo_screen.py): a frame
    of its size, in the view's layout, its rows in the view's order."""
    from tests import demo_screen

    lines = demo_screen.block(demo_screen.README.read_text()).splitlines()
    _fits(lines, demo_screen.WIDTH, demo_screen.HEIGHT)
    assert lines[0].startswith("eni-ipam demo") and "● ready" in lines[0]
    heading = next(line for line in lines if line.startswith("node "))
    drawn = _draw(_frame((_row("node-000"),)), 100, 30)
    assert heading.split() == next(line for line in drawn if line.startswith("node ")).split()
    rows = [line for line in lines if line.startswith("node-")]
    reasons = [line.rstrip().endswith(("instance-limit", "subnet", "security-groups")) for line in rows]
    assert any(reasons) and reasons == sorted(reasons, reverse=True), "nodes that cannot grow first"
    assert any(line.startswith("… ") and " more " in line for line in lines)
    assert any("subnets: free addresses" in line and "API requests a second" in line for line in lines)
    assert "events" in lines


@pytest.mark.system
def test_run_on_its_embedded_default_draws_the_view_and_gives_the_terminal_back() -> None:
    from eni_ipam.app.runconfig import load_config
    from eni_ipam.app.service import serve

    config = load_config(None, {"ENI_IPAM_SERVER__PORT": "0", "ENI_IPAM_SERVER__PROBE_PORT": "0"})
    out = _Terminal()

    async def briefly() -> int:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(2.5, stop.set)
        return await serve(config, stop=stop, environ={}, view=out)

    assert asyncio.run(briefly()) == 0
    text = out.getvalue()
    _gave_back(text)
    last = [Text.from_ansi(line).plain for line in text[text.rindex("\x1b[?1049l") :].splitlines()]
    assert last[0].startswith("eni-ipam run") and "● ready" in last[0] and "● leader" in last[0]
    assert {line.split()[0] for line in last if line.startswith("node-")} == {"node-1", "node-2", "node-3"}


def test_a_node_name_that_holds_escape_sequences_is_shown_not_obeyed() -> None:
    hostile = "node-\x1b]0;owned\x07\x1b[2J"
    frame = _demo_frame(2, full=hostile, first_name=hostile)  # cannot grow: the view notes it, by name
    drawn = "\n".join(_draw(frame, 100, 30)) + "\n".join(frame.events)
    assert "\x1b" not in drawn and "\x07" not in drawn
    assert "node-\\x1b]0;owned\\x07\\x1b[2J" in [row.name for row in frame.nodes]
