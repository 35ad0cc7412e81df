"""A small IAM policy evaluator for one identity policy: enough to judge eni-ipam's policy, no more.

It follows the documented evaluation logic for a single identity-based policy: a request is allowed when
some ``Allow`` statement matches it and no ``Deny`` statement does (an explicit deny wins; no match is
an implicit deny). A statement matches when its ``Action`` matches the action, its ``Resource`` matches
the resource ARN (``*`` and ``?`` wildcards, case-sensitive) and every condition holds. Conditions: the
operators ``StringEquals``, ``StringLike``, ``ArnEquals``, ``ArnLike`` and ``Null``, and the set
qualifiers ``ForAllValues:`` and ``ForAnyValue:`` before the string operators; the keys of one operator,
and the operators of one statement, are ANDed; the values listed for one key are ORed; a key missing
from the request context fails every operator but ``Null`` and ``ForAllValues:``.

Multivalued keys (``aws:TagKeys``: every tag key of the request) are lists in the request context and
may only be judged with a set qualifier, as IAM's documentation asks: ``ForAllValues:`` holds when every
value of the request matches one of the policy's (also when the key is missing or empty, which is why a
policy pairs it with a condition that needs the key present), ``ForAnyValue:`` when at least one does.
Anything else (``NotAction``, ``NotResource``, other operators, a single-valued operator on a list or a
qualifier on a single value, policy variables) raises, so the evaluator can never silently allow what it
does not understand.

Action names compare case-insensitively, as IAM's do; condition key names compare case-insensitively,
values case-sensitively.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

OPERATORS = {"StringEquals", "StringLike", "ArnEquals", "ArnLike", "Null"}
QUALIFIERS = {"ForAllValues", "ForAnyValue"}
QUALIFIED = {"StringEquals", "StringLike"}
"""Operators a set qualifier may precede here."""

Value = str | Sequence[str]


@dataclasses.dataclass(frozen=True)
class Request:
    """One authorisation: an action on one resource, with the request context's keys."""

    action: str
    resource: str
    context: Mapping[str, Value] = dataclasses.field(default_factory=dict)
    """Condition keys of the request: a string, or a list for a multivalued key (``aws:TagKeys``)."""


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _wildcard(pattern: str, text: str, *, case: bool = True) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, text, 0 if case else re.IGNORECASE) is not None


def _arn_like(pattern: str, arn: str) -> bool:
    """ARN matching: six colon-separated parts, each matched on its own (wildcards do not cross parts
    but the last, the resource, which may hold colons)."""
    want, got = pattern.split(":", 5), arn.split(":", 5)
    if len(want) != 6 or len(got) != 6:
        return False
    return all(_wildcard(w, g) for w, g in zip(want, got, strict=True))


def _matches(operator: str, actual: str, values: list[Any]) -> bool:
    if operator == "StringEquals":
        return any(actual == v for v in values)
    if operator == "StringLike":
        return any(_wildcard(v, actual) for v in values)
    raise NotImplementedError(operator)


def _condition_holds(operator: str, key: str, values: list[Any], context: Mapping[str, Value]) -> bool:
    present = {k.lower(): v for k, v in context.items()}
    actual = present.get(key.lower())
    qualifier, _, operator = operator.rpartition(":")
    if qualifier:
        if actual is not None and isinstance(actual, str):
            raise NotImplementedError(f"{qualifier}: on the single-valued key {key}")
        members = list(actual or ())
        if qualifier == "ForAllValues":
            return all(_matches(operator, m, values) for m in members)
        return any(_matches(operator, m, values) for m in members)
    if operator == "Null":
        (wanted,) = values
        return (actual is None) == (str(wanted).lower() == "true")
    if actual is None:
        return False
    if not isinstance(actual, str):
        raise NotImplementedError(f"{operator} on the multivalued key {key}: qualify it")
    if operator == "StringEquals":
        return any(actual == v for v in values)
    if operator == "StringLike":
        return any(_wildcard(v, actual) for v in values)
    if operator == "ArnEquals":
        return any(actual == v for v in values)
    if operator == "ArnLike":
        return any(_arn_like(v, actual) for v in values)
    raise NotImplementedError(operator)


def statement_matches(statement: Mapping[str, Any], request: Request) -> bool:
    unknown = set(statement) - {"Sid", "Effect", "Action", "Resource", "Condition"}
    if unknown:
        raise NotImplementedError(f"statement elements {sorted(unknown)}")
    if not any(_wildcard(a, request.action, case=False) for a in _listed(statement["Action"])):
        return False
    if not any(r == "*" or _arn_like(r, request.resource) for r in _listed(statement["Resource"])):
        return False
    for operator, keys in statement.get("Condition", {}).items():
        qualifier, _, bare = operator.rpartition(":")
        if bare not in OPERATORS or (qualifier and (qualifier not in QUALIFIERS or bare not in QUALIFIED)):
            raise NotImplementedError(f"condition operator {operator}")
        for key, value in keys.items():
            if "${" in key or any("${" in str(v) for v in _listed(value)):
                raise NotImplementedError("policy variables")
            if not _condition_holds(operator, key, _listed(value), request.context):
                return False
    return True


def matching_sids(policy: Mapping[str, Any], request: Request, effect: str = "Allow") -> list[str]:
    """The ``Sid`` of every statement of ``effect`` that matches ``request``."""
    return [
        s.get("Sid", "")
        for s in policy["Statement"]
        if s["Effect"] == effect and statement_matches(s, request)
    ]


def allowed(policy: Mapping[str, Any], request: Request) -> bool:
    """Whether ``policy`` allows ``request``: an Allow matches and no Deny does."""
    if policy.get("Version") != "2012-10-17":
        raise NotImplementedError("only policy version 2012-10-17")
    for statement in policy["Statement"]:
        if statement["Effect"] not in {"Allow", "Deny"}:
            raise ValueError(statement["Effect"])
    if matching_sids(policy, request, "Deny"):
        return False
    return bool(matching_sids(policy, request, "Allow"))
