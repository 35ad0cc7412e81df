"""Structural-schema pruning, defaulting and validation of custom resources.

On every create, update and patch of a custom resource the store runs :func:`check_custom_resource`
on the candidate object, in the real server's order: prune unknown fields, apply ``default`` values,
then validate. Pruning is silent (real behaviour for structural schemas); a validation failure
yields ``(field path, message)`` causes worded like the real server's, e.g.
``spec.minAllocate: Invalid value: -1: spec.minAllocate in body should be greater than or equal to 0``,
and the store rejects the write with a 422 ``Invalid`` and changes nothing.

The subset handled is the structural one: ``type`` (object, array, string, integer, number,
boolean), ``properties``, ``required``, ``additionalProperties`` (schema form, for maps),
``items``, ``enum``, ``minimum``/``maximum`` (with ``exclusiveMinimum``/``exclusiveMaximum``),
``multipleOf``, ``minLength``, ``maxLength``, ``pattern``, ``minItems``, ``maxItems``, ``nullable``,
``default``, ``x-kubernetes-preserve-unknown-fields`` and ``x-kubernetes-int-or-string``. Not
handled: CEL rules (``x-kubernetes-validations``), ``format``, list types and map keys
(``x-kubernetes-list-type``), ``x-kubernetes-embedded-resource``, ``oneOf``/``anyOf``/``allOf``/
``not``, and validation of ``metadata`` (which the real server does not take from the schema either).
``pattern`` uses Python's ``re`` where the real server uses RE2; the common subset agrees.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from eni_ipam.testing.fake_kube.resources import JSON

Schema = Mapping[str, Any]
Causes = list[tuple[str, str]]

# Fields the server owns on every object; the schema never prunes or validates them.
_ENVELOPE: Final = ("apiVersion", "kind", "metadata")
_PRESERVE: Final = "x-kubernetes-preserve-unknown-fields"
_INT_OR_STRING: Final = "x-kubernetes-int-or-string"


def check_custom_resource(obj: JSON, schema: Schema) -> Causes:
    """Prune and default ``obj`` in place against its version's ``openAPIV3Schema``; return violations."""
    causes: Causes = []
    body = {k: v for k, v in obj.items() if k not in _ENVELOPE}
    checked = _walk(body, schema, "", causes)
    for key in [k for k in obj if k not in _ENVELOPE]:
        del obj[key]
    if isinstance(checked, dict):
        obj.update(checked)
    return causes


def _render(value: Any) -> str:
    """A value as the real server's field errors print it (strings quoted, numbers bare)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


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


def _invalid(causes: Causes, path: str, value: Any, detail: str) -> None:
    causes.append((path, f"{path}: Invalid value: {_render(value)}: {path} in body {detail}"))


def _walk(value: Any, schema: Schema, path: str, causes: Causes) -> Any:
    """Return ``value`` pruned and defaulted; append violations of ``schema`` to ``causes``."""
    if schema.get(_INT_OR_STRING):
        if _type_of(value) not in ("integer", "string"):
            _invalid(causes, path, _type_of(value), f'must be of type int-or-string: "{_type_of(value)}"')
        return value
    expected = schema.get("type")
    if expected is not None and not _type_matches(value, expected):
        _invalid(causes, path, _type_of(value), f'must be of type {expected}: "{_type_of(value)}"')
        return value
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_render(v) for v in schema["enum"])
        causes.append((path, f"{path}: Unsupported value: {_render(value)}: supported values: {supported}"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(value, schema, path, causes)
    elif isinstance(value, str):
        _check_string(value, schema, path, causes)
    elif isinstance(value, list):
        return _check_array(value, schema, path, causes)
    elif isinstance(value, dict):
        return _check_object(value, schema, path, causes)
    return value


def _check_number(value: float, schema: Schema, path: str, causes: Causes) -> None:
    if "minimum" in schema:
        low = schema["minimum"]
        if schema.get("exclusiveMinimum") and value <= low:
            _invalid(causes, path, value, f"should be greater than {_render(low)}")
        elif value < low:
            _invalid(causes, path, value, f"should be greater than or equal to {_render(low)}")
    if "maximum" in schema:
        high = schema["maximum"]
        if schema.get("exclusiveMaximum") and value >= high:
            _invalid(causes, path, value, f"should be less than {_render(high)}")
        elif value > high:
            _invalid(causes, path, value, f"should be less than or equal to {_render(high)}")
    step = schema.get("multipleOf")
    if step and abs(value / step - round(value / step)) > 1e-9:
        _invalid(causes, path, value, f"should be a multiple of {_render(step)}")


def _check_string(value: str, schema: Schema, path: str, causes: Causes) -> None:
    if "minLength" in schema and len(value) < schema["minLength"]:
        _invalid(causes, path, value, f"should be at least {schema['minLength']} chars long")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        _invalid(causes, path, value, f"should be at most {schema['maxLength']} chars long")
    if "pattern" in schema and re.search(schema["pattern"], value) is None:
        _invalid(causes, path, value, f"should match '{schema['pattern']}'")


def _check_array(value: list[Any], schema: Schema, path: str, causes: Causes) -> list[Any]:
    if "minItems" in schema and len(value) < schema["minItems"]:
        _invalid(causes, path, len(value), f"should have at least {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        _invalid(causes, path, len(value), f"should have at most {schema['maxItems']} items")
    items = schema.get("items")
    if not isinstance(items, Mapping):
        return value
    return [_walk_member(item, items, f"{path}[{i}]", causes) for i, item in enumerate(value)]


def _walk_member(value: Any, schema: Schema, path: str, causes: Causes) -> Any:
    if value is None and not schema.get("nullable"):
        # A null in a non-nullable position is a type error inside lists (it cannot be pruned).
        _invalid(causes, path, "null", f'must be of type {schema.get("type", "object")}: "null"')
        return value
    return _walk(value, schema, path, causes)


def _check_object(value: JSON, schema: Schema, path: str, causes: Causes) -> JSON:
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
            continue  # pruned: unknown fields are dropped silently
        if member is None and not member_schema.get("nullable"):
            continue  # a null in a non-nullable field is pruned (and may be defaulted below)
        result[key] = member if member is None else _walk(member, member_schema, _join(path, key), causes)
    for key, member_schema in properties.items():
        if key not in result and "default" in member_schema:
            result[key] = _walk(
                copy.deepcopy(member_schema["default"]), member_schema, _join(path, key), causes
            )
    for key in schema.get("required") or ():
        if key not in result:
            causes.append((_join(path, key), f"{_join(path, key)}: Required value"))
    return result
