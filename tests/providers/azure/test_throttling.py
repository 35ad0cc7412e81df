"""Throttling on Azure: azure-core's retries honour Retry-After on the event loop, every HTTP attempt
is counted, retries and polls spend rate-limit tokens, and a call throttled to the end raises
Throttled with the wait Azure asked for.

The fake answers 429 with ``Retry-After`` *before* carrying out the request, as ARM does; the SDK's
real retry policy classifies and retries it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core import errors
from tests.providers.azure.conftest import World, sample

pytestmark = pytest.mark.looptime

PUT = "NetworkInterfaces.CreateOrUpdate"
POLL = "NetworkInterfaces.CreateOrUpdate.Poll"


async def test_throttled_write_waits_retry_after_on_the_loop_and_counts_every_attempt(world: World) -> None:
    metrics = Metrics()
    _, (nic,) = world.vm("node")
    provider = world.provider(metrics)
    world.fake.throttle(PUT, times=2, retry_after=7)
    loop = asyncio.get_running_loop()
    started = loop.time()
    new = await provider.assign_addresses(interface_id=nic, count=2)
    assert loop.time() - started >= 14  # two Retry-After waits of 7 s, virtual
    assert world.fake.secondary_addresses(nic) == new
    assert world.fake.count(PUT) == 3 and world.fake.count(PUT, status=429) == 2
    assert sample(metrics, "eni_ipam_api_requests_total", operation=PUT) == 3
    assert sample(metrics, "eni_ipam_api_throttled_total", operation=PUT) == 2
    assert sample(metrics, "eni_ipam_api_duration_seconds_count", operation=PUT, outcome="ok") == 1
    # the first attempt's token was spent by the ApiCaller, each retry spent one of its own
    assert sample(metrics, "eni_ipam_api_rate_limit_wait_seconds_count", operation=PUT) == 3


async def test_throttled_to_the_end_raises_throttled_with_retry_after_and_assigns_nothing(
    world: World,
) -> None:
    metrics = Metrics()
    _, (nic,) = world.vm("node")
    provider = world.provider(metrics, max_retries=2)
    world.fake.throttle(PUT, times=100, retry_after=4)
    with pytest.raises(errors.Throttled) as caught:
        await provider.assign_addresses(interface_id=nic, count=2)
    assert caught.value.retry_after == 4
    assert (caught.value.code, caught.value.operation) == ("TooManyRequests", PUT)
    assert world.fake.secondary_addresses(nic) == []
    assert sample(metrics, "eni_ipam_api_requests_total", operation=PUT) == 3  # the first and 2 retries
    assert sample(metrics, "eni_ipam_api_throttled_total", operation=PUT) == 3
    assert (
        sample(metrics, "eni_ipam_api_duration_seconds_count", operation=PUT, outcome="TooManyRequests") == 1
    )


async def test_retry_after_beyond_the_cap_ends_the_call_at_once_for_the_reconciler_to_wait(
    world: World,
) -> None:
    metrics = Metrics()
    _, (nic,) = world.vm("node")
    provider = world.provider(metrics, max_retry_after=30)
    world.fake.throttle(PUT, times=1, retry_after=300)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(errors.Throttled) as caught:
        await provider.assign_addresses(interface_id=nic, count=1)
    assert caught.value.retry_after == 300
    assert loop.time() - started < 30
    assert world.fake.count(PUT) == 1


async def test_throttled_status_poll_is_retried_and_counted_as_a_poll(world: World) -> None:
    metrics = Metrics()
    _, (nic,) = world.vm("node")
    provider = world.provider(metrics)
    world.fake.throttle(POLL, times=1, retry_after=3)
    new = await provider.assign_addresses(interface_id=nic, count=1)
    assert world.fake.secondary_addresses(nic) == new
    assert sample(metrics, "eni_ipam_api_throttled_total", operation=POLL) == 1
    assert sample(metrics, "eni_ipam_api_throttled_total", operation=PUT) == 0
    assert sample(metrics, "eni_ipam_api_requests_total", operation=PUT) == 1
    # polls and the final read: 1 InProgress, 1 throttled, 1 Succeeded, then the NIC
    assert sample(metrics, "eni_ipam_api_requests_total", operation=POLL) == 4
    assert sample(metrics, "eni_ipam_api_rate_limit_wait_seconds_count", operation=POLL) == 4


async def test_throttled_second_page_is_retried_without_restarting_the_listing(
    worlds: Callable[..., World],
) -> None:
    world = worlds(page_size=1)
    for name in ("a", "b", "c"):
        world.vm(name)
    metrics = Metrics()
    provider = world.provider(metrics)
    world.fake.throttle("VirtualMachines.List", times=1, retry_after=2, after=1)
    snapshot = await provider.resync()
    assert len(snapshot.instances) == 3
    assert world.fake.count("VirtualMachines.List") == 4  # three pages, the second one twice
    assert sample(metrics, "eni_ipam_api_requests_total", operation="VirtualMachines.List") == 4
    assert sample(metrics, "eni_ipam_api_throttled_total", operation="VirtualMachines.List") == 1


async def test_dropped_connection_is_retried_and_counted(world: World) -> None:
    metrics = Metrics()
    vm, _ = world.vm("node")
    provider = world.provider(metrics)
    world.fake.disconnect("VirtualMachines.Get")
    found = await provider.describe_instance(instance_id=vm)
    assert found is not None and found.running
    assert sample(metrics, "eni_ipam_api_requests_total", operation="VirtualMachines.Get") == 2
    assert sample(metrics, "eni_ipam_api_throttled_total", operation="VirtualMachines.Get") == 0


async def test_connection_dropped_to_the_end_is_a_transient_error(world: World) -> None:
    vm, _ = world.vm("node")
    provider = world.provider(max_retries=1)
    world.fake.disconnect("VirtualMachines.Get", times=5)
    with pytest.raises(errors.TransientError) as caught:
        await provider.describe_instance(instance_id=vm)
    assert caught.value.code == "ServiceRequestError"


async def test_a_bucket_override_paces_writes_on_the_loop(world: World) -> None:
    metrics = Metrics()
    _, (nic,) = world.vm("node")
    provider = world.provider(metrics, rate_limits={"network-writes": {"burst": 1, "refill": 0.1}})
    loop = asyncio.get_running_loop()
    started = loop.time()
    await provider.assign_addresses(interface_id=nic, count=1)
    await provider.assign_addresses(interface_id=nic, count=1)
    assert loop.time() - started >= 9  # the second write waited ~10 s for a network-writes token
    assert len(world.fake.secondary_addresses(nic)) == 2


async def test_rate_limit_share_scales_the_buckets(world: World) -> None:
    provider = world.provider(share=0.5)
    assert provider.limiter.bucket("arm-writes").refill == 5
    assert provider.limiter.buckets_of(PUT) == ("arm-writes", "network-writes")
