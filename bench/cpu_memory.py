"""Benchmark 3 — CPU and memory of a full pass over a large cluster (docs/PERFORMANCE.md).

A cloud view of ``nodes`` instances with four interfaces each (m5.2xlarge-like limits: 4 adapters, 15
addresses each), about half the pool in use and every node short of its watermark, is held by a real
:class:`~eni_ipam.core.manager.NodeManager`. Timed on one core, best of a few runs:

* **resync pass**: the manager applies a full snapshot and recomputes every node's statistics (what
  each periodic resync costs);
* **planning pass**: the planner plans every node's allocation (what maintaining every node at once
  costs in the reconciler, cloud calls aside).

Memory: the resident set of a fresh process holding that state, against the same process before
building it (the interpreter and imports), measured in a child so runs do not pollute each other.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import logging
import resource
import subprocess
import sys
import time
from collections.abc import Callable

import structlog

from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.core import devices
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.manager import NodeManager
from eni_ipam.core.model import (
    CloudSnapshot,
    Instance,
    InstanceLimits,
    Interface,
    NodeStatus,
    SecurityGroup,
    Subnet,
)
from eni_ipam.core.planner import node_stats, plan_allocation
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeResource, NodeSpec

SPEC = NodeSpec(pre_allocate=25)

LIMITS = InstanceLimits(adapters=4, ipv4_per_interface=15, hypervisor="nitro")
TYPE = "m5.2xlarge"
INTERFACES = 4
SECONDARIES = 10
SUBNETS = 12


@dataclasses.dataclass(frozen=True)
class Cpu:
    nodes: int
    resync_seconds: float
    plan_seconds: float


@dataclasses.dataclass(frozen=True)
class Memory:
    nodes: int
    baseline_mb: float
    rss_mb: float

    @property
    def state_mb(self) -> float:
        return self.rss_mb - self.baseline_mb


def snapshot(nodes: int) -> CloudSnapshot:
    subnets = {
        f"subnet-{k}": Subnet(
            id=f"subnet-{k}", vpc_id="vpc", zone="z", cidr=f"10.{k}.0.0/16", available=60_000
        )
        for k in range(SUBNETS)
    }
    # The listing parser hands out one string object per value and one tuple per set of groups
    # (providers/aws/listings.py): an instance's id is the same object in the instance and in each of
    # its interfaces, and every interface of the same groups shares one tuple. So here. Every
    # interface has its own MAC address, as on EC2.
    groups = ("sg-1",)
    instances = {}
    for n in range(nodes):
        subnet = f"subnet-{n % SUBNETS}"
        instance_id = f"i-{n:06d}"
        base = f"10.{n % SUBNETS}.{(n // SUBNETS) % 256}"
        interfaces = tuple(
            Interface(
                id=f"eni-{n:06d}-{d}",
                device_index=d,
                subnet_id=subnet,
                primary_ip=f"{base}.{d * 40}",
                addresses=tuple(f"{base}.{d * 40 + k + 1}" for k in range(SECONDARIES)),
                security_groups=groups,
                instance_id=instance_id,
                link=devices.pack(devices.mac_text(0x02 << 40 | n * INTERFACES + d + 1)),
            )
            for d in range(INTERFACES)
        )
        instances[instance_id] = Instance(
            id=instance_id, type=TYPE, vpc_id="vpc", zone="z", subnet_id=subnet, interfaces=interfaces
        )
    return CloudSnapshot(
        subnets=subnets,
        security_groups={"sg-1": SecurityGroup(id="sg-1", vpc_id="vpc")},
        instances=instances,
        limits={TYPE: LIMITS},
    )


class _Sink:
    def publish(self, name: str, status: NodeStatus) -> None:
        pass


class _Provider:
    name = "bench"

    def __init__(self, snap: CloudSnapshot) -> None:
        self.snap = snap

    async def resync(self) -> CloudSnapshot:
        return self.snap


def resources(nodes: int) -> list[NodeResource]:
    # Each node uses 21 of its 40 addresses and wants 25 spare: 6 short, so every node plans.
    return [
        NodeResource(name=f"node-{n:06d}", instance_id=f"i-{n:06d}", spec=SPEC, used=21) for n in range(nodes)
    ]


def build(nodes: int) -> tuple[NodeManager, CloudSnapshot]:
    snap = snapshot(nodes)
    manager = NodeManager(
        provider=_Provider(snap),  # type: ignore[arg-type]
        settings=Settings(),
        metrics=Metrics(),
        clock=LoopClock(),
        status_sink=_Sink(),
    )
    for r in resources(nodes):
        manager.upsert(r)
    return manager, snap


def best_seconds(runs: int, fn: Callable[[], object]) -> float:
    """The least wall time of ``runs`` calls of ``fn``, each after a collection."""
    best = float("inf")
    for _ in range(runs):
        gc.collect()
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def cpu(nodes: int, runs: int = 3) -> Cpu:
    async def main() -> Cpu:
        manager, snap = build(nodes)

        # manager.resync() minus the provider call, which is the cloud's time. Each run applies a
        # snapshot of new (equal) instance objects, so every node is recomputed, as when every
        # instance changed; passing over unchanged instances is benchmark 6's "resync apply".
        fresh = [
            dataclasses.replace(
                snap, instances={k: dataclasses.replace(i) for k, i in snap.instances.items()}
            )
            for _ in range(runs + 1)
        ]

        async def resync() -> None:
            await manager.apply_resync(fresh.pop(), started=0.0)

        def plan() -> None:
            view = manager.view.planner_subnets()
            for node in manager.nodes.values():
                assert node.instance is not None
                spec = node.resource.spec
                stats = node_stats(
                    spec, node.instance, LIMITS, used=node.resource.used, prefix_delegation=False
                )
                plan_allocation(
                    spec, node.instance, LIMITS, view, manager.view.security_groups, must=stats.needed
                )

        await resync()
        applied = float("inf")
        for _ in range(runs):
            gc.collect()
            started = time.perf_counter()
            await resync()  # its yields to the loop cost nothing here: nothing else is scheduled
            applied = min(applied, time.perf_counter() - started)
        return Cpu(nodes=nodes, resync_seconds=applied, plan_seconds=best_seconds(runs, plan))

    return asyncio.run(main())


def _rss_mb() -> float:
    """Resident set size now (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def memory(nodes: int) -> Memory:
    """Measured in a fresh interpreter (``python -m bench.cpu_memory --memory N``)."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.cpu_memory", "--memory", str(nodes)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    data = json.loads(out.strip().splitlines()[-1])  # the last line: logs may precede it
    return Memory(nodes=nodes, baseline_mb=data["baseline_mb"], rss_mb=data["rss_mb"])


def _child(nodes: int) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    gc.collect()
    baseline = _rss_mb()

    async def hold() -> float:
        manager, snap = build(nodes)
        await manager.apply_resync(snap, started=0.0)
        gc.collect()
        return _rss_mb()

    rss = asyncio.run(hold())
    print(json.dumps({"baseline_mb": baseline, "rss_mb": rss}))


if __name__ == "__main__" and sys.argv[1:2] == ["--memory"]:
    _child(int(sys.argv[2]))
