"""Fixtures of the fake API server's own tests: a server with the generic ENIPool CRD, and the real
lightkube client on it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from lightkube import AsyncClient, KubeConfig

from eni_ipam.testing.fake_kube import ENIPOOL_CRD_DEFAULT, FakeKube


@pytest.fixture
async def kube() -> AsyncIterator[FakeKube]:
    async with FakeKube(history=100) as kube:
        kube.register_crd(ENIPOOL_CRD_DEFAULT)
        yield kube


@pytest.fixture
async def client(kube: FakeKube) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(KubeConfig.from_dict(kube.kubeconfig()))
    yield client
    await client.close()
