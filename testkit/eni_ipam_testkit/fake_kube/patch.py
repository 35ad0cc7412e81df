"""The PATCH content types: JSON merge patch, strategic merge patch and JSON patch; reading applies.

* ``application/merge-patch+json``: RFC 7386 — objects merge recursively, ``null`` deletes a key,
  anything else (lists included) replaces.
* ``application/strategic-merge-patch+json`` (built-in types only; the server refuses it for custom
  resources with a 415, as the real one does): a merge patch that follows the type's OpenAPI patch
  metadata: lists whose ``x-kubernetes-patch-strategy`` is ``merge`` are merged by their
  ``x-kubernetes-patch-merge-key`` (``containers`` by name, ``conditions`` by type; primitive lists
  such as ``finalizers`` by value), and the directives ``$patch`` (``replace``, ``delete``,
  ``merge``), ``$retainKeys``, ``$deleteFromPrimitiveList/<list>`` and ``$setElementOrder/<list>``
  are honoured (the order directive only drops out: merged lists keep the stored order, new items
  last).
* ``application/json-patch+json``: RFC 6902 ``add``, ``remove``, ``replace``, ``move``, ``copy`` and
  ``test``. A failed operation (a ``test`` that does not hold, a missing path) is a 422.
* ``application/apply-patch+yaml``: server-side apply. Only reading the applied configuration (YAML
  or JSON, :func:`load_applied`) is here; merging it under field ownership is
  :mod:`~eni_ipam_testkit.fake_kube.managed`'s.

Functions here are pure: they return a new document and never modify their inputs. A
``metadata.resourceVersion`` the patch leaves in the result is checked by the store as a
precondition, exactly as the real server does for every patch type.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, Final

import yaml

from eni_ipam_testkit.fake_kube.openapi import resolve_schema
from eni_ipam_testkit.fake_kube.resources import JSON, StatusError

MERGE: Final = "application/merge-patch+json"
STRATEGIC: Final = "application/strategic-merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
APPLY: Final = "application/apply-patch+yaml"
PATCH_TYPES: Final = (JSON_PATCH, MERGE, STRATEGIC, APPLY)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 merge of ``patch`` into ``target``; returns a new value."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class _OpFailed(Exception):
    """A JSON patch operation cannot be applied (answered with 422)."""


def _tokens(pointer: Any) -> list[str]:
    if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
        raise _OpFailed(f"invalid JSON pointer {pointer!r}")
    if pointer == "":
        return []
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _index(container: list[Any], token: str, *, insert: bool) -> int:
    if insert and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise _OpFailed(f"invalid array index {token!r}")
    index = int(token)
    if index > len(container) or (index == len(container) and not insert):
        raise _OpFailed(f"array index {index} out of range")
    return index


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, insert=False)]
        else:
            raise _OpFailed(f"path /{'/'.join(tokens)} does not exist")
    return node


def _get(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, insert=False)]
    raise _OpFailed(f"path /{'/'.join(tokens)} does not exist")


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent, last = _parent(doc, tokens), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, insert=True), value)
    else:
        raise _OpFailed(f"cannot add at /{'/'.join(tokens)}: parent is not a container")
    return doc


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise _OpFailed("cannot remove the whole document")
    _get(doc, tokens)  # raises when missing
    parent, last = _parent(doc, tokens), tokens[-1]
    if isinstance(parent, dict):
        del parent[last]
    else:
        del parent[_index(parent, last, insert=False)]
    return doc


def _json_equal(a: Any, b: Any) -> bool:
    # Python's True == 1; JSON's true is not the number 1.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902; returns a new document. Raises StatusError 400 (malformed) or 422 (failed op)."""
    if not isinstance(operations, list) or not all(isinstance(op, dict) for op in operations):
        raise StatusError(400, "a JSON patch must be a list of operation objects")
    result = copy.deepcopy(doc)
    for op in operations:
        try:
            kind, path = op.get("op"), _tokens(op.get("path"))
            if kind in ("add", "replace", "test") and "value" not in op:
                raise _OpFailed(f"operation {kind!r} needs a value")
            if kind == "add":
                result = _add(result, path, copy.deepcopy(op["value"]))
            elif kind == "remove":
                result = _remove(result, path)
            elif kind == "replace":
                _get(result, path)
                result = (
                    _add(_remove(result, path), path, copy.deepcopy(op["value"])) if path else op["value"]
                )
            elif kind in ("move", "copy"):
                source = _tokens(op.get("from"))
                value = copy.deepcopy(_get(result, source))
                if kind == "move":
                    result = _remove(result, source)
                result = _add(result, path, value)
            elif kind == "test":
                if not _json_equal(_get(result, path), op["value"]):
                    raise _OpFailed(f"testing value {op.get('path')} failed")
            else:
                raise StatusError(400, f"unsupported JSON patch operation {kind!r}")
        except _OpFailed as e:
            raise StatusError(
                422, f"the server rejected our request due to an error in our request: {e}"
            ) from None
    return result


Schema = Mapping[str, Any]
_LOADER: Final[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_applied(raw: bytes) -> Any:
    """An applied configuration: JSON (what client-go sends) read as JSON, else as YAML; 400 when
    it is neither."""
    try:
        return json.loads(raw or b"null")
    except ValueError:
        pass
    except RecursionError as e:
        raise StatusError(400, f"error decoding patch: {e}") from None
    try:
        return yaml.load(raw.decode() or "null", Loader=_LOADER)
    except (ValueError, RecursionError, yaml.YAMLError) as e:
        raise StatusError(400, f"error decoding patch: {e}") from None


_DIRECTIVES: Final = ("$patch", "$retainKeys")


def _member_schema(schema: Schema | None, key: str) -> Schema | None:
    if schema is None:
        return None
    schema = resolve_schema(schema)
    properties = schema.get("properties")
    if isinstance(properties, Mapping) and key in properties:
        return dict(properties[key])
    additional = schema.get("additionalProperties")
    return dict(additional) if isinstance(additional, Mapping) else None


def _items_schema(schema: Schema | None) -> Schema | None:
    if schema is None:
        return None
    items = resolve_schema(schema).get("items")
    return dict(items) if isinstance(items, Mapping) else None


def _clean(value: Any) -> Any:
    """A value from a patch with every directive removed (what lands when nothing is merged)."""
    if isinstance(value, dict):
        return {
            k: _clean(v)
            for k, v in value.items()
            if k not in _DIRECTIVES and not k.startswith(("$setElementOrder/", "$deleteFromPrimitiveList/"))
        }
    if isinstance(value, list):
        return [_clean(v) for v in value if not (isinstance(v, dict) and v.get("$patch") == "replace")]
    return value


def strategic_merge(target: Any, patch: Any, schema: Schema | None) -> Any:
    """A strategic merge patch of ``patch`` into ``target`` following ``schema``'s patch metadata."""
    if not isinstance(patch, dict):
        return _clean(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return _clean(patch)
    if directive == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key in _DIRECTIVES or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or () if v not in (value or ())]
            continue
        if value is None:
            result.pop(key, None)
            continue
        member = _member_schema(schema, key)
        if isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, member)
        else:
            merged = strategic_merge(result.get(key), value, member)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    retained = patch.get("$retainKeys")
    if isinstance(retained, list):
        result = {k: v for k, v in result.items() if k in retained}
    return result


def _merge_list(target: Any, patch: list[Any], schema: Schema | None) -> list[Any]:
    strategy = str((schema or {}).get("x-kubernetes-patch-strategy", ""))
    if "merge" not in strategy.split(",") or any(
        isinstance(item, dict) and item.get("$patch") == "replace" for item in patch
    ):
        return list(_clean(patch))
    current = list(copy.deepcopy(target)) if isinstance(target, list) else []
    key = (schema or {}).get("x-kubernetes-patch-merge-key")
    if key is None:  # a primitive list: a union, in order
        return current + [v for v in patch if v not in current]
    items = _items_schema(schema)
    for item in patch:
        if not isinstance(item, dict):
            continue
        index = next(
            (i for i, c in enumerate(current) if isinstance(c, dict) and c.get(key) == item.get(key)), None
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del current[index]
        elif index is None:
            current.append(_clean(item))
        else:
            current[index] = strategic_merge(current[index], item, items)
    return current


def apply_patch(content_type: str, raw: bytes, current: JSON, definition: str | None = None) -> JSON:
    """The object that results from applying a PATCH body of ``content_type`` to ``current``.

    ``definition`` names a built-in type's OpenAPI definition, whose patch metadata a strategic merge
    patch follows.
    """
    if content_type == APPLY:
        raise ValueError("an apply is merged under field ownership (managed.merge), not as a patch")
    try:
        patch = json.loads(raw or b"null")
    except (ValueError, RecursionError) as e:
        raise StatusError(400, f"error decoding patch: {e}") from None
    if content_type == JSON_PATCH:
        result = json_patch(current, patch)
    elif content_type == STRATEGIC and isinstance(patch, dict):
        schema = {"$ref": f"#/definitions/{definition}"} if definition is not None else None
        result = strategic_merge(current, patch, schema) or {}
    elif isinstance(patch, dict):
        result = merge_patch(current, patch)
    else:
        raise StatusError(400, "a merge patch or an applied configuration must be a JSON/YAML object")
    if not isinstance(result, dict):
        raise StatusError(422, "the patched document is not an object")
    return result
