"""moto's EC2, with the limits real EC2 enforces: a reversible fidelity layer over moto's EC2 backend.

moto answers the EC2 API in-process (``moto.mock_aws``) or over HTTP (:class:`MotoServer`), but it
is lenient exactly where an ENI IP manager's decisions live: it picks random addresses, never says
"no" to an over-full interface, an exhausted subnet or a taken device index, and ignores prefix
delegation. :func:`install` monkeypatches moto's EC2 model and response classes (the classes, so it
holds for every account and region, in-process and for a :class:`MotoServer` in the same process)
so that they answer like real EC2; the function it returns (or leaving :func:`ec2_fidelity`)
restores moto exactly.

Why moto as well as the in-memory cloud (:mod:`providers.sim`): moto is an independent reading of
EC2's wire protocol (request parameters, XML answers, error responses, filters, tags) that the AWS
provider reaches through boto3 and botocore's HTTP layer, so it catches mistakes a model we wrote
ourselves would share with the provider. What moto lacks is EC2's semantics, and the layer adds
only those, taken from the in-memory cloud wherever it models them: the address model is
:class:`providers.sim.addressing.SubnetSpace` (the five AWS reserves, lowest free address, lowest
fully free aligned /28), and instance-type limits are the :class:`~eni_ipam.core.model.InstanceLimits`
the in-memory cloud enforces, read from moto's own ``DescribeInstanceTypes`` data by the product's
conversion (:func:`providers.ec2.limits.convert_instance_type`, the default network card's
interfaces), so the limits the layer enforces are the ones the AWS provider learns from this moto.
Both clouds therefore hand out the same addresses and /28s and refuse the same requests.

The patches, checked against moto 5.2.5 (each function says again what moto does and what EC2 does):

* ``NetworkInterfaceBackend.create_network_interface`` (every interface: the API's, ``RunInstances``',
  moto's own services'). moto: a random primary and random secondaries (duplicates, reserved
  addresses, the broadcast address), explicit addresses unchecked. EC2: the lowest free addresses;
  an explicit address must lie in the subnet, outside the reserves, and not be held by another
  interface (``InvalidParameterValue``, ``InvalidIPAddress.InUse``); ``ClientToken`` returns the
  first interface (``IdempotentParameterMismatch`` with other parameters); ``Ipv4PrefixCount`` and
  ``Ipv4Prefixes`` delegate /28s; ``InsufficientFreeAddressesInSubnet`` or ``InsufficientCidrBlocks``
  when the subnet is short, with nothing created.
* ``NetworkInterfaceBackend.attach_network_interface``. moto: attaches anything anywhere, overwriting
  a taken device index. EC2: ``InvalidParameterValue`` for a taken device index ("…already has an
  interface attached at device index…"), ``InvalidNetworkInterface.InUse`` for an attached interface,
  ``IncorrectInstanceState`` for an instance neither running nor stopped, ``AttachmentLimitExceeded``
  beyond the type's interfaces, ``PrivateIpAddressLimitExceeded`` for an interface holding more than
  the type allows, prefixes on nitro types only.
* ``NetworkInterfaceBackend.attach_network_interface`` and its handler, for network cards. moto:
  drops ``NetworkCardIndex`` and attaches on card 0 (device index 0 of another card replaces the
  primary), answers ``NetworkCardIndex`` 0, and has no per-card limit. EC2: device indexes per card,
  each card's ``MaximumNetworkInterfaces`` (``AttachmentLimitExceeded``), ``InvalidParameterValue``
  for a card the type does not have; the attachment's ``NetworkCardIndex`` in every answer. An
  interface of another card is attached beside moto's ``nics`` (which key card 0's by device index)
  and is not nested in ``DescribeInstances``.
* ``NetworkInterfaceBackend.detach_network_interface``. moto: refuses only an instance's last
  interface. EC2: device index 0 of card 0 answers ``OperationNotPermitted`` whatever else is attached.
* ``NetworkInterfaceBackend.delete_network_interface``. moto: deletes an attached interface and keeps
  an instance primary's address taken forever. EC2: ``InvalidNetworkInterface.InUse`` while attached;
  the addresses return to the subnet.
* ``NetworkInterface.ipv4_prefixes``. moto: no prefixes. EC2: ``Ipv4Prefixes`` in
  ``DescribeNetworkInterfaces``.
* IPv6 prefixes: ``ElasticNetworkInterfaces.assign_ipv6_addresses`` and the create handler take
  ``Ipv6PrefixCount`` (moto drops it, and crashes on an address count in a subnet without IPv6); the
  interface's ``ipv6_prefixes`` property answers them. EC2: the lowest free /80s of the subnet's
  associated block (``AssignedIpv6Prefixes``), ``InvalidParameterValue`` when it has none or the type
  is not nitro, ``InsufficientCidrBlocks`` when it is full. ``Subnet.ipv6_cidr_block_association_set``:
  moto renders the block's state as the text of a dict; EC2 the state (``associated``).
* ``NetworkInterface.mac_address``. moto: ``02:00:00`` and three random octets, which two
  interfaces of one instance may share. EC2: a unique one. The layer derives it from the interface
  id, as the in-memory cloud does (:func:`providers.sim.records.mac_address`).
* ``Subnet.get_available_subnet_ip`` (an instance's primary at launch). moto: the next address of a
  generator that knows only other instances' primaries, so it can name one an interface holds,
  keeping it taken after that interface lets it go; ``StopIteration`` when exhausted. EC2: the
  lowest free address, ``InsufficientFreeAddressesInSubnet`` when none.
* ``Subnet.available_ip_address_count``. moto: the subnet's size less five less the interfaces'
  addresses: it can go negative and ignores prefixes and CIDR reservations. EC2: the free addresses;
  a delegated /28 takes 16.
* ``Instance.prep_nics`` (``RunInstances``). moto: the interfaces it creates are delete-on-termination
  only if the request says so; a requested primary another interface holds is taken anyway (another
  instance's primary fails with a bare exception, an internal error). EC2: delete-on-termination
  unless the request says otherwise; ``InvalidIPAddress.InUse``.
* ``Instance.terminate``. moto: leaves the interfaces that are not delete-on-termination ``in-use`` on
  the terminated instance. EC2: detaches them (``available``).
* ``ElasticNetworkInterfaces.create_network_interface``. moto's handler drops ``ClientToken``,
  ``Ipv4PrefixCount``, ``Ipv4Prefixes`` and ``InterfaceType`` (every interface is ``interface``);
  this one passes them on (and has explicit addresses checked strictly: moto's own services' are
  replaced when EC2 would refuse them). The type is kept and answered as ``InterfaceType``; an
  ``efa-only`` interface takes no secondary address or prefix, at creation or later
  (``InvalidParameterCombination``). Its primary address stays (moto's record needs one; EC2's
  EFA-only interface has none).
* ``ElasticNetworkInterfaces.assign_private_ip_addresses``. moto: drops the prefix parameters, picks
  random addresses, has no limits, loops forever when the subnet cannot supply the count, and answers
  every address of the interface. EC2: the lowest free addresses or /28s,
  ``PrivateIpAddressLimitExceeded`` beyond the type's addresses per interface (primary included, a
  /28 taking one slot), ``InsufficientFreeAddressesInSubnet`` / ``InsufficientCidrBlocks``, nothing
  assigned on a refusal; answers only the new addresses (``AssignedIpv4Prefixes`` for prefixes).
* ``ElasticNetworkInterfaces.unassign_private_ip_addresses``. moto: drops ``Ipv4Prefixes`` and
  silently skips addresses the interface does not hold (even the primary goes). EC2:
  ``InvalidParameterValue`` and nothing removed unless every address is a secondary of the interface
  and every prefix is delegated to it.
* ``ElasticNetworkInterfaces.modify_network_interface_attribute``. moto: drops ``Attachment``. EC2:
  sets ``DeleteOnTermination`` of the named attachment (``InvalidAttachmentID.NotFound`` otherwise).

moto's backend methods for assign, unassign and modify-attribute are left alone: its response
handlers are their only callers, and the layer replaces those.

Not modelled: IPv6 addresses other than prefixes, and subnets smaller than a /28, which EC2 refuses to
create (both left to moto), ``AllowReassignment``, subnet CIDR reservations for prefixes (reserved
ranges are simply unavailable).

Invariants: the layer keeps no address state of its own (each operation reads moto's records under
one lock, so concurrent requests to a :class:`MotoServer` never share an address); a request the
layer refuses changes nothing; undoing the last install restores every patched attribute.

A test double, used by the tests and by ``eni-ipam demo --cloud moto``. moto comes with the test kit
(``eni-ipam-testkit``): importing this module does not import it; :func:`install`,
:func:`ec2_fidelity` and :class:`MotoServer` do.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from eni_ipam.core.model import InstanceLimits
from providers.ec2.limits import convert_instance_type, instance_limits, limits_from_row
from providers.sim.addressing import PREFIX_LEN, SubnetSpace, free_ipv6_prefixes
from providers.sim.records import mac_address

if TYPE_CHECKING:
    from moto.ec2.exceptions import EC2ClientError
    from moto.server import ThreadedMotoServer

__all__ = ["MotoServer", "ec2_fidelity", "install"]

# One lock for every allocating or releasing operation: ThreadedMotoServer serves requests on
# several threads, and two concurrent assigns must not pick the same "lowest free" address.
_lock = threading.RLock()

# Install bookkeeping: how many installs are live, and what the first one replaced.
_installs = 0
_MISSING = object()
_saved: list[tuple[type, str, Any]] = []
_originals: dict[str, Any] = {}


# -- errors ---------------------------------------------------------------------------------------


def _error(code: str, message: str) -> EC2ClientError:
    """An EC2 client error moto serializes as an EC2 error response (boto3 raises ClientError)."""
    from moto.ec2.exceptions import EC2ClientError

    return EC2ClientError(code, message)


def _subnet_short(subnet_id: str) -> EC2ClientError:
    return _error(
        "InsufficientFreeAddressesInSubnet",
        f"The specified subnet {subnet_id} does not have enough free addresses to satisfy the request.",
    )


def _no_blocks(subnet_id: str) -> EC2ClientError:
    return _error(
        "InsufficientCidrBlocks",
        f"The specified subnet {subnet_id} does not have enough free cidr blocks to satisfy the request.",
    )


def _over_limit() -> EC2ClientError:
    return _error("PrivateIpAddressLimitExceeded", "Number of private addresses will exceed limit.")


# -- instance-type limits -------------------------------------------------------------------------


@functools.cache
def _type_limits(instance_type: str) -> InstanceLimits | None:
    """``instance_type``'s limits as the AWS provider learns them from this moto: moto's
    DescribeInstanceTypes record through the product's conversion (the default network card's
    interfaces), else the shipped table (the in-memory cloud's); None if neither knows the type."""
    from moto.ec2.models.instance_types import INSTANCE_TYPES

    record = INSTANCE_TYPES.get(instance_type)
    if record is None:
        return instance_limits(instance_type)
    return limits_from_row(convert_instance_type(record, instance_type)[1])


def _slots_used(eni: Any) -> int:
    """Secondary slots the interface fills: its addresses besides the primary, and its prefixes."""
    return max(len(eni.private_ip_addresses) - 1, 0) + len(_prefixes(eni))


def _check_fits(eni: Any, instance: Any, more: int, more_prefixes: int) -> None:
    """``eni`` with ``more`` addresses and ``more_prefixes`` prefixes fits ``instance``'s type: the
    in-memory cloud's check (``SimCloud._check_fits``) on the same :class:`InstanceLimits`."""
    limits = _type_limits(instance.instance_type)
    if limits is None:
        return
    if (more_prefixes or _prefixes(eni)) and not limits.supports_prefixes:
        raise _error(
            "InvalidParameterValue",
            f"Ipv4 prefixes are not supported on instance type {instance.instance_type} (nitro only)",
        )
    if _slots_used(eni) + more + more_prefixes > limits.slots_per_interface:
        raise _over_limit()


# -- subnet address space -------------------------------------------------------------------------
#
# The address model is the in-memory cloud's (providers.sim.addressing.SubnetSpace: the five AWS
# reserves, lowest free address, lowest fully free aligned /28). moto keeps its own records of who
# holds what, so each operation rebuilds a scratch space from them under _lock and writes back to
# moto only what it took, once every check has passed.


def _modelled(subnet: Any) -> bool:
    """Whether the layer decides ``subnet``'s addresses: IPv4, and a size EC2 allows (/16 to /28).

    moto creates subnets smaller than a /28 that EC2 refuses (``InvalidSubnet.Range``); those, like
    IPv6, are left to moto.
    """
    cidr = getattr(subnet, "cidr", None)
    return isinstance(cidr, ipaddress.IPv4Network) and 16 <= cidr.prefixlen <= PREFIX_LEN


def _prefixes(eni: Any) -> list[str]:
    """The /28 prefixes delegated to ``eni`` (CIDR strings), kept on the interface object."""
    found: list[str] | None = eni.__dict__.get("_fidelity_prefixes")
    if found is None:
        found = []
        eni.__dict__["_fidelity_prefixes"] = found
    return found


def _addresses(eni: Any) -> list[str]:
    return [
        str(item["PrivateIpAddress"]) for item in eni.private_ip_addresses if item.get("PrivateIpAddress")
    ]


def _subnet_enis(subnet: Any) -> list[Any]:
    return [
        eni
        for eni in list(subnet.ec2_backend.enis.values())
        if eni.subnet is not None and eni.subnet.id == subnet.id
    ]


def _v4(address: Any) -> str | None:
    """``address`` in canonical IPv4 form; None if it is not an IPv4 address."""
    try:
        parsed = ipaddress.ip_address(str(address))
    except ValueError:
        return None
    return str(parsed) if parsed.version == 4 else None


def _inside(space: SubnetSpace, addresses: Iterable[Any]) -> list[str]:
    """The IPv4 addresses among ``addresses`` that lie in ``space``'s subnet (moto's records may hold
    others: addresses it chose itself before the layer was installed, IPv6 ones)."""
    found: list[str] = []
    for address in addresses:
        value = _v4(address)
        if value is not None and space.contains(value):
            found.append(value)
    return found


def _held(subnet: Any) -> SubnetSpace:
    """``subnet``'s space with what its interfaces hold in use: their addresses, primary included,
    and their prefixes whole. An explicitly requested address must be free here."""
    space = SubnetSpace(str(subnet.cidr))
    for eni in _subnet_enis(subnet):
        space.occupy(_inside(space, _addresses(eni)), [p for p in _prefixes(eni) if space.contains(p)])
    return space


def _add_moto_own(space: SubnetSpace, subnet: Any) -> SubnetSpace:
    """``space`` with what moto takes outside interfaces in use too: instance primaries and EFS mount
    targets (``_subnet_ips``), subnet CIDR reservations (``_reserved_ips``)."""
    space.occupy(_inside(space, list(subnet._subnet_ips)))
    space.occupy(_inside(space, subnet._reserved_ips))
    return space


def _space(subnet: Any) -> SubnetSpace:
    """``subnet``'s space with everything the allocator must not hand out in use."""
    return _add_moto_own(_held(subnet), subnet)


def _take_addresses(subnet: Any, space: SubnetSpace, count: int) -> list[str]:
    """The ``count`` lowest free addresses, or InsufficientFreeAddressesInSubnet."""
    if count > space.free:
        raise _subnet_short(subnet.id)
    return space.take_addresses(count)


def _take_prefixes(subnet: Any, space: SubnetSpace, explicit: Sequence[str], count: int) -> list[str]:
    """The requested /28 prefixes, then the ``count`` lowest free aligned ones (InsufficientCidrBlocks)."""
    chosen: list[str] = []
    for prefix in dict.fromkeys(explicit):
        chosen.append(_check_explicit_prefix(space, prefix))
        space.occupy(prefixes=chosen[-1:])
    if not space.can_take_blocks(count):
        raise _no_blocks(subnet.id)
    return chosen + space.take_blocks(count)


def _check_explicit_address(held: SubnetSpace, address: str) -> str:
    """``address`` (canonical) if EC2 would accept it as an explicitly requested address."""
    value = _v4(address)
    if value is None or not held.contains(value):
        raise _error(
            "InvalidParameterValue",
            f"Address {address} does not fall within the subnet's address range",
        )
    if not held.usable(value):
        raise _error("InvalidParameterValue", f"Address {address} is in subnet's reserved address range")
    if held.in_use(value):
        raise _error("InvalidIPAddress.InUse", f"The specified address {address} is already in use.")
    return value


def _check_explicit_prefix(space: SubnetSpace, prefix: str) -> str:
    """``prefix`` (canonical) if it is an aligned /28 of the subnet none of whose addresses is used."""
    try:
        network = ipaddress.IPv4Network(prefix)
    except ValueError:
        raise _error("InvalidParameterValue", f"Invalid IPv4 prefix {prefix}") from None
    if network.prefixlen != PREFIX_LEN or not network.subnet_of(space.network):
        raise _error("InvalidParameterValue", f"Prefix {prefix} is not a /28 within the subnet's range")
    if not space.block_free(str(network)):
        raise _error("InvalidIPAddress.InUse", f"The specified prefix {prefix} is already in use.")
    return str(network)


def _prefix_strings(items: Iterable[Any]) -> list[str]:
    """``Ipv4Prefixes`` as strings, whether EC2 sent ``["a/28"]`` or ``[{"Ipv4Prefix": "a/28"}]``."""
    result: list[str] = []
    for item in items or []:
        value = item.get("Ipv4Prefix") if isinstance(item, dict) else item
        if value:
            result.append(str(value))
    return result


def _counts(secondary_count: int, prefix_count: int, prefixes: Sequence[str]) -> None:
    if secondary_count < 0 or prefix_count < 0:
        raise _error("InvalidParameterValue", "Address and prefix counts must not be negative")
    if secondary_count and (prefix_count or prefixes):
        raise _error(
            "InvalidParameterCombination",
            "SecondaryPrivateIpAddressCount and Ipv4PrefixCount cannot be specified together",
        )


# -- AssignPrivateIpAddresses and UnassignPrivateIpAddresses ------------------------------------------
#
# moto's response handlers are the only callers of its backend's assign and unassign, and they must be
# replaced anyway (they drop Ipv4PrefixCount and Ipv4Prefixes, and assign answers every address), so
# the handlers call these directly and moto's backend methods stay moto's.


def _assign(
    backend: Any,
    eni_id: str,
    addresses: Sequence[str],
    secondary_count: int,
    prefix_count: int,
    prefixes: Sequence[str],
) -> tuple[Any, list[str], list[str]]:
    """Assign addresses/prefixes all or nothing; returns (interface, new addresses, new prefixes)."""
    eni = backend.get_network_interface(eni_id)
    subnet = eni.subnet
    if not _modelled(subnet):
        before = set(_addresses(eni))
        eni = backend.assign_private_ip_addresses(eni_id, list(addresses), secondary_count)
        return eni, [a for a in _addresses(eni) if a not in before], []
    with _lock:
        _counts(secondary_count, prefix_count, prefixes)
        if not addresses and not secondary_count and not prefix_count and not prefixes:
            raise _error(
                "MissingParameter",
                "Either PrivateIpAddresses, SecondaryPrivateIpAddressCount, Ipv4Prefixes or "
                "Ipv4PrefixCount is required",
            )
        if getattr(eni, "interface_type", "interface") == EFA_ONLY:
            raise _no_ip_on_efa_only()
        current = set(_addresses(eni))
        held = _held(subnet)
        explicit: list[str] = []
        for address in dict.fromkeys(str(a) for a in addresses):
            if address in current:
                continue  # EC2 and moto both ignore an address the interface already has
            _check_explicit_address(held, address)
            explicit.append(address)
        if eni.instance is not None:
            _check_fits(eni, eni.instance, len(explicit) + secondary_count, prefix_count + len(prefixes))
        space = _add_moto_own(held, subnet)
        space.occupy(explicit)
        fresh = _take_addresses(subnet, space, secondary_count)
        new_prefixes = _take_prefixes(subnet, space, prefixes, prefix_count)
        new_addresses = explicit + fresh
        eni.private_ip_addresses.extend({"Primary": False, "PrivateIpAddress": a} for a in new_addresses)
        _prefixes(eni).extend(new_prefixes)
        return eni, new_addresses, new_prefixes


def _unassign(backend: Any, eni_id: str, addresses: Sequence[str], prefixes: Sequence[str]) -> None:
    """Remove secondary addresses and prefixes, all or nothing."""
    eni = backend.get_network_interface(eni_id)
    with _lock:
        if not addresses and not prefixes:
            raise _error("MissingParameter", "Either PrivateIpAddresses or Ipv4Prefixes is required")
        if eni.private_ip_address in addresses:
            raise _error(
                "InvalidParameterValue", "The primary IP address of an interface cannot be unassigned."
            )
        secondaries = {a for a in _addresses(eni) if a != eni.private_ip_address}
        held_prefixes = {str(ipaddress.IPv4Network(p)) for p in _prefixes(eni)}
        normalized: list[str] = []
        for prefix in prefixes:
            try:
                normalized.append(str(ipaddress.IPv4Network(prefix)))
            except ValueError:
                normalized.append(prefix)
        if not set(addresses) <= secondaries or not set(normalized) <= held_prefixes:
            raise _error(
                "InvalidParameterValue",
                f"Some of the specified addresses are not assigned to interface {eni_id}",
            )
        eni.private_ip_addresses[:] = [
            item for item in eni.private_ip_addresses if item.get("PrivateIpAddress") not in addresses
        ]
        _prefixes(eni)[:] = [p for p in _prefixes(eni) if p not in normalized]


# -- backend patches: moto.ec2.models.elastic_network_interfaces.NetworkInterfaceBackend ----------


def _create_network_interface(
    self: Any,
    subnet: Any,
    private_ip_address: str | list[str] | None,
    private_ip_addresses: list[Any] | None = None,
    group_ids: list[str] | None = None,
    description: str | None = None,
    tags: dict[str, str] | None = None,
    delete_on_termination: bool | None = False,
    **kwargs: Any,
) -> Any:
    # moto: a random primary and random secondaries (duplicates, reserved addresses, broadcast),
    # no subnet accounting, ClientToken and Ipv4PrefixCount ignored.
    # EC2: lowest free addresses, InsufficientFreeAddressesInSubnet / InsufficientCidrBlocks when
    # the subnet is short (nothing created), a repeated ClientToken returns the first interface.
    original = _originals["NetworkInterfaceBackend.create_network_interface"]
    client_token: str | None = kwargs.pop("client_token", None)
    interface_type = _interface_type(kwargs.pop("interface_type", None))
    prefix_count = int(kwargs.pop("ipv4_prefix_count", 0) or 0)
    explicit_prefixes = _prefix_strings(kwargs.pop("ipv4_prefixes", None) or [])
    secondary_count = int(kwargs.pop("secondary_ips_count", 0) or 0)
    # Explicit addresses from the API are checked like EC2 does; moto's own callers (VPC endpoints
    # pass a random address) get an invalid explicit address replaced by the allocator's choice.
    strict = bool(kwargs.pop("fidelity_strict", False))
    subnet_obj = self.get_subnet(subnet) if isinstance(subnet, str) else subnet
    if not _modelled(subnet_obj):
        return original(
            self,
            subnet,
            private_ip_address,
            private_ip_addresses,
            group_ids=group_ids,
            description=description,
            tags=tags,
            delete_on_termination=delete_on_termination,
            secondary_ips_count=secondary_count or None,
            **kwargs,
        )
    primary, secondaries = _split_explicit(private_ip_address, private_ip_addresses)
    with _lock:
        tokens: dict[str, tuple[str, str]] = self.__dict__.setdefault("_fidelity_client_tokens", {})
        fingerprint = repr(
            (
                subnet_obj.id,
                primary,
                secondaries,
                secondary_count,
                prefix_count,
                explicit_prefixes,
                sorted(group_ids or []),
                description,
                sorted((tags or {}).items(), key=repr),
            )
        )
        if client_token and client_token in tokens:
            seen, eni_id = tokens[client_token]
            if seen != fingerprint:
                raise _error(
                    "IdempotentParameterMismatch",
                    f"The client token '{client_token}' was used with different parameters",
                )
            if eni_id in self.enis:
                return self.enis[eni_id]
        _counts(secondary_count, prefix_count, explicit_prefixes)
        if interface_type == EFA_ONLY and (
            secondaries or secondary_count or prefix_count or explicit_prefixes
        ):
            raise _no_ip_on_efa_only()
        held = _held(subnet_obj)
        if not strict:
            primary, secondaries = _lenient(held, primary, secondaries)
        explicit = ([primary] if primary else []) + secondaries
        if len(set(explicit)) != len(explicit):
            raise _error("InvalidParameterValue", "The same address is requested more than once")
        taken = [_check_explicit_address(held, a) for a in explicit]
        space = _add_moto_own(held, subnet_obj)
        space.occupy(taken)
        fresh = _take_addresses(subnet_obj, space, (0 if primary else 1) + secondary_count)
        prefixes = _take_prefixes(subnet_obj, space, explicit_prefixes, prefix_count)
        if not primary:
            primary = fresh.pop(0)
        entries = [{"Primary": True, "PrivateIpAddress": primary}]
        entries += [{"Primary": False, "PrivateIpAddress": a} for a in secondaries + fresh]
        eni = original(
            self,
            subnet,
            primary,
            entries,
            group_ids=group_ids,
            description=description,
            tags=tags,
            delete_on_termination=delete_on_termination,
            **kwargs,
        )
        _prefixes(eni).extend(prefixes)
        eni.interface_type = interface_type
        if client_token:
            tokens[client_token] = (fingerprint, eni.id)
        return eni


EFA_ONLY = "efa-only"
_CREATED_TYPES = ("interface", "efa", EFA_ONLY, "trunk")
"""The ``InterfaceType`` values CreateNetworkInterface takes (botocore's
``NetworkInterfaceCreationType`` besides ``branch``, which rides a trunk)."""


def _interface_type(value: Any) -> str:
    """CreateNetworkInterface's ``InterfaceType``: ``interface`` when absent; EC2's
    ``InvalidParameterValue`` for a value it does not create."""
    if value is None or value == "":
        return "interface"
    if value not in _CREATED_TYPES:
        raise _error("InvalidParameterValue", f"Value ({value}) for parameter interfaceType is invalid.")
    return str(value)


def _no_ip_on_efa_only() -> EC2ClientError:
    return _error("InvalidParameterCombination", "EFA-only network interfaces do not support IP addresses.")


def _lenient(held: SubnetSpace, primary: str | None, secondaries: list[str]) -> tuple[str | None, list[str]]:
    """Explicit addresses minus those EC2 would refuse (out of range, reserved, held, repeated)."""
    kept: list[str] = []
    for address in ([primary] if primary else []) + secondaries:
        value = _v4(address)
        if (
            value is not None
            and held.contains(value)
            and held.usable(value)
            and not held.in_use(value)
            and address not in kept
        ):
            kept.append(address)
    if primary is not None and primary in kept:
        return primary, [a for a in kept if a != primary]
    return None, kept


def _split_explicit(
    private_ip_address: str | list[str] | None, private_ip_addresses: list[Any] | None
) -> tuple[str | None, list[str]]:
    """(primary, secondaries) from moto's ways of passing explicit addresses."""
    if isinstance(private_ip_address, list):
        private_ip_address = private_ip_address[0] if private_ip_address else None
    primary = str(private_ip_address) if private_ip_address else None
    secondaries: list[str] = []
    for item in private_ip_addresses or []:
        if isinstance(item, dict):
            address = item.get("PrivateIpAddress")
            if not address:
                continue
            if item.get("Primary") and primary is None:
                primary = str(address)
            elif str(address) != primary:
                secondaries.append(str(address))
        elif item and str(item) != primary:
            if primary is None:
                primary = str(item)
            else:
                secondaries.append(str(item))
    return primary, secondaries


def _attach_network_interface(
    self: Any, eni_id: str, instance_id: str, device_index: int, network_card: int = 0
) -> Any:
    # moto: attaches anything anywhere (overwriting a taken device index, re-attaching an attached
    # interface, to a terminated instance, beyond the type's limits) and on card 0 only, whatever
    # NetworkCardIndex says (device index 0 of another card replaces the primary). EC2 refuses each
    # of these, and keeps device indexes per card.
    eni = self.get_network_interface(eni_id)
    instance = self.get_instance(instance_id)
    index, card = int(device_index), int(network_card)
    with _lock:
        if instance.state not in ("running", "stopped"):
            raise _error("IncorrectInstanceState", f"Instance '{instance_id}' is not 'running' or 'stopped'.")
        if eni.instance is not None or eni.attachment_id:
            raise _error("InvalidNetworkInterface.InUse", f"Interface: [{eni_id}] in use.")
        if index < 0:
            raise _error("InvalidParameterValue", f"Invalid value '{index}' for deviceIndex")
        limits = _type_limits(instance.instance_type)
        holds = limits.adapters_on(card) if limits is not None else (None if card == 0 else 0)
        if card < 0 or holds == 0:
            raise _error(
                "InvalidParameterValue",
                f"Invalid value '{card}' for networkCardIndex: instance type {instance.instance_type} "
                "has no such network card",
            )
        others = _other_cards(instance)
        if (index in instance.nics) if card == 0 else ((card, index) in others):
            raise _error(
                "InvalidParameterValue",
                f"Instance '{instance_id}' already has an interface attached at device index '{index}'"
                + (f" of network card '{card}'." if card else "."),
            )
        on_card = len(instance.nics) if card == 0 else sum(1 for c, _ in others if c == card)
        if holds is not None and on_card >= holds:
            raise _error(
                "AttachmentLimitExceeded",
                f"Interface count {on_card + 1} exceeds the limit for {instance.instance_type}"
                + (f" on network card {card}" if card else ""),
            )
        _check_fits(eni, instance, 0, 0)
        if card == 0:
            return _originals["NetworkInterfaceBackend.attach_network_interface"](
                self, eni_id, instance_id, index
            )
        # moto's Instance.attach_eni keys its nics by device index alone: another card's interface
        # is attached here, kept beside them, and read back by the patched ``attachment``.
        from moto.core.utils import utcnow
        from moto.ec2.utils import random_eni_attach_id

        eni.instance = instance
        eni.attachment_id = random_eni_attach_id()
        eni.attach_time = utcnow()
        eni.status = "in-use"
        eni.device_index = index
        eni.__dict__["_fidelity_card"] = card
        others[card, index] = eni
        return eni.attachment


def _other_cards(instance: Any) -> dict[tuple[int, int], Any]:
    """The interfaces attached on network cards other than 0, by (card, device index)."""
    found: dict[tuple[int, int], Any] = instance.__dict__.setdefault("_fidelity_other_cards", {})
    return found


def _card(eni: Any) -> int:
    return int(eni.__dict__.get("_fidelity_card", 0))


def _detach_other_card(eni: Any) -> None:
    """Detach an interface of another card (moto's detach would drop card 0's at its index)."""
    _other_cards(eni.instance).pop((_card(eni), eni.device_index), None)
    eni.instance = None
    eni.attachment_id = None
    eni.attach_time = None
    eni.status = "available"
    eni.device_index = None
    eni.__dict__.pop("_fidelity_card", None)


def _attachment(self: Any) -> Any:
    # moto: the attachment's NetworkCardIndex is always 0. EC2: the card it was attached on.
    from moto.ec2.models.elastic_network_interfaces import Attachment

    if not self.attachment_id:
        return None
    attachment = Attachment(self)
    attachment.network_card_index = _card(self)
    return attachment


def _detach_network_interface(self: Any, attachment_id: str) -> None:
    # moto: refuses only an instance's last interface. EC2: device index 0 can never be detached.
    from moto.ec2.exceptions import LastEniDetachError

    with _lock:
        for eni in list(self.enis.values()):
            if attachment_id and eni.attachment_id == attachment_id:
                if eni.device_index == 0 and not _card(eni):
                    raise LastEniDetachError()
                if _card(eni):
                    _detach_other_card(eni)
                    return
        _originals["NetworkInterfaceBackend.detach_network_interface"](self, attachment_id)


def _delete_network_interface(self: Any, eni_id: str) -> None:
    # moto: deletes an attached interface, and keeps an instance primary's address reserved in the
    # subnet forever. EC2: InvalidNetworkInterface.InUse while attached; the addresses are freed.
    with _lock:
        eni = self.enis.get(eni_id)
        if eni is not None and eni.instance is not None:
            raise _error(
                "InvalidNetworkInterface.InUse", f"The network interface '{eni_id}' is currently in use."
            )
        _originals["NetworkInterfaceBackend.delete_network_interface"](self, eni_id)
        if eni is not None and eni.subnet is not None:
            for address in _addresses(eni):
                eni.subnet.del_subnet_ip(address)


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


# -- subnet patches: moto.ec2.models.subnets.Subnet --------------------------------------------------


def _get_available_subnet_ip(self: Any, instance: Any) -> str:
    # moto: the next address of a generator, reusing released ones in random order, StopIteration
    # when exhausted. EC2: the lowest free address, InsufficientFreeAddressesInSubnet when none.
    if not _modelled(self):
        return str(_originals["Subnet.get_available_subnet_ip"](self, instance))
    with _lock:
        address = _take_addresses(self, _space(self), 1)[0]
        self._unused_ips.discard(address)
        self._subnet_ips[address] = instance
        return address


def _available_ip_address_count(self: Any) -> int:
    # moto: total - 5 - secondary addresses of interfaces, can go negative, ignores prefixes.
    # EC2: free addresses outside the reserves; a delegated /28 takes 16.
    if not _modelled(self):
        return int(_originals["Subnet.available_ip_address_count"].fget(self))
    return _space(self).free


# -- instance patches: moto.ec2.models.instances.Instance --------------------------------------------


def _prep_nics(
    self: Any,
    nic_spec: list[dict[str, Any]],
    private_ip: str | None = None,
    associate_public_ip: bool | None = None,
    security_groups: list[Any] | None = None,
    ipv6_address_count: int | None = None,
) -> None:
    # moto: interfaces RunInstances creates are delete-on-termination only if the request says so.
    # EC2: they are delete-on-termination unless the request says otherwise.
    # moto: a requested primary address another interface holds is taken anyway (another instance's
    # primary fails with a bare exception). EC2: InvalidIPAddress.InUse.
    requested = private_ip or next(
        (self._get_private_ip_from_nic(nic) for nic in nic_spec if int(nic.get("DeviceIndex", -1)) == 0),
        None,
    )
    if requested and self.subnet_id:
        subnet = self.ec2_backend.get_subnet(self.subnet_id)
        if _modelled(subnet):
            with _lock:
                _check_explicit_address(_held(subnet), str(requested))
    existing = {str(nic["NetworkInterfaceId"]) for nic in nic_spec if nic.get("NetworkInterfaceId")}
    explicit = {
        int(nic.get("DeviceIndex", 0)): _truthy(nic["DeleteOnTermination"])
        for nic in nic_spec
        if nic.get("DeleteOnTermination") is not None and not nic.get("NetworkInterfaceId")
    }
    _originals["Instance.prep_nics"](
        self,
        nic_spec,
        private_ip=private_ip,
        associate_public_ip=associate_public_ip,
        security_groups=security_groups,
        ipv6_address_count=ipv6_address_count,
    )
    for index, eni in self.nics.items():
        if eni.id not in existing:
            eni.delete_on_termination = explicit.get(index, True)


def _terminate(self: Any) -> Any:
    # moto: deletes delete-on-termination interfaces and leaves the others "in-use" on the
    # terminated instance. EC2: deletes the former and detaches the latter (status "available").
    with _lock:
        for nic in list(_other_cards(self).values()):
            delete = nic.delete_on_termination
            _detach_other_card(nic)
            if delete:
                nic.ec2_backend.delete_network_interface(nic.id)
        for nic in self.nics.values():
            if nic.instance is self:
                # Not instance.detach_eni: the terminated instance keeps its nics for DescribeInstances.
                # Detached first, so that moto's own delete of the delete-on-termination ones passes
                # the DeleteNetworkInterface patch.
                nic.instance = None
                nic.attachment_id = None
                nic.attach_time = None
                nic.status = "available"
                nic.device_index = None
        return _originals["Instance.terminate"](self)


def _ipv6_blocks(subnet: Any) -> list[ipaddress.IPv6Network]:
    """The subnet's associated IPv6 blocks (moto keeps them in ``ipv6_cidr_block_associations``)."""
    found = []
    for association in getattr(subnet, "ipv6_cidr_block_associations", {}).values():
        state = association.get("ipv6CidrBlockState") or {}
        if state.get("State") == "associated":
            found.append(ipaddress.IPv6Network(association["ipv6CidrBlock"]))
    return found


def _ipv6_prefix_list(eni: Any) -> list[str]:
    found: list[str] = eni.__dict__.setdefault("_fidelity_ipv6_prefixes", [])
    return found


def _no_ipv6_block(subnet_id: str) -> EC2ClientError:
    return _error(
        "InvalidParameterValue",
        f"The subnet '{subnet_id}' has no IPv6 CIDR block associated: an IPv6 prefix cannot be assigned.",
    )


def _take_ipv6_prefixes(backend: Any, eni: Any, count: int) -> list[str]:
    """``count`` free /80s of the interface's subnet's IPv6 block, lowest first, now the interface's.
    EC2: ``InvalidParameterValue`` when the subnet has no IPv6 block, or for a type that is not
    nitro; ``InsufficientCidrBlocks`` when the block is full; nothing assigned on a refusal."""
    blocks = _ipv6_blocks(eni.subnet)
    if not blocks:
        raise _no_ipv6_block(eni.subnet.id)
    if eni.instance is not None:
        limits = _type_limits(eni.instance.instance_type)
        if limits is not None and not limits.ipv6_prefixes:
            raise _error(
                "InvalidParameterValue",
                f"Ipv6 prefixes are not supported on instance type {eni.instance.instance_type} (nitro only)",
            )
    taken = {
        p for other in backend.enis.values() if other.subnet is eni.subnet for p in _ipv6_prefix_list(other)
    }
    fresh = free_ipv6_prefixes(blocks[0], taken, count)
    if len(fresh) < count:
        raise _no_blocks(eni.subnet.id)
    _ipv6_prefix_list(eni).extend(fresh)
    return fresh


def _ipv6_prefixes(self: Any) -> list[dict[str, str]] | None:
    # moto: no IPv6 prefixes. EC2: DescribeNetworkInterfaces lists Ipv6Prefixes.
    return [{"Ipv6Prefix": p} for p in _ipv6_prefix_list(self)] or None


def _ipv6_cidr_block_association_set(self: Any) -> list[dict[str, Any]]:
    # moto: the state renders as the text of a dict ("{'State': 'associated'}"). EC2: the state.
    return [
        {
            "ipv6CidrBlock": a["ipv6CidrBlock"],
            "associationId": a["associationId"],
            "ipv6CidrBlockState": {"state": (a.get("ipv6CidrBlockState") or {}).get("State", "")},
        }
        for a in self.ipv6_cidr_block_associations.values()
        if (a.get("ipv6CidrBlockState") or {}).get("State") == "associated"
    ]


def _ipv4_prefixes(self: Any) -> list[dict[str, str]] | None:
    # moto: no prefixes. EC2: DescribeNetworkInterfaces lists Ipv4Prefixes.
    found = _prefixes(self)
    return [{"Ipv4Prefix": p} for p in found] or None


def _mac_address(self: Any) -> str:
    # moto: random, shared by chance. EC2: unique: derived from the unique interface id.
    return mac_address(str(self.id))


def _keep_moto_mac(self: Any, value: str) -> None:
    # moto's constructor assigns its random MAC address: kept in the instance, where the property
    # hides it while the layer is installed and moto reads it again once it is undone.
    self.__dict__["mac_address"] = value


# -- response patches: moto.ec2.responses.elastic_network_interfaces.ElasticNetworkInterfaces -------


def _resp_create_network_interface(self: Any) -> Any:
    # moto's handler with ClientToken, Ipv4PrefixCount and Ipv4Prefixes passed on (moto drops them).
    from moto.core.responses import ActionResult
    from moto.ec2.utils import add_tag_specification

    subnet_id = self._get_param("SubnetId")
    private_ip_address = self._get_param("PrivateIpAddress")
    private_ip_addresses = self._get_param("PrivateIpAddresses", [])
    ipv6_addresses = [i["Ipv6Address"] for i in self._get_param("Ipv6Addresses", [])]
    ipv6_address_count = self._get_int_param("Ipv6AddressCount", 0)
    secondary_ips_count = self._get_param("SecondaryPrivateIpAddressCount")
    groups = self._get_param("Groups", [])
    subnet = self.ec2_backend.get_subnet(subnet_id)
    description = self._get_param("Description")
    tags = add_tag_specification(self._get_param("TagSpecifications", []))
    client_token = self._get_param("ClientToken")
    prefix_count = self._get_int_param("Ipv4PrefixCount", 0)
    prefixes = self._get_param("Ipv4Prefixes", [])
    interface_type = self._get_param("InterfaceType")
    ipv6_prefix_count = self._get_int_param("Ipv6PrefixCount", 0)

    self.error_on_dryrun()
    if ipv6_prefix_count and not _ipv6_blocks(subnet):
        raise _no_ipv6_block(subnet.id)

    eni = self.ec2_backend.create_network_interface(
        subnet,
        private_ip_address,
        private_ip_addresses,
        groups,
        description,
        tags,
        secondary_ips_count=secondary_ips_count,
        ipv6_addresses=ipv6_addresses,
        ipv6_address_count=ipv6_address_count,
        client_token=client_token,
        ipv4_prefix_count=prefix_count,
        ipv4_prefixes=prefixes,
        interface_type=interface_type,
        fidelity_strict=True,
    )
    if ipv6_prefix_count and not _ipv6_prefix_list(eni):  # a repeated token's interface has its own
        with _lock:
            try:
                _take_ipv6_prefixes(self.ec2_backend, eni, ipv6_prefix_count)
            except Exception:
                self.ec2_backend.delete_network_interface(eni.id)  # all or nothing, as EC2
                raise
    result: dict[str, Any] = {"NetworkInterface": eni}
    if client_token:
        result["ClientToken"] = client_token
    return ActionResult(result)


def _resp_attach_network_interface(self: Any) -> Any:
    # moto's handler drops NetworkCardIndex (and answers 0); this one passes it on.
    from moto.core.responses import ActionResult

    eni_id = self._get_param("NetworkInterfaceId")
    instance_id = self._get_param("InstanceId")
    device_index = self._get_int_param("DeviceIndex", 0)
    card = self._get_int_param("NetworkCardIndex", 0)

    self.error_on_dryrun()

    attachment = self.ec2_backend.attach_network_interface(eni_id, instance_id, device_index, card)
    return ActionResult({"AttachmentId": attachment.attachment_id, "NetworkCardIndex": card})


def _resp_assign_ipv6_addresses(self: Any) -> Any:
    # moto: drops Ipv6PrefixCount (and crashes for an address count on a subnet without IPv6). EC2:
    # /80 prefixes of the subnet's block, AssignedIpv6Prefixes; InvalidParameterValue without one.
    from moto.core.responses import ActionResult

    prefix_count = self._get_int_param("Ipv6PrefixCount", 0)
    if not prefix_count:
        return _originals["ElasticNetworkInterfaces.assign_ipv6_addresses"](self)
    eni_id = self._get_param("NetworkInterfaceId")
    self.error_on_dryrun()
    with _lock:
        eni = self.ec2_backend.get_network_interface(eni_id)
        if getattr(eni, "interface_type", "interface") == EFA_ONLY:
            raise _no_ip_on_efa_only()
        fresh = _take_ipv6_prefixes(self.ec2_backend, eni, prefix_count)
    return ActionResult(
        {"NetworkInterfaceId": eni.id, "AssignedIpv6Addresses": [], "AssignedIpv6Prefixes": fresh}
    )


def _resp_assign_private_ip_addresses(self: Any) -> Any:
    # moto: drops Ipv4PrefixCount and Ipv4Prefixes, picks random addresses, has no limits, loops
    # forever when the subnet cannot supply the count, and answers every address of the interface.
    # EC2: lowest free addresses and /28s, PrivateIpAddressLimitExceeded /
    # InsufficientFreeAddressesInSubnet / InsufficientCidrBlocks with nothing assigned, and answers
    # only the new addresses (and new prefixes).
    from moto.core.responses import ActionResult

    eni_id = self._get_param("NetworkInterfaceId")
    secondary_count = self._get_int_param("SecondaryPrivateIpAddressCount", 0)
    addresses = self._get_param("PrivateIpAddresses", [])
    prefix_count = self._get_int_param("Ipv4PrefixCount", 0)
    prefixes = _prefix_strings(self._get_param("Ipv4Prefixes", []))

    self.error_on_dryrun()

    eni, new_addresses, new_prefixes = _assign(
        self.ec2_backend, eni_id, addresses, secondary_count, prefix_count, prefixes
    )
    result: dict[str, Any] = {
        "NetworkInterfaceId": eni.id,
        "AssignedPrivateIpAddresses": [{"PrivateIpAddress": a} for a in new_addresses],
    }
    if new_prefixes:
        result["AssignedIpv4Prefixes"] = [{"Ipv4Prefix": p} for p in new_prefixes]
    return ActionResult(result)


def _resp_unassign_private_ip_addresses(self: Any) -> Any:
    # moto: drops Ipv4Prefixes, removes whatever matches, silently ignores addresses the interface
    # does not hold, even removes the primary. EC2: InvalidParameterValue and nothing removed unless
    # every address is a secondary of the interface and every prefix is delegated to it.
    from moto.core.responses import EmptyResult

    eni_id = self._get_param("NetworkInterfaceId")
    addresses = [str(a) for a in self._get_param("PrivateIpAddresses", [])]
    prefixes = _prefix_strings(self._get_param("Ipv4Prefixes", []))

    self.error_on_dryrun()

    _unassign(self.ec2_backend, eni_id, addresses, prefixes)
    return EmptyResult()


def _resp_modify_network_interface_attribute(self: Any) -> Any:
    # moto: drops Attachment (AttachmentId, DeleteOnTermination). EC2: sets delete-on-termination of
    # the named attachment (InvalidAttachmentID.NotFound if the interface is not attached under it).
    from moto.core.responses import EmptyResult
    from moto.ec2.exceptions import InvalidNetworkAttachmentIdError

    eni_id = self._get_param("NetworkInterfaceId")
    group_ids = self._get_param("Groups", [])
    source_dest_check = self._get_param("SourceDestCheck.Value")
    description = self._get_param("Description.Value")
    attachment = self._get_param("Attachment")

    self.error_on_dryrun()

    eni = self.ec2_backend.get_network_interface(eni_id)
    if attachment:
        attachment_id = str(attachment.get("AttachmentId") or "")
        if not attachment_id or eni.attachment_id != attachment_id:
            raise InvalidNetworkAttachmentIdError(attachment_id)
    self.ec2_backend.modify_network_interface_attribute(eni_id, group_ids, source_dest_check, description)
    if attachment and attachment.get("DeleteOnTermination") is not None:
        eni.delete_on_termination = _truthy(attachment["DeleteOnTermination"])
    return EmptyResult()


# -- install / uninstall ----------------------------------------------------------------------------


def _targets() -> list[tuple[type, str, Any]]:
    from moto.ec2.models.elastic_network_interfaces import NetworkInterface, NetworkInterfaceBackend
    from moto.ec2.models.instances import Instance
    from moto.ec2.models.subnets import Subnet
    from moto.ec2.responses.elastic_network_interfaces import ElasticNetworkInterfaces

    return [
        (NetworkInterfaceBackend, "create_network_interface", _create_network_interface),
        (NetworkInterfaceBackend, "attach_network_interface", _attach_network_interface),
        (NetworkInterfaceBackend, "detach_network_interface", _detach_network_interface),
        (NetworkInterfaceBackend, "delete_network_interface", _delete_network_interface),
        (NetworkInterface, "ipv4_prefixes", property(_ipv4_prefixes)),
        (NetworkInterface, "ipv6_prefixes", property(_ipv6_prefixes)),
        (Subnet, "ipv6_cidr_block_association_set", property(_ipv6_cidr_block_association_set)),
        (NetworkInterface, "mac_address", property(_mac_address, _keep_moto_mac)),
        (NetworkInterface, "attachment", property(_attachment)),
        (Subnet, "get_available_subnet_ip", _get_available_subnet_ip),
        (Subnet, "available_ip_address_count", property(_available_ip_address_count)),
        (Instance, "prep_nics", _prep_nics),
        (Instance, "terminate", _terminate),
        (ElasticNetworkInterfaces, "create_network_interface", _resp_create_network_interface),
        (ElasticNetworkInterfaces, "attach_network_interface", _resp_attach_network_interface),
        (ElasticNetworkInterfaces, "assign_ipv6_addresses", _resp_assign_ipv6_addresses),
        (ElasticNetworkInterfaces, "assign_private_ip_addresses", _resp_assign_private_ip_addresses),
        (ElasticNetworkInterfaces, "unassign_private_ip_addresses", _resp_unassign_private_ip_addresses),
        (
            ElasticNetworkInterfaces,
            "modify_network_interface_attribute",
            _resp_modify_network_interface_attribute,
        ),
    ]


def _uninstall_all() -> None:
    while _saved:
        owner, name, previous = _saved.pop()
        if previous is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, previous)
    _originals.clear()


def install() -> Callable[[], None]:
    """Patch moto's EC2 to answer like real EC2; returns the function that undoes it.

    Idempotent: installs nest (each returned function undoes one install; moto is restored when
    the last one is undone), and calling a returned function twice is harmless.
    """
    global _installs
    with _lock:
        if _installs == 0:
            for owner, name, replacement in _targets():
                previous = owner.__dict__.get(name, _MISSING)
                # The patches call moto's own implementation, looked up as "Class.name".
                _originals[f"{owner.__name__}.{name}"] = previous
                _saved.append((owner, name, previous))
                setattr(owner, name, replacement)
        _installs += 1
    done = False

    def uninstall() -> None:
        global _installs
        nonlocal done
        with _lock:
            if done:
                return
            done = True
            _installs -= 1
            if _installs == 0:
                _uninstall_all()

    return uninstall


@contextlib.contextmanager
def ec2_fidelity() -> Iterator[None]:
    """``with ec2_fidelity():`` — moto's EC2 answers like real EC2 inside the block."""
    uninstall = install()
    try:
        yield
    finally:
        uninstall()


# -- a moto server in this process -------------------------------------------------------------------


class MotoServer:
    """moto as an HTTP endpoint on 127.0.0.1 (a free port), in a thread of this process.

    Started on construction; ``endpoint_url`` is ``http://127.0.0.1:<port>``. With ``fidelity``
    (the default) the fidelity layer is installed for the server's lifetime. Use as a context
    manager or call :meth:`stop`.
    """

    def __init__(self, *, fidelity: bool = True) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._uninstall: Callable[[], None] | None = install() if fidelity else None
        self._server: ThreadedMotoServer = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        try:
            self._server.start()
            host, port = self._server.get_host_and_port()
        except BaseException:
            if self._uninstall is not None:
                self._uninstall()
            raise
        self.endpoint_url = f"http://{host}:{port}"
        self._stopped = False

    def stop(self) -> None:
        """Stop the server (and undo its fidelity install); idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self._server.stop()
        finally:
            if self._uninstall is not None:
                self._uninstall()

    def __enter__(self) -> MotoServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
