"""CIDR-true address space of one simulated subnet.

A :class:`SubnetSpace` hands out addresses and aligned /28 blocks the way EC2 does for the questions
the reconciler's decisions depend on, and deterministically:

* AWS reserves five addresses of every subnet — the network address, +1 (router), +2 (DNS),
  +3 (reserved for future use) and the broadcast address — so a /24 has 251 usable addresses and
  its first and last /28 can never be delegated whole;
* single addresses are the lowest free ones; /28 prefixes the lowest fully free aligned blocks;
* ``blocked`` is a *count* of addresses the subnet pretends are taken by someone else (the scenario
  file's ``available`` cap). They are not specific addresses: the space reports and hands out at
  most ``cidr_free - blocked`` addresses, but which addresses it hands out is still decided by the
  CIDR alone.

A space can also mirror another record of who holds what: :meth:`SubnetSpace.occupy` marks what
that record holds (idempotently), :meth:`~SubnetSpace.in_use` and :meth:`~SubnetSpace.block_free`
answer for one address or one /28. The moto fidelity layer (:mod:`eni_ipam_testkit.moto_ec2`) rebuilds
a space from moto's records for each request, so moto hands out what this cloud would.

Invariants: an offset is in use at most once; ``blocks_used[b]`` is the number of in-use offsets in
block ``b``; ``free`` never exceeds ``cidr_free``. Callers check capacity before taking (taking more
than is free is a bug, and asserts).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterable

from eni_ipam.core.model import IPV6_PREFIX_LENGTH

PREFIX_LEN = 28
BLOCK = 16
RESERVED_HEAD = 4
"""Network address, router, DNS, and the one AWS keeps for future use."""


def free_ipv6_prefixes(block: ipaddress.IPv6Network, taken: Collection[str], count: int) -> list[str]:
    """The lowest ``count`` /80s of ``block`` not in ``taken`` (their canonical text), fewer when the
    block has no more: how EC2 delegates IPv6 prefixes here, for the in-memory cloud and the moto
    layer alike."""
    fresh: list[str] = []
    for candidate in block.subnets(new_prefix=IPV6_PREFIX_LENGTH):
        if len(fresh) == count:
            break
        if str(candidate) not in taken:
            fresh.append(str(candidate))
    return fresh


class SubnetSpace:
    """The addresses of one subnet: which are in use, which are free, which /28s are whole."""

    def __init__(self, cidr: str) -> None:
        """Create the space of ``cidr`` with only the five AWS-reserved addresses in use.

        Raises:
            ValueError: ``cidr`` is not an IPv4 network between /16 and /28 (EC2's subnet sizes).
        """
        network = ipaddress.IPv4Network(cidr)
        if not 16 <= network.prefixlen <= PREFIX_LEN:
            raise ValueError(f"subnet CIDR {cidr} must be between /16 and /28")
        self.network = network
        self._base = int(network.network_address)
        self.size = network.num_addresses
        self._used = bytearray(self.size)
        self._blocks_used = bytearray(self.size // BLOCK)
        self._assigned = 0
        self._low = 0
        self._low_block = 0
        self.blocked = 0
        self.spread = False
        """Secondary addresses assigned by count (and declared ones, at setup) come from the
        emptiest /28 block (the lowest on ties) instead of being the lowest free ones: a cloud whose
        choice breaks whole blocks, as EC2's may (the scenario file's ``address_choice: spread``).
        Primary addresses and prefixes are the lowest either way."""
        for offset in (*range(RESERVED_HEAD), self.size - 1):
            self._mark(offset, True)

    # -- capacity --------------------------------------------------------------------------------

    @property
    def cidr_free(self) -> int:
        """Free addresses by the CIDR alone (reserved and assigned ones excluded)."""
        return self.size - RESERVED_HEAD - 1 - self._assigned

    @property
    def free(self) -> int:
        """Free addresses the subnet reports and will hand out (the cap applied)."""
        return max(self.cidr_free - self.blocked, 0)

    def free_blocks(self) -> int:
        """Aligned /28 blocks with no address in use."""
        return self._blocks_used.count(0)

    def can_take_blocks(self, count: int) -> bool:
        """Whether ``count`` whole /28 blocks can be handed out now (the cap included)."""
        return self.free >= BLOCK * count and self.free_blocks() >= count

    def cap(self, available: int) -> None:
        """Report at most ``available`` free addresses from now on (never more than the CIDR allows)."""
        self.blocked = max(self.cidr_free - max(available, 0), 0)

    # -- taking and giving back ------------------------------------------------------------------

    def take_addresses(self, count: int, *, from_blocked: bool = False, spread: bool = False) -> list[str]:
        """Hand out the ``count`` lowest free addresses, in address order.

        ``from_blocked`` (setup only): the addresses come out of the blocked ones first, so a cap
        given for a subnet counts the free addresses *after* the interfaces declared in it.
        ``spread``: chosen as :attr:`spread` says, when it is set.
        """
        assert count <= (self.cidr_free if from_blocked else self.free), "caller checks capacity"
        out: list[str] = []
        for _ in range(count):
            if spread and self.spread:
                offset = self._spread_offset()
                self._mark(offset, True)
                out.append(self._address(offset))
                continue
            offset = self._used.find(0, self._low)
            self._mark(offset, True)
            self._low = offset + 1
            out.append(self._address(offset))
        if from_blocked:
            self.blocked = max(self.blocked - count, 0)
        return out

    def _spread_offset(self) -> int:
        """The lowest free offset of the block with the fewest used addresses (lowest on ties)."""
        used = self._blocks_used
        best = min((n for n in range(len(used)) if used[n] < BLOCK), key=lambda n: (used[n], n))
        return self._used.find(0, best * BLOCK)

    def take_named(self, addresses: Iterable[str]) -> list[str]:
        """Hand out exactly ``addresses`` (EC2's ``PrivateIpAddresses``), all or nothing.

        Raises:
            ValueError: one lies outside the subnet or is reserved (``InvalidParameterValue``).
            LookupError: one is in use already (``InvalidIPAddress.InUse``).
        """
        wanted = list(dict.fromkeys(addresses))
        for address in wanted:
            if not self.contains(address) or not self.usable(address):
                raise ValueError(f"Address {address} is not a usable address of the subnet's range")
            if self.in_use(address):
                raise LookupError(f"The specified address {address} is already in use.")
        assert len(wanted) <= self.free, "caller checks capacity"
        for address in wanted:
            self._mark(self._offset(address), True)
        return sorted(wanted, key=lambda a: self._offset(a))

    def take_blocks(self, count: int, *, from_blocked: bool = False) -> list[str]:
        """Hand out the ``count`` lowest whole aligned /28 blocks, as CIDR strings in address order."""
        assert self.free_blocks() >= count, "caller checks capacity"
        assert from_blocked or self.free >= BLOCK * count, "caller checks capacity"
        out: list[str] = []
        for _ in range(count):
            block = self._blocks_used.find(0, self._low_block)
            for offset in range(block * BLOCK, (block + 1) * BLOCK):
                self._mark(offset, True)
            self._low_block = block + 1
            out.append(f"{self._address(block * BLOCK)}/{PREFIX_LEN}")
        if from_blocked:
            self.blocked = max(self.blocked - BLOCK * count, 0)
        return out

    def occupy(self, addresses: Iterable[str] = (), prefixes: Iterable[str] = ()) -> None:
        """Mark addresses and /28 blocks in use that another record holds (nothing is handed out).

        Unlike :meth:`take_addresses` and :meth:`give_back`, this is idempotent: an address already in
        use (one of the five reserved, or named twice) stays in use once.

        Raises:
            ValueError: an address or prefix lies outside the subnet.
        """
        offsets = [self._offset(address) for address in addresses]
        for prefix in prefixes:
            start = self._offset(prefix.split("/", 1)[0])
            offsets.extend(range(start, start + BLOCK))
        for offset in offsets:
            if not self._used[offset]:
                self._mark(offset, True)

    def give_back(
        self, addresses: list[str] | tuple[str, ...] = (), prefixes: list[str] | tuple[str, ...] = ()
    ) -> None:
        """Return addresses and /28 blocks to the free space."""
        for address in addresses:
            self._mark(self._offset(address), False)
        for prefix in prefixes:
            start = self._offset(prefix.split("/", 1)[0])
            for offset in range(start, start + BLOCK):
                self._mark(offset, False)

    # -- queries ---------------------------------------------------------------------------------

    def contains(self, address: str) -> bool:
        """Whether ``address`` (or a prefix's first address) lies in this subnet."""
        return ipaddress.IPv4Address(address.split("/", 1)[0]) in self.network

    def usable(self, address: str) -> bool:
        """Whether ``address`` lies in this subnet and is not one of the five reserved addresses."""
        offset = int(ipaddress.IPv4Address(address)) - self._base
        return RESERVED_HEAD <= offset < self.size - 1

    def in_use(self, address: str) -> bool:
        """Whether ``address`` of this subnet is in use (the five reserved addresses always are)."""
        return bool(self._used[self._offset(address)])

    def block_free(self, prefix: str) -> bool:
        """Whether the aligned /28 ``prefix`` of this subnet has no address in use."""
        start = self._offset(prefix.split("/", 1)[0])
        if start % BLOCK:
            raise ValueError(f"{prefix} is not an aligned /{PREFIX_LEN}")
        return self._blocks_used[start // BLOCK] == 0

    def assigned(self) -> int:
        """Addresses handed out (reserved ones excluded)."""
        return self._assigned

    # -- internals -------------------------------------------------------------------------------

    def _address(self, offset: int) -> str:
        return str(ipaddress.IPv4Address(self._base + offset))

    def _offset(self, address: str) -> int:
        offset = int(ipaddress.IPv4Address(address)) - self._base
        if not 0 <= offset < self.size:
            raise ValueError(f"{address} is outside subnet {self.network}")
        return offset

    def _mark(self, offset: int, used: bool) -> None:
        if bool(self._used[offset]) == used:
            raise AssertionError(f"address {self._address(offset)} is already {'used' if used else 'free'}")
        self._used[offset] = used
        delta = 1 if used else -1
        self._blocks_used[offset // BLOCK] += delta
        reserved = offset < RESERVED_HEAD or offset == self.size - 1
        if not reserved:
            self._assigned += delta
        if not used:
            self._low = min(self._low, offset)
            self._low_block = min(self._low_block, offset // BLOCK)
