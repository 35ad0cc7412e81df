"""eni_ipam_testkit.moto_ec2: moto's EC2 answers like real EC2 where an ENI IP manager depends on it.

Importing the shipped test doubles must not import their optional dependencies: moto is needed only
once the fidelity layer is installed or a :class:`MotoServer` started.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import moto
import pytest
from botocore.exceptions import ClientError

from eni_ipam_testkit.moto_ec2 import MotoServer, ec2_fidelity, install
from tests.aws_environment import ec2_client, isolate

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
AMI = "ami-12c6146b"


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials and a region; nothing may reach a real account."""
    isolate(monkeypatch, REGION)


@pytest.fixture
def ec2() -> Iterator[Any]:  # credentials, region and moto's settings: aws_environment
    with moto.mock_aws(), ec2_fidelity():
        yield ec2_client()


def subnet(ec2: Any, cidr: str = "10.0.1.0/24") -> str:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    return str(ec2.create_subnet(VpcId=vpc, CidrBlock=cidr)["Subnet"]["SubnetId"])


def instance(ec2: Any, subnet_id: str, instance_type: str = "t3.medium") -> str:
    reservation = ec2.run_instances(
        ImageId=AMI, MinCount=1, MaxCount=1, InstanceType=instance_type, SubnetId=subnet_id
    )
    return str(reservation["Instances"][0]["InstanceId"])


def create(ec2: Any, subnet_id: str, **kwargs: Any) -> dict[str, Any]:
    return dict(ec2.create_network_interface(SubnetId=subnet_id, **kwargs)["NetworkInterface"])


def describe(ec2: Any, eni_id: str) -> dict[str, Any]:
    return dict(ec2.describe_network_interfaces(NetworkInterfaceIds=[eni_id])["NetworkInterfaces"][0])


def addresses(eni: dict[str, Any]) -> list[str]:
    return [a["PrivateIpAddress"] for a in eni["PrivateIpAddresses"]]


def free(ec2: Any, subnet_id: str) -> int:
    return int(ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]["AvailableIpAddressCount"])


def attach(ec2: Any, eni_id: str, instance_id: str, index: int) -> str:
    answer = ec2.attach_network_interface(
        NetworkInterfaceId=eni_id, InstanceId=instance_id, DeviceIndex=index
    )
    return str(answer["AttachmentId"])


def code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


# -- 1. address choice --------------------------------------------------------------------------------


def test_every_handed_out_address_is_the_lowest_free_never_reserved_never_duplicate(ec2: Any) -> None:
    sub = subnet(ec2)
    first = create(ec2, sub, SecondaryPrivateIpAddressCount=2)
    assert addresses(first) == ["10.0.1.4", "10.0.1.5", "10.0.1.6"]
    inst = instance(ec2, sub)
    described = ec2.describe_instances(InstanceIds=[inst])["Reservations"][0]["Instances"][0]
    assert described["PrivateIpAddress"] == "10.0.1.7"
    second = create(ec2, sub)
    assert addresses(second) == ["10.0.1.8"]
    ec2.unassign_private_ip_addresses(
        NetworkInterfaceId=first["NetworkInterfaceId"], PrivateIpAddresses=["10.0.1.5"]
    )
    assigned = ec2.assign_private_ip_addresses(
        NetworkInterfaceId=second["NetworkInterfaceId"], SecondaryPrivateIpAddressCount=2
    )
    assert [a["PrivateIpAddress"] for a in assigned["AssignedPrivateIpAddresses"]] == ["10.0.1.5", "10.0.1.9"]

    for taken_address in ("10.0.1.4", "10.0.1.7"):  # an interface's, an instance's
        with pytest.raises(ClientError) as exc:
            create(ec2, sub, PrivateIpAddress=taken_address)
        assert code(exc) == "InvalidIPAddress.InUse"
    with pytest.raises(ClientError) as exc:
        ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1, SubnetId=sub, PrivateIpAddress="10.0.1.6")
    assert code(exc) == "InvalidIPAddress.InUse"

    small = subnet(ec2, "10.0.2.0/28")  # 16 addresses, 11 usable: .4 to .14
    taken = addresses(create(ec2, small, SecondaryPrivateIpAddressCount=10))
    assert taken == [f"10.0.2.{n}" for n in range(4, 15)]
    assert free(ec2, small) == 0


def test_an_instance_primary_is_the_lowest_free_address_and_only_its_own_is_taken(ec2: Any) -> None:
    sub = subnet(ec2)
    eni = create(ec2, sub, SecondaryPrivateIpAddressCount=1)["NetworkInterfaceId"]  # .4 and .5
    first, second = instance(ec2, sub), instance(ec2, sub)
    primaries = [
        i["PrivateIpAddress"]
        for r in ec2.describe_instances(InstanceIds=[first, second])["Reservations"]
        for i in r["Instances"]
    ]
    assert sorted(primaries) == ["10.0.1.6", "10.0.1.7"]
    ec2.unassign_private_ip_addresses(NetworkInterfaceId=eni, PrivateIpAddresses=["10.0.1.5"])
    assert free(ec2, sub) == 251 - 3  # .4, .6 and .7: nothing else holds .5
    assert addresses(create(ec2, sub)) == ["10.0.1.5"]
    ec2.terminate_instances(InstanceIds=[first])  # its primary interface is delete-on-termination
    assert free(ec2, sub) == 251 - 3

    full = subnet(ec2, "10.0.2.0/28")
    create(ec2, full, SecondaryPrivateIpAddressCount=10)
    with pytest.raises(ClientError) as exc:
        instance(ec2, full)
    assert code(exc) == "InsufficientFreeAddressesInSubnet"


# -- 2. AssignPrivateIpAddresses answer ---------------------------------------------------------------


def test_assign_returns_only_new_addresses_lowest_first(ec2: Any) -> None:
    sub = subnet(ec2)
    eni = create(ec2, sub, SecondaryPrivateIpAddressCount=1)["NetworkInterfaceId"]
    answer = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=3)
    assert [a["PrivateIpAddress"] for a in answer["AssignedPrivateIpAddresses"]] == [
        "10.0.1.6",
        "10.0.1.7",
        "10.0.1.8",
    ]
    assert addresses(describe(ec2, eni)) == [f"10.0.1.{n}" for n in range(4, 9)]


# -- 3. instance-type limits ----------------------------------------------------------------------------


def test_attaching_beyond_maximum_network_interfaces_is_attachment_limit_exceeded(ec2: Any) -> None:
    sub = subnet(ec2)
    inst = instance(ec2, sub, "t3.medium")  # 3 interfaces, 6 addresses each
    attach(ec2, create(ec2, sub)["NetworkInterfaceId"], inst, 1)
    attach(ec2, create(ec2, sub)["NetworkInterfaceId"], inst, 2)
    extra = create(ec2, sub)["NetworkInterfaceId"]
    with pytest.raises(ClientError) as exc:
        attach(ec2, extra, inst, 3)
    assert code(exc) == "AttachmentLimitExceeded"
    assert describe(ec2, extra)["Status"] == "available"


def test_addresses_beyond_the_per_interface_limit_are_refused_and_nothing_is_assigned(ec2: Any) -> None:
    sub = subnet(ec2)
    inst = instance(ec2, sub, "t3.medium")
    eni = create(ec2, sub, SecondaryPrivateIpAddressCount=3)["NetworkInterfaceId"]
    attach(ec2, eni, inst, 1)
    with pytest.raises(ClientError) as exc:
        ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=3)
    assert code(exc) == "PrivateIpAddressLimitExceeded"
    assert len(addresses(describe(ec2, eni))) == 4
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=2)
    assert len(addresses(describe(ec2, eni))) == 6  # primary included: 6 is the t3.medium limit

    # Detached there is no type, so no limit; attaching an over-full interface is refused.
    big = create(ec2, sub, SecondaryPrivateIpAddressCount=9)["NetworkInterfaceId"]
    with pytest.raises(ClientError) as exc:
        attach(ec2, big, inst, 2)
    assert code(exc) == "PrivateIpAddressLimitExceeded"
    assert "Attachment" not in describe(ec2, big)


# -- 4. subnet exhaustion -----------------------------------------------------------------------------


def test_subnet_exhaustion_is_insufficient_free_addresses_and_changes_nothing(ec2: Any) -> None:
    sub = subnet(ec2, "10.0.1.0/28")  # 11 usable
    eni = create(ec2, sub, SecondaryPrivateIpAddressCount=5)["NetworkInterfaceId"]
    assert free(ec2, sub) == 5
    with pytest.raises(ClientError) as exc:
        ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=6)
    assert code(exc) == "InsufficientFreeAddressesInSubnet"
    assert len(addresses(describe(ec2, eni))) == 6
    assert free(ec2, sub) == 5
    with pytest.raises(ClientError) as exc:
        create(ec2, sub, SecondaryPrivateIpAddressCount=5)
    assert code(exc) == "InsufficientFreeAddressesInSubnet"
    assert len(ec2.describe_network_interfaces()["NetworkInterfaces"]) == 1
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=5)
    assert free(ec2, sub) == 0
    with pytest.raises(ClientError) as exc:
        create(ec2, sub)
    assert code(exc) == "InsufficientFreeAddressesInSubnet"


# -- 5. AttachNetworkInterface refusals ---------------------------------------------------------------


def test_attach_refuses_taken_device_index_attached_interface_and_wrong_instance_state(ec2: Any) -> None:
    sub = subnet(ec2)
    inst = instance(ec2, sub)
    first = create(ec2, sub)["NetworkInterfaceId"]
    attach(ec2, first, inst, 1)
    second = create(ec2, sub)["NetworkInterfaceId"]
    with pytest.raises(ClientError) as exc:
        attach(ec2, second, inst, 1)
    assert code(exc) == "InvalidParameterValue"
    assert f"Instance '{inst}' already has an interface attached at device index '1'." in str(
        exc.value.response["Error"]["Message"]
    )
    other = instance(ec2, sub)
    with pytest.raises(ClientError) as exc:
        attach(ec2, first, other, 1)
    assert code(exc) == "InvalidNetworkInterface.InUse"

    ec2.stop_instances(InstanceIds=[other])
    attach(ec2, second, other, 1)  # stopped is fine
    ec2.terminate_instances(InstanceIds=[other])
    third = create(ec2, sub)["NetworkInterfaceId"]
    with pytest.raises(ClientError) as exc:
        attach(ec2, third, other, 2)
    assert code(exc) == "IncorrectInstanceState"


def test_detaching_device_index_0_is_not_permitted(ec2: Any) -> None:
    sub = subnet(ec2)
    inst = instance(ec2, sub)
    attach(ec2, create(ec2, sub)["NetworkInterfaceId"], inst, 1)
    primary = ec2.describe_instances(InstanceIds=[inst])["Reservations"][0]["Instances"][0][
        "NetworkInterfaces"
    ]
    (first,) = [n for n in primary if n["Attachment"]["DeviceIndex"] == 0]
    with pytest.raises(ClientError) as exc:  # not the instance's last interface, still refused
        ec2.detach_network_interface(AttachmentId=first["Attachment"]["AttachmentId"])
    assert code(exc) == "OperationNotPermitted"
    assert describe(ec2, first["NetworkInterfaceId"])["Status"] == "in-use"


# -- 6. delete-on-termination ----------------------------------------------------------------------------


def test_modify_attachment_sets_delete_on_termination(ec2: Any) -> None:
    sub = subnet(ec2)
    inst = instance(ec2, sub)
    eni = create(ec2, sub)["NetworkInterfaceId"]
    attachment = attach(ec2, eni, inst, 1)
    assert describe(ec2, eni)["Attachment"]["DeleteOnTermination"] is False
    ec2.modify_network_interface_attribute(
        NetworkInterfaceId=eni, Attachment={"AttachmentId": attachment, "DeleteOnTermination": True}
    )
    assert describe(ec2, eni)["Attachment"]["DeleteOnTermination"] is True
    with pytest.raises(ClientError) as exc:
        ec2.modify_network_interface_attribute(
            NetworkInterfaceId=eni,
            Attachment={"AttachmentId": "eni-attach-0nope", "DeleteOnTermination": False},
        )
    assert code(exc) == "InvalidAttachmentID.NotFound"


# -- 7. DeleteNetworkInterface of an attached interface ---------------------------------------------------


def test_deleting_an_attached_interface_is_in_use(ec2: Any) -> None:
    sub = subnet(ec2)
    inst = instance(ec2, sub)
    eni = create(ec2, sub)["NetworkInterfaceId"]
    attachment = attach(ec2, eni, inst, 1)
    with pytest.raises(ClientError) as exc:
        ec2.delete_network_interface(NetworkInterfaceId=eni)
    assert code(exc) == "InvalidNetworkInterface.InUse"
    assert describe(ec2, eni)["Status"] == "in-use"
    ec2.detach_network_interface(AttachmentId=attachment)
    ec2.delete_network_interface(NetworkInterfaceId=eni)
    assert free(ec2, sub) == 251 - 1  # only the instance's primary remains


def test_an_interface_keeps_its_type_and_an_efa_only_one_takes_no_address(ec2: Any) -> None:
    sub = subnet(ec2)
    kinds = {t: create(ec2, sub, InterfaceType=t)["NetworkInterfaceId"] for t in ("efa", "efa-only", "trunk")}
    kinds["interface"] = create(ec2, sub)["NetworkInterfaceId"]
    for kind, eni in kinds.items():
        assert describe(ec2, eni)["InterfaceType"] == kind
    with pytest.raises(ClientError) as exc:
        ec2.assign_private_ip_addresses(
            NetworkInterfaceId=kinds["efa-only"], SecondaryPrivateIpAddressCount=1
        )
    assert code(exc) == "InvalidParameterCombination"
    with pytest.raises(ClientError) as exc:
        create(ec2, sub, InterfaceType="efa-only", SecondaryPrivateIpAddressCount=2)
    assert code(exc) == "InvalidParameterCombination"
    with pytest.raises(ClientError) as exc:
        create(ec2, sub, InterfaceType="branch")
    assert code(exc) == "InvalidParameterValue"
    # The others take addresses as a plain interface does.
    ec2.assign_private_ip_addresses(NetworkInterfaceId=kinds["trunk"], SecondaryPrivateIpAddressCount=1)
    assert len(addresses(describe(ec2, kinds["trunk"]))) == 2


def test_device_indexes_are_per_network_card_with_each_cards_limit(ec2: Any) -> None:
    sub = subnet(ec2, "10.0.0.0/22")
    inst = instance(ec2, sub, "p4d.24xlarge")  # 4 cards of 15
    first, second, third = (create(ec2, sub)["NetworkInterfaceId"] for _ in range(3))
    answer = ec2.attach_network_interface(
        NetworkInterfaceId=first, InstanceId=inst, DeviceIndex=0, NetworkCardIndex=1
    )
    assert answer["NetworkCardIndex"] == 1
    # Device index 0 of card 1 is not the primary's slot: the primary is still attached at 0 of card 0.
    attached = ec2.describe_network_interfaces(Filters=[{"Name": "attachment.instance-id", "Values": [inst]}])
    slots = sorted(
        (n["Attachment"]["NetworkCardIndex"], n["Attachment"]["DeviceIndex"])
        for n in attached["NetworkInterfaces"]
    )
    assert slots == [(0, 0), (1, 0)]
    with pytest.raises(ClientError) as exc:
        ec2.attach_network_interface(
            NetworkInterfaceId=second, InstanceId=inst, DeviceIndex=0, NetworkCardIndex=1
        )
    assert code(exc) == "InvalidParameterValue" and "network card '1'" in str(exc.value)
    with pytest.raises(ClientError) as exc:
        ec2.attach_network_interface(
            NetworkInterfaceId=second, InstanceId=inst, DeviceIndex=0, NetworkCardIndex=4
        )
    assert code(exc) == "InvalidParameterValue" and "no such network card" in str(exc.value)
    attachment = ec2.attach_network_interface(
        NetworkInterfaceId=second, InstanceId=inst, DeviceIndex=1, NetworkCardIndex=0
    )["AttachmentId"]
    assert describe(ec2, second)["Attachment"]["NetworkCardIndex"] == 0
    # Detaching card 1's interface leaves card 0's at the same device index alone.
    ec2.detach_network_interface(AttachmentId=describe(ec2, first)["Attachment"]["AttachmentId"])
    assert describe(ec2, first)["Status"] == "available"
    assert describe(ec2, second)["Attachment"]["AttachmentId"] == attachment
    ec2.attach_network_interface(NetworkInterfaceId=third, InstanceId=inst, DeviceIndex=2, NetworkCardIndex=3)
    ec2.terminate_instances(InstanceIds=[inst])
    assert describe(ec2, third)["Status"] == "available"  # not delete-on-termination: detached


def test_a_full_network_card_is_attachment_limit_exceeded(ec2: Any) -> None:
    sub = subnet(ec2, "10.0.0.0/22")
    inst = instance(ec2, sub, "p5.48xlarge")  # 32 cards of 2
    for index in (0, 1):
        eni = create(ec2, sub)["NetworkInterfaceId"]
        ec2.attach_network_interface(
            NetworkInterfaceId=eni, InstanceId=inst, DeviceIndex=index, NetworkCardIndex=5
        )
    with pytest.raises(ClientError) as exc:
        ec2.attach_network_interface(
            NetworkInterfaceId=create(ec2, sub)["NetworkInterfaceId"],
            InstanceId=inst,
            DeviceIndex=2,
            NetworkCardIndex=5,
        )
    assert code(exc) == "AttachmentLimitExceeded" and "network card 5" in str(exc.value)


def test_ipv6_prefixes_are_the_lowest_free_80s_of_the_subnets_block(ec2: Any) -> None:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16", AmazonProvidedIpv6CidrBlock=True)["Vpc"]
    block = ipaddress.IPv6Network(vpc["Ipv6CidrBlockAssociationSet"][0]["Ipv6CidrBlock"])
    v6 = next(block.subnets(new_prefix=64))
    dual = ec2.create_subnet(VpcId=vpc["VpcId"], CidrBlock="10.0.1.0/24", Ipv6CidrBlock=str(v6))["Subnet"][
        "SubnetId"
    ]
    v4 = ec2.create_subnet(VpcId=vpc["VpcId"], CidrBlock="10.0.2.0/24")["Subnet"]["SubnetId"]
    (association,) = ec2.describe_subnets(SubnetIds=[dual])["Subnets"][0]["Ipv6CidrBlockAssociationSet"]
    assert association["Ipv6CidrBlockState"]["State"] == "associated"  # moto wrote the text of a dict
    first, second = (create(ec2, dual)["NetworkInterfaceId"] for _ in range(2))
    answer = ec2.assign_ipv6_addresses(NetworkInterfaceId=first, Ipv6PrefixCount=1)
    assert answer["AssignedIpv6Prefixes"] == [f"{v6.network_address}/80"]
    made = create(ec2, dual, Ipv6PrefixCount=1)
    expected = [str(n) for n in list(v6.subnets(new_prefix=80))[:2]]
    assert [p["Ipv6Prefix"] for p in made["Ipv6Prefixes"]] == [expected[1]]
    assert [p["Ipv6Prefix"] for p in describe(ec2, first)["Ipv6Prefixes"]] == [expected[0]]
    assert not describe(ec2, second).get("Ipv6Prefixes")
    plain = create(ec2, v4)["NetworkInterfaceId"]
    with pytest.raises(ClientError) as exc:
        ec2.assign_ipv6_addresses(NetworkInterfaceId=plain, Ipv6PrefixCount=1)
    assert code(exc) == "InvalidParameterValue" and "no IPv6 CIDR block" in str(exc.value)
    before = len(ec2.describe_network_interfaces()["NetworkInterfaces"])
    with pytest.raises(ClientError) as exc:
        create(ec2, v4, Ipv6PrefixCount=1)
    assert code(exc) == "InvalidParameterValue"
    assert len(ec2.describe_network_interfaces()["NetworkInterfaces"]) == before  # nothing created


# -- 8. UnassignPrivateIpAddresses of an address not held ----------------------------------------------


def test_unassigning_an_address_not_held_is_invalid_and_removes_nothing(ec2: Any) -> None:
    sub = subnet(ec2)
    eni = create(ec2, sub, SecondaryPrivateIpAddressCount=2)["NetworkInterfaceId"]
    with pytest.raises(ClientError) as exc:
        ec2.unassign_private_ip_addresses(
            NetworkInterfaceId=eni, PrivateIpAddresses=["10.0.1.5", "10.0.1.99"]
        )
    assert code(exc) == "InvalidParameterValue"
    assert f"Some of the specified addresses are not assigned to interface {eni}" in str(
        exc.value.response["Error"]["Message"]
    )
    assert addresses(describe(ec2, eni)) == ["10.0.1.4", "10.0.1.5", "10.0.1.6"]


# -- 9. ClientToken idempotency -----------------------------------------------------------------------------


def test_create_with_the_same_client_token_returns_the_same_interface(ec2: Any) -> None:
    sub = subnet(ec2)
    first = create(ec2, sub, SecondaryPrivateIpAddressCount=1, ClientToken="tok-1")
    again = create(ec2, sub, SecondaryPrivateIpAddressCount=1, ClientToken="tok-1")
    assert again["NetworkInterfaceId"] == first["NetworkInterfaceId"]
    assert addresses(again) == addresses(first)
    assert len(ec2.describe_network_interfaces()["NetworkInterfaces"]) == 1
    with pytest.raises(ClientError) as exc:
        create(ec2, sub, SecondaryPrivateIpAddressCount=2, ClientToken="tok-1")
    assert code(exc) == "IdempotentParameterMismatch"
    other = create(ec2, sub, SecondaryPrivateIpAddressCount=1, ClientToken="tok-2")
    assert other["NetworkInterfaceId"] != first["NetworkInterfaceId"]


# -- 10. prefix delegation ---------------------------------------------------------------------------------


def test_prefixes_are_aligned_free_28s_counted_against_subnet_and_interface(ec2: Any) -> None:
    sub = subnet(ec2)
    eni = create(ec2, sub, Ipv4PrefixCount=1)
    eni_id = eni["NetworkInterfaceId"]
    assert addresses(eni) == ["10.0.1.4"]
    assert eni["Ipv4Prefixes"] == [{"Ipv4Prefix": "10.0.1.16/28"}]  # .0/28 holds reserves and .4
    assert free(ec2, sub) == 251 - 1 - 16

    answer = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni_id, Ipv4PrefixCount=2)
    assert answer["AssignedIpv4Prefixes"] == [{"Ipv4Prefix": "10.0.1.32/28"}, {"Ipv4Prefix": "10.0.1.48/28"}]
    more = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni_id, SecondaryPrivateIpAddressCount=1)
    assert more["AssignedPrivateIpAddresses"] == [{"PrivateIpAddress": "10.0.1.5"}]
    assert [p["Ipv4Prefix"] for p in describe(ec2, eni_id)["Ipv4Prefixes"]] == [
        "10.0.1.16/28",
        "10.0.1.32/28",
        "10.0.1.48/28",
    ]
    assert free(ec2, sub) == 251 - 2 - 48

    ec2.unassign_private_ip_addresses(NetworkInterfaceId=eni_id, Ipv4Prefixes=["10.0.1.32/28"])
    assert [p["Ipv4Prefix"] for p in describe(ec2, eni_id)["Ipv4Prefixes"]] == [
        "10.0.1.16/28",
        "10.0.1.48/28",
    ]
    with pytest.raises(ClientError) as exc:
        ec2.unassign_private_ip_addresses(NetworkInterfaceId=eni_id, Ipv4Prefixes=["10.0.1.32/28"])
    assert code(exc) == "InvalidParameterValue"

    # Attached: a prefix takes one slot, like one address (t3.medium: 6 per interface).
    inst = instance(ec2, sub, "t3.medium")
    attach(ec2, eni_id, inst, 1)  # primary + 1 secondary + 2 prefixes = 4 slots
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni_id, Ipv4PrefixCount=2)
    with pytest.raises(ClientError) as exc:
        ec2.assign_private_ip_addresses(NetworkInterfaceId=eni_id, Ipv4PrefixCount=1)
    assert code(exc) == "PrivateIpAddressLimitExceeded"

    # A /27 has no aligned /28 free of reserves: .0/28 holds .0-.3, .16/28 holds the broadcast.
    tiny = subnet(ec2, "10.0.2.0/27")
    with pytest.raises(ClientError) as exc:
        create(ec2, tiny, Ipv4PrefixCount=1)
    assert code(exc) == "InsufficientCidrBlocks"
    assert (
        ec2.describe_network_interfaces(Filters=[{"Name": "subnet-id", "Values": [tiny]}])[
            "NetworkInterfaces"
        ]
        == []
    )


# -- 11. TerminateInstances --------------------------------------------------------------------------------


def test_terminate_deletes_delete_on_termination_interfaces_and_detaches_the_rest(ec2: Any) -> None:
    sub = subnet(ec2)
    inst = instance(ec2, sub)
    primary = ec2.describe_instances(InstanceIds=[inst])["Reservations"][0]["Instances"][0][
        "NetworkInterfaces"
    ][0]
    assert primary["Attachment"]["DeleteOnTermination"] is True  # RunInstances' default
    kept = create(ec2, sub)["NetworkInterfaceId"]
    attach(ec2, kept, inst, 1)
    doomed = create(ec2, sub)["NetworkInterfaceId"]
    attachment = attach(ec2, doomed, inst, 2)
    ec2.modify_network_interface_attribute(
        NetworkInterfaceId=doomed, Attachment={"AttachmentId": attachment, "DeleteOnTermination": True}
    )
    ec2.terminate_instances(InstanceIds=[inst])
    remaining = {e["NetworkInterfaceId"]: e for e in ec2.describe_network_interfaces()["NetworkInterfaces"]}
    assert set(remaining) == {kept}
    assert remaining[kept]["Status"] == "available"
    assert "Attachment" not in remaining[kept]
    assert free(ec2, sub) == 251 - 1
    ec2.delete_network_interface(NetworkInterfaceId=kept)
    assert free(ec2, sub) == 251


# -- 12. explicit addresses and prefixes --------------------------------------------------------------------


def test_explicit_addresses_and_prefixes_are_checked_like_ec2(ec2: Any) -> None:
    sub = subnet(ec2)
    eni = create(ec2, sub, PrivateIpAddress="10.0.1.20")["NetworkInterfaceId"]
    for address, expected in (
        ("10.0.2.9", "InvalidParameterValue"),  # outside the subnet
        ("10.0.1.3", "InvalidParameterValue"),  # one of the five reserves
        ("10.0.1.255", "InvalidParameterValue"),  # the broadcast address
        ("10.0.1.20", "InvalidIPAddress.InUse"),  # another interface's primary
    ):
        with pytest.raises(ClientError) as exc:
            create(ec2, sub, PrivateIpAddress=address)
        assert code(exc) == expected, address
    for prefix, expected in (
        ("10.0.1.0/28", "InvalidIPAddress.InUse"),  # holds the reserves
        ("10.0.1.16/28", "InvalidIPAddress.InUse"),  # holds .20
        ("10.0.1.40/28", "InvalidParameterValue"),  # not aligned
        ("10.0.1.32/27", "InvalidParameterValue"),  # not a /28
        ("10.0.2.0/28", "InvalidParameterValue"),  # outside the subnet
    ):
        with pytest.raises(ClientError) as exc:
            ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, Ipv4Prefixes=[prefix])
        assert code(exc) == expected, prefix
    answer = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, Ipv4Prefixes=["10.0.1.48/28"])
    assert answer["AssignedIpv4Prefixes"] == [{"Ipv4Prefix": "10.0.1.48/28"}]
    answer = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, Ipv4PrefixCount=2)
    assert answer["AssignedIpv4Prefixes"] == [{"Ipv4Prefix": "10.0.1.32/28"}, {"Ipv4Prefix": "10.0.1.64/28"}]
    answer = ec2.assign_private_ip_addresses(
        NetworkInterfaceId=eni, PrivateIpAddresses=["10.0.1.100"], SecondaryPrivateIpAddressCount=0
    )
    more = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=2)
    assert [a["PrivateIpAddress"] for a in more["AssignedPrivateIpAddresses"]] == ["10.0.1.4", "10.0.1.5"]
    assert free(ec2, sub) == 251 - 4 - 48


def test_subnet_cidr_reservations_are_never_handed_out(ec2: Any) -> None:
    sub = subnet(ec2)
    ec2.create_subnet_cidr_reservation(SubnetId=sub, Cidr="10.0.1.0/27", ReservationType="explicit")
    eni = create(ec2, sub, SecondaryPrivateIpAddressCount=1)
    assert addresses(eni) == ["10.0.1.32", "10.0.1.33"]
    assert free(ec2, sub) == 251 - 28 - 2  # the reservation holds .4-.31 besides the reserves
    answer = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni["NetworkInterfaceId"], Ipv4PrefixCount=1)
    assert answer["AssignedIpv4Prefixes"] == [{"Ipv4Prefix": "10.0.1.48/28"}]


# -- importing -------------------------------------------------------------------------------------------


def test_importing_the_doubles_imports_no_optional_dependency() -> None:
    """In a fresh interpreter: the package and the moto layer import neither moto nor azure;
    fake_azure needs azure-core (its transport subclasses azure-core's), and nothing more."""
    script = """
import sys

def loaded(*roots):
    return sorted(m for m in sys.modules if m.split(".")[0] in roots)

import eni_ipam.testing
assert not loaded("moto", "azure"), loaded("moto", "azure")
import eni_ipam_testkit.moto_ec2
assert not loaded("moto", "azure"), loaded("moto", "azure")
import eni_ipam_testkit.fake_azure
beyond = [m for m in loaded("moto", "azure") if m != "azure" and not m.startswith("azure.core")]
assert not beyond, beyond
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=20
    )
    assert result.returncode == 0, result.stderr


# -- uninstall -------------------------------------------------------------------------------------------


def test_uninstall_restores_moto_own_behaviour() -> None:
    with moto.mock_aws():
        ec2 = ec2_client()
        sub = subnet(ec2)
        uninstall = install()
        again = install()  # nested installs: moto comes back after the last undo
        eni = create(ec2, sub, SecondaryPrivateIpAddressCount=1)["NetworkInterfaceId"]
        answer = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=1)
        assert len(answer["AssignedPrivateIpAddresses"]) == 1
        again()
        again()  # undoing twice is harmless
        answer = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=1)
        assert len(answer["AssignedPrivateIpAddresses"]) == 1
        uninstall()
        answer = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=1)
        assert len(answer["AssignedPrivateIpAddresses"]) == 5  # moto lists every address again
        inst = instance(ec2, sub)
        attach(ec2, eni, inst, 1)
        ec2.delete_network_interface(NetworkInterfaceId=eni)  # moto deletes attached interfaces

    from moto.ec2.models.elastic_network_interfaces import NetworkInterface

    assert "ipv4_prefixes" not in NetworkInterface.__dict__


# -- MotoServer ------------------------------------------------------------------------------------------


def test_moto_server_answers_over_http_and_stops() -> None:
    with MotoServer() as server:
        assert server.endpoint_url.startswith("http://127.0.0.1:")
        port = int(server.endpoint_url.rsplit(":", 1)[1])
        ec2 = ec2_client(server.endpoint_url)
        assert "Vpcs" in ec2.describe_vpcs()
        sub = subnet(ec2, "10.0.3.0/26")  # 59 usable
        enis = [create(ec2, sub)["NetworkInterfaceId"] for _ in range(8)]

        def grab(eni: str) -> list[str]:
            answer = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=5)
            return [a["PrivateIpAddress"] for a in answer["AssignedPrivateIpAddresses"]]

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            granted = [a for batch in pool.map(grab, enis) for a in batch]
        assert len(set(granted)) == 40  # concurrent requests never share an address
        assert free(ec2, sub) == 59 - 48
        with pytest.raises(ClientError) as exc:
            create(ec2, sub, SecondaryPrivateIpAddressCount=11)
        assert code(exc) == "InsufficientFreeAddressesInSubnet"
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
    from moto.ec2.models.subnets import Subnet

    assert Subnet.get_available_subnet_ip.__module__ == "moto.ec2.models.subnets"  # fidelity undone
