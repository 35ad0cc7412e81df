"""A new leader's head start: the nodes known to wait for addresses are served before the first
full listing lands, each on a fresh read of its own instance (decision 0041)."""

import asyncio
import contextlib
from typing import Any

import pytest

from eni_ipam.core import manager as manager_module
from eni_ipam.core.spec import NodeResource, NodeSpec
from tests.core import manager_running

pytestmark = pytest.mark.looptime


def held_listing(world: Any) -> asyncio.Event:
    """Hold every full listing until the returned event is set (the shared view is not held)."""
    gate = asyncio.Event()
    provider = world.manager.provider
    real = provider.resync

    async def held() -> Any:
        await gate.wait()
        return await real()

    provider.resync = held
    return gate


def add(world: Any, name: str, *, listed: int | None = None, pending_pods: int = 0, **spec: Any) -> None:
    instance = f"i-{name}"
    world.cloud.add_instance(instance, type="m5.large", subnet="s-1", security_groups=["sg-1"])
    resource = NodeResource(name=name, instance_id=instance, spec=NodeSpec(**spec), pending_pods=pending_pods)
    world.manager.upsert(resource, listed=listed)


def running(world: Any) -> contextlib.AbstractAsyncContextManager[None]:
    return manager_running(world.manager)


async def test_a_pool_short_by_its_last_status_is_served_before_the_first_listing_lands(make_world):
    async with make_world(start=False) as world:
        gate = held_listing(world)
        add(world, "short", listed=2, pre_allocate=8)  # its status said 2 addresses: 6 short
        add(world, "enough", listed=8, pre_allocate=8)
        add(world, "unknown", pre_allocate=8)  # no status yet: nothing to go by
        async with running(world):
            await asyncio.sleep(5)
            nodes = world.manager.nodes
            assert not world.manager.ready
            assert nodes["short"].stats.available == 8
            assert nodes["enough"].instance is None and nodes["unknown"].instance is None
            assert world.cloud.calls["DescribeInstances"] == 1  # the short one's own read, no listing
            gate.set()
            await world.settle()
            assert world.manager.ready
            assert all(nodes[n].stats.available == 8 for n in ("short", "enough", "unknown"))


async def test_a_node_with_pods_waiting_is_served_before_the_first_listing_lands(make_world):
    async with make_world(start=False) as world:
        gate = held_listing(world)
        add(world, "waiting", pending_pods=3, pre_allocate=2)
        async with running(world):
            await asyncio.sleep(5)
            assert not world.manager.ready
            stats = world.manager.nodes["waiting"].stats
            assert stats.available >= 3  # the pods' addresses, beyond the watermark
            gate.set()
            await world.settle()


async def test_at_most_so_many_nodes_are_served_before_the_first_listing(make_world, monkeypatch):
    monkeypatch.setattr(manager_module, "TAKEOVER_PASSES", 2)
    async with make_world(start=False) as world:
        gate = held_listing(world)
        for n in range(4):
            add(world, f"n{n}", listed=0, pre_allocate=4)
        async with running(world):
            await asyncio.sleep(5)
            served = [n for n, node in world.manager.nodes.items() if node.stats.available]
            assert served == ["n0", "n1"]
            gate.set()
            await world.settle()
            assert all(node.stats.available == 4 for node in world.manager.nodes.values())


async def test_a_failed_shared_view_leaves_every_node_to_the_listing(make_world):
    async with make_world(start=False) as world:
        gate = held_listing(world)
        world.cloud.fail_next("DescribeSubnets", 1)  # the shared view's call (the listing is held)
        add(world, "short", listed=0, pre_allocate=8)
        async with running(world):
            await asyncio.sleep(5)
            assert world.cloud.calls["AssignPrivateIpAddresses"] == 0
            assert world.manager.nodes["short"].instance is None
            gate.set()
            await world.settle()
            assert world.manager.nodes["short"].stats.available == 8


async def test_a_listing_older_than_a_head_start_pass_never_undoes_what_the_pass_saw(make_world):
    async with make_world(start=False) as world:
        provider = world.manager.provider
        listed, release = asyncio.Event(), asyncio.Event()
        real_resync, real_shared = provider.resync, provider.shared_view

        async def listing_then_hold() -> Any:
            snapshot = await real_resync()  # the cloud before the pass's assignment
            listed.set()
            await release.wait()
            return snapshot

        async def shared_after_listing() -> Any:
            await listed.wait()
            return await real_shared()

        provider.resync, provider.shared_view = listing_then_hold, shared_after_listing
        add(world, "short", listed=0, pre_allocate=8)
        async with running(world):
            node = world.manager.nodes["short"]
            while node.stats.available < 8:
                await asyncio.sleep(0.1)
            release.set()
            await world.settle()
            assert node.stats.available == 8  # the listing's empty pool did not replace the fresh one
            assert world.cloud.calls["AssignPrivateIpAddresses"] == 1


async def test_without_a_shared_view_nothing_is_served_before_the_first_listing(make_world):
    async with make_world(start=False) as world:
        gate = held_listing(world)
        world.manager.provider.shared_view = None  # a provider that offers none
        add(world, "short", listed=0, pending_pods=2, pre_allocate=8)
        async with running(world):
            await asyncio.sleep(5)
            assert world.cloud.calls["AssignPrivateIpAddresses"] == 0
            assert world.cloud.calls["DescribeInstances"] == 0
            gate.set()
            await world.settle()
            assert world.manager.nodes["short"].stats.available >= 8
