"""The thin boto3 client: the requests it sends and how it reads EC2's answers.

botocore's ``Stubber`` checks both sides against botocore's own EC2 model: ``expected_params`` is
the exact request, and every stubbed answer is validated against the operation's output shape.
That covers what moto cannot show: pagination (moto ignores ``MaxResults`` and never answers a
``NextToken``), ``Ipv4Prefixes`` in answers, the parameters of prefix requests, and interfaces on
other network cards or attached to AWS-managed resources.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.stub import Stubber

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core import errors
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.ratelimit import RateLimiter
from providers.aws.api import Boto3Api, parse_interface
from providers.aws.client import Ec2Client
from providers.aws.settings import AwsSettings
from tests.providers.aws.conftest import ec2_client

ENI = "eni-0123456789abcdef0"


def interface(**overrides: Any) -> dict[str, Any]:
    """A DescribeNetworkInterfaces item shaped by botocore's EC2 model."""
    item: dict[str, Any] = {
        "NetworkInterfaceId": ENI,
        "SubnetId": "subnet-1",
        "VpcId": "vpc-1",
        "AvailabilityZone": "us-east-1a",
        "PrivateIpAddress": "10.0.0.10",
        "PrivateIpAddresses": [
            {"PrivateIpAddress": "10.0.0.10", "Primary": True},
            {"PrivateIpAddress": "10.0.0.12", "Primary": False},
            {"PrivateIpAddress": "10.0.0.11", "Primary": False},
        ],
        "Ipv4Prefixes": [{"Ipv4Prefix": "10.0.0.48/28"}, {"Ipv4Prefix": "10.0.0.32/28"}],
        "Groups": [{"GroupId": "sg-1", "GroupName": "g"}],
        "TagSet": [{"Key": "eni-ipam/cluster", "Value": "c1"}],
        "Status": "in-use",
        "Attachment": {
            "AttachmentId": "eni-attach-1",
            "InstanceId": "i-1",
            "DeviceIndex": 1,
            "NetworkCardIndex": 0,
            "Status": "attached",
            "DeleteOnTermination": True,
        },
    }
    item.update(overrides)
    return item


@pytest.fixture
def stubbed() -> Iterator[tuple[Boto3Api, Stubber]]:
    client = ec2_client()
    ec2 = Ec2Client(
        AwsSettings(max_results=5), limiter=RateLimiter(), metrics=Metrics(), clock=LoopClock(), client=client
    )
    with Stubber(client) as stubber:
        yield Boto3Api(ec2), stubber
        stubber.assert_no_pending_responses()
    ec2.close()


def test_interface_parsing_leaves_the_primary_out_and_orders_addresses_and_prefixes() -> None:
    iface = parse_interface(interface())
    assert iface.addresses == ("10.0.0.11", "10.0.0.12")
    assert iface.prefixes == ("10.0.0.32/28", "10.0.0.48/28")
    assert (iface.instance_id, iface.device_index, iface.attachment_id) == ("i-1", 1, "eni-attach-1")
    assert iface.delete_on_termination and iface.tags == {"eni-ipam/cluster": "c1"}


@pytest.mark.parametrize(
    "attachment",
    [
        {
            "AttachmentId": "a",
            "InstanceId": "i-1",
            "DeviceIndex": 1,
            "NetworkCardIndex": 256,
            "Status": "attached",
        },
        {"AttachmentId": "a", "InstanceOwnerId": "amazon-elb", "DeviceIndex": 1, "Status": "attached"},
        {"AttachmentId": "a", "InstanceId": "i-1", "DeviceIndex": 1, "Status": "detaching"},
    ],
    ids=["network-card-out-of-bounds", "aws-managed", "detaching"],
)
def test_interfaces_the_planner_must_not_count_are_reported_detached(attachment: dict[str, Any]) -> None:
    iface = parse_interface(interface(Attachment=attachment))
    assert (iface.instance_id, iface.device_index, iface.delete_on_termination) == ("", -1, False)


def test_an_interface_on_another_card_is_attached_there() -> None:
    attachment = {
        "AttachmentId": "a",
        "InstanceId": "i-1",
        "DeviceIndex": 0,
        "NetworkCardIndex": 3,
        "Status": "attached",
        "DeleteOnTermination": True,
    }
    iface = parse_interface(interface(Attachment=attachment))
    assert (iface.instance_id, iface.network_card, iface.device_index) == ("i-1", 3, 0)
    assert iface.delete_on_termination and iface.attachment_id == "a"


async def test_listing_follows_next_token_and_sends_the_page_size(stubbed: tuple[Boto3Api, Stubber]) -> None:
    api, stub = stubbed
    filters = [{"Name": "vpc-id", "Values": ["vpc-1"]}]
    stub.add_response(
        "describe_network_interfaces",
        {"NetworkInterfaces": [interface()], "NextToken": "page-2"},
        {"Filters": filters, "MaxResults": 5},
    )
    stub.add_response(
        "describe_network_interfaces",
        {"NetworkInterfaces": [interface(NetworkInterfaceId="eni-2")]},
        {"Filters": filters, "MaxResults": 5, "NextToken": "page-2"},
    )
    found = await api.describe_network_interfaces(filters={"vpc-id": ["vpc-1"]})
    assert [i.id for i in found] == [ENI, "eni-2"]


async def test_listing_by_id_sends_no_page_size_which_ec2_refuses_with_ids(
    stubbed: tuple[Boto3Api, Stubber],
) -> None:
    api, stub = stubbed
    stub.add_response(
        "describe_instances",
        {
            "Reservations": [
                {
                    "Instances": [
                        {
                            "InstanceId": "i-1",
                            "InstanceType": "m5.large",
                            "State": {"Name": "running", "Code": 16},
                            "Placement": {"AvailabilityZone": "us-east-1a"},
                            "SubnetId": "subnet-1",
                            "VpcId": "vpc-1",
                        }
                    ]
                }
            ]
        },
        {"InstanceIds": ["i-1"]},
    )
    [info] = await api.describe_instances(instance_ids=["i-1"])
    assert (info.id, info.type, info.state, info.zone) == ("i-1", "m5.large", "running", "us-east-1a")


async def test_prefix_assign_sends_ipv4_prefix_count_and_returns_only_the_new_prefixes(
    stubbed: tuple[Boto3Api, Stubber],
) -> None:
    api, stub = stubbed
    stub.add_response(
        "assign_private_ip_addresses",
        {
            "NetworkInterfaceId": ENI,
            "AssignedIpv4Prefixes": [{"Ipv4Prefix": "10.0.1.16/28"}, {"Ipv4Prefix": "10.0.0.240/28"}],
        },
        {"NetworkInterfaceId": ENI, "Ipv4PrefixCount": 2},
    )
    new = await api.assign_private_ip_addresses(interface_id=ENI, secondary_count=0, prefix_count=2)
    assert new == ["10.0.0.240/28", "10.0.1.16/28"]


async def test_unassign_sends_addresses_and_prefixes_in_one_request(
    stubbed: tuple[Boto3Api, Stubber],
) -> None:
    api, stub = stubbed
    stub.add_response(
        "unassign_private_ip_addresses",
        {},
        {"NetworkInterfaceId": ENI, "PrivateIpAddresses": ["10.0.0.11"], "Ipv4Prefixes": ["10.0.0.32/28"]},
    )
    await api.unassign_private_ip_addresses(
        interface_id=ENI, addresses=["10.0.0.11"], prefixes=["10.0.0.32/28"]
    )


async def test_create_carries_prefixes_tags_description_and_client_token(
    stubbed: tuple[Boto3Api, Stubber],
) -> None:
    api, stub = stubbed
    created = interface(
        Status="available",
        Attachment=None,
        PrivateIpAddresses=[{"PrivateIpAddress": "10.0.0.10", "Primary": True}],
    )
    del created["Attachment"]
    stub.add_response(
        "create_network_interface",
        {"NetworkInterface": created},
        {
            "SubnetId": "subnet-1",
            "Groups": ["sg-1"],
            "Description": "eni-ipam (i-1)",
            "TagSpecifications": [
                {"ResourceType": "network-interface", "Tags": [{"Key": "eni-ipam/cluster", "Value": "c1"}]}
            ],
            "ClientToken": "token-1",
            "Ipv4PrefixCount": 3,
        },
    )
    iface = await api.create_network_interface(
        subnet_id="subnet-1",
        groups=["sg-1"],
        secondary_count=0,
        prefix_count=3,
        tags={"eni-ipam/cluster": "c1"},
        description="eni-ipam (i-1)",
        client_token="token-1",
    )
    assert iface.device_index == -1 and iface.prefixes == ("10.0.0.32/28", "10.0.0.48/28")


async def test_attach_names_network_card_zero_and_returns_the_attachment(
    stubbed: tuple[Boto3Api, Stubber],
) -> None:
    api, stub = stubbed
    stub.add_response(
        "attach_network_interface",
        {"AttachmentId": "eni-attach-9", "NetworkCardIndex": 0},
        {"NetworkInterfaceId": ENI, "InstanceId": "i-1", "DeviceIndex": 2, "NetworkCardIndex": 0},
    )
    assert (
        await api.attach_network_interface(interface_id=ENI, instance_id="i-1", device_index=2)
        == "eni-attach-9"
    )


async def test_prefix_exhaustion_message_of_invalid_parameter_value_is_prefixes_exhausted(
    stubbed: tuple[Boto3Api, Stubber],
) -> None:
    api, stub = stubbed
    stub.add_client_error(
        "assign_private_ip_addresses",
        service_error_code="InvalidParameterValue",
        service_message="There aren't sufficient free Ipv4 addresses or prefixes in this subnet",
        http_status_code=400,
    )
    with pytest.raises(errors.PrefixesExhausted) as caught:
        await api.assign_private_ip_addresses(interface_id=ENI, secondary_count=0, prefix_count=1)
    assert (caught.value.code, caught.value.operation) == (
        "InvalidParameterValue",
        "AssignPrivateIpAddresses",
    )


async def test_unknown_error_code_keeps_its_code_and_message(stubbed: tuple[Boto3Api, Stubber]) -> None:
    api, stub = stubbed
    stub.add_client_error(
        "delete_network_interface", service_error_code="Ec2BrandNewCode", service_message="something new"
    )
    with pytest.raises(errors.ProviderError) as caught:
        await api.delete_network_interface(interface_id=ENI)
    assert type(caught.value) is errors.ProviderError
    assert (caught.value.code, caught.value.message) == ("Ec2BrandNewCode", "something new")
