"""Writes whose answer does not say what happened are settled by reading the NIC again, never guessed:
lost answers (the SDK's retry meets a 412), operations that land but never end, operations still
``Updating`` or ending ``Failed`` after a reader saw their change, and NICs that do not show new
addresses yet. Configurations are told apart by name, so a retry never removes another writer's
configuration, nor the primary one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from eni_ipam.core import errors
from tests.providers.azure.conftest import World

pytestmark = pytest.mark.looptime

PUT = "NetworkInterfaces.CreateOrUpdate"
VMSS_PUT = "VirtualMachineScaleSetVMs.Update"
NIC_GET = "NetworkInterfaces.Get"
SS_NIC_GET = "NetworkInterfaces.GetVirtualMachineScaleSetNetworkInterface"


def statuses(world: World, operation: str) -> list[int]:
    return [r.status for r in world.fake.requests if r.operation == operation and r.method == "PUT"]


def ours(world: World, nic: str) -> list[str]:
    return [n for n in world.fake.configuration_names(nic) if n.startswith("eni-ipam-")]


# -- lost answers -----------------------------------------------------------------------------------


async def test_unassign_retried_after_a_lost_answer_keeps_the_configuration_given_the_freed_address(
    world: World,
) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    new = await provider.assign_addresses(interface_id=nic, count=2)
    theirs: list[str] = []
    # Our removal of eni-ipam-1 lands but its answer is lost; before the SDK's retry another writer
    # adds a configuration, and Azure gives it the address just freed.
    world.fake.before_next_write(nic, lambda: None)
    world.fake.before_next_write(nic, lambda: theirs.append(world.fake.add_ip_configuration(nic, "theirs")))
    world.fake.lose_next_answer(PUT)
    await provider.unassign_addresses(interface_id=nic, addresses=[new[0]])
    assert theirs == [new[0]]  # the freed address went to the other writer
    assert world.fake.configuration_names(nic) == ["ipconfig1", "eni-ipam-2", "theirs"]
    assert world.fake.secondary_addresses(nic) == new
    assert statuses(world, PUT)[-2:] == [500, 412]


async def test_scale_set_unassign_retried_after_a_lost_answer_keeps_the_other_writers_configuration(
    world: World,
) -> None:
    vm, nic = world.scale_set_vm("pool")
    provider = world.provider()
    new = await provider.assign_addresses(interface_id=nic, count=2)
    theirs: list[str] = []
    world.fake.before_next_write(vm, lambda: None)
    world.fake.before_next_write(vm, lambda: theirs.append(world.fake.add_ip_configuration(nic, "theirs")))
    world.fake.lose_next_answer(VMSS_PUT)
    await provider.unassign_addresses(interface_id=nic, addresses=[new[0]])
    assert theirs == [new[0]]
    assert world.fake.configuration_names(nic) == ["ipconfig1", "eni-ipam-2", "theirs"]
    assert statuses(world, VMSS_PUT)[-2:] == [500, 412]


async def test_unassign_whose_answer_is_lost_is_settled_as_done(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    new = await provider.assign_addresses(interface_id=nic, count=3)
    world.fake.lose_next_answer(PUT)
    await provider.unassign_addresses(interface_id=nic, addresses=new[:2])
    assert world.fake.secondary_addresses(nic) == new[2:]
    assert statuses(world, PUT)[-2:] == [500, 412]


@pytest.mark.parametrize("operation", ["assign", "unassign"])
async def test_scale_set_update_whose_answer_is_lost_is_settled_without_a_second_update(
    world: World, operation: str
) -> None:
    _, nic = world.scale_set_vm("pool")
    provider = world.provider()
    if operation == "assign":
        world.fake.lose_next_answer(VMSS_PUT)
        new = await provider.assign_addresses(interface_id=nic, count=2)
        assert world.fake.secondary_addresses(nic) == new and len(new) == 2
        assert ours(world, nic) == ["eni-ipam-1", "eni-ipam-2"]
    else:
        new = await provider.assign_addresses(interface_id=nic, count=2)
        world.fake.lose_next_answer(VMSS_PUT)
        await provider.unassign_addresses(interface_id=nic, addresses=new)
        assert world.fake.secondary_addresses(nic) == []
    assert statuses(world, VMSS_PUT)[-2:] == [500, 412]


async def test_a_retry_after_a_412_never_removes_the_primary_configuration(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    new = await provider.assign_addresses(interface_id=nic, count=2)
    # Between our read and our write, another writer makes eni-ipam-1 (holding new[0]) the primary.
    world.fake.before_next_write(nic, lambda: world.fake.set_primary(nic, "eni-ipam-1"))
    with pytest.raises(errors.InvalidRequest) as caught:
        await provider.unassign_addresses(interface_id=nic, addresses=[new[0]])
    assert caught.value.code == "PrimaryAddress"
    assert world.fake.configuration_names(nic) == ["ipconfig1", "eni-ipam-1", "eni-ipam-2"]
    primary = world.fake.nic_document(nic)["properties"]["ipConfigurations"][1]
    assert primary["name"] == "eni-ipam-1" and primary["properties"]["primary"]
    assert statuses(world, PUT)[-1] == 412  # nothing was written after the 412


@pytest.mark.parametrize("operation", ["assign", "unassign"])
async def test_a_last_attempt_whose_answer_is_lost_is_settled_not_reported_as_contention(
    world: World, operation: str
) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider()
    held = await provider.assign_addresses(interface_id=nic, count=2) if operation == "unassign" else []
    # Two attempts meet another writer's change (412); the third lands, but its answer is lost and
    # the SDK's retry meets a 412 too.
    for i in range(2):
        world.fake.before_next_write(nic, lambda i=i: world.fake.add_ip_configuration(nic, f"theirs-{i}"))
    world.fake.lose_next_answer(PUT)
    if operation == "assign":
        new = await provider.assign_addresses(interface_id=nic, count=2)
        assert set(new) <= set(world.fake.secondary_addresses(nic)) and len(new) == 2
        assert ours(world, nic) == ["eni-ipam-1", "eni-ipam-2"]
    else:
        await provider.unassign_addresses(interface_id=nic, addresses=held)
        assert ours(world, nic) == []
    assert statuses(world, PUT)[-4:] == [412, 412, 500, 412]


# -- provisioning states ----------------------------------------------------------------------------


async def test_after_a_lost_answer_configurations_still_updating_are_waited_for(
    worlds: Callable[..., World],
) -> None:
    world = worlds(lro_polls=3)
    _, (nic,) = world.vm("node")
    provider = world.provider()
    world.fake.lose_next_answer(PUT)
    new = await provider.assign_addresses(interface_id=nic, count=2)
    assert world.fake.secondary_addresses(nic) == new
    # one read before the write, then reads until the NIC left Updating (3 reads move it on, the
    # fourth ends it)
    assert world.fake.count(NIC_GET) == 5
    assert world.fake.nic_document(nic)["properties"]["provisioningState"] == "Succeeded"


@pytest.mark.parametrize("kind", ["vm", "scale-set-vm"])
async def test_configurations_seen_while_updating_whose_operation_then_fails_are_not_returned(
    worlds: Callable[..., World], kind: str
) -> None:
    world = worlds(lro_polls=3)  # the first reads after the 412 see the VM and the NIC Updating
    if kind == "vm":
        _, (nic,) = world.vm("node")
        operation = PUT
    else:
        _, nic = world.scale_set_vm("pool")
        operation = VMSS_PUT
    provider = world.provider()
    # The write is carried out (readers see it, Updating), its answer is lost, the SDK's retry meets
    # a 412, and the operation then ends Failed and is undone.
    world.fake.fail_next_lro(operation, "InternalExecutionError", apply=True)
    world.fake.lose_next_answer(operation)
    with pytest.raises(errors.TransientError) as caught:
        await provider.assign_addresses(interface_id=nic, count=2)
    assert caught.value.code == "NotApplied"
    assert world.fake.secondary_addresses(nic) == [] and ours(world, nic) == []


# -- outcomes settled by reading ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["vm", "scale-set-vm"])
async def test_an_update_that_succeeded_is_not_failed_by_a_nic_read_without_the_addresses(
    world: World, kind: str
) -> None:
    if kind == "vm":
        _, (nic,) = world.vm("node")
        written = nic
    else:
        written, nic = world.scale_set_vm("pool")  # written through its VM
    provider = world.provider()
    # Azure has not allocated the addresses yet when the NIC is first read after the update.
    world.fake.before_next_write(written, lambda: world.fake.delay_addresses(nic, reads=2))
    new = await provider.assign_addresses(interface_id=nic, count=3)
    assert world.fake.secondary_addresses(nic) == new and len(new) == 3
    assert len(world.fake.configuration_names(nic)) == 4  # added once


async def test_addresses_still_missing_at_the_deadline_raise_outcome_unknown(world: World) -> None:
    vm, nic = world.scale_set_vm("pool")
    provider = world.provider(operation_timeout=40)
    world.fake.before_next_write(vm, lambda: world.fake.delay_addresses(nic, reads=1000))
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(errors.TransientError) as caught:
        await provider.assign_addresses(interface_id=nic, count=2)
    assert caught.value.code == "OutcomeUnknown" and "resync" in caught.value.message
    assert loop.time() - started <= 40
    assert ours(world, nic) == ["eni-ipam-1", "eni-ipam-2"]  # they are there: the next resync shows them


@pytest.mark.parametrize("kind", ["vm", "scale-set-vm"])
async def test_an_assign_that_landed_but_never_ended_returns_its_addresses(world: World, kind: str) -> None:
    if kind == "vm":
        _, (nic,) = world.vm("node")
        operation = PUT
    else:
        _, nic = world.scale_set_vm("pool")
        operation = VMSS_PUT
    provider = world.provider(operation_timeout=40)
    world.fake.stall_next_lro(operation, apply=True)
    loop = asyncio.get_running_loop()
    started = loop.time()
    new = await provider.assign_addresses(interface_id=nic, count=2)
    assert world.fake.secondary_addresses(nic) == new and len(new) == 2
    assert 30 - 2 <= loop.time() - started <= 40  # the write ran until its bound, then was settled
    assert world.fake.count(f"{operation}.Poll") > 10


async def test_an_unassign_that_landed_but_never_ended_is_done(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider(operation_timeout=40)
    new = await provider.assign_addresses(interface_id=nic, count=3)
    world.fake.stall_next_lro(PUT, apply=True)
    await provider.unassign_addresses(interface_id=nic, addresses=new[1:])
    assert world.fake.secondary_addresses(nic) == new[:1]


async def test_a_write_still_updating_at_the_deadline_raises_outcome_unknown(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider(operation_timeout=40)
    world.fake.stall_next_lro(PUT, apply=True, state="Updating")
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(errors.TransientError) as caught:
        await provider.assign_addresses(interface_id=nic, count=2)
    assert (caught.value.code, caught.value.operation) == ("OutcomeUnknown", PUT)
    assert loop.time() - started <= 40
    assert world.fake.count(NIC_GET) > 5  # read every polling_interval while it stayed Updating


async def test_a_write_that_never_ended_and_changed_nothing_is_a_timeout_that_changed_nothing(
    world: World,
) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider(operation_timeout=40)
    world.fake.stall_next_lro(PUT)
    with pytest.raises(errors.TransientError) as caught:
        await provider.assign_addresses(interface_id=nic, count=2)
    assert caught.value.code == "OperationTimeout" and "nothing changed" in caught.value.message
    assert world.fake.secondary_addresses(nic) == []
    assert len(await provider.assign_addresses(interface_id=nic, count=2)) == 2


async def test_a_write_whose_retries_ran_out_after_it_had_landed_returns_its_addresses(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider(max_retries=1)
    # The write lands but its answer is lost; the SDK's only retry is throttled, so the call ends in
    # Throttled although the configurations are on the NIC.
    world.fake.lose_next_answer(PUT)
    world.fake.throttle(PUT, times=1, after=1, retry_after=1)
    new = await provider.assign_addresses(interface_id=nic, count=2)
    assert world.fake.secondary_addresses(nic) == new and len(new) == 2
    assert statuses(world, PUT) == [500, 429]


async def test_a_client_closed_for_shutdown_ends_an_assign_at_once(worlds: Callable[..., World]) -> None:
    world = worlds(latency=1)
    _, (nic,) = world.vm("node")
    provider = world.provider()
    loop = asyncio.get_running_loop()
    started = loop.time()
    assign = asyncio.create_task(provider.assign_addresses(interface_id=nic, count=1))
    await asyncio.sleep(0.5)  # the assign is reading the NIC
    await provider.close()
    with pytest.raises(errors.TransientError) as caught:
        await assign
    assert caught.value.code == "ClientClosed"  # nothing was sent: no waiting to settle it
    assert loop.time() - started < 2
    assert world.fake.count(PUT) == 0
