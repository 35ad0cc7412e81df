"""How the node side finds an interface among its devices, and what kind of device it is: the MAC
address, the network card and the interface type.

Role: the vocabulary of an interface's link-layer identity, shared by the providers that read it
from their cloud, the model that holds it (:class:`~eni_ipam.core.model.Interface`) and the ENIPool
status that publishes it. The node's datapath finds each interface of the pool as the Linux device
with that MAC address, and derives the interface's route table from its device index and network
card (the AWS VPC CNI's scheme: ``device index + 1`` on card 0, ``10000 + device index + 100 * card``
on the others).

Invariants:

* One written form everywhere: six lowercase hexadecimal octets separated by colons
  (``0a:1b:2c:3d:4e:5f``), and ``""`` for no MAC address. Clouds write it otherwise (ARM:
  ``00-0D-3A-1B-2C-3D``); :func:`mac_value` reads either separator in either case.
* A MAC address no device can have is never taken: text that is not six octets, a group
  (multicast) address, all zeros (the addresses Linux refuses to give a device). What a cloud
  reports goes through :func:`reported`, which turns a bad value into "no MAC address" with a
  warning naming the interface, never an exception: the interface's addresses still belong to the
  pool (the reconciler does not need the MAC), only the node side cannot find its device until the
  cloud reports a good one.
* A network card is an integer from 0 to :data:`MAX_NETWORK_CARD`.
* An interface has one :class:`Kind`: a plain interface (EC2's ``interface``, every Azure NIC and
  generic interface), or one of EC2's special types. Only :data:`FILLABLE` kinds ever take pool
  addresses or count as room; a type a cloud reports that this module does not know is
  :attr:`Kind.OTHER`, never fillable: what cannot be proven plain is left alone.
* :func:`pack` holds all three in one non-negative int (the MAC in the low 48 bits, 0 for none; the
  card above, the kind above that): an interface keeps one slot for them, and no object at all for
  the common "no MAC, card 0, plain" of the generic provider (0 is a cached small int). A MAC string
  would cost 80 bytes an interface and the card a second slot; the int costs 32 bytes (up to 60
  bits it is two 30-bit digits: docs/PERFORMANCE.md §3).
"""

from __future__ import annotations

import enum
import re

import structlog

log = structlog.get_logger("eni_ipam.core.devices")

MAX_NETWORK_CARD = 255
"""The highest network card index an interface may report. EC2's largest instances have 32 cards
(indexes 0 to 31); the bound leaves room for larger ones and is the ENIPool CRD's maximum."""

MAC_PATTERN = r"^[0-9a-f][02468ace](:[0-9a-f]{2}){5}$"
"""The written form of a device's MAC address, as the ENIPool CRD's schema checks it: lowercase,
colon-separated, the group bit (the lowest bit of the first octet) clear."""


class Kind(enum.IntEnum):
    """What an interface is, as far as a pool is concerned (EC2's ``InterfaceType``).

    EC2 attaches several kinds of interface to an instance besides the plain one, each owned by
    something else (docs/aws.md "Interface types")."""

    PLAIN = 0
    """EC2's ``interface``: an ENA interface. Every Azure NIC and generic interface."""
    EFA = 1
    """``efa``: an ENA interface with an Elastic Fabric Adapter device beside it. Its IP side is an
    ENA's: secondary addresses and prefixes are documented for it, so a pool may fill it."""
    EFA_ONLY = 2
    """``efa-only``: the EFA device alone, without ENA and without IP addresses. Never filled."""
    TRUNK = 3
    """``trunk``: the interface the VPC resource controller attaches to carry branch interfaces
    (security groups for pods); it owns the interface's addresses. Never filled."""
    BRANCH = 4
    """``branch``: a pod's interface riding a trunk. Never attached to an instance itself."""
    OTHER = 15
    """Any other type (a load balancer's, a NAT gateway's, one EC2 adds later): never filled."""

    @property
    def label(self) -> str:
        """The cloud's name of the kind (EC2's ``InterfaceType``; ``other`` for any other)."""
        return _LABELS[self]


_LABELS = {
    Kind.PLAIN: "interface",
    Kind.EFA: "efa",
    Kind.EFA_ONLY: "efa-only",
    Kind.TRUNK: "trunk",
    Kind.BRANCH: "branch",
    Kind.OTHER: "other",
}
_KINDS = {label: kind for kind, label in _LABELS.items() if kind is not Kind.OTHER}

FILLABLE = frozenset({Kind.PLAIN, Kind.EFA})
"""Kinds a pool may fill and count as room."""


def kind_named(interface_type: object) -> Kind:
    """The :class:`Kind` of EC2's ``InterfaceType`` value. A missing value (``None``, ``""``: the
    field is absent from an old answer) is a plain interface; a value this module does not know is
    :attr:`Kind.OTHER`, which no pool fills."""
    if not interface_type:
        return Kind.PLAIN
    return _KINDS.get(interface_type, Kind.OTHER) if isinstance(interface_type, str) else Kind.OTHER


_MAC_BITS = 48
_MAC_MASK = (1 << _MAC_BITS) - 1
_CARD_BITS = 8
_KIND_SHIFT = _MAC_BITS + _CARD_BITS
_CARD_MASK = (1 << _CARD_BITS) - 1
MAX_LINK = (max(Kind) + 1 << _KIND_SHIFT) - 1
"""The largest value :func:`pack` makes."""
MAX_PLAIN_LINK = _MAC_MASK
"""The largest link of a plain interface on network card 0: a link at most this needs no look at
its kind or card."""
_GROUP_BIT = 1 << 40
"""The lowest bit of the first octet: set in group (multicast and broadcast) addresses."""
_MAC = re.compile(r"[0-9A-Fa-f]{2}([:-])[0-9A-Fa-f]{2}(?:\1[0-9A-Fa-f]{2}){4}")
"""Six octets of two hexadecimal digits, one separator throughout (``:`` or ``-``)."""


def mac_value(text: object) -> int:
    """The 48-bit value of the MAC address ``text`` (``0a:1b:2c:3d:4e:5f``, ``00-0D-3A-1B-2C-3D``).

    Raises:
        ValueError: ``text`` is not six octets with one separator, or is a group address or all
            zeros, which no device has.
    """
    if not isinstance(text, str) or _MAC.fullmatch(text) is None:
        raise ValueError(f"not a MAC address: {text!r:.40}")
    value = int(text.replace(text[2], ""), 16)
    if value & _GROUP_BIT or not value:
        raise ValueError(f"not a device's MAC address (group or all-zero): {text}")
    return value


def mac_text(value: int) -> str:
    """The written form of a 48-bit MAC value; ``""`` for 0 (no MAC address)."""
    if not value:
        return ""
    digits = f"{value:012x}"
    return f"{digits[0:2]}:{digits[2:4]}:{digits[4:6]}:{digits[6:8]}:{digits[8:10]}:{digits[10:12]}"


def normal_mac(text: str) -> str:
    """``text`` in the written form (``""`` stays ``""``).

    Raises:
        ValueError: as :func:`mac_value`.
    """
    return mac_text(mac_value(text)) if text else ""


def pack(mac_address: str = "", network_card: int = 0, kind: Kind = Kind.PLAIN) -> int:
    """One int holding a MAC address (``""``: none), a network card and a kind (the model's
    ``Interface.link``; :func:`mac_of`, :func:`card_of` and :func:`kind_of` read it back).

    Raises:
        ValueError: the MAC address is not a device's (:func:`mac_value`), or the card is not an
            integer from 0 to :data:`MAX_NETWORK_CARD`.
    """
    if type(network_card) is not int or not 0 <= network_card <= MAX_NETWORK_CARD:
        raise ValueError(f"network card {network_card!r} is not an integer from 0 to {MAX_NETWORK_CARD}")
    return (
        (mac_value(mac_address) if mac_address else 0) | network_card << _MAC_BITS | Kind(kind) << _KIND_SHIFT
    )


def mac_of(link: int) -> str:
    """The MAC address :func:`pack` put in ``link`` (``""`` for none)."""
    return mac_text(link & _MAC_MASK)


def card_of(link: int) -> int:
    """The network card :func:`pack` put in ``link``."""
    return link >> _MAC_BITS & _CARD_MASK


def with_card(link: int, network_card: int) -> int:
    """``link`` with its network card replaced (an interface attached on another card).

    Raises:
        ValueError: the card is not an integer from 0 to :data:`MAX_NETWORK_CARD`.
    """
    if type(network_card) is not int or not 0 <= network_card <= MAX_NETWORK_CARD:
        raise ValueError(f"network card {network_card!r} is not an integer from 0 to {MAX_NETWORK_CARD}")
    return link & ~(_CARD_MASK << _MAC_BITS) | network_card << _MAC_BITS


def kind_of(link: int) -> Kind:
    """The kind :func:`pack` put in ``link``."""
    return Kind(link >> _KIND_SHIFT)


def fillable(link: int) -> bool:
    """Whether the interface of ``link`` is of a kind a pool may fill (:data:`FILLABLE`)."""
    return link >> _KIND_SHIFT in _FILLABLE_VALUES


_FILLABLE_VALUES = frozenset(int(k) for k in FILLABLE)


def reported(
    mac_address: object, network_card: object, *, interface_id: str, interface_type: object = None
) -> int:
    """:func:`pack` of what a cloud reports for an interface (its MAC address as the cloud writes
    it, a JSON value; EC2's ``InterfaceType``, read by :func:`kind_named`), never raising: a MAC
    address that is no device's is dropped (no MAC) and a card out of bounds read as 0, each with a
    warning naming the interface and the value. A missing MAC (``None``, ``""``: a cloud may assign
    it only once the interface is in use) is no MAC, silently."""
    if (
        isinstance(network_card, int)
        and not isinstance(network_card, bool)
        and 0 <= network_card <= MAX_NETWORK_CARD
    ):
        card = network_card << _MAC_BITS
    else:
        log.warning(
            "interface_network_card_refused", interface=interface_id, network_card=repr(network_card)[:40]
        )
        card = 0
    card |= kind_named(interface_type) << _KIND_SHIFT
    if not mac_address:
        return card
    try:
        return mac_value(mac_address) | card
    except ValueError as exc:
        log.warning("interface_mac_refused", interface=interface_id, error=str(exc))
        return card
