"""FakeKube reads through the real lightkube client: get, list, pagination, selectors, records, auth."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest
from lightkube import AsyncClient, KubeConfig, operators
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod

from eni_ipam_testkit.fake_kube import FakeKube, RequestRecord


def raw_client(kube: FakeKube, *, auth: bool = True) -> httpx2.AsyncClient:
    """Raw HTTPS, for what lightkube hides (list kinds, headers) or refuses to send."""
    headers = {"Authorization": f"Bearer {kube.admin_token}"} if auth else {}
    return httpx2.AsyncClient(base_url=kube.url, headers=headers, verify=kube.ssl_context())


async def node_names(client: AsyncClient, **selectors: object) -> list[str]:
    return [n.metadata.name async for n in client.list(Node, **selectors)]  # type: ignore[arg-type]


async def test_list_reports_the_current_resource_version(
    kube: FakeKube, client: AsyncClient, rv: Callable[[int], str]
) -> None:
    for name in ("n1", "n2", "n3"):
        await client.create(Node(metadata=ObjectMeta(name=name)))
    listing = client.list(Node)
    names = [n.metadata.name async for n in listing]
    assert names == ["n1", "n2", "n3"]
    assert listing.resourceVersion == kube.resource_version == rv(3)
    async with raw_client(kube) as http:
        body = (await http.get("/api/v1/nodes")).json()
    assert body["kind"] == "NodeList" and body["apiVersion"] == "v1"
    assert "kind" not in body["items"][0]  # built-in list items carry no kind, like the real server


async def test_list_pages_are_one_snapshot_even_when_objects_change_between_pages(
    kube: FakeKube, client: AsyncClient, rv: Callable[[int], str]
) -> None:
    for i in range(5):
        await client.create(Node(metadata=ObjectMeta(name=f"n{i}")))
    listing = client.list(Node, chunk_size=2)
    seen = []
    async for node in listing:
        seen.append(node.metadata.name)
        if len(seen) == 1:  # the first page is in; change the world before the next ones
            await client.delete(Node, "n4")
            await client.create(Node(metadata=ObjectMeta(name="n5")))
    assert seen == ["n0", "n1", "n2", "n3", "n4"]
    assert listing.resourceVersion == rv(5)
    pages = [r for r in kube.requests if r.verb == "list"]
    assert [r.params.get("limit") for r in pages] == ["2", "2", "2"]
    assert ["continue" in r.params for r in pages] == [False, True, True]


async def test_continue_token_from_a_compacted_version_gets_410(kube: FakeKube, client: AsyncClient) -> None:
    for i in range(3):
        await client.create(Node(metadata=ObjectMeta(name=f"n{i}")))
    with pytest.raises(ApiError) as caught:
        async for node in client.list(Node, chunk_size=2):
            if node.metadata.name == "n0":
                kube.compact()
    assert caught.value.status.code == 410
    assert caught.value.status.reason == "Expired"


async def test_label_selectors_filter_lists(client: AsyncClient) -> None:
    labels = {
        "a": {"role": "worker", "zone": "z1", "gpu": "yes"},
        "b": {"role": "worker", "zone": "z2"},
        "c": {"role": "infra", "zone": "z3"},
        "d": {},
    }
    for name, node_labels in labels.items():
        await client.create(Node(metadata=ObjectMeta(name=name, labels=node_labels)))
    assert await node_names(client, labels={"role": "worker"}) == ["a", "b"]
    assert await node_names(client, labels={"role": operators.not_equal("worker")}) == ["c", "d"]
    assert await node_names(client, labels={"zone": operators.in_(["z1", "z3"])}) == ["a", "c"]
    assert await node_names(client, labels={"zone": operators.not_in(["z1", "z3"])}) == ["b", "d"]
    assert await node_names(client, labels={"gpu": operators.exists()}) == ["a"]
    assert await node_names(client, labels={"gpu": operators.not_exists(), "role": "worker"}) == ["b"]


async def test_malformed_label_selector_is_a_bad_request(kube: FakeKube) -> None:
    async with raw_client(kube) as http:
        response = await http.get("/api/v1/nodes", params={"labelSelector": "role in worker"})
    assert response.status_code == 400
    assert response.json()["reason"] == "BadRequest"


async def test_field_selectors_filter_pods_by_node_phase_and_namespace(
    kube: FakeKube, client: AsyncClient
) -> None:
    kube.add_object("namespaces", {"metadata": {"name": "other"}})
    for name, namespace, node in (("p1", "default", "n1"), ("p2", "default", "n2"), ("p3", "other", "n1")):
        pod = Pod(
            metadata=ObjectMeta(name=name, namespace=namespace),
            spec=PodSpec(containers=[Container(name="c", image="busybox:1")], nodeName=node),
        )
        await client.create(pod)
    await client.patch(Pod.Status, "p2", {"status": {"phase": "Running"}}, namespace="default")

    async def names(**selectors: object) -> list[str]:
        return [p.metadata.name async for p in client.list(Pod, namespace="*", **selectors)]  # type: ignore[arg-type]

    assert await names(fields={"spec.nodeName": "n1"}) == ["p1", "p3"]
    assert await names(fields={"spec.nodeName": operators.not_equal("n1")}) == ["p2"]
    assert await names(fields={"status.phase": "Pending"}) == ["p1", "p3"]
    assert await names(fields={"metadata.namespace": "other"}) == ["p3"]
    assert await names(fields={"metadata.name": "p2", "status.phase": "Running"}) == ["p2"]


async def test_an_events_source_selects_its_source_component_as_the_real_server_does(kube: FakeKube) -> None:
    for name, component in (("e1", "eni-ipam"), ("e2", "kubelet")):
        kube.add_object(
            "events",
            {
                "metadata": {"name": name, "namespace": "default"},
                "involvedObject": {"kind": "Node", "name": "n1"},
                "type": "Warning",
                "source": {"component": component},
            },
        )
    async with raw_client(kube) as http:
        query = {"fieldSelector": "source=eni-ipam,type=Warning"}
        body = (await http.get("/api/v1/namespaces/default/events", params=query)).json()
    assert [item["metadata"]["name"] for item in body["items"]] == ["e1"]


async def test_unsupported_field_selector_is_a_bad_request(client: AsyncClient) -> None:
    with pytest.raises(ApiError) as caught:
        await node_names(client, fields={"spec.providerID": "aws:///i-1"})
    assert caught.value.status.code == 400
    assert caught.value.status.reason == "BadRequest"
    assert caught.value.status.message == "field label not supported: spec.providerID"


async def test_missing_object_and_unknown_path_are_not_found(kube: FakeKube, client: AsyncClient) -> None:
    with pytest.raises(ApiError) as caught:
        await client.get(Node, "ghost")
    assert (caught.value.status.code, caught.value.status.reason) == (404, "NotFound")
    assert caught.value.status.message == 'nodes "ghost" not found'
    async with raw_client(kube) as http:
        response = await http.get("/apis/example.io/v1/widgets")
    assert response.status_code == 404
    assert response.json()["kind"] == "Status"


async def test_requests_are_recorded_with_verb_target_and_status(kube: FakeKube, client: AsyncClient) -> None:
    await client.create(
        Pod(metadata=ObjectMeta(name="p1"), spec=PodSpec(containers=[Container(name="c", image="busybox:1")]))
    )
    await client.get(Pod, "p1")
    await client.patch(Pod.Status, "p1", {"status": {"phase": "Running"}})
    with pytest.raises(ApiError):
        await client.get(Pod, "p2")
    summary = [(r.verb, r.plural, r.namespace, r.name, r.subresource, r.status) for r in kube.requests]
    assert summary == [
        ("create", "pods", "default", None, None, 201),
        ("get", "pods", "default", "p1", None, 200),
        ("patch", "pods", "default", "p1", "status", 200),
        ("get", "pods", "default", "p2", None, 404),
    ]
    assert isinstance(kube.requests[0], RequestRecord)


async def test_requests_without_the_token_are_unauthorized(kube: FakeKube) -> None:
    async with raw_client(kube, auth=False) as http:
        response = await http.get("/api/v1/nodes")
    assert response.status_code == 401
    assert response.json()["reason"] == "Unauthorized"


async def test_written_kubeconfig_points_lightkube_at_the_server(kube: FakeKube, tmp_path: Path) -> None:
    kube.add_object("nodes", {"metadata": {"name": "n1"}})
    path = tmp_path / "kubeconfig"
    kube.write_kubeconfig(path)
    client = AsyncClient(KubeConfig.from_file(path))
    try:
        assert (await client.get(Node, "n1")).metadata.name == "n1"
    finally:
        await client.close()


async def test_direct_state_access_returns_copies(kube: FakeKube) -> None:
    for namespace in ("a", "b"):
        kube.add_object("namespaces", {"metadata": {"name": namespace}})
    kube.add_object(
        "pods",
        {
            "metadata": {"name": "p1", "namespace": "a"},
            "spec": {"containers": [{"name": "c", "image": "busybox:1"}]},
        },
    )
    kube.add_object(
        "pods",
        {
            "metadata": {"name": "p2", "namespace": "b"},
            "spec": {"containers": [{"name": "c", "image": "busybox:1"}]},
        },
    )
    assert [p["metadata"]["name"] for p in kube.objects("pods")] == ["p1", "p2"]
    assert [p["metadata"]["name"] for p in kube.objects("pods", namespace="b")] == ["p2"]
    copy = kube.get_object("pods", "p1", namespace="a")
    assert copy is not None
    copy["metadata"]["labels"] = {"changed": "yes"}
    assert "labels" not in (kube.get_object("pods", "p1", namespace="a") or {})["metadata"]
    assert kube.get_object("enipools", "missing") is None
    with pytest.raises(ValueError, match="unknown resource"):
        kube.objects("widgets")
