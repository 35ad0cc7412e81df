"""What the node store remembers of each node's interfaces, for providers that keep no cloud state.

The generic provider has no cloud to ask which blocks a node holds: the published pool statuses
*are* its state (the ENIPools' status in Kubernetes, the embedded store otherwise). A node store
offers them through :class:`NodeRecords`; the provider reads them at each resync.

``term`` says when the records may have been changed by someone else: it changes when a new
leadership term begins (another leader may have run in between), and a provider rebuilds its view
from the records then instead of trusting what it remembered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NodeRecord:
    name: str
    instance_id: str
    subnet_ids: tuple[str, ...] = ()
    """The node spec's subnets (for the generic provider: the cluster CIDRs it prefers)."""
    prefixes: tuple[str, ...] = ()
    """IPv4 prefixes the node's published interfaces hold."""
    ipv6_prefixes: tuple[str, ...] = ()
    """IPv6 blocks the node's published interfaces hold."""


class NodeRecords(Protocol):
    @property
    def term(self) -> int:
        """Changes whenever another process may have changed the records since the last look."""
        ...

    def node_records(self) -> Sequence[NodeRecord] | None:
        """Every node the store holds with what its status publishes; None until the store has
        been read in full (a provider must not allocate from a partial view)."""
        ...


class RecordsRef:
    """A :class:`NodeRecords` to hand a provider before the store exists (the service opens the
    provider first); ``target`` is set once the store is built."""

    def __init__(self, target: NodeRecords | None = None) -> None:
        self.target = target

    @property
    def term(self) -> int:
        return self.target.term if self.target is not None else -1

    def node_records(self) -> Sequence[NodeRecord] | None:
        return self.target.node_records() if self.target is not None else None
