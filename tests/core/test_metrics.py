"""Gauges never outlive what they describe: vanished subnets, and a replica that stopped leading."""

from __future__ import annotations

from eni_ipam.core.metrics import Metrics
from eni_ipam.core.model import NodeStats


def test_full_subnet_listing_drops_subnets_no_longer_listed() -> None:
    metrics = Metrics()
    metrics.set_subnets({"s-1": ("z", 10), "s-2": ("z", 20)}, replace=True)
    metrics.set_subnets({"s-2": ("z", 19)})
    assert metrics.sample("eni_ipam_available_ips_per_subnet", {"subnet": "s-1", "zone": "z"}) == 10
    metrics.set_subnets({"s-2": ("z", 18)}, replace=True)
    assert metrics.sample("eni_ipam_available_ips_per_subnet", {"subnet": "s-1", "zone": "z"}) is None
    assert metrics.sample("eni_ipam_available_ips_per_subnet", {"subnet": "s-2", "zone": "z"}) == 18


def test_clearing_pool_state_leaves_counters_alone() -> None:
    metrics = Metrics()
    metrics.set_node("n1", NodeStats(available=4))
    metrics.set_totals([NodeStats(available=4)])
    metrics.resync.inc()
    metrics.clear_pool_state()
    assert metrics.sample("eni_ipam_node_ips", {"node": "n1", "type": "available"}) is None
    assert metrics.sample("eni_ipam_ips", {"type": "available"}) is None
    assert metrics.sample("eni_ipam_resync_total") == 1
