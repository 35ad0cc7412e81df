"""A pool's spec validated once per version: what :class:`~eni_ipam.kube.delivery.ParsedSpecs` reuses,
what it validates again, and that a refusal stays the same refusal."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from eni_ipam.errors import ConfigError
from eni_ipam.kube import resources
from eni_ipam.kube.delivery import ParsedSpecs
from eni_ipam.kube.projection import PoolInfo, project_pool


def pool(version: int, generation: int = 1, status: dict | None = None, **spec: Any) -> PoolInfo:
    """Pool ``p1`` as one event brings it (a fresh projection: a new spec object every time)."""
    meta = {"name": "p1", "resourceVersion": str(version), "generation": generation}
    return project_pool({"metadata": meta, "spec": {"instanceID": "i-1", **spec}, "status": status or {}})


def test_an_unchanged_spec_is_validated_once_however_many_events_bring_it(
    spec_validations: list[str],
) -> None:
    specs = ParsedSpecs()
    first = specs.read(pool(1, preAllocate=4))
    for version in range(2, 12):  # status writes and agent reports: new versions, the same generation
        assert specs.read(pool(version, status={"used": [f"10.0.0.{version}"]}, preAllocate=4)) == first
    assert len(spec_validations) == 1
    assert first[0] == "i-1" and first[1].pre_allocate == 4
    assert first[1] is resources.instance_and_spec(pool(1, preAllocate=4))[1]  # one object for equal specs


def test_a_changed_spec_is_validated_again(spec_validations: list[str]) -> None:
    specs = ParsedSpecs()
    specs.read(pool(1, preAllocate=4))
    assert specs.read(pool(2, generation=2, preAllocate=5))[1].pre_allocate == 5
    assert specs.read(pool(3, generation=2, preAllocate=6))[1].pre_allocate == 6  # no generation moved
    assert len(spec_validations) == 3


def test_a_spec_made_invalid_is_refused_naming_the_field_at_every_read_validated_once(
    spec_validations: list[str],
) -> None:
    specs = ParsedSpecs()
    specs.read(pool(1, maxAboveWatermark=2))
    with pytest.raises(ConfigError) as alone:
        resources.spec_from_pool(pool(2, generation=2, maxAboveWatermark=-5))
    spec_validations.clear()
    for version in (2, 3, 4):
        with pytest.raises(ConfigError) as caught:
            specs.read(pool(version, generation=2, maxAboveWatermark=-5))
        assert caught.value.field == "enipools/p1.spec.maxAboveWatermark"
        assert str(caught.value) == str(alone.value)
    assert len(spec_validations) == 1
    assert specs.read(pool(5, generation=3, maxAboveWatermark=3))[1].max_above_watermark == 3


def test_a_new_generation_is_validated_again_even_when_python_finds_the_specs_equal(
    spec_validations: list[str],
) -> None:
    specs = ParsedSpecs()
    specs.read(pool(1, minAllocate=1))
    # 1 and true are equal in Python; the API server moved the generation, and the validator refuses
    # a boolean where a count belongs.
    with pytest.raises(ConfigError, match="minAllocate"):
        specs.read(pool(2, generation=2, minAllocate=True))
    assert len(spec_validations) == 2


def test_a_pool_made_anew_under_its_name_is_validated_again(spec_validations: list[str]) -> None:
    specs = ParsedSpecs()
    specs.read(pool(1, preAllocate=4))
    again = dataclasses.replace(pool(9, preAllocate=4), spec={"instanceID": "i-2", "preAllocate": 4})
    assert specs.read(again)[0] == "i-2"  # generation 1 again, another spec
    specs.forget("p1")
    specs.read(again)
    assert len(spec_validations) == 3


def test_the_spec_kept_is_the_latest_events_not_an_older_copy() -> None:
    specs = ParsedSpecs()
    specs.read(pool(1, preAllocate=4))
    latest = pool(2, preAllocate=4)
    specs.read(latest)
    assert specs._kept["p1"].raw is latest.spec
