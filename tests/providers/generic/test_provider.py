"""The generic provider: blocks per node, allocate-or-occupy from the node store, terms, IPv6."""

from __future__ import annotations

import dataclasses
import ipaddress

import pytest

from eni_ipam.core import errors
from tests.providers.generic.conftest import Records


def nets(items):
    return [ipaddress.ip_network(i) for i in items]


async def assign(provider, node: str, count: int) -> list[str]:
    return await provider.assign_addresses(interface_id=f"vif-{node}", count=count, prefixes=True)


async def test_default_slash_24_is_one_block_per_node_handed_out_sixteen_addresses_at_a_time(
    records: Records, make_provider
) -> None:
    records.add("a")
    records.add("b")
    provider = make_provider()
    await provider.resync()
    assert await assign(provider, "a", 2) == ["10.244.0.0/28", "10.244.0.16/28"]
    assert await assign(provider, "b", 1) == ["10.244.1.0/28"]
    assert await assign(provider, "a", 14) == [f"10.244.0.{16 * n}/28" for n in range(2, 16)]
    with pytest.raises(errors.InterfaceLimitExceeded):
        await assign(provider, "a", 1)
    snapshot = await provider.resync()
    cidr = snapshot.subnets["10.244.0.0/16"]
    assert cidr.available == 65536 - 256 - 16  # a's block is full, b's has 240 spare
    assert snapshot.instances["a"].interfaces[0].subnet_id == "10.244.0.0/16"


async def test_small_blocks_grow_block_by_block_and_only_extra_blocks_go_back(
    records: Records, make_provider
) -> None:
    records.add("a")
    records.add("b")
    provider = make_provider(cluster_cidrs=["10.0.0.0/26"], node_mask_ipv4=28)
    await provider.resync()
    first = await assign(provider, "a", 3)
    assert first == ["10.0.0.0/28", "10.0.0.16/28", "10.0.0.32/28"]
    await provider.unassign_addresses(interface_id="vif-a", prefixes=first)
    # a keeps its first block for life; the other two are free again, for b.
    assert (await provider.resync()).subnets["10.0.0.0/26"].available == 64
    assert sorted(await assign(provider, "b", 3)) == ["10.0.0.16/28", "10.0.0.32/28", "10.0.0.48/28"]
    with pytest.raises(errors.PrefixesExhausted):
        await assign(provider, "b", 1)
    assert await assign(provider, "a", 1) == ["10.0.0.0/28"]


async def test_service_cidr_is_never_handed_out(records: Records, make_provider) -> None:
    for name in "abcd":
        records.add(name)
    provider = make_provider(cluster_cidrs=["10.0.0.0/22"], service_cidrs=["10.0.1.0/25"])
    await provider.resync()
    got = [(await assign(provider, name, 1))[0] for name in "abc"]
    assert got == ["10.0.0.0/28", "10.0.2.0/28", "10.0.3.0/28"]
    with pytest.raises(errors.PrefixesExhausted):
        await assign(provider, "d", 1)


async def test_a_restarted_provider_occupies_what_the_store_published(
    records: Records, make_provider
) -> None:
    records.add("a")
    records.add("b")
    before = make_provider(cluster_cidrs=["10.0.0.0/26"], node_mask_ipv4=28)
    await before.resync()
    held = await assign(before, "a", 3)
    records.publish(before, "a")
    after = make_provider(cluster_cidrs=["10.0.0.0/26"], node_mask_ipv4=28)
    snapshot = await after.resync()
    assert list(snapshot.instances["a"].interfaces[0].prefixes) == held
    assert await assign(after, "b", 1) == ["10.0.0.48/28"]
    with pytest.raises(errors.PrefixesExhausted):
        await assign(after, "b", 1)


async def test_assigned_but_unpublished_prefixes_survive_a_resync_in_the_same_term(
    records: Records, make_provider
) -> None:
    records.add("a")
    records.add("b")
    provider = make_provider(cluster_cidrs=["10.0.0.0/27"], node_mask_ipv4=28)
    await provider.resync()
    await assign(provider, "a", 1)  # not published yet
    await provider.resync()
    assert await assign(provider, "b", 1) == ["10.0.0.16/28"]


async def test_a_new_term_rebuilds_from_the_records_alone(records: Records, make_provider) -> None:
    records.add("a")
    records.add("b")
    provider = make_provider(cluster_cidrs=["10.0.0.0/27"], node_mask_ipv4=28)
    await provider.resync()
    await assign(provider, "a", 1)
    # Another leader ran meanwhile and gave that block to b, which published it.
    records.add("b", prefixes=("10.0.0.0/28",))
    records.term += 1
    snapshot = await provider.resync()
    assert snapshot.instances["a"].interfaces[0].prefixes == ()
    assert snapshot.instances["b"].interfaces[0].prefixes == ("10.0.0.0/28",)
    assert await assign(provider, "a", 1) == ["10.0.0.16/28"]


async def test_a_node_leaving_the_store_gives_its_blocks_back(records: Records, make_provider) -> None:
    records.add("a")
    records.add("b")
    provider = make_provider(cluster_cidrs=["10.0.0.0/24", "fd00::/120"], node_mask_ipv6=121 - 1)
    await provider.resync()
    await assign(provider, "a", 4)
    with pytest.raises(errors.PrefixesExhausted):
        await assign(provider, "b", 1)
    del records.records["a"]
    snapshot = await provider.resync()
    assert "a" not in snapshot.instances
    assert snapshot.subnets["10.0.0.0/24"].available == 256
    assert await assign(provider, "b", 1) == ["10.0.0.0/28"]
    assert snapshot.instances["b"].interfaces[0].ipv6_prefixes == ()  # the only /120 went to a first
    # a node still without an IPv6 block gets one as soon as one is free
    assert (await provider.resync()).instances["b"].interfaces[0].ipv6_prefixes == ("fd00::/120",)


async def test_dual_stack_nodes_each_get_one_ipv6_block_kept_across_restarts(
    records: Records, make_provider
) -> None:
    records.add("a")
    records.add("b")
    data = {"cluster_cidrs": ["10.0.0.0/16", "fd00:10:244::/56"]}
    provider = make_provider(**data)
    snapshot = await provider.resync()
    blocks = {n: snapshot.instances[n].interfaces[0].ipv6_prefixes for n in "ab"}
    assert blocks == {"a": ("fd00:10:244::/64",), "b": ("fd00:10:244:1::/64",)}
    records.publish(provider, "b")
    records.add("c")
    restarted = make_provider(**data)
    snapshot = await restarted.resync()
    assert snapshot.instances["b"].interfaces[0].ipv6_prefixes == blocks["b"]
    assert len({snapshot.instances[n].interfaces[0].ipv6_prefixes for n in "abc"}) == 3


async def test_two_records_claiming_one_block_leave_it_with_the_first(
    records: Records, make_provider
) -> None:
    records.add("a", prefixes=("10.0.0.0/28",))
    records.add("b", prefixes=("10.0.0.0/28", "10.0.0.16/28"))
    provider = make_provider(cluster_cidrs=["10.0.0.0/24"])
    snapshot = await provider.resync()
    assert snapshot.instances["a"].interfaces[0].prefixes == ("10.0.0.0/28",)
    assert snapshot.instances["b"].interfaces[0].prefixes == ()


async def test_nothing_is_allocated_before_the_store_is_read(records: Records, make_provider) -> None:
    records.synced = False
    provider = make_provider()
    with pytest.raises(errors.TransientError):
        await provider.resync()


async def test_plain_addresses_are_refused(records: Records, make_provider) -> None:
    records.add("a")
    provider = make_provider()
    await provider.resync()
    with pytest.raises(errors.InvalidRequest):
        await provider.assign_addresses(interface_id="vif-a", count=1)


async def test_nodes_prefer_the_cluster_cidr_their_spec_names(records: Records, make_provider) -> None:
    records.add("a", subnets=("10.1.0.0/16",))
    records.add("b")
    provider = make_provider(cluster_cidrs=["10.0.0.0/16", "10.1.0.0/16"])
    snapshot = await provider.resync()
    assert [snapshot.instances[n].interfaces[0].subnet_id for n in "ab"] == ["10.1.0.0/16", "10.0.0.0/16"]
    assert await assign(provider, "a", 1) == ["10.1.0.0/28"]


async def test_a_record_that_arrives_late_in_a_term_still_claims_its_block(
    records: Records, make_provider
) -> None:
    records.add("x")
    records.add("y")
    provider = make_provider(cluster_cidrs=["10.0.0.0/27"], node_mask_ipv4=28)
    records.term += 1  # a new leader whose cache has not seen x's last status yet
    await provider.resync()
    records.add("x", prefixes=("10.0.0.0/28",))  # the watch event arrives
    snapshot = await provider.resync()
    assert snapshot.instances["x"].interfaces[0].prefixes == ("10.0.0.0/28",)
    assert await assign(provider, "y", 1) == ["10.0.0.16/28"]


async def test_published_ipv6_blocks_are_occupied_before_any_node_gets_a_new_one(
    records: Records, make_provider
) -> None:
    records.add("a")  # appeared while the IPv6 range was full: no block published
    records.add("b", ipv6_prefixes=("fd00::/64",))
    provider = make_provider(cluster_cidrs=["10.0.0.0/16", "fd00::/63"])
    snapshot = await provider.resync()
    assert snapshot.instances["b"].interfaces[0].ipv6_prefixes == ("fd00::/64",)
    assert snapshot.instances["a"].interfaces[0].ipv6_prefixes == ("fd00:0:0:1::/64",)


async def test_a_released_block_is_not_handed_out_while_a_record_still_lists_it(
    records: Records, make_provider
) -> None:
    records.add("a")
    records.add("z")
    provider = make_provider(cluster_cidrs=["10.0.0.0/27"], node_mask_ipv4=28)
    await provider.resync()
    held = await assign(provider, "a", 2)
    records.publish(provider, "a")
    await provider.unassign_addresses(interface_id="vif-a", prefixes=held[1:])
    await provider.resync()  # a's status still lists the released prefix (its write is behind)
    with pytest.raises(errors.PrefixesExhausted):
        await assign(provider, "z", 1)
    records.publish(provider, "a")  # now it does not
    await provider.resync()
    assert await assign(provider, "z", 1) == held[1:]


async def test_malformed_published_prefixes_are_ignored_not_fatal(records: Records, make_provider) -> None:
    records.add("a", prefixes=("garbage", "10.0.0.0/16", "10.0.0.1/28", "10.0.0.0/24", "192.168.0.0/28"))
    records.add("b", ipv6_prefixes=("nonsense", "fd00::/48"))
    provider = make_provider(cluster_cidrs=["10.0.0.0/16", "fd00::/56"])
    snapshot = await provider.resync()
    assert snapshot.instances["a"].interfaces[0].prefixes == ()
    assert len(snapshot.instances["b"].interfaces[0].ipv6_prefixes) == 1  # a fresh block, not those


async def test_a_spec_naming_no_cluster_cidr_falls_back_to_the_first_with_room(
    records: Records, make_provider
) -> None:
    provider = make_provider(cluster_cidrs=["10.0.0.0/28", "10.1.0.0/24"], node_mask_ipv4=28)
    records.add("first")
    await provider.resync()
    await assign(provider, "first", 1)  # the first CIDR's only block
    records.add("a", subnets=("subnet-123",))  # names nothing of ours
    snapshot = await provider.resync()
    assert snapshot.instances["a"].interfaces[0].subnet_id == "10.1.0.0/24"
    assert await assign(provider, "a", 1) == ["10.1.0.0/28"]


async def test_blocks_of_a_duplicate_instance_record_go_to_nobody(records: Records, make_provider) -> None:
    records.add("a", prefixes=("10.0.0.0/28",))
    records.records["b"] = dataclasses.replace(records.records["a"], name="b", prefixes=("10.0.0.16/28",))
    records.add("c")
    provider = make_provider(cluster_cidrs=["10.0.0.0/27"], node_mask_ipv4=28)
    snapshot = await provider.resync()
    assert "c" in snapshot.instances
    with pytest.raises(errors.PrefixesExhausted):  # b's block is held for nobody while b lists it
        await assign(provider, "c", 1)
