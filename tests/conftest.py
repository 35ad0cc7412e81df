"""Shared fixtures: a small simulated world (in-memory cloud + store + manager) on the loop's clock,
and the fake Kubernetes API server with the chart's ENIPool CRD and Cluster API's address CRDs.

The test tiers (docs/testing.md, "Tiers") are kept here too: ``tests/tiers.py`` marks what is not
in-process and refuses a process started by a test of the in-process tier.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.node import PassResult
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeResource, NodeSpec
from eni_ipam.kube.permissions import CLAIMS_GROUP
from eni_ipam.simulator.cluster import EmbeddedCluster
from eni_ipam_testkit.fake_kube import FakeKube
from providers.sim.cloud import SimCloud
from providers.sim.provider import SimProvider
from tests.tiers import pytest_collection_modifyitems, pytest_configure, refuse_processes  # noqa: F401


@pytest.fixture(autouse=True)
def _structlog_configuration_restored() -> Any:
    """A test that runs the CLI in-process configures logging (a level, a stream); the next test
    starts from the configuration before it, whatever the order tests run in."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


class World:
    def __init__(self, settings: Settings, provider_wrapper: Callable | None = None) -> None:
        self.clock = LoopClock()
        self.metrics = Metrics()
        self.cloud = SimCloud(self.clock)
        self.cloud.add_vpc("vpc-1", "10.0.0.0/16")
        self.cloud.add_subnet("s-1", vpc="vpc-1", zone="z1", cidr="10.0.0.0/22")
        self.cloud.add_security_group("sg-1", vpc="vpc-1")
        provider = SimProvider(self.cloud, clock=self.clock, metrics=self.metrics)
        self.provider = provider_wrapper(provider) if provider_wrapper else provider
        self.cluster = EmbeddedCluster(
            self.provider, settings=settings, metrics=self.metrics, clock=self.clock, rng=random.Random(7)
        )
        self.store, self.side, self.manager = self.cluster.store, self.cluster.side, self.cluster.manager

    def add_node(self, name: str, *, type: str = "m5.large", used: int = 0, **spec: object) -> None:
        instance = f"i-{name}"
        self.cloud.add_instance(instance, type=type, subnet="s-1", security_groups=["sg-1"])
        self.side.add(NodeResource(name=name, instance_id=instance, spec=NodeSpec(**spec), used=used))  # type: ignore[arg-type]

    def count_passes(self, name: str) -> Callable[[], int]:
        """Count the maintenance passes of node ``name`` from now on; returns the counter's reader."""
        node = self.manager.nodes[name]
        maintain = node.maintain
        passes = 0

        async def counted() -> PassResult:
            nonlocal passes
            passes += 1
            return await maintain()

        node.maintain = counted  # type: ignore[method-assign]
        return lambda: passes

    async def settle(self, limit: float = 120.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        await asyncio.sleep(0.01)
        while self.manager.busy() and loop.time() < deadline:
            await asyncio.sleep(0.01)


@pytest.fixture
def make_world() -> Callable[..., contextlib.AbstractAsyncContextManager[World]]:
    @contextlib.asynccontextmanager
    async def running(
        settings: Settings | None = None, provider_wrapper: Callable | None = None, start: bool = True
    ) -> AsyncIterator[World]:
        world = World(settings or Settings(), provider_wrapper)
        if not start:
            yield world
            return
        async with world.cluster.running():
            yield world

    return running


CRD = Path(__file__).parents[1] / "deploy" / "helm" / "eni-ipam" / "crds" / "enipools.eni-ipam.io.yaml"
"""The ENIPool CRD the chart installs: the schema every Kubernetes test's pools meet."""


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
def kube_crds() -> list[dict[str, Any]]:
    """The CRDs the ``kube`` server serves: the chart's ENIPool and Cluster API's address CRDs (a
    directory's conftest overrides this fixture to serve others)."""
    return [
        yaml.safe_load(CRD.read_text()),
        cluster_api_crd("IPAddressClaim", "ipaddressclaims"),
        cluster_api_crd("IPAddress", "ipaddresses"),
    ]


@pytest.fixture
async def kube(kube_crds: list[dict[str, Any]]) -> AsyncIterator[FakeKube]:
    """The fake API server on 127.0.0.1, serving ``kube_crds`` (created through its API, as an admin
    would apply them); the requests that did it are not kept in ``kube.requests``."""
    async with FakeKube() as server:
        for crd in kube_crds:
            await server.apply_manifest(crd)
        server.requests.clear()
        yield server
