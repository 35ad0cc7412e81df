"""``eni-ipam simulate --plot FILE``: a picture of a run, drawn from the objects ``--json`` prints.

One figure, four panels on the run's virtual time axis: each node's pool, used and needed addresses
(the most active nodes when there are many); free addresses per subnet; mutating API calls by
operation and the throttled requests (counts so far); and the steps that change the world (``set``,
``cloud``, ``add_node``, ``remove_node``) as marked events across every panel, with ``expect`` marked
held or failed. A value is known at the end of each step (what ``--json`` says), and is drawn as
holding until the next step's end.

Invariants: the figure is a pure function of the step objects, so a test reads its series and
marks back from the figure's data; the file's format is its extension's (``.svg``, ``.png``), and
an SVG is the same bytes for the same run (no date, fixed ids). matplotlib is imported here only,
with its Agg backend (no display): it comes with the ``plot`` extra (decision 0032).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMATS = (".svg", ".png")
"""The extensions ``--plot`` writes."""
TOP_NODES = 6
"""Nodes drawn at most: three lines each, more would not be read."""
EVENT_KINDS = ("set", "cloud", "add_node", "remove_node")
"""Steps drawn as events: those that change the world (converge and advance only let time pass)."""
MISSING = "--plot needs matplotlib, which the plot extra brings: pip install 'eni-ipam[plot]'"


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
    for step in steps:
        for name, node in step["nodes"].items():
            now = (node["available"], node["used"], node["needed"])
            before = last.get(name, (0, 0, 0))
            moved[name] = moved.get(name, 0) + sum(abs(a - b) for a, b in zip(now, before, strict=True))
            last[name] = now
    return sorted(moved, key=lambda n: (-moved[n], n))[:top]


def events(steps: Sequence[Mapping[str, Any]]) -> list[tuple[float, list[str]]]:
    """The steps drawn as events: each time with the kinds of the steps at it, in their order (steps
    at the same instant share one mark)."""
    out: list[tuple[float, list[str]]] = []
    for step in steps:
        if step["kind"] in EVENT_KINDS:
            x = float(step["time"])
            if out and out[-1][0] == x:
                out[-1][1].append(step["kind"])
            else:
                out.append((x, [step["kind"]]))
    return out


def _series(steps: Sequence[Mapping[str, Any]], read: Any) -> tuple[list[float], list[float]]:
    """The times and values of the steps ``read`` returns a value for (None: not there then)."""
    xs, ys = [], []
    for step in steps:
        value = read(step)
        if value is not None:
            xs.append(float(step["time"]))
            ys.append(float(value))
    return xs, ys


def figure(steps: Sequence[Mapping[str, Any]], *, title: str = "", top: int = TOP_NODES) -> Figure:
    """The run's figure. Each line's label names its series (``node1 pool``, ``node1 used``,
    ``node1 needed``, ``s-1 free``, an operation, ``throttled``); each event is a text annotation
    naming its step's kind at the step's time."""
    plt = _pyplot()
    fig: Figure
    fig, (pools, subnets, calls) = plt.subplots(3, 1, sharex=True, figsize=(10, 8.5), layout="constrained")
    fig.suptitle(title or "eni-ipam simulate", y=1.04)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    style: dict[str, Any] = {"drawstyle": "steps-post", "marker": ".", "markersize": 4}

    for n, name in enumerate(busiest(steps, top)):
        colour = colours[n % len(colours)]
        for key, label, line in (
            ("available", "pool", "-"),
            ("used", "used", "--"),
            ("needed", "needed", ":"),
        ):
            xs, ys = _series(steps, lambda s, k=key, n=name: s["nodes"].get(n, {}).get(k))
            pools.plot(xs, ys, line, color=colour, label=f"{name} {label}", **style)
    pools.set_ylabel("addresses per node\npool —, used - -, needed ···")

    names = sorted({sid for s in steps for sid in s.get("subnets", {})})
    for sid in names:
        xs, ys = _series(steps, lambda s, k=sid: s.get("subnets", {}).get(k))
        subnets.plot(xs, ys, label=f"{sid} free", **style)
    subnets.set_ylabel("free addresses")
    subnets.set_title("free addresses per subnet", loc="left", fontsize=9)

    operations = sorted(
        {op for s in steps for op in s["api_calls"] if not op.startswith(("Describe", "Resync"))}
    )
    for op in operations:
        xs, ys = _series(steps, lambda s, k=op: s["api_calls"].get(k, 0))
        calls.plot(xs, ys, label=op, **style)
    xs, ys = _series(steps, lambda s: sum(s.get("throttles", {}).values()))
    calls.plot(xs, ys, color="red", linewidth=2, label="throttled", **style)
    calls.set_ylabel("requests so far")
    calls.set_title("mutating API calls by operation, and throttled requests", loc="left", fontsize=9)
    calls.set_xlabel("virtual time (s)")

    for axes in (pools, subnets, calls):
        for step in steps:
            if step["kind"] in EVENT_KINDS:
                axes.axvline(float(step["time"]), color="grey", linewidth=0.8, linestyle="-.", zorder=0)
        if axes.lines:
            axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    for x, kinds in events(steps):
        pools.annotate(
            ", ".join(kinds), (x, 1.0), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
            va="bottom", ha="center", annotation_clip=False,
        )  # fmt: skip
    for step in steps:
        x = float(step["time"])
        if step["kind"] == "expect":
            held = not step.get("failures")
            pools.annotate(
                "✓" if held else "✗", (x, 0.0), xycoords=("data", "axes fraction"), fontsize=8,
                color="green" if held else "red", va="bottom", ha="center", annotation_clip=False,
            )  # fmt: skip
    return fig


def write(steps: Sequence[Mapping[str, Any]], path: str | Path, *, title: str = "") -> None:
    """The run's figure written to ``path``, in its extension's format."""
    fig = figure(steps, title=title)
    metadata = {"Date": None} if str(path).lower().endswith(".svg") else {}
    try:
        fig.savefig(path, metadata=metadata, dpi=110, bbox_inches="tight")
    finally:
        _pyplot().close(fig)
