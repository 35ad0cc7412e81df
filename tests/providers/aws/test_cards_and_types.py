"""The AWS provider on multi-card instances, beside interfaces it does not own, and delegating IPv6
prefixes, against moto's EC2 served over HTTP (botocore's HTTP layer, EC2's wire protocol): each
request it sends, and no more than the fewest that do the work."""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterator
from typing import Any

import pytest

from eni_ipam.core import errors
from eni_ipam.core.model import CreateInterface
from eni_ipam.core.planner import has_ipv6_prefix
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeResource, NodeSpec
from tests.providers.aws.conftest import ZONE, Network
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


def dual_stack_subnet(network: Network, cidr: str) -> str:
    """A new subnet of the network's VPC with an IPv6 /64 (the VPC gets Amazon's /56 first)."""
    ec2 = network.ec2
    vpc = ec2.describe_vpcs(VpcIds=[network.vpc_id])["Vpcs"][0]
    blocks = [a["Ipv6CidrBlock"] for a in vpc.get("Ipv6CidrBlockAssociationSet") or ()]
    if not blocks:
        answer = ec2.associate_vpc_cidr_block(VpcId=network.vpc_id, AmazonProvidedIpv6CidrBlock=True)
        blocks = [answer["Ipv6CidrBlockAssociation"]["Ipv6CidrBlock"]]
    taken = sum(1 for s in ec2.describe_subnets()["Subnets"] if s.get("Ipv6CidrBlockAssociationSet"))
    block = list(ipaddress.IPv6Network(blocks[0]).subnets(new_prefix=64))[taken]
    subnet = ec2.create_subnet(
        VpcId=network.vpc_id, CidrBlock=cidr, Ipv6CidrBlock=str(block), AvailabilityZone=ZONE
    )
    return str(subnet["Subnet"]["SubnetId"])


async def test_an_ipv6_node_gets_its_80_in_one_request_and_keeps_it(http_network: Network) -> None:
    network = http_network
    subnet = dual_stack_subnet(network, "10.0.64.0/24")
    instance = network.run_instance("m5.large", subnet_id=subnet)
    spec = NodeResource(name="v6", instance_id=instance, spec=NodeSpec(address_family="ipv6"))
    with requests(network) as sent:
        async with reconciling(network, [spec], Settings(gc_interval=0)) as (manager, provider):
            await until(
                lambda: (
                    manager.nodes["v6"].instance is not None
                    and has_ipv6_prefix(manager.nodes["v6"].instance, spec.spec)
                ),
                limit=30,
            )
            snapshot = await provider.resync()
    assert mutating(sent) == ["AssignIpv6Addresses"]
    assign = next(params for name, params in sent if name == "AssignIpv6Addresses")
    assert assign == {"NetworkInterfaceId": assign["NetworkInterfaceId"], "Ipv6PrefixCount": 1}
    (primary,) = interfaces_of(network, instance)
    (prefix,) = (p["Ipv6Prefix"] for p in primary["Ipv6Prefixes"])
    block = ipaddress.IPv6Network(snapshot.subnets[subnet].ipv6_cidr)
    assert ipaddress.IPv6Network(prefix).prefixlen == 80 and ipaddress.IPv6Network(prefix).subnet_of(block)
    assert len(primary["PrivateIpAddresses"]) == 1  # no IPv4 pool


async def test_a_dual_node_whose_new_interface_carries_the_80_makes_no_extra_request(
    http_network: Network,
) -> None:
    """Pods kept off the primary (its subnet IPv4-only), a dual-stack pod subnet: the interface made
    for the IPv4 pool is created with the /80 (Ipv6PrefixCount on its create): three requests, as for
    any new interface."""
    network = http_network
    pods = dual_stack_subnet(network, "10.0.80.0/24")
    instance = network.run_instance("m5.large")
    spec = NodeResource(
        name="dual",
        instance_id=instance,
        spec=NodeSpec(address_family="dual", first_interface_index=1, subnet_ids=(pods,), pre_allocate=4),
    )
    with requests(network) as sent:
        async with reconciling(network, [spec], Settings(gc_interval=0)) as (manager, _):
            await until(lambda: manager.nodes["dual"].stats.available >= 4, limit=30)
            await until(lambda: has_ipv6_prefix(manager.nodes["dual"].instance, spec.spec), limit=30)
    assert mutating(sent) == [
        "CreateNetworkInterface",
        "AttachNetworkInterface",
        "ModifyNetworkInterfaceAttribute",
    ]
    create = next(params for name, params in sent if name == "CreateNetworkInterface")
    assert create["Ipv6PrefixCount"] == 1 and create["SecondaryPrivateIpAddressCount"] == 4
    _, made = interfaces_of(network, instance)
    assert made["SubnetId"] == pods and len(made["Ipv6Prefixes"]) == 1


async def test_an_ipv6_prefix_on_an_ipv4_only_subnet_is_refused_and_nothing_changes(
    http_network: Network,
) -> None:
    network = http_network
    instance = network.run_instance("m5.large")
    provider = network.provider()
    try:
        (primary,) = interfaces_of(network, instance)
        with pytest.raises(errors.InvalidRequest):
            await provider.assign_ipv6_prefix(interface_id=primary["NetworkInterfaceId"])
    finally:
        provider.close()
    (primary,) = interfaces_of(network, instance)
    assert not primary.get("Ipv6Prefixes")
