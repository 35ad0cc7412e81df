"""Shared paths and renders of the Helm chart (rendered once per session; the renders are read-only)."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from eni_ipam.testing.helm import render_chart

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "deploy" / "helm" / "eni-ipam"
RELEASE = "eni-ipam"
NAMESPACE = "kube-system"
ALL_FEATURES = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}
AGENT = {"agent": {"enabled": True}}
_RENDERS: dict[str, dict[str, Any] | None] = {"default": None, "all-features": ALL_FEATURES, "agent": AGENT}


def render(overrides: dict[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    return render_chart(CHART, overrides, **kwargs)


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
        "Service": one(docs, "Service")["spec"]["selector"],
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


@functools.cache
def _cached(name: str) -> list[dict[str, Any]]:
    return render(_RENDERS[name])


@pytest.fixture
def default_docs() -> list[dict[str, Any]]:
    return copy.deepcopy(_cached("default"))


@pytest.fixture
def full_docs() -> list[dict[str, Any]]:
    return copy.deepcopy(_cached("all-features"))


@pytest.fixture(params=["default", "all-features"])
def any_docs(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return copy.deepcopy(_cached(request.param))


@pytest.fixture
def agent_docs() -> list[dict[str, Any]]:
    """The chart with the node agent enabled (every other value at its default)."""
    return copy.deepcopy(_cached("agent"))
