"""FakeKube's ValidatingAdmissionPolicies over HTTPS: matching, CEL evaluation, validation actions,
failure policy, the answers a denial gets, and the checks a policy and a binding get when written."""

from __future__ import annotations

import json
from typing import Any

import httpx2

from eni_ipam_testkit.fake_kube import FakeKube

POLICIES = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
CONFIGMAPS = "/api/v1/namespaces/{}/configmaps"


def policy(name: str, validations: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["configmaps"]}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"matchConstraints": {"resourceRules": [rule]}, "validations": validations, **spec},
    }


def binding(name: str, actions: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": actions, **spec},
    }


async def install(http: httpx2.AsyncClient, vap: dict[str, Any], vapb: dict[str, Any]) -> None:
    created = await http.post(POLICIES, json=vap)
    assert created.status_code == 201, created.text
    created = await http.post(BINDINGS, json=vapb)
    assert created.status_code == 201, created.text


def configmap(name: str, namespace: str = "default", **data: str) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": name, "namespace": namespace}}
    if data:
        body["data"] = data
    return body


SMALL = [
    {
        "expression": "!has(object.data) || size(object.data) <= 1",
        "messageExpression": "'at most one key, not ' + string(size(object.data))",
        "reason": "Forbidden",
    }
]


async def test_deny_answers_with_the_policy_binding_and_message_and_stores_nothing(
    http: httpx2.AsyncClient, kube: FakeKube
) -> None:
    await install(http, policy("small", SMALL), binding("small", ["Deny"]))
    denied = await http.post(CONFIGMAPS.format("default"), json=configmap("c", a="1", b="2"))
    assert denied.status_code == 403
    body = denied.json()
    assert (body["reason"], body["message"]) == (
        "Forbidden",
        "configmaps \"c\" is forbidden: ValidatingAdmissionPolicy 'small' with binding 'small' denied "
        "request: at most one key, not 2",
    )
    assert kube.objects("configmaps") == []
    assert (await http.post(CONFIGMAPS.format("default"), json=configmap("c", a="1"))).status_code == 201


async def test_without_a_reason_a_violation_is_422_invalid_with_the_message_or_the_expression(
    http: httpx2.AsyncClient,
) -> None:
    validations = [{"expression": "object.metadata.name != 'x'"}, {"expression": "false", "message": "never"}]
    await install(http, policy("names", validations), binding("names", ["Deny"]))
    denied = await http.post(CONFIGMAPS.format("default"), json=configmap("x"))
    assert (denied.status_code, denied.json()["reason"]) == (422, "Invalid")
    assert denied.json()["message"].endswith("denied request: failed expression: object.metadata.name != 'x'")
    denied = await http.post(CONFIGMAPS.format("default"), json=configmap("y"))
    assert denied.json()["message"].endswith("denied request: never")


async def test_warn_adds_a_warning_header_and_lets_the_write_through(http: httpx2.AsyncClient) -> None:
    await install(http, policy("small", SMALL), binding("small", ["Warn", "Audit"]))
    created = await http.post(CONFIGMAPS.format("default"), json=configmap("c", a="1", b="2"))
    assert created.status_code == 201
    assert created.headers.get_list("Warning") == [
        "299 - \"Validation failed for ValidatingAdmissionPolicy 'small' with binding 'small': "
        'at most one key, not 2"'
    ]


async def test_an_evaluation_error_denies_under_fail_and_passes_under_ignore(
    http: httpx2.AsyncClient,
) -> None:
    failing = [{"expression": "object.data.missing == 'x'"}]
    await install(http, policy("strict", failing), binding("strict", ["Deny"]))
    denied = await http.post(CONFIGMAPS.format("default"), json=configmap("c", a="1"))
    assert denied.status_code == 422
    assert (
        "denied request: expression 'object.data.missing == 'x'' resulted in error"
        in denied.json()["message"]
    )
    lenient = policy("strict", failing, failurePolicy="Ignore")
    current = (await http.get(f"{POLICIES}/strict")).json()
    lenient["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    assert (await http.put(f"{POLICIES}/strict", json=lenient)).status_code == 200
    assert (await http.post(CONFIGMAPS.format("default"), json=configmap("c", a="1"))).status_code == 201


async def test_match_conditions_selectors_and_excluded_rules_decide_what_is_judged(
    http: httpx2.AsyncClient,
) -> None:
    never = [{"expression": "false", "message": "judged"}]
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
    spec = {
        "matchConstraints": {
            "resourceRules": [rule],
            "excludeResourceRules": [{**rule, "resourceNames": ["excluded"]}],
            "namespaceSelector": {"matchLabels": {"judged": "yes"}},
            "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]},
        },
        "matchConditions": [{"name": "not-kube", "expression": "!request.name.startsWith('kube-')"}],
    }
    await install(http, policy("all", never, **spec), binding("all", ["Deny"]))
    for namespace, labels in (("judged", {"judged": "yes"}), ("free", {})):
        created = await http.post(
            "/api/v1/namespaces", json={"metadata": {"name": namespace, "labels": labels}}
        )
        assert created.status_code == 201
    judged = CONFIGMAPS.format("judged")
    assert (await http.post(judged, json=configmap("c", "judged"))).status_code == 422
    assert (await http.post(CONFIGMAPS.format("free"), json=configmap("c", "free"))).status_code == 201
    assert (await http.post(judged, json=configmap("excluded", "judged"))).status_code == 201
    assert (await http.post(judged, json=configmap("kube-root", "judged"))).status_code == 201
    skipped = {"metadata": {"name": "s", "namespace": "judged", "labels": {"skip": "1"}}}
    assert (await http.post(judged, json=skipped)).status_code == 201
    # Only CREATE is matched: a delete is not judged.
    assert (await http.delete(f"{judged}/s")).status_code == 200


async def test_a_delete_is_judged_with_the_old_object_and_a_null_object(http: httpx2.AsyncClient) -> None:
    keep = [{"expression": "request.operation != 'DELETE' || (object == null && !has(oldObject.data))"}]
    await install(http, policy("keep", keep), binding("keep", ["Deny"]))
    await http.post(CONFIGMAPS.format("default"), json=configmap("empty"))
    await http.post(CONFIGMAPS.format("default"), json=configmap("full", a="1"))
    assert (await http.delete(f"{CONFIGMAPS.format('default')}/empty")).status_code == 200
    assert (await http.delete(f"{CONFIGMAPS.format('default')}/full")).status_code == 422


async def test_a_policy_is_checked_when_written_and_what_cel_python_lacks_is_refused_as_not_implemented(
    http: httpx2.AsyncClient, kube: FakeKube
) -> None:
    undeclared = await http.post(POLICIES, json=policy("p", [{"expression": "objec.data == null"}]))
    assert undeclared.status_code == 422
    (cause,) = undeclared.json()["details"]["causes"]
    assert cause["field"] == "spec.validations[0].expression"
    assert "undeclared reference to 'objec'" in cause["message"]

    bad_message = await http.post(
        POLICIES, json=policy("p", [{"expression": "true", "messageExpression": "'a' +"}])
    )
    assert bad_message.json()["details"]["causes"][0]["field"] == "spec.validations[0].messageExpression"

    missing = await http.post(POLICIES, json={**policy("p", []), "spec": {"validations": []}})
    fields = {c["field"] for c in missing.json()["details"]["causes"]}
    assert fields == {"spec.matchConstraints", "spec.validations"}

    for spec, named in (
        ({"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"}}, "spec.paramKind"),
        ({"validations": [{"expression": "object.metadata.name.lowerAscii() == 'a'"}]}, "lowerAscii()"),
        (
            {"validations": [{"expression": "authorizer.group('').resource('x').check('get').allowed()"}]},
            "authorizer",
        ),
    ):
        body = policy("p", [{"expression": "true"}])
        body["spec"].update(spec)
        refused = await http.post(POLICIES, json=body)
        assert (refused.status_code, refused.json()["reason"]) == (501, "NotImplemented"), spec
        assert named in refused.json()["message"] and "dev cluster" in refused.json()["message"]
    assert kube.objects("validatingadmissionpolicies") == []


async def test_a_binding_needs_a_policy_name_and_actions_and_parameters_are_not_implemented(
    http: httpx2.AsyncClient,
) -> None:
    refused = await http.post(BINDINGS, json={**binding("b", []), "spec": {}})
    assert refused.status_code == 422
    assert {c["field"] for c in refused.json()["details"]["causes"]} == {
        "spec.policyName",
        "spec.validationActions",
    }
    both = await http.post(BINDINGS, json=binding("b", ["Deny", "Warn"]))
    assert both.status_code == 422 and "must not contain both Deny and Warn" in both.json()["message"]
    params = await http.post(BINDINGS, json=binding("b", ["Deny"], paramRef={"name": "x"}))
    assert params.status_code == 501


async def test_policies_do_not_judge_policies_and_bindings(http: httpx2.AsyncClient) -> None:
    rule = {"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}
    deny_all = policy("all", [{"expression": "false"}])
    deny_all["spec"]["matchConstraints"]["resourceRules"] = [rule]
    await install(http, deny_all, binding("all", ["Deny"]))
    assert (await http.post(CONFIGMAPS.format("default"), json=configmap("c"))).status_code == 422
    assert (await http.delete(f"{BINDINGS}/all")).status_code == 200
    assert (await http.post(CONFIGMAPS.format("default"), json=configmap("c"))).status_code == 201


def test_the_request_cel_reads_leaves_empty_fields_out() -> None:
    from eni_ipam_testkit.fake_kube.admission import admission_request
    from eni_ipam_testkit.fake_kube.auth import service_account_user
    from eni_ipam_testkit.fake_kube.resources import BUILTIN_RESOURCES
    from eni_ipam_testkit.fake_kube.store import Change, WriteOptions

    nodes = next(t for t in BUILTIN_RESOURCES if t.plural == "nodes")
    change = Change(
        "UPDATE", nodes, None, {"metadata": {"name": "n1"}}, {"metadata": {"name": "n1"}}, WriteOptions()
    )
    request = admission_request(change, service_account_user("ns", "sa"))
    assert "subResource" not in request and "namespace" not in request and "extra" not in request["userInfo"]
    assert request["resource"] == {"group": "", "version": "v1", "resource": "nodes"}
    assert json.loads(json.dumps(request))["operation"] == "UPDATE"


async def test_a_token_is_bound_only_to_a_pod_running_as_its_service_account(
    http: httpx2.AsyncClient,
) -> None:
    await http.post("/api/v1/namespaces/default/serviceaccounts", json={"metadata": {"name": "agent"}})
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "nodeName": "n1",
            "serviceAccountName": "other",
            "containers": [{"name": "c", "image": "busybox:1"}],
        },
    }
    await http.post("/api/v1/namespaces/default/pods", json=pod)
    request = {"spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p"}}}
    refused = await http.post("/api/v1/namespaces/default/serviceaccounts/agent/token", json=request)
    assert (refused.status_code, refused.json()["message"]) == (
        400,
        'cannot bind token for serviceaccount "agent" to pod running with different serviceaccount name.',
    )
    missing = {"spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "gone"}}}
    assert (
        await http.post("/api/v1/namespaces/default/serviceaccounts/agent/token", json=missing)
    ).status_code == 404
