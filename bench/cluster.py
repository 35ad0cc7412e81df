"""A benchmark cluster: the in-memory cloud, the embedded store, a simulated node side and the real
reconciler, driven on virtual time.

Everything the benchmarks measure is produced by production code (manager, planner, provider
wiring, rate limiter); only the cloud and the node side are simulated. :func:`snapshot` and
:func:`lower_bound` give the API-efficiency yardstick: one call per interface that gained
addresses, plus create + attach + delete-on-termination per new interface (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import AsyncIterator, Mapping

from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.manager import NodeManager
from eni_ipam.core.ratelimit import EC2_BUCKETS, Bucket, RateLimiter
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeResource, NodeSpec
from eni_ipam.simulator.cluster import EmbeddedCluster
from eni_ipam.simulator.simnode import SimulatedNodeSide
from eni_ipam.store.memory import MemoryStore
from providers.sim.cloud import SimCloud
from providers.sim.provider import SimProvider

MIXED_TYPES = ("m5.large", "m5.xlarge", "c5.large", "t3.medium", "m5.2xlarge", "r5.large", "c5.4xlarge")
"""Nitro types of several sizes (2 to 8 interfaces, 10 to 30 addresses each)."""
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
SUBNETS_PER_ZONE = 4
NEW_INTERFACE_OPERATIONS = (
    "CreateNetworkInterface",
    "AttachNetworkInterface",
    "ModifyNetworkInterfaceAttribute",
)
"""A new interface costs three calls: create (carrying its addresses), attach, delete-on-termination."""
_UNLIMITED = Bucket(1e9, 1e9)
TICK = 0.05
"""Virtual seconds between two "has every node converged?" checks."""

Layout = dict[str, tuple[int, int]]
"""Interface id → (secondary addresses, prefixes) at one moment."""


@dataclasses.dataclass
class Cluster:
    cloud: SimCloud
    store: MemoryStore
    side: SimulatedNodeSide
    manager: NodeManager
    clock: LoopClock
    rng: random.Random

    def mutating_calls(self) -> int:
        return self.cloud.mutating_calls()

    def read_calls(self) -> int:
        return sum(self.cloud.calls.values()) - self.cloud.mutating_calls()

    def converged(self) -> bool:
        nodes = self.manager.nodes.values()
        return self.manager.ready and not self.manager.busy() and all(n.stats.needed == 0 for n in nodes)

    async def settle(self, limit: float = 3600.0) -> float:
        """Virtual seconds until every node is at its watermark and nothing is queued."""
        start = self.clock.monotonic()
        await asyncio.sleep(0)
        while self.clock.monotonic() - start < limit:
            if self.converged():
                return self.clock.monotonic() - start
            await asyncio.sleep(TICK)
        raise TimeoutError(f"not converged after {limit} virtual seconds")

    def add_nodes(self, count: int, *, pre_allocate: int = 0, used: int = 0, instance_type: str = "") -> None:
        start = len(self.store.resources)
        for n in range(start, start + count):
            instance_id = f"i-{n:06d}"
            zone = ZONES[n % len(ZONES)]
            self.cloud.add_instance(
                instance_id,
                type=instance_type or self.rng.choice(MIXED_TYPES),
                subnet=subnet_name(zone, (n // len(ZONES)) % SUBNETS_PER_ZONE),
                security_groups=["sg-nodes"],
            )
            spec = NodeSpec(pre_allocate=pre_allocate).fields()
            self.side.add(NodeResource(name=f"node-{n:06d}", instance_id=instance_id, spec=spec, used=used))

    def set_used(self, name: str, used: int) -> None:
        self.side.update(name, used=used)


def build_cloud(clock: LoopClock, *, throttle: bool) -> SimCloud:
    cloud = SimCloud(clock, buckets=EC2_BUCKETS if throttle else None)
    cloud.add_vpc("vpc-bench", "10.0.0.0/8")
    cloud.add_security_group("sg-nodes", vpc="vpc-bench")
    # Four /16s per zone (EC2's largest subnet): room for 5,000 nodes' pools with aligned /28s.
    for z, zone in enumerate(ZONES):
        for k in range(SUBNETS_PER_ZONE):
            cloud.add_subnet(subnet_name(zone, k), vpc="vpc-bench", zone=zone, cidr=f"10.{z * 16 + k}.0.0/16")
    return cloud


def subnet_name(zone: str, k: int) -> str:
    return f"subnet-{zone}-{k}"


@contextlib.asynccontextmanager
async def cluster(
    settings: Settings,
    *,
    seed: int = 1,
    throttle: bool = False,
    client_limits: bool = True,
) -> AsyncIterator[Cluster]:
    """A running cluster (no nodes yet); the manager is cancelled on exit.

    ``throttle`` turns on the cloud's server-side token buckets (EC2's published ones);
    ``client_limits`` the reconciler's own (the production default).
    """
    clock = LoopClock()
    cloud = build_cloud(clock, throttle=throttle)
    limiter = RateLimiter(EC2_BUCKETS) if client_limits else RateLimiter({}, default=_UNLIMITED)
    provider = SimProvider(cloud, clock=clock, metrics=Metrics(), limiter=limiter)
    embedded = EmbeddedCluster(
        provider, settings=settings, metrics=Metrics(), clock=clock, rng=random.Random(seed)
    )
    async with embedded.running():
        yield Cluster(cloud, embedded.store, embedded.side, embedded.manager, clock, random.Random(seed))


def snapshot(cloud: SimCloud) -> Layout:
    return {i.id: (len(i.addresses), len(i.prefixes)) for i in cloud.interfaces()}


def lower_bound(before: Layout, after: Layout) -> int:
    """Fewest mutating calls that turn ``before`` into ``after`` (additions only)."""
    return sum(lower_bound_by_operation(before, after).values())


def lower_bound_by_operation(before: Layout, after: Layout) -> dict[str, int]:
    """The calls of :func:`lower_bound`, by EC2 operation."""
    new = sum(1 for iface in after if iface not in before)
    filled = sum(1 for iface, counts in after.items() if iface in before and counts != before[iface])
    return {
        "AssignPrivateIpAddresses": filled,
        **dict.fromkeys(NEW_INTERFACE_OPERATIONS, new),
    }


def by_operation(calls: Mapping[str, int], since: Mapping[str, int]) -> dict[str, int]:
    return {op: n - since.get(op, 0) for op, n in sorted(calls.items()) if n - since.get(op, 0)}
