"""The whole-controller scale benchmark runs end to end in a short form (``make bench-scale`` runs it
at 1,000, 10,000 and 100,000 nodes): three processes, the real service, and the figures it reports
hold what they must at any size."""

from __future__ import annotations

import pytest

from bench.scale import measure
from bench.scale_kube import every, node_name

pytestmark = pytest.mark.timeout(300)

NODES = 200


@pytest.fixture(scope="module")
def run():  # type: ignore[no-untyped-def]
    return measure(NODES, timeout=240)


def test_a_fresh_start_writes_every_status_most_needed_first(run) -> None:  # type: ignore[no-untyped-def]
    fresh = run.fresh
    assert fresh["status_writes"] >= NODES
    pending = {node_name(n) for n in range(NODES) if n % every(0.005, NODES) == every(0.005, NODES) // 3}
    deficit = {node_name(n) for n in range(NODES) if n % every(0.005, NODES) == every(0.005, NODES) // 2}
    first = fresh["first_status_writes"][: len(pending | deficit)]
    assert set(first) == pending | deficit, (first, pending, deficit)


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
