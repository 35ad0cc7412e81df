"""The mutating operations of the EC2 front end: each one is the in-memory cloud's own operation.

A request is parsed, checked for parameters the operation takes, and handed to the matching
:class:`~providers.sim.cloud.SimCloud` coroutine (``AssignPrivateIpAddresses`` →
:meth:`~providers.sim.cloud.SimCloud.assign_private_ip_addresses`…), which passes the cloud's gate and
applies EC2's semantics; its answer is rendered as EC2's. Nothing here decides anything about
addresses, limits or attachments: a wire double that re-implemented them could drift from the
cloud the simulator and the other tests use.

Parameters EC2 takes but the cloud does not model (explicit addresses, IPv6 addresses, explicit IPv6
prefixes — a count of /80 prefixes is modelled —, ENA Express, other network cards, DryRun…) are
refused with ``UnsupportedOperation`` naming them, never ignored: a provider that starts sending
one must fail a test here rather than be half understood.
"""

from __future__ import annotations

from eni_ipam_testkit.ec2_wire import render
from eni_ipam_testkit.ec2_wire.describe import Handler
from eni_ipam_testkit.ec2_wire.query import Query
from eni_ipam_testkit.ec2_wire.tables import Fragments, Tables
from providers.sim.cloud import SimCloud
from providers.sim.records import InterfaceRecord, SimError

_RETURN_TRUE = (b"<return>true</return>",)
_ENI_TAGS = "network-interface"


class Mutator:
    """The mutating handlers over one cloud (see the module docstring)."""

    def __init__(self, cloud: SimCloud, tables: Tables, fragments: Fragments) -> None:
        self.cloud = cloud
        self.tables = tables
        self.renderer = fragments.renderer

    def handlers(self) -> dict[str, Handler]:
        return {
            "AssignPrivateIpAddresses": self.assign_private_ip_addresses,
            "UnassignPrivateIpAddresses": self.unassign_private_ip_addresses,
            "AssignIpv6Addresses": self.assign_ipv6_addresses,
            "CreateNetworkInterface": self.create_network_interface,
            "AttachNetworkInterface": self.attach_network_interface,
            "ModifyNetworkInterfaceAttribute": self.modify_network_interface_attribute,
            "DetachNetworkInterface": self.detach_network_interface,
            "DeleteNetworkInterface": self.delete_network_interface,
        }

    async def assign_private_ip_addresses(self, q: Query, rid: str) -> bytes:
        # PrivateIpAddress.N (botocore's PrivateIpAddresses) names the addresses (dense placement);
        # AllowReassignment, which would move an address from another interface, is not modelled.
        q.accept(
            {"NetworkInterfaceId", "SecondaryPrivateIpAddressCount", "Ipv4PrefixCount", "PrivateIpAddress"},
            {"Ipv4Prefix", "AllowReassignment"},
        )
        interface_id = q.text("NetworkInterfaceId")
        prefix_count = q.integer("Ipv4PrefixCount", 0)
        new = await self.cloud.assign_private_ip_addresses(
            interface_id=interface_id,
            secondary_count=q.integer("SecondaryPrivateIpAddressCount", 0),
            prefix_count=prefix_count,
            addresses=tuple(q.strings("PrivateIpAddress")),
        )
        addresses, prefixes = ([], new) if prefix_count else (new, [])
        return render.document(
            q.action,
            rid,
            (
                render.element("networkInterfaceId", interface_id),
                render.string_set("assignedPrivateIpAddressesSet", "privateIpAddress", addresses),
                render.string_set("assignedIpv4PrefixSet", "ipv4Prefix", prefixes),
            ),
        )

    async def assign_ipv6_addresses(self, q: Query, rid: str) -> bytes:
        # botocore sends the members by their locationName, capitalised: Ipv6Prefixes as
        # Ipv6Prefix.N, Ipv6Addresses as Ipv6Addresses.N.
        q.accept(
            {"NetworkInterfaceId", "Ipv6PrefixCount"}, {"Ipv6AddressCount", "Ipv6Addresses", "Ipv6Prefix"}
        )
        interface_id = q.text("NetworkInterfaceId")
        prefixes = await self.cloud.assign_ipv6_addresses(
            interface_id=interface_id, prefix_count=q.integer("Ipv6PrefixCount", 0)
        )
        # AssignedIpv6Prefixes is a list of strings (IpPrefixList: bare <item>s), unlike the
        # ipv6PrefixSet of an interface.
        items = "".join(f"<item>{p}</item>" for p in prefixes)
        return render.document(
            q.action,
            rid,
            (
                render.element("networkInterfaceId", interface_id),
                b"<assignedIpv6Addresses/>",
                f"<assignedIpv6PrefixSet>{items}</assignedIpv6PrefixSet>".encode()
                if items
                else b"<assignedIpv6PrefixSet/>",
            ),
        )

    async def unassign_private_ip_addresses(self, q: Query, rid: str) -> bytes:
        q.accept({"NetworkInterfaceId", "PrivateIpAddress", "Ipv4Prefix"})
        await self.cloud.unassign_private_ip_addresses(
            interface_id=q.text("NetworkInterfaceId"),
            addresses=tuple(q.strings("PrivateIpAddress")),
            prefixes=tuple(q.strings("Ipv4Prefix")),
        )
        return render.document(q.action, rid, _RETURN_TRUE)

    async def create_network_interface(self, q: Query, rid: str) -> bytes:
        q.accept(
            {
                "SubnetId",
                "SecurityGroupId",
                "Description",
                "TagSpecification",
                "ClientToken",
                "SecondaryPrivateIpAddressCount",
                "Ipv4PrefixCount",
                "Ipv6PrefixCount",
            },
            {
                "PrivateIpAddress",
                "PrivateIpAddresses",
                "Ipv4Prefix",
                "Ipv6Address",
                "Ipv6Addresses",
                "Ipv6AddressCount",
                "Ipv6Prefix",
                "InterfaceType",
                "EnablePrimaryIpv6",
                "ConnectionTrackingSpecification",
                "Operator",
            },
        )
        specifications = q.tag_specifications()
        for resource in specifications:
            if resource != _ENI_TAGS:
                raise SimError(
                    "InvalidParameterValue",
                    f"'{resource}' is not a valid taggable resource type for this operation.",
                )
        token = q.text("ClientToken", "")
        description = q.text("Description", "")
        view = await self.cloud.create_network_interface(
            subnet_id=q.text("SubnetId"),
            groups=tuple(q.strings("SecurityGroupId")),
            secondary_count=q.integer("SecondaryPrivateIpAddressCount", 0),
            prefix_count=q.integer("Ipv4PrefixCount", 0),
            tags=specifications.get(_ENI_TAGS, {}),
            description=description,
            client_token=token,
            ipv6_prefix_count=q.integer("Ipv6PrefixCount", 0),
        )
        # The record as it is now (a repeated token answers the interface as it is now, as EC2
        # does); a view of it when it is already gone again.
        record = self.tables.interfaces.rows.get(view.id)
        if record is None:
            subnet = self.tables.subnets.rows[view.subnet_id]
            record = InterfaceRecord(
                id=view.id,
                subnet_id=view.subnet_id,
                vpc_id=subnet.vpc_id,
                zone=subnet.zone,
                primary_ip=view.primary_ip,
                security_groups=view.security_groups,
                tags=dict(view.tags),
                description=description,
                created_at=view.created_at,
                addresses=list(view.addresses),
                prefixes=list(view.prefixes),
                ipv6_prefixes=list(view.ipv6_prefixes),
            )
        parts = [self.renderer.interface(record, tag="networkInterface")]
        if token:
            parts.append(render.element("clientToken", token))
        return render.document(q.action, rid, parts)

    async def attach_network_interface(self, q: Query, rid: str) -> bytes:
        q.accept(
            {"NetworkInterfaceId", "InstanceId", "DeviceIndex", "NetworkCardIndex"},
            {"EnaSrdSpecification", "EnaQueueCount"},
        )
        card = q.integer("NetworkCardIndex", 0)
        attachment = await self.cloud.attach_network_interface(
            interface_id=q.text("NetworkInterfaceId"),
            instance_id=q.text("InstanceId"),
            device_index=q.integer("DeviceIndex"),
            network_card=card,
        )
        return render.document(
            q.action,
            rid,
            (render.element("attachmentId", attachment), render.element("networkCardIndex", str(card))),
        )

    async def modify_network_interface_attribute(self, q: Query, rid: str) -> bytes:
        q.accept(
            {"NetworkInterfaceId", "Attachment"},
            {
                "Description",
                "SourceDestCheck",
                "SecurityGroupId",
                "EnaSrdSpecification",
                "EnablePrimaryIpv6",
                "ConnectionTrackingSpecification",
                "AssociatePublicIpAddress",
                "AssociatedSubnetId",
            },
        )
        attachment = Query(q.struct("Attachment"))
        if not attachment.params:
            raise SimError("MissingParameter", "The request must contain an attribute to modify")
        attachment.action = q.action
        attachment.only({"AttachmentId", "DeleteOnTermination", "EnaSrdSpecification", "EnaQueueCount"})
        if attachment.has("EnaSrdSpecification") or attachment.has("EnaQueueCount"):
            raise SimError("UnsupportedOperation", "the in-memory cloud does not model ENA Express")
        await self.cloud.modify_network_interface_attribute(
            interface_id=q.text("NetworkInterfaceId"),
            attachment_id=attachment.text("AttachmentId"),
            delete_on_termination=attachment.boolean("DeleteOnTermination"),
        )
        return render.document(q.action, rid, _RETURN_TRUE)

    async def detach_network_interface(self, q: Query, rid: str) -> bytes:
        q.accept({"AttachmentId", "Force"})
        await self.cloud.detach_network_interface(
            attachment_id=q.text("AttachmentId"), force=q.boolean("Force", False)
        )
        return render.document(q.action, rid, _RETURN_TRUE)

    async def delete_network_interface(self, q: Query, rid: str) -> bytes:
        q.accept({"NetworkInterfaceId"})
        await self.cloud.delete_network_interface(interface_id=q.text("NetworkInterfaceId"))
        return render.document(q.action, rid, _RETURN_TRUE)
