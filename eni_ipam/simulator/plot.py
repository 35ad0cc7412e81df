"""``eni-ipam simulate --plot FILE``: a picture of a run, drawn from the objects ``--json`` prints.

One figure, one panel per concern, on the run's virtual time axis (decision 0057):

- a strip of the **steps** that change the world (``set``, ``cloud``, ``add_node``, ``remove_node``),
  each labelled with its step number at the time it began (lanes keep labels apart; the strip's
  title is their key), and every ``expect``, held (✓) or failed (✗);
- one panel per **node** (the most active ones when there are many): its pool, used and needed
  addresses, each quantity in a colour, line style and marker of its own, so a need equal to a pool
  still shows;
- the **free addresses of each subnet**;
- the **mutating API calls** so far, by operation;
- the **throttled requests** so far, in a panel of their own.

Colours come from a fixed colour-blind-safe palette (Okabe–Ito, then Paul Tol's), one per meaning in
the figure: a pool, a subnet, an operation, the throttled requests and an expectation never share
one. Legends sit right of the panels, outside the data. Every step's step vertical line is drawn at
its ``start``; each figure is drawn where it changed: at the end of a step, and at each of the step's
``changes`` (what the simulator saw move while the step let time pass), so a change is not drawn late.

Invariants: the figure is a pure function of the step objects (older objects without ``start`` or
``changes`` are drawn with their end time), so a test reads its series and marks back from the
figure's data; the file's format is its extension's (``.svg``, ``.png``), and an SVG is the same
bytes for the same run (no date, fixed ids). matplotlib is imported here only, with its Agg backend
(no display): it comes with the ``plot`` extra (decision 0032).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import textwrap
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.text import Text

FORMATS = (".svg", ".png")
"""The extensions ``--plot`` writes."""
TOP_NODES = 6
"""Nodes drawn at most, a panel each: more would not be read."""
EVENT_KINDS = ("set", "cloud", "add_node", "remove_node")
"""Steps drawn as events: those that change the world (converge and advance only let time pass)."""
READS = ("Describe", "Resync")
"""Operations not drawn: they only read."""
MISSING = "--plot needs matplotlib, which the plot extra brings: pip install 'eni-ipam[plot]'"

QUANTITIES = (("available", "pool"), ("used", "used"), ("needed", "needed"))
"""A node's drawn keys and the names its lines carry (``node1 pool``)."""
FIXED = {
    "pool": "#0072B2",  # Okabe–Ito blue
    "used": "#009E73",  # Okabe–Ito bluish green
    "needed": "#D55E00",  # Okabe–Ito vermillion
    "throttled": "#000000",
    "expect held": "#117733",  # Tol green
    "expect failed": "#882255",  # Tol wine
}
"""The colours of the meanings every figure has."""
PALETTE = (
    "#E69F00",  # Okabe–Ito orange
    "#56B4E9",  # Okabe–Ito sky blue
    "#CC79A7",  # Okabe–Ito reddish purple
    "#332288",  # Tol indigo
    "#DDCC77",  # Tol sand
    "#AA4499",  # Tol purple
    "#44AA99",  # Tol teal
    "#CC6677",  # Tol rose
    "#999933",  # Tol olive
    "#88CCEE",  # Tol cyan
    "#661100",  # Tol dark brown
    "#6699CC",  # Tol light indigo
    "#F0E442",  # Okabe–Ito yellow
)
"""Colours for the subnets then the operations, in order: none is a colour of :data:`FIXED`. Past its
end (more than 13 subnets and operations in one run) colours repeat, told apart by marker and line
style alone."""
EVENT_GREY = "#8C8C8C"
"""The steps' vertical lines: grey, a colour no series has."""
STYLE = {"pool": ("-", "o"), "used": ("--", "s"), "needed": (":", "^"), "throttled": ("-", "X")}
"""Line style and marker of the fixed quantities."""
MARKERS = ("D", "v", "P", "*", "h", "<", ">", "p", "d", "H", "8")
LINESTYLES = ("-", "--", "-.", ":")
LEGEND: dict[str, Any] = {
    "loc": "upper left",
    "bbox_to_anchor": (1.01, 1.0),
    "borderaxespad": 0.0,
    "fontsize": 8,
}
"""Every legend: right of its panel, outside the data."""


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def check_path(path: str) -> str:
    """``path`` if ``--plot`` can write its format; otherwise a ValueError saying what it takes."""
    if Path(path).suffix.lower() not in FORMATS:
        raise ValueError(f"{path!r}: the format follows the extension, one of {', '.join(FORMATS)}")
    return path


def available() -> None:
    """Raises :class:`PlotUnavailable` (naming the extra) when matplotlib is not installed."""
    _pyplot()


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable(MISSING) from None
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "eni-ipam"  # the same ids, so the same bytes, every run
    import matplotlib.pyplot as plt

    return plt


def busiest(steps: Sequence[Mapping[str, Any]], top: int = TOP_NODES) -> list[str]:
    """The ``top`` nodes whose pool, use or need moved most over the run (ties by name)."""
    moved: dict[str, int] = {}
    last: dict[str, tuple[int, int, int]] = {}
    for sample in samples(steps):
        for name, node in sample["nodes"].items():
            now = (node["available"], node["used"], node["needed"])
            before = last.get(name, (0, 0, 0))
            moved[name] = moved.get(name, 0) + sum(abs(a - b) for a, b in zip(now, before, strict=True))
            last[name] = now
    return sorted(moved, key=lambda n: (-moved[n], n))[:top]


def start(step: Mapping[str, Any]) -> float:
    """When the step began (its ``time`` for an object written before ``start`` was)."""
    return float(step.get("start", step["time"]))


def samples(steps: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """Every moment the figures are known, in time order: each step's ``changes``, then its end."""
    for step in steps:
        yield from step.get("changes", ())
        yield step


def events(steps: Sequence[Mapping[str, Any]]) -> list[tuple[float, list[int]]]:
    """The steps drawn as events: each start time with the numbers of the steps that began then, in
    their order (steps at the same instant share one label)."""
    out: list[tuple[float, list[int]]] = []
    for step in steps:
        if step["kind"] in EVENT_KINDS:
            x = start(step)
            if out and out[-1][0] == x:
                out[-1][1].append(int(step["step"]))
            else:
                out.append((x, [int(step["step"])]))
    return out


def key(steps: Sequence[Mapping[str, Any]]) -> str:
    """The step strip's key: each numbered step and its kind."""
    return "steps: " + " · ".join(f"{s['step']} {s['kind']}" for s in steps if s["kind"] in EVENT_KINDS)


def _series(
    steps: Sequence[Mapping[str, Any]], read: Callable[[Mapping[str, Any]], Any]
) -> tuple[list[float], list[float]]:
    """The times and values of the samples ``read`` returns a value for (None: not there then)."""
    xs, ys = [], []
    for sample in samples(steps):
        value = read(sample)
        if value is not None:
            xs.append(float(sample["time"]))
            ys.append(float(value))
    return xs, ys


def _node(name: str, field: str) -> Callable[[Mapping[str, Any]], Any]:
    """Reads a node's figure from a sample (None: the node is not there then)."""
    return lambda sample: sample["nodes"].get(name, {}).get(field)


def _entry(section: str, key: str, default: Any) -> Callable[[Mapping[str, Any]], Any]:
    """Reads ``sample[section][key]`` (``default`` when it has none)."""
    return lambda sample: sample.get(section, {}).get(key, default)


def operations(steps: Sequence[Mapping[str, Any]]) -> list[str]:
    """The mutating operations the run called, by name."""
    return sorted({op for s in samples(steps) for op in s.get("api_calls", {}) if not op.startswith(READS)})


def subnets(steps: Sequence[Mapping[str, Any]]) -> list[str]:
    return sorted({sid for s in samples(steps) for sid in s.get("subnets", {})})


def figure(steps: Sequence[Mapping[str, Any]], *, title: str = "", top: int = TOP_NODES) -> Figure:
    """The run's figure. Each axes has a label naming its concern (``steps``, ``node node1``,
    ``subnets``, ``api calls``, ``throttled``); each line's label names its series (``node1 pool``,
    ``node1 used``, ``node1 needed``, ``s-1 free``, an operation, ``throttled``, ``expect held``,
    ``expect failed``); each step label is a text of the ``steps`` axes whose text is its step
    numbers, at their start."""
    plt = _pyplot()
    nodes = busiest(steps, top)
    heights = [STRIP_INCHES] + [1.15] * len(nodes) + [1.5, 1.9, 1.0]
    fig: Figure = plt.figure(figsize=(FIGURE_WIDTH, sum(heights) + 1.0), layout="constrained")
    grid = fig.add_gridspec(len(heights), 1, height_ratios=heights)
    strip = fig.add_subplot(grid[0])
    panels: list[Axes] = [fig.add_subplot(grid[n], sharex=strip) for n in range(1, len(heights))]
    fig.suptitle(title or "eni-ipam simulate")
    colours = itertools.chain(PALETTE, itertools.cycle(PALETTE))
    markers = itertools.cycle(MARKERS)
    styles = itertools.cycle(LINESTYLES)

    def draw(axes: Axes, xs: list[float], ys: list[float], **kw: Any) -> None:
        """A series as steps, marked where it changed (and where it starts)."""
        kw.setdefault("linewidth", 1.6)
        moved = [n for n, y in enumerate(ys) if n == 0 or y != ys[n - 1]]
        axes.plot(xs, ys, drawstyle="steps-post", markersize=5, markevery=moved, **kw)

    for axes, name in zip(panels, nodes, strict=False):
        axes.set_label(f"node {name}")
        for order, (field, label) in enumerate(QUANTITIES):
            xs, ys = _series(steps, _node(name, field))
            line, marker = STYLE[label]
            draw(
                axes, xs, ys, color=FIXED[label], linestyle=line, marker=marker, label=f"{name} {label}",
                zorder=2 + order, linewidth=2.4 if label == "needed" else 1.6,
            )  # fmt: skip
        axes.set_ylabel(f"{name}\naddresses", fontsize=9)
    if nodes:
        first = panels[0]
        first.legend(first.get_lines(), ["pool", "used", "needed (unmet)"], title="each node", **LEGEND)
        first.set_title("each node's pool, used and needed addresses", loc="left", fontsize=9)

    free, calls, throttled = panels[len(nodes) :]
    free.set_label("subnets")
    for sid in subnets(steps):
        xs, ys = _series(steps, _entry("subnets", sid, None))
        draw(free, xs, ys, color=next(colours), marker=next(markers), label=f"{sid} free")
    free.set_ylabel("free addresses", fontsize=9)
    free.set_title("free addresses per subnet", loc="left", fontsize=9)

    calls.set_label("api calls")
    for op in operations(steps):
        xs, ys = _series(steps, _entry("api_calls", op, 0))
        draw(calls, xs, ys, color=next(colours), marker=next(markers), linestyle=next(styles), label=op)
    calls.set_ylabel("calls so far", fontsize=9)
    calls.set_title("mutating API calls by operation", loc="left", fontsize=9)

    throttled.set_label("throttled")
    xs, ys = _series(steps, lambda s: sum(s.get("throttles", {}).values()))
    line, marker = STYLE["throttled"]
    draw(
        throttled, xs, ys, color=FIXED["throttled"], marker=marker, linestyle=line, label="throttled",
        linewidth=2.0,
    )  # fmt: skip
    throttled.set_ylabel("requests so far", fontsize=9)
    throttled.set_title("throttled requests (the cloud's rate limit)", loc="left", fontsize=9)
    throttled.set_xlabel("virtual time (s)")

    for axes in (free, calls, throttled):
        if axes.get_lines():
            axes.legend(**LEGEND)
    for axes in panels:
        for x, _ in events(steps):
            axes.axvline(x, color=EVENT_GREY, linewidth=0.8, linestyle=(0, (4, 3)), zorder=0)
        axes.grid(axis="y", color="#E5E5E5", linewidth=0.6)
        axes.tick_params(labelsize=8, labelbottom=axes is throttled)
        axes.margins(x=0.01)
    _strip(strip, steps)
    _stagger(fig, strip)
    return fig


FIGURE_WIDTH = 11.0
"""Inches: about 7.5 of them for the panels' data, the rest for the axis labels and legends."""
EXPECT_INCHES, LANE_INCHES, LANE_GAP = 0.2, 0.36, 0.04
"""In the steps strip, from its bottom: the middle of the expectations' row, the bottom of the first
lane of step labels; and the gap between two lanes."""
STRIP_INCHES = 0.62
"""The strip's height with one lane of labels: each more lane adds a label's height and a gap."""


LABEL_BOX = {"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": EVENT_GREY, "linewidth": 0.6}


def _strip(strip: Axes, steps: Sequence[Mapping[str, Any]]) -> None:
    """The steps strip: numbered labels at their start, expectations as large marks, its key."""
    strip.set_label("steps")
    strip.set_ylim(0.0, 1.0)
    for x, numbers in events(steps):
        strip.axvline(x, color=EVENT_GREY, linewidth=0.8, linestyle=(0, (4, 3)), zorder=0)
        strip.text(
            x, 0.5, " ".join(str(n) for n in numbers), ha="center", va="bottom", fontsize=8,
            bbox=LABEL_BOX, gid="step-label",
        )  # fmt: skip
    expects = [s for s in steps if s["kind"] == "expect"]
    for held, marker, label in ((True, "$\u2713$", "expect held"), (False, "X", "expect failed")):
        xs = [start(s) for s in expects if (not s.get("failures")) is held]
        strip.plot(
            xs, [0.2] * len(xs), linestyle="none", marker=marker, markersize=11, color=FIXED[label],
            label=label,
        )  # fmt: skip
    strip.legend(title="expectations", **LEGEND)
    strip.tick_params(labelbottom=False, labelsize=8, left=False)
    strip.set_title("\n".join(textwrap.wrap(key(steps), 140)) or "steps: none", loc="left", fontsize=8)
    for side in ("top", "right", "left"):
        strip.spines[side].set_visible(False)


def step_labels(strip: Axes) -> list[Text]:
    """The step labels of the strip, as drawn."""
    return [t for t in strip.texts if t.get_gid() == "step-label"]


def _stagger(fig: Figure, strip: Axes) -> None:
    """Puts the step labels in lanes, from their drawn sizes: a label goes to the lowest lane where
    it overlaps no other, the strip and the figure grow by the lanes added, and a label's x never
    moves (the panels' widths, so the labels' x and widths, do not depend on the heights)."""
    labels = sorted(step_labels(strip), key=lambda t: t.get_position()[0])
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    boxes = [label.get_window_extent(renderer) for label in labels]
    lanes: list[float] = []  # each lane's rightmost pixel so far
    placed = []
    for box in boxes:
        lane = next((n for n, right in enumerate(lanes) if box.x0 > right + 3), len(lanes))
        lanes[lane : lane + 1] = [box.x1]
        placed.append(lane)
    label_inches = max((box.height for box in boxes), default=0.0) / fig.dpi + LANE_GAP
    needed = LANE_INCHES + len(lanes) * label_inches + LANE_GAP
    for _ in range(4):  # the layout's margins hardly move: two rounds usually settle it
        short = needed - strip.get_window_extent(renderer).height / fig.dpi
        if short <= 0.005:
            break
        grid = strip.get_subplotspec().get_gridspec()  # type: ignore[union-attr]
        ratios = [float(r) for r in cast(Sequence[float], grid.get_height_ratios())]
        width, height = fig.get_size_inches()
        axes_inches = sum(a.get_window_extent(renderer).height for a in fig.axes) / fig.dpi
        ratios[0] += short * sum(ratios) / axes_inches  # ratios in the axes' own inches
        grid.set_height_ratios(ratios)
        fig.set_size_inches(width, height + short)
        fig.draw_without_rendering()
    inches = strip.get_window_extent(renderer).height / fig.dpi
    for label, lane in zip(labels, placed, strict=True):
        label.set_y((LANE_INCHES + lane * label_inches) / inches)
    expect_y = EXPECT_INCHES / inches
    for line in strip.get_lines():
        if str(line.get_label()).startswith("expect"):
            line.set_ydata([expect_y] * len(cast(Sequence[float], line.get_xdata())))
    strip.set_yticks([expect_y, (LANE_INCHES + label_inches / 2) / inches], ["expect", "step"], fontsize=8)


def digest(steps: Sequence[Mapping[str, Any]]) -> str:
    """A digest of the step objects, which an SVG carries in its metadata: whether a picture shows
    a run can be checked whatever matplotlib drew it."""
    text = json.dumps(list(steps), sort_keys=True, default=str, separators=(",", ":"))
    return "steps sha256 " + hashlib.sha256(text.encode()).hexdigest()


def write(steps: Sequence[Mapping[str, Any]], path: str | Path, *, title: str = "") -> None:
    """The run's figure written to ``path``, in its extension's format."""
    fig = figure(steps, title=title)
    svg = str(path).lower().endswith(".svg")
    metadata = {"Date": None, "Description": digest(steps)} if svg else {}
    try:
        fig.savefig(path, metadata=metadata, dpi=110)
    finally:
        _pyplot().close(fig)
