"""The shipped VM-size table (providers/azure/vm_sizes.json): valid, complete for common sizes, and
read as InstanceLimits with Azure's per-NIC limit and no hot attach."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from eni_ipam.core.errors import LimitsUnknown
from providers.azure.limits import IP_CONFIGURATIONS_PER_NIC, VmSizes, load_table, parse_table

WELL_KNOWN = [
    # size, max NICs (the "Max NICs" column of each series' page on learn.microsoft.com)
    ("Standard_D2s_v3", 2),
    ("Standard_D8s_v3", 4),
    ("Standard_D16s_v4", 8),
    ("Standard_D4s_v5", 2),
    ("Standard_D8s_v5", 4),
    ("Standard_D16as_v5", 8),
    ("Standard_D8ds_v5", 4),
    ("Standard_E8s_v3", 4),
    ("Standard_E20s_v4", 8),
    ("Standard_E96s_v5", 8),
    ("Standard_F16s_v2", 4),
    ("Standard_F32s_v2", 8),
    ("Standard_B2s", 3),
    ("Standard_B12ms", 6),
    ("Standard_L8s_v3", 4),
]


def test_the_shipped_file_is_valid_and_names_its_sources() -> None:
    document = json.loads(resources.files("providers.azure").joinpath("vm_sizes.json").read_text())
    table = parse_table(document)
    assert len(table) >= 100
    assert all(src.startswith("https://learn.microsoft.com/") for src in document["sources"])
    for series in ("D", "E", "F", "B", "L"):
        assert any(size.startswith(f"Standard_{series}") for size in table), f"no {series}-series size"
    for version in ("_v3", "_v4", "_v5"):
        assert any(size.endswith(version) for size in table), f"no {version} size"


@pytest.mark.parametrize(("size", "nics"), WELL_KNOWN, ids=[w[0] for w in WELL_KNOWN])
def test_well_known_sizes_have_their_documented_nic_limit(size: str, nics: int) -> None:
    limits = VmSizes().limits(size)
    assert limits.adapters == nics
    assert limits.ipv4_per_interface == IP_CONFIGURATIONS_PER_NIC == 256
    assert not limits.hot_attach and not limits.supports_prefixes
    assert limits.slots_per_interface == 255


def test_sizes_match_case_insensitively_and_overrides_win() -> None:
    sizes = VmSizes({"Standard_D8s_v5": 2, "Custom_Size": 5})
    assert sizes.limits("standard_d8s_v5").adapters == 2
    assert sizes.limits("CUSTOM_SIZE").adapters == 5
    with pytest.raises(LimitsUnknown):
        sizes.limits("Standard_Q1_v1")


def test_the_table_is_loaded_once_and_read_only() -> None:
    table = load_table()
    assert load_table() is table
    with pytest.raises(TypeError):
        table["Standard_D2s_v5"] = 9  # type: ignore[index]


@pytest.mark.parametrize(
    "document",
    [
        {},
        {"max_nics": {}},
        {"max_nics": {"D2s_v5": 2}},
        {"max_nics": {"Standard_D2s_v5": 0}},
        {"max_nics": {"Standard_D2s_v5": True}},
        {"max_nics": {"Standard_D2s_v5": 2, "standard_d2s_v5": 2}},
    ],
)
def test_a_malformed_table_is_refused(document: dict) -> None:
    with pytest.raises(ValueError):
        parse_table(document)
