"""The agent's socket under clients that connect and do not finish: a connection limit and deadlines.

Real sockets and real (short) timeouts: what is tested is what the kernel and aiohttp do with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from eni_ipam.agent.guard import serve_unix

pytestmark = pytest.mark.timeout(30)
TIMEOUT = 0.3


class Served:
    def __init__(self, path: str) -> None:
        self.path = path
        self.refused: list[str] = []
        self.handled: list[Any] = []

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_unix_connection(self.path)

    async def request(self, body: bytes = b'{"n": 1}') -> tuple[int, dict[str, Any]]:
        reader, writer = await self.connect()
        try:
            writer.write(
                b"POST /echo HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
            return parse(await asyncio.wait_for(reader.read(), 5))
        finally:
            writer.close()


def parse(raw: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@contextlib.asynccontextmanager
async def served(max_connections: int = 4, read_timeout: float = TIMEOUT) -> AsyncIterator[Served]:
    with tempfile.TemporaryDirectory(prefix="eni-guard-") as directory:
        state = Served(str(Path(directory) / "agent.sock"))

        async def echo(request: web.Request) -> web.Response:
            state.handled.append(await request.json())
            return web.json_response({"ok": True})

        app = web.Application()
        app.router.add_post("/echo", echo)
        runner = await serve_unix(
            app,
            state.path,
            max_connections=max_connections,
            read_timeout=read_timeout,
            refused=state.refused.append,
        )
        try:
            yield state
        finally:
            await runner.cleanup()


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bytes:
    """What the server sent before it closed the connection (fails if it stays open ``within`` s)."""
    return await asyncio.wait_for(reader.read(), within)


async def test_a_connection_over_the_limit_is_answered_503_without_being_read() -> None:
    async with served(max_connections=3, read_timeout=10) as agent:
        idle = [await agent.connect() for _ in range(3)]
        await asyncio.sleep(0.05)
        status, body = await agent.request()
        assert status == 503
        assert body["error"]["code"] == "too_many_connections" and "3 connections" in body["Err"]
        assert agent.refused == ["connection_limit"] and agent.handled == []
        idle[0][1].close()  # one leaves: the next request is served
        await asyncio.sleep(0.05)
        assert (await agent.request())[0] == 200
        for _, writer in idle[1:]:
            writer.close()


async def test_a_burst_of_accepts_cannot_slip_past_the_limit() -> None:
    async with served(max_connections=5, read_timeout=10) as agent:
        opened = await asyncio.gather(*(agent.connect() for _ in range(40)))
        answers = await asyncio.gather(*(closed_by_server(r, 2) for r, _ in opened[5:]))
        assert all(a.startswith(b"HTTP/1.1 503") for a in answers)
        assert agent.refused == ["connection_limit"] * 35
        for _, writer in opened:
            writer.close()


async def test_an_idle_connection_is_closed_after_the_read_timeout() -> None:
    async with served() as agent:
        reader, writer = await agent.connect()
        assert await closed_by_server(reader, TIMEOUT * 5) == b""
        writer.close()


async def test_a_request_head_trickling_in_is_closed_at_the_deadline_of_its_connection() -> None:
    async with served() as agent:
        reader, writer = await agent.connect()
        writer.write(b"POST /echo HTTP/1.1\r\n")
        done = asyncio.ensure_future(closed_by_server(reader, TIMEOUT * 5))
        with contextlib.suppress(ConnectionError):
            for _ in range(20):  # a byte every 50 ms: more than the deadline if it moved with data
                if done.done():
                    break
                writer.write(b"X")
                await writer.drain()
                await asyncio.sleep(TIMEOUT / 6)
        assert await done == b""
        assert agent.handled == []
        writer.close()


async def test_a_body_that_does_not_arrive_is_answered_408_and_reaches_no_handler() -> None:
    async with served() as agent:
        reader, writer = await agent.connect()
        writer.write(b'POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n{"n":')
        await writer.drain()
        status, body = parse(await closed_by_server(reader, TIMEOUT * 5))
        assert status == 408 and body["error"]["code"] == "request_timeout"
        assert agent.handled == [] and agent.refused == ["read_timeout"]
        writer.close()


async def test_whole_requests_are_served_on_a_kept_alive_connection() -> None:
    async with served() as agent:
        reader, writer = await agent.connect()
        for n in range(3):
            body = json.dumps({"n": n}).encode()
            writer.write(
                b"POST /echo HTTP/1.1\r\nHost: a\r\n" + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
            )
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(
                next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1]
            )
            await reader.readexactly(length)
            assert head.startswith(b"HTTP/1.1 200")
        assert agent.handled == [{"n": 0}, {"n": 1}, {"n": 2}] and agent.refused == []
        writer.close()


async def test_a_flood_of_idle_connections_holds_no_more_than_the_limit_and_passes() -> None:
    """The flood that once exhausted the file limit: the process holds at most the limit, and once the
    idle connections time out, requests are served again."""
    async with served(max_connections=20) as agent:
        before = len(os.listdir("/proc/self/fd"))
        flood = await asyncio.gather(*(agent.connect() for _ in range(300)))
        await asyncio.sleep(0.1)
        # each of our client ends is one descriptor; the server keeps one per served connection only
        held_by_server = len(os.listdir("/proc/self/fd")) - before - len(flood)
        assert held_by_server <= 20 + 1
        await asyncio.sleep(TIMEOUT * 2)  # the served ones time out
        assert (await agent.request())[0] == 200
        for _, writer in flood:
            writer.close()
