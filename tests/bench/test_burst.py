"""The burst benchmark (bench/burst.py) at a small size: one scenario, run with and without the pool
of ready interfaces, tells them apart by calls and waits; `make bench` runs it with 500 nodes."""

from __future__ import annotations

import pytest

from bench import burst

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def runs() -> list[burst.BurstRun]:
    return burst.measure(12, latencies=(True,))


def test_without_the_pool_each_joining_node_creates_attaches_and_marks(runs: list[burst.BurstRun]) -> None:
    without = runs[0]
    assert without.takes == 0 and without.refills == 0
    assert without.node_calls == {
        "CreateNetworkInterface": 12,
        "AttachNetworkInterface": 12,
        "ModifyNetworkInterfaceAttribute": 12,
    }


def test_a_pool_sized_for_the_burst_serves_every_node_with_one_attach(runs: list[burst.BurstRun]) -> None:
    without, sized = runs[0], runs[-1]
    assert sized.takes == sized.nodes == 12
    assert sized.node_calls == {"AttachNetworkInterface": 12} and sized.calls_per_node == 1.0
    assert sized.p99_wait < without.median_wait  # one call's latency instead of three


def test_the_section_shows_every_variant_side_by_side(runs: list[burst.BurstRun]) -> None:
    text = burst.section(runs)
    assert text.startswith(burst.HEADING + "\n")
    rows = [line for line in text.splitlines() if line.startswith("| yes |")]
    assert [row.split(" | ")[1] for row in rows] == [v.name for v in burst.VARIANTS]


def test_the_section_replaces_its_own_or_goes_before_section_3() -> None:
    page = "# P\n\n## 2. Convergence\n\nx\n\n## 3. CPU and memory\n\ny\n"
    first = burst.splice(page, f"{burst.HEADING}\n\nold\n")
    assert first.index(burst.HEADING) < first.index("## 3. CPU")
    again = burst.splice(first, f"{burst.HEADING}\n\nnew\n")
    assert "old" not in again and "new" in again and again.count(burst.HEADING) == 1
    assert again.endswith("## 3. CPU and memory\n\ny\n")
