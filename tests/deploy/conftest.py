"""Shared paths, and the Helm chart rendered by the real helm binary (.venv/bin/helm, `make kube-tools`).

A test that renders skips, saying why, when that helm is not installed. Each distinct render runs helm
once per session; callers get their own copy of the documents. Renders start from REQUIRED_VALUES, the
values the chart has no default for, unless a test asks for the chart's bare defaults.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import os
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "deploy" / "helm" / "eni-ipam"
HELM = Path(sysconfig.get_path("scripts")) / "helm"
"""Where scripts/install_kube_tools.py puts helm: the running virtualenv's bin directory."""
RELEASE = "eni-ipam"
NAMESPACE = "kube-system"
REGION = "eu-west-1"
REQUIRED_VALUES: dict[str, Any] = {"config": {"aws": {"region": REGION}}}
"""What every installation must set: with the default provider, aws, the region (values.yaml leaves it
empty, and the chart refuses to render without it)."""
ALL_FEATURES = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}
AGENT = {"agent": {"enabled": True}}
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: same result, faster


class HelmError(subprocess.CalledProcessError):
    """helm exited non-zero (a ``required`` or ``fail`` in a template, say); the message is its stderr."""

    def __str__(self) -> str:
        return f"{' '.join(map(str, self.cmd))} exited with {self.returncode}: {self.stderr.strip()}"


def require_helm() -> None:
    """Skip the test, saying why, when helm is not installed."""
    if not os.access(HELM, os.X_OK):
        pytest.skip(f"{HELM} is missing (make kube-tools installs it)")


@functools.cache
def _empty_home() -> tempfile.TemporaryDirectory[str]:
    """helm's configuration, cache and data directories for this session: empty, removed at exit."""
    return tempfile.TemporaryDirectory(prefix="eni-ipam-helm-home-")


def helm_run(*args: str, values: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    """helm run with ``args``, and ``values`` as a values file on its standard input; a non-zero exit
    raises :class:`HelmError`. helm 4 reports some findings (a ``required`` value missing during
    ``helm lint``) on standard error only, hence the whole result.

    helm runs with an empty kubeconfig and empty home directories, so what a user has configured (a
    cluster, repositories, plugins) cannot change a render.
    """
    require_helm()
    home = Path(_empty_home().name)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "KUBECONFIG": os.devnull,
        "HELM_CACHE_HOME": str(home / "helm-cache"),
        "HELM_CONFIG_HOME": str(home / "helm-config"),
        "HELM_DATA_HOME": str(home / "helm-data"),
    }
    command = [str(HELM), *args]
    if values is not None:
        command += ["--values", "-"]  # JSON is YAML; null removes a default, as in a values file
    done = subprocess.run(
        command,
        input=json.dumps(values) if values is not None else None,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise HelmError(done.returncode, command, done.stdout, done.stderr)
    return done


def helm(*args: str, values: dict[str, Any] | None = None) -> str:
    """helm's standard output for ``args``, with ``values`` as a values file on its standard input."""
    return helm_run(*args, values=values).stdout


def merge_values(base: dict[str, Any], overrides: dict[str, Any] | None) -> dict[str, Any]:
    """``overrides`` over ``base`` as helm merges two values files: maps merge key by key, anything else
    (a list, a scalar, null) replaces what was there; a null then removes the chart's default."""
    merged = copy.deepcopy(base)
    for key, value in (overrides or {}).items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_values(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def with_required(overrides: dict[str, Any] | None) -> dict[str, Any]:
    """REQUIRED_VALUES with ``overrides`` over them: what a user's values file holds."""
    return merge_values(REQUIRED_VALUES, overrides)


def _key(overrides: dict[str, Any] | None) -> str:
    return json.dumps(overrides, sort_keys=True)


@functools.cache
def _template(key: str, release_name: str, namespace: str) -> tuple[dict[str, Any], ...]:
    overrides = json.loads(key)
    text = helm("template", release_name, str(CHART), "--namespace", namespace, values=overrides)
    return tuple(doc for doc in yaml.load_all(text, Loader=_LOADER) if doc is not None)


@functools.cache
def _notes(key: str, release_name: str, namespace: str) -> str:
    overrides = json.loads(key)
    args = ["install", release_name, str(CHART), "--namespace", namespace, "--dry-run=client", "-o", "json"]
    return str(json.loads(helm(*args, values=overrides))["info"]["notes"])


def render(
    overrides: dict[str, Any] | None = None,
    release_name: str = RELEASE,
    namespace: str = NAMESPACE,
    *,
    required: bool = True,
) -> list[dict[str, Any]]:
    """``helm template`` of the chart with ``overrides`` over REQUIRED_VALUES over values.yaml (over
    values.yaml alone with ``required=False``): its documents, in helm's order."""
    values = with_required(overrides) if required else overrides
    return copy.deepcopy(list(_template(_key(values), release_name, namespace)))


def render_notes(
    overrides: dict[str, Any] | None = None, release_name: str = RELEASE, namespace: str = NAMESPACE
) -> str:
    """NOTES.txt as an install prints it (``overrides`` over REQUIRED_VALUES). ``helm template`` leaves
    NOTES.txt out, so this is a client-side dry-run install: it renders the same templates and needs no
    cluster."""
    return _notes(_key(with_required(overrides)), release_name, namespace)


@functools.cache
def render_manifests_script() -> Any:
    """scripts/render_manifests.py, imported."""
    spec = importlib.util.spec_from_file_location(
        "render_manifests", REPO_ROOT / "scripts" / "render_manifests.py"
    )
    assert spec and spec.loader
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


@functools.cache
def _generated() -> dict[str, str]:
    files: dict[str, str] = render_manifests_script().generate(HELM)
    return files


def generated_manifests() -> dict[str, str]:
    """What scripts/render_manifests.py writes to deploy/kubernetes/ today: file name → text."""
    require_helm()
    return dict(_generated())


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def pod_spec(docs: list[dict[str, Any]], kind: str = "Deployment") -> dict[str, Any]:
    """The pod template's spec of the one workload of ``kind``."""
    return one(docs, kind)["spec"]["template"]["spec"]


def container(docs: list[dict[str, Any]], kind: str = "Deployment") -> dict[str, Any]:
    """The one container of the workload of ``kind``."""
    containers = pod_spec(docs, kind)["containers"]
    assert len(containers) == 1
    return containers[0]


def controller_selectors(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Every label selector aimed at the controller's pods, by what holds it."""
    deployment = one(docs, "Deployment")
    selectors = {
        "Deployment": deployment["spec"]["selector"]["matchLabels"],
        "Service": one(
            [d for d in docs if d["metadata"]["name"] == deployment["metadata"]["name"]], "Service"
        )["spec"]["selector"],
        "PodDisruptionBudget": one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
    }
    affinity = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    for n, term in enumerate(affinity["preferredDuringSchedulingIgnoredDuringExecution"]):
        selectors[f"anti-affinity {n}"] = term["podAffinityTerm"]["labelSelector"]["matchLabels"]
    return selectors


_VALUES = yaml.safe_load((CHART / "values.yaml").read_text())


def values() -> dict[str, Any]:
    """values.yaml, parsed (a fresh copy)."""
    return copy.deepcopy(_VALUES)


@pytest.fixture
def default_docs() -> list[dict[str, Any]]:
    """The chart with its defaults and the values it requires (REQUIRED_VALUES)."""
    return render()


@pytest.fixture
def full_docs() -> list[dict[str, Any]]:
    return render(ALL_FEATURES)


@pytest.fixture(params=[None, ALL_FEATURES], ids=["default", "all-features"])
def any_docs(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(request.param)


@pytest.fixture
def agent_docs() -> list[dict[str, Any]]:
    """The chart with the node agent enabled (every other value at its default)."""
    return render(AGENT)
