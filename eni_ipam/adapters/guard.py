"""Bounded serving: what a client can make a process hold, and what a flood can make it log.

Every listener of the project (the controller's and the agent's TCP endpoint, the agent's unix socket)
is served through :func:`serve_bounded`, and every long-running process calls :func:`bound_process` at
start. Whatever can open a listener (any pod, for a port on the node's address) could otherwise hold
connections until the process runs out of file descriptors — and then ``accept()`` fails on *every*
listener, the CNI plugin's socket included, while asyncio logs a traceback each time.

Invariants of :func:`serve_bounded`:

* At most ``max_connections`` connections are served at once, counted as each is made (not from
  aiohttp's own list, which a connection joins later, so a burst of accepts cannot slip past the
  count). A connection beyond that is answered with the caller's ``refusal`` (a 503) and closed
  without waiting for a byte: it costs one accept and one write, however many arrive.
* **The slots are shared fairly between peers** (a TCP client's address; a unix client's process,
  read with ``SO_PEERCRED``). When every slot is taken, a newcomer whose peer holds fewer connections
  than the peer holding the most (by two or more) takes a slot from that peer: its oldest connection
  whose answer is not being read, else its oldest idle one, else its oldest, is aborted (``evicted``).
  So one client, however many connections it opens or keeps busy, cannot lock out another: the CNI
  plugin (a new process per call) is served while a process floods the socket, Prometheus while a
  pod floods the port. A newcomer from the busiest peer itself is refused as before.
* A connection that has not sent a whole request head within ``read_timeout`` of opening, or of its
  previous answer, is closed (aiohttp's keep-alive timer, which runs from the connection's start and
  does not move while bytes trickle in).
* A request whose body has not fully arrived within ``read_timeout`` of its head is answered 408
  and its connection closed at most ``read_timeout`` later; nothing it carried reaches a handler.
* An answer the client does not read is a connection closed: once the kernel takes no more of it
  (any byte left waiting in the transport counts, not only 64 KB of them), the client has
  ``read_timeout`` to take some, and again after each time it does, or the connection is aborted
  (``write_timeout``). So a client pipelining requests it never reads holds a slot for
  ``read_timeout`` past its buffers at most, not for as long as it likes.
* A connection lives at most :data:`LIFETIME_READ_TIMEOUTS` times ``read_timeout`` (5 minutes at
  the default 10 s) and :data:`MAX_REQUESTS` requests: the answer that passes either bound closes
  it, and a client past its lifetime that stops reading is aborted at the next deadline. One whole
  request every few seconds (each within the keep-alive deadline) no longer holds a slot for ever.
* At shutdown a request in flight has ``read_timeout`` to be answered, then is cancelled: stopping
  never waits on a handler that does not end.
* The bounds never touch a request that arrived whole and an answer read as it is written.
* Every refusal is reported to ``refused`` (a metric); the log says so at most once per
  :data:`LOG_INTERVAL` per listener and reason, with how many were refused since the last line.

Invariants of :func:`bound_process`:

* The soft limit on open files is raised to the hard one (logged), so a flood below the hard limit
  cannot starve ``accept()``.
* asyncio's "out of system resource" accept errors (EMFILE, ENFILE, ENOBUFS, ENOMEM) are counted and
  logged as one structured line per :data:`LOG_INTERVAL` and error; any other error the event loop
  reports is one line per interval and kind too, never a traceback per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import resource
import socket
import struct
import traceback
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

import structlog
from aiohttp import hdrs, web

log = structlog.get_logger("eni_ipam.guard")

REFUSAL_REASONS = ("connection_limit", "evicted", "read_timeout", "write_timeout")
"""Why a connection or request is refused: over ``max_connections``; aborted to give its slot to a
peer holding fewer; a body not sent in time; an answer not read in time."""

Refused = Callable[[str], None]
"""Told the reason (one of :data:`REFUSAL_REASONS`) of every connection or request refused."""

Listen = Callable[[Callable[[], asyncio.Protocol]], Awaitable[asyncio.AbstractServer]]
"""Opens the listener with the protocol factory it is given (``loop.create_server`` or
``create_unix_server`` with their address bound)."""

LOG_INTERVAL = 60.0
"""Seconds between two log lines about the same flood (per listener and reason, or per loop error):
the first refusal of a burst is logged at once, the next ones are counted and said with the next
line. A minute keeps an hour-long flood to 60 lines, while the metrics count every refusal."""

ACCEPT_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""What asyncio reports as "socket.accept() out of system resource" (it then stops accepting on
that listener for a second)."""

FILE_RESERVE = 128
"""Open files a process needs besides its listeners' connections: its listening sockets, the
Kubernetes and cloud clients' connection pools, the state and configuration files, the event loop's
own. Counted in the headroom :func:`bound_process` checks."""


class Throttled:
    """One log line per key and interval; the lines in between are counted and said with the next."""

    def __init__(self, interval: float = LOG_INTERVAL, now: Callable[[], float] | None = None) -> None:
        self.interval = interval
        self._now = now
        self._last: dict[Any, float] = {}
        self._suppressed: dict[Any, int] = {}

    def now(self) -> float:
        return self._now() if self._now is not None else asyncio.get_running_loop().time()

    def warning(self, key: Any, event: str, **fields: Any) -> None:
        now = self.now()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        self._last[key] = now
        suppressed = self._suppressed.pop(key, 0)
        log.warning(event, **fields, **({"suppressed": suppressed} if suppressed else {}))


def raw_response(status: str, body: bytes, content_type: str) -> bytes:
    """A whole HTTP/1.1 answer that closes its connection (written before aiohttp sees the connection)."""
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


def _refuse(transport: asyncio.BaseTransport, answer: bytes) -> None:
    """A connection over the limit: one answer, then closed; nothing is waited for."""
    assert isinstance(transport, asyncio.WriteTransport)
    transport.write(answer)
    # Closing a socket with unread bytes resets it, and the client would lose the answer: take
    # what has already arrived (a client writes its whole request at once), then close.
    sock = transport.get_extra_info("socket")
    with contextlib.suppress(OSError):
        for _ in range(16):
            if not os.read(sock.fileno(), 65536):
                break
    transport.close()


Peer = Any
"""Who a connection comes from, as the slots tell clients apart: an address, a process id."""


def peer_of(transport: asyncio.BaseTransport) -> Peer:
    """A TCP client's address, or a unix client's process id (``SO_PEERCRED``); None when unknown."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return None
    if sock.family == socket.AF_UNIX:
        try:
            pid, _, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        except OSError:
            return None
        return ("pid", pid)
    peer = transport.get_extra_info("peername")
    return peer[0] if isinstance(peer, tuple) and peer else None


class _Slots:
    """The connections served, by peer (oldest first): who holds a slot, and whom a newcomer may
    take one from."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self.by_peer: dict[Peer, dict[_Counted, None]] = {}

    def __len__(self) -> int:
        return self.count

    def take(self, conn: _Counted) -> _Counted | bool:
        """Give ``conn`` a slot: True when one was free; the connection to evict for it when its
        peer holds fewer than the busiest peer by two or more; False when it is refused."""
        if self.count < self.limit:
            self._add(conn)
            return True
        mine = len(self.by_peer.get(conn.peer, ()))
        busiest = max(self.by_peer.values(), key=len, default={})
        if len(busiest) < mine + 2:
            return False
        # Its oldest connection whose answer is not being read, else its oldest idle one, else its
        # oldest: a client holding more than its share is the one that waits.
        victim = next((c for c in busiest if c.stalled_since is not None), None)
        victim = victim or next((c for c in busiest if not c.handling), None) or next(iter(busiest))
        self.release(victim)
        self._add(conn)
        return victim

    def _add(self, conn: _Counted) -> None:
        self.by_peer.setdefault(conn.peer, {})[conn] = None
        self.count += 1

    def release(self, conn: _Counted) -> None:
        held = self.by_peer.get(conn.peer)
        if held is None or conn not in held:
            return
        del held[conn]
        if not held:
            del self.by_peer[conn.peer]
        self.count -= 1


LIFETIME_READ_TIMEOUTS = 30
"""A connection may serve requests for this many ``read_timeout`` (5 minutes at the default 10 s);
the answer after that closes it. Far above any client's need (Prometheus reconnects at once, the CNI
plugin makes one request a connection), and a bound that scales with the listener's own deadline."""
MAX_REQUESTS = 1000
"""Requests a connection may carry; the answer to the last closes it."""


class _Counted(asyncio.Protocol):
    """One connection: takes a slot when made (or is refused), forwards every protocol event to
    aiohttp's handler, and gives its slot back when lost; aborts the connection when an answer
    waits ``write_timeout`` for the client to read it."""

    def __init__(self, listener: _Listener) -> None:
        self.listener = listener
        self.inner: Any = None
        """aiohttp's request handler, once the connection has a slot."""
        self.transport: asyncio.BaseTransport | None = None
        self.peer: Peer = None
        self.born = asyncio.get_running_loop().time()
        """When the connection was accepted (:func:`_lifetime` reads it through the transport)."""
        self.requests = 0
        """Requests answered so far (counted by :func:`_lifetime`)."""
        self.handling = 0
        """Requests being handled now (set by :func:`_lifetime`)."""
        self.stalled_since: float | None = None
        self._stall: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.peer = peer_of(transport)
        listener = self.listener
        taken = listener.slots.take(self)
        if taken is False:
            listener.refuse("connection_limit", "connection_limit", limit=listener.slots.limit)
            _refuse(transport, listener.refusal)
            return
        if isinstance(taken, _Counted):
            listener.refuse("evicted", "connection_evicted", limit=listener.slots.limit)
            taken.abort()
        self.inner = listener.handler()
        self.inner.connection_made(transport)
        # Told of every byte the kernel would not take (not only past 64 KB): an answer below that
        # mark waiting in the transport, or a close waiting for it, is as unread as a larger one.
        assert isinstance(transport, asyncio.WriteTransport)
        transport.set_write_buffer_limits(high=0)

    def expired(self) -> bool:
        """Whether the connection has outlived its lifetime (:data:`LIFETIME_READ_TIMEOUTS`)."""
        age = asyncio.get_running_loop().time() - self.born
        return age >= LIFETIME_READ_TIMEOUTS * self.listener.read_timeout

    def abort(self) -> None:
        """Close now, whatever is under way (an evicted connection, an answer nobody reads)."""
        self.listener.slots.release(self)
        if isinstance(self.transport, asyncio.WriteTransport):
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.listener.slots.release(self)
        self._unarm()
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)
        # else: refused; the answer is written, the transport closing

    def eof_received(self) -> bool | None:
        if self.inner is None:
            return None
        result: bool | None = self.inner.eof_received()
        return result

    def pause_writing(self) -> None:
        # Everything the kernel would take is taken: the client is not reading. It has
        # ``read_timeout`` to take some of what waits, or the connection goes.
        if self._stall is None:
            loop = asyncio.get_running_loop()
            self.stalled_since = loop.time()
            self._arm(self._waiting())
        if self.inner is not None:
            self.inner.pause_writing()

    def _waiting(self) -> int:
        transport = self.transport
        return transport.get_write_buffer_size() if isinstance(transport, asyncio.WriteTransport) else 0

    def _arm(self, waiting: int) -> None:
        self._stall = asyncio.get_running_loop().call_later(self.listener.read_timeout, self._check, waiting)

    def resume_writing(self) -> None:
        self._unarm()
        if self.inner is not None:
            self.inner.resume_writing()

    def _unarm(self) -> None:
        self.stalled_since = None
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _check(self, waiting: int) -> None:
        """``read_timeout`` after the client was last seen reading: a client that took some of the
        answer since has another deadline (within its lifetime); one that took nothing is aborted."""
        self._stall = None
        listener = self.listener
        now = self._waiting()
        if now < waiting and not self.expired():
            self._arm(now)
            return
        listener.refuse("write_timeout", "answer_not_read", timeout=listener.read_timeout)
        self.abort()  # its answer is dropped: the client was not reading it


class _Listener:
    """What every connection of one listener shares: its slots, its answers, its counters."""

    def __init__(
        self,
        *,
        where: str,
        handler: Callable[[], Any],
        max_connections: int,
        read_timeout: float,
        refusal: bytes,
        refused: Refused,
        throttled: Throttled,
    ) -> None:
        self.where = where
        self.handler = handler
        self.slots = _Slots(max_connections)
        self.read_timeout = read_timeout
        self.refusal = refusal
        self.refused = refused
        self.throttled = throttled

    def refuse(self, reason: str, event: str, **fields: Any) -> None:
        self.refused(reason)
        self.throttled.warning(reason, event, listener=self.where, **fields)


SERVER = "eni-ipam"
"""The ``Server`` header of every answer: the product, never its Python or aiohttp versions (what
would tell an attacker which known flaw to try)."""


async def _server_header(request: web.Request, response: web.StreamResponse) -> None:
    response.headers[hdrs.SERVER] = SERVER


class _QuietHandler(web.RequestHandler):
    """aiohttp's per-connection request handler, answering the requests it could not parse (400,
    413, 431...) and its own failures with the status line's words only. aiohttp's answer carries
    the parser's message, which quotes the offending request bytes back: a client's bytes are never
    echoed, and the answer names :data:`SERVER` like every other. No slots of its own, so the
    handler the server makes can take this class (aiohttp offers no other way to choose it)."""

    __slots__ = ()

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        super().handle_error(request, status, exc, message)  # its logging; it refuses once an answer began
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Error"
        answer = web.Response(status=status, text=f"{status} {phrase}\n", headers={hdrs.SERVER: SERVER})
        answer.force_close()
        return answer


class _Site(web.BaseSite):
    """The runner's site for a listener opened with our protocol factory rather than aiohttp's."""

    __slots__ = ("_factory", "_listen", "_where")

    def __init__(
        self, runner: web.AppRunner, listen: Listen, factory: Callable[[], asyncio.Protocol], where: str
    ) -> None:
        super().__init__(runner)
        self._listen = listen
        self._factory = factory
        self._where = where

    @property
    def name(self) -> str:
        return self._where

    async def start(self) -> None:
        await super().start()
        self._server = await self._listen(self._factory)


TimedOut = Callable[[str], web.Response]
"""The 408 answer of a body that did not arrive in time, given the message saying so."""


def body_deadline(
    read_timeout: float, refused: Refused, timed_out: TimedOut, throttled: Throttled, where: str
) -> Any:
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
                throttled.warning(
                    "read_timeout", "request_timeout", listener=where, path=request.path, timeout=read_timeout
                )
                response = timed_out(f"the request body did not arrive within {read_timeout:g}s")
                response.force_close()
                return response
        return await handler(request)

    return middleware


@web.middleware
async def _lifetime(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Middleware: the answer that passes the connection's lifetime (:data:`LIFETIME_READ_TIMEOUTS`)
    or :data:`MAX_REQUESTS` closes it (after it is written)."""
    transport = request.transport
    counted = transport.get_protocol() if transport is not None else None
    if not isinstance(counted, _Counted):
        return await handler(request)
    counted.handling += 1
    try:
        response = await handler(request)
    finally:
        counted.handling -= 1
    counted.requests += 1
    if counted.expired() or counted.requests >= MAX_REQUESTS:
        response.force_close()
    return response


async def serve_bounded(
    app: web.Application,
    listen: Listen,
    *,
    where: str,
    max_connections: int,
    read_timeout: float,
    refusal: bytes,
    timed_out: TimedOut,
    refused: Refused = lambda reason: None,
    log_interval: float = LOG_INTERVAL,
) -> web.AppRunner:
    """Serve ``app`` on what ``listen`` opens, under the bounds above; ``cleanup()`` the runner to stop.

    ``where`` names the listener in log lines (``tcp:0.0.0.0:9091``, ``unix:/run/…``); ``refusal`` is
    the whole raw answer to a connection over the limit (:func:`raw_response`). ``app`` must not be
    started yet: the body deadline is added to its middlewares. An ``OSError`` from ``listen`` is
    raised after the runner is cleaned up.
    """
    throttled = Throttled(log_interval)
    app.middlewares.append(body_deadline(read_timeout, refused, timed_out, throttled, where))
    app.middlewares.append(_lifetime)
    app.on_response_prepare.append(_server_header)
    # The keep-alive timeout is also the deadline of a request head: aiohttp starts it when the
    # connection opens and closes a connection still waiting for a head when it expires.
    # After an answer given before the body was read (408, 413), aiohttp keeps reading and dropping
    # what still comes for the lingering time, so that the client reads the answer rather than a
    # reset: bounded by the same deadline.
    # At shutdown (``cleanup()``), a request in flight has ``read_timeout`` to be answered, then is
    # cancelled: a handler that does not end (a client that stopped reading, a call that hangs) cannot
    # hold a SIGTERM up for aiohttp's default minute, past a supervisor's patience.
    runner = web.AppRunner(
        app,
        access_log=None,
        keepalive_timeout=read_timeout,
        lingering_time=read_timeout,
        shutdown_timeout=read_timeout,
    )
    await runner.setup()
    server = runner.server
    assert server is not None

    def handler() -> Any:
        made = server()
        made.__class__ = _QuietHandler
        return made

    listener = _Listener(
        where=where,
        handler=handler,
        max_connections=max_connections,
        read_timeout=read_timeout,
        refusal=refusal,
        refused=refused,
        throttled=throttled,
    )

    def factory() -> asyncio.Protocol:
        return _Counted(listener)

    try:
        # A site of the runner's: its cleanup stops accepting before it shuts the open connections
        # down, so nothing arrives while it does; ``runner.addresses`` names what was bound.
        await _Site(runner, listen, factory, where).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


# -- the process ---------------------------------------------------------------------------------


def raise_file_limit() -> tuple[int, int]:
    """Raise the soft limit on open files to the hard one; (soft before, soft now)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:  # the kernel takes at most fs.nr_open
        try:
            with open("/proc/sys/fs/nr_open") as f:
                target = int(f.read())
        except (OSError, ValueError):
            return soft, soft
    if soft != resource.RLIM_INFINITY and soft >= target:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError):
        return soft, soft
    return soft, target


def loop_error_handler(
    accept_failed: Callable[[str], None], throttled: Throttled
) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """An event loop exception handler: accept errors counted, everything one line per interval.

    asyncio's default handler logs every report with its traceback through the standard library's
    logging (not JSON, and under an fd flood once a second per listener, with aiohttp's own on top)."""

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        message = str(context.get("message", "")) or "unhandled error in the event loop"
        if isinstance(exc, OSError) and exc.errno in ACCEPT_ERRORS:
            name = errno.errorcode.get(exc.errno, str(exc.errno))
            accept_failed(name)
            throttled.warning(("accept", name), "accept_failed", error=name, reason=exc.strerror or str(exc))
            return
        handle = context.get("handle")
        if isinstance(exc, ValueError) and "_start_serving" in repr(getattr(handle, "_callback", None)):
            # asyncio retries accept() a second after an accept error, even on a listener closed
            # meanwhile (at shutdown): nothing is wrong but the retry.
            log.debug("accept_retry_after_close")
            return
        fields: dict[str, Any] = {"message": message}
        if exc is not None:
            fields["error"] = f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, OSError):  # a bug, not the network: its place in the code, once
                fields["traceback"] = "".join(traceback.format_exception(exc))[-4000:]
        throttled.warning(("loop", message, type(exc).__name__), "event_loop_error", **fields)

    return handler


def bound_process(*, accept_failed: Callable[[str], None], files_needed: int) -> None:
    """At a process's start, on its event loop: raise the open-file limit, check that the listeners'
    bounds fit under it, and route the loop's error reports through :func:`loop_error_handler`.

    ``files_needed``: the most files the process's listeners may hold (their ``max_connections`` and
    :data:`~eni_ipam.adapters.limits.LISTEN_BACKLOG` each); :data:`FILE_RESERVE` is added for the rest."""
    before, soft = raise_file_limit()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != before:
        log.info("file_limit_raised", soft_before=before, soft=soft, hard=hard)
    needed = files_needed + FILE_RESERVE
    if soft != resource.RLIM_INFINITY and soft < needed:
        # Not fatal: the bounds still hold, but a flood could then starve accept() of files.
        log.warning("file_limit_low", soft=soft, hard=hard, needed=needed)
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(loop_error_handler(accept_failed, Throttled()))
