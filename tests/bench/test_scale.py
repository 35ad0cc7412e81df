"""The whole-controller scale benchmark runs end to end in a short form (``make bench-scale`` runs it
at 1,000, 10,000 and 100,000 nodes): three processes, the real service, and the figures it reports
hold what they must at any size."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from bench import scale_report
from bench.scale import measure
from bench.scale_kube import expected_first
from bench.scale_run import OwnTime

pytestmark = pytest.mark.timeout(300)

NODES = 200


@pytest.fixture(scope="module")
def run():  # type: ignore[no-untyped-def]
    return measure(NODES, timeout=240)


def test_a_fresh_start_writes_every_status_most_needed_first(run) -> None:  # type: ignore[no-untyped-def]
    fresh = run.fresh
    assert fresh["status_writes"] >= NODES
    expected = expected_first(NODES)
    assert len(expected) == 2  # one node with a pending pod, one asking for more
    first = fresh["first_status_writes"][: len(expected)]
    assert set(first) == expected, (first, expected)


def test_a_hand_over_with_nothing_changed_writes_no_status(run) -> None:  # type: ignore[no-untyped-def]
    assert run.handover["status_writes"] == 0
    assert run.handover["status_writes_after_resync"] == 0


def test_a_resync_reads_only_what_a_resync_must_and_notices_the_changes(run) -> None:  # type: ignore[no-untyped-def]
    fresh = run.fresh
    requests = fresh["resync"]["requests"]
    assert requests["DescribeNetworkInterfaces"] == 1  # 800 interfaces: one page
    assert requests["DescribeInstances"] == 1  # only the instances not running
    assert fresh["resync_changed"]["instances"] == 2
    assert fresh["scrapes"] and all(s["bytes"] > 0 for s in fresh["scrapes"])
    assert fresh["peak_rss_mb"] >= fresh["steady_rss_mb"] > 0


def test_a_warm_standby_takes_over_from_a_killed_leader_and_does_its_work(run) -> None:  # type: ignore[no-untyped-def]
    failover = run.failover
    assert failover["demand_pools"] == 2
    # It took the Lease after the leader's last renewal ran out, not before: a standby never
    # takes a live Lease; and it made its mutating call as leader, with its first term.
    assert failover["kill_to_term_s"] >= scale_report.LEASE_S - scale_report.RETRY_S
    assert failover["kill_to_term_s"] < failover["kill_to_first_mutation_s"] < failover["kill_to_settled_s"]
    # The work made at the kill, and only it: the two pools' addresses, their two statuses.
    assert failover["requests"]["AssignPrivateIpAddresses"] == failover["mutating_calls"] == 2
    assert failover["status_writes"] == 2 and failover["status_writes_before_first_mutation"] == 0
    assert failover["leader_peak_rss_mb"] >= failover["leader_rss_mb"] > 0
    assert failover["peak_rss_mb"] >= failover["standby_rss_mb"] > 0


def test_botocore_reads_the_resyncs_own_pages_as_a_reference(run) -> None:  # type: ignore[no-untyped-def]
    pages = run.reference["pages"]["DescribeNetworkInterfaces"]
    assert pages["requested"] == 1 and pages["sampled"] == 1 and pages["kb_per_page"] > 100
    assert pages["botocore_ms_per_page"] > 3 * pages["fast_warm_ms_per_page"]
    assert run.reference["botocore_resync_cpu_s"] > 0


def test_the_report_judges_every_target_and_keeps_the_other_sections(run) -> None:  # type: ignore[no-untyped-def]
    figures = dataclasses.asdict(run)
    section = scale_report.render([figures], {"cores": "2"})
    assert section.startswith(scale_report.HEADING)
    assert "| a hand-over with nothing changed writes no status | 0 + 0 | met |" in section
    rows = [line for line in section.splitlines() if line.endswith(("| met |", "| **not met** |"))]
    assert len(rows) == len(scale_report.checks([figures])) == 18
    report = "# Performance\n\n## 5. Before\n\ntext\n"
    spliced = scale_report.splice(report, section)
    assert spliced.startswith(report.rstrip("\n")) and spliced.endswith(section)
    assert scale_report.splice(spliced, "## 6. One process for a large cluster\n\nnew\n").count("## 6.") == 1
    assert scale_report.kept_section(spliced) == section
    # A section of its own after section 6 stays where it is when section 6 is written again.
    seventh = "## 7. Free /28 blocks: the count's cost\n\nfigures\n"
    again = scale_report.splice(spliced + "\n" + seventh, "## 6. One process for a large cluster\n\nnew\n")
    assert again.endswith("## 6. One process for a large cluster\n\nnew\n\n" + seventh)


async def test_own_time_leaves_out_what_ran_while_the_coroutine_waited() -> None:
    async def waits() -> int:
        await asyncio.sleep(0.05)  # another task's time, not this one's
        return 7

    own = OwnTime(waits())
    assert await own == 7
    assert own.busy < 0.02

    async def fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await OwnTime(fails())

    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.ensure_future(OwnTime(forever()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
