"""The node spec is declared once: the model people write, the core's dataclass and the CRD agree."""

from __future__ import annotations

import dataclasses

import pytest

from eni_ipam.core.config import validate
from eni_ipam.core.errors import ConfigError
from eni_ipam.core.model import NodeSpec
from eni_ipam.core.spec import NodeSpecFields, camel
from eni_ipam.kube.resources import PoolSpec
from tests.deploy.test_crd import INFORMATIONAL, schema


def test_the_model_and_the_core_dataclass_have_the_same_fields_and_defaults() -> None:
    dataclass_fields = {f.name: f.default for f in dataclasses.fields(NodeSpec)}
    del dataclass_fields["name"], dataclass_fields["instance_id"]
    model = NodeSpecFields()
    assert {name: getattr(model, name) for name in NodeSpecFields.model_fields} == dataclass_fields


def test_the_pool_keys_are_the_crds_spec_properties() -> None:
    properties = set(schema()["properties"]["spec"]["properties"])
    aliases = {field.alias for field in PoolSpec.model_fields.values()}
    assert aliases == properties - INFORMATIONAL


@pytest.mark.parametrize(("field", "key"), [("min_allocate", "minAllocate"), ("subnet_ids", "subnetIDs")])
def test_camel_case_names_follow_the_crd(field: str, key: str) -> None:
    assert camel(field) == key


def test_files_write_snake_case_and_pools_camel_case() -> None:
    assert validate(NodeSpecFields, {"min_allocate": 2}).min_allocate == 2
    assert validate(NodeSpecFields, {"minAllocate": 2}, by_alias=True).min_allocate == 2
    with pytest.raises(ConfigError) as caught:
        validate(NodeSpecFields, {"minAllocate": 2})
    assert caught.value.field == "minAllocate"


def test_defaults_fill_in_only_what_an_entry_does_not_write() -> None:
    defaults = NodeSpecFields(pre_allocate=20, min_allocate=4)
    entry = validate(NodeSpecFields, {"min_allocate": 0})
    merged = entry.under(defaults)
    assert (merged.pre_allocate, merged.min_allocate) == (20, 0)  # an explicit 0 is written, and wins
