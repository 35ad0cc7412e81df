"""The scrape benchmark runs and measures what it says (no figure is asserted: speed is for
``python -m bench.metrics_scrape``, docs/metrics.md)."""

from __future__ import annotations

import pytest

from bench.metrics_scrape import measure, memory
from eni_ipam.adapters.metrics.selection import NodeSeriesPolicy


def test_the_scrape_benchmark_measures_a_served_scrape_and_the_loop_around_it() -> None:
    scrape = measure(300, short=0.1, seconds=0.4, runs=1)
    assert scrape.exported == 300  # within the default all_up_to
    assert scrape.scrapes > 0 and scrape.bytes > 0 and scrape.series > 4 * 300
    assert scrape.max_stall_seconds >= scrape.p99_stall_seconds >= 0
    assert scrape.baseline_max_stall_seconds >= scrape.baseline_p99_stall_seconds >= 0


def test_above_all_up_to_the_benchmark_exports_only_the_short_nodes() -> None:
    scrape = measure(50, short=0.2, policy=NodeSeriesPolicy(all_up_to=10, most=20), seconds=0.4, runs=1)
    assert 0 < scrape.exported < 20


@pytest.mark.system
def test_the_memory_benchmark_reports_bytes_per_node_from_a_fresh_process() -> None:
    assert memory(500) > 0
