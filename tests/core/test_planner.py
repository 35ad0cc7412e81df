"""The planner: deterministic, fewest calls, exclusion, subnet / group choice, prefixes, release."""

import dataclasses

import hypothesis
import pytest
from hypothesis import strategies as st

from eni_ipam.core import devices
from eni_ipam.core.model import (
    AssignAddresses,
    AssignIpv6Prefix,
    CreateInterface,
    Instance,
    InstanceLimits,
    Interface,
    Ipv6Plan,
    SecurityGroup,
    Subnet,
    Tags,
)
from eni_ipam.core.planner import carrying_ipv6_prefix, node_stats, plan_allocation, plan_ipv6, plan_release
from eni_ipam.core.spec import NodeSpec

M5_XLARGE = InstanceLimits(adapters=4, ipv4_per_interface=15, hypervisor="nitro")
M4_XLARGE = InstanceLimits(adapters=4, ipv4_per_interface=15, hypervisor="xen")


def subnet(sid, free=200, zone="z1", vpc="vpc-1", tags=None):
    return Subnet(id=sid, vpc_id=vpc, zone=zone, cidr="10.0.0.0/24", available=free, tags=Tags(tags))


def iface(idx, n=0, sid="s-1", prefixes=(), tags=None, sgs=("sg-1",), kind=devices.Kind.PLAIN, card=0):
    base = f"10.{card}.{idx}."
    return Interface(
        link=devices.pack("", card, kind),
        id=f"eni-{card}-{idx}" if card else f"eni-{idx}",
        device_index=idx,
        subnet_id=sid,
        primary_ip=base + "4",
        addresses=tuple(base + str(10 + k) for k in range(n)),
        prefixes=tuple(prefixes),
        security_groups=sgs,
        tags=Tags(tags),
    )


def instance(*ifaces, sid="s-1"):
    return Instance(id="i-1", type="m5.xlarge", vpc_id="vpc-1", zone="z1", subnet_id=sid, interfaces=ifaces)


SG = {
    "sg-1": SecurityGroup(id="sg-1", vpc_id="vpc-1"),
    "sg-2": SecurityGroup(id="sg-2", vpc_id="vpc-1", tags=Tags({"team": "a"})),
}


def plan(spec, inst, subnets, must, **kw):
    return plan_allocation(
        spec, inst, kw.pop("limits", M5_XLARGE), {s.id: s for s in subnets}, SG, must=must, **kw
    )


def test_existing_interface_is_filled_before_one_is_created():
    p = plan(NodeSpec(), instance(iface(0, n=10)), [subnet("s-1")], must=12)
    assert p.actions == (
        AssignAddresses(interface_id="eni-0", subnet_id="s-1", count=4),
        CreateInterface(subnet_id="s-1", security_groups=("sg-1",), device_index=1, count=8),
    )
    assert p.shortfall == 0


def test_one_interface_that_fits_the_whole_deficit_takes_it_in_one_call():
    inst = instance(iface(0, n=12), iface(1, n=0), iface(2, n=0))
    p = plan(NodeSpec(), inst, [subnet("s-1")], must=5)
    assert p.actions == (AssignAddresses(interface_id="eni-1", subnet_id="s-1", count=5),)


def test_largest_room_first_when_no_single_interface_fits():
    inst = instance(iface(0, n=12), iface(1, n=10), iface(2, n=0))
    p = plan(NodeSpec(), inst, [subnet("s-1")], must=16)
    assert [(a.interface_id, a.count) for a in p.actions] == [("eni-1", 2), ("eni-2", 14)]


def test_excluded_interfaces_are_never_filled():
    inst = instance(iface(0), iface(1, tags={"skip": "yes"}))
    spec = NodeSpec(first_interface_index=1, exclude_interface_tags=Tags({"skip": "yes"}))
    p = plan(spec, inst, [subnet("s-1")], must=3)
    assert p.actions == (
        CreateInterface(subnet_id="s-1", security_groups=("sg-1",), device_index=2, count=3),
    )


@pytest.mark.parametrize("kind", [devices.Kind.EFA_ONLY, devices.Kind.TRUNK, devices.Kind.OTHER])
def test_an_interface_of_a_kind_no_pool_fills_is_neither_filled_nor_counted(kind):
    """A trunk (security groups for pods), an EFA-only device or a type not known to be plain: its
    device index is taken, its slots are no room, its addresses are no pool."""
    inst = instance(iface(0, n=14), iface(1, n=5, kind=kind))
    p = plan(NodeSpec(), inst, [subnet("s-1")], must=3)
    assert p.actions == (
        CreateInterface(subnet_id="s-1", security_groups=("sg-1",), device_index=2, count=3),
    )
    stats = node_stats(NodeSpec(), inst, M5_XLARGE, used=0, prefix_delegation=False)
    assert (stats.available, stats.capacity, stats.remaining_interfaces) == (14, 14 * 3, 2)
    assert plan_release(NodeSpec(), inst, in_use=(), excess=20).candidates() == frozenset(
        inst.interfaces[0].addresses
    )


P5 = InstanceLimits(adapters=2, ipv4_per_interface=50, hypervisor="nitro", cards=(2,) * 32)


def p5_instance(*ifaces):
    return Instance(
        id="i-1", type="p5.48xlarge", vpc_id="vpc-1", zone="z1", subnet_id="s-1", interfaces=ifaces
    )


def test_new_interfaces_go_to_the_pools_cards_in_the_specs_order_lowest_index_first():
    """Card 0 is full (the primary and an EFA-only device); card 1 holds an EFA-only device at index
    0. Cards 3 then 1: the spec's order, each card's lowest free index."""
    inst = p5_instance(
        iface(0, n=49),
        iface(1, kind=devices.Kind.EFA_ONLY),
        iface(0, kind=devices.Kind.EFA_ONLY, card=1),
    )
    spec = NodeSpec(network_cards=(0, 3, 1))
    p = plan(spec, inst, [subnet("s-1", free=1000)], must=100, limits=P5)
    assert [(c.network_card, c.device_index, c.count) for c in p.actions] == [
        (3, 0, 49),
        (3, 1, 49),
        (1, 1, 2),
    ]
    stats = node_stats(spec, inst, P5, used=0, prefix_delegation=False)
    # The primary, and the five slots the pool may still use (two on card 3, one on card 1).
    assert (stats.available, stats.capacity, stats.remaining_interfaces) == (49, 49 * 4, 3)


def test_interfaces_on_cards_the_pool_does_not_use_are_neither_filled_nor_counted():
    inst = p5_instance(iface(0, n=49), iface(1, n=2, card=1))
    assert node_stats(NodeSpec(), inst, P5, used=0, prefix_delegation=False).available == 49
    p = plan(NodeSpec(), inst, [subnet("s-1")], must=10, limits=P5)
    assert [(c.network_card, c.device_index) for c in p.actions] == [(0, 1)]
    with_card_1 = NodeSpec(network_cards=(0, 1))
    assert node_stats(with_card_1, inst, P5, used=0, prefix_delegation=False).available == 51
    p = plan(with_card_1, inst, [subnet("s-1")], must=10, limits=P5)
    assert p.actions == (AssignAddresses(interface_id="eni-1-1", subnet_id="s-1", count=10),)
    # first_interface_index holds back card 0's indexes only.
    spec = NodeSpec(network_cards=(0, 1), first_interface_index=1)
    assert node_stats(spec, inst, P5, used=0, prefix_delegation=False).available == 2


def test_an_efa_interface_is_filled_like_a_plain_one():
    inst = instance(iface(0, n=14), iface(1, n=5, kind=devices.Kind.EFA))
    p = plan(NodeSpec(), inst, [subnet("s-1")], must=3)
    assert p.actions == (AssignAddresses(interface_id="eni-1", subnet_id="s-1", count=3),)


def test_subnet_ids_win_over_tags_and_most_free_is_chosen():
    subs = [
        subnet("s-1"),
        subnet("s-2", free=50),
        subnet("s-3", free=90),
        subnet("s-4", free=500, tags={"k": "v"}),
    ]
    spec = NodeSpec(subnet_ids=("s-2", "s-3"), subnet_tags=Tags({"k": "v"}))
    p = plan(spec, instance(iface(0, n=14)), subs, must=3)
    assert p.actions[0].subnet_id == "s-3"
    p = plan(
        NodeSpec(subnet_tags=Tags({"k": "v"})),
        instance(iface(0, n=14)),
        subs,
        must=3,
    )
    assert p.actions[0].subnet_id == "s-4"


def test_own_subnet_needs_room_for_a_whole_interface_else_most_free_in_zone():
    subs = [subnet("s-1", free=10), subnet("s-2", free=40), subnet("s-9", free=900, zone="z2")]
    p = plan(NodeSpec(), instance(iface(0, n=14)), subs, must=3)
    assert p.actions[0].subnet_id == "s-2"


def test_security_groups_from_spec_then_tags_then_primary():
    inst = instance(iface(0, n=14))
    subs = [subnet("s-1")]
    assert plan(NodeSpec(security_groups=("sg-9",)), inst, subs, 1).actions[0].security_groups == ("sg-9",)
    tagged = NodeSpec(security_group_tags=Tags({"team": "a"}))
    assert plan(tagged, inst, subs, 1).actions[0].security_groups == ("sg-2",)
    assert plan(NodeSpec(), inst, subs, 1).actions[0].security_groups == ("sg-1",)


def test_no_free_adapter_slot_is_at_capacity_not_an_error():
    inst = instance(*(iface(i, n=14) for i in range(4)))
    p = plan(NodeSpec(), inst, [subnet("s-1")], must=2)
    assert p.actions == () and p.shortfall == 2 and p.reason == "at-capacity"


def test_slots_left_empty_for_want_of_subnet_addresses_are_the_subnets_doing_not_capacity():
    inst = instance(*(iface(i, n=10) for i in range(4)))  # 4 free slots on each, no adapter slot
    p = plan(NodeSpec(), inst, [subnet("s-1", free=2)], must=8)
    assert p.actions == (AssignAddresses(interface_id="eni-0", subnet_id="s-1", count=2),)
    assert p.shortfall == 6 and p.reason == "no-subnet"


def test_a_cloud_that_cannot_attach_to_running_instances_only_fills_existing_interfaces():
    azure_like = InstanceLimits(adapters=4, ipv4_per_interface=15, hot_attach=False)
    spec = NodeSpec()
    p = plan(spec, instance(iface(0, n=10)), [subnet("s-1")], must=12, limits=azure_like)
    assert p.actions == (AssignAddresses(interface_id="eni-0", subnet_id="s-1", count=4),)
    assert p.shortfall == 8 and p.reason == "at-capacity"
    stats = node_stats(spec, instance(iface(0, n=14)), azure_like, used=14, prefix_delegation=False)
    assert stats.at_capacity and stats.remaining_interfaces == 0


def test_a_prefix_only_provider_is_prefix_delegated_even_with_the_setting_off():
    blocks = InstanceLimits(
        adapters=1, ipv4_per_interface=17, hot_attach=False, addresses=False, prefixes=True
    )
    p = plan(NodeSpec(), instance(iface(0)), [subnet("s-1")], must=20, limits=blocks)
    assert p.actions == (AssignAddresses(interface_id="eni-0", subnet_id="s-1", count=2, prefixes=True),)


def test_subnet_free_addresses_bound_the_plan():
    p = plan(NodeSpec(), instance(iface(0)), [subnet("s-1", free=3)], must=8)
    assert [a.count for a in p.actions] == [3]
    assert p.shortfall == 5 and p.reason == "no-subnet"


def test_a_subnet_with_one_free_address_has_no_room_for_a_new_interface():
    full = instance(*(iface(n, n=14) for n in range(2)))  # both interfaces full, two slots free
    p = plan(NodeSpec(), full, [subnet("s-1", free=1)], must=4)
    assert p.actions == () and p.shortfall == 4 and p.reason == "no-subnet"
    p = plan(NodeSpec(), full, [subnet("s-1", free=4)], must=4)
    assert [(type(a), a.count) for a in p.actions] == [(CreateInterface, 3)]  # its primary takes one


def test_watermark_slack_rides_on_planned_calls_but_never_adds_one():
    inst = instance(iface(0, n=10))
    p = plan(NodeSpec(), inst, [subnet("s-1")], must=4, bonus=10)
    assert p.actions == (AssignAddresses(interface_id="eni-0", subnet_id="s-1", count=4),)
    p = plan(NodeSpec(), instance(iface(0, n=5)), [subnet("s-1")], must=4, bonus=10)
    assert p.actions == (AssignAddresses(interface_id="eni-0", subnet_id="s-1", count=9),)


def test_prefix_delegated_node_gets_prefixes():
    p = plan(
        NodeSpec(),
        instance(iface(0)),
        [subnet("s-1")],
        must=20,
        prefix_delegation=True,
    )
    assert p.actions == (AssignAddresses(interface_id="eni-0", subnet_id="s-1", count=2, prefixes=True),)
    assert p.prefix_delegated


def test_xen_instances_and_nodes_with_plain_addresses_are_not_prefix_delegated():
    p = plan(
        NodeSpec(),
        instance(iface(0)),
        [subnet("s-1")],
        must=3,
        prefix_delegation=True,
        limits=M4_XLARGE,
    )
    assert not p.actions[0].prefixes
    p = plan(
        NodeSpec(),
        instance(iface(0, n=1)),
        [subnet("s-1")],
        must=3,
        prefix_delegation=True,
    )
    assert not p.actions[0].prefixes


def test_prefix_shortage_tries_sibling_subnet_before_plain_addresses():
    subs = [subnet("s-1"), subnet("s-2", free=100)]
    p = plan(
        NodeSpec(),
        instance(iface(0)),
        subs,
        must=20,
        prefix_delegation=True,
        no_prefix_subnets={"s-1"},
    )
    assert p.actions == (
        CreateInterface(subnet_id="s-2", security_groups=("sg-1",), device_index=1, count=2, prefixes=True),
    )
    p = plan(
        NodeSpec(),
        instance(iface(0)),
        subs,
        must=20,
        prefix_delegation=True,
        no_prefix_subnets={"s-1", "s-2"},
    )
    assert p.actions == (
        AssignAddresses(interface_id="eni-0", subnet_id="s-1", count=14),
        CreateInterface(subnet_id="s-1", security_groups=("sg-1",), device_index=1, count=6),
    )
    assert not p.prefix_delegated


def test_planning_is_deterministic():
    inst = instance(iface(0, n=3), iface(2, n=3), iface(1, n=3))
    subs = [subnet("s-1"), subnet("s-2")]
    plans = {plan(NodeSpec(), inst, subs, must=40) for _ in range(5)}
    assert len(plans) == 1


def test_stats_count_pool_and_capacity_of_managed_interfaces_only():
    inst = instance(iface(0, n=4), iface(1, n=6, tags={"skip": "y"}))
    spec = NodeSpec(exclude_interface_tags=Tags({"skip": "y"}))
    stats = node_stats(spec, inst, M5_XLARGE, used=2, prefix_delegation=False)
    assert (stats.available, stats.used, stats.needed, stats.excess) == (4, 2, 6, 0)
    assert stats.capacity == 14 * 3 and stats.remaining_interfaces == 3 and not stats.at_capacity


def test_release_takes_unused_addresses_from_the_interface_with_most_candidates():
    inst = instance(iface(0, n=3), iface(1, n=8))
    in_use = {"10.0.1.10", "10.0.1.11"}
    p = plan_release(NodeSpec(), inst, in_use=in_use, excess=4)
    assert len(p.actions) == 1 and p.actions[0].interface_id == "eni-1"
    assert set(p.actions[0].addresses).isdisjoint(in_use) and len(p.actions[0].addresses) == 4


def test_release_never_touches_used_or_primary_addresses_and_spills_to_next_interface():
    inst = instance(iface(0, n=3), iface(1, n=3))
    in_use = {"10.0.0.10", "10.0.1.10"}
    p = plan_release(NodeSpec(), inst, in_use=in_use, excess=10)
    released = p.candidates()
    assert released == {"10.0.0.11", "10.0.0.12", "10.0.1.11", "10.0.1.12"}
    assert len(p.actions) == 2


def test_release_prefers_whole_unused_prefixes():
    inst = instance(iface(0, prefixes=("10.0.0.16/28", "10.0.0.32/28")))
    p = plan_release(NodeSpec(), inst, in_use={"10.0.0.17"}, excess=20)
    assert p.actions[0].prefixes == ("10.0.0.32/28",) and p.addresses == 16


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(
    used=st.lists(st.integers(0, 14), min_size=1, max_size=4),
    subnets_of=st.lists(st.sampled_from(["s-1", "s-2", "s-3"]), min_size=4, max_size=4),
    free=st.lists(st.integers(-2, 40), min_size=3, max_size=3),
    must=st.integers(1, 60),
    bonus=st.integers(0, 20),
    first_index=st.integers(0, 1),
)
def test_the_one_call_shortcut_plans_what_the_general_path_plans(
    used, subnets_of, free, must, bonus, first_index
):
    from eni_ipam.core.planner import _plan

    inst = instance(*(iface(n, k, sid=subnets_of[n]) for n, k in enumerate(used)))
    subnets = {s.id: s for s in (subnet(f"s-{n + 1}", free=f) for n, f in enumerate(free))}
    spec = NodeSpec(first_interface_index=first_index)
    general = _plan(
        spec, inst, M5_XLARGE, subnets, SG, must=must, bonus=bonus, pd=False, no_prefix_subnets=(), rooms=None
    )
    assert plan_allocation(spec, inst, M5_XLARGE, subnets, SG, must=must, bonus=bonus) == general


# --- IPv6 -----------------------------------------------------------------------------------------

NITRO_V6 = InstanceLimits(
    adapters=4, ipv4_per_interface=15, ipv6_per_interface=15, hypervisor="nitro", ipv6_prefixes=True
)


def v6_subnet(sid, block, free=200):
    return Subnet(id=sid, vpc_id="vpc-1", zone="z1", cidr="10.0.0.0/24", available=free, ipv6_cidr=block)


def test_the_ipv6_prefix_goes_on_the_first_interface_of_the_pool_in_a_subnet_with_a_block():
    subs = {"s-1": subnet("s-1"), "s-2": v6_subnet("s-2", "2600::/64")}
    inst = instance(iface(0), iface(1, sid="s-2"), iface(2, sid="s-2"))
    for family in ("ipv6", "dual"):
        plan = plan_ipv6(NodeSpec(address_family=family), inst, NITRO_V6, subs, SG)
        assert plan == Ipv6Plan(action=AssignIpv6Prefix(interface_id="eni-1", subnet_id="s-2"))
    assert plan_ipv6(NodeSpec(), inst, NITRO_V6, subs, SG) == Ipv6Plan()  # ipv4: nothing


def test_a_node_with_its_prefix_needs_nothing_and_one_without_says_why():
    subs = {"s-1": v6_subnet("s-1", "2600::/64")}
    has = instance(dataclasses.replace(iface(0), ipv6_prefixes=("2600::/80",)))
    assert plan_ipv6(NodeSpec(address_family="ipv6"), has, NITRO_V6, subs, SG) == Ipv6Plan()
    xen = dataclasses.replace(NITRO_V6, hypervisor="xen", ipv6_prefixes=False)
    assert (
        plan_ipv6(NodeSpec(address_family="ipv6"), instance(iface(0)), xen, subs, SG).reason
        == "no-ipv6-prefixes"
    )
    full = instance(*(iface(n) for n in range(4)))
    v4_only = {"s-1": subnet("s-1")}
    assert plan_ipv6(NodeSpec(address_family="dual"), full, NITRO_V6, v4_only, SG).reason == "no-ipv6-subnet"
    assert (
        plan_ipv6(NodeSpec(address_family="dual"), instance(iface(0)), NITRO_V6, v4_only, SG).reason
        == "no-ipv6-subnet"
    )


def test_without_an_interface_in_a_dual_stack_subnet_a_new_one_carries_the_prefix():
    subs = {"s-1": subnet("s-1"), "s-2": v6_subnet("s-2", "2600::/64")}
    spec = NodeSpec(address_family="ipv6", first_interface_index=1)
    plan = plan_ipv6(spec, instance(iface(0, sid="s-2")), NITRO_V6, subs, SG)
    assert plan.action == CreateInterface(
        subnet_id="s-2", security_groups=("sg-1",), device_index=1, count=0, ipv6_prefixes=1
    )
    # A dual node creating an interface for its IPv4 pool anyway: that create carries it.
    dual = NodeSpec(address_family="dual", first_interface_index=1, subnet_ids=("s-2",))
    inst = instance(iface(0, sid="s-1"))
    ipv4 = plan_allocation(dual, inst, NITRO_V6, subs, SG, must=5)
    carried = carrying_ipv6_prefix(ipv4, dual, inst, NITRO_V6, subs)
    assert [a.ipv6_prefixes for a in carried.actions] == [1]
    assert carrying_ipv6_prefix(ipv4, NodeSpec(first_interface_index=1), inst, NITRO_V6, subs) is ipv4


def test_an_ipv6_only_pool_keeps_no_ipv4_watermark():
    inst = instance(iface(0, n=3))
    stats = node_stats(
        NodeSpec(address_family="ipv6", min_allocate=10), inst, NITRO_V6, used=0, prefix_delegation=False
    )
    assert (stats.needed, stats.excess) == (0, 3)
    stats = node_stats(NodeSpec(address_family="dual"), inst, NITRO_V6, used=0, prefix_delegation=False)
    assert stats.needed == 5  # the default watermark of 8, as for ipv4
