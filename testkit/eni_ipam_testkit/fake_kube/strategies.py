"""What the real server's REST strategies add to the generic write path, for the types that need it.

* CustomResourceDefinitions: defaults, the status the apiextensions controllers write, and the checks
  that keep a CRD servable (:mod:`eni_ipam_testkit.fake_kube.crds`).
* Nodes: ``spec.providerID`` and ``spec.podCIDR`` may be set once, from empty, and never changed
  afterwards (``node updates may not change providerID except from "" to valid``), as the real
  Node validation has it.
* ValidatingAdmissionPolicies and their bindings: the checks of their structure and of every CEL
  expression (:mod:`eni_ipam_testkit.fake_kube.admission`).
"""

from __future__ import annotations

from eni_ipam_testkit.fake_kube import admission, crds
from eni_ipam_testkit.fake_kube.resources import CRDS, JSON, FieldError, forbidden
from eni_ipam_testkit.fake_kube.store import Strategy


def _prepare_crd(new: JSON, old: JSON | None, now: str) -> None:
    crds.apply_defaults(new)
    crds.set_status(new, old, now)


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


def default_strategies() -> dict[str, Strategy]:
    """The strategies every server installs, by storage key."""
    return {
        CRDS: Strategy(prepare=_prepare_crd, validate=crds.validate),
        "nodes": Strategy(validate=_validate_node),
        admission.POLICIES: Strategy(validate=admission.validate_policy),
        admission.BINDINGS: Strategy(validate=admission.validate_binding),
    }
