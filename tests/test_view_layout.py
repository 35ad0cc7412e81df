"""The live view keeps every column readable at every size from 80 × 24 to 200 × 60 (decision 0057):
golden screens of a fixed frame at 80 × 24, 120 × 40 and 200 × 60, and checks over a grid of sizes
that no line is too wide, no heading is cut, bars keep their minimum, operations keep their names,
events wrap (and are cut at a word only when the lines run out), and the side column is used only
when both columns keep their minimum widths. The pictures ``make plots`` commits (docs/img/view-*,
the README's copy) are checked to be what it draws now.

To regenerate the golden screens after a deliberate change of the view, run
``ENI_IPAM_UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_view_layout.py`` and review the diff of
tests/golden/view-*.txt; ``make plots`` regenerates docs/img/view-* and the README's copy.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
from importlib.metadata import version
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from eni_ipam.app.view import (
    API,
    BAR_MIN,
    LEGEND,
    NUMBERS,
    REASON,
    SUBNETS,
    Frame,
    NodeRow,
    SubnetGauge,
    Table,
    columns,
    screen,
)

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("ENI_IPAM_UPDATE_GOLDEN") == "1"
GOLDEN_SIZES = [(80, 24), (120, 40), (200, 60)]
SIZES = [
    (w, h) for w in (80, 90, 100, 110, 119, 120, 121, 130, 140, 150, 160, 180, 200) for h in (24, 30, 40, 60)
]
"""From the smallest terminal the view is made for to a large one, around the widths where the
layout changes."""
TYPES = ("m5.large", "m5.xlarge", "c5.large", "t3.medium", "m5.2xlarge", "r5.large", "m4.xlarge")
CAPACITY = {"m5.large": 27, "m5.xlarge": 56, "c5.large": 27, "t3.medium": 15, "m5.2xlarge": 56,
            "r5.large": 27, "m4.xlarge": 56}  # fmt: skip
OPERATIONS = (
    "AssignPrivateIpAddresses",
    "AttachNetworkInterface",
    "CreateNetworkInterface",
    "DescribeNetworkInterfaces",
    "ModifyNetworkInterfaceAttribute",
    "UnassignPrivateIpAddresses",
)


def fixed_frame() -> Frame:
    """A frame built by hand, the same on every run: 30 nodes, two short of addresses, one at its
    instance's limit with pods waiting beyond its pool (the ``16/15/15`` row), one whose limits are
    unknown; a subnet under pressure; six operations with long names; throttles; and events, one
    of them a warning too long for a narrow column."""
    rows = []
    for n in range(30):
        kind = TYPES[n % len(TYPES)]
        pool = min((n * 7) % 19 + 4 + n % 5, CAPACITY[kind])
        used = min((n * 7) % 19, pool)
        rows.append(NodeRow(f"node-{n:03d}", kind, pool, used, 0, n % 3, CAPACITY[kind], 1 + n % 3))
    rows[3] = NodeRow("node-003", "t3.medium", 15, 16, 0, 0, 15, 3, "instance-limit")
    rows[7] = NodeRow("node-007", "m5.large", 10, 14, 8, 0, 27, 1)
    rows[12] = NodeRow("node-012", "c5.large", 6, 4, 3, 0, 27, 1)
    rows[20] = NodeRow("node-020", "x9.unknown", 0, 2, 0, 0, 0, 1, "limits-unknown")
    rates = {op: tuple(float((i * (k + 3)) % 5) for i in range(60)) for k, op in enumerate(OPERATIONS)}
    events = (
        "   3.0s  interface created in subnet-1a-nodes ×4",
        "  12.0s  node-003 cannot grow: instance-limit",
        "  14.0s  throttled: AssignPrivateIpAddresses ×2",
        "  18.0s  subnet subnet-1b-pods under pressure: its nodes give spare addresses back",
        "  21.0s  warning: maintenance_failed error='AssignPrivateIpAddresses: RequestLimitExceeded:"
        " Request limit exceeded.' failures=2 node=node-007 retry_in=1.758",
        "  25.0s  released 4 addresses to subnet-1a-nodes: handshake done",
        "  29.0s  node-012 offers 2 addresses for release",
    )
    return Frame(
        title="eni-ipam demo",
        elapsed=30.0,
        ready=True,
        leader=True,
        nodes=tuple(rows),
        subnets=(
            SubnetGauge("subnet-1a-nodes", 612, 1019),
            SubnetGauge("subnet-1a-pods", 980, 1019),
            SubnetGauge("subnet-1b-nodes", 240, 1019),
            SubnetGauge("subnet-1b-pods", 31, 1019, pressure=True),
        ),
        requests=rates,
        throttles=tuple(2.0 if i in (14, 15) else 0.0 for i in range(30)),
        events=events,
    )


def draw(frame: Frame, width: int, height: int) -> list[str]:
    """The frame on a virtual terminal: its lines as a person reads them."""
    out = io.StringIO()
    console = Console(file=out, width=width, height=height, force_terminal=True, color_system="truecolor")
    console.print(screen(frame, width, height))
    return [Text.from_ansi(line).plain.rstrip() for line in out.getvalue().splitlines()]


@pytest.fixture(scope="module")
def frame() -> Frame:
    return fixed_frame()


@pytest.fixture(scope="module")
def demo() -> Frame:
    """The demo's frame that ``make plots`` draws (half a virtual minute of the demo)."""
    from tests import demo_screen

    return demo_screen.frame()


@pytest.mark.parametrize(("width", "height"), GOLDEN_SIZES, ids=lambda v: str(v))
def test_the_view_matches_its_golden_screen(frame: Frame, width: int, height: int) -> None:
    path = GOLDEN / f"view-{width}x{height}.txt"
    drawn = "\n".join(draw(frame, width, height)) + "\n"
    if UPDATE:
        path.write_text(drawn)
    assert drawn == path.read_text(), (
        f"{path.name} differs: ENI_IPAM_UPDATE_GOLDEN=1 rewrites it (module doc)"
    )


def _headings(frame: Frame) -> list[str]:
    """Every heading the view draws, each of which must show whole."""
    nodes = frame.nodes
    return [
        frame.title,
        "● ready",
        "● leader",
        f"{len(nodes)} nodes",
        f"pool {sum(n.available for n in nodes)}",
        f"used {sum(n.used for n in nodes)}",
        "need ",
        "node",
        "type",
        LEGEND,
        REASON,
        SUBNETS,
        API,
        "events",
    ]


@pytest.mark.parametrize("which", ["fixed", "demo"])
def test_every_size_fits_and_cuts_no_heading(which: str, frame: Frame, demo: Frame) -> None:
    shown = frame if which == "fixed" else demo
    for width, height in SIZES:
        lines = draw(shown, width, height)
        where = f"at {width}×{height}"
        assert len(lines) <= height, where
        assert all(cell_len(line) <= width for line in lines), where
        text = "\n".join(lines)
        for heading in _headings(shown):
            assert heading in text, f"{heading!r} missing or cut {where}"
        table = next(line for line in lines if REASON in line)
        assert re.search(r"\s+".join(NUMBERS), table), f"the figures' headings {where}"
        assert "…" not in table and "…" not in lines[0], where


@pytest.mark.parametrize(("width", "height"), SIZES[::3])
def test_bars_keep_their_minimum_and_operations_their_names(frame: Frame, width: int, height: int) -> None:
    lines = draw(frame, width, height)
    rows = [line for line in lines if line.startswith("node-")]
    assert rows
    for row in rows:
        bar = re.search(r"[█▒░·]+", row)
        assert bar and len(bar.group()) >= BAR_MIN, (width, row)
    text = "\n".join(lines)
    shown = [op for op in OPERATIONS if op in text]
    assert len(shown) >= 2, "the busiest operations show"
    api = [line for line in lines if any(op[:12] in line for op in OPERATIONS)]
    assert all("…" not in line for line in api), "an operation's name is never cut"


def test_the_node_columns_say_what_each_figure_is(frame: Frame) -> None:
    """The row that read ``16/15/15`` with an empty need: its figures in their own columns, under
    their headings, and the pods waiting beyond its pool as its need; no need reads ``-``."""
    lines = draw(frame, 100, 40)
    heading = next(line for line in lines if REASON in line)
    assert heading.split()[-6:] == ["used", "pool", "max", "need", "cannot", "grow"]
    full = next(line for line in lines if line.startswith("node-003"))
    assert full.split()[-5:] == ["16", "15", "15", "1", "instance-limit"]
    short = next(line for line in lines if line.startswith("node-007"))
    assert short.split()[-4:] == ["14", "10", "27", "8"]
    calm = next(line for line in lines if line.startswith("node-001"))
    assert calm.split()[-1] == "-"
    unknown = next(line for line in lines if line.startswith("node-020"))
    assert unknown.split()[-4:] == ["0", "?", "2", "limits-unknown"]
    assert [line.split()[0] for line in lines if line.startswith("node-")][:4] == [
        "node-007", "node-012", "node-020", "node-003"
    ], "the largest unmet need first"  # fmt: skip
    assert "need 14 on 4 nodes" in "\n".join(lines[:2])


def test_the_side_column_only_when_both_keep_their_minimum(frame: Frame, demo: Frame) -> None:
    for shown in (frame, demo):
        table_min = Table.of(shown, 0).width
        for width, height in SIZES:
            table_w, side_w = columns(shown, width)
            lines = draw(shown, width, height)
            beside = any(REASON in line and SUBNETS in line for line in lines)
            assert beside == bool(side_w), (width, height)
            if side_w:
                assert table_w >= table_min and side_w >= 44
        assert columns(shown, 120)[1] == 0, "120 columns: one column, the bars at full width"
        assert columns(shown, 160)[1] and columns(shown, 200)[1]


def test_events_wrap_under_their_text_and_are_cut_at_a_word_only_when_they_must(frame: Frame) -> None:
    lines = draw(frame, 80, 24)
    start = lines.index("events")
    events = lines[start + 1 :]
    assert events[-1] == "  29.0s  node-012 offers 2 addresses for release"
    wide = draw(frame, 200, 60)
    first = next(n for n, line in enumerate(wide) if "21.0s  warning: " in line)
    text_at = wide[first].index("warning: ")
    after = wide[first + 1][text_at:]
    assert after.startswith("exceeded.'") or after[:1].isalpha(), "its next line starts under its text"
    assert wide[first + 1][text_at - 9 : text_at].strip() == "", "under its text, not its time"
    joined = " ".join([wide[first][text_at:].rstrip(), after.rstrip()])
    assert joined.endswith("failures=2 node=node-007 retry_in=1.758"), "nothing lost in the wrap"
    few = draw(dataclasses.replace(frame, events=frame.events[:5]), 80, 24)
    cut = [line for line in few if line.endswith("…")]
    for line in cut:
        assert line[:-1].endswith(tuple("abcdefghijklmnopqrstuvwxyz0123456789:'=.,)")), line
        assert not line[:-1].endswith(" "), "cut after a word, not in the middle of a space"


@pytest.mark.parametrize(("width", "height"), [(40, 8), (60, 15), (79, 23), (300, 100)])
def test_outside_the_sizes_it_is_made_for_it_still_fits(frame: Frame, width: int, height: int) -> None:
    lines = draw(frame, width, height)
    assert len(lines) <= height and all(cell_len(line) <= width for line in lines)


# -- the committed pictures ------------------------------------------------------------------------


def test_the_committed_pictures_are_what_make_plots_draws(demo: Frame) -> None:
    """docs/img/view-*.txt and .svg and the README's copy are what ``make plots`` draws now, so
    they cannot go stale; an SVG drawn by another rich is checked through its text."""
    from tests import demo_screen

    stale = "stale: run `make plots`"
    readme = demo_screen.README.read_text()
    assert readme == demo_screen.readme(demo, readme), f"README.md's demo screen is {stale}"
    for path, content in demo_screen.pictures(demo).items():
        assert path.exists(), f"{path.name} is missing: run `make plots`"
        committed = path.read_text()
        if path.suffix == ".svg" and f"rich {version('rich')} " not in committed.split("\n", 1)[0]:
            continue  # drawn by another rich: its .txt twin holds the screen
        assert committed == content, f"{path.name} is {stale}"


def test_the_readme_shows_the_view_at_three_sizes() -> None:
    from tests import demo_screen

    readme = demo_screen.README.read_text()
    for width, height in demo_screen.SIZES:
        assert f"docs/img/view-{width}x{height}.svg" in readme
