"""Subnets are CIDR-true: reserved addresses, lowest-free allocation, aligned /28s, free-address caps."""

from collections.abc import Callable

import pytest

from providers.sim.cloud import SimCloud
from providers.sim.records import SimError
from tests.providers.sim import ZONE, make_cloud, primary_id


def test_subnet_reserves_aws_five_addresses() -> None:
    cloud = make_cloud()
    assert cloud.subnet_free("s-small") == 16 - 5
    assert cloud.subnet_free("s-1") == 256 - 5
    assert cloud.subnet_view("s-small").available == 11


async def test_addresses_are_the_lowest_free_and_never_reserved_ones() -> None:
    cloud = make_cloud()
    cloud.add_instance("i-1", type="m5.xlarge", subnet="s-small", security_groups=["sg-1"])
    eni = primary_id(cloud, "i-1")
    assert cloud.instance_view("i-1").interfaces[0].primary_ip == "10.0.1.4"
    new = await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=10)
    assert new == [f"10.0.1.{n}" for n in range(5, 15)]
    assert cloud.subnet_free("s-small") == 0


async def test_released_addresses_are_handed_out_again_lowest_first() -> None:
    cloud = make_cloud()
    cloud.add_instance("i-1", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    eni = primary_id(cloud, "i-1")
    await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=5)  # .5 - .9
    await cloud.unassign_private_ip_addresses(interface_id=eni, addresses=["10.0.0.7", "10.0.0.6"])
    assert await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=3) == [
        "10.0.0.6",
        "10.0.0.7",
        "10.0.0.10",
    ]


async def test_prefix_is_the_lowest_whole_aligned_block() -> None:
    cloud = make_cloud()
    cloud.add_instance("i-1", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    eni = primary_id(cloud, "i-1")
    # The first block holds the reserved addresses and the primary: never delegated.
    assert await cloud.assign_private_ip_addresses(interface_id=eni, prefix_count=2) == [
        "10.0.0.16/28",
        "10.0.0.32/28",
    ]
    assert await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=7) == [
        f"10.0.0.{n}" for n in range(5, 12)
    ]
    assert cloud.owner_of("10.0.0.40") == eni


async def test_prefix_skips_blocks_with_any_address_in_use() -> None:
    cloud = make_cloud()
    cloud.add_instance(
        "i-1",
        type="m5.large",
        subnet="s-1",
        security_groups=["sg-1"],
        interfaces=[{"index": 0, "secondary_ips": 9}],  # .4 - .13
    )
    cloud.add_instance(
        "i-2",
        type="m5.large",
        subnet="s-1",
        security_groups=["sg-1"],
        interfaces=[{"index": 0, "secondary_ips": 2}],
    )  # .14 - .16: one address in block 1
    cloud.add_instance("i-3", type="m5.large", subnet="s-1", security_groups=["sg-1"])  # .17
    assert await cloud.assign_private_ip_addresses(interface_id=primary_id(cloud, "i-3"), prefix_count=1) == [
        "10.0.0.32/28"
    ]


async def test_no_whole_block_answers_insufficient_cidr_blocks() -> None:
    cloud = make_cloud()
    cloud.add_instance("i-1", type="m5.large", subnet="s-small", security_groups=["sg-1"])
    with pytest.raises(SimError) as err:
        await cloud.assign_private_ip_addresses(interface_id=primary_id(cloud, "i-1"), prefix_count=1)
    assert err.value.code == "InsufficientCidrBlocks"


def test_available_counts_free_addresses_after_the_declared_interfaces() -> None:
    cloud = make_cloud(available=20)
    cloud.add_instance(
        "i-1",
        type="m5.large",
        subnet="s-1",
        security_groups=["sg-1"],
        interfaces=[{"index": 0, "secondary_ips": 5}, {"index": 1, "secondary_ips": 3}],
    )
    assert cloud.subnet_free("s-1") == 20
    cloud.check_invariants()


def test_available_above_what_the_cidr_allows_is_capped_by_the_cidr() -> None:
    cloud = make_cloud()
    cloud.add_subnet("s-cap", vpc="vpc-1", zone=ZONE, cidr="10.0.3.0/28", available=1000)
    assert cloud.subnet_free("s-cap") == 11


async def test_capped_subnet_hands_out_no_more_than_its_cap() -> None:
    cloud = make_cloud(available=4)
    cloud.add_instance("i-1", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    eni = primary_id(cloud, "i-1")
    with pytest.raises(SimError) as err:
        await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=5)
    assert err.value.code == "InsufficientFreeAddressesInSubnet"
    assert await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=4) == [
        "10.0.0.5",
        "10.0.0.6",
        "10.0.0.7",
        "10.0.0.8",
    ]
    assert cloud.subnet_free("s-1") == 0


async def test_cap_below_a_block_refuses_prefixes() -> None:
    cloud = make_cloud(available=15)
    cloud.add_instance("i-1", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    with pytest.raises(SimError) as err:
        await cloud.assign_private_ip_addresses(interface_id=primary_id(cloud, "i-1"), prefix_count=1)
    assert err.value.code == "InsufficientCidrBlocks"


async def test_set_subnet_available_lowers_and_raises_the_cap_within_the_cidr() -> None:
    cloud = make_cloud()
    cloud.add_instance("i-1", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    cloud.set_subnet_available("s-1", 3)
    assert cloud.subnet_free("s-1") == 3
    await cloud.assign_private_ip_addresses(interface_id=primary_id(cloud, "i-1"), secondary_count=2)
    assert cloud.subnet_free("s-1") == 1
    cloud.set_subnet_available("s-1", 100)
    assert cloud.subnet_free("s-1") == 100
    cloud.set_subnet_available("s-1", 10_000)
    assert cloud.subnet_free("s-1") == 256 - 5 - 1 - 2


async def test_released_addresses_count_again_under_a_cap() -> None:
    cloud = make_cloud(available=5)
    cloud.add_instance("i-1", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    eni = primary_id(cloud, "i-1")
    new = await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=5)
    await cloud.unassign_private_ip_addresses(interface_id=eni, addresses=new[:2])
    assert cloud.subnet_free("s-1") == 2


def test_setup_declares_interfaces_with_addresses_prefixes_and_tags() -> None:
    cloud = make_cloud()
    cloud.add_instance(
        "i-1",
        type="m5.large",
        subnet="s-1",
        security_groups=["sg-1"],
        interfaces=[
            {"index": 0, "secondary_ips": 2},
            {
                "index": 2,
                "subnet": "s-1",
                "prefixes": 1,
                "tags": {"team": "a"},
                "delete_on_termination": False,
            },
        ],
    )
    first, second = cloud.instance_view("i-1").interfaces
    assert (first.device_index, first.primary_ip, first.addresses) == (
        0,
        "10.0.0.4",
        ("10.0.0.5", "10.0.0.6"),
    )
    assert (second.device_index, second.primary_ip, second.prefixes) == (2, "10.0.0.7", ("10.0.0.16/28",))
    assert dict(second.tags) == {"team": "a"} and not second.delete_on_termination
    assert first.security_groups == second.security_groups == ("sg-1",) and first.delete_on_termination
    cloud.check_invariants()


def _instance(interfaces: list[dict[str, object]], type: str = "m5.large") -> Callable[[SimCloud], None]:
    """A setup call adding instance i-x in s-1 with the given interface declarations."""
    return lambda c: c.add_instance("i-x", type=type, subnet="s-1", security_groups=[], interfaces=interfaces)


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda c: c.add_subnet("s-x", vpc="vpc-9", zone=ZONE, cidr="10.0.9.0/24"), "vpc-9"),
        (lambda c: c.add_subnet("s-x", vpc="vpc-1", zone=ZONE, cidr="10.1.0.0/24"), "outside VPC"),
        (lambda c: c.add_subnet("s-x", vpc="vpc-1", zone=ZONE, cidr="10.0.0.0/25"), "overlaps subnet s-1"),
        (lambda c: c.add_subnet("s-1", vpc="vpc-1", zone=ZONE, cidr="10.0.9.0/24"), "duplicate subnet"),
        (lambda c: c.add_security_group("sg-x", vpc="vpc-9"), "vpc-9"),
        (lambda c: c.add_instance("i-x", type="m5.large", subnet="s-9", security_groups=[]), "s-9"),
        (lambda c: c.add_instance("i-x", type="m5.large", subnet="s-1", security_groups=["sg-9"]), "sg-9"),
        (_instance([{"idx": 0}]), "'idx'"),
        (_instance([{"index": 1}]), "primary"),
        (_instance([{"index": 0, "prefixes": 1}], type="m4.xlarge"), "prefixes"),
        (_instance([{"index": 0, "secondary_ips": 10}]), "more than 9"),
        (_instance([{"index": n} for n in range(4)]), "exceed"),
        (_instance([{"index": 0}, {"index": 1, "subnet": "s-other"}]), "zone"),
    ],
)
def test_setup_rejects_bad_declarations_naming_the_culprit(
    call: Callable[[SimCloud], None], named: str
) -> None:
    cloud = make_cloud()
    with pytest.raises(ValueError, match=named):
        call(cloud)


def test_setup_that_does_not_fit_leaves_the_cloud_unchanged() -> None:
    cloud = make_cloud(available=5)
    cloud.add_instance("i-1", type="m5.large", subnet="s-small", security_groups=["sg-1"])
    with pytest.raises(ValueError, match="no room"):
        cloud.add_instance(
            "i-2",
            type="m5.large",
            subnet="s-small",
            security_groups=["sg-1"],
            interfaces=[{"index": 0, "secondary_ips": 5}, {"index": 1, "secondary_ips": 5}],
        )
    assert cloud.subnet_free("s-small") == 10
    assert len(cloud.interfaces()) == 1
    with pytest.raises(KeyError):
        cloud.instance_view("i-2")
    cloud.check_invariants()


async def test_terminate_deletes_interfaces_marked_delete_on_termination_and_detaches_the_rest() -> None:
    cloud = make_cloud()
    cloud.add_instance(
        "i-1",
        type="m5.large",
        subnet="s-1",
        security_groups=["sg-1"],
        interfaces=[{"index": 0, "secondary_ips": 3}, {"index": 1, "delete_on_termination": False}],
    )
    keep = cloud.instance_view("i-1").interfaces[1]
    cloud.terminate_instance("i-1")
    assert cloud.instance_state("i-1") == "terminated"
    assert [i.id for i in cloud.interfaces()] == [keep.id]
    detached = cloud.interfaces()[0]
    assert (detached.instance_id, detached.device_index, detached.attachment_id) == ("", -1, "")
    assert cloud.subnet_free("s-1") == 251 - 1
    page = await cloud.describe_network_interfaces(filters={"status": ["available"]})
    assert [i.id for i in page.items] == [keep.id]
    cloud.check_invariants()


def test_owner_of_finds_primary_secondary_and_prefix_addresses() -> None:
    cloud = make_cloud()
    cloud.add_instance(
        "i-1",
        type="m5.large",
        subnet="s-1",
        security_groups=["sg-1"],
        interfaces=[{"index": 0, "secondary_ips": 1, "prefixes": 1}],
    )
    eni = primary_id(cloud, "i-1")
    assert cloud.owner_of("10.0.0.4") == cloud.owner_of("10.0.0.21") == eni
    assert cloud.owner_of("10.0.0.5") == eni
    assert cloud.owner_of("10.0.0.6") is None
    assert cloud.owner_of("10.0.0.200") is None


def test_check_invariants_catches_an_address_held_twice() -> None:
    cloud: SimCloud = make_cloud()
    cloud.add_instance("i-1", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    cloud.add_instance("i-2", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    records = list(cloud._interfaces.values())
    records[1].addresses.append(records[0].primary_ip)
    with pytest.raises(AssertionError, match="held by"):
        cloud.check_invariants()
