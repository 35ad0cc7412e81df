"""The figures of docs/PERFORMANCE.md that read better as pictures, drawn from a run's results.

* **convergence**: seconds to converge against the bound EC2's buckets allow and the reference
  model, per cluster size (section 2);
* **latency**: the distributions of event-to-IPs (section 4) and of the CNI plugin's ADD and DEL
  against the bare interpreter and host-local (section 5): each as the share of samples within a
  time, from the samples when the run kept them, otherwise from the percentiles it reported;
* **growth**: resync and planning pass and state memory against cluster size, beside a line that
  grows as the nodes do (section 3).

Each is a pure function of :class:`bench.report.Results` (the tests draw them from small made-up
results); :func:`draw` writes them as SVG into ``docs/img/`` beside the report, which
:data:`NAMES` lets the report link to. matplotlib's Agg backend: no display needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.cni_plugin import PluginBench
from bench.convergence import Convergence
from bench.cpu_memory import Cpu, Memory
from bench.latency import Latency

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from bench.report import Results

NAMES = {
    "convergence": "performance-convergence.svg",
    "latency": "performance-latency.svg",
    "growth": "performance-growth.svg",
}
"""Each figure's file in ``docs/img/``."""


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "eni-ipam-bench"
    import matplotlib.pyplot as plt

    return plt


def convergence(runs: Sequence[Convergence]) -> Figure:
    """Bars per cluster size: converged, the bucket bound, the reference model (log scale)."""
    plt = _pyplot()
    fig: Figure
    fig, axes = plt.subplots(figsize=(7, 4), layout="constrained")
    width = 0.27
    xs = list(range(len(runs)))
    series = [
        ("eni-ipam", [r.seconds for r in runs]),
        ("bound of EC2's buckets", [r.bound for r in runs]),
        ("reference model", [r.reference_seconds or 0.0 for r in runs]),
    ]
    for n, (label, values) in enumerate(series):
        bars = axes.bar([x + (n - 1) * width for x in xs], values, width, label=label)
        axes.bar_label(bars, fmt="%.0f", fontsize=7)
    axes.set_xticks(xs, [f"{r.nodes:,} nodes" for r in runs])
    axes.set_yscale("log")
    axes.set_ylabel("seconds to converge (virtual time)")
    axes.set_title("Convergence of a fresh cluster under EC2's token buckets", fontsize=10)
    axes.legend(fontsize=8)
    return fig


def _ecdf(samples_ms: Sequence[float]) -> tuple[list[float], list[float]]:
    ordered = sorted(samples_ms)
    return ordered, [(n + 1) / len(ordered) for n in range(len(ordered))]


def _from_percentiles(points: Mapping[float, float]) -> tuple[list[float], list[float]]:
    """Share → milliseconds, as a cumulative curve through the reported percentiles."""
    shares = sorted(points)
    return [points[s] for s in shares], shares


def latency(event: Latency, plugin: PluginBench) -> Figure:
    """The share of samples within a time: event to IPs, and each CNI plugin measurement."""
    plt = _pyplot()
    fig: Figure
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    if event.samples_ms:
        xs, ys = _ecdf(event.samples_ms)
        left.plot(xs, ys, drawstyle="steps-post", label=f"{event.events} events")
    else:
        xs, ys = _from_percentiles({0.5: event.p50_ms, 0.99: event.p99_ms, 1.0: event.max_ms})
        left.plot(xs, ys, marker="o", label=f"{event.events} events (p50, p99, max)")
    left.set_xscale("log")
    left.set_xlabel("event to allocation call (ms)")
    left.set_ylabel("share of events within")
    left.set_title(f"Event to IPs, {event.nodes:,} nodes", fontsize=10)
    left.legend(fontsize=8, loc="lower right")
    for key, timing in plugin.timings.items():
        if timing.samples_ms:
            xs, ys = _ecdf(timing.samples_ms)
            right.plot(xs, ys, drawstyle="steps-post", label=key)
        else:
            xs, ys = _from_percentiles({0.5: timing.median_ms, 0.99: timing.p99_ms})
            right.plot(xs, ys, marker="o", label=f"{key} (median, p99)")
    right.set_xlabel("exec to exit (ms)")
    right.set_title("CNI plugin ADD and DEL" + (f": {plugin.skipped}" if plugin.skipped else ""), fontsize=10)
    if plugin.timings:
        right.legend(fontsize=7, loc="lower right")
    for axes in (left, right):
        axes.set_ylim(0, 1.02)
        axes.grid(alpha=0.3)
    return fig


def growth(cpus: Sequence[Cpu], memories: Sequence[Memory]) -> Figure:
    """Each figure against the nodes (log-log), with a line growing as the nodes from the smallest."""
    plt = _pyplot()
    fig: Figure
    fig, (passes, memory) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    nodes = [c.nodes for c in cpus]
    for label, values in (
        ("resync pass", [c.resync_seconds for c in cpus]),
        ("planning pass", [c.plan_seconds for c in cpus]),
    ):
        passes.plot(nodes, values, marker="o", label=label)
    passes.set_ylabel("seconds (one core)")
    mem_nodes = [m.nodes for m in memories]
    memory.plot(mem_nodes, [m.state_mb for m in memories], marker="o", label="state")
    memory.plot(mem_nodes, [m.rss_mb for m in memories], marker="o", label="process RSS")
    memory.set_ylabel("MB")
    for axes in (passes, memory):
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel("nodes")
        axes.grid(alpha=0.3, which="both")
    if cpus:
        base = min(cpus, key=lambda c: c.nodes)
        top = max(c.nodes for c in cpus)
        passes.plot(
            [base.nodes, top],
            [base.plan_seconds, base.plan_seconds * top / base.nodes],
            ":",
            color="grey",
            label="linear in the nodes",
        )
    if memories:
        base_m = min(memories, key=lambda m: m.nodes)
        top = max(m.nodes for m in memories)
        memory.plot(
            [base_m.nodes, top],
            [base_m.state_mb, base_m.state_mb * top / base_m.nodes],
            ":",
            color="grey",
            label="linear in the nodes",
        )
    passes.set_title("Passes over every node", fontsize=10)
    memory.set_title("Memory held", fontsize=10)
    passes.legend(fontsize=8)
    memory.legend(fontsize=8)
    return fig


def figures(results: Results) -> dict[str, Figure]:
    """Every figure of a run, by name (:data:`NAMES`)."""
    return {
        "convergence": convergence(results.convergence),
        "latency": latency(results.latency, results.plugin),
        "growth": growth(results.cpu, results.memory),
    }


def draw(results: Results, directory: Path) -> list[Path]:
    """The run's figures written as SVG into ``directory``; their paths."""
    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, fig in figures(results).items():
        path = directory / NAMES[name]
        try:
            fig.savefig(path, metadata={"Date": None}, bbox_inches="tight")
        finally:
            plt.close(fig)
        written.append(path)
    return written


def link(name: str, alt: str) -> list[str]:
    """The report's lines showing figure ``name``."""
    return [f"![{alt}](img/{NAMES[name]})", ""]
