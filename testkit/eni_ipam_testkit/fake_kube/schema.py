"""Structural-schema pruning, defaulting and validation of custom resources.

On every create, update and patch of a custom resource the store runs :func:`check_custom_resource`
on the candidate object, in the real server's order: prune unknown fields, apply ``default`` values,
then validate. Pruned fields are returned as paths (``spec.x``, ``metadata.foo``), which the server
turns into ``Warning`` headers or, with ``fieldValidation=Strict``, a refusal, as the real server
does. A validation failure yields :class:`~eni_ipam_testkit.fake_kube.resources.FieldError` values
worded like the real server's (apiextensions-apiserver's mapping of kube-openapi errors to field
errors), e.g. ``spec.minAllocate: Invalid value: -1: spec.minAllocate in body should be greater than
or equal to 0`` or ``spec.instanceID: Too long: may not be more than 256 bytes``, and the store
rejects the write with a 422 ``Invalid`` and changes nothing.

The subset handled is the structural one: ``type`` (object, array, string, integer, number,
boolean), ``properties``, ``required``, ``additionalProperties`` (schema form, for maps),
``items``, ``enum``, ``minimum``/``maximum`` (with ``exclusiveMinimum``/``exclusiveMaximum``),
``multipleOf``, ``minLength``, ``maxLength``, ``pattern``, ``minItems``, ``maxItems``, ``nullable``,
``default``, ``x-kubernetes-preserve-unknown-fields`` and ``x-kubernetes-int-or-string``. Not
handled: CEL rules (``x-kubernetes-validations``), ``format``, list types and map keys
(``x-kubernetes-list-type``), ``x-kubernetes-embedded-resource``, ``oneOf``/``anyOf``/``allOf``/
``not``. ``metadata`` is checked against ObjectMeta's fields only (unknown ones are pruned and
reported), as the real server does not take it from the schema either. ``pattern`` uses Python's
``re`` where the real server uses RE2; the common subset agrees.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any, Final

from eni_ipam_testkit.fake_kube.resources import (
    JSON,
    FieldError,
    invalid,
    not_supported,
    required,
    too_long,
    too_many,
    type_invalid,
)

Schema = Mapping[str, Any]

# Fields the server owns on every object; the schema never prunes or validates them.
_ENVELOPE: Final = ("apiVersion", "kind", "metadata")
_PRESERVE: Final = "x-kubernetes-preserve-unknown-fields"
_INT_OR_STRING: Final = "x-kubernetes-int-or-string"
OBJECT_META_FIELDS: Final = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)


class Checked:
    """What a check found: field errors (the write is refused) and pruned paths (it is not)."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []
        self.unknown: list[str] = []


def check_custom_resource(obj: JSON, schema: Schema) -> Checked:
    """Prune and default ``obj`` in place against its version's ``openAPIV3Schema``; return findings."""
    found = Checked()
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        for key in [k for k in meta if k not in OBJECT_META_FIELDS]:
            found.unknown.append(f"metadata.{key}")
            del meta[key]
    body = {k: v for k, v in obj.items() if k not in _ENVELOPE}
    checked = _walk(body, schema, "", found)
    for key in [k for k in obj if k not in _ENVELOPE]:
        del obj[key]
    if isinstance(checked, dict):
        obj.update(checked)
    return found


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _type_matches(value: Any, expected: str) -> bool:
    actual = _type_of(value)
    return actual == expected or (expected == "number" and actual == "integer")


def _in_body(found: Checked, path: str, value: Any, detail: str) -> None:
    """The default mapping: ``path: Invalid value: <value>: path in body <detail>``."""
    found.errors.append(invalid(path, value, f"{path} in body {detail}"))


def _wrong_type(found: Checked, path: str, value: Any, expected: str) -> None:
    actual = _type_of(value)
    found.errors.append(type_invalid(path, actual, f'{path} in body must be of type {expected}: "{actual}"'))


def _walk(value: Any, schema: Schema, path: str, found: Checked) -> Any:
    """Return ``value`` pruned and defaulted; record violations of ``schema`` in ``found``."""
    if schema.get(_INT_OR_STRING):
        if _type_of(value) not in ("integer", "string"):
            _wrong_type(found, path, value, "int-or-string")
        return value
    expected = schema.get("type")
    if expected is not None and not _type_matches(value, expected):
        _wrong_type(found, path, value, expected)
        return value
    if "enum" in schema and value not in schema["enum"]:
        found.errors.append(not_supported(path, value, list(schema["enum"])))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(value, schema, path, found)
    elif isinstance(value, str):
        _check_string(value, schema, path, found)
    elif isinstance(value, list):
        return _check_array(value, schema, path, found)
    elif isinstance(value, dict):
        return _check_object(value, schema, path, found)
    return value


def _check_number(value: float, schema: Schema, path: str, found: Checked) -> None:
    if "minimum" in schema:
        low = schema["minimum"]
        if schema.get("exclusiveMinimum") and value <= low:
            _in_body(found, path, value, f"should be greater than {_number(low)}")
        elif value < low:
            _in_body(found, path, value, f"should be greater than or equal to {_number(low)}")
    if "maximum" in schema:
        high = schema["maximum"]
        if schema.get("exclusiveMaximum") and value >= high:
            _in_body(found, path, value, f"should be less than {_number(high)}")
        elif value > high:
            _in_body(found, path, value, f"should be less than or equal to {_number(high)}")
    step = schema.get("multipleOf")
    if step and abs(value / step - round(value / step)) > 1e-9:
        _in_body(found, path, value, f"should be a multiple of {_number(step)}")


def _number(value: float) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _check_string(value: str, schema: Schema, path: str, found: Checked) -> None:
    if "minLength" in schema and len(value) < schema["minLength"]:
        _in_body(found, path, value, f"should be at least {schema['minLength']} chars long")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        found.errors.append(too_long(path, int(schema["maxLength"])))
    if "pattern" in schema and re.search(schema["pattern"], value) is None:
        _in_body(found, path, value, f"should match '{schema['pattern']}'")


def _check_array(value: list[Any], schema: Schema, path: str, found: Checked) -> list[Any]:
    if "minItems" in schema and len(value) < schema["minItems"]:
        _in_body(found, path, len(value), f"should have at least {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        found.errors.append(too_many(path, len(value), int(schema["maxItems"])))
    items = schema.get("items")
    if not isinstance(items, Mapping):
        return value
    return [_walk_member(item, items, f"{path}[{i}]", found) for i, item in enumerate(value)]


def _walk_member(value: Any, schema: Schema, path: str, found: Checked) -> Any:
    if value is None and not schema.get("nullable"):
        # A null in a non-nullable position is a type error inside lists (it cannot be pruned).
        found.errors.append(
            type_invalid(
                path, "null", f'{path} in body must be of type {schema.get("type", "object")}: "null"'
            )
        )
        return value
    return _walk(value, schema, path, found)


def _check_object(value: JSON, schema: Schema, path: str, found: Checked) -> JSON:
    properties: Mapping[str, Schema] = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    preserve = bool(schema.get(_PRESERVE)) or additional is True
    result: JSON = {}
    for key, member in value.items():
        member_schema = properties.get(key)
        if member_schema is None and isinstance(additional, Mapping):
            member_schema = additional
        if member_schema is None:
            if preserve:
                result[key] = member
            else:
                found.unknown.append(_join(path, key))
            continue
        if member is None and not member_schema.get("nullable"):
            continue  # a null in a non-nullable field is pruned (and may be defaulted below)
        result[key] = member if member is None else _walk(member, member_schema, _join(path, key), found)
    for key, member_schema in properties.items():
        if key not in result and "default" in member_schema:
            result[key] = _walk(
                copy.deepcopy(member_schema["default"]), member_schema, _join(path, key), found
            )
    for key in schema.get("required") or ():
        if key not in result:
            found.errors.append(required(_join(path, key)))
    return result
