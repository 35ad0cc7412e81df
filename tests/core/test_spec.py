"""The node spec is declared once: bounds and defaults live on the model and are resolved when a
spec is parsed, files and pools spell its keys in two cases, and equal specs are one object."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eni_ipam.config.schema import validate
from eni_ipam.core.spec import (
    DEFAULT_PRE_ALLOCATE,
    DEFAULT_SPEC,
    MAX_ADDRESSES,
    POOL_ONLY_FIELDS,
    SPEC_FIELDS,
    NodeSpec,
    PoolSpec,
    camel,
    shared,
    spec_problems,
)
from eni_ipam.errors import ConfigError
from tests.deploy.test_crd import schema


@pytest.mark.parametrize(("written", "read"), [(0, 8), (1, 1), (16, 16), (-1, -1), (None, 8)])
def test_pre_allocate_zero_or_unset_is_the_default_when_parsed_and_other_values_are_kept(
    written: int | None, read: int
) -> None:
    data = {} if written is None else {"pre_allocate": written}
    assert validate(NodeSpec, data).pre_allocate == read
    pool = {"instanceID": "i-1"} | ({} if written is None else {"preAllocate": written})
    assert validate(PoolSpec, pool, by_alias=True).pre_allocate == read
    assert DEFAULT_SPEC.pre_allocate == DEFAULT_PRE_ALLOCATE


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_the_planner_never_sees_a_zero_pre_allocate(value: int) -> None:
    try:
        spec = validate(NodeSpec, {"pre_allocate": value})
    except ConfigError as exc:
        assert exc.field == "pre_allocate" and abs(value) > MAX_ADDRESSES
        return
    assert spec.pre_allocate != 0 and spec.pre_allocate == (value or DEFAULT_PRE_ALLOCATE)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"min_allocate": -1}, "min_allocate"),
        ({"max_allocate": MAX_ADDRESSES + 1}, "max_allocate"),
        ({"first_interface_index": 32}, "first_interface_index"),
        ({"subnet_ids": [f"s-{n}" for n in range(65)]}, "subnet_ids"),
        ({"security_groups": ["sg-1"] * 17}, "security_groups"),
        ({"security_groups": ["x" * 257]}, "security_groups[0]"),
        ({"subnet_tags": {"k": "v" * 257}}, "subnet_tags"),
    ],
)
def test_bounds_live_on_the_model_and_name_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate(NodeSpec, data)
    assert caught.value.field == field


def test_the_pool_keys_are_the_crds_spec_properties() -> None:
    properties = set(schema()["properties"]["spec"]["properties"])
    aliases = {field.alias for field in PoolSpec.model_fields.values()}
    assert aliases == properties
    assert set(PoolSpec.model_fields) == {*SPEC_FIELDS, *POOL_ONLY_FIELDS}


@pytest.mark.parametrize(("field", "key"), [("min_allocate", "minAllocate"), ("subnet_ids", "subnetIDs")])
def test_camel_case_names_follow_the_crd(field: str, key: str) -> None:
    assert camel(field) == key


def test_files_write_snake_case_and_pools_camel_case() -> None:
    assert validate(NodeSpec, {"min_allocate": 2}).min_allocate == 2
    assert validate(NodeSpec, {"minAllocate": 2}, by_alias=True).min_allocate == 2
    with pytest.raises(ConfigError) as caught:
        validate(NodeSpec, {"minAllocate": 2})
    assert caught.value.field == "minAllocate"


def test_defaults_fill_in_only_what_an_entry_does_not_write() -> None:
    defaults = NodeSpec(pre_allocate=20, min_allocate=4)
    entry = validate(NodeSpec, {"min_allocate": 0})
    merged = entry.under(defaults)
    assert (merged.pre_allocate, merged.min_allocate) == (20, 0)  # an explicit 0 is written, and wins


def test_a_pool_spec_gives_the_node_spec_alone_shared_with_equal_specs() -> None:
    first = validate(PoolSpec, {"instanceID": "i-1", "minAllocate": 3}, by_alias=True).fields()
    second = validate(PoolSpec, {"instanceID": "i-2", "minAllocate": 3, "zone": "z"}, by_alias=True).fields()
    assert type(first) is NodeSpec and first == NodeSpec(min_allocate=3)
    assert first is second  # one object for every node asking the same
    assert shared(NodeSpec(min_allocate=3)) is first
    assert NodeSpec(min_allocate=4).fields() is not first


def test_watermarks_no_pool_can_honour_together_are_named() -> None:
    assert spec_problems(NodeSpec(min_allocate=40, max_allocate=10))[0][0] == "min_allocate"
    assert spec_problems(NodeSpec(pre_allocate=12, max_allocate=10))[0][0] == "pre_allocate"
    assert spec_problems(NodeSpec(max_allocate=4)) == []  # the default pre_allocate: a small pool
    assert spec_problems(NodeSpec(min_allocate=40)) == []  # no maximum: the instance's
    assert spec_problems(NodeSpec(min_allocate=10, max_allocate=10, pre_allocate=-3)) == []


def test_pools_are_read_as_written_even_when_their_watermarks_contradict() -> None:
    # The CRD admits them (changing it is a new CRD revision): a pool is reconciled, max_allocate wins.
    spec = validate(PoolSpec, {"instanceID": "i-1", "minAllocate": 40, "maxAllocate": 10}, by_alias=True)
    assert (spec.min_allocate, spec.max_allocate) == (40, 10)
