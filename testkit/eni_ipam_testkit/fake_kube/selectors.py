"""Label and field selectors, parsed and matched the way the real kube-apiserver does.

Label selectors support ``key=v``, ``key==v``, ``key!=v``, ``key in (a,b)``, ``key notin (a,b)``,
``key``, ``!key`` and the numeric ``key>n`` / ``key<n``, joined by commas (a logical AND). As on the
real server, ``!=`` and ``notin`` also match objects without the label.

Field selectors support ``=``, ``==`` and ``!=`` on ``metadata.name``, ``metadata.namespace`` and the
field labels a resource type registers; any other field is a 400 ``BadRequest`` (real behaviour, and
the most common surprise when moving from a mock to a cluster). A field's value is compared as the
server renders it: a missing field is ``""`` and a boolean is ``"true"``/``"false"``.

A malformed selector raises :class:`StatusError` 400 before any response is started.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Final

from eni_ipam_testkit.fake_kube.resources import JSON, ResourceType, StatusError

_NAME: Final = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY_RE: Final = re.compile(rf"^(?:[a-z0-9](?:[-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}$")
_VALUE_RE: Final = re.compile(rf"^(?:{_NAME})?$")
_SET_RE: Final = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_BINARY_RE: Final = re.compile(r"^(?P<key>[^=!<>\s]+)\s*(?P<op>==|=|!=|>|<)\s*(?P<value>\S*)$")


def _bad(text: str, why: str) -> StatusError:
    return StatusError(400, f"unable to parse requirement: {text!r}: {why}")


@dataclasses.dataclass(frozen=True)
class Requirement:
    """One comma-separated term of a label selector."""

    key: str
    op: str  # one of: = != in notin exists !exists > <
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        # > and <: the label must hold an integer (otherwise it does not match).
        try:
            number = int(value)
        except ValueError:
            return False
        bound = int(self.values[0])
        return number > bound if self.op == ">" else number < bound


def _split_terms(text: str) -> list[str]:
    """Split at commas outside parentheses: ``a in (x,y),b`` is two terms."""
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [t.strip() for t in terms]


def _parse_requirement(term: str) -> Requirement:
    if not term:
        raise _bad(term, "empty requirement")
    values: tuple[str, ...]
    if term.startswith("!"):
        key, op, values = term[1:].strip(), "!exists", ()
    elif match := _SET_RE.match(term):
        key, op = match["key"], match["op"]
        values = tuple(v.strip() for v in match["values"].split(","))
    elif match := _BINARY_RE.match(term):
        key, op, values = match["key"], match["op"], (match["value"],)
        op = "=" if op == "==" else op
        if op in (">", "<") and not re.fullmatch(r"-?\d+", values[0]):
            raise _bad(term, f"for {op!r}, the value must be an integer")
    elif " " not in term:
        key, op, values = term, "exists", ()
    else:
        raise _bad(term, "expected an operator (=, ==, !=, in, notin, >, <)")
    if not _KEY_RE.match(key):
        raise _bad(term, f"invalid label key {key!r}")
    for value in values if op not in (">", "<") else ():
        if not _VALUE_RE.match(value):
            raise _bad(term, f"invalid label value {value!r}")
    return Requirement(key, op, values)


@dataclasses.dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        if not text or not text.strip():
            return cls()
        return cls(tuple(_parse_requirement(term) for term in _split_terms(text)))

    def matches(self, obj: JSON) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.matches(labels) for r in self.requirements)


def _split_unescaped(text: str, separator: str) -> list[str]:
    """Split on ``separator`` not preceded by a backslash (field selector escaping)."""
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            current.append(char)
            escaped = True
        elif char == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


def field_value(obj: JSON, path: str) -> str:
    """A field as the server's field-label functions render it (missing → ``""``)."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_FIELD_PATHS = {("events", "source"): "source.component"}
"""Field labels that are not the path of the field they select, by (plural, label): an Event's
``source`` is its ``source.component`` (the real server's event field-label conversion)."""


@dataclasses.dataclass(frozen=True)
class FieldSelector:
    terms: tuple[tuple[str, bool, str], ...] = ()  # (field's path, equal?, value)

    @classmethod
    def parse(cls, text: str | None, rtype: ResourceType) -> FieldSelector:
        if not text or not text.strip():
            return cls()
        allowed = rtype.field_labels | {"metadata.name", "metadata.namespace"}
        terms = []
        for term in _split_unescaped(text, ","):
            match = re.fullmatch(r"\s*([^=!\s]+)\s*(==|=|!=)(.*)", term)
            if match is None:
                raise StatusError(400, f"invalid selector: {text!r}; can't understand {term!r}")
            field, op, value = match[1], match[2], _unescape(match[3].strip())
            if field not in allowed:
                raise StatusError(400, f"field label not supported: {field}")
            terms.append((_FIELD_PATHS.get((rtype.plural, field), field), op != "!=", value))
        return cls(tuple(terms))

    def matches(self, obj: JSON) -> bool:
        return all((field_value(obj, field) == value) == equal for field, equal, value in self.terms)


@dataclasses.dataclass(frozen=True)
class Filter:
    """Which objects a list or watch request sees: its namespace (None: all) and selectors."""

    namespace: str | None = None
    labels: LabelSelector = LabelSelector()
    fields: FieldSelector = FieldSelector()

    @classmethod
    def from_query(cls, query: Mapping[str, str], rtype: ResourceType, namespace: str | None) -> Filter:
        return cls(
            namespace=namespace,
            labels=LabelSelector.parse(query.get("labelSelector")),
            fields=FieldSelector.parse(query.get("fieldSelector"), rtype),
        )

    def matches(self, obj: JSON | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and (obj.get("metadata") or {}).get("namespace") != self.namespace:
            return False
        return self.labels.matches(obj) and self.fields.matches(obj)
