"""Fixtures of the Azure provider's tests: a fake ARM subscription (:mod:`eni_ipam_testkit.fake_azure`)
behind the real Azure SDK, and providers over it.

The world: one resource group with a virtual network, a big subnet (/22) for the nodes, a small one
(/28: 16 addresses, 5 reserved by Azure, 11 usable) and two application security groups. VMs are
``Standard_D8s_v5`` (4 NICs) unless a test says otherwise. Every provider made here is closed at the
end of its test. Waits are virtual: modules mark their tests ``looptime``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.config.schema import validate
from eni_ipam.core.clock import LoopClock
from eni_ipam_testkit.fake_azure import DEFAULT_SUBSCRIPTION, FakeAzure, FakeCredential
from providers.azure import AzureProvider
from providers.azure.settings import AzureSettings


def _azure_settings(data: Any) -> AzureSettings:
    """The ``azure:`` section read as the run configuration reads it."""
    return validate(AzureSettings, {} if data is None else data, path="azure")


SUBSCRIPTION = DEFAULT_SUBSCRIPTION
GROUP = "rg-Nodes"
SIZE = "Standard_D8s_v5"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/providers/azure" in str(item.path) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(30))


@dataclasses.dataclass
class World:
    """The fake subscription and what the tests build in it (ids as ARM spells them)."""

    fake: FakeAzure
    vnet_id: str
    subnet_id: str
    small_subnet_id: str
    asg_ids: tuple[str, str]
    providers: list[AzureProvider] = dataclasses.field(default_factory=list)

    def vm(
        self, name: str, *, subnet: str = "", size: str = SIZE, nics: int = 1, running: bool = True
    ) -> tuple[str, list[str]]:
        """A standalone VM with ``nics`` NICs (the first primary, carrying the first ASG); its id and
        its NICs' ids."""
        nic_ids = [
            self.fake.add_nic(GROUP, f"{name}-nic{i}", subnet or self.subnet_id, asgs=[self.asg_ids[0]])
            for i in range(nics)
        ]
        return self.fake.add_vm(GROUP, name, size, nic_ids, running=running), nic_ids

    def vm_in_another_group(self, name: str, group: str = "other-cluster") -> str:
        """A VM of a resource group outside ``resource_groups``, its NIC in the cluster's subnet."""
        self.fake.add_resource_group(group)
        nic = self.fake.add_nic(group, f"{name}-nic0", self.subnet_id)
        return self.fake.add_vm(group, name, SIZE, [nic])

    def scale_set_vm(self, scale_set: str, *, subnet: str = "", size: str = SIZE) -> tuple[str, str]:
        """A VM of the (possibly new) Uniform scale set ``scale_set``; its id and its NIC's id."""
        ss_id = (
            f"/subscriptions/{self.fake.subscription_id}/resourceGroups/{GROUP}/providers/Microsoft.Compute"
        )
        ss_id += f"/virtualMachineScaleSets/{scale_set}"
        try:
            vm = self.fake.add_scale_set_vm(ss_id, subnet or self.subnet_id, asgs=[self.asg_ids[0]])
        except KeyError:
            self.fake.add_scale_set(GROUP, scale_set, size)
            vm = self.fake.add_scale_set_vm(ss_id, subnet or self.subnet_id, asgs=[self.asg_ids[0]])
        return vm, f"{vm}/networkInterfaces/nic"

    def settings(self, **overrides: Any) -> AzureSettings:
        data: dict[str, Any] = {
            "subscription_id": SUBSCRIPTION,
            "resource_groups": [GROUP],
            "vnet_id": self.vnet_id,
            "polling_interval": 1,
            **overrides,
        }
        return _azure_settings(data)

    def provider(
        self, metrics: Metrics | None = None, *, share: float = 1.0, **overrides: Any
    ) -> AzureProvider:
        provider = AzureProvider(
            self.settings(**overrides),
            clock=LoopClock(),
            metrics=metrics or Metrics(),
            rate_limit_share=share,
            credential=FakeCredential(),
            transport=self.fake,
        )
        self.providers.append(provider)
        return provider


def make_world(**fake_options: Any) -> World:
    fake = FakeAzure(**fake_options)
    fake.add_resource_group(GROUP)
    vnet = fake.add_vnet(GROUP, "vnet-Cluster", "10.0.0.0/16")
    return World(
        fake=fake,
        vnet_id=vnet,
        subnet_id=fake.add_subnet(vnet, "nodes", "10.0.0.0/22"),
        small_subnet_id=fake.add_subnet(vnet, "small", "10.0.8.0/28"),
        asg_ids=(fake.add_asg(GROUP, "pods", {"role": "pods"}), fake.add_asg(GROUP, "other")),
    )


@pytest.fixture
async def world() -> AsyncIterator[World]:
    built = make_world()
    yield built
    for provider in built.providers:
        await provider.close()


@pytest.fixture
async def worlds() -> AsyncIterator[Callable[..., World]]:
    """Worlds with fake options (``page_size``, ``lro_polls``, ``latency``)."""
    made: list[World] = []

    def make(**options: Any) -> World:
        made.append(make_world(**options))
        return made[-1]

    yield make
    for built in made:
        for provider in built.providers:
            await provider.close()


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.sample(name, labels) or 0.0


def lower(resource_id: str) -> str:
    return resource_id.lower()
