"""The Helm chart, rendered: object shape, labels and selectors, the pod's security, RBAC against the
permissions the code uses, and the generated plain manifests in deploy/kubernetes/."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest
import yaml

from eni_ipam.config.schema import parse_duration
from eni_ipam.errors import ConfigError
from eni_ipam.kube.permissions import BY_NAME, CLUSTER_PERMISSIONS, NAMESPACED_PERMISSIONS
from scripts import gen_chart_defaults
from tests.deploy.conftest import (
    AGENT,
    ALL_FEATURES,
    CHART,
    NAMESPACE,
    RELEASE,
    REPO_ROOT,
    HelmError,
    container,
    controller_selectors,
    generated_manifests,
    helm_run,
    one,
    pod_spec,
    render,
    render_manifests_script,
    values,
    with_required,
)

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
CHART_META = yaml.safe_load((CHART / "Chart.yaml").read_text())


def pod_labels(docs: list[dict[str, Any]]) -> dict[str, str]:
    return one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]


def config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return yaml.safe_load(one(docs, "ConfigMap")["data"]["config.yaml"])


# -- every object ---------------------------------------------------------------------------------


@pytest.mark.system
@pytest.mark.parametrize("overrides", [None, {**ALL_FEATURES, **AGENT}], ids=["default", "everything-on"])
def test_helm_lint_strict_finds_nothing(overrides):
    done = helm_run("lint", "--strict", str(CHART), values=with_required(overrides))  # findings: HelmError
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout
    assert "level=WARN" not in done.stderr, done.stderr  # helm 4 reports a missing required value here


@pytest.mark.system
def test_the_default_render_has_the_expected_objects(default_docs, full_docs):
    kinds = ["PodDisruptionBudget", "ServiceAccount", "ConfigMap", "ClusterRole", "ClusterRoleBinding"]
    kinds += ["Role", "RoleBinding", "Service", "Deployment"]
    assert [d["kind"] for d in default_docs] == kinds  # Helm's install order
    assert [d["kind"] for d in full_docs] == [*kinds, "PrometheusRule", "ServiceMonitor"]


@pytest.mark.system
def test_every_document_is_a_named_object_in_the_right_scope(any_docs):
    for doc in any_docs:
        assert doc.get("apiVersion") and doc.get("kind"), doc
        name = doc["metadata"]["name"]
        assert len(name) <= 63 and DNS1123_SUBDOMAIN.match(name), (doc["kind"], name)
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], doc["kind"]
        else:
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["kind"]
    assert DNS1035_LABEL.match(one(any_docs, "Service")["metadata"]["name"])


@pytest.mark.system
def test_labels_are_consistent(any_docs):
    expected = {
        "app.kubernetes.io/name": CHART_META["name"],
        "app.kubernetes.io/instance": RELEASE,
        "app.kubernetes.io/version": CHART_META["appVersion"],
        "app.kubernetes.io/managed-by": "Helm",
    }
    for doc in [*any_docs, one(any_docs, "Deployment")["spec"]["template"]]:
        labels = doc["metadata"]["labels"]
        assert {k: labels.get(k) for k in expected} == expected, doc.get("kind", "pod template")
        for key, value in labels.items():
            assert isinstance(value, str) and len(value) <= 63 and LABEL_VALUE.match(value), (key, value)


@pytest.mark.system
def test_selectors_match_the_pods(full_docs):
    pods = pod_labels(full_docs)
    selectors = controller_selectors(full_docs)
    for owner, selector in selectors.items():
        assert selector and selector.items() <= pods.items(), owner
    assert set(selectors["Deployment"]) == {"app.kubernetes.io/name", "app.kubernetes.io/instance"}
    monitor = one(full_docs, "ServiceMonitor")["spec"]
    assert (
        monitor["selector"]["matchLabels"].items() <= one(full_docs, "Service")["metadata"]["labels"].items()
    )
    assert monitor["namespaceSelector"]["matchNames"] == [NAMESPACE]


# -- the Deployment ------------------------------------------------------------------------------


@pytest.mark.system
def test_service_and_probes_use_the_named_container_port(full_docs):
    ports = {p["name"]: p for p in container(full_docs)["ports"]}
    assert ports["http"]["containerPort"] == config(full_docs)["server"]["port"] == 9090
    service = one(full_docs, "Service")["spec"]
    assert service["type"] == "ClusterIP"
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["ports"]] == [("http", 9090, "http")]
    # kubelet's probes ask their own listener (decision 0043), which the Service does not expose.
    assert ports["probes"]["containerPort"] == config(full_docs)["server"]["probe_port"] == 9092
    probes = {kind: container(full_docs)[kind]["httpGet"] for kind in ("livenessProbe", "readinessProbe")}
    assert probes == {
        "livenessProbe": {"path": "/healthz", "port": "probes"},
        "readinessProbe": {"path": "/readyz", "port": "probes"},
    }
    assert [e["port"] for e in one(full_docs, "ServiceMonitor")["spec"]["endpoints"]] == ["http"]


@pytest.mark.system
def test_the_server_port_settings_move_the_container_ports_and_the_probes_follow():
    docs = render({"config": {"server": {"port": 8443, "probe_port": 8444}}})
    assert [p["containerPort"] for p in container(docs)["ports"]] == [8443, 8444]
    assert (config(docs)["server"]["port"], config(docs)["server"]["probe_port"]) == (8443, 8444)
    assert container(docs)["readinessProbe"]["httpGet"]["port"] == "probes"


def test_pod_security(default_docs):
    pod, ctr = pod_spec(default_docs), container(default_docs)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (65532, 65532)
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = ctr["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532 and sc["runAsGroup"] == 65532
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not sc.get("privileged")
    assert pod["hostNetwork"] is False
    assert not pod.get("hostPID") and not pod.get("hostIPC")
    mounts = {m["mountPath"]: m["name"] for m in ctr["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]


def test_deployment_runs_leader_and_standby(default_docs):
    deployment = one(default_docs, "Deployment")["spec"]
    assert deployment["replicas"] == 2
    assert deployment["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    pod = pod_spec(default_docs)
    assert pod["priorityClassName"] == "system-cluster-critical"
    terms = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [t["podAffinityTerm"]["topologyKey"] for t in terms] == [
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    ]
    pdb = one(default_docs, "PodDisruptionBudget")["spec"]
    assert pdb["minAvailable"] == 1


def test_the_container_runs_the_mounted_configuration(default_docs):
    ctr, pod = container(default_docs), pod_spec(default_docs)
    assert ctr["command"] + ctr["args"] == ["eni-ipam", "run", "--config", "/etc/eni-ipam/config.yaml"]
    assert ctr["image"] == f"eni-ipam:{CHART_META['appVersion']}"
    mount = next(m for m in ctr["volumeMounts"] if m["mountPath"] == "/etc/eni-ipam")
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert mount["readOnly"] is True
    assert volume["configMap"]["name"] == one(default_docs, "ConfigMap")["metadata"]["name"]
    assert "config.yaml" in one(default_docs, "ConfigMap")["data"]
    env = {e["name"]: e for e in ctr["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert ctr["resources"] == sizing_guide_row("10,000")
    assert pod["serviceAccountName"] == one(default_docs, "ServiceAccount")["metadata"]["name"]


def sizing_guide_row(nodes: str) -> dict[str, dict[str, str]]:
    """The resources docs/deploy.md ("Sizing") gives for a cluster of ``nodes``."""
    import re

    text = (REPO_ROOT / "docs" / "deploy.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith(f"| {nodes} |"))
    cpu, memory, limit = re.search(
        r'requests `cpu: "?(\w+)"?`, `memory: (\w+)`; limit `memory: (\w+)`', row
    ).groups()  # type: ignore[union-attr]
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": limit}}


def test_the_sizing_guide_grows_with_the_cluster():
    rows = [sizing_guide_row(n) for n in ("1,000", "10,000", "100,000")]
    limits = [int(r["limits"]["memory"].removesuffix("Mi").removesuffix("Gi")) for r in rows]
    assert rows[0]["limits"]["memory"].endswith("Mi") and limits[0] < limits[1] < limits[2]


def test_grace_period_outlasts_the_shutdown_timeout(default_docs):
    grace = pod_spec(default_docs)["terminationGracePeriodSeconds"]
    assert grace == 45
    assert grace > parse_duration(config(default_docs)["shutdown_timeout"]) + 10


@pytest.mark.system
def test_config_checksum_follows_the_configmap(default_docs):
    checksum = one(default_docs, "Deployment")["spec"]["template"]["metadata"]["annotations"][
        "checksum/config"
    ]
    text = one(default_docs, "ConfigMap")["data"]["config.yaml"]
    assert checksum == hashlib.sha256(text.removesuffix("\n").encode()).hexdigest()
    changed = render({"config": {"settings": {"gc_interval": "10m"}}})
    assert (
        one(changed, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        != checksum
    )


@pytest.mark.system
def test_values_reach_the_pod():
    docs = render(
        {
            "env": [{"name": "ENI_IPAM_LOG_LEVEL", "value": "debug"}],
            "podAnnotations": {"example.com/a": "1"},
            "podLabels": {"team": "net"},
            "imagePullSecrets": [{"name": "regcred"}],
            "image": {"repository": "registry.example/eni-ipam", "digest": "sha256:" + "a" * 64},
            "hostNetwork": True,
            "priorityClassName": "",
            "nodeSelector": {"pool": "system"},
            "tolerations": [],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
        }
    )
    pod, ctr = pod_spec(docs), container(docs)
    meta = one(docs, "Deployment")["spec"]["template"]["metadata"]
    assert [e["name"] for e in ctr["env"]] == ["POD_NAME", "POD_NAMESPACE", "ENI_IPAM_LOG_LEVEL"]
    assert meta["annotations"]["example.com/a"] == "1" and "checksum/config" in meta["annotations"]
    assert meta["labels"]["team"] == "net"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert ctr["image"] == "registry.example/eni-ipam@sha256:" + "a" * 64
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "priorityClassName" not in pod and "tolerations" not in pod
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "pool": "system"}  # maps merge, as in Helm
    assert pod["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}


@pytest.mark.system
def test_names_and_service_account_overrides():
    docs = render({"fullnameOverride": "ipam", "serviceAccount": {"create": False, "name": "existing"}})
    assert {d["metadata"]["name"] for d in docs} == {"ipam"}
    assert pod_spec(docs)["serviceAccountName"] == "existing"
    assert all(d["kind"] != "ServiceAccount" for d in docs)
    binding = one(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "existing", "namespace": NAMESPACE}]
    other = render(release_name="prod")
    assert one(other, "Deployment")["metadata"]["name"] == "prod-eni-ipam"
    assert one(other, "Deployment")["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == "prod"
    with pytest.raises(HelmError, match=r"serviceAccount\.name"):
        render({"serviceAccount": {"create": False}})


@pytest.mark.system
def test_irsa_annotation_on_the_service_account():
    assert "annotations" not in one(render(), "ServiceAccount")["metadata"]
    arn = "arn:aws:iam::111122223333:role/eni-ipam"
    docs = render({"serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": arn}}})
    assert one(docs, "ServiceAccount")["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": arn}
    assert f"#   eks.amazonaws.com/role-arn: {arn}" in (CHART / "values.yaml").read_text()


@pytest.mark.system
def test_optional_objects_can_be_turned_off():
    docs = render({"podDisruptionBudget": {"enabled": False}, "rbac": {"create": False}})
    kinds = {d["kind"] for d in docs}
    assert kinds == {"ServiceAccount", "ConfigMap", "Service", "Deployment"}


@pytest.mark.parametrize(
    "overrides",
    [None, {"config": {"aws": {"region": "  "}}}, {"config": {"aws": None}}],
    ids=["values.yaml-alone", "blank", "no-aws-section"],
)
@pytest.mark.system
def test_an_aws_configuration_needs_a_region(overrides):
    assert values()["config"]["aws"]["region"] == ""  # no default region: the chart must not guess one
    with pytest.raises(HelmError, match=r"config\.aws\.region is required with provider aws"):
        render(overrides, required=False)


@pytest.mark.system
def test_lint_warns_when_the_region_is_missing():
    # helm 4 lints a missing `required` value as a warning on stderr and exits 0
    done = helm_run("lint", "--strict", str(CHART))
    assert "config.aws.region is required" in done.stderr


@pytest.mark.system
def test_extra_labels_of_monitoring_objects():
    docs = render(
        {
            "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}, "interval": "15s"},
            "prometheusRule": {"enabled": True, "labels": {"release": "prom"}},
        }
    )
    monitor = one(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"][0]["interval"] == "15s"
    assert one(docs, "PrometheusRule")["metadata"]["labels"]["release"] == "prom"


# -- RBAC ----------------------------------------------------------------------------------------


def grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    out: set[tuple[str, str, str]] = set()
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), rule
                    out.add((group, resource, verb))
    return out


def test_cluster_role_grants_exactly_the_cluster_permissions(default_docs):
    assert grants(one(default_docs, "ClusterRole")) == set(CLUSTER_PERMISSIONS)
    for rule in one(default_docs, "ClusterRole")["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                # Limited to its names where the code says so; create cannot be limited by name.
                assert rule.get("resourceNames") == (
                    list(BY_NAME[group, resource]) if (group, resource) in BY_NAME else None
                )
        if "resourceNames" in rule:
            assert "create" not in rule["verbs"]


def test_the_defaults_the_templates_fill_in_are_values_yaml():
    """templates/_defaults.tpl: what a `helm upgrade --reuse-values` from an older chart lacks."""
    assert gen_chart_defaults.main(["--check"]) == 0
    text = gen_chart_defaults.render((CHART / "values.yaml").read_text())
    defaults = yaml.safe_load(text.split("\n", 3)[3].rsplit("{{", 1)[0])
    assert "config" not in defaults and "valuesVersion" not in defaults
    assert defaults["networkPolicy"]["enabled"] is False and defaults["agent"]["enabled"] is False
    changed = (CHART / "values.yaml").read_text().replace("replicaCount: 2", "replicaCount: 3")
    assert "replicaCount: 3" in gen_chart_defaults.render(changed)


@pytest.mark.system
def test_the_crd_update_is_granted_only_while_the_controller_may_update_it():
    docs = render({"config": {"kubernetes": {"update_crd": False}}})
    (rule,) = [r for r in one(docs, "ClusterRole")["rules"] if "customresourcedefinitions" in r["resources"]]
    assert rule["verbs"] == ["get", "list", "watch"]
    assert config(docs)["kubernetes"]["update_crd"] is False


def test_role_grants_exactly_the_namespaced_permissions(default_docs):
    role = one(default_docs, "Role")
    assert grants(role) == set(NAMESPACED_PERMISSIONS)
    lease = config(default_docs)["kubernetes"]["lease_name"]
    for rule in role["rules"]:
        if "resourceNames" in rule:  # create cannot be limited by name: Kubernetes ignores it
            assert rule["resourceNames"] == [lease] and "create" not in rule["verbs"]


def test_bindings_give_the_roles_to_the_service_account(default_docs):
    account = one(default_docs, "ServiceAccount")["metadata"]
    subject = {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    for binding_kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        binding = one(default_docs, binding_kind)
        assert binding["subjects"] == [subject]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind,
            "name": one(default_docs, role_kind)["metadata"]["name"],
        }
    assert (
        one(default_docs, "RoleBinding")["metadata"]["namespace"]
        == one(default_docs, "Role")["metadata"]["namespace"]
    )


@pytest.mark.system
def test_the_role_follows_the_lease():
    docs = render({"config": {"kubernetes": {"lease_namespace": "leases", "lease_name": "ipam-leader"}}})
    for kind in ("Role", "RoleBinding"):
        assert one(docs, kind)["metadata"]["namespace"] == "leases"
    assert [r.get("resourceNames") for r in one(docs, "Role")["rules"]] == [None, ["ipam-leader"]]


# -- generated plain manifests -------------------------------------------------------------------


@pytest.mark.system
def test_generated_manifests_are_up_to_date():
    output = REPO_ROOT / "deploy" / "kubernetes"
    files = generated_manifests()
    for name, text in files.items():
        path = output / name
        assert path.exists() and path.read_text() == text, (
            f"deploy/kubernetes/{name} is stale: run python scripts/render_manifests.py"
        )
    assert sorted(p.name for p in output.iterdir()) == sorted(files)


@pytest.mark.system
def test_generated_manifests_are_the_default_render_with_the_region_placeholder():
    placeholder = render_manifests_script().REGION_PLACEHOLDER
    text = (REPO_ROOT / "deploy" / "kubernetes" / "eni-ipam.yaml").read_text()
    assert f"config.aws.region={placeholder}" in text.split("\n---\n", 1)[0]  # the header says so
    assert [d for d in yaml.safe_load_all(text) if d] == render({"config": {"aws": {"region": placeholder}}})
    crd = yaml.safe_load((REPO_ROOT / "deploy" / "kubernetes" / "crd.yaml").read_text())
    assert crd == yaml.safe_load((CHART / "crds" / "enipools.eni-ipam.io.yaml").read_text())


def test_the_generated_manifests_refuse_to_start_until_the_region_is_set():
    from eni_ipam.app.runconfig import load_config_mapping

    text = (REPO_ROOT / "deploy" / "kubernetes" / "eni-ipam.yaml").read_text()
    docs = [d for d in yaml.safe_load_all(text) if d]
    with pytest.raises(ConfigError, match=r"aws\.region"):
        load_config_mapping(config(docs))
    edited = config(docs)
    edited["aws"]["region"] = "eu-west-1"
    assert load_config_mapping(edited).provider_settings.region == "eu-west-1"


def test_chart_metadata():
    assert CHART_META["apiVersion"] == "v2"
    assert CHART_META["name"] == "eni-ipam"
    assert isinstance(CHART_META["appVersion"], str) and isinstance(CHART_META["version"], str)
    assert values()["image"]["tag"] == ""  # the image follows appVersion
