"""The datapath's plan: tables, rules and SNAT for a pool and its pods, as pure data (table tests)."""

from __future__ import annotations

import dataclasses
import ipaddress

import pytest

from eni_ipam.agent.datapath.plan import (
    FROM_POD_PRIORITY,
    MAIN_TABLE,
    SNAT_PRIORITY,
    TO_POD_PRIORITY,
    Device,
    Interface,
    Route,
    Rule,
    plan,
    pod_gateway,
    pod_rules,
    table_id,
)
from eni_ipam.agent.datapath.settings import DatapathSettings
from eni_ipam.config.schema import validate
from eni_ipam.errors import ConfigError
from tests.agent.datapath import ETH0, ETH1, ETH2

SETTINGS = DatapathSettings(enabled=True, vpc_cidrs=("10.0.0.0/16",))  # type: ignore[arg-type]


def settings(**fields: object) -> DatapathSettings:
    return validate(DatapathSettings, {"enabled": True, "vpc_cidrs": ["10.0.0.0/16"], **fields})


@pytest.mark.parametrize(
    ("device_index", "card", "base", "table"),
    [
        (1, 0, 10_000, 10_001),
        (2, 0, 10_000, 10_002),
        (1, 3, 10_000, 10_301),
        (0, 1, 500, 600),
        (99, 0, 256, 355),
    ],
)
def test_a_table_id_is_the_base_plus_a_hundred_per_card_plus_the_device_index(
    device_index: int, card: int, base: int, table: int
) -> None:
    interface = Interface(
        id="e",
        mac="02:00:00:00:00:01",
        device_index=device_index,
        network_card=card,
        subnet="10.0.0.0/24",
        primary_ip="10.0.0.5",
    )
    assert table_id(interface, base) == table


def test_a_device_index_beyond_the_room_of_a_card_is_refused_rather_than_sharing_a_table() -> None:
    interface = Interface(
        id="e", mac="02:00:00:00:00:01", device_index=100, subnet="10.0.0.0/24", primary_ip="10.0.0.5"
    )
    with pytest.raises(ValueError, match="device index 100"):
        table_id(interface, 10_000)


def test_each_secondary_interface_gets_a_table_with_its_subnet_and_a_default_through_its_router() -> None:
    wanted = plan([ETH0, ETH1, ETH2], {}, SETTINGS)
    assert wanted.routes == (
        Route(30_001, "0.0.0.0/0", "10.0.1.1", ETH1.mac),
        Route(30_001, "10.0.1.0/24", "", ETH1.mac, "10.0.1.10"),
        Route(30_002, "0.0.0.0/0", "10.0.2.1", ETH2.mac),
        Route(30_002, "10.0.2.0/24", "", ETH2.mac, "10.0.2.10"),
    )
    assert wanted.devices == (
        Device(ETH1.mac, 9001, "10.0.1.10/24"),
        Device(ETH2.mac, 9001, "10.0.2.10/24"),
    )
    assert set(wanted.loose_rp_filter) == {ETH0.mac, ETH1.mac, ETH2.mac}


def test_every_pod_gets_a_to_rule_and_only_pods_of_secondary_interfaces_a_from_rule() -> None:
    pods = {"10.0.0.50": "eni-0", "10.0.1.50": "eni-1", "10.0.2.50": "eni-2"}
    wanted = plan([ETH0, ETH1, ETH2], pods, SETTINGS)
    assert set(wanted.rules) == {
        Rule(TO_POD_PRIORITY, MAIN_TABLE, destination="10.0.0.50"),
        Rule(TO_POD_PRIORITY, MAIN_TABLE, destination="10.0.1.50"),
        Rule(TO_POD_PRIORITY, MAIN_TABLE, destination="10.0.2.50"),
        Rule(FROM_POD_PRIORITY, 30_001, source="10.0.1.50"),
        Rule(FROM_POD_PRIORITY, 30_002, source="10.0.2.50"),
        Rule(SNAT_PRIORITY, MAIN_TABLE, mark=0x80),
    }
    assert wanted.unrouted == ()
    for address, interface in pods.items():
        owner = {i.id: i for i in (ETH0, ETH1, ETH2)}[interface]
        assert set(pod_rules(address, owner, SETTINGS)) <= set(wanted.rules)


def test_the_snat_keeps_the_vpc_and_the_excluded_cidrs_and_leaves_as_the_primary_address() -> None:
    wanted = plan(
        [ETH0, ETH1],
        {},
        settings(
            vpc_cidrs=["10.0.0.0/16", "100.64.0.0/16"], exclude_snat_cidrs=["192.168.0.0/16", "10.0.5.0/24"]
        ),
    )
    assert wanted.snat is not None
    assert wanted.snat.keep == (
        "10.0.0.0/16",
        "100.64.0.0/16",
        "192.168.0.0/16",
    )  # 10.0.5.0/24 is inside the VPC's
    assert wanted.snat.sources == ("10.0.0.0/16", "100.64.0.0/16")
    assert (wanted.snat.device_mac, wanted.snat.to_address, wanted.snat.mark) == (ETH0.mac, "10.0.0.10", 0x80)


def test_with_external_snat_there_is_no_snat_and_no_mark_rule() -> None:
    wanted = plan([ETH0, ETH1], {"10.0.1.50": "eni-1"}, settings(external_snat=True))
    assert wanted.snat is None
    assert all(r.mark == 0 for r in wanted.rules)


def test_an_interface_without_mac_or_subnet_is_left_out_and_its_pods_are_unrouted() -> None:
    no_mac = Interface(id="eni-3", mac="", device_index=3, subnet="10.0.3.0/24", primary_ip="10.0.3.10")
    wanted = plan([ETH0, no_mac], {"10.0.3.50": "eni-3", "10.0.9.9": "eni-gone"}, SETTINGS)
    assert wanted.tables() == set()
    assert wanted.unrouted == ("10.0.3.50", "10.0.9.9")
    # Their to-rule still keeps pod-to-pod traffic on the node.
    assert Rule(TO_POD_PRIORITY, MAIN_TABLE, destination="10.0.3.50") in wanted.rules
    assert not any(r.source == "10.0.3.50" for r in wanted.rules)


def test_custom_networking_pods_never_on_the_primary_all_get_from_rules() -> None:
    pods = {"10.0.1.50": "eni-1", "10.0.2.50": "eni-2"}
    wanted = plan([ETH0, ETH1, ETH2], pods, SETTINGS)
    assert {r.source for r in wanted.rules if r.priority == FROM_POD_PRIORITY} == set(pods)


def test_an_ipv6_interface_routes_through_the_routers_link_local_address() -> None:
    v6 = Interface(
        id="eni-6",
        mac="02:00:00:00:00:16",
        device_index=1,
        subnet="2600:1f14::/64",
        primary_ip="2600:1f14::10",
    )
    wanted = plan([ETH0, v6], {"2600:1f14::50": "eni-6"}, SETTINGS)
    assert Route(30_001, "::/0", "fe80::1", v6.mac) in wanted.routes
    assert Rule(FROM_POD_PRIORITY, 30_001, source="2600:1f14::50") in wanted.rules
    assert Rule(FROM_POD_PRIORITY, 30_001, source="2600:1f14::50").family == 6


def test_the_plan_does_not_depend_on_the_order_interfaces_and_pods_come_in() -> None:
    pods = {"10.0.2.50": "eni-2", "10.0.1.50": "eni-1", "10.0.1.7": "eni-1"}
    assert plan([ETH2, ETH0, ETH1], pods, SETTINGS) == plan(
        [ETH0, ETH1, ETH2], dict(reversed(pods.items())), SETTINGS
    )


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"vpc_cidrs": []}, "datapath.vpc_cidrs", "required with enabled: true"),
        ({"snat_mark": 0x81}, "datapath.snat_mark", "one bit"),
        ({"route_table_base": 255}, "datapath.route_table_base", "at least 256"),
        ({"vpc_cidrs": ["10.0.0.0/33"]}, "datapath.vpc_cidrs[0]", ""),
    ],
)
def test_bad_datapath_settings_name_the_field_and_the_fix(
    fields: dict[str, object], field: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        validate(DatapathSettings, {"enabled": True, "vpc_cidrs": ["10.0.0.0/16"], **fields}, path="datapath")
    assert caught.value.field == field
    assert message in str(caught.value)


def test_the_datapath_is_off_by_default_and_needs_nothing_then() -> None:
    off = validate(DatapathSettings, {})
    assert not off.enabled and off.vpc_cidrs == ()


@pytest.mark.parametrize(
    ("subnet", "gateway"),
    [("10.0.2.0/24", "10.0.2.3"), ("10.0.16.0/20", "10.0.16.3"), ("10.0.0.16/28", "10.0.0.19")],
)
def test_the_pods_gateway_is_the_subnets_reserved_fourth_address(subnet: str, gateway: str) -> None:
    network = ipaddress.ip_network(subnet)
    assert str(pod_gateway(network)) == gateway
    assert pod_gateway(network) not in (network.network_address + 1, network.network_address + 2)


def test_a_network_without_a_fourth_address_or_of_ipv6_has_no_pods_gateway() -> None:
    assert pod_gateway(ipaddress.ip_network("10.0.0.4/30")) is None
    assert pod_gateway(ipaddress.ip_network("2600:1f14::/64")) is None


def test_a_dual_stack_interfaces_ipv6_pods_leave_through_its_table_and_are_never_snated() -> None:
    """A /80 on device 1: its IPv6 pods get a ``from`` rule to its table, which holds an IPv6 default
    route through the router's link-local address beside the IPv4 one; the SNAT is for IPv4 only."""
    dual = dataclasses.replace(ETH1, ipv6_prefixes=("2600:1f18:aaaa:1::/80",))
    pod = "2600:1f18:aaaa:1::2"
    done = plan([ETH0, dual], {pod: dual.id, "10.0.1.20": dual.id}, SETTINGS)
    table = table_id(dual, SETTINGS.route_table_base)
    assert Route(table, "::/0", "fe80::1", dual.mac) in done.routes
    assert Route(table, "0.0.0.0/0", "10.0.1.1", dual.mac) in done.routes
    assert Rule(FROM_POD_PRIORITY, table, source=pod) in done.rules
    assert Rule(TO_POD_PRIORITY, MAIN_TABLE, destination=pod) in done.rules
    assert done.snat is not None and all(":" not in c for c in (*done.snat.keep, *done.snat.sources))
    # Without the prefix, no IPv6 route: nothing of the interface's is IPv6.
    assert not [r for r in plan([ETH0, ETH1], {}, SETTINGS).routes if ":" in r.destination]


def test_the_default_pools_addresses_of_both_families_are_routed_and_only_ipv4_gets_a_gateway() -> None:
    """What an ADD hands the datapath: an IPv6 address of the node's /80 gets its rules as an IPv4
    one does (a pod of a secondary interface would otherwise leave through the primary), and is
    answered with its own gateway, not the IPv4 subnet's fourth address."""
    from eni_ipam.agent.datapath.pods import PodRoutes
    from eni_ipam.agent.types import DEFAULT_POOL, Allocation

    v4 = Allocation(address="10.0.1.20", pool=DEFAULT_POOL, owner="c", prefix_length=24, gateway="10.0.1.1")
    v6 = Allocation(
        address="2600:1f14::2", pool=DEFAULT_POOL, owner="c", prefix_length=80, gateway="2600:1f14::1"
    )
    other = Allocation(address="10.9.0.2", pool="static", owner="c", prefix_length=24, gateway="10.9.0.1")
    assert PodRoutes._routed([v4, v6, other]) == [v4, v6]
    routes = PodRoutes(datapath=None)  # type: ignore[arg-type]
    assert routes.present(v6) == v6
    assert routes.present(v4).gateway == "10.0.1.3"
