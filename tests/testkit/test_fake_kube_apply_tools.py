"""Server-side apply as the real helm 4 and kubectl use it against FakeKube: what an upgrade stops
rendering is gone from the live object (and a rollback brings it back), and two field managers that
apply different values to one field conflict until one of them forces it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from eni_ipam_testkit.fake_kube import FakeKube
from tests.testkit.tools import CHART, Tools

pytestmark = pytest.mark.timeout(90)

RELEASE, NAMESPACE = "eni-ipam", "kube-system"
DROPPED = {
    "podAnnotations.example\\.com/owner": "team-a",
    "podLabels.example\\.com/tier": "gold",
    "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn": "arn:aws:iam::111122223333:role/x",
    "env[0].name": "ENI_IPAM_LOG_LEVEL",
    "env[0].value": "debug",
}


@pytest.fixture
def kube_crds() -> list[dict[str, Any]]:
    """No CRD up front: helm installs the chart's from crds/."""
    return []


def _sets(values: dict[str, str]) -> list[str]:
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


async def _helm(tools: Tools, *args: str) -> None:
    done = await tools.helm(*args, "--namespace", NAMESPACE)
    assert done.code == 0, done.err


REGION = ("--set", "config.aws.region=us-east-1")


def _dropped_fields(kube: FakeKube) -> dict[str, Any]:
    """The live values of what DROPPED renders (absent ones are None)."""
    deployment = kube.get_object("deployments", RELEASE, namespace=NAMESPACE) or {}
    account = kube.get_object("serviceaccounts", RELEASE, namespace=NAMESPACE) or {}
    template = deployment["spec"]["template"]
    (container,) = template["spec"]["containers"]
    return {
        "annotation": template["metadata"].get("annotations", {}).get("example.com/owner"),
        "label": template["metadata"]["labels"].get("example.com/tier"),
        "account": (account["metadata"].get("annotations") or {}).get("eks.amazonaws.com/role-arn"),
        "env": [e["name"] for e in container["env"]],
    }


async def test_a_value_dropped_by_helm_upgrade_is_gone_and_rollback_brings_it_back(
    tools: Tools, kube: FakeKube
) -> None:
    await _helm(tools, "install", RELEASE, str(CHART), *REGION, *_sets(DROPPED))
    assert _dropped_fields(kube) == {
        "annotation": "team-a",
        "label": "gold",
        "account": "arn:aws:iam::111122223333:role/x",
        "env": ["POD_NAME", "POD_NAMESPACE", "ENI_IPAM_LOG_LEVEL"],
    }
    applies = [r for r in kube.requests if r.params.get("fieldManager") == "helm" and r.method == "PATCH"]
    assert applies, "helm 4 applies server-side"

    await _helm(tools, "upgrade", RELEASE, str(CHART), "--reset-values", *REGION)
    assert _dropped_fields(kube) == {
        "annotation": None,
        "label": None,
        "account": None,
        "env": ["POD_NAME", "POD_NAMESPACE"],
    }
    deployment = kube.get_object("deployments", RELEASE, namespace=NAMESPACE) or {}
    (entry,) = [e for e in deployment["metadata"]["managedFields"] if e["operation"] == "Apply"]
    assert entry["manager"] == "helm"
    containers = entry["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
    env = containers['k:{"name":"eni-ipam"}']["f:env"]
    assert set(env) == {'k:{"name":"POD_NAME"}', 'k:{"name":"POD_NAMESPACE"}'}

    await _helm(tools, "rollback", RELEASE, "1")
    assert _dropped_fields(kube) == {
        "annotation": "team-a",
        "label": "gold",
        "account": "arn:aws:iam::111122223333:role/x",
        "env": ["POD_NAME", "POD_NAMESPACE", "ENI_IPAM_LOG_LEVEL"],
    }


DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: %d
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx}]
"""


async def test_kubectl_server_side_apply_conflicts_between_managers_until_forced(
    tools: Tools, kube: FakeKube
) -> None:
    await tools.ok("apply", "--server-side", "--field-manager=team-a", "-f", "-", stdin=DEPLOYMENT % 2)
    again = await tools.ok(
        "apply", "--server-side", "--field-manager=team-a", "-f", "-", stdin=DEPLOYMENT % 2
    )
    assert "serverside-applied" in again

    conflict = await tools.kubectl(
        "apply", "--server-side", "--field-manager=team-b", "-f", "-", stdin=DEPLOYMENT % 5
    )
    assert conflict.code == 1
    assert 'Apply failed with 1 conflict: conflict with "team-a": .spec.replicas' in conflict.err
    assert (kube.get_object("deployments", "web", namespace="default") or {})["spec"]["replicas"] == 2

    await tools.ok(
        "apply",
        "--server-side",
        "--field-manager=team-b",
        "--force-conflicts",
        "-f",
        "-",
        stdin=DEPLOYMENT % 5,
    )
    live = json.loads(await tools.ok("get", "deployment", "web", "-o", "json", "--show-managed-fields"))
    assert live["spec"]["replicas"] == 5
    owners = {e["manager"]: e["fieldsV1"]["f:spec"] for e in live["metadata"]["managedFields"]}
    assert "f:replicas" in owners["team-b"] and "f:replicas" not in owners["team-a"]
    assert "f:selector" in owners["team-a"] and "f:selector" in owners["team-b"]  # shared: same value

    # Another manager's plain write takes the field too: team-b's next apply conflicts with it.
    await tools.ok("patch", "deployment", "web", "-p", '{"spec": {"replicas": 7}}')
    conflict = await tools.kubectl(
        "apply", "--server-side", "--field-manager=team-b", "-f", "-", stdin=DEPLOYMENT % 5
    )
    assert conflict.code == 1
    assert 'conflict with "kubectl-patch" using apps/v1: .spec.replicas' in conflict.err
