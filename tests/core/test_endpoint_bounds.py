"""The TCP endpoint (/metrics, /healthz, /readyz) under clients that connect and do not finish.

Real sockets and real (short) timeouts: what is tested is what the kernel, asyncio and aiohttp do.
The endpoint is the controller's and the agent's alike (:func:`eni_ipam._infra.server.start_server`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from eni_ipam._infra.metrics import Metrics
from eni_ipam._infra.server import make_app, start_server

pytestmark = pytest.mark.timeout(30)
TIMEOUT = 0.3


class Endpoint:
    def __init__(self, runner: web.AppRunner, metrics: Metrics) -> None:
        self.port = int(runner.addresses[0][1])
        self.metrics = metrics

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)

    async def get(self, path: str = "/healthz") -> bytes:
        reader, writer = await self.connect()
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: e\r\nConnection: close\r\n\r\n".encode())
            await writer.drain()
            return await asyncio.wait_for(reader.read(), 5)
        finally:
            writer.close()

    def refused(self, reason: str) -> float:
        return self.metrics.sample("eni_ipam_http_connections_refused_total", {"reason": reason}) or 0.0


@contextlib.asynccontextmanager
async def endpoint(max_connections: int = 4, read_timeout: float = TIMEOUT) -> AsyncIterator[Endpoint]:
    metrics = Metrics(process=False)
    runner = await start_server(
        make_app(metrics, lambda: True),
        host="127.0.0.1",
        port=0,
        metrics=metrics,
        max_connections=max_connections,
        read_timeout=read_timeout,
    )
    try:
        yield Endpoint(runner, metrics)
    finally:
        await runner.cleanup()


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bytes:
    """What the server sent before it closed the connection (fails if it stays open ``within`` s)."""
    return await asyncio.wait_for(reader.read(), within)


async def test_a_connection_over_the_limit_is_answered_503_and_counted() -> None:
    async with endpoint(max_connections=3, read_timeout=10) as e:
        idle = [await e.connect() for _ in range(3)]
        await asyncio.sleep(0.05)
        answer = await e.get()
        assert answer.startswith(b"HTTP/1.1 503") and b"server.max_connections" in answer
        assert e.refused("connection_limit") == 1
        idle[0][1].close()  # one leaves: the next request is served
        await asyncio.sleep(0.05)
        assert (await e.get()).startswith(b"HTTP/1.1 200")
        for _, writer in idle[1:]:
            writer.close()


async def test_a_burst_of_accepts_cannot_slip_past_the_limit() -> None:
    async with endpoint(max_connections=5, read_timeout=10) as e:
        opened = await asyncio.gather(*(e.connect() for _ in range(40)))
        answers = await asyncio.gather(*(closed_by_server(r, 2) for r, _ in opened[5:]))
        assert all(a.startswith(b"HTTP/1.1 503") for a in answers)
        assert e.refused("connection_limit") == 35
        for _, writer in opened:
            writer.close()


async def test_a_request_head_dripping_one_byte_at_a_time_is_closed_at_the_deadline() -> None:
    async with endpoint() as e:
        reader, writer = await e.connect()
        writer.write(b"GET /metrics HTTP/1.1\r\n")
        done = asyncio.ensure_future(closed_by_server(reader, TIMEOUT * 5))
        with contextlib.suppress(ConnectionError):
            for _ in range(30):  # a byte every 50 ms: more than the deadline if it moved with data
                if done.done():
                    break
                writer.write(b"X")
                await writer.drain()
                await asyncio.sleep(TIMEOUT / 6)
        assert await done == b""
        writer.close()


async def test_an_idle_connection_is_closed_after_the_read_timeout() -> None:
    async with endpoint() as e:
        reader, writer = await e.connect()
        assert await closed_by_server(reader, TIMEOUT * 5) == b""
        writer.close()


async def test_a_body_that_does_not_arrive_is_answered_408_and_counted() -> None:
    async with endpoint() as e:
        reader, writer = await e.connect()
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: e\r\nContent-Length: 100\r\n\r\nabc")
        await writer.drain()
        answer = await closed_by_server(reader, TIMEOUT * 5)
        assert answer.startswith(b"HTTP/1.1 408")
        assert e.refused("read_timeout") == 1
        writer.close()


async def test_a_flood_of_idle_connections_holds_no_more_than_the_limit_and_passes() -> None:
    """The flood that held 10,000 connections open in the controller: the process holds at most the
    limit, and once the idle connections time out, requests are served again."""
    async with endpoint(max_connections=20) as e:
        before = len(os.listdir("/proc/self/fd"))
        flood = await asyncio.gather(*(e.connect() for _ in range(300)))
        await asyncio.sleep(0.2)
        # each of our client ends is one descriptor; the server keeps one per served connection only
        held_by_server = len(os.listdir("/proc/self/fd")) - before - len(flood)
        assert held_by_server <= 20 + 1
        await asyncio.sleep(TIMEOUT * 2)  # the served ones time out
        assert (await e.get()).startswith(b"HTTP/1.1 200")
        for _, writer in flood:
            writer.close()


async def test_a_flood_is_one_log_line_and_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with endpoint(max_connections=2, read_timeout=10) as e:
        with capture_logs() as logs:
            flood = await asyncio.gather(*(e.connect() for _ in range(200)))
            await asyncio.gather(*(closed_by_server(r, 5) for r, _ in flood[2:]))
        assert e.refused("connection_limit") == 198
        assert [entry["event"] for entry in logs] == ["connection_limit"]
        assert logs[0]["limit"] == 2 and logs[0]["listener"].startswith("tcp:127.0.0.1:")
        assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]
        for _, writer in flood:
            writer.close()


async def test_whole_requests_on_a_kept_alive_connection_are_served() -> None:
    async with endpoint() as e:
        reader, writer = await e.connect()
        for _ in range(3):
            writer.write(b"GET /readyz HTTP/1.1\r\nHost: e\r\n\r\n")
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            length = int(
                next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1]
            )
            await reader.readexactly(length)
        assert e.refused("connection_limit") == 0 and e.refused("read_timeout") == 0
        writer.close()
