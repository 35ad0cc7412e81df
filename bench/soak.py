"""``make soak`` (``python -m bench.soak``): the reconciler under faults, with invariants checked all along.

A cluster on the in-memory cloud (EC2's buckets enforced, virtual time) is kept by the real
reconciler while chaos runs:

* a share of calls fails with EC2's transient codes (``InternalError``, ``Unavailable``), some of
  them after the change was applied (a lost response), and bursts of ``RequestLimitExceeded``;
* latency spikes;
* the reconciler process is killed between two cloud calls, or right after one was applied, and a
  new one (fresh memory, same node store and cloud) starts a few seconds later;
* instances are terminated (their nodes leave and new ones join), subnets are exhausted and
  refilled, pods come and go, and excess addresses are released (the handshake runs).

Invariants, checked every virtual second and at every release call:

1. no address in two pools: the published pools of nodes whose instance exists are disjoint, but
   for addresses the first marks for release (its node side holds those), and no address is on
   two interfaces;
2. no address released while the node side uses it;
3. no interface of ours detached for more than two GC intervals (plus a run's own time) of a
   process whose garbage collection did not fail in that time;
4. once faults stop, every node converges;
5. a restarted process adopts what the previous one created: a create it retries is answered from
   its idempotency token (counted), and at the end no detached interface of ours is left;
6. the exported cluster totals (``eni_ipam_ips``, ``eni_ipam_nodes``) equal the sums of the per-node
   series of the same read plus the part of the nodes without series (none at this size),
   whatever the faults.

Results go to docs/RELIABILITY.md (``--quick``: a short run, printed).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import ipaddress
import logging
import random
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import structlog

from bench.cluster import MIXED_TYPES, SUBNETS_PER_ZONE, ZONES, build_cloud, subnet_name
from bench.report import machine, publish, soak_arguments
from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.adapters.metrics.selection import NodeSeriesPolicy
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.manager import NodeManager
from eni_ipam.core.model import ReleaseState, ownership_tags, tags_match
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeResource, NodeSpec
from eni_ipam.simulator.cluster import EmbeddedCluster
from eni_ipam.simulator.simloop import run_virtual
from eni_ipam.simulator.simnode import SimulatedNodeSide
from eni_ipam.store.memory import MemoryStore
from providers.sim.cloud import SimCloud
from providers.sim.gate import Request
from providers.sim.provider import SimProvider

OUT = Path(__file__).resolve().parents[1] / "docs" / "RELIABILITY.md"
T = TypeVar("T")
TRANSIENT = ("InternalError", "Unavailable")
READ_PREFIX = "Describe"
HELD = (ReleaseState.MARKED, ReleaseState.READY, ReleaseState.RELEASED)
"""Handshake states in which the node side never hands an address out."""
GC_RUN_SLACK = 15.0
"""Seconds a GC run itself may take (its calls, latency spikes included) on top of two intervals."""


@dataclasses.dataclass(frozen=True)
class SoakConfig:
    nodes: int = 150
    chaos_seconds: float = 4 * 3600.0
    fault_rate: float = 0.2
    """Share of calls answered with a transient error."""
    lost_share: float = 0.3
    """Share of those faults whose change was applied first (a lost response)."""
    throttle_burst_every: float = 900.0
    throttle_burst_calls: int = 40
    latency_spike_every: float = 600.0
    kill_rate: float = 0.002
    """Chance, per mutating call, that the process dies right then (before or after the call)."""
    terminate_every: float = 300.0
    exhaust_every: float = 1200.0
    churn_every: float = 20.0
    gc_interval: float = 60.0
    recovery_limit: float = 1800.0
    seed: int = 3
    check_every: float = 1.0
    """Virtual seconds between two invariant checks (each reads every pool and interface)."""


QUICK = SoakConfig(nodes=40, chaos_seconds=1800.0, seed=4)
LARGE = SoakConfig(
    nodes=10_000,
    chaos_seconds=3600.0,
    churn_every=60.0,
    terminate_every=60.0,
    exhaust_every=600.0,
    recovery_limit=3600.0,
    seed=5,
    check_every=10.0,
)
"""The same faults on a 10,000-node cluster for an hour of virtual time: what a large cluster does
to the reconciler's own bookkeeping (queues, the resync's apply, the view) under faults. Pods churn
on a tenth of the nodes every minute, an instance goes every minute; invariants are checked every
ten virtual seconds (each check reads 400,000 pool entries)."""


@dataclasses.dataclass
class SoakReport:
    config: SoakConfig
    operations: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    faults: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    events: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    violations: list[str] = dataclasses.field(default_factory=list)
    restart_recoveries: list[float] = dataclasses.field(default_factory=list)
    final_recovery: float | None = None
    checks: int = 0
    max_leak_age: float = 0.0
    real_seconds: float = 0.0

    def violate(self, now: float, what: str) -> None:
        if len(self.violations) < 50:
            self.violations.append(f"t={now:.1f}s: {what}")
        self.events["violations"] += 1


class Soak:
    def __init__(self, config: SoakConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.clock = LoopClock(measure_cpu=False)
        self.cloud: SimCloud = build_cloud(self.clock, throttle=True)
        self.store = MemoryStore()
        self.side = SimulatedNodeSide(self.store)
        self.report = SoakReport(config)
        self.settings = Settings(
            release_excess_ips=True,
            excess_ip_release_delay=30.0,
            gc_interval=config.gc_interval,
            backoff_max=60.0,
        )
        self.chaos = False
        self.manager: NodeManager | None = None
        self.metrics = Metrics()
        self.task: asyncio.Task[None] | None = None
        self.process_started = 0.0
        self.gc_started: float | None = None
        """When the running process's garbage collection started (its first successful resync)."""
        self.killed_at: float | None = None
        self.last_check = float("-inf")
        self.detached_since: dict[str, float] = {}
        self.gc_failed_at = float("-inf")
        self.next_node = 0
        self.dead: set[asyncio.Task[None]] = set()
        """Killed processes and finished chores, awaited before the loop closes."""
        self.tags = ownership_tags(self.settings.cluster_name)
        self._wrap_cloud()

    # -- the process -------------------------------------------------------------------------------

    def start_process(self) -> None:
        self.metrics = Metrics(node_series=NodeSeriesPolicy.of(self.settings))
        provider = SimProvider(self.cloud, clock=self.clock, metrics=self.metrics)
        self.manager = EmbeddedCluster(
            provider,
            settings=self.settings,
            metrics=self.metrics,
            clock=self.clock,
            rng=random.Random(self.rng.random()),
            store=self.store,  # the node store and the node side outlive the process
            side=self.side,
        ).manager
        self.task = asyncio.get_running_loop().create_task(self.manager.run(), name="soak-manager")
        self.process_started = self.clock.monotonic()
        self.gc_started = None
        self.report.events["process starts"] += 1

    def kill(self, *, counted: bool = True) -> None:
        """The process dies now: its memory is gone; the cloud and the node store stay."""
        if self.task is None or self.task.done():
            return
        self.task.cancel()
        self.dead.add(self.task)
        self.task = None
        self.manager = None
        self.killed_at = self.clock.monotonic()
        if counted:
            self.report.events["process kills"] += 1

    # -- chaos at the cloud's front door -----------------------------------------------------------

    def _wrap_cloud(self) -> None:
        gate = self.cloud.gate

        async def chaotic(operation: str, request: Request, proceed: Callable[[], Awaitable[Any]]) -> Any:
            self.report.operations[operation] += 1
            mutating = not operation.startswith(READ_PREFIX)
            task = asyncio.current_task()
            in_gc = task is not None and task.get_name() == "eni-ipam-gc"
            if self.chaos:
                if mutating and self.rng.random() < self.config.kill_rate / 2:
                    self.report.faults["killed before a call"] += 1
                    self.kill()
                    await asyncio.sleep(0)  # the cancellation lands here: the call never goes out
                if self.rng.random() < self.config.fault_rate:
                    lost = mutating and self.rng.random() < self.config.lost_share
                    code = self.rng.choice(TRANSIENT)
                    gate.fail_next(operation, 1, code, applied=lost)
                    self.report.faults[f"{code}{' (applied, answer lost)' if lost else ''}"] += 1
            try:
                result = await proceed()
            except AssertionError as exc:  # the cloud's own bookkeeping broke: never expected
                self.report.violate(self.clock.monotonic(), f"cloud invariant broken in {operation}: {exc}")
                raise
            except Exception:
                if in_gc:  # a GC call failed (any fault, throttling included): its promise restarts
                    self.gc_failed_at = self.clock.monotonic()
                raise
            if self.chaos and mutating and self.rng.random() < self.config.kill_rate / 2:
                self.report.faults["killed after a call applied"] += 1
                self.kill()
                await asyncio.sleep(0)  # dies before it can record the answer
            return result

        gate.around(chaotic)

        unassign = self.cloud.unassign_private_ip_addresses

        async def checked_unassign(
            *, interface_id: str, addresses: Sequence[str] = (), prefixes: Sequence[str] = ()
        ) -> None:
            self._check_release(interface_id, addresses, prefixes)
            await unassign(interface_id=interface_id, addresses=addresses, prefixes=prefixes)

        self.cloud.unassign_private_ip_addresses = checked_unassign  # type: ignore[method-assign]

        create = self.cloud.create_network_interface

        async def counted_create(**kwargs: Any) -> Any:
            token = kwargs.get("client_token", "")
            if token and token in self.cloud._tokens:
                self.report.events["creates answered from their token (adopted)"] += 1
            return await create(**kwargs)

        self.cloud.create_network_interface = counted_create  # type: ignore[method-assign]

    def _check_release(self, interface_id: str, addresses: Sequence[str], prefixes: Sequence[str]) -> None:
        self.report.checks += 1
        view = self.cloud.interface_view(interface_id)
        if view is None:
            return
        released = set(addresses)
        for prefix in prefixes:
            released.update(str(a) for a in ipaddress.IPv4Network(prefix))
        for resource in self.store.resources.values():
            if resource.instance_id == view.instance_id and released & resource.in_use:
                self.report.violate(
                    self.clock.monotonic(),
                    f"release of {sorted(released & resource.in_use)} used by {resource.name}",
                )

    # -- invariants --------------------------------------------------------------------------------

    def check(self) -> None:
        now = self.last_check = self.clock.monotonic()
        self.report.checks += 1
        seen: dict[str, str] = {}
        for name, status in self.store.statuses.items():
            resource = self.store.resources.get(name)
            if resource is None or self.cloud.instance_state(resource.instance_id) == "terminated":
                # A terminated instance's last pool stays published until a resync notices (at
                # most a minute), and nobody can use it: its node and its interfaces are gone.
                continue
            for entry in status.pool:
                if status.release.get(entry.address) in HELD:
                    continue  # the node side holds it: never handed out, whatever the pool says
                other = seen.setdefault(entry.address, name)
                if other != name:
                    self.report.violate(now, f"{entry.address} in the pools of {other} and {name}")
        holders: dict[str, str] = {}
        detached_now = set()
        for iface in self.cloud.interfaces():
            for address in (iface.primary_ip, *iface.addresses):
                other = holders.setdefault(address, iface.id)
                if other != iface.id:
                    self.report.violate(now, f"{address} on {other} and {iface.id}")
            if not iface.instance_id and tags_match(iface.tags, self.tags):
                detached_now.add(iface.id)
                self.detached_since.setdefault(iface.id, now)
        for iface_id in list(self.detached_since):
            if iface_id not in detached_now:
                del self.detached_since[iface_id]
        if self.task is not None:
            for problem in self.metrics.totals_problems():
                self.report.violate(now, f"metrics: {problem}")
        if self.manager is not None and self.manager.ready and self.gc_started is None:
            self.gc_started = now  # garbage collection starts with the first successful resync
        if self.task is not None and self.gc_started is not None:
            window_start = max(self.gc_started, self.gc_failed_at)
            limit = 2 * self.config.gc_interval + GC_RUN_SLACK
            for iface_id, since in self.detached_since.items():
                age = now - max(since, window_start)
                self.report.max_leak_age = max(self.report.max_leak_age, now - since)
                if age > limit:
                    self.report.violate(now, f"{iface_id} detached for {age:.0f}s of GC without failures")
                    self.detached_since[iface_id] = now  # report once per window

    def converged(self) -> bool:
        m = self.manager
        return (
            m is not None
            and m.ready
            and not m.busy()
            and all(n.stats.needed == 0 or n.stats.at_capacity for n in m.nodes.values())
        )

    # -- the world ---------------------------------------------------------------------------------

    def add_node(self) -> None:
        n = self.next_node
        self.next_node += 1
        zone = ZONES[n % len(ZONES)]
        instance_id = f"i-{n:06d}"
        self.cloud.add_instance(
            instance_id,
            type=self.rng.choice(MIXED_TYPES),
            subnet=subnet_name(zone, (n // len(ZONES)) % SUBNETS_PER_ZONE),
            security_groups=["sg-nodes"],
        )
        spec = NodeSpec(
            pre_allocate=self.rng.choice((4, 8, 16)), max_above_watermark=self.rng.choice((0, 4))
        ).fields()
        used = self.rng.randint(0, 6)
        self.side.add(NodeResource(name=f"node-{n:06d}", instance_id=instance_id, spec=spec, used=used))

    async def every(self, period: float, action: Callable[[], Awaitable[None] | None]) -> None:
        while True:
            await asyncio.sleep(self.rng.uniform(0.5, 1.5) * period)
            if self.chaos:
                result = action()
                if result is not None:
                    await result

    def churn(self) -> None:
        for name in self.rng.sample(sorted(self.store.resources), k=max(1, len(self.store.resources) // 10)):
            resource = self.store.resources[name]
            status = self.store.statuses.get(name)
            pool = status.stats.available if status else 0
            used = max(0, min(resource.used + self.rng.randint(-5, 5), pool + 3))
            self.side.update(name, used=used)

    def terminate(self) -> None:
        name = self.rng.choice(sorted(self.store.resources))
        self.cloud.terminate_instance(self.store.resources[name].instance_id)
        self.report.events["instances terminated"] += 1

        async def replace() -> None:  # the node leaves a little later; a new one joins
            await asyncio.sleep(self.rng.uniform(5, 60))
            self.store.remove(name)
            self.add_node()

        self.dead.add(asyncio.get_running_loop().create_task(replace()))

    def exhaust_one(self) -> str:
        zone = self.rng.choice(ZONES)
        subnet = subnet_name(zone, self.rng.randrange(SUBNETS_PER_ZONE))
        self.cloud.set_subnet_available(subnet, 0)
        self.report.events["subnets exhausted"] += 1
        return subnet

    def refill(self, subnet: str) -> None:
        self.cloud.set_subnet_available(subnet, 1 << 20)  # as many as the CIDR has

    async def exhaust(self) -> None:
        subnet = self.exhaust_one()
        await asyncio.sleep(self.rng.uniform(60, 300))
        self.refill(subnet)

    def throttle_burst(self) -> None:
        op = self.rng.choice(
            ("AssignPrivateIpAddresses", "CreateNetworkInterface", "DescribeNetworkInterfaces")
        )
        self.cloud.gate.fail_next(op, self.config.throttle_burst_calls, "RequestLimitExceeded")
        self.report.faults["RequestLimitExceeded burst"] += 1

    async def latency_spike(self) -> None:
        self.cloud.set_latency(None, self.rng.uniform(1.0, 5.0))
        self.report.faults["latency spike"] += 1
        await asyncio.sleep(self.rng.uniform(10, 60))
        self.cloud.set_latency(None, 0.05)

    async def supervise(self) -> None:
        """Restart a killed process after a few seconds; time how long it takes to converge again."""
        while True:
            await asyncio.sleep(1.0)
            if self.task is None:
                await asyncio.sleep(self.rng.uniform(1, 10))
                started = self.killed_at if self.killed_at is not None else self.clock.monotonic()
                self.start_process()
                self.dead.add(asyncio.get_running_loop().create_task(self._time_recovery(started)))
            if self.clock.monotonic() - self.last_check >= self.config.check_every:
                self.check()

    async def _time_recovery(self, started: float) -> None:
        """Seconds from a kill until the next process mutates again (after its first full resync)."""
        task = self.task
        while self.task is task and task is not None:
            if self.manager is not None and self.manager.ready:
                self.report.restart_recoveries.append(self.clock.monotonic() - started)
                return
            await asyncio.sleep(1.0)

    # -- the run -----------------------------------------------------------------------------------

    async def run(self) -> SoakReport:
        real = time.perf_counter()
        cfg = self.config
        self.cloud.set_latency(None, 0.05)
        for _ in range(cfg.nodes):
            self.add_node()
        self.next_node = cfg.nodes
        self.start_process()
        async with asyncio.TaskGroup() as tg:
            background = [
                tg.create_task(self.supervise()),
                tg.create_task(self.every(cfg.churn_every, self.churn)),
                tg.create_task(self.every(cfg.terminate_every, self.terminate)),
                tg.create_task(self.every(cfg.exhaust_every, self.exhaust)),
                tg.create_task(self.every(cfg.throttle_burst_every, self.throttle_burst)),
                tg.create_task(self.every(cfg.latency_spike_every, self.latency_spike)),
            ]
            self.chaos = True
            await asyncio.sleep(cfg.chaos_seconds)
            self.chaos = False
            await self.recover()
            for task in background:
                task.cancel()
            self.kill(counted=False)  # the end of the run, not a fault
        for task in self.dead:
            task.cancel()
        await asyncio.gather(*self.dead, return_exceptions=True)
        self.report.real_seconds = time.perf_counter() - real
        return self.report

    async def recover(self) -> None:
        """Faults stop: restore the cloud, let the process converge, then let GC finish its work."""
        self.cloud.clear_faults()
        for zone in ZONES:
            for k in range(SUBNETS_PER_ZONE):
                self.refill(subnet_name(zone, k))
        self.cloud.set_latency(None, 0.05)
        if self.task is None:
            self.start_process()
        stopped = self.clock.monotonic()
        while not self.converged():
            if self.clock.monotonic() - stopped > self.config.recovery_limit:
                self.report.violate(self.clock.monotonic(), "nodes did not converge after the faults stopped")
                break
            await asyncio.sleep(1.0)
        else:
            self.report.final_recovery = self.clock.monotonic() - stopped
        await asyncio.sleep(3 * self.config.gc_interval)  # two GC runs at least, without faults
        self.check()
        ours = [i for i in self.cloud.interfaces() if tags_match(i.tags, self.tags)]
        leaked = [i.id for i in ours if not i.instance_id]
        if leaked:
            self.report.violate(self.clock.monotonic(), f"detached interfaces of ours left: {leaked}")
        self.report.events["interfaces of ours at the end"] = len(ours)


INVARIANTS = (
    (__doc__ or "").split("at every release call:\n")[1].split("\nResults go to")[0].strip().splitlines()
)
"""The invariants as this module's docstring numbers them (one source for the code and the report)."""


def render(*reports: SoakReport) -> str:
    """docs/RELIABILITY.md: the invariants once, then each run's set-up and results."""
    lines = [
        "# Reliability",
        "",
        "Written by `make soak` (`python -m bench.soak`, code in `bench/soak.py`): the real reconciler",
        "keeps a cluster on the in-memory cloud (EC2's buckets enforced, virtual time) while faults are",
        "injected, and invariants are checked every few virtual seconds and at every release call. The",
        "same invariants are checked on small random runs in the test suite (`tests/bench/test_soak.py`).",
        "The node agent's soak (hostile input, restarts, a full disk) is in",
        "[RELIABILITY-node.md](RELIABILITY-node.md).",
        "",
        "Machine: " + "; ".join(f"{k} {v}" for k, v in machine().items()) + ".",
        "",
        "## Invariants",
        "",
        *INVARIANTS,
        "",
    ]
    for report in reports:
        lines += _run(report)
    return "\n".join(lines) + "\n"


def _run(report: SoakReport) -> list[str]:
    cfg = report.config
    mutating = sum(n for op, n in report.operations.items() if not op.startswith(READ_PREFIX))
    recoveries = sorted(report.restart_recoveries)
    lines = [
        f"## {cfg.nodes:,} nodes, {cfg.chaos_seconds / 3600:.1f} h of faults",
        "",
        f"The run took {report.real_seconds:.0f} s of real time for {cfg.chaos_seconds / 3600:.1f} h of "
        f"virtual time; invariants checked every {cfg.check_every:.0f} virtual s.",
        "",
        f"- {cfg.nodes:,} nodes of mixed instance types, watermarks 4 to 16, release of excess on"
        " (30 s delay).",
        f"- {cfg.fault_rate:.0%} of calls answered `InternalError` or `Unavailable`; {cfg.lost_share:.0%} of"
        " the failed mutating calls had been applied (the answer was lost).",
        f"- Bursts of {cfg.throttle_burst_calls} `RequestLimitExceeded` about every"
        f" {cfg.throttle_burst_every / 60:.0f} min; latency spikes of 1 to 5 s about every"
        f" {cfg.latency_spike_every / 60:.0f} min.",
        f"- The process killed at {cfg.kill_rate:.1%} of mutating calls (half before the call went out, half"
        " after it was applied), restarted 1 to 10 s later with fresh memory.",
        f"- An instance terminated about every {cfg.terminate_every / 60:.0f} min (its node replaced),"
        f" a subnet exhausted for 1 to 5 min about every {cfg.exhaust_every / 60:.0f} min, pods churning"
        f" on a tenth of the nodes every {cfg.churn_every:.0f} s, garbage collection every"
        f" {cfg.gc_interval:.0f} s.",
        "",
        "| | |",
        "|---|---:|",
        f"| cloud calls | {sum(report.operations.values())} |",
        f"| mutating calls | {mutating} |",
        f"| invariant checks | {report.checks} |",
        f"| **invariant violations** | **{report.events['violations']}** |",
        f"| longest a detached interface of ours lived, GC failures included (s) |"
        f" {report.max_leak_age:.0f} |",
    ]
    if report.final_recovery is not None:
        lines.append(f"| convergence after the faults stopped (s) | {report.final_recovery:.0f} |")
    if recoveries:
        p50 = recoveries[len(recoveries) // 2]
        lines.append(
            f"| from a kill to mutating again (restart, first resync under faults), median / max (s) |"
            f" {p50:.0f} / {recoveries[-1]:.0f} |"
        )
    lines += ["", "Faults injected:", "", "| kind | count |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(report.faults.items())]
    lines += ["", "Events:", "", "| event | count |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(report.events.items()) if k != "violations"]
    lines += ["", "Operations by kind:", "", "| operation | calls |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(report.operations.items())]
    if report.violations:
        lines += ["", "Violations:", ""] + [f"- {v}" for v in report.violations]
    return [*lines, ""]


def soak(config: SoakConfig) -> SoakReport:
    report: SoakReport = run_virtual(Soak(config).run())
    return report


def main(argv: list[str] | None = None) -> int:
    args = soak_arguments("python -m bench.soak", __doc__ or "", OUT, argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    reports = [soak(QUICK)] if args.quick else [soak(SoakConfig()), soak(LARGE)]
    publish(render(*reports), args.out, quick=args.quick, name="soak")
    return 0 if not any(r.events["violations"] for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
