"""Offline schema validation of rendered objects, as an API server would judge them.

- Built-in kinds against the Kubernetes OpenAPI schemas that the PyPI package kubernetes-validate ships
  for each Kubernetes minor version, in their strict variant: an unknown field is an error, as with the
  strict field validation of ``kubectl apply`` (a misspelt field is otherwise dropped without a word).
  The validators are the ones its ``validate`` builds, made once per kind and version (a test keeps
  their verdicts equal to ``validate``'s), and they report every problem, not only the first.
- Custom resources against the ``openAPIV3Schema`` of their CustomResourceDefinition: the chart's own
  (``crds/``) and the Prometheus Operator's, vendored in ``prometheus-operator/`` (its README says from
  where). Their metadata against the ObjectMeta schema of the built-in kinds.

Nothing here touches the network: the schemas are files, and no reference in them is fetched.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import kubernetes_validate.utils
import referencing
import yaml

from tests.deploy.conftest import CHART

HERE = Path(__file__).resolve().parent
PROMETHEUS_OPERATOR_CRDS = HERE / "prometheus-operator"


def chart_kube_floor() -> str:
    """The oldest Kubernetes the chart accepts: the lower bound of Chart.yaml's ``kubeVersion``."""
    constraint = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    match = re.fullmatch(r">=\s*v?(\d+\.\d+\.\d+)(?:-0)?", constraint.strip())
    assert match, f"Chart.yaml kubeVersion {constraint!r} is not a plain lower bound"
    return match.group(1)


def shipped_versions() -> list[str]:
    """The Kubernetes versions kubernetes-validate has schemas for, oldest first."""
    return list(kubernetes_validate.utils.all_versions())


def policy_kube_floor() -> str:
    """The oldest Kubernetes the agents' admission policy (``agent.confineToNode``) renders for: the
    ``semverCompare`` bound its template fails below."""
    template = (CHART / "templates" / "agent-admission-policy.yaml").read_text()
    (bound,) = re.findall(r'semverCompare ">=(\d+\.\d+\.\d+)-0" \.Capabilities\.KubeVersion', template)
    return str(bound)


KUBE_FLOOR = chart_kube_floor()
KUBE_NEWEST = shipped_versions()[-1]
KUBE_VERSIONS = (KUBE_FLOOR, KUBE_NEWEST)
"""The versions every render is validated against: the chart's floor, where an API the chart uses
must already exist, and the newest the package knows, where none may have been removed since."""
POLICY_KUBE_FLOOR = policy_kube_floor()
POLICY_KINDS = frozenset({"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"})
"""The agents' admission policy: rendered only for Kubernetes POLICY_KUBE_FLOOR or later."""


def kube_floor_of(doc: dict[str, Any]) -> str:
    """The oldest Kubernetes an object is rendered for: the chart's floor, the policy's for the policy."""
    return POLICY_KUBE_FLOOR if doc.get("kind") in POLICY_KINDS else KUBE_FLOOR


def version_for(doc: dict[str, Any], kube_version: str) -> str:
    """``kube_version``, or the oldest Kubernetes ``doc`` is rendered for when that is later."""
    floor = kube_floor_of(doc)
    return floor if _minor(floor) > _minor(kube_version) else kube_version


def render_floor(docs: Iterable[dict[str, Any]]) -> str:
    """The oldest Kubernetes a whole render is for (what ``helm lint --kube-version`` must be given)."""
    return POLICY_KUBE_FLOOR if any(kube_floor_of(d) == POLICY_KUBE_FLOOR for d in docs) else KUBE_FLOOR


# -- custom resources ------------------------------------------------------------------------------


def structural_to_json_schema(node: dict[str, Any], *, root: bool = False) -> dict[str, Any]:
    """A CRD's structural schema as a JSON Schema (draft 4, whose boolean ``exclusiveMinimum`` OpenAPI
    v3.0 keeps), judged as the API server judges it:

    - an object with ``properties`` takes no other field (strict field validation), unless it says
      ``x-kubernetes-preserve-unknown-fields`` or gives ``additionalProperties``;
    - ``nullable`` admits null;
    - ``x-kubernetes-int-or-string`` without a type admits an integer or a string, nothing else;
    - ``x-kubernetes-list-type: set`` items are unique;
    - patterns are Go's RE2, so flags after the ``^`` anchor move before it, for Python.

    What is left unchecked: ``format`` (int32, date-time), the keys of ``x-kubernetes-list-type: map``
    lists, and CEL rules (``x-kubernetes-validations``); the chart's CRDs need none of them checked.
    """
    schema = dict(node)  # enum, default and example hold data, not schemas: left as they are
    for key in ("items", "additionalProperties", "not"):
        if isinstance(node.get(key), dict):
            schema[key] = structural_to_json_schema(node[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in node:
            schema[key] = [structural_to_json_schema(sub) for sub in node[key]]
    for key in ("properties", "patternProperties"):
        if key in node:
            schema[key] = {name: structural_to_json_schema(sub) for name, sub in node[key].items()}
    if root:  # the API server knows these three on every object, declared or not
        schema.setdefault("properties", {})
        for name in ("apiVersion", "kind", "metadata"):
            schema["properties"].setdefault(name, {})
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        schema["additionalProperties"] = False
    if node.get("x-kubernetes-int-or-string") and "type" not in node and "anyOf" not in node:
        schema["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("x-kubernetes-list-type") == "set":
        schema["uniqueItems"] = True
    if isinstance(node.get("pattern"), str):
        schema["pattern"] = _python_regex(node["pattern"])
    if node.get("nullable"):
        schema = {"anyOf": [schema, {"type": "null"}]}
    return schema


def _python_regex(pattern: str) -> str:
    """A CRD's pattern (Go's RE2 syntax) for Python's re: RE2 takes flags after the ``^`` anchor
    (``^(?i)(abort|warn)?$``), where Python wants them first."""
    return re.sub(r"^\^\(\?([ims]+)\)", r"(?\1)^", pattern)


def crd_files() -> list[Path]:
    """Every CRD whose resources may be rendered: the chart's own and the vendored ones."""
    return sorted((CHART / "crds").glob("*.yaml")) + sorted(PROMETHEUS_OPERATOR_CRDS.glob("*.yaml"))


def load_crd(path: Path) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert len(docs) == 1 and docs[0]["kind"] == "CustomResourceDefinition", path
    crd: dict[str, Any] = docs[0]
    return crd


@functools.cache
def _crd_validators() -> dict[tuple[str, str], tuple[jsonschema.protocols.Validator, str]]:
    """(apiVersion, kind) → (validator of that served version's schema, the CRD's name)."""
    out: dict[tuple[str, str], tuple[jsonschema.protocols.Validator, str]] = {}
    for path in crd_files():
        crd = load_crd(path)
        spec = crd["spec"]
        for version in spec["versions"]:
            if not version.get("served"):
                continue
            schema = structural_to_json_schema(version["schema"]["openAPIV3Schema"], root=True)
            jsonschema.Draft4Validator.check_schema(schema)
            key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
            out[key] = (jsonschema.Draft4Validator(schema), crd["metadata"]["name"])
    return out


def custom_resource_kinds() -> set[tuple[str, str]]:
    """(apiVersion, kind) of every custom resource a known CRD serves."""
    return set(_crd_validators())


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(part) for part in error.absolute_path) or "(the object)"


def _sorted(errors: Iterable[jsonschema.ValidationError]) -> list[jsonschema.ValidationError]:
    return sorted(errors, key=lambda e: (list(map(str, e.absolute_path)), e.message))


def custom_resource_errors(doc: dict[str, Any], kube_version: str) -> list[str]:
    """What the API server would refuse in the custom resource ``doc``: its schema, then its metadata."""
    validator, crd = _crd_validators()[(doc["apiVersion"], doc["kind"])]
    errors = [f"{_where(e)}: {e.message} (CRD {crd})" for e in _sorted(validator.iter_errors(doc))]
    # ObjectMeta is the API server's, the same for every kind: judged as a built-in object's
    as_builtin = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc.get("metadata", {})}
    errors += builtin_errors(as_builtin, kube_version)
    return errors


# -- built-in kinds --------------------------------------------------------------------------------


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


@functools.cache
def _schema_set(kube_version: str) -> tuple[str, str]:
    """(the directory of kubernetes-validate's strict schemas for ``kube_version``, the version they are
    of): the newest version it ships that is not newer, as its ``validate`` picks."""
    shipped = [v for v in shipped_versions() if _minor(v) <= _minor(kube_version)]
    assert shipped and _minor(kube_version) <= _minor(KUBE_NEWEST), (
        f"no schemas for Kubernetes {kube_version}"
    )
    return f"kubernetes-json-schema/v{shipped[-1]}-local-strict", ".".join(map(str, _minor(shipped[-1])))


@functools.cache
def _definitions(kube_version: str) -> referencing.Registry[Any]:
    directory, _ = _schema_set(kube_version)
    definitions = kubernetes_validate.utils.schema_contents(f"{directory}/_definitions.json", kube_version)
    return referencing.Resource.from_contents(definitions) @ referencing.Registry()


@functools.cache
def _builtin_validator(
    api_version: str, kind: str, kube_version: str
) -> jsonschema.protocols.Validator | None:
    """The validator kubernetes-validate's ``validate`` builds for the kind, or None if it has no schema
    for it. Built once: ``validate`` reads and parses the version's 1 MB of definitions on every call."""
    directory, _ = _schema_set(kube_version)
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)  # rbac.authorization.k8s.io/v1
    try:
        schema = kubernetes_validate.utils.schema_contents(
            f"{directory}/{kind.lower()}-{group_version}.json", kube_version
        )
    except FileNotFoundError:
        return None
    registry = referencing.Resource.from_contents(schema) @ _definitions(kube_version)
    return jsonschema.Draft202012Validator(schema, registry=registry)


def builtin_errors(doc: dict[str, Any], kube_version: str) -> list[str]:
    """What the schemas of Kubernetes ``kube_version`` refuse in ``doc``, or that they have no such kind."""
    validator = _builtin_validator(str(doc.get("apiVersion")), str(doc.get("kind")), kube_version)
    _, version = _schema_set(kube_version)
    if validator is None:
        return [f"Kubernetes {version} has no {doc.get('kind')} in {doc.get('apiVersion')}"]
    return [f"{_where(e)}: {e.message} (Kubernetes {version})" for e in _sorted(validator.iter_errors(doc))]


# -- any document ----------------------------------------------------------------------------------


def name_of(doc: dict[str, Any]) -> str:
    return f"{doc.get('kind')} {(doc.get('metadata') or {}).get('name')}"


def validation_errors(docs: list[dict[str, Any]], kube_version: str) -> list[str]:
    """Every problem an API server of ``kube_version`` would find in ``docs``, each prefixed with the
    object's kind and name; empty when all of them validate."""
    errors: list[str] = []
    for doc in docs:
        if (doc.get("apiVersion"), doc.get("kind")) in custom_resource_kinds():
            found = custom_resource_errors(doc, kube_version)
        else:
            found = builtin_errors(doc, kube_version)
        errors += [f"{name_of(doc)}: {e}" for e in found]
    return errors


def floor_errors(docs: list[dict[str, Any]]) -> list[str]:
    """:func:`validation_errors` of each object at the oldest Kubernetes it is rendered for
    (:func:`kube_floor_of`): the same objects without the policy install on the chart's floor."""
    errors: list[str] = []
    for floor in sorted({kube_floor_of(d) for d in docs}):
        errors += validation_errors([d for d in docs if kube_floor_of(d) == floor], floor)
    return errors
