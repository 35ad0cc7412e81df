"""What the fake API server refuses before it stores anything, as a real one does: badly typed
built-in bodies, bad names, labels and annotations, bodies and objects over the real limits, writes
into namespaces that do not exist or are going away; and watch lists (``sendInitialEvents``).

kubectl is the client wherever one is involved (its own messages are what an operator reads).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

from eni_ipam_testkit.fake_kube import FakeKube, StatusError
from tests.testkit.tools import Tools

pytestmark = pytest.mark.timeout(60)

DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "default"},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1"}]},
        },
    },
}


@pytest.fixture
def kube_crds() -> list[dict[str, Any]]:
    return []


def with_replicas(replicas: object) -> str:
    return json.dumps({**DEPLOYMENT, "spec": {**DEPLOYMENT["spec"], "replicas": replicas}})


# -- built-in objects are decoded as the real server decodes them -------------------------------------


async def test_a_deployment_with_a_wrongly_typed_field_is_refused_as_the_real_decoder_words_it(
    tools: Tools, kube: FakeKube
) -> None:
    refused = await tools.kubectl("apply", "-f", "-", stdin=with_replicas("three"))
    assert refused.code == 1
    assert (
        'Error from server (BadRequest): error when creating "STDIN": Deployment in version "v1" cannot be '
        "handled as a Deployment: json: cannot unmarshal string into Go struct field DeploymentSpec.spec."
        "replicas of type int32"
    ) in refused.err
    assert kube.objects("deployments") == []
    listed = await tools.kubectl("get", "deployments", "--all-namespaces")
    assert listed.code == 0 and "No resources found" in listed.err


async def test_a_patch_that_would_store_a_wrongly_typed_field_is_refused_and_changes_nothing(
    tools: Tools, kube: FakeKube
) -> None:
    await tools.ok("apply", "-f", "-", stdin=with_replicas(2))
    for patch_type in ("merge", "strategic", "json"):
        patch = (
            '[{"op": "replace", "path": "/spec/replicas", "value": "three"}]'
            if patch_type == "json"
            else '{"spec": {"replicas": "three"}}'
        )
        refused = await tools.kubectl("patch", "deployment", "web", "--type", patch_type, "-p", patch)
        assert refused.code == 1, patch_type
        assert "The request is invalid: patch: Invalid value: " in refused.err
        assert (
            "json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"
        ) in refused.err
    stored = kube.get_object("deployments", "web", namespace="default") or {}
    assert stored["spec"]["replicas"] == 2
    rows = (await tools.ok("get", "deployments")).splitlines()
    assert rows[1].split()[0] == "web"


@pytest.mark.parametrize(
    ("plural", "body", "message"),
    [
        (
            "deployments",
            {
                "spec": {
                    "template": {"spec": {"containers": [{"name": "a", "env": [{"name": "A", "value": 1}]}]}}
                }
            },
            "json: cannot unmarshal number into Go struct field "
            "EnvVar.spec.template.spec.containers.env.value of type string",
        ),
        (
            "deployments",
            {
                "spec": {
                    "template": {
                        "spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1x"}}}]}
                    }
                }
            },
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ),
        (
            "services",
            {"spec": {"ports": [{"port": 80, "targetPort": True}]}},
            "json: cannot unmarshal bool into Go struct field ServicePort.spec.ports.targetPort "
            "of type int32",
        ),
        ("secrets", {"data": {"key": "not base64!"}}, "illegal base64 data at input byte 3"),
        (
            "leases",
            {"spec": {"renewTime": "yesterday"}},
            'parsing time "yesterday" as "2006-01-02T15:04:05.000000Z07:00": '
            'cannot parse "yesterday" as "2006"',
        ),
        (
            "configmaps",
            {"metadata": {"labels": {"a": 1}}},
            "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string",
        ),
        (
            "nodes",
            {"spec": {"unschedulable": "yes"}},
            "json: cannot unmarshal string into Go struct field NodeSpec.spec.unschedulable of type bool",
        ),
    ],
)
def test_a_wrongly_typed_value_anywhere_in_a_built_in_object_is_a_bad_request(
    kube: FakeKube, plural: str, body: dict[str, Any], message: str
) -> None:
    metadata = {
        "name": "x",
        **({"namespace": "default"} if plural != "nodes" else {}),
        **body.pop("metadata", {}),
    }
    with pytest.raises(StatusError) as refused:
        kube.add_object(plural, {"metadata": metadata, **body})
    assert refused.value.code == 400
    assert refused.value.message.endswith(
        "cannot be handled as a " + refused.value.message.split()[0] + ": " + message
    )
    assert kube.objects(plural) == []


# -- metadata -------------------------------------------------------------------------------------------


async def test_labels_annotations_and_names_are_validated_as_apimachinery_does(
    tools: Tools, kube: FakeKube
) -> None:
    kube.add_object("nodes", {"metadata": {"name": "n1"}})
    long_value = "v" * 64
    # (kubectl label checks the value itself: a patch reaches the server with it)
    patch = json.dumps({"metadata": {"labels": {"tier": long_value}}})
    label = await tools.kubectl("patch", "node", "n1", "--type", "merge", "-p", patch)
    assert label.code == 1
    assert (
        f'The Node "n1" is invalid: metadata.labels: Invalid value: "{long_value}": must be no more than 63 '
        "characters"
    ) in label.err

    def config_map(name: str, **metadata: Any) -> str:
        return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **metadata}})

    spaced = await tools.kubectl("create", "-f", "-", stdin=config_map("c1", labels={"bad key": "v"}))
    assert spaced.code == 1
    assert (
        'metadata.labels: Invalid value: "bad key": name part must consist of alphanumeric characters, '
        "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or "
        "'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
    ) in spaced.err
    prefixed = await tools.kubectl(
        "create", "-f", "-", stdin=config_map("c1", labels={"Example.com/key": "v"})
    )
    assert prefixed.code == 1
    assert (
        'metadata.labels: Invalid value: "Example.com/key": prefix part a lowercase RFC 1123 subdomain must '
        "consist of lower case alphanumeric characters"
    ) in prefixed.err
    big = {"note": "x" * (256 * 1024)}
    annotated = await tools.kubectl("create", "-f", "-", stdin=config_map("c1", annotations=big))
    assert annotated.code == 1
    assert (
        'The ConfigMap "c1" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes'
        in annotated.err
    )
    namespace = await tools.kubectl("create", "namespace", "Team_A")
    assert namespace.code == 1
    assert (
        'The Namespace "Team_A" is invalid: metadata.name: Invalid value: "Team_A": a lowercase RFC 1123 '
        "label must consist of lower case alphanumeric characters or '-'"
    ) in namespace.err
    dotted = await tools.kubectl("create", "namespace", "team.a")
    assert dotted.code == 1 and 'metadata.name: Invalid value: "team.a": must not contain dots' in dotted.err
    web = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "1web"},
        "spec": {"ports": [{"port": 80}]},
    }
    service = await tools.kubectl("create", "-f", "-", stdin=json.dumps(web))
    assert service.code == 1
    assert 'metadata.name: Invalid value: "1web": a DNS-1035 label must consist of' in service.err
    assert kube.objects("configmaps") == [] and kube.objects("services") == []
    assert "tier" not in ((kube.get_object("nodes", "n1") or {})["metadata"].get("labels") or {})
    # A role's name is a path segment, not a DNS name (the real RBAC validation).
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "Pool:Reader"},
    }
    assert (await tools.kubectl("create", "-f", "-", stdin=json.dumps(role))).code == 0


# -- sizes ----------------------------------------------------------------------------------------------


async def test_a_body_over_the_real_limit_is_a_413_status(http: httpx2.AsyncClient, kube: FakeKube) -> None:
    body = {"metadata": {"name": "big"}, "data": {"blob": "x" * (3 * 1024 * 1024)}}
    answer = await http.post("/api/v1/namespaces/default/configmaps", json=body)
    assert answer.status_code == 413
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Request entity too large: limit is 3145728",
        "reason": "RequestEntityTooLarge",
        "code": 413,
    }
    assert kube.objects("configmaps") == []


async def test_a_two_megabyte_body_is_read_and_refused_as_the_real_server_refuses_the_object(
    tools: Tools, kube: FakeKube, tmp_path: Path
) -> None:
    path = tmp_path / "big.json"
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "big"},
        "data": {"blob": "x" * 2_000_000},
    }
    path.write_text(json.dumps(config_map))
    refused = await tools.kubectl("create", "-f", str(path))
    assert refused.code == 1
    assert 'The ConfigMap "big" is invalid: []: Too long: may not be more than 1048576 bytes' in refused.err
    # An object no per-type rule limits still cannot outgrow etcd's request limit (1.5 MiB).
    pod = {
        "metadata": {"name": "big", "namespace": "default"},
        "spec": {"containers": [{"name": "a", "env": [{"name": "A", "value": "x" * 2_000_000}]}]},
    }
    with pytest.raises(StatusError) as caught:
        kube.add_object("pods", pod)
    assert (caught.value.code, caught.value.message) == (500, "etcdserver: request is too large")
    assert kube.objects("configmaps") == [] and kube.objects("pods") == []


# -- namespaces -----------------------------------------------------------------------------------------


async def test_a_cluster_starts_with_its_system_namespaces(tools: Tools) -> None:
    rows = [line.split()[:2] for line in (await tools.ok("get", "namespaces")).splitlines()[1:]]
    assert rows == [
        ["default", "Active"],
        ["kube-node-lease", "Active"],
        ["kube-public", "Active"],
        ["kube-system", "Active"],
    ]
    forbidden = await tools.kubectl("delete", "namespace", "kube-system")
    assert forbidden.code == 1
    assert 'namespaces "kube-system" is forbidden: this namespace may not be deleted' in forbidden.err


async def test_nothing_is_created_in_a_namespace_that_does_not_exist(tools: Tools, kube: FakeKube) -> None:
    missing = await tools.kubectl("create", "configmap", "settings", "-n", "nowhere", "--from-literal=a=1")
    assert missing.code == 1
    assert 'error: failed to create configmap: namespaces "nowhere" not found' in missing.err
    assert kube.objects("configmaps") == []
    await tools.ok("create", "namespace", "nowhere")
    await tools.ok("create", "configmap", "settings", "-n", "nowhere", "--from-literal=a=1")


async def test_deleting_a_namespace_deletes_what_it_holds_and_waits_for_finalizers(
    tools: Tools, kube: FakeKube
) -> None:
    await tools.ok("create", "namespace", "team")
    await tools.ok("create", "configmap", "plain", "-n", "team")
    kube.add_object(
        "configmaps", {"metadata": {"name": "held", "namespace": "team", "finalizers": ["example.com/keep"]}}
    )
    await tools.ok("delete", "namespace", "team", "--wait=false")
    namespace = kube.get_object("namespaces", "team") or {}
    assert namespace["status"]["phase"] == "Terminating" and namespace["metadata"]["deletionTimestamp"]
    assert kube.get_object("configmaps", "plain", namespace="team") is None
    assert kube.get_object("configmaps", "held", namespace="team")["metadata"]["deletionTimestamp"]  # type: ignore[index]
    refused = await tools.kubectl("create", "configmap", "late", "-n", "team")
    assert refused.code == 1
    assert (
        'configmaps "late" is forbidden: unable to create new content in namespace team because it is being '
        "terminated"
    ) in refused.err
    await tools.ok(
        "patch",
        "configmap",
        "held",
        "-n",
        "team",
        "--type",
        "merge",
        "-p",
        '{"metadata":{"finalizers":null}}',
    )
    assert kube.get_object("namespaces", "team") is None


# -- watch lists ----------------------------------------------------------------------------------------


async def test_a_watch_list_sends_the_initial_objects_then_a_bookmark_marking_their_end(
    http: httpx2.AsyncClient, kube: FakeKube
) -> None:
    for name in ("n1", "n2"):
        kube.add_object("nodes", {"metadata": {"name": name}})
    params = {
        "watch": "true",
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "1",
    }
    async with http.stream("GET", "/api/v1/nodes", params=params) as response:
        events = [json.loads(line) async for line in response.aiter_lines() if line]
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in events] == [
        ("ADDED", "n1"),
        ("ADDED", "n2"),
        ("BOOKMARK", None),
    ]
    assert events[2]["object"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "resourceVersion": kube.resource_version,
            "creationTimestamp": None,
            "annotations": {"k8s.io/initial-events-end": "true"},
        },
    }


async def test_list_options_the_real_server_refuses_are_a_422(
    http: httpx2.AsyncClient, kube: FakeKube
) -> None:
    without_match = await http.get("/api/v1/nodes", params={"watch": "true", "sendInitialEvents": "true"})
    assert without_match.status_code == 422
    assert without_match.json()["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires '
        "setting resourceVersionMatch to NotOlderThan"
    )
    on_a_list = await http.get("/api/v1/nodes", params={"sendInitialEvents": "true"})
    assert on_a_list.status_code == 422
    assert (
        "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list" in on_a_list.json()["message"]
    )
    # A list is served at the latest version only: an older exact one is answered as compacted.
    kube.add_object("nodes", {"metadata": {"name": "n1"}})
    older = str(int(kube.resource_version) - 1)
    exact = await http.get(
        "/api/v1/nodes", params={"resourceVersion": older, "resourceVersionMatch": "Exact"}
    )
    assert (exact.status_code, exact.json()["reason"]) == (410, "Expired")
    now = await http.get(
        "/api/v1/nodes", params={"resourceVersion": kube.resource_version, "resourceVersionMatch": "Exact"}
    )
    assert now.status_code == 200 and [i["metadata"]["name"] for i in now.json()["items"]] == ["n1"]


# -- CRD names ------------------------------------------------------------------------------------------


def crd(plural: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Cluster",
            "names": {"kind": kind, "plural": plural},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


async def test_a_crd_whose_kind_another_crd_of_its_group_has_is_not_served(
    tools: Tools, kube: FakeKube, http: httpx2.AsyncClient
) -> None:
    await tools.ok("apply", "-f", "-", stdin=json.dumps(crd("pools", "Pool")))
    await tools.ok("apply", "-f", "-", stdin=json.dumps(crd("reservoirs", "Pool")))
    second = kube.get_object("customresourcedefinitions", "reservoirs.example.com") or {}
    conditions = {c["type"]: c for c in second["status"]["conditions"]}
    # The naming controller checks the kind, then the list kind; the last conflict found is reported.
    accepted = conditions["NamesAccepted"]
    assert (accepted["status"], accepted["reason"]) == ("False", "ListKindConflict")
    assert accepted["message"] == '"PoolList" is already in use'
    assert conditions["Established"]["status"] == "False"
    assert (await http.get("/apis/example.com/v1/reservoirs")).status_code == 404
    assert (await http.get("/apis/example.com/v1/pools")).status_code == 200
    # Once the name is free, the next write of the CRD is accepted and it is served.
    await tools.ok("delete", "crd", "pools.example.com")
    await tools.ok("label", "crd", "reservoirs.example.com", "retry=1")
    assert (await http.get("/apis/example.com/v1/reservoirs")).status_code == 200
