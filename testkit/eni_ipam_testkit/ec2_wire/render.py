"""EC2's XML answers, element for element, from the in-memory cloud's records.

Element names, nesting and order follow EC2's 2016-11-15 API as botocore's model reads it
(``networkInterfaceSet/item``, ``privateIpAddressesSet/item/{privateIpAddress,privateDnsName,primary}``,
``ipv4PrefixSet/item/ipv4Prefix``, ``attachment/{attachmentId,instanceId,instanceOwnerId,deviceIndex,
networkCardIndex,status,attachTime,deleteOnTermination}``, ``reservationSet/item/instancesSet/item``…).
Answers are as heavy as EC2's, because parsers are compared on them: every field EC2 returns for a
VPC interface or a running instance is there, with plausible, deterministic values where the cloud
keeps none (volume ids derived from ids, an account id, DNS names from addresses,
an EKS node's metadata options). Times are an epoch (2026-01-01T00:00:00Z) plus the cloud clock's
reading at creation.

Sizes (compact XML, no indentation; measured by tests/testkit/test_ec2_wire.py, which asserts ranges),
with EC2's id lengths (``eni-`` and 17 hex digits…) in ``us-east-1``:

* a DescribeNetworkInterfaces item of an attached interface with 10 secondary addresses, one
  security group and no tags: 2,769 bytes, of which 1,551 are the 11 ``privateIpAddressesSet``
  entries (141 bytes each: address, DNS name, primary flag); two groups and eni-ipam's three
  ownership tags make it ~3,060;
* a DescribeInstances reservation item of a running instance with 4 such interfaces nested (its
  ten node-group tags included): 13,907 bytes, ~2,500 per nested interface and ~3,800 for the
  instance itself;
* the envelope of an answer: ~200 bytes.

EC2 indents its answers; these are not, so a byte here is a byte of content. Text is escaped
(``&``, ``<``, ``>``) wherever it comes from a caller (tags, descriptions, names).
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from xml.sax.saxutils import escape

from eni_ipam.core import model
from providers.sim.records import InstanceRecord, InterfaceRecord, SubnetRecord, Vpc

NAMESPACE = "http://ec2.amazonaws.com/doc/2016-11-15/"
OWNER_ID = "111122223333"
"""The account every resource belongs to."""
REQUESTER_ID = "AROAZ3EXAMPLE7NODEROLE:eni-ipam"
"""The principal that created the interfaces (EC2 shows the creating role's id)."""
IMAGE_ID = "ami-0f3c9e8a1d7b52c64"
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
_ZONE = re.compile(r"^([a-z]{2})-([a-z]+)-(\d+)([a-z])$")
_STATE_CODES = {
    "pending": 0,
    "running": 16,
    "shutting-down": 32,
    "terminated": 48,
    "stopping": 64,
    "stopped": 80,
}
_STATE_REASONS = {
    "stopped": ("Client.UserInitiatedShutdown", "Client.UserInitiatedShutdown: User initiated shutdown"),
    "terminated": ("Client.UserInitiatedShutdown", "Client.UserInitiatedShutdown: User initiated shutdown"),
}


@functools.lru_cache(maxsize=65536)  # strftime is a third of an item's cost; setup times repeat
def timestamp(seconds: float) -> str:
    """EC2's timestamp text for ``seconds`` after the epoch."""
    return (EPOCH + datetime.timedelta(seconds=max(seconds, 0.0))).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def digest(seed: str, chars: int) -> str:
    """``chars`` hex digits derived from ``seed``: stable names for what the cloud does not keep."""
    return hashlib.blake2b(seed.encode(), digest_size=(chars + 1) // 2).hexdigest()[:chars]


@functools.lru_cache(maxsize=256)
def zone_id(zone: str) -> str:
    """EC2's zone id (``use1-az1`` for ``us-east-1a``); the name itself when it has no region."""
    found = _ZONE.match(zone)
    if found is None:
        return zone
    return f"{found[1]}{found[2][0]}{found[3]}-az{ord(found[4]) - ord('a') + 1}"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def tag_set(tags: Mapping[str, str]) -> str:
    if not tags:
        return "<tagSet/>"
    items = "".join(
        f"<item><key>{escape(k)}</key><value>{escape(v)}</value></item>" for k, v in sorted(tags.items())
    )
    return f"<tagSet>{items}</tagSet>"


def document(action: str, request_id: str, parts: Iterable[bytes]) -> bytes:
    """A whole answer: ``<{action}Response>`` with its namespace and ``requestId``, then ``parts``."""
    head = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<{action}Response xmlns="{NAMESPACE}">'
        f"<requestId>{request_id}</requestId>"
    ).encode()
    return b"".join((head, *parts, f"</{action}Response>".encode()))


def error_document(code: str, message: str, request_id: str) -> bytes:
    """EC2's error answer (note ``RequestID``, not ``requestId``)."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
        f"</Error></Errors><RequestID>{request_id}</RequestID></Response>"
    ).encode()


def element(name: str, value: str) -> bytes:
    return f"<{name}>{escape(value)}</{name}>".encode()


def string_set(name: str, member: str, values: Sequence[str]) -> bytes:
    """``<name><item><member>v</member></item>…</name>`` (``<name/>`` when empty)."""
    if not values:
        return f"<{name}/>".encode()
    items = "".join(f"<item><{member}>{escape(v)}</{member}></item>" for v in values)
    return f"<{name}>{items}</{name}>".encode()


class Renderer:
    """Items of each shape, for one region's DNS names, with the security groups' names."""

    def __init__(self, region: str, groups: Mapping[str, model.SecurityGroup]) -> None:
        """Args:
        region: the region whose internal DNS names addresses get (``us-east-1``: ``ec2.internal``).
        groups: the cloud's security groups, read when an item names one (for its name).
        """
        self.region = region
        self.dns_suffix = "ec2.internal" if region == "us-east-1" else f"{region}.compute.internal"
        self._groups = groups
        self._group_sets: dict[tuple[str, ...], str] = {}
        """Rendered ``groupSet`` by group ids: a group's name never changes in the cloud."""

    def dns_name(self, address: str) -> str:
        return f"ip-{address.replace('.', '-')}.{self.dns_suffix}"

    def group_name(self, group_id: str) -> str:
        group = self._groups.get(group_id)
        name = group.tags.get("Name") if group is not None else None
        return name or f"eks-node-{group_id}"

    def group_set(self, group_ids: tuple[str, ...]) -> str:
        found = self._group_sets.get(group_ids)
        if found is None:
            found = self._group_sets[group_ids] = self._render_group_set(group_ids)
        return found

    def _render_group_set(self, group_ids: Iterable[str]) -> str:
        items = "".join(
            f"<item><groupId>{g}</groupId><groupName>{escape(self.group_name(g))}</groupName></item>"
            for g in group_ids
        )
        return f"<groupSet>{items}</groupSet>" if items else "<groupSet/>"

    def addresses(self, iface: InterfaceRecord) -> str:
        """``privateIpAddressesSet``: the primary first, then the secondaries in address order."""
        items = [
            f"<item><privateIpAddress>{a}</privateIpAddress><privateDnsName>{self.dns_name(a)}"
            f"</privateDnsName><primary>{_bool(n == 0)}</primary></item>"
            for n, a in enumerate((iface.primary_ip, *iface.addresses) if iface.primary_ip else ())
        ]
        if not items:  # an EFA-only interface: no address at all
            return "<privateIpAddressesSet/>"
        return f"<privateIpAddressesSet>{''.join(items)}</privateIpAddressesSet>"

    @staticmethod
    def prefixes(iface: InterfaceRecord) -> str:
        if not iface.prefixes:
            return "<ipv4PrefixSet/>"
        items = "".join(f"<item><ipv4Prefix>{p}</ipv4Prefix></item>" for p in iface.prefixes)
        return f"<ipv4PrefixSet>{items}</ipv4PrefixSet>"

    @staticmethod
    def ipv6_prefixes(iface: InterfaceRecord) -> str:
        """``ipv6PrefixSet``: the delegated /80s, in the order the cloud holds them (EC2's
        ``Ipv6Prefixes[].Ipv6Prefix``, the same ``item/ipv6Prefix`` in both interface shapes)."""
        if not iface.ipv6_prefixes:
            return "<ipv6PrefixSet/>"
        items = "".join(f"<item><ipv6Prefix>{p}</ipv6Prefix></item>" for p in iface.ipv6_prefixes)
        return f"<ipv6PrefixSet>{items}</ipv6PrefixSet>"

    def interface(self, iface: InterfaceRecord, tag: str = "item") -> bytes:
        """One ``NetworkInterface``: a DescribeNetworkInterfaces ``item``, or CreateNetworkInterface's
        ``networkInterface``."""
        attachment = ""
        if iface.instance_id:
            attachment = (
                f"<attachment><attachmentId>{iface.attachment_id}</attachmentId>"
                f"<instanceId>{iface.instance_id}</instanceId><instanceOwnerId>{OWNER_ID}</instanceOwnerId>"
                f"<deviceIndex>{iface.device_index}</deviceIndex><networkCardIndex>{iface.network_card}</networkCardIndex>"
                f"<status>attached</status><attachTime>{timestamp(iface.created_at)}</attachTime>"
                f"<deleteOnTermination>{_bool(iface.delete_on_termination)}</deleteOnTermination>"
                "</attachment>"
            )
        return (
            f"<{tag}><networkInterfaceId>{iface.id}</networkInterfaceId><subnetId>{iface.subnet_id}</subnetId>"
            f"<vpcId>{iface.vpc_id}</vpcId><availabilityZone>{iface.zone}</availabilityZone>"
            f"<description>{escape(iface.description)}</description><ownerId>{OWNER_ID}</ownerId>"
            f"<requesterId>{REQUESTER_ID}</requesterId><requesterManaged>false</requesterManaged>"
            f"<status>{iface.status}</status><macAddress>{iface.mac_address}</macAddress>"
            f"{self.primary(iface)}"
            f"<sourceDestCheck>true</sourceDestCheck>{self.group_set(iface.security_groups)}{attachment}"
            f"{tag_set(iface.tags)}{self.addresses(iface)}{self.prefixes(iface)}"
            f"<ipv6AddressesSet/>{self.ipv6_prefixes(iface)}<interfaceType>{iface.kind.label}</interfaceType>"
            f"</{tag}>"
        ).encode()

    def instance_interface(self, iface: InterfaceRecord) -> str:
        """One ``InstanceNetworkInterface``: an attached interface nested in its instance."""
        return (
            f"<item><networkInterfaceId>{iface.id}</networkInterfaceId><subnetId>{iface.subnet_id}</subnetId>"
            f"<vpcId>{iface.vpc_id}</vpcId><description>{escape(iface.description)}</description>"
            f"<ownerId>{OWNER_ID}</ownerId><status>{iface.status}</status>"
            f"<macAddress>{iface.mac_address}</macAddress>{self.primary(iface)}"
            f"<sourceDestCheck>true</sourceDestCheck>{self.group_set(iface.security_groups)}"
            f"<attachment><attachmentId>{iface.attachment_id}</attachmentId>"
            f"<deviceIndex>{iface.device_index}</deviceIndex><status>attached</status>"
            f"<attachTime>{timestamp(iface.created_at)}</attachTime>"
            f"<deleteOnTermination>{_bool(iface.delete_on_termination)}</deleteOnTermination>"
            f"<networkCardIndex>{iface.network_card}</networkCardIndex></attachment>"
            f"{self.addresses(iface)}{self.prefixes(iface)}<ipv6AddressesSet/>{self.ipv6_prefixes(iface)}"
            f"<interfaceType>{iface.kind.label}</interfaceType></item>"
        )

    def primary(self, iface: InterfaceRecord) -> str:
        """The primary address and its DNS name; nothing for an EFA-only interface, which has none."""
        if not iface.primary_ip:
            return ""
        return (
            f"<privateIpAddress>{iface.primary_ip}</privateIpAddress>"
            f"<privateDnsName>{self.dns_name(iface.primary_ip)}</privateDnsName>"
        )

    def reservation(
        self, instance: InstanceRecord, interfaces: Sequence[InterfaceRecord], tags: Mapping[str, str]
    ) -> bytes:
        """One DescribeInstances ``reservationSet`` item: a reservation of one instance with its
        attached interfaces (card 0 first, each card in device-index order) nested."""
        primary = next((i for i in interfaces if i.device_index == 0 and i.network_card == 0), None)
        address = primary.primary_ip if primary is not None else ""
        launched = timestamp(primary.created_at if primary is not None else 0.0)
        arch = "arm64" if re.match(r"^[a-z]+\d+[a-z]*g[a-z]*\.", instance.type) else "x86_64"
        reason = _STATE_REASONS.get(instance.state)
        state_reason = (
            f"<stateReason><code>{reason[0]}</code><message>{reason[1]}</message></stateReason>"
            if reason
            else ""
        )
        nested = "".join(self.instance_interface(i) for i in interfaces)
        seed = digest(instance.id, 17)
        return (
            f"<item><reservationId>r-{seed}</reservationId><ownerId>{OWNER_ID}</ownerId>"
            "<requesterId>940372691376</requesterId><groupSet/><instancesSet>"
            f"<item><instanceId>{instance.id}</instanceId><imageId>{IMAGE_ID}</imageId>"
            f"<instanceState><code>{_STATE_CODES[instance.state]}</code><name>{instance.state}</name>"
            f"</instanceState><privateDnsName>{self.dns_name(address) if address else ''}</privateDnsName>"
            "<dnsName/><reason/><keyName>eks-nodes</keyName><amiLaunchIndex>0</amiLaunchIndex><productCodes/>"
            f"<instanceType>{instance.type}</instanceType><launchTime>{launched}</launchTime>"
            f"<placement><availabilityZoneId>{zone_id(instance.zone)}</availabilityZoneId><groupName/>"
            f"<tenancy>default</tenancy><availabilityZone>{instance.zone}</availabilityZone></placement>"
            "<monitoring><state>disabled</state></monitoring>"
            f"<subnetId>{instance.subnet_id}</subnetId><vpcId>{instance.vpc_id}</vpcId>"
            f"<privateIpAddress>{address}</privateIpAddress><sourceDestCheck>true</sourceDestCheck>"
            f"{self.group_set(instance.security_groups)}{state_reason}<architecture>{arch}</architecture>"
            "<rootDeviceType>ebs</rootDeviceType><rootDeviceName>/dev/xvda</rootDeviceName>"
            "<blockDeviceMapping><item><deviceName>/dev/xvda</deviceName><ebs>"
            f"<volumeId>vol-{seed}</volumeId><status>attached</status><attachTime>{launched}</attachTime>"
            "<deleteOnTermination>true</deleteOnTermination></ebs></item></blockDeviceMapping>"
            f"<virtualizationType>hvm</virtualizationType><clientToken>fleet-{seed}</clientToken>"
            f"{tag_set(tags)}<hypervisor>xen</hypervisor><networkInterfaceSet>{nested}</networkInterfaceSet>"
            f"<iamInstanceProfile><arn>arn:aws:iam::{OWNER_ID}:instance-profile/eks-nodes</arn>"
            "<id>AIPAZ3EXAMPLEPROFILE01</id></iamInstanceProfile><ebsOptimized>true</ebsOptimized>"
            "<enaSupport>true</enaSupport><cpuOptions><coreCount>2</coreCount>"
            "<threadsPerCore>2</threadsPerCore></cpuOptions><capacityReservationSpecification>"
            "<capacityReservationPreference>open</capacityReservationPreference>"
            "</capacityReservationSpecification><hibernationOptions><configured>false</configured>"
            "</hibernationOptions><enclaveOptions><enabled>false</enabled></enclaveOptions>"
            "<metadataOptions><state>applied</state><httpTokens>required</httpTokens>"
            "<httpPutResponseHopLimit>2</httpPutResponseHopLimit><httpEndpoint>enabled</httpEndpoint>"
            "<httpProtocolIpv6>disabled</httpProtocolIpv6><instanceMetadataTags>disabled"
            "</instanceMetadataTags></metadataOptions><maintenanceOptions><autoRecovery>default"
            "</autoRecovery></maintenanceOptions><platformDetails>Linux/UNIX</platformDetails>"
            f"<usageOperation>RunInstances</usageOperation><usageOperationUpdateTime>{launched}"
            "</usageOperationUpdateTime><privateDnsNameOptions><hostnameType>ip-name</hostnameType>"
            "<enableResourceNameDnsARecord>false</enableResourceNameDnsARecord>"
            "<enableResourceNameDnsAAAARecord>false</enableResourceNameDnsAAAARecord>"
            "</privateDnsNameOptions><currentInstanceBootMode>legacy-bios</currentInstanceBootMode>"
            "<networkPerformanceOptions><bandwidthWeighting>default</bandwidthWeighting>"
            "</networkPerformanceOptions><operator><managed>false</managed></operator></item>"
            "</instancesSet></item>"
        ).encode()

    def subnet(self, subnet: SubnetRecord) -> bytes:
        arn = f"arn:aws:ec2:{self.region}:{OWNER_ID}:subnet/{subnet.id}"
        return (
            f"<item><subnetId>{subnet.id}</subnetId><subnetArn>{arn}</subnetArn><state>available</state>"
            f"<ownerId>{OWNER_ID}</ownerId><vpcId>{subnet.vpc_id}</vpcId>"
            f"<cidrBlock>{subnet.space.network}</cidrBlock>{self.subnet_ipv6(subnet)}"
            f"<availableIpAddressCount>{subnet.space.free}</availableIpAddressCount>"
            f"<availabilityZone>{subnet.zone}</availabilityZone>"
            f"<availabilityZoneId>{zone_id(subnet.zone)}</availabilityZoneId>"
            "<defaultForAz>false</defaultForAz><mapPublicIpOnLaunch>false</mapPublicIpOnLaunch>"
            "<mapCustomerOwnedIpOnLaunch>false</mapCustomerOwnedIpOnLaunch>"
            "<assignIpv6AddressOnCreation>false</assignIpv6AddressOnCreation><enableDns64>false</enableDns64>"
            "<ipv6Native>false</ipv6Native><privateDnsNameOptionsOnLaunch><hostnameType>ip-name</hostnameType>"
            "<enableResourceNameDnsARecord>false</enableResourceNameDnsARecord>"
            "<enableResourceNameDnsAAAARecord>false</enableResourceNameDnsAAAARecord>"
            f"</privateDnsNameOptionsOnLaunch>{tag_set(subnet.tags)}</item>"
        ).encode()

    @staticmethod
    def subnet_ipv6(subnet: SubnetRecord) -> str:
        """``ipv6CidrBlockAssociationSet``: the subnet's /64, associated, when it has one."""
        if subnet.ipv6 is None:
            return "<ipv6CidrBlockAssociationSet/>"
        return (
            "<ipv6CidrBlockAssociationSet><item>"
            f"<associationId>subnet-cidr-assoc-{digest(subnet.id, 17)}</associationId>"
            f"<ipv6CidrBlock>{subnet.ipv6}</ipv6CidrBlock>"
            "<ipv6CidrBlockState><state>associated</state></ipv6CidrBlockState>"
            "<ipv6AddressAttribute>public</ipv6AddressAttribute><ipSource>amazon</ipSource>"
            "</item></ipv6CidrBlockAssociationSet>"
        )

    def security_group(self, group: model.SecurityGroup) -> bytes:
        arn = f"arn:aws:ec2:{self.region}:{OWNER_ID}:security-group/{group.id}"
        return (
            f"<item><ownerId>{OWNER_ID}</ownerId><groupId>{group.id}</groupId>"
            f"<groupName>{escape(self.group_name(group.id))}</groupName>"
            "<groupDescription>EKS node shared security group</groupDescription>"
            f"<vpcId>{group.vpc_id}</vpcId><securityGroupArn>{arn}</securityGroupArn><ipPermissions/>"
            "<ipPermissionsEgress><item><ipProtocol>-1</ipProtocol><groups/><ipRanges><item>"
            "<cidrIp>0.0.0.0/0</cidrIp></item></ipRanges><ipv6Ranges/><prefixListIds/></item>"
            f"</ipPermissionsEgress>{tag_set(group.tags)}</item>"
        ).encode()

    @staticmethod
    def vpc(vpc: Vpc) -> bytes:
        seed = digest(vpc.id, 17)
        return (
            f"<item><vpcId>{vpc.id}</vpcId><ownerId>{OWNER_ID}</ownerId><state>available</state>"
            f"<cidrBlock>{vpc.cidr}</cidrBlock><cidrBlockAssociationSet><item><cidrBlock>{vpc.cidr}</cidrBlock>"
            f"<associationId>vpc-cidr-assoc-{seed}</associationId><cidrBlockState><state>associated</state>"
            f"</cidrBlockState></item></cidrBlockAssociationSet><dhcpOptionsId>dopt-{seed}</dhcpOptionsId>"
            "<instanceTenancy>default</instanceTenancy><isDefault>false</isDefault><tagSet/></item>"
        ).encode()

    @staticmethod
    def instance_type(name: str, limits: model.InstanceLimits) -> bytes:
        """An ``InstanceTypeInfo`` whose network facts convert back to ``limits``
        (:func:`providers.ec2.limits.convert_instance_type`): no hypervisor means bare metal."""
        bare_metal = not limits.hypervisor
        hypervisor = "" if bare_metal else f"<hypervisor>{limits.hypervisor}</hypervisor>"
        per_card = limits.cards or (limits.adapters,)
        cards = "".join(
            f"<item><networkCardIndex>{index}</networkCardIndex>"
            "<networkPerformance>Up to 10 Gigabit</networkPerformance>"
            f"<maximumNetworkInterfaces>{count}</maximumNetworkInterfaces></item>"
            for index, count in enumerate(per_card)
            if count
        )
        return (
            f"<item><instanceType>{name}</instanceType><currentGeneration>true</currentGeneration>"
            "<freeTierEligible>false</freeTierEligible><supportedUsageClasses><item>on-demand</item>"
            "<item>spot</item></supportedUsageClasses><supportedRootDeviceTypes><item>ebs</item>"
            "</supportedRootDeviceTypes><supportedVirtualizationTypes><item>hvm</item>"
            f"</supportedVirtualizationTypes><bareMetal>{_bool(bare_metal)}</bareMetal>{hypervisor}"
            "<networkInfo><networkPerformance>Up to 10 Gigabit</networkPerformance>"
            f"<maximumNetworkInterfaces>{sum(per_card)}</maximumNetworkInterfaces>"
            f"<maximumNetworkCards>{sum(1 for c in per_card if c)}</maximumNetworkCards>"
            f"<defaultNetworkCardIndex>0</defaultNetworkCardIndex><networkCards>{cards}</networkCards>"
            f"<ipv4AddressesPerInterface>{limits.ipv4_per_interface}</ipv4AddressesPerInterface>"
            f"<ipv6AddressesPerInterface>{limits.ipv6_per_interface}</ipv6AddressesPerInterface>"
            f"<ipv6Supported>{_bool(limits.ipv6_per_interface > 0)}</ipv6Supported>"
            "<enaSupport>required</enaSupport><efaSupported>false</efaSupported>"
            "<encryptionInTransitSupported>false</encryptionInTransitSupported>"
            "<enaSrdSupported>false</enaSrdSupported></networkInfo>"
            "<hibernationSupported>false</hibernationSupported>"
            "<burstablePerformanceSupported>false</burstablePerformanceSupported>"
            "<dedicatedHostsSupported>true</dedicatedHostsSupported>"
            "<autoRecoverySupported>true</autoRecoverySupported><supportedBootModes><item>legacy-bios</item>"
            "<item>uefi</item></supportedBootModes><nitroEnclavesSupport>unsupported</nitroEnclavesSupport>"
            "<nitroTpmSupport>unsupported</nitroTpmSupport><phcSupport>unsupported</phcSupport></item>"
        ).encode()
