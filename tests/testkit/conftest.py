"""Fixtures of the fake API server's own tests: the suite's ``kube`` server with the fake's own
schema-less ENIPool CRD, the real lightkube client on it, and versions counted from the test's start."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from lightkube import AsyncClient, KubeConfig

from eni_ipam_testkit.fake_kube import ENIPOOL_CRD_DEFAULT, FakeKube
from tests.testkit.tools import Tools


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


@pytest.fixture
async def http(kube: FakeKube) -> AsyncIterator[httpx2.AsyncClient]:
    """An admin's raw HTTP client of the server (requests as kubectl would send them, answers as read)."""
    headers = {"Authorization": f"Bearer {kube.admin_token}"}
    async with httpx2.AsyncClient(
        base_url=kube.url, headers=headers, verify=kube.ssl_context(), timeout=30
    ) as client:
        yield client


@pytest.fixture
def tools(kube: FakeKube, tmp_path: Path) -> Tools:
    """The real kubectl and helm, as the admin or a service account, on this test's server."""
    return Tools(kube, tmp_path)
