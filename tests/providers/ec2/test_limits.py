from typing import Any

import pytest

from eni_ipam.core.clock import LoopClock
from eni_ipam.core.model import InstanceLimits
from providers.ec2.limits import instance_limits, load_limits, parse_table
from providers.sim.cloud import SimCloud

WELL_KNOWN = [
    # type, adapters, IPv4 per interface, hypervisor (EC2 DescribeInstanceTypes)
    ("m5.large", 3, 10, "nitro"),
    ("m5a.large", 3, 10, "nitro"),
    ("m5.xlarge", 4, 15, "nitro"),
    ("m4.xlarge", 4, 15, "xen"),
    ("t2.xlarge", 3, 15, "xen"),
    ("c3.xlarge", 4, 15, "xen"),
]


@pytest.mark.parametrize(
    ("type_", "adapters", "ipv4", "hypervisor"), WELL_KNOWN, ids=[w[0] for w in WELL_KNOWN]
)
def test_shipped_table_has_ec2_limits_of_well_known_types(
    type_: str, adapters: int, ipv4: int, hypervisor: str
) -> None:
    limits = instance_limits(type_)
    assert limits is not None
    assert (limits.adapters, limits.ipv4_per_interface, limits.hypervisor) == (adapters, ipv4, hypervisor)
    assert limits.supports_prefixes == (hypervisor == "nitro")


def test_unknown_type_has_no_limits() -> None:
    assert instance_limits("x9.imaginary") is None


def test_table_is_loaded_once_and_read_only() -> None:
    table = load_limits()
    assert load_limits() is table
    assert len(table) > 500
    with pytest.raises(TypeError):
        table["m5.large"] = InstanceLimits(adapters=1, ipv4_per_interface=1)  # type: ignore[index]


def test_cloud_uses_the_shipped_table_by_default() -> None:
    assert SimCloud(LoopClock()).limits["m5.large"] == instance_limits("m5.large")


@pytest.mark.parametrize(
    ("type_", "cards"),
    [("p5.48xlarge", (2,) * 32), ("p4d.24xlarge", (15,) * 4), ("trn1.32xlarge", (5,) * 8), ("m5.large", ())],
)
def test_a_multi_card_type_holds_each_cards_interfaces(type_: str, cards: tuple[int, ...]) -> None:
    """EC2's NetworkCards[].MaximumNetworkInterfaces, by card: card 0's are the adapters; a card the
    type does not have holds none."""
    limits = instance_limits(type_)
    assert limits is not None and limits.cards == cards
    assert limits.adapters_on(0) == limits.adapters
    assert [limits.adapters_on(c) for c in range(len(cards))] == list(cards)
    assert limits.adapters_on(len(cards) or 1) == 0


def test_parse_table_reads_every_field() -> None:
    parsed = parse_table({"types": {"z1.test": {"adapters": 2, "ipv4": 4, "ipv6": 3, "hypervisor": "xen"}}})
    assert parsed == {
        "z1.test": InstanceLimits(adapters=2, ipv4_per_interface=4, ipv6_per_interface=3, hypervisor="xen")
    }


@pytest.mark.parametrize(
    ("document", "names"),
    [
        ({}, "'types'"),
        ({"types": {"z1.test": {"ipv4": 4}}}, "z1.test"),
        ({"types": {"z1.test": {"adapters": -1, "ipv4": 4}}}, "z1.test.adapters"),
        ({"types": {"z1.test": {"adapters": 2, "ipv4": "4"}}}, "z1.test.ipv4"),
        ({"types": {"z1.test": {"adapters": 2, "ipv4": 4, "hypervisor": 7}}}, "z1.test.hypervisor"),
        ({"types": {"z1.test": {"adapters": 2, "ipv4": 4, "cards": [2, "2"]}}}, "z1.test.cards"),
        ({"types": {"z1.test": {"adapters": 2, "ipv4": 4, "cards": [3, 2]}}}, "z1.test.cards"),
    ],
)
def test_malformed_table_is_rejected_naming_the_entry(document: dict[str, Any], names: str) -> None:
    with pytest.raises(ValueError, match=names.replace(".", r"\.")):
        parse_table(document)
