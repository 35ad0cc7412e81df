"""The report's figures are drawn from a run's results alone: made-up results here, the next
`make bench` for real. Read back from the figures' data, not their pixels."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from matplotlib.patches import Rectangle

import bench.__main__ as bench_main
from bench import figures
from bench.agent_restart import RestartBench
from bench.api_efficiency import Phase, Steady
from bench.cni_plugin import BARE, PluginBench, Timing
from bench.convergence import Convergence
from bench.cpu_memory import Cpu, Memory
from bench.latency import Latency
from bench.report import Results, render


def _results() -> Results:
    event_ms = (0.2, 0.3, 0.25, 0.4, 9.0)
    return Results(
        machine={"CPU": "test", "cores": "2"},
        phases=[Phase("fresh cluster", 10, False, 20, 20, {"AssignPrivateIpAddresses": 20})],
        steady=[Steady(10, 0, 4.0, 4)],
        convergence=[Convergence(100, 30.0, 29.0, {}, 210.0), Convergence(1000, 240.0, 235.0, {}, 1700.0)],
        cpu=[Cpu(100, 0.001, 0.002), Cpu(1000, 0.01, 0.02), Cpu(10_000, 0.1, 0.2)],
        memory=[Memory(100, 40.0, 40.5), Memory(1000, 40.0, 43.0), Memory(10_000, 40.0, 70.0)],
        latency=Latency(50, len(event_ms), 0.3, 9.0, 9.0, tuple(sorted(event_ms))),
        plugin=PluginBench(
            3,
            "python3",
            {
                BARE: Timing(BARE, 8.0, 11.0, (7.5, 8.0, 11.0)),
                "eni-ipam-cni ADD": Timing("eni-ipam-cni ADD", 10.0, 15.0),  # an older run: no samples
            },
        ),
        restart=RestartBench(0, 10.0, [], skipped="not measured here"),
        seconds=1.0,
    )


def test_convergence_draws_each_size_against_its_bound_and_the_reference() -> None:
    fig = figures.convergence(_results().convergence)
    bars = [p for p in fig.axes[0].patches if isinstance(p, Rectangle)]
    assert [b.get_height() for b in bars] == [30.0, 240.0, 29.0, 235.0, 210.0, 1700.0]
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == [
        "eni-ipam",
        "bound of EC2's buckets",
        "reference model",
    ]


def test_latency_draws_the_samples_or_else_the_percentiles() -> None:
    results = _results()
    fig = figures.latency(results.latency, results.plugin)
    (event,) = fig.axes[0].get_lines()
    assert list(event.get_xdata()) == sorted(results.latency.samples_ms)
    assert list(event.get_ydata()) == [0.2, 0.4, 0.6, 0.8, 1.0]
    plugin = {line.get_label(): line for line in fig.axes[1].get_lines()}
    assert list(plugin[BARE].get_xdata()) == [7.5, 8.0, 11.0]
    assert list(plugin["eni-ipam-cni ADD (median, p99)"].get_xdata()) == [10.0, 15.0]


def test_growth_draws_every_size_beside_a_linear_line() -> None:
    results = _results()
    fig = figures.growth(results.cpu, results.memory)
    passes = {line.get_label(): list(line.get_ydata()) for line in fig.axes[0].get_lines()}
    assert passes["planning pass"] == [0.002, 0.02, 0.2]
    assert passes["linear in the nodes"] == [0.002, pytest.approx(0.2)]
    memory = {line.get_label(): list(line.get_ydata()) for line in fig.axes[1].get_lines()}
    assert memory["state"] == [pytest.approx(0.5), pytest.approx(3.0), pytest.approx(30.0)]


def test_a_full_run_writes_the_figures_its_report_links_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench_main, "run", lambda sizes: _results())
    out = tmp_path / "PERFORMANCE.md"
    bench_main.main(["--out", str(out)])
    text = out.read_text()
    for name in figures.NAMES.values():
        assert f"](img/{name})" in text
        assert ET.parse(tmp_path / "img" / name).getroot().tag == "{http://www.w3.org/2000/svg}svg"
    assert render(_results()) == text


def test_the_committed_report_links_only_to_figures_a_run_writes() -> None:
    report = Path(__file__).resolve().parents[2] / "docs" / "PERFORMANCE.md"
    linked = {
        line.split("](img/")[1].rstrip(")") for line in report.read_text().splitlines() if "](img/" in line
    }
    assert linked <= set(figures.NAMES.values())
