"""Settings of the generic provider (``provider: generic``, section ``generic:``): frozen, validated.

:func:`generic_settings_from_mapping` is the one parser. It rejects unknown keys and bad values with
a :class:`~eni_ipam.core.errors.ConfigError` naming the field, and checks the ranges against each other
(blocks fit their cluster CIDR, cluster CIDRs do not overlap), so a configuration that would hand
one address to two nodes never starts.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from typing import Any

from eni_ipam.core.config import parse_int, section_items
from eni_ipam.core.errors import ConfigError
from eni_ipam.core.model import PREFIX_SIZE
from providers.generic.blocks import MAX_BLOCK_BITS, Network

PREFIX_MASK = 28
"""Pool slots are /28 prefixes (:data:`~eni_ipam.core.model.PREFIX_SIZE` addresses), as with EC2 prefix
delegation, so the planner, the status and the node side treat both alike."""

_KEYS = ("cluster_cidrs", "service_cidrs", "node_mask_ipv4", "node_mask_ipv6", "max_blocks_per_node")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GenericSettings:
    cluster_cidrs: tuple[Network, ...]
    """The ranges pod addresses come from (the controller manager's ``--cluster-cidr``). IPv4, IPv6
    or both (dual stack). Blocks are taken from the first CIDR of a family with room, then the
    next. Required: there is no safe default range for someone else's network."""

    service_cidrs: tuple[Network, ...] = ()
    """Ranges never handed out (``--service-cluster-ip-range``): a block overlapping one is occupied
    from the start, as the range allocator does."""

    node_mask_ipv4: int = 24
    """Size of a node's IPv4 block (``--node-cidr-mask-size-ipv4``; 24 as in Kubernetes: 256
    addresses, one block per node). A longer mask (down to /28) makes smaller blocks, and a node's
    pool then grows block by block as its watermarks ask."""

    node_mask_ipv6: int = 64
    """Size of a node's IPv6 block (``--node-cidr-mask-size-ipv6``; 64 as in Kubernetes). A node gets
    one per IPv6 cluster CIDR when it first appears and keeps it while it exists."""

    max_blocks_per_node: int = 0
    """Most IPv4 blocks one node may hold. 0: as many as make 256 addresses (1 block of /24, 16 of
    /28), the range allocator's one /24 per node."""

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


def _network(field: str, raw: Any) -> Network:
    if not isinstance(raw, str):
        raise ConfigError(field, f"expected a CIDR string, got {raw!r}")
    try:
        return ipaddress.ip_network(raw, strict=True)
    except ValueError as exc:
        raise ConfigError(field, f"not a CIDR ({exc})") from None


def _networks(field: str, raw: Any) -> tuple[Network, ...]:
    if not isinstance(raw, list):
        raise ConfigError(field, f"expected a list of CIDRs, got {raw!r}")
    return tuple(_network(f"{field}[{n}]", item) for n, item in enumerate(raw))


def generic_settings_from_mapping(data: Any, *, path: str = "generic") -> GenericSettings:
    if data is None:
        raise ConfigError(path, "required with provider: generic (at least cluster_cidrs)")
    values: dict[str, Any] = {}
    for key, field, raw in section_items(data, path, _KEYS):
        if key in ("cluster_cidrs", "service_cidrs"):
            values[key] = _networks(field, raw)
        else:
            values[key] = parse_int(field, raw, minimum=0 if key == "max_blocks_per_node" else 1)
    if not isinstance(data, Mapping) or not values.get("cluster_cidrs"):
        raise ConfigError(f"{path}.cluster_cidrs", "required: at least one CIDR to carve node blocks from")
    settings = GenericSettings(**values)
    _validate(settings, path)
    return settings


def _validate(s: GenericSettings, path: str) -> None:
    if not PREFIX_MASK - 8 <= s.node_mask_ipv4 <= PREFIX_MASK:
        raise ConfigError(
            f"{path}.node_mask_ipv4", f"expected {PREFIX_MASK - 8} to {PREFIX_MASK}, got {s.node_mask_ipv4}"
        )
    if not 48 <= s.node_mask_ipv6 <= 120:
        raise ConfigError(f"{path}.node_mask_ipv6", f"expected 48 to 120, got {s.node_mask_ipv6}")
    for n, cidr in enumerate(s.cluster_cidrs):
        field = f"{path}.cluster_cidrs[{n}]"
        mask = s.node_mask_ipv4 if cidr.version == 4 else s.node_mask_ipv6
        if cidr.prefixlen > mask:
            raise ConfigError(field, f"{cidr} is smaller than one /{mask} node block")
        if mask - cidr.prefixlen > MAX_BLOCK_BITS:
            raise ConfigError(
                field,
                f"{cidr} holds {2 ** (mask - cidr.prefixlen)} /{mask} blocks; at most {2**MAX_BLOCK_BITS} "
                f"(use a longer CIDR or a shorter node mask)",
            )
        for m, other in enumerate(s.cluster_cidrs[:n]):
            if other.version == cidr.version and cidr.overlaps(other):
                raise ConfigError(field, f"{cidr} overlaps cluster_cidrs[{m}] {other}")
    if not s.ipv4:
        raise ConfigError(
            f"{path}.cluster_cidrs",
            "needs an IPv4 CIDR: the pool is IPv4 /28 prefixes; IPv6 CIDRs add a per-node IPv6 block",
        )
