"""The demo runs, keeps pools, stops on its own and prints a summary; its workload keeps its cluster
healthy and lively; ``--fault`` breaks its cloud at a set time."""

import asyncio
import dataclasses
import io
import random
import re
import socket
from collections.abc import Iterator

import pytest
import structlog

import eni_ipam.app.demo as demo_module
from eni_ipam.adapters.metrics import Metrics
from eni_ipam.app.demo import (
    FAULTS,
    LOAD_PERIOD,
    POD_HEADROOM,
    RESERVED_PER_SUBNET,
    SUBNET_PREFIX,
    Fault,
    _demo,
    address_share,
    parse_fault,
    pod_ceiling,
    running,
    serve_metrics,
    workload,
)
from eni_ipam.cli import main
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.model import NodeStats, NodeStatus
from eni_ipam.core.spec import NodeResource, NodeSpec
from eni_ipam.simulator.simloop import run_virtual
from eni_ipam.simulator.simnode import SimulatedNodeSide
from eni_ipam.store.memory import MemoryStore


def test_demo_runs_briefly_and_summarises():
    out = io.StringIO()
    rc = asyncio.run(_demo(nodes=12, duration=3.0, seed=3, port=0, out=out))
    text = out.getvalue()
    assert rc == 0
    assert "summary: 12 nodes" in text
    assert "mutating API calls" in text


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port another process listens on."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


async def _scrape(url: str) -> str:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return await response.text()


def test_the_default_port_taken_moves_metrics_to_a_free_port_and_says_where(
    held_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo_module, "DEFAULT_PORT", held_port)
    monkeypatch.setattr(demo_module, "PROMETHEUS_PORT", held_port)
    out = io.StringIO()

    async def main() -> tuple[str, str]:
        async with serve_metrics(Metrics(process=False), lambda: True, None, out) as notice:
            url = re.match(r"metrics on (http://127\.0\.0\.1:\d+/metrics), ", notice)
            assert url is not None, notice
            return notice, await _scrape(url.group(1))

    notice, scraped = asyncio.run(main())
    assert f"not :{held_port}: port {held_port} is taken (address already in use; " in notice
    assert f"{held_port} is Prometheus's default port too" in notice
    assert "--port N chooses" in notice
    assert "eni_ipam_ready" in scraped, "the link reaches the demo, not the other process"
    assert out.getvalue() == notice + "\n"


def test_a_port_asked_for_and_taken_leaves_metrics_off_and_says_so(held_port: int) -> None:
    out = io.StringIO()

    async def main() -> str:
        async with serve_metrics(Metrics(process=False), lambda: True, held_port, out) as notice:
            return notice

    notice = asyncio.run(main())
    assert notice.startswith(f"metrics off: port {held_port} is taken (address already in use)")
    assert "Prometheus" not in notice  # said of its port alone
    assert "--port N chooses another, --port 0 none" in notice


def test_a_free_port_serves_where_asked_with_no_notice() -> None:
    out = io.StringIO()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    async def main() -> str:
        async with serve_metrics(Metrics(process=False), lambda: True, port, out) as notice:
            return notice

    assert asyncio.run(main()) == ""
    assert out.getvalue() == f"metrics on http://127.0.0.1:{port}/metrics\n"


def test_the_demo_exports_its_role_and_totals_that_agree_with_its_nodes():
    """A demo runs alone: it leads, and is ready once resynced; every scrape's cluster totals are
    the sums of that same scrape's per-node series."""
    import socket

    import aiohttp
    from prometheus_client.parser import text_string_to_metric_families

    from eni_ipam.adapters.metrics import pool_totals_problems

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def scenario() -> list[dict[str, float]]:
        demo = asyncio.create_task(_demo(nodes=12, duration=4.0, seed=3, port=port, out=io.StringIO()))
        scrapes: list[dict[str, float]] = []
        async with aiohttp.ClientSession() as session:
            while not demo.done():
                await asyncio.sleep(0.2)
                try:
                    async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                        text = await response.text()
                except aiohttp.ClientConnectionError:
                    continue  # not serving yet, or already stopped
                samples = [
                    (s.name, s.labels, s.value)
                    for f in text_string_to_metric_families(text)
                    for s in f.samples
                ]
                assert pool_totals_problems(samples) == []
                scrapes.append({name: value for name, labels, value in samples if not labels})
        await demo
        return scrapes

    scrapes = asyncio.run(scenario())
    assert len(scrapes) >= 5
    assert all(s["eni_ipam_leader"] == 1 for s in scrapes)
    assert scrapes[-1]["eni_ipam_ready"] == 1


# -- a healthy cluster: the workload --------------------------------------------------------------


@dataclasses.dataclass
class _Watched:
    used: list[int] = dataclasses.field(default_factory=list)
    pool: list[int] = dataclasses.field(default_factory=list)
    blocked: set[tuple[str, str]] = dataclasses.field(default_factory=set)
    """(node, reason) of every node seen unable to grow its pool."""
    longest_deficit: float = 0.0
    least_free_share: float = 1.0
    calls: dict[str, int] = dataclasses.field(default_factory=dict)


def _watch(nodes: int, seconds: int, seed: int = 1) -> _Watched:
    """The demo's cluster with its workload for ``seconds`` of virtual time, sampled every second."""

    async def main() -> _Watched:
        clock = LoopClock(measure_cpu=False)
        metrics = Metrics(process=False)
        watched, short = _Watched(), dict[str, float]()
        usable = 2 ** (32 - SUBNET_PREFIX) - RESERVED_PER_SUBNET
        async with running(nodes=nodes, seed=seed, clock=clock, metrics=metrics) as demo:
            manager = demo.manager
            for second in range(seconds):
                await asyncio.sleep(1)
                stats = [n.stats for n in manager.nodes.values()]
                watched.used.append(sum(s.used for s in stats))
                watched.pool.append(sum(s.available for s in stats))
                for node in manager.nodes.values():
                    if node.capacity_limit():
                        watched.blocked.add((node.name, node.capacity_limit()))
                    if node.stats.needed > 0:
                        short.setdefault(node.name, second)
                        watched.longest_deficit = max(watched.longest_deficit, second - short[node.name] + 1)
                    else:
                        short.pop(node.name, None)
                least = min(manager.view.free().values()) / usable
                watched.least_free_share = min(watched.least_free_share, least)
            watched.calls = dict(demo.cloud.calls)
        return watched

    result: _Watched = run_virtual(main())
    return result


@pytest.mark.parametrize("nodes", [20, 50])
def test_the_workload_keeps_the_cluster_healthy_and_lively(nodes: int) -> None:
    """Two minutes of the demo's workload (two load cycles): pods start and stop, pools grow
    (interfaces are created) and shrink (addresses are released), yet no node's pool stops growing
    (its instance's limit, no subnet room), no node stays short, and every subnet keeps well over a
    quarter of its addresses free (the chart's EniIpamSubnetLow warns below)."""
    watched = _watch(nodes, 2 * int(LOAD_PERIOD))
    assert not watched.blocked, f"nodes that could not grow: {sorted(watched.blocked)}"
    assert watched.longest_deficit <= 5, f"a node short for {watched.longest_deficit:g}s"
    assert watched.least_free_share > 0.4, f"a subnet down to {watched.least_free_share:.0%} free"
    settled = watched.used[int(LOAD_PERIOD) // 2 :]
    assert min(settled) < 0.75 * max(settled), f"the pods hardly move: {settled[::10]}"
    pools = watched.pool[int(LOAD_PERIOD) // 2 :]
    assert min(pools) < 0.9 * max(pools), f"the pools hardly move: {pools[::10]}"
    assert watched.calls.get("CreateNetworkInterface", 0) > 0
    assert watched.calls.get("UnassignPrivateIpAddresses", 0) > 0


def test_a_pod_ceiling_leaves_the_watermark_room_below_the_instance_and_the_subnet_share() -> None:
    spec = NodeSpec(pre_allocate=8, max_above_watermark=2)
    roomy = NodeStats(capacity=56)
    assert pod_ceiling(roomy, spec, share=200) == 56 - POD_HEADROOM - 8 - 2
    assert pod_ceiling(roomy, spec, share=20) == 20 - 8 - 2
    assert (
        pod_ceiling(NodeStats(capacity=15), NodeSpec(pre_allocate=12, max_above_watermark=2), share=200) == 0
    )
    assert pod_ceiling(NodeStats(capacity=56, limits_known=False), spec, share=200) == 0
    assert address_share(20) > address_share(50) > 0
    assert address_share(1000) == 0, "a thousand nodes' watermarks alone take the subnets: no pods"


# -- --fault --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ("credentials-revoked-at=30", Fault("credentials-revoked", 30.0)),
        ("credentials-revoked-at=2m", Fault("credentials-revoked", 120.0)),
        ("credentials-restored-at=500ms", Fault("credentials-restored", 0.5)),
    ],
)
def test_a_fault_is_a_name_and_a_time(text: str, fault: Fault) -> None:
    assert parse_fault(text) == fault
    assert fault.name in FAULTS


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("credentials-revoked", "is not a fault: credentials-revoked-at=SECONDS, credentials-restored-at"),
        ("credentials-revoked=30", "is not a fault"),
        ("disk-full-at=30", "is not a fault"),
        ("credentials-revoked-at=soon", "credentials-revoked-at: expected a duration"),
        ("credentials-revoked-at=-5", "credentials-revoked-at: "),
        ("x" * 5000, "is not a fault"),
    ],
)
def test_a_bad_fault_is_a_usage_error_naming_the_option(
    value: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["demo", "--fault", value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --fault: " in err and why in err and len(err) < 1000


def test_revoked_credentials_fail_every_pass_from_their_time_until_restored() -> None:
    """The demo's cloud refuses its credentials from the fault's time: passes fail with AuthFailure
    (the class the chart's EniIpamAllocationsFailing names Unauthorized) and nothing before; once
    restored the passes succeed again."""
    faults = [parse_fault("credentials-revoked-at=10"), parse_fault("credentials-restored-at=25")]
    with structlog.testing.capture_logs() as events:
        rc = run_virtual(_demo(nodes=12, duration=40.0, seed=3, port=0, out=io.StringIO(), faults=faults))
    assert rc == 0
    kinds = [e["event"] for e in events if e["event"] in ("fault_injected", "maintenance_failed")]
    revoked, restored = (i for i, e in enumerate(events) if e["event"] == "fault_injected")
    assert [events[revoked]["fault"], events[restored]["fault"]] == [
        "credentials-revoked",
        "credentials-restored",
    ]
    assert kinds[0] == "fault_injected", "no pass fails before the fault"
    failed = [e for e in events[revoked:restored] if e["event"] == "maintenance_failed"]
    assert failed and all("AuthFailure" in e["error"] for e in failed)
    after = [e for e in events[restored:] if e["event"] == "maintenance_failed"]
    assert len(after) < len(failed), "the passes succeed again once restored"


def test_pods_start_only_on_nodes_whose_pool_is_kept_and_within_their_ceiling() -> None:
    """Pools are published one node at a time: until a node's is, its pods wait (none in use); a
    node whose pool is kept gets pods, never beyond its ceiling."""

    async def main() -> list[dict[str, int]]:
        store = MemoryStore()
        side = SimulatedNodeSide(store)
        for n in range(20):
            side.add(NodeResource(name=f"node-{n:03d}", instance_id=f"i-{n}", used=5))
        kept = NodeStats(available=30, used=5, capacity=27)
        store.publish("node-000", NodeStatus(stats=kept))
        stop = asyncio.Event()
        task = asyncio.create_task(workload(side, store, random.Random(1), stop))
        seen = []
        for _ in range(60):
            await asyncio.sleep(0.5)
            seen.append({name: r.used for name, r in store.resources.items()})
        stop.set()
        await task
        return seen

    seen = run_virtual(main())
    ceiling = pod_ceiling(NodeStats(capacity=27), NodeSpec(), address_share(20))
    kept_used = [used["node-000"] for used in seen]
    assert max(kept_used) > 0 and max(kept_used) <= ceiling, kept_used
    assert not any(n for used in seen for name, n in used.items() if name != "node-000")
