"""Resyncs between two full instance listings list only what can have changed, and miss nothing.

Every EC2 provider shares this logic (providers/ec2/provider.py); it runs here over the in-memory
cloud with the AWS provider's default interval. Each check compares what a resync reports with what
a resync that lists every instance would report.
"""

from __future__ import annotations

import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.model import CloudSnapshot
from providers.sim.cloud import SimCloud
from providers.sim.provider import SimProvider
from tests.providers.sim import make_cloud

pytestmark = pytest.mark.looptime


def listing(cloud: SimCloud, interval: float = 1800.0) -> SimProvider:
    provider = SimProvider(cloud, clock=LoopClock(), metrics=Metrics())
    provider.instance_listing_interval = interval
    return provider


@pytest.fixture
def cloud() -> SimCloud:
    cloud = make_cloud()
    for n in range(3):
        cloud.add_instance(f"i-{n}", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    return cloud


async def view(cloud: SimCloud) -> CloudSnapshot:
    """What a resync listing every instance says."""
    return await listing(cloud, 0.0).resync()


def summary(snapshot: CloudSnapshot) -> dict[str, tuple[bool, tuple[str, ...]]]:
    return {
        id: (i.running, tuple(f.id for f in i.interfaces)) for id, i in sorted(snapshot.instances.items())
    }


async def test_an_unchanged_instance_is_handed_back_as_the_same_object(cloud: SimCloud) -> None:
    provider = listing(cloud)
    first = await provider.resync()
    second = await provider.resync()
    assert all(second.instances[id] is first.instances[id] for id in first.instances)
    await provider.assign_addresses(interface_id=first.instances["i-1"].interfaces[0].id, count=2)
    third = await provider.resync()
    assert third.instances["i-1"] is not second.instances["i-1"]
    assert third.instances["i-0"] is second.instances["i-0"]


async def test_a_snapshot_names_the_instances_that_are_not_the_last_ones_objects(cloud: SimCloud) -> None:
    provider = listing(cloud)
    first = await provider.resync()
    assert first.changes is not None and first.changes.instance_ids == {"i-0", "i-1", "i-2"}
    second = await provider.resync()
    assert second.changes is not None
    assert second.changes.since is first.instances and second.changes.instance_ids == set()
    await provider.assign_addresses(interface_id=first.instances["i-1"].interfaces[0].id, count=2)
    cloud.terminate_instance("i-2")
    cloud.add_instance("i-9", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    third = await provider.resync()
    assert third.changes is not None and third.changes.since is second.instances
    assert third.changes.instance_ids == {"i-1", "i-2", "i-9"}  # changed, gone, new


async def test_a_resync_between_full_listings_asks_only_for_instances_not_running(cloud: SimCloud) -> None:
    provider = listing(cloud)
    await provider.resync()
    requests: list[dict[str, object]] = []

    def watch(operation: str, request: dict[str, object]) -> None:
        if operation == "DescribeInstances":
            requests.append(request)

    cloud.gate.watch(watch)
    await provider.resync()
    (request,) = requests
    states = set((request.get("filters") or {})["instance-state-name"])  # type: ignore[index]
    assert "running" not in states and {"stopped", "terminated"} <= states


async def test_stops_starts_launches_and_terminations_are_seen_between_full_listings(cloud: SimCloud) -> None:
    provider = listing(cloud)
    await provider.resync()
    cloud.stop_instance("i-0")
    cloud.terminate_instance("i-1")
    cloud.add_instance("i-9", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    snapshot = await provider.resync()
    assert summary(snapshot) == summary(await view(cloud))
    assert not snapshot.instances["i-0"].running and "i-1" not in snapshot.instances
    cloud.start_instance("i-0")
    snapshot = await provider.resync()
    assert snapshot.instances["i-0"].running
    assert summary(snapshot) == summary(await view(cloud))


async def test_the_whole_listing_comes_back_after_the_interval(cloud: SimCloud) -> None:
    import asyncio

    provider = listing(cloud, interval=600.0)
    await provider.resync()
    requests: list[dict[str, object]] = []
    cloud.gate.watch(
        lambda operation, request: requests.append(request) if operation == "DescribeInstances" else None
    )
    await provider.resync()
    await asyncio.sleep(601)
    await provider.resync()
    states = [set((r.get("filters") or {}).get("instance-state-name", ())) for r in requests]  # type: ignore[union-attr]
    assert "running" not in states[0] and "running" in states[-1]
