"""Pure data: what the cloud looks like, what a node asks for, and what the planner decides.

Everything here is immutable and free of I/O so that the planner can be a pure function and the
same values can cross every boundary (provider → manager → status → simulator) without copies
going stale. Addresses read as strings in their canonical form (``"10.0.0.17"``, prefixes as
``"10.0.0.32/28"``): that is what every cloud API speaks. An interface holds them packed
(:mod:`eni_ipam.core.packed`: four bytes an address), since a cluster's addresses are most of the
cloud view's memory; any sequence of strings given is packed on construction.

Invariants:

* ``Interface.addresses`` never contains the interface's primary address.
* ``Interface.prefixes`` are aligned /28 blocks; each contributes 16 pool addresses.
* ``Instance.interfaces`` is sorted by network card, then device index (the planner relies on it
  for determinism).
* ``Interface.link`` holds a device's MAC address or none, and a network card in bounds
  (:mod:`eni_ipam.core.devices`): providers read what the cloud reports through
  :func:`~eni_ipam.core.devices.reported`, which drops what no device can have.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from eni_ipam.core import devices
from eni_ipam.core.packed import (
    EMPTY_ADDRESSES,
    EMPTY_PREFIXES,
    Addresses,
    Detail,
    Prefixes,
    detail_attachment,
    detail_ip,
    pack_detail,
)

PREFIX_SIZE = 16
"""Addresses in one delegated /28 prefix."""

IPV6_PREFIX_LENGTH = 80
"""The length of the IPv6 prefix a node gets (EC2 delegates /80s: 2^48 addresses, one per node)."""

MAX_NODE_ADDRESSES = 32_768
"""Most IPv4 addresses one node's pool can hold, and so the bound of the ENIPool status lists and
maps keyed by address (``used``, ``pool``, ``release``, ``releaseAnswers``): the API server refuses a
longer one, and the node agent never writes one. The largest instance type of the shipped EC2 table
holds 24 interfaces of 63 secondary slots, each a /28 when prefix-delegated: 24 × 63 × 16 = 24,192
addresses (x8i.96xlarge). Azure's largest size holds 8 NICs of 255 configurations (2,040); the generic
provider's ``max_blocks_per_node`` is bounded by it. A power of two above the largest, so a type with
a few more interfaces still fits; a test fails when the table holds one that does not. A pool on
several network cards could hold more (a trn1n.32xlarge's 80 interfaces of /28s: 62,720): its
maximum is capped here (:func:`~eni_ipam.core.watermarks.max_allocatable`), far above any node's pods."""

MAX_NODE_INTERFACES = 128
"""Most interfaces (and so subnets) one node reports: EC2's largest type attaches 80 over its 16
network cards (trn1n.32xlarge; 24 on card 0 alone), Azure's 8 NICs, the generic provider 1. A power
of two above the largest; a test fails when the shipped table holds a type that does not fit."""

MAX_INTERFACE_PREFIXES = MAX_NODE_ADDRESSES // PREFIX_SIZE
"""Most /28 prefixes on one interface: the generic provider's single interface may hold a whole
node's pool in prefixes (EC2's hold at most 63)."""


DETACHED_INDEX = -1
"""``Interface.device_index`` of an interface that is not attached (EC2 reports no attachment)."""


class Tags(Mapping[str, str]):
    """An immutable, hashable string → string mapping (cloud tags, label selectors)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        self._items: dict[str, str] = dict(sorted((items or {}).items()))

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self._items) == dict(other)

    def __repr__(self) -> str:
        return f"Tags({self._items!r})"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """Validated as a string → string mapping (or a Tags), serialized as a plain dict, so the
        configuration models can declare tag fields without special cases."""
        from pydantic_core import core_schema

        mapping = core_schema.no_info_after_validator_function(
            frozen_tags, handler.generate_schema(dict[str, str])
        )
        return core_schema.union_schema(
            [core_schema.is_instance_schema(cls), mapping],
            serialization=core_schema.plain_serializer_function_ser_schema(dict),
        )


EMPTY_TAGS = Tags()


def frozen_tags(tags: Mapping[str, str] | None) -> Tags:
    """Return an immutable copy of ``tags`` (sorted, so equal tag sets compare and print alike)."""
    if not tags:
        return EMPTY_TAGS
    return tags if isinstance(tags, Tags) else Tags(tags)


def tags_match(tags: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    """True when ``tags`` carries *every* key/value of ``wanted`` (an empty ``wanted`` matches nothing).

    Callers decide what an empty filter means; matching "all of nothing" is never a selection.
    """
    return bool(wanted) and all(tags.get(k) == v for k, v in wanted.items())


def address_key(address: str) -> tuple[int, ...]:
    """Sort key putting IPv4 addresses in numeric order."""
    return tuple(int(part) for part in address.split("."))


def ipv6_prefix_key(prefix: str) -> tuple[int, int, str]:
    """Sort key putting IPv6 prefixes in address order (text that is no prefix last, as written)."""
    try:
        network = ipaddress.IPv6Network(prefix)
    except ValueError:
        return (1, 0, prefix)
    return (0, int(network.network_address), prefix)


def expand_prefix(prefix: str) -> list[str]:
    """The 16 addresses of a /28 prefix, in address order."""
    return [str(a) for a in ipaddress.IPv4Network(prefix)]


MANAGED_BY = "eni-ipam"
TAG_CLUSTER = "eni-ipam/cluster"
TAG_NODE = "eni-ipam/node"
TAG_MANAGED_BY = "eni-ipam/managed-by"
TAG_INSTANCE = "eni-ipam/instance"


def ownership_tags(cluster_name: str) -> dict[str, str]:
    """The tags that say "this cluster's eni-ipam made this interface": what garbage collection
    looks for, so it can never take another cluster's (or another tool's) interfaces."""
    return {TAG_CLUSTER: cluster_name, TAG_MANAGED_BY: MANAGED_BY}


TAG_POOL = "eni-ipam/pool"
"""Carried by the interfaces of the central pool of ready interfaces (:mod:`eni_ipam.core.readypool`),
with the value :data:`READY`. Garbage collection skips a detached interface that carries it: a ready
interface is detached on purpose. The tag stays when a node takes the interface (retagging would be a
second call): once attached, an interface is its instance's whatever its tags say."""
READY = "ready"


def ready_interface_tags(*, cluster_name: str, extra: Mapping[str, str] = EMPTY_TAGS) -> dict[str, str]:
    """Every tag of a ready interface: the configured extras, the ownership tags and the pool tag.
    No node or instance tag: no node is known when it is made."""
    return {**extra, **ownership_tags(cluster_name), TAG_POOL: READY}


def is_ready_interface(tags: Mapping[str, str]) -> bool:
    """Whether an interface carrying ``tags`` was made for the pool of ready interfaces."""
    return tags.get(TAG_POOL) == READY


def interface_tags(
    *, cluster_name: str, node: str, instance_id: str, extra: Mapping[str, str] = EMPTY_TAGS
) -> dict[str, str]:
    """Every tag of an interface created for ``node``: the configured extras, then the ownership
    tags and the node and instance it was made for (ours win over an extra of the same key)."""
    return {**extra, **ownership_tags(cluster_name), TAG_NODE: node, TAG_INSTANCE: instance_id}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class InstanceLimits:
    """Network limits of an instance type, as the cloud describes them."""

    adapters: int
    """Maximum network interfaces of network card 0 (the default card, where the primary is)."""
    ipv4_per_interface: int
    """IPv4 addresses per interface, the primary included."""
    ipv6_per_interface: int = 0
    hypervisor: str = ""
    """``nitro``, ``xen`` or empty (bare metal, or limits given by hand)."""
    hot_attach: bool = True
    """The cloud attaches new interfaces to a running instance. Azure does not (a VM must be
    deallocated to gain a NIC) and the generic provider has one virtual interface per node; the
    planner then only fills the interfaces there are."""
    addresses: bool = True
    """Plain secondary addresses are offered. The generic provider hands out /28 blocks only, so its
    nodes are always prefix delegated."""
    prefixes: bool = False
    """/28 prefixes are offered whatever the hypervisor (the generic provider's blocks)."""
    ipv6_prefixes: bool = False
    """IPv6 /80 prefixes can be delegated to the type's interfaces (EC2: Nitro types with IPv6). A
    pool of family ``ipv6`` or ``dual`` gets one; elsewhere (Azure, the generic provider, Xen types)
    it cannot, and says so."""
    cards: tuple[int, ...] = ()
    """Maximum network interfaces of each network card, by card index, for a type of several cards
    (EC2's ``NetworkCards[].MaximumNetworkInterfaces``: a p5.48xlarge has 32 cards of 2); empty for a
    type of one card, whose interfaces are ``adapters``. ``cards[0]`` is ``adapters``."""
    slots_per_interface: int = dataclasses.field(init=False, compare=False, repr=False)
    """Secondary slots per interface: every secondary address or /28 prefix takes one. Stored, not
    derived: the planner reads it several times for every node it plans."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "slots_per_interface", max(self.ipv4_per_interface - 1, 0))
        if self.cards and self.cards[0] != self.adapters:
            raise ValueError(
                f"network card 0 holds {self.cards[0]} interfaces, but adapters is {self.adapters}"
            )

    def adapters_on(self, card: int) -> int:
        """Maximum interfaces of network card ``card`` (0 for a card the type does not have)."""
        if card == 0:
            return self.adapters
        return self.cards[card] if card < len(self.cards) else 0

    @property
    def supports_prefixes(self) -> bool:
        """Prefix delegation: on EC2 on Nitro instances only; elsewhere as the provider says."""
        return self.prefixes or self.hypervisor == "nitro"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Subnet:
    id: str
    vpc_id: str
    zone: str
    cidr: str
    available: int
    """Free addresses the cloud reports for the subnet right now."""
    tags: Mapping[str, str] = EMPTY_TAGS
    ipv6_cidr: str = ""
    """The subnet's IPv6 block (EC2: the associated ``Ipv6CidrBlock``, a /64); empty when it has none.
    Only an interface in a subnet with one can be delegated an IPv6 prefix."""
    free_blocks: int = dataclasses.field(default=-1, compare=False)
    """Aligned /28 blocks with no used address, counted from the listing of every interface of the
    VPC (:mod:`eni_ipam.core.blocks`); -1 when not counted (the provider lists only some interfaces,
    or none yet: the shared view of a new leader). An upper bound: interfaces the listing cannot see
    (another account's) are not in it. Derived from the listing, not the subnet's own: not compared."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SecurityGroup:
    id: str
    vpc_id: str
    tags: Mapping[str, str] = EMPTY_TAGS


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True, init=False, repr=False)
class Interface:
    """One network interface as the cloud reports it.

    Built with keywords: ``id``, ``device_index``, ``subnet_id``, ``primary_ip`` and the fields
    below. ``primary_ip`` and ``attachment_id`` are read as attributes but held as one packed
    :data:`~eni_ipam.core.packed.Detail` (``detail``): they are read rarely and unique to each
    interface, and as two strings they were a fifth of what a node's state cost. A copy made with
    :func:`dataclasses.replace` keeps them unless the call names them."""

    id: str
    device_index: int
    """Attachment slot on the instance; :data:`DETACHED_INDEX` when the interface is not attached."""
    subnet_id: str
    addresses: Sequence[str] = EMPTY_ADDRESSES
    """Secondary IPv4 addresses (never the primary), packed (:class:`~eni_ipam.core.packed.Addresses`)."""
    prefixes: Sequence[str] = EMPTY_PREFIXES
    """Delegated /28 prefixes, packed (:class:`~eni_ipam.core.packed.Prefixes`)."""
    ipv6_prefixes: tuple[str, ...] = ()
    """IPv6 blocks delegated to the interface (the generic provider's per-node IPv6 block). Published
    for the node side; not counted in the pool, whose sizes and watermarks are IPv4."""
    security_groups: tuple[str, ...] = ()
    tags: Mapping[str, str] = EMPTY_TAGS
    instance_id: str = ""
    """Empty when the interface is not attached."""
    delete_on_termination: bool = False
    created_at: float = 0.0
    """Cloud-side creation time on the provider's clock (used by garbage collection ages)."""
    link: int = 0
    """The MAC address and the network card, packed in one int (:func:`eni_ipam.core.devices.pack`;
    read them as :attr:`mac_address` and :attr:`network_card`). One slot and one small int object,
    not a string and a second slot: a cluster holds hundreds of thousands of interfaces."""
    detail: Detail = 0
    """The primary address and the attachment id, packed (read them as :attr:`primary_ip` and
    :attr:`attachment_id`)."""

    slots_used: int = dataclasses.field(init=False, compare=False)
    """Secondary slots taken: every secondary address or /28 prefix takes one."""
    pool_size: int = dataclasses.field(init=False, compare=False)
    """Addresses the interface contributes to a pool (a prefix counts 16). Both counts are kept,
    not derived: the planner reads them for every interface of every node it plans."""

    def __init__(
        self,
        *,
        id: str,
        device_index: int,
        subnet_id: str,
        primary_ip: str | None = None,
        addresses: Sequence[str] = EMPTY_ADDRESSES,
        prefixes: Sequence[str] = EMPTY_PREFIXES,
        ipv6_prefixes: tuple[str, ...] = (),
        security_groups: tuple[str, ...] = (),
        tags: Mapping[str, str] = EMPTY_TAGS,
        instance_id: str = "",
        attachment_id: str | None = None,
        delete_on_termination: bool = False,
        created_at: float = 0.0,
        link: int = 0,
        detail: Detail = 0,
    ) -> None:
        """``primary_ip``, ``attachment_id``: None keeps what ``detail`` holds (a copy's)."""
        if not 0 <= link <= devices.MAX_LINK:
            raise ValueError(f"interface {id}: {link!r} is not a packed MAC address and network card")
        if primary_ip is not None or attachment_id is not None:
            detail = pack_detail(
                detail_ip(detail) if primary_ip is None else primary_ip,
                detail_attachment(detail) if attachment_id is None else attachment_id,
            )
        if not isinstance(addresses, Addresses):
            addresses = Addresses.of(addresses)
        if not isinstance(prefixes, Prefixes):
            prefixes = Prefixes.of(prefixes)
        n_addresses = len(addresses.packed) >> 2
        n_prefixes = len(prefixes.packed) // 5
        put = object.__setattr__  # frozen: as the generated __init__ sets its fields
        put(self, "id", id)
        put(self, "device_index", device_index)
        put(self, "subnet_id", subnet_id)
        put(self, "addresses", addresses)
        put(self, "prefixes", prefixes)
        put(self, "ipv6_prefixes", ipv6_prefixes)
        put(self, "security_groups", security_groups)
        put(self, "tags", tags)
        put(self, "instance_id", instance_id)
        put(self, "delete_on_termination", delete_on_termination)
        put(self, "created_at", created_at)
        put(self, "link", link)
        put(self, "detail", detail)
        put(self, "slots_used", n_addresses + n_prefixes)
        put(self, "pool_size", n_addresses + PREFIX_SIZE * n_prefixes)

    @property
    def primary_ip(self) -> str:
        return detail_ip(self.detail)

    @property
    def attachment_id(self) -> str:
        return detail_attachment(self.detail)

    def __repr__(self) -> str:
        shown = (
            ("id", self.id),
            ("device_index", self.device_index),
            ("subnet_id", self.subnet_id),
            ("primary_ip", self.primary_ip),
            ("addresses", self.addresses),
            ("prefixes", self.prefixes),
            ("ipv6_prefixes", self.ipv6_prefixes),
            ("security_groups", self.security_groups),
            ("tags", self.tags),
            ("instance_id", self.instance_id),
            ("attachment_id", self.attachment_id),
            ("delete_on_termination", self.delete_on_termination),
            ("created_at", self.created_at),
            ("link", self.link),
        )
        return f"Interface({', '.join(f'{name}={value!r}' for name, value in shown)})"

    @property
    def mac_address(self) -> str:
        """The MAC address the node sees the interface's device with (``0a:1b:2c:3d:4e:5f``); ``""``
        when the provider has none (the generic provider's virtual interface, an Azure NIC of a VM
        never started)."""
        return devices.mac_of(self.link)

    @property
    def kind(self) -> devices.Kind:
        """What the interface is (EC2's ``InterfaceType``): only a :data:`~eni_ipam.core.devices.FILLABLE`
        kind ever takes pool addresses or counts as room (:attr:`fillable`)."""
        return devices.kind_of(self.link)

    @property
    def fillable(self) -> bool:
        """Whether a pool may fill the interface and count its free slots (its kind allows it)."""
        return devices.fillable(self.link)

    @property
    def network_card(self) -> int:
        """The network card of the interface's attachment to an instance (EC2's
        ``networkCardIndex``); 0 when it has none. EC2 interfaces on a card other than 0 are reported
        detached (pools use card 0 only: providers/aws/api.py) and keep their card, which says why."""
        return devices.card_of(self.link)

    def pool_addresses(self) -> Iterator[str]:
        """Every address this interface contributes to a pool: secondaries, then prefix addresses."""
        yield from self.addresses
        for prefix in self.prefixes:
            yield from expand_prefix(prefix)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Instance:
    id: str
    type: str
    vpc_id: str
    zone: str
    subnet_id: str
    """Subnet of the primary interface."""
    interfaces: tuple[Interface, ...] = ()
    running: bool = True
    plain: bool = dataclasses.field(init=False, compare=False, repr=False)
    """Every interface is a plain one on network card 0, so a pool's only exclusions are the spec's
    (index, tags): found once here, since the planner asks for every node it plans."""

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.interfaces, key=lambda i: (i.network_card, i.device_index, i.id)))
        if ordered != self.interfaces:
            object.__setattr__(self, "interfaces", ordered)
        object.__setattr__(self, "plain", all(i.link <= devices.MAX_PLAIN_LINK for i in ordered))

    def interface(self, interface_id: str) -> Interface | None:
        return next((i for i in self.interfaces if i.id == interface_id), None)

    def replace_interface(self, new: Interface) -> Instance:
        """A copy with ``new`` replacing the interface of the same id (or added when absent)."""
        others = tuple(i for i in self.interfaces if i.id != new.id)
        return dataclasses.replace(self, interfaces=(*others, new))

    def primary(self) -> Interface | None:
        """The interface at device index 0 of network card 0."""
        return next((i for i in self.interfaces if i.device_index == 0 and i.network_card == 0), None)


class ReleaseState(enum.StrEnum):
    """States of the release handshake between the reconciler and the node side."""

    MARKED = "marked-for-release"
    READY = "ready-for-release"
    DO_NOT_RELEASE = "do-not-release"
    RELEASED = "released"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NodeStats:
    available: int = 0
    """Addresses in the pool, used ones included."""
    used: int = 0
    needed: int = 0
    excess: int = 0
    capacity: int = 0
    """Most addresses the node's non-excluded interfaces could ever hold."""
    remaining_interfaces: int = 0
    """Interfaces that could still take addresses, free adapter slots included."""
    at_capacity: bool = False
    limits_known: bool = True
    running: bool = True
    prefix_delegated: bool = False


def _field_setters(cls: type) -> tuple[Callable[[object, Any], None], ...]:
    """The slot setters of a slotted dataclass's fields, in declaration order: what the fast
    constructors below call (each bypasses the frozen ``__setattr__``, as ``__init__`` does)."""
    return tuple(getattr(cls, f.name).__set__ for f in dataclasses.fields(cls))


_STATS_SLOTS = _field_setters(NodeStats)


def computed_stats(
    available: int,
    used: int,
    needed: int,
    excess: int,
    capacity: int,
    remaining_interfaces: int,
    at_capacity: bool,
    running: bool,
    prefix_delegated: bool,
) -> NodeStats:
    """``NodeStats(..., limits_known=True)``, made at twice the speed: the planner makes one for
    every node it looks at, and a frozen dataclass's ``__init__`` looks ``object.__setattr__`` up
    again for each field. The same object in every respect (the fields' own slots are set)."""
    stats = object.__new__(NodeStats)
    s = _STATS_SLOTS
    s[0](stats, available)
    s[1](stats, used)
    s[2](stats, needed)
    s[3](stats, excess)
    s[4](stats, capacity)
    s[5](stats, remaining_interfaces)
    s[6](stats, at_capacity)
    s[7](stats, True)
    s[8](stats, running)
    s[9](stats, prefix_delegated)
    return stats


SHARED_STATS_LIMIT = 4096
"""Distinct stats kept for sharing (:func:`shared_stats`); a full table starts afresh (the objects
already handed out stay shared). A cluster's nodes have far fewer distinct stats than this: a node
group's nodes differ only by the addresses their pods use."""
_shared_stats: dict[NodeStats, NodeStats] = {}


def shared_stats(stats: NodeStats) -> NodeStats:
    """The one object of ``stats``' value: nodes whose pools look alike hold one
    :class:`NodeStats`, not one each (112 bytes a node, and the metrics keep the same object)."""
    table = _shared_stats
    if len(table) >= SHARED_STATS_LIMIT:
        table.clear()
    return table.setdefault(stats, stats)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolEntry:
    """One pool address as published in the node's status (so the node side knows where it lives)."""

    address: str
    interface_id: str
    subnet_id: str
    prefix: str = ""


class PoolEntries(Sequence[PoolEntry]):
    """A node's pool as published: every address of its managed interfaces, made when read.

    A pool of forty addresses is forty entries; a status is published after every pass of every
    node, and most are compared with what the pool already holds and dropped. So the entries are
    not made until something reads them, and :meth:`by_interface` lets a writer render them an
    interface at a time."""

    __slots__ = ("interfaces",)

    def __init__(self, interfaces: Sequence[Interface]) -> None:
        self.interfaces = tuple(interfaces)

    def by_interface(self) -> Iterator[tuple[Interface, str, Iterator[str]]]:
        """(interface, prefix or "", its addresses) for every run of the pool, in order."""
        for iface in self.interfaces:
            if iface.addresses:
                yield iface, "", iter(iface.addresses)
            for prefix in iface.prefixes:
                yield iface, prefix, iter(expand_prefix(prefix))

    def __iter__(self) -> Iterator[PoolEntry]:
        for iface, prefix, addresses in self.by_interface():
            for address in addresses:
                yield PoolEntry(
                    address=address, interface_id=iface.id, subnet_id=iface.subnet_id, prefix=prefix
                )

    def __len__(self) -> int:
        return sum(i.pool_size for i in self.interfaces)

    def __getitem__(self, index: Any) -> Any:
        return list(self)[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.interfaces)

    def __repr__(self) -> str:
        return f"PoolEntries({list(self)!r})"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NodeStatus:
    """What the reconciler publishes about a node."""

    pool: Sequence[PoolEntry] = ()
    """Every pool address with where it lives (:class:`PoolEntries` when a pass made it)."""
    stats: NodeStats = NodeStats()
    release: Mapping[str, ReleaseState] = dataclasses.field(default_factory=dict)
    interfaces: tuple[Interface, ...] = ()
    subnets: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """CIDR of every subnet a pool address lives in, by subnet id (the node side derives each
    address's prefix length and gateway from it)."""
    message: str = ""
    """Why the node is not progressing, when it is not (unknown limits, no subnet room, at capacity
    with addresses needed, …), as a sentence an operator acts on; empty when it is."""
    limit: str = ""
    """Why the pool cannot grow, if it cannot (:data:`~eni_ipam.core.observe.CAPACITY_REASONS`)."""
    problem: str = ""
    """A reason the node's pool cannot be maintained at all, for its Ready condition
    (``DuplicateInstance``: another node's pool holds the instance); empty when there is none."""
    max_pods: int = 0
    """The most pods the node can run with an address each plus the host-network ones
    (:func:`~eni_ipam.core.watermarks.max_pods`, what ``eni-ipam max-pods`` says for its type and
    spec); 0 when it is not known (unknown limits, no instance, an IPv6-only pool)."""
    no_room: bool = False
    """No address is free for one more pod and none can come: the pool cannot grow (``limit`` says
    why) and every address it holds is in use, or an IPv6 pool has no /80 and cannot get one."""
    pressure: tuple[str, ...] | None = None
    """The subnets of the pool under pressure (:mod:`~eni_ipam.core.pressure`): the pool keeps only
    what its pods use or wait for. None while subnet pressure is disabled (no condition is written)."""


# --- plans -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AssignAddresses:
    """Add ``count`` secondary addresses (or /28 prefixes when ``prefixes``) to an existing interface."""

    interface_id: str
    subnet_id: str
    count: int
    prefixes: bool = False
    chosen: tuple[str, ...] = ()
    """The addresses to assign, named (dense placement: inside /28 blocks already broken, so whole
    blocks stay free for prefixes); ``count`` of them. Empty: the cloud chooses."""

    @property
    def addresses(self) -> int:
        return self.count * PREFIX_SIZE if self.prefixes else self.count


_ASSIGN_SLOTS = _field_setters(AssignAddresses)


def assignment(interface_id: str, subnet_id: str, count: int, prefixes: bool) -> AssignAddresses:
    """``AssignAddresses(...)`` at twice the speed, for the planner (see :func:`computed_stats`)."""
    action = object.__new__(AssignAddresses)
    s = _ASSIGN_SLOTS
    s[0](action, interface_id)
    s[1](action, subnet_id)
    s[2](action, count)
    s[3](action, prefixes)
    s[4](action, ())
    return action


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CreateInterface:
    """Create an interface in ``subnet_id`` with ``security_groups``, carrying ``count`` addresses (or
    /28 prefixes when ``prefixes``), and attach it at ``device_index`` of ``network_card``: what the
    planner decides, and the ``request`` a provider's ``create_interface`` takes as it is."""

    subnet_id: str
    security_groups: tuple[str, ...]
    device_index: int
    count: int
    prefixes: bool = False
    network_card: int = 0
    """The network card to attach on (EC2's ``NetworkCardIndex``); device indexes are per card."""
    ipv6_prefixes: int = 0
    """IPv6 /80 prefixes the interface is created with (EC2's ``Ipv6PrefixCount``): 1 for the node's
    IPv6 prefix, when no interface of the pool can take it."""

    @property
    def addresses(self) -> int:
        return self.count * PREFIX_SIZE if self.prefixes else self.count


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AssignIpv6Prefix:
    """Delegate one IPv6 /80 prefix to an existing interface (EC2's ``AssignIpv6Addresses`` with
    ``Ipv6PrefixCount=1``): the node's IPv6 pool, kept for the node's life."""

    interface_id: str
    subnet_id: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Ipv6Plan:
    """What a node of family ``ipv6`` or ``dual`` lacks for its IPv6 prefix
    (:func:`~eni_ipam.core.planner.plan_ipv6`)."""

    action: AssignIpv6Prefix | CreateInterface | None = None
    """The call to make; None when the node has its prefix, or when it cannot get one (``reason``)."""
    reason: str = ""
    """Why it cannot: ``no-ipv6-prefixes`` (the instance type takes none), ``no-ipv6-subnet`` (no
    interface of the pool is in a subnet with an IPv6 block, and no such subnet has room for a new
    one), ``at-capacity`` (no slot for a new interface), ``no-security-groups``."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class UnassignAddresses:
    """Remove the given secondary addresses and prefixes from one interface (one API call)."""

    interface_id: str
    subnet_id: str
    addresses: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return len(self.addresses) + PREFIX_SIZE * len(self.prefixes)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AllocationPlan:
    actions: tuple[AssignAddresses | CreateInterface, ...] = ()
    shortfall: int = 0
    """Addresses the plan could not place (no room, no subnet, no slot)."""
    reason: str = ""
    """Why there is a shortfall: ``at-capacity``, ``no-subnet``, ``subnet-reserve`` (room only in the
    subnets' reserves), ``no-security-groups``, ``max-allocate``."""
    prefix_delegated: bool = False

    @property
    def addresses(self) -> int:
        return sum(a.addresses for a in self.actions)


_PLAN_SLOTS = _field_setters(AllocationPlan)


def allocation_plan(
    actions: tuple[AssignAddresses | CreateInterface, ...],
    shortfall: int,
    reason: str,
    prefix_delegated: bool,
) -> AllocationPlan:
    """``AllocationPlan(...)`` at twice the speed, for the planner (see :func:`computed_stats`)."""
    plan = object.__new__(AllocationPlan)
    for set_field, value in zip(_PLAN_SLOTS, (actions, shortfall, reason, prefix_delegated), strict=True):
        set_field(plan, value)
    return plan


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReleasePlan:
    actions: tuple[UnassignAddresses, ...] = ()

    @property
    def addresses(self) -> int:
        return sum(a.size for a in self.actions)

    def candidates(self) -> frozenset[str]:
        """Every pool address this plan would remove (prefixes expanded)."""
        out: set[str] = set()
        for action in self.actions:
            out.update(action.addresses)
            for prefix in action.prefixes:
                out.update(expand_prefix(prefix))
        return frozenset(out)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CloudSnapshot:
    """One full view of the cloud, as a resync returns it."""

    subnets: Mapping[str, Subnet]
    security_groups: Mapping[str, SecurityGroup]
    instances: Mapping[str, Instance]
    limits: Mapping[str, InstanceLimits]
    """Limits by instance type, for every type among ``instances`` the provider knows."""
    changes: Changes | None = None
    """What changed since an earlier snapshot, when the provider knows (None: it does not say, and
    every instance is looked at)."""
    blocks: Mapping[str, Any] | None = None
    """The used addresses and free /28 blocks of each subnet
    (:class:`~eni_ipam.core.blocks.SubnetBlocks`, a layer above this vocabulary), when the provider
    listed every interface of the VPC (None: it did not, and nothing is counted)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Changes:
    """The instances of a snapshot that are not, object for object, those of an earlier one.

    A provider that hands an unchanged instance back as the same object can say which ones it did
    not: with it, a resync's apply looks only at those nodes (and at the ones it must look at anyway),
    not at every node of the cluster."""

    since: Mapping[str, Instance]
    """The earlier snapshot's ``instances`` (the very mapping: it is compared by identity, so a
    snapshot never applied, or one applied only in part, is never taken as the base)."""
    instance_ids: frozenset[str]
    """Every instance id whose object is not the one ``since`` held: new, changed or gone."""
