"""Status writes: coalesced per node, ordered by need, rate limited, skipped when nothing changes, and
never in the way of the node agent's own status fields."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core import devices
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.model import Interface, NodeStats, NodeStatus, PoolEntry, ReleaseState
from eni_ipam.kube.api import ENIPOOLS, KubeApi
from eni_ipam.kube.projection import PoolInfo, project_pool
from eni_ipam.kube.resources import agent_status_patch
from eni_ipam.kube.status import StatusWriter
from eni_ipam_testkit.fake_kube import FakeKube, Fault
from tests.conftest import CRD
from tests.waiting import until

pytestmark = pytest.mark.looptime(start=1_000_000.0)


def status(addresses: int, *, needed: int = 0) -> NodeStatus:
    pool = tuple(
        PoolEntry(address=f"10.0.0.{10 + n}", interface_id="eni-1", subnet_id="s-1") for n in range(addresses)
    )
    return NodeStatus(pool=pool, stats=NodeStats(available=addresses, needed=needed))


async def make_pools(api: KubeApi, names: list[str]) -> dict[str, PoolInfo]:
    """The pools, as the informer keeps them (a cache that never moves: the writer must cope)."""
    return {
        n: project_pool(
            await api.create(ENIPOOLS, {"metadata": {"name": n}, "spec": {"instanceID": f"i-{n}"}})
        )
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


def stored(kube: FakeKube, name: str) -> dict:
    return kube.get_object("enipools", name) or {}


async def agent_reports(api: KubeApi, name: str, used: set[str], answers: dict[str, ReleaseState]) -> None:
    """The node agent's write, as the agent makes it (its own read, its own conditional patch)."""
    pool = await api.get(ENIPOOLS, name)
    patch = agent_status_patch(pool, used=used, answers=answers)
    assert patch is not None
    await api.patch(ENIPOOLS, name, patch, status=True)


async def test_the_agents_fields_survive_a_write_computed_before_the_agent_wrote(
    kube: FakeKube, api: KubeApi
) -> None:
    await make_pools(api, ["n1"])
    metrics = Metrics()
    cache: dict[str, PoolInfo] = {}
    writer = StatusWriter(api, lookup=cache.get, clock=LoopClock(), metrics=metrics, batch_window=0.1)
    cache["n1"] = project_pool(stored(kube, "n1"))
    writer.publish("n1", status(1))
    await writer.flush()
    cache["n1"] = project_pool(stored(kube, "n1"))  # the informer is up to date: the status is there
    # The controller's next write is on its way (delayed by the network) when the agent reports.
    kube.faults.append(Fault(verb="patch", plural="enipools", subresource="status", status=None, delay=1.0))
    writer.publish("n1", status(3))
    flushing = asyncio.create_task(writer.flush())
    await asyncio.sleep(0.2)
    await agent_reports(api, "n1", {"10.0.0.10"}, {"10.0.0.11": ReleaseState.READY})
    assert await flushing
    pool = stored(kube, "n1")["status"]
    assert len(pool["pool"]) == 3  # the controller's write landed...
    assert pool["used"] == ["10.0.0.10"]  # ...over the agent's, which it left alone
    assert pool["releaseAnswers"] == {"10.0.0.11": "ready-for-release"}
    assert metrics.sample("eni_ipam_status_writes_total", {"outcome": "conflict"}) is None  # no re-read
    assert status_writes(kube) == ["n1", "n1", "n1"]  # two of the controller's, one of the agent's


async def test_a_first_status_racing_the_agents_first_report_is_reread_and_keeps_the_report(
    kube: FakeKube, api: KubeApi
) -> None:
    pools = await make_pools(api, ["n1"])  # no status yet: the first write adds it whole
    metrics = Metrics()
    writer = StatusWriter(api, lookup=pools.get, clock=LoopClock(), metrics=metrics, batch_window=0.1)
    kube.faults.append(Fault(verb="patch", plural="enipools", subresource="status", status=None, delay=1.0))
    writer.publish("n1", status(2))
    flushing = asyncio.create_task(writer.flush())
    await asyncio.sleep(0.2)
    await agent_reports(api, "n1", {"10.0.0.10"}, {})
    assert await flushing
    pool = stored(kube, "n1")["status"]
    assert len(pool["pool"]) == 2 and pool["used"] == ["10.0.0.10"]
    assert metrics.sample("eni_ipam_status_writes_total", {"outcome": "conflict"}) == 1
    assert metrics.sample("eni_ipam_status_writes_total", {"outcome": "ok"}) == 1


class VirtualWallClock(LoopClock):
    """Wall time that moves with the loop's (virtual) time."""

    def now_utc(self) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(asyncio.get_running_loop().time(), datetime.UTC)


async def test_a_transition_time_is_kept_while_the_condition_holds(kube: FakeKube, api: KubeApi) -> None:
    await make_pools(api, ["n1"])
    cache: dict[str, PoolInfo] = {}
    writer = StatusWriter(api, lookup=cache.get, clock=VirtualWallClock(), metrics=Metrics())

    async def write(s: NodeStatus) -> dict[str, dict]:
        cache["n1"] = project_pool(stored(kube, "n1"))
        writer.publish("n1", s)
        await writer.flush()
        return {c["type"]: c for c in stored(kube, "n1")["status"]["conditions"]}

    first = await write(status(1, needed=3))
    await asyncio.sleep(60)
    second = await write(status(2, needed=2))  # still in deficit: Ready stays False
    assert second["Ready"]["message"] == "2 addresses needed"
    assert second["Ready"]["lastTransitionTime"] == first["Ready"]["lastTransitionTime"]
    await asyncio.sleep(60)
    third = await write(status(4))
    assert third["Ready"]["status"] == "True"
    assert third["Ready"]["lastTransitionTime"] > first["Ready"]["lastTransitionTime"]
    assert third["AtCapacity"]["lastTransitionTime"] == first["AtCapacity"]["lastTransitionTime"]


async def test_statuses_are_written_most_urgent_first(kube: FakeKube, api: KubeApi) -> None:
    # Pending pods first (most first), then deficits (largest first), then the rest as they came.
    needs = {"idle-a": 0, "deficit-3": 3, "deficit-8": 8, "pods-2": 0, "idle-b": 0, "pods-5": 1, "both": 9}
    pods = {"pods-2": 2, "pods-5": 5, "both": 2}
    pools = await make_pools(api, list(needs))
    writer = StatusWriter(
        api,
        lookup=pools.get,
        clock=LoopClock(),
        metrics=Metrics(),
        qps=1,
        burst=1,
        pending_pods=lambda name: pods.get(name, 0),
    )
    for name, needed in needs.items():
        writer.publish(name, status(1, needed=needed))
    assert await writer.flush()
    assert status_writes(kube) == ["pods-5", "both", "pods-2", "deficit-8", "deficit-3", "idle-a", "idle-b"]


async def test_an_urgent_status_overtakes_a_long_queue(kube: FakeKube, api: KubeApi) -> None:
    names = [f"idle-{n}" for n in range(8)]
    pools = await make_pools(api, [*names, "late"])
    writer = StatusWriter(api, lookup=pools.get, clock=LoopClock(), metrics=Metrics(), qps=1, burst=1)
    for name in names:
        writer.publish(name, status(1))
    task = asyncio.create_task(writer.run())
    await until(lambda: len(status_writes(kube)) == 2, limit=10)
    writer.publish("late", status(0, needed=4))  # a node that needs addresses, behind six idle ones
    await until(lambda: len(status_writes(kube)) == 3, limit=10)
    assert status_writes(kube)[2] == "late"
    writer.publish("idle-0", status(1))  # unchanged: not written again, and no token spent on it
    await until(lambda: len(status_writes(kube)) == 9, limit=20)
    assert sorted(status_writes(kube)) == sorted([*names, "late"])
    task.cancel()


async def test_a_status_published_again_keeps_its_place_in_line(kube: FakeKube, api: KubeApi) -> None:
    names = [f"idle-{n}" for n in range(5)]
    pools = await make_pools(api, names)
    writer = StatusWriter(api, lookup=pools.get, clock=LoopClock(), metrics=Metrics(), qps=1, burst=1)
    for name in names:
        writer.publish(name, status(1))
    task = asyncio.create_task(writer.run())
    await until(lambda: len(status_writes(kube)) == 1, limit=10)
    for addresses in (2, 3):  # its status changes again and again while it waits
        writer.publish("idle-3", status(addresses))
    await until(lambda: len(status_writes(kube)) == 5, limit=10)
    assert status_writes(kube) == names  # not sent to the back of the line
    assert len(stored(kube, "idle-3")["status"]["pool"]) == 3  # and its latest status is the one written
    task.cancel()


async def test_a_status_removed_since_it_was_read_is_written_whole(kube: FakeKube, api: KubeApi) -> None:
    await make_pools(api, ["n1"])
    metrics = Metrics()
    cache: dict[str, PoolInfo] = {}
    writer = StatusWriter(api, lookup=cache.get, clock=LoopClock(), metrics=metrics)
    cache["n1"] = project_pool(stored(kube, "n1"))
    writer.publish("n1", status(1))
    await writer.flush()
    cache["n1"] = project_pool(stored(kube, "n1"))  # has a status: the next write goes field by field
    await api.json_patch(ENIPOOLS, "n1", [{"op": "remove", "path": "/status"}], status=True)  # by hand
    assert "status" not in stored(kube, "n1")
    writer.publish("n1", status(2))
    assert await writer.flush()
    assert len(stored(kube, "n1")["status"]["pool"]) == 2
    assert metrics.sample("eni_ipam_status_writes_total", {"outcome": "failed"}) is None
    codes = [r.status for r in kube.requests if r.verb == "patch" and r.subresource == "status"]
    assert codes == [200, 200, 422, 200]  # the field-by-field write could not apply; re-read, whole


def devices_status(mac: str = "0a:00:00:00:00:02") -> NodeStatus:
    """One pool address on an interface with a MAC address, on network card 1."""
    iface = Interface(
        id="eni-1",
        device_index=1,
        subnet_id="s-1",
        primary_ip="10.0.0.4",
        addresses=("10.0.0.10",),
        link=devices.pack(mac, 1),
    )
    return dataclasses.replace(status(1), interfaces=(iface,), subnets={"s-1": "10.0.0.0/24"})


def crd_before_devices() -> dict[str, Any]:
    """The chart's ENIPool CRD as it was before interfaces published their MAC address and card."""
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    status_schema = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    interface = status_schema["properties"]["interfaces"]["items"]["properties"]
    del interface["macAddress"], interface["networkCard"]
    return crd


async def test_the_server_serves_the_interfaces_devices_and_an_unchanged_status_is_not_rewritten(
    kube: FakeKube, api: KubeApi
) -> None:
    pools = await make_pools(api, ["n1"])
    writer = StatusWriter(api, lookup=pools.get, clock=LoopClock(), metrics=Metrics(), batch_window=0.1)
    task = asyncio.create_task(writer.run())
    writer.publish("n1", devices_status())
    await asyncio.sleep(2)
    (served,) = (await api.get(ENIPOOLS, "n1"))["status"]["interfaces"]
    assert (served["macAddress"], served["networkCard"]) == ("0a:00:00:00:00:02", 1)
    writer.publish("n1", devices_status())
    await asyncio.sleep(2)
    assert status_writes(kube) == ["n1"]
    writer.publish("n1", devices_status(mac="0a:00:00:00:00:03"))  # another device: written
    await asyncio.sleep(2)
    assert status_writes(kube) == ["n1", "n1"]
    task.cancel()


@pytest.mark.parametrize("kube_crds", [[crd_before_devices()]])
async def test_a_status_an_older_crd_prunes_is_not_written_again_and_again(
    kube: FakeKube, api: KubeApi
) -> None:
    """The chart never upgrades its CRD: until someone applies the new one, the server prunes what
    its schema lacks, and the stored status never has the digest of the written one. The writer
    writes it once, says why, and does not write the same status again; a real change still goes."""
    pools = await make_pools(api, ["n1"])
    writer = StatusWriter(api, lookup=pools.get, clock=LoopClock(), metrics=Metrics(), batch_window=0.1)
    task = asyncio.create_task(writer.run())
    with capture_logs() as logs:
        for _ in range(3):
            writer.publish("n1", devices_status())
            await asyncio.sleep(2)
    (served,) = stored(kube, "n1")["status"]["interfaces"]
    assert "macAddress" not in served and served["id"] == "eni-1"  # pruned
    assert status_writes(kube) == ["n1"]
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["status_stored_otherwise"]
    writer.publish("n1", dataclasses.replace(devices_status(), message="something else"))
    await asyncio.sleep(2)
    assert status_writes(kube) == ["n1", "n1"]
    assert stored(kube, "n1")["status"]["message"] == "something else"
    task.cancel()


async def test_writes_wait_while_the_leadership_term_is_unproven_and_go_out_once_it_is(
    kube: FakeKube, api: KubeApi
) -> None:
    pools = await make_pools(api, ["n1", "n2"])
    writer = StatusWriter(api, lookup=pools.get, clock=LoopClock(), metrics=Metrics(), batch_window=0.1)
    proven = False
    writer.may_write = lambda: proven
    task = asyncio.create_task(writer.run())
    writer.publish("n1", status(3))
    writer.publish("n2", status(2))
    await asyncio.sleep(10)
    assert status_writes(kube) == [] and set(writer.pending) == {"n1", "n2"}  # held, not dropped
    proven = True  # the lease was renewed
    await asyncio.sleep(1.5)
    assert sorted(status_writes(kube)) == ["n1", "n2"]
    assert len(kube.get_object("enipools", "n1")["status"]["pool"]) == 3
    task.cancel()
