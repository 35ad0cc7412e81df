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
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

from aiohttp import web
from prometheus_client.exposition import choose_encoder

from eni_ipam._infra.metrics import MetricSet, render
from eni_ipam.errors import ConfigError

RENDER_PAUSE = 0.0002
"""Seconds the thread writing a scrape sleeps between families (and every 500 nodes), handing the
GIL to the event loop: a fifth of a millisecond, under 10 ms over a scrape of the controller's 32
families, against the 5 ms the loop could otherwise wait each time it wakes."""

OPENMETRICS = "application/openmetrics-text"
"""The media type of the OpenMetrics text format (its parameters vary with what was asked)."""

Readiness = Callable[[], "bool | tuple[bool, str]"]
"""Ready or not, optionally with the body's detail (the role and the reason)."""


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

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        answer = ready()
        ok, detail = answer if isinstance(answer, tuple) else (answer, "")
        if ok:
            return web.Response(text=f"ready: {detail}\n" if detail else "ready\n")
        detail = detail or "initial resync has not succeeded yet"
        return web.Response(status=503, text=f"not ready: {detail}\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


async def start_server(app: web.Application, *, host: str, port: int) -> web.AppRunner:
    """Start serving ``app``; the caller owns the returned runner and must ``await runner.cleanup()``.

    Raises:
        ConfigError: naming ``server.port`` when the address cannot be listened on (a port in use).
    """
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:  # in use, not an address of this host, not allowed: the operator's to fix
        await runner.cleanup()
        reason = exc.strerror or str(exc)
        raise ConfigError("server.port", f"cannot listen on {host}:{port}: {reason}") from exc
    return runner
