"""The listing parser (providers/aws/listings.py) reads what botocore reads.

The reference is botocore's own ``EC2QueryParser`` followed by :func:`parse_interface` and
:func:`parse_instance`, on the very bytes moto's EC2 (with the fidelity layer) answered: for clouds
hypothesis draws (instances of several types, attached and detached interfaces, secondaries,
prefixes, tags with XML's special characters and unicode, empty values), then for the same answers
laid out otherwise (indented, elements reordered, text as character references) and edited into the
cases moto cannot produce (other network cards, attachments in every state, AWS-managed and
requester-managed interfaces, items marked primary). Pages, errors, other operations, answers that
cannot be read, the sharing of equal values and the reuse cache are checked through the client.
"""

from __future__ import annotations

import concurrent.futures
import random
import re
import sys
import urllib.parse
import xml.etree.ElementTree as ETree
from collections.abc import Callable, Iterator
from typing import Any

import botocore.parsers
import botocore.session
import pytest
from botocore.awsrequest import AWSResponse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core import errors
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.model import DETACHED_INDEX, Interface
from eni_ipam.core.ratelimit import RateLimiter
from providers.aws import listings
from providers.aws.api import Boto3Api, parse_instance, parse_interface
from providers.aws.client import Ec2Client
from providers.aws.settings import AwsSettings
from providers.ec2.provider import InstanceInfo
from tests.providers.aws.conftest import Network, ec2_client, make_network

DNI = "DescribeNetworkInterfaces"
DI = "DescribeInstances"
NS = "{http://ec2.amazonaws.com/doc/2016-11-15}"

_MODEL = botocore.session.get_session().get_service_model("ec2")


def response(body: bytes, operation: str, status: int = 200) -> dict[str, Any]:
    return {"body": body, "headers": {}, "status_code": status, "context": {"operation_name": operation}}


def botocore_reads(body: bytes, operation: str) -> tuple[list[Any], str | None]:
    """The reference: botocore's parser, then the dict readers of providers/aws/api.py."""
    shape = _MODEL.operation_model(operation).output_shape
    parsed = botocore.parsers.EC2QueryParser().parse(response(body, operation), shape)
    if operation == DNI:
        return [parse_interface(d) for d in parsed.get("NetworkInterfaces", [])], parsed.get("NextToken")
    infos = [parse_instance(i) for r in parsed.get("Reservations", []) for i in r.get("Instances") or ()]
    return infos, parsed.get("NextToken")


def fast_reads(
    body: bytes, operation: str, cache: listings.ReuseCache | None = None, *, full: bool = False
) -> tuple[list[Any], str | None]:
    """The listing parser on the same bytes, as the client's thread runs it."""
    shape = _MODEL.operation_model(operation).output_shape
    listing = listings.Listing(cache, full=full)
    with listings.model_answers(listing):
        parsed = listings.ListingParserFactory().create_parser("ec2").parse(response(body, operation), shape)
    listing.finish()
    assert set(parsed) <= {listings.MODEL_KEY, "NextToken", "ResponseMetadata"}
    return parsed[listings.MODEL_KEY], parsed.get("NextToken")


def assert_same_reading(body: bytes, operation: str) -> list[Any]:
    expected = botocore_reads(body, operation)
    assert fast_reads(body, operation) == expected
    return expected[0]


def recorder(client: Any) -> dict[str, list[bytes]]:
    """The raw body of every answer ``client`` receives, by operation (botocore's ``before-parse``)."""
    bodies: dict[str, list[bytes]] = {}

    def record(response_dict: dict[str, Any], operation_model: Any, **_: Any) -> None:
        bodies.setdefault(operation_model.name, []).append(response_dict["body"])

    client.meta.events.register("before-parse.ec2.*", record)
    return bodies


# -- clouds in moto -------------------------------------------------------------------------------

TAG_TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from("&<>\"'=:/_-. é€𝄞ß漢"),
        st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Cn")),
    ),
    max_size=8,
)
TAGS = st.dictionaries(TAG_TEXT.map(lambda k: "k" + k), TAG_TEXT, max_size=3)


@st.composite
def clouds(draw: st.DrawFn) -> dict[str, Any]:
    """Instances (each with extra interfaces) and detached interfaces, small."""
    interface = st.fixed_dictionaries(
        {
            # At most four slots: every type drawn below takes them on an interface.
            "secondaries": st.integers(0, 3),
            "prefixes": st.integers(0, 1),
            "tags": TAGS,
            "groups": st.integers(1, 2),
        }
    )
    return {
        "instances": draw(
            st.lists(
                st.tuples(
                    st.sampled_from(["m5.large", "c5.xlarge", "t3.medium"]), st.lists(interface, max_size=2)
                ),
                min_size=1,
                max_size=3,
            )
        ),
        "detached": draw(st.lists(interface, max_size=2)),
    }


def build(network: Network, cloud: dict[str, Any]) -> None:
    ec2 = network.ec2

    def create(spec: dict[str, Any]) -> str:
        params: dict[str, Any] = {
            "SubnetId": network.subnet_id,
            "Groups": list(network.security_group_ids[: spec["groups"]]),
        }
        if spec["secondaries"]:
            params["SecondaryPrivateIpAddressCount"] = spec["secondaries"]
        if spec["tags"]:
            tags = [{"Key": k, "Value": v} for k, v in spec["tags"].items()]
            params["TagSpecifications"] = [{"ResourceType": "network-interface", "Tags": tags}]
        created = str(ec2.create_network_interface(**params)["NetworkInterface"]["NetworkInterfaceId"])
        if spec["prefixes"]:  # EC2 takes addresses and prefixes in separate requests
            ec2.assign_private_ip_addresses(NetworkInterfaceId=created, Ipv4PrefixCount=spec["prefixes"])
        return created

    for instance_type, interfaces in cloud["instances"]:
        instance = network.run_instance(instance_type, tags={"Name": "node & <1>"})
        for index, spec in enumerate(interfaces, start=1):
            ec2.attach_network_interface(
                NetworkInterfaceId=create(spec), InstanceId=instance, DeviceIndex=index
            )
    for spec in cloud["detached"]:
        create(spec)


def listed(network: Network) -> dict[str, bytes]:
    """The raw answers of both listings of ``network``'s VPC."""
    bodies = recorder(network.ec2)
    vpc = [{"Name": "vpc-id", "Values": [network.vpc_id]}]
    network.ec2.describe_network_interfaces(Filters=vpc)
    network.ec2.describe_instances(Filters=vpc)
    return {DNI: bodies[DNI][-1], DI: bodies[DI][-1]}


# -- the same answers laid out otherwise ------------------------------------------------------------


def relayout(body: bytes, rnd: random.Random) -> bytes:
    """``body`` as another writer might lay it out: indented, the children of every structure
    shuffled (list items keep their order), some text written as character references."""
    ETree.register_namespace("", NS[1:-1])
    root = ETree.fromstring(body)

    def shuffle(node: ETree.Element) -> None:
        children = list(node)
        if children and all(c.tag != "item" for c in children):
            rnd.shuffle(children)
            node[:] = children
        for child in children:
            shuffle(child)

    shuffle(root)
    if rnd.random() < 0.5:
        ETree.indent(root, space=" " * rnd.randint(1, 4))
    text = ETree.tostring(root, encoding="utf-8", xml_declaration=rnd.random() < 0.5)
    if rnd.random() < 0.5:
        # Character references for a few digits and letters of text (what expat decodes), outside
        # the entities already there.
        def refer(match: re.Match[bytes]) -> bytes:
            parts = re.split(rb"(&[^;]*;)", match.group(1))
            parts[0] = re.sub(rb"[0-9a-z]", lambda c: b"&#%d;" % c.group()[0], parts[0], count=2)
            return b">" + b"".join(parts) + b"<"

        text = re.sub(rb">([^<]+)<", refer, text)
    return text


def edit_interfaces(body: bytes, rnd: random.Random) -> bytes:
    """``body`` with its interfaces edited into what moto cannot answer but EC2 can."""
    ETree.register_namespace("", NS[1:-1])
    root = ETree.fromstring(body)
    for item in root.iter(f"{NS}item"):
        attachment = item.find(f"{NS}attachment")
        if item.find(f"{NS}networkInterfaceId") is None or rnd.random() < 0.3:
            continue
        if attachment is not None:
            edit = rnd.choice(["card", "state", "aws-managed", "no-index", "keep"])
            if edit == "card":
                node = attachment.find(f"{NS}networkCardIndex")
                if node is not None:
                    node.text = str(rnd.choice([1, 2]))
            elif edit == "state":
                node = attachment.find(f"{NS}status")
                if node is not None:
                    node.text = rnd.choice(["attaching", "detaching", "detached"])
            elif edit == "aws-managed":
                node = attachment.find(f"{NS}instanceId")
                if node is not None:
                    attachment.remove(node)
                owner = attachment.find(f"{NS}instanceOwnerId")
                if owner is not None:
                    owner.text = "amazon-elb"
            elif edit == "no-index":
                node = attachment.find(f"{NS}deviceIndex")
                if node is not None:
                    attachment.remove(node)
        mac = item.find(f"{NS}macAddress")
        if mac is not None and mac.text and rnd.random() < 0.3:
            # The forms a cloud may write a MAC in, and values no device has.
            mac.text = rnd.choice(
                [mac.text.upper(), mac.text.replace(":", "-"), "", "zz", "01:00:5e:00:00:01"]
            )
        kind = item.find(f"{NS}interfaceType")
        if kind is not None and rnd.random() < 0.3:
            kind.text = rnd.choice(["efa", "efa-only", "trunk", "branch", "lambda", ""])
        managed = item.find(f"{NS}requesterManaged")
        if managed is not None and rnd.random() < 0.3:
            managed.text = "true"
        addresses = item.find(f"{NS}privateIpAddressesSet")
        if addresses is not None and len(addresses) > 1 and rnd.random() < 0.3:
            # A secondary marked primary, or a secondary listed twice: neither is a pool address.
            second = addresses[1]
            if rnd.random() < 0.5:
                flag = second.find(f"{NS}primary")
                if flag is not None:
                    flag.text = "true"
            else:
                addresses.append(second)
        if addresses is not None and rnd.random() < 0.1:
            item.remove(addresses)
    return ETree.tostring(root, encoding="utf-8")


@pytest.mark.timeout(180)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cloud=clouds(), seed=st.integers(0, 2**32 - 1))
def test_the_listing_parser_reads_what_botocore_reads(cloud: dict[str, Any], seed: int) -> None:
    from moto import mock_aws

    from eni_ipam_testkit.moto_ec2 import ec2_fidelity

    rnd = random.Random(seed)
    with mock_aws(), ec2_fidelity():
        network = make_network()
        build(network, cloud)
        bodies = listed(network)
    interfaces = assert_same_reading(bodies[DNI], DNI)
    instances = assert_same_reading(bodies[DI], DI)
    assert len(interfaces) == len(cloud["detached"]) + sum(1 + len(i) for _, i in cloud["instances"])
    assert len(instances) == len(cloud["instances"])
    assert all(isinstance(i, Interface) for i in interfaces) and all(
        isinstance(i, InstanceInfo) for i in instances
    )
    for operation, body in bodies.items():
        assert_same_reading(relayout(body, rnd), operation)
    edited = edit_interfaces(bodies[DNI], rnd)
    assert_same_reading(edited, DNI)
    assert_same_reading(relayout(edited, rnd), DNI)


# -- hand-picked answers ----------------------------------------------------------------------------


def page(
    *items: str, token: str = "", root: str = "DescribeNetworkInterfacesResponse", listing: str = ""
) -> bytes:
    listing = listing or ("networkInterfaceSet" if root.startswith("DescribeNetwork") else "reservationSet")
    next_token = f"<nextToken>{token}</nextToken>" if token else ""
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<{root} xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        f"<requestId>r-1</requestId><{listing}>{''.join(items)}</{listing}>{next_token}</{root}>"
    ).encode()


def eni(
    n: int = 1,
    *,
    attachment: str = "",
    addresses: str = "",
    extra: str = "",
    groups: str = "<item><groupId>sg-1</groupId><groupName>g</groupName></item>",
    tags: str = "<tagSet/>",
    mac: str | None = None,
) -> str:
    attachment = attachment or (
        f"<attachment><attachmentId>eni-attach-{n}</attachmentId><instanceId>i-{n // 4}</instanceId>"
        "<deviceIndex>1</deviceIndex><networkCardIndex>0</networkCardIndex><status>attached</status>"
        "<deleteOnTermination>true</deleteOnTermination></attachment>"
    )
    addresses = addresses or (
        f"<item><privateIpAddress>10.0.{n}.10</privateIpAddress><primary>true</primary></item>"
        f"<item><privateIpAddress>10.0.{n}.12</privateIpAddress><primary>false</primary></item>"
        f"<item><privateIpAddress>10.0.{n}.9</privateIpAddress><primary>false</primary></item>"
    )
    mac = f"<macAddress>0a:00:00:00:00:{n:02x}</macAddress>" if mac is None else mac
    return (
        f"<item><networkInterfaceId>eni-{n}</networkInterfaceId><subnetId>subnet-1</subnetId>{mac}"
        f"<privateIpAddress>10.0.{n}.10</privateIpAddress><groupSet>{groups}</groupSet>{attachment}"
        f"<privateIpAddressesSet>{addresses}</privateIpAddressesSet>{tags}{extra}</item>"
    )


HAND_PICKED = {
    "empty": page(),
    "empty-list-element": b'<DescribeNetworkInterfacesResponse xmlns="x"><networkInterfaceSet/>'
    b"</DescribeNetworkInterfacesResponse>",
    "no-list": b"<DescribeNetworkInterfacesResponse><requestId>r</requestId>"
    b"</DescribeNetworkInterfacesResponse>",
    "attached": page(eni(1), eni(2), token="t-2"),
    "detached": page(eni(1, attachment="<attachment/>"), eni(2, attachment=" ")),
    "no-secondaries": page(
        eni(1, addresses="<item><privateIpAddress>10.0.1.10</privateIpAddress><primary>true</primary></item>")
    ),
    "no-address-list": page(
        eni(1, addresses=" ").replace("<privateIpAddressesSet> </privateIpAddressesSet>", "")
    ),
    "prefixes": page(
        eni(
            1,
            extra="<ipv4PrefixSet><item><ipv4Prefix>10.0.0.48/28</ipv4Prefix></item>"
            "<item><ipv4Prefix>10.0.0.32/28</ipv4Prefix></item></ipv4PrefixSet>",
        )
    ),
    "tags": page(
        eni(
            1,
            tags="<tagSet><item><key>a&amp;b&lt;c&gt;&quot;&apos;</key><value>é漢 &#x1D11E;</value></item>"
            "<item><key>empty</key><value/></item><item><key>none</key></item>"
            "<item><value>v</value><key>reversed</key></item>"
            "<item><key>cdata</key><value><![CDATA[<x>&]]></value></item>"
            "<item><key>line</key><value>a\r\nb</value></item></tagSet>",
        )
    ),
    "two-groups-in-order": page(
        eni(
            1,
            groups="<item><groupId>sg-9</groupId></item><item><groupName>x</groupName><groupId>sg-1</groupId></item>",
        )
    ),
    "two-marked-primary": page(
        eni(
            1,
            addresses="<item><privateIpAddress>10.0.1.10</privateIpAddress><primary>true</primary></item>"
            "<item><privateIpAddress>10.0.1.11</privateIpAddress><primary>true</primary></item>"
            "<item><privateIpAddress>10.0.1.12</privateIpAddress></item>",
        )
    ),
    "primary-elsewhere-and-escaped": page(
        eni(
            1,
            addresses="<item><primary>false</primary><privateIpAddress>10.0.1.10</privateIpAddress></item>"
            "<item><privateIpAddress>10.0.1.&#49;1</privateIpAddress><primary>tru&#101;</primary></item>"
            "<item><privateIpAddress>10.0.1.200</privateIpAddress><primary>false</primary></item>"
            "<item><privateIpAddress>10.0.1.30</privateIpAddress></item><item><primary>false</primary></item>",
        )
    ),
    "other-card": page(
        eni(
            1,
            attachment="<attachment><instanceId>i-1</instanceId><deviceIndex>0</deviceIndex>"
            "<networkCardIndex>1</networkCardIndex><status>attached</status></attachment>",
        )
    ),
    "mac-addresses": page(
        eni(1, mac="<macAddress>0A:1B:2C:3D:4E:5F</macAddress>"),
        eni(2, mac="<macAddress>0a-1b-2c-3d-4e-60</macAddress>"),
        eni(3, mac="<macAddress>0a:1b:2c:3d:4e:&#54;1</macAddress>"),
        eni(4, mac="<macAddress/>"),
        eni(5, mac=""),
        eni(6, mac="<macAddress>not a mac</macAddress>"),
        eni(7, mac="<macAddress>01:00:5e:00:00:01</macAddress>"),
        eni(8, mac="<macAddress>00:00:00:00:00:00</macAddress>"),
    ),
    "other-card-with-its-own-mac": page(
        eni(
            1,
            attachment="<attachment><instanceId>i-1</instanceId><deviceIndex>0</deviceIndex>"
            "<networkCardIndex>3</networkCardIndex><status>attached</status></attachment>",
        ),
        eni(
            2,
            attachment="<attachment><instanceId>i-1</instanceId><deviceIndex>1</deviceIndex>"
            "<networkCardIndex>999</networkCardIndex><status>attached</status></attachment>",
        ),
    ),
    "attaching-without-index": page(
        eni(1, attachment="<attachment><instanceId>i-1</instanceId><status>attaching</status></attachment>")
    ),
    "aws-managed": page(
        eni(
            1,
            attachment="<attachment><instanceOwnerId>amazon-elb</instanceOwnerId><deviceIndex>1</deviceIndex>"
            "<status>attached</status></attachment>",
            extra="<requesterManaged>true</requesterManaged><association><publicIp>1.2.3.4</publicIp></association>",
        )
    ),
    "pretty": page(eni(1).replace("><", ">\n      <"), eni(2).replace("><", ">\t<")),
    "ipv6-prefixes": page(
        eni(
            1,
            extra="<ipv6PrefixSet><item><ipv6Prefix>2600:1f18:aaaa:1:2::/80</ipv6Prefix></item>"
            "<item><ipv6Prefix>2600:1f18:aaaa:1:1::/80</ipv6Prefix></item></ipv6PrefixSet>",
        ),
        eni(2, extra="<ipv6PrefixSet/>"),
    ),
    "interface-types": page(
        *(
            eni(n, extra=f"<interfaceType>{kind}</interfaceType>" if kind is not None else "")
            for n, kind in enumerate(
                ["interface", "efa", "efa-only", "trunk", "branch", "nat_gateway", "", None, "tr&#117;nk"], 1
            )
        )
    ),
}


@pytest.mark.parametrize("name", HAND_PICKED)
def test_hand_picked_interface_pages_read_as_botocore_reads_them(name: str) -> None:
    assert_same_reading(HAND_PICKED[name], DNI)


def test_mac_addresses_are_normalised_and_what_no_device_has_is_dropped() -> None:
    macs = [i.mac_address for i in assert_same_reading(HAND_PICKED["mac-addresses"], DNI)]
    assert macs == ["0a:1b:2c:3d:4e:5f", "0a:1b:2c:3d:4e:60", "0a:1b:2c:3d:4e:61", "", "", "", "", ""]


def test_an_interface_on_another_card_is_attached_there_with_its_card() -> None:
    other, beyond = assert_same_reading(HAND_PICKED["other-card-with-its-own-mac"], DNI)
    assert (other.device_index, other.instance_id, other.network_card) == (0, "i-1", 3)
    assert other.mac_address == "0a:00:00:00:00:01"
    # A card no instance has (above the bound) is refused, read as 0; the interface reads detached.
    assert (beyond.device_index, beyond.instance_id, beyond.network_card) == (DETACHED_INDEX, "", 0)
    attached = assert_same_reading(HAND_PICKED["attached"], DNI)[0]
    assert (attached.device_index, attached.network_card) == (1, 0)


def test_ipv6_prefixes_read_as_botocore_reads_them() -> None:
    first, second = assert_same_reading(HAND_PICKED["ipv6-prefixes"], DNI)
    assert first.ipv6_prefixes == ("2600:1f18:aaaa:1:1::/80", "2600:1f18:aaaa:1:2::/80")
    assert second.ipv6_prefixes == ()


def test_an_interface_type_reads_as_its_kind_and_an_unknown_one_as_other() -> None:
    kinds = [i.kind.label for i in assert_same_reading(HAND_PICKED["interface-types"], DNI)]
    assert kinds == [
        "interface",
        "efa",
        "efa-only",
        "trunk",
        "branch",
        "other",
        "interface",
        "interface",
        "trunk",
    ]


def instance(
    n: int, *, state: str = "<instanceState><code>16</code><name>running</name></instanceState>"
) -> str:
    # The instance's own subnet, VPC and groups come after its interfaces', which must not be taken.
    nested = (
        eni(n, extra="<vpcId>vpc-nic</vpcId>").replace("subnet-1", "subnet-nic").replace("sg-1", "sg-nic")
    )
    return (
        f"<item><instanceId>i-{n}</instanceId><instanceType>m5.large</instanceType>"
        f"<networkInterfaceSet>{nested}</networkInterfaceSet>"
        f"{state}<placement><groupName/><availabilityZone>us-east-1b</availabilityZone></placement>"
        f"<subnetId>subnet-{n}</subnetId><vpcId>vpc-1</vpcId>"
        "<groupSet><item><groupId>sg-own</groupId></item><item><groupId>sg-two</groupId></item></groupSet></item>"
    )


def reservation(*instances: str) -> str:
    groups = "<groupSet><item><groupId>sg-reservation</groupId></item></groupSet>"
    members = "".join(instances)
    return f"<item><reservationId>r-1</reservationId>{groups}<instancesSet>{members}</instancesSet></item>"


INSTANCE_PAGES = {
    "two-reservations": page(
        reservation(instance(1), instance(2)),
        reservation(instance(3)),
        root="DescribeInstancesResponse",
        token="t",
    ),
    "no-state": page(reservation(instance(1, state="")), root="DescribeInstancesResponse"),
    "empty-state": page(reservation(instance(1, state="<instanceState/>")), root="DescribeInstancesResponse"),
    "empty-state-name": page(
        reservation(instance(1, state="<instanceState><name/></instanceState>")),
        root="DescribeInstancesResponse",
    ),
    "no-instances": page(
        "<item><reservationId>r</reservationId><instancesSet/></item>", root="DescribeInstancesResponse"
    ),
    "empty": page(root="DescribeInstancesResponse"),
}


@pytest.mark.parametrize("name", INSTANCE_PAGES)
def test_hand_picked_instance_pages_read_as_botocore_reads_them(name: str) -> None:
    found = assert_same_reading(INSTANCE_PAGES[name], DI)
    for info in found:
        assert info.subnet_id != "subnet-nic" and info.vpc_id == "vpc-1"
        assert info.security_groups == ("sg-own", "sg-two")


def test_equal_values_are_one_object() -> None:
    items = [eni(n, tags="<tagSet><item><key>node</key><value>a</value></item></tagSet>") for n in range(8)]
    interfaces, _ = fast_reads(page(*items), DNI)
    first = interfaces[0]
    for other in interfaces[1:]:
        assert other.subnet_id is first.subnet_id
        assert other.security_groups is first.security_groups
        assert other.tags is first.tags
    by_instance: dict[str, str] = {}
    for iface in interfaces:
        assert by_instance.setdefault(iface.instance_id, iface.instance_id) is iface.instance_id
        # Interned: a pool naming the instance (eni_ipam.kube.resources) holds the very same string.
        assert iface.instance_id is sys.intern("".join(iface.instance_id))
    assert len(by_instance) == 2


# -- answers that cannot be read fail loudly -----------------------------------------------------------

GOOD = page(eni(1), eni(2))
MALFORMED = {
    "truncated": GOOD[: len(GOOD) // 2],
    "truncated-at-the-end": GOOD[:-5],
    "error-document": b"<Response><Errors><Error><Code>X</Code></Error></Errors></Response>",
    "another-root": page(eni(1), root="DescribeSubnetsResponse"),
    "text-between-items": page(eni(1), "stray", eni(2)),
    "an-element-among-items": page(eni(1), "<unexpected/>", eni(2)),
    "item-not-closed": page(eni(1)[:-7]),
    "no-interface-id": page(eni(1).replace("<networkInterfaceId>eni-1</networkInterfaceId>", "")),
    "not-an-address": page(
        eni(1, addresses="<item><privateIpAddress>10.0.1</privateIpAddress><primary>false</primary></item>")
    ),
    "not-a-number": page(eni(1).replace("<deviceIndex>1</deviceIndex>", "<deviceIndex>one</deviceIndex>")),
    "empty-nested-item": page(eni(1, groups="<item/>")),
    "attributed-nested-item": page(eni(1, tags='<tagSet><item a="1"><key>k</key></item></tagSet>')),
    "list-twice": page(eni(1, extra="<groupSet><item><groupId>sg-2</groupId></item></groupSet>")),
    "not-utf8": page(eni(1, tags="<tagSet><item><key>k</key><value>\xff</value></item></tagSet>")).replace(
        "ÿ".encode(), b"\xff"
    ),
    "items-outside-the-list": b"<DescribeNetworkInterfacesResponse><item>"
    b"<networkInterfaceId>eni-1</networkInterfaceId></item></DescribeNetworkInterfacesResponse>",
}


@pytest.mark.parametrize("name", MALFORMED)
def test_an_answer_of_an_unexpected_layout_raises_and_never_drops_interfaces(name: str) -> None:
    with pytest.raises(listings.ListingParseError):
        fast_reads(MALFORMED[name], DNI)


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def serve(
    client: Any, operation: str, answer: Callable[[dict[str, list[str]]], tuple[int, bytes]]
) -> list[dict[str, list[str]]]:
    """Answer ``operation`` on ``client`` with ``answer(request parameters)`` (status, body), before
    moto or the network sees it (in place of what answered it before); returns the requests'
    parameters."""
    seen: list[dict[str, list[str]]] = []

    def handler(request: Any, **_: Any) -> Any:
        params = urllib.parse.parse_qs(
            request.body.decode() if isinstance(request.body, bytes) else request.body
        )
        seen.append(params)
        status, body = answer(params)
        url, request.url = request.url, "http://served.invalid/"
        return AWSResponse(url, status, {}, _Raw(body))

    event = f"before-send.ec2.{operation}"
    client.meta.events.unregister(event, unique_id="served")  # one answerer per operation
    client.meta.events.register_first(event, handler, unique_id="served")
    return seen


@pytest.fixture
def api() -> Iterator[tuple[Boto3Api, Any]]:
    client = ec2_client()
    ec2 = Ec2Client(
        AwsSettings(max_results=5), limiter=RateLimiter(), metrics=Metrics(), clock=LoopClock(), client=client
    )
    yield Boto3Api(ec2), client
    ec2.close()


@pytest.mark.parametrize("name", ["truncated", "error-document", "no-interface-id", "not-an-address"])
async def test_a_malformed_200_answer_is_a_translated_provider_error(
    name: str, api: tuple[Boto3Api, Any]
) -> None:
    boto3_api, client = api
    serve(client, DNI, lambda _: (200, MALFORMED[name]))
    with pytest.raises(errors.ProviderError) as caught:
        await boto3_api.describe_network_interfaces(filters={"vpc-id": ["vpc-1"]})
    assert (caught.value.code, caught.value.operation) == ("ResponseParserError", DNI)


async def test_pages_are_followed_through_the_client(api: tuple[Boto3Api, Any]) -> None:
    boto3_api, client = api
    pages = {"": page(eni(1), eni(2), token="p2"), "p2": page(eni(3), token="p3"), "p3": page(eni(4))}
    seen = serve(client, DNI, lambda params: (200, pages[params.get("NextToken", [""])[0]]))
    found = await boto3_api.describe_network_interfaces(filters={"vpc-id": ["vpc-1"]})
    expected = [i for body in pages.values() for i in botocore_reads(body, DNI)[0]]
    assert found == expected and [i.id for i in found] == ["eni-1", "eni-2", "eni-3", "eni-4"]
    assert [p.get("NextToken") for p in seen] == [None, ["p2"], ["p3"]]

    instance_pages = {"": INSTANCE_PAGES["two-reservations"], "t": INSTANCE_PAGES["no-state"]}
    serve(client, DI, lambda params: (200, instance_pages[params.get("NextToken", [""])[0]]))
    infos = await boto3_api.describe_instances(filters={"vpc-id": ["vpc-1"]})
    assert infos == [i for body in instance_pages.values() for i in botocore_reads(body, DI)[0]]
    assert [i.id for i in infos] == ["i-1", "i-2", "i-3", "i-1"]


@pytest.mark.usefixtures("instant_retries")
async def test_errors_and_throttles_still_go_through_botocore(api: tuple[Boto3Api, Any]) -> None:
    boto3_api, client = api
    throttle = (
        b"<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>slow down</Message></Error>"
        b"</Errors><RequestID>x</RequestID></Response>"
    )
    answers = [(503, throttle), (200, page(eni(1)))]
    seen = serve(client, DNI, lambda _: answers.pop(0))
    [found] = await boto3_api.describe_network_interfaces(filters={"vpc-id": ["vpc-1"]})
    assert found.id == "eni-1" and len(seen) == 2  # botocore retried the throttled request

    missing = (
        b"<Response><Errors><Error><Code>InvalidNetworkInterfaceID.NotFound</Code>"
        b"<Message>The networkInterface ID 'eni-9' does not exist</Message></Error></Errors>"
        b"<RequestID>x</RequestID></Response>"
    )
    serve(client, DNI, lambda _: (400, missing))
    with pytest.raises(errors.NotFound) as caught:
        await boto3_api.describe_network_interfaces(interface_ids=["eni-9"])
    assert caught.value.code == "InvalidNetworkInterfaceID.NotFound"


def test_errors_and_other_operations_come_from_botocore_in_moto(network: Network) -> None:
    """Asked for the model, a client still raises botocore's ClientError with EC2's code, and any
    other operation still answers botocore's dicts."""
    import botocore.exceptions

    with listings.model_answers(listings.Listing()):
        with pytest.raises(botocore.exceptions.ClientError) as caught:
            network.ec2.describe_network_interfaces(NetworkInterfaceIds=["eni-0123456789abcdef0"])
        assert caught.value.response["Error"]["Code"] == "InvalidNetworkInterfaceID.NotFound"
        with pytest.raises(botocore.exceptions.ClientError) as caught:
            network.ec2.describe_instances(InstanceIds=["i-0123456789abcdef0"])
        assert caught.value.response["Error"]["Code"] == "InvalidInstanceID.NotFound"
        subnets = network.ec2.describe_subnets(SubnetIds=[network.subnet_id])
        assert subnets["Subnets"][0]["SubnetId"] == network.subnet_id
        assert listings.MODEL_KEY in network.ec2.describe_network_interfaces()
    # Without the request for the model (anyone else's call on the same client): botocore's dicts.
    assert "NetworkInterfaces" in network.ec2.describe_network_interfaces()


async def test_the_provider_reads_its_listings_with_the_parser_and_sees_what_botocore_sees(
    network: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through moto: the provider's resync reads both listings in the model, and equals the resync
    of a provider over a client without the listing parser."""
    import boto3

    instance = network.run_instance("m5.large")
    network.ec2.assign_private_ip_addresses(
        NetworkInterfaceId=network.ec2.describe_instances(InstanceIds=[instance])["Reservations"][0][
            "Instances"
        ][0]["NetworkInterfaces"][0]["NetworkInterfaceId"],
        SecondaryPrivateIpAddressCount=3,
    )
    for _ in range(6):  # more instances than a page of 5 holds
        network.run_instance("t3.medium")
    parsed: list[str] = []
    pages = dict(listings._PAGES)
    for name, read in pages.items():
        monkeypatch.setitem(
            listings._PAGES,
            name,
            lambda body, listing, read=read, name=name: parsed.append(name) or read(body, listing),
        )
    fast = network.provider(max_results=5)
    plain = network.provider(max_results=5)
    plain.client.client = boto3.session.Session().client("ec2", region_name="us-east-1")
    try:
        with_parser = await fast.resync()
        assert (
            parsed.count("DescribeInstancesResult") == 2
            and parsed.count("DescribeNetworkInterfacesResult") == 1
        )
        count = len(parsed)
        assert await plain.resync() == with_parser
        assert len(parsed) == count  # the plain client read botocore's dicts
    finally:
        fast.close()
        plain.close()
    assert len(with_parser.instances) == 7 and with_parser.instances[instance].interfaces[0].addresses


# -- reuse ------------------------------------------------------------------------------------------


def test_an_unchanged_item_is_the_same_object_in_the_next_listing() -> None:
    cache = listings.ReuseCache()
    items = [eni(n) for n in range(6)]
    first, _ = fast_reads(page(*items), DNI, cache, full=True)
    items[2] = eni(
        2, extra="<ipv4PrefixSet><item><ipv4Prefix>10.0.0.32/28</ipv4Prefix></item></ipv4PrefixSet>"
    )
    second, _ = fast_reads(page(*items), DNI, cache, full=True)
    assert second == botocore_reads(page(*items), DNI)[0]
    assert [a is b for a, b in zip(first, second, strict=True)] == [True, True, False, True, True, True]
    assert second[2].prefixes == ("10.0.0.32/28",)


def test_an_unchanged_instance_is_the_same_object_in_the_next_listing() -> None:
    cache = listings.ReuseCache()
    first, _ = fast_reads(INSTANCE_PAGES["two-reservations"], DI, cache, full=True)
    changed = INSTANCE_PAGES["two-reservations"].replace(
        b"<subnetId>subnet-2</subnetId>", b"<subnetId>s</subnetId>"
    )
    second, _ = fast_reads(changed, DI, cache, full=True)
    assert second == botocore_reads(changed, DI)[0]
    assert [a is b for a, b in zip(first, second, strict=True)] == [True, False, True]


def test_the_reuse_cache_keeps_only_what_the_last_full_listing_saw() -> None:
    cache = listings.ReuseCache()
    fast_reads(page(eni(1), eni(2)), DNI, cache, full=True)
    fast_reads(page(eni(3)), DNI, cache)  # a partial listing adds, and turns nothing over
    assert len(cache) == 3
    [again], _ = fast_reads(page(eni(1)), DNI, cache, full=True)
    assert len(cache) == 1  # eni-2 and eni-3 are gone
    [still], _ = fast_reads(page(eni(1)), DNI, cache, full=True)
    assert still is again and len(cache) == 1
    small = listings.ReuseCache(limit=2)
    fast_reads(page(eni(1), eni(2), eni(3)), DNI, small)
    assert len(small) == 3  # past its limit, the generation became the previous one
    fast_reads(page(eni(4)), DNI, small)
    assert len(small) == 4  # the previous generation is still read, and the new one holds eni-4


def item_key(body: bytes) -> int:
    """The reuse cache's key of the only item of a page: the hash of the item's content."""
    return hash(body[body.find(b"<item>") + 6 : body.rfind(b"</item>")])


def test_a_reused_entry_is_checked_against_the_interface_id() -> None:
    cache = listings.ReuseCache()
    [iface], _ = fast_reads(page(eni(1)), DNI, cache, full=True)
    assert cache.get(item_key(page(eni(1)))) is iface
    # Were eni-2's bytes to hash as eni-1's did, eni-2 would still be parsed, not handed eni-1.
    forged = [{} for _ in range(listings.SHARDS)]
    forged[item_key(page(eni(2))) % listings.SHARDS][item_key(page(eni(2)))] = iface
    cache.keep(forged, full=False)
    [other], _ = fast_reads(page(eni(2)), DNI, cache)
    assert other.id == "eni-2" and other == botocore_reads(page(eni(2)), DNI)[0][0]


def test_concurrent_listings_share_one_cache_safely() -> None:
    cache = listings.ReuseCache()
    bodies = [page(*(eni(n + k) for n in range(20))) for k in range(4)]
    expected = [botocore_reads(b, DNI)[0] for b in bodies]

    def read(k: int) -> bool:
        return fast_reads(bodies[k % 4], DNI, cache, full=k % 3 == 0)[0] == expected[k % 4]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert all(pool.map(read, range(64)))


# -- the layout the parser relies on --------------------------------------------------------------


def _outside_lists(shape: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, element name) of every member of ``shape`` that is not inside a list."""
    for name, member in shape.members.items():
        element = member.serialization.get("name", name)
        yield path, element
        if member.type_name == "structure":
            yield from _outside_lists(member, f"{path}/{element}")


@pytest.mark.parametrize(
    ("shape", "top", "within"),
    [
        (
            "NetworkInterface",
            {
                "networkInterfaceId",
                "subnetId",
                "privateIpAddress",
                "macAddress",
                "interfaceType",
                "attachment",
            }
            | {"groupSet", "tagSet", "privateIpAddressesSet", "ipv4PrefixSet", "ipv6PrefixSet"},
            {
                "/attachment": {
                    "status",
                    "instanceId",
                    "networkCardIndex",
                    "deviceIndex",
                    "attachmentId",
                    "deleteOnTermination",
                }
            },
        ),
        (
            "Instance",
            {"instanceId", "instanceType", "vpcId", "subnetId", "instanceState", "placement", "groupSet"},
            {"/instanceState": {"name"}, "/placement": {"availabilityZone"}},
        ),
        ("Reservation", {"instancesSet"}, {}),
        ("DescribeNetworkInterfacesResult", {"networkInterfaceSet", "nextToken"}, {}),
        ("DescribeInstancesResult", {"reservationSet", "nextToken"}, {}),
    ],
)
def test_the_elements_read_outside_lists_are_unambiguous_in_ec2s_model(
    shape: str, top: set[str], within: dict[str, set[str]]
) -> None:
    """The parser reads a field as the first (or only) element of its name outside the item's nested
    lists: botocore's EC2 model must name it once there, or an upgrade changed the layout."""
    members = list(_outside_lists(_MODEL.shape_for(shape)))
    names = [element for _, element in members]
    for element in top:
        assert names.count(element) == 1, element
    for path, elements in within.items():
        inside = [element for p, element in members if p.startswith(path)]
        for element in elements:
            assert inside.count(element) == 1, (path, element)
