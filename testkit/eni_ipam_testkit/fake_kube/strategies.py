"""What the real server's REST strategies add to the generic write path, for the types that need it.

* CustomResourceDefinitions: defaults, the status the apiextensions controllers write, and the checks
  that keep a CRD servable (:mod:`eni_ipam_testkit.fake_kube.crds`).
* Nodes: ``spec.providerID`` and ``spec.podCIDR`` may be set once, from empty, and never changed
  afterwards (``node updates may not change providerID except from "" to valid``), as the real
  Node validation has it.
* ValidatingAdmissionPolicies and their bindings: the checks of their structure and of every CEL
  expression (:mod:`eni_ipam_testkit.fake_kube.admission`).
* ConfigMaps and Secrets: at most 1 MiB of values (``[]: Too long: may not be more than 1048576
  bytes`` for a ConfigMap, ``data: Too long: ...`` for a Secret's decoded data), as their real
  validation has it.
* Roles, ClusterRoles and their bindings (:func:`rbac_strategies`): no one but ``system:masters``
  grants what they do not hold, unless allowed to ``escalate`` or ``bind``
  (:func:`~eni_ipam_testkit.fake_kube.auth.confirm_no_escalation`).
* Namespaces: ``spec.finalizers: [kubernetes]`` on create and the ``kubernetes.io/metadata.name``
  label, as the real namespace strategy sets them.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final

from eni_ipam_testkit.fake_kube import admission, crds
from eni_ipam_testkit.fake_kube.auth import RBAC_GROUP, Authorizer, Lister, confirm_no_escalation
from eni_ipam_testkit.fake_kube.resources import CRDS, JSON, FieldError, forbidden, too_long
from eni_ipam_testkit.fake_kube.store import Strategy


def crd_strategy(objects: Lister) -> Strategy:
    """Defaults, validation and the status the apiextensions controllers write, which depends on the
    other CRDs of the group (a name one of them has accepted is not this one's)."""

    def prepare(new: JSON, old: JSON | None, now: str) -> None:
        crds.apply_defaults(new)
        spec = new.get("spec") if isinstance(new.get("spec"), dict) else {}
        group, name = (spec or {}).get("group"), new["metadata"].get("name")
        others = [
            crd
            for crd in objects(CRDS)
            if crd["metadata"]["name"] != name and (crd.get("spec") or {}).get("group") == group
        ]
        crds.set_status(new, old, now, others)

    return Strategy(prepare=prepare, validate=crds.validate)


def _validate_node(new: JSON, old: JSON | None) -> list[FieldError]:
    if old is None:
        return []
    errors = []
    for field, label in (("providerID", "providerID"), ("podCIDR", "podCIDR")):
        before = (old.get("spec") or {}).get(field) or ""
        after = (new.get("spec") or {}).get(field) or ""
        if before and before != after:
            detail = f'node updates may not change {label} except from "" to valid'
            errors.append(forbidden(f"spec.{field}", detail))
    return errors


def _prepare_namespace(new: JSON, old: JSON | None, now: str) -> None:
    # The real namespace strategy: the finalizer the namespace controller removes once the namespace
    # is empty, and a label naming the namespace (so selectors can pick namespaces by name).
    if old is None:
        spec = new.get("spec") if isinstance(new.get("spec"), dict) else None
        if spec is None:
            spec = new["spec"] = {}
        spec.setdefault("finalizers", ["kubernetes"])
    labels = new["metadata"].get("labels")
    if not isinstance(labels, dict):
        labels = new["metadata"]["labels"] = {}
    labels["kubernetes.io/metadata.name"] = new["metadata"].get("name", "")


MAX_DATA_SIZE: Final = 1024 * 1024
"""core.MaxSecretSize: the most a ConfigMap's or a Secret's values may hold, in bytes."""


def _validate_configmap(new: JSON, old: JSON | None) -> list[FieldError]:
    total = sum(len(str(v).encode()) for v in (new.get("data") or {}).values())
    for value in (new.get("binaryData") or {}).values():
        total += len(_decoded(value))
    # The real validation names no field ("" prints as []): the limit is the whole object's.
    return [too_long("[]", MAX_DATA_SIZE)] if total > MAX_DATA_SIZE else []


def _validate_secret(new: JSON, old: JSON | None) -> list[FieldError]:
    total = sum(len(_decoded(v)) for v in (new.get("data") or {}).values())
    return [too_long("data", MAX_DATA_SIZE)] if total > MAX_DATA_SIZE else []


def _decoded(value: object) -> bytes:
    try:
        return base64.b64decode(str(value))
    except (binascii.Error, ValueError):
        return str(value).encode()


def rbac_strategies(authorizer: Authorizer) -> dict[str, Strategy]:
    """RBAC's escalation checks on Roles, ClusterRoles and their bindings (they read the requester)."""

    def checked(plural: str) -> Strategy:
        return Strategy(validate=lambda new, old: _no_escalation(authorizer, plural, new, old))

    plurals = ("roles", "clusterroles", "rolebindings", "clusterrolebindings")
    return {f"{plural}.{RBAC_GROUP}": checked(plural) for plural in plurals}


def _no_escalation(authorizer: Authorizer, plural: str, new: JSON, old: JSON | None) -> list[FieldError]:
    confirm_no_escalation(authorizer, plural, new, old)  # a 403, not a field error, when it refuses
    return []


def default_strategies() -> dict[str, Strategy]:
    """The strategies every server installs, by storage key."""
    return {
        "nodes": Strategy(validate=_validate_node),
        admission.POLICIES: Strategy(validate=admission.validate_policy),
        admission.BINDINGS: Strategy(validate=admission.validate_binding),
        "namespaces": Strategy(prepare=_prepare_namespace),
        "configmaps": Strategy(validate=_validate_configmap),
        "secrets": Strategy(validate=_validate_secret),
    }
