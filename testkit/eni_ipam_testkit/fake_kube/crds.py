"""CustomResourceDefinitions: their validation, defaults and status, and the types they serve.

A CRD is stored like any object (``apiextensions.k8s.io/v1`` ``customresourcedefinitions``, created,
patched and deleted through the API). What the real server's apiextensions controllers do after a
write happens here within the write itself, so a CRD is served from the response on:

* defaults: ``names.singular`` (the kind in lower case), ``names.listKind`` (``<Kind>List``) and
  ``conversion.strategy: None``;
* status: ``acceptedNames`` (the names), ``storedVersions`` (the storage versions seen so far) and the
  conditions ``NamesAccepted`` and ``Established``, both ``True`` (a condition keeps its
  ``lastTransitionTime`` while its status holds, so a write that changes nothing stays a no-op) unless
  a name is already another CRD's of the same group: then, as the naming controller decides it,
  ``NamesAccepted`` is ``False`` (``KindConflict``: ``"Pool" is already in use``, and likewise for the
  plural, singular, short names and list kind), ``Established`` is ``False`` and the CRD is not
  served (its resources are 404) until a write of it finds the names free;
* validation of what a server needs to serve it: the name is ``<plural>.<group>``, a group with a
  dot, a kind, a plural, a scope, exactly one storage version and a schema per version; ``scope`` and
  ``group`` cannot change.

:func:`resource_types_from_crd` gives one :class:`ResourceType` per served version. Printer columns
default to ``Age`` as on the real server. Every version's schema is checked when the CRD is written
(:func:`~eni_ipam_testkit.fake_kube.schema.unsupported_in_schema`): CEL rules must compile (422), and
a keyword, format or CEL function the custom-resource checks cannot honour is a 501 naming its schema
path, so no CRD is stored with rules that would be ignored. Conversion webhooks are not checked.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any, Final

from eni_ipam_testkit.fake_kube.resources import (
    JSON,
    FieldError,
    ResourceType,
    StatusError,
    forbidden,
    invalid,
    not_supported,
    required,
)
from eni_ipam_testkit.fake_kube.schema import unsupported_in_schema

DEFAULT_COLUMNS: Final = (
    {
        "name": "Age",
        "type": "date",
        "jsonPath": ".metadata.creationTimestamp",
        "description": "CreationTimestamp is a timestamp representing the server time when this object was "
        "created.",
    },
)


def apply_defaults(crd: JSON) -> None:
    """Fill in the names and conversion defaults, in place."""
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return
    names = spec.get("names")
    if isinstance(names, dict) and isinstance(names.get("kind"), str):
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", f"{names['kind']}List")
    spec.setdefault("conversion", {"strategy": "None"})


def validate(crd: JSON, old: JSON | None) -> list[FieldError]:
    """What keeps a CRD from being served, as field errors."""
    errors: list[FieldError] = []
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    group = spec.get("group")
    names: JSON = spec["names"] if isinstance(spec.get("names"), dict) else {}
    if not group:
        errors.append(required("spec.group"))
    elif not isinstance(group, str) or "." not in group:
        errors.append(invalid("spec.group", group, "should be a domain with at least one dot"))
    for field in ("plural", "kind"):
        if not names.get(field):
            errors.append(required(f"spec.names.{field}"))
    name = crd["metadata"].get("name", "")
    if names.get("plural") and group and name != f"{names['plural']}.{group}":
        errors.append(invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    scope = spec.get("scope")
    if scope not in ("Cluster", "Namespaced"):
        errors.append(not_supported("spec.scope", scope or "", ["Cluster", "Namespaced"]))
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        errors.append(required("spec.versions", "must have exactly one version marked as storage version"))
    else:
        storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
        if len(storage) != 1:
            errors.append(
                invalid("spec.versions", versions, "must have exactly one version marked as storage version")
            )
        for index, version in enumerate(versions):
            schema = ((version if isinstance(version, dict) else {}).get("schema") or {}).get(
                "openAPIV3Schema"
            )
            if not isinstance(schema, dict):
                errors.append(
                    required(f"spec.versions[{index}].schema.openAPIV3Schema", "schemas are required")
                )
            elif schema.get("type") != "object":
                path = f"spec.versions[{index}].schema.openAPIV3Schema.type"
                errors.append(required(path, "must be object at the root"))
            else:
                errors.extend(_schema_errors(schema, f"spec.versions[{index}].schema.openAPIV3Schema"))
    if old is not None:
        old_spec = old.get("spec") or {}
        for field in ("scope", "group"):
            if old_spec.get(field) != spec.get(field):
                errors.append(forbidden(f"spec.{field}", "field is immutable"))
    return errors


def _schema_errors(schema: JSON, path: str) -> list[FieldError]:
    """A schema's rule errors; a 501 naming the first keyword this server would otherwise ignore, so a
    CRD is never stored with checks it cannot make."""
    errors, unsupported = unsupported_in_schema(schema, path)
    if unsupported is not None:
        message = (
            f"the dev cluster does not emulate {unsupported} of CustomResourceDefinition schemas; "
            "check this CRD against a cluster (docs/testing.md)"
        )
        raise StatusError(501, message, reason="NotImplemented")
    return errors


def _condition(
    kind: str, reason: str, message: str, old: Mapping[str, Any] | None, now: str, status: str = "True"
) -> JSON:
    previous = next((c for c in (old or {}).get("conditions") or () if c.get("type") == kind), None)
    since = previous["lastTransitionTime"] if previous and previous.get("status") == status else now
    return {"type": kind, "status": status, "lastTransitionTime": since, "reason": reason, "message": message}


def _accepted_names(
    spec: Mapping[str, Any], previous: Mapping[str, Any], others: Iterable[JSON]
) -> tuple[JSON, str, str]:
    """``(accepted names, conflict reason, message)`` as the naming controller computes them: a name is
    taken when it is not already this CRD's and another CRD of the group has accepted it."""
    resources: set[str] = set()
    kinds: set[str] = set()
    for other in others:
        names = (other.get("status") or {}).get("acceptedNames") or {}
        resources.update(
            n for n in (names.get("plural"), names.get("singular"), *(names.get("shortNames") or ())) if n
        )
        kinds.update(n for n in (names.get("kind"), names.get("listKind")) if n)
    requested: Mapping[str, Any] = spec.get("names") or {}
    accepted: Mapping[str, Any] = previous.get("acceptedNames") or {}
    result: JSON = copy.deepcopy(dict(accepted))
    reason = message = ""

    def taken(name: Any, mine: Any, used: set[str]) -> bool:
        return bool(name) and name != mine and name in used

    for field, label, used in (("plural", "Plural", resources), ("singular", "Singular", resources)):
        if taken(requested.get(field), accepted.get(field), used):
            reason, message = f"{label}Conflict", f'"{requested[field]}" is already in use'
        elif field in requested:
            result[field] = requested[field]
    short = list(requested.get("shortNames") or ())
    clashes = [n for n in short if n not in (accepted.get("shortNames") or ()) and n in resources]
    if clashes:
        reason = "ShortNamesConflict"
        quoted = [f'"{n}" is already in use' for n in clashes]
        message = quoted[0] if len(quoted) == 1 else "[" + ", ".join(quoted) + "]"
    elif "shortNames" in requested:
        result["shortNames"] = short
    for field, label in (("kind", "Kind"), ("listKind", "ListKind")):
        if taken(requested.get(field), accepted.get(field), kinds):
            reason, message = f"{label}Conflict", f'"{requested[field]}" is already in use'
        elif field in requested:
            result[field] = requested[field]
    if "categories" in requested:
        result["categories"] = requested["categories"]
    return result, reason, message


def set_status(crd: JSON, old: JSON | None, now: str, others: Iterable[JSON] = ()) -> None:
    """The status the real controllers would write: names accepted, established, stored versions.

    ``others``: the other stored CRDs of the same group, whose accepted names this one may not take.
    """
    spec: JSON = crd["spec"] if isinstance(crd.get("spec"), dict) else {}
    previous = (old or {}).get("status") or {}
    stored = list(previous.get("storedVersions") or ())
    versions: list[Any] = spec["versions"] if isinstance(spec.get("versions"), list) else []
    for version in versions:
        if isinstance(version, dict) and version.get("storage") and version.get("name") not in stored:
            stored.append(version["name"])
    names, reason, message = _accepted_names(spec, previous, others)
    if reason:
        conditions = [
            _condition("NamesAccepted", reason, message, previous, now, "False"),
            _condition("Established", "NotAccepted", "not all names are accepted", previous, now, "False"),
        ]
    else:
        conditions = [
            _condition("NamesAccepted", "NoConflicts", "no conflicts found", previous, now),
            _condition(
                "Established", "InitialNamesAccepted", "the initial names have been accepted", previous, now
            ),
        ]
    crd["status"] = {"conditions": conditions, "acceptedNames": names, "storedVersions": stored}


def established(crd: Mapping[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def resource_types_from_crd(crd: Mapping[str, Any]) -> list[ResourceType]:
    """One :class:`ResourceType` per served version of a stored (so valid) CRD; none until it is
    Established (a CRD whose names conflict with another's is not served)."""
    if not established(crd):
        return []
    spec = crd["spec"]
    names = spec["names"]
    types = []
    for version in spec.get("versions") or ():
        if not version.get("served", False):
            continue
        subresources = version.get("subresources") or {}
        columns = tuple(version.get("additionalPrinterColumns") or DEFAULT_COLUMNS)
        types.append(
            ResourceType(
                group=spec["group"],
                version=str(version["name"]),
                kind=names["kind"],
                plural=names["plural"],
                namespaced=spec["scope"] == "Namespaced",
                singular=names.get("singular", ""),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                status_subresource="status" in subresources,
                schema=version["schema"]["openAPIV3Schema"],
                initial_status={} if "status" in subresources else None,
                unconditional_update=False,
                printer_columns=columns,
                crd=crd["metadata"]["name"],
            )
        )
    return types
