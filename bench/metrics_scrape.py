"""Benchmark — scraping the controller's ``/metrics`` at cluster scale (docs/metrics.md, decision 0019).

:func:`measure` gauges ``nodes`` nodes in a controller's
:class:`~eni_ipam.adapters.metrics.controller.Metrics` (a share of them short of addresses), with the
other families filled as a large cluster fills them
(200 subnets, a dozen cloud operations, latency histograms), and serves ``/metrics`` with the real
endpoint on 127.0.0.1. On the same event loop a manager-like workload keeps changing every node's
stats (:data:`UPDATES_PER_SECOND`, in slices of :data:`SLICE` nodes with a yield between slices, as
passes do), and a probe sleeps 1 ms in a loop and records each overshoot: how long the loop was held.
Windows in which a client in another thread scrapes back to back alternate with windows without
scrapes, so both see the same machine. It reports:

* **freeze**: what a scrape holds the loop for (reading the families the loop owns), and **render**:
  writing the text from that copy, in a thread when served (best of a few each), and the size;
* the worst and the 99th-percentile loop stall while scraping and without, the worst stall while
  scraping that overlapped no full garbage collection, and the longest such collection (it holds every
  thread, for as long as the process's heap takes to walk, whichever thread allocated last).

:func:`memory` gives the bytes per node of the metrics state, in a fresh interpreter (tracemalloc).
Both take a :class:`~eni_ipam.adapters.metrics.selection.NodeSeriesPolicy` (default: the settings' default).
``python -m bench.metrics_scrape`` prints them at 1,000, 10,000 and 100,000 nodes (``--all``: also
with every node's series exported); it is not part of ``make bench`` yet.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import random
import subprocess
import sys
import threading
import time
import tracemalloc
import urllib.request
from typing import Any

from bench.cpu_memory import best_seconds
from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.adapters.metrics.exposition import render
from eni_ipam.adapters.metrics.selection import NodeSeriesPolicy
from eni_ipam.adapters.server import make_app, start_server
from eni_ipam.core.model import NodeStats, Subnet

SLICE = 200
"""Nodes the workload updates between two yields to the loop."""
WINDOWS = 4
"""Windows with scrapes, each after one without."""
UPDATES_PER_SECOND = 20_000
"""Node updates a second: every node of 100,000 every 5 s, far more than resyncs and passes make."""
SUBNETS = 200
OPERATIONS = (
    "AssignPrivateIpAddresses",
    "UnassignPrivateIpAddresses",
    "CreateNetworkInterface",
    "AttachNetworkInterface",
    "DeleteNetworkInterface",
    "ModifyNetworkInterfaceAttribute",
    "DescribeInstances",
    "DescribeNetworkInterfaces",
    "DescribeSubnets",
    "DescribeSecurityGroups",
    "DescribeInstanceTypes",
    "CreateTags",
)


@dataclasses.dataclass(frozen=True)
class Scrape:
    nodes: int
    short: float
    """Share of the nodes short of addresses."""
    exported: int
    """Nodes with per-node series."""
    series: int
    """Samples in one scrape."""
    bytes: int
    freeze_seconds: float
    """What a scrape holds the loop for: reading the families the loop owns (best of a few)."""
    render_seconds: float
    """Writing the text from the frozen scrape, in a thread when served (best of a few)."""
    scrapes: int
    """Scrapes served while the stalls were measured."""
    max_stall_seconds: float
    """Worst loop stall while scrapes were served, whatever its cause."""
    p99_stall_seconds: float
    max_stall_outside_full_gc_seconds: float
    """Worst loop stall while scrapes were served that overlapped no full garbage collection."""
    max_full_gc_seconds: float
    """Longest full garbage collection while scrapes were served: it holds every thread, for as
    long as the process's heap takes to walk, whoever allocated last."""
    baseline_max_stall_seconds: float
    """Worst loop stall of the same workload without scrapes, in windows between the scraping ones
    (the machine's and the workload's own)."""
    baseline_p99_stall_seconds: float


def _name(n: int) -> str:
    return f"ip-10-{n // 65536}-{n // 256 % 256}-{n % 256}.eu-west-1.compute.internal"


def _stats(rng: random.Random, short: bool) -> NodeStats:
    used = rng.randrange(0, 40)
    return NodeStats(available=used + 8, used=used, needed=rng.randrange(1, 16) if short else 0)


def populate(nodes: int, *, short: float, policy: NodeSeriesPolicy | None = None, seed: int = 1) -> Metrics:
    """A controller's metrics as a cluster of ``nodes`` nodes fills them."""
    rng = random.Random(seed)
    metrics = Metrics(node_series=policy)
    subnets = [
        Subnet(id=f"subnet-{k:04d}", vpc_id="vpc", zone=f"z{k % 3}", cidr=f"10.{k}.0.0/18", available=9000)
        for k in range(SUBNETS)
    ]
    metrics.replace_subnets(subnets)
    for subnet in subnets:
        metrics.addresses_allocated(subnet=subnet.id, count=10)
        metrics.addresses_released(subnet=subnet.id, count=3)
        metrics.interface_created(subnet=subnet.id, outcome="success")
    for operation in OPERATIONS:
        for outcome in ("ok", "RequestLimitExceeded"):
            metrics.api_call(operation=operation, outcome=outcome, seconds=0.1)
        metrics.api_request(operation=operation, throttled=True)
        metrics.rate_limit_wait(operation=operation, seconds=0.01)
    for kind in ("assign", "assign-prefixes", "create-interface"):
        metrics.allocation_finished(kind=kind, ok=True, seconds=0.2)
        metrics.allocation_finished(kind=kind, ok=False, seconds=0.2)
    metrics.release_finished(ok=True, seconds=0.1)
    metrics.deficit_resolved(seconds=3.0)
    metrics.report_role(ready=lambda: True, leader=lambda: True)
    for n in range(nodes):
        metrics.set_node(_name(n), _stats(rng, rng.random() < short))
    metrics.show_totals()
    return metrics


def measure(
    nodes: int,
    *,
    short: float = 0.01,
    policy: NodeSeriesPolicy | None = None,
    updates_per_second: float = UPDATES_PER_SECOND,
    seconds: float = 4.0,
    runs: int = 3,
) -> Scrape:
    """One scrape of ``nodes`` nodes, ``short`` of them in deficit, under ``policy``."""
    metrics = populate(nodes, short=short, policy=policy)
    body = render(metrics.freeze())
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    freeze_seconds = best_seconds(runs, metrics.freeze)
    render_seconds = best_seconds(runs, lambda: render(metrics.freeze())) - freeze_seconds
    stalls = asyncio.run(_stalls(metrics, nodes, short=short, rate=updates_per_second, seconds=seconds))
    return Scrape(
        nodes=nodes,
        short=short,
        exported=len(metrics.node_ips),
        series=series,
        bytes=len(body),
        freeze_seconds=freeze_seconds,
        render_seconds=max(render_seconds, 0.0),
        **stalls,
    )


class _Collections:
    """Full garbage collections (start, end), recorded while installed."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                self._started = time.perf_counter()
            else:
                self.spans.append((self._started, time.perf_counter()))

    def overlaps(self, start: float, end: float) -> bool:
        return any(a < end and b > start for a, b in self.spans)


async def _stalls(
    metrics: Metrics, nodes: int, *, short: float, rate: float, seconds: float
) -> dict[str, Any]:
    """Stalls of the loop in windows with scrapes and without, alternating, so both see the same
    machine (other processes, the workload's own slices)."""
    rng = random.Random(2)
    names = [_name(n) for n in range(nodes)]
    short_nodes = {n for n in range(nodes) if rng.random() < short}
    stop = asyncio.Event()

    async def workload() -> None:
        while not stop.is_set():
            for start in range(0, nodes, SLICE):
                began = time.perf_counter()
                for n in range(start, min(start + SLICE, nodes)):
                    metrics.set_node(names[n], _stats(rng, n in short_nodes))
                await asyncio.sleep(max(SLICE / rate - (time.perf_counter() - began), 0.0))
                if stop.is_set():
                    return

    lags: dict[str, list[tuple[float, float]]] = {"baseline": [], "scraping": [], "draining": []}
    phase = ["draining"]

    async def probe() -> None:
        while not stop.is_set():
            during = phase[0]
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            if phase[0] == during:
                lags[during].append((started, time.perf_counter() - started - 0.001))

    collections = _Collections()
    runner = await start_server(make_app(metrics, lambda: True), host="127.0.0.1", port=0, metrics=metrics)
    port = runner.addresses[0][1]
    idle = threading.Event()
    served = [0]

    def scraper() -> None:
        while not stop.is_set():
            if phase[0] != "scraping":
                idle.set()
                time.sleep(0.01)
                continue
            idle.clear()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as response:
                response.read()
            served[0] += 1

    thread = threading.Thread(target=scraper, daemon=True)
    tasks = [asyncio.create_task(workload()), asyncio.create_task(probe())]
    try:
        thread.start()
        await asyncio.sleep(0.5)  # the workload settles
        window = seconds / WINDOWS
        for _ in range(WINDOWS):
            phase[0] = "baseline"
            await asyncio.sleep(window)
            gc.callbacks.append(collections)
            phase[0] = "scraping"
            await asyncio.sleep(window)
            phase[0] = "draining"
            while not idle.is_set():  # the last scrape ends
                await asyncio.sleep(0.01)
            gc.callbacks.remove(collections)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        while thread.is_alive():
            await asyncio.sleep(0.01)
        await runner.cleanup()
    scraping, baseline = [lag for _, lag in lags["scraping"]], [lag for _, lag in lags["baseline"]]
    return {
        "scrapes": served[0],
        "max_stall_seconds": max(scraping),
        "p99_stall_seconds": _p99(scraping),
        "max_stall_outside_full_gc_seconds": max(
            (lag for start, lag in lags["scraping"] if not collections.overlaps(start, start + lag + 0.001)),
            default=0.0,
        ),
        "max_full_gc_seconds": max((b - a for a, b in collections.spans), default=0.0),
        "baseline_max_stall_seconds": max(baseline),
        "baseline_p99_stall_seconds": _p99(baseline),
    }


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def memory(nodes: int, *, short: float = 0.01, policy: NodeSeriesPolicy | None = None) -> float:
    """Bytes per node the metrics state holds for ``nodes`` nodes, measured with tracemalloc in a
    fresh interpreter (``python -m bench.metrics_scrape --memory``). The nodes' stats are the
    manager's and are made before measuring."""
    policy = policy or NodeSeriesPolicy()
    args = ["--memory", str(nodes), str(short), str(policy.all_up_to), str(policy.most)]
    out = subprocess.run(
        [sys.executable, "-m", "bench.metrics_scrape", *args], check=True, capture_output=True, text=True
    ).stdout
    return float(json.loads(out.strip().splitlines()[-1])["bytes_per_node"])


def _memory_child(nodes: int, short: float, all_up_to: int, most: int) -> None:
    rng = random.Random(1)
    stats = [(_name(n), _stats(rng, rng.random() < short)) for n in range(nodes)]
    metrics = Metrics(node_series=NodeSeriesPolicy(all_up_to=all_up_to, most=most))
    gc.collect()
    tracemalloc.start()
    for name, node_stats in stats:
        metrics.set_node(name, node_stats)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    print(json.dumps({"bytes_per_node": held / nodes}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_scrape", description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="*", default=[1000, 10_000, 100_000])
    parser.add_argument("--short", type=float, nargs="*", default=[0.01, 1.0], help="shares of nodes short")
    parser.add_argument("--all", action="store_true", help="also with every node's series exported")
    args = parser.parse_args(argv)
    for nodes in args.nodes:
        policies: list[tuple[str, NodeSeriesPolicy | None]] = [("default", None)]
        if args.all:
            policies.append(("all", NodeSeriesPolicy(all_up_to=nodes, most=nodes)))
        for label, policy in policies:
            for short in args.short:
                scrape = measure(nodes, short=short, policy=policy)
                per_node = memory(nodes, short=short, policy=policy)
                print(json.dumps({"policy": label, **dataclasses.asdict(scrape), "bytes_per_node": per_node}))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--memory"]:
        _memory_child(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(main())
