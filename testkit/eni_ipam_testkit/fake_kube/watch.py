"""One open watch: a chunked stream of newline-delimited JSON events, as the real server sends them.

A stream starts either with synthetic ``ADDED`` events for the current matching objects (no
``resourceVersion``, or ``"0"``) or at a version N, replaying the log after N; then it follows live
commits. Each store event is converted for this watcher the way the real watch cache does it: an
object that starts matching the selectors arrives as ``ADDED``, one that stops matching as
``DELETED`` (carrying its previous content at the event's version), and events for objects that
match neither before nor after are skipped. A version older than the log is answered with HTTP 200
and a single ``ERROR`` event holding a 410 ``Expired`` Status. A watch that asked for a Table
(``kubectl get -w``) gets each event's object as a one-row ``Table``, as the real server sends it.

A watch list (``sendInitialEvents=true``, which needs ``resourceVersionMatch=NotOlderThan``) starts
with the current objects whatever the version asked, and then, when bookmarks are allowed, sends a
``BOOKMARK`` annotated ``k8s.io/initial-events-end: "true"`` at the version the initial events end,
as kube-apiserver 1.27+ with the WatchList feature does (on by default in 1.34); with
``sendInitialEvents=false`` it starts at the version given, or now, without initial events.
:func:`check_list_options` refuses the combinations the real server refuses (422 ``ListOptions``).

The stream ends cleanly (terminating chunk) after ``timeoutSeconds`` or when the watcher falls so far
behind that the log no longer holds its next event (the real server also closes slow watchers);
:meth:`WatchStream.drop` ends it abruptly (connection closed mid-stream). Every wait uses the running
loop's clock, so streams run on virtual time under ``looptime``. A client that goes away raises a
``ConnectionError`` on the next write or cancels the handler; both end the stream and unsubscribe.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Final

from aiohttp import web

from eni_ipam_testkit.fake_kube.resources import (
    JSON,
    FieldError,
    ResourceType,
    StatusError,
    Target,
    bool_param,
    forbidden,
    int_param,
    invalid_error,
    not_supported,
)
from eni_ipam_testkit.fake_kube.selectors import FieldSelector, Filter
from eni_ipam_testkit.fake_kube.store import Event, Store

_DEFAULT_TIMEOUT: Final = 1800.0  # the real server's --min-request-timeout, when timeoutSeconds is unset
INITIAL_EVENTS_END: Final = "k8s.io/initial-events-end"


def check_list_options(query: Mapping[str, str], *, watch: bool) -> None:
    """apimachinery's ``ValidateListOptions``: a 422 ``ListOptions`` for what the real server refuses."""
    match = query.get("resourceVersionMatch") or ""
    initial = query.get("sendInitialEvents")
    errors: list[FieldError] = []
    if watch:
        if initial is not None and match != "NotOlderThan":
            detail = "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
            errors.append(forbidden("resourceVersionMatch", detail))
        if match:
            if initial is None:
                detail = "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
                errors.append(forbidden("resourceVersionMatch", detail))
            if match != "NotOlderThan":
                errors.append(not_supported("resourceVersionMatch", match, ["NotOlderThan"]))
            if query.get("continue"):
                detail = "resourceVersionMatch is forbidden when continue is provided"
                errors.append(forbidden("resourceVersionMatch", detail))
    else:
        if match:
            if not query.get("resourceVersion"):
                detail = "resourceVersionMatch is forbidden unless resourceVersion is provided"
                errors.append(forbidden("resourceVersionMatch", detail))
            if query.get("continue"):
                detail = "resourceVersionMatch is forbidden when continue is provided"
                errors.append(forbidden("resourceVersionMatch", detail))
            if match not in ("Exact", "NotOlderThan"):
                errors.append(not_supported("resourceVersionMatch", match, ["Exact", "NotOlderThan", ""]))
            if match == "Exact" and query.get("resourceVersion") == "0":
                detail = 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
                errors.append(forbidden("resourceVersionMatch", detail))
        if initial is not None:
            errors.append(forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"))
    if errors:
        raise invalid_error("ListOptions.meta.k8s.io", "", "meta.k8s.io", "ListOptions", errors)


def check_list_version(query: Mapping[str, str], current: int) -> None:
    """A list is always served at the latest version; refuse what would need another one.

    ``resourceVersion=N`` with ``resourceVersionMatch=Exact`` (or, as the real server reads it, with
    ``limit`` and no match) asks for the state at N: any N but the current one is answered as if
    etcd had compacted it (410). A version above the current one is the real server's 504.
    """
    if query.get("continue"):
        return
    wanted = int_param(query, "resourceVersion") or 0
    if wanted > current:
        message = f"Too large resource version: {wanted}, current: {current}"
        raise StatusError(504, message, reason="Timeout", retry_after=1)
    match = query.get("resourceVersionMatch") or ""
    exact = match == "Exact" or (not match and wanted and int_param(query, "limit"))
    if exact and wanted != current:
        raise StatusError(410, "The resourceVersion for the provided list is too old.", reason="Expired")


def render(obj: JSON, rtype: ResourceType) -> JSON:
    """The object as served at ``rtype``'s version (all versions of a CRD share storage)."""
    if obj.get("apiVersion") == rtype.api_version:
        return obj
    return {**obj, "apiVersion": rtype.api_version}


class WatchStream:
    """A watch request being served; owned by the server, which can drop it."""

    def __init__(
        self,
        *,
        request: web.Request,
        store: Store,
        rtype: ResourceType,
        where: Filter,
        since: int | None,
        timeout: float,
        bookmarks: bool,
        bookmark_interval: Callable[[], float | None],
        transform: Callable[[JSON], JSON] | None = None,
        initial_events: bool | None = None,
    ) -> None:
        self._request = request
        self._initial_events = initial_events
        self._store = store
        self._rtype = rtype
        self._where = where
        self._since = since
        self._timeout = timeout
        self._bookmarks = bookmarks
        self._bookmark_interval = bookmark_interval
        self._transform = transform
        self._wakeup = asyncio.Event()
        self._dropped = False
        self.done = asyncio.Event()
        """Set once the handler serving this stream has finished."""

    @classmethod
    def for_request(
        cls,
        request: web.Request,
        target: Target,
        query: Mapping[str, str],
        store: Store,
        bookmark_interval: Callable[[], float | None],
        *,
        transform: Callable[[JSON], JSON] | None = None,
    ) -> WatchStream:
        """A stream for a watch request; raises StatusError 400 for bad parameters.

        ``transform`` turns each event's object into what the client asked for (a Table).
        """
        check_list_options(query, watch=True)
        where = Filter.from_query(query, target.rtype, target.namespace)
        if target.name is not None:  # a watch on one object is a watch with a name field selector
            by_name = FieldSelector((*where.fields.terms, ("metadata.name", True, target.name)))
            where = dataclasses.replace(where, fields=by_name)
        timeout = int_param(query, "timeoutSeconds")
        return cls(
            request=request,
            store=store,
            rtype=target.rtype,
            where=where,
            since=int_param(query, "resourceVersion") or None,  # unset and "0" both mean "any"
            timeout=float(timeout) if timeout and timeout > 0 else _DEFAULT_TIMEOUT,
            bookmarks=bool_param(query, "allowWatchBookmarks"),
            bookmark_interval=bookmark_interval,
            transform=transform,
            initial_events=bool_param(query, "sendInitialEvents") if "sendInitialEvents" in query else None,
        )

    def drop(self) -> None:
        """Close the connection mid-stream: the client sees a premature end of the chunked body."""
        self._dropped = True
        transport = self._request.transport
        if transport is not None:
            transport.close()
        self._wakeup.set()

    async def serve(self) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        unsubscribe = self._store.subscribe(self._wakeup.set)
        try:
            await response.prepare(self._request)
            await self._stream(response)
        except ConnectionError:
            pass  # the client went away, or the stream was dropped while writing
        finally:
            unsubscribe()
            self.done.set()
        return response

    async def _stream(self, response: web.StreamResponse) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        if self._initial_events is False and self._since is None:
            cursor = self._store.rv  # sendInitialEvents=false from no version: from now on
        elif self._since is None or self._initial_events:
            # A watch list starts from the current state, whatever version it is NotOlderThan.
            cursor = self._store.rv
            for obj in self._store.objects_of(self._rtype.resource):
                if self._where.matches(obj):
                    await self._send(response, "ADDED", obj)
            if self._initial_events and self._bookmarks:
                await self._send(response, "BOOKMARK", self._bookmark(cursor, initial_events_end=True))
        else:
            cursor = self._since
            if self._store.events_after(cursor) is None:
                await self._send(response, "ERROR", self._expired(cursor))
                return
        next_bookmark = self._next_bookmark(loop.time())
        while not self._dropped:
            self._wakeup.clear()
            events = self._store.events_after(cursor)
            if events is None:
                return  # fell behind the bounded log: end the stream, the client re-watches
            for event in events:
                converted = self._convert(event)
                if converted is not None:
                    await self._send(response, *converted)
                cursor = event.rv
            now = loop.time()
            if now >= deadline:
                return
            if next_bookmark is not None and now >= next_bookmark:
                await self._send(response, "BOOKMARK", self._bookmark(cursor))
                next_bookmark = self._next_bookmark(now)
            wake_at = deadline if next_bookmark is None else min(deadline, next_bookmark)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout=max(wake_at - now, 0.0))

    def _bookmark(self, version: int, *, initial_events_end: bool = False) -> JSON:
        metadata: JSON = {"resourceVersion": str(version)}
        if initial_events_end:
            metadata.update(creationTimestamp=None, annotations={INITIAL_EVENTS_END: "true"})
        return {"apiVersion": self._rtype.api_version, "kind": self._rtype.kind, "metadata": metadata}

    def _next_bookmark(self, now: float) -> float | None:
        interval = self._bookmark_interval() if self._bookmarks else None
        return None if interval is None else now + interval

    def _convert(self, event: Event) -> tuple[str, JSON] | None:
        """The event this watcher sees, applying selector transitions like the real watch cache."""
        if event.resource != self._rtype.resource:
            return None
        matches_now = event.type != "DELETED" and self._where.matches(event.obj)
        matched_before = self._where.matches(event.prev)
        if matches_now:
            return ("MODIFIED" if matched_before else "ADDED"), event.obj
        if not matched_before:
            return None
        if event.type == "DELETED":
            return "DELETED", event.obj
        assert event.prev is not None
        previous = {**event.prev, "metadata": {**event.prev["metadata"], "resourceVersion": str(event.rv)}}
        return "DELETED", previous

    def _expired(self, since: int) -> JSON:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"too old resource version: {since} ({self._store.floor + 1})",
            "reason": "Expired",
            "code": 410,
        }

    async def _send(self, response: web.StreamResponse, kind: str, obj: JSON) -> None:
        if kind not in ("ERROR", "BOOKMARK"):
            obj = render(obj, self._rtype)
            if self._transform is not None:
                obj = self._transform(obj)
        await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
