"""Prefixes placed where they fit, on AWS: the resync's count of free /28 blocks, and named
addresses (dense placement) sent as ``PrivateIpAddresses``, against moto's EC2 over HTTP."""

from __future__ import annotations

import ipaddress

import pytest

from eni_ipam.core import errors
from tests.providers.aws.conftest import Network
from tests.providers.aws.test_cards_and_types import mutating, requests

pytestmark = [pytest.mark.testkit, pytest.mark.timeout(60)]


def naive_free_blocks(network: Network, subnet_id: str, cidr: str) -> int:
    """Whole /28s of the subnet by the client's own listing (not the provider's parser)."""
    used: set[int] = set()
    pages = network.ec2.get_paginator("describe_network_interfaces").paginate(
        Filters=[{"Name": "subnet-id", "Values": [subnet_id]}]
    )
    for page in pages:
        for iface in page["NetworkInterfaces"]:
            for address in iface.get("PrivateIpAddresses", ()):
                used.add(int(ipaddress.IPv4Address(address["PrivateIpAddress"])) >> 4)
            for prefix in iface.get("Ipv4Prefixes", ()):
                used.add(int(ipaddress.IPv4Network(prefix["Ipv4Prefix"]).network_address) >> 4)
    network_ = ipaddress.IPv4Network(cidr)
    first = int(network_.network_address) >> 4
    last = int(network_.broadcast_address) >> 4
    return sum(1 for b in range(first, last + 1) if b not in used | {first, last})


async def test_named_addresses_are_one_request_and_a_taken_one_is_refused(http_network: Network) -> None:
    network = http_network
    first = network.run_instance("m5.large")
    second = network.run_instance("m5.large")
    provider = network.provider()
    try:
        snapshot = await provider.resync()
        assert snapshot.blocks is not None
        subnet = snapshot.subnets[network.subnet_id]
        assert subnet.free_blocks == naive_free_blocks(network, network.subnet_id, subnet.cidr)
        primary = snapshot.instances[first].primary()
        assert primary is not None
        named = snapshot.blocks[network.subnet_id].pick(3)
        with requests(network) as sent:
            new = await provider.assign_addresses(interface_id=primary.id, count=3, addresses=named)
        assert new == sorted(named, key=lambda a: int(ipaddress.IPv4Address(a)))
        assert mutating(sent) == ["AssignPrivateIpAddresses"]
        params = sent[0][1]
        assert params["PrivateIpAddresses"] == named
        assert "AllowReassignment" not in params and "SecondaryPrivateIpAddressCount" not in params
        # Another interface naming one of them: refused as EC2 does, in one request, nothing assigned.
        other = snapshot.instances[second].primary()
        assert other is not None
        with requests(network) as sent, pytest.raises(errors.AddressInUse) as refused:
            await provider.assign_addresses(interface_id=other.id, count=1, addresses=[named[0]])
        assert refused.value.code == "InvalidIPAddress.InUse"
        assert [name for name, _ in sent] == ["AssignPrivateIpAddresses"]
        after = await provider.resync()
        assert after.instances[second].primary().addresses == ()  # type: ignore[union-attr]
        assert set(after.instances[first].primary().addresses) == set(named)  # type: ignore[union-attr]
        # Packed into blocks already broken: no whole block was taken.
        assert after.subnets[network.subnet_id].free_blocks == subnet.free_blocks
        assert after.subnets[network.subnet_id].free_blocks == naive_free_blocks(
            network, network.subnet_id, subnet.cidr
        )
    finally:
        provider.close()


async def test_a_prefix_takes_a_counted_block(http_network: Network) -> None:
    network = http_network
    instance = network.run_instance("m5.large")
    provider = network.provider()
    try:
        before = await provider.resync()
        primary = before.instances[instance].primary()
        assert primary is not None
        await provider.assign_addresses(interface_id=primary.id, count=2, prefixes=True)
        after = await provider.resync()
    finally:
        provider.close()
    free = after.subnets[network.subnet_id].free_blocks
    assert free == before.subnets[network.subnet_id].free_blocks - 2
    assert free == naive_free_blocks(network, network.subnet_id, after.subnets[network.subnet_id].cidr)
