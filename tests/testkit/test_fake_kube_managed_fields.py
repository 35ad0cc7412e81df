"""FakeKube's field ownership over HTTPS: ``managedFields`` per manager and operation, server-side
apply's merge, removal, conflicts and force, and the bookkeeping of plain writes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from eni_ipam_testkit.fake_kube import FakeKube, managed

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
POOLS = "/apis/eni-ipam.io/v1alpha1/enipools"


@pytest.fixture
async def http(kube: FakeKube) -> AsyncIterator[httpx2.AsyncClient]:
    headers = {"Authorization": f"Bearer {kube.admin_token}", "User-Agent": "tester/1.0 (linux)"}
    async with httpx2.AsyncClient(base_url=kube.url, headers=headers, verify=kube.ssl_context()) as client:
        yield client


def deployment(replicas: int | None = 1, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
            **spec,
        },
    }
    if replicas is not None:
        body["spec"]["replicas"] = replicas
    return body


async def apply(
    http: httpx2.AsyncClient, path: str, body: dict[str, Any], manager: str, *, force: bool = False
) -> httpx2.Response:
    params = {"fieldManager": manager, **({"force": "true"} if force else {})}
    return await http.patch(path, content=json.dumps(body), params=params, headers={"Content-Type": APPLY})


def owners(obj: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in obj["metadata"]["managedFields"]}


async def test_apply_records_the_applied_fields_by_list_keys_and_get_returns_them(
    http: httpx2.AsyncClient, kube: FakeKube
) -> None:
    body = deployment(2)
    body["metadata"]["finalizers"] = ["example.com/keep"]
    body["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": 80}]
    created = await apply(http, f"{DEPLOYMENTS}/web", body, "team-a")
    assert created.status_code == 201
    (entry,) = created.json()["metadata"]["managedFields"]
    assert {k: entry[k] for k in ("manager", "operation", "apiVersion", "fieldsType")} == {
        "manager": "team-a",
        "operation": "Apply",
        "apiVersion": "apps/v1",
        "fieldsType": "FieldsV1",
    }
    assert entry["time"].endswith("Z")
    assert entry["fieldsV1"] == {
        "f:metadata": {"f:finalizers": {'v:"example.com/keep"': {}}},
        "f:spec": {
            "f:replicas": {},
            "f:selector": {},  # a LabelSelector is an atomic map
            "f:template": {
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {
                    "f:containers": {
                        'k:{"name":"web"}': {
                            ".": {},
                            "f:image": {},
                            "f:name": {},
                            "f:ports": {
                                'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}
                            },
                        }
                    }
                },
            },
        },
    }
    got = await http.get(f"{DEPLOYMENTS}/web")
    assert got.json()["metadata"]["managedFields"] == created.json()["metadata"]["managedFields"]


async def test_an_applier_drops_what_it_no_longer_applies_unless_another_manager_owns_it(
    http: httpx2.AsyncClient, kube: FakeKube
) -> None:
    first = deployment(2, minReadySeconds=5, paused=True)
    assert (await apply(http, f"{DEPLOYMENTS}/web", first, "team-a")).status_code == 201
    shared = deployment(None, paused=True)  # team-b also applies paused, with the same value
    assert (await apply(http, f"{DEPLOYMENTS}/web", shared, "team-b")).status_code == 200

    dropped = await apply(http, f"{DEPLOYMENTS}/web", deployment(2), "team-a")
    assert dropped.status_code == 200
    spec = dropped.json()["spec"]
    assert "minReadySeconds" not in spec  # only team-a owned it: gone
    assert spec["paused"] is True  # team-b still owns it: kept
    assert spec["replicas"] == 2


async def test_an_apply_that_changes_another_managers_field_is_a_409_until_forced(
    http: httpx2.AsyncClient, kube: FakeKube
) -> None:
    await apply(http, f"{DEPLOYMENTS}/web", deployment(2), "team-a")
    refused = await apply(http, f"{DEPLOYMENTS}/web", deployment(3), "team-b")
    assert refused.status_code == 409
    status = refused.json()
    assert (status["reason"], status["message"]) == (
        "Conflict",
        'Apply failed with 1 conflict: conflict with "team-a": .spec.replicas',
    )
    assert status["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "team-a"', "field": ".spec.replicas"}
    ]
    assert (kube.get_object("deployments", "web", "default") or {})["spec"]["replicas"] == 2

    forced = await apply(http, f"{DEPLOYMENTS}/web", deployment(3), "team-b", force=True)
    assert forced.status_code == 200
    fields = owners(forced.json())
    assert "f:replicas" in fields[("team-b", "Apply")]["f:spec"]
    assert "f:replicas" not in fields[("team-a", "Apply")]["f:spec"]
    # team-a no longer owns replicas: its next apply without the field leaves team-b's value.
    again = await apply(http, f"{DEPLOYMENTS}/web", deployment(None), "team-a")
    assert again.json()["spec"]["replicas"] == 3


async def test_two_conflicts_are_listed_by_manager(http: httpx2.AsyncClient) -> None:
    await apply(http, f"{DEPLOYMENTS}/web", deployment(2, minReadySeconds=1), "team-a")
    refused = await apply(http, f"{DEPLOYMENTS}/web", deployment(3, minReadySeconds=2), "team-b")
    assert refused.json()["message"] == (
        'Apply failed with 2 conflicts: conflicts with "team-a":\n- .spec.minReadySeconds\n- .spec.replicas'
    )


async def test_plain_writes_record_update_managers_and_take_fields_from_appliers(
    http: httpx2.AsyncClient,
) -> None:
    created = await http.post(DEPLOYMENTS, json=deployment(1))  # no fieldManager: the User-Agent's
    assert created.status_code == 201
    ((manager, operation),) = owners(created.json())
    assert (manager, operation) == ("tester", "Update")
    fields = owners(created.json())[("tester", "Update")]
    # A container an Update creates is itself owned (".").
    assert fields["f:spec"]["f:template"]["f:metadata"]["f:labels"] == {".": {}, "f:app": {}}

    patched = await http.patch(
        f"{DEPLOYMENTS}/web",
        json={"spec": {"replicas": 4}},
        params={"fieldManager": "scaler"},
        headers={"Content-Type": MERGE},
    )
    fields = owners(patched.json())
    assert fields[("scaler", "Update")] == {"f:spec": {"f:replicas": {}}}
    assert "f:replicas" not in fields[("tester", "Update")]["f:spec"]

    refused = await apply(http, f"{DEPLOYMENTS}/web", deployment(2), "team-a")
    assert refused.status_code == 409
    assert 'conflict with "scaler" using apps/v1: .spec.replicas' in refused.json()["message"]


async def test_the_first_apply_to_an_unowned_object_conflicts_with_what_it_holds(
    http: httpx2.AsyncClient, kube: FakeKube
) -> None:
    kube.add_object("deployments", {**deployment(1), "metadata": {"name": "web", "namespace": "default"}})
    assert "managedFields" not in (kube.get_object("deployments", "web", "default") or {})["metadata"]
    refused = await apply(http, f"{DEPLOYMENTS}/web", deployment(2), "team-a")
    assert refused.status_code == 409
    assert 'conflict with "before-first-apply" using apps/v1: .spec.replicas' in refused.json()["message"]
    same = await apply(http, f"{DEPLOYMENTS}/web", deployment(1), "team-a")
    assert same.status_code == 200
    assert set(owners(same.json())) == {("team-a", "Apply"), ("before-first-apply", "Update")}


async def test_managed_fields_are_cleared_by_one_empty_entry_and_kept_by_an_empty_list(
    http: httpx2.AsyncClient,
) -> None:
    await apply(http, f"{DEPLOYMENTS}/web", deployment(2), "team-a")
    kept = await http.patch(
        f"{DEPLOYMENTS}/web", json={"metadata": {"managedFields": []}}, headers={"Content-Type": MERGE}
    )
    assert set(owners(kept.json())) == {("team-a", "Apply")}
    cleared = await http.patch(
        f"{DEPLOYMENTS}/web", json={"metadata": {"managedFields": [{}]}}, headers={"Content-Type": MERGE}
    )
    assert cleared.status_code == 200
    assert "managedFields" not in cleared.json()["metadata"]


async def test_a_status_write_is_owned_with_its_subresource_and_apply_to_the_main_resource_owns_no_status(
    http: httpx2.AsyncClient,
) -> None:
    pool = {"apiVersion": "eni-ipam.io/v1alpha1", "kind": "ENIPool", "metadata": {"name": "n1"}}
    created = await apply(http, f"{POOLS}/n1", {**pool, "spec": {"a": 1}, "status": {"x": 1}}, "ctl")
    assert owners(created.json())[("ctl", "Apply")] == {"f:spec": {"f:a": {}}}
    status = await http.patch(
        f"{POOLS}/n1/status",
        json={"status": {"used": 2}},
        params={"fieldManager": "agent"},
        headers={"Content-Type": MERGE},
    )
    (entry,) = [e for e in status.json()["metadata"]["managedFields"] if e["manager"] == "agent"]
    assert (entry["subresource"], entry["fieldsV1"]) == ("status", {"f:status": {".": {}, "f:used": {}}})


async def test_apply_refuses_managed_fields_force_needs_apply_and_list_items_need_their_keys(
    http: httpx2.AsyncClient, kube: FakeKube
) -> None:
    with_fields = deployment(1)
    with_fields["metadata"]["managedFields"] = [{"manager": "x", "operation": "Apply"}]
    refused = await apply(http, f"{DEPLOYMENTS}/web", with_fields, "team-a")
    assert (refused.status_code, refused.json()["message"]) == (400, "metadata.managedFields must be nil")

    forced_merge = await http.patch(
        f"{DEPLOYMENTS}/web", json={}, params={"force": "true"}, headers={"Content-Type": MERGE}
    )
    assert forced_merge.status_code == 422
    assert (
        "force: Unsupported value: true: may not be specified for non-apply patch"
        in (forced_merge.json()["message"])
    )

    keyless = deployment(1)
    keyless["spec"]["template"]["spec"]["containers"] = [{"image": "nginx"}]
    refused = await apply(http, f"{DEPLOYMENTS}/web", keyless, "team-a")
    assert refused.status_code == 400
    assert refused.json()["message"] == (
        "failed to create typed patch object (apps/v1, Kind=Deployment): .spec.template.spec.containers: "
        'associative list with keys has an element that omits key field "name" (and doesn\'t have default '
        "value)"
    )
    assert kube.get_object("deployments", "web", "default") is None


def test_field_sets_round_trip_through_fields_v1() -> None:
    fields = {
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
        "f:spec": {
            "f:containers": {'k:{"name":"c"}': {".": {}, "f:image": {}}},
            "f:finalizers": {'v:"x"': {}},
        },
    }
    paths = managed.decode(fields)
    assert (("f", "metadata"), ("f", "labels")) in paths
    assert (("f", "spec"), ("f", "containers"), ("k", '{"name":"c"}')) in paths
    assert managed.encode(paths) == fields
    path = (("f", "spec"), ("f", "containers"), ("k", '{"name":"c"}'), ("f", "image"))
    assert managed.render_path(path) == '.spec.containers[name="c"].image'
    with pytest.raises(ValueError):
        managed.decode({"x:y": {}})


LISTS_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "routes.lists.example.io"},
    "spec": {
        "group": "lists.example.io",
        "scope": "Cluster",
        "names": {"kind": "Route", "plural": "routes"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "hops": {
                                        "type": "array",
                                        "x-kubernetes-list-type": "map",
                                        "x-kubernetes-list-map-keys": ["name"],
                                        "items": {
                                            "type": "object",
                                            "required": ["name"],
                                            "properties": {
                                                "name": {"type": "string"},
                                                "via": {"type": "string"},
                                            },
                                        },
                                    },
                                    "tags": {
                                        "type": "array",
                                        "x-kubernetes-list-type": "set",
                                        "items": {"type": "string"},
                                    },
                                    "order": {"type": "array", "items": {"type": "string"}},
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


async def test_a_crds_list_types_decide_how_two_appliers_share_a_list(
    http: httpx2.AsyncClient, kube: FakeKube
) -> None:
    await kube.apply_manifest(LISTS_CRD)
    path = "/apis/lists.example.io/v1/routes/r"
    route = {"apiVersion": "lists.example.io/v1", "kind": "Route", "metadata": {"name": "r"}}
    first = {**route, "spec": {"hops": [{"name": "a", "via": "x"}], "tags": ["t1"], "order": ["1"]}}
    assert (await apply(http, path, first, "team-a")).status_code == 201
    second = {**route, "spec": {"hops": [{"name": "b"}], "tags": ["t2"]}}
    merged = (await apply(http, path, second, "team-b")).json()
    assert merged["spec"] == {
        "hops": [{"name": "a", "via": "x"}, {"name": "b"}],  # a map list: items by key
        "tags": ["t1", "t2"],  # a set: values
        "order": ["1"],
    }
    fields = owners(merged)[("team-b", "Apply")]["f:spec"]
    assert fields == {"f:hops": {'k:{"name":"b"}': {".": {}, "f:name": {}}}, "f:tags": {'v:"t2"': {}}}
    # An atomic list (the default) is one field: another value from another manager conflicts.
    refused = await apply(http, path, {**route, "spec": {"order": ["2"]}}, "team-b")
    assert refused.json()["message"] == 'Apply failed with 1 conflict: conflict with "team-a": .spec.order'
