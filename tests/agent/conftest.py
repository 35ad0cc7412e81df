"""Fixtures of the node side's Kubernetes tests: the fake API server with the ENIPool CRD and
Cluster API's address CRDs, and a pool for node n1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml

from eni_ipam.kube.permissions import CLAIMS_GROUP
from eni_ipam.testing.fake_kube import FakeKube
from tests.kube.conftest import CRD


def cluster_api_crd(kind: str, plural: str) -> dict[str, Any]:
    """A minimal CRD of Cluster API's ipam group (the real ones come with Cluster API)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{CLAIMS_GROUP}"},
        "spec": {
            "group": CLAIMS_GROUP,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": "v1beta1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


@pytest.fixture
async def kube() -> AsyncIterator[FakeKube]:
    async with FakeKube() as server:
        server.register_crd(yaml.safe_load(CRD.read_text()))
        server.register_crd(cluster_api_crd("IPAddressClaim", "ipaddressclaims"))
        server.register_crd(cluster_api_crd("IPAddress", "ipaddresses"))
        yield server


def enipool_status(addresses: list[str], *, release: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "pool": {a: {"interface": "eni-1", "subnet": "s-1"} for a in addresses},
        "subnets": {"s-1": {"cidr": "10.0.0.0/24"}},
        "release": release or {},
    }
