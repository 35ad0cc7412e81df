"""Prefixes placed where they fit: the planner skips subnets whose counted free /28 blocks are too
few, names single addresses inside broken blocks, and plans prefixes for a returning node."""

import dataclasses

from eni_ipam.core.blocks import SubnetBlocks
from eni_ipam.core.model import AssignAddresses, CreateInterface, Interface
from eni_ipam.core.planner import plan_allocation
from eni_ipam.core.spec import NodeSpec
from tests.core.test_planner import M5_XLARGE, SG, iface, instance, subnet


def counted(sid, free_blocks, free=200, **kw):
    return dataclasses.replace(subnet(sid, free, **kw), free_blocks=free_blocks)


def plan(inst, subnets, must, **kw):
    return plan_allocation(
        NodeSpec(), inst, M5_XLARGE, {s.id: s for s in subnets}, SG, must=must, prefix_delegation=True, **kw
    )


def test_without_the_count_a_fragmented_subnet_is_asked_for_prefixes():
    p = plan(instance(iface(0)), [counted("s-1", 0)], must=20)
    assert p.actions == (AssignAddresses(interface_id="eni-0", subnet_id="s-1", count=2, prefixes=True),)


def test_with_the_count_an_existing_interface_in_a_subnet_without_free_blocks_is_not_asked():
    # s-1 has 200 free addresses and no whole /28: the new interface goes to s-2, which has blocks.
    p = plan(instance(iface(0)), [counted("s-1", 0), counted("s-2", 5, free=100)], must=20, placement=True)
    assert [type(a) for a in p.actions] == [CreateInterface]
    assert (p.actions[0].subnet_id, p.actions[0].count, p.actions[0].prefixes) == ("s-2", 2, True)
    assert p.prefix_delegated


def test_the_count_bounds_how_many_prefixes_a_subnet_takes():
    p = plan(instance(iface(0)), [counted("s-1", 1), counted("s-2", 4, free=100)], must=40, placement=True)
    taken = {a.subnet_id: a.count for a in p.actions}
    assert taken == {"s-1": 1, "s-2": 2}
    assert all(a.prefixes for a in p.actions)


def test_no_counted_block_anywhere_falls_back_to_single_addresses_before_the_cloud_refuses():
    p = plan(instance(iface(0)), [counted("s-1", 0)], must=8, placement=True)
    assert p.actions == (AssignAddresses(interface_id="eni-0", subnet_id="s-1", count=8),)
    assert not p.prefix_delegated


def test_an_uncounted_subnet_is_not_held_back():
    p = plan(instance(iface(0)), [counted("s-1", -1)], must=20, placement=True)
    assert p.actions == (AssignAddresses(interface_id="eni-0", subnet_id="s-1", count=2, prefixes=True),)


def test_no_prefix_subnets_stays_the_fallback_for_what_the_count_cannot_see():
    p = plan(
        instance(iface(0)),
        [counted("s-1", 9), counted("s-2", 5, free=100)],
        must=20,
        placement=True,
        no_prefix_subnets={"s-1"},
    )
    assert [(a.subnet_id, a.prefixes) for a in p.actions] == [("s-2", True)]


def blocks_of(sid_cidr, *used):
    blocks = SubnetBlocks(sid_cidr)
    blocks.add(Interface(id="eni-x", device_index=0, subnet_id="s-1", addresses=used))
    return blocks


def test_dense_placement_names_addresses_inside_broken_blocks():
    blocks = blocks_of("10.0.0.0/24", "10.0.0.33", "10.0.0.34")
    inst = instance(iface(0, n=2))  # a node with single addresses: not prefix delegated
    p = plan_allocation(
        NodeSpec(), inst, M5_XLARGE, {"s-1": subnet("s-1")}, SG, must=3, dense={"s-1": blocks}
    )
    (action,) = p.actions
    assert isinstance(action, AssignAddresses)
    assert action.chosen == ("10.0.0.32", "10.0.0.35", "10.0.0.36")
    assert action.count == 3 and not action.prefixes


def test_dense_placement_leaves_prefixes_and_uncounted_subnets_to_the_cloud():
    inst = instance(iface(0, n=2))
    p = plan_allocation(NodeSpec(), inst, M5_XLARGE, {"s-1": subnet("s-1")}, SG, must=3, dense={})
    assert p.actions[0].chosen == ()
    prefixed = plan(
        instance(iface(0)), [counted("s-1", 3)], must=20, dense={"s-1": SubnetBlocks("10.0.0.0/24")}
    )
    assert prefixed.actions[0].prefixes and prefixed.actions[0].chosen == ()


def test_a_returning_node_is_planned_prefixes_though_it_holds_single_addresses():
    inst = instance(iface(0, n=3))
    assert not plan(inst, [counted("s-1", 4)], must=16, placement=True).actions[0].prefixes
    p = plan(inst, [counted("s-1", 4)], must=16, placement=True, returning=True)
    assert p.actions == (AssignAddresses(interface_id="eni-0", subnet_id="s-1", count=1, prefixes=True),)
