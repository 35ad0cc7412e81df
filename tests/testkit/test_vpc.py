"""The emulated VPC's description (``eni_ipam_testkit.vpc``): read from the in-memory cloud, and
refused where EC2 could not hold it."""

from __future__ import annotations

import pytest

from eni_ipam.core.clock import LoopClock
from eni_ipam_testkit.vpc import InterfaceSpec, NodeSpec, SubnetSpec, VpcSpec, derived_mac
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
    # No MAC in the cloud's model: derived from the id, locally administered, unicast, stable.
    mac = node.interfaces[0].mac_address
    assert mac == derived_mac(view.interfaces[0].id) and mac.startswith("02:")
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
