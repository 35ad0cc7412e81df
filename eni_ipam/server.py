"""HTTP endpoint: ``/metrics`` (Prometheus), ``/healthz`` (the event loop answers), ``/readyz``.

``/readyz`` is 200 once the initial resync succeeded; its body says why not otherwise. Leader
election (a later part) will add "leader" or "standby" to that body.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from eni_ipam.metrics import Metrics


def make_app(metrics: Metrics, ready: Callable[[], bool]) -> web.Application:
    async def metrics_handler(_: web.Request) -> web.Response:
        return web.Response(body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not ready: initial resync has not succeeded yet\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


async def start_server(app: web.Application, *, host: str, port: int) -> web.AppRunner:
    """Start serving ``app``; the caller owns the returned runner and must ``await runner.cleanup()``."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
