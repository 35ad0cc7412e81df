"""SimCloud: an in-memory EC2, faithful where the reconciler's decisions depend on it.

Operations are named, counted and answered like EC2's (``AssignPrivateIpAddresses`` answers
``PrivateIpAddressLimitExceeded``, ``InsufficientFreeAddressesInSubnet``, ``InsufficientCidrBlocks``…
with EC2's wording where callers match on it), so a provider over the sim translates errors through
the same table as a provider over EC2. Every operation is a coroutine that passes the
:class:`~providers.sim.gate.Gate` (count → injected fault → server-side bucket → latency) and then
changes the state synchronously and all or nothing: a call that fails changes nothing (unless a
fault injected with ``applied=True`` says the response was lost).

Modelled: real instance-type limits (adapters; addresses per interface, the primary included, with
secondary addresses and /28 prefixes sharing the slots; prefixes on nitro only), CIDR-true subnets
with AWS's five reserved addresses and an optional free-address cap, deterministic lowest-free
allocation, device indexes, delete-on-termination, idempotency tokens, filters and pagination,
MAC addresses (derived from interface ids), IPv6 /80 prefixes (from a subnet's /64, the lowest
free first), interface types (an ``efa-only`` interface has no IP
address and takes none), network cards (device indexes per card, each card's interface limit). Not
modelled: IPv6 addresses other than prefixes, eventual consistency.

The class is split by concern: :mod:`~providers.sim.state` (records, inspection, invariants),
:mod:`~providers.sim.setup` (setup and fault API), :mod:`~providers.sim.describe` (Describe calls),
and here the constructor, fault injection and the mutating operations.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence

from eni_ipam.core import devices, model
from eni_ipam.core.clock import Clock
from eni_ipam.core.ratelimit import EC2_BUCKETS, Bucket
from providers.ec2.limits import load_limits
from providers.sim.describe import DescribeOps
from providers.sim.gate import Gate, Matcher, Request, api
from providers.sim.records import InstanceRecord, InterfaceRecord, SimError

_READ_PREFIX = "Describe"


def _subnet_short() -> SimError:
    return SimError(
        "InsufficientFreeAddressesInSubnet",
        "The specified subnet does not have enough free addresses to satisfy the request.",
    )


def _no_blocks() -> SimError:
    return SimError(
        "InsufficientCidrBlocks",
        "The specified subnet does not have enough free cidr blocks to satisfy the request.",
    )


def _over_limit() -> SimError:
    return SimError("PrivateIpAddressLimitExceeded", "Number of private addresses will exceed limit.")


def _not_found(iface_id: str) -> SimError:
    return SimError(
        "InvalidNetworkInterfaceID.NotFound", f"The networkInterface ID '{iface_id}' does not exist"
    )


def _no_ip(iface_id: str) -> SimError:
    return SimError(
        "InvalidParameterValue",
        f"The network interface '{iface_id}' is an EFA-only interface, which does not support IP addresses.",
    )


def _no_ipv6_block(subnet_id: str) -> SimError:
    return SimError(
        "InvalidParameterValue",
        f"The subnet '{subnet_id}' has no IPv6 CIDR block associated: an IPv6 prefix cannot be assigned.",
    )


def _counts(secondary_count: int, prefix_count: int) -> None:
    if secondary_count < 0 or prefix_count < 0:
        raise SimError("InvalidParameterValue", "Address and prefix counts must not be negative")
    if secondary_count and prefix_count:
        raise SimError(
            "InvalidParameterCombination",
            "SecondaryPrivateIpAddressCount and Ipv4PrefixCount cannot be specified together",
        )


class SimCloud(DescribeOps):
    """An in-memory EC2 region (one account): setup, fault injection, EC2 operations, inspection."""

    def __init__(
        self,
        clock: Clock,
        *,
        limits: Mapping[str, model.InstanceLimits] | None = None,
        buckets: Mapping[str, Bucket] | None = EC2_BUCKETS,
        page_size: int = 1000,
    ) -> None:
        """Create an empty cloud.

        Args:
            clock: the timeline of bucket refills, latency and interface creation times.
            limits: instance-type limits; the shipped EC2 table by default.
            buckets: server-side token buckets by operation (EC2's published ones by default);
                ``None`` disables throttling; operations missing from the mapping are never throttled.
            page_size: items per Describe page.

        Raises:
            ValueError: ``page_size`` is below 1.
        """
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        super().__init__(clock, load_limits() if limits is None else limits)
        self.gate = Gate(clock, buckets)
        self.page_size = page_size
        self._tokens: dict[str, tuple[tuple[object, ...], str, model.Interface]] = {}

    # -- fault injection and counting ------------------------------------------------------------

    @property
    def calls(self) -> collections.Counter[str]:
        """Calls so far by EC2 operation name (failed and throttled ones included)."""
        return self.gate.calls

    def mutating_calls(self) -> int:
        """Calls so far of every operation that is not a Describe."""
        return sum(n for op, n in self.gate.calls.items() if not op.startswith(_READ_PREFIX))

    def fail_next(
        self,
        operation: str,
        count: int = 1,
        code: str = "InternalError",
        message: str | None = None,
        *,
        applied: bool = False,
        when: Matcher | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Make the next ``count`` calls of ``operation`` answer ``code`` (see :meth:`Gate.fail_next`).

        Raises:
            ValueError: ``count`` is negative.
        """
        self.gate.fail_next(
            operation, count, code, message, applied=applied, when=when, retry_after=retry_after
        )

    def fail_while(
        self,
        operation: str,
        when: Matcher,
        code: str = "InternalError",
        message: str | None = None,
        *,
        retry_after: float | None = None,
    ) -> None:
        """Make every matching call of ``operation`` answer ``code`` until :meth:`clear_faults`."""
        self.gate.fail_while(operation, when, code, message, retry_after=retry_after)

    def on_interfaces_of(self, instance_id: str) -> Matcher:
        """A request :data:`~providers.sim.gate.Matcher` for calls naming an interface of ``instance_id``."""

        def matches(request: Request) -> bool:
            interface = self.interface_view(str(request.get("interface_id", "")))
            return interface is not None and interface.instance_id == instance_id

        return matches

    def clear_faults(self) -> None:
        """Drop every injected fault still waiting (see :meth:`fail_next`)."""
        self.gate.clear_faults()

    def set_latency(self, operation: str | None, seconds: float) -> None:
        """Delay calls of ``operation`` (``None``: the default for all) by ``seconds`` on the clock.

        Raises:
            ValueError: ``seconds`` is negative.
        """
        self.gate.set_latency(operation, seconds)

    # -- interfaces ------------------------------------------------------------------------------

    @api("CreateNetworkInterface")
    def create_network_interface(
        self,
        *,
        subnet_id: str,
        groups: Sequence[str] = (),
        secondary_count: int = 0,
        prefix_count: int = 0,
        tags: Mapping[str, str] | None = None,
        description: str = "",
        client_token: str = "",
        ipv6_prefix_count: int = 0,
    ) -> model.Interface:
        """Create a detached interface in ``subnet_id`` with its addresses or prefixes and tags.

        The parameters are EC2's SubnetId, Groups, SecondaryPrivateIpAddressCount, Ipv4PrefixCount,
        TagSpecifications, Description, ClientToken and Ipv6PrefixCount (IPv6 /80s of the subnet's
        block). A repeated ``client_token`` with the same
        parameters returns the interface it created (as it is now) without allocating again; with
        different parameters it answers ``IdempotentParameterMismatch``.

        Raises:
            SimError: ``InvalidSubnetID.NotFound``, ``InvalidGroup.NotFound``,
                ``InvalidParameterValue``, ``InvalidParameterCombination``,
                ``IdempotentParameterMismatch``, ``PrivateIpAddressLimitExceeded``,
                ``InsufficientFreeAddressesInSubnet``, ``InsufficientCidrBlocks``.
        """
        _counts(secondary_count, prefix_count)
        params = (
            subnet_id,
            tuple(sorted(groups)),
            secondary_count,
            prefix_count,
            sorted((tags or {}).items()),
            description,
            ipv6_prefix_count,
        )
        if client_token and client_token in self._tokens:
            seen, iface_id, original = self._tokens[client_token]
            if seen != params:
                raise SimError(
                    "IdempotentParameterMismatch",
                    f"The client token '{client_token}' was used with different parameters",
                )
            current = self._interfaces.get(iface_id)
            return current.view() if current is not None else original
        subnet = self._subnets.get(subnet_id)
        if subnet is None:
            raise SimError("InvalidSubnetID.NotFound", f"The subnet ID '{subnet_id}' does not exist")
        for group in groups:
            found = self._groups.get(group)
            if found is None or found.vpc_id != subnet.vpc_id:
                raise SimError(
                    "InvalidGroup.NotFound",
                    f"The security group '{group}' does not exist in VPC '{subnet.vpc_id}'",
                )
        if secondary_count + prefix_count > self._max_slots:
            raise _over_limit()
        if ipv6_prefix_count < 0:
            raise SimError("InvalidParameterValue", "Ipv6PrefixCount must not be negative")
        if ipv6_prefix_count and subnet.ipv6 is None:
            raise _no_ipv6_block(subnet_id)
        if ipv6_prefix_count > 1:
            raise SimError("InvalidParameterValue", "Ipv6PrefixCount: one /80 at a time in this cloud")
        space = subnet.space
        if space.free < 1 + secondary_count:
            raise _subnet_short()
        iface = self._new_interface(subnet, tuple(groups), tags or {}, description, self._clock.monotonic())
        if prefix_count:
            if not space.can_take_blocks(prefix_count):
                self._delete(iface)
                raise _no_blocks()
            self._grant_prefixes(iface, prefix_count)
        self._grant_addresses(iface, secondary_count)
        if ipv6_prefix_count:
            prefix = subnet.take_ipv6_prefix()
            if prefix is None:
                self._delete(iface)
                raise _no_blocks()
            iface.ipv6_prefixes = [*iface.ipv6_prefixes, prefix]
        view = iface.view()
        if client_token:
            self._tokens[client_token] = (params, iface.id, view)
        return view

    @api("AttachNetworkInterface")
    def attach_network_interface(
        self, *, interface_id: str, instance_id: str, device_index: int, network_card: int = 0
    ) -> str:
        """Attach an interface to an instance at ``device_index`` of ``network_card`` (EC2's
        NetworkCardIndex; device indexes are per card); returns the attachment id.

        Raises:
            SimError: ``InvalidNetworkInterfaceID.NotFound``, ``InvalidInstanceID.NotFound``,
                ``IncorrectInstanceState`` (not running), ``InvalidNetworkInterface.InUse``,
                ``InvalidParameterValue`` (another zone or VPC; "…interface attached at device
                index…"; a network card the type does not have; prefixes on a non-nitro type),
                ``AttachmentLimitExceeded`` (the card is full), ``PrivateIpAddressLimitExceeded``
                (more addresses than the type allows per interface).
        """
        iface = self._interface(interface_id)
        instance = self._instances.get(instance_id)
        if instance is None:
            raise SimError("InvalidInstanceID.NotFound", f"The instance ID '{instance_id}' does not exist")
        if instance.state != "running":
            raise SimError("IncorrectInstanceState", f"Instance '{instance_id}' is not 'running'.")
        if iface.instance_id:
            raise SimError("InvalidNetworkInterface.InUse", f"Interface: [{interface_id}] in use.")
        if (iface.vpc_id, iface.zone) != (instance.vpc_id, instance.zone):
            raise SimError(
                "InvalidParameterValue",
                "The network interface and the instance must be in the same VPC and availability zone",
            )
        if device_index < 0:
            raise SimError("InvalidParameterValue", f"Invalid value '{device_index}' for deviceIndex")
        card_limit = instance.limits.adapters_on(network_card)
        if network_card < 0 or not card_limit:
            raise SimError(
                "InvalidParameterValue",
                f"Invalid value '{network_card}' for networkCardIndex: instance type {instance.type} "
                "has no such network card",
            )
        if instance.at(network_card, device_index) is not None:
            raise SimError(
                "InvalidParameterValue",
                f"Instance '{instance_id}' already has an interface attached at device index "
                f"'{device_index}'" + (f" of network card '{network_card}'." if network_card else "."),
            )
        on_card = instance.on_card(network_card)
        if on_card >= card_limit:
            raise SimError(
                "AttachmentLimitExceeded",
                f"Interface count {on_card + 1} exceeds the limit for {instance.type}"
                + (f" on network card {network_card}" if network_card else ""),
            )
        self._check_fits(iface, instance, 0, 0)
        return self._attach(
            iface, instance, device_index, delete_on_termination=False, network_card=network_card
        )

    @api("DetachNetworkInterface")
    def detach_network_interface(self, *, attachment_id: str, force: bool = False) -> None:
        """Detach the interface of ``attachment_id``; it becomes ``available``.

        Raises:
            SimError: ``InvalidAttachmentID.NotFound``; ``OperationNotPermitted`` for device index 0.
        """
        iface = next(
            (i for i in self._interfaces.values() if i.attachment_id == attachment_id and attachment_id), None
        )
        if iface is None:
            raise SimError(
                "InvalidAttachmentID.NotFound", f"The attachment ID '{attachment_id}' does not exist"
            )
        if iface.device_index == 0 and iface.network_card == 0:
            raise SimError(
                "OperationNotPermitted", "The network interface at device index 0 cannot be detached."
            )
        self._detach(iface)

    @api("ModifyNetworkInterfaceAttribute")
    def modify_network_interface_attribute(
        self, *, interface_id: str, attachment_id: str, delete_on_termination: bool
    ) -> None:
        """Set delete-on-termination of the interface's attachment ``attachment_id``.

        Raises:
            SimError: ``InvalidNetworkInterfaceID.NotFound``, ``InvalidAttachmentID.NotFound``.
        """
        iface = self._interface(interface_id)
        if not attachment_id or iface.attachment_id != attachment_id:
            raise SimError(
                "InvalidAttachmentID.NotFound", f"The attachment ID '{attachment_id}' does not exist"
            )
        iface.delete_on_termination = delete_on_termination

    @api("DeleteNetworkInterface")
    def delete_network_interface(self, *, interface_id: str) -> None:
        """Delete a detached interface; its addresses return to the subnet.

        Raises:
            SimError: ``InvalidNetworkInterfaceID.NotFound``; ``InvalidNetworkInterface.InUse`` when attached.
        """
        iface = self._interface(interface_id)
        if iface.instance_id:
            raise SimError(
                "InvalidNetworkInterface.InUse",
                f"The network interface '{interface_id}' is currently in use.",
            )
        self._delete(iface)

    # -- addresses -------------------------------------------------------------------------------

    @api("AssignPrivateIpAddresses")
    def assign_private_ip_addresses(
        self,
        *,
        interface_id: str,
        secondary_count: int = 0,
        prefix_count: int = 0,
        addresses: Sequence[str] = (),
    ) -> list[str]:
        """Assign ``secondary_count`` addresses or ``prefix_count`` /28 prefixes, or exactly the named
        ``addresses`` (EC2's ``PrivateIpAddresses``, never reassigned from another interface), all or
        nothing.

        Returns:
            The new addresses (or prefixes in CIDR form), in address order.

        Raises:
            SimError: ``InvalidNetworkInterfaceID.NotFound``, ``MissingParameter``,
                ``InvalidParameterValue`` (prefixes on a non-nitro type; an ``efa-only`` interface,
                which has no IP address), ``InvalidParameterCombination``,
                ``PrivateIpAddressLimitExceeded``, ``InsufficientFreeAddressesInSubnet``,
                ``InsufficientCidrBlocks``; for named addresses ``InvalidIPAddress.InUse`` (held by
                any interface, or by someone the listing does not show) and ``InvalidParameterValue``
                (outside the subnet, or reserved).
        """
        iface = self._interface(interface_id)
        _counts(secondary_count, prefix_count)
        if iface.kind is devices.Kind.EFA_ONLY:
            raise _no_ip(interface_id)
        if addresses:
            if secondary_count or prefix_count:
                raise SimError(
                    "InvalidParameterCombination",
                    "PrivateIpAddresses cannot be specified with SecondaryPrivateIpAddressCount or "
                    "Ipv4PrefixCount",
                )
            instance = self._instances[iface.instance_id] if iface.instance_id else None
            fresh = [a for a in dict.fromkeys(addresses) if a not in iface.addresses]
            self._check_fits(iface, instance, len(fresh), 0)
            try:
                return self._grant_named(iface, fresh)
            except LookupError as exc:
                raise SimError("InvalidIPAddress.InUse", str(exc.args[0])) from None
            except ValueError as exc:
                raise SimError("InvalidParameterValue", str(exc)) from None
        if not secondary_count and not prefix_count:
            raise SimError(
                "MissingParameter", "Either SecondaryPrivateIpAddressCount or Ipv4PrefixCount is required"
            )
        instance = self._instances[iface.instance_id] if iface.instance_id else None
        self._check_fits(iface, instance, secondary_count, prefix_count)
        space = self._subnets[iface.subnet_id].space
        if prefix_count:
            if not space.can_take_blocks(prefix_count):
                raise _no_blocks()
            return self._grant_prefixes(iface, prefix_count)
        if space.free < secondary_count:
            raise _subnet_short()
        return self._grant_addresses(iface, secondary_count, spread=True)

    @api("AssignIpv6Addresses")
    def assign_ipv6_addresses(self, *, interface_id: str, prefix_count: int) -> list[str]:
        """Delegate ``prefix_count`` IPv6 /80 prefixes of the subnet's block (EC2's Ipv6PrefixCount).

        Returns:
            The new prefixes.

        Raises:
            SimError: ``InvalidNetworkInterfaceID.NotFound``, ``InvalidParameterValue`` (the subnet
                has no IPv6 block; a count other than 1; a type that is not nitro; an ``efa-only``
                interface), ``InsufficientCidrBlocks`` (no free /80).
        """
        iface = self._interface(interface_id)
        if prefix_count != 1:
            raise SimError("InvalidParameterValue", "Ipv6PrefixCount: one /80 at a time in this cloud")
        if iface.kind is devices.Kind.EFA_ONLY:
            raise _no_ip(interface_id)
        subnet = self._subnets[iface.subnet_id]
        if subnet.ipv6 is None:
            raise _no_ipv6_block(subnet.id)
        instance = self._instances[iface.instance_id] if iface.instance_id else None
        if instance is not None and not instance.limits.supports_prefixes:
            raise SimError(
                "InvalidParameterValue",
                f"Ipv6 prefixes are not supported on instance type {instance.type} (nitro only)",
            )
        prefix = subnet.take_ipv6_prefix()
        if prefix is None:
            raise _no_blocks()
        iface.ipv6_prefixes = [*iface.ipv6_prefixes, prefix]  # a new list: records change by assignment
        return [prefix]

    @api("UnassignPrivateIpAddresses")
    def unassign_private_ip_addresses(
        self, *, interface_id: str, addresses: Sequence[str] = (), prefixes: Sequence[str] = ()
    ) -> None:
        """Remove secondary addresses and /28 prefixes from an interface, all or nothing.

        Raises:
            SimError: ``InvalidNetworkInterfaceID.NotFound``, ``MissingParameter``,
                ``InvalidParameterValue`` (an address or prefix the interface does not hold as a
                secondary — the primary included).
        """
        iface = self._interface(interface_id)
        if not addresses and not prefixes:
            raise SimError("MissingParameter", "Either PrivateIpAddresses or Ipv4Prefixes is required")
        if not set(addresses) <= set(iface.addresses) or not set(prefixes) <= set(iface.prefixes):
            raise SimError(
                "InvalidParameterValue",
                f"Some of the specified addresses are not assigned to interface {interface_id}",
            )
        self._release(iface, addresses, prefixes)

    # -- helpers ---------------------------------------------------------------------------------

    def _interface(self, interface_id: str) -> InterfaceRecord:
        iface = self._interfaces.get(interface_id)
        if iface is None:
            raise _not_found(interface_id)
        return iface

    def _check_fits(
        self, iface: InterfaceRecord, instance: InstanceRecord | None, more: int, more_prefixes: int
    ) -> None:
        """The interface with ``more`` addresses and ``more_prefixes`` prefixes fits ``instance``'s type."""
        limit = instance.limits.slots_per_interface if instance is not None else self._max_slots
        if (
            instance is not None
            and (more_prefixes or iface.prefixes)
            and not instance.limits.supports_prefixes
        ):
            raise SimError(
                "InvalidParameterValue",
                f"Ipv4 prefixes are not supported on instance type {instance.type} (nitro only)",
            )
        if iface.slots_used + more + more_prefixes > limit:
            raise _over_limit()
