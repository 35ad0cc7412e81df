"""Prometheus metrics (namespace ``eni_ipam``) on a registry of their own.

Names and labels are a dashboard contract (docs/metrics.md). ``available`` always means the
addresses in the pools, used ones included, exactly as in node stats — unlike the reference
operator, whose gauges of the same name disagree with each other. Library code never touches
prometheus_client's global registry: every :class:`Metrics` owns one, so tests and several
managers in one process never collide.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from eni_ipam.core.model import NodeStats

NAMESPACE = "eni_ipam"
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300)
_IP_TYPES = ("available", "used", "needed", "excess")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r, ns = self.registry, NAMESPACE
        self.ips = Gauge(
            "ips", "Cluster totals of pool addresses by type", ["type"], namespace=ns, registry=r
        )
        self.node_ips = Gauge(
            "node_ips", "Pool addresses of one node by type", ["node", "type"], namespace=ns, registry=r
        )
        self.allocation_ops = Counter(
            "allocation_ops", "Addresses allocated, by subnet", ["subnet"], namespace=ns, registry=r
        )
        self.release_ops = Counter(
            "release_ops", "Addresses released, by subnet", ["subnet"], namespace=ns, registry=r
        )
        self.interface_creation_ops = Counter(
            "interface_creation_ops",
            "Interfaces created, by subnet and outcome",
            ["subnet", "status"],
            namespace=ns,
            registry=r,
        )
        self.available_ips_per_subnet = Gauge(
            "available_ips_per_subnet",
            "Free addresses the cloud reports per subnet",
            ["subnet", "zone"],
            namespace=ns,
            registry=r,
        )
        self.nodes = Gauge("nodes", "Nodes by category", ["category"], namespace=ns, registry=r)
        self.resync = Counter("resync", "Full resyncs of the cloud view", namespace=ns, registry=r)
        self.resync_failures = Counter(
            "resync_failures", "Full resyncs that failed", namespace=ns, registry=r
        )
        self.allocation_duration = Histogram(
            "allocation_duration_seconds",
            "Duration of allocation operations",
            ["type", "status"],
            namespace=ns,
            registry=r,
            buckets=_DURATION_BUCKETS,
        )
        self.release_duration = Histogram(
            "release_duration_seconds",
            "Duration of release operations",
            ["status"],
            namespace=ns,
            registry=r,
            buckets=_DURATION_BUCKETS,
        )
        self.api_duration = Histogram(
            "api_duration_seconds",
            "Cloud API call latency by operation and outcome (ok, or the cloud's error code)",
            ["operation", "outcome"],
            namespace=ns,
            registry=r,
            buckets=_DURATION_BUCKETS,
        )
        self.api_rate_limit_wait = Histogram(
            "api_rate_limit_wait_seconds",
            "Time spent waiting for a client-side rate-limit token",
            ["operation"],
            namespace=ns,
            registry=r,
            buckets=_DURATION_BUCKETS,
        )
        self.api_throttled = Counter(
            "api_throttled",
            "Requests the cloud throttled (SDK retries included)",
            ["operation"],
            namespace=ns,
            registry=r,
        )
        self.api_requests = Counter(
            "api_requests",
            "Requests sent to the cloud, SDK retries included (each spends a token of the cloud's bucket)",
            ["operation"],
            namespace=ns,
            registry=r,
        )
        self.time_to_ip = Histogram(
            "time_to_ip_seconds",
            "Seconds from a node's deficit appearing to its being resolved",
            namespace=ns,
            registry=r,
            buckets=_DURATION_BUCKETS,
        )
        self.gc_interfaces_total = Counter(
            "gc_interfaces",
            "Leaked interfaces handled by garbage collection, by action (marked, deleted, failed)",
            ["action"],
            namespace=ns,
            registry=r,
        )
        self.gc_failures = Counter(
            "gc_run_failures", "Garbage-collection runs whose listing failed", namespace=ns, registry=r
        )
        self.node_failures = Counter(
            "node_maintenance_failures", "Failed maintenance passes", ["reason"], namespace=ns, registry=r
        )
        # -- the service (leader election, Kubernetes) ---------------------------------------------
        self.leader = Gauge("leader", "1 while this replica holds the leader lease", namespace=ns, registry=r)
        self.ready = Gauge(
            "ready",
            "1 while this replica reconciles: it leads (or runs alone) and its initial resync succeeded",
            namespace=ns,
            registry=r,
        )
        self.nodes_ignored = Gauge(
            "nodes_ignored",
            "Nodes given no pool, by reason (provider-id-scheme: the Node belongs to another cloud)",
            ["reason"],
            namespace=ns,
            registry=r,
        )
        self.kube_requests = Counter(
            "kube_requests",
            "Requests to the Kubernetes API by verb, resource and HTTP status code",
            ["verb", "resource", "code"],
            namespace=ns,
            registry=r,
        )
        self.status_writes = Counter(
            "status_writes",
            "Node pool status writes by outcome (ok, conflict, failed)",
            ["outcome"],
            namespace=ns,
            registry=r,
        )
        self.informer_relists = Counter(
            "informer_relists",
            "Full lists of a resource (start, and after the watch's version expired)",
            ["resource"],
            namespace=ns,
            registry=r,
        )
        # -- the node agent -------------------------------------------------------------------------
        self.agent_pool_addresses = Gauge(
            "agent_pool_addresses",
            "Addresses a node agent's pool may hand out, by node and pool",
            ["node", "pool"],
            namespace=ns,
            registry=r,
        )
        self.agent_allocations = Gauge(
            "agent_allocations",
            "Addresses a node agent has handed out, by node and pool",
            ["node", "pool"],
            namespace=ns,
            registry=r,
        )
        self.agent_release_answers = Gauge(
            "agent_release_answers",
            "A node agent's answers in the release handshake, by answer",
            ["node", "answer"],
            namespace=ns,
            registry=r,
        )
        self.agent_status_reports = Counter(
            "agent_status_reports",
            "A node agent's writes of its ENIPool status fields, by outcome (ok, conflict, failed)",
            ["outcome"],
            namespace=ns,
            registry=r,
        )
        self.informer_watch_restarts = Counter(
            "informer_watch_restarts",
            "Watches restarted, by resource and reason (expired, throttled, dropped, error)",
            ["resource", "reason"],
            namespace=ns,
            registry=r,
        )

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

    # -- garbage collection ---------------------------------------------------------------------

    def gc_interfaces(self, *, action: str, count: int) -> None:
        self.gc_interfaces_total.labels(action=action).inc(count)

    def gc_failure(self) -> None:
        self.gc_failures.inc()

    # -- nodes -----------------------------------------------------------------------------------

    def set_node(self, name: str, stats: NodeStats) -> None:
        for kind in _IP_TYPES:
            self.node_ips.labels(node=name, type=kind).set(getattr(stats, kind))

    def remove_node(self, name: str) -> None:
        for kind in _IP_TYPES:
            with contextlib.suppress(KeyError):
                self.node_ips.remove(name, kind)

    def set_totals(self, stats: Iterable[NodeStats]) -> None:
        totals = dict.fromkeys(_IP_TYPES, 0)
        counts = {"total": 0, "in-deficit": 0, "at-capacity": 0}
        for s in stats:
            for kind in _IP_TYPES:
                totals[kind] += getattr(s, kind)
            counts["total"] += 1
            counts["in-deficit"] += s.needed > 0
            counts["at-capacity"] += s.at_capacity
        for kind, value in totals.items():
            self.ips.labels(type=kind).set(value)
        for category, value in counts.items():
            self.nodes.labels(category=category).set(value)

    def set_subnets(self, subnets: Mapping[str, tuple[str, int]], *, replace: bool = False) -> None:
        """``subnets``: subnet id → (zone, free addresses). ``replace``: this is every subnet there
        is (a full resync), so series of subnets no longer listed are dropped, not left stale."""
        if replace:
            self.available_ips_per_subnet.clear()
        for subnet, (zone, free) in subnets.items():
            self.available_ips_per_subnet.labels(subnet=subnet, zone=zone).set(free)

    def clear_pool_state(self) -> None:
        """Drop the gauges that describe pools (this replica stopped reconciling: a standby must not
        export its last leader term's numbers next to the new leader's)."""
        for gauge in (self.ips, self.node_ips, self.nodes, self.available_ips_per_subnet):
            gauge.clear()

    # -- reading back (simulator expectations, demo, tests) -------------------------------------

    def sample(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        return self.registry.get_sample_value(name, dict(labels or {}))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
