"""``make bench`` (``python -m bench``): run every benchmark and write docs/PERFORMANCE.md.

Each figure is reported next to a reference measured in the same run: the lower bound of API calls,
the bound EC2's buckets allow, the reference operator's algorithm, the 1,000-node run for growth.
``--quick`` runs small sizes (a smoke run; the test suite uses it) and prints instead of writing;
a full run also draws the report's figures into docs/img/ (bench/figures.py).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import structlog

from bench import (
    agent_restart,
    api_efficiency,
    burst,
    cni_plugin,
    convergence,
    cpu_memory,
    datapath_cni,
    figures,
    latency,
)
from bench.report import Results, machine, publish, render

OUT = Path(__file__).resolve().parents[1] / "docs" / "PERFORMANCE.md"

FULL: dict[str, tuple[int, ...]] = {
    "api": (100, 1000),
    "burst": (burst.NODES,),
    "convergence": (1000, 5000),
    "cpu": (1000, 10_000, 100_000),
    "latency": (1000, 300),
    "plugin": (200,),
    "restart": (10,),
}
QUICK: dict[str, tuple[int, ...]] = {
    "api": (30,),
    "burst": (60,),
    "convergence": (100,),
    "cpu": (200, 1000),
    "latency": (100, 30),
    "plugin": (10,),
    "restart": (1,),
}


def run(sizes: dict[str, tuple[int, ...]], *, progress: bool = True) -> Results:
    def step(name: str) -> None:
        if progress:
            print(f"bench: {name}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    step("API efficiency")
    phases, steady = api_efficiency.measure(sizes["api"])
    step("convergence under EC2's buckets, and the reference operator")
    converged = convergence.measure(sizes["convergence"])
    step("a burst of joining nodes, with and without ready interfaces")
    bursts = burst.measure(sizes["burst"][0])
    step("CPU and memory")
    cpus = [cpu_memory.cpu(n) for n in sizes["cpu"]]
    memories = [cpu_memory.memory(n) for n in sizes["cpu"]]
    step("event to IPs")
    nodes, events = sizes["latency"]
    lat = latency.measure(nodes, events)
    step("CNI plugin against a bare interpreter and host-local")
    plugin = cni_plugin.measure(sizes["plugin"][0])
    step("an agent restart as the runtimes see it, idle and loaded")
    restart = agent_restart.measure(sizes["restart"][0])
    step("CNI ADD and DEL with the node datapath, against ptp and host-local")
    datapath = datapath_cni.measure(sizes["plugin"][0])
    return Results(
        machine=machine(),
        phases=phases,
        steady=steady,
        convergence=converged,
        cpu=cpus,
        memory=memories,
        latency=lat,
        plugin=plugin,
        restart=restart,
        datapath=datapath,
        burst=bursts,
        seconds=time.perf_counter() - started,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes; print, do not write the report")
    parser.add_argument("--out", type=Path, default=OUT, help=f"report path (default {OUT})")
    args = parser.parse_args(argv)
    # The reconciler logs every call at info; a benchmark of thousands of nodes wants warnings only.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    results = run(QUICK if args.quick else FULL)
    publish(render(results), args.out, quick=args.quick, name="bench")
    if not args.quick:  # the pictures the report links to, beside it
        for path in figures.draw(results, args.out.parent / "img"):
            print(f"bench: drew {path}", file=sys.stderr)
    return 0 if results.all_met() else 1


if __name__ == "__main__":
    sys.exit(main())
