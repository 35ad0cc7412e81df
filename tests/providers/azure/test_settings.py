"""AzureSettings: required fields, defaults, parsing, and errors that name the bad field."""

from __future__ import annotations

from typing import Any

import pytest

from eni_ipam.config.schema import validate
from eni_ipam.core.ratelimit import Bucket
from eni_ipam.errors import ConfigError
from providers.azure.operations import BUCKETS
from providers.azure.settings import AzureSettings


def _azure_settings(data: Any) -> AzureSettings:
    """The ``azure:`` section read as the run configuration reads it."""
    return validate(AzureSettings, {} if data is None else data, path="azure")


SUB = "0a1b2c3d-0000-4000-8000-00000000abcd"
VNET = f"/subscriptions/{SUB}/resourceGroups/Net/providers/Microsoft.Network/virtualNetworks/Hub"
REQUIRED: dict[str, Any] = {
    "subscription_id": SUB,
    "resource_groups": ["MC_rg_aks_westeurope"],
    "vnet_id": VNET,
}


def test_defaults_with_only_the_required_fields() -> None:
    s = _azure_settings(REQUIRED)
    assert s == AzureSettings(
        subscription_id=SUB, resource_groups=("mc_rg_aks_westeurope",), vnet_id=VNET.lower()
    )
    assert (s.cloud, s.arm_endpoint, s.max_retries) == ("AzurePublicCloud", "", 3)
    assert (s.operation_timeout, s.polling_interval, s.max_retry_after) == (120.0, 2.0, 30.0)
    assert s.buckets() == dict(BUCKETS) and dict(s.vm_sizes) == {}
    assert (s.vnet.resource_group, s.vnet.name) == ("net", "hub")


def test_every_field_parses_from_yaml_shaped_data() -> None:
    s = _azure_settings(
        {
            **REQUIRED,
            "subscription_id": SUB.upper(),
            "resource_groups": ["a", "B"],
            "cloud": "azurechinacloud",
            "arm_endpoint": "https://management.example.test/",
            "operation_timeout": "5m",
            "polling_interval": "500ms",
            "max_retries": 0,
            "max_retry_after": 10,
            "vm_sizes": {"Standard_X4_v9": 4},
            "rate_limits": {"network-writes": {"burst": 10, "refill": 1}},
        }
    )
    assert s.subscription_id == SUB and s.resource_groups == ("a", "b")
    assert (s.cloud, s.arm_endpoint) == ("AzureChinaCloud", "https://management.example.test")
    assert (s.operation_timeout, s.polling_interval, s.max_retries) == (300, 0.5, 0)
    assert dict(s.vm_sizes) == {"Standard_X4_v9": 4}
    assert s.buckets()["network-writes"] == Bucket(10, 1)
    assert s.buckets()["arm-reads"] == BUCKETS["arm-reads"]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (None, "azure.subscription_id"),
        ({"resource_groups": ["a"], "vnet_id": VNET}, "azure.subscription_id"),
        ({"subscription_id": SUB, "vnet_id": VNET}, "azure.resource_groups"),
        ({"subscription_id": SUB, "resource_groups": ["a"]}, "azure.vnet_id"),
        ({**REQUIRED, "subscripton_id": SUB}, "azure.subscripton_id"),
        ({**REQUIRED, "subscription_id": "my-subscription"}, "azure.subscription_id"),
        ({**REQUIRED, "resource_groups": "rg"}, "azure.resource_groups"),
        ({**REQUIRED, "resource_groups": []}, "azure.resource_groups"),
        ({**REQUIRED, "resource_groups": ["ok", "bad/name"]}, "azure.resource_groups[1]"),
        ({**REQUIRED, "resource_groups": ["ok", 7]}, "azure.resource_groups[1]"),
        ({**REQUIRED, "resource_groups": ["rg", "RG"]}, "azure.resource_groups[1]"),
        ({**REQUIRED, "vnet_id": "vnet-123"}, "azure.vnet_id"),
        ({**REQUIRED, "vnet_id": f"{VNET}/subnets/nodes"}, "azure.vnet_id"),
        ({**REQUIRED, "vnet_id": VNET.replace(SUB, "0a1b2c3d-0000-4000-8000-00000000ffff")}, "azure.vnet_id"),
        ({**REQUIRED, "cloud": "AzureGermanCloud"}, "azure.cloud"),
        ({**REQUIRED, "arm_endpoint": "http://management.azure.com"}, "azure.arm_endpoint"),
        ({**REQUIRED, "operation_timeout": "0s"}, "azure.operation_timeout"),
        ({**REQUIRED, "polling_interval": "soon"}, "azure.polling_interval"),
        ({**REQUIRED, "max_retries": -1}, "azure.max_retries"),
        ({**REQUIRED, "max_retries": 50}, "azure.max_retries"),
        ({**REQUIRED, "max_retries": True}, "azure.max_retries"),
        ({**REQUIRED, "vm_sizes": ["Standard_D2_v5"]}, "azure.vm_sizes"),
        ({**REQUIRED, "vm_sizes": {"Standard_D2_v5": 0}}, "azure.vm_sizes.Standard_D2_v5"),
        ({**REQUIRED, "vm_sizes": {"D2 v5": 2}}, "azure.vm_sizes.D2 v5"),
        ({**REQUIRED, "rate_limits": {"writes": {"burst": 1, "refill": 1}}}, "azure.rate_limits.writes"),
        ({**REQUIRED, "rate_limits": {"arm-writes": {"burst": 1}}}, "azure.rate_limits.arm-writes.refill"),
        (
            {**REQUIRED, "rate_limits": {"arm-writes": {"burst": 1, "refill": 0}}},
            "azure.rate_limits.arm-writes.refill",
        ),
        ([], "azure"),
    ],
)
def test_bad_values_name_the_field(data: Any, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _azure_settings(data)
    assert caught.value.field == field
