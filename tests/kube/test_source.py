"""ENIPools from Nodes, pools filled and their status written, deletion through the finalizer,
status conflicts and pending pods — the real manager on the in-memory cloud, against the fake API
server."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog
import yaml
from lightkube.types import PatchType

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.manager import NodeManager
from eni_ipam.core.profiles import Profile
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeSpec
from eni_ipam.errors import ConfigError
from eni_ipam.kube import resources
from eni_ipam.kube.api import ENIPOOLS, NODES, PODS, KubeApi
from eni_ipam.kube.resources import FINALIZER
from eni_ipam.kube.settings import KubeSettings
from eni_ipam.kube.source import KubeNodeSource
from eni_ipam_testkit.fake_kube import FakeKube, Fault
from providers.sim.cloud import SimCloud
from providers.sim.provider import SimProvider
from tests.conftest import CRD
from tests.kube.conftest import node
from tests.waiting import until


class Cluster:
    def __init__(
        self,
        kube: FakeKube,
        api: KubeApi,
        *,
        profiles: tuple[Profile, ...] = (),
        node_defaults: NodeSpec | None = None,
        **kube_settings: Any,
    ) -> None:
        self.kube, self.api = kube, api
        self.clock = LoopClock()
        self.metrics = Metrics()
        self.cloud = SimCloud(self.clock)
        self.cloud.add_vpc("vpc-1", "10.0.0.0/16")
        self.cloud.add_subnet("s-1", vpc="vpc-1", zone="us-east-1a", cidr="10.0.0.0/22")
        self.cloud.add_security_group("sg-1", vpc="vpc-1")
        self.source = KubeNodeSource(
            api,
            settings=KubeSettings(**kube_settings),
            node_defaults=NodeSpec(pre_allocate=4) if node_defaults is None else node_defaults,
            profiles=profiles,
            clock=self.clock,
            metrics=self.metrics,
        )
        self.source.writer.batch_window = 0.01
        self.manager = NodeManager(
            provider=SimProvider(self.cloud, clock=self.clock, metrics=self.metrics),
            settings=Settings(resync_interval=3600),
            metrics=self.metrics,
            clock=self.clock,
            status_sink=self.source.writer,
            rng=random.Random(1),
        )

    def add_node(self, name: str, **labels: str) -> None:
        self.cloud.add_instance(f"i-{name}", type="m5.large", subnet="s-1", security_groups=["sg-1"])
        self.kube.add_object("nodes", node(name, f"i-{name}", **labels))

    def pool(self, name: str) -> dict | None:
        return self.kube.get_object("enipools", name)

    def available(self, name: str) -> int:
        pool = self.pool(name) or {}
        return int(((pool.get("status") or {}).get("stats") or {}).get("available", -1))


@contextlib.asynccontextmanager
async def leading(cluster: Cluster) -> AsyncIterator[None]:
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(cluster.source.run()), tg.create_task(cluster.source.lead(cluster.manager))]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()


@pytest.fixture
def cluster(kube: FakeKube, api: KubeApi) -> Cluster:
    return Cluster(kube, api)


async def test_node_gets_a_pool_that_is_filled_and_reported(cluster: Cluster) -> None:
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        pool = cluster.pool("n1")
        assert pool is not None
        assert pool["spec"] == {
            "instanceID": "i-n1",
            "instanceType": "m5.large",
            "zone": "us-east-1a",
            "preAllocate": 4,
            "deleteOnTermination": True,  # the CRD's default
        }
        assert pool["metadata"]["finalizers"] == [FINALIZER]
        status = pool["status"]
        assert len(status["pool"]) == 4 and status["stats"]["needed"] == 0
        assert status["subnets"] == {"s-1": {"cidr": "10.0.0.0/22"}}  # what the node side needs for prefixes
        assert {c["type"]: c["status"] for c in status["conditions"]} == {
            "Ready": "True",
            "AtCapacity": "False",
        }
        assert status["interfaces"][0]["deviceIndex"] == 0
        assert status["observedGeneration"] == pool["metadata"]["generation"]
        # the pool is the cloud's: every address reported is on the instance's interface
        instance = await cluster.manager.provider.describe_instance(instance_id="i-n1")
        assert instance is not None
        cloud_addresses = {a for i in instance.interfaces for a in i.addresses}
        assert set(status["pool"]) == cloud_addresses


async def test_own_status_writes_do_not_trigger_passes(cluster: Cluster) -> None:
    upserts: list[str] = []
    upsert = cluster.manager.upsert

    def counting(resource: Any, **hints: Any) -> None:
        upserts.append(resource.name)
        upsert(resource, **hints)

    cluster.manager.upsert = counting  # type: ignore[method-assign]
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        await asyncio.sleep(0.3)
        writes = [r for r in cluster.kube.requests if r.verb == "patch" and r.subresource == "status"]
        assert len(writes) >= 1
        assert upserts == ["n1"]  # the pool's creation; none for the status it got since


async def test_agent_reported_usage_grows_the_pool(cluster: Cluster, api: KubeApi) -> None:
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        used = sorted(cluster.pool("n1")["status"]["pool"])[:3]
        await api.client.patch(
            ENIPOOLS.resource().Status, "n1", {"status": {"used": used}}, patch_type=PatchType.MERGE
        )
        await until(lambda: cluster.available("n1") == 7)
        assert cluster.pool("n1")["status"]["used"] == used  # the agent's field survives our writes
        assert cluster.pool("n1")["status"]["stats"]["used"] == 3


async def test_status_conflict_is_reread_and_retried(cluster: Cluster) -> None:
    cluster.kube.faults.append(
        Fault(verb="patch", plural="enipools", subresource="status", status=409, times=1)
    )
    cluster.add_node("n1")
    sample = cluster.metrics.sample
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        await until(lambda: (sample("eni_ipam_status_writes_total", {"outcome": "ok"}) or 0) >= 1)
    assert sample("eni_ipam_status_writes_total", {"outcome": "conflict"}) == 1
    gets = [r for r in cluster.kube.requests if r.verb == "get" and r.plural == "enipools"]
    assert len(gets) == 1


async def test_deleted_node_leaves_the_manager_before_its_pool_is_released(
    cluster: Cluster, api: KubeApi
) -> None:
    cluster.add_node("n1")
    cluster.add_node("n2")
    removed_at: list[int] = []
    delete = cluster.manager.delete

    def recording(name: str):  # type: ignore[no-untyped-def]
        if name in cluster.manager.nodes:
            removed_at.append(len(cluster.kube.requests))
        return delete(name)

    cluster.manager.delete = recording  # type: ignore[method-assign]
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4 and cluster.available("n2") == 4)
        await api.client.delete(NODES.resource(), "n1")  # the garbage collector deletes its pool
        await until(lambda: cluster.pool("n1") is None)
        assert "n1" not in cluster.manager.nodes and "n2" in cluster.manager.nodes
        assert cluster.metrics.sample("eni_ipam_node_ips", {"node": "n1", "type": "available"}) is None
        requests = cluster.kube.requests
        finalizer = [
            n
            for n, r in enumerate(requests)
            if r.verb == "patch" and r.plural == "enipools" and r.name == "n1" and r.subresource is None
        ]
        assert len(removed_at) == 1 and len(finalizer) == 1
        assert removed_at[0] <= finalizer[0]  # out of the manager before the finalizer went


async def test_a_node_recreated_under_its_name_gets_a_new_pool(cluster: Cluster, api: KubeApi) -> None:
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        old_uid = cluster.pool("n1")["metadata"]["uid"]
        # the old Node goes and a new instance joins under the same name before anyone notices
        cluster.kube.faults.append(Fault(verb="patch", plural="enipools", status=503, times=2))
        await api.client.delete(NODES.resource(), "n1")
        cluster.cloud.add_instance("i-n1b", type="m5.large", subnet="s-1", security_groups=["sg-1"])
        cluster.kube.add_object("nodes", node("n1", "i-n1b"))
        await until(lambda: (cluster.pool("n1") or {}).get("metadata", {}).get("uid") not in (None, old_uid))
        await until(lambda: cluster.available("n1") == 4)
        assert cluster.pool("n1")["spec"]["instanceID"] == "i-n1b"
        assert cluster.manager.nodes["n1"].resource.instance_id == "i-n1b"


async def test_a_node_that_stops_being_selected_leaves_the_manager(kube: FakeKube, api: KubeApi) -> None:
    cluster = Cluster(kube, api, node_selector={"eni-ipam": "on"})
    cluster.add_node("n1", **{"eni-ipam": "on"})
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        await api.client.patch(
            NODES.resource(), "n1", {"metadata": {"labels": {"eni-ipam": "off"}}}, patch_type=PatchType.MERGE
        )
        await until(lambda: "n1" not in cluster.manager.nodes)
        await api.client.patch(
            NODES.resource(), "n1", {"metadata": {"labels": {"eni-ipam": "on"}}}, patch_type=PatchType.MERGE
        )
        await until(lambda: "n1" in cluster.manager.nodes)


async def test_node_without_provider_id_gets_its_pool_once_initialised(
    cluster: Cluster, api: KubeApi
) -> None:
    cluster.cloud.add_instance("i-late", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    cluster.kube.add_object("nodes", {"metadata": {"name": "late"}, "spec": {}})
    async with leading(cluster):
        await asyncio.sleep(0.3)
        assert cluster.pool("late") is None
        await api.client.patch(
            NODES.resource(),
            "late",
            {"spec": {"providerID": "aws:///us-east-1a/i-late"}},
            patch_type=PatchType.MERGE,
        )
        await until(lambda: cluster.available("late") == 4)


async def test_node_selector_limits_which_nodes_get_pools(kube: FakeKube, api: KubeApi) -> None:
    cluster = Cluster(kube, api, node_selector={"eni-ipam": "on"})
    cluster.add_node("yes", **{"eni-ipam": "on"})
    cluster.add_node("no")
    async with leading(cluster):
        await until(lambda: cluster.available("yes") == 4)
        assert cluster.pool("no") is None


async def test_people_edits_to_the_spec_are_kept_and_acted_on(cluster: Cluster, api: KubeApi) -> None:
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        await api.patch(ENIPOOLS, "n1", {"spec": {"preAllocate": 10}})
        await until(lambda: cluster.available("n1") == 10)
        assert cluster.pool("n1")["spec"]["preAllocate"] == 10


async def test_invalid_pool_is_refused_by_the_schema_and_changes_nothing(
    cluster: Cluster, api: KubeApi
) -> None:
    from eni_ipam.kube import errors

    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        with pytest.raises(errors.KubeInvalid, match=r"spec\.maxAboveWatermark"):
            await api.patch(ENIPOOLS, "n1", {"spec": {"maxAboveWatermark": -5}})
        assert cluster.pool("n1")["spec"].get("maxAboveWatermark") is None


async def test_pending_pods_on_a_node_surge_its_allocation(cluster: Cluster, api: KubeApi) -> None:
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        for n in range(12):
            cluster.kube.add_object(
                "pods",
                {
                    "metadata": {"name": f"p{n}", "namespace": "default"},
                    "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox:1"}]},
                },
            )
        cluster.kube.add_object(
            "pods",
            {
                "metadata": {"name": "host", "namespace": "default"},
                "spec": {
                    "nodeName": "n1",
                    "hostNetwork": True,
                    "containers": [{"name": "c", "image": "busybox:1"}],
                },
            },
        )
        await until(lambda: cluster.source.pending_pods["n1"] == 12)
        used = sorted(cluster.pool("n1")["status"]["pool"])[:4]  # the pool is used up: a deficit appears
        await api.client.patch(
            ENIPOOLS.resource().Status, "n1", {"status": {"used": used}}, patch_type=PatchType.MERGE
        )
        await until(lambda: cluster.available("n1") >= 4 + 12)
        await api.client.delete(PODS.resource(), "p0", namespace="default")
        await until(lambda: cluster.source.pending_pods["n1"] == 11)


async def test_records_at_a_new_term_include_what_the_cache_has_not_seen_yet(
    kube: FakeKube, api: KubeApi
) -> None:
    pool = {"metadata": {"name": "x"}, "spec": {"instanceID": "x"}, "status": {"interfaces": []}}
    kube.add_object("enipools", pool)
    source = KubeNodeSource(api, settings=KubeSettings(), clock=LoopClock(), metrics=Metrics())
    async with asyncio.TaskGroup() as tg:
        informers = tg.create_task(source.run())
        await until(lambda: source.pools.synced.is_set())
        # The previous leader's last write lands while this replica's watch is down: the cache
        # keeps the old pool, a fresh list sees the new one.
        stale = source.pools.store["x"]
        interfaces = [{"id": "vif-x", "deviceIndex": 0, "subnet": "10.0.0.0/24", "prefixes": ["10.0.0.0/28"]}]
        await api.patch(ENIPOOLS, "x", {"status": {"interfaces": interfaces}}, status=True)
        await until(lambda: source.pools.store["x"] is not stale)
        source.pools.store["x"] = stale
        source.pools.resource_version = "1"
        await source.records.list_pools()
        records = {r.name: r for r in source.node_records() or []}
        assert records["x"].prefixes == ("10.0.0.0/28",)
        # For a provider that keeps its own view, the list keeps no record; the status writer still
        # learns what the pool holds.
        remembered: list[str] = []
        source.writer.remember = lambda kept: remembered.append(kept.name)  # type: ignore[method-assign]
        await source.records.list_pools(records=False)
        records = {r.name: r for r in source.node_records() or []}
        assert records["x"].prefixes == () and remembered == ["x"]
        informers.cancel()


# -- one pool per instance, Nodes of another cloud, defaults that flow, a pool deleted by hand --------


def conditions(pool: dict | None) -> dict[str, tuple[str, str]]:
    status = (pool or {}).get("status") or {}
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or ()}


async def test_a_node_of_another_cloud_gets_no_pool_and_is_counted(cluster: Cluster) -> None:
    cluster.source.schemes = frozenset({"aws"})
    cluster.add_node("n1")
    foreign = node("gke-1", "vm1")
    foreign["spec"]["providerID"] = "gce://project/us-east1-b/vm1"
    cluster.kube.add_object("nodes", foreign)
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        await asyncio.sleep(0.3)
        assert cluster.pool("gke-1") is None
        assert cluster.metrics.sample("eni_ipam_nodes_ignored", {"reason": "provider-id-scheme"}) == 1
        await cluster.api.client.delete(NODES.resource(), "gke-1")  # people, not the controller
        await until(
            lambda: cluster.metrics.sample("eni_ipam_nodes_ignored", {"reason": "provider-id-scheme"}) == 0
        )


async def test_a_second_node_on_the_same_instance_gets_no_addresses_and_says_why(cluster: Cluster) -> None:
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        twin = node("n2", "i-n1")  # the same instance as n1
        cluster.kube.add_object("nodes", twin)
        await until(lambda: conditions(cluster.pool("n2")).get("Ready") == ("False", "DuplicateInstance"))
        status = cluster.pool("n2")["status"]
        assert not status.get("pool") and "n1" in status["message"]
        assert cluster.available("n1") == 4 and "n2" not in cluster.manager.nodes
        await cluster.api.client.delete(NODES.resource(), "n1")  # the holder goes: n2 may have it
        await until(lambda: cluster.available("n2") == 4)
        assert conditions(cluster.pool("n2"))["Ready"] == ("True", "PoolReady")


def restarted(cluster: Cluster, defaults: NodeSpec) -> Cluster:
    """The controller started again (a new process: fresh caches) with other ``node_defaults``."""
    again = Cluster(cluster.kube, cluster.api)
    again.cloud = cluster.cloud
    again.manager = NodeManager(
        provider=SimProvider(cluster.cloud, clock=again.clock, metrics=again.metrics),
        settings=Settings(resync_interval=3600),
        metrics=again.metrics,
        clock=again.clock,
        status_sink=again.source.writer,
        rng=random.Random(1),
    )
    again.source.node_defaults = defaults
    return again


async def test_defaults_flow_to_the_fields_people_did_not_set(cluster: Cluster) -> None:
    cluster.source.node_defaults = NodeSpec(pre_allocate=4, max_above_watermark=2)
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") >= 4)
        await cluster.api.client.patch(
            ENIPOOLS.resource(), "n1", {"spec": {"preAllocate": 6}}, patch_type=PatchType.MERGE
        )  # someone's edit
    # The chart's defaults change and the controller starts again with them.
    upgraded = restarted(cluster, NodeSpec(pre_allocate=5, max_above_watermark=3, min_allocate=1))
    async with leading(upgraded):
        await until(lambda: (cluster.pool("n1") or {}).get("spec", {}).get("minAllocate") == 1)
        spec = cluster.pool("n1")["spec"]
        assert spec["preAllocate"] == 6  # people's value stays
        assert spec["maxAboveWatermark"] == 3  # the default's new value
    trimmed = restarted(cluster, NodeSpec(pre_allocate=5))  # those defaults are no longer set
    async with leading(trimmed):
        await until(lambda: "minAllocate" not in (cluster.pool("n1") or {}).get("spec", {}))
        assert "maxAboveWatermark" not in cluster.pool("n1")["spec"]
        assert cluster.pool("n1")["spec"]["preAllocate"] == 6


async def test_a_pool_deleted_by_hand_comes_back_with_an_event(cluster: Cluster) -> None:
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        first_uid = cluster.pool("n1")["metadata"]["uid"]
        await cluster.api.client.delete(ENIPOOLS.resource(), "n1")  # by hand
        await until(lambda: (cluster.pool("n1") or {}).get("metadata", {}).get("uid", first_uid) != first_uid)
        await until(lambda: cluster.available("n1") == 4)
        events = [e for e in cluster.kube.objects("events", "default") if e["reason"] == "PoolRecreated"]
        assert len(events) == 1
        assert events[0]["involvedObject"] == {
            "apiVersion": "v1",
            "kind": "Node",
            "name": "n1",
            "uid": cluster.kube.get_object("nodes", "n1")["metadata"]["uid"],
        }


# -- a hand-over with nothing changed writes no status ----------------------------------------------


def status_writes(kube: FakeKube, since: int = 0) -> list[str]:
    return [
        r.name or ""
        for r in kube.requests[since:]
        if r.plural == "enipools" and r.subresource == "status" and r.verb in ("patch", "update")
    ]


def reelected(cluster: Cluster) -> Cluster:
    """The same process leading again (its caches kept), with a new manager, as the service does."""
    cluster.source.writer.reset()
    cluster.manager = NodeManager(
        provider=SimProvider(cluster.cloud, clock=cluster.clock, metrics=cluster.metrics),
        settings=Settings(resync_interval=3600),
        metrics=cluster.metrics,
        clock=cluster.clock,
        status_sink=cluster.source.writer,
        rng=random.Random(2),
    )
    return cluster


async def converge_again(cluster: Cluster, names: list[str]) -> None:
    """Lead until every node has had a pass, its status published, and the writer is idle."""
    published: set[str] = set()
    publish = cluster.source.writer.publish

    def recording(name: str, status: Any) -> None:
        published.add(name)
        publish(name, status)

    cluster.source.writer.publish = recording  # type: ignore[method-assign]
    manager, writer = cluster.manager, cluster.source.writer
    async with leading(cluster):
        await until(lambda: published == set(names) and manager.ready and not manager.busy(), limit=30)
        await until(lambda: not writer.pending)
        await asyncio.sleep(1)  # anything still on its way lands


@pytest.mark.parametrize("how", ["restarted", "re-elected"])
async def test_a_new_term_with_nothing_changed_writes_no_status(cluster: Cluster, how: str) -> None:
    names = [f"n{n}" for n in range(12)]
    for name in names:
        cluster.add_node(name)
    async with leading(cluster):
        await until(lambda: all(cluster.available(n) == 4 for n in names), limit=30)
        await until(lambda: not cluster.source.writer.pending)
    assert sorted(set(status_writes(cluster.kube))) == sorted(names)
    second = restarted(cluster, NodeSpec(pre_allocate=4)) if how == "restarted" else reelected(cluster)
    since = len(cluster.kube.requests)
    await converge_again(second, names)
    assert status_writes(cluster.kube, since) == []
    assert not second.source.writer._ahead  # nothing written is remembered


async def test_a_new_term_rewrites_only_the_statuses_that_are_not_current(cluster: Cluster) -> None:
    names = [f"n{n}" for n in range(6)]
    for name in names:
        cluster.add_node(name)
    async with leading(cluster):
        await until(lambda: all(cluster.available(n) == 4 for n in names), limit=30)
        await until(lambda: not cluster.source.writer.pending)
        await until(lambda: not cluster.source.writer._ahead)  # the informer has seen every write
    # While nobody leads, someone edits a controller field of one pool and the agent reports on another.
    await cluster.api.patch(ENIPOOLS, "n2", {"status": {"stats": {"excess": 7}}}, status=True)
    await cluster.api.patch(ENIPOOLS, "n4", {"status": {"used": []}}, status=True)
    second = restarted(cluster, NodeSpec(pre_allocate=4))
    since = len(cluster.kube.requests)
    await converge_again(second, names)
    assert status_writes(cluster.kube, since) == ["n2"]
    assert cluster.pool("n2")["status"]["stats"]["excess"] == 0


async def test_a_term_whose_cache_missed_the_last_writes_compares_with_the_pools_as_listed(
    cluster: Cluster,
) -> None:
    names = [f"n{n}" for n in range(6)]
    for name in names:
        cluster.add_node(name)
    async with asyncio.TaskGroup() as tg:
        informers = tg.create_task(cluster.source.run())  # they run on across both terms
        first = tg.create_task(cluster.source.lead(cluster.manager))
        await until(lambda: all(cluster.available(n) == 4 for n in names), limit=30)
        await until(lambda: not cluster.source.writer.pending)
        await asyncio.sleep(0.5)
        first.cancel()
        await asyncio.wait([first])
        # The previous leader's last status writes never reached this replica's watch: its cache
        # holds the pools as they were before (an older version, no status).
        store = cluster.source.pools.store
        for name in names:
            kept = store[name]
            older = str(int(kept.resource_version) - 1)
            store[name] = dataclasses.replace(kept, resource_version=older, has_status=False, digest=b"")
        second = reelected(cluster)
        since = len(cluster.kube.requests)
        published: set[str] = set()
        publish = second.source.writer.publish

        def recording(name: str, status: Any) -> None:
            published.add(name)
            publish(name, status)

        second.source.writer.publish = recording  # type: ignore[method-assign]
        term = tg.create_task(second.source.lead(second.manager))
        await until(lambda: published == set(names) and not second.manager.busy(), limit=30)
        await until(lambda: not second.source.writer.pending)
        await asyncio.sleep(1)
        assert status_writes(cluster.kube, since) == []
        term.cancel()
        informers.cancel()


# -- a pool's spec is validated once per version, not once per event ---------------------------------


def pending_pod(name: str, node_name: str) -> dict:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "busybox:1"}]},
    }


async def caught_up(cluster: Cluster, name: str) -> None:
    """Until the pool informer holds the pool as stored (every write has come back as an event)."""
    await until(lambda: not cluster.source.writer.pending)
    await until(
        lambda: (
            cluster.source.pools.store[name].resource_version
            == (cluster.pool(name) or {})["metadata"]["resourceVersion"]
        )
    )


async def test_status_echoes_and_pending_pods_do_not_validate_the_spec_again(
    cluster: Cluster, spec_validations: list[str]
) -> None:
    validations = spec_validations
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        for n in range(1, 4):  # the agent reports more in use: a pass, and a status write of ours
            used = sorted(cluster.pool("n1")["status"]["pool"])[:n]
            await cluster.api.patch(ENIPOOLS, "n1", {"status": {"used": used}}, status=True)
            await until(lambda n=n: cluster.pool("n1")["status"]["stats"]["used"] == n)
        for n in range(5):
            cluster.kube.add_object("pods", pending_pod(f"p{n}", "n1"))
        await until(lambda: cluster.manager.nodes["n1"].resource.pending_pods == 5)
        await caught_up(cluster, "n1")
    assert len(status_writes(cluster.kube)) >= 4  # each came back as an event of the pool
    assert validations == ["enipools/n1.spec"]


def schemaless_crd() -> dict[str, Any]:
    """The chart's ENIPool CRD with its spec schema left out (a cluster with an older CRD, or none
    applied by the chart): a bad spec value reaches the controller, which must refuse it itself."""
    crd: dict[str, Any] = copy.deepcopy(yaml.safe_load(CRD.read_text()))
    for version in crd["spec"]["versions"]:
        properties = version["schema"]["openAPIV3Schema"]["properties"]
        properties["spec"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return crd


@pytest.mark.parametrize("kube_crds", [[schemaless_crd()]])
async def test_a_changed_spec_is_validated_again_and_an_invalid_one_refused_naming_the_field(
    cluster: Cluster, spec_validations: list[str]
) -> None:
    validations = spec_validations
    cluster.add_node("n1")
    with structlog.testing.capture_logs() as logs:
        async with leading(cluster):
            await until(lambda: cluster.available("n1") == 4)
            await cluster.api.patch(ENIPOOLS, "n1", {"spec": {"preAllocate": 6}})
            await until(lambda: cluster.available("n1") == 6)
            await caught_up(cluster, "n1")
            assert validations == ["enipools/n1.spec"] * 2
            # A bad value: refused, logged once for this version however many events follow, and
            # the manager keeps the spec it had.
            await cluster.api.patch(ENIPOOLS, "n1", {"spec": {"maxAboveWatermark": -5}})
            invalid = cluster.pool("n1")
            await until(lambda: any(e["event"] == "pool_invalid" for e in logs))
            for n in range(3):
                cluster.kube.add_object("pods", pending_pod(f"p{n}", "n1"))
            await until(lambda: cluster.source.pending_pods["n1"] == 3)
            await caught_up(cluster, "n1")
            assert validations == ["enipools/n1.spec"] * 3
            resource = cluster.manager.nodes["n1"].resource
            assert resource.spec.pre_allocate == 6 and resource.pending_pods == 0
            # Mended: validated again, and handed over with the pods waiting meanwhile.
            await cluster.api.patch(ENIPOOLS, "n1", {"spec": {"maxAboveWatermark": 2}})
            await until(lambda: cluster.manager.nodes["n1"].resource.pending_pods == 3)
            assert cluster.manager.nodes["n1"].resource.spec.max_above_watermark == 2
    assert validations == ["enipools/n1.spec"] * 4
    refused = [(e["pool"], e["field"], e["error"]) for e in logs if e["event"] == "pool_invalid"]
    with pytest.raises(ConfigError) as caught:  # what the conversion says of that version on its own
        resources.resource_from_pool(invalid or {})
    assert caught.value.field == "enipools/n1.spec.maxAboveWatermark"
    assert refused == [("n1", caught.value.field, caught.value.message)]


async def test_a_new_leader_serves_a_pool_its_status_says_is_short_before_its_first_listing(
    cluster: Cluster,
) -> None:
    cluster.add_node("n1")
    cluster.add_node("n2")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4 and cluster.available("n2") == 4)
    # The next term's manager, whose first listing of the cloud does not land.
    provider = SimProvider(cluster.cloud, clock=cluster.clock, metrics=cluster.metrics)
    listing = asyncio.Event()
    real = provider.resync

    async def held() -> Any:
        await listing.wait()
        return await real()

    provider.resync = held  # type: ignore[method-assign]
    cluster.manager = manager = NodeManager(
        provider=provider,
        settings=Settings(resync_interval=3600),
        metrics=cluster.metrics,
        clock=cluster.clock,
        status_sink=cluster.source.writer,
        rng=random.Random(2),
    )
    await cluster.api.patch(ENIPOOLS, "n1", {"spec": {"preAllocate": 8}})  # asked while nobody led
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 8)
        assert not manager.ready
        assert manager.nodes["n2"].instance is None  # its status says it has enough: left to the listing
        listing.set()
        await until(lambda: manager.ready and manager.nodes["n2"].instance is not None)
        assert cluster.available("n2") == 4
