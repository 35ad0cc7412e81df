"""What the agent settles with the node's runtimes when it starts, before it serves.

A state file can say what was handed out, never that nothing else was: a slot may be damaged after
its acknowledgement, or an older copy put back (a backup, a snapshot, a volume restored), and both
look like a file that is simply valid. So **every start reconciles before it serves**, whatever the
file says (both slots valid, one, neither, no file), and serves the union of what is proven held
(docs/decisions/0034):

* **The state file**: its newest valid slot, and what a suspect slot or a corrupt file still says
  (:mod:`~eni_ipam.agent.salvage`): entries whose address and owner were both read are held.
* **libcni's result cache**, for containers run through the CNI plugin: each entry whose owner is not
  proven gone (:mod:`~eni_ipam.agent.runtime`); the files of those that are, and whose owner holds
  nothing, are removed, so that no later start resurrects them.
* **Docker's API** (``docker_socket``), for networks using the libnetwork driver: every endpoint's
  address and every auxiliary address, owned by ``libnetwork:<PoolID>`` of the registered pool
  (libnetwork.json) whose subnet holds it; not a network's gateway, its subnet's router, which the
  driver never allocates.
* **The API server's pods on this node** (``node_source: kubernetes``): a running pod's
  ``status.podIPs`` that no allocation of that pod (by UID) holds are withheld while the pod lives;
  the pods are read by the informer the sweep uses (RBAC: pods list and watch, nothing more).

An address both a runtime and the file name, for different owners, goes to the owner proven alive
(a namespace or container that exists, a Docker endpoint, which lists live endpoints only), else
stays the file's; an address Docker and libcni both claim stays Docker's. Every such conflict is
logged; an address never has two owners.

**A source that cannot be read** withholds what it may hold until it is read, and says so: the error
an ADD gets names the pool and what is waited for (``pool_withheld``, never ``pool_exhausted`` while
addresses are withheld), and ``/readyz`` is not ready while a pool has no address left to hand out.

* Docker's API has ``FIRST_READ`` seconds before the agent serves (dockerd, starting, waits for this
  driver while it restores its networks); then it is read every ``RETRY`` seconds. Docker may hold
  what the driver handed it: the mirror (:mod:`~eni_ipam.agent.mirror`) lists exactly that when it
  is whole, and only those addresses are withheld; without a whole mirror, the subnets of every
  registered pool (not their ``--ip-range``: a requested address may lie outside it). Docker's first
  answer adopts its endpoints, lifts what was withheld, and makes the mirror exact.
* The pods: until the informer has listed them, every address is withheld (a pod may hold any).

What a damaged state file says of an address without saying whose (an address read without its
owner, a gap where damage hid entries) needs nothing more: whoever holds such an address is a
runtime's container, which is either read (and adopted) or withheld for as above. That is the proof a
lost state file gets too.

**Pools of networks removed while the agent was down.** At the first answer of Docker's API, every
pool registered before this start that no Docker network uses any more is released at once — no
grace period: Docker removed the network, the pool only blocks a new network on the same subnet
("Pool overlaps"). Pools requested since the start are left to the sweep, whose grace covers a
network being created.

Invariant: no address a source shows in use is handed out, and none a source that has not been read
may hold.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import structlog

from eni_ipam.agent.allocator import Allocator, RestoreReport
from eni_ipam.agent.docker import DockerApi, DockerUnreachable, DockerView, canonical_network
from eni_ipam.agent.errors import StateNotWritten
from eni_ipam.agent.libnetwork import OWNER_PREFIX, IpamRequestError, LibnetworkDriver, PoolRecord
from eni_ipam.agent.members import canonical_address
from eni_ipam.agent.runtime import CacheView, Liveness, owner_alive, parse_cni_owner, read_cache, remove_stale
from eni_ipam.agent.types import Allocation, RuntimeEntry
from eni_ipam.core.clock import Clock

log = structlog.get_logger("eni_ipam.agent.start")

FIRST_READ = 3.0
"""Seconds Docker's API has to answer before the agent serves: dockerd waits for this driver while
it restores its networks at its own start (about 15 s), so the agent must not wait for dockerd longer."""
RETRY = 5.0
"""Seconds between reads of Docker's API until one succeeds."""
UNREAD = "start:docker"
"""Who withholds what Docker may hold while it has not been read since the start."""
UNREGISTERED = "start:docker-unregistered-network"
"""Who withholds the addresses of Docker networks using this driver that no registered pool holds."""
UNREAD_SOURCES = ("docker", "pods")
"""What :meth:`Start.unread_sources` may name."""
PODS = "start:pods"
"""Who withholds what the pods on this node hold (everything, until they have been listed)."""
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
EVERYTHING = ("0.0.0.0/0", "::/0")


def docker_entries(
    view: DockerView, records: Iterable[PoolRecord]
) -> tuple[dict[str, RuntimeEntry], set[str]]:
    """address → its ``libnetwork:<PoolID>`` entry (alive: Docker lists live endpoints only), for
    every address a network of ``view`` holds; and the addresses no registered pool holds. A pool
    matches a network by subnet (and range, when two pools share a subnet), else by holding it."""
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
            entries[address] = RuntimeEntry(owner=record.owner, pool=record.allocator_pool, alive=True)
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


def pod_addresses(pods: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    """address → (UID, ``namespace/name``) of every pod that holds it: scheduled here, not finished,
    not on the host network (whose address is the node's own)."""
    held: dict[str, tuple[str, str]] = {}
    for pod in pods:
        meta, spec, status = (pod.get(k) or {} for k in ("metadata", "spec", "status"))
        if spec.get("hostNetwork") or status.get("phase") in TERMINAL_PHASES:
            continue
        listed = [p.get("ip") for p in status.get("podIPs") or () if isinstance(p, dict)]
        for ip in listed or [status.get("podIP")]:
            address = canonical_address(ip) if isinstance(ip, str) else None
            if address is not None:
                held[address] = (str(meta.get("uid") or ""), f"{meta.get('namespace')}/{meta.get('name')}")
    return held


class StartReconciler:
    """Settles the allocator with every source at the start (see the module's description).
    :meth:`restore` runs before the agent serves; :meth:`run` afterwards, until Docker and the pods
    have been read (and then follows the pods)."""

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
        pods: bool = False,
    ) -> None:
        """``pods``: this node's pods are read from the API server (:meth:`follow_pods` hands over
        the informer); until then every address is withheld."""
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
        self.pods_expected = pods
        self.pods: Any = None
        """The informer on this node's pods (``store``, ``synced``), once handed over."""
        self._withholding = False
        self._pods_listed = False
        self._startup_pools: set[str] = set()

    # -- before serving --------------------------------------------------------------------------

    async def restore(self) -> RestoreReport:
        """Read every source that answers, restore the union, and withhold what the others may hold."""
        view = await self._read(self.first_read) if self.docker is not None else None
        mirror = self.allocator.mirror.load() if self.allocator.mirror is not None else ("", [])
        cni = await asyncio.to_thread(read_cache, self.cni_cache_dir, container=self.container)
        docker: dict[str, RuntimeEntry] = {}
        if view is not None:
            docker, unmapped = docker_entries(view, self.driver.pools())
            self._withhold_unregistered(unmapped)
        report = self.allocator.restore(runtime=merge(cni, docker), judge=self.judge(view))
        owners = {a.owner for a in self.allocator.allocations()}
        for entry, why in cni.stale:  # proven gone, and holding nothing: no later start may resurrect it
            if entry.owner not in owners:
                await asyncio.to_thread(remove_stale, entry, why)
        self.driver.adopt_orphans()  # libnetwork pools whose registry was lost: back from their allocations
        self._startup_pools = {r.pool_id for r in self.driver.pools()}
        if view is not None:
            self.allocator.settle_mirror()
            self._release_removed_pools(view)
        elif self.docker is not None:
            self._withhold_for_docker(*mirror)
        if self.pods_expected:
            why = "while the pods on this node are read from the API server (a pod may hold any of them)"
            for network in EVERYTHING:
                self.allocator.withhold(network, PODS, why)
        if report.unaccounted:
            log.warning(
                "state_unaccounted",
                networks=list(report.unaccounted[:20]),
                count=len(report.unaccounted),
                why="the damaged state may have listed them without their owner: each runtime that may hold "
                "one has been read (and what it holds adopted) or withholds what it may hold",
            )
        return report

    def judge(self, view: DockerView | None) -> Callable[[Allocation], bool | None]:
        """Whether an allocation's owner is alive, as far as the sources read so far tell: a CNI owner
        by its network namespace or container, a libnetwork owner by Docker's endpoints."""
        in_use = view.in_use() if view is not None else None

        def alive(allocation: Allocation) -> bool | None:
            if (parsed := parse_cni_owner(allocation.owner)) is not None:
                return owner_alive(allocation.netns, parsed[0], container=self.container)
            if allocation.owner.startswith(OWNER_PREFIX) and in_use is not None:
                return allocation.address in in_use
            return None

        return alive

    # -- afterwards ------------------------------------------------------------------------------

    def follow_pods(self, informer: Any) -> None:
        """Hand over the informer on this node's pods: from its first list on, what the pods hold and
        no allocation of theirs does is withheld, following every change."""
        self.pods = informer
        informer.add_handler(lambda *_: self._pods_changed())

    async def run(self) -> None:
        """Read Docker every ``retry`` seconds until it answers, and wait for the pods' first list."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._read_docker())
            if self.pods is not None:
                tg.create_task(self._first_pods())

    def unread_sources(self) -> list[str]:
        """The sources of what is in use that the start has not read yet (``docker``, ``pods``):
        what they may hold is withheld until they are (the rebuild is incomplete)."""
        return [
            source
            for source, unread in (
                ("docker", bool(self.unread)),
                ("pods", self.pods_expected and not self._pods_synced()),
            )
            if unread
        ]

    def status(self) -> str:
        """What the start has not settled yet, for ``/readyz`` (empty: everything)."""
        waiting = []
        unread = self.unread_sources()
        if "docker" in unread:
            withheld = len(self.allocator.withheld().get(UNREAD, []))
            waiting.append(f"Docker not read since the start ({self.unread}): {withheld} ranges withheld")
        if "pods" in unread:
            waiting.append("the pods on this node not read yet")
        return "; ".join(waiting)

    # -- internals ---------------------------------------------------------------------------------

    async def _read_docker(self) -> None:
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

    async def _first_pods(self) -> None:
        await self.pods.synced.wait()
        self._pods_changed()

    def _pods_synced(self) -> bool:
        return self.pods is not None and self.pods.synced.is_set()

    def _pods_changed(self) -> None:
        if not self._pods_synced():
            return
        held = pod_addresses(self.pods.store.values())
        current = {a.address: a for a in self.allocator.allocations()}
        withheld: list[str] = []
        for address, (uid, name) in sorted(held.items()):
            mine = current.get(address)
            if mine is not None and mine.pod_uid == uid:
                continue  # the pod's own allocation
            withheld.append(str(ipaddress.ip_network(address)))
            if mine is not None and mine.pod_uid and mine.pod_uid != uid:
                log.warning(
                    "pod_address_conflict", address=address, pod=name, uid=uid, allocated_to=mine.owner
                )
        why = "while a pod on this node holds them (the API server's podIPs) and no allocation of its does"
        self.allocator.replace_withheld(PODS, withheld, why)
        if not self._pods_listed:
            self._pods_listed = True
            log.info("runtime_read", runtime="kubernetes", pods=len(self.pods.store), withheld=len(withheld))

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

    def _withhold_for_docker(self, mirror: str, mirrored: list[Allocation]) -> None:
        assert self.docker is not None
        why = f"while Docker's API on {self.docker.socket} does not answer (Docker may hold them)"
        if mirror == "valid" or (mirror == "missing" and not self.driver.pools()):
            networks = sorted({str(ipaddress.ip_network(a.address)) for a in mirrored})
            what = "the addresses the driver handed Docker (the mirror)"
        else:  # the mirror is not whole: anything in Docker's subnets
            networks = sorted({str(r.network) for r in self.driver.pools()})
            what = f"the subnets of every registered pool (mirror {mirror})"
        for network in networks:
            self.allocator.withhold(network, UNREAD, why)
        self._withholding = True
        log.error(
            "runtime_not_read",
            runtime="docker",
            reason=self.unread,
            withheld=what,
            networks=networks[:20],
            count=len(networks),
        )

    def _settle(self, view: DockerView) -> None:
        entries, unmapped = docker_entries(view, self.driver.pools())
        made, _ = self.allocator.adopt(entries, judge=self.judge(view))
        self._withhold_unregistered(unmapped)
        self.allocator.lift(UNREAD)
        self.allocator.settle_mirror()
        self._withholding = False
        log.info("runtime_read", runtime="docker", endpoints=len(entries), adopted=len(made))
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
        # finds them registered, or the network gone).
        why = "as addresses of a Docker network that no registered pool of this driver holds"
        for address in sorted(addresses):
            self.allocator.withhold(str(ipaddress.ip_network(address)), UNREGISTERED, why)
        if addresses:
            log.error("docker_addresses_unregistered", addresses=sorted(addresses))


def _record_for(subnet: str, ip_range: str, records: list[PoolRecord]) -> PoolRecord | None:
    same = [r for r in records if canonical_network(r.pool) == subnet]
    exact = [r for r in same if canonical_network(r.sub_pool) == ip_range]
    return exact[0] if exact else same[0] if same else None


def _holding(address: str, records: Iterable[PoolRecord]) -> PoolRecord | None:
    parsed = ipaddress.ip_address(address)
    return next((r for r in records if parsed in r.network), None)
