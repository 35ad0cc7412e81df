"""Events on Nodes: one object per Node, reason and message, counted rather than repeated, made anew
when it expired, rate limited and bounded, and never sent once the term ended — against the fake API
server on the loop's virtual clock. Then the states that call for one, as the source sees them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from lightkube.types import PatchType
from structlog.testing import capture_logs

from eni_ipam.core.clock import LoopClock
from eni_ipam.core.model import NodeStats, NodeStatus
from eni_ipam.kube import events as events_module
from eni_ipam.kube.api import EVENTS, NODES, KubeApi
from eni_ipam.kube.events import BURST, REPEAT_AFTER, EventRecorder, status_event
from eni_ipam_testkit.fake_kube import FakeKube
from tests.kube.conftest import node
from tests.kube.test_source import Cluster, conditions, leading
from tests.waiting import until

pytestmark = pytest.mark.looptime(start=1_000_000.0)


@contextlib.asynccontextmanager
async def sending(recorder: EventRecorder) -> AsyncIterator[None]:
    task = asyncio.create_task(recorder.run())
    try:
        yield
    finally:
        task.cancel()


def events(kube: FakeKube, reason: str | None = None) -> list[dict]:
    return [e for e in kube.objects("events", "default") if reason is None or e["reason"] == reason]


def event_writes(kube: FakeKube) -> list[str]:
    return [r.verb for r in kube.requests if r.plural == "events"]


async def test_the_same_event_is_one_object_counted_not_repeated(kube: FakeKube, api: KubeApi) -> None:
    recorder = EventRecorder(api, clock=LoopClock())
    async with sending(recorder):
        for _ in range(5):
            recorder.warn("n1", "uid-1", "NoSubnetRoom", "no room")
            await asyncio.sleep(1)
        assert event_writes(kube) == ["create"]
        await asyncio.sleep(REPEAT_AFTER)
        recorder.warn("n1", "uid-1", "NoSubnetRoom", "no room")
        await until(lambda: len(event_writes(kube)) == 2)
    (event,) = events(kube)
    assert event_writes(kube) == ["create", "patch"]
    assert event["count"] == 6 and event["lastTimestamp"] >= event["firstTimestamp"]
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-1"}
    assert (event["type"], event["source"]) == ("Warning", {"component": "eni-ipam"})


async def test_another_message_or_node_is_another_event(kube: FakeKube, api: KubeApi) -> None:
    recorder = EventRecorder(api, clock=LoopClock())
    async with sending(recorder):
        recorder.warn("n1", "uid-1", "NoSubnetRoom", "no room for 4")
        recorder.warn("n1", "uid-1", "NoSubnetRoom", "no room for 6")
        recorder.warn("n2", "uid-2", "NoSubnetRoom", "no room for 4")
        await until(lambda: len(events(kube)) == 3)


async def test_an_expired_event_said_again_is_made_anew(kube: FakeKube, api: KubeApi) -> None:
    recorder = EventRecorder(api, clock=LoopClock())
    async with sending(recorder):
        recorder.warn("n1", "uid-1", "LimitsUnknown", "unknown")
        await until(lambda: len(events(kube)) == 1)
        await api.client.delete(EVENTS.resource(), events(kube)[0]["metadata"]["name"], namespace="default")
        await asyncio.sleep(REPEAT_AFTER)
        recorder.warn("n1", "uid-1", "LimitsUnknown", "unknown")
        await until(lambda: len(events(kube)) == 1)
    assert events(kube)[0]["count"] == 1 and event_writes(kube)[-2:] == ["patch", "create"]


async def test_events_are_rate_limited_and_bounded(
    kube: FakeKube, api: KubeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events_module, "QUEUED", 40)
    recorder = EventRecorder(api, clock=LoopClock(), qps=1.0, burst=BURST)
    for n in range(50):
        recorder.warn(f"n{n}", "", "NoSubnetRoom", "no room")
    assert recorder.dropped == 10
    async with sending(recorder):
        await asyncio.sleep(0.5)
        assert len(events(kube)) == BURST  # at once
        await asyncio.sleep(10)
        assert len(events(kube)) == BURST + 10  # then one a second
        await until(lambda: len(events(kube)) == 40, limit=30)
    assert "uid" not in events(kube)[0]["involvedObject"]


async def test_nothing_queued_is_sent_once_the_term_ended(kube: FakeKube, api: KubeApi) -> None:
    recorder = EventRecorder(api, clock=LoopClock(), qps=0.1, burst=1)
    async with sending(recorder):
        recorder.warn("n1", "", "NoSubnetRoom", "no room")
        recorder.warn("n2", "", "NoSubnetRoom", "no room")
        await until(lambda: len(events(kube)) == 1)
        recorder.clear()
        await asyncio.sleep(60)
    assert [e["involvedObject"]["name"] for e in events(kube)] == ["n1"]


def test_which_statuses_call_for_an_event() -> None:
    assert status_event(NodeStatus()) is None
    assert status_event(NodeStatus(limit="instance-limit")) is None  # full, not broken
    assert status_event(NodeStatus(problem="DuplicateInstance", message="m")) == ("DuplicateInstance", "m")
    assert status_event(NodeStatus(limit="subnet", message="say it")) == ("NoSubnetRoom", "say it")
    assert status_event(NodeStatus(limit="security-groups"))[0] == "NoSecurityGroups"  # type: ignore[index]
    reason, message = status_event(NodeStatus(limit="limits-unknown", stats=NodeStats(limits_known=False)))  # type: ignore[misc]
    assert reason == "LimitsUnknown" and message


# -- the states that call for one, as the source sees them --------------------------------------------


@pytest.fixture
def cluster(kube: FakeKube, api: KubeApi) -> Cluster:
    return Cluster(kube, api)


async def test_a_node_without_provider_id_is_said_once_logged_and_counted(cluster: Cluster) -> None:
    cluster.cloud.add_instance("i-late", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    cluster.kube.add_object("nodes", {"metadata": {"name": "late"}, "spec": {}})
    ignored = {"reason": "no-provider-id"}
    with capture_logs() as logs:
        async with leading(cluster):
            await until(lambda: len(events(cluster.kube, "NoProviderID")) == 1)
            assert cluster.metrics.sample("eni_ipam_nodes_ignored", ignored) == 1
            await cluster.api.client.patch(
                NODES.resource(), "late", {"metadata": {"labels": {"x": "y"}}}, patch_type=PatchType.MERGE
            )  # another event of the Node, still without a provider id
            await asyncio.sleep(1)
            await cluster.api.client.patch(
                NODES.resource(),
                "late",
                {"spec": {"providerID": "aws:///us-east-1a/i-late"}},
                patch_type=PatchType.MERGE,
            )
            await until(lambda: cluster.available("late") == 4)
            assert cluster.metrics.sample("eni_ipam_nodes_ignored", ignored) == 0
    warned = [e for e in logs if e["event"] == "node_without_provider_id"]
    assert [(e["log_level"], e["node"]) for e in warned] == [("warning", "late")]
    assert [e["node"] for e in logs if e["event"] == "node_provider_id_set"] == ["late"]
    (event,) = events(cluster.kube, "NoProviderID")
    assert event["involvedObject"]["uid"] == cluster.kube.get_object("nodes", "late")["metadata"]["uid"]
    assert "spec.providerID" in event["message"]


async def test_nodes_without_provider_id_are_counted_by_the_leader_of_the_term_only(cluster: Cluster) -> None:
    cluster.kube.add_object("nodes", {"metadata": {"name": "late"}, "spec": {}})
    ignored = {"reason": "no-provider-id"}
    async with leading(cluster):
        await until(lambda: cluster.metrics.sample("eni_ipam_nodes_ignored", ignored) == 1)
    assert cluster.metrics.sample("eni_ipam_nodes_ignored", ignored) == 0  # a standby counts none
    await cluster.api.client.delete(NODES.resource(), "late")  # gone while no term runs
    async with leading(cluster):
        await asyncio.sleep(2)
        assert cluster.metrics.sample("eni_ipam_nodes_ignored", ignored) == 0


async def test_a_second_node_on_one_instance_gets_a_duplicate_instance_event(cluster: Cluster) -> None:
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        cluster.kube.add_object("nodes", node("n2", "i-n1"))
        await until(lambda: conditions(cluster.pool("n2")).get("Ready") == ("False", "DuplicateInstance"))
        await until(lambda: len(events(cluster.kube, "DuplicateInstance")) == 1)
    (event,) = events(cluster.kube, "DuplicateInstance")
    assert event["involvedObject"]["name"] == "n2" and "n1" in event["message"]
    assert event["message"] == cluster.pool("n2")["status"]["message"]


async def test_a_pool_without_subnet_room_gets_an_event_and_a_message(cluster: Cluster) -> None:
    cluster.cloud.add_subnet("s-tiny", vpc="vpc-1", zone="us-east-1a", cidr="10.0.8.0/28")
    cluster.source.node_defaults = cluster.source.node_defaults.model_copy(  # type: ignore[union-attr]
        update={"first_interface_index": 1, "subnet_ids": ("s-tiny",), "min_allocate": 30}
    )
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: len(events(cluster.kube, "NoSubnetRoom")) == 1)
        await until(lambda: "no subnet" in (cluster.pool("n1") or {}).get("status", {}).get("message", ""))
        await asyncio.sleep(5)  # more passes and status writes: no second event
    assert len(events(cluster.kube)) == 1 and events(cluster.kube)[0]["count"] == 1


async def test_unknown_limits_get_an_event(cluster: Cluster) -> None:
    cluster.cloud.add_instance("i-odd", type="x99.hypothetical", subnet="s-1", security_groups=["sg-1"])
    cluster.kube.add_object("nodes", node("odd", "i-odd", itype="x99.hypothetical"))
    async with leading(cluster):
        await until(lambda: len(events(cluster.kube, "LimitsUnknown")) == 1)
        await until(lambda: conditions(cluster.pool("odd")).get("Ready") == ("False", "LimitsUnknown"))
    (event,) = events(cluster.kube, "LimitsUnknown")
    assert "x99.hypothetical" in event["message"]
    assert event["message"] == cluster.pool("odd")["status"]["message"]
