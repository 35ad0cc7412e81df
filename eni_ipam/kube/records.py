"""What the ENIPools' statuses publish, for a provider that keeps no cloud state of its own.

Role: the generic provider's only record of which blocks a node holds is the interfaces its pool's
status publishes (:class:`~eni_ipam.core.records.NodeRecords`). :meth:`PoolRecords.node_records`
reads them from the ENIPool informer's cache. That cache may be behind what the previous leader
wrote just before it stopped (a watch that was down, events still in flight), so each term begins
with a fresh list (:meth:`PoolRecords.begin_term`), of which only each pool's record is kept.

Invariants:

* Until the informer has caught up with that list (its resourceVersion reaches the list's), or for
  :data:`LISTED_TTL` at the most, a pool's record is the union of both: nothing the previous leader
  published is missed.
* A pool the informer has an older version of than the list is handed to the status writer too
  (:meth:`~eni_ipam.kube.status.StatusWriter.remember`), so a status that pool already holds is not
  written again.
* ``term`` grows by one as each term begins: another leader may have changed every pool meanwhile.
"""

from __future__ import annotations

import dataclasses
import random

import structlog

from eni_ipam.core.backoff import Backoff
from eni_ipam.core.clock import Clock
from eni_ipam.core.records import NodeRecord
from eni_ipam.kube import errors
from eni_ipam.kube.api import ENIPOOLS, KubeApi, Obj
from eni_ipam.kube.informer import Informer
from eni_ipam.kube.projection import PoolInfo, project_pool
from eni_ipam.kube.resources import node_record
from eni_ipam.kube.status import StatusWriter

log = structlog.get_logger("eni_ipam.kube.records")

LISTED_TTL = 300.0
"""Seconds the list made at the start of a term is merged into the records at most, in case the
informer's version never passes it (no pool changes): by then its watch has long caught up."""


def _older(current: str, listed: str) -> bool:
    """Whether ``current`` is known to be an older resourceVersion than ``listed``."""
    return current.isdigit() and listed.isdigit() and int(current) < int(listed)


def _caught_up(current: str, listed: str) -> bool:
    """Whether the informer has seen everything the list saw (resourceVersions of one etcd)."""
    try:
        return int(current) >= int(listed)
    except ValueError:
        return False


def _union(a: NodeRecord, b: NodeRecord) -> NodeRecord:
    return dataclasses.replace(
        a,
        prefixes=tuple(dict.fromkeys((*a.prefixes, *b.prefixes))),
        ipv6_prefixes=tuple(dict.fromkeys((*a.ipv6_prefixes, *b.ipv6_prefixes))),
    )


class PoolRecords:
    def __init__(
        self,
        api: KubeApi,
        *,
        pools: Informer[PoolInfo],
        writer: StatusWriter,
        clock: Clock,
        rng: random.Random,
    ) -> None:
        self.api = api
        self.pools = pools
        self.writer = writer
        self.clock = clock
        self.rng = rng
        self.term = 0
        """Leadership terms begun (:class:`~eni_ipam.core.records.NodeRecords`)."""
        self._listed: dict[str, NodeRecord] = {}
        """The pools' records as a fresh list saw them when this term began (see :meth:`node_records`)."""
        self._listed_version = ""
        self._listed_at = 0.0

    def node_records(self) -> list[NodeRecord] | None:
        """What every ENIPool's status publishes (None until the pools have been listed)."""
        if not self.pools.synced.is_set():
            return None
        records = {r.name: r for r in map(node_record, self.pools.store.values()) if r is not None}
        if self._listed and (
            _caught_up(self.pools.resource_version, self._listed_version)
            or self.clock.monotonic() - self._listed_at > LISTED_TTL
        ):
            self._listed = {}
        for name, old in self._listed.items():
            current = records.get(name)
            records[name] = old if current is None else _union(current, old)
        return list(records.values())

    async def begin_term(self, *, records: bool = True) -> None:
        """List the pools afresh (retrying until it succeeds), then count a new term.

        ``records``: keep each pool's record (what a provider reading the node store builds its view
        from); without, the list only tells the status writer what the pools hold (100,000 records
        a term are tens of megabytes nobody else reads)."""
        await self.list_pools(records=records)
        self.term += 1  # another leader may have changed every pool since our last term

    async def list_pools(self, *, records: bool = True) -> None:
        """Keep what a fresh list of the pools publishes, until the informer has caught up with it."""
        keep = self._term_record if records else self._remember
        backoff = Backoff(initial=0.5, maximum=10.0, rng=self.rng)
        while True:
            try:
                listed, version = await self.api.list(ENIPOOLS, project=keep)
                break
            except errors.KubeError as exc:
                delay = backoff.next_delay()
                log.warning("pool_list_failed", error=str(exc), retry_in=round(delay, 3))
                await self.clock.sleep(delay)
        self._listed = {r.name: r for r in listed if r is not None}
        self._listed_version, self._listed_at = version, self.clock.monotonic()

    def _remember(self, obj: Obj) -> None:
        """What the list made at the start of a term keeps of a pool for the status writer only:
        a pool the informer has an older version of (see :meth:`_term_record`)."""
        cached = self.pools.store.get(str(obj["metadata"]["name"]))
        listed = str(obj["metadata"].get("resourceVersion") or "")
        if cached is None or _older(cached.resource_version, listed):
            self.writer.remember(project_pool(obj))

    def _term_record(self, obj: Obj) -> NodeRecord | None:
        """What the list made at the start of a term keeps of a pool: its record. A pool the
        informer has an older version of (the previous leader's last writes may still be on their
        way to its watch) is handed to the status writer too, so a status that pool already holds is
        not written again."""
        self._remember(obj)
        return node_record(obj)
