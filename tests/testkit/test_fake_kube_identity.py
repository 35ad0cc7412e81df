"""Who a request is, on the fake API server, as the real kubectl and helm see it: impersonation
(``--as``, ``--as-group``), ``kubectl auth can-i [--list]`` and ``kubectl auth whoami`` answered from
the RBAC the chart installs, and credentials that are new at every start and readable by their owner
only (``eni-ipam dev-cluster``).
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from eni_ipam_testkit.fake_kube import FakeKube
from tests.conftest import cluster_api_crd
from tests.testkit.tools import CHART, Tools

pytestmark = pytest.mark.timeout(90)

NAMESPACE = "kube-system"
CONTROLLER = "system:serviceaccount:kube-system:eni-ipam"
AGENT = "system:serviceaccount:kube-system:eni-ipam-agent"
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")


@pytest.fixture
def kube_crds() -> list[dict[str, Any]]:
    """Cluster API's address CRDs (the agent's rules name them); the chart brings its own CRD."""
    return [cluster_api_crd("IPAddressClaim", "ipaddressclaims"), cluster_api_crd("IPAddress", "ipaddresses")]


@pytest.fixture
async def manifest(tools: Tools) -> AsyncIterator[list[dict[str, Any]]]:
    """The chart installed by helm with the node agent, and the objects helm says it rendered."""
    done = await tools.helm(
        "install", "eni-ipam", str(CHART), "--namespace", NAMESPACE,
        "--set", "config.aws.region=us-east-1", "--set", "agent.enabled=true",
    )  # fmt: skip
    assert done.code == 0, done.err
    rendered = await tools.helm("get", "manifest", "eni-ipam", "--namespace", NAMESPACE)
    assert rendered.code == 0, rendered.err
    yield [doc for doc in yaml.safe_load_all(rendered.out) if doc]


# -- the chart's RBAC, read independently of the server's authorizer ---------------------------------


def _covers(values: Iterable[str] | None, wanted: str) -> bool:
    listed = list(values or ())
    return "*" in listed or wanted in listed


def granted(
    manifest: list[dict[str, Any]], user: str, verb: str, group: str, resource: str, name: str, namespace: str
) -> bool:
    """Whether the chart's bindings give ``user`` this verb, read from the rendered objects."""
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in manifest}
    for binding in manifest:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        scope = binding["metadata"].get("namespace", "")
        if scope and scope != namespace:
            continue
        subjects = [
            f"system:serviceaccount:{s.get('namespace', scope)}:{s['name']}"
            for s in binding["subjects"]
            if s["kind"] == "ServiceAccount"
        ]
        if user not in subjects:
            continue
        ref = binding["roleRef"]
        role = roles[(ref["kind"], scope if ref["kind"] == "Role" else "", ref["name"])]
        for rule in role["rules"]:
            if (
                _covers(rule.get("verbs"), verb)
                and _covers(rule.get("apiGroups"), group)
                and _covers(rule.get("resources"), resource)
                and (not rule.get("resourceNames") or name in rule["resourceNames"])
            ):
                return True
    return False


def questions(manifest: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """Every verb on every resource (and named object) a rule of the chart mentions:
    ``(verb, group, resource[/subresource], name)``."""
    asked: set[tuple[str, str, str, str]] = set()
    for role in manifest:
        if role["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in role["rules"]:
            for group in rule.get("apiGroups") or ():
                for resource in rule.get("resources") or ():
                    for name in ("", *(rule.get("resourceNames") or ())):
                        asked.update((verb, group, resource, name) for verb in VERBS)
    return sorted(asked)


async def can_i(tools: Tools, user: str, verb: str, group: str, resource: str, name: str) -> bool:
    plural, _, subresource = resource.partition("/")
    target = f"{plural}.{group}" if group else plural
    if name:
        target += f"/{name}"
    args = ["auth", "can-i", verb, target, "-n", NAMESPACE, f"--as={user}"]
    if subresource:
        args.append(f"--subresource={subresource}")
    done = await tools.kubectl(*args)
    assert done.out.strip() in ("yes", "no"), done.err
    return done.out.strip() == "yes"


async def test_kubectl_auth_can_i_as_each_chart_identity_answers_what_the_chart_grants(
    tools: Tools, manifest: list[dict[str, Any]]
) -> None:
    asked = questions(manifest)
    assert len(asked) > 40  # the chart's rules name leases, nodes, pods, events, pools and addresses
    limit = asyncio.Semaphore(6)

    async def ask(user: str, question: tuple[str, str, str, str]) -> tuple[str, tuple[str, ...], bool]:
        async with limit:
            return user, question, await can_i(tools, user, *question)

    answers = await asyncio.gather(*(ask(user, q) for user in (CONTROLLER, AGENT) for q in asked))
    wrong = [
        (user, question, answer)
        for user, question, answer in answers
        if answer != granted(manifest, user, *question, namespace=NAMESPACE)
    ]
    assert wrong == []
    # Both answers occur for both identities: the check is not vacuous.
    for user in (CONTROLLER, AGENT):
        assert {answer for who, _, answer in answers if who == user} == {True, False}


async def test_a_write_as_a_chart_identity_that_its_rbac_does_not_allow_is_forbidden(
    tools: Tools, kube: FakeKube, manifest: list[dict[str, Any]]
) -> None:
    kube.add_object("nodes", {"metadata": {"name": "n1"}})
    refused = await tools.kubectl("delete", "node", "n1", f"--as={CONTROLLER}")
    assert refused.code == 1
    assert (
        f'Error from server (Forbidden): nodes "n1" is forbidden: User "{CONTROLLER}" cannot delete '
        'resource "nodes" in API group "" at the cluster scope'
    ) in refused.err
    assert kube.get_object("nodes", "n1") is not None
    denied = [r for r in kube.requests if r.verb == "delete" and r.plural == "nodes"]
    assert [(r.status, r.user, r.impersonator) for r in denied] == [(403, CONTROLLER, "kubernetes-admin")]
    # What the identity may do, it does, and the request is recorded as that identity.
    pool = {
        "apiVersion": "eni-ipam.io/v1alpha1",
        "kind": "ENIPool",
        "metadata": {"name": "n1"},
        "spec": {"instanceID": "i-1"},
    }
    created = await tools.kubectl("create", "-f", "-", f"--as={CONTROLLER}", stdin=json.dumps(pool))
    assert created.code == 0, created.err
    agent = await tools.kubectl("create", "-f", "-", f"--as={AGENT}", stdin=json.dumps(pool))
    assert agent.code == 1 and f'User "{AGENT}" cannot create resource "enipools"' in agent.err


async def test_impersonation_needs_the_impersonate_verb_on_that_very_identity(
    tools: Tools, kube: FakeKube, manifest: list[dict[str, Any]]
) -> None:
    account = (NAMESPACE, "eni-ipam")
    refused = await tools.kubectl("get", "nodes", "--as=bob", account=account)
    assert refused.code == 1
    assert (
        f'users "bob" is forbidden: User "{CONTROLLER}" cannot impersonate resource "users" in API group "" '
        "at the cluster scope"
    ) in refused.err
    may_impersonate_the_agent = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "impersonate-agent"},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["serviceaccounts"],
                "verbs": ["impersonate"],
                "resourceNames": ["eni-ipam-agent"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "impersonate-agent"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "impersonate-agent",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "eni-ipam", "namespace": NAMESPACE}],
    }
    await tools.ok("apply", "-f", "-", stdin=yaml.safe_dump_all([may_impersonate_the_agent, binding]))
    allowed = await tools.kubectl("auth", "whoami", "-o", "json", f"--as={AGENT}", account=account)
    assert allowed.code == 0, allowed.err
    assert json.loads(allowed.out)["status"]["userInfo"] == {
        "username": AGENT,
        "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
    }
    other = f"system:serviceaccount:{NAMESPACE}:other"
    refused = await tools.kubectl("get", "pods", f"--as={other}", account=account)
    assert refused.code == 1
    assert (
        f'serviceaccounts "other" is forbidden: User "{CONTROLLER}" cannot impersonate resource '
        f'"serviceaccounts" in API group "" in the namespace "{NAMESPACE}"'
    ) in refused.err
    group = await tools.kubectl("get", "pods", f"--as={AGENT}", "--as-group=system:masters", account=account)
    assert group.code == 1
    assert 'groups "system:masters" is forbidden' in group.err


async def test_kubectl_auth_whoami_shows_the_impersonated_user_and_groups(tools: Tools) -> None:
    me = await tools.ok("auth", "whoami")
    assert me.split() == ["ATTRIBUTE", "VALUE", "Username", "kubernetes-admin", "Groups",
                          "[system:masters", "system:authenticated]"]  # fmt: skip
    other = await tools.ok("auth", "whoami", "--as=jane", "--as-group=devs", "--as-uid=u-1", "-o", "json")
    assert json.loads(other)["status"]["userInfo"] == {
        "username": "jane",
        "uid": "u-1",
        "groups": ["devs", "system:authenticated"],
    }


async def test_kubectl_auth_can_i_list_shows_the_rules_bound_to_the_identity(
    tools: Tools, manifest: list[dict[str, Any]]
) -> None:
    listed = await tools.ok("auth", "can-i", "--list", "-n", NAMESPACE, f"--as={AGENT}")
    rows = [line.split(None, 3) for line in listed.strip().splitlines()[1:]]
    by_resource = {row[0]: row[3] for row in rows if len(row) == 4}
    assert by_resource["enipools.eni-ipam.io"] == "[list watch]"
    assert by_resource["enipools.eni-ipam.io/status"] == "[get patch]"
    assert by_resource["selfsubjectaccessreviews.authorization.k8s.io"] == "[create]"
    assert by_resource["nodes"] == "[get patch]"  # its Node's startup taint, confined by admission
    assert "leases.coordination.k8s.io" not in by_resource
    controller = await tools.ok("auth", "can-i", "--list", "-n", NAMESPACE, f"--as={CONTROLLER}")
    lease = [
        line.split() for line in controller.splitlines() if line.startswith("leases.coordination.k8s.io")
    ]
    assert sorted(lease) == [
        ["leases.coordination.k8s.io", "[]", "[]", "[create]"],
        ["leases.coordination.k8s.io", "[]", "[eni-ipam]", "[get", "update]"],
    ]
    elsewhere = await tools.ok("auth", "can-i", "--list", "-n", "default", f"--as={CONTROLLER}")
    assert "leases.coordination.k8s.io" not in elsewhere  # its Role binds in kube-system only


async def test_impersonating_groups_without_a_user_is_the_real_servers_500(kube: FakeKube) -> None:
    headers = {"Authorization": f"Bearer {kube.admin_token}", "Impersonate-Group": "devs"}
    async with httpx2.AsyncClient(base_url=kube.url, headers=headers, verify=kube.ssl_context()) as http:
        answer = await http.get("/api/v1/nodes")
    assert answer.status_code == 500
    assert answer.json()["reason"] == "InternalError"
    assert answer.json()["message"] == (
        "Internal error occurred: requested [{Group  devs    }] without impersonating a user"
    )


# -- credentials ------------------------------------------------------------------------------------


async def test_each_server_has_its_own_admin_and_service_account_tokens(tmp_path: Path) -> None:
    tokens: list[Mapping[str, str]] = []
    for _ in range(2):
        async with FakeKube() as kube:
            kube.add_object("serviceaccounts", {"metadata": {"name": "sa", "namespace": "default"}})
            tokens.append({"admin": kube.admin_token, "sa": kube.token_for("default", "sa")})
    assert tokens[0]["admin"] != tokens[1]["admin"] and tokens[0]["sa"] != tokens[1]["sa"]
    assert all(len(t["admin"]) >= 32 for t in tokens)


async def test_the_kubeconfig_is_written_for_its_owner_only_and_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("old")
    path.chmod(0o644)
    async with FakeKube() as kube:
        kube.write_kubeconfig(path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        config = yaml.safe_load(path.read_text())
        assert config["users"][0]["user"]["token"] == kube.admin_token
    assert sorted(os.listdir(tmp_path)) == ["kubeconfig"]  # no temporary file left


def dev_cluster(kubeconfig: Path, tmp_path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen(
        [sys.executable, "-m", "eni_ipam.cli", "dev-cluster", "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def test_dev_cluster_writes_a_new_owner_only_credential_at_every_start(tmp_path: Path) -> None:
    tokens = []
    for attempt in range(2):
        kubeconfig = tmp_path / f"kubeconfig-{attempt}"
        process = dev_cluster(kubeconfig, tmp_path)
        try:
            assert process.stdout is not None
            assert "admin kubeconfig written to" in process.stdout.readline()
            assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
            tokens.append(yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"])
        finally:
            process.terminate()
            process.communicate(timeout=20)
    assert tokens[0] != tokens[1]


def test_dev_cluster_with_an_unwritable_kubeconfig_path_names_it_and_exits_2(tmp_path: Path) -> None:
    target = tmp_path / "missing-directory" / "kubeconfig"
    process = dev_cluster(target, tmp_path)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 2, out + err
    assert f"cannot write the kubeconfig to {target}: No such file or directory" in err
    assert "Traceback" not in err


# -- escalation -------------------------------------------------------------------------------------


def cluster_role(name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": list(rules),
    }


def binding_of(role: str, name: str, account: str = "eni-ipam") -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}],
    }


async def test_only_an_admin_grants_rbac_rights_it_does_not_hold(
    tools: Tools, kube: FakeKube, manifest: list[dict[str, Any]]
) -> None:
    writer = cluster_role(
        "rbac-writer",
        {
            "apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["clusterroles", "clusterrolebindings"],
            "verbs": ["create", "update"],
        },
    )
    await tools.ok(
        "apply", "-f", "-", stdin=yaml.safe_dump_all([writer, binding_of("rbac-writer", "rbac-writer")])
    )
    more = cluster_role("more", {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "delete"]})
    refused = await tools.kubectl("create", "-f", "-", f"--as={CONTROLLER}", stdin=json.dumps(more))
    assert refused.code == 1
    assert (
        f'clusterroles.rbac.authorization.k8s.io "more" is forbidden: user "{CONTROLLER}" (groups=['
        '"system:serviceaccounts" "system:serviceaccounts:kube-system" "system:authenticated"]) is '
        "attempting to grant RBAC permissions not currently held:\n"
        '{APIGroups:[""], Resources:["nodes"], Verbs:["delete"]}'
    ) in refused.err
    assert kube.get_object("clusterroles", "more") is None
    held = cluster_role("held", {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]})
    assert (await tools.kubectl("create", "-f", "-", f"--as={CONTROLLER}", stdin=json.dumps(held))).code == 0
    # Binding a role whose rights the author lacks is escalation too (the agent may create addresses).
    bound = await tools.kubectl(
        "create", "-f", "-", f"--as={CONTROLLER}", stdin=json.dumps(binding_of("eni-ipam-agent", "me-too"))
    )
    assert bound.code == 1
    assert (
        '{APIGroups:["ipam.cluster.x-k8s.io"], Resources:["ipaddresses"], '
        'Verbs:["list" "watch" "create" "patch" "delete"]}'
    ) in bound.err
    assert "enipools" not in bound.err.split("held:", 1)[1]  # it holds list and watch on pools
    # `escalate` (for roles) and `bind` (for bindings) are what let someone grant more than they hold.
    allowed = cluster_role(
        "may-escalate",
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["escalate"]},
        {
            "apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["clusterroles"],
            "verbs": ["bind"],
            "resourceNames": ["eni-ipam-agent"],
        },
    )
    await tools.ok(
        "apply", "-f", "-", stdin=yaml.safe_dump_all([allowed, binding_of("may-escalate", "may-escalate")])
    )
    assert (await tools.kubectl("create", "-f", "-", f"--as={CONTROLLER}", stdin=json.dumps(more))).code == 0
    again = await tools.kubectl(
        "create", "-f", "-", f"--as={CONTROLLER}", stdin=json.dumps(binding_of("eni-ipam-agent", "me-too"))
    )
    assert again.code == 0, again.err
