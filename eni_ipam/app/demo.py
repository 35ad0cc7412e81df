"""``eni-ipam demo``: a simulated cluster, in real time, kept by the real reconciler.

Nodes of mixed instance types on several subnets, a workload that starts and stops pods, the
in-memory cloud with realistic latency and EC2's token buckets, and a live view of every node's
pool. ``/metrics`` is served on 127.0.0.1 while it runs: on 9090 unless ``--port`` says otherwise,
on a free port (said on the view and after the summary) when 9090 is taken, never on a port the
user did not ask for once they asked for one (:func:`serve_metrics`, decision 0059). Ctrl-C (or
``--duration``) stops it and prints a summary.

The cluster is a healthy one (up to about a hundred nodes; 50 by default): the workload keeps every
node's pods within what its instance and its share of the subnets can hold (:func:`workload`), so
the pools grow and shrink but no node reaches its instance's limit and no subnet runs low, and
nothing the chart's alert rules watch for happens.
``--fault`` breaks it on purpose, at a set time (:data:`FAULTS`): the cloud refuses the
reconciler's credentials, as when they expire or are revoked, so an alerting setup can be tried
against a known incident.

On a terminal the view is :mod:`eni_ipam.app.view`'s full screen (bars, gauges, sparklines, events),
redrawn every second and at once on a resize; the terminal is given back as it was however the demo
ends. With ``--plain``, off a terminal, or without the ``view`` extra, it prints the plain lines of
:func:`render`, which stay as they are for whatever reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import math
import random
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, TextIO

import structlog

from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.adapters.metrics.selection import NodeSeriesPolicy
from eni_ipam.adapters.server import Readiness, make_app, start_server
from eni_ipam.adapters.signals import stop_on_signals
from eni_ipam.adapters.terminal import plural
from eni_ipam.config.schema import parse_duration, validate
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.manager import NodeManager
from eni_ipam.core.model import NodeStats
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.provider import Provider
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeResource, NodeSpec
from eni_ipam.errors import ConfigError
from eni_ipam.simulator.cluster import EmbeddedCluster
from eni_ipam.simulator.emulation import Emulation, emulator
from eni_ipam.simulator.simnode import SimulatedNodeSide
from eni_ipam.store.memory import MemoryStore

INSTANCE_TYPES = ("m5.large", "m5.xlarge", "c5.large", "t3.medium", "m5.2xlarge", "r5.large", "m4.xlarge")
ZONES = ("us-east-1a", "us-east-1b")
API_LATENCY = 0.08
"""Seconds each simulated cloud call takes: close to EC2's usual answer times."""
SUBNET_PREFIX = 22
"""Every subnet of the demo is a /22: 1,019 usable addresses (EC2 reserves five)."""
SUBNETS_PER_ZONE = 2
"""A zone's subnets: the nodes' and the pods' (new interfaces may go to either)."""
RESERVED_PER_SUBNET = 5
INTERFACE_PRIMARIES = 4
"""The most interfaces an instance of :data:`INSTANCE_TYPES` has: each takes a primary address of
its subnet beside the pool's."""
SUBNET_SHARE = 0.5
"""What the workload lets the pools of a zone take of its subnets, at most: half, so a subnet never
runs low (the chart's EniIpamSubnetLow warns below a quarter free) whatever the pods do."""
POD_HEADROOM = 1
"""Slots a node's pool keeps free below what its instance can hold, at the watermark: the node
never reaches its instance's limit while it needs addresses."""
LOAD_PERIOD = 60.0
"""Seconds of the cluster's load cycle: every node's pods go from their level down to a third of it
and back, so the cluster's pools grow and shrink as a whole, not only node by node; no rise lasts
more than half a minute, not long enough to look like a subnet draining for good."""

SETTINGS = Settings(release_excess_ips=True, excess_ip_release_delay=20.0, resync_interval=30.0)
"""The demo's reconciler: excess released (pools shrink as pods leave) 20 s after it appears, and a
full resync every 30 s, so that a minute of the demo shows both."""

log = structlog.get_logger("eni_ipam.app.demo")


def build(
    nodes: int, seed: int, clock: LoopClock, *, metrics: ApiObserver
) -> tuple[Emulation, list[NodeResource]]:
    """The demo's cloud (the in-memory EC2, declared as a scenario's ``cloud:`` section) and its nodes."""
    rng = random.Random(seed)
    subnets: list[dict[str, Any]] = []
    for z, zone in enumerate(ZONES):
        subnets.append(
            {
                "id": f"subnet-{zone[-2:]}-nodes",
                "vpc": "vpc-demo",
                "zone": zone,
                "cidr": f"10.0.{z * 16}.0/{SUBNET_PREFIX}",
            }
        )
        subnets.append(
            {
                "id": f"subnet-{zone[-2:]}-pods",
                "vpc": "vpc-demo",
                "zone": zone,
                "cidr": f"10.0.{z * 16 + 4}.0/{SUBNET_PREFIX}",
                "tags": {"eni-ipam/pods": "true"},
            }
        )
    instances: list[dict[str, Any]] = []
    specs: list[NodeResource] = []
    for n in range(nodes):
        zone = ZONES[n % len(ZONES)]
        instance_id = f"i-{n:05d}"
        instances.append(
            {
                "id": instance_id,
                "type": rng.choice(INSTANCE_TYPES),
                "subnet": f"subnet-{zone[-2:]}-nodes",
                "security_groups": ["sg-nodes"],
            }
        )
        spec = NodeSpec(pre_allocate=rng.choice((0, 4, 8, 12)), max_above_watermark=rng.choice((0, 0, 2)))
        specs.append(
            NodeResource(name=f"node-{n:03d}", instance_id=instance_id, spec=spec, used=rng.randint(0, 6))
        )
    declaration = {
        "vpcs": [{"id": "vpc-demo", "cidr": "10.0.0.0/16"}],
        "security_groups": [{"id": "sg-nodes", "vpc": "vpc-demo"}],
        "subnets": subnets,
        "instances": instances,
    }
    cloud = emulator("cloud")
    world = cloud.open(
        validate(cloud.DECLARATION, declaration, path="demo.cloud"),
        clock=clock,
        metrics=metrics,
        records=MemoryStore(),  # the in-memory EC2 keeps its state in itself, not in the node store
        path="demo.cloud",
    )
    world.set_latency(None, API_LATENCY)
    return world, specs


def address_share(nodes: int) -> int:
    """Addresses the pool of one of ``nodes`` nodes may take of its zone's subnets: their
    :data:`SUBNET_SHARE`, split evenly among the zone's nodes, less the primary addresses of the
    node's interfaces. It shrinks as nodes are added: past about a hundred nodes the nodes' own
    subnets (which new interfaces fill first) run low whatever the pods do, and past about four
    hundred it is 0 (the watermarks alone take more)."""
    usable = SUBNETS_PER_ZONE * (2 ** (32 - SUBNET_PREFIX) - RESERVED_PER_SUBNET)
    per_zone = math.ceil(nodes / len(ZONES))
    return max(int(SUBNET_SHARE * usable) // per_zone - INTERFACE_PRIMARIES, 0)


def pod_ceiling(stats: NodeStats, spec: NodeSpec, share: int) -> int:
    """Most addresses the workload puts in use on a node: with its free addresses at the watermark
    (``pre_allocate``, and the ``max_above_watermark`` slack a pass may add), its pool stays
    :data:`POD_HEADROOM` below what its instance can hold (``stats.capacity``) and within its
    ``share`` of the zone's subnets (:func:`address_share`)."""
    if not stats.limits_known:
        return 0
    room = min(stats.capacity - POD_HEADROOM, share) - max(spec.pre_allocate, 0) - spec.max_above_watermark
    return max(room, 0)


async def workload(
    side: SimulatedNodeSide, store: MemoryStore, rng: random.Random, stop: asyncio.Event
) -> None:
    """Pods come and go: every half second a tenth of the nodes gain or lose some. Each node's pods
    head for a level of their own, which moves now and then (a deployment scaled up or down) and
    follows the cluster's load cycle (:data:`LOAD_PERIOD`): most steps close half the gap or so (a
    deployment's pods start or stop together), one in four is a pod or two either way. So pools
    grow (interfaces are created) and shrink (the excess is released), and the cluster reaches its
    cycle within seconds rather than creeping towards it for minutes (which looks like a subnet
    draining). A node's pods start only on its free addresses, as a CNI plugin gives them, once
    the reconciler has kept its pool, and never exceed its :func:`pod_ceiling` (a node above it
    loses the excess at once). The cluster stays healthy: no pool reaches its instance's limit, no
    subnet fills."""
    share = address_share(len(store.resources))
    levels: dict[str, int] = {}
    loop = asyncio.get_running_loop()
    started = loop.time()
    while not stop.is_set():
        load = (2 + math.cos(2 * math.pi * (loop.time() - started) / LOAD_PERIOD)) / 3  # 1 .. 1/3 .. 1
        for name, resource in list(store.resources.items()):
            # A pod needs an address: none runs on a node before the reconciler has kept its pool;
            # then the node's pods are scheduled at once (they wait a pass for their addresses), and
            # those beyond its ceiling do not fit.
            status = store.statuses.get(name)
            fits = pod_ceiling(status.stats, resource.spec, share) if status is not None else 0
            if status is not None and name not in levels:
                levels[name] = rng.randint(0, fits)
                side.update(name, used=round(levels[name] * load))
            elif resource.used > fits:
                side.update(name, used=fits)
        for name in rng.sample(sorted(levels), k=min(len(levels), max(1, len(store.resources) // 10))):
            resource = store.resources[name]
            status = store.statuses[name]
            ceiling = pod_ceiling(status.stats, resource.spec, share)
            if rng.random() < 0.1:
                levels[name] = rng.randint(0, ceiling)
            gap = min(round(levels[name] * load), ceiling) - resource.used
            if gap and rng.random() < 0.75:  # towards it: a deployment's pods start or stop together
                delta = gap if abs(gap) <= 2 else round(gap * rng.uniform(0.4, 0.8))
            else:  # pods replaced, one-offs against the trend
                delta = rng.choice((-2, -1, 1, 2))
            free = max(status.stats.available, resource.used)  # pods in use stay; new ones need an address
            used = max(0, min(resource.used + delta, ceiling, free))
            if used != resource.used:
                side.update(name, used=used)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=0.5)


@dataclasses.dataclass(frozen=True)
class Fault:
    """A change of the demo's cloud at ``at`` seconds into the run (``--fault NAME-at=SECONDS``)."""

    name: str
    at: float

    @property
    def change(self) -> Mapping[str, Any]:
        """The ``cloud`` step it makes (docs/scenarios.md)."""
        return FAULTS[self.name]


FAULTS: Mapping[str, Mapping[str, Any]] = {
    "credentials-revoked": {"credentials": "revoked"},
    "credentials-restored": {"credentials": "restored"},
}
"""The faults ``--fault`` injects, by name, each as the ``cloud`` step it makes. ``credentials-revoked``:
every cloud call fails with ``AuthFailure`` (the reconciler's credentials expired or were revoked):
maintenance passes fail with reason ``Unauthorized`` while pods keep arriving, which the chart's
EniIpamAllocationsFailing pages for; ``credentials-restored`` ends it."""


def parse_fault(text: str) -> Fault:
    """``NAME-at=SECONDS`` (``credentials-revoked-at=30``, ``credentials-revoked-at=2m``): the fault
    NAME of :data:`FAULTS`, SECONDS into the run (a duration, as in the configuration files).

    Raises:
        ValueError: an unknown fault, or a time that is not a duration (the message says which).
    """
    key, equals, when = text.partition("=")
    name = key.removesuffix("-at")
    forms = ", ".join(f"{n}-at=SECONDS" for n in FAULTS)
    if not equals or name == key or name not in FAULTS:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise ValueError(f"{shown!r} is not a fault: {forms}")
    try:
        return Fault(name, parse_duration(when))
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}") from None


async def inject(cloud: Emulation, faults: Sequence[Fault], clock: LoopClock, started: float) -> None:
    """Make each fault's change to ``cloud`` at its time (seconds after ``started``), in time order,
    logging ``fault_injected`` as it does."""
    step = emulator("cloud").CHANGE
    assert step is not None, "the in-memory cloud takes cloud steps"
    for fault in sorted(faults, key=lambda f: f.at):
        await asyncio.sleep(max(started + fault.at - clock.monotonic(), 0.0))
        cloud.change(validate(step, dict(fault.change), path=f"--fault {fault.name}-at"))
        log.warning("fault_injected", fault=fault.name, at=fault.at)


def render(
    manager: NodeManager, calls: Mapping[str, int], elapsed: float, out: TextIO, *, status: str = ""
) -> None:
    """One frame of the live view: the neediest nodes, totals, subnets and the API calls so far;
    ``status`` (where /metrics went, when not where asked) under the title on a terminal, whose
    screen each frame clears."""
    nodes = plural(len(manager.nodes), "node")
    lines = [f"eni-ipam demo — {elapsed:6.1f}s — {nodes} — ready={manager.ready}"]
    if status and out.isatty():
        lines.append(f"! {status}")
    lines.append(
        f"{'node':<10} {'type':<11} {'avail':>5} {'used':>5} {'need':>5} {'excess':>6} {'ifaces':>6}"
    )
    shown = sorted(manager.nodes.values(), key=lambda n: (-n.stats.needed, n.name))[:20]
    for node in shown:
        s = node.stats
        itype = node.instance.type if node.instance else "?"
        ifaces = len(node.instance.interfaces) if node.instance else 0
        counts = f"{s.available:>5} {s.used:>5} {s.needed:>5} {s.excess:>6} {ifaces:>6}"
        lines.append(f"{node.name:<10} {itype:<11} {counts}")
    if len(manager.nodes) > len(shown):
        lines.append(f"… and {len(manager.nodes) - len(shown)} more")
    totals = [n.stats for n in manager.nodes.values()]
    lines.append(
        f"pool {sum(s.available for s in totals)}  used {sum(s.used for s in totals)}  "
        f"in deficit {sum(1 for s in totals if s.needed > 0)}"
    )
    lines.append(
        "subnets free: " + "  ".join(f"{sid}={free}" for sid, free in sorted(manager.view.free().items()))
    )
    lines.append("API calls: " + "  ".join(f"{op}={n}" for op, n in sorted(calls.items())))
    if out.isatty():
        out.write("\x1b[H\x1b[2J" + "\n".join(lines) + "\n")
    else:
        out.write(lines[0] + " | " + lines[-3] + " | " + lines[-1] + "\n")
    out.flush()


def local_cluster(
    provider: Provider,
    settings: Settings,
    nodes: list[NodeResource],
    *,
    metrics: Metrics,
    clock: LoopClock,
    seed: int,
) -> tuple[NodeManager, MemoryStore, SimulatedNodeSide]:
    """A manager over ``provider`` with the embedded store, holding ``nodes`` (each with its pods in use)."""
    cluster = EmbeddedCluster(
        provider, settings=settings, metrics=metrics, clock=clock, rng=random.Random(seed)
    )
    for node in nodes:
        cluster.side.add(node)
    return cluster.manager, cluster.store, cluster.side


@dataclasses.dataclass(frozen=True)
class Running:
    """The demo's cluster while :func:`running` runs it."""

    cloud: Emulation
    manager: NodeManager
    store: MemoryStore
    side: SimulatedNodeSide


@contextlib.asynccontextmanager
async def running(*, nodes: int, seed: int, clock: LoopClock, metrics: Metrics) -> AsyncIterator[Running]:
    """The demo's cluster, its reconciler and its workload running as tasks of their own until the
    block ends (the README's screen and the tests, on virtual time; the demo itself adds the view,
    the metrics endpoint and the faults)."""
    cloud, specs = build(nodes, seed, clock, metrics=metrics)
    manager, store, side = local_cluster(
        cloud.provider, SETTINGS, specs, metrics=metrics, clock=clock, seed=seed
    )
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(manager.run(), name="manager"),
        asyncio.create_task(workload(side, store, random.Random(seed + 1), stop), name="workload"),
    ]
    try:
        yield Running(cloud, manager, store, side)
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


DEFAULT_PORT = 9090
"""The port of /metrics when ``--port`` is not given: the one the README links to. It is also
Prometheus's own default, so on a host running Prometheus it is often taken."""
PROMETHEUS_PORT = 9090
"""Prometheus's default port: a notice that this port is taken says whose it may be."""


@contextlib.asynccontextmanager
async def serve_metrics(
    metrics: Metrics, ready: Readiness, port: int | None, out: TextIO
) -> AsyncIterator[str]:
    """``/metrics``, ``/healthz`` and ``/readyz`` on 127.0.0.1:``port`` for the block (0: none; None:
    :data:`DEFAULT_PORT`). Yields a notice, empty when the endpoint is where it was asked to be.

    The demo runs on whatever happens to the endpoint, and says where it went: the default port
    taken (by a local Prometheus, most often) moves it to a free port the kernel picks, so that the
    link the demo prints reaches the demo and never the other process; a port asked for with
    ``--port`` that is taken leaves the metrics off rather than somewhere unasked. The notice is
    written here, and the live view, which covers what was written before it, shows it too."""
    runner = None
    notice = ""
    wanted = DEFAULT_PORT if port is None else port
    if wanted:
        try:
            runner = await start_server(
                make_app(metrics, ready), host="127.0.0.1", port=wanted, metrics=metrics
            )
            out.write(f"metrics on http://127.0.0.1:{wanted}/metrics\n")
        except ConfigError as exc:
            # What to do first, then why: a narrow view cuts the line's end.
            reason = exc.message.rpartition(": ")[2]  # "address already in use"
            if wanted == PROMETHEUS_PORT:
                reason += f"; {PROMETHEUS_PORT} is Prometheus's default port too"
            if port is None:
                try:
                    runner = await start_server(
                        make_app(metrics, ready), host="127.0.0.1", port=0, metrics=metrics
                    )
                    notice = (
                        f"metrics on {_metrics_url(runner)}, not :{wanted}: port {wanted} is taken "
                        f"({reason}); --port N chooses"
                    )
                except ConfigError as again:
                    notice = f"metrics off: port {wanted} is taken ({reason}), and {again.message}"
            else:
                notice = (
                    f"metrics off: port {wanted} is taken ({reason}); --port N chooses another, --port 0 none"
                )
            out.write(notice + "\n")
    try:
        yield notice
    finally:
        if runner is not None:
            await runner.cleanup()


def _metrics_url(runner: Any) -> str:
    """The /metrics address of a runner listening on a port the kernel picked."""
    bound = [a for a in runner.addresses if isinstance(a, tuple) and len(a) >= 2]
    return f"http://127.0.0.1:{int(bound[0][1])}/metrics"


def live_view_missing() -> str:
    """Why the live view cannot be drawn here (its extra is not installed), or empty."""
    if importlib.util.find_spec("rich") is None:
        return "the live view needs the view extra (pip install 'eni-ipam[view]'): plain lines follow"
    return ""


@contextlib.contextmanager
def display(
    manager: NodeManager,
    metrics: Metrics,
    calls: Mapping[str, int],
    clock: LoopClock,
    out: TextIO,
    *,
    plain: bool,
    status: str = "",
) -> Iterator[Callable[[], None]]:
    """What draws one tick for the block: the live view on a terminal (unless ``plain``), otherwise
    :func:`render`'s lines; both show ``status`` under their title. The live view takes the log
    events while it is up and, once closed, prints its last frame on the ordinary screen (its
    status line with it)."""
    started = clock.monotonic()
    missing = "" if plain or not out.isatty() else live_view_missing()
    if plain or not out.isatty() or missing:
        if missing:
            out.write(missing + "\n")
        yield lambda: render(manager, calls, clock.monotonic() - started, out, status=status)
        return
    from eni_ipam.app import view

    watcher = view.Watcher(lambda: manager, metrics, clock=clock, title="eni-ipam demo", status=status)
    frames: list[view.Frame] = []
    with watcher.diverting():
        try:
            with view.live(out) as draw:

                def tick() -> None:
                    frames[:] = [watcher.sample()]
                    draw(frames[0])

                yield tick
        finally:
            if frames:
                view.final(frames[0], out)


async def _pause(stop: asyncio.Event, seconds: float, wake: asyncio.Event | None) -> None:
    """Up to ``seconds``, or until ``stop`` (or ``wake``, cleared then) is set."""
    waits = [asyncio.ensure_future(stop.wait())]
    if wake is not None:
        waits.append(asyncio.ensure_future(wake.wait()))
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
        if wake is not None:
            wake.clear()


async def _demo(
    *,
    nodes: int,
    duration: float,
    seed: int,
    port: int | None,
    out: TextIO,
    plain: bool = False,
    faults: Sequence[Fault] = (),
) -> int:
    clock = LoopClock()
    metrics = Metrics(node_series=NodeSeriesPolicy.of(SETTINGS))
    cloud, specs = build(nodes, seed, clock, metrics=metrics)
    manager, store, side = local_cluster(
        cloud.provider, SETTINGS, specs, metrics=metrics, clock=clock, seed=seed
    )
    stop = stop_on_signals()
    started = clock.monotonic()
    async with serve_metrics(metrics, lambda: manager.ready, port, out) as notice, asyncio.TaskGroup() as tg:
        reconciler = tg.create_task(manager.run(), name="manager")
        pods = tg.create_task(workload(side, store, random.Random(seed + 1), stop), name="workload")
        faulty = tg.create_task(inject(cloud, faults, clock, started), name="faults")
        with display(manager, metrics, cloud.calls, clock, out, plain=plain, status=notice) as show:
            wake = resized() if out.isatty() and not plain else None
            while not stop.is_set():
                show()
                timeout = 1.0
                if duration:
                    timeout = min(timeout, max(duration - (clock.monotonic() - started), 0.0))
                    if timeout == 0:
                        stop.set()
                        break
                await _pause(stop, timeout, wake)
        reconciler.cancel()
        pods.cancel()
        faulty.cancel()
    totals = [n.stats for n in manager.nodes.values()]
    mutating = sum(n for op, n in cloud.calls.items() if not op.startswith("Describe"))
    out.write(
        f"\nsummary: {plural(len(totals), 'node')}, {clock.monotonic() - started:.1f}s, "
        f"pool {plural(sum(s.available for s in totals), 'address', 'addresses')}, "
        f"used {sum(s.used for s in totals)}, "
        f"nodes in deficit {sum(1 for s in totals if s.needed > 0)}, mutating API calls {mutating}, "
        f"read API calls {sum(cloud.calls.values()) - mutating}\n"
    )
    if notice:  # said when the endpoint started, but a terminal's view covered it since
        out.write(notice + "\n")
    return 0


def resized() -> asyncio.Event:
    """An event set when the terminal is resized (where the loop takes signal handlers): the view
    is redrawn at once at the new size rather than at its next tick."""
    event = asyncio.Event()
    with contextlib.suppress(NotImplementedError, RuntimeError, AttributeError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGWINCH, event.set)
    return event


def run_demo(
    *,
    nodes: int = 50,
    duration: float = 60.0,
    seed: int = 1,
    port: int | None = None,
    plain: bool = False,
    faults: Sequence[Fault] = (),
) -> int:
    try:
        return asyncio.run(
            _demo(
                nodes=nodes,
                duration=duration,
                seed=seed,
                port=port,
                out=sys.stdout,
                plain=plain,
                faults=faults,
            )
        )
    except KeyboardInterrupt:
        return 0
