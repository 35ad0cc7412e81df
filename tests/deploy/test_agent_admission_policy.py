"""The chart's ValidatingAdmissionPolicy confines each node agent to its own node.

The policy is rendered by the real helm and its CEL evaluated with cel-python against admission
requests built as the API server builds them (``request``, ``object``, ``oldObject``, ``variables``):
what an agent does on its own node is allowed, anything it could do to another node is denied, and
dropping any one validation lets some forbidden request through.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import celpy
import celpy.adapter
import celpy.evaluation
import pytest
import yaml

from eni_ipam.agent.claims import NODE_LABEL, RELEASE_FINALIZER, address_name, ip_address
from eni_ipam.agent.types import Allocation
from eni_ipam.kube.nodemarks import STARTUP_TAINT
from eni_ipam.kube.resources import agent_status_patch
from tests.deploy.conftest import CHART, NAMESPACE, RELEASE, HelmError, helm, one, render, with_required
from tests.deploy.schemas import KUBE_FLOOR, POLICY_KINDS, POLICY_KUBE_FLOOR

AGENT_SA = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-agent"
"""The agent DaemonSet's ServiceAccount (a test checks it against the rendered DaemonSet)."""
NODE_CLAIM = "authentication.kubernetes.io/node-name"
AGENT_STATUS_FIELDS = {"used", "releaseAnswers"}

ENV = celpy.Environment()


def rendered(**agent: Any) -> dict[str, Any]:
    docs = render({"agent": {"enabled": True, **agent}})
    return one(docs, "ValidatingAdmissionPolicy")


@pytest.fixture(scope="module")
def policy() -> dict[str, Any]:
    return rendered()


# -- the admission request ------------------------------------------------------------------------------

RESOURCES = {
    "enipools": ("eni-ipam.io", "v1alpha1"),
    "ipaddresses": ("ipam.cluster.x-k8s.io", "v1beta1"),
    "ipaddressclaims": ("ipam.cluster.x-k8s.io", "v1beta1"),
    "nodes": ("", "v1"),
}


def request(
    operation: str,
    resource: str,
    *,
    new: dict[str, Any] | None = None,
    old: dict[str, Any] | None = None,
    sub: str = "",
    node: str | None = "n1",
    user: str = AGENT_SA,
) -> dict[str, Any]:
    group, version = RESOURCES[resource]
    obj = new if new is not None else old
    assert obj is not None
    user_info: dict[str, Any] = {"username": user, "groups": ["system:serviceaccounts"]}
    if node is not None:
        user_info["extra"] = {NODE_CLAIM: [node], "authentication.kubernetes.io/pod-name": ["agent-x"]}
    review: dict[str, Any] = {
        "operation": operation,
        "resource": {"group": group, "version": version, "resource": resource},
        "subResource": sub,
        "name": obj["metadata"]["name"],
        "namespace": obj["metadata"].get("namespace", ""),
        "userInfo": user_info,
    }
    # The API server hands CEL the AdmissionRequest as JSON: an empty omitempty field is absent.
    review = {k: v for k, v in review.items() if v != ""}
    return {"request": review, "object": new, "oldObject": old}


def with_extra(review: dict[str, Any], extra: dict[str, list[str]]) -> dict[str, Any]:
    """``review`` with the user's extra information replaced by ``extra``."""
    review["request"]["userInfo"]["extra"] = extra
    return review


def pool(name: str, **status: Any) -> dict[str, Any]:
    base = {
        "pool": {"10.0.0.10": {"resource": "eni-1"}},
        "subnets": {"subnet-1": {"cidr": "10.0.0.0/24"}},
        "release": {"10.0.0.11": "marked-for-release"},
        "used": ["10.0.0.10"],
        "releaseAnswers": {},
        "observedGeneration": 1,
    }
    return {"metadata": {"name": name, "resourceVersion": "7"}, "spec": {}, "status": {**base, **status}}


def status_update(old: dict[str, Any], **status: Any) -> dict[str, Any]:
    new = copy.deepcopy(old)
    new["status"].update(status)
    for key, value in status.items():
        if value is None:
            del new["status"][key]
    return request("UPDATE", "enipools", new=new, old=old, sub="status")


def address(
    claim_name: str,
    *,
    label: str | None = "n1",
    pool_node: str = "n1",
    ip: str = "10.0.0.10",
    name: str | None = None,
    names: str | None = None,
) -> dict[str, Any]:
    """An IPAddress as the agent of n1 makes it for claim ``claim_name`` (``name``: another name than
    the one it gives it; ``names``: another claim named in claimRef)."""
    meta: dict[str, Any] = {
        "name": name or address_name(claim_name, "n1"),
        "namespace": "capi",
        "finalizers": ["ipam.cluster.x-k8s.io/ProtectAddress"],
    }
    if label is not None:
        meta["labels"] = {NODE_LABEL: label}
    return {
        "metadata": meta,
        "spec": {
            "address": ip,
            "prefix": 24,
            "gateway": "10.0.0.1",
            "claimRef": {"name": names or claim_name},
            "poolRef": {"apiGroup": "eni-ipam.io", "kind": "ENIPool", "name": pool_node},
        },
    }


def claim(name: str, *, pool_node: str = "n1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "capi", "finalizers": []},
        "spec": {"poolRef": {"apiGroup": "eni-ipam.io", "kind": "ENIPool", "name": pool_node}},
    }


def changed(obj: dict[str, Any], **edits: Any) -> dict[str, Any]:
    """A copy of ``obj`` with ``path.to.key=value`` edits (``None`` removes the key)."""
    out = copy.deepcopy(obj)
    for path, value in edits.items():
        *parents, last = path.split("__")
        node = out
        for key in parents:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return out


def owned_by(obj: dict[str, Any], kind: str, name: str, api_version: str) -> dict[str, Any]:
    return changed(
        obj,
        metadata__ownerReferences=[
            {"apiVersion": api_version, "kind": kind, "name": name, "uid": "u-1", "controller": True}
        ],
    )


def owned_by_its_claim(obj: dict[str, Any]) -> dict[str, Any]:
    return owned_by(obj, "IPAddressClaim", obj["spec"]["claimRef"]["name"], "ipam.cluster.x-k8s.io/v1beta1")


def agents_own_ip_address() -> dict[str, Any]:
    """The IPAddress the agent's reconciler builds (``ip_address``) for a claim of its pool."""
    served = changed(claim("c1"), metadata__uid="u-1")
    allocation = Allocation(
        address="10.0.0.10", pool="default", owner="claim:capi/c1", prefix_length=24, gateway="10.0.0.1"
    )
    return request("CREATE", "ipaddresses", new=ip_address(served, allocation, node="n1", pool="default"))


def own_status_patch() -> dict[str, Any]:
    """The agent's real status patch (``agent_status_patch``) applied to its own pool, as a merge patch."""
    old = pool("n1")
    patch = agent_status_patch(old, used=["10.0.0.10", "10.0.0.12"], answers={})
    assert patch is not None
    new = copy.deepcopy(old)
    new["status"].update(patch["status"])
    return request("UPDATE", "enipools", new=new, old=old, sub="status")


STARTUP = {"key": STARTUP_TAINT, "effect": "NoSchedule"}
GPU = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def kube_node(name: str, *taints: dict[str, Any]) -> dict[str, Any]:
    """A Node as the kubelet registers it, with ``taints``."""
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "9",
            "labels": {"kubernetes.io/hostname": name},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"providerID": f"aws:///us-east-1a/i-{name}", **({"taints": list(taints)} if taints else {})},
    }


def node_update(old: dict[str, Any], new: dict[str, Any], sub: str = "", node: str = "n1") -> dict[str, Any]:
    return request("UPDATE", "nodes", new=new, old=old, sub=sub, node=node)


ALLOWED: dict[str, dict[str, Any]] = {
    "the startup taint off its Node": node_update(kube_node("n1", GPU, STARTUP), kube_node("n1", GPU)),
    "the startup taint, its only one, off its Node": node_update(kube_node("n1", STARTUP), kube_node("n1")),
    "own pool: the agent's real status patch": own_status_patch(),
    "own pool: used and releaseAnswers": status_update(
        pool("n1"), used=["10.0.0.10", "10.0.0.12"], releaseAnswers={"10.0.0.11": "ready-for-release"}
    ),
    "own pool without a status yet": request(
        "UPDATE",
        "enipools",
        new=changed(pool("n1"), status={"used": []}),
        old=changed(pool("n1"), status=None),
        sub="status",
    ),
    "create its IPAddress": request("CREATE", "ipaddresses", new=address("c1")),
    "create the IPAddress its reconciler builds": agents_own_ip_address(),
    "create its IPAddress owned by its claim": request(
        "CREATE", "ipaddresses", new=owned_by_its_claim(address("c1"))
    ),
    "lift the protect finalizer of its owned IPAddress": request(
        "UPDATE",
        "ipaddresses",
        new=changed(owned_by_its_claim(address("c1")), metadata__finalizers=[]),
        old=owned_by_its_claim(address("c1")),
    ),
    "lift the protect finalizer of its IPAddress": request(
        "UPDATE", "ipaddresses", new=changed(address("c1"), metadata__finalizers=[]), old=address("c1")
    ),
    "label an IPAddress made before the label, from its pool": request(
        "UPDATE", "ipaddresses", new=address("c1"), old=address("c1", label=None)
    ),
    "delete its IPAddress": request("DELETE", "ipaddresses", old=address("c1")),
    # What agents made before the names carried the node: theirs to release and delete.
    "lift the protect finalizer of its IPAddress under the claim's own name": request(
        "UPDATE",
        "ipaddresses",
        new=changed(address("c1", name="c1"), metadata__finalizers=[]),
        old=address("c1", name="c1"),
    ),
    "delete its IPAddress under the claim's own name": request(
        "DELETE", "ipaddresses", old=address("c1", name="c1")
    ),
    "its finalizer on a claim of its pool": request(
        "UPDATE",
        "ipaddressclaims",
        new=changed(claim("c1"), metadata__finalizers=[RELEASE_FINALIZER]),
        old=claim("c1"),
    ),
    "its finalizer lifted from a claim of its pool, another user's kept": request(
        "UPDATE",
        "ipaddressclaims",
        new=changed(claim("c1"), metadata__finalizers=["users/keep"]),
        old=changed(claim("c1"), metadata__finalizers=["users/keep", RELEASE_FINALIZER]),
    ),
    "status of a claim of its pool": request(
        "UPDATE",
        "ipaddressclaims",
        new=changed(claim("c1"), status={"addressRef": {"name": "c1.n1.2"}}),
        old=claim("c1"),
        sub="status",
    ),
}

FORBIDDEN: dict[str, dict[str, Any]] = {
    "the startup taint off another Node": node_update(kube_node("n2", STARTUP), kube_node("n2")),
    "another taint off its Node": node_update(kube_node("n1", GPU, STARTUP), kube_node("n1", STARTUP)),
    "a taint on its Node": node_update(kube_node("n1"), kube_node("n1", GPU)),
    "the startup taint back on its Node": node_update(kube_node("n1"), kube_node("n1", STARTUP)),
    "a label on its Node": node_update(
        kube_node("n1", STARTUP), changed(kube_node("n1"), metadata__labels={"role": "db"})
    ),
    "an annotation off its Node": node_update(
        kube_node("n1", STARTUP), changed(kube_node("n1"), metadata__annotations=None)
    ),
    "its Node cordoned": node_update(kube_node("n1"), changed(kube_node("n1"), spec__unschedulable=True)),
    "its Node's provider id": node_update(
        kube_node("n1"), changed(kube_node("n1"), spec__providerID="aws:///us-east-1a/i-other")
    ),
    "its Node's status": node_update(kube_node("n1"), kube_node("n1"), sub="status"),
    "its Node deleted": request("DELETE", "nodes", old=kube_node("n1")),
    "a Node created under its name": request("CREATE", "nodes", new=kube_node("n1")),
    "another node's pool status": status_update(pool("n2"), used=["10.0.0.10", "10.0.0.99"]),
    "own pool: status.pool changed": status_update(pool("n1"), pool={"10.9.9.9": {"resource": "eni-9"}}),
    "own pool: status.pool removed": status_update(pool("n1"), pool=None),
    "own pool: status.release added to": status_update(pool("n1"), release={"10.0.0.10": "released"}),
    "own pool: status.subnets changed": status_update(pool("n1"), subnets={}),
    "own pool: status.conditions added": status_update(pool("n1"), conditions=[{"type": "Ready"}]),
    "own pool: its spec": request(
        "UPDATE", "enipools", new=changed(pool("n1"), spec={"x": 1}), old=pool("n1")
    ),
    "own pool: deleted": request("DELETE", "enipools", old=pool("n1")),
    "a token bound to no node": request(
        "UPDATE", "enipools", new=pool("n1", used=[]), old=pool("n1"), sub="status", node=None
    ),
    "a pod's token without the node claim": with_extra(
        request("UPDATE", "enipools", new=pool("n1", used=[]), old=pool("n1"), sub="status"),
        {"authentication.kubernetes.io/pod-name": ["agent-x"]},
    ),
    "a token naming two nodes": with_extra(
        request("UPDATE", "enipools", new=pool("n1", used=[]), old=pool("n1"), sub="status"),
        {NODE_CLAIM: ["n1", "n2"]},
    ),
    "create an IPAddress labelled for another node": request(
        "CREATE", "ipaddresses", new=address("c1", label="n2")
    ),
    "create an IPAddress without the label": request("CREATE", "ipaddresses", new=address("c1", label=None)),
    "create an IPAddress in another node's pool": request(
        "CREATE", "ipaddresses", new=address("c1", pool_node="n2")
    ),
    # The reproduced attack (claim squatting): n1 makes an IPAddress for n2's claim c2 before n2's agent
    # does, under the name n2's agent gives it, or under the claim's own name (as agents once named them).
    "create the IPAddress of another node's claim, from that node's pool": request(
        "CREATE", "ipaddresses", new=address("c2", pool_node="n2")
    ),
    "create the IPAddress of another node's claim, as that node": request(
        "CREATE", "ipaddresses", new=address("c2", label="n2", pool_node="n2", name="c2.n2.2")
    ),
    "create the IPAddress of another node's claim under that node's name for it": request(
        "CREATE", "ipaddresses", new=address("c2", name="c2.n2.2")
    ),
    "create an IPAddress under the claim's own name": request(
        "CREATE", "ipaddresses", new=address("c2", name="c2")
    ),
    # Node b's name for claim c.a would be c.a.b.1; the agent of a.b names claim c's c.a.b.3.
    "create the name another node gives its claim, from a node whose name ends the same": request(
        "CREATE",
        "ipaddresses",
        new=changed(address("c.a", label="b", pool_node="b", name="c.a.b.3")),
        node="b",
    ),
    "create an IPAddress naming another claim than its name": request(
        "CREATE", "ipaddresses", new=address("c1", names="c2")
    ),
    "create an IPAddress naming no claim": request(
        "CREATE", "ipaddresses", new=changed(address("c1"), spec__claimRef=None)
    ),
    "create an IPAddress owned by another claim": request(
        "CREATE",
        "ipaddresses",
        new=owned_by(address("c1"), "IPAddressClaim", "c2", "ipam.cluster.x-k8s.io/v1beta1"),
    ),
    "create an IPAddress owned by another kind": request(
        "CREATE", "ipaddresses", new=owned_by(address("c1"), "Cluster", "c1", "cluster.x-k8s.io/v1beta1")
    ),
    "make its IPAddress a dependent of something else": request(
        "UPDATE",
        "ipaddresses",
        new=owned_by(address("c1"), "Cluster", "prod", "cluster.x-k8s.io/v1beta1"),
        old=address("c1"),
    ),
    "delete another node's IPAddress": request("DELETE", "ipaddresses", old=address("c1", label="n2")),
    "delete an unlabelled IPAddress": request("DELETE", "ipaddresses", old=address("c1", label=None)),
    "lift another node's protect finalizer": request(
        "UPDATE",
        "ipaddresses",
        new=changed(address("c1", label="n2"), metadata__finalizers=[]),
        old=address("c1", label="n2"),
    ),
    "relabel another node's IPAddress as its own": request(
        "UPDATE",
        "ipaddresses",
        new=address("c1", pool_node="n2"),
        old=address("c1", label="n2", pool_node="n2"),
    ),
    "adopt an unlabelled IPAddress of another pool": request(
        "UPDATE",
        "ipaddresses",
        new=address("c1", pool_node="n2"),
        old=address("c1", label=None, pool_node="n2"),
    ),
    "change its IPAddress's address": request(
        "UPDATE", "ipaddresses", new=address("c1", ip="10.0.0.99"), old=address("c1")
    ),
    "finalizer on another node's claim": request(
        "UPDATE",
        "ipaddressclaims",
        new=changed(claim("c1", pool_node="n2"), metadata__finalizers=[]),
        old=claim("c1", pool_node="n2"),
    ),
    "another finalizer on a claim of its pool": request(
        "UPDATE", "ipaddressclaims", new=changed(claim("c1"), metadata__finalizers=["x"]), old=claim("c1")
    ),
    "a user's finalizer lifted from a claim of its pool": request(
        "UPDATE",
        "ipaddressclaims",
        new=claim("c1"),
        old=changed(claim("c1"), metadata__finalizers=["users/keep"]),
    ),
    "an owner added to a claim of its pool": request(
        "UPDATE",
        "ipaddressclaims",
        new=owned_by(claim("c1"), "ConfigMap", "gone", "v1"),
        old=claim("c1"),
    ),
    "a claim's owner removed": request(
        "UPDATE",
        "ipaddressclaims",
        new=claim("c1"),
        old=owned_by(claim("c1"), "Machine", "m1", "cluster.x-k8s.io/v1beta1"),
    ),
    "move a claim to its pool": request(
        "UPDATE", "ipaddressclaims", new=claim("c1"), old=claim("c1", pool_node="n2")
    ),
    "delete a claim of its pool": request("DELETE", "ipaddressclaims", old=claim("c1")),
}


# -- evaluation -------------------------------------------------------------------------------------------


def _true(expression: str, activation: Mapping[str, Any]) -> bool:
    """An expression's value as the API server takes it: an evaluation error counts as false (the
    policy's failurePolicy is Fail)."""
    result = ENV.program(ENV.compile(expression)).evaluate(activation)
    return not isinstance(result, celpy.evaluation.CELEvalError) and bool(result)


def _matches_rules(policy: Mapping[str, Any], req: Mapping[str, Any]) -> bool:
    resource = req["resource"]["resource"] + (f"/{req['subResource']}" if req.get("subResource") else "")
    return any(
        req["resource"]["group"] in rule["apiGroups"]
        and resource in rule["resources"]
        and req["operation"] in rule["operations"]
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
    )


def admitted(policy: Mapping[str, Any], review: Mapping[str, Any]) -> tuple[bool, str]:
    """(allowed, why) as the API server decides: a request the policy does not match is allowed;
    otherwise every validation must hold (``why``: the first failed validation's message, its
    messageExpression evaluated: one that fails to evaluate fails the test)."""
    spec = policy["spec"]
    if not _matches_rules(policy, review["request"]):
        return True, "not matched by the rules"
    activation: dict[str, Any] = {k: celpy.adapter.json_to_cel(v) for k, v in review.items()}
    if not all(_true(c["expression"], activation) for c in spec.get("matchConditions", [])):
        return True, "not matched by the conditions"
    variables: dict[Any, Any] = {}
    for variable in spec.get("variables", []):
        program = ENV.program(ENV.compile(variable["expression"]))
        value = program.evaluate({**activation, "variables": celpy.celtypes.MapType(variables)})
        variables[celpy.celtypes.StringType(variable["name"])] = value
    activation["variables"] = celpy.celtypes.MapType(variables)
    for validation in spec["validations"]:
        if not _true(validation["expression"], activation):
            if "messageExpression" in validation:
                message = ENV.program(ENV.compile(validation["messageExpression"])).evaluate(activation)
                assert isinstance(message, str), f"{validation['messageExpression']}: {message}"
                return False, str(message)
            return False, validation["message"]
    return True, ""


@pytest.mark.parametrize("case", sorted(ALLOWED))
def test_an_agent_may_do_what_it_does_on_its_own_node(policy: dict[str, Any], case: str) -> None:
    allowed, why = admitted(policy, ALLOWED[case])
    assert allowed, why
    assert "not matched" not in why, "the policy must judge this request, not skip it"


@pytest.mark.parametrize("case", sorted(FORBIDDEN))
def test_an_agent_may_not_reach_another_node_or_the_controllers_fields(
    policy: dict[str, Any], case: str
) -> None:
    allowed, why = admitted(policy, FORBIDDEN[case])
    assert not allowed
    assert why.startswith("the node agent"), why


def test_a_forged_ipaddress_is_refused_with_its_names(policy: dict[str, Any]) -> None:
    _, why = admitted(policy, FORBIDDEN["create an IPAddress naming another claim than its name"])
    assert why == (
        "the node agent of n1 may create an IPAddress only under the name of the claim it names in "
        "spec.claimRef, then its node and the length of the node name (<claim>.n1.2, in the namespace "
        "of that claim): capi/c1.n1.2 names claim c2"
    )
    _, why = admitted(policy, FORBIDDEN["create an IPAddress naming no claim"])
    assert why.endswith("capi/c1.n1.2 names no claim")


def test_whose_claim_an_ipaddress_names_is_not_the_policys_to_see(policy: dict[str, Any]) -> None:
    """What is left of the reproduced attack: n1's IPAddress for n2's claim c2, under n1's name for it,
    labelled n1 and from ENIPool n1, is admitted (a policy reads no other object, so not claim c2's
    poolRef). It takes no name n2's agent needs, and n2's agent does not take it for its claim's
    (tests/agent/test_claims.py)."""
    assert admitted(policy, request("CREATE", "ipaddresses", new=address("c2"))) == (True, "")


def test_other_users_are_not_judged(policy: dict[str, Any]) -> None:
    controller = f"system:serviceaccount:{NAMESPACE}:{RELEASE}"
    review = status_update(pool("n2"), pool={})
    review["request"]["userInfo"]["username"] = controller
    assert admitted(policy, review) == (True, "not matched by the conditions")


def test_every_validation_is_needed(policy: dict[str, Any]) -> None:
    """Drop each validation in turn: some forbidden request must then get through."""
    for n, validation in enumerate(policy["spec"]["validations"]):
        weakened = copy.deepcopy(policy)
        del weakened["spec"]["validations"][n]
        if validation["expression"] == "variables.node != ''":
            # Every other rule compares with the node name, so a token bound to no node is refused
            # anyway; this one is there to say why.
            review = FORBIDDEN["a token bound to no node"]
            assert "not bound to a node" in admitted(policy, review)[1]
            assert "not bound to a node" not in admitted(weakened, review)[1]
            continue
        through = [case for case, review in FORBIDDEN.items() if admitted(weakened, review)[0]]
        assert through, f"validation {n} ({validation['expression'][:60]}...) stops nothing on its own"


def test_the_controllers_status_fields_are_the_crds_but_the_agents() -> None:
    crd = yaml.safe_load((CHART / "crds" / "enipools.eni-ipam.io.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    properties = set(version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"])
    expression = next(
        v["expression"] for v in rendered()["spec"]["validations"] if "has(object.status." in v["expression"]
    )
    guarded = set(re.findall(r"has\(object\.status\.(\w+)\)", expression))
    assert guarded == properties - AGENT_STATUS_FIELDS
    assert properties >= AGENT_STATUS_FIELDS


def test_the_binding_denies_and_names_the_policy() -> None:
    docs = render({"agent": {"enabled": True}})
    binding = one(docs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {
        "policyName": one(docs, "ValidatingAdmissionPolicy")["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    assert one(docs, "ValidatingAdmissionPolicy")["spec"]["failurePolicy"] == "Fail"


@pytest.mark.system
def test_the_policy_can_be_turned_off_and_is_absent_without_agents() -> None:
    kinds = {d["kind"] for d in render({"agent": {"enabled": True, "confineToNode": False}})}
    assert "ValidatingAdmissionPolicy" not in kinds and "ValidatingAdmissionPolicyBinding" not in kinds
    assert "ValidatingAdmissionPolicy" not in {d["kind"] for d in render()}


def test_the_policy_judges_the_daemonsets_service_account() -> None:
    docs = render({"agent": {"enabled": True}})
    account = one(docs, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"]
    assert f"system:serviceaccount:{NAMESPACE}:{account}" == AGENT_SA
    deployment = one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    assert f"system:serviceaccount:{NAMESPACE}:{deployment}" != AGENT_SA


# -- the Kubernetes version ------------------------------------------------------------------------------


def render_for(kube_version: str, **agent: Any) -> list[dict[str, Any]]:
    values = with_required({"agent": {"enabled": True, **agent}})
    args = ("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", kube_version)
    text = helm(*args, values=values)
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.system
def test_the_policy_needs_kubernetes_1_30() -> None:
    """ValidatingAdmissionPolicy v1 and the node-name claim of bound tokens (on by default) are 1.30's;
    the chart itself still installs on older clusters, its controller and (unconfined) agents."""
    assert POLICY_KUBE_FLOOR == "1.30.0"
    assert tuple(map(int, KUBE_FLOOR.split("."))) < (1, 30, 0)
    for version in ("1.30.0", "v1.30.2-eks-1a2b3c4", "1.34.1"):
        assert one(render_for(version), "ValidatingAdmissionPolicy")["spec"]["failurePolicy"] == "Fail"


@pytest.mark.system
@pytest.mark.parametrize("version", ["1.29.9", "v1.29.15-eks-0123456", KUBE_FLOOR])
def test_an_older_cluster_is_refused_rather_than_left_unconfined(version: str) -> None:
    with pytest.raises(HelmError) as refused:
        render_for(version)
    message = refused.value.stderr
    assert "agent.confineToNode=true needs Kubernetes 1.30 or later" in message
    assert "set agent.confineToNode=false" in message and version.lstrip("v")[:4] in message


@pytest.mark.system
def test_an_older_cluster_gets_unconfined_agents_when_asked() -> None:
    kinds = {d["kind"] for d in render_for(KUBE_FLOOR, confineToNode=False)}
    assert "DaemonSet" in kinds and not kinds & POLICY_KINDS
