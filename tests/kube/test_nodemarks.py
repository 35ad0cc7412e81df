"""What eni-ipam writes on Nodes: the max-pods annotation, the no-room taint with its hysteresis, and
the startup taint the agent lifts — the real source and manager on the in-memory cloud, against the
fake API server on the loop's virtual clock."""

from __future__ import annotations

import asyncio

import pytest
from lightkube.types import PatchType

from eni_ipam.kube import errors
from eni_ipam.kube.api import ENIPOOLS, NODES, KubeApi
from eni_ipam.kube.nodemarks import (
    MAX_PODS_ANNOTATION,
    NO_ROOM_TAINT,
    STARTUP_TAINT,
    lift_startup_taint,
    taint_patch,
)
from eni_ipam_testkit.fake_kube import FakeKube, Fault
from tests.kube.conftest import node
from tests.kube.test_source import Cluster, leading
from tests.waiting import until

pytestmark = pytest.mark.looptime(start=1_000_000.0)

OTHER = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def taints(kube: FakeKube, name: str) -> list[dict]:
    return list((kube.get_object("nodes", name) or {}).get("spec", {}).get("taints") or [])


def keys(kube: FakeKube, name: str) -> list[str]:
    return [t["key"] for t in taints(kube, name)]


def annotation(kube: FakeKube, name: str) -> str | None:
    meta = (kube.get_object("nodes", name) or {}).get("metadata", {})
    return (meta.get("annotations") or {}).get(MAX_PODS_ANNOTATION)


# -- the patch ------------------------------------------------------------------------------------


def test_a_taint_is_added_beside_the_others_conditionally() -> None:
    node_obj = {"metadata": {"resourceVersion": "7"}, "spec": {"taints": [OTHER]}}
    assert taint_patch(node_obj, NO_ROOM_TAINT, present=True) == {
        "metadata": {"resourceVersion": "7"},
        "spec": {"taints": [OTHER, {"key": NO_ROOM_TAINT, "effect": "NoSchedule"}]},
    }
    assert node_obj["spec"]["taints"] == [OTHER]  # the object read is left as it was


def test_a_taint_is_removed_and_every_other_kept() -> None:
    own = {"key": STARTUP_TAINT, "effect": "NoSchedule"}
    node_obj = {"metadata": {"resourceVersion": "3"}, "spec": {"taints": [OTHER, own]}}
    assert taint_patch(node_obj, STARTUP_TAINT, present=False) == {
        "metadata": {"resourceVersion": "3"},
        "spec": {"taints": [OTHER]},
    }


@pytest.mark.parametrize("present", [True, False])
def test_a_node_already_so_needs_no_patch(present: bool) -> None:
    own = [{"key": NO_ROOM_TAINT, "effect": "NoSchedule"}] if present else []
    assert taint_patch({"metadata": {}, "spec": {"taints": own}}, NO_ROOM_TAINT, present=present) is None


# -- the startup taint ----------------------------------------------------------------------------


async def test_the_startup_taint_is_lifted_and_the_others_stay(kube: FakeKube, api: KubeApi) -> None:
    registered = node("n1", "i-n1")
    registered["spec"]["taints"] = [OTHER, {"key": STARTUP_TAINT, "effect": "NoSchedule"}]
    kube.add_object("nodes", registered)
    assert await lift_startup_taint(api, "n1") is True
    assert taints(kube, "n1") == [OTHER]
    assert await lift_startup_taint(api, "n1") is False  # a restart finds it gone: one read, no write
    assert [r.verb for r in kube.requests if r.plural == "nodes"] == ["get", "patch", "get"]


async def test_a_node_changed_meanwhile_is_read_again(kube: FakeKube, api: KubeApi) -> None:
    registered = node("n1", "i-n1")
    registered["spec"]["taints"] = [{"key": STARTUP_TAINT, "effect": "NoSchedule"}]
    kube.add_object("nodes", registered)
    kube.faults.append(Fault(verb="patch", plural="nodes", status=409, times=1))
    assert await lift_startup_taint(api, "n1") is True
    assert taints(kube, "n1") == []
    assert [r.verb for r in kube.requests if r.plural == "nodes"] == ["get", "patch", "get", "patch"]


async def test_lifting_from_a_node_that_is_gone_says_so(api: KubeApi) -> None:
    with pytest.raises(errors.KubeNotFound):
        await lift_startup_taint(api, "nowhere")


# -- the max-pods annotation ----------------------------------------------------------------------


async def test_every_node_carries_its_max_pods_and_gets_it_back(kube: FakeKube, api: KubeApi) -> None:
    cluster = Cluster(kube, api)
    cluster.add_node("n1")
    async with leading(cluster):
        # m5.large: 3 interfaces of 10 addresses, one each the interface's own: 27 pods, and 2 more
        # in the host's network (the VPC CNI's table says 29).
        await until(lambda: annotation(kube, "n1") == "29")
        await api.client.patch(
            NODES.resource(),
            "n1",
            {"metadata": {"annotations": {MAX_PODS_ANNOTATION: None}}},
            patch_type=PatchType.MERGE,
        )
        await until(lambda: annotation(kube, "n1") == "29")
    writes = [r for r in kube.requests if r.plural == "nodes" and r.verb == "patch"]
    assert len(writes) == 3  # ours, the edit, ours again: an unchanged value is never written


async def test_no_annotation_when_turned_off(kube: FakeKube, api: KubeApi) -> None:
    cluster = Cluster(kube, api, max_pods_annotation=False)
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        await asyncio.sleep(5)
    assert annotation(kube, "n1") is None
    assert not [r for r in kube.requests if r.plural == "nodes" and r.verb == "patch"]


# -- the no-room taint ----------------------------------------------------------------------------


def small_subnet_node(cluster: Cluster) -> None:
    """n1 alone in a zone whose one subnet has room for two more addresses, one of them the subnet's
    reserve for waiting pods: its warm pool of 4 stops at 1."""
    cluster.cloud.add_subnet("s-small", vpc="vpc-1", zone="us-east-1b", cidr="10.0.8.0/28", available=2)
    cluster.cloud.add_instance("i-n1", type="m5.large", subnet="s-small", security_groups=["sg-1"])
    cluster.kube.add_object("nodes", node("n1", "i-n1", zone="us-east-1b"))


async def use(api: KubeApi, cluster: Cluster, count: int) -> None:
    """The agent reports the first ``count`` pool addresses in use."""
    used = sorted(cluster.pool("n1")["status"]["pool"])[:count]
    patch = {"status": {"used": used}}
    await api.client.patch(ENIPOOLS.resource().Status, "n1", patch, patch_type=PatchType.MERGE)
    await until(lambda: cluster.pool("n1")["status"]["stats"]["used"] == count)


async def test_no_room_taints_late_and_clears_once_room_held(kube: FakeKube, api: KubeApi) -> None:
    cluster = Cluster(kube, api, no_room_taint=True)
    small_subnet_node(cluster)
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 1)
        await asyncio.sleep(5)
        assert keys(kube, "n1") == []  # short of its watermark, but an address is free
        await use(api, cluster, 1)
        start = asyncio.get_running_loop().time()
        await asyncio.sleep(25)
        assert keys(kube, "n1") == []  # not yet: a pass may land an address any moment
        await until(lambda: keys(kube, "n1") == [NO_ROOM_TAINT], limit=15)
        tainted_after = asyncio.get_running_loop().time() - start
        assert 29 <= tainted_after < 32  # from the status that said so, just before the wait began
        assert cluster.metrics.sample("eni_ipam_nodes_no_room_tainted") == 1
        (event,) = [e for e in kube.objects("events", "default") if e["reason"] == "NoAddressRoom"]
        assert NO_ROOM_TAINT in event["message"]

        # Room for 40 s, then none again: the taint stays on through it (it needs 60 s of room).
        await use(api, cluster, 0)
        await asyncio.sleep(40)
        assert keys(kube, "n1") == [NO_ROOM_TAINT]
        await use(api, cluster, 1)
        await asyncio.sleep(30)
        assert keys(kube, "n1") == [NO_ROOM_TAINT]

        # Room for good: off after 60 s of it.
        await use(api, cluster, 0)
        start = asyncio.get_running_loop().time()
        await asyncio.sleep(55)
        assert keys(kube, "n1") == [NO_ROOM_TAINT]
        await until(lambda: keys(kube, "n1") == [], limit=10)
        assert 59 <= asyncio.get_running_loop().time() - start < 62
        assert cluster.metrics.sample("eni_ipam_nodes_no_room_tainted") == 0


async def test_a_short_spell_without_room_never_taints(kube: FakeKube, api: KubeApi) -> None:
    cluster = Cluster(kube, api, no_room_taint=True)
    small_subnet_node(cluster)
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 1)
        for _ in range(3):
            await use(api, cluster, 1)
            await asyncio.sleep(20)
            assert keys(kube, "n1") == []
            await use(api, cluster, 0)
            await asyncio.sleep(20)
        await asyncio.sleep(60)
    assert keys(kube, "n1") == []
    assert annotation(kube, "n1") == "29"
    assert len([r for r in kube.requests if r.plural == "nodes" and r.verb == "patch"]) == 1  # the annotation


async def test_a_new_leader_keeps_the_taint_it_finds(kube: FakeKube, api: KubeApi) -> None:
    cluster = Cluster(kube, api, no_room_taint=True)
    small_subnet_node(cluster)
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 1)
        await use(api, cluster, 1)
        await until(lambda: keys(kube, "n1") == [NO_ROOM_TAINT], limit=40)
    taint_writes = len([r for r in kube.requests if r.plural == "nodes" and r.verb == "patch"])
    successor = Cluster(kube, api, no_room_taint=True)
    successor.cloud = cluster.cloud
    successor.manager.provider = cluster.manager.provider
    async with leading(successor):
        await asyncio.sleep(90)
        assert keys(kube, "n1") == [NO_ROOM_TAINT]
    assert len([r for r in kube.requests if r.plural == "nodes" and r.verb == "patch"]) == taint_writes


async def test_turning_the_taint_off_takes_it_off(kube: FakeKube, api: KubeApi) -> None:
    cluster = Cluster(kube, api)
    small_subnet_node(cluster)
    taints_on = [OTHER, {"key": NO_ROOM_TAINT, "effect": "NoSchedule"}]
    patch = {"spec": {"taints": taints_on}}
    await api.client.patch(NODES.resource(), "n1", patch, patch_type=PatchType.MERGE)
    async with leading(cluster):
        await until(lambda: keys(kube, "n1") == ["dedicated"])
