"""The AWS provider on multi-card instances and beside interfaces it does not own, against moto's
EC2 served over HTTP (botocore's HTTP layer, EC2's wire protocol): each request it sends, and no more
than the fewest that do the work."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from eni_ipam.core.model import CreateInterface
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeResource, NodeSpec
from tests.providers.aws.conftest import Network
from tests.providers.aws.test_reconciler import reconciling
from tests.waiting import until

pytestmark = [pytest.mark.testkit, pytest.mark.timeout(60)]

MUTATING = ("Create", "Attach", "Assign", "Modify", "Unassign", "Detach", "Delete")


@contextlib.contextmanager
def requests(network: Network) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Every request the client sends while the block runs: (operation, parameters)."""
    sent: list[tuple[str, dict[str, Any]]] = []

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        sent.append((model.name, dict(params)))

    events = network.ec2.meta.events
    events.register("provide-client-params.ec2", record)
    try:
        yield sent
    finally:
        events.unregister("provide-client-params.ec2", record)


def mutating(sent: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [name for name, _ in sent if name.startswith(MUTATING)]


def interfaces_of(network: Network, instance: str) -> list[dict[str, Any]]:
    found = network.ec2.describe_network_interfaces(
        Filters=[{"Name": "attachment.instance-id", "Values": [instance]}]
    )["NetworkInterfaces"]
    return sorted(found, key=lambda i: (i["Attachment"]["NetworkCardIndex"], i["Attachment"]["DeviceIndex"]))


async def test_an_interface_on_another_card_takes_three_requests(http_network: Network) -> None:
    network = http_network
    instance = network.run_instance("p4d.24xlarge")  # 4 cards of 15 interfaces
    provider = network.provider()
    request = CreateInterface(
        subnet_id=network.subnet_id,
        security_groups=network.security_group_ids[:1],
        device_index=0,
        count=3,
        network_card=2,
    )
    try:
        with requests(network) as sent:
            made = await provider.create_interface(
                instance_id=instance, request=request, tags={}, token="t-1"
            )
        snapshot = await provider.resync()
    finally:
        provider.close()
    assert mutating(sent) == [
        "CreateNetworkInterface",
        "AttachNetworkInterface",
        "ModifyNetworkInterfaceAttribute",
    ]
    attach = next(params for name, params in sent if name == "AttachNetworkInterface")
    assert (attach["NetworkCardIndex"], attach["DeviceIndex"]) == (2, 0)
    assert (made.network_card, made.device_index, made.instance_id) == (2, 0, instance)
    listed = {i.id: i for i in snapshot.instances[instance].interfaces}
    assert (listed[made.id].network_card, listed[made.id].device_index) == (2, 0)
    assert len(listed[made.id].addresses) == 3 and listed[made.id].delete_on_termination
    # The primary keeps device index 0 of card 0: the same index on card 2 is another slot.
    assert [
        (i["Attachment"]["NetworkCardIndex"], i["Attachment"]["DeviceIndex"])
        for i in interfaces_of(network, instance)
    ] == [(0, 0), (2, 0)]


async def test_a_pool_on_several_cards_is_filled_in_the_fewest_requests(http_network: Network) -> None:
    """A p5.48xlarge (32 cards of 2 interfaces of 49 slots) asked for 120 addresses on cards 0 and 1:
    the primary takes 49 in one request, and two new interfaces (card 0's second slot, then card 1's
    first) take the rest in three requests each."""
    network = http_network
    instance = network.run_instance("p5.48xlarge")
    spec = NodeResource(
        name="gpu", instance_id=instance, spec=NodeSpec(pre_allocate=120, network_cards=(0, 1))
    )
    with requests(network) as sent:
        async with reconciling(network, [spec], Settings(gc_interval=0)) as (manager, _):
            await until(lambda: manager.nodes["gpu"].stats.available >= 120, limit=30)
    assert sorted(mutating(sent)) == sorted(
        [
            "AssignPrivateIpAddresses",
            *["CreateNetworkInterface", "AttachNetworkInterface", "ModifyNetworkInterfaceAttribute"] * 2,
        ]
    )
    held = [
        (
            i["Attachment"]["NetworkCardIndex"],
            i["Attachment"]["DeviceIndex"],
            len(i["PrivateIpAddresses"]) - 1,
        )
        for i in interfaces_of(network, instance)
    ]
    assert held == [(0, 0, 49), (0, 1, 49), (1, 0, 22)]


async def test_a_trunk_and_an_efa_only_interface_are_never_filled(http_network: Network) -> None:
    network = http_network
    instance = network.run_instance("m5.xlarge")  # 4 interfaces of 15 addresses
    others = {}
    for index, kind in ((1, "trunk"), (2, "efa-only")):
        eni = network.ec2.create_network_interface(SubnetId=network.subnet_id, InterfaceType=kind)
        eni_id = eni["NetworkInterface"]["NetworkInterfaceId"]
        network.ec2.attach_network_interface(
            NetworkInterfaceId=eni_id, InstanceId=instance, DeviceIndex=index
        )
        others[eni_id] = kind
    spec = NodeResource(name="n1", instance_id=instance, spec=NodeSpec(pre_allocate=20))
    with requests(network) as sent:
        async with reconciling(network, [spec], Settings(gc_interval=0)) as (manager, _):
            await until(lambda: manager.nodes["n1"].stats.available >= 20, limit=30)
            stats = manager.nodes["n1"].stats
    # 14 on the primary in one request; 6 on a new interface at index 3, past the two it leaves alone.
    assert sorted(mutating(sent)) == sorted(
        [
            "AssignPrivateIpAddresses",
            "CreateNetworkInterface",
            "AttachNetworkInterface",
            "ModifyNetworkInterfaceAttribute",
        ]
    )
    found = interfaces_of(network, instance)
    assert [
        (i["Attachment"]["DeviceIndex"], i["InterfaceType"], len(i["PrivateIpAddresses"]) - 1) for i in found
    ] == [
        (0, "interface", 14),
        (1, "trunk", 0),
        (2, "efa-only", 0),
        (3, "interface", 6),
    ]
    assert stats.capacity == 2 * 14  # the primary and the new one: no room counted on the other two
