"""SimProvider beyond the shared contract: call economy, caching, rollback, translation, metrics."""

from __future__ import annotations

import asyncio

import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core import errors
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.model import CreateInterface, InstanceLimits, Interface
from eni_ipam.core.ratelimit import Bucket
from providers.sim.cloud import SimCloud
from providers.sim.provider import SimProvider
from providers.sim.records import SimError
from tests.providers.sim import make_cloud, primary_id

TAGS = {"cluster": "c1"}


def provider_for(cloud: SimCloud, **kwargs: object) -> SimProvider:
    return SimProvider(cloud, clock=LoopClock(), metrics=Metrics(), **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def cloud() -> SimCloud:
    cloud = make_cloud()
    cloud.add_instance("i-1", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    return cloud


async def create(provider: SimProvider, index: int = 1, token: str = "tok") -> Interface:
    return await provider.create_interface(
        instance_id="i-1",
        request=CreateInterface(subnet_id="s-1", security_groups=("sg-1",), device_index=index, count=2),
        tags=TAGS,
        token=token,
    )


async def test_resync_pages_every_listing_and_leaves_out_terminated_instances() -> None:
    cloud = make_cloud(page_size=2)
    for n in range(5):
        cloud.add_instance(f"i-{n}", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    cloud.stop_instance("i-3")
    cloud.terminate_instance("i-4")
    snap = await provider_for(cloud).resync()
    assert sorted(snap.instances) == ["i-0", "i-1", "i-2", "i-3"]
    assert not snap.instances["i-3"].running and snap.instances["i-0"].running
    assert all(len(i.interfaces) == 1 for i in snap.instances.values())
    assert snap.limits == {"m5.large": cloud.limits["m5.large"]}
    assert sorted(snap.subnets) == ["s-1", "s-other", "s-small"] and list(snap.security_groups) == ["sg-1"]
    assert snap.subnets["s-1"].available == 251 - 4
    assert cloud.calls == {
        "DescribeSubnets": 2,
        "DescribeSecurityGroups": 1,
        "DescribeInstances": 2,  # terminated instances are filtered out by the cloud: 4 left, 2 pages
        "DescribeNetworkInterfaces": 2,
    }


async def test_resync_is_restricted_to_the_providers_vpc(cloud: SimCloud) -> None:
    cloud.add_vpc("vpc-2", "10.1.0.0/16")
    cloud.add_subnet("s-2", vpc="vpc-2", zone="us-east-1a", cidr="10.1.0.0/24")
    cloud.add_security_group("sg-2", vpc="vpc-2")
    cloud.add_instance("i-2", type="m5.large", subnet="s-2", security_groups=["sg-2"])
    snap = await provider_for(cloud, vpc_id="vpc-2").resync()
    assert (list(snap.subnets), list(snap.security_groups), list(snap.instances)) == (
        ["s-2"],
        ["sg-2"],
        ["i-2"],
    )


async def test_describe_instance_asks_describe_instances_only_until_cached(cloud: SimCloud) -> None:
    provider = provider_for(cloud)
    first = await provider.describe_instance(instance_id="i-1")
    second = await provider.describe_instance(instance_id="i-1")
    assert first == second and first is not None and first.type == "m5.large"
    assert cloud.calls == {"DescribeInstances": 1, "DescribeNetworkInterfaces": 2}


async def test_resync_fills_the_instance_cache(cloud: SimCloud) -> None:
    provider = provider_for(cloud)
    await provider.resync()
    await provider.describe_instance(instance_id="i-1")
    assert cloud.calls["DescribeInstances"] == 1 and cloud.calls["DescribeNetworkInterfaces"] == 2


async def test_describe_instance_sees_termination_and_unknown_ids_as_none(cloud: SimCloud) -> None:
    provider = provider_for(cloud)
    assert await provider.describe_instance(instance_id="i-1") is not None
    cloud.terminate_instance("i-1")
    assert await provider.describe_instance(instance_id="i-1") is None
    assert await provider.describe_instance(instance_id="i-404") is None
    assert cloud.calls["DescribeInstances"] == 3


async def test_instance_limits_come_from_the_providers_table_without_a_call(cloud: SimCloud) -> None:
    provider = provider_for(cloud, limits={"m4.xlarge": InstanceLimits(adapters=4, ipv4_per_interface=15)})
    with pytest.raises(errors.LimitsUnknown):
        await provider.instance_limits(instance_type="m5.large")
    assert (await provider.resync()).limits == {}
    assert (await provider_for(cloud).instance_limits(instance_type="m5.large")) == cloud.limits["m5.large"]
    assert cloud.mutating_calls() == 0 and "DescribeInstanceTypes" not in cloud.calls


async def test_instance_of_a_type_missing_from_the_table_exists_with_unknown_limits(cloud: SimCloud) -> None:
    cloud.add_instance("i-new", type="x99.hypothetical", subnet="s-1", security_groups=["sg-1"])
    provider = provider_for(cloud)
    snap = await provider.resync()
    assert snap.instances["i-new"].type == "x99.hypothetical" and "x99.hypothetical" not in snap.limits
    with pytest.raises(errors.LimitsUnknown):
        await provider.instance_limits(instance_type="x99.hypothetical")
    with pytest.raises(errors.InvalidRequest):  # nothing says it is nitro
        await provider.assign_addresses(interface_id=primary_id(cloud, "i-new"), count=1, prefixes=True)


async def test_create_interface_is_create_attach_mark_with_description_and_token(cloud: SimCloud) -> None:
    iface = await create(provider_for(cloud))
    assert cloud.calls == {
        "CreateNetworkInterface": 1,
        "AttachNetworkInterface": 1,
        "ModifyNetworkInterfaceAttribute": 1,
    }
    assert cloud._interfaces[iface.id].description == "eni-ipam (i-1)"  # what EC2 consoles show
    assert cloud.instance_view("i-1").interface(iface.id) == iface


async def test_create_interface_without_delete_on_termination_skips_the_mark(cloud: SimCloud) -> None:
    iface = await provider_for(cloud).create_interface(
        instance_id="i-1",
        request=CreateInterface(subnet_id="s-1", security_groups=(), device_index=1, count=1),
        tags=TAGS,
        token="t",
        delete_on_termination=False,
    )
    assert not iface.delete_on_termination and "ModifyNetworkInterfaceAttribute" not in cloud.calls


async def test_failed_attach_deletes_the_new_interface_and_raises_the_original_error(cloud: SimCloud) -> None:
    cloud.fail_next("AttachNetworkInterface", code="InternalError")
    with pytest.raises(errors.TransientError) as err:
        await create(provider_for(cloud))
    assert err.value.operation == "AttachNetworkInterface" and isinstance(err.value.__cause__, SimError)
    assert cloud.calls["DeleteNetworkInterface"] == 1 and len(cloud.interfaces()) == 1
    assert cloud.subnet_free("s-1") == 250


async def test_failed_mark_detaches_and_deletes_the_new_interface(cloud: SimCloud) -> None:
    cloud.fail_next("ModifyNetworkInterfaceAttribute", code="ServiceUnavailable")
    with pytest.raises(errors.TransientError):
        await create(provider_for(cloud))
    assert cloud.calls["DetachNetworkInterface"] == cloud.calls["DeleteNetworkInterface"] == 1
    assert len(cloud.interfaces()) == 1


async def test_failed_rollback_is_noted_on_the_original_error(cloud: SimCloud) -> None:
    cloud.fail_next("AttachNetworkInterface", code="InternalError")
    cloud.fail_next("DeleteNetworkInterface", code="InternalError")
    with pytest.raises(errors.TransientError) as err:
        await create(provider_for(cloud))
    assert err.value.operation == "AttachNetworkInterface"
    assert any("rollback" in note for note in err.value.__notes__)


async def test_a_create_that_rolled_back_many_times_still_succeeds_when_retried(cloud: SimCloud) -> None:
    provider = provider_for(cloud)
    for _ in range(6):  # more rollbacks than one call may try tokens
        cloud.fail_next("AttachNetworkInterface", code="InternalError")
        with pytest.raises(errors.TransientError):
            await create(provider)
    iface = await create(provider)
    assert cloud.instance_view("i-1").interface(iface.id) is not None
    assert len(cloud.interfaces()) == 2  # the primary and the one attached: every rollback deleted


async def test_create_retried_after_a_lost_response_adopts_the_first_interface(cloud: SimCloud) -> None:
    provider = provider_for(cloud)
    cloud.fail_next("CreateNetworkInterface", code="InternalError", applied=True)
    with pytest.raises(errors.TransientError):
        await create(provider)
    iface = await create(provider)
    assert len(cloud.interfaces()) == 2 and cloud.instance_view("i-1").interface(iface.id) is not None


async def test_attach_to_a_stopped_instance_is_instance_not_running_and_refreshes_the_cache(
    cloud: SimCloud,
) -> None:
    provider = provider_for(cloud)
    await provider.resync()
    cloud.stop_instance("i-1")
    with pytest.raises(errors.InstanceNotRunning):
        await create(provider)
    described = await provider.describe_instance(instance_id="i-1")
    assert described is not None and not described.running
    assert len(cloud.interfaces()) == 1


async def test_capacity_errors_arrive_translated_with_code_and_operation(cloud: SimCloud) -> None:
    provider = provider_for(cloud)
    cloud.set_subnet_available("s-1", 2)
    with pytest.raises(errors.SubnetExhausted) as err:
        await provider.assign_addresses(interface_id=primary_id(cloud, "i-1"), count=3)
    assert (err.value.code, err.value.operation) == (
        "InsufficientFreeAddressesInSubnet",
        "AssignPrivateIpAddresses",
    )
    with pytest.raises(errors.InvalidRequest):
        await provider.unassign_addresses(interface_id=primary_id(cloud, "i-1"), addresses=["10.0.0.99"])


async def test_server_throttling_is_throttled_and_counted_in_metrics() -> None:
    cloud = make_cloud(buckets={"AssignPrivateIpAddresses": Bucket(1, 0.001)})
    cloud.add_instance("i-1", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    metrics = Metrics()
    provider = SimProvider(cloud, clock=LoopClock(), metrics=metrics)
    await provider.assign_addresses(interface_id=primary_id(cloud, "i-1"), count=1)
    with pytest.raises(errors.Throttled):
        await provider.assign_addresses(interface_id=primary_id(cloud, "i-1"), count=1)
    labels = {"operation": "AssignPrivateIpAddresses"}
    assert metrics.sample("eni_ipam_api_throttled_total", labels) == 1


async def test_empty_requests_cost_no_call(cloud: SimCloud) -> None:
    provider = provider_for(cloud)
    assert await provider.assign_addresses(interface_id=primary_id(cloud, "i-1"), count=0) == []
    await provider.unassign_addresses(interface_id=primary_id(cloud, "i-1"))
    assert await provider.list_detached_interfaces(tags={}) == []
    assert not cloud.calls


async def test_list_detached_interfaces_matches_every_tag(cloud: SimCloud) -> None:
    await cloud.create_network_interface(subnet_id="s-1", tags={"cluster": "c1", "node": "n1"})
    await cloud.create_network_interface(subnet_id="s-1", tags={"cluster": "c2", "node": "n1"})
    attached = await create(provider_for(cloud))
    found = await provider_for(cloud).list_detached_interfaces(tags={"cluster": "c1", "node": "n1"})
    assert [dict(i.tags) for i in found] == [{"cluster": "c1", "node": "n1"}]
    assert attached.id not in {i.id for i in found}


async def test_delete_interface_detaches_an_attached_one_first(cloud: SimCloud) -> None:
    provider = provider_for(cloud)
    iface = await create(provider)
    await provider.delete_interface(interface_id=iface.id)
    assert cloud.calls["DeleteNetworkInterface"] == 2 and cloud.calls["DetachNetworkInterface"] == 1
    detached = await cloud.create_network_interface(subnet_id="s-1")
    await provider.delete_interface(interface_id=detached.id)
    assert cloud.calls["DeleteNetworkInterface"] == 3 and len(cloud.interfaces()) == 1


class SlowDetach:
    """An Ec2Api proxy whose deletes are refused as "in use" ``times`` times after each detach, the
    way EC2 refuses them until an asynchronous detach is done."""

    def __init__(self, api: object, times: int) -> None:
        self._api = api
        self._times = times
        self.refused = 0
        self._pending = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._api, name)

    async def detach_network_interface(self, **kwargs: object) -> None:
        await self._api.detach_network_interface(**kwargs)  # type: ignore[attr-defined]
        self._pending = self._times

    async def delete_network_interface(self, **kwargs: object) -> None:
        if self._pending:
            self._pending -= 1
            self.refused += 1
            raise errors.InvalidRequest("in use", code="InvalidNetworkInterface.InUse")
        await self._api.delete_network_interface(**kwargs)  # type: ignore[attr-defined]


@pytest.mark.looptime
async def test_delete_waits_for_an_asynchronous_detach_on_the_injected_clock(cloud: SimCloud) -> None:
    provider = provider_for(cloud)
    iface = await create(provider)
    slow = provider.api = SlowDetach(provider.api, times=2)  # type: ignore[assignment]
    loop = asyncio.get_running_loop()
    started = loop.time()
    await provider.delete_interface(interface_id=iface.id)
    assert cloud.interface_view(iface.id) is None
    assert slow.refused == 2  # twice while "detaching" (the cloud itself refused the first delete)
    assert 1.4 < loop.time() - started < 2  # waited 0.5 s, then 1 s


@pytest.mark.looptime
async def test_rollback_waits_for_the_detach_and_deletes(cloud: SimCloud) -> None:
    provider = provider_for(cloud)
    provider.api = SlowDetach(provider.api, times=2)  # type: ignore[assignment]
    cloud.fail_next("ModifyNetworkInterfaceAttribute", code="InternalError")
    with pytest.raises(errors.TransientError) as caught:
        await create(provider)
    assert not getattr(caught.value, "__notes__", None), "the rollback failed"
    assert await provider.list_detached_interfaces(tags=TAGS) == []
    assert len(cloud.instance_view("i-1").interfaces) == 1
