"""``eni-ipam agent --node NAME``: the node side's daemon.

It keeps the node's allocator in step with the node's pool and tells the controller what it needs:

* **Pool**: with ``node_source: kubernetes`` the default pool follows the node's ENIPool (watched by
  name): the addresses in ``status.pool``, each with the prefix length and gateway of its subnet
  (``status.subnets``). With ``memory`` it is the configured ``pools.default``. Named static pools
  come from the configuration either way.
* **Reconcile before serving**: the state file is read and settled with what every source holds
  (libcni's result cache, Docker's endpoints, the pods on this node) before the socket opens, and
  what a source that cannot be read may hold is withheld until it is — so no address held by a
  running container is handed out again after a restart (:mod:`~eni_ipam.agent.start`). Restored
  addresses need no pool to be kept, so the agent serves at once: DEL and CHECK work even while the
  API server is out of reach, and new ADDs get "try again later" until the node's pool is known.
* **Report**: every ``report_interval``, the addresses in use (``status.used``) and the release
  handshake answers (``status.releaseAnswers``) are written when they changed — the agent's own
  status fields, as a conditional merge patch (409: re-read, and the next report retries).
* **Serve** on the unix socket: the CNI plugin's API and the libnetwork remote IPAM driver; on TCP:
  ``/metrics``, ``/healthz``, ``/readyz`` (ready once restored and, with Kubernetes, synced).
* **Claims**: Cluster API IPAddressClaims naming this node's ENIPool are served from its pool.
* **Quarantine** (``reuse_quarantine_seconds``): a released address is not handed out again by the
  automatic choice until its time has passed and, with Kubernetes, no EndpointSlice lists it
  (:mod:`~eni_ipam.agent.quarantine`); the slices are watched once the node's pool is read, keeping
  only the node's addresses (:mod:`~eni_ipam.agent.endpoints`).
* **Datapath** (``datapath.enabled``): the host's routing for pods on every interface of the pool
  (:mod:`~eni_ipam.agent.datapath`), reconciled after the restore and before the socket serves, when
  the pool's interfaces change, and every ``datapath_interval``; an ADD installs its pod's rules
  before it answers. The addresses of an interface without a datapath yet are withheld.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import os
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from eni_ipam.adapters.guard import bound_process
from eni_ipam.adapters.limits import LISTEN_BACKLOG
from eni_ipam.adapters.server import PROBE_CONNECTIONS, make_app, start_probes, start_server
from eni_ipam.agent import api, libnetwork
from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.config import AgentConfig
from eni_ipam.agent.docker import DockerApi
from eni_ipam.agent.endpoints import EndpointAddresses
from eni_ipam.agent.files import remove_leftovers
from eni_ipam.agent.guard import serve_unix
from eni_ipam.agent.libnetwork import OWNER_PREFIX
from eni_ipam.agent.listen import Listening, lock_state_dir, make_state_dir, remove_stale
from eni_ipam.agent.metrics import AgentMetrics
from eni_ipam.agent.mirror import FILE_NAME as MIRROR_FILE
from eni_ipam.agent.mirror import Mirror
from eni_ipam.agent.runtime import container_known
from eni_ipam.agent.start import UNREAD_SOURCES, StartReconciler
from eni_ipam.agent.state import StateFile
from eni_ipam.agent.sweep import DockerJudge, Judge, NamespaceJudge, PodJudge, Sweeper
from eni_ipam.agent.types import DEFAULT_POOL, PoolAddress
from eni_ipam.core.backoff import Backoff
from eni_ipam.core.clock import Clock, LoopClock
from eni_ipam.core.model import ReleaseState
from eni_ipam.kube import errors

log = structlog.get_logger("eni_ipam.agent.daemon")


def pool_addresses(members: list[tuple[str, str, str, str]], *, reserved: int = 1) -> list[PoolAddress]:
    """PoolAddress entries from ``(address, cidr, interface, subnet)``: the gateway of a cloud subnet
    is its base address + 1 (VPC and VNet routers alike).

    A subnet's base address and the ``reserved`` addresses after it (its gateway; with the node
    datapath also the pods' gateway, base + 3: :func:`eni_ipam.agent.datapath.plan.pod_gateway`) are
    never handed out, even when a pool lists them: a cloud never does, but a /28 carved from the
    start of a generic cluster CIDR holds them, and the gateways are what every pod routes through."""
    out = []
    for address, cidr, interface, subnet in members:
        network = ipaddress.ip_network(cidr, strict=False)
        if 0 <= int(ipaddress.ip_address(address)) - int(network.network_address) <= reserved:
            continue
        out.append(
            PoolAddress(
                address=address,
                prefix_length=network.prefixlen,
                gateway=str(network.network_address + 1),
                interface_id=interface,
                subnet_id=subnet,
            )
        )
    return out


MISSING_DEVICE_RETRY = 1.0
"""Seconds between two reconciles of the datapath while a device of the pool's interfaces is missing."""
STARTUP_POLL = 1.0
"""Seconds between two looks at whether the node is ready for pods (the startup taint waits on it)."""

MAX_BODY = 64 * 1024
"""Largest request body on the socket (413 beyond): every request of the plugin or of Docker fits in a
few hundred bytes, and what a body holds may end up in the state file."""


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        *,
        node: str,
        clock: Clock | None = None,
        metrics: AgentMetrics | None = None,
        kube: Any = None,
        nft: Any = None,
    ) -> None:
        """``kube``: a KubeApi to use instead of one made from the configuration (tests); ``nft``: how
        the datapath runs ``nft`` (:data:`~eni_ipam.agent.datapath.nft.Runner`; tests)."""
        self.config = config
        self.node = node
        self.clock = clock or LoopClock()
        self.metrics = metrics or AgentMetrics()
        self.metrics.report_ready(lambda: self.readiness()[0])
        self.state_dir = Path(config.state_dir)
        make_state_dir(self.state_dir)  # before the driver reads its registry there
        # With Docker, a second record of what the driver handed it: what Docker may hold while it
        # cannot be read (eni_ipam/agent/mirror.py).
        mirror = StateFile(self.state_dir / MIRROR_FILE) if config.docker_socket else None
        self.allocator = Allocator(
            clock=self.clock,
            ipv4=config.ipv4,
            ipv6=config.ipv6,
            state=StateFile(self.state_dir / "allocations.json"),
            mirror=Mirror(mirror, lambda owner: owner.startswith(OWNER_PREFIX)) if mirror else None,
            quarantine=config.reuse_quarantine_seconds,
            reused=lambda why: self.metrics.agent_quarantine_early_reuses.labels(reason=why).inc(),
        )
        self.metrics.report_quarantine(lambda: len(self.allocator.quarantined()))
        self.endpoints: EndpointAddresses | None = None
        """The node's addresses the EndpointSlices list (with Kubernetes and a quarantine)."""
        if (
            config.node_source == "kubernetes"
            and config.reuse_quarantine_seconds > 0
            and config.reuse_quarantine_endpointslices
        ):
            # Set before the restore: until the slices are read, every quarantined address is held.
            self.endpoints = EndpointAddresses(self.allocator.knows)
            self.allocator.set_endpoints(self.endpoints)
        if config.node_source == "kubernetes":
            # Empty until the ENIPool is read: an ADD meanwhile is "pool exhausted" (try again later),
            # not "no such pool".
            self.allocator.set_pool(DEFAULT_POOL, [])
        for pool in config.pools:
            self.allocator.set_pool(pool.name, pool.addresses)
        for address in config.exclude:
            self.allocator.exclude(address, "config", DEFAULT_POOL)
        self.driver = libnetwork.LibnetworkDriver(
            self.allocator, state_path=self.state_dir / "libnetwork.json"
        )
        self.docker = (
            DockerApi(config.docker_socket, driver_name=config.docker_ipam_driver)
            if config.docker_socket
            else None
        )
        self.container = functools.partial(container_known, state_dirs=config.oci_state_dirs)
        """Whether an OCI runtime knows a container: judges libcni entries without a network namespace."""
        self.startup = StartReconciler(
            self.allocator,
            self.driver,
            cni_cache_dir=config.cni_cache_dir,
            docker=self.docker,
            clock=self.clock,
            container=self.container,
            pods=config.node_source == "kubernetes",
        )
        self.metrics.report_state(
            writable=lambda: not self.allocator.state_error,
            unread=self.startup.unread_sources,
            sources=UNREAD_SOURCES,
        )
        self.kube = kube
        self._nft = nft
        self.endpoint: web.AppRunner | None = None
        """The TCP endpoint (/metrics, /healthz, /readyz) while running."""
        self.probes: web.AppRunner | None = None
        """The probe listener (/healthz, /readyz alone) while running."""
        self.restored = False
        self.sweeper: Sweeper | None = None
        """Releases what runtimes forgot to release, while running (``sweep_interval`` > 0)."""
        self.pool_seen = asyncio.Event()
        self.serving = asyncio.Event()
        """Set once the socket serves the CNI plugin and the libnetwork driver."""
        self.datapath: Any = None
        """The node datapath while running with ``datapath.enabled`` (a
        :class:`~eni_ipam.agent.datapath.datapath.Datapath`; imported only then: it needs pyroute2)."""
        self._datapath_due = asyncio.Event()
        self._datapath_done = False
        """A reconcile succeeded since the pool was seen: its interfaces have their tables."""
        self._withheld_interfaces: set[str] = set()
        self._interfaces: list[Any] = []
        self._pool: dict[str, Any] | None = None
        self._marks: dict[str, ReleaseState] = {}
        self._answers: dict[str, ReleaseState] = {}

    # -- readiness ------------------------------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        """``/readyz``: not ready while an ADD cannot be served, a pool whose every address left is
        withheld (a source that may hold them not read yet) included, naming it and what is waited for."""
        why = self._serving()
        if why:
            return False, why
        blocked, notes = [], []
        for pool in self.allocator.pools():
            waiting = self.allocator.withholding(pool)
            if not waiting:
                continue
            said = "; ".join(f"{n} withheld {reason}" for reason, n in sorted(waiting.items()))
            if self.allocator.free(pool):
                notes.append(f"pool {pool}: {said}")
            else:
                blocked.append(f"pool {pool}: no address can be handed out: {said}")
        if blocked:
            return False, "; ".join(blocked)
        datapath = self.datapath.problem() if self.datapath is not None else ""
        unsettled = [n for n in (*notes, self.startup.status(), datapath) if n]
        return True, f"node {self.node}, {len(self.allocator.used())} addresses in use" + "".join(
            f"; {n}" for n in unsettled
        )

    def _serving(self) -> str:
        """Why no ADD can be served, whatever the pool ("" when ADDs are served)."""
        if not self.restored:
            return "allocations not restored yet"
        if self.allocator.state_error:
            return f"the state file cannot be written ({self.allocator.state_error}): changes are refused"
        if self.config.node_source == "kubernetes" and not self.pool_seen.is_set():
            return "waiting for the node's pool (ENIPool); release and check are served meanwhile"
        if self.datapath is not None and not self._datapath_done:
            problem = self.datapath.problem()
            return "the node's datapath is not set up yet" + (f": {problem}" if problem else "")
        return ""

    def socket_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[self.metrics.count_requests()])
        routes: api.PodRoutes | None = None
        if self.datapath is not None:
            from eni_ipam.agent.datapath.pods import PodRoutes

            routes = PodRoutes(self.datapath)
        api.add_routes(app, self.allocator, ready=self._serving, pending=self._pool_pending, routes=routes)
        libnetwork.add_routes(app, self.driver)
        return app

    def _pool_pending(self, pool: str) -> str:
        """Why an ADD to ``pool`` waits (empty: it does not): the node's ENIPool not read since the
        start, so the default pool's members are unknown, not exhausted."""
        if pool == DEFAULT_POOL and self.config.node_source == "kubernetes" and not self.pool_seen.is_set():
            return f"the node's pool (ENIPool {self.node}) is not read yet: try again shortly"
        return ""

    # -- the pool -------------------------------------------------------------------------------

    def on_pool(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """The node's ENIPool changed: follow its addresses and answer its release marks."""
        from eni_ipam.kube.resources import ipv6_members, pool_members

        if event == "DELETED":
            self._pool = None
            self.allocator.set_pool(DEFAULT_POOL, [])  # allocations stay with their owners
            log.warning("pool_deleted", node=self.node)
            return
        self._pool = obj
        members = pool_members(obj)
        if self.config.ipv6:
            members += ipv6_members(obj, self.config.ipv6_pool_size)
        # With the datapath, base + 3 is the pods' gateway, on the host's end of every veth.
        reserved = 3 if self.config.datapath.enabled else 1
        self.allocator.set_pool(DEFAULT_POOL, pool_addresses(members, reserved=reserved))
        if self.config.datapath.enabled:
            self._follow_interfaces(obj)
        self._marks = {
            address: ReleaseState(state)
            for address, state in ((obj.get("status") or {}).get("release") or {}).items()
            if state in (ReleaseState.MARKED, ReleaseState.RELEASED)
        }
        if self.restored:  # before the restore the allocator cannot know what is in use
            self._answer()
        self.pool_seen.set()

    # -- the datapath -----------------------------------------------------------------------------

    def _follow_interfaces(self, obj: dict[str, Any]) -> None:
        """The pool changed: withhold the addresses of interfaces without a datapath yet, and have the
        datapath reconciled at once when its interfaces changed. Not for other changes: the agent's
        own status reports change the pool after ADDs and DELs, which the datapath follows itself."""
        from eni_ipam.agent.datapath.plan import Interface
        from eni_ipam.kube.resources import pool_interfaces

        previous = self._interfaces
        self._interfaces = [
            Interface(
                id=p.id,
                mac=p.mac_address,
                device_index=p.device_index,
                network_card=p.network_card,
                subnet=p.cidr,
                primary_ip=p.primary_ip,
                ipv6_prefixes=p.ipv6_prefixes,
            )
            for p in pool_interfaces(obj)
        ]
        known = set(self.datapath.interfaces) if self.datapath is not None else set()
        fresh = {i.id for i in self._interfaces} - known
        self._withhold_interfaces(self._withheld_interfaces | fresh | self._unlisted())
        if self._interfaces != previous:
            self._datapath_due.set()

    def _unlisted(self) -> set[str]:
        """Interfaces the pool's addresses name that the status's interface list does not (a status
        written before the list, or an interface leaving): no device, no table, so no hand-out."""
        listed = {i.id for i in self._interfaces}
        return {m.interface_id for m in self.allocator.pool_addresses(DEFAULT_POOL)} - listed

    def _withhold_interfaces(self, interfaces: set[str]) -> None:
        """Hand out no address of ``interfaces`` (their datapath is not set up), and every other's."""
        for iid in self._withheld_interfaces - interfaces:
            self.allocator.lift(f"datapath:{iid}")
        for iid in interfaces:
            owner = f"datapath:{iid}"
            self.allocator.lift(owner)  # again: the interface's addresses may have changed
            for member in self.allocator.pool_addresses(DEFAULT_POOL):
                if member.interface_id == iid:
                    self.allocator.withhold(member.address, owner)
        self._withheld_interfaces = interfaces
        self.metrics.agent_datapath_unready_interfaces.set(len(interfaces))

    async def reconcile_datapath(self) -> None:
        """Make the host's routing the plan of the pool's interfaces and the held addresses.

        Raises:
            DatapathError: the host refused a change (counted; the next reconcile goes on from there).
        """
        from eni_ipam.agent.datapath.errors import DatapathError

        assert self.datapath is not None
        # Whether the pool had been seen when this reconcile read its interfaces: one that arrives
        # while the reconcile awaits the kernel is the next reconcile's.
        seen = self.pool_seen.is_set() or self.config.node_source != "kubernetes"
        self.datapath.set_interfaces(self._interfaces)

        def pods() -> dict[str, str]:
            """The held addresses when the reconcile has its turn (an ADD or DEL may be under way)."""
            return {a.address: a.interface_id for a in self.allocator.allocations(pool=DEFAULT_POOL)}

        try:
            changes = await self.datapath.reconcile(pods)
        except DatapathError:
            self.metrics.agent_datapath_reconciles.labels(outcome="failed").inc()
            raise
        self.metrics.agent_datapath_reconciles.labels(outcome="changed" if changes.any else "ok").inc()
        self._withhold_interfaces(self.datapath.unready() | self._unlisted())
        if seen:
            self._datapath_done = True

    async def _keep_datapath(self) -> None:
        """Reconcile when the pool's interfaces change, and every ``datapath.interval``; the first
        time once the node's pool has been read. The interfaces come with it: a reconcile before would
        plan none, and take every table, ``from`` rule and the SNAT away from the pods a restart found
        running (their packets then leave through the primary interface, and are dropped) until the
        pool arrives. Meanwhile the host keeps what the previous run left, and a DEL still removes
        its pod's rules."""
        from eni_ipam.agent.datapath.errors import DatapathError

        if self.config.node_source == "kubernetes":
            await self.pool_seen.wait()
        while True:
            self._datapath_due.clear()
            try:
                await self.reconcile_datapath()
            except DatapathError as exc:
                log.warning("datapath_reconcile_failed", node=self.node, error=str(exc))
            # An interface the status lists whose device is not there yet (attached after the status
            # was written) is looked for again every second, not at the next interval.
            interval = self.config.datapath.interval
            if self.datapath is not None and self.datapath.unready():
                interval = min(interval, MISSING_DEVICE_RETRY)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._datapath_due.wait(), timeout=interval)

    async def _restore(self) -> None:
        leftovers = remove_leftovers(self.state_dir)
        if leftovers:
            log.warning("state_leftovers_removed", files=[p.name for p in leftovers])
        report = await self.startup.restore()
        self.restored = True
        self._answer()
        log.info("allocations_restored", node=self.node, report=str(report))

    def _answer(self) -> None:
        """Answer the current marks; a ready-for-release answer still published keeps its address held."""
        published = ((self._pool or {}).get("status") or {}).get("releaseAnswers") or {}
        ready = [a for a, s in published.items() if s == ReleaseState.READY]
        self._answers = self.allocator.answer_release(self._marks, published=ready)

    # -- reporting ------------------------------------------------------------------------------

    def _observe(self) -> None:
        """Refresh the agent's gauges (pools, allocations, handshake answers)."""
        m, node = self.metrics, self.node
        for pool in self.allocator.pools():
            m.agent_pool_addresses.labels(node=node, pool=pool).set(len(self.allocator.pool_addresses(pool)))
            m.agent_allocations.labels(node=node, pool=pool).set(len(self.allocator.allocations(pool=pool)))
        for answer in (ReleaseState.READY, ReleaseState.DO_NOT_RELEASE):
            count = sum(1 for a in self._answers.values() if a == answer)
            m.agent_release_answers.labels(node=node, answer=str(answer)).set(count)

    def _used(self) -> set[str]:
        return {a.address for a in self.allocator.allocations(pool=DEFAULT_POOL)}

    async def report_once(self) -> bool:
        """Write the agent's status fields if they changed; True when nothing is left to write."""
        if self.restored:
            self._observe()
        if self.kube is None or self._pool is None or not self.restored:
            return True
        # Imported once there is something to write: an agent without Kubernetes never reads these
        # modules, so it cannot fail to (out of files under a flood, the import would end the process).
        from eni_ipam.kube.api import ENIPOOLS
        from eni_ipam.kube.resources import StatusTooLarge, agent_status_patch

        # Answers follow allocations too (an address marked while free, then taken, is do-not-release).
        self._answer()
        try:
            patch = agent_status_patch(self._pool, used=self._used(), answers=self._answers)
        except StatusTooLarge as exc:
            # More than any node's pool: the allocator's state is wrong. Nothing is written (a
            # truncated ``used`` would let the controller release addresses in use); said every report.
            self.metrics.agent_status_reports.labels(outcome="refused").inc()
            log.error(
                "status_report_refused", node=self.node, field=exc.field, count=exc.count, limit=exc.limit
            )
            return True
        if patch is None:
            return True
        try:
            self._pool = await self.kube.patch(ENIPOOLS, self.node, patch, status=True)
        except errors.KubeConflict:
            self.metrics.agent_status_reports.labels(outcome="conflict").inc()
            self._pool = await self.kube.get(ENIPOOLS, self.node, status=True)
            return False
        except errors.KubeNotFound:
            return True
        except errors.KubeError:
            self.metrics.agent_status_reports.labels(outcome="failed").inc()
            raise
        self.metrics.agent_status_reports.labels(outcome="ok").inc()
        log.debug("status_reported", node=self.node, used=len(self._used()), answers=len(self._answers))
        return True

    async def _report(self) -> None:
        while True:
            await self.clock.sleep(self.config.report_interval)
            try:
                await self.report_once()
            except errors.KubeError as exc:
                log.warning("status_report_failed", node=self.node, error=str(exc))

    # -- the startup taint ------------------------------------------------------------------------

    def ready_for_pods(self) -> bool:
        """Whether a pod scheduled here now gets an address: ADDs are served (the socket is open) and
        the node's pool holds its ``minAllocate`` (an IPv6-only pool: its /80), of which the
        allocator has at least one address to hand out."""
        if not self.serving.is_set() or self._serving() or self._pool is None:
            return False
        if not self.allocator.capacity(DEFAULT_POOL):
            return False
        spec = self._pool.get("spec") or {}
        if spec.get("addressFamily") == "ipv6":
            return True
        stats = (self._pool.get("status") or {}).get("stats") or {}
        available, minimum = stats.get("available"), spec.get("minAllocate") or 0
        return isinstance(available, int) and isinstance(minimum, int) and available >= minimum

    async def _lift_startup_taint(self) -> None:
        """Take ``startup_taint`` off this node's Node once it is ready for pods; retried (every
        failure logged) until done, since a taint left on keeps every new pod off the node."""
        from eni_ipam.kube.nodemarks import lift_startup_taint

        while not self.ready_for_pods():
            await self.clock.sleep(STARTUP_POLL)
        backoff = Backoff(initial=1.0, maximum=60.0)
        while True:
            try:
                await lift_startup_taint(self.kube, self.node, key=self.config.startup_taint)
                return
            except errors.KubeError as exc:
                log.warning("startup_taint_lift_failed", node=self.node, error=str(exc))
            await self.clock.sleep(backoff.next_delay())

    # -- running --------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, listening: Listening | None = None) -> None:
        """Follow the pool, restore, serve, report — until ``stop`` is set. ``listening``: the lock
        and the listening socket the program took as soon as it had read the configuration
        (:mod:`~eni_ipam.agent.listen`); without it, the lock is taken here and the socket made once
        restored."""
        make_state_dir(self.state_dir)
        # One agent per state directory: two allocators would hand out twice.
        lock = listening.lock if listening is not None else lock_state_dir(self.state_dir)
        socket = Path(self.config.socket)
        socket.parent.mkdir(parents=True, exist_ok=True)
        server = self.config.server
        bound_process(
            accept_failed=lambda error: self.metrics.accept_errors.labels(error).inc(),
            files_needed=server.max_connections
            + PROBE_CONNECTIONS
            + self.config.socket_max_connections
            + 3 * LISTEN_BACKLOG,
        )
        endpoint = self.endpoint = await start_server(
            make_app(self.metrics, self.readiness),
            host=server.host,
            port=server.port,
            metrics=self.metrics,
            max_connections=server.max_connections,
            read_timeout=server.read_timeout,
        )
        try:
            probes = self.probes = await start_probes(
                self.readiness, host=server.probe_host, port=server.probe_port, metrics=self.metrics
            )
        except BaseException:
            await endpoint.cleanup()
            raise
        own_kube = self.kube is None and self.config.node_source == "kubernetes"
        try:
            # Restore first: the state file (or its rebuild) needs no pool, and a container's DEL or
            # CHECK must work even while the API server is out of reach. Outside the task group, so
            # that a refused state file stops the start with its own error (exit 2), not a group.
            await self._restore()
            async with contextlib.AsyncExitStack() as stack, asyncio.TaskGroup() as tg:
                if self.config.datapath.enabled:
                    await self._open_datapath(stack)
                tasks: list[asyncio.Task[None]] = []
                judges: list[Judge] = []
                if self.config.node_source == "kubernetes":
                    tasks += self._start_kubernetes(tg, judges)  # hands the pods to the start first
                if self.datapath is not None:
                    tasks.append(tg.create_task(self._keep_datapath(), name="eni-ipam-agent-datapath"))
                tasks.append(tg.create_task(self.startup.run(), name="eni-ipam-agent-start"))
                if self.config.node_source != "kubernetes":
                    tasks.append(tg.create_task(self._report(), name="eni-ipam-agent-gauges"))
                    judges.append(
                        NamespaceJudge(
                            self.allocator, cni_cache_dir=self.config.cni_cache_dir, container=self.container
                        )
                    )
                if self.docker is not None:
                    judges.append(DockerJudge(self.allocator, self.driver, self.docker))
                if self.config.sweep_interval > 0:
                    self.sweeper = Sweeper(
                        judges,
                        clock=self.clock,
                        interval=self.config.sweep_interval,
                        grace=self.config.sweep_grace,
                    )
                    tasks.append(tg.create_task(self.sweeper.run(), name="eni-ipam-agent-sweep"))
                if self.config.claims and self.kube is not None:
                    from eni_ipam.agent.claims import ClaimReconciler

                    claims = ClaimReconciler(
                        self.kube, self.allocator, node=self.node, clock=self.clock, metrics=self.metrics
                    )
                    tasks.append(tg.create_task(claims.run(), name="eni-ipam-agent-claims"))
                if listening is None:
                    remove_stale(socket)
                runner = await serve_unix(
                    self.socket_app(),
                    listening.sock if listening is not None else str(socket),
                    max_connections=self.config.socket_max_connections,
                    read_timeout=self.config.socket_read_timeout,
                    refused=lambda reason: self.metrics.agent_socket_refused.labels(reason).inc(),
                )
                os.chmod(socket, 0o660)
                self.serving.set()
                log.info("agent_serving", node=self.node, socket=str(socket))
                try:
                    await stop.wait()
                finally:
                    await runner.cleanup()
                    with contextlib.suppress(errors.KubeError):
                        await self.report_once()  # the last word on what is in use
                    for task in tasks:
                        task.cancel()
        finally:
            await probes.cleanup()
            await endpoint.cleanup()
            if own_kube and self.kube is not None:
                await self.kube.close()
            lock.close()
        log.info("agent_stopped", node=self.node)

    async def _open_datapath(self, stack: contextlib.AsyncExitStack) -> None:
        from eni_ipam.agent.datapath.datapath import Datapath
        from eni_ipam.agent.datapath.netlink import Netlink
        from eni_ipam.agent.datapath.nft import SnatTable

        netlink = await stack.enter_async_context(Netlink())
        snat = SnatTable(run=self._nft) if self._nft is not None else SnatTable()
        self.datapath = Datapath(self.config.datapath, netlink=netlink, snat=snat)
        stack.callback(setattr, self, "datapath", None)

    def _start_kubernetes(self, tg: asyncio.TaskGroup, judges: list[Judge]) -> list[asyncio.Task[None]]:
        from eni_ipam.kube.api import ENIPOOLS, PODS, KubeApi, client_from_kubeconfig
        from eni_ipam.kube.informer import Informer
        from eni_ipam.kube.permissions import AGENT_PERMISSIONS

        if self.kube is None:
            self.kube = KubeApi(
                client_from_kubeconfig(self.config.kubeconfig),
                metrics=self.metrics,
                allowed=AGENT_PERMISSIONS,
            )
        pools = Informer(
            self.kube, ENIPOOLS, clock=self.clock, metrics=self.metrics, fields={"metadata.name": self.node}
        )
        pools.add_handler(self.on_pool)
        tasks = [
            tg.create_task(pools.run(), name="eni-ipam-agent-pool"),
            tg.create_task(self._report(), name="eni-ipam-agent-report"),
        ]
        if self.config.startup_taint:
            tasks.append(tg.create_task(self._lift_startup_taint(), name="eni-ipam-agent-startup-taint"))
        # The pods on this node: what they hold is never handed out (the start), and an address
        # whose pod is gone is released (the sweep).
        pods = Informer(
            self.kube, PODS, clock=self.clock, metrics=self.metrics, fields={"spec.nodeName": self.node}
        )
        self.startup.follow_pods(pods)
        if self.config.sweep_interval > 0:
            judges.append(PodJudge(self.allocator, pods))
        tasks.append(tg.create_task(pods.run(), name="eni-ipam-agent-pods"))
        if self.endpoints is not None:
            tasks.append(tg.create_task(self._watch_endpoints(), name="eni-ipam-agent-endpointslices"))
        return tasks

    async def _watch_endpoints(self) -> None:
        """List and watch the cluster's EndpointSlices, keeping the node's addresses they list, from
        the moment the node's pool is read: what the slices are judged against (its members) is known
        then. Meanwhile every quarantined address is held."""
        from eni_ipam.agent.endpoints import lists_any, slice_version
        from eni_ipam.kube.api import ENDPOINTSLICES
        from eni_ipam.kube.informer import Informer

        assert self.endpoints is not None and self.kube is not None
        await self.pool_seen.wait()
        slices = Informer(
            self.kube,
            ENDPOINTSLICES,
            clock=self.clock,
            metrics=self.metrics,
            project=self.endpoints.project,
            version=slice_version,
            keep=lists_any,
        )
        slices.add_handler(self.endpoints.on_slice)
        self.endpoints.informer = slices
        await slices.run()
