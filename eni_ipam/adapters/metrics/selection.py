"""Which nodes have per-node series (``node_ips``, ``node_at_capacity``): the policy and its selection.

A cluster of up to :attr:`NodeSeriesPolicy.all_up_to` nodes exports every node, as it always did.
A larger one exports only the nodes that need attention (:func:`urgency`), at most
:attr:`NodeSeriesPolicy.most` of them, the most urgent first: a scrape stays bounded however large
the cluster and however many of its nodes are short at once (decision 0021).

Invariants of :class:`NodeSelection`, after every call:

* at most ``all_up_to`` nodes: every node is shown;
* more nodes: the shown nodes are nodes that need attention, ``min(most, attention)`` of them, and
  no node left out is strictly more urgent than a shown one. Among equals, a shown node keeps its
  series and the node that has waited longest comes next, so series do not flap between nodes.

Each change costs O(1) (nodes are kept by urgency, of which there are a few dozen); only
crossing ``all_up_to`` costs O(n log n), once per crossing. A node that needs attention costs a dict
entry and a bucket entry; one that needs none costs nothing, unless every node is shown (a set entry).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import OrderedDict
from collections.abc import Collection
from typing import Protocol

from eni_ipam.core.model import NodeStats

Urgency = tuple[int, int]
"""(level, -size of the deficit): smaller is more urgent. Level 0: the node cannot grow for a reason a
person must fix; level 1: it is short of addresses. The deficit counts by powers of two (1, 2–3,
4–7, …: ``needed.bit_length()``), so a deficit moving by an address or two does not reorder nodes."""

ALL_UP_TO = 1000
MOST = 2000


def urgency(stats: NodeStats, capacity: str) -> Urgency | None:
    """How urgently a node needs a person, or None when it needs none.

    Exactly the nodes the chart's alerts may page for: a capacity reason other than a healthy full
    node (``instance-limit`` with nothing needed) — ``EniIpamNodesAtCapacity`` — and otherwise a
    deficit — ``EniIpamNodesInDeficit``. A node that cannot grow comes first (the reconciler will
    not fix it), then the largest deficit, as the manager's queue orders them.
    """
    if capacity and (capacity != "instance-limit" or stats.needed > 0):
        return (0, -stats.needed.bit_length())
    if stats.needed > 0:
        return (1, -stats.needed.bit_length())
    return None


class _NodeSeriesSettings(Protocol):
    @property
    def node_series_all_up_to(self) -> int: ...

    @property
    def node_series_max(self) -> int: ...


@dataclasses.dataclass(frozen=True, slots=True)
class NodeSeriesPolicy:
    """Settings ``node_series_all_up_to`` and ``node_series_max`` (their docstrings justify the
    defaults, which are these)."""

    all_up_to: int = ALL_UP_TO
    """Clusters of up to this many nodes export every node's series."""
    most: int = MOST
    """Above ``all_up_to``, at most this many nodes (those that need attention) have series."""

    def __post_init__(self) -> None:
        if not 0 <= self.all_up_to <= self.most:
            raise ValueError(f"need 0 <= all_up_to <= most, got {self.all_up_to} and {self.most}")

    @classmethod
    def of(cls, settings: _NodeSeriesSettings) -> NodeSeriesPolicy:
        """The policy of operator settings (:class:`eni_ipam.core.settings.Settings`)."""
        return cls(all_up_to=settings.node_series_all_up_to, most=settings.node_series_max)


Change = tuple[str, bool]
"""A node whose series must now be shown (True) or dropped (False)."""


class _Buckets:
    """Nodes by urgency; each urgency's nodes in the order they arrived. Urgencies are few (two
    levels, a power of two each), so the least and most urgent are found by looking at them all."""

    def __init__(self) -> None:
        self._by: dict[Urgency, OrderedDict[str, None]] = {}

    def add(self, name: str, level: Urgency) -> None:
        self._by.setdefault(level, OrderedDict())[name] = None

    def discard(self, name: str, level: Urgency) -> None:
        bucket = self._by[level]
        del bucket[name]
        if not bucket:
            del self._by[level]

    def most_urgent(self) -> tuple[Urgency, str] | None:
        """The most urgent node, the one that arrived first among equals."""
        if not self._by:
            return None
        level = min(self._by)
        return level, next(iter(self._by[level]))

    def least_urgent(self) -> tuple[Urgency, str] | None:
        """The least urgent node, the one that arrived last among equals."""
        if not self._by:
            return None
        level = max(self._by)
        return level, next(reversed(self._by[level]))


class NodeSelection:
    """Which nodes have series, kept up to date one change at a time.

    The owner calls :meth:`changed` after each node's stats change (or a node joins) and
    :meth:`removed` after a node leaves, with ``nodes`` (every node there is, given at construction)
    already updated, and applies the returned changes in order.
    """

    def __init__(self, policy: NodeSeriesPolicy, nodes: Collection[str]) -> None:
        self.policy = policy
        self._nodes = nodes
        self.shown: set[str] = set()
        """Nodes that have series now."""
        self._urgency: dict[str, Urgency] = {}
        """Every node that needs attention, however many nodes there are."""
        self._everyone = True
        # Above all_up_to only: the nodes that need attention, with series and waiting for them.
        self._shown_by = _Buckets()
        self._waiting_by = _Buckets()

    def changed(self, name: str, level: Urgency | None) -> list[Change]:
        """Node ``name`` (new, or changed) now has urgency ``level``."""
        old = self._urgency.get(name)
        if level is None:
            self._urgency.pop(name, None)
        else:
            self._urgency[name] = level
        if self._everyone:
            if len(self._nodes) > self.policy.all_up_to:
                return self._to_attention()
            if name not in self.shown:
                self.shown.add(name)
                return [(name, True)]
            return []
        if level == old:
            return []
        changes: list[Change] = []
        if name in self.shown:
            assert old is not None  # a shown node needs attention
            self._shown_by.discard(name, old)
            if level is None:
                self.shown.discard(name)
                changes.append((name, False))
            else:
                self._shown_by.add(name, level)
        else:
            if old is not None:
                self._waiting_by.discard(name, old)
            if level is not None:
                self._waiting_by.add(name, level)
        return changes + self._rebalance()

    def removed(self, name: str) -> list[Change]:
        """Node ``name`` left (its own series are the owner's to drop); what else changes."""
        old = self._urgency.pop(name, None)
        shown = name in self.shown
        self.shown.discard(name)
        if self._everyone:
            return []
        if old is not None:
            (self._shown_by if shown else self._waiting_by).discard(name, old)
        if len(self._nodes) <= self.policy.all_up_to:
            return self._to_everyone()
        return self._rebalance()

    def clear(self) -> None:
        """Forget every node (the owner emptied ``nodes``)."""
        self.shown.clear()
        self._urgency.clear()
        self._everyone = True
        self._shown_by, self._waiting_by = _Buckets(), _Buckets()

    def _to_attention(self) -> list[Change]:
        """The cluster outgrew ``all_up_to``: keep only the most urgent nodes that need attention."""
        self._everyone = False
        chosen = heapq.nsmallest(self.policy.most, self._urgency.items(), key=lambda item: (item[1], item[0]))
        keep = {name for name, _ in chosen}
        changes: list[Change] = [(name, False) for name in self.shown if name not in keep]
        changes += [(name, True) for name, _ in chosen if name not in self.shown]
        self.shown = keep
        self._shown_by, self._waiting_by = _Buckets(), _Buckets()
        for name, level in chosen:
            self._shown_by.add(name, level)
        for name, level in self._urgency.items():
            if name not in keep:
                self._waiting_by.add(name, level)
        return changes

    def _to_everyone(self) -> list[Change]:
        """The cluster is back within ``all_up_to``: every node is shown."""
        self._everyone = True
        self._shown_by, self._waiting_by = _Buckets(), _Buckets()
        changes: list[Change] = [(name, True) for name in self._nodes if name not in self.shown]
        self.shown = set(self._nodes)
        return changes

    def _rebalance(self) -> list[Change]:
        """Fill free places with the most urgent waiting nodes, and let a waiting node strictly more
        urgent than the least urgent shown one take its place."""
        changes: list[Change] = []
        while (best := self._waiting_by.most_urgent()) is not None:
            level, name = best
            if len(self.shown) >= self.policy.most:
                worst = self._shown_by.least_urgent()
                if worst is None or not level < worst[0]:
                    break
                self._shown_by.discard(worst[1], worst[0])
                self.shown.discard(worst[1])
                self._waiting_by.add(worst[1], worst[0])
                changes.append((worst[1], False))
            self._waiting_by.discard(name, level)
            self.shown.add(name)
            self._shown_by.add(name, level)
            changes.append((name, True))
        return changes
