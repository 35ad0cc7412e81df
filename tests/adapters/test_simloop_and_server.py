"""The simulator's virtual-time loop and the HTTP endpoint."""

import asyncio
import threading
import time

import aiohttp
import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.adapters.server import make_app, start_server
from eni_ipam.simulator.simloop import run_virtual


def test_virtual_loop_skips_idle_time():
    async def main():
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(3600)
        return loop.time() - start

    wall = time.perf_counter()
    assert run_virtual(main()) == pytest.approx(3600)
    assert time.perf_counter() - wall < 2


async def test_endpoint_serves_metrics_health_and_readiness():
    metrics = Metrics()
    metrics.resync.inc()
    ready = {"v": False}
    runner = await start_server(
        make_app(metrics, lambda: ready["v"]), host="127.0.0.1", port=0, metrics=metrics
    )
    try:
        port = runner.addresses[0][1]
        async with aiohttp.ClientSession() as session:
            base = f"http://127.0.0.1:{port}"
            async with session.get(f"{base}/metrics") as r:
                assert "eni_ipam_resync_total 1.0" in await r.text()
            async with session.get(f"{base}/healthz") as r:
                assert r.status == 200
            async with session.get(f"{base}/readyz") as r:
                assert r.status == 503 and "initial resync" in await r.text()
            ready["v"] = True
            async with session.get(f"{base}/readyz") as r:
                assert r.status == 200
    finally:
        await runner.cleanup()


async def test_metrics_are_frozen_on_the_loop_and_written_in_another_thread(monkeypatch):
    """The loop only copies what it owns; the text, the long part of a large scrape, is written in a
    thread, and is the scrape's whole text."""
    from eni_ipam.adapters import server
    from eni_ipam.core.model import NodeStats

    metrics = Metrics(process=False)
    metrics.set_node("n1", NodeStats(available=8, needed=2), capacity="subnet")
    written_in: list[threading.Thread] = []

    def render(frozen, **options):
        written_in.append(threading.current_thread())
        return real_render(frozen, **options)

    real_render = server.render
    monkeypatch.setattr(server, "render", render)
    runner = await start_server(make_app(metrics, lambda: True), host="127.0.0.1", port=0, metrics=metrics)
    try:
        port = runner.addresses[0][1]
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as r:
            body = await r.read()
    finally:
        await runner.cleanup()
    assert written_in and written_in[0] is not threading.main_thread()
    assert body == metrics.exposition()


async def test_a_scraper_that_accepts_openmetrics_gets_it_and_any_other_the_text_format():
    metrics = Metrics()
    metrics.resync.inc()
    runner = await start_server(make_app(metrics, lambda: True), host="127.0.0.1", port=0, metrics=metrics)
    prometheus = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    try:
        port = runner.addresses[0][1]
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{port}/metrics"
            async with session.get(url, headers={"Accept": prometheus}) as r:
                body = await r.text()
                assert r.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
                assert body.endswith("# EOF\n") and "eni_ipam_resync_total 1.0" in body
            async with session.get(url) as r:
                body = await r.text()
                assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                assert "# EOF" not in body and "eni_ipam_resync_total 1.0" in body
    finally:
        await runner.cleanup()
