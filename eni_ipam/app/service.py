"""``eni-ipam run``: the long-running service, as a Deployment runs it.

One process: the HTTP endpoint, the provider (opened from the configuration), and a node source —

* ``memory``: the configuration's ``nodes`` in the embedded store; this process reconciles alone;
* ``kubernetes``: informers on every replica; Lease election decides which replica reconciles.

Mutations go through one :class:`~eni_ipam.core.fence.Fence`: open only while this replica leads (or
runs alone) and is not stopping. SIGTERM (or SIGINT):

1. closes the fence — no new mutating cloud call starts;
2. waits up to ``shutdown_timeout`` for the calls in flight, so no interface is left half-made;
3. writes the statuses still queued (bounded), releases the Lease so a standby takes over at once;
4. stops the informers and the endpoint, and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TextIO

import structlog
from aiohttp import web

from eni_ipam.adapters.guard import bound_process
from eni_ipam.adapters.limits import LISTEN_BACKLOG
from eni_ipam.adapters.malloc import tune_allocator
from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.adapters.metrics.selection import NodeSeriesPolicy
from eni_ipam.adapters.server import PROBE_CONNECTIONS, make_app, start_probes, start_server
from eni_ipam.app.providers import plugin
from eni_ipam.app.runconfig import RunConfig
from eni_ipam.core.clock import Clock, LoopClock, suspend_aware_seconds
from eni_ipam.core.fence import Fence, FencedProvider
from eni_ipam.core.manager import NodeManager, StatusSink
from eni_ipam.core.records import RecordsRef
from eni_ipam.store.memory import MemoryStore

if TYPE_CHECKING:
    from eni_ipam.kube.health import ApiHealth

log = structlog.get_logger("eni_ipam.app.service")

STATUS_FLUSH_TIMEOUT = 5.0
"""Seconds the last status batch may take at shutdown (after the cloud calls drained)."""

HEAP_FREEZE_INTERVAL = 0.25
"""Seconds between two moves of the objects that survived into the permanent generation
(:func:`gc.freeze`, which costs nothing: it links two lists); see :func:`freeze_heap`. At 100,000
nodes a second's worth of new objects (a list of Nodes being taken in) took a full collection
80 ms; a quarter of it stays under the loop's budget."""


async def freeze_heap(clock: Clock, interval: float = HEAP_FREEZE_INTERVAL) -> None:
    """Keep the cyclic garbage collector's oldest generation small, forever.

    A full collection walks every tracked object there is and holds every thread while it does: at
    100,000 nodes, millions of long-lived objects (the cloud view, the node table, the caches), a
    stall of seconds each time the oldest generation has grown by a quarter. Moving what survived
    into the permanent generation every ``interval`` seconds leaves full collections only the
    objects of the last ``interval`` to walk. The long-lived state holds no reference cycles (frozen
    dataclasses, tuples, packed bytes): it is freed by reference counting when it goes, frozen or
    not. Cyclic garbage is still collected while it is young, which is when it is made (a task's
    frames, an exception and its traceback); only a cycle that lived more than ``interval`` before
    becoming garbage would be kept. Decision 0022."""
    gc.freeze()  # what the imports and the configuration made
    while True:
        await clock.sleep(interval)
        gc.freeze()


def listening_on(runner: web.AppRunner, host: str, port: int) -> str:
    """``host:port`` as bound: port 0 asks the system for a free port, and the log must say which
    one it got (an operator or a script reads it there)."""
    bound = [a for a in runner.addresses if isinstance(a, tuple) and len(a) >= 2]
    if bound:
        port = int(bound[0][1])
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def identity(configured: str, environ: Mapping[str, str]) -> str:
    """This replica's name in the Lease: the configured one, else the pod's name, else the host's
    name made unique (client-go's ``hostname_uuid``): two processes on one host, or a process and
    its restarted self, must never pass for one holder."""
    if configured:
        return configured
    if environ.get("POD_NAME"):
        return environ["POD_NAME"]
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclasses.dataclass
class ServiceState:
    """What ``/readyz`` reports."""

    role: str = "starting"
    """single (no election), candidate, leader or standby."""
    leader: str = ""
    manager: NodeManager | None = None
    caches_synced: bool = True
    api: ApiHealth | None = None
    """The Kubernetes API server as this replica sees it (None: no Kubernetes)."""
    crd_problem: Callable[[], str] | None = None
    """Why the cluster's ENIPool CRD would lose what this replica writes (empty: it would not)."""

    def readiness(self) -> tuple[bool, str]:
        if self.api is not None and not self.api.healthy:
            return False, f"{self.role}, {self.api.describe()}"
        # The CRD's problem first: a missing CRD is also why the caches never sync, and it names the fix.
        problem = self.crd_problem() if self.crd_problem is not None else ""
        if problem:  # a standby too: a rollout must not go on to replicas that cannot write
            return False, f"{self.role}, {problem}"
        if not self.caches_synced:
            return False, f"{self.role}, Kubernetes caches are not synced yet"
        if self.role in ("leader", "single"):
            if self.manager is None or not self.manager.ready:
                return False, f"{self.role}, initial resync has not succeeded yet"
            return True, self.role
        if self.role == "standby" and self.leader:
            return True, f"standby (leader: {self.leader})"
        return True, self.role


async def serve(
    config: RunConfig,
    *,
    stop: asyncio.Event,
    environ: Mapping[str, str] | None = None,
    view: TextIO | None = None,
    checked: bool = False,
) -> int:
    """Run until ``stop`` is set; 0 after a clean shutdown. ``view``: a terminal to draw the live
    view of the nodes on (:mod:`eni_ipam.app.view`), with ``node_source: memory`` only. ``checked``:
    the provider's settings were checked already (``eni-ipam run`` checks them with the rest of the
    configuration, :mod:`eni_ipam.app.checks`), so they are not checked again."""
    environ = os.environ if environ is None else environ
    return await Service(config, stop=stop, environ=environ, view=view, checked=checked).serve()


class Service:
    """One run of the service: its clock, metrics, readiness and mutation fence."""

    def __init__(
        self,
        config: RunConfig,
        *,
        stop: asyncio.Event,
        environ: Mapping[str, str],
        view: TextIO | None = None,
        checked: bool = False,
    ) -> None:
        self.config = config
        self.checked = checked
        """The provider's settings were checked before the service was made (:func:`serve`)."""
        self.view = view
        """The terminal of the live view (the embedded default on a terminal), or None."""
        self.stop = stop
        self.environ = environ
        self.clock: Clock = LoopClock()
        self.metrics = Metrics(node_series=NodeSeriesPolicy.of(config.settings))
        self.state = ServiceState()
        # Elected replicas mutate only within a proven leadership term (decision 0037).
        elected = config.node_source != "memory"
        self.fence = Fence(term_clock=suspend_aware_seconds if elected else None)
        self.records = RecordsRef()
        """The node store's records, for providers keeping their state there (set once it exists)."""

    async def serve(self) -> int:
        config = self.config
        tuned = tune_allocator(self.environ)  # before the service's threads exist
        if tuned:
            log.debug("allocator_tuned", **{k.lower().strip("_"): v for k, v in tuned.items()})
        provider_plugin = plugin(config.provider)
        if not self.checked:
            # Before the port: a bad region fails at once (in a thread: a cloud SDK's set-up is slow).
            await asyncio.to_thread(provider_plugin.check, config.provider_settings)
        server = config.server
        bound_process(
            accept_failed=lambda error: self.metrics.accept_errors.labels(error).inc(),
            files_needed=server.max_connections + PROBE_CONNECTIONS + 2 * LISTEN_BACKLOG,
        )
        runner = await start_server(
            make_app(self.metrics, self.state.readiness),
            host=server.host,
            port=server.port,
            metrics=self.metrics,
            max_connections=server.max_connections,
            read_timeout=server.read_timeout,
        )
        try:
            probes = await start_probes(
                self.state.readiness, host=server.probe_host, port=server.probe_port, metrics=self.metrics
            )
        except BaseException:
            await runner.cleanup()
            raise
        log.info(
            "service_started",
            provider=config.provider,
            node_source=config.node_source,
            endpoint=listening_on(runner, config.server.host, config.server.port),
            probes=listening_on(probes, server.probe_host, server.probe_port),
        )
        freezer = asyncio.get_running_loop().create_task(freeze_heap(self.clock), name="eni-ipam-heap")
        try:
            async with provider_plugin.open_provider(
                config.provider_settings,
                clock=self.clock,
                metrics=self.metrics,
                rate_limit_share=config.settings.rate_limit_share,
                records=self.records,
            ) as provider:
                fenced = FencedProvider(provider, self.fence)
                if config.node_source == "memory":
                    await self._run_alone(fenced)
                else:
                    await self._run_elected(fenced)
        finally:
            freezer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await freezer
            await probes.cleanup()
            await runner.cleanup()
            self.metrics.report_role(leader=lambda: False, ready=lambda: False)
        log.info("service_stopped")
        return 0

    def _manager(self, provider: FencedProvider, sink: StatusSink) -> NodeManager:
        return NodeManager(
            provider=provider,
            settings=self.config.settings,
            metrics=self.metrics,
            clock=self.clock,
            status_sink=sink,
        )

    async def _drain(self) -> None:
        """Stop new mutations for good; give those in flight ``shutdown_timeout`` to finish."""
        limit = self.config.shutdown_timeout
        self.fence.seal("shutting down")
        in_flight = self.fence.in_flight
        if await self.fence.drain(limit):
            log.info("mutations_drained", in_flight=in_flight)
        else:
            log.warning("mutations_cancelled", in_flight=self.fence.in_flight, timeout=limit)

    def _reconciling(self) -> bool:
        """What ``eni_ipam_ready`` says: this replica leads (or runs alone) and has resynced."""
        manager, api, crd = self.state.manager, self.state.api, self.state.crd_problem
        return (
            manager is not None
            and manager.ready
            and self.state.role in ("leader", "single")
            and (api is None or api.healthy)
            and not (crd is not None and crd())
        )

    async def _run_alone(self, provider: FencedProvider) -> None:
        store = MemoryStore()
        self.records.target = store
        for resource in self.config.static_nodes():
            store.put(resource)
        manager = self._manager(provider, store)
        store.attach(manager)
        self.state.role, self.state.manager = "single", manager
        self.metrics.report_role(leader=lambda: True, ready=self._reconciling)
        self.fence.open()
        async with asyncio.TaskGroup() as tg:
            reconciler = tg.create_task(manager.run(), name="eni-ipam-manager")
            if self.view is not None:
                from eni_ipam.app.view import watch

                tg.create_task(
                    watch(
                        lambda: manager,
                        self.metrics,
                        clock=self.clock,
                        title="eni-ipam run",
                        out=self.view,
                        stop=self.stop,
                    ),
                    name="eni-ipam-view",
                )
            await self.stop.wait()
            await self._drain()
            reconciler.cancel()

    async def _run_elected(self, provider: FencedProvider) -> None:
        from eni_ipam.kube.api import KubeApi, client_from_kubeconfig
        from eni_ipam.kube.health import PROBLEMS, ApiHealth
        from eni_ipam.kube.lease import LeaderElector
        from eni_ipam.kube.settings import instance_id_source
        from eni_ipam.kube.source import KubeNodeSource

        ks, state, metrics, fence = self.config.kubernetes, self.state, self.metrics, self.fence
        health = ApiHealth(clock=self.clock, unhealthy_after=ks.api_unhealthy_after)
        state.api = health
        metrics.report_kube_api(PROBLEMS, health.unhealthy_problem)
        api = KubeApi(client_from_kubeconfig(ks.kubeconfig), metrics=metrics, health=health)
        ks = ks.replace(instance_ids=instance_id_source(ks, self.config.provider))
        replica = identity(ks.identity, self.environ)
        source = KubeNodeSource(
            api,
            settings=ks,
            node_defaults=self.config.node_defaults,
            profiles=self.config.profiles,
            clock=self.clock,
            metrics=metrics,
            provider_id_schemes=plugin(self.config.provider).PROVIDER_ID_SCHEMES,
            identity=replica,
        )
        self.records.target = source
        # Pool statuses are the leader's to write, as cloud calls are: only within a proven term.
        source.writer.may_write = lambda: fence.term_left > 0
        state.crd_problem = lambda: source.crd.state.problem()
        elector = LeaderElector(
            api,
            name=ks.lease_name,
            namespace=ks.lease_namespace or self.environ.get("POD_NAMESPACE") or "kube-system",
            identity=replica,
            clock=self.clock,
            metrics=metrics,
            lease_duration=ks.lease_duration,
            renew_deadline=ks.renew_deadline,
            retry_period=ks.retry_period,
            term_clock=suspend_aware_seconds,
        )
        state.role, state.caches_synced = "candidate", False
        metrics.report_role(ready=self._reconciling)  # the elector sets eni_ipam_leader

        async def lead() -> None:
            manager = self._manager(provider, source.writer)
            state.role, state.manager = "leader", manager
            fence.open()
            try:
                await source.lead(manager)
            finally:
                fence.close("not leading")
                state.manager = None
                metrics.clear_pool_state()
                source.writer.reset()  # nothing of this term is written in the next one

        def on_lost() -> None:
            fence.close("the leader lease was lost")
            state.role = "candidate"

        async def watch_role() -> None:
            while True:
                state.caches_synced = source.synced
                if state.role != "leader" and elector.leader and elector.leader != elector.identity:
                    state.role, state.leader = "standby", elector.leader
                await self.clock.sleep(0.5)

        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [
                    tg.create_task(source.run(), name="eni-ipam-informers"),
                    tg.create_task(watch_role(), name="eni-ipam-role"),
                ]
                election = tg.create_task(
                    elector.run(lead, on_lost=on_lost, on_renewed=fence.renewed), name="eni-ipam-election"
                )
                await self.stop.wait()
                await self._drain()
                if elector.leading:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(STATUS_FLUSH_TIMEOUT):
                            await source.writer.flush()
                election.cancel()  # releases the lease if held
                with contextlib.suppress(asyncio.CancelledError):
                    await election
                for task in tasks:
                    task.cancel()
        finally:
            await api.close()
