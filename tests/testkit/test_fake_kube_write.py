"""FakeKube writes through the real lightkube client: conflicts, status, patches, deletion, schema, faults."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.core_v1 import Container, NodeSpec, PodSpec
from lightkube.models.meta_v1 import ObjectMeta, OwnerReference
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import CascadeType, PatchType

from eni_ipam_testkit.fake_kube import FakeKube, Fault

ENIPool = create_global_resource("eni-ipam.io", "v1alpha1", "ENIPool", "enipools")

STRICT_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "pools.strict.example.io"},
    "spec": {
        "group": "strict.example.io",
        "scope": "Cluster",
        "names": {"kind": "Pool", "plural": "pools"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["subnet"],
                                "properties": {
                                    "minAllocate": {"type": "integer", "minimum": 0, "default": 2},
                                    "mode": {"type": "string", "enum": ["ips", "prefixes"]},
                                    "subnet": {"type": "string", "pattern": "^subnet-[0-9a-f]+$"},
                                    "tags": {"type": "object", "additionalProperties": {"type": "string"}},
                                },
                            },
                            "status": {"type": "object", "properties": {"free": {"type": "integer"}}},
                        },
                    }
                },
            }
        ],
    },
}
Pool = create_global_resource("strict.example.io", "v1", "Pool", "pools")


@pytest.fixture(autouse=True)
async def _strict_crd(kube: FakeKube) -> None:
    await kube.apply_manifest(STRICT_CRD)
    kube.requests.clear()


async def events_since(client: AsyncClient, res: Any, since: str, count: int) -> list[tuple[str, str, str]]:
    events = []
    async with asyncio.timeout(5), contextlib.aclosing(client.watch(res, resource_version=since)) as stream:
        async for kind, obj in stream:
            events.append((kind, obj.metadata.name, obj.metadata.resourceVersion))
            if len(events) == count:
                break
    return events


async def test_put_with_a_stale_resource_version_is_a_conflict(client: AsyncClient) -> None:
    lease = await client.create(Lease(metadata=ObjectMeta(name="leader"), spec=LeaseSpec(holderIdentity="a")))
    lease.spec.holderIdentity = "b"
    updated = await client.replace(lease)
    assert int(updated.metadata.resourceVersion) > int(lease.metadata.resourceVersion)
    lease.spec.holderIdentity = "c"  # still carries the version before the update
    with pytest.raises(ApiError) as caught:
        await client.replace(lease)
    assert (caught.value.status.code, caught.value.status.reason) == (409, "Conflict")
    assert "the object has been modified; please apply your changes" in caught.value.status.message
    assert (await client.get(Lease, "leader")).spec.holderIdentity == "b"


async def test_merge_patch_with_a_stale_resource_version_is_a_conflict(client: AsyncClient) -> None:
    pool = await client.create(ENIPool(metadata=ObjectMeta(name="n1"), spec={"minFree": 1}))
    stale = pool.metadata.resourceVersion
    await client.patch(ENIPool, "n1", {"spec": {"minFree": 2}}, patch_type=PatchType.MERGE)
    with pytest.raises(ApiError) as caught:
        patch = {"metadata": {"resourceVersion": stale}, "spec": {"minFree": 3}}
        await client.patch(ENIPool, "n1", patch, patch_type=PatchType.MERGE)
    assert caught.value.status.code == 409
    current = await client.get(ENIPool, "n1")
    fresh = {"metadata": {"resourceVersion": current.metadata.resourceVersion}, "spec": {"minFree": 3}}
    assert (await client.patch(ENIPool, "n1", fresh, patch_type=PatchType.MERGE)).spec == {"minFree": 3}


async def test_custom_resource_put_needs_a_resource_version(client: AsyncClient) -> None:
    await client.create(ENIPool(metadata=ObjectMeta(name="n1"), spec={"a": 1}))
    with pytest.raises(ApiError) as caught:
        await client.replace(ENIPool(metadata=ObjectMeta(name="n1"), spec={"a": 2}))
    assert caught.value.status.code == 422
    assert "metadata.resourceVersion" in caught.value.status.message


async def test_status_subresource_separates_status_from_the_rest(kube: FakeKube, client: AsyncClient) -> None:
    created = await client.create(
        ENIPool(metadata=ObjectMeta(name="n1"), spec={"min": 1}, status={"free": 9})
    )
    assert created.status is None  # status in a create body is dropped
    assert created.metadata.generation == 1
    await client.patch(ENIPool, "n1", {"status": {"free": 99}}, patch_type=PatchType.MERGE)
    assert "status" not in (kube.get_object("enipools", "n1") or {})  # main-resource patch ignores status
    patched = await client.patch(
        ENIPool.Status, "n1", {"spec": {"min": 5}, "status": {"free": 3}}, patch_type=PatchType.MERGE
    )
    assert (patched.spec, patched.status) == ({"min": 1}, {"free": 3})  # /status ignores the spec
    assert patched.metadata.generation == 1  # status changes do not move the generation
    current = await client.get(ENIPool, "n1")
    current["spec"] = {"min": 2}
    current["status"] = {"free": 0}
    replaced = await client.replace(current)
    assert (replaced.spec, replaced.status, replaced.metadata.generation) == ({"min": 2}, {"free": 3}, 2)
    status_put = await client.replace(
        ENIPool.Status(metadata=replaced.metadata, spec={"min": 9}, status={"free": 7}), "n1"
    )
    assert (status_put.spec, status_put.status, status_put.metadata.generation) == (
        {"min": 2},
        {"free": 7},
        2,
    )


async def test_a_write_that_changes_nothing_keeps_the_resource_version(client: AsyncClient) -> None:
    created = await client.create(Node(metadata=ObjectMeta(name="n1", labels={"a": "b"})))
    same = await client.patch(Node, "n1", {"metadata": {"labels": {"a": "b"}}})
    assert same.metadata.resourceVersion == created.metadata.resourceVersion


async def test_json_patch_operations_apply_and_a_failed_test_is_422(client: AsyncClient) -> None:
    await client.create(
        Node(metadata=ObjectMeta(name="n1", labels={"a": "1"}), spec=NodeSpec(podCIDRs=["x"]))
    )
    operations = [
        {"op": "test", "path": "/metadata/labels/a", "value": "1"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "2"},
        {"op": "add", "path": "/metadata/labels/b~1c", "value": "3"},
        {"op": "add", "path": "/spec/podCIDRs/-", "value": "y"},
        {"op": "remove", "path": "/spec/podCIDRs/0"},
    ]
    patched = await client.patch(Node, "n1", operations, patch_type=PatchType.JSON)
    assert patched.metadata.labels == {"a": "2", "b/c": "3"}
    assert patched.spec.podCIDRs == ["y"]
    failing = [{"op": "test", "path": "/metadata/labels/a", "value": "1"}, {"op": "remove", "path": "/spec"}]
    with pytest.raises(ApiError) as caught:
        await client.patch(Node, "n1", failing, patch_type=PatchType.JSON)
    assert (caught.value.status.code, caught.value.status.reason) == (422, "Invalid")
    assert (await client.get(Node, "n1")).spec.podCIDRs == ["y"]


async def test_apply_without_a_field_manager_is_a_bad_request(kube: FakeKube) -> None:
    # lightkube refuses to send this itself (ValueError), so go over plain HTTP.
    async with httpx2.AsyncClient(
        base_url=kube.url, headers={"Authorization": f"Bearer {kube.admin_token}"}, verify=kube.ssl_context()
    ) as http:
        response = await http.patch(
            "/apis/eni-ipam.io/v1alpha1/enipools/n1",
            content=b"apiVersion: eni-ipam.io/v1alpha1\nkind: ENIPool\nmetadata: {name: n1}\n",
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
    assert response.status_code == 400
    assert "fieldManager: Required value" in response.json()["message"]
    assert kube.objects("enipools") == []


async def test_apply_creates_then_merges_what_other_managers_apply(client: AsyncClient) -> None:
    applied = ENIPool(metadata=ObjectMeta(name="n1"), spec={"a": 1, "b": 2})
    created = await client.apply(applied, field_manager="eni-ipam")
    assert created.spec == {"a": 1, "b": 2}
    merged = await client.apply(ENIPool(metadata=ObjectMeta(name="n1"), spec={"c": 3}), field_manager="other")
    assert merged.spec == {"a": 1, "b": 2, "c": 3}
    # The first applier no longer applies a: it is gone (b it still applies, c is other's).
    narrowed = await client.apply(
        ENIPool(metadata=ObjectMeta(name="n1"), spec={"b": 2}), field_manager="eni-ipam"
    )
    assert narrowed.spec == {"b": 2, "c": 3}
    status = await client.apply(
        ENIPool.Status(metadata=ObjectMeta(name="n1"), status={"free": 4}), field_manager="eni-ipam"
    )
    assert status.status == {"free": 4}


async def test_create_of_an_existing_name_is_already_exists_and_generate_name_is_unique(
    client: AsyncClient,
) -> None:
    await client.create(Node(metadata=ObjectMeta(name="n1")))
    with pytest.raises(ApiError) as caught:
        await client.create(Node(metadata=ObjectMeta(name="n1")))
    assert (caught.value.status.code, caught.value.status.reason) == (409, "AlreadyExists")
    names = {
        (await client.create(Node(metadata=ObjectMeta(generateName="gen-")))).metadata.name for _ in range(5)
    }
    assert len(names) == 5 and all(n.startswith("gen-") and len(n) == 9 for n in names)


async def test_delete_with_finalizers_waits_until_they_are_removed(
    kube: FakeKube, client: AsyncClient, rv: Callable[[int], str]
) -> None:
    await client.create(ENIPool(metadata=ObjectMeta(name="n1", finalizers=["eni-ipam.io/release"])))
    since = kube.resource_version
    await client.delete(ENIPool, "n1")
    marked = await client.get(ENIPool, "n1")
    assert marked.metadata.deletionTimestamp is not None
    with pytest.raises(ApiError) as caught:  # no new finalizers while deleting
        await client.patch(
            ENIPool,
            "n1",
            {"metadata": {"finalizers": ["eni-ipam.io/release", "x/y"]}},
            patch_type=PatchType.MERGE,
        )
    assert caught.value.status.code == 422
    await client.patch(ENIPool, "n1", {"metadata": {"finalizers": None}}, patch_type=PatchType.MERGE)
    assert kube.get_object("enipools", "n1") is None
    assert await events_since(client, ENIPool, since, 2) == [
        ("MODIFIED", "n1", rv(2)),
        ("DELETED", "n1", rv(3)),
    ]


async def test_deleting_an_owner_collects_its_dependents_after_it(
    kube: FakeKube, client: AsyncClient, rv: Callable[[int], str]
) -> None:
    owner = await client.create(Node(metadata=ObjectMeta(name="n1")))
    other = await client.create(Node(metadata=ObjectMeta(name="n2")))

    def ref(obj: Node) -> OwnerReference:
        return OwnerReference(apiVersion="v1", kind="Node", name=obj.metadata.name, uid=obj.metadata.uid)

    async def dependent(name: str, owners: list[Node], finalizers: list[str] | None = None) -> None:
        meta = ObjectMeta(name=name, ownerReferences=[ref(o) for o in owners], finalizers=finalizers)
        await client.create(Lease(metadata=meta))

    await dependent("plain", [owner])
    await dependent("guarded", [owner], finalizers=["keep"])
    await dependent("shared", [owner, other])
    await dependent("unrelated", [other])
    since = kube.resource_version
    await client.delete(Node, "n1")
    node_events = await events_since(client, Node, since, 1)
    lease_events = await events_since(client, Lease, since, 3)
    assert node_events == [("DELETED", "n1", rv(7))]
    assert [(kind, name) for kind, name, _ in lease_events] == [
        ("DELETED", "plain"),
        ("MODIFIED", "guarded"),  # has a finalizer: only marked for deletion
        ("MODIFIED", "shared"),  # another owner lives: only the dangling reference goes
    ]
    assert all(int(version) > int(rv(7)) for _, _, version in lease_events)
    guarded = kube.get_object("leases", "guarded", namespace="default") or {}
    assert "deletionTimestamp" in guarded["metadata"]
    shared = kube.get_object("leases", "shared", namespace="default") or {}
    assert [r["name"] for r in shared["metadata"]["ownerReferences"]] == ["n2"]
    assert kube.get_object("leases", "unrelated", namespace="default") is not None


async def test_orphan_deletion_keeps_dependents_without_the_reference(
    kube: FakeKube, client: AsyncClient
) -> None:
    owner = await client.create(
        Pod(
            metadata=ObjectMeta(name="owner"),
            spec=PodSpec(containers=[Container(name="c", image="busybox:1")]),
        )
    )
    reference = OwnerReference(apiVersion="v1", kind="Pod", name="owner", uid=owner.metadata.uid)
    await client.create(Lease(metadata=ObjectMeta(name="child", ownerReferences=[reference])))
    await client.delete(Pod, "owner", cascade=CascadeType.ORPHAN)
    child = kube.get_object("leases", "child", namespace="default") or {}
    assert "ownerReferences" not in child["metadata"]
    assert kube.get_object("pods", "owner", namespace="default") is None


async def test_schema_violation_is_invalid_naming_the_field_and_changes_nothing(
    kube: FakeKube, client: AsyncClient
) -> None:
    before = kube.resource_version
    with pytest.raises(ApiError) as caught:
        await client.create(
            Pool(metadata=ObjectMeta(name="p1"), spec={"subnet": "subnet-0a", "minAllocate": -1})
        )
    assert (caught.value.status.code, caught.value.status.reason) == (422, "Invalid")
    assert caught.value.status.message == (
        'Pool.strict.example.io "p1" is invalid: spec.minAllocate: Invalid value: -1: '
        "spec.minAllocate in body should be greater than or equal to 0"
    )
    with pytest.raises(ApiError) as caught:
        await client.create(Pool(metadata=ObjectMeta(name="p1"), spec={"subnet": "vpc-1", "mode": "all"}))
    message = caught.value.status.message
    assert 'spec.mode: Unsupported value: "all": supported values: "ips", "prefixes"' in message
    assert (
        "spec.subnet: Invalid value: \"vpc-1\": spec.subnet in body should match '^subnet-[0-9a-f]+$'"
        in message
    )
    with pytest.raises(ApiError) as caught:
        await client.create(Pool(metadata=ObjectMeta(name="p1"), spec={}))
    assert caught.value.status.message.endswith("spec.subnet: Required value")
    assert kube.resource_version == before and kube.objects("pools") == []

    await client.create(Pool(metadata=ObjectMeta(name="p1"), spec={"subnet": "subnet-0a"}))
    with pytest.raises(ApiError) as caught:
        await client.patch(Pool.Status, "p1", {"status": {"free": "many"}}, patch_type=PatchType.MERGE)
    assert 'status.free: Invalid value: "string": status.free in body must be of type integer' in (
        caught.value.status.message
    )
    assert "status" not in (kube.get_object("pools", "p1") or {})


async def test_schema_prunes_unknown_fields_and_applies_defaults(client: AsyncClient) -> None:
    spec = {"subnet": "subnet-0a", "typo": True, "tags": {"team": "net"}}
    created = await client.create(Pool(metadata=ObjectMeta(name="p1"), spec=spec, extra="dropped"))
    assert created.spec == {"subnet": "subnet-0a", "tags": {"team": "net"}, "minAllocate": 2}
    assert "extra" not in created


async def test_fault_fails_only_the_next_matching_requests(kube: FakeKube, client: AsyncClient) -> None:
    await client.create(ENIPool(metadata=ObjectMeta(name="n1"), spec={"a": 1}))
    kube.faults.append(Fault(verb="patch", plural="enipools", status=500, subresource="status", times=2))
    await client.patch(ENIPool, "n1", {"spec": {"a": 2}}, patch_type=PatchType.MERGE)  # not the subresource
    for _ in range(2):
        with pytest.raises(ApiError) as caught:
            await client.patch(ENIPool.Status, "n1", {"status": {"free": 1}}, patch_type=PatchType.MERGE)
        assert (caught.value.status.code, caught.value.status.reason) == (500, "InternalError")
    assert "status" not in (kube.get_object("enipools", "n1") or {})  # failed before touching state
    await client.patch(ENIPool.Status, "n1", {"status": {"free": 1}}, patch_type=PatchType.MERGE)
    assert kube.faults == []
    assert [r.status for r in kube.requests if r.verb == "patch"] == [200, 500, 500, 200]


async def test_throttling_fault_carries_retry_after(kube: FakeKube, client: AsyncClient) -> None:
    kube.faults.append(Fault(verb="list", plural="nodes", status=429, retry_after=2))
    with pytest.raises(ApiError) as caught:
        [n async for n in client.list(Node)]
    assert (caught.value.status.code, caught.value.status.reason) == (429, "TooManyRequests")
    assert caught.value.response.headers["Retry-After"] == "2"
    assert [n async for n in client.list(Node)] == []
