"""The real kubectl and helm (.venv/bin, `make kube-tools`) against FakeKube, unchanged: TLS, tokens,
discovery, OpenAPI, Tables, server-side validation, CRDs through the API, RBAC, and the chart's install.

Each tool runs as a subprocess with its own kubeconfig and empty home directories, while the server
serves it from the test's event loop. A test skips, saying why, when its tool is not installed.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from eni_ipam_testkit.fake_kube import FakeKube
from tests.conftest import CRD, cluster_api_crd
from tests.testkit.tools import CHART, Tools

pytestmark = pytest.mark.timeout(60)

CONTROLLER = ("kube-system", "eni-ipam")
"""The chart's controller ServiceAccount for a release named eni-ipam in kube-system."""
ENIPool = create_global_resource("eni-ipam.io", "v1alpha1", "ENIPool", "enipools")

POOL = """
apiVersion: eni-ipam.io/v1alpha1
kind: ENIPool
metadata: {name: n1}
spec: {instanceID: i-1, instanceType: m5.large}
"""


@pytest.fixture
def kube_crds() -> list[dict[str, Any]]:
    """No CRD up front: the tests create them with the tools, as on a cluster."""
    return []


@pytest.fixture
async def chart_crd(tools: Tools) -> None:
    """The chart's ENIPool CRD, applied with kubectl."""
    out = await tools.ok("apply", "-f", str(CRD))
    assert out.strip() == "customresourcedefinition.apiextensions.k8s.io/enipools.eni-ipam.io created"


def table(output: str) -> list[list[str]]:
    """kubectl's table output as rows of cells (header first); cells are separated by 2+ spaces."""
    return [re.split(r"\s{2,}", line.strip()) for line in output.strip().splitlines()]


async def test_kubectl_discovers_built_in_and_custom_resources(tools: Tools, chart_crd: None) -> None:
    rows = table(await tools.ok("api-resources"))
    assert rows[0] == ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    assert ["enipools", "enip", "eni-ipam.io/v1alpha1", "false", "ENIPool"] in rows
    assert ["nodes", "no", "v1", "false", "Node"] in rows
    assert ["leases", "coordination.k8s.io/v1", "true", "Lease"] in rows
    assert "Server Version: v1.34.5" in await tools.ok("version")


async def test_kubectl_get_enipools_prints_the_printer_columns_with_values(
    tools: Tools, chart_crd: None
) -> None:
    await tools.ok("apply", "-f", "-", stdin=POOL)
    status = {
        "status": {
            "stats": {"available": 5, "used": 2, "needed": 0},
            "conditions": [{"type": "Ready", "status": "True"}],
        }
    }
    await tools.ok("patch", "enipool", "n1", "--subresource=status", "--type=merge", "-p", json.dumps(status))
    await tools.ok("label", "enipool", "n1", "eni-ipam.io/profile=web")  # the profile it follows
    rows = table(await tools.ok("get", "enipools"))
    assert rows[0] == ["NAME", "INSTANCE", "TYPE", "PROFILE", "AVAILABLE", "USED", "NEEDED", "READY", "AGE"]
    assert rows[1][:8] == ["n1", "i-1", "m5.large", "web", "5", "2", "0", "True"]
    assert rows[1][8].endswith("s")  # seconds old
    # -o wide adds the columns of priority 1: why a pool cannot grow, at a glance.
    blocked = {
        "status": {
            "stats": {"capacity": 30, "remainingInterfaces": 0},
            "conditions": [{"type": "Ready", "status": "False", "reason": "SubnetFull"}],
            "message": "no room in the subnets",
        }
    }
    patch = ("patch", "enipool", "n1", "--type=merge", "-p")
    await tools.ok(*patch, json.dumps(blocked), "--subresource=status")
    await tools.ok(*patch, '{"spec": {"zone": "us-east-1a"}}')
    wide = table(await tools.ok("get", "enipools", "-o", "wide"))
    assert wide[0][9:] == ["ZONE", "CAPACITY", "INTERFACES LEFT", "REASON", "MESSAGE"]
    assert wide[1][9:] == ["us-east-1a", "30", "0", "SubnetFull", "no room in the subnets"]


async def test_kubectl_patch_of_a_pool_needs_type_merge_as_on_a_cluster(
    tools: Tools, kube: FakeKube, chart_crd: None
) -> None:
    await tools.ok("apply", "-f", "-", stdin=POOL)
    refused = await tools.kubectl("patch", "enipool", "n1", "-p", '{"spec":{"minAllocate":3}}')
    assert refused.code == 1
    assert "application/strategic-merge-patch+json is not supported" in refused.err
    assert (
        "accepted media types include: application/json-patch+json, application/merge-patch+json"
        in refused.err
    )
    assert "minAllocate" not in (kube.get_object("enipools", "n1") or {})["spec"]
    out = await tools.ok("patch", "enipool", "n1", "--type", "merge", "-p", '{"spec":{"minAllocate":3}}')
    assert out.strip() == "enipool.eni-ipam.io/n1 patched"
    assert (kube.get_object("enipools", "n1") or {})["spec"]["minAllocate"] == 3


async def test_kubectl_apply_is_validated_by_the_server_without_turning_validation_off(
    tools: Tools, kube: FakeKube, chart_crd: None
) -> None:
    unknown = await tools.kubectl("apply", "-f", "-", stdin=POOL.replace("m5.large}", "m5.large, bogus: 1}"))
    assert unknown.code == 1
    assert 'strict decoding error: unknown field "spec.bogus"' in unknown.err
    invalid = await tools.kubectl(
        "apply", "-f", "-", stdin=POOL.replace("m5.large}", "m5.large, minAllocate: -1}")
    )
    assert invalid.code == 1
    assert (
        'The ENIPool "n1" is invalid: spec.minAllocate: Invalid value: -1: '
        "spec.minAllocate in body should be greater than or equal to 0"
    ) in invalid.err
    assert kube.objects("enipools") == []
    assert (await tools.ok("apply", "-f", "-", stdin=POOL)).strip() == "enipool.eni-ipam.io/n1 created"
    assert (await tools.ok("apply", "-f", "-", stdin=POOL)).strip() == "enipool.eni-ipam.io/n1 unchanged"
    dry = await tools.ok("apply", "--dry-run=server", "-f", "-", stdin=POOL.replace("i-1", "i-9"))
    assert dry.strip() == "enipool.eni-ipam.io/n1 configured (server dry run)"
    assert (kube.get_object("enipools", "n1") or {})["spec"]["instanceID"] == "i-1"


async def test_kubectl_explain_describes_a_field_of_the_crd(tools: Tools, chart_crd: None) -> None:
    out = await tools.ok("explain", "enipools.spec")
    assert "KIND:       ENIPool" in out and "VERSION:    v1alpha1" in out
    assert "instanceID\t<string> -required-" in out
    assert "The cloud instance behind the node (EC2 instance id, Azure VM resource" in out
    assert "minAllocate\t<integer>" in out


async def test_kubectl_creates_applies_gets_and_deletes_built_in_objects(
    tools: Tools, kube: FakeKube
) -> None:
    # `create namespace` and `create configmap` send Protobuf, `apply` JSON and strategic merge patches.
    assert (await tools.ok("create", "namespace", "demo")).strip() == "namespace/demo created"
    await tools.ok(
        "create", "configmap", "settings", "-n", "demo", "--from-literal=a=1", "--from-literal=b=2"
    )
    assert table(await tools.ok("get", "configmaps", "-n", "demo"))[1][:2] == ["settings", "2"]
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "demo"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {"name": "web", "image": "nginx:1", "env": [{"name": "A", "value": "1"}]},
                        {"name": "side", "image": "busybox"},
                    ]
                },
            },
        },
    }
    await tools.ok("apply", "-f", "-", stdin=json.dumps(deployment))
    containers = deployment["spec"]["template"]["spec"]["containers"]
    containers[0].update(image="nginx:2", env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
    del containers[1]
    assert (await tools.ok("apply", "-f", "-", stdin=json.dumps(deployment))).strip() == (
        "deployment.apps/web configured"
    )
    stored = (kube.get_object("deployments", "web", namespace="demo") or {})["spec"]["template"]["spec"]
    assert stored["containers"] == [
        {"name": "web", "image": "nginx:2", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
    ]
    assert table(await tools.ok("get", "deployments", "-n", "demo"))[0] == [
        "NAME",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "AGE",
    ]
    await tools.ok("delete", "deployment", "web", "-n", "demo")
    await tools.ok("delete", "namespace", "demo")
    assert kube.objects("deployments") == [] and kube.get_object("namespaces", "demo") is None


async def test_kubectl_get_nodes_shows_status_roles_age_and_version(tools: Tools, kube: FakeKube) -> None:
    kube.add_object(
        "nodes",
        {
            "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/worker": ""}},
            "spec": {"unschedulable": True},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"kubeletVersion": "v1.34.1"},
                "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}],
            },
        },
    )
    kube.add_object("nodes", {"metadata": {"name": "n2"}})
    rows = table(await tools.ok("get", "nodes"))
    assert rows[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert rows[1][:3] == ["n1", "Ready,SchedulingDisabled", "worker"] and rows[1][4] == "v1.34.1"
    assert rows[2][:3] == ["n2", "Unknown", "<none>"]
    wide = table(await tools.ok("get", "nodes", "-o", "wide"))
    assert wide[0][5] == "INTERNAL-IP" and wide[1][5] == "10.0.0.7"


async def test_a_crd_applied_with_kubectl_is_served_at_once(tools: Tools, kube: FakeKube) -> None:
    claims = cluster_api_crd("IPAddressClaim", "ipaddressclaims")
    await tools.ok("apply", "-f", "-", stdin=json.dumps(claims))
    claim = {
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta1",
        "kind": "IPAddressClaim",
        "metadata": {"name": "c1", "namespace": "default"},
        "spec": {"poolRef": {"name": "p"}},
    }
    await tools.ok("apply", "-f", "-", stdin=json.dumps(claim))
    assert table(await tools.ok("get", "ipaddressclaims"))[1][0] == "c1"
    crd = kube.get_object("customresourcedefinitions", "ipaddressclaims.ipam.cluster.x-k8s.io") or {}
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]} == {
        "NamesAccepted": "True",
        "Established": "True",
    }
    await tools.ok("delete", "crd", "ipaddressclaims.ipam.cluster.x-k8s.io")
    assert (
        kube.resource_version
        and kube.get_object("customresourcedefinitions", claims["metadata"]["name"]) is None
    )
    gone = await tools.kubectl("get", "ipaddressclaims")  # kubectl's cached discovery still knows the type
    assert gone.code == 1 and "the server could not find the requested resource" in gone.err


@pytest.fixture
async def installed(tools: Tools, kube: FakeKube) -> AsyncIterator[Tools]:
    """The chart installed by helm, as on a cluster (its CRD from crds/, the rest through helm's client)."""
    done = await tools.helm(
        "install",
        "eni-ipam",
        str(CHART),
        "--namespace",
        "kube-system",
        "--set",
        "config.aws.region=us-east-1",
    )
    assert done.code == 0, done.err
    assert "STATUS: deployed" in done.out
    yield tools


async def test_helm_installs_and_uninstalls_the_chart(installed: Tools, kube: FakeKube) -> None:
    crd = kube.get_object("customresourcedefinitions", "enipools.eni-ipam.io") or {}
    assert {c["type"] for c in crd["status"]["conditions"]} == {"NamesAccepted", "Established"}
    for plural, name in (
        ("deployments", "eni-ipam"),
        ("serviceaccounts", "eni-ipam"),
        ("configmaps", "eni-ipam"),
        ("roles", "eni-ipam"),
        ("rolebindings", "eni-ipam"),
        ("services", "eni-ipam"),
        ("secrets", "sh.helm.release.v1.eni-ipam.v1"),
    ):
        assert kube.get_object(plural, name, namespace="kube-system") is not None, plural
    assert kube.get_object("clusterroles", "eni-ipam") is not None
    listed = await installed.helm("list", "--namespace", "kube-system", "-o", "json")
    assert [(r["name"], r["status"]) for r in json.loads(listed.out)] == [("eni-ipam", "deployed")]
    config = yaml.safe_load(
        (kube.get_object("configmaps", "eni-ipam", namespace="kube-system") or {})["data"]["config.yaml"]
    )
    assert config["aws"]["region"] == "us-east-1"

    done = await installed.helm("uninstall", "eni-ipam", "--namespace", "kube-system")
    assert done.code == 0, done.err
    assert kube.objects("deployments") == [] and kube.objects("secrets") == [] and kube.objects("roles") == []
    assert kube.get_object("clusterroles", "eni-ipam") is None
    assert kube.get_object("customresourcedefinitions", "enipools.eni-ipam.io") is not None  # helm keeps CRDs


async def test_the_controller_account_may_do_what_the_chart_grants_and_nothing_else(
    installed: Tools, kube: FakeKube
) -> None:
    kube.add_object("nodes", {"metadata": {"name": "n1"}})
    client = AsyncClient(KubeConfig.from_dict(kube.kubeconfig(service_account=CONTROLLER)))
    try:
        assert [n.metadata.name async for n in client.list(Node)] == ["n1"]
        await client.create(ENIPool(metadata={"name": "n1"}, spec={"instanceID": "i-1"}))
        patch = {"status": {"stats": {"available": 1}}}
        await client.patch(ENIPool.Status, "n1", patch, patch_type=PatchType.MERGE)
        with pytest.raises(ApiError) as caught:
            await client.delete(Node, "n1")
        assert (caught.value.status.code, caught.value.status.reason) == (403, "Forbidden")
        assert caught.value.status.message == (
            'nodes "n1" is forbidden: User "system:serviceaccount:kube-system:eni-ipam" cannot delete '
            'resource "nodes" in API group "" at the cluster scope'
        )
        with pytest.raises(ApiError) as caught:
            await client.delete(ENIPool, "n1")
        assert caught.value.status.code == 403
    finally:
        await client.close()
    assert kube.get_object("nodes", "n1") is not None and kube.get_object("enipools", "n1") is not None
    secrets = await installed.kubectl("get", "secrets", "-n", "kube-system", account=CONTROLLER)
    assert (
        secrets.code == 1
        and (
            'secrets is forbidden: User "system:serviceaccount:kube-system:eni-ipam" cannot list resource '
            '"secrets" in API group "" in the namespace "kube-system"'
        )
        in secrets.err
    )
    assert (
        await installed.kubectl("auth", "can-i", "delete", "nodes", account=CONTROLLER)
    ).out.strip() == "no"
    can_patch = await installed.ok(
        "auth", "can-i", "patch", "enipools.eni-ipam.io/status", account=CONTROLLER
    )
    assert can_patch.strip() == "yes"
