"""End to end: the node datapath carries IPv6 pods, proven in an emulated VPC whose router drops, as
EC2's source/destination check does, every packet leaving through an interface that does not own its
source address.

The dual-stack world of ``tests/e2e/vpc_nodes.py`` (``built(dual=True)``): the in-memory cloud's
subnets have their IPv6 /64s, each instance's device-1 interface a /80 of its subnet's
(``AssignIpv6Addresses``); the emulated VPC routes each /80 to its interface and lets only it leave
through it; the nodes have the IPv6 default route EC2's router advertisements give (through
``fe80::1`` on the primary interface); the agents run with ``ipv6: true``, and the pods' network
(``ptp`` with ``eni-ipam-cni``) asks for ``family: dual``. The pods' IPv6 addresses belong to a
secondary interface, so they leave the node correctly only through the datapath's
``from <pod> lookup <table>`` rule and that table's IPv6 default route.

* :func:`test_sandboxes_get_an_address_of_each_family`: containerd (CRI) sandboxes on both nodes
  each get an IPv4 address and an IPv6 address of their node's /80, held by the agent for the
  interface that holds the /80, and the datapath is exactly what the held addresses need (IPv6
  rules and the interface table's IPv6 default route included).
* :func:`test_ipv6_pods_reach_the_other_node_and_the_outside_host_unchanged`: every pod connects
  over IPv6 to the echo service of every pod of the other node and of the outside host; every
  connection comes back, the far end seeing the pod's own IPv6 address (no NAT), and the router
  drops nothing. The same pods' IPv4 still works beside it (the outside host sees the node's
  primary address: SNAT).
* :func:`test_without_its_from_rule_a_pod_is_dropped_by_the_check`: the negative control. n1's
  agent is stopped (SIGSTOP) and one pod's ``from`` rule deleted: that pod's IPv6 connections leave
  through the primary interface and fail, the primary interface's drop counter rises, and the
  node's other pod still passes. Once the agent runs again it puts the rule back and the same
  connections pass with nothing dropped.

Needs root, network namespaces, nftables, busybox-static, containerd, podman and
containernetworking-plugins (``make node-runtimes``); skips otherwise, saying which is missing.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import time
from collections.abc import Iterator

import pytest

from eni_ipam_testkit.vpc import OUTSIDE_IPV4, OUTSIDE_IPV6
from tests.e2e.vpc_nodes import (
    IPV6_DEVICE,
    NODES,
    PRIORITIES,
    PROTOCOL,
    NodeHost,
    Pod,
    World,
    built,
    probe,
    table_of,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SANDBOXES = 2
"""containerd sandboxes per node."""
SETTLE = 30.0
"""Seconds a new pod's IPv6 may take to carry traffic: ``ptp`` puts the pods' gateway on the host's
end of the veth, where duplicate address detection holds it back a second or two."""


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with built(dual=True) as this:
        yield this


@pytest.fixture(scope="module")
def pods(world: World) -> list[Pod]:
    """On each node, containerd sandboxes, each running the echo service."""
    started = [world.start(node, "containerd", echo=True) for node in NODES for _ in range(SANDBOXES)]
    print("pods: " + ", ".join(f"{p} {p.ipv6}" for p in started))
    return started


def block_of(world: World, node: str) -> ipaddress.IPv6Network:
    """The node's /80: the one IPv6 prefix of its device-1 interface, as the cloud holds it."""
    (iface,) = [i for i in world.controller.interfaces(node) if i.device_index == IPV6_DEVICE]
    (prefix,) = iface.ipv6_prefixes
    return ipaddress.IPv6Network(prefix)


def primary(world: World, node: str) -> str:
    return next(i.primary_ip for i in world.controller.interfaces(node) if i.device_index == 0)


def primary_id(world: World, node: str) -> str:
    return next(i.id for i in world.controller.interfaces(node) if i.device_index == 0)


def targets(world: World, pods: list[Pod], pod: Pod) -> dict[str, str]:
    """The IPv6 targets of ``pod``'s connections, with the source each must see: the other node's
    pods and the outside host, all seeing the pod's own IPv6 address."""
    wanted = {p.ipv6: pod.ipv6 for p in pods if p.node != pod.node}
    wanted[OUTSIDE_IPV6] = pod.ipv6
    return wanted


def mismatches(world: World, pods: list[Pod], sources: list[Pod], *, timeout: float) -> list[str]:
    """Every IPv6 connection of ``sources`` that did not come back with the pod's own address."""

    def from_pod(pod: Pod) -> list[str]:
        wanted = targets(world, pods, pod)
        seen = probe(pod.netns, list(wanted), timeout=timeout)
        return [
            f"{pod} {pod.ipv6} -> {target}: seen as {seen.get(target)}, expected {source}"
            for target, source in wanted.items()
            if seen.get(target) is None
            or ipaddress.ip_address(str(seen[target])) != ipaddress.ip_address(source)
        ]

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        return [line for part in pool.map(from_pod, sources) for line in part]


def settled(world: World, pods: list[Pod]) -> list[str]:
    """Wait (up to :data:`SETTLE` seconds) until every pod's IPv6 connections pass; what still fails."""
    deadline = time.perf_counter() + SETTLE
    while True:
        wrong = mismatches(world, pods, pods, timeout=2.0)
        if not wrong or time.perf_counter() > deadline:
            return wrong
        time.sleep(0.5)


def changed(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}


def ipv6_rules(host: NodeHost) -> set[str]:
    """The node's IPv6 rules the datapath made: ``<priority>: <selector> lookup <table>``."""
    out = set()
    for rule in host.ip_json("-6", "rule", "show"):
        if str(rule.get("protocol")) != PROTOCOL:
            continue
        selector = f"from {rule['src']}" if rule.get("src", "all") != "all" else f"to {rule.get('dst')}"
        out.add(f"{rule['priority']}: {selector} lookup {rule.get('table')}")
    return out


# --- the tests ---------------------------------------------------------------------------------------


def test_sandboxes_get_an_address_of_each_family(world: World, pods: list[Pod]) -> None:
    for pod in pods:
        block = block_of(world, pod.node)
        assert ipaddress.IPv4Address(pod.address), pod
        assert pod.ipv6 and ipaddress.IPv6Address(pod.ipv6) in block, f"{pod}: {pod.ipv6!r} is not of {block}"
        held = world.nodes[pod.node].allocations()
        eth1 = next(i for i in world.controller.interfaces(pod.node) if i.device_index == IPV6_DEVICE)
        for address in (pod.address, pod.ipv6):
            assert held.get(address, {}).get("owner") == pod.owner, f"{pod}: the agent holds {held}"
        assert held[pod.ipv6]["interfaceID"] == eth1.id, held[pod.ipv6]
    assert world.exact() == {}, "the datapath is not what the held addresses (of both families) need"
    for node, host in world.nodes.items():
        eth1 = next(i for i in world.controller.interfaces(node) if i.device_index == IPV6_DEVICE)
        table = table_of(eth1)
        routes = host.ip_json("-6", "route", "show", "table", str(table))
        assert [(r.get("dst"), r.get("gateway"), r.get("dev")) for r in routes] == [
            ("default", "fe80::1", world.vpc.device(eth1.id))
        ], f"{node}: table {table} holds {routes}"
        mine = [p for p in pods if p.node == node]
        assert ipv6_rules(host) == {
            *(f"{PRIORITIES['to']}: to {p.ipv6} lookup main" for p in mine),
            *(f"{PRIORITIES['from']}: from {p.ipv6} lookup {table}" for p in mine),
        }


def test_ipv6_pods_reach_the_other_node_and_the_outside_host_unchanged(world: World, pods: list[Pod]) -> None:
    drops, outside = world.vpc.drops(), world.vpc.outside_sources()
    began = time.perf_counter()
    early = settled(world, pods)
    print(f"IPv6 connections passing after {time.perf_counter() - began:.1f}s")
    assert not early, f"not within {SETTLE:g}s:\n" + "\n".join(early)
    began = time.perf_counter()
    wrong = mismatches(world, pods, pods, timeout=2.0)
    count = sum(len(targets(world, pods, p)) for p in pods)
    print(f"{count} IPv6 connections in {time.perf_counter() - began:.1f}s")
    assert not wrong, "over IPv6:\n" + "\n".join(wrong)
    rose = changed(drops, world.vpc.drops())
    assert not rose, f"the source/destination check dropped packets: {rose}"
    seen_outside = set(changed(outside, world.vpc.outside_sources()))
    assert {p.ipv6 for p in pods} <= seen_outside, f"the outside host saw {sorted(seen_outside)}"

    # IPv4 beside it: the other node's pods see the pod's address, the outside host its node's.
    for pod in pods:
        wanted = {p.address: pod.address for p in pods if p.node != pod.node}
        wanted[OUTSIDE_IPV4] = primary(world, pod.node)
        seen = probe(pod.netns, list(wanted), timeout=2.0)
        assert seen == wanted, f"{pod} over IPv4: saw {seen}, expected {wanted}"
    assert not changed(drops, world.vpc.drops()), changed(drops, world.vpc.drops())


def test_without_its_from_rule_a_pod_is_dropped_by_the_check(world: World, pods: list[Pod]) -> None:
    host = world.nodes["n1"]
    victim, bystander = [p for p in pods if p.node == "n1"][:2]
    eth1 = next(i for i in world.controller.interfaces("n1") if i.device_index == IPV6_DEVICE)
    rule = f"{PRIORITIES['from']}: from {victim.ipv6} lookup {table_of(eth1)}"
    assert not settled(world, pods), "the pods' IPv6 does not pass to begin with"
    drops = world.vpc.drops()
    host.pause_agent(True)
    try:
        assert rule in ipv6_rules(host)
        host.ip_batch(
            [f"rule del priority {PRIORITIES['from']} from {victim.ipv6} table {table_of(eth1)}"], family="-6"
        )
        assert rule not in ipv6_rules(host)
        seen = probe(victim.netns, list(targets(world, pods, victim)), timeout=1.0)
        rose = changed(drops, world.vpc.drops())
        passed = mismatches(world, pods, [bystander], timeout=2.0)
    finally:
        host.pause_agent(False)
    reached = {target: source for target, source in seen.items() if source is not None}
    assert seen and not reached, f"without its rule, {victim} {victim.ipv6} still reached {reached}"
    assert set(rose) == {primary_id(world, "n1")} and rose[primary_id(world, "n1")] > 0, (
        f"the check must drop on n1's primary interface alone: it dropped {rose}"
    )
    assert not passed, "the other pod of n1, whose rule stayed:\n" + "\n".join(passed)
    print(f"without {victim.ipv6}'s rule: {len(seen)} connections failed, dropped {rose}")

    deadline = time.perf_counter() + 15
    while rule not in ipv6_rules(host):
        assert time.perf_counter() < deadline, f"the agent did not put back {rule!r} within 15 s"
        time.sleep(0.2)
    assert world.exact() == {}, "the agent did not put back exactly what was deleted"
    drops = world.vpc.drops()
    again = mismatches(world, pods, pods, timeout=2.0)
    assert not again, "after the agent put the rule back:\n" + "\n".join(again)
    assert not changed(drops, world.vpc.drops()), changed(drops, world.vpc.drops())
