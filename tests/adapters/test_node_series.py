"""Which nodes have per-node series: every node of a small cluster; above ``all_up_to`` only the nodes
that need attention, at most ``most`` of them, the most urgent first, without flapping among equals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eni_ipam.adapters.metrics.selection import NodeSelection, NodeSeriesPolicy, Urgency, urgency
from eni_ipam.config.schema import validate
from eni_ipam.core.model import NodeStats
from eni_ipam.core.settings import Settings
from eni_ipam.errors import ConfigError

SHORT = (1, -1)
"""A node short of one address."""


class Cluster:
    """A selection and the node table it follows, changed as Metrics changes them."""

    def __init__(self, all_up_to: int, most: int) -> None:
        self.nodes: dict[str, Urgency | None] = {}
        self.selection = NodeSelection(NodeSeriesPolicy(all_up_to=all_up_to, most=most), self.nodes.keys())
        self.changes: list[tuple[str, bool]] = []

    def set(self, name: str, level: Urgency | None) -> None:
        self.nodes[name] = level
        self.changes += self.selection.changed(name, level)

    def remove(self, name: str) -> None:
        del self.nodes[name]
        self.changes += self.selection.removed(name)

    @property
    def shown(self) -> set[str]:
        return set(self.selection.shown)


# -- what needs attention ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stats", "capacity", "needs"),
    [
        (NodeStats(available=8), "", False),
        (NodeStats(available=8, at_capacity=True), "instance-limit", False),  # full, needs nothing
        (NodeStats(available=8, needed=2, at_capacity=True), "instance-limit", True),
        (NodeStats(available=3, needed=5), "", True),
        (NodeStats(available=3, needed=5), "subnet", True),
        (NodeStats(available=3, needed=5), "security-groups", True),
        (NodeStats(limits_known=False), "limits-unknown", True),  # gets nothing, reports needed 0
    ],
)
def test_a_node_needs_attention_exactly_when_an_alert_may_page_for_it(
    stats: NodeStats, capacity: str, needs: bool
) -> None:
    assert (urgency(stats, capacity) is not None) == needs


def test_a_node_that_cannot_grow_comes_before_any_deficit_and_deficits_count_by_powers_of_two() -> None:
    blocked = urgency(NodeStats(needed=1), "subnet")
    assert blocked is not None
    deficits = [urgency(NodeStats(needed=n), "") for n in (1, 2, 3, 4, 7, 8, 500)]
    assert all(d is not None and blocked < d for d in deficits)
    assert deficits[1] == deficits[2] and deficits[3] == deficits[4]  # 2–3, 4–7
    assert deficits == sorted(deficits, key=lambda d: d or (9, 9), reverse=True)


# -- the policy ----------------------------------------------------------------------------------


def test_the_metrics_default_policy_is_the_settings_default() -> None:
    assert NodeSeriesPolicy.of(Settings()) == NodeSeriesPolicy()
    assert NodeSeriesPolicy.of(Settings(node_series_all_up_to=10, node_series_max=20)) == NodeSeriesPolicy(
        10, 20
    )


def test_the_cap_may_not_be_below_the_cluster_size_that_exports_everything() -> None:
    with pytest.raises(ConfigError) as info:
        validate(Settings, {"node_series_all_up_to": 3000, "node_series_max": 2000}, path="settings")
    assert (
        info.value.field == "settings.node_series_max"
        and "at least node_series_all_up_to" in info.value.message
    )
    with pytest.raises(ValueError, match="all_up_to"):
        NodeSeriesPolicy(all_up_to=3, most=2)


# -- the selection -------------------------------------------------------------------------------


def test_up_to_all_up_to_nodes_every_node_is_shown_whatever_it_needs() -> None:
    cluster = Cluster(all_up_to=3, most=3)
    for name in "abc":
        cluster.set(name, None)
    assert cluster.shown == {"a", "b", "c"}
    assert cluster.changes == [("a", True), ("b", True), ("c", True)]


def test_outgrowing_all_up_to_keeps_only_the_nodes_that_need_attention() -> None:
    cluster = Cluster(all_up_to=3, most=3)
    cluster.set("a", None)
    cluster.set("b", SHORT)
    cluster.set("c", None)
    cluster.changes.clear()
    cluster.set("d", None)
    assert cluster.shown == {"b"}
    assert sorted(cluster.changes) == [("a", False), ("c", False)]


def test_back_within_all_up_to_every_node_is_shown_again() -> None:
    cluster = Cluster(all_up_to=2, most=2)
    for name in "abc":
        cluster.set(name, None)
    assert cluster.shown == set()
    cluster.changes.clear()
    cluster.remove("c")
    assert cluster.shown == {"a", "b"}
    assert sorted(cluster.changes) == [("a", True), ("b", True)]


def test_a_node_no_longer_needing_attention_loses_its_series_to_the_most_urgent_waiting_one() -> None:
    cluster = Cluster(all_up_to=0, most=2)
    cluster.set("a", (1, -2))
    cluster.set("b", (1, -2))
    cluster.set("c", (1, -1))
    cluster.set("d", (1, -2))
    assert cluster.shown == {"a", "b"}
    cluster.changes.clear()
    cluster.set("a", None)
    assert cluster.shown == {"b", "d"}  # d before c: the larger deficit
    assert cluster.changes == [("a", False), ("d", True)]


def test_a_removed_node_frees_its_place() -> None:
    cluster = Cluster(all_up_to=0, most=1)
    cluster.set("a", SHORT)
    cluster.set("b", SHORT)
    cluster.changes.clear()
    cluster.remove("a")
    assert cluster.shown == {"b"}
    assert cluster.changes == [("b", True)]


def test_the_cap_lets_a_strictly_more_urgent_node_take_the_least_urgent_place() -> None:
    cluster = Cluster(all_up_to=0, most=2)
    cluster.set("a", (1, -1))
    cluster.set("b", (1, -3))
    cluster.changes.clear()
    cluster.set("c", (0, -1))  # cannot grow: before any deficit
    assert cluster.shown == {"b", "c"}
    assert cluster.changes == [("a", False), ("c", True)]


def test_among_equals_the_nodes_with_series_keep_them_and_the_longest_waiting_comes_next() -> None:
    cluster = Cluster(all_up_to=0, most=2)
    for name in "abcd":
        cluster.set(name, SHORT)
    assert cluster.shown == {"a", "b"}
    cluster.set("d", (1, -1))  # unchanged: no flapping
    cluster.set("a", (1, -1))
    assert cluster.shown == {"a", "b"}
    cluster.set("a", None)
    assert cluster.shown == {"b", "c"}  # c has waited longer than d


def test_a_waiting_node_whose_deficit_grows_past_a_shown_one_takes_its_place() -> None:
    cluster = Cluster(all_up_to=0, most=1)
    cluster.set("a", (1, -2))
    cluster.set("b", (1, -1))
    assert cluster.shown == {"a"}
    cluster.set("b", (1, -3))
    assert cluster.shown == {"b"}
    cluster.set("a", (1, -3))  # as urgent as b now: b keeps its series
    assert cluster.shown == {"b"}


_LEVELS = st.one_of(st.none(), st.tuples(st.integers(0, 1), st.integers(-3, 0)))


@settings(max_examples=300, deadline=None)
@given(
    all_up_to=st.integers(0, 4),
    extra=st.integers(0, 4),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("set"), st.sampled_from("abcdefgh"), _LEVELS),
            st.tuples(st.just("remove"), st.sampled_from("abcdefgh")),
        ),
        max_size=60,
    ),
)
def test_the_selection_is_the_policy_after_any_sequence(all_up_to: int, extra: int, ops: list[tuple]) -> None:
    cluster = Cluster(all_up_to=all_up_to, most=all_up_to + extra)
    shown: set[str] = set()
    for op in ops:
        if op[0] == "set":
            cluster.set(op[1], op[2])
        elif op[1] in cluster.nodes:
            cluster.remove(op[1])
            shown.discard(op[1])
        for name, show in cluster.changes:  # the changes, applied, give the selection
            (shown.add if show else shown.discard)(name)
        cluster.changes.clear()
        assert shown == cluster.shown
        if len(cluster.nodes) <= all_up_to:
            assert shown == set(cluster.nodes)
            continue
        attention = {name: level for name, level in cluster.nodes.items() if level is not None}
        assert shown <= set(attention)
        assert len(shown) == min(all_up_to + extra, len(attention))
        waiting = [attention[name] for name in attention if name not in shown]
        if shown and waiting:
            assert not min(waiting) < max(attention[name] for name in shown)
