"""An informer: a local cache of one resource kind kept current by list, then watch.

* **Start**: list (paginated), fill the store, set :attr:`Informer.synced`; then watch from the
  list's resourceVersion, applying every event to the store before handlers see it.
* **410 Gone** (the version was compacted away): list again and reconcile the store against the
  fresh list — vanished objects are delivered as synthetic DELETED events, changed ones as
  MODIFIED — so handlers never miss a deletion that happened while the watch was down.
* **429** (API server overloaded or its storage initializing): wait ``Retry-After`` (or back off)
  and watch again from the last version seen.
* **Dropped stream** or a watch silent for longer than the server timeout plus a minute: back off,
  watch again from the last version (no relist needed).
* **404** on the kind itself: the API server does not serve it, its CRD is not installed. Backed
  off and listed again like any other error, but said as one ``crd_missing`` error naming what
  installs it (:attr:`~eni_ipam.kube.api.Kind.install`), again every :data:`MISSING_REPEAT` while it
  lasts, rather than a warning per retry; ``crd_served`` once it is served.
* Other API errors back off and relist. Handlers are called synchronously on the event loop and
  must not block; a handler that raises is logged and never stops the informer.
* **Projection** (client-go's ``SetTransform``): an informer given ``project`` keeps and hands its
  handlers only what ``project`` returns for each object (:mod:`~eni_ipam.kube.projection`); the
  whole object of a list page or a watch event is dropped once projected, so it never outlives
  its page or its event. The store's keys and the resume version are read from the whole object
  first, and ``version`` reads a projection's resourceVersion back (a changed version after a
  relist is a MODIFIED event). Without ``project`` the store holds the objects themselves.
* **Filter** (client-go's ``FilteringResourceEventHandler``, but on the store): an informer given
  ``keep`` stores only the projections ``keep`` accepts; one that stops being accepted leaves the
  store as a DELETED event (the previous projection as ``previous``), so the store — and the memory
  it takes — holds only what the caller wants of a large kind (the node agent's EndpointSlices).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, overload

import structlog

from eni_ipam.adapters.metrics.registry import MetricSet
from eni_ipam.core.backoff import Backoff
from eni_ipam.core.clock import Clock
from eni_ipam.kube import errors
from eni_ipam.kube.api import Kind, KubeApi, Obj

log = structlog.get_logger("eni_ipam.kube.informer")

T = TypeVar("T")

Handler = Callable[[str, T, "T | None"], None]
"""``(event type, object, previous object or None)``; type is ADDED, MODIFIED or DELETED."""

EMIT_SLICE = 100
"""Events handed to the handlers between two yields to the event loop after a list (a few ms)."""

LIST_CHUNK = 150
"""Objects a list asks for per page. A page is decoded in one piece on the loop: 150 Nodes of
13 KB are 2 MB of JSON (about 20 ms); 500, the usual page, held the loop 60 to 130 ms at 100,000
Nodes. More pages are more requests, each a third the size."""

INACTIVITY_GRACE = 60.0
"""Seconds past the server-side watch timeout after which a silent watch counts as dropped."""

MISSING_REPEAT = 300.0
"""Seconds between two ``crd_missing`` errors while a kind is not served: often enough for whoever
reads the log later to find it near any time, rarely enough not to bury everything else (the
retries themselves follow the backoff, up to every 30 s)."""


def object_key(obj: Mapping[str, object]) -> str:
    """``namespace/name`` for namespaced objects, ``name`` otherwise."""
    meta = obj.get("metadata")
    assert isinstance(meta, Mapping)
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


def _version(obj: Mapping[str, object]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("resourceVersion", "")) if isinstance(meta, Mapping) else ""


def _same(obj: Any) -> Any:
    return obj


class Informer(Generic[T]):
    @overload
    def __init__(
        self: Informer[Obj],
        api: KubeApi,
        kind: Kind,
        *,
        clock: Clock,
        metrics: MetricSet,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
        watch_timeout: float = 300.0,
        backoff_initial: float = 1.0,
        backoff_max: float = 30.0,
        rng: random.Random | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self: Informer[T],
        api: KubeApi,
        kind: Kind,
        *,
        clock: Clock,
        metrics: MetricSet,
        project: Callable[[Obj], T],
        version: Callable[[T], str],
        keep: Callable[[T], bool] | None = None,
        view: type | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
        watch_timeout: float = 300.0,
        backoff_initial: float = 1.0,
        backoff_max: float = 30.0,
        rng: random.Random | None = None,
    ) -> None: ...

    def __init__(
        self,
        api: KubeApi,
        kind: Kind,
        *,
        clock: Clock,
        metrics: MetricSet,
        project: Callable[[Obj], Any] = _same,
        version: Callable[[Any], str] = _version,
        keep: Callable[[Any], bool] | None = None,
        view: type | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
        watch_timeout: float = 300.0,
        backoff_initial: float = 1.0,
        backoff_max: float = 30.0,
        rng: random.Random | None = None,
    ) -> None:
        """``project``: what to keep of each object (default: the object); ``version``: the
        resourceVersion of what ``project`` keeps; ``keep``: whether to store a projection (default:
        every one); ``view``: a class of :mod:`~eni_ipam.kube.views` to
        decode objects into, when ``project`` reads only its fields."""
        self.api = api
        self.project = project
        self.view = view
        self.version = version
        self.keep = keep
        self.kind = kind
        self.clock = clock
        self.metrics = metrics
        self.labels = dict(labels or {})
        self.fields = dict(fields or {})
        self.watch_timeout = watch_timeout
        self.backoff = Backoff(initial=backoff_initial, maximum=backoff_max, rng=rng or random.Random())
        self.store: dict[str, T] = {}
        self.synced = asyncio.Event()
        self.resource_version = ""
        self._handlers: list[Handler[T]] = []
        self._missing_said: float | None = None
        """When ``crd_missing`` was last said, while the kind is not served (None: it is served)."""

    def add_handler(self, handler: Handler[T]) -> None:
        """Deliver every later event to ``handler`` (the store's current objects are not replayed)."""
        self._handlers.append(handler)

    async def run(self) -> None:
        """Keep the store current until cancelled."""
        relist = True
        while True:
            listing = relist
            try:
                if relist:
                    await self._relist()
                    relist = False
                await self._watch()
                continue  # the stream ended cleanly: watch on from the last version
            except errors.KubeGone:
                self._restart("expired")
                relist = True
                if not listing:
                    continue  # the watch's version expired: list again at once
                delay = self.backoff.next_delay()  # the list's own continue token expired
            except errors.KubeThrottled as exc:
                self._restart("throttled")
                delay = exc.retry_after if exc.retry_after is not None else self.backoff.next_delay()
            except (errors.KubeUnavailable, TimeoutError) as exc:
                self._restart("dropped")
                delay = self.backoff.next_delay()
                log.info("watch_dropped", resource=self.kind.plural, error=str(exc), retry_in=round(delay, 3))
            except errors.KubeNotFound as exc:  # the kind is not served: its CRD is not installed
                self._restart("error")
                relist = True
                delay = self.backoff.next_delay()
                self._not_served(exc, delay)
            except errors.KubeError as exc:
                self._restart("error")
                relist = True
                delay = self.backoff.next_delay()
                log.warning(
                    "watch_failed", resource=self.kind.plural, error=str(exc), retry_in=round(delay, 3)
                )
            await self.clock.sleep(delay)

    def _not_served(self, error: errors.KubeError, delay: float) -> None:
        """Say that the kind is not served: an error at the first 404 and every :data:`MISSING_REPEAT`
        after, naming the fix; the retries in between at debug."""
        now = self.clock.monotonic()
        if self._missing_said is not None and now - self._missing_said < MISSING_REPEAT:
            log.debug("watch_failed", resource=self.kind.plural, error=str(error), retry_in=round(delay, 3))
            return
        self._missing_said = now
        name = f"{self.kind.plural}.{self.kind.group}" if self.kind.group else self.kind.plural
        log.error(
            "crd_missing",
            resource=self.kind.plural,
            problem=f"the API server does not serve {name}: its CRD is not installed",
            fix=self.kind.install or f"install the CustomResourceDefinition of {name}",
            error=str(error),
            retry_in=round(delay, 3),
        )

    def _restart(self, reason: str) -> None:
        self.metrics.informer_watch_restarts.labels(resource=self.kind.plural, reason=reason).inc()

    async def _relist(self) -> None:
        items, version = await self.api.list(
            self.kind,
            labels=self.labels,
            fields=self.fields,
            project=self._keyed,
            view=self.view,
            chunk_size=LIST_CHUNK,
        )
        self.metrics.informer_relists.labels(resource=self.kind.plural).inc()
        if self._missing_said is not None:
            self._missing_said = None
            log.info("crd_served", resource=self.kind.plural)
        fresh = dict(items) if self.keep is None else {k: v for k, v in items if self.keep(v)}
        del items
        old, self.store = self.store, fresh
        self.resource_version = version
        # Walked by key lists: a list of the items would make 100,000 tuples in one step, and the
        # full collection they set off walked them all on the loop (70 ms at 100,000 Nodes).
        for n, key in enumerate(list(old)):
            if n and n % EMIT_SLICE == 0:
                await asyncio.sleep(0)
            if key not in fresh:
                obj = old[key]
                self._emit(key, "DELETED", obj, obj)
        for n, key in enumerate(list(fresh)):
            if n and n % EMIT_SLICE == 0:
                await asyncio.sleep(0)  # a list of 100,000 objects is not handed over in one go
            obj = fresh[key]
            previous = old.get(key)
            if previous is None:
                self._emit(key, "ADDED", obj, None)
            elif self.version(previous) != self.version(obj):
                self._emit(key, "MODIFIED", obj, previous)
        self.synced.set()
        log.debug("informer_listed", resource=self.kind.plural, objects=len(fresh), version=version)

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        grace = self.watch_timeout + INACTIVITY_GRACE
        events = self.api.watch(
            self.kind,
            resource_version=self.resource_version,
            labels=self.labels,
            fields=self.fields,
            server_timeout=self.watch_timeout,
            view=self.view,
        )
        async with asyncio.timeout(grace) as deadline:
            async for event_type, raw in events:
                deadline.reschedule(loop.time() + grace)
                self.backoff.reset()
                version = _version(raw)
                if version:
                    self.resource_version = version
                if event_type not in ("ADDED", "MODIFIED", "DELETED"):
                    continue  # a BOOKMARK carries a version only
                key, obj = self._keyed(raw)
                del raw  # the whole object goes with its event
                if event_type == "DELETED" or (self.keep is not None and not self.keep(obj)):
                    previous = self.store.pop(key, None)
                    if event_type == "DELETED" or previous is not None:
                        self._emit(key, "DELETED", obj, previous)
                else:
                    previous = self.store.get(key)
                    self.store[key] = obj
                    self._emit(key, "MODIFIED" if previous is not None else "ADDED", obj, previous)

    def _keyed(self, raw: Obj) -> tuple[str, T]:
        """The store key of a whole object, and what is kept of it."""
        kept: T = self.project(raw)
        return object_key(raw), kept

    def _emit(self, key: str, event_type: str, obj: T, previous: T | None) -> None:
        for handler in self._handlers:
            try:
                handler(event_type, obj, previous)
            except Exception:  # one broken handler must not blind the others or stop the cache
                log.exception("informer_handler_failed", resource=self.kind.plural, key=key)
