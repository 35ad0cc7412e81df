"""Shared fixtures: a small simulated world (in-memory cloud + store + manager) on the loop's clock."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable

import pytest

from eni_ipam.core.clock import LoopClock
from eni_ipam.core.config import Settings
from eni_ipam.core.manager import NodeManager
from eni_ipam.core.metrics import Metrics
from eni_ipam.core.model import NodeSpec
from eni_ipam.core.node import PassResult
from eni_ipam.simulator.simnode import SimulatedNodeSide
from eni_ipam.store.memory import MemoryStore
from providers.sim.cloud import SimCloud
from providers.sim.provider import SimProvider


class World:
    def __init__(self, settings: Settings, provider_wrapper: Callable | None = None) -> None:
        self.clock = LoopClock()
        self.metrics = Metrics()
        self.cloud = SimCloud(self.clock)
        self.cloud.add_vpc("vpc-1", "10.0.0.0/16")
        self.cloud.add_subnet("s-1", vpc="vpc-1", zone="z1", cidr="10.0.0.0/22")
        self.cloud.add_security_group("sg-1", vpc="vpc-1")
        self.store = MemoryStore()
        self.side = SimulatedNodeSide(self.store)
        provider = SimProvider(self.cloud, clock=self.clock, metrics=self.metrics)
        self.provider = provider_wrapper(provider) if provider_wrapper else provider
        self.manager = NodeManager(
            provider=self.provider,
            settings=settings,
            metrics=self.metrics,
            clock=self.clock,
            status_sink=self.store,
            rng=random.Random(7),
        )
        self.store.attach(self.manager)

    def add_node(self, name: str, *, type: str = "m5.large", used: int = 0, **spec: object) -> None:
        instance = f"i-{name}"
        self.cloud.add_instance(instance, type=type, subnet="s-1", security_groups=["sg-1"])
        self.side.add(NodeSpec(name=name, instance_id=instance, **spec), used=used)  # type: ignore[arg-type]

    def count_passes(self, name: str) -> Callable[[], int]:
        """Count the maintenance passes of node ``name`` from now on; returns the counter's reader."""
        node = self.manager.nodes[name]
        maintain = node.maintain
        passes = 0

        async def counted() -> PassResult:
            nonlocal passes
            passes += 1
            return await maintain()

        node.maintain = counted  # type: ignore[method-assign]
        return lambda: passes

    async def settle(self, limit: float = 120.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        await asyncio.sleep(0.01)
        while self.manager.busy() and loop.time() < deadline:
            await asyncio.sleep(0.01)


@pytest.fixture
def make_world() -> Callable[..., contextlib.AbstractAsyncContextManager[World]]:
    @contextlib.asynccontextmanager
    async def running(
        settings: Settings | None = None, provider_wrapper: Callable | None = None, start: bool = True
    ) -> AsyncIterator[World]:
        world = World(settings or Settings(), provider_wrapper)
        task = asyncio.create_task(world.manager.run()) if start else None
        world.task = task  # type: ignore[attr-defined]
        try:
            yield world
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    return running
