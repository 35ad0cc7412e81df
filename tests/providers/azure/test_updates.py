"""Assign and unassign on Azure: one conditional update per NIC, another writer's change kept,
nothing lost or added twice, long-running operations that fail or never end, the 256 limit, and
scale-set VMs updated through their model."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable

import pytest

from eni_ipam.core import errors
from eni_ipam.core.model import CreateInterface
from tests.providers.azure.conftest import World

pytestmark = pytest.mark.looptime

PUT = "NetworkInterfaces.CreateOrUpdate"
VMSS_PUT = "VirtualMachineScaleSetVMs.Update"


def puts(world: World, operation: str = PUT) -> list[dict]:
    return [r.body for r in world.fake.requests if r.operation == operation and r.method == "PUT"]


def in_subnet(addresses: list[str], cidr: str) -> bool:
    return all(ipaddress.IPv4Address(a) in ipaddress.IPv4Network(cidr) for a in addresses)


async def test_assign_sends_one_update_with_every_new_configuration(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    new = await provider.assign_addresses(interface_id=nic, count=5)
    (body,) = puts(world)
    configs = body["properties"]["ipConfigurations"]
    assert [c["name"] for c in configs] == ["ipconfig1", *(f"eni-ipam-{i}" for i in range(1, 6))]
    added = configs[1:]
    assert all(c["properties"]["privateIPAllocationMethod"] == "Dynamic" for c in added)
    assert all(c["properties"]["subnet"]["id"] == world.subnet_id for c in added)
    assert all(c["properties"]["applicationSecurityGroups"] == [{"id": world.asg_ids[0]}] for c in added)
    assert all(not c["properties"]["primary"] for c in added)
    assert new == world.fake.secondary_addresses(nic) and len(new) == 5
    assert in_subnet(new, "10.0.0.0/22")
    (put,) = [r for r in world.fake.requests if r.method == "PUT"]
    assert put.if_match and put.if_match.startswith('W/"')


async def test_new_configurations_are_numbered_after_existing_ones(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    first = await provider.assign_addresses(interface_id=nic, count=2)
    await provider.unassign_addresses(interface_id=nic, addresses=first[:1])
    await provider.assign_addresses(interface_id=nic, count=1)
    assert world.fake.configuration_names(nic) == ["ipconfig1", "eni-ipam-2", "eni-ipam-3"]


async def test_stale_etag_rereads_keeps_the_other_writers_change_and_adds_ours_once(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    other: list[str] = []
    world.fake.before_next_write(nic, lambda: other.append(world.fake.add_ip_configuration(nic, "theirs")))
    new = await provider.assign_addresses(interface_id=nic, count=2)
    assert len(new) == 2 and not set(new) & set(other)
    assert world.fake.secondary_addresses(nic) == sorted([*other, *new], key=ipaddress.IPv4Address)
    assert "theirs" in world.fake.configuration_names(nic)
    assert world.fake.count(PUT, status=412) == 1 and world.fake.count(PUT, status=200) == 1
    assert world.fake.count("NetworkInterfaces.Get") >= 2  # read again after the 412


async def test_a_nic_that_keeps_changing_gives_up_with_precondition_failed(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    for i in range(3):
        world.fake.before_next_write(nic, lambda i=i: world.fake.add_ip_configuration(nic, f"theirs-{i}"))
    with pytest.raises(errors.TransientError) as caught:
        await provider.assign_addresses(interface_id=nic, count=2)
    assert caught.value.code == "PreconditionFailed"
    assert not [n for n in world.fake.configuration_names(nic) if n.startswith("eni-ipam-")]
    assert world.fake.count(PUT, status=412) == 3


async def test_a_lost_answer_is_not_taken_for_a_failure_and_adds_nothing_twice(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    # The update is carried out but answered 500; the SDK retries the PUT with the old ETag (412),
    # and the provider finds its own configurations on the NIC when it reads it again.
    world.fake.lose_next_answer(PUT)
    new = await provider.assign_addresses(interface_id=nic, count=3)
    assert world.fake.secondary_addresses(nic) == new and len(new) == 3
    assert [r.status for r in world.fake.requests if r.operation == PUT] == [500, 412]


async def test_failed_long_running_operation_is_translated_and_changes_nothing(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    world.fake.fail_next_lro(PUT, "SubnetIsFull")
    with pytest.raises(errors.SubnetExhausted) as caught:
        await provider.assign_addresses(interface_id=nic, count=2)
    assert (caught.value.code, caught.value.operation) == ("SubnetIsFull", PUT)
    assert world.fake.secondary_addresses(nic) == []
    again = await provider.assign_addresses(interface_id=nic, count=2)
    assert world.fake.secondary_addresses(nic) == again and len(again) == 2


async def test_unknown_failure_code_of_an_operation_is_kept_on_a_plain_provider_error(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    world.fake.fail_next_lro(PUT, "SomethingNew", "a code eni-ipam does not know")
    with pytest.raises(errors.ProviderError) as caught:
        await provider.assign_addresses(interface_id=nic, count=1)
    assert type(caught.value) is errors.ProviderError
    assert caught.value.code == "SomethingNew" and "does not know" in caught.value.message


async def test_operation_that_never_ends_times_out_within_operation_timeout(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider(operation_timeout=40)
    world.fake.stall_next_lro(PUT)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(errors.TransientError) as caught:
        await provider.assign_addresses(interface_id=nic, count=1)
    assert caught.value.code == "OperationTimeout"
    # The write ends a quarter of operation_timeout before the deadline; a read then settles it.
    assert 30 - 1 <= loop.time() - started <= 40
    assert world.fake.count(f"{PUT}.Poll") > 10  # it kept polling until its bound


async def test_an_operation_canceled_without_an_error_object_is_a_transient_error(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    world.fake.fail_next_lro(PUT, "", ends="Canceled")
    with pytest.raises(errors.TransientError) as caught:
        await provider.assign_addresses(interface_id=nic, count=1)
    assert (caught.value.code, caught.value.operation) == ("Canceled", PUT)
    assert world.fake.secondary_addresses(nic) == []


async def test_subnet_without_room_refuses_the_whole_update(world: World) -> None:
    _, (nic,) = world.vm("small", subnet=world.small_subnet_id)
    provider = world.provider()
    with pytest.raises(errors.SubnetExhausted):
        await provider.assign_addresses(interface_id=nic, count=11)  # 10 are left
    assert world.fake.secondary_addresses(nic) == []
    assert len(await provider.assign_addresses(interface_id=nic, count=10)) == 10


async def test_more_than_256_configurations_are_refused_without_a_write(world: World) -> None:
    _, (nic,) = world.vm("node")
    for _ in range(249):
        world.fake.add_ip_configuration(nic)
    provider = world.provider()
    with pytest.raises(errors.InterfaceLimitExceeded):
        await provider.assign_addresses(interface_id=nic, count=7)  # 250 + 7 > 256
    assert world.fake.count(PUT) == 0
    assert len(await provider.assign_addresses(interface_id=nic, count=6)) == 6
    assert len(world.fake.configuration_names(nic)) == 256


async def test_prefixes_are_refused_without_a_request(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    with pytest.raises(errors.InvalidRequest):
        await provider.assign_addresses(interface_id=nic, count=1, prefixes=True)
    with pytest.raises(errors.InvalidRequest):
        await provider.unassign_addresses(interface_id=nic, prefixes=["10.0.0.16/28"])
    assert world.fake.requests == []


async def test_concurrent_assigns_on_one_nic_are_serialized_and_both_land(
    worlds: Callable[..., World],
) -> None:
    world = worlds(latency=0.5)
    _, (nic,) = world.vm("node")
    provider = world.provider()
    first, second = await asyncio.gather(
        provider.assign_addresses(interface_id=nic, count=3),
        provider.assign_addresses(interface_id=nic, count=4),
    )
    assert len(set(first) | set(second)) == 7
    assert world.fake.secondary_addresses(nic) == sorted([*first, *second], key=ipaddress.IPv4Address)
    assert world.fake.count(PUT, status=412) == 0  # the second read came after the first write
    etags = [r.if_match for r in world.fake.requests if r.method == "PUT"]
    assert len(etags) == 2 and etags[0] != etags[1]


async def test_assigns_on_different_nics_run_concurrently(worlds: Callable[..., World]) -> None:
    world = worlds(latency=1)
    _, (a,) = world.vm("a")
    _, (b,) = world.vm("b")
    provider = world.provider()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.gather(
        provider.assign_addresses(interface_id=a, count=1), provider.assign_addresses(interface_id=b, count=1)
    )
    one = loop.time() - started
    started = loop.time()
    await provider.assign_addresses(interface_id=a, count=1)
    await provider.assign_addresses(interface_id=b, count=1)
    assert one < 0.75 * (loop.time() - started)


async def test_unassign_removes_exactly_the_given_addresses_in_one_update(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    new = await provider.assign_addresses(interface_id=nic, count=4)
    await provider.unassign_addresses(interface_id=nic, addresses=[new[3], new[0]])
    assert world.fake.secondary_addresses(nic) == new[1:3]
    assert len(puts(world)) == 2


async def test_unassign_of_an_address_not_held_removes_nothing(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    new = await provider.assign_addresses(interface_id=nic, count=2)
    with pytest.raises(errors.InvalidRequest):
        await provider.unassign_addresses(interface_id=nic, addresses=[new[0], "10.0.3.250"])
    assert world.fake.secondary_addresses(nic) == new
    assert len(puts(world)) == 1


async def test_the_primary_configuration_is_never_removed(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    primary = world.fake.nic_document(nic)["properties"]["ipConfigurations"][0]["properties"][
        "privateIPAddress"
    ]
    with pytest.raises(errors.InvalidRequest):
        await provider.unassign_addresses(interface_id=nic, addresses=[primary])
    assert world.fake.configuration_names(nic) == ["ipconfig1"]


async def test_unassign_after_a_stale_etag_keeps_the_other_writers_change(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    new = await provider.assign_addresses(interface_id=nic, count=2)
    other: list[str] = []
    world.fake.before_next_write(nic, lambda: other.append(world.fake.add_ip_configuration(nic, "theirs")))
    await provider.unassign_addresses(interface_id=nic, addresses=new)
    assert world.fake.secondary_addresses(nic) == other


async def test_ids_in_any_case_name_the_same_nic(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    new = await provider.assign_addresses(interface_id=nic.upper(), count=1)
    await provider.unassign_addresses(interface_id=nic.lower(), addresses=new)
    assert world.fake.secondary_addresses(nic) == []


async def test_an_id_that_names_no_nic_is_not_found_without_a_request(world: World) -> None:
    provider = world.provider()
    for bogus in ("eni-0123", world.subnet_id, world.vnet_id.replace("00000000-", "11111111-", 1)):
        with pytest.raises(errors.NotFound):
            await provider.assign_addresses(interface_id=bogus, count=1)
    assert world.fake.requests == []


async def test_a_deleted_nic_is_not_found(world: World) -> None:
    provider = world.provider()
    nic = world.fake.add_nic("rg-Nodes", "gone", world.subnet_id)
    missing = nic.replace("/gone", "/never-was")
    with pytest.raises(errors.NotFound):
        await provider.assign_addresses(interface_id=missing, count=1)


# -- scale-set VMs ----------------------------------------------------------------------------------


async def test_scale_set_vm_assign_updates_the_vm_model_in_one_conditional_update(world: World) -> None:
    _, nic = world.scale_set_vm("pool")
    provider = world.provider()
    new = await provider.assign_addresses(interface_id=nic, count=3)
    assert world.fake.secondary_addresses(nic) == new and len(new) == 3
    assert puts(world, PUT) == []
    (body,) = puts(world, VMSS_PUT)
    (entry,) = body["properties"]["networkProfileConfiguration"]["networkInterfaceConfigurations"]
    configs = entry["properties"]["ipConfigurations"]
    assert [c["name"] for c in configs] == ["ipconfig1", "eni-ipam-1", "eni-ipam-2", "eni-ipam-3"]
    assert all(c["properties"]["subnet"]["id"] == world.subnet_id for c in configs)
    assert all(c["properties"]["applicationSecurityGroups"] == [{"id": world.asg_ids[0]}] for c in configs)
    assert "imageReference" not in body["properties"]["storageProfile"]
    assert "instanceView" not in body["properties"]
    (put,) = [r for r in world.fake.requests if r.operation == VMSS_PUT]
    assert put.if_match and put.if_match.startswith('"')


async def test_scale_set_vm_unassign_removes_the_configurations_from_the_model(world: World) -> None:
    _, nic = world.scale_set_vm("pool")
    provider = world.provider()
    new = await provider.assign_addresses(interface_id=nic, count=3)
    await provider.unassign_addresses(interface_id=nic, addresses=new[1:])
    assert world.fake.secondary_addresses(nic) == new[:1]


async def test_scale_set_vm_update_with_a_stale_etag_rereads_the_vm(world: World) -> None:
    vm, nic = world.scale_set_vm("pool")
    provider = world.provider()
    other: list[str] = []
    world.fake.before_next_write(vm, lambda: other.append(world.fake.add_ip_configuration(nic, "theirs")))
    new = await provider.assign_addresses(interface_id=nic, count=2)
    assert world.fake.secondary_addresses(nic) == sorted([*other, *new], key=ipaddress.IPv4Address)
    assert world.fake.count(VMSS_PUT, status=412) == 1


async def test_scale_set_subnet_full_ends_the_operation_failed_and_changes_nothing(world: World) -> None:
    _, nic = world.scale_set_vm("small-pool", subnet=world.small_subnet_id)
    provider = world.provider()
    with pytest.raises(errors.SubnetExhausted):
        await provider.assign_addresses(interface_id=nic, count=11)
    assert world.fake.secondary_addresses(nic) == []
    assert world.fake.count(f"{VMSS_PUT}.Poll") >= 1  # accepted, then failed


# -- interfaces -------------------------------------------------------------------------------------


async def test_create_interface_is_refused_without_a_request(world: World) -> None:
    vm, _ = world.vm("node")
    provider = world.provider()
    with pytest.raises(errors.AttachmentLimitExceeded, match="deallocated"):
        await provider.create_interface(
            instance_id=vm.lower(),
            request=CreateInterface(
                subnet_id=world.subnet_id.lower(), security_groups=(), device_index=1, count=1
            ),
            tags={"a": "b"},
            token="t",
        )
    assert world.fake.requests == []


async def test_detached_nic_is_deleted_and_attached_ones_are_refused_even_with_detach(world: World) -> None:
    _, (attached,) = world.vm("node")
    detached = world.fake.add_nic("rg-Nodes", "leaked", world.subnet_id, tags={"owner": "eni-ipam"})
    provider = world.provider()
    for detach in (True, False):
        with pytest.raises(errors.InvalidRequest, match="cannot detach"):
            await provider.delete_interface(interface_id=attached, detach=detach)
    assert world.fake.nic_exists(attached)
    free = world.fake.free_addresses(world.subnet_id)
    await provider.delete_interface(interface_id=detached)
    assert not world.fake.nic_exists(detached)
    assert world.fake.free_addresses(world.subnet_id) == free + 1
    with pytest.raises(errors.NotFound):
        await provider.delete_interface(interface_id=detached)


async def test_list_detached_interfaces_returns_detached_nics_carrying_every_tag(world: World) -> None:
    world.vm("node")
    ours = world.fake.add_nic("rg-Nodes", "ours", world.subnet_id, tags={"cluster": "c1", "managed": "yes"})
    world.fake.add_nic("rg-Nodes", "partial", world.subnet_id, tags={"cluster": "c1"})
    world.fake.add_nic("rg-Nodes", "theirs", world.subnet_id, tags={"cluster": "c2", "managed": "yes"})
    provider = world.provider()
    found = await provider.list_detached_interfaces(tags={"cluster": "c1", "managed": "yes"})
    assert [i.id for i in found] == [ours.lower()]
    assert found[0].instance_id == "" and found[0].device_index == -1
    assert await provider.list_detached_interfaces(tags={}) == []
