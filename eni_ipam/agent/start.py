"""What the agent settles with the node's runtimes when it starts, before it serves.

* **The rebuild.** When the state file is missing or cannot be trusted (``Allocator.needs_rebuild``),
  the allocations are rebuilt from what every configured runtime says it holds:

  - libcni's result cache, for containers run through the CNI plugin: each entry whose owner is not
    proven gone (:mod:`~eni_ipam.agent.runtime`); the files of those that are are removed once the
    rebuilt state is saved, so that no later rebuild resurrects them;
  - Docker's API (``docker_socket``), for networks using the libnetwork driver: every endpoint's
    address and every auxiliary address, owned by ``libnetwork:<PoolID>`` of the registered pool
    (libnetwork.json) whose subnet holds it. A network's gateway is its subnet's router, which the
    driver never allocates, so it is not rebuilt either.

  An address both claim stays Docker's: Docker lists live endpoints only, while a cache entry may be
  one a failed DEL left behind.
* **A runtime that cannot be read** (Docker's socket configured but not answering within
  ``FIRST_READ`` seconds, as when dockerd itself is starting and waiting for this driver) does not
  hold the start up. After a rebuild, every range of the registry's pools is withheld from every
  pool (``rebuild_incomplete`` in the log, and in ``/readyz``'s text) until Docker has been read:
  the addresses Docker may hold there are unknown. Docker is read again every ``RETRY`` seconds; the
  first answer adopts its endpoints, then lifts the ranges.
* **Pools of networks removed while the agent was down.** At the first answer of Docker's API, every
  pool registered before this start that no Docker network uses any more is released at once — no
  grace period: Docker removed the network, the pool only blocks a new network on the same subnet
  ("Pool overlaps"). Pools requested since the start are left to the sweep, whose grace covers a
  network being created.

Invariant: no address a configured runtime may hold is handed out before that runtime has been read,
or its state file has said who holds it.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Iterable, Mapping
from pathlib import Path

import structlog

from eni_ipam.agent.allocator import Allocator, RestoreReport
from eni_ipam.agent.docker import DockerApi, DockerUnreachable, DockerView, canonical_network
from eni_ipam.agent.errors import StateNotWritten
from eni_ipam.agent.libnetwork import IpamRequestError, LibnetworkDriver, PoolRecord
from eni_ipam.agent.members import canonical_address
from eni_ipam.agent.runtime import CachedAttachment, CacheView, Liveness, read_cache, remove_stale
from eni_ipam.agent.types import RuntimeEntry
from eni_ipam.core.clock import Clock

log = structlog.get_logger("eni_ipam.agent.start")

FIRST_READ = 3.0
"""Seconds Docker's API has to answer before the agent serves: dockerd waits for this driver while
it restores its networks at its own start (about 15 s), so the agent must not wait for dockerd longer."""
RETRY = 5.0
"""Seconds between reads of Docker's API until one succeeds."""
UNREAD = "rebuild:docker"
"""Who withholds the registry's ranges while Docker has not been read since a rebuild."""
UNREGISTERED = "rebuild:docker-unregistered-network"
"""Who withholds the addresses of Docker networks using this driver that no registered pool holds."""


def docker_entries(
    view: DockerView, records: Iterable[PoolRecord]
) -> tuple[dict[str, RuntimeEntry], set[str]]:
    """address → its ``libnetwork:<PoolID>`` entry, for every address a network of ``view`` holds;
    and the addresses no registered pool holds. A pool matches a network by subnet (and range, when
    two pools share a subnet), else by holding the address."""
    records = list(records)
    entries: dict[str, RuntimeEntry] = {}
    unmapped: set[str] = set()
    for network in view.networks:
        matched = [r for s in network.subnets if (r := _record_for(s.subnet, s.ip_range, records))]
        gateways = {s.gateway for s in network.subnets if s.gateway}
        for address in sorted(network.holds()):
            if canonical_address(address) is None or address in gateways:
                continue  # a gateway is the subnet's router: the driver answers it, never allocates it
            record = _holding(address, matched) or _holding(address, records)
            if record is None:
                unmapped.add(address)
                continue
            entries[address] = RuntimeEntry(owner=record.owner, pool=record.allocator_pool)
    return entries, unmapped


def merge(cni: CacheView, docker: Mapping[str, RuntimeEntry]) -> dict[str, RuntimeEntry]:
    """The runtimes' views as one; an address both claim stays Docker's (logged: as a warning when
    libcni's entry was proven alive too — two live owners of one address)."""
    merged = dict(cni.entries)
    for address, entry in docker.items():
        other = merged.get(address)
        if other is not None and other.owner != entry.owner:
            event = log.warning if address in cni.alive else log.info
            event("runtime_duplicate_address", address=address, kept=entry.owner, dropped=other.owner)
        merged[address] = entry
    return merged


class StartReconciler:
    """Restores the allocator from its state file or the runtimes, then settles with Docker (see the
    module's description). :meth:`restore` runs before the agent serves; :meth:`run` afterwards,
    until Docker has been read once."""

    def __init__(
        self,
        allocator: Allocator,
        driver: LibnetworkDriver,
        *,
        cni_cache_dir: str | Path,
        docker: DockerApi | None,
        clock: Clock,
        container: Liveness = lambda _: None,
        first_read: float = FIRST_READ,
        retry: float = RETRY,
    ) -> None:
        self.allocator = allocator
        self.driver = driver
        self.cni_cache_dir = cni_cache_dir
        self.docker = docker
        self.clock = clock
        self.container = container
        """Whether an OCI runtime knows a container (libcni entries without a network namespace)."""
        self.first_read = first_read
        self.retry = retry
        self.unread = ""
        """Why Docker has not been read since the start (empty once it has, or without Docker)."""
        self._withholding = False
        self._startup_pools: set[str] = set()

    async def restore(self) -> RestoreReport:
        """Restore (rebuilding from the runtimes when needed), then settle with Docker if it answers."""
        view = await self._read(self.first_read) if self.docker is not None else None
        runtime: dict[str, RuntimeEntry] = {}
        stale: tuple[tuple[CachedAttachment, str], ...] = ()
        rebuild = self.allocator.needs_rebuild()
        if rebuild:
            cni = await asyncio.to_thread(read_cache, self.cni_cache_dir, container=self.container)
            stale = cni.stale
            docker: dict[str, RuntimeEntry] = {}
            if view is not None:
                docker, unmapped = docker_entries(view, self.driver.pools())
                self._withhold_unregistered(unmapped)
            runtime = merge(cni, docker)
        report = self.allocator.restore(runtime=runtime)
        for entry, why in stale:  # only once the rebuild is saved: until then, the files are evidence
            await asyncio.to_thread(remove_stale, entry, why)
        self.driver.adopt_orphans()  # libnetwork pools whose registry was lost: back from their allocations
        self._startup_pools = {r.pool_id for r in self.driver.pools()}
        if view is not None:
            self._release_removed_pools(view)
        elif self.docker is not None and rebuild:
            self._withholding = True
            ranges = sorted({str(r.range) for r in self.driver.pools()})
            for network in ranges:
                self.allocator.withhold(network, UNREAD)
            log.error("rebuild_incomplete", runtime="docker", reason=self.unread, withheld=ranges)
        return report

    async def run(self) -> None:
        """Read Docker every ``retry`` seconds until it answers, then settle (adopt, lift, release)."""
        while self.unread:
            await self.clock.sleep(self.retry)
            view = await self._read(None)
            if view is None:
                continue
            try:
                self._settle(view)
            except StateNotWritten as exc:  # the endpoints could not be saved: withheld a while longer
                log.warning("docker_settle_failed", error=str(exc))
                self.unread = str(exc)
            except Exception as exc:  # a bug must not stop the agent; what is withheld stays withheld
                log.exception("docker_settle_failed")
                self.unread = f"settling failed: {exc}"

    def status(self) -> str:
        """What the start has not settled yet, for ``/readyz`` (empty: everything)."""
        if self._withholding:
            withheld = ", ".join(self.allocator.withheld().get(UNREAD, [])) or "nothing"
            return f"Docker not read since the state was rebuilt ({self.unread}): withheld {withheld}"
        if self.unread:
            return f"Docker not read since the start ({self.unread})"
        return ""

    # -- internals ---------------------------------------------------------------------------------

    async def _read(self, within: float | None) -> DockerView | None:
        assert self.docker is not None
        try:
            async with asyncio.timeout(within):
                view = await self.docker.view()
        except (DockerUnreachable, TimeoutError) as exc:
            self.unread = str(exc) or f"no answer within {within:g} s"
            log.info("docker_unreachable", socket=self.docker.socket, error=self.unread)
            return None
        self.unread = ""
        return view

    def _settle(self, view: DockerView) -> None:
        if self._withholding:
            entries, unmapped = docker_entries(view, self.driver.pools())
            self.allocator.adopt(entries)
            self._withhold_unregistered(unmapped)
            self.allocator.lift(UNREAD)
            self._withholding = False
            log.info("rebuild_completed", runtime="docker", adopted=len(entries))
        self._release_removed_pools(view)

    def _release_removed_pools(self, view: DockerView) -> None:
        for record in view.unused(self.driver.pools()):
            if record.pool_id not in self._startup_pools:
                continue
            try:
                self.driver.release_pool(record.pool_id)
            except IpamRequestError as exc:  # the registry could not be written: the sweep tries again
                log.warning("removed_network_pool_not_released", pool_id=record.pool_id, error=exc.message)
                continue
            # The sweep's event and key: whoever looks for what was reclaimed finds it in one place.
            log.warning(
                "sweep_released",
                key=f"pool:{record.pool_id}",
                why=f"no Docker network uses pool {record.pool} any more",
                gone_for=0,
                at_start=True,
            )
        self._startup_pools = set()

    def _withhold_unregistered(self, addresses: set[str]) -> None:
        # Docker holds them, but no PoolID is known to own them: never hand them out (until a restart
        # finds the state file valid, or the network gone).
        for address in sorted(addresses):
            self.allocator.withhold(str(ipaddress.ip_network(address)), UNREGISTERED)
        if addresses:
            log.error("docker_addresses_unregistered", addresses=sorted(addresses))


def _record_for(subnet: str, ip_range: str, records: list[PoolRecord]) -> PoolRecord | None:
    same = [r for r in records if canonical_network(r.pool) == subnet]
    exact = [r for r in same if canonical_network(r.sub_pool) == ip_range]
    return exact[0] if exact else same[0] if same else None


def _holding(address: str, records: Iterable[PoolRecord]) -> PoolRecord | None:
    parsed = ipaddress.ip_address(address)
    return next((r for r in records if parsed in r.network), None)
