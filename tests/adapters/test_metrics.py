"""Gauges never outlive what they describe, and the cluster totals always equal the sums of the
per-node series plus the omitted part (the nodes the policy gives no series): after any sequence of
node changes, removals and clears (hypothesis), at every read, and in a scrape written off the loop
from what it read on the loop."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from eni_ipam.adapters.metrics import (
    CAPACITY_REASONS,
    IP_TYPES,
    Frozen,
    Metrics,
    NodeSeriesPolicy,
    pool_totals_problems,
    render,
)
from eni_ipam.adapters.metrics.exposition import _Families
from eni_ipam.adapters.metrics.selection import urgency
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


def test_a_subnets_pressure_is_a_gauge_and_its_transitions_a_counter_of_their_own() -> None:
    metrics = Metrics()
    where = {"subnet": "s-1", "zone": "z"}
    metrics.replace_subnets([subnet("s-1", 10)])
    assert metrics.sample("eni_ipam_subnet_pressure", where) is None  # disabled: no series
    metrics.subnet_pressure(subnet("s-1", 10), under=False, changed=False)
    assert metrics.sample("eni_ipam_subnet_pressure", where) == 0
    assert metrics.sample("eni_ipam_subnet_pressure_transitions_total", where) is None
    metrics.subnet_pressure(subnet("s-1", 10), under=True, changed=True)
    metrics.subnet_pressure(subnet("s-1", 9), under=True, changed=False)
    metrics.subnet_pressure(subnet("s-1", 40), under=False, changed=True)
    assert metrics.sample("eni_ipam_subnet_pressure", where) == 0
    assert metrics.sample("eni_ipam_subnet_pressure_transitions_total", where) == 2
    metrics.replace_subnets([subnet("s-2", 10)])  # s-1 no longer filled: its state goes, its count stays
    assert metrics.sample("eni_ipam_subnet_pressure", where) is None
    assert metrics.sample("eni_ipam_subnet_pressure_transitions_total", where) == 2
    metrics.subnet_pressure(subnet("s-2", 10), under=True, changed=True)
    metrics.clear_pool_state()  # a standby exports no pool state
    assert metrics.sample("eni_ipam_subnet_pressure", {"subnet": "s-2", "zone": "z"}) is None


def test_clearing_pool_state_leaves_counters_alone() -> None:
    metrics = Metrics()
    metrics.set_node("n1", NodeStats(available=4), capacity="subnet")
    metrics.resync.inc()
    metrics.clear_pool_state()
    assert metrics.sample("eni_ipam_node_ips", {"node": "n1", "type": "available"}) is None
    assert metrics.sample("eni_ipam_node_at_capacity", {"node": "n1", "reason": "subnet"}) is None
    assert metrics.sample("eni_ipam_ips", {"type": "available"}) is None
    assert metrics.sample("eni_ipam_resync_total") == 1


def test_resyncs_failing_in_a_row_count_until_one_succeeds_and_a_standby_has_none() -> None:
    metrics = Metrics()
    metrics.resync_finished(ok=False)
    metrics.resync_finished(ok=False)
    assert metrics.sample("eni_ipam_resync_failing") == 2
    metrics.resync_finished(ok=True)
    assert metrics.sample("eni_ipam_resync_failing") == 0
    metrics.resync_finished(ok=False)
    metrics.report_schedule(waiting=int, in_backoff=int, oldest_deficit=float, since_resync=lambda: 42.0)
    assert metrics.sample("eni_ipam_resync_age_seconds") == 42
    metrics.clear_pool_state()  # a standby: no resync of its own to speak of
    assert metrics.sample("eni_ipam_resync_failing") == 0
    assert metrics.sample("eni_ipam_resync_age_seconds") == 0
    assert metrics.sample("eni_ipam_resync_failures_total") == 3  # counters stay


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


# -- per-node series under the policy (node_series_all_up_to, node_series_max) --------------------

SMALL = NodeSeriesPolicy(all_up_to=2, most=2)
"""Every node of up to two; above that at most two nodes that need attention."""
HEALTHY = NodeStats(available=8, used=3)
FULL = NodeStats(available=8, used=8, at_capacity=True)


def nodes_with_series(metrics: Metrics) -> set[str]:
    return {dict(labels)["node"] for labels in metrics.samples("eni_ipam_node_ips")}


def test_a_cluster_within_all_up_to_exports_every_node_as_before_and_nothing_omitted() -> None:
    metrics = Metrics(node_series=SMALL)
    metrics.set_node("a", HEALTHY)
    metrics.set_node("b", FULL, capacity="instance-limit")
    assert nodes_with_series(metrics) == {"a", "b"}
    assert metrics.sample("eni_ipam_node_at_capacity", {"node": "b", "reason": "instance-limit"}) == 1
    assert metrics.samples("eni_ipam_omitted_nodes") == {
        (("category", c),): 0.0 for c in ("total", "in-deficit", "at-capacity", "needs-attention")
    }
    assert metrics.samples("eni_ipam_omitted_node_ips") == {(("type", t),): 0.0 for t in IP_TYPES}


def test_the_default_policy_exports_every_node_of_a_thousand() -> None:
    metrics = Metrics()
    for n in range(1000):
        metrics.set_node(f"n{n}", HEALTHY)
    assert len(nodes_with_series(metrics)) == 1000
    metrics.set_node("n1000", HEALTHY)
    assert nodes_with_series(metrics) == set()
    assert metrics.sample("eni_ipam_nodes", {"category": "total"}) == 1001


def test_above_all_up_to_only_the_nodes_that_need_attention_have_series_and_the_totals_cover_all() -> None:
    metrics = Metrics(node_series=NodeSeriesPolicy(all_up_to=2, most=5))
    metrics.set_node("healthy", HEALTHY)
    metrics.set_node("full", FULL, capacity="instance-limit")
    metrics.set_node("short", NodeStats(available=4, needed=4))
    metrics.set_node("blocked", NodeStats(available=2, needed=6), capacity="subnet")
    metrics.set_node("unknown", NodeStats(limits_known=False), capacity="limits-unknown")
    assert nodes_with_series(metrics) == {"short", "blocked", "unknown"}
    assert metrics.sample("eni_ipam_node_at_capacity", {"node": "full", "reason": "instance-limit"}) is None
    assert metrics.sample("eni_ipam_nodes", {"category": "total"}) == 5
    assert metrics.sample("eni_ipam_nodes", {"category": "at-capacity"}) == 1  # the full node, without series
    assert metrics.sample("eni_ipam_ips", {"type": "available"}) == 22
    assert metrics.sample("eni_ipam_omitted_nodes", {"category": "total"}) == 2
    assert metrics.sample("eni_ipam_omitted_nodes", {"category": "at-capacity"}) == 1
    assert metrics.sample("eni_ipam_omitted_node_ips", {"type": "available"}) == 16
    assert metrics.totals_problems() == []


def test_the_cap_shows_the_most_urgent_and_counts_the_rest_as_needing_attention() -> None:
    metrics = Metrics(node_series=SMALL)
    metrics.set_node("small", NodeStats(needed=1))
    metrics.set_node("large", NodeStats(needed=9))
    metrics.set_node("blocked", NodeStats(needed=1), capacity="security-groups")
    assert nodes_with_series(metrics) == {"large", "blocked"}
    assert metrics.sample("eni_ipam_omitted_nodes", {"category": "needs-attention"}) == 1
    assert metrics.sample("eni_ipam_omitted_nodes", {"category": "in-deficit"}) == 1
    assert metrics.totals_problems() == []


def test_a_node_loses_its_series_when_it_no_longer_needs_attention_and_a_waiting_one_gets_them() -> None:
    metrics = Metrics(node_series=NodeSeriesPolicy(all_up_to=1, most=1))
    metrics.set_node("a", NodeStats(available=2, needed=6), capacity="subnet")
    metrics.set_node("b", NodeStats(available=4, needed=4))
    metrics.set_node("c", HEALTHY)
    assert nodes_with_series(metrics) == {"a"}
    metrics.set_node("a", HEALTHY)
    assert nodes_with_series(metrics) == {"b"}
    assert metrics.samples("eni_ipam_node_at_capacity") == {}
    assert metrics.totals_problems() == []


def test_a_node_that_leaves_the_cluster_loses_its_series_and_frees_its_place() -> None:
    metrics = Metrics(node_series=NodeSeriesPolicy(all_up_to=1, most=1))
    for name in "abcd":
        metrics.set_node(name, NodeStats(needed=3))
    assert nodes_with_series(metrics) == {"a"}
    metrics.remove_node("a")
    assert nodes_with_series(metrics) == {"b"}
    assert metrics.sample("eni_ipam_nodes", {"category": "total"}) == 3
    assert metrics.totals_problems() == []


def test_a_cluster_back_within_all_up_to_exports_every_node_again() -> None:
    metrics = Metrics(node_series=SMALL)
    for name in "abc":
        metrics.set_node(name, HEALTHY)
    assert nodes_with_series(metrics) == set()
    metrics.remove_node("c")
    assert nodes_with_series(metrics) == {"a", "b"}
    assert metrics.sample("eni_ipam_omitted_nodes", {"category": "total"}) == 0


def test_a_node_without_series_holds_no_per_node_row() -> None:
    metrics = Metrics(node_series=NodeSeriesPolicy(all_up_to=0, most=0))
    for n in range(50):
        metrics.set_node(f"n{n}", NodeStats(needed=2), capacity="subnet")
    assert len(metrics.node_ips) == 0 and len(metrics.node_at_capacity) == 0
    assert metrics.sample("eni_ipam_omitted_nodes", {"category": "needs-attention"}) == 50


def test_totals_problems_holds_the_totals_to_the_series_plus_the_omitted_part() -> None:
    def scrape(total: float, omitted: float, needed: float = 2) -> list[tuple[str, dict[str, str], float]]:
        return [
            ("eni_ipam_node_ips", {"node": "a", "type": "needed"}, needed),
            ("eni_ipam_nodes", {"category": "total"}, total),
            ("eni_ipam_omitted_nodes", {"category": "total"}, omitted),
        ]

    assert [p for p in pool_totals_problems(scrape(3, 2)) if "total" in p] == []
    assert 'nodes{category="total"} is 4, the per-node series (1) and the omitted part (2) say 3' in (
        pool_totals_problems(scrape(4, 2))
    )
    assert "a has series but needs no attention while other nodes are omitted" in pool_totals_problems(
        scrape(3, 2, needed=0)
    )
    assert 'omitted nodes{category="total"} is -1' in pool_totals_problems(scrape(0, -1))


_POLICIES = st.integers(0, 4).flatmap(
    lambda all_up_to: st.builds(NodeSeriesPolicy, st.just(all_up_to), st.integers(all_up_to, all_up_to + 3))
)
_MANY_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("set"), st.sampled_from("abcdefg"), _STATS, st.sampled_from(("", *CAPACITY_REASONS))
        ),
        st.tuples(st.just("remove"), st.sampled_from("abcdefgh")),
        st.tuples(st.just("clear")),
        st.tuples(st.just("show")),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(_POLICIES, _MANY_OPS)
def test_totals_equal_the_node_series_plus_the_omitted_part_under_any_policy_and_sequence(
    policy: NodeSeriesPolicy, ops: list[tuple]
) -> None:
    """The old invariant, extended: exact at every read, whichever nodes the policy leaves out; and
    the nodes with series are the policy's."""
    metrics = Metrics(node_series=policy)
    stats: dict[str, tuple[NodeStats, str]] = {}
    for op in ops:
        if op[0] == "set":
            metrics.set_node(op[1], op[2], capacity=op[3])
            stats[op[1]] = (op[2], op[3])
        elif op[0] == "remove":
            metrics.remove_node(op[1])
            stats.pop(op[1], None)
        elif op[0] == "clear":
            metrics.clear_pool_state()
            stats.clear()
        else:
            metrics.show_totals()
        assert metrics.totals_problems() == [], op
        shown = nodes_with_series(metrics)
        attention = {name for name, (s, reason) in stats.items() if urgency(s, reason) is not None}
        if len(stats) <= policy.all_up_to:
            assert shown == set(stats)
        else:
            assert shown <= attention and len(shown) == min(policy.most, len(attention))


# -- a scrape: frozen on the loop, written anywhere -------------------------------------------------


def busy_metrics() -> Metrics:
    metrics = Metrics(node_series=NodeSeriesPolicy(all_up_to=3, most=4), process=False)
    metrics.replace_subnets([subnet("s-1", 10), subnet("s-2", 20)])
    metrics.api_call(operation="AssignPrivateIpAddresses", outcome="ok", seconds=0.2)
    metrics.report_role(ready=lambda: True, leader=lambda: True)
    for n in range(6):
        metrics.set_node(f"n{n}", NodeStats(available=n, needed=n % 3), capacity="subnet" if n == 4 else "")
    return metrics


async def test_a_scrape_rendered_off_the_loop_is_the_text_rendered_on_it() -> None:
    metrics = busy_metrics()
    on_loop = metrics.exposition()
    off_loop = await asyncio.to_thread(render, metrics.freeze())
    assert off_loop == on_loop == generate_latest(metrics.registry)
    assert b'eni_ipam_node_ips{node="n4",type="needed"} 1.0' in off_loop


async def test_a_frozen_scrape_keeps_what_it_read_while_the_loop_changes_the_nodes() -> None:
    metrics = busy_metrics()
    frozen = metrics.freeze()
    before = metrics.exposition()
    for n in range(6):
        metrics.set_node(f"n{n}", NodeStats(available=40, needed=5))
    metrics.remove_node("n1")
    text = (await asyncio.to_thread(render, frozen)).decode()
    assert text.encode() == before
    samples = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]
    assert pool_totals_problems(samples) == []


def test_the_per_node_text_is_what_prometheus_client_writes() -> None:
    metrics = Metrics(node_series=NodeSeriesPolicy(all_up_to=5, most=5))
    metrics.set_node(
        'we"ird\\node\nname', NodeStats(available=12_345_678, used=3, needed=2), capacity="subnet"
    )
    metrics.set_node("plain", NodeStats(available=0, excess=1))
    for series in (metrics.node_ips, metrics.node_at_capacity):
        (family,) = series.collect()
        with_samples = Metric(family.name, family.documentation, "gauge")
        with_samples.samples = list(family.samples)
        assert family.text() == generate_latest(Frozen((_Families((with_samples,)),)))


def test_the_per_node_families_take_the_gauge_calls_a_tool_may_make() -> None:
    metrics = Metrics()
    metrics.set_node("n1", NodeStats(available=4), capacity="subnet")
    metrics.node_at_capacity.remove("n1", "subnet")
    assert metrics.samples("eni_ipam_node_at_capacity") == {}
    with pytest.raises(KeyError):
        metrics.node_at_capacity.remove("n1", "subnet")
    metrics.node_ips.labels(node="n2", type="used").set(3)
    assert metrics.sample("eni_ipam_node_ips", {"node": "n2", "type": "used"}) == 3
    assert metrics.sample("eni_ipam_node_ips", {"node": "n2", "type": "available"}) is None


def test_pausing_to_hand_over_the_gil_does_not_change_the_text() -> None:
    metrics = Metrics(node_series=NodeSeriesPolicy(all_up_to=1200, most=1200), process=False)
    for n in range(1100):  # more than ROWS_BETWEEN_PAUSES nodes: the per-node text pauses too
        metrics.set_node(f"n{n}", NodeStats(available=n, needed=n % 2))
    frozen = metrics.freeze()
    assert render(frozen, pause=0.0001) == render(frozen) == generate_latest(metrics.registry)


def test_the_process_and_the_interpreter_are_exported_and_no_created_series() -> None:
    text = Metrics().exposition().decode()
    assert "process_cpu_seconds_total" in text and "python_info{" in text and "python_gc_" in text
    assert "_created" not in text
    assert "process_" not in Metrics(process=False).exposition().decode()


def test_openmetrics_is_the_same_samples_with_one_eof() -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

    metrics = busy_metrics()
    frozen = metrics.freeze()
    text = render(frozen, openmetrics=True).decode()
    assert text.endswith("# EOF\n") and text.count("# EOF") == 1
    plain = {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for f in text_string_to_metric_families(render(frozen).decode())
        for s in f.samples
    }
    opened = {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for f in openmetrics_families(text)
        for s in f.samples
    }
    assert opened == plain


def test_a_deficit_that_lasted_half_an_hour_has_a_bucket_of_its_own() -> None:
    metrics = Metrics(process=False)
    metrics.deficit_resolved(seconds=2000)
    bucket = {
        le: metrics.sample("eni_ipam_time_to_ip_seconds_bucket", {"le": le}) for le in ("1800.0", "3600.0")
    }
    assert bucket == {"1800.0": 0, "3600.0": 1}


def test_a_failing_nodes_series_follows_its_reason_and_goes_with_the_node() -> None:
    metrics = Metrics()
    short = NodeStats(available=4, needed=4)
    metrics.set_node("n1", short, failing=("Unauthorized", 2))
    assert metrics.sample("eni_ipam_node_failing", {"node": "n1", "reason": "Unauthorized"}) == 2
    metrics.set_node("n1", short, failing=("QuotaExceeded", 3))  # same stats, another reason
    assert metrics.sample("eni_ipam_node_failing", {"node": "n1", "reason": "Unauthorized"}) is None
    assert metrics.sample("eni_ipam_node_failing", {"node": "n1", "reason": "QuotaExceeded"}) == 3
    metrics.set_node("n1", short)  # a pass succeeded
    assert metrics.sample("eni_ipam_node_failing", {"node": "n1", "reason": "QuotaExceeded"}) is None
    metrics.set_node("n2", short, failing=("other", 1))
    metrics.remove_node("n2")
    assert metrics.sample("eni_ipam_node_failing", {"node": "n2", "reason": "other"}) is None
    metrics.set_node("n3", short, failing=("TransientError", 1))
    metrics.clear_pool_state()
    assert metrics.sample("eni_ipam_node_failing", {"node": "n3", "reason": "TransientError"}) is None


def test_a_failing_node_without_per_node_series_has_no_failing_series_until_it_gets_them() -> None:
    metrics = Metrics(node_series=NodeSeriesPolicy(all_up_to=1, most=1))
    metrics.set_node("worse", NodeStats(needed=9))
    metrics.set_node("hidden", NodeStats(needed=1), failing=("Throttled", 4))
    assert metrics.sample("eni_ipam_node_failing", {"node": "hidden", "reason": "Throttled"}) is None
    metrics.set_node("worse", NodeStats(available=9))  # healthy: the other takes its place
    assert metrics.sample("eni_ipam_node_failing", {"node": "hidden", "reason": "Throttled"}) == 4


def test_every_core_provider_error_is_a_failure_reason_of_its_own() -> None:
    from eni_ipam.core import errors
    from eni_ipam.core.observe import FAILURE_REASONS, failure_reason

    def tree(kind: type) -> list[type]:
        return [
            kind,
            *(c for sub in kind.__subclasses__() if sub.__module__ == errors.__name__ for c in tree(sub)),
        ]

    for kind in tree(errors.ProviderError):
        assert kind.__name__ in FAILURE_REASONS
        assert failure_reason(kind.__new__(kind)) == kind.__name__
    assert failure_reason(KeyError("x")) == "other"
