"""IPv4 addresses and prefixes packed into bytes: how the cloud view holds a cluster's addresses.

A tuple of ten address strings costs about 740 bytes; the same ten addresses packed four bytes each
cost about 120. At 100,000 nodes of forty addresses that is the difference between 300 MB and 50 MB,
so every address list of the cloud view is one of these. They read like the tuples of strings they
replace (iteration, ``len``, indexing, ``in``, equality with any sequence of the same strings), so
code that only reads addresses never knows; code that builds many of them (a provider parsing a
listing) packs directly with :func:`pack`.

Invariants: values are immutable and hashable; the order given is kept (callers sort); a value
equals a tuple or list of the same canonical strings, and another packed value of the same bytes.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable, Iterator, Sequence, Set
from typing import Any, ClassVar, Self, overload

_aton = socket.inet_aton
_ntoa = socket.inet_ntoa


def pack(addresses: Iterable[str]) -> bytes:
    """Dotted-quad IPv4 addresses, four bytes each, in the order given.

    Raises:
        ValueError: one is not a dotted-quad IPv4 address.
    """
    try:
        return b"".join(_aton(a) for a in addresses if _strict(a))
    except OSError:
        raise ValueError(f"not an IPv4 address among {list(addresses)!r}") from None


def _strict(address: str) -> bool:
    # inet_aton accepts shorthand ("10.1", "10.0.0"); the cloud's and our strings are dotted quads.
    if address.count(".") != 3:
        raise ValueError(f"not an IPv4 address: {address!r}")
    return True


def address_int(address: str) -> int:
    """An IPv4 address as an integer (for arithmetic and ordering)."""
    return int.from_bytes(_aton(address), "big") if _strict(address) else 0


class _Packed(Sequence[str]):
    """What both packed sequences share: fixed-width records in one ``bytes``, read as strings."""

    __slots__ = ("packed",)
    _WIDTH: ClassVar[int]
    _WIDTH_ERROR: ClassVar[str]
    _NOUN: ClassVar[str]

    def __init__(self, packed: bytes = b"") -> None:
        if len(packed) % self._WIDTH:
            raise ValueError(f"{self._WIDTH_ERROR}, got {len(packed)} bytes")
        self.packed = packed

    def _text(self, chunk: bytes) -> str:
        raise NotImplementedError

    def _chunk(self, i: int) -> bytes:
        width = self._WIDTH
        return self.packed[i * width : i * width + width]

    def __len__(self) -> int:
        return len(self.packed) // self._WIDTH

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Self: ...
    def __getitem__(self, index: int | slice) -> str | Self:
        if isinstance(index, slice):
            return type(self)(b"".join(self._chunk(i) for i in range(len(self))[index]))
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"{self._NOUN} index out of range")
        return self._text(self._chunk(index))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, type(self)):
            return self.packed == other.packed
        if isinstance(other, tuple | list):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.packed)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.packed,))


class Addresses(_Packed):
    """An immutable sequence of IPv4 addresses, packed (see the module docstring)."""

    __slots__ = ()
    _WIDTH = 4
    _WIDTH_ERROR = "packed IPv4 addresses take four bytes each"
    _NOUN = "address"

    @classmethod
    def of(cls, addresses: Iterable[str]) -> Addresses:
        """Pack ``addresses`` (already packed: returned as it is)."""
        if isinstance(addresses, Addresses):
            return addresses
        packed = pack(addresses)
        return cls(packed) if packed else EMPTY_ADDRESSES

    def _text(self, chunk: bytes) -> str:
        return _ntoa(chunk)

    def __len__(self) -> int:
        return len(self.packed) >> 2  # read for every interface of every node planned

    def __iter__(self) -> Iterator[str]:
        packed = self.packed
        for i in range(0, len(packed), 4):
            yield _ntoa(packed[i : i + 4])

    def __contains__(self, address: object) -> bool:
        if not isinstance(address, str) or address.count(".") != 3:
            return False
        try:
            needle = _aton(address)
        except OSError:
            return False
        start = self.packed.find(needle)
        while start != -1 and start % 4:  # a match must start on an address boundary
            start = self.packed.find(needle, start + 1)
        return start != -1

    def __add__(self, other: Iterable[str]) -> Addresses:
        return Addresses(self.packed + Addresses.of(other).packed)


EMPTY_ADDRESSES = Addresses()


class Prefixes(_Packed):
    """An immutable sequence of IPv4 prefixes (``10.0.0.16/28``), packed five bytes each: the network
    address and the prefix length."""

    __slots__ = ()
    _WIDTH = 5
    _WIDTH_ERROR = "packed prefixes take five bytes each"
    _NOUN = "prefix"

    @classmethod
    def of(cls, prefixes: Iterable[str]) -> Prefixes:
        if isinstance(prefixes, Prefixes):
            return prefixes
        parts = []
        for prefix in prefixes:
            address, _, length = prefix.partition("/")
            if not length.isdigit() or not 0 <= int(length) <= 32:
                raise ValueError(f"not an IPv4 prefix: {prefix!r}")
            parts.append(pack((address,)) + bytes((int(length),)))
        return cls(b"".join(parts)) if parts else EMPTY_PREFIXES

    def _text(self, chunk: bytes) -> str:
        return f"{_ntoa(chunk[:4])}/{chunk[4]}"

    def __iter__(self) -> Iterator[str]:
        packed = self.packed
        for i in range(0, len(packed), 5):
            yield f"{_ntoa(packed[i : i + 4])}/{packed[i + 4]}"


EMPTY_PREFIXES = Prefixes()


class AddressSet(Set[str]):
    """An immutable set of IPv4 addresses, packed in address order (a node's addresses in use)."""

    __slots__ = ("_addresses",)

    def __init__(self, addresses: Iterable[str] = ()) -> None:
        if isinstance(addresses, AddressSet):
            self._addresses: Addresses = addresses._addresses
            return
        unique = sorted({_aton(a) for a in addresses if _strict(a)})
        self._addresses = Addresses(b"".join(unique)) if unique else EMPTY_ADDRESSES

    @classmethod
    def ipv4_of(cls, values: Iterable[object]) -> AddressSet:
        """The IPv4 addresses among ``values`` (anything else, an IPv6 address included, is left out:
        it cannot be one of a pool's addresses)."""
        kept = []
        for value in values:
            if isinstance(value, str) and value.count(".") == 3:
                try:
                    kept.append(_aton(value))
                except OSError:
                    continue
        if not kept:
            return EMPTY_ADDRESS_SET
        packed = cls()
        packed._addresses = Addresses(b"".join(sorted(set(kept))))
        return packed

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> frozenset[Any]:
        # Results of set operations (``&``, ``|``, ``-``) are plain frozensets: they may hold
        # anything the other operand held, and are short-lived.
        return frozenset(it)

    def __contains__(self, address: object) -> bool:
        return address in self._addresses

    def __iter__(self) -> Iterator[str]:
        return iter(self._addresses)

    def __len__(self) -> int:
        return len(self._addresses)

    def __hash__(self) -> int:
        return hash(self._addresses.packed)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AddressSet):
            return self._addresses.packed == other._addresses.packed
        return Set.__eq__(self, other)

    def __repr__(self) -> str:
        return f"AddressSet({list(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (AddressSet, (list(self),))


EMPTY_ADDRESS_SET = AddressSet()


# -- an interface's primary address and attachment -----------------------------------------------

ATTACHMENT_PREFIX = "eni-attach-"
_HEX = re.compile(r"[0-9a-f]{1,31}")
_ATTACHMENT_AT = len(ATTACHMENT_PREFIX)
_IP_FLAG = 1 << 32
Detail = int | tuple[str, str]
"""An interface's primary address and attachment id, read rarely (a status, a detach) and unique to
it: one int where both have their usual form (a dotted IPv4 address or none; ``eni-attach-`` and
lowercase hexadecimal digits, or none), else the two strings as they came. Bits 0–31 the address,
bit 32 set when there is one; above it the attachment: a set bit, the number of digits (5 bits),
then their value. At 400,000 interfaces the two strings cost 135 bytes an interface; the int 40."""


def pack_detail(primary_ip: str, attachment_id: str) -> Detail:
    """``primary_ip`` and ``attachment_id`` as one :data:`Detail` (exact: they read back unchanged)."""
    address = 0
    if primary_ip:
        try:
            packed = socket.inet_aton(primary_ip)
        except (OSError, UnicodeError, ValueError):
            return (primary_ip, attachment_id)
        if socket.inet_ntoa(packed) != primary_ip:  # "10.1", "010.0.0.1": kept as written
            return (primary_ip, attachment_id)
        address = int.from_bytes(packed) | _IP_FLAG
    if not attachment_id:
        return address
    digits = attachment_id[_ATTACHMENT_AT:]
    if not attachment_id.startswith(ATTACHMENT_PREFIX) or _HEX.fullmatch(digits) is None:
        return (primary_ip, attachment_id)
    return ((int(digits, 16) << 5 | len(digits)) << 1 | 1) << 33 | address


def detail_ip(detail: Detail) -> str:
    if isinstance(detail, tuple):
        return detail[0]
    if not detail & _IP_FLAG:
        return ""
    return f"{detail >> 24 & 255}.{detail >> 16 & 255}.{detail >> 8 & 255}.{detail & 255}"


def detail_address(detail: Detail) -> int:
    """The primary address of ``detail`` as an integer; 0 when there is none (or it is not IPv4)."""
    if isinstance(detail, tuple):
        try:
            return int.from_bytes(socket.inet_aton(detail[0]), "big") if detail[0].count(".") == 3 else 0
        except OSError:
            return 0
    return detail & 0xFFFFFFFF if detail & _IP_FLAG else 0


def detail_attachment(detail: Detail) -> str:
    if isinstance(detail, tuple):
        return detail[1]
    attachment = detail >> 33
    if not attachment:
        return ""
    return f"{ATTACHMENT_PREFIX}{attachment >> 6:0{attachment >> 1 & 31}x}"
