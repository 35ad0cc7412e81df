"""Kubernetes tests: the real lightkube client over HTTP against the fake API server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2
import lightkube
import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core.spec import PoolSpec
from eni_ipam.kube import resources
from eni_ipam.kube.api import KubeApi
from eni_ipam.kube.health import ApiHealth
from eni_ipam_testkit.fake_kube import FakeKube

pytestmark = pytest.mark.timeout(30)


def make_api(kube: FakeKube, metrics: Metrics | None = None, health: ApiHealth | None = None) -> KubeApi:
    # The production client's 30 s per read (client_from_kubeconfig) is longer than any lease
    # deadline: the elector, not the HTTP client, must bound a hanging renewal.
    config = lightkube.KubeConfig.from_dict(kube.kubeconfig())
    client = lightkube.AsyncClient(config, timeout=httpx2.Timeout(30.0))
    return KubeApi(client, metrics=metrics or Metrics(), health=health)


@pytest.fixture
async def api(kube: FakeKube) -> AsyncIterator[KubeApi]:
    kube_api = make_api(kube)
    yield kube_api
    await kube_api.close()


@pytest.fixture
def spec_validations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Where every ENIPool spec is validated during the test (the path the conversion gives its one
    call into the model), one entry a validation."""
    seen: list[str] = []
    validate = resources.validate

    def counting(model: Any, data: Any, **kwargs: Any) -> Any:
        if model is PoolSpec:
            seen.append(kwargs.get("path", ""))
        return validate(model, data, **kwargs)

    monkeypatch.setattr(resources, "validate", counting)
    return seen


def node(
    name: str, instance: str, *, zone: str = "us-east-1a", itype: str = "m5.large", **labels: str
) -> dict:
    return {
        "metadata": {
            "name": name,
            "labels": {
                "topology.kubernetes.io/zone": zone,
                "node.kubernetes.io/instance-type": itype,
                **labels,
            },
        },
        "spec": {"providerID": f"aws:///{zone}/{instance}"},
    }
