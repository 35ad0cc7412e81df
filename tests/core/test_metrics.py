"""Gauges never outlive what they describe, and the cluster totals always equal the sums of the
per-node series: after any sequence of node changes, removals and clears (hypothesis), at every
read."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from eni_ipam._infra.metrics import CAPACITY_REASONS, Metrics
from eni_ipam.agent.metrics import AgentMetrics
from eni_ipam.core.model import NodeStats, Subnet


def subnet(sid: str, available: int, cidr: str = "10.0.0.0/24") -> Subnet:
    return Subnet(id=sid, vpc_id="vpc-1", zone="z", cidr=cidr, available=available)


def test_full_subnet_listing_drops_subnets_no_longer_listed() -> None:
    metrics = Metrics()
    metrics.replace_subnets([subnet("s-1", 10), subnet("s-2", 20)])
    metrics.set_subnet_free(subnet("s-2", 20), 19)
    assert metrics.sample("eni_ipam_available_ips_per_subnet", {"subnet": "s-1", "zone": "z"}) == 10
    assert metrics.sample("eni_ipam_available_ips_per_subnet", {"subnet": "s-2", "zone": "z"}) == 19
    metrics.replace_subnets([subnet("s-2", 18)])
    assert metrics.sample("eni_ipam_available_ips_per_subnet", {"subnet": "s-1", "zone": "z"}) is None
    assert metrics.sample("eni_ipam_subnet_size_ips", {"subnet": "s-1", "zone": "z"}) is None
    assert metrics.sample("eni_ipam_available_ips_per_subnet", {"subnet": "s-2", "zone": "z"}) == 18


def test_subnet_size_is_the_cidrs_address_count_and_free_never_shows_negative() -> None:
    metrics = Metrics()
    metrics.replace_subnets([subnet("s-1", 3, cidr="10.0.4.0/22")])
    assert metrics.sample("eni_ipam_subnet_size_ips", {"subnet": "s-1", "zone": "z"}) == 1024
    metrics.set_subnet_free(subnet("s-1", 3), -2)  # reservations racing a stale count
    assert metrics.sample("eni_ipam_available_ips_per_subnet", {"subnet": "s-1", "zone": "z"}) == 0


def test_clearing_pool_state_leaves_counters_alone() -> None:
    metrics = Metrics()
    metrics.set_node("n1", NodeStats(available=4), capacity="subnet")
    metrics.resync.inc()
    metrics.clear_pool_state()
    assert metrics.sample("eni_ipam_node_ips", {"node": "n1", "type": "available"}) is None
    assert metrics.sample("eni_ipam_node_at_capacity", {"node": "n1", "reason": "subnet"}) is None
    assert metrics.sample("eni_ipam_ips", {"type": "available"}) is None
    assert metrics.sample("eni_ipam_resync_total") == 1


def test_totals_count_a_node_from_its_first_series_to_its_removal() -> None:
    metrics = Metrics()
    assert metrics.sample("eni_ipam_nodes", {"category": "total"}) is None  # not reconciling yet
    metrics.set_node("n1", NodeStats(available=8, used=2, needed=3))
    assert metrics.sample("eni_ipam_nodes", {"category": "total"}) == 1
    assert metrics.sample("eni_ipam_nodes", {"category": "in-deficit"}) == 1
    assert metrics.sample("eni_ipam_ips", {"type": "needed"}) == 3
    metrics.set_node("n1", NodeStats(available=11, used=2))
    assert metrics.sample("eni_ipam_nodes", {"category": "in-deficit"}) == 0
    assert metrics.sample("eni_ipam_ips", {"type": "available"}) == 11
    metrics.remove_node("n1")
    assert metrics.sample("eni_ipam_nodes", {"category": "total"}) == 0
    assert metrics.sample("eni_ipam_ips", {"type": "available"}) == 0
    assert metrics.sample("eni_ipam_node_ips", {"node": "n1", "type": "available"}) is None


def test_a_resynced_replica_with_no_node_exports_zero_totals() -> None:
    metrics = Metrics()
    metrics.show_totals()
    assert metrics.sample("eni_ipam_nodes", {"category": "total"}) == 0
    assert metrics.sample("eni_ipam_ips", {"type": "needed"}) == 0


def test_a_node_has_one_capacity_series_at_most_and_instance_limit_is_the_at_capacity_count() -> None:
    metrics = Metrics()
    metrics.set_node("n1", NodeStats(needed=2), capacity="subnet")
    metrics.set_node("n1", NodeStats(needed=2, at_capacity=True), capacity="instance-limit")
    assert metrics.samples("eni_ipam_node_at_capacity") == {
        (("node", "n1"), ("reason", "instance-limit")): 1.0
    }
    assert metrics.sample("eni_ipam_nodes", {"category": "at-capacity"}) == 1
    metrics.set_node("n1", NodeStats())
    assert metrics.samples("eni_ipam_node_at_capacity") == {}
    assert metrics.sample("eni_ipam_nodes", {"category": "at-capacity"}) == 0


def test_totals_problems_reports_totals_that_disagree_with_the_nodes() -> None:
    metrics = Metrics()
    metrics.set_node("n1", NodeStats(available=4, needed=1))
    assert metrics.totals_problems() == []
    metrics.node_ips.labels(node="n1", type="needed").set(0)  # a per-node series changed behind the totals
    assert metrics.totals_problems() == [
        'ips{type="needed"} is 1, the per-node series say 0',
        'nodes{category="in-deficit"} is 1, the per-node series say 0',
    ]


def test_role_gauges_read_the_role_at_each_scrape() -> None:
    metrics = Metrics()
    state = {"ready": False}
    metrics.report_role(leader=lambda: True, ready=lambda: state["ready"])
    assert metrics.sample("eni_ipam_leader") == 1 and metrics.sample("eni_ipam_ready") == 0
    state["ready"] = True
    assert metrics.sample("eni_ipam_ready") == 1


def test_the_controller_and_the_agent_export_only_their_own_families() -> None:
    controller = {f.name for f in Metrics().registry.collect()}
    agent = {f.name for f in AgentMetrics().registry.collect()}
    assert "eni_ipam_ready" in controller and "eni_ipam_ready" not in agent
    assert "eni_ipam_agent_allocations" in agent and "eni_ipam_agent_allocations" not in controller
    assert {"eni_ipam_build_info", "eni_ipam_kube_requests"} <= controller & agent


_STATS = st.builds(
    NodeStats,
    available=st.integers(0, 64),
    used=st.integers(0, 64),
    needed=st.integers(0, 16),
    excess=st.integers(0, 16),
    at_capacity=st.booleans(),
)
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from("abcd"), _STATS, st.sampled_from(("", *CAPACITY_REASONS))),
        st.tuples(st.just("remove"), st.sampled_from("abcde")),
        st.tuples(st.just("clear")),
        st.tuples(st.just("show")),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(_OPS)
def test_totals_equal_the_sums_of_the_node_series_after_any_sequence(ops: list[tuple]) -> None:
    metrics = Metrics()
    for op in ops:
        if op[0] == "set":
            metrics.set_node(op[1], op[2], capacity=op[3])
        elif op[0] == "remove":
            metrics.remove_node(op[1])
        elif op[0] == "clear":
            metrics.clear_pool_state()
        else:
            metrics.show_totals()
        assert metrics.totals_problems() == [], op
