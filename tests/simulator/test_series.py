"""The metric series of a simulation as promtool's input_series: the notation, scrapes aligned on
virtual time, a recording that agrees with the metrics, merging and handing over, the command line,
and promtool reading the file back as it was recorded."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, Gauge

from eni_ipam import __version__
from eni_ipam.cli import main
from eni_ipam.core.clock import LoopClock
from eni_ipam.simulator.scenario import Scenario, load_scenario, parse_scenario
from eni_ipam.simulator.series import (
    LabelClash,
    Recording,
    SeriesKey,
    SeriesOptions,
    SeriesRecorder,
    Value,
    hand_over,
    merge,
    notation,
)
from eni_ipam.simulator.simloop import run_virtual
from eni_ipam.simulator.simulate import Outcome, Simulation, simulate
from tests.test_scenarios import BASE

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = ROOT / "examples" / "scenarios"
N = None
INF = math.inf

# --- the notation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "text"),
    [
        ([1, 1, 1], "1+0x2"),
        ([1, 1], "1 1"),  # shorter written out
        ([7], "7"),
        ([0, 1, 2, 3], "0+1x3"),
        ([5, 3, 1], "5-2x2"),
        ([1, 2, 3, 3, 3, 3], "1+1x2 3+0x2"),
        ([N, N, 1], "_ _ 1"),  # absent before its first sample
        ([N, N, N, N, 1, 1, 1], "_x4 1+0x2"),
        ([1, N, 2], "1 stale 2"),
        ([1, N, N, N, 2], "1 stale _ _ 2"),
        ([1, N, N, N, N, 2], "1 stale _x3 2"),
        ([3, 3, 3, N, N, N], "3+0x2 stale"),  # gone for good: nothing after the stale marker
        ([1, N, 1, N], "1 stale 1 stale"),
        ([0.1, 0.2, 0.3], "0.1 0.2 0.3"),  # steps of floats are not exact: written out
        ([INF, -INF, math.nan, math.nan, math.nan], "Inf -Inf NaN+0x2"),
        ([2.5, 1e-05, 1.5e20, 2.0**53, -0.0, 3.0], "2.5 1e-05 1.5e+20 9007199254740992 0 3"),
        ([2.0**53, 2.0**53 + 2, 2.0**53 + 4], "9007199254740992 9007199254740994 9007199254740996"),
    ],
)
def test_values_are_written_in_promtools_notation(values: list[Value], text: str) -> None:
    assert notation(values) == text


def test_label_values_are_escaped_as_promql_strings() -> None:
    key = SeriesKey.of("m", {"b": 'say "hi"\\\n\t\x01', "a": "x"})
    assert key.selector == r'm{a="x",b="say \"hi\"\\\n\t\x01"}'
    assert SeriesKey.of("m").selector == "m"


def test_a_recording_holds_one_value_per_scrape_for_every_series() -> None:
    with pytest.raises(ValueError, match=r'm\{a="1"\}: 2 values for 3 scrapes'):
        Recording(30.0, 3, {SeriesKey.of("m", {"a": "1"}): (1.0, 2.0)})
    with pytest.raises(ValueError, match="milliseconds"):
        Recording(0.0001, 0, {})


def test_the_document_and_the_file() -> None:
    recording = Recording(
        1.5,
        3,
        {
            SeriesKey.of("b", {"x": "1"}): (N, 2.0, 2.0),
            SeriesKey.of("a"): (1.0, 1.0, 1.0),
            SeriesKey.of("c"): (N, N, N),  # nothing for promtool to load
        },
    )
    assert recording.to_input_series() == {
        "interval": "1500ms",
        "input_series": [{"series": "a", "values": "1+0x2"}, {"series": 'b{x="1"}', "values": "_ 2 2"}],
    }


def test_the_file_is_the_document_after_a_comment(tmp_path: Path) -> None:
    key = SeriesKey.of("m", {"instance": 'a "b"\nc'})
    recording = Recording(30.0, 2, {key: (1.0, 2.0)})
    recording.write(tmp_path / "s.yaml", source="x.yaml")
    text = (tmp_path / "s.yaml").read_text()
    assert text.startswith("# promtool input_series: 1 metric series of x.yaml")
    assert yaml.safe_load(text) == recording.to_input_series()


# --- scrapes on virtual time -------------------------------------------------------------------------


def test_scrapes_are_taken_at_multiples_of_the_interval_on_the_loops_clock() -> None:
    registry = CollectorRegistry()
    elapsed = Gauge("elapsed_seconds", "Virtual seconds since the start", registry=registry)

    async def main() -> Recording:
        clock = LoopClock(measure_cpu=False)
        origin = clock.monotonic()
        elapsed.set_function(lambda: clock.monotonic() - origin)
        recorder = SeriesRecorder(registry, interval=7.5)
        task = asyncio.create_task(recorder.run(clock, origin=origin))
        await asyncio.sleep(31)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return recorder.recording()

    recording = run_virtual(main())
    assert recording.scrapes == 5  # 0, 7.5, 15, 22.5, 30
    assert recording.by_selector()["elapsed_seconds"] == pytest.approx((0, 7.5, 15, 22.5, 30))


def test_a_label_a_metric_has_is_refused_and_the_scrape_not_taken() -> None:
    registry = CollectorRegistry()
    Gauge("g", "A gauge", ["node"], registry=registry).labels(node="n1").set(1)
    recorder = SeriesRecorder(registry, labels={"node": "x"})
    with pytest.raises(LabelClash, match="'node'"):
        recorder.scrape()
    assert recorder.scrapes == 0


@pytest.mark.parametrize(
    "labels",
    [{"1a": "x"}, {"a-b": "x"}, {"__name__": "x"}, {"a": ""}],
    ids=["digit-first", "dash", "reserved", "empty-value"],
)
def test_labels_prometheus_could_not_add_are_refused(labels: dict[str, str]) -> None:
    with pytest.raises(ValueError, match=repr(next(iter(labels)))):
        SeriesOptions(labels=labels)


@pytest.mark.parametrize("interval", [0.0, -1.0, math.inf, math.nan, 0.0004])
def test_intervals_prometheus_could_not_scrape_at_are_refused(interval: float) -> None:
    with pytest.raises(ValueError):
        SeriesOptions(interval=interval)


# --- a simulation's recording ------------------------------------------------------------------------


def basics_then(advance: str) -> Scenario:
    """basics.yaml, then ``advance`` of nothing happening (it converges in 20 ms)."""
    data = yaml.safe_load((EXAMPLES / "basics.yaml").read_text())
    data["steps"].append({"advance": advance})
    return parse_scenario(data)


Exported = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def run_recorded(scenario: Scenario, series: SeriesOptions) -> tuple[Outcome, Exported]:
    """The outcome, and every sample the controller exports at the end (read on the loop)."""

    async def main() -> tuple[Outcome, Exported]:
        simulation = Simulation(scenario, series=series)
        outcome = await simulation.run()
        exported = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in simulation.metrics.registry.collect()
            for s in family.samples
        }
        return outcome, exported

    result: tuple[Outcome, Exported] = run_virtual(main())
    return result


def test_a_recording_of_basics_agrees_with_the_metrics_at_the_end() -> None:
    outcome, exported = run_recorded(basics_then("95s"), SeriesOptions(labels={"namespace": "eni-ipam"}))
    assert outcome.passed and outcome.results[-1].time == pytest.approx(95.02)
    recording = outcome.series
    assert recording is not None
    assert recording.scrapes == 4  # 0, 30, 60, 90: the last multiple of 30 s before the end
    values = recording.by_selector()
    node = 'eni_ipam_node_ips{namespace="eni-ipam",node="node1",type="available"}'
    assert values[node][1:] == (22, 22, 22)  # converged within the first 20 ms
    assert values[f'eni_ipam_build_info{{namespace="eni-ipam",version="{__version__}"}}'] == (1, 1, 1, 1)
    for selector in (
        'eni_ipam_api_requests_total{namespace="eni-ipam",operation="AssignPrivateIpAddresses"}',
        'eni_ipam_time_to_ip_seconds_bucket{le="+Inf",namespace="eni-ipam"}',
        'eni_ipam_time_to_ip_seconds_count{namespace="eni-ipam"}',
        'eni_ipam_nodes{category="total",namespace="eni-ipam"}',
    ):
        assert selector in values
    assert not any("_created" in s for s in values)
    # Nothing happened after the last scrape: it is what the controller exports at the end, series
    # for series (the added label aside), but for the time since the last full resync, which grew by
    # the 5.02 s from the last scrape (at 90 s) to the end.
    last = {
        (key.name, tuple(kv for kv in key.labels if kv[0] != "namespace")): series[-1]
        for key, series in recording.series.items()
        if series[-1] is not None
    }
    age = ("eni_ipam_resync_age_seconds", ())
    assert exported.pop(age) == pytest.approx(last.pop(age) + 5.02)
    assert last == exported
    assert all(("namespace", "eni-ipam") in key.labels for key in recording.series)


@pytest.mark.parametrize(("advance", "scrapes"), [("60s", 3), ("59s", 2), ("61s", 3)])
def test_the_last_scrape_is_the_last_multiple_of_the_interval_up_to_the_end(
    advance: str, scrapes: int
) -> None:
    data = yaml.safe_load((EXAMPLES / "basics.yaml").read_text())
    data["steps"] = [{"advance": advance}]  # ends at exactly 60 s, 59 s, 61 s
    outcome = simulate(parse_scenario(data), series=SeriesOptions())
    assert outcome.series is not None and outcome.series.scrapes == scrapes


@pytest.mark.parametrize("name", ["retry_backoff", "release_aborted"])
def test_recording_changes_nothing_in_the_run(name: str) -> None:
    scenario = load_scenario(EXAMPLES / f"{name}.yaml")
    plain = simulate(scenario)
    recorded = simulate(scenario, series=SeriesOptions(interval=0.25))
    assert plain.series is None and recorded.series is not None and recorded.series.scrapes > 10
    assert [dataclasses.asdict(r) for r in recorded.results] == [dataclasses.asdict(r) for r in plain.results]


def test_a_label_clash_found_mid_run_is_raised_as_itself() -> None:
    with pytest.raises(LabelClash, match="'node'"):
        simulate(basics_then("1s"), series=SeriesOptions(labels={"node": "x"}))


# --- merge and hand_over ------------------------------------------------------------------------------


def one(name: str, values: tuple[Value, ...], **labels: str) -> Recording:
    return Recording(30.0, len(values), {SeriesKey.of(name, labels): values})


def test_merge_keeps_every_series_of_each() -> None:
    a = one("up", (1.0, 1.0, 1.0), namespace="a")
    b = one("up", (2.0, 2.0), namespace="b")
    merged = merge(a, b)
    assert merged.scrapes == 3
    assert merged.by_selector() == {'up{namespace="a"}': (1, 1, 1), 'up{namespace="b"}': (2, 2, N)}
    assert notation(merged.by_selector()['up{namespace="b"}']) == "2 2 stale"  # its run ended


def test_merge_refuses_a_series_in_two_recordings_and_different_intervals() -> None:
    with pytest.raises(ValueError, match=r'up\{namespace="a"\} is in two recordings'):
        merge(one("up", (1.0,), namespace="a"), one("up", (2.0,), namespace="a"))
    with pytest.raises(ValueError, match="intervals differ"):
        merge(one("up", (1.0,)), dataclasses.replace(one("down", (1.0,)), interval=15.0))
    with pytest.raises(ValueError):
        merge()


def test_hand_over_moves_the_values_to_the_new_replicas_series_after_a_gap() -> None:
    recording = one("m", (1.0, 2.0, 3.0, 4.0, 5.0, 6.0), instance="a", job="eni-ipam")
    handed = hand_over(recording, at=45, gap=30, labels={"instance": "b"})
    # Scrape 2 (60 s) is the first at or after 45 s; 3 (90 s) the first at or after 75 s.
    assert handed.by_selector() == {
        'm{instance="a",job="eni-ipam"}': (1, 2, N, N, N, N),
        'm{instance="b",job="eni-ipam"}': (N, N, N, 4, 5, 6),
    }
    assert handed.to_input_series()["input_series"] == [
        {"series": 'm{instance="a",job="eni-ipam"}', "values": "1 2 stale"},
        {"series": 'm{instance="b",job="eni-ipam"}', "values": "_x3 4+1x2"},
    ]


def test_hand_over_without_a_gap_and_with_a_label_added() -> None:
    recording = one("m", (1.0, 2.0, 3.0), instance="a")
    handed = hand_over(recording, at=30, labels={"pod": "p2"})
    assert handed.by_selector() == {'m{instance="a"}': (1, N, N), 'm{instance="a",pod="p2"}': (N, 2, 3)}
    same = hand_over(recording, at=30, gap=30, labels={"instance": "a"})  # the same series: a hole
    assert same.by_selector() == {'m{instance="a"}': (1, N, 3)}
    assert hand_over(recording, at=0, labels={"instance": "b"}).by_selector() == {
        'm{instance="b"}': (1, 2, 3)
    }


def test_hand_over_refuses_to_make_two_series_one_and_bad_arguments() -> None:
    two = merge(one("m", (1.0, 2.0), instance="a"), one("m", (1.0, 2.0), instance="b"))
    with pytest.raises(ValueError, match=r'm\{instance="c"\}: two series'):
        hand_over(two, at=30, labels={"instance": "c"})
    with pytest.raises(ValueError, match="at must"):
        hand_over(two, at=-1, labels={"instance": "c"})
    with pytest.raises(ValueError, match="reserved"):
        hand_over(two, at=30, labels={"__name__": "c"})


# --- the command line --------------------------------------------------------------------------------


SCENARIO = BASE + "steps: [{converge: 10s}, {advance: 60s}, {expect: {node1: {available: AVAILABLE}}}]\n"
"""One node in one subnet (the scenario tests' base), expecting AVAILABLE addresses after a minute."""


def scenario_file(tmp_path: Path, available: int = 8) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("AVAILABLE", str(available)))
    return str(path)


def test_the_cli_writes_the_series(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "series.yaml"
    argv = ["simulate", scenario_file(tmp_path), "--series", str(out), "--scrape-interval", "15s"]
    argv += ["--series-label", "namespace=eni-ipam", "--series-label", "job=eni-ipam-controller"]
    assert main(argv) == 0
    assert f"scrapes written to {out}" in capsys.readouterr().out
    document = yaml.safe_load(out.read_text())
    assert document["interval"] == "15s"
    series = {entry["series"]: entry["values"] for entry in document["input_series"]}
    node = 'eni_ipam_node_ips{job="eni-ipam-controller",namespace="eni-ipam",node="node1",type="available"}'
    assert series[node] == "0 8+0x3"  # scrapes at 0, 15, 30, 45 and 60 s (the run ends at 60.01 s)


def test_the_cli_writes_the_series_when_an_expectation_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "series.yaml"
    assert main(["simulate", scenario_file(tmp_path, available=9), "--series", str(out)]) == 1
    assert "expected 9, got 8" in capsys.readouterr().err
    assert yaml.safe_load(out.read_text())["interval"] == "30s"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--scrape-interval", "0"], "--scrape-interval"),
        (["--scrape-interval", "-5"], "--scrape-interval"),
        (["--scrape-interval", "soon"], "--scrape-interval"),
        (["--scrape-interval", "0.0001"], "--scrape-interval"),
        (["--series-label", "namespace"], "--series-label"),
        (["--series-label", "1st=x"], "--series-label"),
        (["--series-label", "a.b=x"], "--series-label"),
        (["--series-label", "__name__=x"], "--series-label"),
        (["--series-label", "namespace="], "--series-label"),
        (["--series-label", "a=1", "--series-label", "a=2"], "--series-label"),
    ],
)
def test_bad_series_options_exit_2_naming_the_option_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], named: str
) -> None:
    out = tmp_path / "series.yaml"
    with pytest.raises(SystemExit) as info:
        main(["simulate", scenario_file(tmp_path), "--series", str(out), *options])
    assert info.value.code == 2
    assert f"argument {named}" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("options", [["--scrape-interval", "10"], ["--series-label", "a=b"]])
def test_series_options_need_series(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["simulate", scenario_file(tmp_path), *options])
    assert info.value.code == 2
    assert "needs --series FILE" in capsys.readouterr().err


def test_a_series_file_in_no_directory_exits_2_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["simulate", scenario_file(tmp_path), "--series", str(tmp_path / "absent" / "s.yaml")])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert "argument --series" in captured.err and "step" not in captured.out


def test_a_label_a_metric_has_exits_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "series.yaml"
    assert main(["simulate", scenario_file(tmp_path), "--series", str(out), "--series-label", "node=x"]) == 2
    assert "argument --series-label" in capsys.readouterr().err
    assert not out.exists()


# --- promtool reads it back ----------------------------------------------------------------------------

PROMTOOL = shutil.which("promtool")
INSTANCE = 'sim "1" back\\slash\nline'
"""The first replica's instance label: a quote, a backslash and a line break to escape."""


def promtool_test(
    tmp_path: Path, recording: Recording, cases: list[dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "rules.yaml").write_text("groups: []\n")
    document = {
        "rule_files": ["rules.yaml"],
        # promtool loads input series only up to its last evaluation step: one per scrape.
        "evaluation_interval": recording.to_input_series()["interval"],
        "tests": [{**recording.to_input_series(), "promql_expr_test": cases}],
    }
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False, width=1 << 30))
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )


@pytest.mark.system
def test_promtool_reads_the_series_as_recorded(tmp_path: Path) -> None:
    if PROMTOOL is None:
        pytest.skip("promtool is not on PATH (Prometheus's promtool 2.42 or later reads the file)")
    outcome = simulate(
        basics_then("95s"), series=SeriesOptions(labels={"namespace": "eni-ipam", "instance": INSTANCE})
    )
    assert outcome.series is not None
    # The first replica until 45 s, nobody scraped until 75 s, then replica b: scrape 2 (60 s) is in
    # the gap, so the first replica's series are stale there, though their last sample is recent.
    recording = hand_over(outcome.series, at=45, gap=30, labels={"instance": "b"})
    requests = recording.series[
        SeriesKey.of(
            "eni_ipam_api_requests_total",
            {"instance": "b", "namespace": "eni-ipam", "operation": "AssignPrivateIpAddresses"},
        )
    ][3]
    first = r'instance="sim \"1\" back\\slash\nline"'  # written out by hand, not by the module
    node = 'eni_ipam_node_ips{node="node1",type="available"}'
    available = 'namespace="eni-ipam",node="node1",type="available"'
    cases: list[dict[str, Any]] = [
        {
            "expr": f"eni_ipam_build_info{{{first}}}",
            "eval_time": "0s",
            "exp_samples": [
                {
                    "labels": f'eni_ipam_build_info{{{first},namespace="eni-ipam",version="{__version__}"}}',
                    "value": 1,
                }
            ],
        },
        {
            "expr": node,
            "eval_time": "30s",
            "exp_samples": [
                {
                    "labels": f"eni_ipam_node_ips{{{first},{available}}}",
                    "value": 22,
                }
            ],
        },
        {"expr": node, "eval_time": "60s", "exp_samples": []},  # stale: no lookback to 30 s
        {
            "expr": node,
            "eval_time": "90s",
            "exp_samples": [
                {
                    "labels": f'eni_ipam_node_ips{{instance="b",{available}}}',
                    "value": 22,
                }
            ],
        },
        {
            "expr": 'sum(eni_ipam_api_requests_total{operation="AssignPrivateIpAddresses"})',
            "eval_time": "90s",
            "exp_samples": [{"labels": "{}", "value": requests}],
        },
    ]
    result = promtool_test(tmp_path, recording, cases)
    assert result.returncode == 0, result.stdout + result.stderr
    # The check can fail: one wrong value and promtool says so.
    cases[3]["exp_samples"][0]["value"] = 21
    wrong = promtool_test(tmp_path, recording, cases)
    assert wrong.returncode != 0 and "time: 1m30s" in wrong.stdout + wrong.stderr


def test_the_docs_excerpt_is_what_the_command_writes(tmp_path: Path) -> None:
    """docs/scenarios.md shows the head of a file ``--series`` writes and a few of its series: the head
    (with its count of series) and each series shown, with its values, are those of the file the
    command it names writes today."""
    page = (ROOT / "docs" / "scenarios.md").read_text()
    excerpt = page.split("```yaml\n# promtool input_series:", 1)[1].split("```", 1)[0]
    excerpt = "# promtool input_series:" + excerpt
    written = tmp_path / "series.yaml"
    argv = ["simulate", str(EXAMPLES / "generic_blocks.yaml"), "--series", str(written)]
    argv += ["--scrape-interval", "10s", "--series-label", "namespace=eni-ipam"]
    assert main(argv) == 0
    text = written.read_text().replace(
        str(EXAMPLES / "generic_blocks.yaml"), "examples/scenarios/generic_blocks.yaml"
    )
    head, *shown = excerpt.split("\n- ")
    assert text.startswith(head.rstrip("\n").split("\n- ")[0])
    for entry in shown:
        assert "\n- " + entry.rstrip("\n") + "\n" in text, entry
