"""Field ownership: ``metadata.managedFields`` and server-side apply, as structured-merge-diff does them.

Every write through the API records who set which fields. A field set is a set of paths, each path a
tuple of elements: ``("f", name)`` a field of a map, ``("k", '{"name":"c"}')`` an item of an
associative list by its key fields (the OpenAPI ``x-kubernetes-list-type: map`` and
``x-kubernetes-list-map-keys``, built-in or a CRD's), ``("v", '"x"')`` a value of a set list
(``x-kubernetes-list-type: set``). Atomic lists (the default), atomic maps
(``x-kubernetes-map-type: atomic``) and scalars are leaves. Where a schema says nothing (a CRD's
``x-kubernetes-preserve-unknown-fields``), maps are granular and lists atomic, as the real server
deduces them. A set is stored as ``fieldsV1`` (``f:spec: {f:replicas: {}}``; ``.: {}`` marks a
container that is itself a member), one ``managedFields`` entry per manager, operation (``Apply``
or ``Update``) and subresource.

The rules (structured-merge-diff's ``Updater``):

* an ``Update`` (create, update, any non-apply patch) gives its manager the paths it added or
  changed, takes them from every other manager, and takes removed paths from everyone;
* an ``Apply`` merges the applied configuration into the live object (maps by key, associative
  lists by their keys, sets by value, anything else replaced) and gives its manager exactly the
  configuration's paths. A path the applier owned before and no longer applies is removed from the
  object unless another manager owns it (or something beneath it). A path the apply changes that
  another manager owns is a conflict: 409 ``Conflict`` naming each field and manager
  (``conflict with "helm": .spec.replicas``), unless ``force=true``, which takes it;
* the first apply to an object nobody owns attributes what it holds to ``before-first-apply``
  (an ``Update``), so an apply cannot silently overwrite it;
* ``apiVersion``, ``kind``, ``metadata.name``, ``namespace``, ``uid``, ``resourceVersion``,
  ``generation``, ``creationTimestamp`` and ``managedFields`` are never owned; with a status
  subresource, writes to the main resource own nothing under ``status`` and writes to ``/status``
  only what is under it.

Invariants: functions here are pure (they return new values); a set never holds a stripped path;
a manager whose set is empty has no entry.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

from eni_ipam_testkit.fake_kube.openapi import OBJECT_META, resolve_schema
from eni_ipam_testkit.fake_kube.resources import JSON, ResourceType, StatusError

Element = tuple[str, str]
Path = tuple[Element, ...]
FieldSet = frozenset[Path]

APPLY_OP: Final = "Apply"
UPDATE_OP: Final = "Update"
BEFORE_FIRST_APPLY: Final = "before-first-apply"

_STRIPPED: Final[frozenset[Path]] = frozenset(
    {(("f", "apiVersion"),), (("f", "kind"),), (("f", "metadata"),)}
    | {
        (("f", "metadata"), ("f", field))
        for field in (
            "name",
            "namespace",
            "creationTimestamp",
            "selfLink",
            "uid",
            "generation",
            "managedFields",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        )
    }
)
# Key fields of associative lists that the real schemas default when an item leaves them out
# (ContainerPort, ServicePort and EndpointPort default protocol to TCP), so that ``- containerPort:
# 8080`` in an applied configuration and the stored item are one item.
_KEY_DEFAULTS: Final[Mapping[str, Any]] = {"protocol": "TCP"}


class Unsupported(Exception):
    """A value the field-set rules cannot place (an associative list item without its keys)."""


# -- shapes ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Shape:
    """What a node of an object is to field ownership: a granular ``map``, a ``list`` or a ``leaf``.

    ``schema`` is the node's (resolved) schema, or None where the type says nothing (deduced).
    A list's ``list_type`` is ``map`` (with ``keys``), ``set`` or ``atomic``.
    """

    kind: str
    schema: Mapping[str, Any] | None = None
    list_type: str = "atomic"
    keys: tuple[str, ...] = ()

    def child(self, key: str, value: Any) -> Shape:
        """The shape of a map member."""
        member: Mapping[str, Any] | None = None
        if self.schema is not None:
            properties = self.schema.get("properties")
            additional = self.schema.get("additionalProperties")
            if isinstance(properties, Mapping) and key in properties:
                member = properties[key]
            elif isinstance(additional, Mapping):
                member = additional
        return shape_of(member, value)

    def item(self, value: Any) -> Shape:
        items = self.schema.get("items") if self.schema is not None else None
        return shape_of(items if isinstance(items, Mapping) else None, value)


def shape_of(schema: Mapping[str, Any] | None, value: Any) -> Shape:
    """The shape of ``value`` under ``schema`` (None: deduced from the value)."""
    if schema is not None:
        schema = resolve_schema(schema)
        if schema.get("x-kubernetes-preserve-unknown-fields") and not (
            schema.get("properties") or isinstance(schema.get("additionalProperties"), Mapping)
        ):
            schema = None
    if schema is None:
        return Shape("map") if isinstance(value, dict) else Shape("leaf")
    if isinstance(value, dict):
        if schema.get("x-kubernetes-map-type") == "atomic" or schema.get("type") not in (None, "object"):
            return Shape("leaf", schema)
        return Shape("map", schema)
    if isinstance(value, list):
        if schema.get("type") not in (None, "array"):
            return Shape("leaf", schema)
        list_type = str(schema.get("x-kubernetes-list-type") or "atomic")
        if list_type == "map":
            keys = tuple(str(k) for k in schema.get("x-kubernetes-list-map-keys") or ())
            return Shape("list", schema, "map", keys) if keys else Shape("leaf", schema)
        return Shape("list", schema, list_type) if list_type == "set" else Shape("leaf", schema)
    return Shape("leaf", schema)


def root_shape(rtype: ResourceType, obj: JSON) -> Shape:
    """The shape of a whole object of ``rtype``."""
    if rtype.definition is not None:
        return shape_of({"$ref": f"#/definitions/{rtype.definition}"}, obj)
    schema = dict(rtype.schema or {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
    properties = dict(schema.get("properties") or {})
    properties["metadata"] = {"$ref": f"#/definitions/{OBJECT_META}"}
    schema["properties"] = properties
    schema.pop("x-kubernetes-preserve-unknown-fields", None)
    if "type" not in schema:
        schema["type"] = "object"
    if not rtype.schema or (rtype.schema or {}).get("x-kubernetes-preserve-unknown-fields"):
        # Fields beyond the schema's are kept: give them the deduced shape.
        schema["additionalProperties"] = {"x-kubernetes-preserve-unknown-fields": True}
    return Shape("map", schema)


# -- path elements ---------------------------------------------------------------------------------


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _item_key(item: Any, keys: tuple[str, ...], path: Path) -> Element:
    if not isinstance(item, dict):
        raise Unsupported(f"{render_path(path)}: associative list with keys has an element that is not a map")
    values = {}
    for key in keys:
        if key in item and item[key] is not None:
            values[key] = item[key]
        elif key in _KEY_DEFAULTS:
            values[key] = _KEY_DEFAULTS[key]
        else:
            raise Unsupported(
                f"{render_path(path)}: associative list with keys has an element that omits key field "
                f'"{key}" (and doesn\'t have default value)'
            )
    return ("k", _compact(values))


def _keyed(items: list[Any], shape: Shape, path: Path) -> dict[Element, Any]:
    out: dict[Element, Any] = {}
    for item in items:
        element = _item_key(item, shape.keys, path)
        if element in out:
            raise Unsupported(f"{render_path(path)}: duplicate entries for key {_render_element(element)}")
        out[element] = item
    return out


def _render_element(element: Element) -> str:
    kind, text = element
    if kind == "f":
        return "." + text
    if kind == "k":
        fields = json.loads(text)
        return "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(fields.items())) + "]"
    if kind == "v":
        return "[=" + text + "]"
    return f"[{text}]"


def render_path(path: Path) -> str:
    """A path as the real server prints it in conflicts: ``.spec.containers[name="c"].image``."""
    return "".join(_render_element(e) for e in path)


# -- field sets of values --------------------------------------------------------------------------


def applied_set(config: Any, shape: Shape, path: Path = ()) -> set[Path]:
    """The paths an applied configuration sets: its leaves and list items (structured-merge-diff's
    ``ToFieldSet``); an empty map or list is a leaf."""
    out: set[Path] = set()
    _applied(config, shape, path, out)
    return out


def _applied(value: Any, shape: Shape, path: Path, out: set[Path]) -> None:
    if shape.kind == "map" and isinstance(value, dict) and value:
        for key, member in value.items():
            _applied(member, shape.child(key, member), (*path, ("f", key)), out)
    elif shape.kind == "list" and isinstance(value, list) and value:
        if shape.list_type == "set":
            out.update((*path, ("v", _compact(v))) for v in value)
            return
        for element, item in _keyed(value, shape, path).items():
            item_path = (*path, element)
            out.add(item_path)
            item_shape = shape.item(item)
            for key, member in item.items():
                _applied(member, item_shape.child(key, member), (*item_path, ("f", key)), out)
    elif path:
        out.add(path)


@dataclasses.dataclass
class Comparison:
    """What changed between two values: paths added, removed and modified (structured-merge-diff's
    ``Comparison``); a new or removed container is itself added or removed, with everything in it."""

    added: set[Path] = dataclasses.field(default_factory=set)
    removed: set[Path] = dataclasses.field(default_factory=set)
    modified: set[Path] = dataclasses.field(default_factory=set)


def compare(old: Any, new: Any, shape: Shape) -> Comparison:
    result = Comparison()
    _compare(old, new, shape, (), result)
    return result


_ABSENT: Final = object()


def _all(value: Any, shape: Shape, path: Path, out: set[Path]) -> None:
    if path:
        out.add(path)
    if shape.kind == "map" and isinstance(value, dict):
        for key, member in value.items():
            _all(member, shape.child(key, member), (*path, ("f", key)), out)
    elif shape.kind == "list" and isinstance(value, list):
        if shape.list_type == "set":
            out.update((*path, ("v", _compact(v))) for v in value)
            return
        for element, item in _keyed(value, shape, path).items():
            _all(item, shape.item(item), (*path, element), out)


def _same(a: Any, b: Any) -> bool:
    # Python's True == 1; JSON's true is not the number 1.
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else bool(a == b)


def _compare(old: Any, new: Any, shape: Shape, path: Path, result: Comparison) -> None:
    if old is not _ABSENT and new is not _ABSENT and _same(old, new):
        return
    if old is _ABSENT:
        _all(new, shape, path, result.added)
        return
    if new is _ABSENT:
        _all(old, shape, path, result.removed)
        return
    if shape.kind == "map" and isinstance(old, dict) and isinstance(new, dict) and (old or new):
        for key in {**old, **new}:
            before, after = old.get(key, _ABSENT), new.get(key, _ABSENT)
            member = after if after is not _ABSENT else before
            _compare(before, after, shape.child(key, member), (*path, ("f", key)), result)
        return
    if shape.kind == "list" and isinstance(old, list) and isinstance(new, list) and (old or new):
        if shape.list_type == "set":
            olds, news = {_compact(v) for v in old}, {_compact(v) for v in new}
            result.added.update((*path, ("v", v)) for v in news - olds)
            result.removed.update((*path, ("v", v)) for v in olds - news)
            return
        before_items, after_items = _keyed(old, shape, path), _keyed(new, shape, path)
        for element in {**before_items, **after_items}:
            before = before_items.get(element, _ABSENT)
            after = after_items.get(element, _ABSENT)
            item = after if after is not _ABSENT else before
            _compare(before, after, shape.item(item), (*path, element), result)
        return
    result.modified.add(path)


# -- merging and removing --------------------------------------------------------------------------


def merge(live: Any, config: Any, shape: Shape, path: Path = ()) -> Any:
    """``config`` merged into ``live``: maps by key, associative lists by their keys (live order, new
    items last), sets by value, anything else replaced."""
    if shape.kind == "map" and isinstance(live, dict) and isinstance(config, dict):
        out = dict(live)
        for key, value in config.items():
            out[key] = (
                merge(live[key], value, shape.child(key, value), (*path, ("f", key)))
                if key in live
                else copy.deepcopy(value)
            )
        return out
    if shape.kind == "list" and isinstance(live, list) and isinstance(config, list):
        if shape.list_type == "set":
            known = {_compact(v) for v in live}
            return [*copy.deepcopy(live), *(copy.deepcopy(v) for v in config if _compact(v) not in known)]
        items = _keyed(live, shape, path)
        merged = dict(items)
        for element, item in _keyed(config, shape, path).items():
            if element in items:
                merged[element] = merge(items[element], item, shape.item(item), (*path, element))
            else:
                merged[element] = copy.deepcopy(item)
        return list(merged.values())
    return copy.deepcopy(config)


def drop_nulls(value: Any) -> Any:
    """An applied configuration without its ``null`` members (they set nothing)."""
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


def remove_paths(obj: JSON, paths: Iterable[Path], shape: Shape) -> JSON:
    """``obj`` without the values at ``paths``; a map of arbitrary keys (labels, annotations) or a
    list left empty by a removal goes too, as Go's ``omitempty`` drops it (a struct stays)."""
    out = copy.deepcopy(obj)
    for path in sorted(paths, key=len, reverse=True):
        _remove(out, list(path), shape, ())
    return out


def _remove(node: Any, rest: list[Element], shape: Shape, path: Path) -> bool:
    """Remove ``rest`` under ``node``; returns whether ``node`` was emptied by it (and may go)."""
    element, tail = rest[0], rest[1:]
    if isinstance(node, dict) and element[0] == "f" and element[1] in node:
        key = element[1]
        member = node[key]
        if not tail or _remove(member, tail, shape.child(key, member), (*path, element)):
            del node[key]
        return not node and shape.kind == "map" and _free_keys(shape)
    if isinstance(node, list) and element[0] in ("k", "v"):
        for index, item in enumerate(node):
            if element[0] == "v":
                matched = _compact(item) == element[1]
            else:
                try:
                    matched = _item_key(item, shape.keys, path) == element
                except Unsupported:
                    matched = False
            if not matched:
                continue
            if not tail or _remove(item, tail, shape.item(item), (*path, element)):
                del node[index]
            break
        return not node
    return False


def _free_keys(shape: Shape) -> bool:
    """A map of arbitrary keys (``additionalProperties``, or deduced), not a struct."""
    return shape.schema is None or not shape.schema.get("properties")


# -- field sets and fieldsV1 -----------------------------------------------------------------------


def kept(paths: Iterable[Path], *, status_subresource: bool, subresource: str | None) -> FieldSet:
    """``paths`` without those nobody may own, nor those the write's subresource resets."""
    status = ("f", "status")
    out = []
    for path in paths:
        if path in _STRIPPED:
            continue
        if subresource == "status":
            if path[:1] != (status,):
                continue
        elif status_subresource and path[:1] == (status,):
            continue
        out.append(path)
    return frozenset(out)


def _element(text: str) -> Element:
    kind, sep, rest = text.partition(":")
    if not sep or kind not in ("f", "k", "v", "i"):
        raise ValueError(f"unknown path element {text!r}")
    if kind in ("k", "v"):
        rest = _compact(json.loads(rest))
    return (kind, rest)


def decode(fields: Any, prefix: Path = ()) -> set[Path]:
    """A ``fieldsV1`` tree as a set of paths; raises ValueError when it is not one."""
    if not isinstance(fields, dict):
        raise ValueError("fieldsV1 must be an object")
    out: set[Path] = set()
    for text, child in fields.items():
        if text == ".":
            if prefix:
                out.add(prefix)
            continue
        path = (*prefix, _element(text))
        if not isinstance(child, dict):
            raise ValueError("fieldsV1 members must be objects")
        if child:
            out.update(decode(child, path))
        else:
            out.add(path)
    return out


def _text(element: Element) -> str:
    return f"{element[0]}:{element[1]}"


def encode(paths: Iterable[Path]) -> JSON:
    """A set of paths as ``fieldsV1``: nested objects, ``.: {}`` where a member also has members."""
    tree: JSON = {}
    members = set(paths)
    for path in members:
        node = tree
        for element in path:
            node = node.setdefault(_text(element), {})
    for path in members:
        node = tree
        for element in path:
            node = node[_text(element)]
        if node:
            node["."] = {}
    return _sorted(tree)


def _sorted(tree: JSON) -> JSON:
    return {k: _sorted(tree[k]) for k in sorted(tree, key=lambda k: (k != ".", k))}


# -- managers --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Manager:
    """One ``managedFields`` entry's identity."""

    manager: str
    operation: str
    subresource: str = ""
    api_version: str = ""

    def printed(self) -> str:
        """As the real conflict message names it: ``"kubectl-edit" using apps/v1``, ``"helm"``."""
        text = json.dumps(self.manager)
        if self.subresource:
            text += f" with subresource {json.dumps(self.subresource)}"
        if self.operation == UPDATE_OP:
            text += f" using {self.api_version}"
        return text


@dataclasses.dataclass
class Managed:
    """An object's managers: their field sets and the times of their last changes."""

    fields: dict[Manager, FieldSet] = dataclasses.field(default_factory=dict)
    times: dict[Manager, str] = dataclasses.field(default_factory=dict)

    def copy(self) -> Managed:
        return Managed(dict(self.fields), dict(self.times))

    def others(self, manager: Manager) -> Iterator[tuple[Manager, FieldSet]]:
        return ((m, s) for m, s in self.fields.items() if m != manager)

    def owned(self, *, but: Manager | None = None) -> set[Path]:
        return {p for m, s in self.fields.items() if m != but for p in s}


def read_entries(entries: Any) -> Managed:
    """``metadata.managedFields`` as :class:`Managed`; raises ValueError when malformed."""
    managed = Managed()
    if entries is None:
        return managed
    if not isinstance(entries, list):
        raise ValueError("managedFields must be a list")
    for entry in entries:
        if not isinstance(entry, dict):
            raise ValueError("managedFields entries must be objects")
        operation = entry.get("operation")
        if operation not in (APPLY_OP, UPDATE_OP):
            raise ValueError(f"unknown operation {operation!r}")
        if entry.get("fieldsType", "FieldsV1") != "FieldsV1":
            raise ValueError(f"unknown fieldsType {entry.get('fieldsType')!r}")
        manager = Manager(
            str(entry.get("manager") or ""),
            operation,
            str(entry.get("subresource") or ""),
            str(entry.get("apiVersion") or "") if operation == UPDATE_OP else "",
        )
        if manager in managed.fields:
            raise ValueError(f"duplicate entry for manager {manager.manager!r}")
        managed.fields[manager] = frozenset(decode(entry.get("fieldsV1") or {}))
        if entry.get("time"):
            managed.times[manager] = str(entry["time"])
    return managed


def write_entries(managed: Managed, api_version: str) -> list[JSON]:
    """:class:`Managed` as ``metadata.managedFields``, ordered as the real server orders it
    (Apply entries first, then by time, then by manager)."""
    entries = []
    for manager, fields in managed.fields.items():
        if not fields:
            continue
        entry: JSON = {
            "manager": manager.manager,
            "operation": manager.operation,
            "apiVersion": manager.api_version or api_version,
        }
        if manager in managed.times:
            entry["time"] = managed.times[manager]
        entry["fieldsType"] = "FieldsV1"
        entry["fieldsV1"] = encode(fields)
        if manager.subresource:
            entry["subresource"] = manager.subresource
        entries.append(entry)
    entries.sort(key=lambda e: (e["operation"] != APPLY_OP, e.get("time", ""), e["manager"]))
    return entries


def is_reset(entries: Any) -> bool:
    """Whether a request's ``managedFields`` asks to clear them: a list holding one empty entry.
    (An empty list does not: a client unaware of the field must not strip it.)"""
    return isinstance(entries, list) and len(entries) == 1 and entries[0] == {}


def conflict_error(conflicts: list[tuple[Manager, Path]]) -> StatusError:
    """409 ``Conflict`` as the real server words an apply conflict."""
    conflicts = sorted(conflicts, key=lambda c: (c[0].printed(), render_path(c[1])))
    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {m.printed()}", "field": render_path(p)}
        for m, p in conflicts
    ]
    if len(conflicts) == 1:
        manager, path = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {manager.printed()}: {render_path(path)}"
    else:
        lines = []
        for printed in sorted({m.printed() for m, _ in conflicts}):
            lines.append(f"conflicts with {printed}:")
            lines.extend(f"- {render_path(p)}" for m, p in conflicts if m.printed() == printed)
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return StatusError(409, message, reason="Conflict", details={"causes": causes})


def update(managed: Managed, change: Comparison, manager: Manager, now: str, kept_paths: FieldSet) -> Managed:
    """An ``Update`` by ``manager``: it takes what it added or changed, everyone loses what was removed."""
    out = managed.copy()
    taken = frozenset(kept_paths & (change.added | change.modified))
    removed = frozenset(change.removed)
    for other, fields in list(out.fields.items()):
        if other != manager:
            out.fields[other] = fields - taken - removed
    previous = out.fields.get(manager, frozenset())
    out.fields[manager] = (previous - removed) | taken
    if taken:
        out.times[manager] = now
    return _without_empty(out)


def apply(
    managed: Managed,
    change: Comparison,
    manager: Manager,
    applied: FieldSet,
    *,
    force: bool,
    now: str,
    changed: bool,
) -> Managed:
    """An ``Apply`` by ``manager`` of a configuration setting ``applied``: 409 on a field another
    manager owns that the apply changes (unless ``force``, which takes it)."""
    out = managed.copy()
    touched = change.added | change.modified
    conflicts = [(other, path) for other, fields in out.others(manager) for path in fields & touched]
    if conflicts and not force:
        raise conflict_error(conflicts)
    for other, fields in list(out.fields.items()):
        if other != manager:
            out.fields[other] = fields - touched - change.removed
    out.fields[manager] = applied
    if changed or manager not in out.times:
        out.times[manager] = now
    return _without_empty(out)


def _without_empty(managed: Managed) -> Managed:
    for manager in [m for m, s in managed.fields.items() if not s]:
        del managed.fields[manager]
        managed.times.pop(manager, None)
    return managed


def pruned(live_owned: Managed, manager: Manager, applied: FieldSet, last: FieldSet) -> set[Path]:
    """What an apply removes: paths ``manager`` applied last time and not now, that no other manager
    owns, with nothing beneath them owned by anyone (an item keeps what others own in it)."""
    owned = live_owned.owned(but=manager) | set(applied)
    candidates = last - applied
    out = set()
    for path in candidates:
        if path in owned:
            continue
        if any(len(p) > len(path) and p[: len(path)] == path for p in owned):
            continue
        out.add(path)
    # A path under one that goes goes with it; the key fields of an item that stays stay.
    return {
        p
        for p in out
        if not any(p[:n] in out for n in range(1, len(p))) and not (p[-1][0] == "f" and _is_key(p))
    }


def _is_key(path: Path) -> bool:
    if len(path) < 2 or path[-2][0] != "k":
        return False
    return path[-1][1] in json.loads(path[-2][1])
