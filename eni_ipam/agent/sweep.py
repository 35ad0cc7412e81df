"""The sweep: releases the addresses runtimes forgot to release.

Runtimes do not retry. A CNI DEL that failed while the agent was down (podman logs "Unable to clean
up network" and moves on), or Docker's ReleaseAddress during a dockerd restart with the agent down,
is never sent again, and the address would stay allocated for good. Every ``sweep_interval`` the
sweep asks its judges, each a source of truth for some allocations, which of them are gone:

* :class:`PodJudge` (with Kubernetes): a CNI allocation whose pod (``K8S_POD_UID`` at ADD) is no
  longer on this node, or has finished, is gone; one whose pod is there is alive.
* :class:`NamespaceJudge` (a host without Kubernetes): a CNI allocation whose network namespace
  (``CNI_NETNS`` at ADD, or in libcni's cache entry) no longer exists is gone — a container without
  its namespace cannot use the address; one whose namespace exists is alive. With no namespace
  known (rebuilt from the cache of a libcni before 1.2), the rebuild's rule
  (:func:`~eni_ipam.agent.runtime.owner_alive`): alive while an OCI runtime knows the container, gone
  once none does. A cache entry is no evidence of life (libcni keeps the file of a failed DEL): when
  no OCI runtime's directory is visible, such an allocation is gone only if libcni's cache no longer
  lists it, and has no verdict otherwise. Releasing one also removes its cache entry, so that no
  later rebuild resurrects it.
* :class:`DockerJudge` (``docker_socket``): a libnetwork allocation whose address no endpoint of a
  Docker network using this driver holds (nor its gateway or auxiliary addresses) is gone, and so is
  a libnetwork pool no Docker network uses any more (a ReleasePool that failed).

Invariant (property-tested): an address whose owner may still be alive is never released. A
finding is released only when it was judged gone at two sweeps at least ``grace`` apart, and at
every sweep in between: a sweep where any judge says alive, or where its judge has no usable view
(informer not synced, Docker unreachable) or no opinion (the namespace's directory not visible from
here), starts the count again. Judges have disjoint domains (CNI owners; libnetwork owners and
pools). The release itself checks that the allocation is still the one judged (same owner), so an
address re-allocated meanwhile is never touched.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import structlog

from eni_ipam import errors
from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.docker import DockerApi, DockerUnreachable
from eni_ipam.agent.runtime import (
    CNI_PREFIX,
    CachedAttachment,
    Liveness,
    cached,
    gone_because,
    namespace_alive,
    owner_alive,
    parse_cni_owner,
    remove_stale,
)
from eni_ipam.agent.types import Allocation
from eni_ipam.core.clock import Clock

log = structlog.get_logger("eni_ipam.agent.sweep")

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
"""A pod in one of these phases has had its sandbox (and network namespace) torn down."""


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    """One judge's verdict on one thing it can release."""

    key: str
    """What is judged, stable across sweeps (``owner|address``, ``pool:<PoolID>``)."""
    gone: bool
    release: Callable[[], object]
    """Releases it; called only after the grace period, and must itself check nothing changed."""
    why: str = ""


class Judge(Protocol):
    """A source of truth for some allocations."""

    name: str

    async def findings(self) -> list[Finding] | None:
        """Verdicts for what this judge knows about; None when it has no usable view this sweep
        (then nothing it would judge is released, and their grace starts again)."""
        ...


@dataclasses.dataclass(slots=True)
class _Suspect:
    since: float
    sightings: int = 1


class Sweeper:
    """Asks the judges every ``interval`` and releases what has been gone for ``grace``."""

    def __init__(self, judges: Iterable[Judge], *, clock: Clock, interval: float, grace: float) -> None:
        if grace <= 0:
            raise ValueError("the sweep's grace period must be positive")
        self.judges = list(judges)
        self.clock = clock
        self.interval = interval
        self.grace = grace
        self._suspects: dict[str, _Suspect] = {}
        self.released: list[str] = []
        """Keys released so far (for tests and logs)."""

    async def run(self) -> None:
        while True:
            await self.clock.sleep(self.interval)
            try:
                await self.sweep_once()
            except Exception:  # a sweep's bug must not stop the agent: the next sweep tries again
                log.exception("sweep_failed")

    async def sweep_once(self) -> list[str]:
        """One sweep; the keys released."""
        verdicts: dict[str, Finding] = {}
        alive: set[str] = set()
        for judge in self.judges:
            found = await judge.findings()
            if found is None:
                # What it would have said is unknown, so its suspects may be alive: their count
                # starts again (a few sweeps' delay costs nothing; a wrong release costs a container).
                log.info("sweep_blind", judge=judge.name)
                continue
            for finding in found:
                if finding.gone:
                    verdicts.setdefault(finding.key, finding)
                else:
                    alive.add(finding.key)
        now = self.clock.monotonic()
        gone = {key: verdict for key, verdict in verdicts.items() if key not in alive}
        self._suspects = {key: s for key, s in self._suspects.items() if key in gone}
        released: list[str] = []
        for key, finding in gone.items():
            suspect = self._suspects.get(key)
            if suspect is None:
                self._suspects[key] = _Suspect(now)
                log.info("sweep_suspect", key=key, why=finding.why)
                continue
            suspect.sightings += 1
            if suspect.sightings >= 2 and now - suspect.since >= self.grace:
                try:
                    finding.release()
                except errors.EniIpamError as exc:
                    log.warning("sweep_release_failed", key=key, error=str(exc))
                    continue
                del self._suspects[key]
                released.append(key)
                log.warning(
                    "sweep_released", key=key, why=finding.why, gone_for=round(now - suspect.since, 3)
                )
        self.released += released
        return released


def release_allocation(allocator: Allocator, allocation: Allocation) -> Callable[[], object]:
    """Release ``allocation`` if the allocator still holds it for the same owner (else nothing)."""

    def release() -> object:
        current = next(
            (a for a in allocator.allocations(owner=allocation.owner) if a.address == allocation.address),
            None,
        )
        if current is None:
            return None
        return allocator.release(current.address, current.pool)

    return release


def _cni_allocations(allocator: Allocator) -> list[Allocation]:
    return [a for a in allocator.allocations() if a.owner.startswith(CNI_PREFIX)]


def _key(allocation: Allocation) -> str:
    return f"{allocation.owner}|{allocation.address}"


class NamespaceJudge:
    """CNI allocations against their network namespaces, or their containers (a host without Kubernetes)."""

    name = "namespaces"

    def __init__(
        self,
        allocator: Allocator,
        *,
        cni_cache_dir: str | Path,
        namespace: Liveness = namespace_alive,
        container: Liveness = lambda _: None,
    ) -> None:
        """``container``: whether an OCI runtime knows a container ID (None: cannot tell from here)."""
        self.allocator = allocator
        self.cache_dir = Path(cni_cache_dir)
        self.namespace = namespace
        self.container = container

    async def findings(self) -> list[Finding] | None:
        allocations = _cni_allocations(self.allocator)
        if not allocations:
            return []
        entries = await asyncio.to_thread(cached, self.cache_dir) if self._cache_visible() else None
        out: list[Finding] = []
        for allocation in allocations:
            entry = entries.get(allocation.owner) if entries is not None else None
            verdict, why = self._judge(allocation, entry, cache_visible=entries is not None)
            if verdict is not None:
                release = self._release(allocation, entry if not verdict else None, why)
                out.append(Finding(_key(allocation), not verdict, release, why))
        return out

    def _cache_visible(self) -> bool:
        return self.cache_dir.is_dir()

    def _judge(
        self, allocation: Allocation, entry: CachedAttachment | None, *, cache_visible: bool
    ) -> tuple[bool | None, str]:
        """(alive, why); alive None: no opinion."""
        netns = allocation.netns or (entry.attachment.netns if entry is not None else "")
        container_id = (parse_cni_owner(allocation.owner) or ("", ""))[0]
        alive = owner_alive(netns, container_id, namespace=self.namespace, container=self.container)
        if alive is not None:
            return alive, "" if alive else gone_because(netns, container_id)
        if not netns and cache_visible and entry is None:
            return False, "no network namespace recorded, and libcni's cache no longer lists it"
        return None, ""

    def _release(
        self, allocation: Allocation, entry: CachedAttachment | None, why: str
    ) -> Callable[[], object]:
        release = release_allocation(self.allocator, allocation)

        def release_and_forget() -> object:
            released = release()
            if released is not None and entry is not None:
                remove_stale(entry, why)  # its owner is gone: no rebuild may bring it back
            return released

        return release_and_forget


class PodJudge:
    """CNI allocations against the pods on this node (with Kubernetes)."""

    name = "pods"

    def __init__(self, allocator: Allocator, pods: Any) -> None:
        """``pods``: an informer on this node's pods (``store``: key → Pod; ``synced``: an Event)."""
        self.allocator = allocator
        self.pods = pods

    async def findings(self) -> list[Finding] | None:
        if not self.pods.synced.is_set():
            return None
        running: set[str] = set()
        for pod in self.pods.store.values():
            uid = (pod.get("metadata") or {}).get("uid")
            if uid and (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES:
                running.add(str(uid))
        out: list[Finding] = []
        for allocation in _cni_allocations(self.allocator):
            if not allocation.pod_uid:
                continue  # the runtime did not say which pod: no opinion
            alive = allocation.pod_uid in running
            why = "" if alive else f"pod {allocation.pod or allocation.pod_uid} is no longer on this node"
            out.append(
                Finding(_key(allocation), not alive, release_allocation(self.allocator, allocation), why)
            )
        return out


class DockerJudge:
    """libnetwork allocations and pools against Docker's own view, from its API (:class:`DockerApi`)."""

    name = "docker"

    def __init__(self, allocator: Allocator, driver: Any, docker: DockerApi) -> None:
        self.allocator = allocator
        self.driver = driver
        self.docker = docker

    async def findings(self) -> list[Finding] | None:
        try:
            view = await self.docker.view()
        except DockerUnreachable as exc:
            log.info("docker_unreachable", socket=self.docker.socket, error=str(exc))
            return None
        in_use, unused = view.in_use(), {r.pool_id for r in view.unused(self.driver.pools())}
        out: list[Finding] = []
        for record in self.driver.pools():
            if record.pool_id in unused:
                why = f"no Docker network uses pool {record.pool} any more"
                out.append(Finding(f"pool:{record.pool_id}", True, self._release_pool(record.pool_id), why))
                continue
            for allocation in self.allocator.allocations(owner=record.owner):
                alive = allocation.address in in_use
                why = "" if alive else f"no Docker endpoint holds {allocation.address}"
                out.append(
                    Finding(_key(allocation), not alive, release_allocation(self.allocator, allocation), why)
                )
        return out

    def _release_pool(self, pool_id: str) -> Callable[[], object]:
        def release() -> object:
            if any(r.pool_id == pool_id for r in self.driver.pools()):
                self.driver.release_pool(pool_id)
            return None

        return release
