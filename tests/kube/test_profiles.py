"""Profiles on ENIPools: a new pool follows the most specific profile its Node's labels match, a
relabelled Node's pool moves to its new profile field by field (what someone edited stays theirs),
and a profile changed in the configuration reaches its pools when the next term begins — the real
manager on the in-memory cloud, against the fake API server."""

from __future__ import annotations

import json
from typing import Any

import pytest
from lightkube.types import PatchType

from eni_ipam.core.profiles import NodeSelector, Profile, ProfileSet
from eni_ipam.core.spec import NodeSpec
from eni_ipam.kube.api import ENIPOOLS, NODES, KubeApi
from eni_ipam.kube.projection import DEFAULTS_ANNOTATION, PROFILE_LABEL
from eni_ipam_testkit.fake_kube import FakeKube
from tests.kube.conftest import node
from tests.kube.test_source import Cluster, leading
from tests.waiting import until

ZONE = "topology.kubernetes.io/zone"


def profile(name: str, labels: dict[str, str], **spec: Any) -> Profile:
    return Profile(name=name, node_selector=NodeSelector(match_labels=labels), spec=NodeSpec(**spec))


PROFILES = (
    profile("web", {"node-group": "web"}, pre_allocate=6, max_above_watermark=2),
    profile("web-a", {"node-group": "web", ZONE: "us-east-1a"}, pre_allocate=5, subnet_ids=("s-web-a",)),
    profile("batch", {"node-group": "batch"}, pre_allocate=10, max_above_watermark=1),
)


def make_cluster(kube: FakeKube, api: KubeApi, profiles: tuple[Profile, ...] = PROFILES) -> Cluster:
    cluster = Cluster(kube, api, profiles=profiles)
    cluster.cloud.add_subnet("s-web-a", vpc="vpc-1", zone="us-east-1a", cidr="10.0.8.0/24")
    return cluster


@pytest.fixture
def cluster(kube: FakeKube, api: KubeApi) -> Cluster:
    return make_cluster(kube, api)


def spec(cluster: Cluster, name: str) -> dict[str, Any]:
    return (cluster.pool(name) or {}).get("spec") or {}


def followed(cluster: Cluster, name: str) -> str | None:
    """The profile the pool says it follows (its label), None without one."""
    return ((cluster.pool(name) or {}).get("metadata", {}).get("labels") or {}).get(PROFILE_LABEL)


async def relabel(cluster: Cluster, name: str, **labels: str | None) -> None:
    """Someone's ``kubectl label node``."""
    patch = {"metadata": {"labels": labels}}
    await cluster.api.client.patch(NODES.resource(), name, patch, patch_type=PatchType.MERGE)


async def edit(cluster: Cluster, name: str, **fields: object) -> None:
    """Someone's ``kubectl patch`` of the pool's spec."""
    await cluster.api.client.patch(ENIPOOLS.resource(), name, {"spec": fields}, patch_type=PatchType.MERGE)


async def test_a_new_pool_follows_the_most_specific_profile_its_node_matches(cluster: Cluster) -> None:
    cluster.add_node("zonal", **{"node-group": "web"})  # us-east-1a: web-a has two requirements
    cluster.cloud.add_subnet("s-b", vpc="vpc-1", zone="us-east-1b", cidr="10.0.9.0/24")
    cluster.cloud.add_instance("i-other", type="m5.large", subnet="s-b", security_groups=["sg-1"])
    cluster.kube.add_object("nodes", node("other", "i-other", zone="us-east-1b", **{"node-group": "web"}))
    cluster.add_node("plain")
    async with leading(cluster):
        await until(lambda: cluster.available("zonal") == 5)
        await until(lambda: cluster.available("other") >= 6 and cluster.available("plain") == 4)
        assert followed(cluster, "zonal") == "web-a"
        assert spec(cluster, "zonal")["subnetIDs"] == ["s-web-a"]
        assert "maxAboveWatermark" not in spec(cluster, "zonal")  # only one profile applies: web-a
        assert followed(cluster, "other") == "web"
        assert spec(cluster, "other")["maxAboveWatermark"] == 2
        assert followed(cluster, "plain") is None  # node_defaults alone
        assert spec(cluster, "plain")["preAllocate"] == 4
        recorded = json.loads(cluster.pool("zonal")["metadata"]["annotations"][DEFAULTS_ANNOTATION])
        assert recorded == {"preAllocate": 5, "subnetIDs": ["s-web-a"]}


async def test_a_relabelled_node_moves_its_pool_to_the_new_profile_and_keeps_what_was_edited(
    cluster: Cluster,
) -> None:
    cluster.add_node("n1", zone="us-east-1a", **{"node-group": "web"})
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 5)
        await relabel(cluster, "n1", **{"node-group": "batch"})
        await until(lambda: followed(cluster, "n1") == "batch")
        assert spec(cluster, "n1")["preAllocate"] == 10
        assert spec(cluster, "n1")["maxAboveWatermark"] == 1
        assert "subnetIDs" not in spec(cluster, "n1")  # web-a's key, which batch does not write
        await until(lambda: cluster.available("n1") >= 10)
        # Someone sets one field by hand; the node goes back to web: that field stays theirs.
        await edit(cluster, "n1", preAllocate=7)
        await until(lambda: cluster.available("n1") >= 10 and spec(cluster, "n1")["preAllocate"] == 7)
        await relabel(cluster, "n1", **{"node-group": "web"})
        await until(lambda: followed(cluster, "n1") == "web-a")
        assert spec(cluster, "n1")["preAllocate"] == 7
        assert spec(cluster, "n1")["subnetIDs"] == ["s-web-a"]
        assert "maxAboveWatermark" not in spec(cluster, "n1")


async def test_a_node_no_profile_matches_any_more_goes_back_to_node_defaults(cluster: Cluster) -> None:
    cluster.add_node("n1", **{"node-group": "batch"})
    async with leading(cluster):
        await until(lambda: followed(cluster, "n1") == "batch" and cluster.available("n1") >= 10)
        await relabel(cluster, "n1", **{"node-group": None})
        await until(lambda: followed(cluster, "n1") is None)
        assert spec(cluster, "n1")["preAllocate"] == 4
        assert "maxAboveWatermark" not in spec(cluster, "n1")


async def test_a_profile_changed_in_the_configuration_reaches_its_pools_when_the_term_begins(
    cluster: Cluster,
) -> None:
    cluster.add_node("n1", **{"node-group": "batch"})
    cluster.add_node("n2", **{"node-group": "batch"})
    async with leading(cluster):
        await until(lambda: cluster.available("n1") >= 10 and cluster.available("n2") >= 10)
        await edit(cluster, "n2", preAllocate=3)
        await until(lambda: spec(cluster, "n2")["preAllocate"] == 3)
    # A helm upgrade restarts the controller: batch now keeps 12 ready, and sets a floor.
    changed = (*PROFILES[:2], profile("batch", {"node-group": "batch"}, pre_allocate=12, min_allocate=12))
    cluster.source.pool_writer.profiles = ProfileSet(changed, NodeSpec(pre_allocate=4))
    async with leading(cluster):
        await until(lambda: spec(cluster, "n1").get("preAllocate") == 12)
        await until(lambda: spec(cluster, "n2").get("minAllocate") == 12)
        assert spec(cluster, "n1")["minAllocate"] == 12
        assert "maxAboveWatermark" not in spec(cluster, "n1")  # a default no longer set goes
        assert spec(cluster, "n2")["preAllocate"] == 3  # someone's
        assert spec(cluster, "n2")["minAllocate"] == 12
        await until(lambda: cluster.available("n1") >= 12)


async def test_nodes_keep_only_the_labels_the_profiles_name(cluster: Cluster) -> None:
    cluster.add_node("n1", team="payments", **{"node-group": "web"})
    async with leading(cluster):
        await until(lambda: cluster.available("n1") == 5)
        kept = cluster.source.nodes.store["n1"].labels
        assert kept == (("node-group", "web"), (ZONE, "us-east-1a"))


async def test_a_pool_made_by_hand_is_given_no_profile(cluster: Cluster) -> None:
    cluster.cloud.add_instance("i-hand", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    cluster.kube.add_object(
        "enipools",
        {
            "apiVersion": "eni-ipam.io/v1alpha1",
            "kind": "ENIPool",
            "metadata": {"name": "hand"},
            "spec": {"instanceID": "i-hand", "preAllocate": 2},
        },
    )
    cluster.kube.add_object("nodes", node("hand", "i-hand", **{"node-group": "batch"}))
    async with leading(cluster):
        await until(lambda: cluster.available("hand") == 2)
        assert followed(cluster, "hand") is None
        assert spec(cluster, "hand")["preAllocate"] == 2
