"""Who a request is (bearer tokens) and whether it may do what it asks (RBAC).

Authentication: every request carries a bearer token. The admin token authenticates
``kubernetes-admin`` in the groups ``system:masters`` and ``system:authenticated``; a ServiceAccount
token authenticates ``system:serviceaccount:<namespace>:<name>`` in ``system:serviceaccounts``,
``system:serviceaccounts:<namespace>`` and ``system:authenticated``, and only while that
ServiceAccount exists (as a bound token is refused once its account is gone). Anything else is a 401.

Authorization follows the RBAC authorizer: ``system:masters`` may do anything (the real server's
superuser group); everyone else is allowed a request when a rule of a Role or ClusterRole bound to
them (RoleBinding in the request's namespace, or ClusterRoleBinding) matches its verb, API group,
resource (``enipools``, ``enipools/status``, ``*``, ``*/status``) and, when the rule names some,
the object's name. Rules are read from the Roles, ClusterRoles and bindings stored in the server at
the time of the request. Discovery, OpenAPI, ``/version`` and health paths are open to every
authenticated user (the real server's ``system:discovery`` and ``system:public-info-viewer``
bindings), and so are SelfSubjectAccessReviews (``system:basic-user``: ``kubectl auth can-i``);
other non-resource paths follow ``nonResourceURLs`` rules. Aggregated ClusterRoles and
the real server's other default roles and bindings are not emulated.

A denial is the real 403 ``Forbidden`` ``Status``: ``enipools.eni-ipam.io "n1" is forbidden: User
"system:serviceaccount:ns:sa" cannot patch resource "enipools/status" in API group "eni-ipam.io" at
the cluster scope``, with ``RBAC: ...`` appended when a binding names a role that does not exist.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from eni_ipam_testkit.fake_kube.resources import JSON, StatusError

ADMIN_USER: Final = "kubernetes-admin"
MASTERS: Final = "system:masters"
AUTHENTICATED: Final = "system:authenticated"
# Open to every authenticated user on a real cluster (system:discovery, system:public-info-viewer,
# system:basic-user's access reviews are resource requests and pass through RBAC below).
_OPEN_PATHS: Final = ("/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/version", "/version/")
_HEALTH: Final = ("/healthz", "/livez", "/readyz", "/healthz/*", "/livez/*", "/readyz/*")
# system:basic-user, bound to system:authenticated on every cluster: anyone may ask what they may do.
_BASIC_USER: Final = (
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
        "verbs": ["create"],
    },
)

Lister = Callable[[str], Iterable[JSON]]
"""Reads the stored objects of one storage key (``roles.rbac.authorization.k8s.io``)."""


@dataclasses.dataclass(frozen=True)
class User:
    """An authenticated identity."""

    name: str
    groups: tuple[str, ...]
    service_account: tuple[str, str] | None = None
    """``(namespace, name)`` for a ServiceAccount."""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """The user's extra information (``userInfo.extra``): a token bound to a Pod carries its pod's and
    node's names and uids (``authentication.kubernetes.io/node-name``), as admission sees them."""

    @property
    def superuser(self) -> bool:
        return MASTERS in self.groups


ADMIN: Final = User(ADMIN_USER, (MASTERS, AUTHENTICATED))


def service_account_user(namespace: str, name: str) -> User:
    return User(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
        service_account=(namespace, name),
    )


@dataclasses.dataclass(frozen=True)
class Attributes:
    """What a request asks, as the authorizer sees it (the real server's ``RequestInfo``)."""

    verb: str
    path: str
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def resource_request(self) -> bool:
        return bool(self.resource)


def _subject_matches(subject: Mapping[str, Any], user: User, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == user.name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount" and user.service_account is not None:
        namespace = subject.get("namespace") or binding_namespace
        return (namespace, name) == user.service_account
    return False


def _matches(values: Iterable[str] | None, wanted: str) -> bool:
    values = list(values or ())
    return "*" in values or wanted in values


def _resource_matches(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    for resource in rule.get("resources") or ():
        if resource in ("*", combined):
            return True
        if attrs.subresource and resource == f"*/{attrs.subresource}":
            return True
    return False


def rule_allows(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    """Whether one PolicyRule covers the request (rbac's ``RuleAllows``)."""
    if not _matches(rule.get("verbs"), attrs.verb):
        return False
    if not attrs.resource_request:
        return any(
            url == "*" or url == attrs.path or (url.endswith("*") and attrs.path.startswith(url[:-1]))
            for url in rule.get("nonResourceURLs") or ()
        )
    if not (_matches(rule.get("apiGroups"), attrs.group) and _resource_matches(rule, attrs)):
        return False
    names = list(rule.get("resourceNames") or ())
    return not names or attrs.name in names


class Authorizer:
    """RBAC over the stored Roles, ClusterRoles and bindings (read through ``objects``)."""

    def __init__(self, objects: Lister) -> None:
        self._objects = objects

    def authorize(self, user: User, attrs: Attributes) -> tuple[bool, str]:
        """``(allowed, reason)``; the reason lists bindings whose role is missing, as RBAC's does."""
        if user.superuser:
            return True, ""
        if not attrs.resource_request and any(
            fnmatch.fnmatchcase(attrs.path, p) for p in _OPEN_PATHS + _HEALTH
        ):
            return True, ""
        if AUTHENTICATED in user.groups and any(rule_allows(rule, attrs) for rule in _BASIC_USER):
            return True, ""
        errors: list[str] = []
        for rules in self._rules_for(user, attrs.namespace, errors):
            if any(rule_allows(rule, attrs) for rule in rules):
                return True, ""
        reason = ""
        if errors:
            reason = "RBAC: " + (errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
        return False, reason

    def _rules_for(self, user: User, namespace: str, errors: list[str]) -> Iterable[list[JSON]]:
        roles = {
            (o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
            for o in self._objects("roles.rbac.authorization.k8s.io")
        }
        cluster_roles = {
            o["metadata"]["name"]: o for o in self._objects("clusterroles.rbac.authorization.k8s.io")
        }
        for binding in self._objects("clusterrolebindings.rbac.authorization.k8s.io"):
            if any(_subject_matches(s, user, "") for s in binding.get("subjects") or ()):
                ref = binding.get("roleRef") or {}
                role = cluster_roles.get(ref.get("name", "")) if ref.get("kind") == "ClusterRole" else None
                if role is None:
                    errors.append(f'clusterrole.rbac.authorization.k8s.io "{ref.get("name", "")}" not found')
                    continue
                yield list(role.get("rules") or ())
        if not namespace:
            return
        for binding in self._objects("rolebindings.rbac.authorization.k8s.io"):
            if binding["metadata"].get("namespace") != namespace:
                continue
            if not any(_subject_matches(s, user, namespace) for s in binding.get("subjects") or ()):
                continue
            ref = binding.get("roleRef") or {}
            name = ref.get("name", "")
            if ref.get("kind") == "Role":
                role = roles.get((namespace, name))
                missing = f'role.rbac.authorization.k8s.io "{name}" not found'
            else:
                role = cluster_roles.get(name)
                missing = f'clusterrole.rbac.authorization.k8s.io "{name}" not found'
            if role is None:
                errors.append(missing)
                continue
            yield list(role.get("rules") or ())


def forbidden(user: User, attrs: Attributes, reason: str) -> StatusError:
    """The real server's 403 for a denied request."""
    if not attrs.resource_request:
        message = f'forbidden: User "{user.name}" cannot {attrs.verb} path "{attrs.path}"'
        if reason:
            message += f": {reason}"
        return StatusError(403, message)
    resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    why = f'User "{user.name}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.group}" {scope}'
    if reason:
        why += f": {reason}"
    qualified = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
    subject = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    details = {"name": attrs.name, "group": attrs.group, "kind": attrs.resource}
    return StatusError(403, f"{subject} is forbidden: {why}", details={k: v for k, v in details.items() if v})
