"""Settings of the generic provider (``provider: generic``, section ``generic:``): frozen, validated.

A :class:`~eni_ipam.config.schema.ConfigModel`: unknown keys and bad values are refused with a
:class:`~eni_ipam.errors.ConfigError` naming the field, and the ranges are checked against each
other (blocks fit their cluster CIDR, cluster CIDRs do not overlap), so a configuration that would
hand one address to two nodes never starts.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import Field, model_validator

from eni_ipam.config.schema import Cidr, ConfigModel, FieldError, NonNegativeInt
from eni_ipam.core.model import MAX_NODE_ADDRESSES, PREFIX_SIZE
from providers.generic.blocks import MAX_BLOCK_BITS

PREFIX_MASK = 28
"""Pool slots are /28 prefixes (:data:`~eni_ipam.core.model.PREFIX_SIZE` addresses), as with EC2 prefix
delegation, so the planner, the status and the node side treat both alike."""


_Networks = Annotated[tuple[Cidr, ...], Field(strict=False)]


class GenericSettings(ConfigModel):
    cluster_cidrs: _Networks
    """The ranges pod addresses come from (the controller manager's ``--cluster-cidr``). IPv4, IPv6
    or both (dual stack). Blocks are taken from the first CIDR of a family with room, then the
    next. Required: there is no safe default range for someone else's network."""

    service_cidrs: _Networks = ()
    """Ranges never handed out (``--service-cluster-ip-range``): a block overlapping one is occupied
    from the start, as the range allocator does."""

    node_mask_ipv4: Annotated[int, Field(ge=PREFIX_MASK - 8, le=PREFIX_MASK)] = 24
    """Size of a node's IPv4 block (``--node-cidr-mask-size-ipv4``; 24 as in Kubernetes: 256
    addresses, one block per node). A longer mask (down to /28) makes smaller blocks, and a node's
    pool then grows block by block as its watermarks ask."""

    node_mask_ipv6: Annotated[int, Field(ge=48, le=120)] = 64
    """Size of a node's IPv6 block (``--node-cidr-mask-size-ipv6``; 64 as in Kubernetes). A node gets
    one per IPv6 cluster CIDR when it first appears and keeps it while it exists."""

    max_blocks_per_node: NonNegativeInt = 0
    """Most IPv4 blocks one node may hold. 0: as many as make 256 addresses (1 block of /24, 16 of
    /28), the range allocator's one /24 per node."""

    @model_validator(mode="after")
    def _ranges(self) -> GenericSettings:
        if not self.cluster_cidrs:
            raise FieldError("cluster_cidrs", "required: at least one CIDR to carve node blocks from")
        for n, cidr in enumerate(self.cluster_cidrs):
            field = f"cluster_cidrs[{n}]"
            mask = self.node_mask_ipv4 if cidr.version == 4 else self.node_mask_ipv6
            if cidr.prefixlen > mask:
                raise FieldError(field, f"{cidr} is smaller than one /{mask} node block")
            if mask - cidr.prefixlen > MAX_BLOCK_BITS:
                raise FieldError(
                    field,
                    f"{cidr} holds {2 ** (mask - cidr.prefixlen)} /{mask} blocks; at most "
                    f"{2**MAX_BLOCK_BITS} (use a longer CIDR or a shorter node mask)",
                )
            for m, other in enumerate(self.cluster_cidrs[:n]):
                if other.version == cidr.version and cidr.overlaps(other):
                    raise FieldError(field, f"{cidr} overlaps cluster_cidrs[{m}] {other}")
        if not self.ipv4:
            raise FieldError(
                "cluster_cidrs",
                "needs an IPv4 CIDR: the pool is IPv4 /28 prefixes; IPv6 CIDRs add a per-node IPv6 block",
            )
        if self.blocks_per_node * self.block_size > MAX_NODE_ADDRESSES:
            raise FieldError(
                "max_blocks_per_node",
                f"{self.blocks_per_node} blocks of /{self.node_mask_ipv4} are "
                f"{self.blocks_per_node * self.block_size} addresses; a node's pool holds at most "
                f"{MAX_NODE_ADDRESSES} (the ENIPool status admits no more)",
            )
        return self

    @property
    def ipv4(self) -> tuple[ipaddress.IPv4Network, ...]:
        return tuple(c for c in self.cluster_cidrs if isinstance(c, ipaddress.IPv4Network))

    @property
    def ipv6(self) -> tuple[ipaddress.IPv6Network, ...]:
        return tuple(c for c in self.cluster_cidrs if isinstance(c, ipaddress.IPv6Network))

    @property
    def block_size(self) -> int:
        """Addresses in one IPv4 block."""
        return 1 << (32 - self.node_mask_ipv4)

    @property
    def blocks_per_node(self) -> int:
        return self.max_blocks_per_node or max(256 // self.block_size, 1)

    @property
    def slots_per_node(self) -> int:
        """/28 prefixes one node may hold: its blocks, cut in /28s."""
        return self.blocks_per_node * self.block_size // PREFIX_SIZE
