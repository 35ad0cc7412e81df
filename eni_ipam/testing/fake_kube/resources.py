"""Resource types the fake API server serves, request parsing, and the ``Status`` errors it answers with.

A :class:`ResourceType` is one served ``group/version/plural``. Built-in types are listed in
:data:`BUILTIN_RESOURCES`; custom resources are added by turning a CustomResourceDefinition manifest
into one type per served version (:func:`resource_types_from_crd`). All versions of one CRD share a
single storage key (``plural.group``), as on the real server, where a conversion of strategy ``None``
only rewrites ``apiVersion``.

Every failure the server reports is a :class:`StatusError`, rendered as a ``kind: Status`` body with
the reason and message wording of the real kube-apiserver, because clients (and the project's own
code) branch on ``code`` and ``reason`` and people read the message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

JSON = dict[str, Any]

# Go's strconv.ParseBool, which the real server uses for boolean query parameters.
_TRUE: Final = ("1", "t", "T", "true", "TRUE", "True")
_FALSE: Final = ("0", "f", "F", "false", "FALSE", "False")

REASONS: Final[Mapping[int, str]] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class StatusError(Exception):
    """A request failure, answered with a ``kind: Status`` body and this HTTP code."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: JSON | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason or REASONS.get(code, "Unknown")
        self.message = message
        self.details = details
        self.retry_after = retry_after

    def body(self) -> JSON:
        body: JSON = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        details = dict(self.details or {})
        if self.retry_after is not None:
            details["retryAfterSeconds"] = int(self.retry_after)
        if details:
            body["details"] = details
        return body


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResourceType:
    """One served ``group/version/plural``."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    status_subresource: bool = False
    schema: Mapping[str, Any] | None = None
    """The version's ``openAPIV3Schema`` (custom resources only; built-ins are not validated)."""
    field_labels: frozenset[str] = frozenset()
    """Field selector labels beyond ``metadata.name`` and ``metadata.namespace``."""
    unconditional_update: bool = True
    """Whether PUT without ``metadata.resourceVersion`` is allowed (it is not for custom resources)."""
    initial_status: Mapping[str, Any] | None = None
    """What create does with the body's ``status``: None keeps it, ``{}`` drops it, else replaces it."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """The storage key and the name used in messages: ``nodes``, ``enipools.eni-ipam.io``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        """The kind as named in ``Invalid`` messages: ``Pod``, ``ENIPool.eni-ipam.io``."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def not_found(self, name: str) -> StatusError:
        return StatusError(404, f'{self.resource} "{name}" not found', details=self._details(name))

    def already_exists(self, name: str) -> StatusError:
        message = f'{self.resource} "{name}" already exists'
        return StatusError(409, message, reason="AlreadyExists", details=self._details(name))

    def conflict(self, name: str) -> StatusError:
        message = (
            f'Operation cannot be fulfilled on {self.resource} "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again"
        )
        return StatusError(409, message, details=self._details(name))

    def invalid(self, name: str, causes: list[tuple[str, str]]) -> StatusError:
        """422 ``Invalid``; ``causes`` are ``(field path, "field: Reason: detail")`` pairs."""
        messages = [message for _, message in causes]
        joined = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
        details = {
            "name": name,
            "group": self.group,
            "kind": self.kind,
            "causes": [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes],
        }
        return StatusError(422, f'{self.qualified_kind} "{name}" is invalid: {joined}', details=details)

    def _details(self, name: str) -> JSON:
        return {"name": name, "group": self.group, "kind": self.plural}


def _builtin(
    group: str,
    kind: str,
    plural: str,
    *,
    namespaced: bool,
    status: bool,
    fields: str = "",
    initial_status: Mapping[str, Any] | None = None,
) -> ResourceType:
    return ResourceType(
        group=group,
        version="v1",
        kind=kind,
        plural=plural,
        namespaced=namespaced,
        status_subresource=status,
        field_labels=frozenset(fields.split()),
        initial_status=initial_status,
    )


# Field labels are the ones the real server registers for these types (a subset for events). On create,
# nodes keep the status they are registered with, pods start Pending and namespaces Active.
BUILTIN_RESOURCES: Final[tuple[ResourceType, ...]] = (
    _builtin("", "Node", "nodes", namespaced=False, status=True, fields="spec.unschedulable"),
    _builtin(
        "",
        "Pod",
        "pods",
        namespaced=True,
        status=True,
        fields="spec.nodeName spec.restartPolicy spec.schedulerName spec.serviceAccountName "
        "spec.hostNetwork status.phase status.podIP status.nominatedNodeName",
        initial_status={"phase": "Pending"},
    ),
    _builtin(
        "",
        "Namespace",
        "namespaces",
        namespaced=False,
        status=True,
        fields="status.phase",
        initial_status={"phase": "Active"},
    ),
    _builtin(
        "",
        "Event",
        "events",
        namespaced=True,
        status=False,
        fields="involvedObject.kind involvedObject.namespace involvedObject.name involvedObject.uid "
        "involvedObject.apiVersion involvedObject.resourceVersion involvedObject.fieldPath "
        "reason reportingComponent source type",
    ),
    _builtin("coordination.k8s.io", "Lease", "leases", namespaced=True, status=False),
)

ENIPOOL_CRD_DEFAULT: Final[JSON] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "enipools.eni-ipam.io"},
    "spec": {
        "group": "eni-ipam.io",
        "scope": "Cluster",
        "names": {"kind": "ENIPool", "listKind": "ENIPoolList", "plural": "enipools", "singular": "enipool"},
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
                "subresources": {"status": {}},
            }
        ],
    },
}
"""A schema-less ENIPool CRD for tests that do not care about validation. Treat it as read-only."""


def resource_types_from_crd(manifest: Mapping[str, Any]) -> list[ResourceType]:
    """One :class:`ResourceType` per served version of a ``apiextensions.k8s.io/v1`` CRD manifest."""
    if (
        manifest.get("apiVersion") != "apiextensions.k8s.io/v1"
        or manifest.get("kind") != "CustomResourceDefinition"
    ):
        raise ValueError("expected an apiextensions.k8s.io/v1 CustomResourceDefinition manifest")
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        raise ValueError("CRD manifest has no spec")
    names = spec.get("names") or {}
    group, kind, plural = spec.get("group"), names.get("kind"), names.get("plural")
    if not (isinstance(group, str) and group and isinstance(kind, str) and isinstance(plural, str)):
        raise ValueError("CRD manifest needs spec.group, spec.names.kind and spec.names.plural")
    scope = spec.get("scope")
    if scope not in ("Namespaced", "Cluster"):
        raise ValueError(f"CRD scope must be Namespaced or Cluster, not {scope!r}")
    types = []
    for version in spec.get("versions") or ():
        if not version.get("served", False):
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, Mapping):
            raise ValueError(f"CRD version {version.get('name')!r} has no schema.openAPIV3Schema")
        subresources = version.get("subresources") or {}
        types.append(
            ResourceType(
                group=group,
                version=str(version["name"]),
                kind=kind,
                plural=plural,
                namespaced=scope == "Namespaced",
                status_subresource="status" in subresources,
                schema=schema,
                initial_status={} if "status" in subresources else None,
                unconditional_update=False,
            )
        )
    if not types:
        raise ValueError("CRD manifest serves no version")
    return types


@dataclasses.dataclass(frozen=True)
class Target:
    """What a request path names: a collection (``name`` is None), an object, or its ``status``."""

    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


def parse_path(path: str, types: Mapping[tuple[str, str, str], ResourceType]) -> Target | None:
    """Route ``/api/v1/...`` and ``/apis/<group>/<version>/...``; None for anything not served.

    ``/api/v1/namespaces/x`` is the Namespace ``x``; ``/api/v1/namespaces/x/pods`` is the pods
    collection in namespace ``x``: the third segment decides, as on the real server.
    """
    segments = [s for s in path.split("/") if s]
    if len(segments) >= 2 and segments[0] == "api":
        group, version, rest = "", segments[1], segments[2:]
    elif len(segments) >= 3 and segments[0] == "apis":
        group, version, rest = segments[1], segments[2], segments[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        inner = types.get((group, version, rest[2]))
        if inner is not None and inner.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not 1 <= len(rest) <= 3:
        return None
    rtype = types.get((group, version, rest[0]))
    if rtype is None or (namespace is not None and not rtype.namespaced):
        return None
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    if subresource is not None and not (subresource == "status" and rtype.status_subresource):
        return None
    if name is not None and rtype.namespaced and namespace is None:
        return None
    return Target(rtype, namespace, name, subresource)


def bool_param(query: Mapping[str, str], name: str) -> bool:
    value = query.get(name)
    if value is not None and value not in _TRUE + _FALSE:
        raise StatusError(400, f'invalid value for {name}: "{value}"')
    return value in _TRUE


def int_param(query: Mapping[str, str], name: str) -> int | None:
    value = query.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise StatusError(400, f'{name}: Invalid value: "{value}": must be an integer') from None
