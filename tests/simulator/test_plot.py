"""``eni-ipam simulate --plot``: on every example scenario the figure holds the run's series and
steps, read back from the figure's data and compared with what ``--json`` prints; the files are
valid SVG and PNG; a bad option changes nothing and names itself."""

from __future__ import annotations

import json
import struct
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure

from eni_ipam.cli import main
from eni_ipam.simulator import plot

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "scenarios").glob("*.yaml"))


def _json_steps(path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """The objects ``simulate --json`` prints for the scenario."""
    assert main(["simulate", str(path), "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _lines(fig: Figure, axes: int) -> dict[str, tuple[list[float], list[float]]]:
    return {
        str(line.get_label()): ([float(x) for x in line.get_xdata()], [float(y) for y in line.get_ydata()])
        for line in fig.axes[axes].get_lines()
        if not str(line.get_label()).startswith("_")
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_the_figure_holds_the_runs_series_and_steps(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = _json_steps(path, capsys)
    fig = plot.figure(steps)
    times = [float(s["time"]) for s in steps]

    pools = _lines(fig, 0)
    nodes = plot.busiest(steps)
    assert nodes and len(pools) == 3 * len(nodes)
    for name in nodes:
        for key, label in (("available", "pool"), ("used", "used"), ("needed", "needed")):
            there = [s for s in steps if name in s["nodes"]]  # a node added or removed by a step
            wanted = ([float(s["time"]) for s in there], [float(s["nodes"][name][key]) for s in there])
            assert pools[f"{name} {label}"] == wanted

    subnets = _lines(fig, 1)
    named = sorted({sid for s in steps for sid in s["subnets"]})
    assert sorted(subnets) == [f"{sid} free" for sid in named]
    for sid in named:
        seen = [s for s in steps if sid in s["subnets"]]
        assert subnets[f"{sid} free"] == (
            [float(s["time"]) for s in seen],
            [float(s["subnets"][sid]) for s in seen],
        )

    calls = _lines(fig, 2)
    for op in {op for s in steps for op in s["api_calls"] if not op.startswith(("Describe", "Resync"))}:
        assert calls[op] == (times, [float(s["api_calls"].get(op, 0)) for s in steps])
    assert calls["throttled"] == (times, [float(sum(s["throttles"].values())) for s in steps])

    marks = [(float(a.xy[0]), a.get_text()) for a in fig.axes[0].texts]
    changes = [(float(s["time"]), s["kind"]) for s in steps if s["kind"] in plot.EVENT_KINDS]
    drawn = [(x, kind) for x, text in marks if text not in ("✓", "✗") for kind in text.split(", ")]
    assert drawn == changes
    held = [x for x, text in marks if text == "✓"]
    assert held == [float(s["time"]) for s in steps if s["kind"] == "expect"]
    plot._pyplot().close(fig)


def test_a_throttled_run_draws_its_throttles(capsys: pytest.CaptureFixture[str]) -> None:
    steps = _json_steps(ROOT / "examples" / "scenarios" / "throttled.yaml", capsys)
    assert steps[-1]["throttles"] == {"AssignPrivateIpAddresses": 2}
    fig = plot.figure(steps)
    assert _lines(fig, 2)["throttled"][1][-1] == 2.0
    plot._pyplot().close(fig)


def test_the_svg_is_xml_and_the_same_for_the_same_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = ROOT / "examples" / "scenarios" / "busy_morning.yaml"
    first, second = tmp_path / "a.svg", tmp_path / "b.svg"
    assert main(["simulate", str(scenario), "--plot", str(first)]) == 0
    assert f"21 steps drawn to {first}" in capsys.readouterr().out
    assert main(["simulate", str(scenario), "--plot", str(second)]) == 0
    root = ET.parse(first).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert first.read_bytes() == second.read_bytes()


def test_the_png_is_a_png_of_a_readable_size(tmp_path: Path) -> None:
    out = tmp_path / "run.png"
    assert main(["simulate", str(ROOT / "examples" / "scenarios" / "release.yaml"), "--plot", str(out)]) == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 800 and height >= 600


def test_a_failed_run_is_drawn_up_to_its_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "fails.yaml"
    text = (ROOT / "examples" / "scenarios" / "basics.yaml").read_text()
    scenario.write_text(text.replace("available: 10, used: 0", "available: 11, used: 0"))
    out = tmp_path / "run.svg"
    assert main(["simulate", str(scenario), "--plot", str(out)]) == 1
    assert "2 steps drawn" in capsys.readouterr().out
    ET.parse(out)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("run.pdf", "argument --plot: 'run.pdf': the format follows the extension, one of .svg, .png"),
        ("missing/run.svg", "argument --plot: no directory 'missing' to write missing/run.svg in"),
    ],
)
def test_a_bad_plot_option_exits_2_naming_it_and_runs_nothing(
    target: str,
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit:
        main(["simulate", str(ROOT / "examples" / "scenarios" / "basics.yaml"), "--plot", target])
    assert exit.value.code == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""
    assert list(tmp_path.iterdir()) == []


def test_without_matplotlib_the_error_names_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing() -> None:
        raise plot.PlotUnavailable(plot.MISSING)

    monkeypatch.setattr(plot, "_pyplot", missing)
    with pytest.raises(SystemExit) as exit:
        main(
            [
                "simulate",
                str(ROOT / "examples" / "scenarios" / "basics.yaml"),
                "--plot",
                str(tmp_path / "x.svg"),
            ]
        )
    assert exit.value.code == 2
    assert "pip install 'eni-ipam[plot]'" in capsys.readouterr().err
