"""Prometheus metrics (namespace ``eni_ipam``), each set on a registry of its own.

Names and labels are a dashboard contract (docs/metrics.md). ``available`` always means the
addresses in the pools, used ones included, exactly as in node stats — unlike the reference
operator, whose gauges of the same name disagree with each other. Library code never touches
prometheus_client's global registry: every :class:`MetricSet` owns one, so tests and several
managers in one process never collide.

Two sets, one per process kind, so neither exports the other's series: :class:`Metrics` for the
controller (``eni-ipam run``, the demos, the simulator) and ``AgentMetrics`` (in
:mod:`eni_ipam.agent.metrics`) for a node agent. Both carry what every Kubernetes client counts.

Invariants of the controller's pool gauges:

* The cluster totals ``ips{type}`` and ``nodes{category}`` are, at every scrape, exactly the sums
  and counts of the per-node series (``node_ips``, ``node_at_capacity``): both are read from the
  one record :meth:`Metrics.set_node` keeps, in the same step, so no scrape sees them disagree.
* A node's series exist from its first :meth:`Metrics.set_node` until :meth:`Metrics.remove_node`.
* :meth:`Metrics.clear_pool_state` drops every pool series (a standby exports none).
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from eni_ipam import __version__
from eni_ipam.core.model import NodeStats, Subnet
from eni_ipam.core.observe import CAPACITY_REASONS

NAMESPACE = "eni_ipam"
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300)
IP_TYPES = ("available", "used", "needed", "excess")
NODE_CATEGORIES = ("total", "in-deficit", "at-capacity")
__all__ = ["CAPACITY_REASONS", "IP_TYPES", "NAMESPACE", "NODE_CATEGORIES", "MetricSet", "Metrics"]


class MetricSet:
    """A registry of its own, the families every process exports, and reading back."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.build_info = self.gauge("build_info", "Always 1; the version running", ["version"])
        self.build_info.labels(version=__version__).set(1)
        # -- every Kubernetes client ----------------------------------------------------------------
        self.kube_requests = self.counter(
            "kube_requests", "Requests to the Kubernetes API by verb, resource and HTTP status code",
            ["verb", "resource", "code"],
        )  # fmt: skip
        self.informer_relists = self.counter(
            "informer_relists",
            "Full lists of a resource (start, and after the watch's version expired)",
            ["resource"],
        )
        self.informer_watch_restarts = self.counter(
            "informer_watch_restarts",
            "Watches restarted, by resource and reason (expired, throttled, dropped, error)",
            ["resource", "reason"],
        )

    # -- declaring families (namespace and registry filled in) ----------------------------------

    def gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(name, documentation, labels, namespace=NAMESPACE, registry=self.registry)

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(name, documentation, labels, namespace=NAMESPACE, registry=self.registry)

    def histogram(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Histogram:
        return Histogram(
            name,
            documentation,
            labels,
            namespace=NAMESPACE,
            registry=self.registry,
            buckets=_DURATION_BUCKETS,
        )

    # -- reading back (simulator expectations, demo, tests) -------------------------------------

    def sample(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        return self.registry.get_sample_value(name, dict(labels or {}))

    def samples(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Every sample called ``name``: sorted label pairs → value."""
        return {
            tuple(sorted(s.labels.items())): s.value
            for family in self.registry.collect()
            for s in family.samples
            if s.name == name
        }

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _PoolTotals:
    """The cluster totals, computed at collection time from the per-node record (a collector, so
    they cannot lag behind the per-node gauges they sum)."""

    def __init__(self) -> None:
        self.ips = dict.fromkeys(IP_TYPES, 0)
        self.nodes = dict.fromkeys(NODE_CATEGORIES, 0)
        self.shown = False
        """False until a node is gauged or a resync is applied, and after a clear: a replica that
        does not reconcile exports no totals."""

    def account(self, stats: NodeStats, reason: str, sign: int) -> None:
        for kind in IP_TYPES:
            self.ips[kind] += sign * getattr(stats, kind)
        self.nodes["total"] += sign
        self.nodes["in-deficit"] += sign * (stats.needed > 0)
        self.nodes["at-capacity"] += sign * (reason == "instance-limit")

    def reset(self) -> None:
        self.ips = dict.fromkeys(IP_TYPES, 0)
        self.nodes = dict.fromkeys(NODE_CATEGORIES, 0)
        self.shown = False

    def describe(self) -> Iterator[Metric]:
        yield from self._families(empty=True)

    def collect(self) -> Iterator[Metric]:
        yield from self._families(empty=not self.shown)

    def _families(self, *, empty: bool) -> Iterator[Metric]:
        ips = GaugeMetricFamily(
            f"{NAMESPACE}_ips", "Cluster totals of pool addresses by type (sums of node_ips)", labels=["type"]
        )
        nodes = GaugeMetricFamily(
            f"{NAMESPACE}_nodes",
            "Nodes by category (total; in-deficit: needed > 0; at-capacity: reason instance-limit)",
            labels=["category"],
        )
        if not empty:
            for kind, value in self.ips.items():
                ips.add_metric([kind], value)
            for category, value in self.nodes.items():
                nodes.add_metric([category], value)
        yield ips
        yield nodes


class Metrics(MetricSet):
    """The controller's metrics: pools, cloud API, reconciliation, leadership, Kubernetes writes.

    Implements :class:`eni_ipam.core.observe.Observer`, the domain's reports (``node_ips`` and
    ``nodes{category="at-capacity"}`` count the ``instance-limit`` reason of
    :data:`~eni_ipam.core.observe.CAPACITY_REASONS`)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        self._totals = _PoolTotals()
        self.registry.register(self._totals)
        self._gauged: dict[str, tuple[NodeStats, str]] = {}
        """Node → what its series say now (stats, capacity reason): the totals' one source."""
        self.node_ips = self.gauge("node_ips", "Pool addresses of one node by type", ["node", "type"])
        self.node_at_capacity = self.gauge(
            "node_at_capacity",
            "1 for a node whose pool cannot grow, by reason (instance-limit, subnet, security-groups, "
            "limits-unknown); no series for a node that can grow",
            ["node", "reason"],
        )
        self.allocation_ops = self.counter("allocation_ops", "Addresses allocated, by subnet", ["subnet"])
        self.release_ops = self.counter("release_ops", "Addresses released, by subnet", ["subnet"])
        self.interface_creation_ops = self.counter(
            "interface_creation_ops", "Interfaces created, by subnet and outcome", ["subnet", "status"]
        )
        self.available_ips_per_subnet = self.gauge(
            "available_ips_per_subnet",
            "Free addresses per subnet: the cloud's count at the last resync, net of the passes since",
            ["subnet", "zone"],
        )
        self.subnet_size_ips = self.gauge(
            "subnet_size_ips",
            "Addresses in the subnet's CIDR (the cloud reserves a few of them)",
            ["subnet", "zone"],
        )
        self.resync = self.counter("resync", "Full resyncs of the cloud view that succeeded")
        self.resync_failures = self.counter("resync_failures", "Full resyncs that failed")
        self.node_passes = self.counter(
            "node_maintenance_passes", "Maintenance passes that ended, failed ones included"
        )
        self.node_failures = self.counter(
            "node_maintenance_failures", "Failed maintenance passes", ["reason"]
        )
        self.allocation_duration = self.histogram(
            "allocation_duration_seconds", "Duration of allocation operations", ["type", "status"]
        )
        self.release_duration = self.histogram(
            "release_duration_seconds", "Duration of release operations", ["status"]
        )
        self.api_duration = self.histogram(
            "api_duration_seconds",
            "Cloud API call latency by operation and outcome (ok, or the cloud's error code)",
            ["operation", "outcome"],
        )
        self.api_rate_limit_wait = self.histogram(
            "api_rate_limit_wait_seconds",
            "Time spent waiting for a client-side rate-limit token",
            ["operation"],
        )
        self.api_throttled = self.counter(
            "api_throttled", "Requests the cloud throttled (SDK retries included)", ["operation"]
        )
        self.api_requests = self.counter(
            "api_requests",
            "Requests sent to the cloud, SDK retries included (each spends a token of the cloud's bucket)",
            ["operation"],
        )
        self.time_to_ip = self.histogram(
            "time_to_ip_seconds", "Seconds from a node's deficit appearing to its being resolved"
        )
        self.gc_interfaces_total = self.counter(
            "gc_interfaces",
            "Leaked interfaces handled by garbage collection, by action (marked, deleted, failed)",
            ["action"],
        )
        self.gc_failures = self.counter("gc_run_failures", "Garbage-collection runs whose listing failed")
        # -- the service (leader election, Kubernetes) ---------------------------------------------
        self.leader = self.gauge("leader", "1 while this replica holds the leader lease (or runs alone)")
        self.ready = self.gauge(
            "ready",
            "1 while this replica reconciles: it leads (or runs alone) and its initial resync succeeded",
        )
        self.nodes_ignored = self.gauge(
            "nodes_ignored",
            "Nodes given no pool, by reason (provider-id-scheme: the Node belongs to another cloud)",
            ["reason"],
        )
        self.status_writes = self.counter(
            "status_writes", "Node pool status writes by outcome (ok, conflict, failed)", ["outcome"]
        )

    # -- role ------------------------------------------------------------------------------------

    def report_role(self, *, ready: Callable[[], bool], leader: Callable[[], bool] | None = None) -> None:
        """Export ``ready`` (and ``leader``, unless the leader election sets it) as they are at each
        scrape: read then, never a copy that may be stale."""
        self.ready.set_function(lambda: float(ready()))
        if leader is not None:
            self.leader.set_function(lambda: float(leader()))

    # -- API wrapper ----------------------------------------------------------------------------

    def api_call(self, *, operation: str, outcome: str, seconds: float) -> None:
        """One logical call (all its SDK attempts) finished."""
        self.api_duration.labels(operation=operation, outcome=outcome).observe(seconds)

    def api_request(self, *, operation: str, throttled: bool = False) -> None:
        """One request went to the cloud (``throttled``: and the cloud answered with a throttle)."""
        self.api_requests.labels(operation=operation).inc()
        if throttled:
            self.api_throttle(operation=operation)

    def api_throttle(self, *, operation: str) -> None:
        """The cloud answered one request with a throttle."""
        self.api_throttled.labels(operation=operation).inc()

    def rate_limit_wait(self, *, operation: str, seconds: float) -> None:
        self.api_rate_limit_wait.labels(operation=operation).observe(seconds)

    # -- a node's pass, the manager ------------------------------------------------------------

    def addresses_allocated(self, *, subnet: str, count: int) -> None:
        self.allocation_ops.labels(subnet=subnet).inc(count)

    def addresses_released(self, *, subnet: str, count: int) -> None:
        self.release_ops.labels(subnet=subnet).inc(count)

    def interface_created(self, *, subnet: str, outcome: str) -> None:
        self.interface_creation_ops.labels(subnet=subnet, status=outcome).inc()

    def allocation_finished(self, *, kind: str, ok: bool, seconds: float) -> None:
        self.allocation_duration.labels(type=kind, status="success" if ok else "failed").observe(seconds)

    def release_finished(self, *, ok: bool, seconds: float) -> None:
        self.release_duration.labels(status="success" if ok else "failed").observe(seconds)

    def deficit_resolved(self, *, seconds: float) -> None:
        self.time_to_ip.observe(seconds)

    def resync_finished(self, *, ok: bool) -> None:
        (self.resync if ok else self.resync_failures).inc()

    def pass_finished(self) -> None:
        self.node_passes.inc()

    def pass_failed(self, *, reason: str) -> None:
        self.node_failures.labels(reason=reason).inc()

    # -- garbage collection ---------------------------------------------------------------------

    def gc_interfaces(self, *, action: str, count: int) -> None:
        self.gc_interfaces_total.labels(action=action).inc(count)

    def gc_failure(self) -> None:
        self.gc_failures.inc()

    # -- nodes -----------------------------------------------------------------------------------

    def set_node(self, name: str, stats: NodeStats, *, capacity: str = "") -> None:
        """Node ``name``'s series now say ``stats``; ``capacity`` is why its pool cannot grow (one of
        :data:`CAPACITY_REASONS`), or empty. The totals follow in the same step."""
        old = self._gauged.get(name)
        if old is not None and old[1] == capacity and (old[0] is stats or old[0] == stats):
            return  # nothing changed (most nodes at most resyncs)
        for kind in IP_TYPES:
            value = getattr(stats, kind)
            if old is None or getattr(old[0], kind) != value:
                self.node_ips.labels(node=name, type=kind).set(value)
        if old is not None and old[1] != capacity and old[1]:
            with contextlib.suppress(KeyError):
                self.node_at_capacity.remove(name, old[1])
        if capacity and (old is None or old[1] != capacity):
            self.node_at_capacity.labels(node=name, reason=capacity).set(1)
        if old is not None:
            self._totals.account(old[0], old[1], -1)
        self._totals.account(stats, capacity, +1)
        self._totals.shown = True
        self._gauged[name] = (stats, capacity)

    def remove_node(self, name: str) -> None:
        old = self._gauged.pop(name, None)
        if old is None:
            return
        for kind in IP_TYPES:
            with contextlib.suppress(KeyError):
                self.node_ips.remove(name, kind)
        if old[1]:
            with contextlib.suppress(KeyError):
                self.node_at_capacity.remove(name, old[1])
        self._totals.account(old[0], old[1], -1)

    def show_totals(self) -> None:
        """Export the totals even with no node (this replica reconciles: zero is the truth)."""
        self._totals.shown = True

    def totals_problems(self) -> list[str]:
        """Where the exported totals disagree with the exported per-node series (empty: they
        agree), read from the collectors a scrape reads: the invariant the simulator, the soak and
        the tests check after every step."""
        families = (*self.node_ips.collect(), *self.node_at_capacity.collect(), *self._totals.collect())
        return pool_totals_problems(
            (s.name, s.labels, s.value) for family in families for s in family.samples
        )

    # -- subnets -----------------------------------------------------------------------------------

    def replace_subnets(self, subnets: Iterable[Subnet]) -> None:
        """Every subnet there is, with its free count (a full resync): series of subnets no longer
        listed are dropped, not left stale."""
        self.available_ips_per_subnet.clear()
        self.subnet_size_ips.clear()
        for subnet in subnets:
            self.set_subnet_free(subnet, subnet.available)
            size = _cidr_size(subnet.cidr)
            if size is not None:
                self.subnet_size_ips.labels(subnet=subnet.id, zone=subnet.zone).set(size)

    def set_subnet_free(self, subnet: Subnet, free: int) -> None:
        self.available_ips_per_subnet.labels(subnet=subnet.id, zone=subnet.zone).set(max(free, 0))

    def clear_pool_state(self) -> None:
        """Drop the gauges that describe pools (this replica stopped reconciling: a standby must not
        export its last leader term's numbers next to the new leader's)."""
        for gauge in (
            self.node_ips,
            self.node_at_capacity,
            self.available_ips_per_subnet,
            self.subnet_size_ips,
        ):
            gauge.clear()
        self._gauged.clear()
        self._totals.reset()


def _cidr_size(cidr: str) -> int | None:
    try:
        return ipaddress.ip_network(cidr, strict=False).num_addresses
    except ValueError:
        return None


def pool_totals_problems(samples: Iterable[tuple[str, Mapping[str, str], float]]) -> list[str]:
    """Where the totals among ``samples`` (name, labels, value: one scrape of one controller)
    disagree with the per-node series among them; empty when they agree or none is exported."""
    per_node: dict[str, dict[str, float]] = {}
    reasons: dict[str, str] = {}
    got: dict[str, float] = {}
    for name, labels, value in samples:
        if name == f"{NAMESPACE}_node_ips":
            per_node.setdefault(labels["node"], {})[labels["type"]] = value
        elif name == f"{NAMESPACE}_node_at_capacity":
            reasons[labels["node"]] = labels["reason"]
        elif name == f"{NAMESPACE}_ips":
            got[f'ips{{type="{labels["type"]}"}}'] = value
        elif name == f"{NAMESPACE}_nodes":
            got[f'nodes{{category="{labels["category"]}"}}'] = value
    expected: dict[str, float] = {
        f'ips{{type="{kind}"}}': sum(v.get(kind, 0.0) for v in per_node.values()) for kind in IP_TYPES
    }
    expected['nodes{category="total"}'] = len(per_node)
    expected['nodes{category="in-deficit"}'] = sum(1 for v in per_node.values() if v.get("needed", 0) > 0)
    expected['nodes{category="at-capacity"}'] = sum(1 for r in reasons.values() if r == "instance-limit")
    problems = [
        f"{node} has a {reason} series but no node_ips"
        for node, reason in reasons.items()
        if node not in per_node
    ]
    if not got and not per_node:
        return problems  # nothing exported (not reconciling yet, or a standby)
    for series, want in expected.items():
        have = got.get(series)
        if have != want:
            shown = "absent" if have is None else f"{have:g}"
            problems.append(f"{series} is {shown}, the per-node series say {want:g}")
    return problems
