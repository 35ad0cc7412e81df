"""Status writes: coalesced per node, batched, rate limited, skipped when nothing changes."""

from __future__ import annotations

import asyncio

import pytest

from eni_ipam._infra.metrics import Metrics
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.model import NodeStats, NodeStatus, PoolEntry
from eni_ipam.kube.api import ENIPOOLS, KubeApi
from eni_ipam.kube.status import StatusWriter
from eni_ipam_testkit.fake_kube import FakeKube

pytestmark = pytest.mark.looptime(start=1_000_000.0)


def status(addresses: int) -> NodeStatus:
    pool = tuple(
        PoolEntry(address=f"10.0.0.{10 + n}", interface_id="eni-1", subnet_id="s-1") for n in range(addresses)
    )
    return NodeStatus(pool=pool, stats=NodeStats(available=addresses))


async def make_pools(api: KubeApi, names: list[str]) -> dict[str, dict]:
    return {
        n: await api.create(ENIPOOLS, {"metadata": {"name": n}, "spec": {"instanceID": f"i-{n}"}})
        for n in names
    }


def status_writes(kube: FakeKube) -> list[str]:
    return [r.name or "" for r in kube.requests if r.verb == "patch" and r.subresource == "status"]


async def test_statuses_of_one_node_coalesce_into_one_write(kube: FakeKube, api: KubeApi) -> None:
    pools = await make_pools(api, ["n1"])
    writer = StatusWriter(api, lookup=pools.get, clock=LoopClock(), metrics=Metrics(), batch_window=0.5)
    task = asyncio.create_task(writer.run())
    for n in range(1, 6):
        writer.publish("n1", status(n))
        await asyncio.sleep(0.05)
    await asyncio.sleep(2)
    assert status_writes(kube) == ["n1"]
    assert len(kube.get_object("enipools", "n1")["status"]["pool"]) == 5  # the last one won
    writer.publish("n1", status(5))  # nothing new: nothing sent
    await asyncio.sleep(2)
    assert status_writes(kube) == ["n1"]
    task.cancel()


async def test_writes_spend_the_status_bucket(kube: FakeKube, api: KubeApi) -> None:
    names = [f"n{n}" for n in range(6)]
    pools = await make_pools(api, names)
    writer = StatusWriter(
        api, lookup=pools.get, clock=LoopClock(), metrics=Metrics(), qps=2, burst=2, batch_window=0.1
    )
    task = asyncio.create_task(writer.run())
    loop = asyncio.get_running_loop()
    started = loop.time()
    for name in names:
        writer.publish(name, status(1))
    while len(status_writes(kube)) < len(names):
        await asyncio.sleep(0.1)
    # 2 at once, then 2 per second: the last of 6 waits about 2 s.
    assert loop.time() - started >= 1.9
    task.cancel()


async def test_gone_pool_is_dropped_and_failures_are_retried_after_a_backoff(
    kube: FakeKube, api: KubeApi
) -> None:
    from eni_ipam_testkit.fake_kube import Fault

    pools = await make_pools(api, ["n1"])
    metrics = Metrics()
    writer = StatusWriter(api, lookup=pools.get, clock=LoopClock(), metrics=metrics, batch_window=0.1)
    task = asyncio.create_task(writer.run())
    kube.faults.append(Fault(verb="patch", plural="enipools", subresource="status", status=500, times=2))
    writer.publish("n1", status(3))
    writer.publish("gone", status(1))
    await asyncio.sleep(0.5)
    assert len(status_writes(kube)) == 1  # the second attempt waits for the backoff, not the next batch
    await asyncio.sleep(5)
    assert len(kube.get_object("enipools", "n1")["status"]["pool"]) == 3
    assert metrics.sample("eni_ipam_status_writes_total", {"outcome": "failed"}) == 2
    assert metrics.sample("eni_ipam_status_writes_total", {"outcome": "ok"}) == 1
    assert writer.pending == {}
    task.cancel()


async def test_a_write_the_server_refuses_is_dropped_not_retried(kube: FakeKube, api: KubeApi) -> None:
    from eni_ipam_testkit.fake_kube import Fault

    pools = await make_pools(api, ["n1"])
    metrics = Metrics()
    writer = StatusWriter(api, lookup=pools.get, clock=LoopClock(), metrics=metrics, batch_window=0.1)
    task = asyncio.create_task(writer.run())
    kube.faults.append(Fault(verb="patch", plural="enipools", subresource="status", status=422, times=1))
    writer.publish("n1", status(3))
    await asyncio.sleep(10)
    assert status_writes(kube) == ["n1"] and writer.pending == {}
    assert metrics.sample("eni_ipam_status_writes_total", {"outcome": "failed"}) == 1
    task.cancel()
