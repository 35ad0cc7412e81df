"""The informer: list then watch, relist on 410 with synthetic deletes, backoff on 429 and drops."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest
from lightkube.types import PatchType

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core.clock import LoopClock
from eni_ipam.kube.api import NODES, KubeApi
from eni_ipam.kube.informer import Informer
from eni_ipam_testkit.fake_kube import FakeKube, Fault
from tests.kube.conftest import node
from tests.waiting import until


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def __call__(self, event: str, obj: dict, old: dict | None) -> None:
        self.events.append((event, obj["metadata"]["name"]))


@pytest.fixture
async def informer(kube: FakeKube, api: KubeApi) -> AsyncIterator[tuple[Informer, Recorder, Metrics]]:
    metrics = Metrics()
    inf = Informer(api, NODES, clock=LoopClock(), metrics=metrics, backoff_initial=0.05, backoff_max=0.2)
    recorder = Recorder()
    inf.add_handler(recorder)
    task = asyncio.create_task(inf.run())
    yield inf, recorder, metrics
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_list_then_watch_delivers_events_in_order(kube: FakeKube, informer) -> None:
    inf, rec, _ = informer
    kube.add_object("nodes", node("n1", "i-1"))
    await asyncio.wait_for(inf.synced.wait(), 5)
    kube.add_object("nodes", node("n2", "i-2"))
    await until(lambda: ("ADDED", "n2") in rec.events)
    assert rec.events == [("ADDED", "n1"), ("ADDED", "n2")]
    assert set(inf.store) == {"n1", "n2"}
    assert inf.resource_version == kube.resource_version


async def test_expired_version_relists_and_reports_what_vanished_meanwhile(
    kube: FakeKube, api: KubeApi, informer
) -> None:
    inf, rec, metrics = informer
    for name in ("n1", "n2"):
        kube.add_object("nodes", node(name, f"i-{name}"))
    await asyncio.wait_for(inf.synced.wait(), 5)
    await until(lambda: any(r.verb == "watch" for r in kube.requests))
    kube.faults.append(Fault(verb="watch", plural="nodes", status=503, times=10_000))
    await kube.drop_watches()  # the watch is down while n1 goes and n3 comes, and history is lost
    await api.client.delete(NODES.resource(), "n1")
    kube.add_object("nodes", node("n3", "i-3"))
    kube.compact()
    kube.faults.clear()
    await until(lambda: ("DELETED", "n1") in rec.events and ("ADDED", "n3") in rec.events)
    assert set(inf.store) == {"n2", "n3"}
    assert (
        metrics.sample("eni_ipam_informer_watch_restarts_total", {"resource": "nodes", "reason": "expired"})
        == 1
    )
    assert metrics.sample("eni_ipam_informer_relists_total", {"resource": "nodes"}) == 2


async def test_throttled_watch_waits_for_retry_after_then_resumes(kube: FakeKube, informer) -> None:
    inf, rec, metrics = informer
    await asyncio.wait_for(inf.synced.wait(), 5)
    await until(lambda: any(r.verb == "watch" for r in kube.requests))
    kube.faults.append(Fault(verb="watch", plural="nodes", status=429, retry_after=1))
    loop = asyncio.get_running_loop()
    dropped = loop.time()
    await kube.drop_watches()
    kube.add_object("nodes", node("n1", "i-1"))
    await until(lambda: ("ADDED", "n1") in rec.events)
    assert loop.time() - dropped >= 1.0  # Retry-After, not the 50 ms backoff
    assert (
        metrics.sample("eni_ipam_informer_watch_restarts_total", {"resource": "nodes", "reason": "throttled"})
        == 1
    )
    assert metrics.sample("eni_ipam_informer_relists_total", {"resource": "nodes"}) == 1


async def test_dropped_stream_resumes_from_the_last_version_without_relisting(
    kube: FakeKube, informer
) -> None:
    inf, rec, metrics = informer
    kube.add_object("nodes", node("n1", "i-1"))
    await asyncio.wait_for(inf.synced.wait(), 5)
    await until(lambda: any(r.verb == "watch" for r in kube.requests))
    for n in range(3):
        await kube.drop_watches()
        kube.add_object("nodes", node(f"m{n}", f"i-m{n}"))
        await until(lambda n=n: ("ADDED", f"m{n}") in rec.events)
    assert [e for e in rec.events if e[0] == "ADDED"] == [
        ("ADDED", "n1"),
        ("ADDED", "m0"),
        ("ADDED", "m1"),
        ("ADDED", "m2"),
    ]
    assert metrics.sample("eni_ipam_informer_relists_total", {"resource": "nodes"}) == 1
    watches = [r for r in kube.requests if r.verb == "watch"]
    assert all(r.params.get("resourceVersion") for r in watches)


async def test_a_failing_handler_does_not_stop_the_others(kube: FakeKube, api: KubeApi) -> None:
    inf = Informer(api, NODES, clock=LoopClock(), metrics=Metrics())

    def broken(event: str, obj: dict, old: dict | None) -> None:
        raise RuntimeError("bug")

    rec = Recorder()
    inf.add_handler(broken)
    inf.add_handler(rec)
    kube.add_object("nodes", node("n1", "i-1"))
    task = asyncio.create_task(inf.run())
    await until(lambda: rec.events == [("ADDED", "n1")])
    task.cancel()


async def test_selector_transitions_reach_the_store(kube: FakeKube, api: KubeApi) -> None:
    inf = Informer(api, NODES, clock=LoopClock(), metrics=Metrics(), labels={"pool": "yes"})
    rec = Recorder()
    inf.add_handler(rec)
    kube.add_object("nodes", node("n1", "i-1", pool="yes"))
    kube.add_object("nodes", node("n2", "i-2", pool="no"))
    task = asyncio.create_task(inf.run())
    await asyncio.wait_for(inf.synced.wait(), 5)
    assert set(inf.store) == {"n1"}
    await api.client.patch(
        NODES.resource(), "n1", {"metadata": {"labels": {"pool": "no"}}}, patch_type=PatchType.MERGE
    )
    await until(lambda: ("DELETED", "n1") in rec.events)
    assert inf.store == {}
    task.cancel()


@pytest.mark.looptime(start=1_000_000.0)
async def test_a_silent_watch_is_restarted_after_the_server_timeout_and_a_grace(
    kube: FakeKube, api: KubeApi
) -> None:
    metrics = Metrics()
    inf = Informer(api, NODES, clock=LoopClock(), metrics=metrics, watch_timeout=5.0, backoff_initial=0.05)
    rec = Recorder()
    inf.add_handler(rec)
    task = asyncio.create_task(inf.run())
    await asyncio.wait_for(inf.synced.wait(), 5)
    await until(lambda: any(r.verb == "watch" for r in kube.requests))
    # The next watch request is accepted by nobody: no answer, no error, for a very long time.
    kube.faults.append(Fault(verb="watch", plural="nodes", status=None, delay=100_000.0))
    loop = asyncio.get_running_loop()
    silent = loop.time()
    await kube.drop_watches()
    kube.add_object("nodes", node("n1", "i-1"))
    await until(lambda: ("ADDED", "n1") in rec.events, limit=200)
    assert 5.0 + 60.0 <= loop.time() - silent <= 5.0 + 60.0 + 1.0
    assert (
        metrics.sample("eni_ipam_informer_watch_restarts_total", {"resource": "nodes", "reason": "dropped"})
        >= 2
    )
    task.cancel()


@dataclasses.dataclass(frozen=True)
class Kept:
    """A projection for the test: a Node's name, version and zone label, nothing else."""

    name: str
    version: str
    zone: str


def keep(obj: dict) -> Kept:
    meta = obj["metadata"]
    return Kept(meta["name"], meta["resourceVersion"], meta["labels"]["topology.kubernetes.io/zone"])


async def test_a_projecting_informer_keeps_and_delivers_only_projections(
    kube: FakeKube, api: KubeApi
) -> None:
    inf = Informer(
        api, NODES, clock=LoopClock(), metrics=Metrics(), project=keep, version=lambda k: k.version
    )
    events: list[tuple[str, Kept, Kept | None]] = []
    inf.add_handler(lambda event, obj, old: events.append((event, obj, old)))
    kube.add_object("nodes", node("n1", "i-1"))
    kube.add_object("nodes", node("n2", "i-2"))
    task = asyncio.create_task(inf.run())
    await asyncio.wait_for(inf.synced.wait(), 5)  # from the list's pages
    await until(lambda: any(r.verb == "watch" for r in kube.requests))
    kube.add_object("nodes", node("n3", "i-3", zone="us-east-1b"))  # from the watch
    await api.client.patch(
        NODES.resource(),
        "n1",
        {"metadata": {"labels": {"topology.kubernetes.io/zone": "us-east-1c"}}},
        patch_type=PatchType.MERGE,
    )
    await api.client.delete(NODES.resource(), "n2")
    await until(lambda: len(events) == 5)
    assert [(e, o.name) for e, o, _ in events] == [
        ("ADDED", "n1"),
        ("ADDED", "n2"),
        ("ADDED", "n3"),
        ("MODIFIED", "n1"),
        ("DELETED", "n2"),
    ]
    assert all(isinstance(o, Kept) and (old is None or isinstance(old, Kept)) for _, o, old in events)
    assert events[3][1].zone == "us-east-1c" and events[3][2] == events[0][1]  # new and previous kept
    assert set(inf.store) == {"n1", "n3"} and all(isinstance(k, Kept) for k in inf.store.values())
    # A relist compares what is kept by version: n1 changed while the watch was down, n3 did not.
    kube.faults.append(Fault(verb="watch", plural="nodes", status=503, times=10_000))
    await kube.drop_watches()
    await api.client.patch(
        NODES.resource(), "n1", {"metadata": {"labels": {"spare": "yes"}}}, patch_type=PatchType.MERGE
    )
    kube.compact()
    kube.faults.clear()
    await until(lambda: len(events) == 6, limit=30)
    assert (events[5][0], events[5][1].name) == ("MODIFIED", "n1")
    assert events[5][1].version == kube.get_object("nodes", "n1")["metadata"]["resourceVersion"]
    task.cancel()


async def test_a_filtering_informer_stores_only_what_it_keeps_and_deletes_what_it_stops_keeping(
    kube: FakeKube, api: KubeApi
) -> None:
    inf = Informer(
        api,
        NODES,
        clock=LoopClock(),
        metrics=Metrics(),
        project=keep,
        version=lambda k: k.version,
        keep=lambda k: k.zone == "us-east-1a",
    )
    events: list[tuple[str, str, str | None]] = []
    inf.add_handler(lambda event, obj, old: events.append((event, obj.zone, old.zone if old else None)))
    kube.add_object("nodes", node("n1", "i-1"))
    kube.add_object("nodes", node("n2", "i-2", zone="us-east-1b"))  # never kept
    task = asyncio.create_task(inf.run())
    await asyncio.wait_for(inf.synced.wait(), 5)
    assert set(inf.store) == {"n1"}
    await until(lambda: any(r.verb == "watch" for r in kube.requests))
    zone = {"metadata": {"labels": {"topology.kubernetes.io/zone": "us-east-1b"}}}
    await api.client.patch(NODES.resource(), "n1", zone, patch_type=PatchType.MERGE)  # no longer kept
    kube.add_object("nodes", node("n3", "i-3", zone="us-east-1c"))  # not kept: no event
    kube.add_object("nodes", node("n4", "i-4"))
    await until(lambda: len(events) == 3)
    assert events == [
        ("ADDED", "us-east-1a", None),
        ("DELETED", "us-east-1b", "us-east-1a"),  # the previous projection says what went
        ("ADDED", "us-east-1a", None),
    ]
    assert set(inf.store) == {"n4"}
    task.cancel()
