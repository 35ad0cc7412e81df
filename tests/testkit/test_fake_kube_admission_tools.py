"""The chart's ValidatingAdmissionPolicy enforced by FakeKube against the real kubectl: with the node
agents installed by helm, a token bound to the agent pod of one node may write its own ENIPool's
status fields and nothing of another node's pool or of the controller's fields; a policy whose CEL
does not compile is refused when it is created."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import lightkube
import pytest
import yaml

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.claims import ClaimReconciler
from eni_ipam.agent.metrics import AgentMetrics
from eni_ipam.agent.types import PoolAddress
from eni_ipam.core.clock import LoopClock
from eni_ipam.kube.api import KubeApi
from eni_ipam.kube.permissions import AGENT_PERMISSIONS
from eni_ipam_testkit.fake_kube import FakeKube
from tests.conftest import cluster_api_crd
from tests.testkit.tools import CHART, Tools
from tests.waiting import until

pytestmark = pytest.mark.timeout(90)

NAMESPACE = "kube-system"
AGENT = (NAMESPACE, "eni-ipam-agent")
CONTROLLER = (NAMESPACE, "eni-ipam")
BOUND = ("bound", "token")
"""The account argument that runs kubectl with the pod-bound token."""
ADDRESS = {"interface": "eni-1", "subnet": "subnet-1"}
DENIED = "ValidatingAdmissionPolicy 'eni-ipam-agent' with binding 'eni-ipam-agent' denied request: "


@dataclasses.dataclass
class BoundTools(Tools):
    """Tools whose ``BOUND`` account is a TokenRequest's token bound to the agent pod on n1."""

    token: str = ""

    def kubeconfig(self, account: tuple[str, str] | None) -> Path:
        if account != BOUND:
            return super().kubeconfig(account)
        config = self.kube.kubeconfig()
        config["users"][0]["user"]["token"] = self.token
        path = self.home / "bound.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        return path


@pytest.fixture
def kube_crds() -> list[dict[str, Any]]:
    return []


@pytest.fixture
async def agents(kube: FakeKube, tmp_path: Path) -> AsyncIterator[BoundTools]:
    """The chart with node agents, two nodes with pools, and the agent pod of n1 with its token."""
    tools = BoundTools(kube, tmp_path)
    done = await tools.helm(
        "install", "eni-ipam", str(CHART), "--namespace", NAMESPACE,
        "--set", "config.aws.region=us-east-1", "--set", "agent.enabled=true",
    )  # fmt: skip
    assert done.code == 0, done.err
    assert kube.get_object("validatingadmissionpolicybindings", "eni-ipam-agent") is not None
    for node in ("n1", "n2"):
        kube.add_object("nodes", {"metadata": {"name": node}})
        pool = {"apiVersion": "eni-ipam.io/v1alpha1", "kind": "ENIPool", "metadata": {"name": node}}
        await tools.ok("apply", "-f", "-", stdin=json.dumps({**pool, "spec": {"instanceID": f"i-{node}"}}))
        status = {"status": {"pool": {"10.0.0.10": ADDRESS}, "used": [], "observedGeneration": 1}}
        await tools.ok(
            "patch", "enipool", node, "--subresource=status", "--type=merge", "-p", json.dumps(status)
        )
    tools.token = await _bound_token(tools, "n1")
    yield tools


async def _status_patch(tools: Tools, pool: str, status: dict[str, Any], account: tuple[str, str]) -> Any:
    body = json.dumps({"status": status})
    return await tools.kubectl(
        "patch", "enipool", pool, "--subresource=status", "--type=merge", "-p", body, account=account
    )


async def test_the_agent_of_a_node_writes_its_own_status_fields_and_nothing_else(
    agents: BoundTools, kube: FakeKube
) -> None:
    own = await _status_patch(agents, "n1", {"used": ["10.0.0.10"]}, BOUND)
    assert own.code == 0, own.err
    assert (kube.get_object("enipools", "n1") or {})["status"]["used"] == ["10.0.0.10"]

    controllers = await _status_patch(agents, "n1", {"pool": {"10.9.9.9": ADDRESS}}, BOUND)
    assert controllers.code == 1
    assert (
        'enipools.eni-ipam.io "n1" is forbidden: '
        + DENIED
        + "the node agent may change only status.used and "
        "status.releaseAnswers of its ENIPool; the other status fields are the controller's"
    ) in controllers.err
    assert "10.9.9.9" not in (kube.get_object("enipools", "n1") or {})["status"]["pool"]

    other = await _status_patch(agents, "n2", {"used": ["10.0.0.10"]}, BOUND)
    assert other.code == 1
    assert DENIED + "the node agent of n1 may change only the status of ENIPool n1, not n2" in other.err
    assert (kube.get_object("enipools", "n2") or {})["status"]["used"] == []


async def test_an_agent_token_bound_to_no_node_is_refused_and_the_controller_is_not_judged(
    agents: BoundTools, kube: FakeKube
) -> None:
    unbound = await _status_patch(agents, "n1", {"used": ["10.0.0.10"]}, AGENT)
    assert unbound.code == 1
    assert DENIED + "the node agent's token is not bound to a node" in unbound.err
    controller = await _status_patch(agents, "n2", {"pool": {}, "message": "resynced"}, CONTROLLER)
    assert controller.code == 0, controller.err
    assert (kube.get_object("enipools", "n2") or {})["status"]["message"] == "resynced"


async def test_a_token_bound_to_a_deleted_pod_is_no_longer_accepted(
    agents: BoundTools, kube: FakeKube
) -> None:
    await agents.ok("delete", "pod", "agent-n1", "-n", NAMESPACE)
    gone = await _status_patch(agents, "n1", {"used": []}, BOUND)
    assert gone.code == 1 and "Unauthorized" in gone.err


async def _bound_token(tools: Tools, node: str) -> str:
    """A TokenRequest's token bound to the agent pod of ``node`` (made here)."""
    tools.kube.add_object(
        "pods",
        {
            "metadata": {"name": f"agent-{node}", "namespace": NAMESPACE},
            "spec": {
                "nodeName": node,
                "serviceAccountName": "eni-ipam-agent",
                "containers": [{"name": "c", "image": "busybox:1"}],
            },
        },
    )
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": f"agent-{node}"}},
    }
    path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/eni-ipam-agent/token"
    answer = json.loads(await tools.ok("create", "--raw", path, "-f", "-", stdin=json.dumps(request)))
    return str(answer["status"]["token"])


def _squatter(name: str, claim: str) -> str:
    """An IPAddress the agent of n1 may label and pool as its own, for ``claim``, named ``name``."""
    return json.dumps(
        {
            "apiVersion": "ipam.cluster.x-k8s.io/v1beta1",
            "kind": "IPAddress",
            "metadata": {"name": name, "namespace": "capi", "labels": {"eni-ipam.io/node": "n1"}},
            "spec": {
                "claimRef": {"name": claim},
                "poolRef": {"apiGroup": "eni-ipam.io", "kind": "ENIPool", "name": "n1"},
                "address": "10.0.0.10",
                "prefix": 8,
                "gateway": "10.0.0.254",
            },
        }
    )


async def test_no_agent_can_squat_the_ipaddress_of_another_nodes_claim(
    agents: BoundTools, kube: FakeKube
) -> None:
    """Claim squatting, on the dev cluster with the chart's policy: the agent of n1 (its pod-bound
    token, through kubectl) cannot create the IPAddress n2's agent makes for n2's claim c2, nor one
    under the claim's own name; what it may create for c2 holds nothing up. n2's agent, on its own
    pod-bound token, serves c2 (decision 0044)."""
    for kind, plural in (("IPAddressClaim", "ipaddressclaims"), ("IPAddress", "ipaddresses")):
        await kube.apply_manifest(cluster_api_crd(kind, plural))
    kube.add_object("namespaces", {"metadata": {"name": "capi"}})
    for name, why in (
        ("c2.n2.2", "may create an IPAddress only under the name of the claim it names in spec.claimRef"),
        ("c2", "may create an IPAddress only under the name of the claim it names in spec.claimRef"),
    ):
        refused = await agents.kubectl("create", "-f", "-", stdin=_squatter(name, "c2"), account=BOUND)
        assert refused.code == 1 and DENIED + "the node agent of n1 " + why in refused.err, refused.err
    made = await agents.kubectl("create", "-f", "-", stdin=_squatter("c2.n1.2", "c2"), account=BOUND)
    assert made.code == 0, made.err  # admitted: a name only n1's agent uses

    claim = {
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta1",
        "kind": "IPAddressClaim",
        "metadata": {"name": "c2", "namespace": "capi"},
        "spec": {"poolRef": {"apiGroup": "eni-ipam.io", "kind": "ENIPool", "name": "n2"}},
    }
    await agents.ok("create", "-f", "-", stdin=json.dumps(claim))
    config = kube.kubeconfig()
    config["users"][0]["user"]["token"] = await _bound_token(agents, "n2")
    api = KubeApi(lightkube.AsyncClient(lightkube.KubeConfig.from_dict(config)), metrics=Metrics())
    api.allowed = AGENT_PERMISSIONS
    allocator = Allocator(clock=LoopClock())
    allocator.set_pool("default", [PoolAddress(address="10.0.0.20", prefix_length=24, gateway="10.0.0.1")])
    reconciler = ClaimReconciler(api, allocator, node="n2", clock=LoopClock(), metrics=AgentMetrics())
    task = asyncio.create_task(reconciler.run())
    try:
        await until(
            lambda: (
                (kube.get_object("ipaddressclaims", "c2", namespace="capi") or {}).get("status") or {}
            ).get("addressRef")
        )
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.close()
    served = kube.get_object("ipaddressclaims", "c2", namespace="capi")
    assert served["status"]["addressRef"] == {"name": "c2.n2.2"}
    assert [c["status"] for c in served["status"]["conditions"] if c["type"] == "Ready"] == ["True"]
    address = kube.get_object("ipaddresses", "c2.n2.2", namespace="capi")
    assert (
        address["metadata"]["labels"]["eni-ipam.io/node"] == "n2"
        and address["spec"]["address"] == "10.0.0.20"
    )
    assert (
        kube.get_object("ipaddresses", "c2.n1.2", namespace="capi")["spec"]["gateway"] == "10.0.0.254"
    )  # untouched


POLICY = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: replicas}
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}
  validations:
    - expression: "object.spec.replicas <="
"""


async def test_kubectl_cannot_create_a_policy_whose_cel_does_not_compile(
    tmp_path: Path, kube: FakeKube
) -> None:
    tools = Tools(kube, tmp_path)
    refused = await tools.kubectl("apply", "-f", "-", stdin=POLICY)
    assert refused.code == 1
    assert (
        'The ValidatingAdmissionPolicy "replicas" is invalid: spec.validations[0].expression: Invalid value: '
        in (refused.err)
    )
    assert "compilation failed: ERROR: <input>:1:22: Syntax error" in refused.err
    assert kube.objects("validatingadmissionpolicies") == []
    fixed = POLICY.replace("<=", "<= 5")
    assert "created" in await tools.ok("apply", "-f", "-", stdin=fixed)
