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

The subset handled is the structural one: ``type`` (object, array, string, integer, number, boolean),
``properties``, ``required``, ``additionalProperties`` (schema form, for maps), ``items``, ``enum``,
``minimum``/``maximum`` (with ``exclusiveMinimum``/``exclusiveMaximum``), ``multipleOf``, ``minLength``,
``maxLength``, ``pattern``, ``minItems``, ``maxItems``, ``minProperties``, ``maxProperties``,
``nullable``, ``default``, ``x-kubernetes-preserve-unknown-fields``, ``x-kubernetes-int-or-string``, the
string ``format`` values kube-openapi validates (:data:`FORMATS`; unknown formats are ignored, as
there), ``x-kubernetes-list-type`` ``set`` and ``map`` (with ``x-kubernetes-list-map-keys``: a duplicate
is ``spec.x[1]: Duplicate value: ...``), ``x-kubernetes-embedded-resource`` (``apiVersion`` and ``kind``
required, ``metadata`` as ObjectMeta), ``oneOf``/``anyOf``/``allOf``/``not`` (value validation only, as
structural schemas allow them), and CEL rules (``x-kubernetes-validations``, evaluated with cel-python:
``self``, ``oldSelf`` for transition rules on correlatable values, ``message``, ``messageExpression``,
``fieldPath``, ``reason``; a failure is ``spec: Invalid value: "object": <message>``).
:func:`unsupported_in_schema` finds what a CRD's schema asks for beyond that, so the CRD is refused when
written (501 naming the schema path and keyword) rather than stored and ignored. ``metadata`` is checked
against ObjectMeta's fields only (unknown ones are pruned and reported), as the real server does not
take it from the schema either. ``pattern`` uses Python's ``re`` where the real server uses RE2; the
common subset agrees.
"""

from __future__ import annotations

import base64
import binascii
import copy
import ipaddress
import json
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import date, datetime
from typing import Any, Final

import celpy.adapter
import celpy.celtypes
import celpy.evaluation

from eni_ipam_testkit.fake_kube import admission
from eni_ipam_testkit.fake_kube.resources import (
    JSON,
    FieldError,
    Printed,
    forbidden,
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


def check_custom_resource(obj: JSON, schema: Schema, old: JSON | None = None) -> Checked:
    """Prune and default ``obj`` in place against its version's ``openAPIV3Schema``; return findings.

    ``old``: the stored object an update replaces, for transition rules (``oldSelf``)."""
    found = Checked()
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        for key in [k for k in meta if k not in OBJECT_META_FIELDS]:
            found.unknown.append(f"metadata.{key}")
            del meta[key]
    body = {k: v for k, v in obj.items() if k not in _ENVELOPE}
    old_body = {k: v for k, v in old.items() if k not in _ENVELOPE} if old is not None else None
    checked = _walk(body, schema, "", found, old_body)
    if isinstance(checked, dict):
        # Root rules see the whole object (apiVersion, kind, metadata), as on a cluster.
        root: JSON = {**{k: obj[k] for k in _ENVELOPE if k in obj}, **checked}
        old_root: JSON | None = None
        if old is not None:
            old_root = {**{k: old[k] for k in _ENVELOPE if k in old}, **(old_body or {})}
        _rules(root, schema, "", found, old_root)
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


def _walk(value: Any, schema: Schema, path: str, found: Checked, old: Any = None) -> Any:
    """Return ``value`` pruned and defaulted; record violations of ``schema`` in ``found``.

    ``old``: the stored value at the same place (correlated through object fields, map values and
    ``map`` list keys), or None; the CEL rules of this node run on the result (at the root, the
    caller runs them with the envelope)."""
    if schema.get(_INT_OR_STRING):
        if _type_of(value) not in ("integer", "string"):
            _wrong_type(found, path, value, "int-or-string")
            return value
    else:
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
        value = _check_array(value, schema, path, found, old)
    elif isinstance(value, dict):
        value = _check_object(value, schema, path, found, old)
    _check_combinators(value, schema, path, found)
    if path:
        _rules(value, schema, path, found, old)
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
    check = FORMATS.get(str(schema.get("format") or ""))
    if check is not None and not _holds(check, value):
        _in_body(found, path, value, f"must be of type {schema['format']}: {go_quote(value)}")


def go_quote(value: str) -> str:
    """Go's ``%q`` of a string, for the common (printable) case."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _holds(check: Callable[[str], object], value: str) -> bool:
    try:
        return check(value) is not False
    except ValueError:
        return False


_HOSTNAME: Final = re.compile(r"^[a-zA-Z0-9](-?[a-zA-Z0-9]{0,62})?(\.[a-zA-Z0-9](-?[a-zA-Z0-9]{0,62})?)*\.?$")
_EMAIL: Final = re.compile(r"^[^@\s]+@[^@\s]+$")
_MAC: Final = re.compile(r"^([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}$|^([0-9A-Fa-f]{4}\.){2}[0-9A-Fa-f]{4}$")
_UUID: Final = r"^[0-9a-f]{8}-?[0-9a-f]{4}-?%s[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$"
_DURATION: Final = re.compile(
    r"^(\s*[-+]?\d+(\.\d+)?\s*(ns|us|µs|ms|s|sec|secs?|m|min|mins?|h|hr|hours?|d|days?|w|wk|weeks?)\s*)+$"
)
_DATE_TIME: Final = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _date_time(value: str) -> bool:
    return bool(_DATE_TIME.match(value)) and bool(
        datetime.fromisoformat(value.replace("z", "Z").replace("t", "T").replace(" ", "T"))
    )


def _base64(value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise ValueError(value) from None


def _mac(value: str) -> bool:
    return bool(_MAC.match(value))


def _uuid(version: str) -> Callable[[str], bool]:
    pattern = re.compile(_UUID % version, re.IGNORECASE)
    return lambda value: bool(pattern.match(value)) and bool(uuid.UUID(value))


FORMATS: Final[Mapping[str, Callable[[str], object]]] = {
    "date-time": _date_time,
    "datetime": _date_time,
    "date": lambda v: len(v) == 10 and date.fromisoformat(v),
    "duration": lambda v: bool(_DURATION.match(v)),
    "byte": _base64,
    "ipv4": lambda v: ipaddress.IPv4Address(v),
    "ipv6": lambda v: ipaddress.IPv6Address(v),
    "cidr": lambda v: "/" in v and ipaddress.ip_network(v, strict=False),
    "mac": _mac,
    "uuid": _uuid("[0-9a-f]"),
    "uuid3": _uuid("3"),
    "uuid4": _uuid("4"),
    "uuid5": _uuid("5"),
    "hostname": lambda v: len(v) <= 255 and bool(_HOSTNAME.match(v)),
    "email": lambda v: bool(_EMAIL.match(v)),
    "password": lambda v: True,
    "hexcolor": lambda v: bool(re.fullmatch(r"#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})", v)),
}
"""The string formats kube-openapi's registry validates, as this server checks them. A format the real
registry knows and this table lacks (``isbn``, ``creditcard``, ``ssn``, ``uri``, ``rgbcolor``,
``bsonobjectid``, ...) is refused when the CRD is written (:func:`unsupported_in_schema`); any other
format is ignored, as the real server ignores it."""
_UNCHECKED_FORMATS: Final = frozenset(
    {"isbn", "isbn10", "isbn13", "creditcard", "ssn", "uri", "rgbcolor", "bsonobjectid"}
)


def _check_array(value: list[Any], schema: Schema, path: str, found: Checked, old: Any = None) -> list[Any]:
    if "minItems" in schema and len(value) < schema["minItems"]:
        _in_body(found, path, len(value), f"should have at least {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        found.errors.append(too_many(path, len(value), int(schema["maxItems"])))
    items = schema.get("items")
    if not isinstance(items, Mapping):
        return value
    keys = [str(k) for k in schema.get("x-kubernetes-list-map-keys") or ()]
    olds: dict[Any, Any] = {}
    if schema.get("x-kubernetes-list-type") == "map" and isinstance(old, list):
        olds = {_key_of(item, keys): item for item in old if isinstance(item, dict)}
    result = []
    for i, item in enumerate(value):
        before = olds.get(_key_of(item, keys)) if olds and isinstance(item, dict) else None
        result.append(_walk_member(item, items, f"{path}[{i}]", found, before))
    _check_list_type(result, schema, path, found, keys)
    return result


def _key_of(item: Mapping[str, Any], keys: list[str]) -> str:
    return json.dumps([item.get(k) for k in keys], sort_keys=True)


def _check_list_type(value: list[Any], schema: Schema, path: str, found: Checked, keys: list[str]) -> None:
    """``set`` and ``map`` lists: no two items (or key tuples) alike, as apiextensions' listtype check."""
    kind = schema.get("x-kubernetes-list-type")
    seen: set[str] = set()
    for i, item in enumerate(value):
        if kind == "set":
            key, shown = json.dumps(item, sort_keys=True), item
        elif kind == "map" and isinstance(item, dict):
            key = _key_of(item, keys)
            shown = Printed(
                "map[string]interface {}{"
                + ", ".join(f"{go_quote(k)}:{_go_literal(item.get(k))}" for k in keys if k in item)
                + "}"
            )
        else:
            return
        if key in seen:
            found.errors.append(FieldError("FieldValueDuplicate", f"{path}[{i}]", shown))
        seen.add(key)


def _go_literal(value: Any) -> str:
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return _number(value) if isinstance(value, (int, float)) else repr(value)


def _check_combinators(value: Any, schema: Schema, path: str, found: Checked) -> None:
    """``allOf``/``anyOf``/``oneOf``/``not``: value validations of the same value (structural schemas
    allow nothing else in them), worded as kube-openapi's composite errors."""

    def errors_of(sub: Any) -> list[FieldError]:
        trial = Checked()
        if isinstance(sub, Mapping):
            # Value validation only: nothing is pruned from the value the sub-schema judges.
            _walk(copy.deepcopy(value), {_PRESERVE: True, **sub}, path, trial)
        return trial.errors

    for sub in schema.get("allOf") or ():
        found.errors.extend(errors_of(sub))
    shown = path or "<root>"
    if schema.get("anyOf") and all(errors_of(sub) for sub in schema["anyOf"]):
        _in_body(found, path, value, "must validate at least one schema (anyOf)")
    if schema.get("oneOf") and sum(not errors_of(sub) for sub in schema["oneOf"]) != 1:
        found.errors.append(
            invalid(path, value, f"{shown} in body must validate one and only one schema (oneOf)")
        )
    if isinstance(schema.get("not"), Mapping) and not errors_of(schema["not"]):
        found.errors.append(invalid(path, value, f"{shown} in body must not validate the schema (not)"))


def _walk_member(value: Any, schema: Schema, path: str, found: Checked, old: Any = None) -> Any:
    if value is None and not schema.get("nullable"):
        # A null in a non-nullable position is a type error inside lists (it cannot be pruned).
        found.errors.append(
            type_invalid(
                path, "null", f'{path} in body must be of type {schema.get("type", "object")}: "null"'
            )
        )
        return value
    return _walk(value, schema, path, found, old)


def _check_object(value: JSON, schema: Schema, path: str, found: Checked, old: Any = None) -> JSON:
    properties: Mapping[str, Schema] = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    preserve = bool(schema.get(_PRESERVE)) or additional is True
    embedded = bool(schema.get("x-kubernetes-embedded-resource"))
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        _in_body(found, path, len(value), f"should have at least {schema['minProperties']} properties")
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        found.errors.append(too_many(path, len(value), int(schema["maxProperties"])))
    olds: Mapping[str, Any] = old if isinstance(old, dict) else {}
    result: JSON = {}
    for key, member in value.items():
        member_schema = properties.get(key)
        if member_schema is None and isinstance(additional, Mapping):
            member_schema = additional
        if embedded and key in _ENVELOPE and key not in properties:
            result[key] = _embedded_envelope(key, member, _join(path, key), found)
            continue
        if member_schema is None:
            if preserve:
                result[key] = member
            else:
                found.unknown.append(_join(path, key))
            continue
        if member is None and not member_schema.get("nullable"):
            continue  # a null in a non-nullable field is pruned (and may be defaulted below)
        result[key] = (
            member if member is None else _walk(member, member_schema, _join(path, key), found, olds.get(key))
        )
    for key, member_schema in properties.items():
        if key not in result and "default" in member_schema:
            result[key] = _walk(
                copy.deepcopy(member_schema["default"]), member_schema, _join(path, key), found
            )
    for key in schema.get("required") or ():
        if key not in result:
            found.errors.append(required(_join(path, key)))
    if embedded:
        for key in ("apiVersion", "kind"):
            if not result.get(key):
                found.errors.append(required(_join(path, key), "must not be empty"))
    return result


def _embedded_envelope(key: str, value: Any, path: str, found: Checked) -> Any:
    """An embedded resource's apiVersion and kind are strings, its metadata is ObjectMeta."""
    if key != "metadata":
        if not isinstance(value, str):
            _wrong_type(found, path, value, "string")
        return value
    if not isinstance(value, dict):
        _wrong_type(found, path, value, "object")
        return value
    for field in [k for k in value if k not in OBJECT_META_FIELDS]:
        found.unknown.append(_join(path, field))
    return {k: v for k, v in value.items() if k in OBJECT_META_FIELDS}


# -- CEL rules (x-kubernetes-validations) ----------------------------------------------------------

RULE_VARIABLES: Final = frozenset({"self", "oldSelf"})
_OLD_SELF: Final = re.compile(r"\boldSelf\b")


def is_transition_rule(rule: str) -> bool:
    return _OLD_SELF.search(rule) is not None


def _rules(value: Any, schema: Schema, path: str, found: Checked, old: Any) -> None:
    """Evaluate this node's rules on ``value``; a transition rule only where an old value correlates."""
    rules = schema.get("x-kubernetes-validations") or ()
    if not rules or value is None:
        return
    activation = {"self": celpy.adapter.json_to_cel(value)}
    if old is not None:
        activation["oldSelf"] = celpy.adapter.json_to_cel(old)
    type_name = (
        "object" if schema.get(_INT_OR_STRING) is None and isinstance(value, dict) else _type_of(value)
    )
    for rule in rules:
        if not isinstance(rule, Mapping):
            continue
        expression = str(rule.get("rule") or "")
        if is_transition_rule(expression) and old is None:
            continue
        where = _rule_path(path, str(rule.get("fieldPath") or ""))
        result = admission.evaluate(expression, activation, RULE_VARIABLES)
        why = admission.failed(result)
        if why is not None:
            found.errors.append(invalid(where, type_name, why))
            continue
        if result:
            continue
        found.errors.append(_rule_error(rule, where, type_name, _rule_message(rule, activation)))


def _rule_message(rule: Mapping[str, Any], activation: Mapping[str, Any]) -> str:
    if rule.get("messageExpression"):
        value = admission.evaluate(str(rule["messageExpression"]), activation, RULE_VARIABLES)
        if isinstance(value, str) and value.strip() and "\n" not in value:
            return str(value)
    if (rule.get("message") or "").strip():
        return str(rule["message"])
    return f"failed rule: {str(rule.get('rule') or '').strip()}"


def _rule_error(rule: Mapping[str, Any], path: str, type_name: str, message: str) -> FieldError:
    reason = rule.get("reason")
    if reason == "FieldValueForbidden":
        return forbidden(path, message)
    if reason == "FieldValueRequired":
        return required(path, message)
    if reason == "FieldValueDuplicate":
        return FieldError("FieldValueDuplicate", path, type_name)
    return invalid(path, type_name, message)


def _rule_path(path: str, field_path: str) -> str:
    """``fieldPath`` (``.a.b``, ``.m['k.x']``) below ``path``, printed as field.Path prints it."""
    if not field_path:
        return path
    text = re.sub(r"\['([^']*)'\]", r"[\1]", field_path).lstrip(".")
    if not path:
        return text
    return f"{path}{text}" if text.startswith("[") else f"{path}.{text}"


# -- what a CRD's schema asks for, checked when the CRD is written ---------------------------------

_KNOWN: Final = frozenset(
    {
        "type", "format", "title", "description", "default", "example", "externalDocs", "nullable",
        "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength",
        "maxLength", "pattern", "minItems", "maxItems", "minProperties", "maxProperties", "required",
        "properties", "additionalProperties",
        "items", "oneOf", "anyOf", "allOf", "not", _PRESERVE, _INT_OR_STRING,
        "x-kubernetes-embedded-resource", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type", "x-kubernetes-validations",
    }
)  # fmt: skip


def _nodes(schema: Any, path: str, correlated: bool = True) -> Iterator[tuple[str, Schema, bool]]:
    """``(schema path, node, correlatable)`` for every node (the path as the real server prints it)."""
    if not isinstance(schema, Mapping):
        return
    yield path, schema, correlated
    for key, sub in (schema.get("properties") or {}).items():
        yield from _nodes(sub, f"{path}.properties[{key}]", correlated)
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from _nodes(schema["additionalProperties"], f"{path}.additionalProperties", correlated)
    if isinstance(schema.get("items"), Mapping):
        by_key = correlated and schema.get("x-kubernetes-list-type") == "map"
        yield from _nodes(schema["items"], f"{path}.items", by_key)
    for keyword in ("allOf", "anyOf", "oneOf"):
        for index, sub in enumerate(schema.get(keyword) or ()):
            yield from _nodes(sub, f"{path}.{keyword}[{index}]", correlated)
    if isinstance(schema.get("not"), Mapping):
        yield from _nodes(schema["not"], f"{path}.not", correlated)


def unsupported_in_schema(schema: Schema, path: str) -> tuple[list[FieldError], str | None]:
    """Field errors a real server gives this schema's rules (compile errors, uncorrelatable ``oldSelf``),
    and the first thing this server cannot check (``<path>: <keyword>``), or None."""
    errors: list[FieldError] = []
    for where, node, correlated in _nodes(schema, path):
        for keyword in node:
            if keyword not in _KNOWN:
                return errors, f"{where}: {keyword}"
        if str(node.get("format") or "") in _UNCHECKED_FORMATS:
            return errors, f"{where}: format {node['format']}"
        for index, rule in enumerate(node.get("x-kubernetes-validations") or ()):
            field = f"{where}.x-kubernetes-validations[{index}]"
            if not isinstance(rule, Mapping) or not isinstance(rule.get("rule"), str):
                errors.append(required(f"{field}.rule"))
                continue
            if rule.get("optionalOldSelf"):
                return errors, f"{field}.optionalOldSelf"
            for key in ("rule", "messageExpression"):
                expression = rule.get(key)
                if not isinstance(expression, str):
                    continue
                try:
                    admission.compile_expression(expression, RULE_VARIABLES)
                except admission.CompileError as e:
                    errors.append(invalid(f"{field}.{key}", expression, str(e)))
                except admission.Unsupported as e:
                    return errors, f"{field}.{key}: {e}"
            if not correlated and is_transition_rule(rule["rule"]):
                errors.append(
                    invalid(
                        f"{field}.rule",
                        rule["rule"],
                        "oldSelf cannot be used on the uncorrelatable portion of the schema",
                    )
                )
            reason = rule.get("reason")
            reasons = [
                "FieldValueDuplicate",
                "FieldValueForbidden",
                "FieldValueInvalid",
                "FieldValueRequired",
            ]
            if reason is not None and reason not in reasons:
                errors.append(not_supported(f"{field}.reason", reason, reasons))
    return errors, None
