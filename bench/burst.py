"""Benchmark 2b — a burst of joining nodes, with and without the pool of ready interfaces.

``python -m bench.burst`` (``--quick``: 60 nodes, printed) runs one scenario
(:func:`scenario`: ``NODES`` nodes join within two minutes, each needing one new interface for its
``min_allocate``) in the simulator, on virtual time with EC2's published buckets on the client
side, once per variant of the settings, and reports side by side: seconds from the first join until
every node holds ``min_allocate`` (and the median and p99 of each node's own wait), and mutating
calls per joining node, those on the node's path and the pool's refills apart. A full run replaces
its section of docs/PERFORMANCE.md; ``make bench`` writes it with the rest.

The cluster: two zones, a /19 subnet each, m5.large instances (3 interfaces of 10 addresses),
``first_interface_index: 1`` (the primary interface is the node's own, as with custom networking)
and ``min_allocate: 9``: every joining node needs exactly one new interface, and nothing else. Two
nodes run before the burst, so the pool knows where nodes' first interfaces go, and the pool is
given five virtual minutes to fill. Each variant may add API latencies (``latency``): EC2 answers
a create in about a second, not at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path
from typing import Any

from eni_ipam.core.model import NodeStatus
from eni_ipam.simulator.scenario import parse_scenario
from eni_ipam.simulator.simloop import run_virtual
from eni_ipam.simulator.simulate import Simulation, StepResult

NODES = 500
WINDOW = 120.0
"""Seconds over which the nodes join, evenly spaced."""
MIN_ALLOCATE = 9
WARM_UP = 600.0
"""Virtual seconds the cluster runs before the burst (the pool fills meanwhile)."""
LIMIT = 1800.0
"""Virtual seconds after the first join by which every node must hold ``min_allocate``."""
TICK = 1.0
"""Virtual seconds between two looks, after the last join, at whether every node holds its minimum."""
ZONES = ("us-east-1a", "us-east-1b")
MUTATING = (
    "CreateNetworkInterface",
    "AttachNetworkInterface",
    "ModifyNetworkInterfaceAttribute",
    "AssignPrivateIpAddresses",
    "DeleteNetworkInterface",
)
LATENCY = {
    "CreateNetworkInterface": "1s",
    "AttachNetworkInterface": "1s",
    "ModifyNetworkInterfaceAttribute": "250ms",
    "AssignPrivateIpAddresses": "250ms",
}
"""EC2-like answer times (a create and an attach take about a second)."""


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    settings: dict[str, Any]


VARIANTS = (
    Variant("without the pool", {}),
    Variant(
        "pool, defaults (8 per subnet)",
        {"ready_interfaces_enabled": True},
    ),
    Variant(
        "pool sized for the burst (250 per subnet)",
        {"ready_interfaces_enabled": True, "ready_interfaces_per_subnet": 250, "ready_interfaces_max": 500},
    ),
)


@dataclasses.dataclass(frozen=True)
class BurstRun:
    variant: str
    latency: bool
    nodes: int
    all_seconds: float
    """From the first join until the last node held ``min_allocate``."""
    median_wait: float
    p99_wait: float
    """Each node's own wait, from its join until it held ``min_allocate``."""
    node_calls: dict[str, int]
    """Mutating calls on the nodes' path during the burst (the pool's refills taken out)."""
    refills: int
    """Ready interfaces the pool created during the burst (one CreateNetworkInterface each)."""
    takes: int
    """Joining nodes that attached a ready interface."""

    @property
    def calls_per_node(self) -> float:
        return sum(self.node_calls.values()) / self.nodes

    @property
    def all_calls_per_node(self) -> float:
        """Counting the create of every ready interface a node took (made before or during the
        burst): what serving the nodes cost in all."""
        return (sum(self.node_calls.values()) + self.takes) / self.nodes


def scenario(nodes: int, settings: dict[str, Any], *, latency: bool) -> dict[str, Any]:
    """The scenario as data (the same shape as a file under examples/scenarios)."""
    instances = [
        {"id": f"i-{n}", "type": "m5.large", "subnet": f"s-{n % 2}", "security_groups": ["sg-1"]}
        for n in range(nodes + 2)
    ]
    spec = {"first_interface_index": 1, "min_allocate": MIN_ALLOCATE}
    gap = WINDOW / nodes
    steps: list[dict[str, Any]] = []
    if latency:
        steps.append({"cloud": {"latency": LATENCY}})
    steps += [{"converge": "60s"}, {"advance": f"{WARM_UP:g}s"}]
    for n in range(2, nodes + 2):
        steps.append({"add_node": {"name": f"node{n}", "instance": f"i-{n}", **spec}})
        steps.append({"advance": f"{gap * 1000:.0f}ms"})
    return {
        "settings": settings,
        "cloud": {
            "vpcs": [{"id": "vpc-1", "cidr": "10.0.0.0/16"}],
            "subnets": [
                {"id": f"s-{k}", "vpc": "vpc-1", "zone": zone, "cidr": f"10.0.{32 * k}.0/19"}
                for k, zone in enumerate(ZONES)
            ],
            "security_groups": [{"id": "sg-1", "vpc": "vpc-1"}],
            "instances": instances,
        },
        "nodes": [{"name": f"node{n}", "instance": f"i-{n}", **spec} for n in range(2)],
        "steps": steps,
    }


class _Burst(Simulation):
    """The scenario's run, noting when each joining node's published status first holds
    ``min_allocate`` (at the end of the pass that got it there), and no per-step state."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.joined: dict[str, float] = {}
        self.reached: dict[str, float] = {}
        sink = self.manager.status_sink

        class Watch:
            def publish(watch, name: str, status: NodeStatus) -> None:
                if (
                    name in self.joined
                    and name not in self.reached
                    and status.stats.available >= MIN_ALLOCATE
                ):
                    self.reached[name] = self.clock.monotonic()
                sink.publish(name, status)

        self.manager.status_sink = Watch()

    def state(self) -> dict[str, Any]:
        return {}

    def add(self, entry: Any) -> None:
        if entry.name not in ("node0", "node1"):
            self.joined[entry.name] = self.clock.monotonic()
        super().add(entry)


def _counter(sim: Simulation, name: str) -> int:
    return int(sum(sim.metrics.samples(name).values()))


async def _run(nodes: int, variant: Variant, latency: bool) -> BurstRun:
    sim = _Burst(parse_scenario(scenario(nodes, variant.settings, latency=latency)))
    marks: dict[str, Any] = {}

    def on_step(result: StepResult) -> None:
        if result.kind == "add_node" and not marks:
            marks["calls"] = dict(sim.calls)
            marks["refills"] = _counter(sim, "eni_ipam_ready_interface_refills_total")
            marks["creates"] = _counter(sim, "eni_ipam_interface_creation_ops_total")

    async def burst() -> None:
        await sim.run(on_step)

    # The steps end with the last join; the run goes on (ticking) until every node holds its minimum.
    scenario_steps = sim.scenario.steps
    tail = parse_scenario({**scenario(1, {}, latency=False), "steps": [{"advance": f"{TICK:g}s"}]}).steps[0]
    ticks = int(LIMIT / TICK)
    sim.scenario = dataclasses.replace(sim.scenario, steps=(*scenario_steps, *[tail] * ticks))
    original = sim.execute

    async def execute(step: Any) -> list[str]:
        if step is tail and len(sim.reached) == len(sim.joined):
            return []  # done: the remaining ticks cost nothing
        return await original(step)

    sim.execute = execute  # type: ignore[method-assign]
    await burst()
    if len(sim.reached) < len(sim.joined):
        raise AssertionError(
            f"{variant.name}: {len(sim.joined) - len(sim.reached)} nodes never held the minimum"
        )
    first = min(sim.joined.values())
    waits = sorted(sim.reached[n] - sim.joined[n] for n in sim.joined)
    end = max(sim.reached.values())
    before = marks["calls"]
    refills = _counter(sim, "eni_ipam_ready_interface_refills_total") - marks["refills"]
    node_calls = {op: sim.calls.get(op, 0) - before.get(op, 0) for op in MUTATING}
    # The nodes' own creates (a refill's create is counted by the cloud when it is sent, by the
    # pool when it is answered: one may straddle the mark).
    node_calls["CreateNetworkInterface"] = (
        _counter(sim, "eni_ipam_interface_creation_ops_total") - marks["creates"]
    )
    takes = _counter(sim, "eni_ipam_ready_interface_takes_total")
    return BurstRun(
        variant=variant.name,
        latency=latency,
        nodes=len(sim.joined),
        all_seconds=round(end - first, 2),
        median_wait=round(statistics.median(waits), 2),
        p99_wait=round(waits[min(len(waits) - 1, int(len(waits) * 0.99))], 2),
        node_calls={op: n for op, n in node_calls.items() if n},
        refills=refills,
        takes=takes,
    )


def measure(nodes: int = NODES, *, latencies: tuple[bool, ...] = (False, True)) -> list[BurstRun]:
    """Every variant, with and without API latencies, each on a fresh virtual-time loop."""
    return [run_virtual(_run(nodes, v, latency)) for latency in latencies for v in VARIANTS]


HEADING = "## 2b. Burst scale-up: ready interfaces"


def section(runs: list[BurstRun]) -> str:
    nodes = runs[0].nodes if runs else NODES
    lines = [
        HEADING,
        "",
        f"{nodes} nodes join within {WINDOW:g} s (evenly spaced) on the in-memory cloud, virtual time, EC2's",
        "published buckets on the client side (`python -m bench.burst`, bench/burst.py). Every node needs",
        f"one new interface for its `min_allocate` ({MIN_ALLOCATE}: m5.large, `first_interface_index: 1`),",
        f"in one of two zones' /19 subnets; two nodes ran before, and the pool had {WARM_UP / 60:g} minutes",
        "to fill.",
        "The variants run in one process, from the same scenario: without the pool, the pool at its",
        "defaults, and a pool sized for the whole burst. With latency: create and attach answer in 1 s,",
        "modify and assign in 0.25 s. A node's wait: from its join to the end of the pass that gave it",
        "its minimum. Calls per node: mutating calls on the nodes' path during the burst; in all: with",
        "the create of each ready interface a node took. Refills: ready interfaces the pool made during",
        "the burst (between passes: it never makes a node wait).",
        "",
        "| latency | variant | all nodes at `min_allocate` (s) | wait p50 / p99 (s) | took a ready interface "
        "| calls per node | in all | refills | calls on the nodes' path |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        calls = ", ".join(f"{op} {n}" for op, n in sorted(r.node_calls.items()))
        lines.append(
            f"| {'yes' if r.latency else 'no'} | {r.variant} | {r.all_seconds:.1f} | "
            f"{r.median_wait:.2f} / {r.p99_wait:.2f} | {r.takes} | {r.calls_per_node:.2f} | "
            f"{r.all_calls_per_node:.2f} | {r.refills} | {calls} |"
        )
    lines += [
        "",
        "A node that takes a ready interface makes one call (`AttachNetworkInterface`); one that does not",
        "makes three (create, attach, delete-on-termination). What bounds the whole burst is the attach",
        "bucket (burst 50, 5 a second), which every variant spends once per node: 500 joins in two",
        "minutes are 4.2 a second, within its refill, so the time until every node holds its minimum",
        "barely moves; the pool's gains are the calls, the create and modify buckets left to other",
        "work, and each node's own wait where the cloud takes a second per call.",
        "",
    ]
    return "\n".join(lines)


def splice(text: str, new: str) -> str:
    """``text`` with this benchmark's section replaced by ``new``, or put before section 3."""
    at = text.find(f"\n{HEADING}\n")
    if at >= 0:
        end = text.find("\n## ", at + 1)
        return text[: at + 1] + new + (text[end + 1 :] if end >= 0 else "")
    before = text.find("\n## 3. ")
    if before < 0:
        return text.rstrip("\n") + "\n\n" + new
    return text[: before + 1] + new + "\n" + text[before + 1 :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="60 nodes, printed instead of written")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "PERFORMANCE.md"
    )
    args = parser.parse_args(argv)
    runs = measure(60 if args.quick else NODES)
    text = section(runs)
    if args.quick:
        print(text)
        return 0
    args.out.write_text(splice(args.out.read_text(), text))
    print(f"burst: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
