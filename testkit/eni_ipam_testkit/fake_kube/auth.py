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
bindings), and so are SelfSubjectAccessReviews, SelfSubjectRulesReviews and SelfSubjectReviews
(``system:basic-user``: ``kubectl auth can-i [--list]``, ``kubectl auth whoami``); other
non-resource paths follow ``nonResourceURLs`` rules. Aggregated ClusterRoles and the real server's
other default roles and bindings are not emulated.

Impersonation (:func:`impersonate`) is the real server's filter: ``Impersonate-User`` (a
``system:serviceaccount:<ns>:<name>`` name is the ServiceAccount, with its three groups unless groups
are given), ``Impersonate-Group``, ``Impersonate-Uid`` and ``Impersonate-Extra-<key>``, each allowed
only when the requester may ``impersonate`` the ``users``, ``serviceaccounts`` (in their namespace),
``groups``, ``uids`` or ``userextras/<key>`` of that name; the request then runs, is authorized and is
recorded as the impersonated user (in ``system:authenticated`` unless the groups given say otherwise).

A denial is the real 403 ``Forbidden`` ``Status``: ``enipools.eni-ipam.io "n1" is forbidden: User
"system:serviceaccount:ns:sa" cannot patch resource "enipools/status" in API group "eni-ipam.io" at
the cluster scope``, with ``RBAC: ...`` appended when a binding names a role that does not exist.
"""

from __future__ import annotations

import contextvars
import dataclasses
import fnmatch
import json
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from multidict import CIMultiDictProxy

from eni_ipam_testkit.fake_kube.resources import JSON, StatusError

ADMIN_USER: Final = "kubernetes-admin"
MASTERS: Final = "system:masters"
AUTHENTICATED: Final = "system:authenticated"
_SA_PREFIX: Final = "system:serviceaccount:"
_AUTHN: Final = "authentication.k8s.io"
# Open to every authenticated user on a real cluster (system:discovery, system:public-info-viewer,
# system:basic-user's access reviews are resource requests and pass through RBAC below).
_OPEN_PATHS: Final = ("/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/version", "/version/")
_HEALTH: Final = ("/healthz", "/livez", "/readyz", "/healthz/*", "/livez/*", "/readyz/*")
# system:basic-user, bound to system:authenticated on every cluster: anyone may ask what they may do
# and who they are; system:discovery and system:public-info-viewer open the paths above.
_BASIC_USER: Final = (
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
        "verbs": ["create"],
    },
    {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
    {"nonResourceURLs": sorted(_OPEN_PATHS + _HEALTH), "verbs": ["get"]},
)
# What RBAC shows for system:masters (the cluster-admin ClusterRole is bound to it on every cluster).
_SUPERUSER_RULES: Final = (
    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
    {"nonResourceURLs": ["*"], "verbs": ["*"]},
)
_IMPERSONATE_EXTRA: Final = "impersonate-extra-"

RBAC_GROUP: Final = "rbac.authorization.k8s.io"

Lister = Callable[[str], Iterable[JSON]]
"""Reads the stored objects of one storage key (``roles.rbac.authorization.k8s.io``)."""


@dataclasses.dataclass(frozen=True)
class User:
    """An authenticated identity."""

    name: str
    groups: tuple[str, ...]
    service_account: tuple[str, str] | None = None
    """``(namespace, name)`` for a ServiceAccount."""
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """The user's extra information (``userInfo.extra``), ``(key, values)`` pairs: a token bound to a Pod
    carries its pod's and node's names and uids (``authentication.kubernetes.io/node-name``), as
    admission sees them; impersonation sets them from ``Impersonate-Extra-*``."""
    impersonator: str = ""
    """The authenticated user who is impersonating this one ("" when nobody is)."""

    def info(self) -> JSON:
        """A ``UserInfo`` (what SelfSubjectReview answers)."""
        info: JSON = {"username": self.name, "groups": list(self.groups)}
        if self.uid:
            info["uid"] = self.uid
        if self.extra:
            info["extra"] = {key: list(values) for key, values in self.extra}
        return info

    @property
    def superuser(self) -> bool:
        return MASTERS in self.groups


ADMIN: Final = User(ADMIN_USER, (MASTERS, AUTHENTICATED))
REQUESTER: contextvars.ContextVar[User | None] = contextvars.ContextVar("fake_kube_requester", default=None)
"""Who the request being handled is (after impersonation); None for writes made without a request
(``FakeKube.add_object``), which are the admin's."""


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

    def role_rules(self, plural: str, namespace: str, name: str) -> list[JSON]:
        """The rules of the Role (in ``namespace``) or ClusterRole a binding names; 404 if it is missing."""
        for role in self._objects(f"{plural}.{RBAC_GROUP}"):
            if role["metadata"]["name"] == name and (role["metadata"].get("namespace") or "") == namespace:
                return list(role.get("rules") or ())
        raise StatusError(
            404,
            f'{plural}.{RBAC_GROUP} "{name}" not found',
            details={"name": name, "group": RBAC_GROUP, "kind": plural},
        )

    def rules_for(self, user: User, namespace: str) -> tuple[list[JSON], bool]:
        """``(rules, incomplete)`` as SelfSubjectRulesReview answers: every rule that applies to the
        user in ``namespace`` (the superuser's are cluster-admin's, as on a cluster); incomplete when
        a binding names a role that does not exist."""
        if user.superuser:
            return [dict(rule) for rule in _SUPERUSER_RULES], False
        rules: list[JSON] = [dict(rule) for rule in _BASIC_USER] if AUTHENTICATED in user.groups else []
        errors: list[str] = []
        for found in self._rules_for(user, namespace, errors):
            rules.extend(found)
        return rules, bool(errors)

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


def _object_reference(
    kind: str, name: str, *, namespace: str = "", api_version: str = "", path: str = ""
) -> str:
    """Go's ``%v`` of the ObjectReference the real filter builds (its error message prints them)."""
    return "{" + " ".join((kind, namespace, name, "", api_version, "", path)) + "}"


def impersonate(requester: User, headers: CIMultiDictProxy[str], authorizer: Authorizer) -> User:
    """The user a request acts as after its ``Impersonate-*`` headers (``requester`` when it has none).

    ``headers`` are the request's (a repeated header gives several groups or extras). Raises the
    real server's 403 for a step the requester may not take, and its 500 for groups, extras or a uid
    asked without a user.
    """
    getall = headers.getall
    user_name = headers.get("Impersonate-User", "")
    groups_given = list(getall("Impersonate-Group", []))
    extras: dict[str, list[str]] = {}
    for header in {h.lower() for h in headers if h.lower().startswith(_IMPERSONATE_EXTRA)}:
        key = urllib.parse.unquote(header[len(_IMPERSONATE_EXTRA) :])
        extras.setdefault(key, []).extend(getall(header))
    uid = headers.get("Impersonate-Uid", "")
    if not (user_name or groups_given or extras or uid):
        return requester
    steps: list[tuple[Attributes, str]] = []
    service_account: tuple[str, str] | None = None
    parts = user_name.split(":")
    if user_name.startswith(_SA_PREFIX) and len(parts) == 4 and parts[2] and parts[3]:
        service_account = (parts[2], parts[3])
        where = Attributes("impersonate", "", resource="serviceaccounts", namespace=parts[2], name=parts[3])
        steps.append((where, _object_reference("ServiceAccount", parts[3], namespace=parts[2])))
    elif user_name:
        steps.append((Attributes("impersonate", "", resource="users", name=user_name), ""))
    for group in groups_given:
        steps.append(
            (Attributes("impersonate", "", resource="groups", name=group), _object_reference("Group", group))
        )
    for key, values in extras.items():
        for value in values:
            where = Attributes(
                "impersonate", "", group=_AUTHN, resource="userextras", subresource=key, name=value
            )
            steps.append((where, _object_reference("UserExtra", value, api_version=f"{_AUTHN}/v1", path=key)))
    if uid:
        where = Attributes("impersonate", "", group=_AUTHN, resource="uids", name=uid)
        steps.append((where, _object_reference("UID", uid, api_version=f"{_AUTHN}/v1")))
    if not user_name:
        requested = " ".join(reference for _, reference in steps)
        message = f"requested [{requested}] without impersonating a user"
        raise StatusError(
            500, f"Internal error occurred: {message}", details={"causes": [{"message": message}]}
        )
    for attributes, _ in steps:
        allowed, reason = authorizer.authorize(requester, attributes)
        if not allowed:
            raise forbidden(requester, attributes, reason)
    groups = list(groups_given)
    if service_account is not None and not groups_given:
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{service_account[0]}"]
    if user_name != "system:anonymous" and not ({AUTHENTICATED, "system:unauthenticated"} & set(groups)):
        groups.append(AUTHENTICATED)
    return User(
        user_name,
        tuple(groups),
        service_account=service_account,
        uid=uid,
        extra=tuple((key, tuple(values)) for key, values in sorted(extras.items())),
        impersonator=requester.name,
    )


def rules_review(body: Any, user: User, authorizer: Authorizer) -> JSON:
    """A SelfSubjectRulesReview (``kubectl auth can-i --list``): the user's rules in ``spec.namespace``."""
    spec = body.get("spec") if isinstance(body, dict) else None
    namespace = spec.get("namespace") if isinstance(spec, dict) else None
    if not isinstance(namespace, str) or not namespace:
        raise StatusError(400, "no namespace on request")
    rules, incomplete = authorizer.rules_for(user, namespace)
    resource_rules, non_resource_rules = [], []
    for rule in rules:
        if rule.get("nonResourceURLs"):
            non_resource_rules.append(
                {"verbs": list(rule.get("verbs") or ()), "nonResourceURLs": rule["nonResourceURLs"]}
            )
            continue
        converted = {
            "verbs": list(rule.get("verbs") or ()),
            "apiGroups": list(rule.get("apiGroups") or ()),
            "resources": list(rule.get("resources") or ()),
        }
        if rule.get("resourceNames"):
            converted["resourceNames"] = list(rule["resourceNames"])
        resource_rules.append(converted)
    status: JSON = {
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": incomplete,
    }
    if incomplete:
        status["evaluationError"] = "at least one binding names a role that does not exist"
    return {
        "kind": "SelfSubjectRulesReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": {"namespace": namespace},
        "status": status,
    }


def self_subject_review(user: User) -> JSON:
    """A SelfSubjectReview (``kubectl auth whoami``): who the request is, after impersonation."""
    return {
        "kind": "SelfSubjectReview",
        "apiVersion": f"{_AUTHN}/v1",
        "metadata": {"creationTimestamp": None},
        "status": {"userInfo": user.info()},
    }


# -- escalation (rbac's ConfirmNoEscalation, BindingAuthorized, RoleEscalationAuthorized) ------------


def _quoted(values: Iterable[str]) -> str:
    """Go's ``%q`` of a ``[]string``."""
    return "[" + " ".join(json.dumps(v) for v in values) + "]"


def _compact(rule: Mapping[str, Any]) -> str:
    """rbac's ``CompactString`` of a rule."""
    parts = []
    for key, label in (
        ("apiGroups", "APIGroups"),
        ("resources", "Resources"),
        ("nonResourceURLs", "NonResourceURLs"),
        ("resourceNames", "ResourceNames"),
        ("verbs", "Verbs"),
    ):
        if rule.get(key):
            parts.append(f"{label}:{_quoted(rule[key])}")
    return "{" + ", ".join(parts) + "}"


def _missing(owner: list[JSON], rules: Iterable[Mapping[str, Any]]) -> list[str]:
    """The requested rights the owner's rules do not cover, compacted and described as rbac does."""
    simple: dict[tuple[str, str, str], JSON] = {}
    other: list[JSON] = []
    for rule in rules:
        verbs = list(rule.get("verbs") or ())
        for url in rule.get("nonResourceURLs") or ():
            for verb in verbs:
                if not any(rule_allows(o, Attributes(verb, url)) for o in owner):
                    other.append({"nonResourceURLs": [url], "verbs": [verb]})
        for group in rule.get("apiGroups") or ():
            for resource in rule.get("resources") or ():
                plural, _, subresource = resource.partition("/")
                for name in list(rule.get("resourceNames") or ()) or [""]:
                    for verb in verbs:
                        wanted = Attributes(
                            verb, "", group=group, resource=plural, subresource=subresource, name=name
                        )
                        if any(rule_allows(o, wanted) for o in owner):
                            continue
                        key = (group, resource, name)
                        entry = simple.setdefault(
                            key,
                            {"apiGroups": [group], "resources": [resource], "verbs": []}
                            | ({"resourceNames": [name]} if name else {}),
                        )
                        if verb not in entry["verbs"]:
                            entry["verbs"].append(verb)
    return sorted({_compact(rule) for rule in [*simple.values(), *other]})


def confirm_no_escalation(authorizer: Authorizer, plural: str, new: JSON, old: JSON | None) -> None:
    """Refuse a Role, ClusterRole or binding that grants what its author does not hold (403).

    As the real RBAC storage: ``system:masters`` may write anything; a role's author needs every
    right it grants or ``escalate`` on it; a binding's author needs the referenced role's rights or
    ``bind`` on it (a missing role is a 404). A write that changes no rules (or, for a binding, no
    roleRef or subjects) is not checked, as one that only touches what the garbage collector reads.
    """
    user = REQUESTER.get()
    if user is None or user.superuser:
        return
    meta = new["metadata"]
    name, namespace = meta.get("name", ""), meta.get("namespace") or ""
    if plural in ("roles", "clusterroles"):
        if old is not None and old.get("rules") == new.get("rules"):
            return
        escalate = Attributes(
            "escalate", "", group=RBAC_GROUP, resource=plural, namespace=namespace, name=name
        )
        if authorizer.authorize(user, escalate)[0]:
            return
        rules = list(new.get("rules") or ())
    else:
        if old is not None and all(old.get(k) == new.get(k) for k in ("roleRef", "subjects")):
            return
        ref = new.get("roleRef") or {}
        ref_plural = "roles" if ref.get("kind") == "Role" else "clusterroles"
        ref_name = ref.get("name", "")
        bind = Attributes(
            "bind", "", group=RBAC_GROUP, resource=ref_plural, namespace=namespace, name=ref_name
        )
        if authorizer.authorize(user, bind)[0]:
            return
        rules = authorizer.role_rules(ref_plural, namespace if ref_plural == "roles" else "", ref_name)
    owner, _ = authorizer.rules_for(user, namespace)
    missing = _missing(owner, rules)
    if missing:
        message = (
            f'{plural}.{RBAC_GROUP} "{name}" is forbidden: user "{user.name}" '
            f"(groups={_quoted(user.groups)}) is attempting to grant RBAC permissions not currently held:\n"
            + "\n".join(missing)
        )
        raise StatusError(403, message, details={"name": name, "group": RBAC_GROUP, "kind": plural})
