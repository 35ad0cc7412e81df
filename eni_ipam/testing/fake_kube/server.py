"""The HTTP face of the fake API server: routing, verbs, faults, request records, lifecycle.

:class:`FakeKube` listens on ``127.0.0.1`` (an ephemeral port) with aiohttp and maps each request to
a verb (get, list, watch, create, update, patch, delete, deletecollection) on a :class:`Store`.
Each request is checked against the injected :attr:`FakeKube.faults` before it touches state, and
recorded in :attr:`FakeKube.requests` with its final HTTP status (a watch as soon as its stream
starts). Responses are JSON with ``Content-Type: application/json`` exactly (lightkube turns an
error into ``ApiError`` only when the header is exactly that), and every error is a ``kind: Status``
body. An unexpected exception in the fake itself is not dressed up as a Status: aiohttp logs it
and answers a plain-text 500, so a bug here cannot pass for a server-side error a client retries.

Handlers never await between reading the store and writing it, so writes are atomic with respect to
each other and to watch streams. Handlers are cancelled when their client disconnects, and
:meth:`FakeKube.close` drops open watches before shutting down, so no task outlives the server.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import math
import os
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Final

import yaml
from aiohttp import web

from eni_ipam.testing.fake_kube.patch import APPLY, PATCH_TYPES
from eni_ipam.testing.fake_kube.resources import (
    BUILTIN_RESOURCES,
    JSON,
    ResourceType,
    StatusError,
    Target,
    bool_param,
    int_param,
    parse_path,
    resource_types_from_crd,
)
from eni_ipam.testing.fake_kube.selectors import Filter
from eni_ipam.testing.fake_kube.store import Store
from eni_ipam.testing.fake_kube.watch import WatchStream, render

_UNKNOWN_PATCH_FORMAT: Final = (
    "the body of the request was in an unknown format - accepted media types include: "
    + ", ".join(PATCH_TYPES)
)
_APPLY_NEEDS_MANAGER: Final = (
    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
)


@dataclasses.dataclass
class Fault:
    """Make the next ``times`` matching requests fail with ``status`` before they touch any state.

    ``None`` in a filter field matches anything (``subresource=None`` matches the main resource and
    its ``status``). ``retry_after`` adds a ``Retry-After`` header (whole seconds, rounded up).
    ``delay`` waits that long (on the loop's clock) first; with ``status=None`` the request then
    proceeds normally, which injects latency only. A fault is removed once spent.
    """

    verb: str | None = None
    plural: str | None = None
    status: int | None = 500
    times: int = 1
    retry_after: float | None = None
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None
    message: str | None = None
    delay: float = 0.0

    def matches(self, verb: str, target: Target) -> bool:
        wanted = (
            (self.verb, verb),
            (self.plural, target.rtype.plural),
            (self.subresource, target.subresource),
            (self.namespace, target.namespace),
            (self.name, target.name),
        )
        return self.times > 0 and all(want is None or want == got for want, got in wanted)


@dataclasses.dataclass(frozen=True)
class RequestRecord:
    """One request as the server saw it; ``status`` is the HTTP code (200 for a started watch)."""

    verb: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None
    status: int
    group: str = ""
    method: str = ""
    path: str = ""
    params: Mapping[str, str] = dataclasses.field(default_factory=dict)


def _json_response(status: int, body: JSON, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )


def _error_response(error: StatusError) -> web.Response:
    headers = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(math.ceil(error.retry_after))
    return _json_response(error.code, error.body(), headers)


def _verb(method: str, target: Target | None, query: Mapping[str, str]) -> str:
    named = target is not None and target.name is not None
    if method == "GET":
        if bool_param(query, "watch"):
            return "watch"
        return "get" if named else "list"
    verbs = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    if method == "DELETE" and not named:
        return "deletecollection"
    return verbs.get(method, method.lower())


class FakeKube:
    """A Kubernetes API server double on ``127.0.0.1``; see :mod:`eni_ipam.testing.fake_kube`."""

    def __init__(self, *, history: int = 1000, token: str | None = "fake-kube-token") -> None:
        self._store = Store(history)
        self._types: dict[tuple[str, str, str], ResourceType] = {
            (t.group, t.version, t.plural): t for t in BUILTIN_RESOURCES
        }
        self._token = token
        self._streams: set[WatchStream] = set()
        self._runner: web.AppRunner | None = None
        self._port = 0
        self.requests: list[RequestRecord] = []
        self.faults: list[Fault] = []
        self.bookmark_interval: float | None = 60.0
        """Seconds between BOOKMARK events on watches that allow them (None: never)."""

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("FakeKube is already started")
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self._runner = runner
        self._port = runner.addresses[0][1]

    async def close(self) -> None:
        if self._runner is None:
            return
        await self.drop_watches()
        runner, self._runner = self._runner, None
        await runner.cleanup()

    async def __aenter__(self) -> FakeKube:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def url(self) -> str:
        if self._runner is None:
            raise RuntimeError("FakeKube is not started")
        return f"http://127.0.0.1:{self._port}"

    def kubeconfig(self) -> JSON:
        """A kubeconfig for ``lightkube.KubeConfig.from_dict``: token auth, plain HTTP."""
        user: JSON = {"token": self._token} if self._token is not None else {}
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake-kube", "cluster": {"server": self.url}}],
            "users": [{"name": "fake-kube", "user": user}],
            "contexts": [{"name": "fake-kube", "context": {"cluster": "fake-kube", "user": "fake-kube"}}],
            "current-context": "fake-kube",
        }

    def write_kubeconfig(self, path: str | os.PathLike[str]) -> None:
        with open(path, "w", encoding="utf-8") as f:
            yaml.safe_dump(self.kubeconfig(), f)

    # -- state ---------------------------------------------------------------------------------

    def register_crd(self, manifest: Mapping[str, Any]) -> None:
        """Serve a CustomResourceDefinition (every served version); re-registering replaces it."""
        for rtype in resource_types_from_crd(copy.deepcopy(dict(manifest))):
            self._types[(rtype.group, rtype.version, rtype.plural)] = rtype

    @property
    def resource_version(self) -> str:
        """The current global resourceVersion."""
        return str(self._store.rv)

    @property
    def open_watches(self) -> int:
        """How many watch streams are being served right now."""
        return len(self._streams)

    def objects(self, plural: str, namespace: str | None = None) -> list[JSON]:
        """Copies of the stored objects of ``plural`` (or ``plural.group``), optionally one namespace's."""
        objs = self._store.objects_of(self._resolve(plural).resource)
        return [
            copy.deepcopy(o) for o in objs if namespace is None or o["metadata"].get("namespace") == namespace
        ]

    def get_object(self, plural: str, name: str, namespace: str | None = None) -> JSON | None:
        obj = self._store.find(self._resolve(plural).resource, namespace, name)
        return copy.deepcopy(obj) if obj is not None else None

    def add_object(self, plural: str, obj: Mapping[str, Any]) -> JSON:
        """Create an object directly (as a POST would: events, resourceVersion, validation)."""
        rtype = self._resolve(plural)
        namespace = (obj.get("metadata") or {}).get("namespace") if rtype.namespaced else None
        return copy.deepcopy(self._store.create(rtype, namespace, dict(obj)))

    def compact(self) -> None:
        """Forget the event log: watches and list continuations from any older version get 410."""
        self._store.compact()

    async def drop_watches(self) -> None:
        """Abruptly close every open watch stream and wait until their handlers have finished."""
        streams = list(self._streams)
        for stream in streams:
            stream.drop()
        for stream in streams:
            await stream.done.wait()

    def _resolve(self, plural: str) -> ResourceType:
        found = {t.resource: t for t in self._types.values() if plural in (t.plural, t.resource)}
        if len(found) != 1:
            raise ValueError(f"{'ambiguous' if found else 'unknown'} resource {plural!r}")
        return next(iter(found.values()))

    # -- HTTP ----------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        query = {k: v for k, v in request.query.items()}
        target = parse_path(request.path, self._types)
        verb = request.method.lower()

        def record(status: int) -> None:
            self.requests.append(
                RequestRecord(
                    verb=verb,
                    plural=target.rtype.plural if target else "",
                    namespace=target.namespace if target else None,
                    name=target.name if target else None,
                    subresource=target.subresource if target else None,
                    status=status,
                    group=target.rtype.group if target else "",
                    method=request.method,
                    path=request.path,
                    params=query,
                )
            )

        try:
            if self._token is not None and request.headers.get("Authorization") != f"Bearer {self._token}":
                raise StatusError(401, "Unauthorized")
            if target is None:
                raise StatusError(404, "the server could not find the requested resource")
            verb = _verb(request.method, target, query)
            await self._inject_fault(verb, target)
            if verb == "watch":
                return await self._watch(request, target, query, record)
            status, body = await self._dispatch(verb, request, target, query)
        except StatusError as error:
            record(error.code)
            return _error_response(error)
        record(status)
        return _json_response(status, body)

    async def _inject_fault(self, verb: str, target: Target) -> None:
        fault = next((f for f in self.faults if f.matches(verb, target)), None)
        if fault is None:
            return
        fault.times -= 1
        if fault.times <= 0:
            self.faults.remove(fault)
        if fault.delay > 0:
            await asyncio.sleep(fault.delay)
        if fault.status is not None:
            message = fault.message or f"fault injected: {verb} {target.rtype.resource} failed"
            raise StatusError(fault.status, message, retry_after=fault.retry_after)

    async def _dispatch(
        self, verb: str, request: web.Request, target: Target, query: Mapping[str, str]
    ) -> tuple[int, JSON]:
        rtype, namespace, name, subresource = target.rtype, target.namespace, target.name, target.subresource
        if verb in ("create", "update", "patch", "delete", "deletecollection"):
            if "dryRun" in query:
                raise StatusError(400, "dryRun is not supported by the fake API server")
            if rtype.namespaced and namespace is None:
                raise StatusError(405, "the server does not allow this method on the requested resource")
        if verb == "get" and name is not None:
            return 200, render(self._store.get(rtype, namespace, name), rtype)
        if verb == "list":
            return 200, self._list(rtype, Filter.from_query(query, rtype, namespace), query)
        if verb == "create" and name is None:
            return 201, render(self._store.create(rtype, namespace, await _read_json(request)), rtype)
        if verb == "update" and name is not None:
            obj = self._store.update(rtype, namespace, name, await _read_json(request), subresource)
            return 200, render(obj, rtype)
        if verb == "patch" and name is not None:
            content_type = request.content_type
            if content_type not in PATCH_TYPES:
                raise StatusError(415, _UNKNOWN_PATCH_FORMAT)
            if content_type == APPLY and not query.get("fieldManager"):
                raise StatusError(400, _APPLY_NEEDS_MANAGER)
            raw = await request.read()
            obj, created = self._store.patch(rtype, namespace, name, content_type, raw, subresource)
            return (201 if created else 200), render(obj, rtype)
        if verb == "delete" and name is not None:
            options = await _read_json(request) if request.can_read_body else {}
            if not isinstance(options, dict):
                raise StatusError(400, "the DeleteOptions body must be an object")
            if "propagationPolicy" in query:
                options["propagationPolicy"] = query["propagationPolicy"]
            return 200, render(self._store.delete(rtype, namespace, name, options), rtype)
        if verb == "deletecollection":
            where = Filter.from_query(query, rtype, namespace)
            items, _, _ = self._store.list_page(rtype, where, None, None)
            deleted = [
                self._store.delete(rtype, namespace, o["metadata"]["name"], dict(query)) for o in items
            ]
            return 200, self._list_body(rtype, [render(o, rtype) for o in deleted], self._store.rv, None)
        raise StatusError(405, "the server does not allow this method on the requested resource")

    def _list(self, rtype: ResourceType, where: Filter, query: Mapping[str, str]) -> JSON:
        limit = int_param(query, "limit")
        limit = limit if limit and limit > 0 else None
        items, rv, token = self._store.list_page(rtype, where, limit, query.get("continue"))
        # Items of built-in lists carry no apiVersion/kind (the list's kind says it); custom ones do.
        if rtype.schema is None:
            items = [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in items]
        else:
            items = [render(o, rtype) for o in items]
        return self._list_body(rtype, items, rv, token)

    @staticmethod
    def _list_body(rtype: ResourceType, items: list[JSON], rv: int, token: str | None) -> JSON:
        metadata: JSON = {"resourceVersion": str(rv)}
        if token:
            metadata["continue"] = token
        return {
            "kind": f"{rtype.kind}List",
            "apiVersion": rtype.api_version,
            "metadata": metadata,
            "items": items,
        }

    async def _watch(
        self, request: web.Request, target: Target, query: Mapping[str, str], record: Callable[[int], None]
    ) -> web.StreamResponse:
        stream = WatchStream.for_request(request, target, query, self._store, lambda: self.bookmark_interval)
        record(200)
        self._streams.add(stream)
        try:
            return await stream.serve()
        finally:
            self._streams.discard(stream)


async def _read_json(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw or b"null")
    except (ValueError, RecursionError) as e:
        raise StatusError(400, f"error decoding the request body: {e}") from None
