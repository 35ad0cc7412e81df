"""Where the dev cluster cannot answer as a cluster would, it refuses out loud: the rules a real server
applies to custom resources (CEL rules, formats, list types, embedded resources, combinators), the
per-type rules of built-in objects the chart and the product write, and Pod Security.

kubectl is the client wherever an operator would read the answer.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from eni_ipam_testkit.fake_kube import FakeKube, StatusError
from tests.testkit.tools import Tools

pytestmark = pytest.mark.timeout(60)

GROUP = "strict.example.com"


def widget_crd(
    spec_schema: dict[str, Any], *, root_rules: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    root: dict[str, Any] = {"type": "object", "properties": {"spec": spec_schema}}
    if root_rules:
        root["x-kubernetes-validations"] = root_rules
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [
                {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": root}}
            ],
        },
    }


def widget(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


@pytest.fixture
def kube_crds() -> list[dict[str, Any]]:
    return []


async def refused(kube: FakeKube, obj: dict[str, Any]) -> StatusError:
    with pytest.raises(StatusError) as caught:
        await kube.apply_manifest(obj)
    return caught.value


# -- CEL rules of custom resources ------------------------------------------------------------------

RANGE = {
    "type": "object",
    "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}},
    "x-kubernetes-validations": [
        {"rule": "self.min <= self.max", "message": "min must not exceed max"},
        {
            "rule": "self.max == oldSelf.max || self.max > oldSelf.max",
            "messageExpression": "'max may only grow, not to ' + string(self.max)",
            "fieldPath": ".max",
        },
    ],
}


async def test_a_custom_resource_breaking_a_cel_rule_is_refused_with_the_real_wording(
    tools: Tools, kube: FakeKube
) -> None:
    await kube.apply_manifest(widget_crd(RANGE))
    done = await tools.kubectl("apply", "-f", "-", stdin=json.dumps(widget("w", {"min": 5, "max": 1})))
    assert done.code == 1
    assert 'The Widget "w" is invalid: spec: Invalid value: "object": min must not exceed max' in done.err, (
        done.err
    )
    assert kube.objects(f"widgets.{GROUP}") == []
    created = await tools.kubectl("apply", "-f", "-", stdin=json.dumps(widget("w", {"min": 1, "max": 5})))
    assert created.code == 0, created.err


async def test_a_transition_rule_judges_an_update_against_the_stored_value(
    tools: Tools, kube: FakeKube
) -> None:
    await kube.apply_manifest(widget_crd(RANGE))
    await kube.apply_manifest(widget("w", {"min": 1, "max": 5}))
    done = await tools.kubectl("apply", "-f", "-", stdin=json.dumps(widget("w", {"min": 1, "max": 3})))
    assert done.code == 1
    assert 'spec.max: Invalid value: "object": max may only grow, not to 3' in done.err, done.err
    stored = kube.get_object(f"widgets.{GROUP}", "w", namespace="default")
    assert stored is not None and stored["spec"]["max"] == 5


async def test_a_cel_rule_reason_and_default_message_are_the_real_ones(kube: FakeKube) -> None:
    rules = [{"rule": "has(self.owner)", "reason": "FieldValueRequired", "fieldPath": ".owner"}]
    schema = {
        "type": "object",
        "properties": {"owner": {"type": "string"}},
        "x-kubernetes-validations": rules,
    }
    await kube.apply_manifest(widget_crd(schema))
    error = await refused(kube, widget("w", {}))
    assert error.code == 422
    assert "spec.owner: Required value: failed rule: has(self.owner)" in error.message


async def test_a_crd_whose_rule_uses_a_function_the_dev_cluster_lacks_is_refused_naming_the_rule(
    tools: Tools, kube: FakeKube
) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "x-kubernetes-validations": [{"rule": "self.name.lowerAscii() == self.name"}],
    }
    done = await tools.kubectl("apply", "-f", "-", stdin=json.dumps(widget_crd(schema)))
    assert done.code == 1
    assert "the dev cluster does not emulate" in done.err, done.err
    assert "properties[spec].x-kubernetes-validations[0].rule" in done.err and "lowerAscii" in done.err
    assert kube.objects("customresourcedefinitions.apiextensions.k8s.io") == []


async def test_a_crd_whose_rule_does_not_compile_is_a_422_naming_the_rule(kube: FakeKube) -> None:
    schema = {"type": "object", "x-kubernetes-validations": [{"rule": "self.a +"}]}
    error = await refused(kube, widget_crd(schema))
    assert error.code == 422
    assert "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule" in (
        error.message
    )


# -- formats, list types, embedded resources, combinators -------------------------------------------


async def test_a_string_breaking_its_format_is_refused_and_unknown_formats_are_ignored(
    kube: FakeKube,
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "at": {"type": "string", "format": "date-time"},
            "ip": {"type": "string", "format": "ipv4"},
            "any": {"type": "string", "format": "something-else"},
        },
    }
    await kube.apply_manifest(widget_crd(schema))
    error = await refused(kube, widget("w", {"ip": "10.0.0.300"}))
    assert 'spec.ip: Invalid value: "10.0.0.300": spec.ip in body must be of type ipv4: "10.0.0.300"' in (
        error.message
    )
    error = await refused(kube, widget("w", {"at": "yesterday"}))
    assert "spec.at in body must be of type date-time" in error.message
    await kube.apply_manifest(widget("w", {"at": "2026-01-02T03:04:05Z", "ip": "10.0.0.1", "any": "x"}))


async def test_duplicates_in_set_and_map_lists_are_refused(tools: Tools, kube: FakeKube) -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "ports": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                },
            },
        },
    }
    await kube.apply_manifest(widget_crd(schema))
    error = await refused(kube, widget("w", {"tags": ["a", "b", "a"]}))
    assert 'spec.tags[2]: Duplicate value: "a"' in error.message
    # (server-side apply refuses it earlier, as a real server does, when it builds the typed patch)
    ports = [{"name": "h", "port": 1}, {"name": "h", "port": 2}]
    done = await tools.kubectl("create", "-f", "-", stdin=json.dumps(widget("w", {"ports": ports})))
    assert done.code == 1
    assert 'spec.ports[1]: Duplicate value: map[string]interface {}{"name":"h"}' in done.err, done.err


async def test_an_embedded_resource_needs_its_api_version_and_kind(kube: FakeKube) -> None:
    embedded = {
        "type": "object",
        "x-kubernetes-embedded-resource": True,
        "x-kubernetes-preserve-unknown-fields": True,
    }
    await kube.apply_manifest(widget_crd({"type": "object", "properties": {"template": embedded}}))
    error = await refused(kube, widget("w", {"template": {"metadata": {"name": "x"}}}))
    assert "spec.template.apiVersion: Required value: must not be empty" in error.message
    assert "spec.template.kind: Required value: must not be empty" in error.message
    await kube.apply_manifest(widget("w", {"template": {"apiVersion": "v1", "kind": "ConfigMap"}}))


async def test_one_of_any_of_all_of_and_not_are_evaluated(kube: FakeKube) -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
        "not": {"properties": {"a": {"enum": ["forbidden"]}}, "required": ["a"]},
    }
    await kube.apply_manifest(widget_crd(schema))
    error = await refused(kube, widget("w", {"a": "x", "b": "y"}))
    assert "spec in body must validate one and only one schema (oneOf)" in error.message
    error = await refused(kube, widget("w", {"a": "forbidden"}))
    assert "spec in body must not validate the schema (not)" in error.message
    await kube.apply_manifest(widget("w", {"a": "fine"}))


async def test_a_crd_asking_for_a_check_the_dev_cluster_does_not_make_is_refused_naming_it(
    kube: FakeKube,
) -> None:
    schema = {"type": "object", "properties": {"card": {"type": "string", "format": "creditcard"}}}
    error = await refused(kube, widget_crd(schema))
    assert error.code == 501
    assert "openAPIV3Schema.properties[spec].properties[card]: format creditcard" in error.message
    rules = [{"rule": "self == oldSelf", "optionalOldSelf": True}]
    error = await refused(kube, widget_crd({"type": "object", "x-kubernetes-validations": rules}))
    assert error.code == 501 and "optionalOldSelf" in error.message


async def test_a_transition_rule_where_nothing_correlates_is_refused_with_the_crd(kube: FakeKube) -> None:
    items = {"type": "object", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}
    schema = {"type": "object", "properties": {"list": {"type": "array", "items": items}}}
    error = await refused(kube, widget_crd(schema))
    assert error.code == 422 and "oldSelf cannot be used on the uncorrelatable portion" in error.message


# -- Pod Security ------------------------------------------------------------------------------------

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "locked"},
    "spec": {"containers": [{"name": "c", "image": "busybox:1"}]},
}


def namespace(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


async def test_a_pod_in_a_namespace_enforcing_restricted_is_refused_out_loud_not_stored(
    tools: Tools, kube: FakeKube
) -> None:
    await kube.apply_manifest(namespace("locked", {"pod-security.kubernetes.io/enforce": "restricted"}))
    done = await tools.kubectl("apply", "-f", "-", stdin=json.dumps(POD))
    assert done.code == 1
    assert 'the dev cluster does not enforce Pod Security level "restricted"' in done.err, done.err
    assert kube.objects("pods") == []


async def test_a_pod_in_a_privileged_or_unlabelled_namespace_is_stored(kube: FakeKube) -> None:
    await kube.apply_manifest(namespace("locked", {"pod-security.kubernetes.io/enforce": "privileged"}))
    await kube.apply_manifest(POD)
    await kube.apply_manifest({**POD, "metadata": {"name": "p", "namespace": "default"}})
    assert len(kube.objects("pods")) == 2


async def test_a_workload_in_a_namespace_warning_baseline_is_refused_rather_than_left_unwarned(
    kube: FakeKube,
) -> None:
    await kube.apply_manifest(namespace("locked", {"pod-security.kubernetes.io/warn": "baseline"}))
    template = {"metadata": {"labels": {"a": "b"}}, "spec": POD["spec"]}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "locked"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": template},
    }
    error = await refused(kube, deployment)
    assert error.code == 501 and '"baseline"' in error.message and "pod template" in error.message


async def test_an_unknown_pod_security_level_on_a_namespace_is_the_real_422(
    tools: Tools, kube: FakeKube
) -> None:
    bad = namespace("locked", {"pod-security.kubernetes.io/enforce": "strict"})
    done = await tools.kubectl("apply", "-f", "-", stdin=json.dumps(bad))
    assert done.code == 1
    # (kubectl prints a detail-less 422 as "The namespaces ... is invalid: : <message>", as for a cluster's)
    assert 'namespaces "locked" is invalid' in done.err, done.err
    assert (
        'metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of '
        "privileged, baseline, restricted"
    ) in done.err
    assert kube.get_object("namespaces", "locked") is None


async def test_raising_a_namespace_to_enforce_baseline_over_its_pods_is_refused_not_left_unwarned(
    kube: FakeKube,
) -> None:
    await kube.apply_manifest(namespace("locked", {}))
    await kube.apply_manifest(POD)
    error = await refused(kube, namespace("locked", {"pod-security.kubernetes.io/enforce": "baseline"}))
    assert error.code == 501 and "the pods it holds" in error.message
    stored = kube.get_object("namespaces", "locked")
    assert stored is not None and "pod-security.kubernetes.io/enforce" not in stored["metadata"]["labels"]


# -- per-type rules of built-in objects ----------------------------------------------------------------


async def test_a_pod_without_containers_is_refused_as_a_cluster_refuses_it(
    tools: Tools, kube: FakeKube
) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": {}}
    done = await tools.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    assert done.code == 1
    assert 'The Pod "p" is invalid: spec.containers: Required value' in done.err, done.err
    pod["spec"] = {"containers": [{"image": "busybox:1"}]}  # (server-side apply refuses it as a bad patch)
    done = await tools.kubectl("create", "-f", "-", stdin=json.dumps(pod))
    assert done.code == 1 and "spec.containers[0].name: Required value" in done.err, done.err
    assert kube.objects("pods") == []


async def test_a_negative_replica_count_is_refused(tools: Tools, kube: FakeKube) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": -1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": POD["spec"]},
        },
    }
    done = await tools.kubectl("apply", "-f", "-", stdin=json.dumps(deployment))
    assert done.code == 1
    assert "spec.replicas: Invalid value: -1: must be greater than or equal to 0" in done.err, done.err
    missing = {**deployment, "spec": {"template": deployment["spec"]["template"]}}
    error = await refused(kube, missing)
    assert "spec.selector: Required value" in error.message
    assert kube.objects("deployments") == []


async def test_a_service_port_out_of_range_and_a_role_rule_without_verbs_are_refused(kube: FakeKube) -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s", "namespace": "default"},
        "spec": {"ports": [{"port": 70000}]},
    }
    error = await refused(kube, service)
    assert "spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive" in error.message
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "r", "namespace": "default"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": []}],
    }
    error = await refused(kube, role)
    assert "rules[0].verbs: Required value" in error.message
