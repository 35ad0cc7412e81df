"""Benchmark 1 — API efficiency: mutating calls against the lower bound (docs/PERFORMANCE.md).

Scenarios on the in-memory cloud, virtual time, no throttling (calls, not time, are measured):

* fresh clusters of 100 and 1,000 nodes of mixed instance types, with and without prefix
  delegation, each node asking for a pool of its own size;
* scale-up: every node's pods grow past what its pool holds;
* pod churn: pods come and go within the pools for ten virtual minutes;
* steady state: ten quiet virtual minutes; mutating calls must be zero and read calls per minute
  must not grow with the number of nodes beyond pagination.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
from collections import Counter
from collections.abc import Callable

from bench.cluster import SUBNETS_PER_ZONE, ZONES, Cluster, by_operation, cluster, lower_bound, snapshot
from eni_ipam.core.settings import Settings
from eni_ipam.simulator.simloop import run_virtual

PRE_ALLOCATE = (8, 12, 20, 30, 45)
"""Watermarks of the nodes (one picked per node): small pools to several interfaces' worth."""
STEADY_MINUTES = 10
SUBNETS = SUBNETS_PER_ZONE * len(ZONES)


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    nodes: int
    prefix_delegation: bool
    calls: int
    bound: int
    operations: dict[str, int]

    @property
    def ratio(self) -> float:
        return self.calls / self.bound if self.bound else (1.0 if not self.calls else float("inf"))


@dataclasses.dataclass(frozen=True)
class Steady:
    nodes: int
    mutating: int
    reads_per_minute: float
    pages_per_resync: int
    """Describe pages one full resync needs for this cluster's subnets, groups, instances, interfaces."""

    @property
    def beyond_pages(self) -> float:
        """Read calls per minute beyond one resync's pages (resyncs run once a minute)."""
        return self.reads_per_minute - self.pages_per_resync


async def _round(c: Cluster, change: Callable[[], None]) -> tuple[int, int, Counter[str]]:
    """Apply one change, let the cluster settle: (mutating calls, lower bound, calls by operation).

    The layout is read after ``change`` (which makes no call: the reconciler acts only once the
    loop runs), so the bound starts from what the cloud held when the demand appeared.
    """
    change()
    before, calls, mutating = snapshot(c.cloud), Counter(c.cloud.calls), c.mutating_calls()
    await c.settle()
    operations = Counter(by_operation(c.cloud.calls, calls))
    return c.mutating_calls() - mutating, lower_bound(before, snapshot(c.cloud)), operations


async def _phase(c: Cluster, name: str, pd: bool, changes: list[Callable[[], None]], pause: float) -> Phase:
    calls = bound = 0
    operations: Counter[str] = Counter()
    for change in changes:
        got, least, ops = await _round(c, change)
        calls, bound = calls + got, bound + least
        operations.update(ops)
        await asyncio.sleep(pause)
    return Phase(
        name=name,
        nodes=len(c.manager.nodes),
        prefix_delegation=pd,
        calls=calls,
        bound=bound,
        operations={k: v for k, v in sorted(operations.items()) if not k.startswith("Describe")},
    )


async def run_cluster(nodes: int, *, prefix_delegation: bool, seed: int = 7) -> tuple[list[Phase], Steady]:
    rng = random.Random(seed)
    settings = Settings(prefix_delegation=prefix_delegation)
    async with cluster(settings, seed=seed) as c:

        def fresh() -> None:
            for _ in range(nodes):
                c.add_nodes(1, pre_allocate=rng.choice(PRE_ALLOCATE))

        def scale_up() -> None:
            for name, node in c.manager.nodes.items():
                c.set_used(name, node.stats.available + rng.randint(1, 10))

        def churn() -> None:
            for name, node in c.manager.nodes.items():
                c.set_used(name, max(0, node.stats.used + rng.randint(-5, 5)))

        phases = [
            await _phase(c, "fresh cluster", prefix_delegation, [fresh], 0),
            await _phase(c, "scale-up", prefix_delegation, [scale_up], 0),
            await _phase(c, "pod churn (20 rounds, 10 min)", prefix_delegation, [churn] * 20, 30),
        ]
        mutating, reads = c.mutating_calls(), c.read_calls()
        await asyncio.sleep(STEADY_MINUTES * 60)
        size = c.cloud.page_size
        listings = (SUBNETS, 1, nodes, len(c.cloud.interfaces()))  # subnets, groups, instances, interfaces
        steady = Steady(
            nodes=nodes,
            mutating=c.mutating_calls() - mutating,
            reads_per_minute=(c.read_calls() - reads) / STEADY_MINUTES,
            pages_per_resync=sum(math.ceil(n / size) for n in listings),
        )
        return phases, steady


def measure(sizes: tuple[int, ...] = (100, 1000)) -> tuple[list[Phase], list[Steady]]:
    phases: list[Phase] = []
    steady: list[Steady] = []
    for nodes in sizes:
        for pd in (False, True):
            p, s = run_virtual(run_cluster(nodes, prefix_delegation=pd))
            phases.extend(p)
            if not pd:
                steady.append(s)
    return phases, steady
