"""The controller's pool gauges: each node's series and the cluster totals, kept from one record.

``available`` always means the addresses in the pools, used ones included, exactly as in node stats —
unlike the reference operator, whose gauges of the same name disagree with each other.

Invariants:

* Which nodes have per-node series (``node_ips``, ``node_capacity``, ``node_at_capacity``,
  ``node_failing``) is
  :class:`~eni_ipam.adapters.metrics.selection.NodeSeriesPolicy`'s: every node in a cluster of up to
  ``all_up_to`` nodes, otherwise at most ``most`` nodes that need attention.
* The cluster totals ``ips{type}`` and ``nodes{category}`` cover every node. At every scrape they are
  exactly the sums and counts of the per-node series plus those of the nodes without series,
  exported as ``omitted_node_ips{type}`` and ``omitted_nodes{category}``: all are read from the one
  record :meth:`PoolGauges.set_node` keeps, in the same step, so no scrape sees them disagree. When
  every node has series, the omitted part is zero and the totals are the sums of the per-node series.
* A node without series costs no object in prometheus_client; one with series costs a tuple.
* A node's series exist from the :meth:`PoolGauges.set_node` that selects it until it leaves the
  selection or :meth:`PoolGauges.remove_node`; it is counted in the totals from its first
  :meth:`PoolGauges.set_node` until :meth:`PoolGauges.remove_node`.
* :meth:`PoolGauges.clear` drops every per-node series and the totals.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from eni_ipam.adapters.metrics.exposition import NAMESPACE, NodeSeries
from eni_ipam.adapters.metrics.selection import NodeSelection, NodeSeriesPolicy, urgency
from eni_ipam.core.model import NodeStats
from eni_ipam.core.observe import CAPACITY_REASONS, FAILURE_REASONS

IP_TYPES = ("available", "used", "needed", "excess")
CAPACITY_TYPES = ("max-ips", "interface-headroom")
"""``node_capacity``'s types."""
NODE_CATEGORIES = ("total", "in-deficit", "at-capacity")
OMITTED_CATEGORIES = (*NODE_CATEGORIES, "needs-attention")
"""``omitted_nodes`` adds ``needs-attention``: nodes that need attention but were left without
series by the cap (``node_series_max``)."""


class _Sums:
    """Addresses by type and nodes by category, summed over some nodes (running sums)."""

    def __init__(self, categories: Sequence[str]) -> None:
        self.ips = dict.fromkeys(IP_TYPES, 0)
        self.nodes = dict.fromkeys(categories, 0)

    def account(self, stats: NodeStats, reason: str, sign: int) -> None:
        for kind in IP_TYPES:
            self.ips[kind] += sign * getattr(stats, kind)
        self.nodes["total"] += sign
        self.nodes["in-deficit"] += sign * (stats.needed > 0)
        self.nodes["at-capacity"] += sign * (reason == "instance-limit")
        if "needs-attention" in self.nodes:
            self.nodes["needs-attention"] += sign * (urgency(stats, reason) is not None)

    def reset(self) -> None:
        self.ips = dict.fromkeys(self.ips, 0)
        self.nodes = dict.fromkeys(self.nodes, 0)


class _PoolTotals:
    """The cluster totals over every node, and the part of them from the nodes without per-node
    series: a collector, computed at collection from the running sums, so they cannot lag behind
    the per-node series they add up with."""

    def __init__(self) -> None:
        self.all = _Sums(NODE_CATEGORIES)
        self.omitted = _Sums(OMITTED_CATEGORIES)
        self.shown = False
        """False until a node is gauged or a resync is applied, and after a clear: a replica that
        does not reconcile exports no totals."""

    def reset(self) -> None:
        self.all.reset()
        self.omitted.reset()
        self.shown = False

    def describe(self) -> Iterator[Metric]:
        yield from self._families(empty=True)

    def collect(self) -> Iterator[Metric]:
        yield from self._families(empty=not self.shown)

    def _families(self, *, empty: bool) -> Iterator[Metric]:
        families = (
            (
                GaugeMetricFamily(
                    f"{NAMESPACE}_ips",
                    "Cluster totals of pool addresses by type, every node (sums of node_ips and "
                    "omitted_node_ips)",
                    labels=["type"],
                ),
                self.all.ips,
            ),
            (
                GaugeMetricFamily(
                    f"{NAMESPACE}_nodes",
                    "Nodes by category, every node (total; in-deficit: needed > 0; at-capacity: "
                    "reason instance-limit)",
                    labels=["category"],
                ),
                self.all.nodes,
            ),
            (
                GaugeMetricFamily(
                    f"{NAMESPACE}_omitted_node_ips",
                    "Pool addresses by type of the nodes without node_ips series (ips = sum of "
                    "node_ips + this)",
                    labels=["type"],
                ),
                self.omitted.ips,
            ),
            (
                GaugeMetricFamily(
                    f"{NAMESPACE}_omitted_nodes",
                    "Nodes without per-node series, by category (as nodes; needs-attention: left "
                    "out by node_series_max)",
                    labels=["category"],
                ),
                self.omitted.nodes,
            ),
        )
        for family, values in families:
            if not empty:
                for label, value in values.items():
                    family.add_metric([label], value)
            yield family


class PoolGauges:
    """The per-node families and the cluster totals of a controller, kept from one record of every
    node's stats and capacity reason. The owner registers :meth:`collectors` on its registry and
    reports every node through :meth:`set_node` and :meth:`remove_node`. ``policy`` decides which
    nodes have per-node series."""

    def __init__(self, policy: NodeSeriesPolicy) -> None:
        self._totals = _PoolTotals()
        self._gauged: dict[str, tuple[NodeStats, str]] = {}
        """Node → its stats and capacity reason now, every node: the totals' one source."""
        self._failing: dict[str, tuple[str, int]] = {}
        """Node → why its last pass failed and how many failed in a row, for the nodes whose last
        pass failed."""
        self._selection = NodeSelection(policy, self._gauged.keys())
        """Which nodes have per-node series."""
        self.node_ips = NodeSeries(
            "node_ips",
            "Pool addresses of one node by type (every node of a small cluster; otherwise the nodes "
            "that need attention)",
            "type",
            IP_TYPES,
        )
        self.node_at_capacity = NodeSeries(
            "node_at_capacity",
            "1 for a node whose pool cannot grow, by reason (instance-limit, subnet, security-groups, "
            "limits-unknown); no series for a node that can grow (nor, in a large cluster, for a "
            "full node that needs nothing)",
            "reason",
            CAPACITY_REASONS,
        )
        self.node_failing = NodeSeries(
            "node_failing",
            "Maintenance passes of one node that failed in a row, by the last one's reason (the "
            "error's class); no series once a pass succeeds (nor for a node without per-node series)",
            "reason",
            FAILURE_REASONS,
        )
        self.node_capacity = NodeSeries(
            "node_capacity",
            "What one node can reach, by type (max-ips: addresses its interfaces can hold, those it "
            "may still attach included; interface-headroom: interfaces that can still take an "
            "address, attached ones with a free slot and adapter slots a new one may take)",
            "type",
            CAPACITY_TYPES,
        )

    def collectors(self) -> tuple[Collector, ...]:
        """What a scrape reads of the pools, in the order it lists them: the totals first."""
        return (self._totals, self.node_ips, self.node_at_capacity, self.node_failing, self.node_capacity)

    def set_node(
        self, name: str, stats: NodeStats, *, capacity: str = "", failing: tuple[str, int] | None = None
    ) -> None:
        """Node ``name`` now has ``stats``; ``capacity`` is why its pool cannot grow (one of
        :data:`CAPACITY_REASONS`), or empty; ``failing``, while its last pass failed, the reason
        (one of :data:`FAILURE_REASONS`) and the failed passes in a row. The totals, and which nodes
        have series, follow in the same step."""
        if failing != self._failing.get(name):
            if failing is None:
                del self._failing[name]
                self.node_failing.drop(name)
            else:
                self._failing[name] = failing
                if name in self._selection.shown:
                    self._write_failing(name)
        old = self._gauged.get(name)
        if old is not None and old[1] == capacity and (old[0] is stats or old[0] == stats):
            return  # nothing changed (most nodes at most resyncs)
        self._gauged[name] = (stats, capacity)
        if old is not None:
            self._totals.all.account(old[0], old[1], -1)
        self._totals.all.account(stats, capacity, +1)
        self._totals.shown = True
        if name in self._selection.shown:
            self._write(name, stats, capacity)
        else:
            if old is not None:
                self._totals.omitted.account(old[0], old[1], -1)
            self._totals.omitted.account(stats, capacity, +1)
        self._apply(self._selection.changed(name, urgency(stats, capacity)))

    def remove_node(self, name: str) -> None:
        old = self._gauged.pop(name, None)
        if old is None:
            return
        self._totals.all.account(old[0], old[1], -1)
        self._failing.pop(name, None)
        if name in self._selection.shown:
            self._drop(name)
        else:
            self._totals.omitted.account(old[0], old[1], -1)
        self._apply(self._selection.removed(name))

    def _apply(self, changes: Iterable[tuple[str, bool]]) -> None:
        """Give nodes series or take them away, moving them out of or into the omitted part."""
        for node, show in changes:
            stats, capacity = self._gauged[node]
            if show:
                self._write(node, stats, capacity)
                self._totals.omitted.account(stats, capacity, -1)
            else:
                self._drop(node)
                self._totals.omitted.account(stats, capacity, +1)

    def _write(self, node: str, stats: NodeStats, capacity: str) -> None:
        self.node_ips.put(node, (stats.available, stats.used, stats.needed, stats.excess))
        if stats.limits_known:
            self.node_capacity.put(node, (stats.capacity, stats.remaining_interfaces))
        else:
            self.node_capacity.drop(node)  # nothing known of what it can reach
        if capacity:
            self.node_at_capacity.put(node, tuple(1 if r == capacity else None for r in CAPACITY_REASONS))
        else:
            self.node_at_capacity.drop(node)
        self._write_failing(node)

    def _write_failing(self, node: str) -> None:
        failing = self._failing.get(node)
        if failing is None:
            self.node_failing.drop(node)
        else:
            reason, count = failing
            self.node_failing.put(node, tuple(count if r == reason else None for r in FAILURE_REASONS))

    def _drop(self, node: str) -> None:
        """Take every per-node series of ``node`` away."""
        self.node_ips.drop(node)
        self.node_at_capacity.drop(node)
        self.node_failing.drop(node)
        self.node_capacity.drop(node)

    def show_totals(self) -> None:
        """Export the totals even with no node (this replica reconciles: zero is the truth)."""
        self._totals.shown = True

    def exported(self) -> Iterator[tuple[str, Mapping[str, str], float]]:
        """The samples of the totals and of the per-node series they add up, as a scrape reads
        them: name, labels, value."""
        families = (*self.node_ips.collect(), *self.node_at_capacity.collect(), *self._totals.collect())
        return ((s.name, s.labels, s.value) for family in families for s in family.samples)

    def clear(self) -> None:
        """Forget every node: no per-node series and no totals until the next report."""
        self.node_ips.clear()
        self.node_at_capacity.clear()
        self.node_failing.clear()
        self.node_capacity.clear()
        self._gauged.clear()
        self._failing.clear()
        self._selection.clear()
        self._totals.reset()
