"""Benchmark 2 — convergence under EC2's published token buckets, and the reference operator.

Fresh clusters of 1,000 and 5,000 nodes on the in-memory cloud with EC2's buckets enforced on the
server side, virtual time. Measured: virtual seconds until the last node reaches its watermark.

* **Bound.** Each mutating operation has its own bucket (burst ``b``, refill ``r``). ``n`` calls of
  it cannot finish before ``(n - b) / r`` seconds, so no schedule of the calls the plan needs can
  converge sooner than the largest such time over the operations. The calls counted are the lower
  bound of :mod:`bench.cluster` (one per interface filled, three per new interface).
* **Reference model.** The reference operator's algorithm, in the same simulator and over the same
  provider: one mutation per node per cycle (fill one interface, or create one); after each, a fresh
  per-instance sync (one DescribeNetworkInterfaces) before the node may allocate again; a full resync
  every minute; every call (each page too) from one 4 QPS / burst 20 token bucket.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random

from bench.cluster import (
    MIXED_TYPES,
    SUBNETS_PER_ZONE,
    ZONES,
    build_cloud,
    cluster,
    lower_bound_by_operation,
    snapshot,
    subnet_name,
)
from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.model import AssignAddresses, CreateInterface
from eni_ipam.core.planner import node_stats, plan_allocation
from eni_ipam.core.ratelimit import EC2_BUCKETS, Bucket, RateLimiter
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeResource, NodeSpec
from eni_ipam.simulator.simloop import run_virtual
from providers.sim.cloud import SimCloud
from providers.sim.provider import SimProvider

PRE_ALLOCATE = (8, 12, 20, 30, 45)
REFERENCE_BUCKET = Bucket(20, 4)
"""The reference operator's one limiter for every EC2 call: 4 QPS, burst 20."""
REFERENCE_RESYNC = 60.0


@dataclasses.dataclass(frozen=True)
class Convergence:
    nodes: int
    seconds: float
    bound: float
    calls: dict[str, int]
    reference_seconds: float | None = None

    @property
    def ratio(self) -> float:
        return self.seconds / self.bound if self.bound else float("inf")

    @property
    def speedup(self) -> float | None:
        return self.reference_seconds / self.seconds if self.reference_seconds else None


def bucket_bound(calls: dict[str, int]) -> float:
    """Fewest seconds EC2's buckets allow for ``calls`` (operation → count)."""
    worst = 0.0
    for op, n in calls.items():
        b = EC2_BUCKETS.get(op)
        if b is not None:
            worst = max(worst, (n - b.burst) / b.refill)
    return worst


def _specs(nodes: int, seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    return [(rng.choice(MIXED_TYPES), rng.choice(PRE_ALLOCATE)) for _ in range(nodes)]


async def ours(nodes: int, seed: int = 11) -> tuple[float, dict[str, int], dict[str, int]]:
    """Virtual seconds to converge, mutating calls by operation, and the lower bound's calls."""
    async with cluster(Settings(), seed=seed, throttle=True) as c:
        await c.settle()  # the initial resync on an empty cloud
        for itype, pre in _specs(nodes, seed):
            c.add_nodes(1, pre_allocate=pre, instance_type=itype)
        before = snapshot(c.cloud)
        calls = dict(c.cloud.calls)
        seconds = await c.settle(limit=36_000)
        made = {op: k - calls.get(op, 0) for op, k in c.cloud.calls.items() if not op.startswith("Describe")}
        least = lower_bound_by_operation(before, snapshot(c.cloud))
        return seconds, {op: k for op, k in made.items() if k}, least


class _OneBucket(RateLimiter):
    """Every operation draws from the same bucket, as the reference operator's limiter does."""

    async def acquire(self, operation: str) -> float:
        return await super().acquire("*")


async def reference(nodes: int, seed: int = 11) -> float:
    """Virtual seconds for the reference algorithm to converge the same fresh cluster."""
    clock = LoopClock()
    cloud: SimCloud = build_cloud(clock, throttle=True)
    limiter = _OneBucket({"*": REFERENCE_BUCKET})
    provider = SimProvider(cloud, clock=clock, metrics=Metrics(), limiter=limiter)
    specs: list[NodeResource] = []
    for n, (itype, pre) in enumerate(_specs(nodes, seed)):
        zone = ZONES[n % len(ZONES)]
        instance_id = f"i-{n:06d}"
        cloud.add_instance(
            instance_id,
            type=itype,
            subnet=subnet_name(zone, (n // len(ZONES)) % SUBNETS_PER_ZONE),
            security_groups=["sg-nodes"],
        )
        specs.append(
            NodeResource(name=f"node-{n:06d}", instance_id=instance_id, spec=NodeSpec(pre_allocate=pre))
        )
    start = clock.monotonic()
    snap = await provider.resync()
    shared = [snap]  # the latest full resync: subnets and groups for every node's plans

    async def full_resync() -> None:
        while True:
            await asyncio.sleep(REFERENCE_RESYNC)
            shared[0] = await provider.resync()

    async def maintain(node: NodeResource) -> None:
        spec = node.spec
        instance = snap.instances[node.instance_id]
        limits = snap.limits[instance.type]
        while True:
            stats = node_stats(spec, instance, limits, used=0, prefix_delegation=False)
            if stats.needed <= 0:
                return
            view = shared[0]
            plan = plan_allocation(
                spec, instance, limits, view.subnets, view.security_groups, must=stats.needed
            )
            if not plan.actions:
                return
            action = plan.actions[0]  # one mutation per cycle
            if isinstance(action, AssignAddresses):
                await provider.assign_addresses(interface_id=action.interface_id, count=action.count)
            elif isinstance(action, CreateInterface):
                await provider.create_interface(
                    instance_id=node.instance_id,
                    request=action,
                    tags={"cluster": "reference"},
                    token=f"{node.instance_id}-{action.device_index}",
                )
            # A fresh view of the instance before the next allocation (the per-instance sync).
            fresh = await provider.describe_instance(instance_id=node.instance_id)
            assert fresh is not None
            instance = fresh

    resync = asyncio.create_task(full_resync())
    try:
        await asyncio.gather(*(maintain(s) for s in specs))
    finally:
        resync.cancel()
    return clock.monotonic() - start


def measure(sizes: tuple[int, ...] = (1000, 5000), *, with_reference: bool = True) -> list[Convergence]:
    out = []
    for nodes in sizes:
        seconds, calls, least = run_virtual(ours(nodes))
        ref = run_virtual(reference(nodes)) if with_reference else None
        out.append(
            Convergence(
                nodes=nodes, seconds=seconds, bound=bucket_bound(least), calls=calls, reference_seconds=ref
            )
        )
    return out
