"""What a node's published status says of it beyond its numbers: ``message``, a sentence an operator
acts on (empty while nothing stands in the pool's way), and ``limit``, why the pool cannot grow."""

from __future__ import annotations

import dataclasses

import pytest

pytestmark = pytest.mark.looptime


async def test_a_healthy_node_says_nothing(make_world):
    async with make_world() as world:
        world.add_node("n1")
        await world.settle()
        status = world.store.statuses["n1"]
        assert status.stats.available == 8 and (status.message, status.limit) == ("", "")


async def test_a_node_whose_subnets_are_full_says_what_to_do(make_world):
    async with make_world() as world:
        world.cloud.add_subnet("s-tiny", vpc="vpc-1", zone="z1", cidr="10.0.8.0/28")
        world.add_node("n1", first_interface_index=1, subnet_ids=("s-tiny",), min_allocate=30)
        await world.settle()
        status = world.store.statuses["n1"]
        assert status.limit == "subnet"
        assert status.message.startswith(f"{status.stats.needed} more addresses needed, but no subnet")
        assert "spec.subnetIDs" in status.message


async def test_unknown_limits_are_said_with_the_type(make_world):
    async with make_world() as world:
        world.add_node("n1", type="x99.hypothetical")
        await world.settle()
        status = world.store.statuses["n1"]
        assert status.limit == "limits-unknown"
        assert "instance type x99.hypothetical are unknown" in status.message


async def test_a_full_node_says_nothing_until_pods_wait_beyond_it(make_world):
    async with make_world() as world:
        world.add_node("n1", min_allocate=60)  # more than an m5.large holds
        await world.settle()
        assert world.store.statuses["n1"].limit == "instance-limit"
        assert world.store.statuses["n1"].message == ""  # full, and nothing waits: not a problem
        resource = world.store.resources["n1"]
        world.side.add(dataclasses.replace(resource, pending_pods=30))
        await world.settle()
        status = world.store.statuses["n1"]
        assert status.message.startswith("3 pods wait for an address, but instance type m5.large")


# -- what the Node is told: max pods and no room ---------------------------------------------------


async def test_max_pods_follows_the_type_and_the_pools_spec(make_world):
    async with make_world() as world:
        world.add_node("plain")
        world.add_node("custom", first_interface_index=1)
        world.add_node("bounded", max_allocate=12)
        world.add_node("unknown", type="x99.hypothetical")
        await world.settle()
        max_pods = {name: s.max_pods for name, s in world.store.statuses.items()}
        # m5.large: 3 interfaces of 10 addresses; the primary's own and custom networking's hold none.
        assert max_pods == {"plain": 29, "custom": 20, "bounded": 14, "unknown": 0}


async def test_a_node_has_no_room_only_while_full_and_every_address_used(make_world):
    async with make_world() as world:
        world.add_node("n1", min_allocate=60)  # more than an m5.large holds: it fills to 27
        await world.settle()
        status = world.store.statuses["n1"]
        assert status.limit == "instance-limit" and status.stats.available == 27
        assert status.no_room is False  # full, but 27 addresses are free
        resource = world.store.resources["n1"]
        world.side.add(dataclasses.replace(resource, used=27))
        await world.settle()
        assert world.store.statuses["n1"].no_room is True
        world.side.add(dataclasses.replace(resource, used=26))
        await world.settle()
        assert world.store.statuses["n1"].no_room is False


async def test_a_node_that_can_still_grow_has_room_whatever_it_uses(make_world):
    async with make_world() as world:
        world.add_node("n1", used=8)
        await world.settle()
        status = world.store.statuses["n1"]
        assert status.limit == "" and status.no_room is False
