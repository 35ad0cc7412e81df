"""The agent's unix socket, bounded: a limit on connections and a deadline on every request.

The socket is the node's only door to the allocator, and whatever can open it (the CNI plugin, Docker,
anything else running as root or in the socket's group) can hold it open. Without bounds, idle or
half-sent connections pile up until the process runs out of file descriptors and the plugin's real
requests fail. :func:`serve_unix` serves an aiohttp application under the bounds every listener of the
project has (:mod:`eni_ipam.adapters.guard`), answering in the socket's own terms.

Invariants (those of :func:`~eni_ipam.adapters.guard.serve_bounded`, with these answers):

* A connection beyond ``max_connections`` is answered ``503 too_many_connections`` (both the CNI API's
  error object and libnetwork's ``Err``, so the plugin reports "try again later" and Docker shows the
  message) and closed after taking what already arrived.
* A request whose body has not fully arrived within ``read_timeout`` of its head is answered
  ``408 request_timeout``; a connection without a whole head within ``read_timeout`` is closed.
* The bounds never touch a request that arrived whole: the plugin sends its request in one write.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable

from aiohttp import web

from eni_ipam.adapters.guard import Refused, raw_response, serve_bounded
from eni_ipam.adapters.limits import LISTEN_BACKLOG

__all__ = ["Refused", "refusal_body", "serve_unix"]


def refusal_body(code: str, message: str) -> bytes:
    """An error both clients of the socket understand: the CNI API's object and libnetwork's ``Err``."""
    return json.dumps({"error": {"code": code, "msg": message, "field": ""}, "Err": message}).encode()


def _timed_out(message: str) -> web.Response:
    return web.Response(
        status=408, body=refusal_body("request_timeout", message), content_type="application/json"
    )


async def serve_unix(
    app: web.Application,
    path: str | socket.socket,
    *,
    max_connections: int,
    read_timeout: float,
    refused: Refused = lambda reason: None,
) -> web.AppRunner:
    """Serve ``app`` on the unix socket ``path`` under the bounds above; ``cleanup()`` the runner to stop.

    ``path`` may be a socket bound and listening already (:mod:`eni_ipam.agent.listen`): the
    connections its backlog took meanwhile are served first. ``app`` must not be started yet: the
    body deadline is added to its middlewares.
    """
    refusal = raw_response(
        "503 Service Unavailable",
        refusal_body(
            "too_many_connections",
            f"the eni-ipam agent already serves {max_connections} connections (socket_max_connections)",
        ),
        "application/json",
    )

    async def listen(factory: Callable[[], asyncio.Protocol]) -> asyncio.AbstractServer:
        loop = asyncio.get_running_loop()
        if isinstance(path, socket.socket):
            return await loop.create_unix_server(factory, sock=path, backlog=LISTEN_BACKLOG)
        return await loop.create_unix_server(factory, path, backlog=LISTEN_BACKLOG)

    return await serve_bounded(
        app,
        listen,
        where=f"unix:{path.getsockname() if isinstance(path, socket.socket) else path}",
        max_connections=max_connections,
        read_timeout=read_timeout,
        refusal=refusal,
        timed_out=_timed_out,
        refused=refused,
    )
