"""Garbage collection of leaked interfaces: mark in one run, delete in the next (docs/architecture.md).

An interface of ours leaks when a create's rollback fails, when the process dies between create and
attach, or when someone detaches it. The candidates are the interfaces that are detached and carry
this cluster's ownership tags (:func:`eni_ipam.core.model.ownership_tags`). Another cluster's interfaces,
or another tool's, never match. Ready interfaces (the pool tag, :data:`~eni_ipam.core.model.TAG_POOL`)
are detached on purpose and never candidates: the run hands them to ``ready`` instead (the pool of
ready interfaces, which deletes them when it is disabled). Each run:

1. **sweeps**: lists the candidates again, and deletes those that the previous run marked and that
   are still detached. It deletes with ``detach=False``, so an interface attached in between survives
   even if the listing raced with the attach (the cloud refuses to delete an attached interface);
2. **marks** up to ``gc_max_per_run`` of the current candidates for the next run.

So an interface is deleted only after two listings at least one interval apart saw it detached. A
listing that fails skips the run and keeps the marks. A deletion that fails keeps the interface
marked, and the next run tries again if it is still detached. Nothing here reads the OS clock: runs
wait on the injected :class:`~eni_ipam.core.clock.Clock`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence

import structlog

from eni_ipam.core import errors
from eni_ipam.core.clock import Clock
from eni_ipam.core.model import Interface, is_ready_interface, ownership_tags
from eni_ipam.core.observe import GcObserver
from eni_ipam.core.provider import Provider

log = structlog.get_logger("eni_ipam.core.gc")


@dataclasses.dataclass(frozen=True, slots=True)
class GcRun:
    """What one run did."""

    deleted: tuple[str, ...] = ()
    marked: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    """Marked interfaces whose deletion failed (still marked)."""
    survived: tuple[str, ...] = ()
    """Marked interfaces no longer detached: unmarked, never deleted."""


class GarbageCollector:
    """Mark-then-sweep of detached interfaces carrying this cluster's ownership tags."""

    def __init__(
        self,
        provider: Provider,
        *,
        cluster_name: str,
        clock: Clock,
        metrics: GcObserver,
        interval: float = 300.0,
        max_per_run: int = 25,
        ready: Callable[[Sequence[Interface]], Awaitable[None]] | None = None,
    ) -> None:
        """Args:
        provider: the cloud.
        cluster_name: whose interfaces to collect (the ownership tags' cluster).
        clock: where runs wait.
        metrics: ``eni_ipam_gc_interfaces_total{action}`` and run failures.
        interval: seconds between runs (an interface stays detached at least this long before it is
            deleted).
        max_per_run: interfaces marked per run, bounding each run's DeleteNetworkInterface burst.
        ready: handed the ready interfaces each listing found (never collected here).
        """
        self.provider = provider
        self.tags = ownership_tags(cluster_name)
        self.clock = clock
        self.metrics = metrics
        self.interval = interval
        self.max_per_run = max_per_run
        self.ready = ready
        self.marked: set[str] = set()

    async def run(self) -> None:
        """Run every ``interval`` until cancelled; a failed run is logged and retried next interval."""
        while True:
            await self.clock.sleep(self.interval)
            try:
                await self.run_once()
            except errors.Lapsed:
                log.info("gc_run_skipped", reason="leadership is not proven until the lease is renewed")
            except errors.Fenced:
                log.info("gc_stopped", reason="mutations are stopped")
                return
            except errors.ProviderError as exc:
                self.metrics.gc_failure()
                log.warning("gc_run_failed", error=str(exc), marked=len(self.marked))

    async def run_once(self) -> GcRun:
        """One sweep of the previous marks, then new marks.

        Raises:
            errors.ProviderError: the listing failed (marks are kept; nothing was deleted).
        """
        listed = await self.provider.list_detached_interfaces(tags=self.tags)
        pooled = [i for i in listed if is_ready_interface(i.tags)]
        detached = {i.id for i in listed if not is_ready_interface(i.tags)}
        deleted: list[str] = []
        failed: list[str] = []
        survived = sorted(self.marked - detached)
        for interface_id in sorted(self.marked & detached):
            try:
                await self.provider.delete_interface(interface_id=interface_id, detach=False)
            except errors.NotFound:
                deleted.append(interface_id)  # gone already: someone else's delete won
            except errors.ProviderError as exc:
                failed.append(interface_id)
                log.warning("gc_delete_failed", interface=interface_id, error=str(exc))
            else:
                deleted.append(interface_id)
                log.info("gc_interface_deleted", interface=interface_id)
        self.marked = set(failed)
        fresh = sorted(detached - set(deleted) - self.marked)[: max(self.max_per_run - len(self.marked), 0)]
        self.marked.update(fresh)
        for action, ids in (("deleted", deleted), ("marked", fresh), ("failed", failed)):
            self.metrics.gc_interfaces(action=action, count=len(ids))
        if fresh or deleted or failed:
            log.info("gc_run", marked=len(fresh), deleted=len(deleted), failed=len(failed))
        if pooled and self.ready is not None:
            await self.ready(pooled)
        return GcRun(tuple(deleted), tuple(fresh), tuple(failed), tuple(survived))
