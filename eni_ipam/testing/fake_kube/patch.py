"""The PATCH content types: JSON merge patch, JSON patch and (simplified) server-side apply.

* ``application/merge-patch+json``: RFC 7386 — objects merge recursively, ``null`` deletes a key,
  anything else (lists included) replaces.
* ``application/strategic-merge-patch+json``: treated as a merge patch. The real server merges some
  lists by key (``containers`` by name, ``conditions`` by type, ...); here every list is replaced.
* ``application/json-patch+json``: RFC 6902 ``add``, ``remove``, ``replace``, ``move``, ``copy`` and
  ``test``. A failed operation (a ``test`` that does not hold, a missing path) is a 422.
* ``application/apply-patch+yaml``: the applied configuration (YAML or JSON) merged into the object
  like a merge patch. Field ownership (managedFields) and apply conflicts are not emulated.

Functions here are pure: they return a new document and never modify their inputs. A
``metadata.resourceVersion`` the patch leaves in the result is checked by the store as a
precondition, exactly as the real server does for every patch type.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Final

import yaml

from eni_ipam.testing.fake_kube.resources import JSON, StatusError

MERGE: Final = "application/merge-patch+json"
STRATEGIC: Final = "application/strategic-merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
APPLY: Final = "application/apply-patch+yaml"
PATCH_TYPES: Final = (MERGE, STRATEGIC, JSON_PATCH, APPLY)


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


def apply_patch(content_type: str, raw: bytes, current: JSON) -> JSON:
    """The object that results from applying a PATCH body of ``content_type`` to ``current``."""
    try:
        if content_type == APPLY:
            patch = yaml.safe_load(raw.decode() or "null")
        else:
            patch = json.loads(raw or b"null")
    except (ValueError, RecursionError, yaml.YAMLError) as e:
        raise StatusError(400, f"error decoding patch: {e}") from None
    if content_type == JSON_PATCH:
        result = json_patch(current, patch)
    elif isinstance(patch, dict):
        result = merge_patch(current, patch)
    else:
        raise StatusError(400, "a merge patch or an applied configuration must be a JSON/YAML object")
    if not isinstance(result, dict):
        raise StatusError(422, "the patched document is not an object")
    return result
