"""One deadline per assign or unassign: ``operation_timeout`` bounds the wait for the NIC's lock, the
wait for rate-limit tokens, the reads and the write together; the time a write's status polls wait for
read tokens is not counted against it (up to another ``operation_timeout``)."""

from __future__ import annotations

import asyncio

import pytest

from eni_ipam.core import errors
from tests.providers.azure.conftest import World

pytestmark = pytest.mark.looptime

PUT = "NetworkInterfaces.CreateOrUpdate"


async def test_waiting_for_the_nic_lock_counts_against_the_deadline(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider(operation_timeout=40)
    world.fake.stall_next_lro(PUT)  # the first assign holds the NIC until its own deadline
    loop = asyncio.get_running_loop()
    started = loop.time()
    first, second = await asyncio.gather(
        provider.assign_addresses(interface_id=nic, count=1),
        provider.assign_addresses(interface_id=nic, count=1),
        return_exceptions=True,
    )
    assert isinstance(first, errors.TransientError) and first.code == "OperationTimeout"
    assert isinstance(second, errors.TransientError) and second.code == "OperationTimeout"
    assert loop.time() - started <= 40  # not 40 for the first and then 40 more for the second
    assert "nothing was sent" in second.message
    # the second sent nothing: the PUT and both reads (before the write, then settling it) are the first's
    assert world.fake.count(PUT) == 1 and world.fake.count("NetworkInterfaces.Get") == 2
    assert world.fake.secondary_addresses(nic) == []


async def test_waiting_for_a_write_token_counts_against_the_deadline(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider(
        operation_timeout=40, rate_limits={"network-writes": {"burst": 1, "refill": 0.01}}
    )
    await provider.assign_addresses(interface_id=nic, count=1)  # spends the only token for 100 s
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(errors.TransientError) as caught:
        await provider.assign_addresses(interface_id=nic, count=1)
    assert caught.value.code == "OperationTimeout"
    assert loop.time() - started <= 40
    assert world.fake.count(PUT) == 1  # nothing was sent
    assert len(world.fake.secondary_addresses(nic)) == 1


async def test_status_polls_waiting_for_read_tokens_do_not_time_the_write_out(world: World) -> None:
    _, (nic,) = world.vm("node")
    # One read token every 10 s: the read before the write takes the only one, then each status poll
    # and the final read wait about 10 s, 30 s in all, more than operation_timeout.
    provider = world.provider(operation_timeout=20, rate_limits={"arm-reads": {"burst": 1, "refill": 0.1}})
    loop = asyncio.get_running_loop()
    started = loop.time()
    new = await provider.assign_addresses(interface_id=nic, count=2)
    assert world.fake.secondary_addresses(nic) == new and len(new) == 2
    assert loop.time() - started > 20


async def test_status_poll_waits_are_excused_only_up_to_another_operation_timeout(world: World) -> None:
    _, (nic,) = world.vm("node")
    provider = world.provider(operation_timeout=20, rate_limits={"arm-reads": {"burst": 1, "refill": 0.02}})
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(errors.TransientError) as caught:
        await provider.assign_addresses(interface_id=nic, count=2)
    # 50 s per read token: the write is excused 20 s of waiting, and the whole call ends by 40 s.
    assert caught.value.code == "OutcomeUnknown"  # the write was accepted; it could not be settled
    assert loop.time() - started <= 20 + 20
