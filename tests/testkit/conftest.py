"""Fixtures of the fake API server's own tests: the suite's ``kube`` server with the fake's own
schema-less ENIPool CRD, the real lightkube client on it, and versions counted from the test's start."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from lightkube import AsyncClient, KubeConfig

from eni_ipam_testkit.fake_kube import ENIPOOL_CRD_DEFAULT, FakeKube


@pytest.fixture
def kube_crds() -> list[dict[str, Any]]:
    """The fake's own tests use its schema-less ENIPool CRD (they test the server, not the schema)."""
    return [ENIPOOL_CRD_DEFAULT]


@pytest.fixture
async def client(kube: FakeKube) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(KubeConfig.from_dict(kube.kubeconfig()))
    yield client
    await client.close()


@pytest.fixture
def rv(kube: FakeKube) -> Callable[[int], str]:
    """``rv(n)``: the resourceVersion of the n-th write of the test (the CRDs took the first ones)."""
    base = int(kube.resource_version)
    return lambda n: str(base + n)
