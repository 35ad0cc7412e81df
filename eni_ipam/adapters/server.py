"""HTTP endpoint: ``/metrics`` (Prometheus), ``/healthz`` (the event loop answers), ``/readyz``.

``/readyz`` answers 200 or 503 with a one-line body saying why, and — under leader election —
which role this replica has: ``ready: leader``, ``ready: standby (leader: pod-b)``, or
``not ready: leader, initial resync has not succeeded yet``. A standby is ready: it is healthy
and must not block rolling updates; only a leader (or a lone process) waits for its resync.

``/metrics`` answers in the OpenMetrics text format to a scraper that accepts it (Prometheus asks for
it first), in the Prometheus text format otherwise. It reads every family on the event loop in one
step (:meth:`MetricSet.freeze`, a copy: the scrape is consistent) and renders the text in a thread
(:func:`render`), so a large scrape never holds the loop — nor ``/healthz``, which the liveness
probe reads — while it is written.

The endpoint is bounded as every listener is (:mod:`eni_ipam.adapters.guard`): at most
``max_connections`` connections at once, shared fairly between clients (one more is answered ``503``
unread and closed, or takes the slot of a client holding more), a request head and body within
``read_timeout`` (else closed, or ``408``), an answer read within ``read_timeout`` (else aborted);
every refusal is counted in ``eni_ipam_http_connections_refused_total{reason}``.

**The probes have a listener of their own** (:func:`start_probes`, decision 0043): ``/healthz`` and
``/readyz`` only, on ``server.probe_port``, with slots of its own, a short deadline and one request
per connection. A flood of the public endpoint — however its connections are held — never takes a
slot a kubelet probe needs, so it cannot make kubelet restart the process. The public endpoint keeps
``/healthz`` and ``/readyz`` for people and scripts.
"""

from __future__ import annotations

import asyncio
import errno
import functools
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client.exposition import choose_encoder

from eni_ipam.adapters.guard import (
    ACCEPT_ERRORS,
    REFUSAL_REASONS,
    raw_response,
    serve_bounded,
)
from eni_ipam.adapters.limits import DEFAULT_MAX_CONNECTIONS, DEFAULT_READ_TIMEOUT, LISTEN_BACKLOG
from eni_ipam.adapters.metrics.exposition import render
from eni_ipam.adapters.metrics.registry import MetricSet
from eni_ipam.errors import ConfigError

RENDER_PAUSE = 0.0002
"""Seconds the thread writing a scrape sleeps between families (and every 500 nodes), handing the
GIL to the event loop: a fifth of a millisecond, under 10 ms over a scrape of the controller's 32
families, against the 5 ms the loop could otherwise wait each time it wakes."""

OPENMETRICS = "application/openmetrics-text"
"""The media type of the OpenMetrics text format (its parameters vary with what was asked)."""

Readiness = Callable[[], "bool | tuple[bool, str]"]
"""Ready or not, optionally with the body's detail (the role and the reason)."""


PROBE_CONNECTIONS = 16
"""Connections the probe listener serves at once: kubelet makes two probes a period, each one
connection for one request; the rest is room for an operator's ``curl`` and for the fair share
(a client holding more is the one that gives a slot up)."""

PROBE_READ_TIMEOUT = 2.0
"""Seconds a probe connection has to send its request: kubelet writes it at once, and the chart's
probes wait 3 s (readiness) and 5 s (liveness) for the answer."""


def _probe_handlers(ready: Readiness) -> dict[str, Callable[[web.Request], Awaitable[web.Response]]]:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        answer = ready()
        ok, detail = answer if isinstance(answer, tuple) else (answer, "")
        if ok:
            return web.Response(text=f"ready: {detail}\n" if detail else "ready\n")
        detail = detail or "initial resync has not succeeded yet"
        return web.Response(status=503, text=f"not ready: {detail}\n")

    return {"/healthz": healthz, "/readyz": readyz}


def make_app(metrics: MetricSet, ready: Readiness) -> web.Application:
    async def metrics_handler(request: web.Request) -> web.Response:
        # What prometheus_client's own server answers: OpenMetrics to a scraper that accepts it
        # (Prometheus asks for it first), the text format to any other.
        _, content_type = choose_encoder(request.headers.get("Accept", ""))
        openmetrics = content_type.startswith(OPENMETRICS)
        frozen = metrics.freeze()  # on the loop, in one step: what the loop changes is copied here
        write = functools.partial(render, frozen, pause=RENDER_PAUSE, openmetrics=openmetrics)
        body = await asyncio.to_thread(write)
        return web.Response(body=body, headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get("/metrics", metrics_handler)
    for path, handler in _probe_handlers(ready).items():
        app.router.add_get(path, handler)
    return app


def make_probe_app(ready: Readiness) -> web.Application:
    """``/healthz`` and ``/readyz`` alone; every answer closes its connection (kubelet opens one per
    probe), so a connection holds a slot for one request at most."""

    @web.middleware
    async def one_request(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        response = await handler(request)
        response.force_close()
        return response

    app = web.Application(middlewares=[one_request])
    for path, handler in _probe_handlers(ready).items():
        app.router.add_get(path, handler)
    return app


async def start_server(
    app: web.Application,
    *,
    host: str,
    port: int,
    metrics: MetricSet,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    port_key: str = "server.port",
    limit_key: str = "server.max_connections",
) -> web.AppRunner:
    """Start serving ``app`` under the bounds above (refusals counted in ``metrics``); the caller owns
    the returned runner and must ``await runner.cleanup()``. ``port_key`` and ``limit_key`` name the
    settings an error and a refusal point at.

    Raises:
        ConfigError: naming ``port_key`` when the address cannot be listened on (a port in use).
    """
    refusal = raw_response(
        "503 Service Unavailable",
        f"too many connections: this endpoint serves {max_connections} at once ({limit_key})\n".encode(),
        "text/plain; charset=utf-8",
    )

    def timed_out(message: str) -> web.Response:
        return web.Response(status=408, text=f"request timeout: {message}\n")

    # Every reason and error at 0 from the start: the first refusal is then an increase that a
    # dashboard's increase() or an alert's rate() sees, not the birth of a series they miss.
    for reason in REFUSAL_REASONS:
        metrics.http_connections_refused.labels(reason=reason)
    for error in sorted(errno.errorcode[code] for code in ACCEPT_ERRORS):
        metrics.accept_errors.labels(error=error)

    async def listen(factory: Callable[[], asyncio.Protocol]) -> asyncio.AbstractServer:
        loop = asyncio.get_running_loop()
        return await loop.create_server(factory, host, port, backlog=LISTEN_BACKLOG, reuse_address=True)

    try:
        return await serve_bounded(
            app,
            listen,
            where=f"tcp:{host}:{port}",
            max_connections=max_connections,
            read_timeout=read_timeout,
            refusal=refusal,
            timed_out=timed_out,
            refused=lambda reason: metrics.http_connections_refused.labels(reason).inc(),
        )
    except OSError as exc:  # in use, not an address of this host, not allowed: the operator's to fix
        reason = exc.strerror or str(exc)
        raise ConfigError(port_key, f"cannot listen on {host}:{port}: {reason}") from exc


async def start_probes(ready: Readiness, *, host: str, port: int, metrics: MetricSet) -> web.AppRunner:
    """The probe listener (:func:`make_probe_app`) on ``host``:``port``, under the same bounds with
    its own :data:`PROBE_CONNECTIONS` slots and :data:`PROBE_READ_TIMEOUT`; its refusals are counted
    with the endpoint's. The caller owns the runner.

    Raises:
        ConfigError: naming ``server.probe_port`` when the address cannot be listened on.
    """
    return await start_server(
        make_probe_app(ready),
        host=host,
        port=port,
        metrics=metrics,
        max_connections=PROBE_CONNECTIONS,
        read_timeout=PROBE_READ_TIMEOUT,
        port_key="server.probe_port",
        limit_key="the probe listener's own limit",
    )
