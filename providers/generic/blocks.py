"""Per-node blocks carved from a cluster CIDR: the Kubernetes node-IPAM range allocator's ``CidrSet``.

A :class:`BlockSet` divides one cluster CIDR (IPv4 or IPv6) into equal blocks of ``mask`` bits and
hands them out. It keeps the range allocator's rules:

* **Next fit.** Allocation starts after the last block handed out and wraps around, so a block
  released a moment ago is the last to be handed out again (an address still cached by a node
  that just left is not reused at once).
* **Occupy.** Blocks already in use at start (recorded in the node store) and blocks overlapping an
  excluded range (the service CIDR) are marked taken before anything is allocated; occupying a
  block twice is harmless, and occupying a range marks every block it touches.
* **Bounded.** At most ``2**16`` blocks per cluster CIDR (the range allocator's limit on the
  difference between the cluster and node mask sizes), so the bitmap stays small.

Pure and synchronous: no I/O, no clock. One instance belongs to one provider; callers serialize.
"""

from __future__ import annotations

import ipaddress

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_BLOCK_BITS = 16
"""Largest ``mask - cluster prefix length`` accepted (the range allocator's limit)."""


class BlockSet:
    """The blocks of one cluster CIDR."""

    def __init__(self, cidr: Network, mask: int) -> None:
        if not cidr.prefixlen <= mask <= cidr.max_prefixlen:
            raise ValueError(
                f"block mask /{mask} must be between /{cidr.prefixlen} and /{cidr.max_prefixlen}"
            )
        if mask - cidr.prefixlen > MAX_BLOCK_BITS:
            raise ValueError(
                f"/{mask} blocks of {cidr} would be {2 ** (mask - cidr.prefixlen)} blocks; "
                f"at most {2**MAX_BLOCK_BITS} (a mask at most {MAX_BLOCK_BITS} bits longer than the CIDR's)"
            )
        self.cidr = cidr
        self.mask = mask
        self.count = 1 << (mask - cidr.prefixlen)
        self._shift = cidr.max_prefixlen - mask
        self._base = int(cidr.network_address)
        self._taken = bytearray(self.count)
        self._used = 0
        self._next = 0

    @property
    def block_size(self) -> int:
        """Addresses in one block."""
        return 1 << self._shift

    @property
    def free(self) -> int:
        """Blocks not handed out."""
        return self.count - self._used

    def block(self, index: int) -> Network:
        return ipaddress.ip_network((self._base + (index << self._shift), self.mask))

    def index_of(self, block: Network) -> int:
        """The index of ``block``, which must be one of this set's blocks exactly."""
        if block.prefixlen != self.mask or not block.subnet_of(self.cidr):  # type: ignore[arg-type]
            raise ValueError(f"{block} is not a /{self.mask} block of {self.cidr}")
        return (int(block.network_address) - self._base) >> self._shift

    def contains(self, network: Network) -> bool:
        return network.version == self.cidr.version and network.subnet_of(self.cidr)  # type: ignore[arg-type]

    def taken(self, block: Network) -> bool:
        return bool(self._taken[self.index_of(block)])

    def allocate(self) -> Network | None:
        """The next free block (next fit), marked taken; None when every block is taken."""
        if self._used == self.count:
            return None
        index = self._taken.find(0, self._next)
        if index < 0:
            index = self._taken.find(0, 0, self._next)
        self._mark(index)
        self._next = (index + 1) % self.count
        return self.block(index)

    def occupy(self, network: Network) -> None:
        """Mark every block ``network`` overlaps as taken (a block, a larger range or a single address).
        A network outside the CIDR is ignored."""
        if network.version != self.cidr.version or not network.overlaps(self.cidr):
            return
        first = max(int(network.network_address), self._base)
        last = min(int(network.broadcast_address), int(self.cidr.broadcast_address))
        for index in range((first - self._base) >> self._shift, ((last - self._base) >> self._shift) + 1):
            if not self._taken[index]:
                self._mark(index)

    def release(self, block: Network) -> None:
        """Return ``block``; releasing a free block is a no-op."""
        index = self.index_of(block)
        if self._taken[index]:
            self._taken[index] = 0
            self._used -= 1

    def _mark(self, index: int) -> None:
        self._taken[index] = 1
        self._used += 1
