"""The generic section: defaults, and errors naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from eni_ipam.config.schema import validate
from eni_ipam.errors import ConfigError
from providers.generic.settings import GenericSettings


def _generic_settings(data: Any) -> GenericSettings:
    """The ``generic:`` section read as the run configuration reads it."""
    return validate(GenericSettings, data, path="generic")


def test_defaults_are_the_range_allocators_one_slash_24_per_node() -> None:
    s = _generic_settings({"cluster_cidrs": ["10.244.0.0/16", "fd00:10:244::/56"]})
    assert (s.node_mask_ipv4, s.node_mask_ipv6, s.blocks_per_node, s.slots_per_node) == (24, 64, 1, 16)
    assert [str(c) for c in s.ipv4] == ["10.244.0.0/16"] and [str(c) for c in s.ipv6] == ["fd00:10:244::/56"]


def test_small_blocks_allow_as_many_blocks_as_one_slash_24() -> None:
    s = _generic_settings({"cluster_cidrs": ["10.244.0.0/16"], "node_mask_ipv4": 28})
    assert (s.blocks_per_node, s.slots_per_node) == (16, 16)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (None, "generic"),
        ({}, "generic.cluster_cidrs"),
        ({"cluster_cidrs": "10.0.0.0/8"}, "generic.cluster_cidrs"),
        ({"cluster_cidrs": ["10.0.0.1/8"]}, "generic.cluster_cidrs[0]"),
        ({"cluster_cidrs": ["10.0.0.0/16", "nope"]}, "generic.cluster_cidrs[1]"),
        ({"cluster_cidrs": ["10.0.0.0/16", "10.0.128.0/17"]}, "generic.cluster_cidrs[1]"),
        ({"cluster_cidrs": ["10.0.0.0/25"]}, "generic.cluster_cidrs[0]"),
        ({"cluster_cidrs": ["10.0.0.0/8"], "node_mask_ipv4": 28}, "generic.cluster_cidrs[0]"),
        ({"cluster_cidrs": ["fd00::/56"]}, "generic.cluster_cidrs"),
        ({"cluster_cidrs": ["10.0.0.0/16"], "node_mask_ipv4": 29}, "generic.node_mask_ipv4"),
        ({"cluster_cidrs": ["10.0.0.0/16"], "node_mask_ipv6": 40}, "generic.node_mask_ipv6"),
        ({"cluster_cidrs": ["10.0.0.0/16"], "max_blocks_per_node": -1}, "generic.max_blocks_per_node"),
        # 129 blocks of /24 are 33,024 addresses: more than a node's pool holds (MAX_NODE_ADDRESSES)
        ({"cluster_cidrs": ["10.0.0.0/8"], "max_blocks_per_node": 129}, "generic.max_blocks_per_node"),
        ({"cluster_cidrs": ["10.0.0.0/16"], "service_cidrs": ["10.96.0.0/12x"]}, "generic.service_cidrs[0]"),
        ({"cluster_cidrs": ["10.0.0.0/16"], "pod_cidr": "x"}, "generic.pod_cidr"),
    ],
)
def test_bad_settings_name_the_field(data: object, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _generic_settings(data)
    assert caught.value.field == field
