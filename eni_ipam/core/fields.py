"""Field types of the domain's settings: cloud tags and token buckets, read with the configuration
layer's vocabulary (:mod:`eni_ipam.config.schema`) into the domain's own values
(:class:`~eni_ipam.core.model.Tags`, :class:`~eni_ipam.core.ratelimit.Bucket`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, PlainSerializer, TypeAdapter, ValidationError

from eni_ipam.config.schema import ConfigModel, PositiveNumber, nested, short
from eni_ipam.core.model import Tags, frozen_tags
from eni_ipam.core.ratelimit import Bucket


def _loose_tags(value: Any) -> Any:
    """Tag values written as numbers (``{rack: 12}``) are read as their text, as YAML authors mean."""
    if not isinstance(value, Mapping) or isinstance(value, Tags):
        return value
    return {
        k: str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v for k, v in value.items()
    }


_STRING_MAP: TypeAdapter[dict[str, str]] = TypeAdapter(dict[str, str], config=ConfigDict(strict=True))


def _tags(value: Any) -> Tags:
    if isinstance(value, Tags):
        return value
    try:
        return frozen_tags(_STRING_MAP.validate_python(value))
    except ValidationError as exc:
        raise nested(exc, data=value) from None


_AS_DICT = PlainSerializer(dict, return_type=dict[str, str])
TagMap = Annotated[Tags, BeforeValidator(_tags), _AS_DICT]
"""String → string, kept as an immutable :class:`~eni_ipam.core.model.Tags`."""
LooseTagMap = Annotated[Tags, BeforeValidator(_tags), BeforeValidator(_loose_tags), _AS_DICT]
"""A :data:`TagMap` whose number values are read as text (scenario files, node specs)."""


class BucketModel(ConfigModel):
    burst: PositiveNumber
    """Tokens the bucket holds when full."""
    refill: PositiveNumber
    """Tokens added per second."""


def _buckets(value: Any) -> Mapping[str, Bucket]:
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping of names to {{burst, refill}}, got {short(value)}")
    out: dict[str, Bucket] = {}
    for name, spec in value.items():
        if isinstance(spec, Bucket):  # already read (a model copied with changes)
            out[name] = spec
            continue
        try:
            bucket = BucketModel.model_validate(spec)
        except ValidationError as exc:
            raise nested(exc, prefix=str(name), data=spec) from None
        out[name] = Bucket(burst=bucket.burst, refill=bucket.refill)
    return MappingProxyType(out)


def _bucket_dicts(value: Mapping[str, Bucket]) -> dict[str, dict[str, float]]:
    return {k: {"burst": b.burst, "refill": b.refill} for k, b in value.items()}


Buckets = Annotated[
    Mapping[str, Bucket],
    BeforeValidator(_buckets),
    PlainSerializer(_bucket_dicts, return_type=dict[str, dict[str, float]]),
]
"""Token buckets by name, ``{name: {burst: N, refill: N}}``, read as :class:`Bucket`s."""

EMPTY_BUCKETS: Mapping[str, Bucket] = MappingProxyType({})
