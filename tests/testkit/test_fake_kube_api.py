"""FakeKube's faithfulness to kube-apiserver beyond list/watch: TLS and tokens, RBAC, CRDs through the API,
discovery, OpenAPI, Tables, field validation, dry runs, media types, strategic merge and Node rules."""

from __future__ import annotations

import datetime
import json
import ssl
from typing import Any

import httpx2
import pytest
import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from eni_ipam_testkit.fake_kube import ENIPOOL_CRD_DEFAULT, FakeKube
from eni_ipam_testkit.fake_kube.patch import strategic_merge
from eni_ipam_testkit.fake_kube.tables import human_duration, jsonpath
from tests.conftest import CRD

ENIPOOLS = "/apis/eni-ipam.io/v1alpha1/enipools"
ENIPool = create_global_resource("eni-ipam.io", "v1alpha1", "ENIPool", "enipools")
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"


@pytest.fixture
def kube_crds() -> list[dict[str, Any]]:
    """The chart's ENIPool CRD: these tests check its schema's answers too."""
    return [yaml.safe_load(CRD.read_text())]


def pool(name: str = "p1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "eni-ipam.io/v1alpha1",
        "kind": "ENIPool",
        "metadata": {"name": name},
        "spec": {"instanceID": "i-1", **spec},
    }


# -- TLS and identities ---------------------------------------------------------------------------


async def test_the_server_speaks_tls_verified_by_the_kubeconfigs_ca(kube: FakeKube) -> None:
    config = kube.kubeconfig()
    assert config["clusters"][0]["cluster"]["server"].startswith("https://127.0.0.1:")
    assert "certificate-authority-data" in config["clusters"][0]["cluster"]
    async with httpx2.AsyncClient(verify=ssl.create_default_context()) as untrusting:
        with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await untrusting.get(kube.url + "/version")
    async with httpx2.AsyncClient() as plain:
        with pytest.raises(httpx2.RemoteProtocolError):
            await plain.get(kube.url.replace("https://", "http://") + "/version")


async def test_a_service_account_token_authenticates_only_while_the_account_exists(kube: FakeKube) -> None:
    config = kube.kubeconfig(service_account=("apps", "robot"))
    token = config["users"][0]["user"]["token"]
    assert token != kube.admin_token
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(base_url=kube.url, headers=headers, verify=kube.ssl_context()) as http:
        assert (await http.get("/version")).status_code == 401
        kube.add_object("namespaces", {"metadata": {"name": "apps"}})
        kube.add_object("serviceaccounts", {"metadata": {"name": "robot", "namespace": "apps"}})
        assert (await http.get("/version")).status_code == 200
        denied = await http.get("/api/v1/nodes")
        assert denied.status_code == 403
        assert denied.json()["message"] == (
            'nodes is forbidden: User "system:serviceaccount:apps:robot" cannot list resource "nodes" in API '
            'group "" at the cluster scope'
        )
    assert kube.requests[-1].user == "system:serviceaccount:apps:robot"


# -- RBAC -----------------------------------------------------------------------------------------


async def test_rbac_follows_verbs_resource_names_subresources_and_wildcards(kube: FakeKube) -> None:
    kube.add_object("namespaces", {"metadata": {"name": "ns"}})
    kube.add_object("serviceaccounts", {"metadata": {"name": "sa", "namespace": "ns"}})
    kube.add_object(
        "roles",
        {
            "metadata": {"name": "lease", "namespace": "ns"},
            "rules": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "resourceNames": ["mine"],
                    "verbs": ["get", "update", "list", "watch"],
                },
            ],
        },
    )
    kube.add_object(
        "clusterroles",
        {
            "metadata": {"name": "status-writer"},
            "rules": [{"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["patch"]}],
        },
    )
    subject = [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}]
    kube.add_object(
        "rolebindings",
        {
            "metadata": {"name": "lease", "namespace": "ns"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease"},
            "subjects": subject,
        },
    )
    kube.add_object(
        "clusterrolebindings",
        {
            "metadata": {"name": "status-writer"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "status-writer",
            },
            "subjects": subject,
        },
    )
    kube.add_object("enipools", pool())
    client = AsyncClient(KubeConfig.from_dict(kube.kubeconfig(service_account=("ns", "sa"))))
    try:
        await client.create(Lease(metadata=ObjectMeta(name="mine")), namespace="ns")
        await client.create(Lease(metadata=ObjectMeta(name="other")), namespace="ns")
        assert (await client.get(Lease, "mine", namespace="ns")).metadata.name == "mine"
        listed = [
            lease.metadata.name
            async for lease in client.list(Lease, namespace="ns", fields={"metadata.name": "mine"})
        ]
        assert listed == ["mine"]  # a list limited to one name is checked against resourceNames
        with pytest.raises(ApiError) as caught:
            await client.get(Lease, "other", namespace="ns")
        assert caught.value.status.message == (
            'leases.coordination.k8s.io "other" is forbidden: User "system:serviceaccount:ns:sa" cannot get '
            'resource "leases" in API group "coordination.k8s.io" in the namespace "ns"'
        )
        with pytest.raises(ApiError):
            [lease async for lease in client.list(Lease, namespace="ns")]
        await client.patch(ENIPool.Status, "p1", {"status": {"message": "ok"}}, patch_type=PatchType.MERGE)
        with pytest.raises(ApiError) as caught:
            await client.patch(ENIPool, "p1", {"spec": {"zone": "z"}}, patch_type=PatchType.MERGE)
        assert caught.value.status.code == 403
    finally:
        await client.close()


async def test_a_binding_to_a_missing_role_says_so_in_the_denial(kube: FakeKube) -> None:
    kube.add_object("namespaces", {"metadata": {"name": "ns"}})
    kube.add_object("serviceaccounts", {"metadata": {"name": "sa", "namespace": "ns"}})
    kube.add_object(
        "clusterrolebindings",
        {
            "metadata": {"name": "b"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ghost"},
            "subjects": [{"kind": "Group", "name": "system:serviceaccounts:ns"}],
        },
    )
    client = AsyncClient(KubeConfig.from_dict(kube.kubeconfig(service_account=("ns", "sa"))))
    try:
        with pytest.raises(ApiError) as caught:
            await client.get(Node, "n1")
    finally:
        await client.close()
    assert caught.value.status.message.endswith(
        'at the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io "ghost" not found'
    )


# -- custom resource definitions ------------------------------------------------------------------


async def test_a_crd_created_through_the_api_is_established_and_served_until_deleted(
    kube: FakeKube, http: httpx2.AsyncClient
) -> None:
    created = await http.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=ENIPOOL_CRD_DEFAULT
    )
    assert created.status_code == 409  # the chart's CRD of the same name is already there
    crd = dict(ENIPOOL_CRD_DEFAULT, metadata={"name": "widgets.example.io"})
    crd["spec"] = dict(crd["spec"], group="example.io", names={"kind": "Widget", "plural": "widgets"})
    created = await http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd)
    assert created.status_code == 201
    status = created.json()["status"]
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [
        ("NamesAccepted", "True"),
        ("Established", "True"),
    ]
    assert status["acceptedNames"]["listKind"] == "WidgetList" and status["storedVersions"] == ["v1alpha1"]
    widget = {"apiVersion": "example.io/v1alpha1", "kind": "Widget", "metadata": {"name": "w1"}}
    assert (await http.post("/apis/example.io/v1alpha1/widgets", json=widget)).status_code == 201
    deleted = await http.delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.io")
    assert deleted.status_code == 200
    assert (await http.get("/apis/example.io/v1alpha1/widgets")).status_code == 404
    assert kube.get_object("customresourcedefinitions", "widgets.example.io") is None


async def test_a_crd_that_cannot_be_served_is_invalid(http: httpx2.AsyncClient) -> None:
    crd = json.loads(json.dumps(ENIPOOL_CRD_DEFAULT))
    crd["metadata"]["name"] = "pools.eni-ipam.io"
    crd["spec"]["versions"][0]["storage"] = False
    answer = await http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd)
    assert answer.status_code == 422
    body = answer.json()
    assert body["message"].startswith(
        'CustomResourceDefinition.apiextensions.k8s.io "pools.eni-ipam.io" is invalid: ['
    )
    assert {c["field"] for c in body["details"]["causes"]} == {"metadata.name", "spec.versions"}


# -- discovery and OpenAPI ------------------------------------------------------------------------


async def test_discovery_lists_custom_resources_in_both_forms(http: httpx2.AsyncClient) -> None:
    aggregated = await http.get("/apis", headers={"Accept": AGGREGATED})
    assert aggregated.headers["Content-Type"] == (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    )
    groups = {g["metadata"]["name"]: g for g in aggregated.json()["items"]}
    enipools = groups["eni-ipam.io"]["versions"][0]["resources"][0]
    assert enipools["resource"] == "enipools" and enipools["scope"] == "Cluster"
    assert enipools["shortNames"] == ["enip"]
    assert enipools["subresources"][0]["subresource"] == "status"
    legacy = (await http.get("/apis/eni-ipam.io/v1alpha1")).json()
    assert [r["name"] for r in legacy["resources"]] == ["enipools", "enipools/status"]
    core = (await http.get("/api", headers={"Accept": AGGREGATED})).json()
    names = {r["resource"] for r in core["items"][0]["versions"][0]["resources"]}
    assert {"nodes", "pods", "secrets", "serviceaccounts"} <= names
    assert (await http.get("/api")).json()["versions"] == ["v1"]
    assert (await http.get("/apis/example.io/v1")).status_code == 404


async def test_openapi_v3_describes_the_crd_and_refuses_strategic_merge_for_it(
    http: httpx2.AsyncClient,
) -> None:
    root = (await http.get("/openapi/v3")).json()["paths"]
    document = (await http.get(root["apis/eni-ipam.io/v1alpha1"]["serverRelativeURL"])).json()
    schema = document["components"]["schemas"]["io.eni-ipam.v1alpha1.ENIPool"]
    assert schema["x-kubernetes-group-version-kind"] == [
        {"group": "eni-ipam.io", "kind": "ENIPool", "version": "v1alpha1"}
    ]
    assert schema["properties"]["spec"]["required"] == ["instanceID"]
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in document["components"]["schemas"]
    patch = document["paths"]["/apis/eni-ipam.io/v1alpha1/enipools/{name}"]["patch"]
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    assert "application/strategic-merge-patch+json" not in patch["requestBody"]["content"]
    core = (await http.get(root["api/v1"]["serverRelativeURL"])).json()
    node_patch = core["paths"]["/api/v1/nodes/{name}"]["patch"]
    assert "application/strategic-merge-patch+json" in node_patch["requestBody"]["content"]
    v2 = (await http.get("/openapi/v2", headers={"Accept": "application/json"})).json()
    assert "io.eni-ipam.v1alpha1.ENIPool" in v2["definitions"]


# -- tables ---------------------------------------------------------------------------------------


async def test_a_table_of_pools_evaluates_the_printer_columns(
    kube: FakeKube, http: httpx2.AsyncClient
) -> None:
    kube.add_object("enipools", pool(instanceType="m5.large"))
    await http.patch(
        f"{ENIPOOLS}/p1/status",
        json={"status": {"stats": {"available": 4}, "conditions": [{"type": "Ready", "status": "False"}]}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    answer = (await http.get(ENIPOOLS, headers={"Accept": TABLE})).json()
    assert answer["kind"] == "Table"
    assert [c["name"] for c in answer["columnDefinitions"]] == [
        "Name",
        "Instance",
        "Type",
        "Profile",
        "Available",
        "Used",
        "Needed",
        "Ready",
        "Age",
        "Zone",  # the -o wide columns (priority 1): in the Table, kubectl hides them
        "Capacity",
        "Interfaces Left",
        "Reason",
        "Message",
    ]
    assert [c["priority"] for c in answer["columnDefinitions"]] == [0] * 9 + [1] * 5
    row = answer["rows"][0]
    assert row["cells"][:8] == ["p1", "i-1", "m5.large", None, 4, None, None, "False"]
    assert row["object"]["kind"] == "PartialObjectMetadata" and row["object"]["metadata"]["name"] == "p1"


def test_jsonpath_and_ages_are_evaluated_like_the_real_server() -> None:
    obj = {"status": {"conditions": [{"type": "A", "status": "x"}, {"type": "Ready", "status": "True"}]}}
    assert jsonpath(obj, '.status.conditions[?(@.type=="Ready")].status') == ["True"]
    assert jsonpath(obj, ".status.conditions[*].type") == ["A", "Ready"]
    assert jsonpath(obj, ".status.conditions[0]['status']") == ["x"]
    assert jsonpath(obj, ".missing.field") == []
    labelled = {"metadata": {"labels": {"eni-ipam.io/profile": "gpu", "eni-ipam": {"io/profile": "no"}}}}
    assert jsonpath(labelled, ".metadata.labels.eni-ipam\\.io/profile") == ["gpu"]  # a dot escaped
    seconds = datetime.timedelta
    cases = [
        (seconds(seconds=59), "59s"),
        (seconds(minutes=5, seconds=3), "5m3s"),
        (seconds(minutes=90), "90m"),
    ]
    cases += [
        (seconds(hours=3, minutes=20), "3h20m"),
        (seconds(days=2, hours=4), "2d4h"),
        (seconds(days=800), "2y70d"),
    ]
    assert [human_duration(d.total_seconds()) for d, _ in cases] == [text for _, text in cases]


# -- writes as the real server answers them --------------------------------------------------------


async def test_unknown_fields_are_pruned_with_a_warning_or_refused_when_strict(
    kube: FakeKube, http: httpx2.AsyncClient
) -> None:
    warned = await http.post(ENIPOOLS, json=pool(extra=1))
    assert warned.status_code == 201
    assert warned.headers.get_list("Warning") == ['299 - "unknown field \\"spec.extra\\""']
    assert "extra" not in warned.json()["spec"]
    strict = await http.post(ENIPOOLS, params={"fieldValidation": "Strict"}, json=pool("p2", extra=1))
    assert (strict.status_code, strict.json()["reason"]) == (400, "BadRequest")
    assert strict.json()["message"] == (
        'ENIPool in version "v1alpha1" cannot be handled as a ENIPool: strict decoding error: unknown field '
        '"spec.extra"'
    )
    patched = await http.patch(
        f"{ENIPOOLS}/p1",
        params={"fieldValidation": "Strict"},
        json={"spec": {"extra": 2}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert patched.status_code == 422
    assert patched.json()["message"].endswith('strict decoding error: unknown field "spec.extra"')
    ignored = await http.post(ENIPOOLS, params={"fieldValidation": "Ignore"}, json=pool("p3", extra=1))
    assert ignored.status_code == 201 and "Warning" not in ignored.headers
    node = await http.post("/api/v1/nodes", json={"metadata": {"name": "n1"}, "spec": {"bogus": True}})
    assert node.headers.get_list("Warning") == ['299 - "unknown field \\"spec.bogus\\""']
    assert [p["metadata"]["name"] for p in kube.objects("enipools")] == ["p1", "p3"]


async def test_an_invalid_value_is_named_once_per_cause(http: httpx2.AsyncClient) -> None:
    answer = (await http.post(ENIPOOLS, json=pool(minAllocate=-1, instanceID="i-" + "0" * 300))).json()
    assert answer["message"] == (
        'ENIPool.eni-ipam.io "p1" is invalid: [spec.instanceID: Too long: may not be more than 256 bytes, '
        "spec.minAllocate: Invalid value: -1: spec.minAllocate in body should be greater than or equal to 0]"
    )
    assert answer["details"]["causes"] == [
        {
            "reason": "FieldValueTooLong",
            "message": "Too long: may not be more than 256 bytes",
            "field": "spec.instanceID",
        },
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: -1: spec.minAllocate in body should be greater than or equal to 0",
            "field": "spec.minAllocate",
        },
    ]


async def test_dry_run_validates_and_answers_as_if_stored_but_stores_nothing(
    kube: FakeKube, http: httpx2.AsyncClient
) -> None:
    before = kube.resource_version
    created = await http.post(ENIPOOLS, params={"dryRun": "All"}, json=pool())
    assert created.status_code == 201 and created.json()["metadata"]["uid"]
    assert created.json()["spec"]["deleteOnTermination"] is True  # defaulted, as a create would
    assert kube.objects("enipools") == [] and kube.resource_version == before
    refused = await http.post(ENIPOOLS, params={"dryRun": "All"}, json=pool(minAllocate=-1))
    assert refused.status_code == 422
    kube.add_object("enipools", pool())
    stored = kube.get_object("enipools", "p1")
    for method, extra in (("PATCH", {"json": {"spec": {"zone": "z"}}}), ("DELETE", {})):
        headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
        answer = await http.request(
            method, f"{ENIPOOLS}/p1", params={"dryRun": "All"}, headers=headers, **extra
        )
        assert answer.status_code == 200
    assert kube.get_object("enipools", "p1") == stored
    assert (await http.post(ENIPOOLS, params={"dryRun": "Some"}, json=pool("p2"))).status_code == 422


async def test_bodies_and_patches_a_custom_resource_cannot_take_are_unsupported_media(
    kube: FakeKube, http: httpx2.AsyncClient
) -> None:
    kube.add_object("enipools", pool())
    strategic = await http.patch(
        f"{ENIPOOLS}/p1",
        json={"spec": {"zone": "z"}},
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert (strategic.status_code, strategic.json()["reason"]) == (415, "UnsupportedMediaType")
    assert strategic.json()["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )
    proto = await http.post(
        ENIPOOLS, content=b"k8s\x00\x0a\x00", headers={"Content-Type": "application/vnd.kubernetes.protobuf"}
    )
    assert proto.status_code == 415
    assert "zone" not in (kube.get_object("enipools", "p1") or {})["spec"]


async def test_a_nodes_provider_id_is_set_once(kube: FakeKube, http: httpx2.AsyncClient) -> None:
    kube.add_object("nodes", {"metadata": {"name": "n1"}})
    merge = {"Content-Type": "application/merge-patch+json"}
    first = await http.patch("/api/v1/nodes/n1", json={"spec": {"providerID": "aws:///z/i-1"}}, headers=merge)
    assert first.status_code == 200
    again = await http.patch("/api/v1/nodes/n1", json={"spec": {"providerID": "aws:///z/i-2"}}, headers=merge)
    assert again.status_code == 422
    assert again.json()["message"] == (
        'Node "n1" is invalid: spec.providerID: Forbidden: '
        'node updates may not change providerID except from "" to valid'
    )
    assert (kube.get_object("nodes", "n1") or {})["spec"]["providerID"] == "aws:///z/i-1"


def test_strategic_merge_follows_the_built_in_patch_metadata() -> None:
    spec = {"$ref": "#/definitions/io.k8s.api.core.v1.PodSpec"}
    current = {
        "containers": [{"name": "a", "image": "x:1", "env": [{"name": "E", "value": "1"}]}, {"name": "b"}],
        "tolerations": [{"key": "k"}],
    }
    patch = {
        "$setElementOrder/containers": [{"name": "a"}],
        "containers": [
            {"name": "a", "image": "x:2", "env": [{"name": "F", "value": "2"}]},
            {"name": "b", "$patch": "delete"},
        ],
        "tolerations": [{"key": "other"}],
    }
    assert strategic_merge(current, patch, spec) == {
        "containers": [
            {"name": "a", "image": "x:2", "env": [{"name": "E", "value": "1"}, {"name": "F", "value": "2"}]}
        ],
        "tolerations": [{"key": "other"}],  # no merge strategy: replaced
    }
    meta = {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    assert strategic_merge({"finalizers": ["a"]}, {"finalizers": ["b"]}, meta) == {"finalizers": ["a", "b"]}
    assert strategic_merge(
        {"finalizers": ["a", "b"]}, {"$deleteFromPrimitiveList/finalizers": ["a"]}, meta
    ) == {"finalizers": ["b"]}
