"""Benchmark 4 — event to IPs: the reconciler's own delay, on the real clock (docs/PERFORMANCE.md).

A converged cluster of ``nodes`` nodes on the in-memory cloud with zero latency and no rate limit
(cloud time and bucket waits are not the reconciler's). Then, one at a time, a node's pods grow past
its pool; measured is the time from that event (the store delivering the node's new usage) to the
start of the allocation call the reconciler makes for it. ``trigger_min_interval`` is the
production default, so the coalescing delay is included.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import statistics
import time
from collections.abc import Sequence

from bench.cluster import MIXED_TYPES, SUBNETS_PER_ZONE, ZONES, build_cloud, subnet_name
from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.ratelimit import Bucket, RateLimiter
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeResource, NodeSpec
from eni_ipam.simulator.cluster import EmbeddedCluster
from providers.sim.cloud import SimCloud
from providers.sim.provider import SimProvider

UNLIMITED = Bucket(1e9, 1e9)


@dataclasses.dataclass(frozen=True)
class Latency:
    nodes: int
    events: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    samples_ms: tuple[float, ...] = ()
    """Every event's time, in order: the distribution bench/figures.py draws."""


class _Timed(SimProvider):
    """Notes when each allocation call starts, by instance."""

    def __init__(self, cloud: SimCloud, **kwargs: object) -> None:
        super().__init__(cloud, **kwargs)  # type: ignore[arg-type]
        self.started: dict[str, float] = {}
        self._owner: dict[str, str] = {}

    async def assign_addresses(
        self, *, interface_id: str, count: int, prefixes: bool = False, addresses: Sequence[str] = ()
    ) -> list[str]:
        view = self.cloud.interface_view(interface_id)
        if view is not None:
            self.started.setdefault(view.instance_id, time.perf_counter())
        return await super().assign_addresses(
            interface_id=interface_id, count=count, prefixes=prefixes, addresses=addresses
        )

    async def create_interface(self, **kwargs):  # type: ignore[no-untyped-def]
        self.started.setdefault(kwargs["instance_id"], time.perf_counter())
        return await super().create_interface(**kwargs)


async def run(nodes: int, events: int, seed: int = 5) -> Latency:
    rng = random.Random(seed)
    clock = LoopClock()
    cloud = build_cloud(clock, throttle=False)
    provider = _Timed(cloud, clock=clock, metrics=Metrics(), limiter=RateLimiter({}, default=UNLIMITED))
    embedded = EmbeddedCluster(provider, settings=Settings(), metrics=Metrics(), clock=clock, rng=rng)
    manager, side = embedded.manager, embedded.side
    for n in range(nodes):
        zone = ZONES[n % len(ZONES)]
        cloud.add_instance(
            f"i-{n:06d}",
            type=rng.choice(MIXED_TYPES),
            subnet=subnet_name(zone, (n // len(ZONES)) % SUBNETS_PER_ZONE),
            security_groups=["sg-nodes"],
        )
        side.add(NodeResource(name=f"node-{n:06d}", instance_id=f"i-{n:06d}", spec=NodeSpec(pre_allocate=8)))
    async with embedded.running():
        while not (manager.ready and not manager.busy()):
            await asyncio.sleep(0.01)
        samples: list[float] = []
        for _ in range(events):
            # A node with room for one more address (one at capacity would rightly make no call).
            roomy = [n for n, node in manager.nodes.items() if node.stats.capacity > node.stats.available + 1]
            name = rng.choice(sorted(roomy))
            node = manager.nodes[name]
            instance_id = node.resource.instance_id
            provider.started.pop(instance_id, None)
            event = time.perf_counter()
            side.update(name, used=node.stats.available + 1)  # one pod more than the pool holds
            async with asyncio.timeout(10):
                while instance_id not in provider.started:
                    await asyncio.sleep(0)
            samples.append(provider.started[instance_id] - event)
            while manager.busy():
                await asyncio.sleep(0.001)
    samples.sort()
    ms = [s * 1000 for s in samples]
    return Latency(
        nodes=nodes,
        events=events,
        p50_ms=statistics.median(ms),
        p99_ms=ms[min(len(ms) - 1, int(len(ms) * 0.99))],
        max_ms=ms[-1],
        samples_ms=tuple(ms),
    )


def measure(nodes: int = 1000, events: int = 300) -> Latency:
    return asyncio.run(run(nodes, events))
