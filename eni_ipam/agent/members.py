"""Addresses as the allocator keys them, and the membership of one pool.

An address is kept in canonical form (``ipaddress``'s text) and ordered numerically, IPv4 first. Parsing
and ordering are memoized: pool addresses are a bounded set, sorted often. :class:`PoolMembers` keeps a
pool's members by address and, per family, in that order, so handing out the next free address never
sorts.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import ipaddress
from collections.abc import Iterable

from eni_ipam.agent import errors

from .types import Family, PoolAddress

FAMILY_LABEL = {Family.IPV4: "IPv4", Family.IPV6: "IPv6"}


@functools.lru_cache(maxsize=16384)
def canonical_address(address: str) -> str | None:
    """``address`` in canonical form; None when it is not an IP address."""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


@functools.lru_cache(maxsize=16384)
def address_key(address: str) -> tuple[int, int]:
    """Numeric order, IPv4 first (memoized: pool addresses are a bounded set, sorted often)."""
    parsed = ipaddress.ip_address(address)
    return parsed.version, int(parsed)


def address_family(address: str) -> Family:
    return Family.IPV4 if address_key(address)[0] == 4 else Family.IPV6


def parse_address(address: str, pool: str, error: type[errors.AllocatorError] = errors.NotInPool) -> str:
    """``address`` in canonical form; raises ``error`` naming ``pool`` when it is not an IP address."""
    canonical = canonical_address(address)
    if canonical is None:
        raise error(f"{address!r} is not an IP address", address=address, pool=pool)
    return canonical


class PoolMembers:
    """One pool's members (canonical address → :class:`PoolAddress`) and, per family, their order."""

    __slots__ = ("members", "order")

    def __init__(self, members: dict[str, PoolAddress]) -> None:
        self.members = members
        self.order = {
            f: sorted((a for a in members if address_family(a) is f), key=address_key) for f in Family
        }

    @classmethod
    def of(cls, pool: str, addresses: Iterable[PoolAddress]) -> PoolMembers:
        """The members of ``pool``, in canonical form; AllocatorError for one that is not an address."""
        members: dict[str, PoolAddress] = {}
        for member in addresses:
            canonical = parse_address(member.address, pool, errors.AllocatorError)
            members[canonical] = dataclasses.replace(member, address=canonical)
        return cls(members)

    def in_order(self) -> list[PoolAddress]:
        """Every member in address order (IPv4 first)."""
        return [self.members[a] for f in Family for a in self.order[f]]

    def walk(self, family: Family, after: str | None = None) -> list[str]:
        """The members of ``family`` in order, from the first one after ``after``, wrapping around."""
        order = self.order[family]
        start = bisect.bisect_right(order, address_key(after), key=address_key) if after else 0
        return order[start:] + order[:start]

    def discard(self, address: str) -> bool:
        """Remove ``address``; False when it was not a member."""
        if self.members.pop(address, None) is None:
            return False
        self.order[address_family(address)].remove(address)
        return True
