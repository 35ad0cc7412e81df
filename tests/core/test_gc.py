"""Garbage collection: mark in one run, delete in the next, and only what is ours and still detached."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core import errors
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.gc import GarbageCollector
from eni_ipam.core.model import Interface, ownership_tags, ready_interface_tags
from eni_ipam.core.settings import Settings
from providers.sim.cloud import SimCloud
from providers.sim.provider import SimProvider
from tests.providers.sim import make_cloud

OURS = ownership_tags("c1")


async def leak(cloud: SimCloud, tags: dict[str, str] | None = None) -> str:
    iface = await cloud.create_network_interface(subnet_id="s-1", groups=["sg-1"], tags=tags or OURS)
    return iface.id


def collector(cloud: SimCloud, *, max_per_run: int = 25, metrics: Metrics | None = None) -> GarbageCollector:
    metrics = metrics or Metrics()
    provider = SimProvider(cloud, clock=LoopClock(), metrics=metrics)
    return GarbageCollector(
        provider, cluster_name="c1", clock=LoopClock(), metrics=metrics, interval=300, max_per_run=max_per_run
    )


@pytest.fixture
def cloud() -> SimCloud:
    cloud = make_cloud()
    cloud.add_instance("i-1", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    return cloud


async def test_leaked_interface_is_marked_first_and_deleted_on_the_next_run(cloud: SimCloud) -> None:
    leaked = await leak(cloud)
    gc = collector(cloud)
    first = await gc.run_once()
    assert first.marked == (leaked,) and first.deleted == ()
    assert cloud.interface_view(leaked) is not None
    second = await gc.run_once()
    assert second.deleted == (leaked,)
    assert cloud.interface_view(leaked) is None


async def test_interface_attached_between_runs_survives_and_is_unmarked(cloud: SimCloud) -> None:
    leaked = await leak(cloud)
    gc = collector(cloud)
    await gc.run_once()
    await cloud.attach_network_interface(interface_id=leaked, instance_id="i-1", device_index=1)
    second = await gc.run_once()
    assert second.survived == (leaked,) and second.deleted == ()
    assert leaked not in gc.marked
    assert cloud.interface_view(leaked) is not None


async def test_other_clusters_and_untagged_interfaces_are_never_touched(cloud: SimCloud) -> None:
    theirs = await leak(cloud, ownership_tags("c2"))
    untagged = await leak(cloud, {"team": "x"})
    gc = collector(cloud)
    for _ in range(3):
        run = await gc.run_once()
        assert run.marked == () and run.deleted == ()
    assert cloud.interface_view(theirs) is not None and cloud.interface_view(untagged) is not None


async def test_marks_per_run_are_bounded(cloud: SimCloud) -> None:
    leaked = [await leak(cloud) for _ in range(5)]
    gc = collector(cloud, max_per_run=2)
    assert len((await gc.run_once()).marked) == 2
    second = await gc.run_once()
    assert len(second.deleted) == 2 and len(second.marked) == 2
    third = await gc.run_once()
    assert len(third.deleted) == 2 and len(third.marked) == 1
    assert sum(cloud.interface_view(i) is None for i in leaked) == 4


async def test_failed_delete_keeps_the_mark_and_is_retried(cloud: SimCloud) -> None:
    leaked = await leak(cloud)
    metrics = Metrics()
    gc = collector(cloud, metrics=metrics)
    await gc.run_once()
    cloud.fail_next("DeleteNetworkInterface", code="InternalError")
    failed = await gc.run_once()
    assert failed.failed == (leaked,) and leaked in gc.marked
    assert (await gc.run_once()).deleted == (leaked,)
    assert metrics.sample("eni_ipam_gc_interfaces_total", {"action": "failed"}) == 1
    assert metrics.sample("eni_ipam_gc_interfaces_total", {"action": "deleted"}) == 1


async def test_failed_listing_deletes_nothing_and_keeps_the_marks(cloud: SimCloud) -> None:
    leaked = await leak(cloud)
    gc = collector(cloud)
    await gc.run_once()
    cloud.fail_next("DescribeNetworkInterfaces", code="InternalError")
    with pytest.raises(errors.TransientError):
        await gc.run_once()
    assert gc.marked == {leaked} and cloud.interface_view(leaked) is not None


@pytest.mark.looptime
async def test_manager_collects_a_leaked_interface_after_two_intervals(make_world) -> None:  # type: ignore[no-untyped-def]
    async with make_world(Settings(gc_interval=300, cluster_name="c1")) as world:
        leaked = await world.cloud.create_network_interface(subnet_id="s-1", tags=OURS)
        await asyncio.sleep(301)
        assert world.cloud.interface_view(leaked.id) is not None, "deleted after one listing"
        await asyncio.sleep(300)
        assert world.cloud.interface_view(leaked.id) is None


@pytest.mark.looptime
async def test_manager_without_gc_interval_never_collects(make_world) -> None:  # type: ignore[no-untyped-def]
    async with make_world(Settings(gc_interval=0, cluster_name="c1")) as world:
        leaked = await world.cloud.create_network_interface(subnet_id="s-1", tags=OURS)
        await asyncio.sleep(3600)
        assert world.cloud.interface_view(leaked.id) is not None


@pytest.mark.looptime
async def test_a_run_refused_for_a_lapsed_term_is_skipped_and_collection_goes_on(cloud: SimCloud) -> None:
    from eni_ipam.core.fence import Fence, FencedProvider

    leaked = await leak(cloud)
    metrics = Metrics()
    fence = Fence(is_open=True, term_clock=lambda: asyncio.get_running_loop().time())
    fence.renewed(
        asyncio.get_running_loop().time() + 400.0
    )  # the first run (marks) is within the term; the second (deletes) is not
    provider = FencedProvider(SimProvider(cloud, clock=LoopClock(), metrics=metrics), fence)
    gc = GarbageCollector(provider, cluster_name="c1", clock=LoopClock(), metrics=metrics, interval=300)
    running = asyncio.create_task(gc.run())
    await asyncio.sleep(601)
    assert cloud.interface_view(leaked) is not None and not running.done()
    fence.renewed(asyncio.get_running_loop().time() + 400.0)
    await asyncio.sleep(300)
    assert cloud.interface_view(leaked) is None
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running


async def test_ready_interfaces_are_never_collected_and_are_handed_to_the_pool(cloud: SimCloud) -> None:
    ready = await leak(cloud, ready_interface_tags(cluster_name="c1"))
    leaked = await leak(cloud)
    handed: list[list[str]] = []

    async def pool(listed: Sequence[Interface]) -> None:
        handed.append([i.id for i in listed])

    gc = collector(cloud)
    gc.ready = pool
    for _ in range(3):
        run = await gc.run_once()
        assert ready not in run.marked and ready not in run.deleted
    assert cloud.interface_view(ready) is not None
    assert cloud.interface_view(leaked) is None
    assert handed == [[ready]] * 3
