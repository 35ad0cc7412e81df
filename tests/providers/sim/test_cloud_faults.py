"""The cloud's front door: call counting, injected faults, server-side token buckets, latency."""

import asyncio
from typing import Any

import pytest

from eni_ipam.core.ratelimit import EC2_BUCKETS, Bucket
from providers.sim.cloud import SimCloud
from providers.sim.gate import ServerBucket
from providers.sim.records import SimError
from tests.providers.sim import interface, make_cloud, primary_id

ASSIGN = "AssignPrivateIpAddresses"


def instance_cloud(**kwargs: Any) -> tuple[SimCloud, str]:
    cloud = make_cloud(**kwargs)
    cloud.add_instance("i-1", type="m5.xlarge", subnet="s-1", security_groups=["sg-1"])
    return cloud, primary_id(cloud, "i-1")


async def test_calls_are_counted_by_operation_and_mutating_calls_exclude_describes() -> None:
    cloud, eni = instance_cloud()
    await cloud.describe_subnets()
    await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=1)
    with pytest.raises(SimError):
        await cloud.assign_private_ip_addresses(interface_id="eni-9", secondary_count=1)
    assert cloud.calls == {"DescribeSubnets": 1, ASSIGN: 2}
    assert cloud.mutating_calls() == 2


async def test_setup_and_inspection_are_not_api_calls() -> None:
    cloud, _ = instance_cloud()
    cloud.instance_view("i-1")
    cloud.subnet_free("s-1")
    cloud.check_invariants()
    cloud.terminate_instance("i-1")
    assert not cloud.calls


async def test_fail_next_fails_that_many_calls_then_recovers_changing_nothing() -> None:
    cloud, eni = instance_cloud()
    cloud.fail_next(ASSIGN, count=2, code="InternalError")
    for _ in range(2):
        with pytest.raises(SimError) as err:
            await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=1)
        assert err.value.code == "InternalError"
    assert interface(cloud, eni).addresses == ()
    assert await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=1) == ["10.0.0.5"]
    assert cloud.calls[ASSIGN] == 3


async def test_fail_next_applies_only_to_its_operation_and_keeps_code_and_message() -> None:
    cloud, eni = instance_cloud()
    cloud.fail_next("CreateNetworkInterface", code="UnauthorizedOperation", message="no")
    await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=1)
    with pytest.raises(SimError) as err:
        await cloud.create_network_interface(subnet_id="s-1")
    assert (err.value.code, err.value.message) == ("UnauthorizedOperation", "no")


async def test_applied_fault_makes_the_change_and_loses_the_response() -> None:
    cloud, eni = instance_cloud()
    cloud.fail_next(ASSIGN, applied=True)
    with pytest.raises(SimError):
        await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=2)
    assert interface(cloud, eni).addresses == ("10.0.0.5", "10.0.0.6")


def test_server_bucket_refills_fractionally_up_to_its_burst() -> None:
    bucket = ServerBucket(Bucket(2, 0.5), now=0.0)
    assert bucket.take(0.0) and bucket.take(0.0) and not bucket.take(0.0)
    assert not bucket.take(1.0)  # half a token
    assert bucket.take(2.0)  # the second half arrived
    assert bucket.take(100.0) and bucket.take(100.0) and not bucket.take(100.0)  # capped at the burst


@pytest.mark.looptime
async def test_bucket_answers_request_limit_exceeded_then_recovers_after_refill() -> None:
    cloud, eni = instance_cloud(buckets={ASSIGN: Bucket(3, 0.5)})
    for _ in range(3):
        await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=1)
    with pytest.raises(SimError) as err:
        await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=1)
    assert err.value.code == "RequestLimitExceeded"
    assert len(interface(cloud, eni).addresses) == 3
    await cloud.describe_subnets()  # a bucket is per operation: others are not throttled
    await asyncio.sleep(1.0)
    with pytest.raises(SimError):
        await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=1)
    await asyncio.sleep(2.0)
    await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=1)
    assert cloud.calls[ASSIGN] == 6


@pytest.mark.looptime
async def test_ec2_buckets_throttle_past_the_burst_and_none_disables_throttling() -> None:
    default, _ = instance_cloud(buckets=EC2_BUCKETS)
    throttled = 0
    for _ in range(int(EC2_BUCKETS["DescribeSubnets"].burst) + 5):
        try:
            await default.describe_subnets()
        except SimError:
            throttled += 1
    assert throttled == 5
    unthrottled, _ = instance_cloud(buckets=None)
    for _ in range(500):
        await unthrottled.describe_subnets()


@pytest.mark.looptime
async def test_latency_is_waited_on_the_clock_before_the_change() -> None:
    cloud, eni = instance_cloud()
    cloud.set_latency(ASSIGN, 2.0)
    cloud.set_latency(None, 0.5)
    loop = asyncio.get_running_loop()
    start = loop.time()
    slow = asyncio.create_task(cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=1))
    await asyncio.sleep(1.0)
    assert interface(cloud, eni).addresses == ()
    await slow
    assert loop.time() - start == pytest.approx(2.0)
    await cloud.describe_subnets()
    assert loop.time() - start == pytest.approx(2.5)


@pytest.mark.looptime
async def test_interface_creation_time_is_read_from_the_clock() -> None:
    cloud, _ = instance_cloud()
    await asyncio.sleep(42.0)
    eni = await cloud.create_network_interface(subnet_id="s-1")
    assert eni.created_at == pytest.approx(asyncio.get_running_loop().time())


def test_bad_fault_and_latency_arguments_are_refused() -> None:
    cloud, _ = instance_cloud()
    with pytest.raises(ValueError):
        cloud.fail_next(ASSIGN, count=-1)
    with pytest.raises(ValueError):
        cloud.set_latency(ASSIGN, -1.0)


async def test_a_fault_limited_to_one_instance_leaves_the_others_alone() -> None:
    cloud, eni = instance_cloud()
    cloud.add_instance("i-2", type="m5.xlarge", subnet="s-1", security_groups=["sg-1"])
    other = primary_id(cloud, "i-2")
    cloud.fail_next(ASSIGN, 1, "InternalError", when=cloud.on_interfaces_of("i-1"))
    await cloud.assign_private_ip_addresses(interface_id=other, secondary_count=1)  # not matched: passes
    with pytest.raises(SimError, match="InternalError"):
        await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=1)
    await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=1)  # used up
    assert cloud.gate.pending_faults(ASSIGN) == 0


async def test_a_lasting_fault_fails_every_matching_call_until_cleared() -> None:
    cloud, eni = instance_cloud()
    cloud.fail_while(ASSIGN, cloud.on_interfaces_of("i-1"), "Throttling", retry_after=30.0)
    for _ in range(3):
        with pytest.raises(SimError) as caught:
            await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=1)
        assert caught.value.retry_after == 30.0
    assert interface(cloud, eni).slots_used == 0
    cloud.clear_faults()
    await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=1)


async def test_the_wait_a_fault_asks_for_reaches_the_provider_error() -> None:
    from eni_ipam.adapters.metrics import Metrics
    from eni_ipam.core import errors
    from eni_ipam.core.clock import LoopClock
    from providers.sim.provider import SimProvider

    cloud, eni = instance_cloud()
    cloud.fail_next(ASSIGN, 1, "RequestLimitExceeded", retry_after=12.0)
    provider = SimProvider(cloud, clock=LoopClock(), metrics=Metrics())
    with pytest.raises(errors.Throttled) as caught:
        await provider.assign_addresses(interface_id=eni, count=1)
    assert caught.value.retry_after == 12.0


async def test_watchers_and_wrappers_see_every_call_with_its_request() -> None:
    cloud, eni = instance_cloud()
    seen: list[tuple[str, Any]] = []
    cloud.gate.watch(lambda operation, request: seen.append((operation, dict(request))))
    order: list[str] = []

    async def outer(operation: str, request: Any, proceed: Any) -> Any:
        order.append("outer")
        return await proceed()

    async def inner(operation: str, request: Any, proceed: Any) -> Any:
        order.append("inner")
        answer = await proceed()
        order.append(f"answered {len(answer)}")
        return answer

    cloud.gate.around(inner)
    cloud.gate.around(outer)  # the last added runs outermost
    await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=2)
    assert seen == [(ASSIGN, {"interface_id": eni, "secondary_count": 2})]
    assert order == ["outer", "inner", "answered 2"]
    assert cloud.calls[ASSIGN] == 1
