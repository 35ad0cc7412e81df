"""Request bodies in Kubernetes' Protobuf encoding, for the few types typed clients send that way.

client-go's typed clients (kubectl's ``create namespace|configmap|secret|serviceaccount`` and
``auth can-i``, helm's release storage in Secrets, their deletes) send
``application/vnd.kubernetes.protobuf``: the bytes ``k8s\\x00`` and a ``runtime.Unknown`` holding
the type and the object's own message. This module decodes those bodies into the JSON the rest of
the server handles, for the types listed in :data:`MESSAGES` (with ObjectMeta, OwnerReference and the
time type), field numbers as in Kubernetes' ``generated.proto``. A body of any other type, or one
that does not parse, is refused with the 415 the server gives every body it cannot read; answers
are always JSON (those clients accept it). Unknown fields are skipped.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Iterator, Mapping
from typing import Any, Final

from eni_ipam_testkit.fake_kube.resources import JSON

MAGIC: Final = b"k8s\x00"
PROTOBUF: Final = "application/vnd.kubernetes.protobuf"

Field = tuple[str, str]
"""(JSON name, kind): ``string``, ``bytes``, ``bool``, ``int``, ``time``, ``strings`` (repeated),
``map`` (string to string), ``bytemap`` (string to base64), ``<Message>`` or ``[<Message>]``."""

MESSAGES: Final[Mapping[str, Mapping[int, Field]]] = {
    "ObjectMeta": {
        1: ("name", "string"),
        2: ("generateName", "string"),
        3: ("namespace", "string"),
        5: ("uid", "string"),
        6: ("resourceVersion", "string"),
        7: ("generation", "int"),
        8: ("creationTimestamp", "time"),
        9: ("deletionTimestamp", "time"),
        10: ("deletionGracePeriodSeconds", "int"),
        11: ("labels", "map"),
        12: ("annotations", "map"),
        13: ("ownerReferences", "[OwnerReference]"),
        14: ("finalizers", "strings"),
    },
    "OwnerReference": {
        1: ("kind", "string"),
        3: ("name", "string"),
        4: ("uid", "string"),
        5: ("apiVersion", "string"),
        6: ("controller", "bool"),
        7: ("blockOwnerDeletion", "bool"),
    },
    "Secret": {
        1: ("metadata", "ObjectMeta"),
        2: ("data", "bytemap"),
        3: ("type", "string"),
        4: ("stringData", "map"),
        5: ("immutable", "bool"),
    },
    "ConfigMap": {
        1: ("metadata", "ObjectMeta"),
        2: ("data", "map"),
        3: ("binaryData", "bytemap"),
        4: ("immutable", "bool"),
    },
    "Namespace": {
        1: ("metadata", "ObjectMeta"),
        2: ("spec", "NamespaceSpec"),
        3: ("status", "NamespaceStatus"),
    },
    "NamespaceSpec": {1: ("finalizers", "strings")},
    "NamespaceStatus": {1: ("phase", "string")},
    "ServiceAccount": {
        1: ("metadata", "ObjectMeta"),
        2: ("secrets", "[ObjectReference]"),
        3: ("imagePullSecrets", "[LocalObjectReference]"),
        4: ("automountServiceAccountToken", "bool"),
    },
    "ObjectReference": {
        1: ("kind", "string"),
        2: ("namespace", "string"),
        3: ("name", "string"),
        4: ("uid", "string"),
        5: ("apiVersion", "string"),
        6: ("resourceVersion", "string"),
        7: ("fieldPath", "string"),
    },
    "LocalObjectReference": {1: ("name", "string")},
    "DeleteOptions": {
        1: ("gracePeriodSeconds", "int"),
        2: ("preconditions", "Preconditions"),
        3: ("orphanDependents", "bool"),
        4: ("propagationPolicy", "string"),
        5: ("dryRun", "strings"),
    },
    "Preconditions": {1: ("uid", "string"), 2: ("resourceVersion", "string")},
    "SelfSubjectAccessReview": {1: ("metadata", "ObjectMeta"), 2: ("spec", "SelfSubjectAccessReviewSpec")},
    "SelfSubjectAccessReviewSpec": {
        1: ("resourceAttributes", "ResourceAttributes"),
        2: ("nonResourceAttributes", "NonResourceAttributes"),
    },
    "ResourceAttributes": {
        1: ("namespace", "string"),
        2: ("verb", "string"),
        3: ("group", "string"),
        4: ("version", "string"),
        5: ("resource", "string"),
        6: ("subresource", "string"),
        7: ("name", "string"),
    },
    "NonResourceAttributes": {1: ("path", "string"), 2: ("verb", "string")},
    "SelfSubjectRulesReview": {1: ("metadata", "ObjectMeta"), 2: ("spec", "SelfSubjectRulesReviewSpec")},
    "SelfSubjectRulesReviewSpec": {1: ("namespace", "string")},
    "SelfSubjectReview": {1: ("metadata", "ObjectMeta")},
}
_TOP_LEVEL: Final = frozenset(
    {
        "Secret",
        "ConfigMap",
        "Namespace",
        "ServiceAccount",
        "DeleteOptions",
        "SelfSubjectAccessReview",
        "SelfSubjectRulesReview",
        "SelfSubjectReview",
    }
)


class Undecodable(ValueError):
    """The body is not a Protobuf message of a type this module knows."""


def _varint(data: bytes, position: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if position >= len(data) or shift > 63:
            raise Undecodable("truncated varint")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """``(field number, wire type, value)`` for every field of a message."""
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, position = _varint(data, position)
            yield number, wire, value
        elif wire == 2:
            length, position = _varint(data, position)
            if position + length > len(data):
                raise Undecodable("truncated field")
            yield number, wire, data[position : position + length]
            position += length
        elif wire == 1:
            position += 8
        elif wire == 5:
            position += 4
        else:
            raise Undecodable(f"unsupported wire type {wire}")


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise Undecodable("expected a length-delimited field")
    return value.decode()


def _time(value: int | bytes) -> str:
    seconds = 0
    for number, _, part in _fields(value if isinstance(value, bytes) else b""):
        if number == 1 and isinstance(part, int):
            seconds = part
    when = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _entry(value: int | bytes) -> tuple[str, bytes]:
    key, item = "", b""
    for number, _, part in _fields(value if isinstance(value, bytes) else b""):
        if number == 1:
            key = _text(part)
        elif number == 2 and isinstance(part, bytes):
            item = part
    return key, item


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def decode_message(name: str, data: bytes) -> JSON:
    """One message of type ``name`` as the JSON object it stands for."""
    schema = MESSAGES[name]
    out: JSON = {}
    for number, _, value in _fields(data):
        if number not in schema:
            continue
        field, kind = schema[number]
        if kind == "string":
            out[field] = _text(value)
        elif kind == "bytes":
            out[field] = base64.b64encode(value if isinstance(value, bytes) else b"").decode()
        elif kind == "bool":
            out[field] = bool(value)
        elif kind == "int":
            out[field] = _signed(value) if isinstance(value, int) else 0
        elif kind == "time":
            out[field] = _time(value)
        elif kind == "strings":
            out.setdefault(field, []).append(_text(value))
        elif kind in ("map", "bytemap"):
            key, item = _entry(value)
            out.setdefault(field, {})[key] = (
                item.decode() if kind == "map" else base64.b64encode(item).decode()
            )
        elif kind.startswith("["):
            item_type = kind[1:-1]
            out.setdefault(field, []).append(
                decode_message(item_type, value if isinstance(value, bytes) else b"")
            )
        else:
            out[field] = decode_message(kind, value if isinstance(value, bytes) else b"")
    return out


def decode(body: bytes) -> JSON:
    """A ``k8s\\x00``-prefixed ``runtime.Unknown`` body as a JSON object; raises :class:`Undecodable`."""
    if not body.startswith(MAGIC):
        raise Undecodable("the body does not start with the Kubernetes Protobuf magic number")
    api_version = kind = ""
    raw = b""
    for number, _, value in _fields(body[len(MAGIC) :]):
        if number == 1 and isinstance(value, bytes):
            for inner, _, part in _fields(value):
                if inner == 1:
                    api_version = _text(part)
                elif inner == 2:
                    kind = _text(part)
        elif number == 2 and isinstance(value, bytes):
            raw = value
    if kind not in _TOP_LEVEL:
        raise Undecodable(f"no Protobuf decoding for kind {kind!r}")
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind}
    obj.update(decode_message(kind, raw))
    return obj
