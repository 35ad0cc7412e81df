"""The pool writer's hold on the fields that follow the Node: an ENIPool's instance, type and zone
are put back from the Node at once when only the pool was edited, and a wrong value in the meantime
never takes another node's instance nor empties a pool — the real manager on the in-memory cloud,
against the fake API server."""

from __future__ import annotations

import asyncio

import pytest
from lightkube.types import PatchType

from eni_ipam.kube.api import ENIPOOLS, KubeApi
from eni_ipam.kube.resources import NODE_FIELDS
from eni_ipam_testkit.fake_kube import FakeKube
from tests.kube.conftest import node
from tests.kube.test_source import Cluster, conditions, leading
from tests.waiting import until


@pytest.fixture
def cluster(kube: FakeKube, api: KubeApi) -> Cluster:
    return Cluster(kube, api)


def spec(cluster: Cluster, name: str) -> dict:
    return (cluster.pool(name) or {}).get("spec") or {}


async def edit(cluster: Cluster, name: str, **fields: object) -> None:
    """Someone's ``kubectl patch`` of the pool's spec."""
    await cluster.api.client.patch(ENIPOOLS.resource(), name, {"spec": fields}, patch_type=PatchType.MERGE)


@pytest.mark.parametrize(
    ("key", "wrong"),
    [("instanceID", "i-n2"), ("instanceType", "m5.24xlarge"), ("zone", "us-east-1f")],
)
async def test_an_edited_node_field_is_put_back_from_the_node_without_the_node_changing(
    cluster: Cluster, key: str, wrong: str
) -> None:
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        node_version = cluster.kube.get_object("nodes", "n1")["metadata"]["resourceVersion"]
        right = spec(cluster, "n1")[key]
        await edit(cluster, "n1", **{key: wrong})
        await until(lambda: spec(cluster, "n1").get(key) == right)
        assert cluster.kube.get_object("nodes", "n1")["metadata"]["resourceVersion"] == node_version


async def test_people_fields_stay_while_a_node_field_beside_them_is_put_back(cluster: Cluster) -> None:
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        await edit(cluster, "n1", instanceID="i-typo", preAllocate=6)
        await until(lambda: spec(cluster, "n1").get("instanceID") == "i-n1")
        await until(lambda: cluster.available("n1") == 6)
        assert spec(cluster, "n1")["preAllocate"] == 6


async def test_an_instance_typed_into_a_pool_never_takes_another_nodes_instance(cluster: Cluster) -> None:
    """n1's pool is the older one: had its typo been believed, it would hold n2's instance and n2's
    pool would be emptied as a duplicate."""
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
        cluster.add_node("n2")
        await until(lambda: cluster.available("n2") == 4)
        n2_pool = set(cluster.pool("n2")["status"]["pool"])
        # The fake API server's own writes put the edit and the repair apart: the controller is held
        # off writing the pool for a while, so that what is delivered meanwhile is seen.
        cluster.source.pool_writer.queue = lambda name, action: None  # type: ignore[method-assign]
        await edit(cluster, "n1", instanceID="i-n2")
        await asyncio.sleep(2)
        for name in ("n1", "n2"):
            assert conditions(cluster.pool(name))["Ready"] == ("True", "PoolReady"), name
            assert cluster.available(name) == 4
        assert set(cluster.pool("n2")["status"]["pool"]) == n2_pool
        assert cluster.manager.nodes["n1"].instance_id == "i-n1"
        assert cluster.manager.nodes["n2"].instance_id == "i-n2"


async def test_a_wrong_instance_edited_while_standing_by_is_put_back_when_the_term_begins(
    cluster: Cluster,
) -> None:
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 4)
    await edit(cluster, "n1", instanceID="i-elsewhere")
    async with leading(cluster):
        await until(lambda: spec(cluster, "n1").get("instanceID") == "i-n1")
        assert cluster.available("n1") == 4


async def test_a_pool_without_its_nodes_labels_keeps_the_type_and_zone_people_gave_it(
    cluster: Cluster,
) -> None:
    """Only what the Node gives is the Node's: without the labels, type and zone are people's."""
    cluster.cloud.add_instance("i-bare", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    bare = node("bare", "i-bare")
    bare["metadata"]["labels"] = {}
    cluster.kube.add_object("nodes", bare)
    async with leading(cluster):
        await until(lambda: cluster.available("bare") == 4)
        assert set(spec(cluster, "bare")) & set(NODE_FIELDS) == {"instanceID"}
        await edit(cluster, "bare", zone="rack-7", instanceType="m5.large")
        await asyncio.sleep(1)
        assert spec(cluster, "bare")["zone"] == "rack-7"
        assert spec(cluster, "bare")["instanceType"] == "m5.large"
