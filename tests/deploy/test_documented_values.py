"""Every documented set of values (value_sets.py) passes ``helm lint --strict``, renders, and every object
it renders validates offline as an API server would judge it (schemas.py): built-in kinds against the
Kubernetes schemas of the chart's oldest Kubernetes and of the newest one kubernetes-validate knows,
custom resources against their CRDs. A chart broken on purpose fails that validation."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from eni_ipam.agent.config import agent_config_from_mapping
from eni_ipam.app.runconfig import load_config_mapping
from eni_ipam.kube.resources import pool_for_node
from eni_ipam.kube.settings import instance_id_source
from tests.deploy import schemas
from tests.deploy.conftest import (
    AGENT,
    ALL_FEATURES,
    CHART,
    NAMESPACE,
    RELEASE,
    REPO_ROOT,
    HelmError,
    helm,
    helm_run,
    one,
    render,
    with_required,
)
from tests.deploy.schemas import (
    KUBE_FLOOR,
    KUBE_VERSIONS,
    PROMETHEUS_OPERATOR_CRDS,
    builtin_errors,
    crd_files,
    custom_resource_kinds,
    floor_errors,
    kube_floor_of,
    load_crd,
    render_floor,
    validation_errors,
    version_for,
)
from tests.deploy.value_sets import VALUE_SETS, ValueSet

OPERATOR_VERSION = "0.93.0"
"""The Prometheus Operator release the vendored CRDs come from (prometheus-operator/README.md)."""
CASES = [pytest.param(case, id=case.name) for case in VALUE_SETS]
NODES = {
    "aws": {"providerID": "aws:///eu-west-1a/i-0123456789abcdef0"},
    "azure": {
        "providerID": "azure:///subscriptions/0a1b2c3d-0000-4000-8000-00000000abcd/resourceGroups/mc_prod"
        "/providers/Microsoft.Compute/virtualMachines/vm-1"
    },
    "generic": {},
}
"""A Node's spec on each provider (the generic provider names pools after the Node)."""


def rendered(case: ValueSet) -> list[dict[str, Any]]:
    """The case's render on values.yaml alone: a documented set must hold every value the chart requires."""
    return render(case.values, required=False)


@functools.cache
def _lint(key: str, kube_version: str) -> subprocess.CompletedProcess[str]:
    return helm_run("lint", "--strict", "--kube-version", kube_version, str(CHART), values=json.loads(key))


def lint(case: ValueSet) -> subprocess.CompletedProcess[str]:
    """``helm lint --strict`` of the case for the oldest Kubernetes it renders for (once per session):
    the chart's, or the agents' admission policy's when the case has it."""
    return _lint(json.dumps(case.values, sort_keys=True), render_floor(rendered(case)))


@pytest.fixture(scope="module")
def helm_in_parallel() -> None:
    """Every case's render and lint, a few helm processes at a time, into the caches the tests read:
    one helm run is a process of its own, and there is more than one core. A failure is left for its
    test, which meets it again."""
    jobs = [functools.partial(f, case) for case in VALUE_SETS for f in (rendered, lint)]
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        for future in [pool.submit(job) for job in jobs]:
            future.exception()


def component(docs: list[dict[str, Any]], kind: str, name: str) -> list[dict[str, Any]]:
    """The documents of ``kind`` that belong to the controller or to the node-agent."""
    return [
        d
        for d in docs
        if d["kind"] == kind and d["metadata"]["labels"]["app.kubernetes.io/component"] == name
    ]


def run_config(docs: list[dict[str, Any]]) -> Any:
    config_map = one(component(docs, "ConfigMap", "controller"), "ConfigMap")
    return load_config_mapping(yaml.safe_load(config_map["data"]["config.yaml"]))


# -- the table -------------------------------------------------------------------------------------


def test_the_table_names_each_set_once_and_covers_every_optional_object():
    names = [case.name for case in VALUE_SETS]
    assert len(names) == len(set(names))
    for case in VALUE_SETS:
        page = case.documented_in.split()[0].rstrip(",")
        assert (REPO_ROOT / page).exists() or (CHART / page).exists(), case.documented_in
    providers = {case.values["config"].get("provider", "aws") for case in VALUE_SETS}
    assert providers == {"aws", "azure", "generic"}
    assert any(case.agent for case in VALUE_SETS)
    assert set().union(*(case.custom_resources for case in VALUE_SETS)) == {
        "ServiceMonitor",
        "PrometheusRule",
    }


# -- each documented set ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_helm_lint_strict_passes_at_the_charts_oldest_kubernetes(case, helm_in_parallel):
    done = lint(case)
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout
    assert "level=WARN" not in done.stderr, done.stderr  # helm 4 lints a missing required value here


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("case", CASES)
def test_every_rendered_object_validates(case, kube_version, helm_in_parallel):
    docs = rendered(case)
    # at the floor, each object at the oldest Kubernetes it is rendered for (the admission policy's own)
    assert (floor_errors(docs) if kube_version == KUBE_FLOOR else validation_errors(docs, kube_version)) == []


@pytest.mark.parametrize("case", CASES)
def test_the_render_holds_the_custom_resources_of_its_switches(case, helm_in_parallel):
    kinds = {d["kind"] for d in rendered(case) if (d["apiVersion"], d["kind"]) in custom_resource_kinds()}
    assert kinds == case.custom_resources


@pytest.mark.parametrize("case", CASES)
def test_the_configuration_files_load_with_the_products_loaders(case, helm_in_parallel):
    docs = rendered(case)
    assert run_config(docs).provider == case.values["config"].get("provider", "aws")
    agent_maps = component(docs, "ConfigMap", "node-agent")
    assert len(agent_maps) == case.agent
    for config_map in agent_maps:
        agent_config_from_mapping(yaml.safe_load(config_map["data"]["config.yaml"]))


@pytest.mark.parametrize("case", CASES)
def test_the_enipool_made_from_node_defaults_validates_against_the_crd(case, helm_in_parallel):
    """The chart renders no ENIPool; the controller makes one per Node from ``config.node_defaults``."""
    config = run_config(rendered(case))
    node = {
        "metadata": {
            "name": "ip-10-0-1-23.eu-west-1.compute.internal",
            "uid": "0b7c2a51-3f5e-4c1e-9d0a-7f1e2d3c4b5a",
            "labels": {
                "node.kubernetes.io/instance-type": "m5.large",
                "topology.kubernetes.io/zone": "eu-west-1a",
            },
        },
        "spec": NODES[config.provider],
    }
    pool = pool_for_node(
        node, config.node_defaults, instance_ids=instance_id_source(config.kubernetes, config.provider)
    )
    assert pool is not None and pool["spec"]["instanceID"]
    assert validation_errors([pool], KUBE_FLOOR) == []


# -- the schemas -----------------------------------------------------------------------------------


def test_kubernetes_validate_has_the_schemas_of_the_charts_oldest_kubernetes():
    minor = ".".join(KUBE_FLOOR.split(".")[:2])
    assert minor in {".".join(v.split(".")[:2]) for v in schemas.shipped_versions()}
    assert KUBE_VERSIONS[0] == KUBE_FLOOR and KUBE_VERSIONS[1] != KUBE_FLOOR


@pytest.mark.system
def test_helm_renders_for_the_oldest_kubernetes_and_refuses_the_one_before():
    major, minor, _ = KUBE_FLOOR.split(".")
    values = with_required(None)
    helm("template", RELEASE, str(CHART), "--kube-version", KUBE_FLOOR, values=values)
    with pytest.raises(HelmError, match="kubeVersion"):
        helm("template", RELEASE, str(CHART), "--kube-version", f"{major}.{int(minor) - 1}.0", values=values)


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("path", crd_files(), ids=lambda p: p.name)
def test_every_crd_validates_as_a_kubernetes_object(path, kube_version):
    assert builtin_errors(load_crd(path), kube_version) == []


def test_the_vendored_crds_are_the_release_their_readme_names():
    readme = (PROMETHEUS_OPERATOR_CRDS / "README.md").read_text()
    assert f"v{OPERATOR_VERSION}" in readme
    vendored = sorted(PROMETHEUS_OPERATOR_CRDS.glob("*.yaml"))
    assert [p.name for p in vendored] == [
        "monitoring.coreos.com_prometheusrules.yaml",
        "monitoring.coreos.com_servicemonitors.yaml",
    ]
    for path in vendored:
        assert path.name in readme
        crd = load_crd(path)
        assert crd["metadata"]["annotations"]["operator.prometheus.io/version"] == OPERATOR_VERSION


@pytest.mark.system
@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_every_custom_resource_the_chart_can_render_has_a_crd(kube_version):
    docs = render({**ALL_FEATURES, **AGENT})
    kinds = {(d["apiVersion"], d["kind"]) for d in docs}
    not_builtin = {
        k for k in kinds if schemas._builtin_validator(*k, version_for({"kind": k[1]}, kube_version)) is None
    }
    assert not_builtin == {
        ("monitoring.coreos.com/v1", "ServiceMonitor"),
        ("monitoring.coreos.com/v1", "PrometheusRule"),
    }
    assert not_builtin <= custom_resource_kinds()


@pytest.mark.system
def test_the_validation_needs_no_network(monkeypatch):
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the validation tried the network: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    docs = render({**ALL_FEATURES, **AGENT})
    crds = schemas._crd_validators.__wrapped__()  # past the cache
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in crds:
            assert list(crds[(doc["apiVersion"], doc["kind"])][0].iter_errors(doc)) == []
        else:  # the package's own validate: it reads every schema again
            kubernetes_validate.validate(doc, kube_floor_of(doc), strict=True)


@pytest.mark.system
def test_the_cached_validators_judge_as_kubernetes_validate_does():
    docs = [
        d
        for d in render({**ALL_FEATURES, **AGENT})
        if (d["apiVersion"], d["kind"]) not in custom_resource_kinds()
    ]
    deployment = one(docs, "Deployment")
    broken = [
        {**deployment, "spec": {**deployment["spec"], "replicas": "2"}},
        {**deployment, "spec": {**deployment["spec"], "replica": 2}},
        {**one(docs, "DaemonSet"), "spec": {"selector": "all"}},
    ]
    for kube_version in KUBE_VERSIONS:
        for doc in docs + broken:
            version = version_for(doc, kube_version)  # the admission policy: from its own floor
            try:
                kubernetes_validate.validate(doc, version, strict=True)
                valid = True
            except kubernetes_validate.ValidationError:
                valid = False
            assert (builtin_errors(doc, version) == []) == valid, (version, doc["kind"])
        assert all(builtin_errors(doc, kube_version) for doc in broken)


# -- the validation fails on broken objects ---------------------------------------------------------


def render_copy(chart: Path, overrides: dict[str, Any] | None) -> list[dict[str, Any]]:
    text = helm("template", RELEASE, str(chart), "--namespace", NAMESPACE, values=with_required(overrides))
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.system
def test_an_unchanged_copy_of_the_chart_validates(tmp_path):
    shutil.copytree(CHART, tmp_path / "eni-ipam")
    docs = render_copy(tmp_path / "eni-ipam", {**ALL_FEATURES, **AGENT})
    assert floor_errors(docs) == []


@pytest.mark.parametrize(
    ("template", "old", "new", "overrides", "expected"),
    [
        pytest.param(
            "deployment.yaml",
            "imagePullPolicy:",
            "pullPolicy:",
            None,
            r"^Deployment eni-ipam: spec\.template\.spec\.containers\.0: .*'pullPolicy' was unexpected",
            id="deployment-field-name",
        ),
        pytest.param(
            "deployment.yaml",
            "replicas: {{ .Values.replicaCount }}",
            "replicas: {{ .Values.replicaCount | quote }}",
            None,
            r"^Deployment eni-ipam: spec\.replicas: '2' is not of type 'integer'",
            id="deployment-type",
        ),
        pytest.param(
            "agent-daemonset.yaml",
            "hostPath:",
            "hostpath:",
            AGENT,
            r"^DaemonSet eni-ipam-agent: spec\.template\.spec\.volumes\.\d+: .*'hostpath' was unexpected",
            id="daemonset-field-name",
        ),
        pytest.param(
            "role.yaml",
            "verbs: [get, update]",
            "verbs: get",
            None,
            r"^Role eni-ipam: rules\.1\.verbs: 'get' is not of type 'array'",
            id="role-type",
        ),
        pytest.param(
            "servicemonitor.yaml",
            "scrapeTimeout:",
            "scrape_timeout:",
            {"serviceMonitor": {"enabled": True}},
            r"^ServiceMonitor eni-ipam: spec\.endpoints\.0: .*'scrape_timeout' was unexpected\) "
            r"\(CRD servicemonitors\.monitoring\.coreos\.com\)",
            id="servicemonitor-field-name",
        ),
        pytest.param(
            "prometheusrule.yaml",
            "for: {{ $rule.severalLeadersFor }}",
            "for: 5 minutes",
            {"prometheusRule": {"enabled": True}},
            r"^PrometheusRule eni-ipam: spec\.groups\.0\.rules\.2\.for: '5 minutes' does not match",
            id="prometheusrule-value",
        ),
        pytest.param(
            "prometheusrule.yaml",
            "  groups:\n",
            "  groups:\n    - name: eni-ipam-extra\n      rule: []\n",
            {"prometheusRule": {"enabled": True}},
            r"^PrometheusRule eni-ipam: spec\.groups\.0: .*'rule' was unexpected",
            id="prometheusrule-field-name",
        ),
    ],
)
@pytest.mark.system
def test_a_chart_broken_on_purpose_fails_the_validation(tmp_path, template, old, new, overrides, expected):
    chart = tmp_path / "eni-ipam"
    shutil.copytree(CHART, chart)
    path = chart / "templates" / template
    text = path.read_text()
    assert old in text, f"{template} no longer holds {old!r}: pick another breakage"
    path.write_text(text.replace(old, new))
    errors = floor_errors(render_copy(chart, overrides))
    assert any(re.search(expected, e) for e in errors), errors


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(
            lambda spec: spec.update(instanceId=spec.pop("instanceID")),
            r"'instanceID' is a required property",
            id="field-name",
        ),
        pytest.param(
            lambda spec: spec.update(preAllocate="8"), r"preAllocate: '8' is not of type 'integer'", id="type"
        ),
        pytest.param(
            lambda spec: spec.update(firstInterfaceIndex=32),
            r"firstInterfaceIndex: 32 is greater than the maximum of 31",
            id="range",
        ),
    ],
)
def test_a_broken_enipool_fails_the_validation(change, expected):
    node = {"metadata": {"name": "node-1"}, "spec": NODES["aws"]}
    pool = pool_for_node(node, None)
    assert pool is not None and validation_errors([pool], KUBE_FLOOR) == []
    change(pool["spec"])
    errors = validation_errors([pool], KUBE_FLOOR)
    assert any(re.search(rf"^ENIPool node-1: .*{expected}", e) for e in errors), errors
