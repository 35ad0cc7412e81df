"""``eni-ipam simulate --plot``: on every example scenario the figure holds the run's series and
steps, read back from the figure's data and compared with what ``--json`` prints; the files are
valid SVG and PNG; a bad option changes nothing and names itself."""

from __future__ import annotations

import itertools
import json
import re
import struct
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import matplotlib.colors
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from eni_ipam.cli import main
from eni_ipam.simulator import plot

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "scenarios").glob("*.yaml"))


def _json_steps(path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """The objects ``simulate --json`` prints for the scenario."""
    assert main(["simulate", str(path), "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _axes(fig: Figure, label: str) -> Axes:
    return next(a for a in fig.axes if a.get_label() == label)


def _lines(axes: Axes) -> dict[str, tuple[list[float], list[float]]]:
    return {
        str(line.get_label()): (_floats(line.get_xdata()), _floats(line.get_ydata()))
        for line in axes.get_lines()
        if not str(line.get_label()).startswith("_")
    }


def _floats(data: Any) -> list[float]:
    return [float(v) for v in data]


def _moments(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every moment the step objects know the figures at: each step's changes, then its end."""
    return [moment for s in steps for moment in [*s["changes"], s]]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_the_figure_holds_the_runs_series_and_steps(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = _json_steps(path, capsys)
    fig = plot.figure(steps)
    moments = _moments(steps)
    times = [float(m["time"]) for m in moments]

    nodes = plot.busiest(steps)
    assert nodes
    for name in nodes:
        pools = _lines(_axes(fig, f"node {name}"))
        assert len(pools) == 3
        for key, label in (("available", "pool"), ("used", "used"), ("needed", "needed")):
            there = [m for m in moments if name in m["nodes"]]  # a node added or removed by a step
            wanted = ([float(m["time"]) for m in there], [float(m["nodes"][name][key]) for m in there])
            assert pools[f"{name} {label}"] == wanted

    subnets = _lines(_axes(fig, "subnets"))
    named = sorted({sid for m in moments for sid in m["subnets"]})
    assert sorted(subnets) == [f"{sid} free" for sid in named]
    for sid in named:
        seen = [m for m in moments if sid in m["subnets"]]
        assert subnets[f"{sid} free"] == (
            [float(m["time"]) for m in seen],
            [float(m["subnets"][sid]) for m in seen],
        )

    calls = _lines(_axes(fig, "api calls"))
    for op in {op for s in steps for op in s["api_calls"] if not op.startswith(("Describe", "Resync"))}:
        assert calls[op] == (times, [float(m["api_calls"].get(op, 0)) for m in moments])
    throttled = _lines(_axes(fig, "throttled"))
    assert throttled["throttled"] == (times, [float(sum(m["throttles"].values())) for m in moments])

    strip = _axes(fig, "steps")
    labels = plot.step_labels(strip)
    drawn = [(float(t.get_position()[0]), int(n)) for t in labels for n in t.get_text().split()]
    assert drawn == [(float(s["start"]), s["step"]) for s in steps if s["kind"] in plot.EVENT_KINDS]
    marks = _lines(strip)
    assert marks["expect held"][0] == [float(s["start"]) for s in steps if s["kind"] == "expect"]
    assert marks["expect failed"][0] == []
    plot._pyplot().close(fig)


def test_a_throttled_run_draws_its_throttles(capsys: pytest.CaptureFixture[str]) -> None:
    steps = _json_steps(ROOT / "examples" / "scenarios" / "throttled.yaml", capsys)
    assert steps[-1]["throttles"] == {"AssignPrivateIpAddresses": 2}
    fig = plot.figure(steps)
    assert _lines(_axes(fig, "throttled"))["throttled"][1][-1] == 2.0
    plot._pyplot().close(fig)


# -- readable at a glance (the reported defects, item 8) ------------------------------------------


@pytest.fixture(scope="module")
def morning() -> list[dict[str, Any]]:
    """busy_morning.yaml's step objects, as ``--json`` prints them."""
    from eni_ipam.simulator.scenario import load_scenario
    from eni_ipam.simulator.simulate import simulate

    outcome = simulate(load_scenario(str(ROOT / "examples" / "scenarios" / "busy_morning.yaml")))
    return [json.loads(json.dumps(r.record(), default=str)) for r in outcome.results]


def _meaning(axes: Axes, label: str) -> str:
    """What a line stands for: a node's quantity is the same meaning in every node's panel."""
    if str(axes.get_label()).startswith("node "):
        return label.split(" ", 1)[1]
    return label


@pytest.mark.parametrize("name", ["busy_morning", "dual_stack", "throttled", "add_and_remove_nodes"])
def test_no_colour_stands_for_two_meanings(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    steps = _json_steps(ROOT / "examples" / "scenarios" / f"{name}.yaml", capsys)
    fig = plot.figure(steps)
    meanings: dict[str, set[str]] = {}
    for axes in fig.axes:
        for line in axes.get_lines():
            label = str(line.get_label())
            if not label.startswith("_"):
                colour = matplotlib.colors.to_hex(line.get_color())
                meanings.setdefault(colour, set()).add(_meaning(axes, label))
    shared = {colour: m for colour, m in meanings.items() if len(m) > 1}
    assert not shared, shared
    assert "throttled" in meanings[plot.FIXED["throttled"]]
    plot._pyplot().close(fig)


def test_need_never_hides_under_a_pool_of_the_same_value(morning: list[dict[str, Any]]) -> None:
    """node2's need and pool are both 14 and 8 at times: the need differs in colour, line style and
    marker, is drawn above, and no two nodes share a panel."""
    fig = plot.figure(morning)
    for name in plot.busiest(morning):
        lines = {str(line.get_label()): line for line in _axes(fig, f"node {name}").get_lines()}
        pool, used, need = (lines[f"{name} {q}"] for q in ("pool", "used", "needed"))
        for a, b in itertools.combinations((pool, used, need), 2):
            assert a.get_color() != b.get_color()
            assert a.get_linestyle() != b.get_linestyle()
            assert a.get_marker() != b.get_marker()
        assert need.get_zorder() > pool.get_zorder() and need.get_linewidth() > pool.get_linewidth()
    assert len({a.get_label() for a in fig.axes if str(a.get_label()).startswith("node ")}) == 3
    plot._pyplot().close(fig)


def test_steps_are_drawn_at_their_start_and_changes_at_their_time(morning: list[dict[str, Any]]) -> None:
    """A step's mark is at its start; what moved inside a long step is drawn where it moved, not at
    the step's end: the pools shrink 30 s after the pods leave (the release delay), not 120 s later."""
    fig = plot.figure([{**s, "time": s["time"] + 5.0} if s["kind"] == "set" else s for s in morning])
    strip = _axes(fig, "steps")
    xs = sorted({float(t.get_position()[0]) for t in plot.step_labels(strip)})
    assert xs == sorted({float(s["start"]) for s in morning if s["kind"] in plot.EVENT_KINDS})
    plot._pyplot().close(fig)

    leave = next(s for s in morning if s["kind"] == "set" and s["nodes"]["node1"]["used"] == 2)
    after = morning[morning.index(leave) + 1]
    assert after["kind"] == "advance" and after["time"] - after["start"] == pytest.approx(120.0)
    fig = plot.figure(morning)
    xs, ys = _lines(_axes(fig, "node node1"))["node1 pool"]
    shrunk = xs[ys.index(10.0)]
    assert leave["start"] + 30 <= shrunk < leave["start"] + 35, (shrunk, leave["start"])
    plot._pyplot().close(fig)


def test_the_records_gain_start_and_changes_and_keep_every_key(morning: list[dict[str, Any]]) -> None:
    for step in morning:
        assert {"step", "kind", "time", "failures", "nodes", "api_calls", "subnets", "throttles"} <= set(step)
        assert step["start"] <= step["time"]
        for change in step["changes"]:
            assert step["start"] <= change["time"] < step["time"]
            assert set(change) == {"time", "nodes", "api_calls", "subnets", "throttles"}
    instant = [s for s in morning if s["kind"] in (*plot.EVENT_KINDS, "expect")]
    assert all(s["start"] == s["time"] and not s["changes"] for s in instant)
    assert [s["start"] for s in morning[1:]] == [s["time"] for s in morning[:-1]], "steps follow each other"


def test_an_old_record_without_start_or_changes_is_still_drawn(morning: list[dict[str, Any]]) -> None:
    old = [{k: v for k, v in s.items() if k not in ("start", "changes")} for s in morning]
    fig = plot.figure(old)
    xs, _ = _lines(_axes(fig, "node node1"))["node1 pool"]
    assert xs == [float(s["time"]) for s in old]
    plot._pyplot().close(fig)


def _drawn(fig: Figure) -> Any:
    fig.draw_without_rendering()
    return fig.canvas.get_renderer()  # type: ignore[attr-defined]


def _crowded() -> list[dict[str, Any]]:
    """Many world-changing steps close together: labels that would overlap on one line."""
    base = {"failures": [], "changes": [], "nodes": {"n1": {"available": 0, "used": 0, "needed": 0}},
            "api_calls": {}, "subnets": {}, "throttles": {}}  # fmt: skip
    steps: list[dict[str, Any]] = []
    for n in range(30):
        t = float(n // 3) * 0.7 + (200.0 if n >= 24 else 0.0)
        kind = ("set", "advance", "cloud")[n % 3]
        end = t + (0.5 if kind == "advance" else 0.0)
        steps.append({**base, "step": n, "kind": kind, "start": t, "time": end})
    return steps


@pytest.mark.parametrize("which", ["morning", "crowded"])
def test_step_labels_never_overlap(which: str, morning: list[dict[str, Any]]) -> None:
    steps = morning if which == "morning" else _crowded()
    fig = plot.figure(steps)
    renderer = _drawn(fig)
    strip = _axes(fig, "steps")
    boxes = [t.get_window_extent(renderer) for t in plot.step_labels(strip)]
    assert len(boxes) == len(plot.events(steps))
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)
    area = strip.get_window_extent(renderer)
    assert all(area.y0 <= box.y0 and box.y1 <= area.y1 + 1 for box in boxes), "inside the strip"
    plot._pyplot().close(fig)


def test_legends_sit_outside_every_panels_data(morning: list[dict[str, Any]]) -> None:
    fig = plot.figure(morning)
    renderer = _drawn(fig)
    legends = [legend for a in fig.axes if (legend := a.get_legend()) is not None]
    assert len(legends) == 5  # the strip, the first node, subnets, API calls, throttled
    areas = [a.get_window_extent(renderer) for a in fig.axes]
    for legend in legends:
        box = legend.get_window_extent(renderer)
        assert not any(box.overlaps(area) for area in areas), legend.get_texts()[0].get_text()
        assert fig.bbox.contains(box.x1 - 1, box.y0 + 1), "inside the figure"
    plot._pyplot().close(fig)


def test_expectations_are_large_marks_held_and_failed_apart(morning: list[dict[str, Any]]) -> None:
    failed = [*morning[:-1], {**morning[-1], "failures": ["steps[20].expect.node1.available: expected 11"]}]
    fig = plot.figure(failed)
    marks = {str(line.get_label()): line for line in _axes(fig, "steps").get_lines()}
    held, broken = marks["expect held"], marks["expect failed"]
    assert _floats(broken.get_xdata()) == [failed[-1]["start"]] and len(_floats(held.get_xdata())) == 2
    assert held.get_markersize() >= 10 and broken.get_markersize() >= 10
    assert held.get_marker() != broken.get_marker() and held.get_color() != broken.get_color()
    plot._pyplot().close(fig)


def test_the_committed_picture_is_what_make_plots_draws(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/img/busy_morning.svg is what ``make plots`` draws now: it cannot go stale."""
    monkeypatch.chdir(ROOT)
    out = tmp_path / "busy_morning.svg"
    assert main(["simulate", "examples/scenarios/busy_morning.yaml", "--plot", str(out)]) == 0
    committed = (ROOT / "docs" / "img" / "busy_morning.svg").read_text()
    drawn = out.read_text()
    stale = "docs/img/busy_morning.svg is stale: run `make plots`"
    creator = re.compile(r"Matplotlib v[^,<]+")
    assert _description(drawn) == _description(committed), stale  # the same run, whoever drew it
    if creator.findall(drawn) == creator.findall(committed):  # the same matplotlib: the same bytes
        assert drawn == committed, stale


def _description(svg: str) -> str:
    found = re.search(r"<dc:description>([^<]*)</dc:description>", svg)
    assert found, "the SVG names the run it draws"
    return found.group(1)


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
