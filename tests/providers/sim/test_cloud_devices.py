"""The in-memory cloud's interfaces as devices: MAC addresses derived from ids (deterministic,
unique, locally administered) and network cards: device indexes per card, each card's own limit,
interfaces on every card attached to their instance, as EC2 answers."""

from __future__ import annotations

import re

import pytest

from eni_ipam.core.devices import MAC_PATTERN
from eni_ipam.core.model import DETACHED_INDEX
from providers.sim.cloud import SimCloud
from providers.sim.records import SimError, mac_address
from tests.providers.sim import interface, make_cloud

MULTI_CARD = "p4d.24xlarge"
"""4 network cards of 15 interfaces."""
ON_TWO_CARDS = [
    {"index": 0},
    {"index": 1, "secondary_ips": 2},
    {"index": 0, "network_card": 1, "secondary_ips": 1, "delete_on_termination": False},
    {"index": 1, "network_card": 1},
]


async def macs(cloud: SimCloud) -> dict[str, str]:
    return {i.id: i.mac_address for i in (await cloud.describe_network_interfaces()).items}


async def test_every_interface_has_a_unique_locally_administered_mac_address() -> None:
    cloud = make_cloud()
    cloud.add_instance("i-1", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    for _ in range(5):
        await cloud.create_network_interface(subnet_id="s-1")
    found = await macs(cloud)
    assert len(found) == 6 and len(set(found.values())) == 6
    for interface_id, mac in found.items():
        assert re.fullmatch(MAC_PATTERN, mac), mac
        assert int(mac[:2], 16) & 0b11 == 0b10, f"{mac}: not locally administered unicast"
        assert mac == mac_address(interface_id)


async def test_mac_addresses_are_the_same_in_a_cloud_built_the_same_way() -> None:
    clouds = []
    for _ in range(2):
        cloud = make_cloud()
        cloud.add_instance("i-1", type="m5.large", subnet="s-1", security_groups=["sg-1"])
        await cloud.create_network_interface(subnet_id="s-1")
        clouds.append(await macs(cloud))
    assert clouds[0] == clouds[1]


def test_mac_addresses_differ_for_ids_that_differ_in_their_serial() -> None:
    assert mac_address("eni-00000000000000001") == "02:00:00:00:00:01"
    assert mac_address("eni-000000000000000ff") == "02:00:00:00:00:ff"
    assert len({mac_address(f"eni-{n:017x}") for n in range(1, 5000)}) == 4999


async def test_an_interface_on_another_network_card_reads_attached_with_its_card() -> None:
    cloud = make_cloud()
    cloud.add_instance(
        "i-1", type=MULTI_CARD, subnet="s-1", security_groups=["sg-1"], interfaces=ON_TWO_CARDS
    )
    cloud.check_invariants()
    view = cloud.instance_view("i-1")
    assert [(i.network_card, i.device_index) for i in view.interfaces] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    listed = (await cloud.describe_network_interfaces(filters={"attachment.instance-id": ["i-1"]})).items
    assert {i.id for i in listed} == {i.id for i in view.interfaces}
    for other in (i for i in listed if i.network_card == 1):
        assert (other.instance_id, other.mac_address) == ("i-1", mac_address(other.id))
        assert other.attachment_id


async def test_each_card_holds_its_own_interfaces_and_they_go_with_the_instance() -> None:
    cloud = make_cloud()
    cloud.add_instance(
        "i-1", type=MULTI_CARD, subnet="s-1", security_groups=["sg-1"], interfaces=ON_TWO_CARDS
    )
    eni = await cloud.create_network_interface(subnet_id="s-1")
    # Device indexes are per card: index 1 is taken on card 1, free on card 2.
    with pytest.raises(SimError) as refused:
        await cloud.attach_network_interface(
            interface_id=eni.id, instance_id="i-1", device_index=1, network_card=1
        )
    assert refused.value.code == "InvalidParameterValue" and "network card '1'" in str(refused.value)
    with pytest.raises(SimError) as refused:
        await cloud.attach_network_interface(
            interface_id=eni.id, instance_id="i-1", device_index=0, network_card=4
        )
    assert refused.value.code == "InvalidParameterValue" and "no such network card" in str(refused.value)
    await cloud.attach_network_interface(
        interface_id=eni.id, instance_id="i-1", device_index=1, network_card=2
    )
    assert [(i.network_card, i.device_index) for i in cloud.instance_view("i-1").interfaces] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
        (2, 1),
    ]
    cloud.check_invariants()
    others = [i for i in cloud.interfaces() if i.network_card == 1]
    cloud.terminate_instance("i-1")
    kept = {i.id for i in cloud.interfaces()}
    # Declared without delete-on-termination: detached and left; the other went with the instance.
    assert [i.id in kept for i in others] == [True, False]
    left = interface(cloud, others[0].id)
    assert (left.instance_id, left.network_card, left.device_index) == ("", 0, DETACHED_INDEX)
    cloud.check_invariants()


async def test_a_full_card_refuses_one_more_interface() -> None:
    cloud = make_cloud()
    cloud.add_instance(
        "i-1",
        type="p5.48xlarge",  # 32 cards of 2 interfaces
        subnet="s-1",
        security_groups=["sg-1"],
        interfaces=[{"index": 0}, {"index": 0, "network_card": 3}, {"index": 1, "network_card": 3}],
    )
    eni = await cloud.create_network_interface(subnet_id="s-1")
    with pytest.raises(SimError) as refused:
        await cloud.attach_network_interface(
            interface_id=eni.id, instance_id="i-1", device_index=2, network_card=3
        )
    assert refused.value.code == "AttachmentLimitExceeded" and "network card 3" in str(refused.value)
    await cloud.attach_network_interface(
        interface_id=eni.id, instance_id="i-1", device_index=1, network_card=0
    )
    cloud.check_invariants()


@pytest.mark.parametrize(
    ("interfaces", "message"),
    [
        ([{"index": 0}, {"index": 0, "network_card": 1}, {"index": 0, "network_card": 1}], "duplicate"),
        ([{"index": 0, "network_card": 1}], "primary"),
        ([{"index": 0}, {"index": 0, "network_card": 256}], "highest card"),
        ([{"index": 0}, {"index": 0, "network_card": -1}], "non-negative"),
        ([{"index": 0}, *({"index": n, "network_card": 2} for n in range(3))], "on network card 2"),
        ([{"index": 0}, {"index": 0, "network_card": 32}], "has no network card 32"),
    ],
    ids=[
        "twice-on-a-card",
        "primary-elsewhere",
        "card-too-high",
        "card-negative",
        "card-full",
        "no-such-card",
    ],
)
def test_declarations_the_cloud_refuses(interfaces: list[dict[str, int]], message: str) -> None:
    cloud = make_cloud()
    with pytest.raises(ValueError, match=message):
        cloud.add_instance(
            "i-1", type="p5.48xlarge", subnet="s-1", security_groups=["sg-1"], interfaces=interfaces
        )
    assert not cloud.interfaces()
    cloud.check_invariants()
