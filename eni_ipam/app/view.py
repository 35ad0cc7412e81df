"""The live terminal view of an embedded cluster: ``eni-ipam demo``, and ``eni-ipam run`` on its
embedded default.

Two halves. A :class:`Watcher` samples, once a tick, what the process already has — the manager's
nodes (stats, capacity reason, release handshake) and the exported metrics (requests and throttles
by operation, interfaces created, addresses released, free addresses per subnet, readiness and
leadership) — into a :class:`Frame`, keeping a minute of per-second rates and the last notable
events. :func:`screen` draws a frame for a terminal of a given size; it is a pure function, which
the tests render on a virtual console of a fixed size.

Invariants: the drawing is never taller or wider than the size it is given (the node rows are cut,
with a line saying how many more there are); the nodes that need attention come first (the largest
need, then those that cannot grow, then the fullest); the watcher only reads and never writes the
manager or the metrics. rich is imported here and nowhere else in the product: it comes with the
``view`` extra (decision 0032), and the callers fall back to the plain lines without it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from eni_ipam.adapters.logging import diverted
from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.adapters.terminal import inert, plural
from eni_ipam.core.clock import Clock
from eni_ipam.core.manager import NodeManager
from eni_ipam.core.model import ReleaseState

HISTORY = 60
"""Seconds of per-second rates kept for the sparklines: a minute, what fits beside a node table."""
EVENTS = 50
"""Notable events kept; the screen shows the last ones that fit."""
SPARKS = " ▁▂▃▄▅▆▇█"
USED, SPARE, NEEDED = "█", "▒", "░"
"""The bar's cells: used addresses, spare ones in the pool, and the need. Distinct characters, not only
colours, so the bars read in a copy of the screen as text too."""
LEGEND = f"{USED} used {SPARE} spare {NEEDED} need"


@dataclasses.dataclass(frozen=True)
class NodeRow:
    name: str
    instance_type: str
    available: int
    used: int
    needed: int
    excess: int
    capacity: int
    """Most addresses the node's interfaces could ever hold (0: its limits are unknown)."""
    interfaces: int
    reason: str = ""
    """Why its pool cannot grow (:data:`~eni_ipam.core.observe.CAPACITY_REASONS`), or empty."""

    @property
    def short(self) -> int:
        """The unmet need: the addresses the reconciler still has to add, or the pods beyond the
        pool waiting for an address (a node that cannot grow has no plan, but its pods still wait)."""
        return max(self.needed, self.used - self.available, 0)

    def attention(self) -> tuple[int, bool, float, str]:
        """Sort key, most urgent first: the largest unmet need, then a node that cannot grow, then
        the fullest pool."""
        fullness = self.used / self.available if self.available else float(self.used > 0)
        return (-self.short, not self.reason, -fullness, self.name)


@dataclasses.dataclass(frozen=True)
class SubnetGauge:
    id: str
    free: int
    size: int
    """Addresses in the CIDR (0: unknown)."""
    pressure: bool = False
    """Under pressure (decision 0054): its nodes give their spare addresses back."""


@dataclasses.dataclass(frozen=True)
class Frame:
    """Everything one screen shows."""

    title: str
    elapsed: float
    ready: bool
    leader: bool
    nodes: tuple[NodeRow, ...]
    subnets: tuple[SubnetGauge, ...] = ()
    requests: Mapping[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
    """Operation → requests a second, oldest first."""
    throttles: tuple[float, ...] = ()
    """Requests the cloud throttled, a second, oldest first."""
    events: tuple[str, ...] = ()
    """Notable events, oldest first, each with its time."""
    status: str = ""
    """What the user must not miss while the view covers the terminal (where /metrics went when its
    port was taken), drawn under the header; empty: no line."""


# -- sampling ------------------------------------------------------------------------------------


class Watcher:
    """Turns a running manager and its metrics into frames; call :meth:`sample` once a tick.

    Events are what changed since the last sample: an interface created (or failed), addresses
    offered for release (the handshake starts) and released (it ended), throttled requests, a node
    that can no longer grow, a subnet entering or leaving pressure; and, while :meth:`diverting`, the
    log events at warning and above.
    """

    def __init__(
        self,
        manager: Callable[[], NodeManager | None],
        metrics: Metrics,
        *,
        clock: Clock,
        title: str,
        history: int = HISTORY,
        status: str = "",
    ) -> None:
        self._manager = manager
        self.status = status
        self._metrics = metrics
        self._clock = clock
        self._title = title
        self._started = clock.monotonic()
        self._last: float | None = None
        self._history = history
        self._requests: dict[str, collections.deque[float]] = {}
        self._throttles: collections.deque[float] = collections.deque(maxlen=history)
        self._counts: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._reasons: dict[str, str] = {}
        self._offered: dict[str, int] = {}
        self._pressured: set[str] = set()
        self.events: collections.deque[str] = collections.deque(maxlen=EVENTS)

    def elapsed(self) -> float:
        return self._clock.monotonic() - self._started

    def note(self, text: str) -> None:
        self.events.append(f"{self.elapsed():6.1f}s  {inert(text)}")

    @contextlib.contextmanager
    def diverting(self) -> Iterator[None]:
        """Log events at warning and above become events of the view for the block, the others are
        dropped (the view owns the terminal: a line written to it would tear the screen)."""

        def sink(event: Mapping[str, Any]) -> None:
            name, level = str(event.get("event", "")), str(event.get("level", "info"))
            if level in ("debug", "info") or name == "node_at_capacity":
                # What the view shows itself (a node's reason, interfaces created, releases) is
                # most of what is logged below warning; at capacity is the node's reason already.
                return
            extra = " ".join(f"{k}={v}" for k, v in event.items() if k not in ("event", "level", "timestamp"))
            self.note(f"{level}: {name} {extra}".rstrip())

        with diverted(sink):
            yield

    def _deltas(self, metric: Any, suffix: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Each labelled series of a counter: its increase since the last sample."""
        out: dict[tuple[tuple[str, str], ...], float] = {}
        for family in metric.collect():
            for s in family.samples:
                if not s.name.endswith(suffix):
                    continue
                labels = tuple(sorted(s.labels.items()))
                key = (s.name, labels)
                before = self._counts.get(key, 0.0 if self._last is not None else s.value)
                self._counts[key] = s.value
                out[labels] = s.value - before
        return out

    @staticmethod
    def _values(metric: Any) -> dict[tuple[tuple[str, str], ...], float]:
        return {
            tuple(sorted(s.labels.items())): s.value for family in metric.collect() for s in family.samples
        }

    def sample(self) -> Frame:
        now = self._clock.monotonic()
        seconds = max(now - self._last, 1e-9) if self._last is not None else 1.0
        m = self._metrics
        requests = self._deltas(m.api_requests, "_total")
        throttled = self._deltas(m.api_throttled, "_total")
        created = self._deltas(m.interface_creation_ops, "_total")
        released = self._deltas(m.release_ops, "_total")
        first = self._last is None
        self._last = now
        for labels, n in requests.items():
            op = dict(labels)["operation"]
            self._requests.setdefault(op, collections.deque(maxlen=self._history)).append(n / seconds)
        self._throttles.append(sum(throttled.values()) / seconds)
        if not first:
            for labels, n in sorted(throttled.items()):
                if n:
                    self.note(f"throttled: {dict(labels)['operation']} ×{n:.0f}")
            for labels, n in sorted(created.items()):
                if n:
                    got = dict(labels)
                    what = "created" if got["status"] == "success" else f"failed ({got['status']})"
                    self.note(f"interface {what} in {got['subnet']}" + (f" ×{n:.0f}" if n > 1 else ""))
            for labels, n in sorted(released.items()):
                if n:
                    self.note(f"released {_addresses(n)} to {dict(labels)['subnet']}: handshake done")
        manager = self._manager()
        rows = self._rows(manager, quiet=first) if manager is not None else ()
        ready = self._values(m.ready).get((), 0.0) == 1.0
        leader = self._values(m.leader).get((), 0.0) == 1.0
        sizes = {dict(k).get("subnet", ""): v for k, v in self._values(m.subnet_size_ips).items()}
        pressured = {
            dict(k).get("subnet", "") for k, v in self._values(m.subnet_pressure_state).items() if v == 1.0
        }
        if not first:
            for subnet in sorted(pressured - self._pressured):
                self.note(f"subnet {subnet} under pressure: its nodes give spare addresses back")
            for subnet in sorted(self._pressured - pressured):
                self.note(f"subnet {subnet} no longer under pressure")
        self._pressured = pressured
        subnets = tuple(
            SubnetGauge(subnet, int(free), int(sizes.get(subnet, 0)), subnet in pressured)
            for subnet, free in sorted(
                (dict(k).get("subnet", ""), v) for k, v in self._values(m.available_ips_per_subnet).items()
            )
        )
        return Frame(
            title=self._title,
            elapsed=now - self._started,
            ready=ready,
            leader=leader,
            nodes=rows,
            subnets=subnets,
            requests={op: tuple(q) for op, q in sorted(self._requests.items())},
            throttles=tuple(self._throttles),
            events=tuple(self.events),
            status=self.status,
        )

    def _rows(self, manager: NodeManager, *, quiet: bool) -> tuple[NodeRow, ...]:
        rows = []
        for node in manager.nodes.values():
            s = node.stats
            reason = node.capacity_limit()
            offered = sum(1 for state in node.release_status.values() if state == ReleaseState.MARKED)
            if not quiet:
                if reason and self._reasons.get(node.name, "") != reason:
                    self.note(f"{node.name} cannot grow: {reason}")
                if offered > self._offered.get(node.name, 0):
                    self.note(f"{node.name} offers {_addresses(offered)} for release")
            self._reasons[node.name] = reason
            self._offered[node.name] = offered
            instance = node.instance
            rows.append(
                NodeRow(
                    name=inert(node.name),
                    instance_type=inert(instance.type) if instance else "?",
                    available=s.available,
                    used=s.used,
                    needed=s.needed,
                    excess=s.excess,
                    capacity=s.capacity if s.limits_known else 0,
                    interfaces=len(instance.interfaces) if instance else 0,
                    reason=reason,
                )
            )
        return tuple(rows)


def _addresses(n: float) -> str:
    return f"{n:.0f} address" + ("" if n == 1 else "es")


# -- drawing -------------------------------------------------------------------------------------
#
# The column rules (decision 0057): a heading is never cut (the header wraps at a field, the node
# table's heading names every column over it), a bar keeps BAR_MIN cells (a long node name is
# shortened first), an operation's name is shown whole, an event wraps under its text and is cut, at
# a word, with an ellipsis only when the lines run out; the side column is used only when the node
# table and it both keep their minimum widths (:func:`columns`).

BAR_MIN = len(LEGEND)
"""A bar's fewest cells: its heading, the legend, fits over it."""
BAR_MAX = 60
"""A bar's most cells: past it, a longer bar says nothing more."""
SIDE_BAR_MAX = 36
"""A bar's most cells beside the side column, which takes the rest."""
NAME_MIN = 8
GAUGE_MIN, GAUGE_MAX = 6, 40
SPARK_MIN = 8
EVENTS_MIN = 44
"""The side column's fewest cells: an event's time and a short sentence."""
NUMBERS = ("used", "pool", "max", "need")
"""The node table's figures, each a column of its own: addresses in use, in the pool, the most the
instance holds (``?``: unknown), and the unmet need (``-``: none)."""
REASON = "cannot grow"
NONE = "-"


def _fit(text: Text, width: int) -> Text:
    text.truncate(width, overflow="ellipsis")
    return text


def _bar(row: NodeRow, width: int) -> Text:
    """Used, spare and needed cells against the node's maximum (its pool and need when unknown)."""
    need = row.short
    top = max(row.capacity, row.available + need, row.used, 1)
    used = min(row.used, row.available)

    def cells(n: int) -> int:
        return round(n * width / top)

    u = cells(used)
    s = min(cells(row.available) - u, width - u)
    n = min(cells(need), width - u - s)
    bar = Text()
    bar.append(USED * u, "green")
    bar.append(SPARE * s, "cyan")
    bar.append(NEEDED * n, "bold red")
    bar.append("·" * (width - u - s - n), "bright_black")
    return bar


def _spark(values: Sequence[float], width: int) -> str:
    shown = list(values)[-width:]
    top = max(shown, default=0.0)
    line = "".join(
        SPARKS[0] if v <= 0 or top <= 0 else SPARKS[max(1, round(v / top * (len(SPARKS) - 1)))] for v in shown
    )
    return line.rjust(width)


def _header(frame: Frame, width: int) -> list[Text]:
    """The title and the cluster's totals, as fields that wrap onto a second line rather than be cut."""
    nodes = frame.nodes
    short = [n.short for n in nodes if n.short]
    need = f"need {sum(short)} on {len(short)} node{'' if len(short) == 1 else 's'}" if short else "need 0"
    fields: list[Text] = [
        Text(frame.title, "bold"),
        Text(f"{frame.elapsed:.1f}s"),
        Text(plural(len(nodes), "node")),
        Text("● ready", "green") if frame.ready else Text("○ not ready", "yellow"),
        Text("● leader", "green") if frame.leader else Text("○ standby", "yellow"),
        Text(f"pool {sum(n.available for n in nodes)}"),
        Text(f"used {sum(n.used for n in nodes)}"),
        Text(need, "bold red" if short else ""),
    ]
    lines = [Text()]
    for field in fields:
        line = lines[-1]
        if line.cell_len and line.cell_len + 2 + field.cell_len > width:
            lines.append(Text())
            line = lines[-1]
        if line.cell_len:
            line.append("  ")
        line.append_text(field)
    return [_fit(line, width) for line in lines]


@dataclasses.dataclass(frozen=True)
class Table:
    """The node table's column widths for a frame at a width."""

    name: int
    type: int
    number: int
    reason: int
    bar: int

    @classmethod
    def of(cls, frame: Frame, width: int) -> Table:
        type_w = max((len(n.instance_type) for n in frame.nodes), default=4)
        figures = [v for n in frame.nodes for v in (n.used, n.available, n.capacity, n.short)]
        number = max(4, *(len(str(v)) for v in figures)) if figures else 4
        reason = max((len(n.reason) for n in frame.nodes), default=0)
        table = cls(NAME_MIN, min(max(type_w, 4), 12), number, max(reason, len(REASON)), BAR_MIN)
        name_w = min(max(max((len(n.name) for n in frame.nodes), default=4), 4), 24)
        room = width - table.fixed
        name = max(min(name_w, NAME_MIN + room), min(name_w, NAME_MIN))
        bar = max(min(width - dataclasses.replace(table, name=name).fixed, BAR_MAX), BAR_MIN)
        return dataclasses.replace(table, name=name, bar=bar)

    @property
    def fixed(self) -> int:
        """Cells every column but the bar takes, with the spaces between them."""
        return self.name + 1 + self.type + 1 + 1 + len(NUMBERS) * (self.number + 1) + 2 + self.reason

    @property
    def width(self) -> int:
        return self.fixed + self.bar


def _cell(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _node_lines(frame: Frame, width: int, height: int) -> list[Text]:
    """The node table in at most ``height`` lines (its heading, the rows that fit, "N more")."""
    t = Table.of(frame, width)
    numbers = " ".join(f"{h:>{t.number}}" for h in NUMBERS)
    heading = Text(f"{'node':<{t.name}} {'type':<{t.type}} {LEGEND:<{t.bar}} {numbers}  {REASON}", "bold")
    lines = [_fit(heading, width)]
    rows = sorted(frame.nodes, key=NodeRow.attention)
    room = height - 1
    shown = rows if len(rows) <= room else rows[: max(room - 1, 0)]
    for row in shown:
        line = Text(f"{_cell(row.name, t.name):<{t.name}} {_cell(row.instance_type, t.type):<{t.type}} ")
        line.append_text(_bar(row, t.bar))
        maximum = str(row.capacity) if row.capacity else "?"
        line.append(f" {row.used:>{t.number}} {row.available:>{t.number}} {maximum:>{t.number}} ")
        need = row.short
        line.append(f"{need if need else NONE:>{t.number}}", "bold red" if need else "bright_black")
        line.append(f"  {row.reason}", "bold red" if row.reason else "")
        lines.append(_fit(line, width))
    if len(shown) < len(rows):
        rest = rows[len(shown) :]
        short = sum(1 for r in rest if r.short or r.reason)
        lines.append(_fit(Text(f"… {len(rest)} more ({short} of them need attention)", "italic"), width))
    return lines[:height]


def _subnet_parts(frame: Frame) -> tuple[int, int, int]:
    """A subnet line's name, figure and marker widths."""
    name_w = min(max((len(s.id) for s in frame.subnets), default=6), 24)
    figure_w = max((len(f" {s.free}/{s.size}" if s.size else f" {s.free}") for s in frame.subnets), default=0)
    marker_w = len(" pressure") if any(s.pressure for s in frame.subnets) else 0
    return name_w, figure_w, marker_w


SUBNETS = "subnets: free addresses"
API = "API requests a second"


def _subnets_min(frame: Frame) -> int:
    name_w, figure_w, marker_w = _subnet_parts(frame)
    return max(name_w + 1 + GAUGE_MIN + figure_w + marker_w, len(SUBNETS))


def _subnet_lines(frame: Frame, width: int, height: int) -> list[Text]:
    """A gauge per subnet; when they do not all fit, those under pressure and the emptiest, and the
    heading says how many of them show."""
    room = max(height - 1, 0)
    shown = frame.subnets
    heading = Text(SUBNETS, "bold")
    if len(shown) > room:
        tight = sorted(shown, key=lambda s: (not s.pressure, s.free / s.size if s.size else 1.0, s.id))
        kept = {s.id for s in tight[:room]}
        shown = tuple(s for s in shown if s.id in kept)
        heading.append(f" ({len(shown)} of {len(frame.subnets)})")
    lines = [heading]
    name_w, figure_w, marker_w = _subnet_parts(frame)
    gauge_w = min(max(width - name_w - 1 - figure_w - marker_w, GAUGE_MIN), GAUGE_MAX)
    for subnet in shown:
        figure = f" {subnet.free}/{subnet.size}" if subnet.size else f" {subnet.free}"
        share = subnet.free / subnet.size if subnet.size else 1.0
        full = round(share * gauge_w)
        colour = "green" if share > 0.5 else "yellow" if share > 0.2 else "bold red"
        line = Text(f"{_cell(subnet.id, name_w):<{name_w}} ")
        line.append("█" * full, colour)
        line.append("·" * (gauge_w - full), "bright_black")
        line.append(f"{figure:>{figure_w}}")
        if subnet.pressure:
            line.append(" pressure", "bold red")
        lines.append(_fit(line, width))
    return lines[:height]


def _api_name_w(frame: Frame) -> int:
    return max((len(op) for op in frame.requests), default=len("throttled"))


def _api_min(frame: Frame) -> int:
    return max(_api_name_w(frame) + 1 + SPARK_MIN + 6, len(API))


def _api_lines(frame: Frame, width: int, height: int) -> list[Text]:
    """Requests a second by operation as sparklines (the busiest ones when they do not all fit),
    and the throttled requests; an operation's name is shown whole."""
    lines = [Text(API, "bold")]
    room = max(height - 2, 0)
    busiest = sorted(frame.requests.items(), key=lambda kv: (-sum(kv[1]), kv[0]))[:room]
    name_w = max(_api_name_w(frame), len("throttled"))
    spark_w = min(max(width - name_w - 7, SPARK_MIN), HISTORY)
    for op, rates in sorted(busiest):
        line = Text(f"{op:<{name_w}} ")
        line.append(_spark(rates, spark_w), "cyan")
        line.append(f" {rates[-1] if rates else 0:5.1f}")
        lines.append(_fit(line, width))
    throttles = Text(f"{'throttled':<{name_w}} ")
    throttles.append(_spark(frame.throttles, spark_w), "bold red")
    throttles.append(f" {frame.throttles[-1] if frame.throttles else 0:5.1f}")
    lines.append(_fit(throttles, width))
    return lines[:height]


def _wrap(event: str, width: int) -> list[str]:
    """An event's lines at ``width``: its time, then its text wrapped at words under the text."""
    when, _, what = event.partition("s  ")
    head = f"{when}s  " if what else ""
    indent = " " * len(head)
    words = (what or event).split(" ")
    lines, line = [], head
    for word in words:
        while len(word) > width - len(indent):  # a word longer than a line: cut where it must be
            if line.strip():
                lines.append(line.rstrip())
                line = indent
            lines.append(line + word[: width - len(indent)])
            word, line = word[width - len(indent) :], indent
        if len(line) + len(word) > width and line.strip():
            lines.append(line.rstrip())
            line = indent
        line += word + " "
    lines.append(line.rstrip())
    return lines


def _shorten(line: str, width: int) -> str:
    """``line`` cut at a word to fit ``width`` with an ellipsis after it."""
    if len(line) <= width:
        return line
    cut = line[: width - 1]
    head = cut.rsplit(" ", 1)[0] if " " in cut.strip() else cut
    return head.rstrip() + "…"


def _event_lines(frame: Frame, width: int, height: int) -> list[Text]:
    """The newest events that fit, each wrapped; the oldest shown is cut (at a word, with an
    ellipsis) when only part of it fits."""
    lines = [Text("events", "bold")]
    room = height - 1
    shown: list[list[str]] = []
    for event in reversed(frame.events):
        if room <= 0:
            break
        wrapped = _wrap(event, width)
        if len(wrapped) > room:
            wrapped = [*wrapped[: room - 1], _shorten(" ".join(wrapped[room - 1 :]), width)]
            wrapped[-1] = _shorten(wrapped[-1], width)
        shown.insert(0, wrapped)
        room -= len(wrapped)
    lines += [Text(line) for event in shown for line in event]
    if len(lines) == 1 and height > 1:
        lines.append(Text("none yet", "italic"))
    return lines[:height]


def _side_by_side(left: list[Text], right: list[Text], left_w: int, width: int) -> list[Text]:
    out = []
    for n in range(max(len(left), len(right))):
        line = left[n].copy() if n < len(left) else Text()
        line.pad_right(left_w - line.cell_len)
        line.append("  ")
        if n < len(right):
            line.append_text(right[n])
        line = _fit(line, width)
        line.rstrip()
        out.append(line)
    return out


def columns(frame: Frame, width: int) -> tuple[int, int]:
    """The node table's and the side column's widths: ``(width, 0)`` when a side column would leave
    either below its minimum (the node table's at :data:`BAR_MIN`, the side's the widest of its
    sections' and :data:`EVENTS_MIN`)."""
    table = Table.of(frame, 0)  # every column at its least, the bar at BAR_MIN
    side_min = max(_subnets_min(frame), _api_min(frame), EVENTS_MIN)
    if width < table.width + 2 + side_min:
        return width, 0
    table_w = min(table.fixed + SIDE_BAR_MAX, width - side_min - 2)
    return table_w, width - table_w - 2


def screen(frame: Frame, width: int, height: int) -> Group:
    """The frame drawn in at most ``width`` columns and ``height`` lines."""
    width, height = max(width, 40), max(height, 8)
    lines = _header(frame, width)
    if frame.status:
        lines.append(_fit(Text(f"! {inert(frame.status)}", "bold yellow"), width))
    body = height - len(lines)
    ops = len(frame.requests) + 2
    table_w, side_w = columns(frame, width)
    if side_w:
        side: list[Text] = []
        subnets = min(len(frame.subnets) + 1, max(body // 3, 2))
        side += [*_subnet_lines(frame, side_w, subnets), Text()]
        api = min(ops, max(body - len(side) - 5, 2))
        side += [*_api_lines(frame, side_w, api), Text()]
        side += _event_lines(frame, side_w, max(body - len(side), 2))
        lines += _side_by_side(_node_lines(frame, table_w, body), side[:body], table_w, width)
    else:
        events = 5 if body >= 30 else 3
        pair = _subnets_min(frame) + 2 + _api_min(frame) <= width
        if pair:  # subnets and API side by side
            lower = min(max(len(frame.subnets) + 1, ops), max(body // 3, 3))
            subnets, below = lower, lower
        else:  # one above the other, each shorter
            subnets = min(len(frame.subnets) + 1, max(body // 7, 3))
            lower = min(ops, max(body // 5, 3))
            below = subnets + lower
        nodes = max(body - below - events - 2, 2)
        lines += [*_node_lines(frame, width, nodes), Text()]
        if pair:
            left = min(_subnets_min(frame) - GAUGE_MIN + 20, width - 2 - _api_min(frame))
            lines += _side_by_side(
                _subnet_lines(frame, left, subnets), _api_lines(frame, width - left - 2, lower), left, width
            )
        else:
            lines += [*_subnet_lines(frame, width, subnets), *_api_lines(frame, width, lower)]
        lines += [Text(), *_event_lines(frame, width, max(height - len(lines) - 1, 2))]
    return Group(*lines[:height])


# -- the live loop -------------------------------------------------------------------------------


@contextlib.contextmanager
def live(out: TextIO) -> Iterator[Callable[[Frame], None]]:
    """The terminal's alternate screen for the block, and a function drawing a frame on it at the
    terminal's size now (so a resize shows at the next frame). Leaving the block — at the end, on
    Ctrl-C, on an error — restores the screen and the cursor."""
    console = Console(file=out)
    with Live(
        console=console,
        screen=True,
        auto_refresh=False,
        redirect_stdout=False,
        redirect_stderr=False,
        vertical_overflow="crop",
    ) as view:

        def show(frame: Frame) -> None:
            size = console.size
            view.update(screen(frame, size.width, size.height), refresh=True)

        yield show


def final(frame: Frame, out: TextIO) -> None:
    """The last frame, printed once on the ordinary screen after the view closed, at the terminal's
    width and with every node: what the run ended with stays in the scrollback."""
    console = Console(file=out)
    height = len(frame.nodes) + len(frame.subnets) + len(frame.requests) + 16
    console.print(screen(frame, console.size.width, height), crop=True)


async def watch(
    manager: Callable[[], NodeManager | None],
    metrics: Metrics,
    *,
    clock: Clock,
    title: str,
    out: TextIO,
    stop: asyncio.Event,
    interval: float = 1.0,
) -> None:
    """The live view until ``stop`` is set: a frame every ``interval`` seconds, and at once after a
    resize; the last frame printed on the ordinary screen after."""
    watcher = Watcher(manager, metrics, clock=clock, title=title)
    last: list[Frame] = []
    resized = asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError, AttributeError):
        loop.add_signal_handler(signal.SIGWINCH, resized.set)
    try:
        with watcher.diverting():
            try:
                with live(out) as draw:
                    while not stop.is_set():
                        last[:] = [watcher.sample()]
                        draw(last[0])
                        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(resized.wait())]
                        try:
                            await asyncio.wait(waits, timeout=interval, return_when=asyncio.FIRST_COMPLETED)
                        finally:
                            for w in waits:
                                w.cancel()
                            resized.clear()
            finally:
                if last:
                    final(last[0], out)
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError, AttributeError):
            loop.remove_signal_handler(signal.SIGWINCH)
