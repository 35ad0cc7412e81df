"""OpenAPI v2 and v3 documents for what the fake API server serves, and built-in types' known fields.

Built-in schemas are Kubernetes' own: the v1.34 definitions that the ``kubernetes-validate`` package
ships (generated from the API server's OpenAPI), read once per process and brought back to OpenAPI
form (``type: [string, "null"]`` to ``type: string``, IntOrString to ``format: int-or-string``, refs to
``#/definitions/...``). They carry the descriptions ``kubectl explain`` prints and the
``x-kubernetes-patch-strategy``/``x-kubernetes-patch-merge-key`` that strategic merge patches follow.
A custom resource's schema is its CRD version's ``openAPIV3Schema`` with ``apiVersion``, ``kind``
and ``metadata`` filled in, named ``<reversed group>.<version>.<Kind>`` as the real server names it.

Paths follow the real server's layout, and every operation carries ``x-kubernetes-group-version-kind``
and ``x-kubernetes-action``: kubectl finds a resource's kind by them (``explain``), decides from a
PATCH operation's body media types whether a kind takes strategic merge patches (``apply``), and from
its ``fieldValidation`` parameter whether the server validates fields itself (``create``/``apply``
without ``--validate=false``: then kubectl validates nothing on its side and sends
``fieldValidation=Strict``).

Documents are built on request from the served types and cached by the caller; v2 is served as JSON
only (client-go asks for protobuf first; see the package's list of differences).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.resources
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from eni_ipam_testkit.fake_kube.resources import JSON, ResourceType

KUBERNETES_VERSION: Final = "v1.34.5"
_SCHEMAS_VERSION: Final = "v1.34.0-local"
_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1"
OBJECT_META: Final = f"{_META}.ObjectMeta"
_GVK: Final = "x-kubernetes-group-version-kind"
_PATCH_TYPES: Final = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)


def _normalize(node: Any) -> Any:
    """kubernetes-validate's JSON Schema flavour back to OpenAPI's (v2 refs)."""
    if isinstance(node, list):
        return [_normalize(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: JSON = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str):
            out[key] = value.replace("#/$defs/", "#/definitions/")
        elif key == "type" and isinstance(value, list):
            kinds = [t for t in value if t != "null"]
            out[key] = kinds[0] if len(kinds) == 1 else kinds
        else:
            out[key] = _normalize(value)
    return out


@functools.cache
def builtin_definitions() -> Mapping[str, JSON]:
    """Kubernetes' built-in definitions, by name (``io.k8s.api.core.v1.Node``); read once per process."""
    source = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema" / _SCHEMAS_VERSION
    raw = json.loads((source / "_definitions.json").read_bytes())["$defs"]
    definitions: dict[str, JSON] = {name: _normalize(schema) for name, schema in raw.items()}
    definitions["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = {
        "description": "IntOrString is a type that can hold an int32 or a string.",
        "type": "string",
        "format": "int-or-string",
    }
    definitions["io.k8s.apimachinery.pkg.api.resource.Quantity"] = {
        "description": "Quantity is a fixed-point representation of a number.",
        "type": "string",
    }
    for schema in definitions.values():
        if _GVK in schema:  # a kind: its apiVersion and kind are plain strings in the real documents
            for field in ("apiVersion", "kind"):
                (schema.get("properties") or {}).get(field, {}).pop("enum", None)
    return definitions


def _ref_target(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _refs(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield _ref_target(value)
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def _closure(roots: Iterable[str], extra: Mapping[str, JSON]) -> dict[str, JSON]:
    """The definitions ``roots`` need, transitively (from ``extra`` first, then the built-ins)."""
    builtins = builtin_definitions()
    found: dict[str, JSON] = {}
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in found:
            continue
        schema = extra.get(name) or builtins.get(name)
        if schema is None:
            continue
        found[name] = schema
        pending.extend(_refs(schema))
    return dict(sorted(found.items()))


# -- known fields of built-in objects --------------------------------------------------------------


def prune_builtin(obj: JSON, definition: str) -> list[str]:
    """Drop the fields of a built-in object that its type does not have; return their paths.

    As Go's strict decoder reports them (``spec.foo``, ``spec.containers[0].bar``). Values of the
    wrong type are left alone (the real server refuses them when decoding).
    """
    unknown: list[str] = []
    _prune(obj, {"$ref": f"#/definitions/{definition}"}, "", unknown)
    return unknown


def resolve_schema(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """A schema with its ``$ref`` to a built-in definition followed."""
    while "$ref" in schema:
        schema = builtin_definitions().get(_ref_target(schema["$ref"]), {})
    return schema


def _prune(value: Any, schema: Mapping[str, Any], path: str, unknown: list[str]) -> None:
    schema = resolve_schema(schema)
    if isinstance(value, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        if isinstance(properties, Mapping):
            for key in list(value):
                member = properties.get(key)
                child = f"{path}.{key}" if path else key
                if member is None:
                    unknown.append(child)
                    del value[key]
                else:
                    _prune(value[key], member, child, unknown)
        elif isinstance(additional, Mapping):
            for key in value:
                _prune(value[key], additional, f"{path}.{key}" if path else key, unknown)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            _prune(item, schema["items"], f"{path}[{index}]", unknown)


# -- documents ---------------------------------------------------------------------------------------


def schema_name(rtype: ResourceType) -> str:
    """The definition name of a type's kind: built-in names, or the real server's for custom ones."""
    if rtype.definition is not None:
        return rtype.definition
    return ".".join([*reversed(rtype.group.split(".")), rtype.version, rtype.kind])


def _gvk(rtype: ResourceType) -> JSON:
    return {"group": rtype.group, "kind": rtype.kind, "version": rtype.version}


def custom_definitions(rtype: ResourceType) -> dict[str, JSON]:
    """A custom resource version's kind and list definitions, with ``$ref`` in OpenAPI v2 form."""
    name = schema_name(rtype)
    schema = copy.deepcopy(dict(rtype.schema or {}))
    properties = schema.setdefault("properties", {})
    properties["apiVersion"] = {
        "description": "APIVersion defines the versioned schema of this representation of an object.",
        "type": "string",
    }
    properties["kind"] = {
        "description": "Kind is a string value representing the REST resource this object represents.",
        "type": "string",
    }
    properties["metadata"] = {
        "description": "Standard object's metadata.",
        "$ref": f"#/definitions/{OBJECT_META}",
    }
    schema.setdefault("type", "object")
    schema[_GVK] = [_gvk(rtype)]
    listing = {
        "description": f"{rtype.kind}List is a list of {rtype.kind}",
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": properties["apiVersion"],
            "kind": properties["kind"],
            "items": {"type": "array", "items": {"$ref": f"#/definitions/{name}"}},
            "metadata": {"$ref": f"#/definitions/{_META}.ListMeta"},
        },
        _GVK: [{**_gvk(rtype), "kind": rtype.list_kind}],
    }
    return {name: schema, f"{name}List": listing}


def _definitions(types: Iterable[ResourceType]) -> dict[str, JSON]:
    extra: dict[str, JSON] = {}
    roots: list[str] = [f"{_META}.Status", f"{_META}.DeleteOptions", f"{_META}.Patch"]
    for rtype in types:
        if rtype.definition is None:
            extra.update(custom_definitions(rtype))
        roots.append(schema_name(rtype))
        if rtype.stored:
            roots.append(f"{schema_name(rtype)}List")
    return _closure(roots, extra)


def _prefix(rtype: ResourceType) -> str:
    return f"/apis/{rtype.group}/{rtype.version}" if rtype.group else f"/api/{rtype.version}"


def _collection(rtype: ResourceType) -> str:
    if rtype.namespaced:
        return f"{_prefix(rtype)}/namespaces/{{namespace}}/{rtype.plural}"
    return f"{_prefix(rtype)}/{rtype.plural}"


def _query(name: str, description: str, kind: str = "string") -> JSON:
    return {"name": name, "in": "query", "description": description, "type": kind, "uniqueItems": True}


_DRY_RUN: Final = _query("dryRun", "When present, indicates that modifications should not be persisted.")
_FIELD_MANAGER: Final = _query(
    "fieldManager", "fieldManager is a name associated with the actor making changes."
)
_FIELD_VALIDATION: Final = _query(
    "fieldValidation",
    "fieldValidation instructs the server on how to handle objects in the request containing unknown or "
    "duplicate fields. Valid values are: Ignore, Warn (the default) and Strict.",
)
_FORCE: Final = _query("force", "Force is going to force Apply requests.", "boolean")
_WRITE_PARAMETERS: Final = (_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION)


def _operations(rtype: ResourceType) -> dict[str, dict[str, JSON]]:
    """Paths to ``{method: operation}`` in a version-neutral form (``body`` names the schema)."""
    kind, listing = schema_name(rtype), f"{schema_name(rtype)}List"
    gvk = _gvk(rtype)
    verbs = set(rtype.verbs)

    def op(action: str, body: str | None, result: str, params: tuple[JSON, ...] = (), **extra: Any) -> JSON:
        operation: JSON = {
            "operationId": f"{action}{rtype.kind}",
            "x-kubernetes-action": action,
            _GVK: gvk,
            "parameters": list(params),
            "result": result,
            **extra,
        }
        if body is not None:
            operation["body"] = body
        return operation

    collection, item = _collection(rtype), f"{_collection(rtype)}/{{name}}"
    paths: dict[str, dict[str, JSON]] = {collection: {}, item: {}}
    if "list" in verbs:
        paths[collection]["get"] = op("list", None, listing)
    if "create" in verbs:
        paths[collection]["post"] = op("post", kind, kind, _WRITE_PARAMETERS)
    if "deletecollection" in verbs:
        paths[collection]["delete"] = op("deletecollection", None, f"{_META}.Status", (_DRY_RUN,))
    if "get" in verbs:
        paths[item]["get"] = op("get", None, kind)
    if "update" in verbs:
        paths[item]["put"] = op("put", kind, kind, _WRITE_PARAMETERS)
    if "patch" in verbs:
        media = _PATCH_TYPES if not rtype.custom else tuple(t for t in _PATCH_TYPES if "strategic" not in t)
        paths[item]["patch"] = op("patch", f"{_META}.Patch", kind, (*_WRITE_PARAMETERS, _FORCE), media=media)
    if "delete" in verbs:
        paths[item]["delete"] = op("delete", f"{_META}.DeleteOptions", f"{_META}.Status", (_DRY_RUN,))
    if rtype.status_subresource:
        status = f"{item}/status"
        paths[status] = {"get": op("get", None, kind)}
        paths[status]["put"] = op("put", kind, kind, _WRITE_PARAMETERS)
        media = paths[item]["patch"]["media"] if "patch" in paths[item] else _PATCH_TYPES
        paths[status]["patch"] = op(
            "patch", f"{_META}.Patch", kind, (*_WRITE_PARAMETERS, _FORCE), media=media
        )
    return {path: ops for path, ops in paths.items() if ops}


def _path_parameters(path: str) -> list[JSON]:
    names = [p[1:-1] for p in path.split("/") if p.startswith("{")]
    return [{"name": n, "in": "path", "required": True, "type": "string", "uniqueItems": True} for n in names]


def _v2_operation(operation: JSON) -> JSON:
    out = {k: v for k, v in operation.items() if k not in ("body", "result", "media")}
    out["produces"] = ["application/json", "application/yaml"]
    out["consumes"] = list(operation.get("media") or ("*/*",))
    out["schemes"] = ["https"]
    if "body" in operation:
        body = {
            "name": "body",
            "in": "body",
            "required": True,
            "schema": {"$ref": f"#/definitions/{operation['body']}"},
        }
        out["parameters"] = [body, *operation["parameters"]]
    out["responses"] = {
        "200": {"description": "OK", "schema": {"$ref": f"#/definitions/{operation['result']}"}},
        "401": {"description": "Unauthorized"},
    }
    return out


def v2_document(types: Iterable[ResourceType]) -> JSON:
    """The server's Swagger 2.0 document: every served type's paths and the definitions they need."""
    served = list(types)
    paths: JSON = {}
    for rtype in served:
        for path, operations in _operations(rtype).items():
            entry = paths.setdefault(path, {"parameters": _path_parameters(path)})
            entry.update({method: _v2_operation(op) for method, op in operations.items()})
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION},
        "paths": dict(sorted(paths.items())),
        "definitions": _definitions(served),
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    }


def _v3_refs(node: Any) -> Any:
    if isinstance(node, list):
        return [_v3_refs(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        k: (v.replace("#/definitions/", "#/components/schemas/") if isinstance(v, str) else _v3_refs(v))
        for k, v in node.items()
    }


def _v3_parameter(parameter: JSON) -> JSON:
    out = {k: v for k, v in parameter.items() if k not in ("type", "uniqueItems")}
    out["schema"] = {"type": parameter["type"], "uniqueItems": True}
    return out


def _v3_operation(operation: JSON) -> JSON:
    out = {k: v for k, v in operation.items() if k not in ("body", "result", "media", "parameters")}
    out["parameters"] = [_v3_parameter(p) for p in operation["parameters"]]
    if "body" in operation:
        schema = {"$ref": f"#/components/schemas/{operation['body']}"}
        media = operation.get("media") or ("*/*",)
        out["requestBody"] = {"content": {m: {"schema": schema} for m in media}, "required": True}
    result = {"$ref": f"#/components/schemas/{operation['result']}"}
    out["responses"] = {
        "200": {
            "description": "OK",
            "content": {m: {"schema": result} for m in ("application/json", "application/yaml")},
        },
        "401": {"description": "Unauthorized"},
    }
    return out


def v3_document(types: Iterable[ResourceType]) -> JSON:
    """The OpenAPI 3.0 document of one group version (``types`` are that version's)."""
    served = list(types)
    paths: JSON = {}
    for rtype in served:
        for path, operations in _operations(rtype).items():
            entry = paths.setdefault(path, {"parameters": [_v3_parameter(p) for p in _path_parameters(path)]})
            entry.update({method: _v3_operation(op) for method, op in operations.items()})
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION},
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": _v3_refs(_definitions(served)),
            "securitySchemes": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}},
        },
    }


def group_version_path(group: str, version: str) -> str:
    """The key of a group version in the v3 root: ``api/v1``, ``apis/apps/v1``."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def content_hash(body: bytes) -> str:
    """The ``hash`` a v3 root puts in each group version's URL (the real server's is a SHA-512 too)."""
    return hashlib.sha512(body).hexdigest().upper()
