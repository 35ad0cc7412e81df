"""What the agent's socket answers when it refuses: an error both of its clients understand.

The bounds themselves (connection limit, head and body deadlines, bounded logging) are one suite run
against every listener, tests/adapters/test_endpoint_bounds.py; here, the socket's own refusal bodies:
the CNI API's error object for the plugin and libnetwork's ``Err`` for Docker.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.adapters.test_endpoint_bounds import TIMEOUT, closed_by_server, unix

pytestmark = pytest.mark.timeout(30)


def parse(raw: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


async def test_a_connection_over_the_limit_gets_an_error_the_plugin_and_docker_read() -> None:
    async with unix(max_connections=3, read_timeout=10) as agent:
        idle = [await agent.connect() for _ in range(3)]
        await asyncio.sleep(0.05)
        status, body = parse(await agent.request())
        assert status == 503
        assert body["error"]["code"] == "too_many_connections" and "3 connections" in body["Err"]
        assert "socket_max_connections" in body["Err"] and agent.handled == []
        for _, writer in idle:
            writer.close()


async def test_a_body_that_does_not_arrive_gets_the_request_timeout_error() -> None:
    async with unix(max_connections=4, read_timeout=TIMEOUT) as agent:
        reader, writer = await agent.connect()
        writer.write(b'POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n{"n":')
        await writer.drain()
        status, body = parse(await closed_by_server(reader, TIMEOUT * 5))
        assert status == 408 and body["error"]["code"] == "request_timeout" and body["Err"]
        writer.close()
