"""Fixtures of the node side's Kubernetes tests: a pool for node n1, and ``controller``, the
controller's API client with n1's ENIPool created (the fake API server is the suite's ``kube``
fixture)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from eni_ipam.kube.api import ENIPOOLS, KubeApi
from eni_ipam_testkit.fake_kube import FakeKube
from tests.kube.conftest import make_api


@pytest.fixture
async def controller(kube: FakeKube) -> AsyncIterator[KubeApi]:
    api = make_api(kube)
    await api.create(ENIPOOLS, {"metadata": {"name": "n1"}, "spec": {"instanceID": "i-1"}})
    yield api
    await api.close()


def enipool_status(addresses: list[str], *, release: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "pool": {a: {"interface": "eni-1", "subnet": "s-1"} for a in addresses},
        "subnets": {"s-1": {"cidr": "10.0.0.0/24"}},
        "release": release or {},
    }
