"""The emulated VPC (``eni_ipam_testkit.vpc``) enforces what EC2 enforces, and leaves nothing behind.

A node configured here by hand as a correct datapath would (a route table per secondary interface,
``from <pod>`` rules, SNAT to the primary address; pods standing in as namespaces with a veth pair)
passes the source/destination check with no drop. The same node without the rules is dropped by the
check: the drop counter rises *and* the connections fail, and with the check switched off for that
one interface the very same traffic gets through, so the failure is the check's and nothing else's.

Needs root, ``ip``, ``nft`` and busybox; skips otherwise, saying which is missing. The description
tests (``VpcSpec``) need none of them.
"""

from __future__ import annotations

import gc
import ipaddress
import json
import os
import re
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from eni_ipam.core.clock import LoopClock
from eni_ipam_testkit.vpc import (
    OUTSIDE_IPV6,
    InterfaceSpec,
    NodeSpec,
    SubnetSpec,
    VpcError,
    VpcSpec,
    derived_mac,
    missing,
    sweep_stale,
)
from eni_ipam_testkit.vpc.harness import EmulatedVpc
from providers.sim import SimCloud

VPC_CIDR = "10.0.0.0/16"
SUBNETS = (
    SubnetSpec(id="subnet-a", cidr="10.0.1.0/24"),
    SubnetSpec(id="subnet-b", cidr="10.0.2.0/24"),
    SubnetSpec(id="subnet-c", cidr="10.0.3.0/24"),
)


def iface(id: str, index: int, subnet: str, primary: str, *addresses: str) -> InterfaceSpec:
    return InterfaceSpec(id=id, device_index=index, subnet=subnet, primary_ip=primary, addresses=addresses)


# Two nodes of three interfaces, one per subnet; n2's interface in subnet-b holds a /28 prefix.
SPEC = VpcSpec(
    cidrs=(VPC_CIDR,),
    subnets=SUBNETS,
    nodes=(
        NodeSpec(
            name="n1",
            interfaces=(
                iface("eni-n1-0", 0, "subnet-a", "10.0.1.10", "10.0.1.20", "10.0.1.21"),
                iface("eni-n1-1", 1, "subnet-b", "10.0.2.10", "10.0.2.20", "10.0.2.21"),
                iface("eni-n1-2", 2, "subnet-c", "10.0.3.10", "10.0.3.20"),
            ),
        ),
        NodeSpec(
            name="n2",
            interfaces=(
                iface("eni-n2-0", 0, "subnet-a", "10.0.1.11", "10.0.1.30"),
                iface("eni-n2-1", 1, "subnet-b", "10.0.2.11", "10.0.2.48/28"),
                iface("eni-n2-2", 2, "subnet-c", "10.0.3.11", "10.0.3.30", "10.0.3.31"),
            ),
        ),
    ),
)
ALL_ZERO = {i.id: 0 for _, i in SPEC.interfaces()}


@pytest.fixture(scope="module")
def netns_ok() -> None:
    """Skip, saying why, where an emulated VPC cannot be built."""
    reason = missing()
    if reason is None:
        probe = f"enivpc-{os.getpid()}-000000-probe"
        added = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
        if added.returncode != 0:
            reason = f"ip netns add failed: {added.stderr.strip()}"
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture
def vpc(netns_ok: None) -> Iterator[EmulatedVpc]:
    with EmulatedVpc(SPEC) as built:
        yield built


# -- a datapath configured by hand, as a correct one would be -------------------------------------


def device_by_mac(vpc: EmulatedVpc, node: str, mac: str) -> str:
    """The node's device with ``mac``: how a datapath finds an interface (not by name)."""
    links = json.loads(vpc.run(vpc.node_ns(node), "ip", "-j", "link", "show").stdout)
    return next(str(link["ifname"]) for link in links if link.get("address") == mac)


def add_pod(vpc: EmulatedVpc, node: str, address: str) -> str:
    """A pod stand-in: a namespace with ``address`` on a veth pair to the node (host route to it,
    default route to a link-local gateway on the node's end). Returns the pod's namespace."""
    label = address.replace(".", "-")
    pod = vpc.add_namespace(f"pod-{label}")
    host = f"v{label.split('-', 2)[-1].replace('-', '')}"
    vpc.run(
        vpc.node_ns(node), "ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", pod
    )
    vpc.run(
        pod,
        "ip",
        "-batch",
        "-",
        input=(
            f"addr add {address}/32 dev eth0\nlink set eth0 up\n"
            "route add 169.254.1.1 dev eth0 scope link\nroute add default via 169.254.1.1 dev eth0\n"
        ),
    )
    vpc.run(
        vpc.node_ns(node),
        "ip",
        "-batch",
        "-",
        input=f"addr add 169.254.1.1/32 dev {host}\nlink set {host} up\nroute add {address}/32 dev {host}\n",
    )
    return pod


def configure_node(vpc: EmulatedVpc, node: str, pods: dict[str, str], *, rules: bool = True) -> None:
    """What a correct datapath does on ``node`` for ``pods`` (address → interface id).

    Each secondary interface: up, with its primary address (but not its subnet's route in the main
    table), a table of its own (its subnet's route, a default route through its router), and loose
    reverse-path filtering (which still drops every packet arriving on a device without an IPv4
    address). Each pod: a ``to <pod>`` rule into main; with ``rules``, a ``from <pod>`` rule into its
    interface's table for the VPC's CIDR, and SNAT to the primary address of traffic leaving the
    VPC. Without ``rules``, what bridge or ptp alone leave: every pod's packets go out of the
    primary interface.
    """
    ns = vpc.node_ns(node)
    spec = vpc.spec.node(node)
    primary = spec.primary()
    lines = []
    for interface in spec.interfaces:
        if interface.device_index == 0:
            continue
        device = device_by_mac(vpc, node, interface.mac_address)
        subnet = vpc.spec.subnet(interface.subnet)
        table = 100 + interface.device_index
        lines += [
            f"addr replace {interface.primary_ip}/{subnet.network.prefixlen} dev {device} noprefixroute",
            f"link set {device} up",
            f"route replace {subnet.cidr} dev {device} scope link table {table}",
            f"route replace default via {subnet.router} dev {device} table {table}",
        ]
        vpc.run(ns, "sysctl", "-qw", f"net.ipv4.conf.{device}.rp_filter=2")
    for address, interface_id in pods.items():
        lines.append(f"rule add to {address} lookup main priority 512")
        index = next(i.device_index for i in spec.interfaces if i.id == interface_id)
        if rules and index != 0:
            lines.append(f"rule add from {address} to {VPC_CIDR} lookup {100 + index} priority 1536")
    vpc.run(ns, "ip", "-batch", "-", input="\n".join(lines) + "\n")
    if rules:
        primary_device = device_by_mac(vpc, node, primary.mac_address)
        vpc.run(
            ns,
            "nft",
            "-f",
            "-",
            input=(
                "table ip pod_nat {\n chain post {\n  type nat hook postrouting priority srcnat;\n"
                f'  oifname "{primary_device}" ip daddr != {VPC_CIDR} snat to {primary.primary_ip}\n }}\n}}\n'
            ),
        )


def pods_of_both_nodes(vpc: EmulatedVpc, *, n1_rules: bool) -> tuple[dict[str, str], dict[str, str]]:
    """Pods on n1 on an address of each of its interfaces, pods on n2 on a secondary address and a
    prefix address (each running the echo service); returns {address: namespace} per node."""
    n1 = {"10.0.1.20": "eni-n1-0", "10.0.2.20": "eni-n1-1", "10.0.3.20": "eni-n1-2"}
    n2 = {"10.0.3.30": "eni-n2-2", "10.0.2.50": "eni-n2-1"}
    n1_pods = {address: add_pod(vpc, "n1", address) for address in n1}
    n2_pods = {address: add_pod(vpc, "n2", address) for address in n2}
    configure_node(vpc, "n1", n1, rules=n1_rules)
    configure_node(vpc, "n2", n2)
    for pod in n2_pods.values():
        vpc.serve_echo(pod)
    return n1_pods, n2_pods


# -- the description ------------------------------------------------------------------------------


async def test_a_description_is_read_from_the_in_memory_cloud() -> None:
    cloud = SimCloud(LoopClock())
    cloud.add_vpc("vpc-1", "10.0.0.0/16")
    cloud.add_subnet("subnet-a", vpc="vpc-1", zone="z1", cidr="10.0.1.0/24")
    cloud.add_subnet("subnet-b", vpc="vpc-1", zone="z1", cidr="10.0.2.0/24")
    cloud.add_security_group("sg-1", vpc="vpc-1")
    cloud.add_instance(
        "i-1",
        type="m5.large",
        subnet="subnet-a",
        security_groups=["sg-1"],
        interfaces=[{"index": 0, "secondary_ips": 2}, {"index": 1, "subnet": "subnet-b", "prefixes": 1}],
    )
    spec = VpcSpec.from_sim(cloud, {"n1": "i-1"})
    assert spec.cidrs == ("10.0.0.0/16",)
    assert [(s.id, s.cidr, s.router) for s in spec.subnets] == [
        ("subnet-a", "10.0.1.0/24", "10.0.1.1"),
        ("subnet-b", "10.0.2.0/24", "10.0.2.1"),
    ]
    view = cloud.instance_view("i-1")
    (node,) = spec.nodes
    assert node.name == "n1"
    assert [(i.id, i.device_index, i.subnet, i.primary_ip) for i in node.interfaces] == [
        (i.id, i.device_index, i.subnet_id, i.primary_ip) for i in view.interfaces
    ]
    assert node.interfaces[0].addresses == tuple(view.interfaces[0].addresses)
    assert node.interfaces[1].addresses == tuple(view.interfaces[1].prefixes)
    # The cloud's MAC, as its model reports it (the device's, on an instance).
    assert [i.mac_address for i in node.interfaces] == [i.mac_address for i in view.interfaces]
    assert all(i.mac_address for i in node.interfaces)
    # An interface described without one gets one derived from its id: local, unicast, stable.
    bare = iface("eni-bare", 1, "subnet-b", "10.0.2.10")
    assert bare.mac_address == derived_mac("eni-bare") and bare.mac_address.startswith("02:")
    given = VpcSpec.from_sim(cloud, ["i-1"], macs={view.interfaces[1].id: "0A:1B:2C:3D:4E:5F"})
    assert given.nodes[0].name == "i-1"
    assert given.nodes[0].interfaces[1].mac_address == "0a:1b:2c:3d:4e:5f"
    assert cloud.calls == {}, "reading the cloud makes no EC2 call"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"addresses": ("10.0.2.99",)}, "outside subnet subnet-a"),
        ({"addresses": ("10.0.1.1",)}, "router's address"),
        ({"addresses": ("10.0.1.11",)}, "overlaps 10.0.1.11/32 of eni-n1-0"),
        ({"addresses": ("10.0.1.16/28",)}, "overlaps"),
        ({"device_index": 1}, "exactly one interface at device index 0"),
        ({"mac": "03:00:00:00:00:01"}, "not a unicast MAC"),
        ({"subnet": "subnet-x"}, "unknown subnet"),
    ],
)
def test_a_description_ec2_could_not_hold_is_refused(change: dict[str, object], message: str) -> None:
    n1 = SPEC.node("n1")
    changed = InterfaceSpec(**{**_fields(n1.interfaces[0]), **change})
    nodes = (NodeSpec(name="n1", interfaces=(changed, *n1.interfaces[1:])), SPEC.node("n2"))
    with pytest.raises(ValueError, match=message):
        VpcSpec(cidrs=SPEC.cidrs, subnets=SPEC.subnets, nodes=nodes)


def _fields(spec: InterfaceSpec) -> dict[str, object]:
    return {
        name: getattr(spec, name)
        for name in ("id", "device_index", "subnet", "primary_ip", "addresses", "mac")
    }


# -- the fabric -----------------------------------------------------------------------------------


def test_nodes_see_their_interfaces_as_ec2_presents_them(vpc: EmulatedVpc) -> None:
    for node in SPEC.nodes:
        ns = vpc.node_ns(node.name)
        links = {
            link["ifname"]: link
            for link in json.loads(vpc.run(ns, "ip", "-j", "addr", "show").stdout)
            if link["ifname"] != "lo"
        }
        by_index = {i.device_index: vpc.device(i.id) for i in node.interfaces}
        assert sorted(links) == ["ens5", "ens6", "ens7"]
        assert [by_index[i] for i in sorted(by_index)] != ["ens5", "ens6", "ens7"], "names follow no index"
        for interface in node.interfaces:
            link = links[vpc.device(interface.id)]
            assert link["address"] == interface.mac_address
            assert link["mtu"] == 9001
            ipv4 = [a["local"] for a in link["addr_info"] if a["family"] == "inet"]
            if interface.device_index == 0:
                assert "UP" in link["flags"] and ipv4 == [interface.primary_ip]
            else:
                assert "UP" not in link["flags"] and ipv4 == []
        routes = json.loads(vpc.run(ns, "ip", "-j", "route", "show", "default").stdout)
        assert [(r["gateway"], r["dev"]) for r in routes] == [("10.0.1.1", vpc.device(node.primary().id))]
    n1 = vpc.node_ns("n1")
    assert vpc.ping(n1, "10.0.1.11"), "node to node, primary to primary"
    assert vpc.ping(n1, vpc.outside_ip)
    assert vpc.observed_source(n1) == "10.0.1.10"
    # An address nobody holds: the router answers no ARP for it, so nothing leaves the node.
    assert not vpc.ping(n1, "10.0.1.99")
    neighbours = vpc.run(n1, "ip", "neigh", "show", "10.0.1.99").stdout
    assert "lladdr" not in neighbours
    assert vpc.drops() == ALL_ZERO
    assert vpc.outside_sources().keys() == {"10.0.1.10"}


def test_a_correct_datapath_passes_the_check(vpc: EmulatedVpc) -> None:
    n1_pods, n2_pods = pods_of_both_nodes(vpc, n1_rules=True)
    for source, pod in n1_pods.items():
        for target in n2_pods:
            assert vpc.connect(pod, target) == source, f"{source} -> {target}"
        assert vpc.observed_source(pod) == "10.0.1.10", f"{source} -> outside, SNATed"
    for target in n2_pods:
        assert vpc.ping(vpc.node_ns("n1"), target), f"node n1 -> pod {target}"
    assert vpc.drops() == ALL_ZERO
    assert vpc.outside_sources().keys() == {"10.0.1.10"}


def test_without_the_rules_the_check_drops_and_the_connection_fails(vpc: EmulatedVpc) -> None:
    n1_pods, _ = pods_of_both_nodes(vpc, n1_rules=False)
    pod = n1_pods["10.0.2.20"]  # an address of eni-n1-1, whose packets now leave through eni-n1-0

    # Probes expected to fail wait half a second (the default second is for ones expected to pass).
    assert vpc.connect(pod, "10.0.3.30", timeout=0.5) is None
    after_pod = vpc.drops()
    assert after_pod["eni-n1-0"] > 0
    assert vpc.observed_source(pod, timeout=0.5) is None
    after_outside = vpc.drops()
    assert after_outside["eni-n1-0"] > after_pod["eni-n1-0"]
    assert {k: v for k, v in after_outside.items() if k != "eni-n1-0"} == {
        k: 0 for k in ALL_ZERO if k != "eni-n1-0"
    }
    assert vpc.outside_sources() == {}

    # The control of the control: with the check off for eni-n1-0 alone, the same traffic passes
    # (the answer comes back through eni-n1-1, which owns the address), unchanged by any NAT.
    vpc.set_source_dest_check("eni-n1-0", False)
    assert vpc.connect(pod, "10.0.3.30") == "10.0.2.20"
    assert vpc.observed_source(pod) == "10.0.2.20"
    assert vpc.drops() == after_outside
    vpc.set_source_dest_check("eni-n1-0", True)
    assert vpc.connect(pod, "10.0.3.30", timeout=0.5) is None
    assert vpc.drops()["eni-n1-0"] > after_outside["eni-n1-0"]


async def test_the_fabric_follows_the_cloud(netns_ok: None) -> None:
    cloud = SimCloud(LoopClock())
    cloud.add_vpc("vpc-1", VPC_CIDR)
    for subnet in SUBNETS[:2]:
        cloud.add_subnet(subnet.id, vpc="vpc-1", zone="z1", cidr=subnet.cidr)
    cloud.add_security_group("sg-1", vpc="vpc-1")
    one = [{"index": 0, "secondary_ips": 1}, {"index": 1, "subnet": "subnet-b", "secondary_ips": 1}]
    cloud.add_instance("i-1", type="m5.large", subnet="subnet-a", security_groups=["sg-1"], interfaces=one)
    cloud.add_instance("i-2", type="m5.large", subnet="subnet-a", security_groups=["sg-1"])
    nodes = {"n1": "i-1", "n2": "i-2"}
    with EmulatedVpc(VpcSpec.from_sim(cloud, nodes)) as vpc:
        eth1 = cloud.instance_view("i-1").interfaces[1]
        (first,) = eth1.addresses
        configure_node(vpc, "n1", {first: eth1.id})
        pod = add_pod(vpc, "n1", first)
        n2_primary = cloud.instance_view("i-2").interfaces[0].primary_ip
        assert vpc.ping(pod, n2_primary)

        (second,) = await cloud.assign_private_ip_addresses(interface_id=eth1.id, secondary_count=1)
        configure_node(vpc, "n1", {second: eth1.id})
        late = add_pod(vpc, "n1", second)
        assert not vpc.ping(late, n2_primary), "the cloud assigned it; the fabric does not know it yet"
        assert vpc.drops()[eth1.id] == 1
        vpc.update(VpcSpec.from_sim(cloud, nodes))
        assert vpc.ping(late, n2_primary)

        new = await cloud.create_network_interface(subnet_id="subnet-b", groups=["sg-1"], secondary_count=2)
        attachment = await cloud.attach_network_interface(
            interface_id=new.id, instance_id="i-2", device_index=1
        )
        vpc.update(VpcSpec.from_sim(cloud, nodes))
        (attached,) = [i for i in cloud.instance_view("i-2").interfaces if i.id == new.id]
        device = device_by_mac(vpc, "n2", attached.mac_address)
        assert device == vpc.device(new.id) and device not in ("ens5",)
        shown = json.loads(vpc.run(vpc.node_ns("n2"), "ip", "-j", "link", "show", device).stdout)
        assert "UP" not in shown[0]["flags"]

        await cloud.detach_network_interface(attachment_id=attachment)
        await cloud.unassign_private_ip_addresses(interface_id=eth1.id, addresses=[second])
        vpc.update(VpcSpec.from_sim(cloud, nodes))
        assert device not in vpc.run(vpc.node_ns("n2"), "ip", "-br", "link").stdout
        assert not vpc.ping(late, n2_primary)
        assert vpc.ping(pod, n2_primary)
        assert vpc.drops() == {i.id: 0 for i in cloud.instance_view("i-2").interfaces} | {
            new.id: 0,
            cloud.instance_view("i-1").interfaces[0].id: 0,
            eth1.id: 2,
        }
        with pytest.raises(ValueError, match="primary"):
            vpc.detach(cloud.instance_view("i-1").interfaces[0].id)
        with pytest.raises(ValueError, match="overlaps"):
            vpc.assign(eth1.id, [first])


def test_ipv6_goes_through_the_router_link_local_address_and_is_checked_too(netns_ok: None) -> None:
    subnet = SubnetSpec(id="subnet-a", cidr="10.0.1.0/24", ipv6_cidr="2600:1f14:0:1::/64")
    nodes = tuple(
        NodeSpec(
            name=f"n{k}",
            interfaces=(
                iface(
                    f"eni-n{k}-0",
                    0,
                    "subnet-a",
                    f"10.0.1.1{k}",
                    f"2600:1f14:0:1::{k}0",
                    f"2600:1f14:0:1:{k}::/80",
                ),
            ),
        )
        for k in (1, 2)
    )
    with EmulatedVpc(VpcSpec(cidrs=(VPC_CIDR,), subnets=(subnet,), nodes=nodes)) as vpc:
        for k in (1, 2):
            ns, device = vpc.node_ns(f"n{k}"), vpc.device(f"eni-n{k}-0")
            # A node's own address and a pod's address of its /80 (on lo: a stand-in for a pod),
            # both routed through the router's link-local address (no on-link /64: the router
            # answers neighbour solicitations for single addresses only).
            lines = (
                f"addr add 2600:1f14:0:1::{k}0/128 dev {device} nodad\n"
                f"addr add 2600:1f14:0:1:{k}::5/128 dev lo nodad\n"
                f"addr add 2600:1f14:0:1:{k}::9/128 dev lo nodad\n"
                f"route add default via fe80::1 dev {device}\n"
            )
            vpc.run(ns, "ip", "-batch", "-", input=lines)
        n1 = vpc.node_ns("n1")
        assert vpc.ping(n1, "2600:1f14:0:1::20")
        assert vpc.ping(n1, "2600:1f14:0:1:2::5", source="2600:1f14:0:1:1::5"), "prefix to prefix"
        assert vpc.drops() == {"eni-n1-0": 0, "eni-n2-0": 0}
        vpc.unassign("eni-n1-0", ["2600:1f14:0:1:1::/80"])
        vpc.assign("eni-n1-0", ["2600:1f14:0:1:1::9"])
        assert not vpc.ping(n1, "2600:1f14:0:1::20", source="2600:1f14:0:1:1::5")
        assert vpc.drops() == {"eni-n1-0": 1, "eni-n2-0": 0}
        assert vpc.ping(n1, "2600:1f14:0:1::20", source="2600:1f14:0:1:1::9")


async def test_ipv6_blocks_and_prefixes_are_read_from_the_in_memory_cloud() -> None:
    cloud = SimCloud(LoopClock())
    cloud.add_vpc("vpc-1", VPC_CIDR)
    cloud.add_subnet("subnet-a", vpc="vpc-1", zone="z1", cidr="10.0.1.0/24", ipv6_cidr="2600:1f14:0:1::/64")
    cloud.add_subnet("subnet-b", vpc="vpc-1", zone="z1", cidr="10.0.2.0/24")
    cloud.add_security_group("sg-1", vpc="vpc-1")
    cloud.add_instance("i-1", type="m5.large", subnet="subnet-a", security_groups=["sg-1"])
    eth0 = cloud.instance_view("i-1").interfaces[0]
    (prefix,) = await cloud.assign_ipv6_addresses(interface_id=eth0.id, prefix_count=1)
    calls = dict(cloud.calls)
    spec = VpcSpec.from_sim(cloud, {"n1": "i-1"})
    assert [(s.id, s.ipv6_cidr) for s in spec.subnets] == [
        ("subnet-a", "2600:1f14:0:1::/64"),
        ("subnet-b", ""),
    ]
    assert prefix == "2600:1f14:0:1::/80", "the lowest /80 of the block"
    assert spec.node("n1").primary().addresses == (prefix,)
    assert cloud.calls == calls, "reading the cloud makes no EC2 call"
    with pytest.raises(ValueError, match="outside host"):
        VpcSpec(
            cidrs=(VPC_CIDR,),
            subnets=(SubnetSpec(id="subnet-x", cidr="10.0.9.0/24", ipv6_cidr="2001:db8::/64"),),
            nodes=(),
        )


async def test_ipv6_pods_reach_the_outside_host_through_the_advertised_route(netns_ok: None) -> None:
    """A dual-stack VPC read from the cloud: each node's primary interface holds a /80 of its subnet's
    /64. With no IPv6 route configured on the nodes but the one EC2's router advertisements give, an
    address of a node's /80 reaches the other node's /80 and the outside host's IPv6 address, seen
    there as itself (no NAT); an address outside the /80 is dropped by the check."""
    cloud = SimCloud(LoopClock())
    cloud.add_vpc("vpc-1", VPC_CIDR)
    cloud.add_subnet("subnet-a", vpc="vpc-1", zone="z1", cidr="10.0.1.0/24", ipv6_cidr="2600:1f14:0:1::/64")
    cloud.add_security_group("sg-1", vpc="vpc-1")
    nodes = {"n1": "i-1", "n2": "i-2"}
    prefixes = {}
    for node, instance in nodes.items():
        cloud.add_instance(instance, type="m5.large", subnet="subnet-a", security_groups=["sg-1"])
        eth0 = cloud.instance_view(instance).interfaces[0]
        (prefixes[node],) = await cloud.assign_ipv6_addresses(interface_id=eth0.id, prefix_count=1)
    pod = {n: str(ipaddress.IPv6Network(p).network_address + 5) for n, p in prefixes.items()}
    with EmulatedVpc(VpcSpec.from_sim(cloud, nodes)) as vpc:
        assert vpc.outside_ipv6 == OUTSIDE_IPV6
        for node in nodes:
            ns, device = vpc.node_ns(node), vpc.device(cloud.instance_view(nodes[node]).interfaces[0].id)
            routes = json.loads(vpc.run(ns, "ip", "-j", "-6", "route", "show", "default").stdout)
            assert [(r["gateway"], r["dev"], r["protocol"]) for r in routes] == [("fe80::1", device, "ra")]
            vpc.run(ns, "ip", "addr", "add", f"{pod[node]}/128", "dev", "lo", "nodad")
        vpc.serve_echo(vpc.node_ns("n2"))
        n1 = vpc.node_ns("n1")
        assert vpc.connect(n1, pod["n2"], source=pod["n1"]) == pod["n1"], "/80 to /80 across nodes"
        assert vpc.observed_source(n1, source=pod["n1"], family=6) == pod["n1"], "no NAT on the way out"
        assert vpc.ping(n1, OUTSIDE_IPV6, source=pod["n1"])
        assert pod["n1"] in vpc.outside_sources()
        assert set(vpc.drops().values()) == {0}
        stray = str(ipaddress.IPv6Network(prefixes["n2"]).network_address + 7)  # n2's, not n1's
        vpc.run(n1, "ip", "addr", "add", f"{stray}/128", "dev", "lo", "nodad")
        assert vpc.observed_source(n1, source=stray, timeout=0.5, family=6) is None
        assert sum(vpc.drops().values()) > 0


def test_without_ipv6_blocks_the_nodes_and_the_outside_host_have_no_ipv6(vpc: EmulatedVpc) -> None:
    assert vpc.outside_ipv6 is None
    for node in SPEC.nodes:
        routes = vpc.run(vpc.node_ns(node.name), "ip", "-6", "route", "show", "default").stdout
        assert routes.strip() == ""
    with pytest.raises(ValueError, match="no IPv6"):
        vpc.observed_source(vpc.node_ns("n1"), family=6)


def test_router_advertisements_may_be_left_out(netns_ok: None) -> None:
    subnet = SubnetSpec(id="subnet-a", cidr="10.0.1.0/24", ipv6_cidr="2600:1f14:0:1::/64")
    node = NodeSpec(name="n1", interfaces=(iface("eni-n1-0", 0, "subnet-a", "10.0.1.10"),))
    spec = VpcSpec(cidrs=(VPC_CIDR,), subnets=(subnet,), nodes=(node,))
    with EmulatedVpc(spec, router_advertisements=False) as vpc:
        routes = vpc.run(vpc.node_ns("n1"), "ip", "-6", "route", "show", "default").stdout
        assert routes.strip() == ""
        assert vpc.outside_ipv6 == OUTSIDE_IPV6


# -- leaving nothing behind -----------------------------------------------------------------------


def _holders_of(inodes: set[int]) -> list[int]:
    """Processes whose network namespace is one of ``inodes``."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if os.stat(proc / "ns" / "net").st_ino in inodes:
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def _root_state() -> tuple[set[str], str]:
    links = {
        link["ifname"]
        for link in json.loads(
            subprocess.run(["ip", "-j", "link"], capture_output=True, text=True, check=True).stdout
        )
    }
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True).stdout
    return links, tables


def test_nothing_remains_after_the_harness_even_after_an_error(netns_ok: None) -> None:
    links_before, tables_before = _root_state()
    vpc = EmulatedVpc(SPEC)
    with pytest.raises(RuntimeError, match="the test fails"), vpc:
        pod = vpc.add_namespace("pod")
        vpc.spawn(vpc.node_ns("n1"), "/bin/busybox", "sleep", "600")
        vpc.run(pod, "sh", "-c", "/bin/busybox sleep 600 >/dev/null 2>&1 &")  # an orphan in a namespace
        inodes = {os.stat(f"/run/netns/{ns}").st_ino for ns in vpc.namespaces()}
        assert len(inodes) == 5  # router, outside, two nodes, the pod
        assert _holders_of(inodes), "the echo service and the sleeps live in the namespaces"
        links, tables = _root_state()
        assert not links & {"b0", "out", "p1", "ens5"}, "nothing is made in the test's namespace"
        assert tables == tables_before
        raise RuntimeError("the test fails")
    assert not [ns for ns in os.listdir("/run/netns") if ns.startswith(vpc.prefix)]
    assert _holders_of(inodes) == [], "no process keeps a namespace (and its links) alive"
    links_after, tables_after = _root_state()
    assert not (links_after - links_before) & {"b0", "out", "p1", "ens5"}
    assert tables_after == tables_before
    vpc.close()  # idempotent


def test_closing_the_harness_leaves_no_pipe_of_its_processes_open(netns_ok: None) -> None:
    """The outside host's echo service and every process spawned with pipes: their pipes are closed
    with the harness, not left to the garbage collector (a ResourceWarning per pipe)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with EmulatedVpc(SPEC) as vpc:
            vpc.spawn(vpc.node_ns("n1"), "/bin/busybox", "sleep", "600", stdout=subprocess.PIPE)
        del vpc
        gc.collect()
    assert not [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


def test_a_sweep_removes_only_the_namespaces_of_dead_runs(netns_ok: None) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale, live = f"enivpc-{gone.pid}-abcdef-router", f"enivpc-{os.getpid()}-fedcba-router"
    for name in (stale, live):
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        assert stale in sweep_stale()
        remaining = os.listdir("/run/netns")
        assert stale not in remaining and live in remaining
    finally:
        subprocess.run(["ip", "netns", "del", live], check=False)
        subprocess.run(["ip", "netns", "del", stale], capture_output=True, check=False)


def test_a_failed_command_says_what_failed(vpc: EmulatedVpc) -> None:
    with pytest.raises(VpcError, match=re.escape("ip route add 10.9.9.0/24 via 10.9.9.1")):
        vpc.run(vpc.node_ns("n1"), "ip", "route", "add", "10.9.9.0/24", "via", "10.9.9.1")
