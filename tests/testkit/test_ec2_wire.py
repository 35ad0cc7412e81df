"""eni_ipam_testkit.ec2_wire: the real AWS provider, over boto3 and botocore's whole path, on the
in-memory cloud.

The provider contract runs in-process (a botocore ``before-send`` hook) and over HTTP (the aiohttp
server); answers are checked element by element against botocore's EC2 model and parsed back into
what the cloud holds; errors arrive as the project's error classes with EC2's statuses and
botocore's retries; listings page, filter and refuse like EC2; answers weigh what EC2's weigh; and
a big fleet builds fast and pages fast from the rendered-item cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import botocore.parsers
import botocore.retries.standard
import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core import errors
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.model import CreateInterface
from eni_ipam.core.ratelimit import Bucket
from eni_ipam.testing.provider_contract import (
    CONTRACT_CHECKS,
    Check,
    ContractEnv,
    check_create_interface,
    check_prefixes,
    check_resync_shape,
    check_subnet_exhaustion,
)
from eni_ipam_testkit.ec2_wire import Ec2Frontend, Ec2Server, FleetSpec, build_fleet, install, spawn
from eni_ipam_testkit.ec2_wire.fleet import fleet_nodes
from eni_ipam_testkit.ec2_wire.frontend import http_status
from eni_ipam_testkit.ec2_wire.render import NAMESPACE
from eni_ipam_testkit.ec2_wire.tables import SortedKeys
from providers.aws import AwsProvider, AwsSettings
from providers.aws.api import parse_instance, parse_interface
from providers.ec2.limits import convert_instance_type, limits_from_row
from providers.sim.cloud import SimCloud
from tests.aws_environment import ec2_client, isolate

pytestmark = pytest.mark.timeout(30)

REGION = "us-east-1"
ZONE = "us-east-1a"
TAGS = {"eni-ipam.io/cluster": "c1", "eni-ipam.io/node": "node-1", "eni-ipam.io/managed-by": "eni-ipam"}


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials and a region; nothing may reach a real account."""
    isolate(monkeypatch, REGION)


@pytest.fixture
def instant_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore sleeps (really) between retries; keep the retries, drop the sleep."""
    monkeypatch.setattr(botocore.retries.standard.ExponentialBackoff, "delay_amount", lambda self, ctx: 0)


def model() -> Any:
    """botocore's EC2 model (its shapes name every element an answer may carry)."""
    return ec2_client().meta.service_model


def make_cloud(**kwargs: Any) -> SimCloud:
    """The contract's world: a big subnet, a small one (11 free), two groups, the instance under
    test (m5.large, its primary only) and a neighbour."""
    cloud = SimCloud(LoopClock(), **kwargs)
    cloud.add_vpc("vpc-1", "10.0.0.0/16")
    cloud.add_subnet("subnet-big", vpc="vpc-1", zone=ZONE, cidr="10.0.0.0/20", tags={"tier": "nodes"})
    cloud.add_subnet("subnet-small", vpc="vpc-1", zone=ZONE, cidr="10.0.16.0/28")
    cloud.add_security_group("sg-1", vpc="vpc-1", tags={"Name": "nodes"})
    cloud.add_security_group("sg-2", vpc="vpc-1")
    cloud.add_instance("i-contract", type="m5.large", subnet="subnet-big", security_groups=["sg-1", "sg-2"])
    cloud.add_instance("i-neighbour", type="t3.medium", subnet="subnet-big", security_groups=["sg-1"])
    return cloud


IPV6_BLOCK = "2600:1f18:aaaa:bb00::/64"


def add_ipv6_subnet(cloud: SimCloud) -> None:
    """A dual-stack subnet (``subnet-v6``, with :data:`IPV6_BLOCK`) next to the contract's IPv4-only ones."""
    cloud.add_subnet("subnet-v6", vpc="vpc-1", zone=ZONE, cidr="10.0.32.0/20", ipv6_cidr=IPV6_BLOCK)


def provider(ec2: Any, **settings: Any) -> AwsProvider:
    config = AwsSettings(region=REGION, vpc_id="vpc-1", **settings)
    return AwsProvider(config, clock=LoopClock(), metrics=Metrics(), client=ec2)


def contract_env(aws: AwsProvider, cloud: SimCloud) -> ContractEnv:
    return ContractEnv(
        provider=aws,
        instance_id="i-contract",
        limits=cloud.limits["m5.large"],
        subnet_id="subnet-big",
        small_subnet_id="subnet-small",
        security_group_ids=("sg-1", "sg-2"),
        capabilities=frozenset({"prefixes"}),
    )


@pytest.fixture
async def wired() -> AsyncIterator[tuple[SimCloud, Any, Ec2Frontend]]:
    """A cloud, a boto3 client answered by it in-process, and the front end."""
    cloud = make_cloud()
    ec2 = ec2_client()
    installed = install(ec2, cloud)
    yield cloud, ec2, installed.frontend
    installed.uninstall()


def interface_ids(body: bytes) -> list[str]:
    """The ids of a DescribeNetworkInterfaces answer's items, in order."""
    items = ET.fromstring(body).iterfind(f"{{{NAMESPACE}}}networkInterfaceSet/{{{NAMESPACE}}}item")
    return [str(item.findtext(f"{{{NAMESPACE}}}networkInterfaceId")) for item in items]


async def call(ec2: Any, operation: str, **params: Any) -> dict[str, Any]:
    """A raw boto3 call from a worker thread (never on the loop's thread, which serves it)."""
    result: dict[str, Any] = await asyncio.to_thread(getattr(ec2, operation), **params)
    return result


# -- the provider contract ------------------------------------------------------------------------


@pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda c: c.__name__)
async def test_aws_provider_passes_contract_check_in_process(check: Check) -> None:
    cloud = make_cloud()
    ec2 = ec2_client()
    install(ec2, cloud)
    aws = provider(ec2)
    try:
        await check(contract_env(aws, cloud))
    finally:
        aws.close()
    cloud.check_invariants()


@pytest.mark.parametrize(
    "check",
    [check_resync_shape, check_create_interface, check_subnet_exhaustion, check_prefixes],
    ids=lambda c: c.__name__,
)
async def test_aws_provider_passes_contract_check_over_http(check: Check) -> None:
    cloud = make_cloud()
    async with Ec2Server(cloud) as server:
        # The provider makes its own client from its settings, as in production.
        aws = AwsProvider(
            AwsSettings(region=REGION, vpc_id="vpc-1", endpoint_url=server.url, allow_plain_http=True),
            clock=LoopClock(),
            metrics=Metrics(),
        )
        try:
            await check(contract_env(aws, cloud))
        finally:
            aws.close()
        assert server.frontend.requests["DescribeNetworkInterfaces"] > 0
    cloud.check_invariants()


async def test_a_call_on_the_loops_own_thread_is_refused_rather_than_deadlocking(
    wired: tuple[SimCloud, Any, Ec2Frontend],
) -> None:
    _, ec2, _ = wired
    with pytest.raises(RuntimeError, match="deadlock"):
        ec2.describe_vpcs()


# -- answers: EC2's element names, botocore's parse, the cloud's content ------------------------


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def nonconforming(node: ET.Element, shape: Any, path: str) -> list[str]:
    """Elements of ``node`` that botocore's ``shape`` does not name (with their paths)."""
    problems: list[str] = []
    if shape.type_name == "structure":
        members = {m.serialization.get("name", n): m for n, m in shape.members.items()}
        for child in node:
            tag = _local(child.tag)
            if tag not in members:
                problems.append(f"{path}/{tag}")
            else:
                problems += nonconforming(child, members[tag], f"{path}/{tag}")
    elif shape.type_name == "list":
        item = shape.member.serialization.get("name", "member")
        for child in node:
            if _local(child.tag) != item:
                problems.append(f"{path}/{_local(child.tag)} (expected {item})")
            else:
                problems += nonconforming(child, shape.member, f"{path}/{item}")
    elif len(node):
        problems.append(f"{path}: a {shape.type_name} with children")
    elif shape.type_name == "boolean" and node.text not in ("true", "false"):
        problems.append(f"{path}: {node.text!r} is not a boolean")
    elif shape.type_name == "integer" and not (node.text or "").lstrip("-").isdigit():
        problems.append(f"{path}: {node.text!r} is not an integer")
    return problems


def assert_conforms(operation: str, body: bytes) -> dict[str, Any]:
    """``body`` is ``operation``'s answer, every element named by botocore's model; its parse."""
    op = model().operation_model(operation)
    root = ET.fromstring(body)
    assert root.tag == f"{{{NAMESPACE}}}{operation}Response", root.tag
    assert _local(root[0].tag) == "requestId" and root[0].text, "the answer has no requestId first"
    if op.output_shape is None:  # EC2 answers these with only a <return>true</return>
        assert [(_local(e.tag), e.text) for e in list(root)[1:]] == [("return", "true")]
        return {}
    answer = ET.Element("answer")
    answer.extend(list(root)[1:])
    problems = nonconforming(answer, op.output_shape, operation)
    assert not problems, f"elements botocore's model does not know: {problems}"
    parsed: dict[str, Any] = botocore.parsers.create_parser("ec2").parse(
        {"body": body, "headers": {}, "status_code": 200}, op.output_shape
    )
    return parsed


async def test_every_operation_answers_elements_botocores_model_knows(
    wired: tuple[SimCloud, Any, Ec2Frontend],
) -> None:
    cloud, _, frontend = wired
    primary = cloud.instance_view("i-contract").interfaces[0]
    requests = [
        "Action=DescribeVpcs&VpcId.1=vpc-1",
        "Action=DescribeSubnets&MaxResults=5",
        "Action=DescribeSecurityGroups&Filter.1.Name=vpc-id&Filter.1.Value.1=vpc-1",
        "Action=DescribeInstances&MaxResults=5",
        "Action=DescribeInstanceTypes&InstanceType.1=m5.large&InstanceType.2=m4.xlarge&InstanceType.3=m5.metal",
        f"Action=AssignPrivateIpAddresses&NetworkInterfaceId={primary.id}&SecondaryPrivateIpAddressCount=2",
        f"Action=AssignPrivateIpAddresses&NetworkInterfaceId={primary.id}&Ipv4PrefixCount=1",
        "Action=CreateNetworkInterface&SubnetId=subnet-big&SecurityGroupId.1=sg-1&Description=d&ClientToken=t"
        "&TagSpecification.1.ResourceType=network-interface&TagSpecification.1.Tag.1.Key=k"
        "&TagSpecification.1.Tag.1.Value=a%26b&SecondaryPrivateIpAddressCount=3",
        "Action=DescribeNetworkInterfaces&MaxResults=5",
    ]
    for request in requests:
        answer = await frontend.handle(request + "&Version=2016-11-15")
        assert answer.status == 200, answer.body
        assert_conforms(request.split("&")[0].split("=")[1], answer.body)
    created = cloud.interfaces()[-1]
    later = [
        f"Action=AttachNetworkInterface&NetworkInterfaceId={created.id}&InstanceId=i-contract&DeviceIndex=1",
        f"Action=UnassignPrivateIpAddresses&NetworkInterfaceId={created.id}&PrivateIpAddress.1={created.addresses[0]}",
    ]
    for request in later:
        answer = await frontend.handle(request)
        assert answer.status == 200, answer.body
        assert_conforms(request.split("&")[0].split("=")[1], answer.body)
    attached = cloud.interface_view(created.id)
    assert attached is not None
    for request in [
        f"Action=ModifyNetworkInterfaceAttribute&NetworkInterfaceId={created.id}"
        f"&Attachment.AttachmentId={attached.attachment_id}&Attachment.DeleteOnTermination=true",
        f"Action=DetachNetworkInterface&AttachmentId={attached.attachment_id}&Force=false",
        f"Action=DeleteNetworkInterface&NetworkInterfaceId={created.id}",
    ]:
        answer = await frontend.handle(request)
        assert answer.status == 200, answer.body
        assert_conforms(request.split("&")[0].split("=")[1], answer.body)
    # IPv6: a dual-stack subnet's block, an interface created with a /80 and given another, both
    # listed and nested in their instance.
    add_ipv6_subnet(cloud)
    answer = await frontend.handle(
        "Action=CreateNetworkInterface&SubnetId=subnet-v6&SecurityGroupId.1=sg-1&Ipv6PrefixCount=1"
    )
    assert answer.status == 200, answer.body
    made = assert_conforms("CreateNetworkInterface", answer.body)["NetworkInterface"]
    assert len(made["Ipv6Prefixes"]) == 1
    v6 = made["NetworkInterfaceId"]
    for request, carries in [
        (
            f"Action=AssignIpv6Addresses&NetworkInterfaceId={v6}&Ipv6PrefixCount=1",
            b"<assignedIpv6PrefixSet><item>",
        ),
        (f"Action=AttachNetworkInterface&NetworkInterfaceId={v6}&InstanceId=i-contract&DeviceIndex=1", b""),
        (f"Action=DescribeNetworkInterfaces&NetworkInterfaceId.1={v6}", b"<ipv6PrefixSet><item><ipv6Prefix>"),
        ("Action=DescribeInstances&InstanceId.1=i-contract", b"<ipv6PrefixSet><item><ipv6Prefix>"),
        ("Action=DescribeSubnets&SubnetId.1=subnet-v6&SubnetId.2=subnet-big", b"<ipv6CidrBlock>"),
    ]:
        answer = await frontend.handle(request)
        assert answer.status == 200, answer.body
        assert_conforms(request.split("&")[0].split("=")[1], answer.body)
        assert carries in answer.body, answer.body
    assert len(cloud.interface_view(v6).ipv6_prefixes) == 2  # type: ignore[union-attr]


async def test_parsed_answers_are_what_the_cloud_holds(wired: tuple[SimCloud, Any, Ec2Frontend]) -> None:
    cloud, ec2, _ = wired
    aws = provider(ec2)
    try:
        primary = (await aws.resync()).instances["i-contract"].interfaces[0]
        await aws.assign_addresses(interface_id=primary.id, count=3)
        await aws.assign_addresses(interface_id=primary.id, count=1, prefixes=True)
        made = await aws.create_interface(
            instance_id="i-contract",
            request=CreateInterface(
                subnet_id="subnet-big", security_groups=("sg-2",), device_index=1, count=4
            ),
            tags={**TAGS, "odd": "a&b<c>"},
            token="t-1",
        )
        loose = await aws.create_interface(
            instance_id="i-contract",
            request=CreateInterface(
                subnet_id="subnet-big", security_groups=("sg-1",), device_index=2, count=1
            ),
            tags=TAGS,
            token="t-2",
        )
        await aws.unassign_addresses(interface_id=made.id, addresses=made.addresses[:1])
        await call(ec2, "detach_network_interface", AttachmentId=loose.attachment_id)
    finally:
        aws.close()
    answer = await call(ec2, "describe_network_interfaces")
    parsed = {d["NetworkInterfaceId"]: parse_interface(d) for d in answer["NetworkInterfaces"]}
    assert sorted(parsed) == sorted(i.id for i in cloud.interfaces())
    for view in cloud.interfaces():
        assert dataclasses.replace(view, created_at=0.0) == parsed[view.id], view.id
    assert parsed[made.id].tags["odd"] == "a&b<c>"
    assert parsed[loose.id].device_index == -1 and not parsed[loose.id].delete_on_termination
    reservations = (await call(ec2, "describe_instances"))["Reservations"]
    infos = {i["InstanceId"]: parse_instance(i) for r in reservations for i in r["Instances"]}
    expected = (await cloud.describe_instances()).items
    assert infos == {i.id: i for i in expected}
    nested = {
        n["NetworkInterfaceId"] for r in reservations for i in r["Instances"] for n in i["NetworkInterfaces"]
    }
    assert nested == {i.id for i in cloud.instance_view("i-contract").interfaces} | {
        i.id for i in cloud.instance_view("i-neighbour").interfaces
    }


@contextlib.asynccontextmanager
async def over_the_wire(cloud: SimCloud) -> AsyncIterator[tuple[Any, AwsProvider]]:
    """A boto3 client answered by ``cloud`` through the wire front end, and the AWS provider over it."""
    ec2 = ec2_client()
    installed = install(ec2, cloud)
    try:
        aws = provider(ec2)
        try:
            yield ec2, aws
        finally:
            aws.close()
    finally:
        installed.uninstall()


async def test_interfaces_on_another_network_card_read_as_the_cloud_holds_them() -> None:
    """The same view through EC2's wire as the in-memory cloud's own: each interface's MAC address,
    and one on card 1 attached to its instance with its card, while DescribeInstances nests it with
    ``networkCardIndex`` 1, as EC2 does."""
    cloud = make_cloud()
    cloud.add_instance(
        "i-efa",
        type="p4d.24xlarge",
        subnet="subnet-big",
        security_groups=["sg-1"],
        interfaces=[{"index": 0}, {"index": 1}, {"index": 0, "network_card": 1}],
    )
    async with over_the_wire(cloud) as (ec2, aws):
        listed = (await aws.resync()).instances["i-efa"]
        answer = await call(ec2, "describe_network_interfaces")
        reservations = (await call(ec2, "describe_instances", InstanceIds=["i-efa"]))["Reservations"]
    held = cloud.instance_view("i-efa").interfaces
    assert listed.interfaces == tuple(dataclasses.replace(i, created_at=0.0) for i in held)
    assert [(i.network_card, i.device_index) for i in listed.interfaces] == [(0, 0), (0, 1), (1, 0)]
    parsed = {d["NetworkInterfaceId"]: parse_interface(d) for d in answer["NetworkInterfaces"]}
    for view in cloud.interfaces():
        assert dataclasses.replace(view, created_at=0.0) == parsed[view.id], view.id
    (other,) = (i for i in parsed.values() if i.network_card)
    assert (other.network_card, other.instance_id, other.mac_address) == (
        1,
        "i-efa",
        cloud.interface_view(other.id).mac_address,
    )
    (instance,) = reservations[0]["Instances"]
    nested = {n["NetworkInterfaceId"]: n for n in instance["NetworkInterfaces"]}
    assert nested[other.id]["Attachment"]["NetworkCardIndex"] == 1
    assert {n["MacAddress"] for n in nested.values()} == {parsed[i].mac_address for i in nested}


async def test_interface_types_read_through_the_wire_as_the_cloud_holds_them() -> None:
    """Each interface's ``interfaceType`` reaches the provider as the cloud's own view has it, and an
    EFA-only interface arrives without any address, as EC2 answers it."""
    cloud = make_cloud()
    cloud.add_instance(
        "i-types",
        type="m5.xlarge",
        subnet="subnet-big",
        security_groups=["sg-1"],
        interfaces=[
            {"index": 0},
            {"index": 1, "type": "trunk"},
            {"index": 2, "type": "efa-only"},
            {"index": 3, "type": "efa", "secondary_ips": 2},
        ],
    )
    async with over_the_wire(cloud) as (ec2, aws):
        listed = (await aws.resync()).instances["i-types"]
        answer = await call(ec2, "describe_network_interfaces")
    held = cloud.instance_view("i-types").interfaces
    assert listed.interfaces == tuple(dataclasses.replace(i, created_at=0.0) for i in held)
    assert [i.kind.label for i in listed.interfaces] == ["interface", "trunk", "efa-only", "efa"]
    assert [len(i.addresses) for i in listed.interfaces] == [0, 0, 0, 2]
    wire = {d["NetworkInterfaceId"]: d for d in answer["NetworkInterfaces"]}
    efa_only = wire[listed.interfaces[2].id]
    assert efa_only["InterfaceType"] == "efa-only"
    assert "PrivateIpAddress" not in efa_only and efa_only.get("PrivateIpAddresses", []) == []
    assert listed.interfaces[2].primary_ip == ""


async def test_ipv6_prefixes_and_blocks_read_through_the_wire_as_the_cloud_holds_them() -> None:
    """A /80 delegated over the wire (AssignIpv6Addresses, Ipv6PrefixCount=1) reaches the provider's
    resync, and a dual-stack subnet its IPv6 block, as the cloud's own view has them; the listing
    read before the assignment is not served again from the rendered-item cache."""
    cloud = make_cloud()
    add_ipv6_subnet(cloud)
    cloud.add_instance("i-v6", type="m5.large", subnet="subnet-v6", security_groups=["sg-1"])
    primary = cloud.instance_view("i-v6").interfaces[0]
    async with over_the_wire(cloud) as (ec2, aws):
        before = (await aws.resync()).instances["i-v6"]
        answer = await call(ec2, "assign_ipv6_addresses", NetworkInterfaceId=primary.id, Ipv6PrefixCount=1)
        snapshot = await aws.resync()
        listed = (await call(ec2, "describe_network_interfaces"))["NetworkInterfaces"]
        reservations = (await call(ec2, "describe_instances", InstanceIds=["i-v6"]))["Reservations"]
    held = cloud.instance_view("i-v6").interfaces
    (prefix,) = held[0].ipv6_prefixes
    assert prefix == "2600:1f18:aaaa:bb00::/80"
    assert answer["NetworkInterfaceId"] == primary.id and answer["AssignedIpv6Prefixes"] == [prefix]
    assert answer.get("AssignedIpv6Addresses", []) == []
    assert before.interfaces[0].ipv6_prefixes == ()
    assert snapshot.instances["i-v6"].interfaces == tuple(
        dataclasses.replace(i, created_at=0.0) for i in held
    )
    assert snapshot.instances["i-v6"].interfaces[0].ipv6_prefixes == (prefix,)
    assert {k: v for k, v in snapshot.subnets.items()} == {s: cloud.subnet_view(s) for s in snapshot.subnets}
    assert snapshot.subnets["subnet-v6"].ipv6_cidr == IPV6_BLOCK
    assert snapshot.subnets["subnet-big"].ipv6_cidr == ""
    parsed = {d["NetworkInterfaceId"]: parse_interface(d) for d in listed}
    for view in cloud.interfaces():
        assert dataclasses.replace(view, created_at=0.0) == parsed[view.id], view.id
    (nested,) = reservations[0]["Instances"][0]["NetworkInterfaces"]
    assert nested["Ipv6Prefixes"] == [{"Ipv6Prefix": prefix}]
    cloud.check_invariants()


@pytest.mark.usefixtures("instant_retries")
async def test_an_ipv6_prefix_on_an_ipv4_only_subnet_is_refused_as_an_invalid_request(
    wired: tuple[SimCloud, Any, Ec2Frontend],
) -> None:
    cloud, ec2, _ = wired
    primary = cloud.instance_view("i-contract").interfaces[0]  # in subnet-big: IPv4 only
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        await call(ec2, "assign_ipv6_addresses", NetworkInterfaceId=primary.id, Ipv6PrefixCount=1)
    assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert "subnet-big" in refused.value.response["Error"]["Message"]
    aws = provider(ec2)
    try:
        with pytest.raises(errors.InvalidRequest) as translated:
            await aws.assign_ipv6_prefix(interface_id=primary.id)
        with pytest.raises(errors.NotFound):
            await aws.assign_ipv6_prefix(interface_id="eni-0fffffffffffffff0")
    finally:
        aws.close()
    assert translated.value.code == "InvalidParameterValue"
    assert cloud.interface_view(primary.id).ipv6_prefixes == ()  # type: ignore[union-attr]
    with pytest.raises(botocore.exceptions.ClientError, match="InvalidParameterValue"):
        await call(ec2, "create_network_interface", SubnetId="subnet-small", Ipv6PrefixCount=1)
    cloud.check_invariants()


async def test_an_interface_is_created_with_an_ipv6_prefix_over_the_wire(
    wired: tuple[SimCloud, Any, Ec2Frontend],
) -> None:
    cloud, ec2, _ = wired
    add_ipv6_subnet(cloud)
    answer = await call(
        ec2,
        "create_network_interface",
        SubnetId="subnet-v6",
        Groups=["sg-1"],
        Ipv6PrefixCount=1,
        ClientToken="v6-1",
    )
    wire = answer["NetworkInterface"]
    held = cloud.interface_view(wire["NetworkInterfaceId"])
    assert held is not None and held.ipv6_prefixes == ("2600:1f18:aaaa:bb00::/80",)
    assert wire["Ipv6Prefixes"] == [{"Ipv6Prefix": "2600:1f18:aaaa:bb00::/80"}]
    assert parse_interface(wire) == dataclasses.replace(held, created_at=0.0)
    again = await call(
        ec2,
        "create_network_interface",
        SubnetId="subnet-v6",
        Groups=["sg-1"],
        Ipv6PrefixCount=1,
        ClientToken="v6-1",
    )
    assert again["NetworkInterface"] == wire, "a repeated token answers the same interface, no second /80"
    # The product's own path: created with its /80, attached and marked.
    aws = provider(ec2)
    try:
        made = await aws.create_interface(
            instance_id="i-contract",
            request=CreateInterface(
                subnet_id="subnet-v6", security_groups=("sg-1",), device_index=1, count=0, ipv6_prefixes=1
            ),
            tags=TAGS,
            token="v6-2",
        )
    finally:
        aws.close()
    assert made.ipv6_prefixes == ("2600:1f18:aaaa:bb00:1::/80",)
    attached = cloud.interface_view(made.id)
    assert attached is not None and attached.instance_id == "i-contract"
    assert made == dataclasses.replace(attached, created_at=0.0)
    cloud.check_invariants()


async def test_instance_types_convert_back_to_the_clouds_limits(
    wired: tuple[SimCloud, Any, Ec2Frontend],
) -> None:
    cloud, ec2, _ = wired
    names = sorted(cloud.limits)
    for start in range(0, len(names), 100):
        answer = await call(ec2, "describe_instance_types", InstanceTypes=names[start : start + 100])
        for record in answer["InstanceTypes"]:
            name, row = convert_instance_type(record, "InstanceTypes[]")
            assert limits_from_row(row) == cloud.limits[name], name
    with pytest.raises(botocore.exceptions.ClientError, match="InvalidInstanceType"):
        await call(ec2, "describe_instance_types", InstanceTypes=["m5.large", "x9.nothing"])


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("RequestLimitExceeded", 503),
        ("InternalError", 500),
        ("Unavailable", 500),
        ("AuthFailure", 401),
        ("InvalidParameterValue", 400),
        ("InsufficientCidrBlocks", 400),
    ],
)
def test_error_codes_answer_ec2s_http_status(code: str, status: int) -> None:
    assert http_status(code) == status


@pytest.mark.usefixtures("instant_retries")
async def test_cloud_refusals_arrive_as_the_projects_error_classes(
    wired: tuple[SimCloud, Any, Ec2Frontend],
) -> None:
    cloud, ec2, _ = wired
    aws = provider(ec2)
    try:
        # The small subnet has 11 free addresses: 9 go to one interface, 1 to another's primary.
        full = await aws.create_interface(
            instance_id="i-contract",
            request=CreateInterface(
                subnet_id="subnet-small", security_groups=("sg-1",), device_index=1, count=8
            ),
            tags=TAGS,
            token="full",
        )
        small = await aws.create_interface(
            instance_id="i-contract",
            request=CreateInterface(
                subnet_id="subnet-small", security_groups=("sg-1",), device_index=2, count=0
            ),
            tags=TAGS,
            token="small",
        )
        with pytest.raises(errors.SubnetExhausted):
            await aws.assign_addresses(interface_id=small.id, count=2)
        with pytest.raises(errors.PrefixesExhausted):
            await aws.assign_addresses(interface_id=small.id, count=1, prefixes=True)
        with pytest.raises(errors.NotFound):
            await aws.assign_addresses(interface_id="eni-0fffffffffffffff0", count=1)
        with pytest.raises(errors.InterfaceLimitExceeded):  # m5.large: 9 per interface
            await aws.assign_addresses(interface_id=full.id, count=2)
        with pytest.raises(errors.InvalidRequest) as refused:
            await aws.delete_interface(interface_id=small.id, detach=False)
        assert refused.value.code == "InvalidNetworkInterface.InUse"
        cloud.fail_next("AssignPrivateIpAddresses", count=3, code="RequestLimitExceeded")
        before = cloud.calls["AssignPrivateIpAddresses"]
        with pytest.raises(errors.Throttled):
            await aws.assign_addresses(interface_id=small.id, count=1)
        assert cloud.calls["AssignPrivateIpAddresses"] - before == 3, (
            "botocore retries a throttle (3 attempts)"
        )
        cloud.fail_next("AssignPrivateIpAddresses", code="InternalError")
        assert len(await aws.assign_addresses(interface_id=small.id, count=1)) == 1, "a 500 is retried"
    finally:
        aws.close()
    cloud.check_invariants()


@pytest.mark.usefixtures("instant_retries")
async def test_the_clouds_server_side_bucket_throttles_through_botocore() -> None:
    cloud = make_cloud(buckets={"AssignPrivateIpAddresses": Bucket(burst=1, refill=0.001)})
    ec2 = ec2_client()
    frontend = install(ec2, cloud).frontend
    aws = provider(ec2)
    try:
        primary = (await aws.resync()).instances["i-contract"].interfaces[0]
        await aws.assign_addresses(interface_id=primary.id, count=1)
        with pytest.raises(errors.Throttled) as throttled:
            await aws.assign_addresses(interface_id=primary.id, count=1)
    finally:
        aws.close()
    assert throttled.value.code == "RequestLimitExceeded"
    answer = await frontend.handle(
        f"Action=AssignPrivateIpAddresses&NetworkInterfaceId={primary.id}&SecondaryPrivateIpAddressCount=1"
    )
    assert answer.status == 503 and b"<Code>RequestLimitExceeded</Code>" in answer.body
    assert b"<RequestID>" in answer.body and b"<Response><Errors><Error>" in answer.body


@pytest.mark.parametrize(
    ("request_body", "code"),
    [
        ("Action=RunInstances&ImageId=ami-1", "InvalidAction"),
        ("Action=DescribeVpcs&Bogus=1", "UnknownParameter"),
        ("Action=DeleteNetworkInterface", "MissingParameter"),
        (
            "Action=AttachNetworkInterface&NetworkInterfaceId=e&InstanceId=i&DeviceIndex=one",
            "InvalidParameterValue",
        ),
        ("Action=DetachNetworkInterface&AttachmentId=a&Force=maybe", "InvalidParameterValue"),
        (
            "Action=CreateNetworkInterface&SubnetId=subnet-big&PrivateIpAddress=10.0.0.9",
            "UnsupportedOperation",
        ),
        ("Action=DescribeVpcs&DryRun=true", "UnsupportedOperation"),
        (
            "Action=AssignPrivateIpAddresses&NetworkInterfaceId=e&PrivateIpAddress.1=10.0.0.9"
            "&AllowReassignment=true",
            "UnsupportedOperation",
        ),
        ("Action=AssignIpv6Addresses&NetworkInterfaceId=e&Ipv6AddressCount=1", "UnsupportedOperation"),
        ("Action=AssignIpv6Addresses&NetworkInterfaceId=e&Ipv6Addresses.1=2600::1", "UnsupportedOperation"),
        ("Action=AssignIpv6Addresses&NetworkInterfaceId=e&Ipv6Prefix.1=2600::/80", "UnsupportedOperation"),
        ("Action=AssignIpv6Addresses&Ipv6PrefixCount=1", "MissingParameter"),
        ("Action=AssignIpv6Addresses&NetworkInterfaceId=e&Ipv6PrefixCount=x", "InvalidParameterValue"),
        ("Action=CreateNetworkInterface&SubnetId=subnet-big&Ipv6AddressCount=1", "UnsupportedOperation"),
        (
            "Action=CreateNetworkInterface&SubnetId=subnet-big&TagSpecification.1.ResourceType=instance"
            "&TagSpecification.1.Tag.1.Key=k",
            "InvalidParameterValue",
        ),
        ("Action=DescribeNetworkInterfaces&Filter.1.Name=bogus&Filter.1.Value.1=x", "InvalidParameterValue"),
        ("Action=DescribeNetworkInterfaces&MaxResults=4", "InvalidParameterValue"),
        ("Action=DescribeInstances&MaxResults=1001", "InvalidParameterValue"),
        (
            "Action=DescribeNetworkInterfaces&MaxResults=5&NetworkInterfaceId.1=eni-1",
            "InvalidParameterCombination",
        ),
        ("Action=DescribeNetworkInterfaces&NextToken=bm90LW91cnM", "InvalidNextToken"),
        (
            "Action=DescribeNetworkInterfaces&NetworkInterfaceId.1=eni-0fffffffffffffff0",
            "InvalidNetworkInterfaceID.NotFound",
        ),
        ("Action=DescribeInstances&InstanceId.1=i-nope", "InvalidInstanceID.NotFound"),
        ("Action=DescribeVpcs&VpcId.1=vpc-nope", "InvalidVpcID.NotFound"),
        (
            "Action=AttachNetworkInterface&NetworkInterfaceId=e&InstanceId=i&DeviceIndex=1&NetworkCardIndex=x",
            "InvalidParameterValue",
        ),
    ],
)
async def test_malformed_and_unknown_requests_are_refused_as_ec2_does(request_body: str, code: str) -> None:
    frontend = Ec2Frontend(make_cloud())
    answer = await frontend.handle(request_body + "&Version=2016-11-15")
    assert answer.status == 400
    assert answer.error_code == code, answer.body
    root = ET.fromstring(answer.body)
    assert root.findtext("Errors/Error/Code") == code and root.findtext("RequestID") == answer.request_id


async def test_an_unknown_filter_name_is_refused_through_boto3(
    wired: tuple[SimCloud, Any, Ec2Frontend],
) -> None:
    _, ec2, _ = wired
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        await call(ec2, "describe_network_interfaces", Filters=[{"Name": "owner-idd", "Values": ["1"]}])
    assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert "owner-idd" in refused.value.response["Error"]["Message"]


# -- listings: pages, order, filters --------------------------------------------------------------


async def test_pages_follow_next_token_in_id_order_without_repeats(
    wired: tuple[SimCloud, Any, Ec2Frontend],
) -> None:
    cloud, ec2, frontend = wired
    for n in range(21):
        cloud.add_instance(
            f"i-extra-{n:02d}", type="t3.medium", subnet="subnet-big", security_groups=["sg-1"]
        )
    seen: list[str] = []
    pages = 0
    params: dict[str, Any] = {"MaxResults": 5, "Filters": [{"Name": "vpc-id", "Values": ["vpc-1"]}]}
    while True:
        answer = await call(ec2, "describe_network_interfaces", **params)
        pages += 1
        assert len(answer["NetworkInterfaces"]) <= 5
        seen += [d["NetworkInterfaceId"] for d in answer["NetworkInterfaces"]]
        if "NextToken" not in answer:
            break
        params["NextToken"] = answer["NextToken"]
    assert seen == sorted(i.id for i in cloud.interfaces()) and pages == 5  # 23 interfaces
    with pytest.raises(botocore.exceptions.ClientError, match="InvalidNextToken"):
        await call(ec2, "describe_instances", MaxResults=5, NextToken=params["NextToken"])
    aws = provider(ec2, max_results=5)
    try:
        before = frontend.requests["DescribeNetworkInterfaces"]
        instances_before = frontend.requests["DescribeInstances"]
        snapshot = await aws.resync()
    finally:
        aws.close()
    assert len(snapshot.instances) == 23
    assert frontend.requests["DescribeNetworkInterfaces"] - before == 5
    assert frontend.requests["DescribeInstances"] - instances_before == 5


FILTERS: list[dict[str, list[str]]] = [
    {"vpc-id": ["vpc-1"]},
    {"status": ["available"]},
    {"status": ["in-use"], "subnet-id": ["subnet-small"]},
    {"attachment.instance-id": ["i-contract", "i-neighbour"]},
    {"attachment.instance-id": ["i-c*"]},
    {"tag:eni-ipam.io/node": ["node-?"]},
    {"tag-key": ["eni-ipam.io/*"], "availability-zone": [ZONE]},
    {"network-interface-id": ["eni-0*"], "attachment.attachment-id": ["eni-attach-*"]},
]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: ",".join(f))
async def test_interface_filters_select_what_the_clouds_own_describe_selects(
    filters: dict[str, list[str]],
) -> None:
    cloud = make_cloud(buckets=None, page_size=1)
    frontend = Ec2Frontend(cloud)
    small = await cloud.create_network_interface(subnet_id="subnet-small", groups=["sg-1"], tags=TAGS)
    await cloud.attach_network_interface(interface_id=small.id, instance_id="i-contract", device_index=1)
    await cloud.create_network_interface(subnet_id="subnet-big", tags={"eni-ipam.io/node": "node-22"})
    expected: list[str] = []
    token: str | None = None
    while True:
        page = await cloud.describe_network_interfaces(filters=filters, next_token=token)
        expected += [i.id for i in page.items]
        if (token := page.next_token) is None:
            break
    query = "&".join(
        f"Filter.{n}.Name={name}&" + "&".join(f"Filter.{n}.Value.{m}={v}" for m, v in enumerate(values, 1))
        for n, (name, values) in enumerate(filters.items(), 1)
    )
    answer = await frontend.handle(f"Action=DescribeNetworkInterfaces&{query}")
    got = interface_ids(answer.body)
    assert got == expected and got, answer.body[:300]


async def test_instance_filters_and_tags(wired: tuple[SimCloud, Any, Ec2Frontend]) -> None:
    cloud, ec2, frontend = wired
    cloud.stop_instance("i-neighbour")
    frontend.tag_instance("i-neighbour", {"team": "b"})

    async def ids(**params: Any) -> list[str]:
        answer = await call(ec2, "describe_instances", **params)
        return [i["InstanceId"] for r in answer["Reservations"] for i in r["Instances"]]

    def f(name: str, *values: str) -> dict[str, Any]:
        return {"Name": name, "Values": list(values)}

    assert await ids(Filters=[f("instance-state-name", "running")]) == ["i-contract"]
    assert await ids(Filters=[f("instance-type", "t3.*")]) == ["i-neighbour"]
    assert await ids(Filters=[f("tag:kubernetes.io/cluster/sim", "owned")]) == ["i-contract"]
    assert await ids(Filters=[f("tag:team", "b"), f("vpc-id", "vpc-1")]) == ["i-neighbour"]
    with pytest.raises(botocore.exceptions.ClientError, match="InvalidParameterValue"):
        await ids(Filters=[f("platform", "windows")])


def test_sorted_keys_follow_any_sequence_of_inserts_and_removals() -> None:
    rng = random.Random(7)
    table: dict[str, int] = {}
    index = SortedKeys()
    fresh = iter(rng.sample(range(10**6), 20_000))  # ids are never reused, but come in any order
    for step in range(3000):
        if table and rng.random() < 0.4:
            del table[rng.choice([*list(table)[-2:], *rng.sample(list(table), 1)])]
        for _ in range(rng.choice([0, 1, 1, 2, 5])):
            table[f"k-{next(fresh):07d}"] = step
        token = rng.choice([None, *rng.sample(list(table), min(3, len(table)))])
        assert list(index.after(table, token)) == sorted(k for k in table if token is None or k > token)


# -- the rendered-item cache ----------------------------------------------------------------------


async def test_every_change_to_a_record_reaches_the_next_answer(
    wired: tuple[SimCloud, Any, Ec2Frontend],
) -> None:
    cloud, ec2, frontend = wired

    async def interfaces() -> dict[str, Any]:
        answer = await call(ec2, "describe_network_interfaces")
        return {d["NetworkInterfaceId"]: parse_interface(d) for d in answer["NetworkInterfaces"]}

    async def reservation() -> Any:
        answer = await call(ec2, "describe_instances", InstanceIds=["i-contract"])
        return answer["Reservations"][0]["Instances"][0]

    def views() -> dict[str, Any]:
        return {i.id: dataclasses.replace(i, created_at=0.0) for i in cloud.interfaces()}

    primary = cloud.instance_view("i-contract").interfaces[0].id
    assert await interfaces() == views()
    hits = frontend.fragments.hits
    assert await interfaces() == views()
    assert frontend.fragments.hits - hits == len(views()), "unchanged interfaces come from the cache"
    made = await cloud.create_network_interface(subnet_id="subnet-big", secondary_count=2, tags=TAGS)
    changes = [
        lambda: cloud.assign_private_ip_addresses(interface_id=primary, secondary_count=2),
        lambda: cloud.assign_private_ip_addresses(interface_id=primary, prefix_count=1),
        lambda: cloud.attach_network_interface(
            interface_id=made.id, instance_id="i-contract", device_index=1
        ),
    ]
    for change in changes:
        await change()
        assert await interfaces() == views()
        nested = (await reservation())["NetworkInterfaces"]
        assert {n["NetworkInterfaceId"]: len(n["PrivateIpAddresses"]) for n in nested} == {
            i.id: 1 + len(i.addresses) for i in cloud.instance_view("i-contract").interfaces
        }
    attachment = cloud.interface_view(made.id).attachment_id  # type: ignore[union-attr]
    view = cloud.interface_view(primary)
    assert view is not None

    async def swap_an_address() -> None:
        # Same count, other content: the lowest address moves to `made`, the primary gets a new one.
        await cloud.unassign_private_ip_addresses(interface_id=primary, addresses=view.addresses[:1])
        await cloud.assign_private_ip_addresses(interface_id=made.id, secondary_count=1)
        await cloud.assign_private_ip_addresses(interface_id=primary, secondary_count=1)

    more = [
        swap_an_address,
        lambda: cloud.unassign_private_ip_addresses(interface_id=primary, addresses=view.addresses[1:2]),
        lambda: cloud.modify_network_interface_attribute(
            interface_id=made.id, attachment_id=attachment, delete_on_termination=True
        ),
        lambda: cloud.detach_network_interface(attachment_id=attachment),
        lambda: cloud.delete_network_interface(interface_id=made.id),
    ]
    for change in more:
        await change()
        assert await interfaces() == views()
        assert len((await reservation())["NetworkInterfaces"]) == len(
            cloud.instance_view("i-contract").interfaces
        )
    cloud.terminate_instance("i-contract")
    assert (await reservation())["State"]["Name"] == "terminated"
    assert await interfaces() == views()


# -- sizes ----------------------------------------------------------------------------------------


def _items(body: bytes, set_name: str) -> list[bytes]:
    root = ET.fromstring(body)
    found = root.find(f"{{{NAMESPACE}}}{set_name}")
    assert found is not None
    return [ET.tostring(item, encoding="utf-8", default_namespace=NAMESPACE) for item in found]


async def test_items_weigh_what_ec2s_weigh() -> None:
    cloud = SimCloud(LoopClock())
    fleet = build_fleet(cloud, FleetSpec(instances=2, security_groups=1))  # EC2's id lengths
    frontend = Ec2Frontend(cloud)
    node = cloud.instance_view(fleet.instance_ids[0])
    interface = await frontend.handle(
        f"Action=DescribeNetworkInterfaces&NetworkInterfaceId.1={node.interfaces[1].id}"
    )
    instance = await frontend.handle(f"Action=DescribeInstances&InstanceId.1={node.id}")
    (interface_item,) = _items(interface.body, "networkInterfaceSet")
    (instance_item,) = _items(instance.body, "reservationSet")
    assert len(node.interfaces[1].addresses) == 10 and len(node.interfaces) == 4
    assert 2_600 <= len(interface_item) <= 2_900, len(interface_item)
    assert 12_500 <= len(instance_item) <= 15_000, len(instance_item)
    assert len(interface.body) - len(interface_item) < 300, "the envelope is small"
    tagged = cloud._interfaces[node.interfaces[1].id]
    tagged.tags = dict(TAGS)
    assert 2_900 <= len(frontend.fragments.interface(tagged)) <= 3_200


# -- scale: the bulk fleet, cached pages, the server process -------------------------------------


async def test_a_bulk_fleet_is_the_cloud_add_instance_builds() -> None:
    spec = FleetSpec(
        instances=40, interfaces=3, addresses=5, subnet_prefix=24, zones=("us-east-1a", "us-east-1b")
    )
    bulk, slow = SimCloud(LoopClock()), SimCloud(LoopClock())
    fleet = build_fleet(bulk, spec)
    build_fleet(slow, spec, bulk=False)
    assert len(fleet.subnet_ids) == 4 and len(fleet.instance_ids) == 40  # 11 instances of 18 per /24
    # What another process computes of the fleet is what was built.
    assert [(n.instance_id, n.zone, n.subnet_id) for n in fleet_nodes(spec)] == [
        (i, bulk.instance_view(i).zone, bulk.instance_view(i).subnet_id) for i in fleet.instance_ids
    ]

    def timeless(interfaces: Any) -> list[Any]:  # setup time passes between add_instance calls
        return [dataclasses.replace(i, created_at=0.0) for i in interfaces]

    assert timeless(bulk.interfaces()) == timeless(slow.interfaces())
    for instance_id in fleet.instance_ids:
        a, b = bulk.instance_view(instance_id), slow.instance_view(instance_id)
        assert dataclasses.replace(a, interfaces=timeless(a.interfaces)) == dataclasses.replace(
            b, interfaces=timeless(b.interfaces)
        )
    for subnet_id in fleet.subnet_ids:
        assert bulk.subnet_view(subnet_id) == slow.subnet_view(subnet_id)
    bulk.check_invariants()
    # The next interface the cloud makes gets the next id in both.
    a = await bulk.create_network_interface(subnet_id=fleet.subnet_ids[0])
    b = await slow.create_network_interface(subnet_id=fleet.subnet_ids[0])
    assert dataclasses.replace(a, created_at=0.0) == dataclasses.replace(b, created_at=0.0)


@pytest.mark.timeout(120)
async def test_a_thousand_interface_page_is_served_again_from_what_was_rendered() -> None:
    cloud = SimCloud(LoopClock(), buckets=None)
    fleet = build_fleet(cloud, FleetSpec(instances=2_500))
    frontend = Ec2Frontend(cloud)
    request = (
        "Action=DescribeNetworkInterfaces&MaxResults=1000"
        f"&Filter.1.Name=vpc-id&Filter.1.Value.1={fleet.vpc_id}"
    )
    cold = await frontend.handle(request)
    cached = await frontend.handle(request)
    assert cold.status == cached.status == 200
    assert cold.body.count(b"<networkInterfaceId>") == 1000
    assert cold.body.split(b"</requestId>")[1] == cached.body.split(b"</requestId>")[1]
    # The next page starts after the last id of this one.
    token = ET.fromstring(cold.body).findtext(f"{{{NAMESPACE}}}nextToken")
    second = await frontend.handle(f"{request}&NextToken={token}")
    ids = [i.id for i in cloud.interfaces()]
    assert interface_ids(cold.body) == ids[:1000] and interface_ids(second.body) == ids[1000:2000]


@pytest.mark.timeout(60)
def test_the_server_process_serves_a_declared_cloud_and_a_fleet(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(
        "cloud:\n"
        "  vpcs: [{id: vpc-1, cidr: 10.10.0.0/16}]\n"
        "  subnets: [{id: s-1, vpc: vpc-1, zone: us-east-1a, cidr: 10.10.0.0/24}]\n"
        "  security_groups: [{id: sg-1, vpc: vpc-1}]\n"
        "  instances: [{id: i-1, type: m5.large, subnet: s-1, security_groups: [sg-1]}]\n"
        "nodes: []\n"
    )
    with spawn(["--cloud", str(scenario), "--fleet", "20"], timeout=50) as server:
        assert "21 instances" in server.banner
        ec2 = ec2_client(endpoint_url=server.url)
        reservations = ec2.describe_instances(MaxResults=5)["Reservations"]
        assert len(reservations) == 5
        subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": ["vpc-1"]}])["Subnets"]
        assert [s["SubnetId"] for s in subnets] == ["s-1"] and subnets[0]["AvailableIpAddressCount"] == 250
        with pytest.raises(botocore.exceptions.ClientError, match=r"InvalidVpcID\.NotFound"):
            ec2.describe_vpcs(VpcIds=["vpc-nope"])
    assert server.process.returncode is not None
