"""The generic provider passes the provider contract (prefix units, one virtual interface)."""

from __future__ import annotations

from typing import Any

import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.config.schema import validate
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.provider import Provider
from eni_ipam.testing.provider_contract import CONTRACT_CHECKS, Check, ContractEnv, check_mac_addresses
from providers.generic.provider import GenericProvider
from providers.generic.settings import GenericSettings
from tests.providers.generic.conftest import Records


def _generic_settings(data: Any) -> GenericSettings:
    """The ``generic:`` section read as the run configuration reads it."""
    return validate(GenericSettings, data, path="generic")


BIG, SMALL = "10.0.0.0/20", "10.99.0.0/26"


def as_provider(provider: GenericProvider) -> Provider:
    """Statically proves that GenericProvider satisfies the Provider protocol."""
    return provider


def contract_env(mask: int, *, devices: bool) -> ContractEnv:
    records = Records()
    records.add("contract", subnets=(BIG,))
    records.add("small", subnets=(SMALL,))
    records.add("neighbour")
    settings = _generic_settings(
        {"cluster_cidrs": [BIG, SMALL], "node_mask_ipv4": mask, "max_blocks_per_node": 64 >> (32 - mask - 2)}
    )
    provider = GenericProvider(settings, records=records, clock=LoopClock(), metrics=Metrics())
    return ContractEnv(
        provider=as_provider(provider),
        instance_id="contract",
        limits=provider.limits,
        subnet_id=BIG,
        small_subnet_id=SMALL,
        security_group_ids=(),
        capabilities=frozenset({"prefixes"}),
        small_interface_id="vif-small",
        devices=devices,
    )


@pytest.mark.parametrize("mask", [28, 26])
@pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda c: c.__name__)
async def test_generic_provider_passes_contract_check(check: Check, mask: int) -> None:
    await check(contract_env(mask, devices=False))  # a virtual interface: no MAC address to find it by


async def test_the_mac_check_fails_a_provider_whose_interfaces_have_none() -> None:
    """The generic provider's interface has no MAC address: claimed a device, it fails the check."""
    with pytest.raises(AssertionError, match="has no device's MAC address: ''"):
        await check_mac_addresses(contract_env(28, devices=True))
