"""The listing parser's micro-benchmark runs (small pages), and its pages are EC2's answers as botocore
reads them; `python -m bench.ec2_parse` runs it at EC2's sizes."""

from __future__ import annotations

import pytest

from bench.ec2_parse import (
    DI,
    DNI,
    botocore_reads,
    fast_reads,
    instances_page,
    interfaces_page,
    measure,
    render,
)

pytestmark = pytest.mark.timeout(120)


def test_the_pages_hold_what_they_say_and_both_readers_agree() -> None:
    interfaces = botocore_reads(interfaces_page(12, 3), DNI)
    assert len(interfaces) == 12 and all(len(i.addresses) == 3 for i in interfaces)
    assert [i.device_index for i in interfaces[:4]] == [0, 1, 2, 3]
    assert interfaces[1].tags["eni-ipam/instance"] == interfaces[1].instance_id
    instances = botocore_reads(instances_page(12, 3), DI)
    assert len(instances) == 3 and {i.state for i in instances} == {"running"}
    assert fast_reads(interfaces_page(12, 3), DNI) == interfaces
    assert fast_reads(instances_page(12, 3), DI) == instances


def test_a_small_measurement_reports_every_figure() -> None:
    figures = measure(interfaces=16, addresses=2, repeat=1)
    for key in ("dni", "di"):
        for name in ("botocore", "cold", "warm"):
            assert figures[f"{key}_{name}_ms"] > 0
        assert figures[f"{key}_slice_ours_ms"] >= 0 and figures[f"{key}_stall_ours_ms"] >= 0
    assert figures["resync_cold_reference_s"] > 0
    assert "DescribeNetworkInterfaces" in render(figures)
