"""What the real server refuses in every object before storing it: badly typed built-in bodies, bad metadata.

Built-in kinds: the real server decodes a body into its Go struct, so a value of the wrong JSON type
(``replicas: "three"``) never reaches storage. :func:`decode_error` walks a candidate object along
Kubernetes' own OpenAPI definitions (:func:`~eni_ipam_testkit.fake_kube.openapi.builtin_definitions`)
and returns the error Go's JSON decoder (sigs.k8s.io/json) would give first, in its words::

    json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32

(the innermost struct's name, the JSON path without list indices, the Go type of the value), or a
custom decoder's own message: a Quantity that does not parse, a time that is not RFC 3339, bytes that
are not base64. The store answers it as the real handlers do: 400 ``<Kind> in version "v1" cannot be
handled as a <Kind>: ...`` for a create or an update, 422 ``patch: Invalid value: ...`` for a patch.
JSON ``null`` is accepted anywhere (Go leaves the field unset), as are schemas without a type
(``RawExtension``, a CRD's ``JSON``).

Every kind: :func:`metadata_errors` is apimachinery's ``ValidateObjectMetaAccessor`` (create) and
``ValidateObjectMetaAccessorUpdate`` (update) for the fields the fake holds: the name (a DNS subdomain,
a DNS label for Namespaces, a DNS-1035 label for Services, a path segment for RBAC objects), the
generateName prefix, label keys and values, annotation keys and their 256 KiB total, finalizer names.
The messages are apimachinery's (``metadata.labels: Invalid value: "x...": must be no more than 63
characters``, ``metadata.annotations: Too long: may not be more than 262144 bytes``).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from eni_ipam_testkit.fake_kube.openapi import builtin_definitions
from eni_ipam_testkit.fake_kube.resources import JSON, FieldError, invalid, required, too_long

# -- names, labels, annotations (k8s.io/apimachinery/pkg/util/validation) ------------------------------

_QNAME: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character"
)
_LABEL_VALUE: Final = f"({_QNAME})?"
_LABEL_VALUE_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character"
)
_DNS1123_LABEL: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_MSG: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN: Final = _DNS1123_LABEL + "(\\." + _DNS1123_LABEL + ")*"
_DNS1123_SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character"
)
_DNS1035_LABEL: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1035_LABEL_MSG: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character"
)
TOTAL_ANNOTATION_SIZE: Final = 256 * 1024
"""apimachinery's TotalAnnotationSizeLimitB: keys and values of one object's annotations, in bytes."""


def _full(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern, value) is not None


def _regex_error(message: str, pattern: str, *examples: str) -> str:
    if not examples:
        return f"{message} (regex used for validation is '{pattern}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{pattern}')"


def _max_len(limit: int) -> str:
    return f"must be no more than {limit} characters"


def dns1123_subdomain(value: str) -> list[str]:
    errors = [_max_len(253)] if len(value) > 253 else []
    if not _full(_DNS1123_SUBDOMAIN, value):
        errors.append(_regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN, "example.com"))
    return errors


def dns1123_label(value: str) -> list[str]:
    errors = [_max_len(63)] if len(value) > 63 else []
    if not _full(_DNS1123_LABEL, value):
        if _full(_DNS1123_SUBDOMAIN, value):
            errors.append("must not contain dots")
        else:
            errors.append(_regex_error(_DNS1123_LABEL_MSG, _DNS1123_LABEL, "my-name", "123-abc"))
    return errors


def dns1035_label(value: str) -> list[str]:
    errors = [_max_len(63)] if len(value) > 63 else []
    if not _full(_DNS1035_LABEL, value):
        errors.append(_regex_error(_DNS1035_LABEL_MSG, _DNS1035_LABEL, "my-name", "abc-123"))
    return errors


def path_segment(value: str) -> list[str]:
    """``path.IsValidPathSegmentName``: what RBAC objects' names must be."""
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in value]


def qualified_name(value: str) -> list[str]:
    """``IsQualifiedName``: a label key, an annotation key (lowercased) or a finalizer."""
    errors: list[str] = []
    parts = value.split("/")
    if len(parts) > 2:
        return [
            "a qualified name "
            + _regex_error(_QNAME_MSG, _QNAME, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend("prefix part " + m for m in dns1123_subdomain(prefix))
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part " + _max_len(63))
    if not _full(_QNAME, name):
        errors.append("name part " + _regex_error(_QNAME_MSG, _QNAME, "MyName", "my.name", "123-abc"))
    return errors


def label_value(value: str) -> list[str]:
    errors = [_max_len(63)] if len(value) > 63 else []
    if not _full(_LABEL_VALUE, value):
        errors.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE, "MyValue", "my_value", "12345"))
    return errors


_RBAC: Final = ("roles", "rolebindings", "clusterroles", "clusterrolebindings")


def name_errors(plural: str, group: str, name: str, *, prefix: bool = False) -> list[str]:
    """The name rule of a kind, as its real validation picks it (``prefix``: a generateName)."""
    if prefix and len(name) > 1 and name.endswith("-"):
        name = name[:-2] + "a"  # maskTrailingDash: a generated suffix follows
    if group == "rbac.authorization.k8s.io" and plural in _RBAC:
        return path_segment(name)
    if not group and plural == "namespaces":
        return dns1123_label(name)
    if not group and plural == "services":
        return dns1035_label(name)
    return dns1123_subdomain(name)


def metadata_errors(
    meta: Mapping[str, Any], plural: str, group: str, *, creating: bool, namespaced: bool
) -> list[FieldError]:
    """apimachinery's ObjectMeta validation of the fields the fake holds, in its order."""
    errors: list[FieldError] = []
    if creating:
        generate = meta.get("generateName")
        if isinstance(generate, str) and generate:
            for message in name_errors(plural, group, generate, prefix=True):
                errors.append(invalid("metadata.generateName", generate, message))
        name = meta.get("name")
        if not name:
            errors.append(required("metadata.name", "name or generateName is required"))
        elif isinstance(name, str):
            errors.extend(invalid("metadata.name", name, m) for m in name_errors(plural, group, name))
        namespace = meta.get("namespace")
        if namespaced and isinstance(namespace, str) and namespace:
            errors.extend(invalid("metadata.namespace", namespace, m) for m in dns1123_label(namespace))
    labels = meta.get("labels")
    if isinstance(labels, dict):
        for key, value in labels.items():
            errors.extend(invalid("metadata.labels", key, m) for m in qualified_name(key))
            if isinstance(value, str):
                errors.extend(invalid("metadata.labels", value, m) for m in label_value(value))
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        for key in annotations:
            errors.extend(invalid("metadata.annotations", key, m) for m in qualified_name(key.lower()))
        size = sum(len(k.encode()) + len(str(v or "").encode()) for k, v in annotations.items())
        if size > TOTAL_ANNOTATION_SIZE:
            errors.append(too_long("metadata.annotations", TOTAL_ANNOTATION_SIZE))
    finalizers = meta.get("finalizers")
    if creating and isinstance(finalizers, list):
        for finalizer in finalizers:
            if isinstance(finalizer, str):
                errors.extend(invalid("metadata.finalizers", finalizer, m) for m in qualified_name(finalizer))
    return errors


# -- decoding built-in bodies (sigs.k8s.io/json, as the real server's decoder) -------------------------

_INT_RANGES: Final = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_QUANTITY: Final = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_QUANTITY_SUFFIXES: Final = frozenset(
    {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"}
)
_RFC3339: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
_SPECIAL: Final = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": "intstr",
    "io.k8s.apimachinery.pkg.api.resource.Quantity": "quantity",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": "time",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": "microtime",
}


class DecodeError(Exception):
    """A body the real server's decoder refuses; ``str()`` is its message."""


def _ref_name(schema: Mapping[str, Any]) -> str | None:
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _go_type(schema: Mapping[str, Any]) -> str:
    """The Go type a schema stands for, as ``reflect.Type.String()`` prints it."""
    ref = _ref_name(schema)
    if ref is not None:
        if ref in _SPECIAL and _SPECIAL[ref] == "intstr":
            return "intstr.IntOrString"
        parts = ref.split(".")
        return f"{parts[-2]}.{parts[-1]}" if len(parts) > 1 else ref
    kind, fmt = schema.get("type"), schema.get("format")
    if kind == "string":
        return "[]uint8" if fmt == "byte" else "string"
    if kind == "integer":
        return fmt if fmt in _INT_RANGES else "int"
    if kind == "number":
        return "float64"
    if kind == "boolean":
        return "bool"
    if kind == "array":
        items = schema.get("items")
        return "[]" + (_go_type(items) if isinstance(items, Mapping) else "interface {}")
    additional = schema.get("additionalProperties")
    if isinstance(additional, Mapping):
        return "map[string]" + _go_type(additional)
    return "map[string]interface {}"


def _json_kind(value: Any) -> str:
    """What Go's decoder calls a JSON value in an UnmarshalTypeError."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _number_literal(value: float) -> str:
    return json.dumps(value)


class _Decoder:
    def __init__(self) -> None:
        self.definitions = builtin_definitions()

    def type_error(self, value: str, go_type: str, struct: str, fields: list[str]) -> DecodeError:
        if struct or fields:
            where = f"Go struct field {struct}.{'.'.join(fields)}"
        else:
            where = "Go value"
        return DecodeError(f"json: cannot unmarshal {value} into {where} of type {go_type}")

    def walk(self, value: Any, schema: Mapping[str, Any], struct: str, fields: list[str]) -> None:
        if value is None:
            return
        ref = _ref_name(schema)
        special = _SPECIAL.get(ref or "")
        if special is not None:
            self.special(special, value, struct, fields)
            return
        if ref is not None:
            target = self.definitions.get(ref)
            if target is None:
                return
            if target.get("type") == "object" and "properties" in target:
                self.struct(value, target, ref.rsplit(".", 1)[-1], _go_type(schema), struct, fields)
                return
            schema = target
        kind = schema.get("type")
        if kind is None:
            return  # any JSON value (RawExtension, a CRD's JSON)
        if kind == "object":
            if "properties" in schema:
                self.struct(value, schema, struct, "struct", struct, fields)
                return
            if not isinstance(value, dict):
                raise self.type_error(_json_kind(value), _go_type(schema), struct, fields)
            additional = schema.get("additionalProperties")
            if isinstance(additional, Mapping):
                for item in value.values():
                    self.walk(item, additional, struct, fields)
            return
        if kind == "array":
            if not isinstance(value, list):
                raise self.type_error(_json_kind(value), _go_type(schema), struct, fields)
            items = schema.get("items")
            if isinstance(items, Mapping):
                for item in value:
                    self.walk(item, items, struct, fields)
            return
        self.scalar(value, schema, struct, fields)

    def struct(
        self, value: Any, schema: Mapping[str, Any], name: str, go_type: str, outer: str, fields: list[str]
    ) -> None:
        if not isinstance(value, dict):
            raise self.type_error(_json_kind(value), go_type, outer, fields)
        properties: Mapping[str, Any] = schema.get("properties") or {}
        for key, item in value.items():
            member = properties.get(key)
            if isinstance(member, Mapping):
                self.walk(item, member, name, [*fields, key])

    def scalar(self, value: Any, schema: Mapping[str, Any], struct: str, fields: list[str]) -> None:
        kind, fmt = schema.get("type"), schema.get("format")
        go_type = _go_type(schema)
        if fmt == "int-or-string":
            self.special("intstr", value, struct, fields)
        elif kind == "string":
            if not isinstance(value, str):
                raise self.type_error(_json_kind(value), go_type, struct, fields)
            if fmt == "byte":
                _base64(value)
        elif kind == "boolean":
            if not isinstance(value, bool):
                raise self.type_error(_json_kind(value), go_type, struct, fields)
        elif kind == "integer":
            self.integer(value, go_type, struct, fields)
        elif kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise self.type_error(_json_kind(value), go_type, struct, fields)

    def integer(self, value: Any, go_type: str, struct: str, fields: list[str]) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.type_error(_json_kind(value), go_type, struct, fields)
        low, high = _INT_RANGES.get(go_type, _INT_RANGES["int64"])
        if isinstance(value, float) or not low <= value <= high:
            raise self.type_error(f"number {_number_literal(value)}", go_type, struct, fields)

    def special(self, kind: str, value: Any, struct: str, fields: list[str]) -> None:
        if kind == "intstr":
            if not isinstance(value, str):
                self.integer(value, "int32", struct, fields)
        elif kind == "quantity":
            text = value if isinstance(value, str) else json.dumps(value)
            _quantity(text.strip())
        elif not isinstance(value, str):
            raise DecodeError("invalid syntax")  # strconv.Unquote of a JSON value that is not a string
        elif not _RFC3339.fullmatch(value):
            layout = "2006-01-02T15:04:05Z07:00" if kind == "time" else "2006-01-02T15:04:05.000000Z07:00"
            raise DecodeError(f'parsing time "{value}" as "{layout}": cannot parse "{value}" as "2006"')


def _quantity(text: str) -> None:
    match = re.match(_QUANTITY, text)
    if match is None:
        raise DecodeError(f"quantities must match the regular expression '{_QUANTITY}'")
    suffix = match.group(2)
    if suffix not in _QUANTITY_SUFFIXES and not re.fullmatch(r"[eE][-+]?[0-9]+", suffix):
        raise DecodeError("unable to parse quantity's suffix")


def _base64(text: str) -> None:
    alphabet = re.compile(r"[A-Za-z0-9+/=\r\n]")
    for position, char in enumerate(text):
        if not alphabet.fullmatch(char):
            raise DecodeError(f"illegal base64 data at input byte {position}")
    try:
        base64.b64decode(text.replace("\r", "").replace("\n", ""), validate=True)
    except binascii.Error:
        raise DecodeError(f"illegal base64 data at input byte {len(text) - len(text) % 4}") from None


def decode_error(obj: JSON, definition: str) -> str | None:
    """The message of the first error Go's decoder finds in ``obj`` as a ``definition``, or None."""
    try:
        _Decoder().walk(obj, {"$ref": f"#/definitions/{definition}"}, "", [])
    except DecodeError as error:
        return str(error)
    return None


# -- per-type rules of built-in kinds (the part the fake emulates) --------------------------------------

_NON_NEGATIVE: Final[Mapping[str, tuple[str, ...]]] = {
    "io.k8s.api.apps.v1.DeploymentSpec": (
        "replicas",
        "minReadySeconds",
        "revisionHistoryLimit",
        "progressDeadlineSeconds",
    ),
    "io.k8s.api.apps.v1.DaemonSetSpec": ("minReadySeconds", "revisionHistoryLimit"),
    "io.k8s.api.apps.v1.StatefulSetSpec": ("replicas", "minReadySeconds", "revisionHistoryLimit"),
    "io.k8s.api.apps.v1.ReplicaSetSpec": ("replicas", "minReadySeconds"),
    "io.k8s.api.core.v1.ReplicationControllerSpec": ("replicas", "minReadySeconds"),
    "io.k8s.api.batch.v1.JobSpec": ("parallelism", "completions", "backoffLimit"),
    "io.k8s.api.core.v1.PodSpec": ("terminationGracePeriodSeconds",),
    "io.k8s.api.core.v1.Probe": (
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
    ),
    "io.k8s.api.coordination.v1.LeaseSpec": ("leaseDurationSeconds", "leaseTransitions"),
}
"""Counts a real server refuses below zero (``ValidateNonnegativeField``:
``spec.replicas: Invalid value: -1: must be greater than or equal to 0``), by OpenAPI definition."""
_POSITIVE: Final[Mapping[str, tuple[str, ...]]] = {
    "io.k8s.api.core.v1.PodSpec": ("activeDeadlineSeconds",),
    "io.k8s.api.batch.v1.JobSpec": ("activeDeadlineSeconds",),
    "io.k8s.api.coordination.v1.LeaseSpec": (),
}
"""Durations a real server refuses below one (``must be greater than or equal to 1``)."""
_PORTS: Final[Mapping[str, tuple[str, ...]]] = {
    "io.k8s.api.core.v1.ContainerPort": ("containerPort", "hostPort"),
    "io.k8s.api.core.v1.ServicePort": ("port", "nodePort"),
}
"""Port numbers: 1 to 65535 (``must be between 1 and 65535, inclusive``); 0 means unset for the
optional ones."""
_NOT_EMPTY: Final = frozenset(
    {("io.k8s.api.core.v1.PodSpec", "containers"), ("io.k8s.api.rbac.v1.PolicyRule", "verbs")}
)
"""Required lists a real server also refuses empty (``spec.containers: Required value``)."""


def builtin_errors(obj: JSON, definition: str) -> list[FieldError]:
    """The per-type rules of a built-in kind this server emulates, as the real validation words them:
    the OpenAPI ``required`` fields (absent, null or empty: ``spec.containers[0].name: Required
    value``), the non-negative counts (:data:`_NON_NEGATIVE`, :data:`_POSITIVE`) and port ranges.
    ``metadata`` is :func:`metadata_errors`' (the server sets part of it)."""
    errors: list[FieldError] = []
    definitions = builtin_definitions()

    def walk(value: Any, schema: Mapping[str, Any], path: str) -> None:
        if value is None:
            return
        ref = _ref_name(schema)
        if ref is not None:
            target = definitions.get(ref)
            if target is None or ref in _SPECIAL:
                return
            if isinstance(value, dict) and target.get("type") == "object" and "properties" in target:
                struct(value, target, ref, path)
                return
            schema = target
        if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
            for index, item in enumerate(value):
                walk(item, schema["items"], f"{path}[{index}]")
        elif isinstance(value, dict) and isinstance(schema.get("additionalProperties"), Mapping):
            for key, item in value.items():
                walk(item, schema["additionalProperties"], f"{path}[{key}]")

    def struct(value: JSON, schema: Mapping[str, Any], name: str, path: str) -> None:
        def at(key: str) -> str:
            return f"{path}.{key}" if path else key

        for key in schema.get("required") or ():
            if key in ("metadata", "status") and not path:
                continue
            member = value.get(key)
            empty = member in (None, "") or (member == [] and (name, key) in _NOT_EMPTY)
            if empty:
                errors.append(required(at(key)))
        for key in _NON_NEGATIVE.get(name, ()):
            member = value.get(key)
            if isinstance(member, int) and not isinstance(member, bool) and member < 0:
                errors.append(invalid(at(key), member, "must be greater than or equal to 0"))
        for key in _POSITIVE.get(name, ()):
            member = value.get(key)
            if isinstance(member, int) and not isinstance(member, bool) and member < 1:
                errors.append(invalid(at(key), member, "must be greater than or equal to 1"))
        for key in _PORTS.get(name, ()):
            member = value.get(key)
            optional = key not in (schema.get("required") or ())
            if isinstance(member, int) and not (1 <= member <= 65535) and not (optional and member == 0):
                errors.append(invalid(at(key), member, "must be between 1 and 65535, inclusive"))
        properties: Mapping[str, Any] = schema.get("properties") or {}
        for key, member in value.items():
            if key in ("metadata", "status") and not path:
                continue  # metadata is metadata_errors'; status is written by controllers, not judged so
            sub = properties.get(key)
            if isinstance(sub, Mapping):
                walk(member, sub, at(key))

    walk(obj, {"$ref": f"#/definitions/{definition}"}, "")
    return errors
