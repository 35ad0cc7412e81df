"""The controller's metrics (``eni-ipam run``, the demos, the simulator): :class:`Metrics` declares
its families and implements the domain's observer protocols (:mod:`eni_ipam.core.observe`).

Invariants:

* Only the controller's series: a node agent exports its own set (``AgentMetrics``, in
  :mod:`eni_ipam.agent.metrics`), and neither exports the other's.
* The per-node series and the cluster totals belong to
  :class:`~eni_ipam.adapters.metrics.pools.PoolGauges`, which keeps their invariants; the observer's
  node reports go to it unchanged.
* What the schedule and the role are is read at each scrape (:meth:`Metrics.report_role`,
  :meth:`Metrics.report_schedule`), never copied where it may go stale.
* :meth:`Metrics.clear_pool_state` drops every pool series (a standby exports none).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable

from eni_ipam.adapters.metrics.checks import pool_totals_problems
from eni_ipam.adapters.metrics.pools import PoolGauges
from eni_ipam.adapters.metrics.registry import DURATION_BUCKETS, MetricSet
from eni_ipam.adapters.metrics.selection import NodeSeriesPolicy
from eni_ipam.core.model import NodeStats, Subnet

_TIME_TO_IP_BUCKETS = (*DURATION_BUCKETS, 600, 1200, 1800, 3600)
"""A deficit can last far longer than a call: a node waiting on a subnet or a quota for an hour
must show in a bucket of its own, not only in +Inf."""


class Metrics(MetricSet):
    """The controller's metrics: pools, cloud API, reconciliation, leadership, Kubernetes writes.

    Implements :class:`eni_ipam.core.observe.Observer`, the domain's reports (``node_ips`` and
    ``nodes{category="at-capacity"}`` count the ``instance-limit`` reason of
    :data:`~eni_ipam.core.observe.CAPACITY_REASONS`). ``node_series`` decides which nodes have
    per-node series (default: the settings' default, every node up to 1,000); ``process``: as
    :class:`MetricSet`'s."""

    def __init__(self, *, node_series: NodeSeriesPolicy | None = None, process: bool = True) -> None:
        super().__init__(process=process)
        self._pools = PoolGauges(node_series or NodeSeriesPolicy())
        for collector in self._pools.collectors():
            self.register(collector)
        self.node_ips = self._pools.node_ips
        self.node_at_capacity = self._pools.node_at_capacity
        self.node_failing = self._pools.node_failing
        self.node_capacity = self._pools.node_capacity
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
        self.free_prefix_blocks_per_subnet = self.gauge(
            "free_prefix_blocks_per_subnet",
            "Aligned /28 blocks with no used address per subnet, counted from the listing of every "
            "interface of the VPC (absent when not counted)",
            ["subnet", "zone"],
        )
        self.subnet_size_ips = self.gauge(
            "subnet_size_ips",
            "Addresses in the subnet's CIDR (the cloud reserves a few of them)",
            ["subnet", "zone"],
        )
        self.subnet_pressure_state = self.gauge(
            "subnet_pressure",
            "1 while the subnet is under pressure (its nodes keep only what pods use or wait for and give"
            " the rest back), 0 otherwise; only with subnet_pressure_enabled",
            ["subnet", "zone"],
        )
        self.subnet_pressure_transitions = self.counter(
            "subnet_pressure_transitions",
            "Times the subnet entered or left pressure",
            ["subnet", "zone"],
        )
        self.resync = self.counter("resync", "Full resyncs of the cloud view that succeeded")
        self.resync_failures = self.counter("resync_failures", "Full resyncs that failed")
        self.resync_age = self.gauge(
            "resync_age_seconds",
            "Seconds since the last full resync that succeeded (since reconciling began, while none has);"
            " 0 on a standby",
        )
        self.resync_failing = self.gauge(
            "resync_failing", "Full resyncs that failed in a row since the last that succeeded (0: it did)"
        )
        self.node_passes = self.counter(
            "node_maintenance_passes", "Maintenance passes that ended, failed ones included"
        )
        self.node_failures = self.counter(
            "node_maintenance_failures", "Failed maintenance passes", ["reason"]
        )
        self.pass_duration = self.histogram(
            "node_maintenance_duration_seconds",
            "Duration of maintenance passes (cloud calls and their rate-limit waits), failed ones included",
        )
        self.nodes_waiting = self.gauge(
            "nodes_waiting", "Nodes queued for a maintenance pass that has not started yet (the backlog)"
        )
        self.nodes_in_backoff = self.gauge(
            "nodes_in_backoff", "Nodes whose last maintenance pass failed: retried after a growing backoff"
        )
        self.oldest_deficit = self.gauge(
            "oldest_deficit_seconds",
            "Seconds the longest-standing deficit has been open (0 when no node is short), blocked ones "
            "included",
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
            "time_to_ip_seconds",
            "Seconds from a node's deficit appearing to its being resolved",
            buckets=_TIME_TO_IP_BUCKETS,
        )
        self.gc_interfaces_total = self.counter(
            "gc_interfaces",
            "Leaked interfaces handled by garbage collection, by action (marked, deleted, failed)",
            ["action"],
        )
        self.gc_failures = self.counter("gc_run_failures", "Garbage-collection runs whose listing failed")
        # -- the pool of ready interfaces (off by default) -----------------------------------------
        self.ready_interfaces_now = self.gauge(
            "ready_interfaces",
            "Ready interfaces (created, detached, with their addresses) waiting for a node, by subnet",
            ["subnet"],
        )
        self.ready_interface_takes = self.counter(
            "ready_interface_takes",
            "Ready interfaces nodes took, by subnet and outcome (attached, or the attach's error code)",
            ["subnet", "outcome"],
        )
        self.ready_interface_refills = self.counter(
            "ready_interface_refills",
            "Ready interfaces created by refills, by subnet and outcome (created, or the error code)",
            ["subnet", "outcome"],
        )
        # -- the service (leader election, Kubernetes) ---------------------------------------------
        self.leader = self.gauge("leader", "1 while this replica holds the leader lease (or runs alone)")
        self.ready = self.gauge(
            "ready",
            "1 while this replica reconciles: it leads (or runs alone) and its initial resync succeeded",
        )
        self.nodes_ignored = self.gauge(
            "nodes_ignored",
            "Nodes given no pool, by reason (provider-id-scheme: the Node belongs to another cloud; "
            "no-provider-id: the Node has no spec.providerID yet)",
            ["reason"],
        )
        self.nodes_no_room_tainted = self.gauge(
            "nodes_no_room_tainted",
            "Nodes the leader keeps tainted eni-ipam.io/no-room:NoSchedule: no address for one more pod "
            "and no way to get one (kubernetes.no_room_taint)",
        )
        self.crd_state = self.gauge(
            "crd_state",
            "1 for the state of the cluster's ENIPool CRD as this replica judges it (current, outdated:"
            " it would prune fields this controller writes, missing, unreadable, unknown), 0 for the others",
            ["state"],
        )
        self.status_writes = self.counter(
            "status_writes",
            "Node pool status writes by outcome (ok, conflict, failed; held: only the Ready condition,"
            " while the ENIPool CRD would prune the status)",
            ["outcome"],
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
        if ok:
            self.resync_failing.set(0)
        else:
            self.resync_failing.inc()

    def pass_finished(self, *, seconds: float) -> None:
        self.node_passes.inc()
        self.pass_duration.observe(seconds)

    def report_schedule(
        self,
        *,
        waiting: Callable[[], int],
        in_backoff: Callable[[], int],
        oldest_deficit: Callable[[], float],
        since_resync: Callable[[], float],
    ) -> None:
        """Export the schedule's figures as they are at each scrape (read then, never stale)."""
        self.nodes_waiting.set_function(lambda: float(waiting()))
        self.nodes_in_backoff.set_function(lambda: float(in_backoff()))
        self.oldest_deficit.set_function(lambda: float(oldest_deficit()))
        self.resync_age.set_function(lambda: float(since_resync()))

    def pass_failed(self, *, reason: str) -> None:
        self.node_failures.labels(reason=reason).inc()

    # -- garbage collection ---------------------------------------------------------------------

    def gc_interfaces(self, *, action: str, count: int) -> None:
        self.gc_interfaces_total.labels(action=action).inc(count)

    def gc_failure(self) -> None:
        self.gc_failures.inc()

    # -- the pool of ready interfaces ------------------------------------------------------------

    def ready_interfaces(self, *, subnet: str, count: int) -> None:
        self.ready_interfaces_now.labels(subnet=subnet).set(count)

    def ready_interface_taken(self, *, subnet: str, outcome: str) -> None:
        self.ready_interface_takes.labels(subnet=subnet, outcome=outcome).inc()

    def ready_interface_refilled(self, *, subnet: str, outcome: str) -> None:
        self.ready_interface_refills.labels(subnet=subnet, outcome=outcome).inc()

    # -- nodes: PoolGauges (pools.py) keeps their record, selection and totals in one step -------

    def set_node(
        self, name: str, stats: NodeStats, *, capacity: str = "", failing: tuple[str, int] | None = None
    ) -> None:
        self._pools.set_node(name, stats, capacity=capacity, failing=failing)

    def remove_node(self, name: str) -> None:
        self._pools.remove_node(name)

    def show_totals(self) -> None:
        self._pools.show_totals()

    def totals_problems(self) -> list[str]:
        """Where the exported totals disagree with the exported per-node series and the omitted
        part (empty: they agree), read from the collectors a scrape reads: the invariant the
        simulator, the soak and the tests check after every step."""
        return pool_totals_problems(self._pools.exported())

    # -- subnets -----------------------------------------------------------------------------------

    def replace_subnets(self, subnets: Iterable[Subnet]) -> None:
        """Every subnet there is, with its free count (a full resync): series of subnets no longer
        listed are dropped, not left stale."""
        self.available_ips_per_subnet.clear()
        self.subnet_size_ips.clear()
        self.subnet_pressure_state.clear()  # set again for the subnets listed, when pressure is enabled
        self.free_prefix_blocks_per_subnet.clear()
        for subnet in subnets:
            self.set_subnet_free(subnet, subnet.available)
            if subnet.free_blocks >= 0:
                self.set_subnet_free_blocks(subnet, subnet.free_blocks)
            size = _cidr_size(subnet.cidr)
            if size is not None:
                self.subnet_size_ips.labels(subnet=subnet.id, zone=subnet.zone).set(size)

    def set_subnet_free(self, subnet: Subnet, free: int) -> None:
        self.available_ips_per_subnet.labels(subnet=subnet.id, zone=subnet.zone).set(max(free, 0))

    def subnet_pressure(self, subnet: Subnet, *, under: bool, changed: bool) -> None:
        self.subnet_pressure_state.labels(subnet=subnet.id, zone=subnet.zone).set(1 if under else 0)
        if changed:
            self.subnet_pressure_transitions.labels(subnet=subnet.id, zone=subnet.zone).inc()

    def set_subnet_free_blocks(self, subnet: Subnet, blocks: int) -> None:
        self.free_prefix_blocks_per_subnet.labels(subnet=subnet.id, zone=subnet.zone).set(max(blocks, 0))

    def clear_pool_state(self) -> None:
        """Drop the gauges that describe pools (this replica stopped reconciling: a standby must not
        export its last leader term's numbers next to the new leader's)."""
        for gauge in (
            self.available_ips_per_subnet,
            self.subnet_size_ips,
            self.subnet_pressure_state,
            self.free_prefix_blocks_per_subnet,
        ):
            gauge.clear()
        # Nothing scheduled here, and no resync of this replica's to speak of.
        self.report_schedule(waiting=int, in_backoff=int, oldest_deficit=float, since_resync=float)
        self.resync_failing.set(0)
        self._pools.clear()


def _cidr_size(cidr: str) -> int | None:
    try:
        return ipaddress.ip_network(cidr, strict=False).num_addresses
    except ValueError:
        return None
