"""The agent's unix socket, bounded: a limit on connections and a deadline on every request.

The socket is the node's only door to the allocator, and whatever can open it (the CNI plugin, Docker,
anything else running as root or in the socket's group) can hold it open. Without bounds, idle or
half-sent connections pile up until the process runs out of file descriptors and the plugin's real
requests fail. :func:`serve_unix` serves an aiohttp application under these bounds.

Invariants:

* At most ``max_connections`` connections are served at once. A connection beyond that is answered
  ``503 too_many_connections`` (both the CNI API's error object and libnetwork's ``Err``, so the plugin
  reports "try again later" and Docker shows the message) and closed without reading a byte: it costs
  one accept and one write, however many arrive.
* A connection that has not sent a whole request head within ``read_timeout`` of opening, or of its
  previous answer, is closed (aiohttp's keep-alive timer, which runs from the connection's start and
  does not move while bytes trickle in).
* A request whose body has not fully arrived within ``read_timeout`` of its head is answered
  ``408 request_timeout`` and its connection closed at most ``read_timeout`` later (what still comes
  meanwhile is read and dropped, so that the client sees the answer); nothing it carried reaches a
  handler.
* The bounds never touch a request that arrived whole: the plugin sends its request in one write.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

log = structlog.get_logger("eni_ipam.agent.guard")

Refused = Callable[[str], None]
"""Told the reason (``connection_limit``, ``read_timeout``) of every connection the guard refuses."""


def refusal_body(code: str, message: str) -> bytes:
    """An error both clients of the socket understand: the CNI API's object and libnetwork's ``Err``."""
    return json.dumps({"error": {"code": code, "msg": message, "field": ""}, "Err": message}).encode()


def _raw_response(status: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


class _Refuse(asyncio.Protocol):
    """A connection over the limit: one answer, then closed; nothing is read."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(self.answer)
        # Closing a unix socket with unread bytes resets it, and the client would lose the answer:
        # take what has already arrived (the plugin writes its whole request at once), then close.
        sock = transport.get_extra_info("socket")
        with contextlib.suppress(OSError):
            for _ in range(16):
                if not os.read(sock.fileno(), 65536):
                    break
        transport.close()


class _Counted(asyncio.Protocol):
    """Forwards every protocol event to aiohttp's handler and leaves the live set when lost."""

    def __init__(self, inner: Any, live: weakref.WeakSet[_Counted]) -> None:
        self.inner = inner
        self.live = live
        live.add(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.live.discard(self)
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        result: bool | None = self.inner.eof_received()
        return result

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


def body_deadline(read_timeout: float, refused: Refused) -> Any:
    """Middleware: the whole body within ``read_timeout`` of the head, or 408 and the connection closed."""

    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.body_exists:
            try:
                async with asyncio.timeout(read_timeout):
                    await request.read()  # kept by the request: the handler's read returns it
            except TimeoutError:
                refused("read_timeout")
                message = f"the request body did not arrive within {read_timeout:g}s"
                log.warning("socket_request_timeout", path=request.path, timeout=read_timeout)
                response = web.Response(
                    status=408, body=refusal_body("request_timeout", message), content_type="application/json"
                )
                response.force_close()
                return response
        return await handler(request)

    return middleware


async def serve_unix(
    app: web.Application,
    path: str,
    *,
    max_connections: int,
    read_timeout: float,
    refused: Refused = lambda reason: None,
) -> web.AppRunner:
    """Serve ``app`` on the unix socket ``path`` under the bounds above; ``cleanup()`` the runner to stop.

    ``app`` must not be started yet: the body deadline is added to its middlewares.
    """
    app.middlewares.append(body_deadline(read_timeout, refused))
    listeners: list[asyncio.AbstractServer] = []

    async def close_listener(_: web.Application) -> None:
        for listener in listeners:
            listener.close()  # not wait_closed: that waits for the connections aiohttp closes next

    # Stop accepting before aiohttp shuts the open connections down (the runner's cleanup runs the
    # application's shutdown hooks first), so nothing arrives while it does.
    app.on_shutdown.insert(0, close_listener)
    # The keep-alive timeout is also the deadline of a request head: aiohttp starts it when the
    # connection opens and closes a connection still waiting for a head when it expires.
    # After an answer given before the body was read (408, 413), aiohttp keeps reading and dropping
    # what still comes for the lingering time, so that the client reads the answer rather than a
    # reset: bounded by the same deadline.
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=read_timeout, lingering_time=read_timeout)
    await runner.setup()
    server = runner.server
    assert server is not None
    live: weakref.WeakSet[_Counted] = weakref.WeakSet()
    answer = _raw_response(
        "503 Service Unavailable",
        refusal_body(
            "too_many_connections",
            f"the eni-ipam agent already serves {max_connections} connections (socket_max_connections)",
        ),
    )
    warned = False

    def factory() -> asyncio.Protocol:
        nonlocal warned
        # Counted from the accept on (not from aiohttp's own list, which a connection joins only once
        # its transport is made): a burst of accepts cannot slip past the limit.
        if len(live) >= max_connections:
            refused("connection_limit")
            if not warned:  # once per burst: a flood must not flood the log too
                warned = True
                log.warning("socket_connection_limit", limit=max_connections, path=path)
            return _Refuse(answer)
        warned = False
        return _Counted(server(), live)

    try:
        listeners.append(await asyncio.get_running_loop().create_unix_server(factory, path))
    except BaseException:
        await runner.cleanup()
        raise
    return runner
