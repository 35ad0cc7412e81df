"""Resource types the fake API server serves, request parsing, and the ``Status`` errors it answers with.

A :class:`ResourceType` is one served ``group/version/plural`` with what discovery says about it
(kind, scope, verbs, short names, categories, subresources). Built-in types are listed in
:data:`BUILTIN_RESOURCES`; custom resources come from the CustomResourceDefinitions stored in the
server (:mod:`eni_ipam_testkit.fake_kube.crds` turns one into a type per served version). All versions
of one CRD share a single storage key (``plural.group``), as on the real server, where a conversion
of strategy ``None`` only rewrites ``apiVersion``.

Every failure the server reports is a :class:`StatusError`, rendered as a ``kind: Status`` body with
the reason and message wording of the real kube-apiserver, because clients (and the project's own
code) branch on ``code`` and ``reason`` and people read the message. Field-level failures are
:class:`FieldError` values, printed as apimachinery's ``field.Error`` prints them: the aggregated
message names each field once (``spec.x: Invalid value: -1: ...``), and each cause carries the
field in ``field`` and the rest in ``message``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
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
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

ALL_VERBS: Final = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
"""The verbs of an ordinary stored resource, in the order discovery lists them."""
STATUS_VERBS: Final = ("get", "patch", "update")


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


class Printed(str):
    """A bad value apimachinery prints verbatim (Go's ``%#v`` of an unset version is ``0x0``)."""


def go_value(value: Any) -> str:
    """A bad value as apimachinery prints it: numbers and booleans bare, strings quoted, else JSON."""
    if isinstance(value, Printed):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


_OMITTED: Final = object()
# Types whose message never shows the value (apimachinery's ErrorBody).
_NO_VALUE: Final = ("FieldValueRequired", "FieldValueForbidden", "FieldValueTooLong", "FieldValueTooShort")
_TYPE_WORDS: Final[Mapping[str, str]] = {
    "FieldValueNotFound": "Not found",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueInvalid": "Invalid value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueTooLong": "Too long",
    "FieldValueTooMany": "Too many",
    "FieldValueTypeInvalid": "Invalid value",
}


@dataclasses.dataclass(frozen=True)
class FieldError:
    """One field-level validation failure, as apimachinery's ``field.Error``."""

    type: str
    field: str
    value: Any = _OMITTED
    detail: str = ""

    def body(self) -> str:
        """The message without the field: what a ``Status`` cause carries in ``message``."""
        text = _TYPE_WORDS.get(self.type, self.type)
        if self.type not in _NO_VALUE and self.value is not _OMITTED:
            text += f": {go_value(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, value, detail)


def type_invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueTypeInvalid", field, value, detail)


def required(field: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", field, "", detail)


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", field, "", detail)


def not_supported(field: str, value: Any, supported: Sequence[Any]) -> FieldError:
    quoted = ", ".join(json.dumps(v if isinstance(v, str) else go_value(v)) for v in supported)
    return FieldError("FieldValueNotSupported", field, value, f"supported values: {quoted}" if quoted else "")


def too_long(field: str, limit: int) -> FieldError:
    unit = "byte" if limit == 1 else "bytes"
    return FieldError("FieldValueTooLong", field, "<value omitted>", f"may not be more than {limit} {unit}")


def too_many(field: str, actual: int, limit: int) -> FieldError:
    unit = "item" if limit == 1 else "items"
    return FieldError("FieldValueTooMany", field, actual, f"must have at most {limit} {unit}")


def invalid_error(
    qualified_kind: str, name: str, group: str, kind: str, errors: Sequence[FieldError]
) -> StatusError:
    """422 ``Invalid`` as apimachinery's ``NewInvalid`` builds it (identical messages are listed once)."""
    messages = list(dict.fromkeys(str(e) for e in errors))
    joined = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
    details = {
        "name": name,
        "group": group,
        "kind": kind,
        "causes": [{"reason": e.type, "message": e.body(), "field": e.field} for e in errors],
    }
    return StatusError(422, f'{qualified_kind} "{name}" is invalid: {joined}', details=details)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResourceType:
    """One served ``group/version/plural``."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    status_subresource: bool = False
    schema: Mapping[str, Any] | None = None
    """The version's ``openAPIV3Schema`` (custom resources only)."""
    definition: str | None = None
    """The name of a built-in type's OpenAPI definition (``io.k8s.api.core.v1.Node``)."""
    field_labels: frozenset[str] = frozenset()
    """Field selector labels beyond ``metadata.name`` and ``metadata.namespace``."""
    unconditional_update: bool = True
    """Whether PUT without ``metadata.resourceVersion`` is allowed (it is not for custom resources)."""
    initial_status: Mapping[str, Any] | None = None
    """What create does with the body's ``status``: None keeps it, ``{}`` drops it, else replaces it."""
    printer_columns: tuple[Mapping[str, Any], ...] = ()
    """A custom resource version's ``additionalPrinterColumns`` (its Table columns after Name)."""
    crd: str | None = None
    """The name of the CustomResourceDefinition serving this type (custom resources only)."""
    stored: bool = True
    """False for a virtual resource answered without storage (access reviews)."""

    @property
    def custom(self) -> bool:
        return self.crd is not None

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

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

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

    def invalid(self, name: str, errors: Sequence[FieldError]) -> StatusError:
        """422 ``Invalid`` naming this kind."""
        return invalid_error(self.qualified_kind, name, self.group, self.kind, errors)

    def _details(self, name: str) -> JSON:
        return {"name": name, "group": self.group, "kind": self.plural}


def _builtin(
    group: str,
    kind: str,
    plural: str,
    definition: str,
    *,
    namespaced: bool,
    status: bool = False,
    short: str = "",
    categories: str = "",
    verbs: tuple[str, ...] = ALL_VERBS,
    fields: str = "",
    initial_status: Mapping[str, Any] | None = None,
    stored: bool = True,
) -> ResourceType:
    return ResourceType(
        group=group,
        version="v1",
        kind=kind,
        plural=plural,
        namespaced=namespaced,
        short_names=tuple(short.split()),
        categories=tuple(categories.split()),
        verbs=verbs,
        status_subresource=status,
        definition=definition,
        field_labels=frozenset(fields.split()),
        initial_status=initial_status,
        stored=stored,
    )


_CORE, _APPS, _RBAC = "io.k8s.api.core.v1", "io.k8s.api.apps.v1", "io.k8s.api.rbac.v1"
_RBAC_GROUP: Final = "rbac.authorization.k8s.io"
_EXT = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1"
_NO_DELETECOLLECTION: Final = tuple(v for v in ALL_VERBS if v != "deletecollection")

# Field labels are the ones the real server registers for these types (a subset for events); short
# names, categories and verbs are what its discovery lists. On create, nodes keep the status they are
# registered with, pods start Pending and namespaces Active; the other types with a status subresource
# start with an empty status, as their real create strategies leave it.
BUILTIN_RESOURCES: Final[tuple[ResourceType, ...]] = (
    _builtin(
        "", "Node", "nodes", f"{_CORE}.Node", namespaced=False, status=True, short="no",
        fields="spec.unschedulable",
    ),
    _builtin(
        "", "Pod", "pods", f"{_CORE}.Pod", namespaced=True, status=True, short="po", categories="all",
        fields="spec.nodeName spec.restartPolicy spec.schedulerName spec.serviceAccountName "
        "spec.hostNetwork status.phase status.podIP status.nominatedNodeName",
        initial_status={"phase": "Pending"},
    ),
    _builtin(
        "", "Namespace", "namespaces", f"{_CORE}.Namespace", namespaced=False, status=True, short="ns",
        verbs=_NO_DELETECOLLECTION, fields="status.phase", initial_status={"phase": "Active"},
    ),
    _builtin(
        "", "Event", "events", f"{_CORE}.Event", namespaced=True, short="ev",
        fields="involvedObject.kind involvedObject.namespace involvedObject.name involvedObject.uid "
        "involvedObject.apiVersion involvedObject.resourceVersion involvedObject.fieldPath "
        "reason reportingComponent source type",
    ),
    _builtin("", "ServiceAccount", "serviceaccounts", f"{_CORE}.ServiceAccount", namespaced=True, short="sa"),
    _builtin("", "ConfigMap", "configmaps", f"{_CORE}.ConfigMap", namespaced=True, short="cm"),
    _builtin("", "Secret", "secrets", f"{_CORE}.Secret", namespaced=True, fields="type"),
    _builtin(
        "", "Service", "services", f"{_CORE}.Service", namespaced=True, status=True, short="svc",
        categories="all", verbs=ALL_VERBS, initial_status={},
    ),
    _builtin(
        "apps", "Deployment", "deployments", f"{_APPS}.Deployment", namespaced=True, status=True,
        short="deploy", categories="all", initial_status={},
    ),
    _builtin(
        "apps", "DaemonSet", "daemonsets", f"{_APPS}.DaemonSet", namespaced=True, status=True, short="ds",
        categories="all", initial_status={},
    ),
    _builtin("coordination.k8s.io", "Lease", "leases", "io.k8s.api.coordination.v1.Lease", namespaced=True),
    _builtin(
        "discovery.k8s.io", "EndpointSlice", "endpointslices", "io.k8s.api.discovery.v1.EndpointSlice",
        namespaced=True,
    ),
    _builtin(
        "policy", "PodDisruptionBudget", "poddisruptionbudgets", "io.k8s.api.policy.v1.PodDisruptionBudget",
        namespaced=True, status=True, short="pdb", initial_status={},
    ),
    _builtin(_RBAC_GROUP, "Role", "roles", f"{_RBAC}.Role", namespaced=True),
    _builtin(_RBAC_GROUP, "RoleBinding", "rolebindings", f"{_RBAC}.RoleBinding", namespaced=True),
    _builtin(_RBAC_GROUP, "ClusterRole", "clusterroles", f"{_RBAC}.ClusterRole", namespaced=False),
    _builtin(
        _RBAC_GROUP, "ClusterRoleBinding", "clusterrolebindings", f"{_RBAC}.ClusterRoleBinding",
        namespaced=False,
    ),
    _builtin(
        "apiextensions.k8s.io", "CustomResourceDefinition", "customresourcedefinitions",
        f"{_EXT}.CustomResourceDefinition", namespaced=False, status=True, short="crd crds",
        categories="api-extensions", initial_status={},
    ),
    _builtin(
        "admissionregistration.k8s.io", "ValidatingAdmissionPolicy", "validatingadmissionpolicies",
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicy", namespaced=False, status=True,
        categories="api-extensions", initial_status={},
    ),
    _builtin(
        "admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyBinding", namespaced=False,
        categories="api-extensions",
    ),
    _builtin(
        "authorization.k8s.io", "SelfSubjectAccessReview", "selfsubjectaccessreviews",
        "io.k8s.api.authorization.v1.SelfSubjectAccessReview", namespaced=False, verbs=("create",),
        stored=False,
    ),
    _builtin(
        "authorization.k8s.io", "SelfSubjectRulesReview", "selfsubjectrulesreviews",
        "io.k8s.api.authorization.v1.SelfSubjectRulesReview", namespaced=False, verbs=("create",),
        stored=False,
    ),
    _builtin(
        "authentication.k8s.io", "SelfSubjectReview", "selfsubjectreviews",
        "io.k8s.api.authentication.v1.SelfSubjectReview", namespaced=False, verbs=("create",), stored=False,
    ),
)  # fmt: skip

CRDS: Final = "customresourcedefinitions.apiextensions.k8s.io"
"""The storage key of CustomResourceDefinitions."""

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
    token_request = subresource == "token" and rtype.plural == "serviceaccounts" and not rtype.group
    if (
        subresource is not None
        and not (subresource == "status" and rtype.status_subresource)
        and not token_request
    ):
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
