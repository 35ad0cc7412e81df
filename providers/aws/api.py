"""The thin EC2 client over boto3: :class:`Boto3Api` is the :class:`~providers.ec2.provider.Ec2Api`.

Each method builds one request in EC2's shape, sends it through :class:`~providers.aws.client.Ec2Client`
(and so through the limiter, the metrics and the error translation), and parses the answer into
:mod:`eni_ipam.core.model` values. Listings follow ``NextToken`` to the end. No policy lives here.

Parsing follows botocore's EC2 model (the shapes ``NetworkInterface``, ``Subnet``, ``Instance``…):

* the primary address is never among ``addresses``;
* prefixes are ``Ipv4Prefixes[].Ipv4Prefix``, IPv6 prefixes ``Ipv6Prefixes[].Ipv6Prefix``;
* a subnet's IPv6 block is its first ``associated`` ``Ipv6CidrBlockAssociationSet`` entry;
* an interface counts as attached only while its attachment is ``attaching`` or ``attached`` to an
  instance, on any network card (the pool's spec says which cards it fills: ``network_cards``).
  Interfaces attached to AWS-managed resources (load balancers, Lambda) are reported detached from
  any instance, so the planner never counts or touches them;
* the interface's kind is ``InterfaceType`` (:func:`~eni_ipam.core.devices.kind_named`: a type it
  does not know is one no pool fills);
* the MAC address is ``MacAddress`` (:func:`~eni_ipam.core.devices.reported`: one that is no
  device's is dropped with a warning), the network card the attachment's ``NetworkCardIndex`` while
  attached to an instance, else 0. A card out of bounds is read as 0 with a warning, and such an
  interface is reported detached: its slot cannot be known.

The two heavy listings (``DescribeNetworkInterfaces``, ``DescribeInstances``) usually arrive already
in the model, read from EC2's XML by :mod:`providers.aws.listings` under the same rules.
:func:`parse_interface` and :func:`parse_instance` read botocore's dicts (from a client without that
parser) and are the reference the listing parser is tested against.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from eni_ipam.core.devices import MAX_NETWORK_CARD, reported
from eni_ipam.core.model import (
    DETACHED_INDEX,
    Interface,
    SecurityGroup,
    Subnet,
    address_key,
    frozen_tags,
    ipv6_prefix_key,
)
from providers.aws.client import Ec2Client
from providers.aws.listings import ATTACHED
from providers.ec2.provider import Filters, InstanceInfo, InstanceState


def ec2_filters(filters: Filters | None) -> list[dict[str, Any]]:
    """EC2's ``Filters`` parameter from a name → values mapping (in a stable order)."""
    return [{"Name": name, "Values": list(values)} for name, values in sorted((filters or {}).items())]


def ec2_tags(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]


def _tag_map(items: Iterable[Mapping[str, Any]] | None) -> Mapping[str, str]:
    return frozen_tags({str(t["Key"]): str(t.get("Value", "")) for t in items or ()})


def parse_subnet(d: Mapping[str, Any]) -> Subnet:
    return Subnet(
        id=d["SubnetId"],
        vpc_id=d.get("VpcId", ""),
        zone=d.get("AvailabilityZone", ""),
        cidr=d.get("CidrBlock", ""),
        available=int(d.get("AvailableIpAddressCount", 0)),
        tags=_tag_map(d.get("Tags")),
        ipv6_cidr=next(
            (
                str(a.get("Ipv6CidrBlock") or "")
                for a in d.get("Ipv6CidrBlockAssociationSet") or ()
                if (a.get("Ipv6CidrBlockState") or {}).get("State") == "associated"
            ),
            "",
        ),
    )


def parse_security_group(d: Mapping[str, Any]) -> SecurityGroup:
    return SecurityGroup(id=d["GroupId"], vpc_id=d.get("VpcId", ""), tags=_tag_map(d.get("Tags")))


def parse_instance(d: Mapping[str, Any]) -> InstanceInfo:
    return InstanceInfo(
        id=d["InstanceId"],
        type=d.get("InstanceType", ""),
        state=cast(InstanceState, (d.get("State") or {}).get("Name", "pending")),
        vpc_id=d.get("VpcId", ""),
        subnet_id=d.get("SubnetId", ""),
        zone=(d.get("Placement") or {}).get("AvailabilityZone", ""),
        security_groups=tuple(g["GroupId"] for g in d.get("SecurityGroups") or ()),
    )


def parse_interface(d: Mapping[str, Any]) -> Interface:
    primary = d.get("PrivateIpAddress", "")
    secondaries = {
        p["PrivateIpAddress"]
        for p in d.get("PrivateIpAddresses") or ()
        if not p.get("Primary") and p.get("PrivateIpAddress") and p["PrivateIpAddress"] != primary
    }
    attachment = d.get("Attachment") or {}
    on_instance = attachment.get("Status") in ATTACHED and bool(attachment.get("InstanceId"))
    card = int(attachment.get("NetworkCardIndex", 0) or 0) if on_instance else 0
    attached = on_instance and 0 <= card <= MAX_NETWORK_CARD  # a slot it cannot name is no slot
    iid = d["NetworkInterfaceId"]
    return Interface(
        id=iid,
        device_index=int(attachment.get("DeviceIndex", DETACHED_INDEX)) if attached else DETACHED_INDEX,
        subnet_id=d.get("SubnetId", ""),
        primary_ip=primary,
        addresses=tuple(sorted(secondaries, key=address_key)),
        prefixes=tuple(sorted((p["Ipv4Prefix"] for p in d.get("Ipv4Prefixes") or ()), key=_prefix_key)),
        ipv6_prefixes=tuple(
            sorted(
                (str(p["Ipv6Prefix"]) for p in d.get("Ipv6Prefixes") or () if p.get("Ipv6Prefix")),
                key=ipv6_prefix_key,
            )
        ),
        security_groups=tuple(g["GroupId"] for g in d.get("Groups") or ()),
        tags=_tag_map(d.get("TagSet")),
        instance_id=attachment.get("InstanceId", "") if attached else "",
        attachment_id=attachment.get("AttachmentId", "") if attached else "",
        delete_on_termination=bool(attachment.get("DeleteOnTermination", False)) and attached,
        link=reported(d.get("MacAddress"), card, interface_id=iid, interface_type=d.get("InterfaceType")),
    )


def _prefix_key(prefix: str) -> tuple[int, ...]:
    return address_key(prefix.split("/", 1)[0])


class Boto3Api:
    """:class:`~providers.ec2.provider.Ec2Api` over boto3 (see the module docstring)."""

    def __init__(self, client: Ec2Client) -> None:
        self.client = client
        self._page_size = client.settings.max_results

    async def describe_subnets(self, *, filters: Filters) -> list[Subnet]:
        items = await self.client.pages(
            "DescribeSubnets", "Subnets", Filters=ec2_filters(filters), MaxResults=self._page_size
        )
        return [parse_subnet(d) for d in items]

    async def describe_security_groups(self, *, filters: Filters) -> list[SecurityGroup]:
        items = await self.client.pages(
            "DescribeSecurityGroups",
            "SecurityGroups",
            Filters=ec2_filters(filters),
            MaxResults=self._page_size,
        )
        return [parse_security_group(d) for d in items]

    async def describe_instances(
        self, *, instance_ids: Sequence[str] = (), filters: Filters | None = None
    ) -> list[InstanceInfo]:
        # The resync's listing (every live instance in scope): its end turns the reuse cache over.
        full = not instance_ids and "instance-id" not in (filters or {})
        items = await self.client.pages(
            "DescribeInstances",
            "Reservations",
            full=full,
            **self._listing("InstanceIds", instance_ids, filters),
        )
        infos: list[InstanceInfo] = []
        for item in items:  # InstanceInfo from the listing parser, or botocore's reservations
            if isinstance(item, InstanceInfo):
                infos.append(item)
            else:
                infos.extend(parse_instance(i) for i in item.get("Instances") or ())
        return infos

    async def describe_network_interfaces(
        self, *, interface_ids: Sequence[str] = (), filters: Filters | None = None
    ) -> list[Interface]:
        # The resync's listing (the whole VPC, or the account): unchanged interfaces of the previous
        # one are reused, and its end turns the reuse cache over.
        full = not interface_ids and set(filters or ()) <= {"vpc-id"}
        items = await self.client.pages(
            "DescribeNetworkInterfaces",
            "NetworkInterfaces",
            full=full,
            **self._listing("NetworkInterfaceIds", interface_ids, filters),
        )
        return [i if isinstance(i, Interface) else parse_interface(i) for i in items]

    async def assign_private_ip_addresses(
        self, *, interface_id: str, secondary_count: int, prefix_count: int, addresses: Sequence[str] = ()
    ) -> list[str]:
        params: dict[str, Any] = {"NetworkInterfaceId": interface_id}
        if prefix_count:
            params["Ipv4PrefixCount"] = prefix_count
        if secondary_count:
            params["SecondaryPrivateIpAddressCount"] = secondary_count
        if addresses:
            # Never with reassignment: an address another interface holds must be refused, not moved.
            params["PrivateIpAddresses"] = list(addresses)
        answer = await self.client.call("AssignPrivateIpAddresses", **params)
        if prefix_count:
            return sorted(
                (p["Ipv4Prefix"] for p in answer.get("AssignedIpv4Prefixes") or ()), key=_prefix_key
            )
        new = (p["PrivateIpAddress"] for p in answer.get("AssignedPrivateIpAddresses") or ())
        return sorted(new, key=address_key)

    async def unassign_private_ip_addresses(
        self, *, interface_id: str, addresses: Sequence[str], prefixes: Sequence[str]
    ) -> None:
        params: dict[str, Any] = {"NetworkInterfaceId": interface_id}
        if addresses:
            params["PrivateIpAddresses"] = list(addresses)
        if prefixes:
            params["Ipv4Prefixes"] = list(prefixes)
        await self.client.call("UnassignPrivateIpAddresses", **params)

    async def create_network_interface(
        self,
        *,
        subnet_id: str,
        groups: Sequence[str],
        secondary_count: int,
        prefix_count: int,
        tags: Mapping[str, str],
        description: str,
        client_token: str,
        ipv6_prefix_count: int = 0,
    ) -> Interface:
        params: dict[str, Any] = {
            "SubnetId": subnet_id,
            "Groups": list(groups),
            "Description": description,
            "TagSpecifications": [{"ResourceType": "network-interface", "Tags": ec2_tags(tags)}],
        }
        if client_token:
            params["ClientToken"] = client_token
        if prefix_count:
            params["Ipv4PrefixCount"] = prefix_count
        if secondary_count:
            params["SecondaryPrivateIpAddressCount"] = secondary_count
        if ipv6_prefix_count:
            params["Ipv6PrefixCount"] = ipv6_prefix_count
        answer = await self.client.call("CreateNetworkInterface", **params)
        return parse_interface(answer["NetworkInterface"])

    async def assign_ipv6_addresses(self, *, interface_id: str, prefix_count: int) -> list[str]:
        answer = await self.client.call(
            "AssignIpv6Addresses", NetworkInterfaceId=interface_id, Ipv6PrefixCount=prefix_count
        )
        return sorted(str(p) for p in answer.get("AssignedIpv6Prefixes") or ())

    async def attach_network_interface(
        self, *, interface_id: str, instance_id: str, device_index: int, network_card: int = 0
    ) -> str:
        answer = await self.client.call(
            "AttachNetworkInterface",
            NetworkInterfaceId=interface_id,
            InstanceId=instance_id,
            DeviceIndex=device_index,
            NetworkCardIndex=network_card,
        )
        return str(answer["AttachmentId"])

    async def modify_network_interface_attribute(
        self, *, interface_id: str, attachment_id: str, delete_on_termination: bool
    ) -> None:
        await self.client.call(
            "ModifyNetworkInterfaceAttribute",
            NetworkInterfaceId=interface_id,
            Attachment={"AttachmentId": attachment_id, "DeleteOnTermination": delete_on_termination},
        )

    async def detach_network_interface(self, *, attachment_id: str, force: bool = False) -> None:
        await self.client.call("DetachNetworkInterface", AttachmentId=attachment_id, Force=force)

    async def delete_network_interface(self, *, interface_id: str) -> None:
        await self.client.call("DeleteNetworkInterface", NetworkInterfaceId=interface_id)

    def _listing(self, ids_key: str, ids: Sequence[str], filters: Filters | None) -> dict[str, Any]:
        """Parameters of a Describe call. EC2 refuses ``MaxResults`` together with explicit ids
        (and pages those answers itself), so a page size is sent only for filtered listings."""
        params: dict[str, Any] = {}
        if ids:
            params[ids_key] = list(ids)
        else:
            params["MaxResults"] = self._page_size
        if filters:
            params["Filters"] = ec2_filters(filters)
        return params
