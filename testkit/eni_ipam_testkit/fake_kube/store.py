"""The fake API server's storage: objects, one global resourceVersion, and a bounded event log.

Invariants:

* One counter, ``rv``, for every resource type. Every committed write bumps it by one and appends
  exactly one :class:`Event`, so the log holds the contiguous versions ``floor+1 .. rv`` and a watch
  from version N is served by slicing at ``N - floor``. Versions at or below ``floor`` are forgotten
  (the log keeps ``history`` events; :meth:`Store.compact` forgets all of them), and a watch or a list
  continuation from there gets 410 ``Expired``.
* Stored objects are never modified in place: a write builds a new dict. Events and list snapshots
  can therefore share objects with the store without copying; callers outside the package get copies.
* A write that changes nothing is a no-op, as on the real server: no new version, no event.
* A write either commits fully or raises :class:`StatusError` having changed nothing. All methods are
  synchronous, so no request can observe a half-applied write.

Deletion follows the real server and garbage collector: an object with finalizers only gets a
``deletionTimestamp`` (MODIFIED) and is removed (DELETED) by the write that empties its finalizers;
removing an object deletes its dependents (``ownerReferences`` naming its uid) unless another owner
still exists, in which case only the dangling reference is dropped. The collector runs synchronously
after the owner's DELETED event (the real one is asynchronous, so real clients must not rely on timing).
Removing a CustomResourceDefinition removes its custom resources with it (at once: their finalizers are
not waited for).

Every write runs with :class:`WriteOptions`: ``dry_run`` does everything but commit (the answer is what
would have been stored), and ``field_validation`` says what happens to fields the type does not have
(``Ignore``: pruned silently, ``Warn``: pruned with a warning, ``Strict``: the write is refused, with the
real server's 400 for a create or update and 422 for a patch). A type's :class:`Strategy` adds what the
real server's REST strategy does for it (defaults, derived status, validation against the old object).
"""

from __future__ import annotations

import base64
import collections
import contextlib
import copy
import dataclasses
import datetime
import itertools
import json
import random
import uuid
from collections.abc import Callable, Iterator
from typing import Final

from eni_ipam_testkit.fake_kube import managed
from eni_ipam_testkit.fake_kube.openapi import prune_builtin
from eni_ipam_testkit.fake_kube.patch import APPLY, apply_patch, load_applied
from eni_ipam_testkit.fake_kube.resources import (
    CRDS,
    JSON,
    FieldError,
    Printed,
    ResourceType,
    StatusError,
    invalid,
    invalid_error,
)
from eni_ipam_testkit.fake_kube.schema import OBJECT_META_FIELDS, check_custom_resource
from eni_ipam_testkit.fake_kube.selectors import Filter
from eni_ipam_testkit.fake_kube.validation import builtin_errors, decode_error, metadata_errors

Key = tuple[str, str]  # (namespace or "", name)

ETCD_REQUEST_LIMIT: Final = 1536 * 1024
"""etcd's default ``--max-request-bytes``: a larger object is refused, and the real server passes the
refusal on as a 500 (kubernetes/kubernetes#112152). Measured on the object's compact JSON, which is
larger than the Protobuf a real server stores for built-in kinds, so the fake refuses a little early."""
IMMORTAL_NAMESPACES: Final = ("default", "kube-system", "kube-public")
"""Namespaces the real server's NamespaceLifecycle admission never lets go."""
# Metadata the server owns; writes cannot change it (resourceVersion is checked, then bumped).
_SERVER_METADATA: Final = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
_NAMESPACE_MISMATCH: Final = (
    "the namespace of the provided object does not match the namespace sent on the request"
)
_SNAPSHOTS_KEPT: Final = 32


@dataclasses.dataclass(frozen=True)
class Event:
    """One committed change. ``obj`` is the object as of ``rv`` (for DELETED: its last state, at ``rv``)."""

    rv: int
    type: str  # ADDED, MODIFIED or DELETED
    resource: str
    obj: JSON
    prev: JSON | None  # the object before the change; None for ADDED


@dataclasses.dataclass
class WriteOptions:
    """How one write runs, and the warnings it collects for the response."""

    dry_run: bool = False
    field_validation: str = "Warn"
    warnings: list[str] = dataclasses.field(default_factory=list)
    patched: bool = False
    """Set by :meth:`Store.patch`: a strict refusal is then the patch handler's 422, not a 400."""
    manager: str | None = None
    """The field manager a write through the API records (``fieldManager``, else the client's
    User-Agent); None for the fake's own writes, which leave ``managedFields`` as they are."""
    force: bool = False
    """``force=true`` on an apply: take the fields other managers own rather than answer 409."""
    user: object | None = None
    """Who writes (an :class:`~eni_ipam_testkit.fake_kube.auth.User`), for admission; None for the
    fake's own writes, which admission does not see."""


@dataclasses.dataclass(frozen=True)
class Change:
    """A write as admission sees it, after the object is defaulted and validated, before it is stored.

    ``operation`` is ``CREATE``, ``UPDATE`` or ``DELETE``; ``new`` is None on DELETE, ``old`` on CREATE.
    """

    operation: str
    rtype: ResourceType
    subresource: str | None
    new: JSON | None
    old: JSON | None
    options: WriteOptions


@dataclasses.dataclass(frozen=True)
class _ApplyPlan:
    """What an apply decided before the object was validated: who applies which fields."""

    manager: managed.Manager
    applied: managed.FieldSet
    base: managed.Managed


@dataclasses.dataclass(frozen=True)
class Strategy:
    """A type's additions to the generic write path, called on every candidate object.

    ``prepare(new, old, now)`` changes the candidate in place (defaults, derived status) before it is
    validated; ``validate(new, old)`` returns field errors (``old`` is None on create).
    """

    prepare: Callable[[JSON, JSON | None, str], None] | None = None
    validate: Callable[[JSON, JSON | None], list[FieldError]] | None = None


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise StatusError(400, "metadata must be an object")
    return meta


def _key(obj: JSON) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


def _without_managed_fields(obj: JSON) -> JSON:
    """A shallow copy of ``obj`` whose metadata has no ``managedFields`` (for reading only)."""
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def _wall_clock() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _spec_part(obj: JSON, rtype: ResourceType) -> JSON:
    """What ``generation`` tracks: everything but metadata (and status, when it is a subresource)."""
    skip = {"metadata", "apiVersion", "kind"} | ({"status"} if rtype.status_subresource else set())
    return {k: v for k, v in obj.items() if k not in skip}


class Store:
    def __init__(self, history: int, *, now: Callable[[], str] = _wall_clock) -> None:
        if history < 0:
            raise ValueError("history must be >= 0")
        self.history = history
        self.now = now
        """Timestamps written to objects (``creationTimestamp``, ``deletionTimestamp``)."""
        self.strategies: dict[str, Strategy] = {}
        """Per storage key (``nodes``): what the real server's strategy adds for that type."""
        self.changes: dict[str, int] = {}
        """Per storage key: the version of its last committed change."""
        self._options = WriteOptions()
        self.rv = 0
        self.floor = 0
        self._objects: dict[str, dict[Key, JSON]] = collections.defaultdict(dict)
        self._log: collections.deque[Event] = collections.deque()
        self._listeners: set[Callable[[], None]] = set()
        self._snapshots: collections.OrderedDict[int, list[JSON]] = collections.OrderedDict()
        self._snapshot_ids = itertools.count(1)
        self._rng = random.Random(0)  # generateName suffixes: deterministic per server
        self.admission: Callable[[Change], None] | None = None
        """Called with every write through the API before it is stored; raises StatusError to refuse
        it (:mod:`~eni_ipam_testkit.fake_kube.admission`)."""

    # -- reading -------------------------------------------------------------------------------

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> JSON:
        obj = self._objects[rtype.resource].get((namespace or "", name))
        if obj is None:
            raise rtype.not_found(name)
        return obj

    def find(self, resource: str, namespace: str | None, name: str) -> JSON | None:
        return self._objects[resource].get((namespace or "", name))

    def objects_of(self, resource: str) -> list[JSON]:
        """Objects of one resource, in storage order (namespace, then name)."""
        return [obj for _, obj in sorted(self._objects[resource].items())]

    def list_page(
        self, rtype: ResourceType, where: Filter, limit: int | None, token: str | None
    ) -> tuple[list[JSON], int, str | None]:
        """One page of a list: ``(items, resourceVersion, continue token or None)``.

        The first page takes a snapshot; continuations read that snapshot, so pages are consistent
        with each other however the objects change in between (as an etcd read at a fixed revision).
        """
        if token:
            snapshot_id, rv, offset = self._decode_token(token)
            items = self._snapshots.get(snapshot_id)
            if rv < self.floor or items is None:
                raise StatusError(
                    410,
                    "The provided continue parameter is too old to display a consistent list result. "
                    "You can start a new list without the continue parameter.",
                    reason="Expired",
                )
        else:
            snapshot_id, rv, offset = 0, self.rv, 0
            items = [obj for obj in self.objects_of(rtype.resource) if where.matches(obj)]
        if not limit or offset + limit >= len(items):
            return items[offset:], rv, None
        if not snapshot_id:
            snapshot_id = next(self._snapshot_ids)
            self._snapshots[snapshot_id] = items
            while len(self._snapshots) > _SNAPSHOTS_KEPT:
                self._snapshots.popitem(last=False)
        raw = json.dumps([snapshot_id, rv, offset + limit]).encode()
        return items[offset : offset + limit], rv, base64.urlsafe_b64encode(raw).decode()

    @staticmethod
    def _decode_token(token: str) -> tuple[int, int, int]:
        try:
            snapshot_id, rv, offset = json.loads(base64.urlsafe_b64decode(token.encode()))
            return int(snapshot_id), int(rv), int(offset)
        except (ValueError, TypeError) as e:
            raise StatusError(400, f"continue key is not valid: {e}") from None

    def events_after(self, rv: int) -> list[Event] | None:
        """Events with a version above ``rv``, oldest first; None if some of them are forgotten."""
        if rv < self.floor:
            return None
        # From the newest end: a watch that is nearly caught up costs what it reads, not the log's
        # length (a deque is walked from an end; the log holds one event per version).
        newer = max(len(self._log) - (rv - self.floor), 0)
        return list(itertools.islice(reversed(self._log), newer))[::-1]

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` after every commit; returns the unsubscribe function."""
        self._listeners.add(listener)
        return lambda: self._listeners.discard(listener)

    def compact(self) -> None:
        self._log.clear()
        self.floor = self.rv
        self._snapshots.clear()

    # -- writing -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _writing(self, options: WriteOptions | None) -> Iterator[WriteOptions]:
        previous, self._options = self._options, options or WriteOptions()
        try:
            yield self._options
        finally:
            self._options = previous

    def create(
        self, rtype: ResourceType, namespace: str | None, body: object, options: WriteOptions | None = None
    ) -> JSON:
        with self._writing(options):
            return self._create(rtype, namespace, body)

    def _create(
        self, rtype: ResourceType, namespace: str | None, body: object, plan: _ApplyPlan | None = None
    ) -> JSON:
        obj = self._envelope(rtype, body)
        meta = _meta(obj)
        requested = meta.pop("managedFields", None)
        self._check_decodable(rtype, obj)
        if namespace is not None and meta.get("namespace") not in (None, "", namespace):
            raise StatusError(400, _NAMESPACE_MISMATCH)
        namespace = (namespace or meta.get("namespace") or "default") if rtype.namespaced else None
        if meta.get("resourceVersion"):
            raise StatusError(500, "resourceVersion should not be set on objects to be created")
        name = meta.get("name") or ""
        if not name:
            generate = meta.get("generateName")
            if not generate:
                message = "name or generateName is required"
                raise rtype.invalid("", [FieldError("FieldValueRequired", "metadata.name", "", message)])
            for _ in range(16):  # retry suffix collisions (the real server returns AlreadyExists)
                # names.SimpleNameGenerator: at most 58 characters of the prefix, then 5 random ones.
                name = generate[:58] + "".join(
                    self._rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5)
                )
                if (namespace or "", name) not in self._objects[rtype.resource]:
                    break
        if rtype.namespaced:
            self._check_namespace_open(rtype, namespace or "", name)
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field, None)
        meta.update(name=name, uid=str(uuid.uuid4()), creationTimestamp=self.now(), generation=1)
        if rtype.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if rtype.initial_status is not None:
            obj.pop("status", None)
            if rtype.initial_status:
                obj["status"] = copy.deepcopy(dict(rtype.initial_status))
        self._validate(rtype, obj, None)
        self._track(rtype, None, obj, requested, None, plan)
        self._admit("CREATE", rtype, None, obj, None)
        if _key(obj) in self._objects[rtype.resource]:
            raise rtype.already_exists(name)
        return self._commit(rtype.resource, "ADDED", obj, None)

    def update(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: object,
        subresource: str | None,
        options: WriteOptions | None = None,
    ) -> JSON:
        with self._writing(options):
            return self._update(rtype, namespace, name, body, subresource)

    def _update(
        self, rtype: ResourceType, namespace: str | None, name: str, body: object, subresource: str | None
    ) -> JSON:
        current = self.get(rtype, namespace, name)
        candidate = self._envelope(rtype, body)
        meta = _meta(candidate)
        if meta.get("name", name) != name:
            message = (
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
            raise StatusError(400, message)
        if meta.get("namespace") not in (None, "", namespace):
            raise StatusError(400, _NAMESPACE_MISMATCH)
        rv = meta.get("resourceVersion")
        if not rv and not rtype.unconditional_update:
            error = invalid("metadata.resourceVersion", Printed("0x0"), "must be specified for an update")
            raise rtype.invalid(name, [error])
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise rtype.conflict(name)
        return self._replace(rtype, current, candidate, subresource)

    def patch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        content_type: str,
        raw: bytes,
        subresource: str | None,
        options: WriteOptions | None = None,
    ) -> tuple[JSON, bool]:
        """Apply a PATCH; returns ``(object, created)`` (an apply of a missing object creates it)."""
        with self._writing(options) as opts:
            opts.patched = True
            return self._patch(rtype, namespace, name, content_type, raw, subresource)

    def _patch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        content_type: str,
        raw: bytes,
        subresource: str | None,
    ) -> tuple[JSON, bool]:
        current = self.find(rtype.resource, namespace, name)
        if current is None and (content_type != APPLY or subresource is not None):
            raise rtype.not_found(name)
        if content_type == APPLY:
            patched, plan = self._applied(rtype, current, name, raw, subresource)
            if current is None:
                self._options.patched = False
                return self._create(rtype, namespace, patched, plan), True
        else:
            assert current is not None
            patched, plan = apply_patch(content_type, raw, current, rtype.definition), None
        rv = _meta(patched).get("resourceVersion")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise rtype.conflict(name)
        return self._replace(rtype, current, patched, subresource, plan), False

    def _applied(
        self, rtype: ResourceType, current: JSON | None, name: str, raw: bytes, subresource: str | None
    ) -> tuple[JSON, _ApplyPlan]:
        """A server-side apply: the applied configuration merged into the live object, less what the
        applier applied before and no longer does (:mod:`~eni_ipam_testkit.fake_kube.managed`)."""
        config = load_applied(raw)
        if not isinstance(config, dict):
            raise StatusError(400, "a merge patch or an applied configuration must be a JSON/YAML object")
        config = managed.drop_nulls(config)
        meta = _meta(self._envelope(rtype, config))
        meta.setdefault("name", name)
        if meta["name"] != name:
            raise StatusError(400, "the name of the object does not match the name on the URL")
        if meta.get("managedFields"):
            raise StatusError(400, "metadata.managedFields must be nil")
        config = {**config, "metadata": meta}
        live = _without_managed_fields(current) if current is not None else {}
        entries = (current or {}).get("metadata", {}).get("managedFields")
        manager = managed.Manager(self._options.manager or "", managed.APPLY_OP, subresource or "")
        shape = managed.root_shape(rtype, live or config)
        try:
            base = managed.read_entries(entries)
        except ValueError:
            base = managed.Managed()
        try:
            if current is not None and not base.fields:
                # Nobody owns anything yet: what the object holds is attributed to an Update of its
                # own, so that this apply conflicts with it rather than overwriting it silently.
                first = managed.Manager(managed.BEFORE_FIRST_APPLY, managed.UPDATE_OP, "", rtype.api_version)
                everything = managed.compare({}, live, shape)
                held = self._kept(rtype, everything.added, None)
                base = managed.update(base, everything, first, self.now(), held)
            applied = self._kept(rtype, managed.applied_set(config, shape), subresource)
            merged = managed.merge(live, config, shape) if live else config
            last = base.fields.get(manager)
            if last:
                merged = managed.remove_paths(merged, managed.pruned(base, manager, applied, last), shape)
        except managed.Unsupported as e:
            raise StatusError(400, f"failed to create typed patch object ({self._gvk(rtype)}): {e}") from None
        return merged, _ApplyPlan(manager, applied, base)

    @staticmethod
    def _gvk(rtype: ResourceType) -> str:
        return f"{rtype.group}/{rtype.version}, Kind={rtype.kind}"

    @staticmethod
    def _kept(rtype: ResourceType, paths: set[managed.Path], subresource: str | None) -> managed.FieldSet:
        return managed.kept(paths, status_subresource=rtype.status_subresource, subresource=subresource)

    def _track(
        self,
        rtype: ResourceType,
        old: JSON | None,
        new: JSON,
        requested: object,
        subresource: str | None,
        plan: _ApplyPlan | None,
    ) -> None:
        """Write ``new``'s ``managedFields``: who owns what after this write (in place).

        The fake's own writes (no manager) keep what the request or the live object had. A request's
        own entries replace the live ones on the main resource (a ``[{}]`` clears them; an absent
        or empty list keeps them), as the real server takes them.
        """
        meta = new["metadata"]
        meta.pop("managedFields", None)
        live_entries = (old or {}).get("metadata", {}).get("managedFields")
        manager_name = self._options.manager
        if manager_name is None:
            entries = requested if requested else live_entries
            if entries:
                meta["managedFields"] = copy.deepcopy(entries)
            return
        if plan is not None:
            base = plan.base
        else:
            base = managed.Managed()
            sources = [] if managed.is_reset(requested) else [requested, live_entries]
            if subresource is not None:
                sources = [live_entries]
            for entries in sources:
                try:
                    base = managed.read_entries(entries)
                except ValueError:
                    continue
                if base.fields:
                    break
        before = _without_managed_fields(old) if old is not None else {}
        shape = managed.root_shape(rtype, new)
        now = self.now()
        try:
            change = managed.compare(before, new, shape)
            if plan is not None:
                touched = self._kept(rtype, change.added | change.modified, subresource)
                change = managed.Comparison(set(touched), change.removed, set())
                result = managed.apply(
                    base,
                    change,
                    plan.manager,
                    plan.applied,
                    force=self._options.force,
                    now=now,
                    changed=before != new,
                )
            else:
                who = managed.Manager(manager_name, managed.UPDATE_OP, subresource or "", rtype.api_version)
                kept = self._kept(rtype, change.added | change.modified, subresource)
                result = managed.update(base, change, who, now, kept)
        except managed.Unsupported as e:
            if plan is not None:
                raise StatusError(
                    400, f"failed to create typed patch object ({self._gvk(rtype)}): {e}"
                ) from None
            return  # as the real server: an object whose fields cannot be tracked loses its managedFields
        entries = managed.write_entries(result, rtype.api_version)
        if entries:
            meta["managedFields"] = entries

    def _admit(
        self, operation: str, rtype: ResourceType, subresource: str | None, new: JSON | None, old: JSON | None
    ) -> None:
        if self.admission is not None and self._options.user is not None:
            self.admission(Change(operation, rtype, subresource, new, old, self._options))

    def delete(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        options: JSON,
        write: WriteOptions | None = None,
    ) -> JSON:
        """Delete (or start deleting) an object; ``options`` is a DeleteOptions body merged with the query."""
        with self._writing(write):
            return self._delete_request(rtype, namespace, name, options)

    def _delete_request(self, rtype: ResourceType, namespace: str | None, name: str, options: JSON) -> JSON:
        current = self.get(rtype, namespace, name)
        preconditions = options.get("preconditions") or {}
        for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            wanted, actual = preconditions.get(field), current["metadata"].get(field)
            if wanted and wanted != actual:
                message = f"Precondition failed: {label} in precondition: {wanted}, "
                message += f"{label} in object meta: {actual}"
                raise StatusError(409, message, reason="Conflict")
        self._admit("DELETE", rtype, None, None, current)
        if options.get("propagationPolicy") == "Orphan" and not self._options.dry_run:
            self._release_dependents(current["metadata"]["uid"], orphan=True)
        if rtype.resource == "namespaces":
            return self._delete_namespace(current)
        return self._delete(rtype.resource, current)

    def _delete_namespace(self, current: JSON) -> JSON:
        """What NamespaceLifecycle and the namespace controller do: ``Terminating``, then its objects
        are deleted (at once here), then the namespace goes once nothing is left in it."""
        name = current["metadata"]["name"]
        if name in IMMORTAL_NAMESPACES:
            message = f'namespaces "{name}" is forbidden: this namespace may not be deleted'
            raise StatusError(403, message, details={"name": name, "kind": "namespaces"})
        if current["metadata"].get("deletionTimestamp"):
            return current
        marked = copy.deepcopy(current)
        marked["metadata"].update(deletionTimestamp=self.now(), deletionGracePeriodSeconds=0)
        marked.setdefault("status", {})["phase"] = "Terminating"
        answer = self._commit("namespaces", "MODIFIED", marked, current)
        if self._options.dry_run:
            return answer
        for resource, objects in list(self._objects.items()):
            for key, obj in list(objects.items()):
                if key[0] == name and objects.get(key) is obj:
                    self._delete(resource, obj)
        return self._finish_namespace(name) or answer

    def _finish_namespace(self, name: str) -> JSON | None:
        """Remove a terminating namespace once no object is left in it (None while one is)."""
        namespace = self._objects["namespaces"].get(("", name))
        if namespace is None or not namespace["metadata"].get("deletionTimestamp"):
            return None
        if namespace["metadata"].get("finalizers"):
            return None
        if any(key[0] == name for objects in self._objects.values() for key in objects):
            return None
        return self._remove("namespaces", namespace)

    # -- internals -----------------------------------------------------------------------------

    @staticmethod
    def _envelope(rtype: ResourceType, body: object) -> JSON:
        if not isinstance(body, dict):
            raise StatusError(400, "the request body must be a JSON object")
        for field, expected in (("apiVersion", rtype.api_version), ("kind", rtype.kind)):
            if body.get(field) not in (None, "", expected):
                given = body[field]
                message = (
                    f"the {field} in the data ({given}) does not match the expected {field} ({expected})"
                )
                raise StatusError(400, message)
        envelope: JSON = {"apiVersion": rtype.api_version, "kind": rtype.kind, "metadata": {}}
        return envelope | copy.deepcopy({k: v for k, v in body.items() if k not in ("apiVersion", "kind")})

    def _check_decodable(self, rtype: ResourceType, obj: JSON) -> None:
        """Refuse a body the real server could not decode into its type (wrong JSON types)."""
        if rtype.definition is not None:
            message = decode_error(obj, rtype.definition)
        else:  # a custom resource: its metadata is still ObjectMeta
            message = decode_error({"metadata": obj.get("metadata")}, "io.k8s.api.core.v1.ConfigMap")
        if message is None:
            return
        if self._options.patched:
            patched = json.dumps(obj, separators=(",", ":"), sort_keys=True)
            raise invalid_error("", "", "", "", [invalid("patch", patched, message)])
        kind = rtype.kind
        raise StatusError(
            400, f'{kind} in version "{rtype.version}" cannot be handled as a {kind}: {message}'
        )

    def _check_namespace_open(self, rtype: ResourceType, namespace: str, name: str) -> None:
        """NamespaceLifecycle admission: no new objects in a missing or terminating namespace."""
        found = self._objects["namespaces"].get(("", namespace))
        if found is None:
            details: JSON = {"name": namespace, "kind": "namespaces"}
            raise StatusError(404, f'namespaces "{namespace}" not found', details=details)
        if found["metadata"].get("deletionTimestamp"):
            why = f"unable to create new content in namespace {namespace} because it is being terminated"
            cause = {
                "reason": "NamespaceTerminating",
                "message": f"namespace {namespace} is being terminated",
                "field": "metadata.namespace",
            }
            details = {"name": name, "group": rtype.group, "kind": rtype.plural, "causes": [cause]}
            raise StatusError(403, f'{rtype.resource} "{name}" is forbidden: {why}', details=details)

    def _validate(self, rtype: ResourceType, obj: JSON, old: JSON | None) -> None:
        """Prepare, prune and validate a candidate object in place; raise if it cannot be stored."""
        strategy = self.strategies.get(rtype.resource)
        if strategy is not None and strategy.prepare is not None:
            strategy.prepare(obj, old, self.now())
        errors = metadata_errors(
            obj["metadata"], rtype.plural, rtype.group, creating=old is None, namespaced=rtype.namespaced
        )
        if rtype.schema is not None:
            found = check_custom_resource(obj, rtype.schema, old)
            errors, unknown = [*errors, *found.errors], found.unknown
        else:
            unknown = prune_builtin(obj, rtype.definition) if rtype.definition is not None else []
            if rtype.definition is not None:
                errors = [*errors, *builtin_errors(obj, rtype.definition)]
            meta = obj["metadata"]
            for key in [k for k in meta if k not in OBJECT_META_FIELDS and rtype.definition is None]:
                unknown.append(f"metadata.{key}")
                del meta[key]
        if unknown:
            self._unknown_fields(rtype, obj, unknown)
        if strategy is not None and strategy.validate is not None:
            errors = [*errors, *strategy.validate(obj, old)]
        if errors:
            raise rtype.invalid(obj["metadata"].get("name", ""), errors)

    def _unknown_fields(self, rtype: ResourceType, obj: JSON, unknown: list[str]) -> None:
        """Warn about pruned fields, or refuse the write under ``fieldValidation=Strict``."""
        mode = self._options.field_validation
        messages = [f'unknown field "{path}"' for path in unknown]
        if mode == "Warn":
            self._options.warnings.extend(messages)
        if mode != "Strict":
            return
        strict = "strict decoding error: " + ", ".join(messages)
        if self._options.patched:
            patched = json.dumps(obj, separators=(",", ":"), sort_keys=True)
            raise invalid_error("", "", "", "", [invalid("patch", patched, strict)])
        message = f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: {strict}'
        raise StatusError(400, message)

    def _replace(
        self,
        rtype: ResourceType,
        current: JSON,
        candidate: JSON,
        subresource: str | None,
        plan: _ApplyPlan | None = None,
    ) -> JSON:
        """Commit ``candidate`` over ``current`` under the status-subresource and metadata rules."""
        requested = _meta(candidate).get("managedFields")
        self._check_decodable(rtype, candidate)
        if subresource == "status":
            new = copy.deepcopy(current)
            source = candidate
        else:
            new = copy.deepcopy(candidate)
            source = current if rtype.status_subresource else candidate
        new.pop("status", None)
        if "status" in source:
            new["status"] = copy.deepcopy(source["status"])
        meta, old_meta = _meta(new), current["metadata"]
        for field in (*_SERVER_METADATA, "resourceVersion"):
            meta.pop(field, None)
            if field in old_meta:
                meta[field] = old_meta[field]
        if old_meta.get("deletionTimestamp"):
            added = [f for f in meta.get("finalizers") or () if f not in (old_meta.get("finalizers") or ())]
            if added:
                message = (
                    "no new finalizers can be added if the object is being "
                    f"deleted, found new finalizers {added}"
                )
                raise rtype.invalid(
                    meta["name"], [FieldError("FieldValueForbidden", "metadata.finalizers", "", message)]
                )
        meta.pop("managedFields", None)
        self._validate(rtype, new, current)
        if _spec_part(new, rtype) != _spec_part(current, rtype):
            meta["generation"] = int(old_meta.get("generation", 0)) + 1
        self._track(rtype, current, new, requested, subresource, plan)
        self._admit("UPDATE", rtype, subresource, new, current)
        if new == current:
            return current  # a no-op write: no new resourceVersion, no event
        if old_meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(rtype.resource, current)
        return self._commit(rtype.resource, "MODIFIED", new, current)

    def _delete(self, resource: str, obj: JSON) -> JSON:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return obj  # already being deleted: waiting for its finalizers
        if not meta.get("finalizers"):
            return self._remove(resource, obj)
        marked = copy.deepcopy(obj)
        marked["metadata"].update(
            deletionTimestamp=self.now(),
            deletionGracePeriodSeconds=0,
            generation=int(meta.get("generation", 0)) + 1,
        )
        return self._commit(resource, "MODIFIED", marked, obj)

    def _remove(self, resource: str, obj: JSON) -> JSON:
        deleted = self._commit(resource, "DELETED", None, obj)
        if self._options.dry_run:
            return deleted
        if resource == CRDS:  # the CRD's name is its resources' storage key
            for instance in self.objects_of(obj["metadata"]["name"]):
                self._remove(obj["metadata"]["name"], instance)
        self._release_dependents(obj["metadata"]["uid"], orphan=False)
        if obj["metadata"].get("namespace") and resource != "namespaces":
            self._finish_namespace(obj["metadata"]["namespace"])
        return deleted

    def _release_dependents(self, owner_uid: str, *, orphan: bool) -> None:
        """Garbage-collect (or, when orphaning, detach) the objects that ``owner_uid`` owns."""
        for resource, objects in list(self._objects.items()):
            for key, obj in list(objects.items()):
                if objects.get(key) is not obj:
                    continue  # changed or removed by a cascade earlier in this loop
                refs = obj["metadata"].get("ownerReferences") or []
                if not any(ref.get("uid") == owner_uid for ref in refs):
                    continue
                live = self._live_uids()
                kept = [
                    ref for ref in refs if ref.get("uid") != owner_uid and (orphan or ref.get("uid") in live)
                ]
                if orphan or kept:
                    detached = copy.deepcopy(obj)
                    detached["metadata"]["ownerReferences"] = kept
                    if not kept:
                        del detached["metadata"]["ownerReferences"]
                    self._commit(resource, "MODIFIED", detached, obj)
                else:
                    self._delete(resource, obj)

    def _live_uids(self) -> set[str]:
        return {obj["metadata"]["uid"] for objects in self._objects.values() for obj in objects.values()}

    def _commit(self, resource: str, kind: str, new: JSON | None, prev: JSON | None) -> JSON:
        if self._options.dry_run:  # the answer is what would have been stored; nothing is
            if new is None:
                assert prev is not None
                return prev
            if prev is not None:
                new["metadata"]["resourceVersion"] = prev["metadata"]["resourceVersion"]
            return new
        if new is not None and len(json.dumps(new, separators=(",", ":"))) > ETCD_REQUEST_LIMIT:
            raise StatusError(500, "etcdserver: request is too large")
        self.rv += 1
        self.changes[resource] = self.rv
        if new is None:
            assert prev is not None
            obj = {**prev, "metadata": {**prev["metadata"], "resourceVersion": str(self.rv)}}
            del self._objects[resource][_key(prev)]
        else:
            new["metadata"]["resourceVersion"] = str(self.rv)
            self._objects[resource][_key(new)] = obj = new
        self._log.append(Event(self.rv, kind, resource, obj, prev))
        while len(self._log) > self.history:
            self.floor = self._log.popleft().rv
        for listener in list(self._listeners):
            listener()
        return obj
