"""The controller of the scale benchmark: the real ``eni-ipam run``, measured from inside.

``python -m bench.scale_run --ec2 URL --kubeconfig FILE --nodes N --mode fresh|handover`` runs the
service exactly as ``eni-ipam run`` does (:class:`eni_ipam.app.service.Service`: the AWS provider over
boto3 against the EC2 front end, the Kubernetes node source over the fake API server, Lease election,
the metrics endpoint) in this process, with a loop-lag probe beside it, and prints one JSON object:

* ``fresh``: a start with pools that have no status yet. Start to ready, the first status writes (in
  order), every status written, then a full resync (CPU, wall, worst stall), a resync with 1 % of the
  instances changed behind the controller's back (the apply's time), a planning pass over every
  node, scrapes of ``/metrics`` (time, size, worst stall), peak and steady RSS.
* ``handover``: a start on pools a previous leader brought up to date: start to ready, and the status
  writes once every node has had its pass (expected: none). With ``--stay`` it prints its figures and
  goes on leading until it is killed: the leader of the two-replica run.
* ``standby``: a second replica beside that leader, as the chart's warm standby (its informers
  synced, the Lease another's). It prints one ``standby {...}`` line once it stands by, then, after
  the leader was killed, its figures: when it took the Lease and made its first mutating cloud call
  (on the system's monotonic clock, comparable with the killer's), its status writes and peak RSS.

Every figure is read off this process (CPU of all its threads, VmRSS/VmHWM) or off the loop probe.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Coroutine, Generator, Sequence
from pathlib import Path
from typing import Any

from bench.probe import LoopProbe, cpu_seconds, peak_rss_mb, phase, rss_mb
from eni_ipam.app.runconfig import load_config_mapping
from eni_ipam.app.service import Service
from eni_ipam.core.manager import NodeManager
from eni_ipam.core.planner import node_stats, plan_allocation

CHANGED_SHARE = 0.01
SCRAPES = 3


def config(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "provider": "aws",
        "aws": {
            "region": "us-east-1",
            "endpoint_url": args.ec2,
            "allow_plain_http": True,
            "vpc_id": args.vpc,
        },
        "node_source": "kubernetes",
        "kubernetes": {
            "kubeconfig": args.kubeconfig,
            "lease_namespace": "kube-system",
            "identity": f"bench-{args.mode}",
            "status_qps": args.status_qps,
            "status_burst": int(args.status_qps),
        },
        "server": {"host": "127.0.0.1", "port": args.port, "probe_port": 0},
        "settings": {"cluster_name": "bench", "gc_interval": "0s"},
        "log_level": "warning",
    }


class Mutations:
    """When this replica took the Lease (its first term) and started its first mutating cloud call (the
    first call the mutation fence let through): a class-level wrap of the fence, so the service's own
    code runs unchanged. Times are ``time.perf_counter()``: CLOCK_MONOTONIC on Linux, one clock for
    every process of the machine."""

    def __init__(self) -> None:
        self.term_at: float | None = None
        self.first_at: float | None = None
        self.calls = 0

    def install(self) -> None:
        from eni_ipam.core.fence import Fence

        enter, renewed = Fence.enter, Fence.renewed
        mutations = self

        def entered(fence: Fence) -> None:
            enter(fence)  # raises when the call is refused: not a call
            mutations.calls += 1
            if mutations.first_at is None:
                mutations.first_at = time.perf_counter()

        def term(fence: Fence, until: float) -> None:
            if mutations.term_at is None:
                mutations.term_at = time.perf_counter()
            renewed(fence, until)

        setattr(Fence, "enter", entered)  # noqa: B010 (a method, replaced on the class)
        setattr(Fence, "renewed", term)  # noqa: B010


class Recorder:
    """What the controller writes to the API server, by name and in order (a class-level wrap of the
    Kubernetes adapter's patch: the service's own code runs unchanged)."""

    def __init__(self) -> None:
        self.status_writes: list[str] = []
        self.in_flight = 0
        """Writes sent and not yet answered: a status is counted once its write returns."""

    def install(self) -> None:
        from eni_ipam.kube.api import KubeApi

        for method in ("patch", "json_patch"):
            setattr(KubeApi, method, self._recording(getattr(KubeApi, method)))

    def _recording(self, original: Callable[..., Any]) -> Callable[..., Any]:
        recorder = self

        async def write(api: Any, kind: Any, name: Any, *args: Any, **kwargs: Any) -> Any:
            recorder.in_flight += 1
            try:
                result = await original(api, kind, name, *args, **kwargs)
            finally:
                recorder.in_flight -= 1
            if kwargs.get("status"):
                recorder.status_writes.append(str(name))
            return result

        return write


async def until(condition: Callable[[], bool], *, within: float, what: str, step: float = 0.5) -> None:
    deadline = time.perf_counter() + within
    while not condition():
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{what} did not happen within {within} s")
        await asyncio.sleep(step)


def settled(service: Service, recorder: Recorder) -> bool:
    """Every node had its pass and nothing is queued for the API server or on its way there (the
    writer takes a status off its queue before the write is answered). The cheap checks come first:
    ``busy()`` looks at every node, and the benchmark must not load the loop it measures."""
    manager = service.state.manager
    if manager is None or not manager.ready or recorder.in_flight:
        return False
    writer = getattr(service.records.target, "writer", None)  # the Kubernetes node source's
    if writer is not None and writer.pending:
        return False
    return not manager.busy()


def scrape(port: int) -> tuple[float, int]:
    """One ``GET /metrics`` from another thread, as Prometheus does: seconds and bytes."""
    started = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        size = len(answer.read())
    return time.perf_counter() - started, size


async def in_thread(fn: Callable[[], Any]) -> Any:
    result: list[Any] = []
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    def run() -> None:
        result.append(fn())
        loop.call_soon_threadsafe(done.set)

    threading.Thread(target=run, daemon=True).start()
    await done.wait()
    return result[0]


def change_instances(manager: NodeManager, endpoint: str, share: float, seed: int = 5) -> int:
    """Add one address to ``share`` of the instances' first interface, through EC2's API directly
    (behind the controller's back): what the next resync must notice, and only that."""
    import boto3

    client = boto3.session.Session().client("ec2", region_name="us-east-1", endpoint_url=endpoint)
    nodes = [n for n in manager.nodes.values() if n.instance is not None and n.instance.interfaces]
    chosen = random.Random(seed).sample(nodes, max(int(len(nodes) * share), 1))
    for node in chosen:
        assert node.instance is not None
        client.assign_private_ip_addresses(
            NetworkInterfaceId=node.instance.interfaces[-1].id, SecondaryPrivateIpAddressCount=1
        )
    return len(chosen)


class PageKeeper:
    """Every page of an EC2 answer as botocore hands it to the parser: counted (pages, bytes by
    operation), the first ``keep`` of each operation kept for the botocore reference."""

    def __init__(self, keep: int = 3) -> None:
        self.keep = keep
        self.read: dict[str, dict[str, Any]] = {}
        self.bodies: dict[str, list[bytes]] = {}

    def __call__(self, operation_model: Any, response_dict: dict[str, Any], **_: Any) -> None:
        name, body = operation_model.name, response_dict["body"]
        read = self.read.setdefault(name, {"pages": 0, "bytes": 0})
        read["pages"] += 1
        read["bytes"] += len(body)
        kept = self.bodies.setdefault(name, [])
        if len(kept) < self.keep:
            kept.append(bytes(body))

    def write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        summary = {}
        for name, read in self.read.items():
            files = []
            for i, body in enumerate(self.bodies.get(name, [])):
                (directory / f"{name}-{i}.xml").write_bytes(body)
                files.append(f"{name}-{i}.xml")
            summary[name] = {**read, "kept": files}
        (directory / "summary.json").write_text(json.dumps(summary))


def requests(service: Service) -> dict[str, float]:
    """Requests sent to EC2 so far, by operation."""
    return {
        dict(k)["operation"]: v for k, v in service.metrics.samples("eni_ipam_api_requests_total").items()
    }


def _minus(after: dict[str, float], before: dict[str, float]) -> dict[str, int]:
    return {op: int(n - before.get(op, 0)) for op, n in sorted(after.items()) if n - before.get(op, 0)}


def plan_every_node(manager: NodeManager) -> float:
    """Seconds to compute the stats and an allocation plan of every node (a pass's pure part)."""
    subnets, groups = manager.view.planner_subnets(), manager.view.security_groups
    started = time.perf_counter()
    for node in manager.nodes.values():
        instance, limits = node.instance, node.limits()
        if instance is None or limits is None:
            continue
        spec = node.resource.spec
        stats = node_stats(spec, instance, limits, used=node.resource.used, prefix_delegation=False)
        plan_allocation(spec, instance, limits, subnets, groups, must=max(stats.needed, 1))
    return time.perf_counter() - started


class OwnTime:
    """Drives a coroutine and adds up the time it ran itself, between its suspensions: what it cost
    the loop, without whatever else ran while it waited (other tasks, the passes it triggered)."""

    def __init__(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        self.coroutine = coroutine
        self.busy = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        send, throw = self.coroutine.send, self.coroutine.throw
        value: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                yielded = throw(error) if error is not None else send(value)
            except StopIteration as stop:
                self.busy += time.perf_counter() - started
                return stop.value
            self.busy += time.perf_counter() - started
            value, error = None, None
            try:
                value = yield yielded
            except BaseException as exc:  # cancellation: handed on to the coroutine
                error = exc


def timed_apply(manager: NodeManager) -> list[tuple[float, float]]:
    """Wrap the manager's resync apply (its second half, after the cloud answered) to time each call:
    its own time on the loop, and its wall time (which includes whatever else ran between its
    slices: the passes of the nodes it triggered, events)."""
    seconds: list[tuple[float, float]] = []
    apply = manager.apply_resync

    async def timed(snapshot: Any, *, started: float) -> None:
        began = time.perf_counter()
        own = OwnTime(apply(snapshot, started=started))
        await own
        seconds.append((own.busy, time.perf_counter() - began))

    manager.apply_resync = timed  # type: ignore[method-assign]
    return seconds


async def run(args: argparse.Namespace) -> dict[str, Any]:
    recorder = Recorder()
    recorder.install()
    mutations = Mutations()
    mutations.install()
    stop = asyncio.Event()
    environ = {**os.environ, "POD_NAMESPACE": "kube-system"}
    service = Service(load_config_mapping(config(args)), stop=stop, environ=environ)
    probe = LoopProbe()
    probe.start()
    out: dict[str, Any] = {"nodes": args.nodes, "mode": args.mode}
    started, cpu_started = time.perf_counter(), cpu_seconds()
    serving = asyncio.create_task(service.serve(), name="bench-service")
    try:
        if args.mode == "standby":
            return await stand_by(service, recorder, mutations, args, out)
        await until(lambda: _leading(service), within=args.timeout, what="ready", step=0.02)
        out["start_to_ready_s"] = time.perf_counter() - started
        out["start_cpu_s"] = cpu_seconds() - cpu_started
        out["ready_rss_mb"] = rss_mb()
        out["start_stall_s"] = probe.worst(started)
        manager = service.state.manager
        assert manager is not None
        await until(
            lambda: settled(service, recorder),
            within=args.timeout,
            what="every node passed, statuses written",
        )
        out["settled_s"] = time.perf_counter() - started
        out["status_writes"] = len(recorder.status_writes)
        out["first_status_writes"] = recorder.status_writes[: args.first]
        if args.mode == "handover":
            await manager.resync()  # a resync changes nothing either
            await asyncio.sleep(1.0)
            out["status_writes_after_resync"] = len(recorder.status_writes)
            out["peak_rss_mb"] = peak_rss_mb()
            if args.stay:  # the leader of the two-replica run: it leads on until it is killed
                print(json.dumps(out), flush=True)
                await asyncio.Event().wait()
            return out
        applies = timed_apply(manager)
        before = requests(service)
        events = manager.provider.inner.api.client.client.meta.events  # type: ignore[attr-defined]
        keeper = PageKeeper()
        events.register("before-parse.ec2.*", keeper)
        # One resync alone: the periodic one, if under way, ends first (one started meanwhile waits
        # for the measured one).
        await until(lambda: not manager.resyncing, within=args.timeout, what="no resync under way", step=0.05)
        with phase(probe) as full:
            await manager.resync()
        events.unregister("before-parse.ec2.*", keeper)
        if args.pages:
            keeper.write(Path(args.pages))
        del keeper  # its pages are the benchmark's, not the controller's: not in the RSS read later
        out["resync"] = {
            "wall_s": full.wall,
            "cpu_s": full.cpu,
            "stall_s": full.stall,
            "apply_s": applies[-1][0],
            "apply_wall_s": applies[-1][1],
            "requests": _minus(requests(service), before),
        }
        out["next_resync_in_s"] = manager.next_resync_in
        changed = await asyncio.to_thread(change_instances, manager, args.ec2, CHANGED_SHARE)
        await until(lambda: not manager.resyncing, within=args.timeout, what="no resync under way", step=0.05)
        with phase(probe) as again:
            await manager.resync()
        out["resync_changed"] = {
            "instances": changed,
            "wall_s": again.wall,
            "cpu_s": again.cpu,
            "stall_s": again.stall,
            "apply_s": applies[-1][0],
            "apply_wall_s": applies[-1][1],
        }
        await until(lambda: settled(service, recorder), within=args.timeout, what="the changed nodes settled")
        planning = time.perf_counter()
        out["plan_all_s"] = plan_every_node(manager)  # on the loop, on purpose: nothing else runs
        excluded = (planning, time.perf_counter())
        await asyncio.sleep(0.5)  # the probe's first wake after the planning is the planning's
        scrapes = []
        for _ in range(SCRAPES):
            with phase(probe) as measured:
                seconds, size = await in_thread(lambda: scrape(args.port))
            scrapes.append({"seconds": seconds, "bytes": size, "stall_s": measured.stall})
        out["scrapes"] = scrapes
        gc.collect()
        out["steady_rss_mb"] = rss_mb()
        # The planning measurement holds the loop by design (it times the planner alone): its window
        # is left out of the service's stalls.
        stalls = [
            (t, s)
            for t, s in probe.stalls(started, over=0.0)
            if not excluded[0] <= started + t <= excluded[1] + s
        ]
        out["worst_stall_s"] = max((s for _, s in stalls), default=0.0)
        out["stalls_over_100ms"] = [(t, s) for t, s in stalls if s > 0.1]
        out["stalls_explained"] = probe.explain(started)
        out["gc_pauses"] = sorted(probe.gc_pauses, key=lambda p: -p[1])[:10]
        # Last, as it walks every object on the loop (after the stalls were read) and its own table
        # of what it saw takes memory (after the peak was read).
        out["peak_rss_mb"] = peak_rss_mb()
        out["bytes_per_node"] = held_per_node(service, args.nodes)
        return out
    finally:
        out.setdefault("peak_rss_mb", peak_rss_mb())
        stop.set()
        await serving
        await probe.stop()


async def stand_by(
    service: Service, recorder: Recorder, mutations: Mutations, args: argparse.Namespace, out: dict[str, Any]
) -> dict[str, Any]:
    """The warm standby: synced, standing by (one ``standby`` line), then taking over from a killed
    leader: when it took the Lease and made its first mutating call, until every node had its pass."""
    started = time.perf_counter()
    await until(
        lambda: service.state.role == "standby" and service.state.caches_synced,
        within=args.timeout,
        what="standing by with the informers synced",
        step=0.05,
    )
    out["synced_s"] = time.perf_counter() - started
    out["standby_rss_mb"] = rss_mb()
    out["standby_peak_rss_mb"] = peak_rss_mb()
    print("standby " + json.dumps(out), flush=True)
    await until(
        lambda: mutations.first_at is not None, within=args.timeout, what="a mutating call", step=0.01
    )
    out["term_at"], out["first_mutation_at"] = mutations.term_at, mutations.first_at
    before = len(recorder.status_writes)
    await until(
        lambda: settled(service, recorder), within=args.timeout, what="every node passed, statuses written"
    )
    out["settled_at"] = time.perf_counter()
    out["mutating_calls"] = mutations.calls
    out["requests"] = {op: int(n) for op, n in requests(service).items()}
    out["status_writes"] = len(recorder.status_writes)
    out["status_writes_before_first_mutation"] = before
    gc.collect()
    out["steady_rss_mb"] = rss_mb()
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def held_per_node(service: Service, nodes: int) -> dict[str, float]:
    """Bytes held per node, part by part (every object reached, each once, counted with the first
    part reaching it): the core state (the nodes, cloud view and node tables the manager holds,
    short of the provider and the metrics they reference), the EC2 client (its reuse caches beyond
    the objects the core holds), the Node informer's cache, the ENIPool informer's, the status
    writer, the metrics."""
    from eni_ipam_testkit.sizes import deep_sizes

    source = service.records.target
    manager = service.state.manager
    assert manager is not None
    shared = (manager.provider, service.metrics, manager.settings, manager.clock)
    parts = {
        "core": manager.held(),
        "ec2_client": manager.provider,
        "nodes_informer": getattr(getattr(source, "nodes", None), "store", None),
        "pools_informer": getattr(getattr(source, "pools", None), "store", None),
        "status_writer": getattr(source, "writer", None),
        "metrics": service.metrics,
    }
    sizes = deep_sizes(*parts.values(), skip=shared)
    return {name: size / nodes for name, size in zip(parts, sizes, strict=True)}


def _leading(service: Service) -> bool:
    manager = service.state.manager
    return service.state.role == "leader" and manager is not None and manager.ready


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale_run", description=__doc__)
    parser.add_argument("--ec2", required=True, help="the EC2 front end's URL")
    parser.add_argument("--vpc", default="vpc-0f1ee70000000001")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--mode", choices=("fresh", "handover", "standby"), default="fresh")
    parser.add_argument(
        "--stay", action="store_true", help="handover: print the figures, then lead until killed"
    )
    parser.add_argument("--port", type=int, required=True, help="the metrics endpoint's port")
    parser.add_argument("--status-qps", type=float, default=10.0)
    parser.add_argument("--first", type=int, default=50, help="how many first status writes to report")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--pages", help="where to keep the pages the full resync read (fresh mode)")
    args = parser.parse_args(argv)
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    print(json.dumps(asyncio.run(run(args))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
