"""The allocator's vocabulary: address families, pool members and allocations (immutable data)."""

from __future__ import annotations

import dataclasses
import enum
import ipaddress

DEFAULT_POOL = "default"
"""The pool fed from the node's ENIPool (the addresses the reconciler put on the node's interfaces)."""


class Family(enum.StrEnum):
    IPV4 = "ipv4"
    IPV6 = "ipv6"

    @classmethod
    def of(cls, address: str) -> Family:
        """The family of ``address`` (raises ValueError for something that is not an address)."""
        return cls.IPV6 if ipaddress.ip_address(address).version == 6 else cls.IPV4


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolAddress:
    """One address a pool may hand out, with what a workload needs to use it."""

    address: str
    prefix_length: int
    """Of the subnet the address lives in (a pod's address is configured with it)."""
    gateway: str
    """The subnet's router (in a VPC: the subnet's base address + 1)."""
    interface_id: str = ""
    subnet_id: str = ""

    @property
    def family(self) -> Family:
        return Family.of(self.address)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Allocation:
    """An address handed to an owner (a container id, ``claim:<ns>/<name>``, a libnetwork endpoint)."""

    address: str
    pool: str
    owner: str
    prefix_length: int
    gateway: str
    interface_id: str = ""
    subnet_id: str = ""
    expiration_uuid: str = ""
    """Set while an expiration timer runs (allocate-with-expiration); empty otherwise."""

    @property
    def family(self) -> Family:
        return Family.of(self.address)
