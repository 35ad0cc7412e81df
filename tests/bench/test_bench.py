"""The benchmarks run (small sizes) and their yardsticks are right; `make bench` runs them in full."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.__main__ import QUICK, run
from bench.cluster import lower_bound, lower_bound_by_operation
from bench.convergence import bucket_bound
from bench.report import DATAPATH_HEADING, RUNTIMES_HEADING, publish, publish_section, render
from eni_ipam.core.ratelimit import EC2_BUCKETS

pytestmark = pytest.mark.timeout(120)


def test_lower_bound_counts_one_call_per_filled_interface_and_three_per_new_one() -> None:
    before = {"eni-1": (2, 0), "eni-2": (5, 0), "eni-3": (0, 1)}
    after = {"eni-1": (4, 0), "eni-2": (5, 0), "eni-3": (0, 2), "eni-4": (6, 0)}
    assert lower_bound(before, after) == 2 + 3
    assert lower_bound_by_operation(before, after)["AssignPrivateIpAddresses"] == 2


def test_bucket_bound_is_the_slowest_operation_after_its_burst() -> None:
    assign = EC2_BUCKETS["AssignPrivateIpAddresses"]
    attach = EC2_BUCKETS["AttachNetworkInterface"]
    calls = {"AssignPrivateIpAddresses": 300, "AttachNetworkInterface": 100}
    expected = max((300 - assign.burst) / assign.refill, (100 - attach.burst) / attach.refill)
    assert bucket_bound(calls) == pytest.approx(expected)
    assert bucket_bound({"AssignPrivateIpAddresses": 10}) == 0  # within the burst: no wait at all


@pytest.mark.system
def test_a_quick_run_meets_every_target_and_beats_the_reference_model() -> None:
    results = run(QUICK, progress=False)
    assert results.all_met(), [name for name, ok in results.checks() if not ok]
    assert all(c.speedup is not None and c.speedup > 2 for c in results.convergence)
    assert {p.name for p in results.phases} >= {"fresh cluster", "scale-up"}
    # The plugin's figures are measured (where this machine can), but too few rounds to judge.
    plugin = results.plugin
    assert plugin.skipped or {"eni-ipam-cni ADD", "eni-ipam-cni DEL", "host-local ADD"} <= set(plugin.timings)
    # An agent restart, from each of its supervisors, idle and loaded: measured, too few to judge.
    restart = results.restart
    assert [row.key for row in restart.rows] == [
        "the unit, idle",
        "the unit, loaded host",
        "the unit, busy node",
        "the DaemonSet, idle",
        "the DaemonSet, loaded host",
    ]
    assert all(0 < row.listening[0] <= row.answered[0] for row in restart.rows), restart.rows
    assert all(row.answered[0] >= row.delay for row in restart.rows)
    # The chain with the node datapath too: a real agent, its rules made and removed at every round.
    datapath = results.datapath
    assert datapath is not None
    assert datapath.skipped or {"ptp + host-local ADD", "ptp + eni-ipam-cni (datapath) ADD"} <= set(
        datapath.timings
    )
    text = render(results)
    assert "## 5b. CNI ADD and DEL with the node datapath" in text
    assert "| check | result |" in text and "**missed**" not in text
    assert "An agent restart, as the runtimes see it" in text


def test_the_agent_soak_and_the_runtimes_soak_share_their_page(tmp_path: Path) -> None:
    page = tmp_path / "RELIABILITY-node.md"
    publish("# Reliability of the node agent\n\nfirst run\n", page, quick=False, name="agent soak")
    section = f"{RUNTIMES_HEADING}\n\nrun one\n"
    publish_section(section, page, RUNTIMES_HEADING, quick=False, name="runtimes soak")
    assert page.read_text() == f"# Reliability of the node agent\n\nfirst run\n\n{section}"
    publish("# Reliability of the node agent\n\nsecond run\n", page, quick=False, name="agent soak")
    assert page.read_text() == f"# Reliability of the node agent\n\nsecond run\n\n{section}"
    again = f"{RUNTIMES_HEADING}\n\nrun two\n"
    publish_section(again, page, RUNTIMES_HEADING, quick=False, name="runtimes soak")
    assert page.read_text() == f"# Reliability of the node agent\n\nsecond run\n\n{again}"


def test_the_datapath_soak_keeps_its_section_beside_the_runtimes_soak(tmp_path: Path) -> None:
    page = tmp_path / "RELIABILITY-node.md"
    head = "# Reliability of the node agent\n\nfirst run\n"
    runtimes, datapath = f"{RUNTIMES_HEADING}\n\nrun one\n", f"{DATAPATH_HEADING}\n\nchurn one\n"
    publish(head, page, quick=False, name="agent soak")
    publish_section(datapath, page, DATAPATH_HEADING, quick=False, name="datapath soak")
    publish_section(runtimes, page, RUNTIMES_HEADING, quick=False, name="runtimes soak")
    assert page.read_text() == f"{head}\n{datapath}\n{runtimes}"
    again = f"{DATAPATH_HEADING}\n\nchurn two\n"
    publish_section(again, page, DATAPATH_HEADING, quick=False, name="datapath soak")  # in its place
    assert page.read_text() == f"{head}\n{again}\n{runtimes}"
    publish("# Reliability of the node agent\n\nsecond run\n", page, quick=False, name="agent soak")
    assert page.read_text() == f"# Reliability of the node agent\n\nsecond run\n\n{runtimes}\n{again}"


def test_the_datapath_soaks_section_shows_its_figures_and_lists_its_violations() -> None:
    from bench.datapath_soak import render as render_datapath

    figures = {
        "starts": {"containerd": 3, "podman": 2}, "stops": 5, "refused": {"podman": 1}, "probes": 15,
        "unreachable": 1, "kills": {"n1": 1}, "attached": ["eni-a"], "detached": ["eni-a"], "leaked": 0,
        "stale_or_missing": 0, "dropped": 0, "errors": 0, "seconds": 61.0,
        "details": ["n1/podman 10.0.1.5 -> 203.0.113.10: saw None, expected 10.0.1.4"],
    }  # fmt: skip
    section = render_datapath(figures, 60.0, 44)
    assert section.startswith(f"{DATAPATH_HEADING}\n")
    assert "| pods started (containerd over CRI) | 3 |" in section
    assert "| **probes that failed or saw another source** | 1 |" in section
    assert "- n1/podman 10.0.1.5 -> 203.0.113.10: saw None" in section


@pytest.mark.parametrize(("rounds", "said"), [(3, "not judged, too few rounds"), (400, "**missed**")])
def test_a_datapath_run_too_short_to_judge_is_not_said_missed(rounds: int, said: str) -> None:
    from bench.cni_plugin import BARE, Timing
    from bench.datapath_cni import DATAPATH_ADD, STANDARD_ADD, DatapathBench
    from bench.report import _datapath_section

    slow = {BARE: 7.0, STANDARD_ADD: 8.0, DATAPATH_ADD: 30.0}  # beyond 8 + 7 + 3
    timings = {name: Timing(name, ms, ms) for name, ms in slow.items()}
    text = "\n".join(_datapath_section(DatapathBench(rounds, "python3", timings)))
    assert f"against a budget of 18.00 ms (8.00 + 7.00 + 3): {said}." in text
