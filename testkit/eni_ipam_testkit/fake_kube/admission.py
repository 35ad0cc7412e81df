"""ValidatingAdmissionPolicy: the stored policies and bindings judge every write, in CEL (cel-python).

A write through the API (create, update, patch, delete; ``/status`` included) reaches
:class:`Admission` after its object is defaulted and validated, before it is stored, as on the real
server. Each ``admissionregistration.k8s.io/v1`` ValidatingAdmissionPolicyBinding names a policy;
the pair judges the write when the policy's ``matchConstraints`` and the binding's
``matchResources`` match it (``resourceRules`` with operations, groups, versions, resources and
subresources such as ``enipools/status``, scope and resource names; ``excludeResourceRules``;
``namespaceSelector``; ``objectSelector``) and every ``matchConditions`` expression holds. Then
``variables`` are evaluated in order, and each of ``validations`` must be true. A false one is a
violation with its ``messageExpression``'s value, else its ``message``, else ``failed expression:
<expression>``; an expression that fails to evaluate (or is not a bool) follows ``failurePolicy``
(``Fail``, the default, counts it as a violation; ``Ignore`` as passing). The binding's
``validationActions`` say what a violation does: ``Deny`` refuses the write with the real answer
(``enipools.eni-ipam.io "n2" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied
request: <message>``, code and reason from the validation's ``reason``: 403 Forbidden, 401
Unauthorized, 413 RequestEntityTooLarge, 422 Invalid when none is given), ``Warn`` adds a
``Warning`` header (``Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b':
<message>``) and ``Audit`` is logged (``admission_policy_audit``).

The CEL environment is the real one's: ``request`` (the AdmissionRequest as JSON, empty fields
absent: ``operation``, ``userInfo`` with ``username``, ``groups`` and ``extra``, ``resource``,
``subResource``, ``kind``, ``name``, ``namespace``, ``dryRun``), ``object`` (null on DELETE),
``oldObject`` (null on CREATE), ``variables``, ``namespaceObject`` (null for cluster-scoped writes)
and ``params`` (null). A policy is checked when it is written: every expression must compile
(422 ``Invalid`` naming ``spec.validations[0].expression``), refer only to those variables, and
call only functions CEL has; what this server cannot do is refused with 501 naming it rather than
judged wrongly: ``paramKind``/``paramRef``, the ``authorizer`` variable, and the functions of
Kubernetes' CEL libraries that cel-python lacks (``lowerAscii``, ``split``, ``quantity``, ...).
Policies cannot judge writes of policies and bindings themselves, as on the real server.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

import celpy
import celpy.adapter
import celpy.celparser
import celpy.celtypes
import celpy.evaluation
import structlog
from lark import Token, Tree

from eni_ipam_testkit.fake_kube.auth import User
from eni_ipam_testkit.fake_kube.resources import (
    JSON,
    FieldError,
    StatusError,
    invalid,
    not_supported,
    required,
)

if TYPE_CHECKING:  # the store imports the CRD schema checks, which evaluate CEL with this module
    from eni_ipam_testkit.fake_kube.store import Change

log = structlog.get_logger("eni_ipam_testkit.fake_kube.admission")

GROUP: Final = "admissionregistration.k8s.io"
POLICIES: Final = f"validatingadmissionpolicies.{GROUP}"
BINDINGS: Final = f"validatingadmissionpolicybindings.{GROUP}"
_UNJUDGED: Final = ("validatingadmissionpolicies", "validatingadmissionpolicybindings")
_VARIABLES: Final = frozenset(
    {"object", "oldObject", "request", "params", "namespaceObject", "variables", "authorizer"}
)
_TYPE_NAMES: Final = frozenset(
    {"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type", "dyn"}
)
_MACROS: Final = frozenset({"has", "all", "exists", "exists_one", "map", "filter"})
_CEL_FUNCTIONS: Final = frozenset(
    {
        "size",
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "timestamp",
        "duration",
        "getDate",
        "getDayOfMonth",
        "getDayOfWeek",
        "getDayOfYear",
        "getFullYear",
        "getMonth",
        "getHours",
        "getMilliseconds",
        "getMinutes",
        "getSeconds",
    }
)
# Kubernetes' CEL libraries (strings, lists, regex, URLs, IPs, quantities, authorizer, optionals):
# cel-go has them, cel-python does not.
_KUBERNETES_FUNCTIONS: Final = frozenset(
    {
        "charAt",
        "indexOf",
        "lastIndexOf",
        "lowerAscii",
        "upperAscii",
        "replace",
        "split",
        "substring",
        "trim",
        "join",
        "format",
        "quote",
        "reverse",
        "isSorted",
        "sum",
        "min",
        "max",
        "find",
        "findAll",
        "url",
        "isURL",
        "getScheme",
        "getHost",
        "getHostname",
        "getPort",
        "getEscapedPath",
        "getQuery",
        "ip",
        "isIP",
        "cidr",
        "isCIDR",
        "quantity",
        "isQuantity",
        "orValue",
        "hasValue",
        "value",
        "of",
        "none",
        "ofNonZeroValue",
        "optMap",
        "optFlatMap",
        "sets",
        "check",
        "allowed",
        "reason",
        "errored",
        "error",
        "path",
        "group",
        "resource",
        "subresource",
        "namespace",
        "name",
        "serviceAccount",
        "fieldSelector",
        "labelSelector",
    }
)
_REASON_CODES: Final[Mapping[str, int]] = {
    "Unauthorized": 401,
    "Forbidden": 403,
    "Invalid": 422,
    "RequestEntityTooLarge": 413,
}
_ENV: Final = celpy.Environment()


class Unsupported(Exception):
    """What this server's CEL cannot do (answered 501, never judged wrongly)."""


class CompileError(Exception):
    """An expression real CEL refuses to compile (answered 422 naming its field)."""


_Unsupported = Unsupported
_CompileError = CompileError


# -- compiling -------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _program(expression: str, variables: frozenset[str] = _VARIABLES) -> celpy.Runner:
    """The compiled program of an expression over ``variables`` (cached: policies and CRD rules judge
    every write). Raises :class:`CompileError` or :class:`Unsupported`."""
    try:
        tree = _ENV.compile(expression)
    except celpy.celparser.CELParseError as e:
        context = e.__context__
        detail = str(context).splitlines()[0] if context is not None else str(e).strip()
        where = f"{getattr(e, 'line', 1)}:{getattr(e, 'column', 1)}"
        raise _CompileError(f"compilation failed: ERROR: <input>:{where}: Syntax error: {detail}") from None
    _check_references(tree, variables)
    return _ENV.program(tree)


compile_expression = _program


def evaluate(expression: str, activation: Mapping[str, Any], variables: frozenset[str]) -> Any:
    """The value of a compiled expression over ``variables``, or the CEL error it raised (as a value)."""
    try:
        return _program(expression, variables).evaluate(dict(activation))
    except celpy.evaluation.CELEvalError as e:
        return e
    except (CompileError, Unsupported) as e:  # stored before these checks
        return celpy.evaluation.CELEvalError(str(e))


def _check_references(tree: Tree[Any], variables: frozenset[str]) -> None:
    bound = set()
    for node in tree.iter_subtrees():
        if node.data == "member_dot_arg" and _name(node.children[1]) in _MACROS - {"has"}:
            arguments = node.children[2] if len(node.children) > 2 else None
            if isinstance(arguments, Tree) and arguments.children:
                names = [
                    _name(t.children[0]) for t in arguments.children[0].iter_subtrees() if t.data == "ident"
                ]
                if len(names) == 1:
                    bound.add(names[0])
    for node in tree.iter_subtrees():
        if node.data == "ident":
            name = _name(node.children[0])
            if name not in variables | _TYPE_NAMES | bound:
                raise _CompileError(f"compilation failed: ERROR: <input>: undeclared reference to '{name}'")
            if name == "authorizer":
                raise _Unsupported("the authorizer variable")
        elif node.data in ("ident_arg", "member_dot_arg"):
            name = _name(node.children[0] if node.data == "ident_arg" else node.children[1])
            if name in _MACROS | _CEL_FUNCTIONS | _TYPE_NAMES | {"timestamp", "duration"}:
                continue
            if name in _KUBERNETES_FUNCTIONS:
                raise _Unsupported(f"the CEL function {name}() of Kubernetes' CEL libraries")
            raise _CompileError(
                f"compilation failed: ERROR: <input>: undeclared reference to '{name}' (in container '')"
            )


def _name(token: Any) -> str:
    return str(token.value) if isinstance(token, Token) else str(token)


# -- checking policies and bindings when they are written ----------------------------------------


def _expressions(spec: Mapping[str, Any]) -> Iterable[tuple[str, Any, bool]]:
    """``(field, expression, required)`` for every CEL expression of a policy's spec."""
    for section, key, needed in (
        ("matchConditions", "expression", True),
        ("variables", "expression", True),
        ("validations", "expression", True),
        ("validations", "messageExpression", False),
        ("auditAnnotations", "valueExpression", True),
    ):
        for index, item in enumerate(spec.get(section) or ()):
            if isinstance(item, dict) and (needed or key in item):
                yield f"spec.{section}[{index}].{key}", item.get(key), needed


def _not_implemented(what: str) -> StatusError:
    message = f"the dev cluster does not implement {what} of ValidatingAdmissionPolicy (docs/testing.md)"
    return StatusError(501, message, reason="NotImplemented")


def validate_policy(new: JSON, old: JSON | None) -> list[FieldError]:
    """A ValidatingAdmissionPolicy's checks on write: structure, and every expression compiles."""
    spec = new.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    errors: list[FieldError] = []
    if spec.get("paramKind"):
        raise _not_implemented("spec.paramKind (parameters)")
    if not isinstance(spec.get("matchConstraints"), dict):
        errors.append(required("spec.matchConstraints"))
    if not spec.get("validations") and not spec.get("auditAnnotations"):
        errors.append(
            required("spec.validations", "validations or auditAnnotations must contain at least one item")
        )
    failure = spec.get("failurePolicy")
    if failure is not None and failure not in ("Fail", "Ignore"):
        errors.append(not_supported("spec.failurePolicy", failure, ["Fail", "Ignore"]))
    for index, validation in enumerate(spec.get("validations") or ()):
        reason = validation.get("reason") if isinstance(validation, dict) else None
        if reason is not None and reason not in _REASON_CODES:
            errors.append(not_supported(f"spec.validations[{index}].reason", reason, sorted(_REASON_CODES)))
    for field, expression, needed in _expressions(spec):
        if not isinstance(expression, str) or not expression.strip():
            if needed:
                errors.append(required(field))
            continue
        try:
            _program(expression)
        except _CompileError as e:
            errors.append(invalid(field, expression, str(e)))
        except _Unsupported as e:
            raise _not_implemented(f"{e} (in {field})") from None
    return errors


def validate_binding(new: JSON, old: JSON | None) -> list[FieldError]:
    """A ValidatingAdmissionPolicyBinding's checks on write."""
    spec = new.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    if spec.get("paramRef"):
        raise _not_implemented("spec.paramRef (parameters)")
    errors: list[FieldError] = []
    if not spec.get("policyName"):
        errors.append(required("spec.policyName"))
    actions = spec.get("validationActions")
    if not actions:
        errors.append(required("spec.validationActions", "at least one validation action is required"))
    else:
        for index, action in enumerate(actions):
            if action not in ("Deny", "Warn", "Audit"):
                errors.append(
                    not_supported(f"spec.validationActions[{index}]", action, ["Audit", "Deny", "Warn"])
                )
        if "Deny" in actions and "Warn" in actions:
            message = (
                "must not contain both Deny and Warn (repeating the same validation failure "
                "information in the API response and headers serves no purpose)"
            )
            errors.append(invalid("spec.validationActions", actions, message))
    return errors


# -- matching --------------------------------------------------------------------------------------


def _selects(selector: Any, labels: Mapping[str, str]) -> bool:
    """A LabelSelector (``matchLabels``, ``matchExpressions``) over ``labels``; empty selects all."""
    if not isinstance(selector, dict):
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or ()
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _labels(obj: JSON | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def _rule_matches(rule: Mapping[str, Any], change: Change, name: str) -> bool:
    rtype = change.rtype

    def listed(values: Any, wanted: str) -> bool:
        return "*" in (values or ()) or wanted in (values or ())

    if not (
        listed(rule.get("operations"), change.operation)
        and listed(rule.get("apiGroups"), rtype.group)
        and listed(rule.get("apiVersions"), rtype.version)
    ):
        return False
    scope = rule.get("scope") or "*"
    if scope != "*" and scope != ("Namespaced" if rtype.namespaced else "Cluster"):
        return False
    combined = f"{rtype.plural}/{change.subresource}" if change.subresource else rtype.plural
    resources = rule.get("resources") or ()
    if not any(
        r in ("*/*", combined)
        or (r == "*" and not change.subresource)
        or (change.subresource and r == f"*/{change.subresource}")
        or (r == f"{rtype.plural}/*" and change.subresource)
        for r in resources
    ):
        return False
    names = rule.get("resourceNames") or ()
    return not names or name in names


def _resources_match(
    constraints: Any, change: Change, name: str, namespace: JSON | None, *, empty_matches: bool
) -> bool:
    if not isinstance(constraints, dict):
        return empty_matches
    rules = constraints.get("resourceRules") or ()
    if rules and not any(_rule_matches(r, change, name) for r in rules):
        return False
    if not rules and not empty_matches:
        return False
    if any(_rule_matches(r, change, name) for r in constraints.get("excludeResourceRules") or ()):
        return False
    if change.rtype.namespaced or change.rtype.plural == "namespaces":
        subject = namespace if change.rtype.namespaced else (change.new or change.old)
        if not _selects(constraints.get("namespaceSelector"), _labels(subject)):
            return False
    selector = constraints.get("objectSelector")
    if not selector:
        return True
    # An absent object (the new one on DELETE, the old one on CREATE) matches no selector.
    return any(obj is not None and _selects(selector, _labels(obj)) for obj in (change.new, change.old))


# -- judging ---------------------------------------------------------------------------------------


def admission_request(change: Change, user: User) -> JSON:
    """The AdmissionRequest as CEL reads it: JSON with its empty (omitempty) fields absent."""
    rtype, obj = change.rtype, change.new if change.new is not None else change.old
    meta = (obj or {}).get("metadata") or {}
    user_info: JSON = {"username": user.name, "groups": list(user.groups)}
    if user.extra:
        user_info["extra"] = {key: list(values) for key, values in user.extra}
    resource = {"group": rtype.group, "version": rtype.version, "resource": rtype.plural}
    kind = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
    request: JSON = {
        "uid": str(uuid.uuid4()),
        "kind": kind,
        "resource": resource,
        "subResource": change.subresource or "",
        "requestKind": kind,
        "requestResource": resource,
        "requestSubResource": change.subresource or "",
        "name": meta.get("name") or "",
        "namespace": meta.get("namespace") or "",
        "operation": change.operation,
        "userInfo": user_info,
        "dryRun": change.options.dry_run,
    }
    return {k: v for k, v in request.items() if v != ""}


def _evaluate(expression: str, activation: Mapping[str, Any]) -> Any:
    """The value of an expression, or the CEL error it raised (as a value, never an exception)."""
    try:
        return _program(expression).evaluate(dict(activation))
    except celpy.evaluation.CELEvalError as e:
        return e
    except (_CompileError, _Unsupported) as e:  # a policy stored before these checks
        return celpy.evaluation.CELEvalError(str(e))


def failed(value: Any) -> str | None:
    """Why a value is not a verdict (an error, or not a bool); None for a bool."""
    if isinstance(value, celpy.evaluation.CELEvalError):
        return str(value.args[0]) if value.args else "evaluation error"
    if not isinstance(value, (celpy.celtypes.BoolType, bool)):
        return f"expected a bool, got {type(value).__name__}"
    return None


class Admission:
    """The stored ValidatingAdmissionPolicies and bindings, judging writes (see the module doc)."""

    def __init__(
        self, objects: Callable[[str], list[JSON]], find: Callable[[str, str | None, str], JSON | None]
    ):
        self._objects = objects
        self._find = find

    def __call__(self, change: Change) -> None:
        if change.rtype.group == GROUP and change.rtype.plural in _UNJUDGED:
            return
        user = change.options.user
        if not isinstance(user, User):
            return
        bindings = self._objects(BINDINGS)
        if not bindings:
            return
        policies = {p["metadata"]["name"]: p for p in self._objects(POLICIES)}
        obj = change.new if change.new is not None else change.old
        meta = (obj or {}).get("metadata") or {}
        name, namespace_name = meta.get("name") or "", meta.get("namespace")
        namespace = self._find("namespaces", None, namespace_name) if namespace_name else None
        request = admission_request(change, user)
        activation = {
            "request": celpy.adapter.json_to_cel(request),
            "object": celpy.adapter.json_to_cel(change.new),
            "oldObject": celpy.adapter.json_to_cel(change.old),
            "params": None,
            "namespaceObject": celpy.adapter.json_to_cel(namespace),
        }
        denied: list[tuple[JSON, JSON, str, str]] = []
        for binding in bindings:
            spec = binding.get("spec") or {}
            policy = policies.get(spec.get("policyName", ""))
            if policy is None:
                continue
            policy_spec = policy.get("spec") or {}
            if not _resources_match(
                policy_spec.get("matchConstraints"), change, name, namespace, empty_matches=False
            ):
                continue
            if not _resources_match(spec.get("matchResources"), change, name, namespace, empty_matches=True):
                continue
            for message, reason in self._violations(policy_spec, activation):
                actions = spec.get("validationActions") or ()
                policy_name, binding_name = policy["metadata"]["name"], binding["metadata"]["name"]
                if "Deny" in actions:
                    denied.append((policy, binding, message, reason))
                if "Warn" in actions:
                    change.options.warnings.append(
                        f"Validation failed for ValidatingAdmissionPolicy '{policy_name}' with binding "
                        f"'{binding_name}': {message}"
                    )
                if "Audit" in actions:
                    log.info(
                        "admission_policy_audit",
                        policy=policy_name,
                        binding=binding_name,
                        message=message,
                        resource=change.rtype.resource,
                        name=name,
                    )
        if denied:
            policy, binding, message, reason = denied[0]
            raise self._denial(change, name, policy, binding, message, reason)

    def _violations(self, spec: Mapping[str, Any], activation: JSON) -> Iterable[tuple[str, str]]:
        """``(message, reason)`` of each violated validation (and of each error under ``Fail``)."""
        fail = (spec.get("failurePolicy") or "Fail") == "Fail"
        for condition in spec.get("matchConditions") or ():
            value = _evaluate(condition.get("expression", ""), activation)
            why = failed(value)
            if why is not None:
                if fail:
                    yield f"failed to evaluate matchCondition '{condition.get('name', '')}': {why}", "Invalid"
                return
            if not value:
                return
        variables: dict[Any, Any] = {}
        scope = {**activation, "variables": celpy.celtypes.MapType(variables)}
        for variable in spec.get("variables") or ():
            value = _evaluate(variable.get("expression", ""), scope)
            variables[celpy.celtypes.StringType(variable.get("name", ""))] = value
            scope["variables"] = celpy.celtypes.MapType(variables)
        for validation in spec.get("validations") or ():
            expression = validation.get("expression", "")
            value = _evaluate(expression, scope)
            why = failed(value)
            if why is not None:
                if fail:
                    yield f"expression '{expression}' resulted in error: {why}", "Invalid"
                continue
            if value:
                continue
            yield self._message(validation, scope), str(validation.get("reason") or "Invalid")

    @staticmethod
    def _message(validation: Mapping[str, Any], scope: JSON) -> str:
        if validation.get("messageExpression"):
            value = _evaluate(validation["messageExpression"], scope)
            if isinstance(value, str):  # cel-python's concatenation gives a plain str
                text = str(value).strip()
                if text and "\n" not in text:
                    return text
        if (validation.get("message") or "").strip():
            return str(validation["message"]).strip()
        return f"failed expression: {str(validation.get('expression', '')).strip()}"

    @staticmethod
    def _denial(
        change: Change, name: str, policy: JSON, binding: JSON, message: str, reason: str
    ) -> StatusError:
        text = (
            f"ValidatingAdmissionPolicy '{policy['metadata']['name']}' with binding "
            f"'{binding['metadata']['name']}' denied request: {message}"
        )
        rtype = change.rtype
        subject = f'{rtype.resource} "{name}"' if name else rtype.resource
        details = {"name": name, "group": rtype.group, "kind": rtype.plural, "causes": [{"message": text}]}
        return StatusError(
            _REASON_CODES.get(reason, 422),
            f"{subject} is forbidden: {text}",
            reason=reason,
            details={k: v for k, v in details.items() if v},
        )
