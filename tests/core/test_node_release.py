"""The release handshake from the reconciler's side."""

import asyncio
import dataclasses

import pytest

from eni_ipam.core.model import ReleaseState
from eni_ipam.core.settings import Settings

pytestmark = pytest.mark.looptime

RELEASE = Settings(release_excess_ips=True, excess_ip_release_delay=10.0)


async def test_address_is_released_only_after_delay_and_node_side_ready(make_world):
    async with make_world(RELEASE) as world:
        world.add_node("n1", used=8, pre_allocate=4)
        await world.settle()
        assert world.manager.nodes["n1"].stats.available == 12
        world.side.update("n1", used=2)
        await asyncio.sleep(5)
        assert world.cloud.calls["UnassignPrivateIpAddresses"] == 0
        assert world.manager.nodes["n1"].marked  # chosen, waiting out the delay
        await world.settle()
        assert world.cloud.calls["UnassignPrivateIpAddresses"] == 1
        assert world.manager.nodes["n1"].stats.available == 6
        assert world.store.statuses["n1"].release == {}  # handshake entries cleaned up


async def test_addresses_in_use_are_never_released(make_world):
    async with make_world(RELEASE) as world:
        world.add_node("n1", used=8, pre_allocate=4)
        await world.settle()
        in_use = set(world.store.resources["n1"].in_use)
        world.side.update("n1", used=2)
        kept = set(world.store.resources["n1"].in_use)
        await world.settle()
        pool = {e.address for e in world.store.statuses["n1"].pool}
        assert kept <= pool and kept <= in_use


async def test_silent_node_side_means_nothing_is_released(make_world):
    async with make_world(RELEASE) as world:
        world.add_node("n1", used=8, pre_allocate=4)
        await world.settle()
        world.side.answering = False
        world.side.update("n1", used=2)
        await asyncio.sleep(300)
        node = world.manager.nodes["n1"]
        assert world.cloud.calls["UnassignPrivateIpAddresses"] == 0
        assert set(node.release_status.values()) == {ReleaseState.MARKED}
        assert len(node.release_status) == 6


async def test_do_not_release_answer_stops_the_release(make_world):
    async with make_world(RELEASE) as world:
        world.add_node("n1", used=8, pre_allocate=4)
        await world.settle()
        world.side.answering = False
        world.side.update("n1", used=2)
        await asyncio.sleep(11)
        node = world.manager.nodes["n1"]
        marked = [a for a, s in node.release_status.items() if s == ReleaseState.MARKED]
        assert marked
        resource = world.store.resources["n1"]
        answers = dict.fromkeys(marked, ReleaseState.DO_NOT_RELEASE)
        world.store.put(dataclasses.replace(resource, release_answers=answers))
        await asyncio.sleep(0.1)
        assert world.cloud.calls["UnassignPrivateIpAddresses"] == 0
        assert not any(a in node.release_status for a in marked)


async def test_a_node_waiting_out_the_release_delay_is_not_maintained_in_a_loop(make_world):
    async with make_world(RELEASE.replace(excess_ip_release_delay=60.0)) as world:
        world.add_node("n1", used=8, pre_allocate=4)
        await world.settle()
        node = world.manager.nodes["n1"]
        passes = world.count_passes("n1")
        world.side.update("n1", used=2)
        await asyncio.sleep(30)  # half the delay: the marks wait, nothing is due
        assert node.marked
        # One pass for the change, and maybe one for the handshake's answers; not one every 10 ms.
        assert passes() <= 4, passes()


async def test_a_release_whose_answer_was_lost_is_not_published_as_still_in_the_pool(make_world):
    async with make_world(RELEASE) as world:
        world.add_node("n1", used=8, pre_allocate=4)
        await world.settle()
        world.cloud.fail_next("UnassignPrivateIpAddresses", code="InternalError", applied=True)
        world.side.update("n1", used=2)
        while world.cloud.calls["UnassignPrivateIpAddresses"] == 0:
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.1)  # the failed pass has ended; its retry is a backoff away
        held = {a for i in world.cloud.instance_view("i-n1").interfaces for a in i.addresses}
        published = {e.address for e in world.store.statuses["n1"].pool}
        assert published == held  # the released addresses are not advertised any more
