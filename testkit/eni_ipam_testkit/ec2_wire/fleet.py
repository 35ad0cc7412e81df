"""A big in-memory cloud in seconds: a fleet of identical nodes, built straight into the records.

The benchmark needs 100,000 instances with 4 interfaces of 10 secondary addresses each: 400,000
interfaces, 4.4 million addresses. Through the cloud's setup API (:meth:`SimCloud.add_instance
<providers.sim.setup.CloudSetup.add_instance>`, synchronous, no API call) that takes ~46 s, most
of it parsing each address back with :mod:`ipaddress` to keep every interface's list sorted; through
the EC2 operations it would be a million coroutine calls. :func:`build_fleet` makes the same cloud
in ~15 s (14 to 20 s measured for 100,000 instances on two cores, about 600 MB), most of it the
subnets' own address bookkeeping (:mod:`ipaddress` text for each address handed out):

* VPC, subnets and security groups go through the setup API (a few hundred calls);
* each subnet hands out all its fleet's addresses in one
  :meth:`~providers.sim.addressing.SubnetSpace.take_addresses` call (lowest free first, in address
  order, with the space's accounting kept by the space itself), which are then dealt out in the
  order :meth:`add_instance` takes them: per interface the primary, then its secondaries;
* instance and interface records are made and attached as :meth:`add_instance` makes them, with
  ids from the cloud's own serial in the same order.

So a fleet built in bulk is the very cloud ``add_instance`` would build, ids included
(``bulk=False`` builds it that way; tests/testkit/test_ec2_wire.py compares the two and checks the
cloud's invariants). Like :mod:`~eni_ipam_testkit.ec2_wire.tables`, this is test-kit code writing
the cloud's private tables, on purpose and only here.

Layout: subnets of ``subnet_prefix`` carved from ``vpc_cidr`` in order, zones in turn, each filled
to ``fill`` of its usable addresses so that the reconciler still has room to allocate.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import itertools
import math
import time

from providers.sim.cloud import SimCloud
from providers.sim.records import InstanceRecord, InterfaceRecord

_RESERVED = 5
"""Addresses AWS keeps in every subnet."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class FleetSpec:
    instances: int
    interfaces: int = 4
    """Attached interfaces per instance, the primary included."""
    addresses: int = 10
    """Secondary addresses per interface."""
    instance_type: str = "m5.4xlarge"
    """8 interfaces of 30 addresses: room for the reconciler to grow every node."""
    zones: tuple[str, ...] = ("us-east-1a", "us-east-1b", "us-east-1c")
    vpc_id: str = "vpc-0f1ee70000000001"
    vpc_cidr: str = "10.0.0.0/8"
    subnet_prefix: int = 16
    fill: float = 0.75
    """Share of each subnet's usable addresses the fleet takes."""
    security_groups: int = 2
    delete_on_termination: bool = True


@dataclasses.dataclass(frozen=True)
class Fleet:
    """What :func:`build_fleet` made."""

    vpc_id: str
    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...]
    instance_ids: tuple[str, ...]
    seconds: float
    """Wall-clock time the build took."""


def _layout(spec: FleetSpec) -> tuple[int, list[ipaddress.IPv4Network]]:
    """Instances per subnet, and the subnets' CIDRs.

    Raises:
        ValueError: a subnet cannot hold one instance, or the VPC cannot hold the subnets.
    """
    per_instance = spec.interfaces * (1 + spec.addresses)
    usable = 2 ** (32 - spec.subnet_prefix) - _RESERVED
    per_subnet = int(usable * spec.fill) // per_instance
    if per_subnet < 1:
        raise ValueError(f"a /{spec.subnet_prefix} filled to {spec.fill:.0%} cannot hold one instance")
    count = max(math.ceil(spec.instances / per_subnet), 1)
    cidrs = list(
        itertools.islice(ipaddress.IPv4Network(spec.vpc_cidr).subnets(new_prefix=spec.subnet_prefix), count)
    )
    if len(cidrs) < count:
        raise ValueError(
            f"{spec.vpc_cidr} holds fewer than the {count} subnets of /{spec.subnet_prefix} needed"
        )
    return per_subnet, cidrs


@dataclasses.dataclass(frozen=True)
class FleetNode:
    """Where one fleet instance lives: what a Node of it says (its provider id names the zone)."""

    instance_id: str
    zone: str
    subnet_id: str


def fleet_nodes(spec: FleetSpec) -> list[FleetNode]:
    """The instances :func:`build_fleet` makes for ``spec``, in order, without building anything: a
    Kubernetes side seeded in another process names the same instances."""
    per_subnet, _ = _layout(spec)
    nodes = []
    for n in range(spec.instances):
        s = n // per_subnet
        nodes.append(FleetNode(f"i-{n + 1:017x}", spec.zones[s % len(spec.zones)], f"subnet-{s + 1:017x}"))
    return nodes


def build_fleet(cloud: SimCloud, spec: FleetSpec, *, bulk: bool = True) -> Fleet:
    """Add ``spec``'s VPC, subnets, security groups and running instances to ``cloud``.

    Args:
        bulk: build the records directly (fast); ``False`` calls :meth:`add_instance` per instance.

    Raises:
        ValueError: an unknown instance type, more interfaces or addresses than it allows, a layout
            that does not fit, or an id the cloud already has.
    """
    started = time.perf_counter()
    limits = cloud.limits.get(spec.instance_type)
    if limits is None:
        raise ValueError(f"unknown instance type {spec.instance_type!r}")
    if spec.interfaces > limits.adapters or spec.addresses > limits.slots_per_interface:
        raise ValueError(
            f"{spec.instance_type} holds {limits.adapters} interfaces of {limits.slots_per_interface}"
        )
    per_subnet, cidrs = _layout(spec)
    cloud.add_vpc(spec.vpc_id, spec.vpc_cidr)
    subnets = tuple(f"subnet-{n:017x}" for n in range(1, len(cidrs) + 1))
    for n, (subnet_id, cidr) in enumerate(zip(subnets, cidrs, strict=True)):
        cloud.add_subnet(subnet_id, vpc=spec.vpc_id, zone=spec.zones[n % len(spec.zones)], cidr=str(cidr))
    groups = tuple(f"sg-{n:017x}" for n in range(1, spec.security_groups + 1))
    for group in groups:
        cloud.add_security_group(group, vpc=spec.vpc_id, tags={"Name": f"eks-nodes-{group[-4:]}"})
    instances = tuple(f"i-{n:017x}" for n in range(1, spec.instances + 1))
    for n, subnet_id in enumerate(subnets):
        chosen = instances[n * per_subnet : (n + 1) * per_subnet]
        if bulk:
            _bulk(cloud, spec, subnet_id, chosen, groups)
            continue
        for instance_id in chosen:
            cloud.add_instance(
                instance_id,
                type=spec.instance_type,
                subnet=subnet_id,
                security_groups=groups,
                interfaces=[
                    {
                        "index": k,
                        "secondary_ips": spec.addresses,
                        "delete_on_termination": spec.delete_on_termination,
                    }
                    for k in range(spec.interfaces)
                ],
            )
    return Fleet(spec.vpc_id, subnets, groups, instances, time.perf_counter() - started)


def _bulk(
    cloud: SimCloud, spec: FleetSpec, subnet_id: str, ids: tuple[str, ...], groups: tuple[str, ...]
) -> None:
    """Instances of one subnet, made as :meth:`add_instance` would make them (see the module doc)."""
    instances, interfaces = cloud._instances, cloud._interfaces
    for instance_id in ids:
        if instance_id in instances:
            raise ValueError(f"duplicate instance id {instance_id!r}")
    subnet = cloud._subnets[subnet_id]
    limits = cloud.limits[spec.instance_type]
    stride = 1 + spec.addresses
    addresses = subnet.space.take_addresses(len(ids) * spec.interfaces * stride, from_blocked=True)
    now = cloud._setup_time()
    at = 0
    for instance_id in ids:
        record = InstanceRecord(
            id=instance_id,
            type=spec.instance_type,
            limits=limits,
            vpc_id=subnet.vpc_id,
            subnet_id=subnet_id,
            zone=subnet.zone,
            security_groups=groups,
        )
        instances[instance_id] = record
        for index in range(spec.interfaces):
            iface = InterfaceRecord(
                id=cloud._next_id("eni"),
                subnet_id=subnet_id,
                vpc_id=subnet.vpc_id,
                zone=subnet.zone,
                primary_ip=addresses[at],
                security_groups=groups,
                tags={},
                description=f"eni-ipam sim ({instance_id})",
                created_at=now,
                addresses=addresses[at + 1 : at + stride],
            )
            at += stride
            interfaces[iface.id] = iface
            iface.instance_id, iface.device_index = instance_id, index
            iface.attachment_id = cloud._next_id("eni-attach")
            iface.delete_on_termination = spec.delete_on_termination
            record.attached[index] = iface.id
