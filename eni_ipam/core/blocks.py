"""Free aligned /28 blocks per subnet, counted from a listing of every interface of the VPC.

EC2 says how many addresses a subnet has free, never whether any aligned /28 is whole: prefix
delegation fails with ``InsufficientCidrBlocks`` on a subnet with hundreds of free addresses
scattered over every block. A resync lists every interface of the VPC, so the used addresses of
each subnet are known: a block is free when none of its 16 addresses is an interface's primary or
secondary address or lies in a delegated prefix, nor is one of the five addresses AWS reserves in
every subnet (the first four and the last: the first and the last block are never free).

What the count cannot see: interfaces the listing does not return (another account's in a shared
subnet, a subnet outside the VPC scope's listing). It is an upper bound; the planner's per-pass
``no_prefix_subnets`` stays the fallback for what EC2 refuses anyway.

Cost: one pass over the listing the resync reads anyway. Per interface, the packed addresses are
unpacked by one C call into one set per subnet; the blocks are found from that set by C-level
iteration (:meth:`SubnetBlocks.free_blocks`, computed once). docs/PERFORMANCE.md gives the figure
at 100,000 nodes.

Invariants: a :class:`SubnetBlocks` only ever grows its used set (:meth:`SubnetBlocks.mark`);
:meth:`SubnetBlocks.pick` never names a used address, a reserved one, nor one of a free block
while a broken block has a free address.
"""

from __future__ import annotations

import ipaddress
import operator
import struct
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from itertools import repeat

from eni_ipam.core.model import Interface, Subnet
from eni_ipam.core.packed import Addresses, address_int, detail_address

BLOCK = 16
"""Addresses of one aligned /28."""
_SHIFT = 4
_RESERVED_HEAD = 4
"""AWS reserves the network address, +1 (router), +2 (DNS), +3 (future use) and the broadcast."""


def _ntoa(value: int) -> str:
    return str(ipaddress.IPv4Address(value))


class SubnetBlocks:
    """The used addresses of one subnet, and its free aligned /28 blocks."""

    __slots__ = (
        "_chunks",
        "_first_block",
        "_free",
        "_last_block",
        "_per_block",
        "_primaries",
        "_used",
        "base",
        "full",
        "size",
    )

    def __init__(self, cidr: str) -> None:
        """An empty subnet of ``cidr`` (only its reserved addresses used).

        Raises:
            ValueError: ``cidr`` is not an IPv4 network.
        """
        network = ipaddress.IPv4Network(cidr, strict=False)
        self.base = int(network.network_address)
        self.size = network.num_addresses
        self._used: set[int] = set()
        self._chunks: list[bytes] = []
        """Packed secondary addresses added and not yet in ``_used``: unpacked together, in one C call
        per subnet, when first read (a call per interface cost more than the unpacking)."""
        self._primaries: list[int] = []
        self.full: set[int] = set()
        """Block numbers (address >> 4) delegated whole as prefixes."""
        self._first_block = self.base >> _SHIFT
        self._last_block = (self.base + self.size - 1) >> _SHIFT
        self._free: int | None = None
        self._per_block: Counter[int] | None = None
        """Used addresses per block number, found on first use (a pick) and kept up to date."""

    def __eq__(self, other: object) -> bool:
        """Equal when they count the same subnet with the same used addresses and prefixes."""
        if not isinstance(other, SubnetBlocks):
            return NotImplemented
        return (self.base, self.size, self.used, self.full) == (
            other.base,
            other.size,
            other.used,
            other.full,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable: marked as calls take addresses

    # -- building --------------------------------------------------------------------------------

    @property
    def used(self) -> set[int]:
        """Used address integers (primaries, secondaries), prefixes' apart (``full``)."""
        if self._chunks:
            joined = b"".join(self._chunks)
            self._used.update(struct.unpack(f">{len(joined) >> 2}I", joined))
            self._chunks.clear()
        if self._primaries:
            self._used.update(self._primaries)
            self._primaries.clear()
        return self._used

    def add(self, interface: Interface) -> None:
        """Count ``interface``'s primary, secondary addresses and prefixes as used."""
        addresses = interface.addresses
        if isinstance(addresses, Addresses):
            if addresses.packed:
                self._chunks.append(addresses.packed)
        else:
            self._used.update(address_int(a) for a in addresses)
        primary = detail_address(interface.detail)
        if primary:
            self._primaries.append(primary)
        if interface.prefixes:
            self.full.update(address_int(p.split("/", 1)[0]) >> _SHIFT for p in interface.prefixes)
        self._free = self._per_block = None

    def mark(self, addresses: Iterable[str] = (), prefixes: Iterable[str] = ()) -> None:
        """Count addresses and prefixes taken since the listing (a call of this process's)."""
        per_block = self._per_block
        used = self.used
        for address in addresses:
            value = address_int(address)
            if value not in used:
                used.add(value)
                if per_block is not None:
                    per_block[value >> _SHIFT] += 1
        self.full.update(address_int(p.split("/", 1)[0]) >> _SHIFT for p in prefixes)
        self._free = None

    # -- reading ---------------------------------------------------------------------------------

    def _blocks_used(self) -> Counter[int]:
        """Used addresses per block number (prefixes' excluded): counted in C, once."""
        if self._per_block is None:
            self._per_block = Counter(map(operator.rshift, self.used, repeat(_SHIFT)))
        return self._per_block

    def _broken(self) -> set[int]:
        """Block numbers with at least one used address (prefixes' excluded)."""
        if self._per_block is not None:
            return set(self._per_block)
        return set(map(operator.rshift, self.used, repeat(_SHIFT)))

    @property
    def free_blocks(self) -> int:
        """Aligned /28 blocks none of whose addresses is used or reserved."""
        if self._free is None:
            blocks = self.size >> _SHIFT
            if blocks == 0:
                self._free = 0
            else:
                taken = self._broken() | self.full
                taken.add(self._first_block)
                taken.add(self._last_block)
                self._free = blocks - sum(1 for b in taken if self._first_block <= b <= self._last_block)
        return self._free

    def _reserved(self, value: int) -> bool:
        offset = value - self.base
        return offset < _RESERVED_HEAD or offset == self.size - 1

    def pick(self, count: int, *, taken: Collection[str] = ()) -> list[str]:
        """``count`` free addresses packed densely, in address order of choice: first the free
        addresses of the broken blocks (the fullest block first, so blocks fill up), then, only when
        those run out, the addresses of free blocks one block at a time (the highest block first:
        the in-memory cloud and EC2's own prefix choice take the lowest). Never a used, reserved or
        ``taken`` address. Fewer when the subnet has fewer free addresses.
        """
        if count <= 0:
            return []
        held = {address_int(a) for a in taken}
        by_block = Counter(self._blocks_used())
        for value in held - self.used:
            by_block[value >> _SHIFT] += 1
        for block in (self._first_block, self._last_block):
            by_block.setdefault(block, 0)
        order = sorted(
            (
                b
                for b, n in by_block.items()
                if n < BLOCK and b not in self.full and self._first_block <= b <= self._last_block
            ),
            key=lambda b: (-by_block[b], b),
        )
        out: list[str] = []
        for block in order:
            out.extend(self._free_in(block, held, count - len(out)))
            if len(out) >= count:
                return out
        for block in range(self._last_block, self._first_block - 1, -1):
            if block in by_block or block in self.full:
                continue
            out.extend(self._free_in(block, held, count - len(out)))
            if len(out) >= count:
                break
        return out

    def _free_in(self, block: int, held: set[int], most: int) -> list[str]:
        out: list[str] = []
        used = self.used
        for value in range(block << _SHIFT, (block << _SHIFT) + BLOCK):
            if len(out) >= most:
                break
            if value not in used and value not in held and not self._reserved(value):
                out.append(_ntoa(value))
        return out


def count_blocks(subnets: Mapping[str, Subnet], interfaces: Iterable[Interface]) -> dict[str, SubnetBlocks]:
    """The blocks of every subnet of ``subnets`` from ``interfaces`` (every interface of the VPC,
    attached or not); interfaces of other subnets are skipped."""
    out: dict[str, SubnetBlocks] = {}
    for sid, subnet in subnets.items():
        try:
            out[sid] = SubnetBlocks(subnet.cidr)
        except ValueError:
            continue
    for iface in interfaces:
        blocks = out.get(iface.subnet_id)
        if blocks is not None:
            blocks.add(iface)
    return out
