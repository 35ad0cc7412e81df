"""Every listener under clients that connect and do not finish: a connection limit and deadlines.

One suite, two listeners: the TCP endpoint (/metrics, /healthz, /readyz: the controller's and the
agent's alike, :func:`eni_ipam.adapters.server.start_server`) and the agent's unix socket
(:func:`eni_ipam.agent.guard.serve_unix`), both served through :func:`eni_ipam.adapters.guard.serve_bounded`.
Real sockets and real (short) timeouts: what is tested is what the kernel, asyncio and aiohttp do.
What each listener answers in its refusals is checked beside it (tests/agent/test_guard.py for the
socket's error bodies).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from eni_ipam.adapters.guard import REFUSAL_REASONS
from eni_ipam.adapters.metrics import Metrics
from eni_ipam.adapters.server import make_app, start_server
from eni_ipam.agent.guard import serve_unix

pytestmark = pytest.mark.timeout(30)
TIMEOUT = 0.3


class Listener:
    """A served listener as its clients see it: connect, send a whole request, and what it refused."""

    kind: str
    handled: list[Any]
    """Bodies that reached a handler (the socket's echo handler; the TCP endpoint has none)."""

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        raise NotImplementedError

    def whole_request(self, n: int = 1, *, close: bool = False) -> bytes:
        raise NotImplementedError

    def refused(self) -> list[str]:
        """The reasons of the refusals so far, one entry each."""
        raise NotImplementedError

    async def request(self) -> bytes:
        """One whole request on a new connection: the raw answer."""
        reader, writer = await self.connect()
        try:
            writer.write(self.whole_request(close=True))
            await writer.drain()
            return await asyncio.wait_for(reader.read(), 5)
        finally:
            writer.close()


class Tcp(Listener):
    kind = "tcp"

    def __init__(self, runner: web.AppRunner, metrics: Metrics) -> None:
        self.port = int(runner.addresses[0][1])
        self.metrics = metrics
        self.handled = []

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)

    def whole_request(self, n: int = 1, *, close: bool = False) -> bytes:
        return b"GET /readyz HTTP/1.1\r\nHost: e\r\n" + (b"Connection: close\r\n" if close else b"") + b"\r\n"

    def refused(self) -> list[str]:
        counts = {
            reason: int(
                self.metrics.sample("eni_ipam_http_connections_refused_total", {"reason": reason}) or 0
            )
            for reason in REFUSAL_REASONS
        }
        return [reason for reason, count in counts.items() for _ in range(count)]


class Unix(Listener):
    kind = "unix"

    def __init__(self, path: str) -> None:
        self.path = path
        self.handled = []
        self.reasons: list[str] = []

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_unix_connection(self.path)

    def whole_request(self, n: int = 1, *, close: bool = False) -> bytes:
        body = json.dumps({"n": n}).encode()
        head = f"POST /echo HTTP/1.1\r\nHost: agent\r\nContent-Length: {len(body)}\r\n"
        return (head + ("Connection: close\r\n" if close else "") + "\r\n").encode() + body

    def refused(self) -> list[str]:
        return list(self.reasons)


@contextlib.asynccontextmanager
async def tcp(max_connections: int, read_timeout: float) -> AsyncIterator[Listener]:
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
        yield Tcp(runner, metrics)
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def unix(max_connections: int, read_timeout: float) -> AsyncIterator[Listener]:
    with tempfile.TemporaryDirectory(prefix="eni-guard-") as directory:
        listener = Unix(str(Path(directory) / "agent.sock"))

        async def echo(request: web.Request) -> web.Response:
            listener.handled.append(await request.json())
            return web.json_response({"ok": True, "padding": "." * 2000})  # an answer of some size

        app = web.Application()
        app.router.add_post("/echo", echo)
        runner = await serve_unix(
            app,
            listener.path,
            max_connections=max_connections,
            read_timeout=read_timeout,
            refused=listener.reasons.append,
        )
        try:
            yield listener
        finally:
            await runner.cleanup()


SERVE = {"tcp": tcp, "unix": unix}


@pytest.fixture(params=sorted(SERVE))
def serve(request: pytest.FixtureRequest) -> Any:
    kind = request.param

    def serving(max_connections: int = 4, read_timeout: float = TIMEOUT) -> Any:
        return SERVE[kind](max_connections, read_timeout)

    return serving


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bytes:
    """What the server sent before it closed the connection (fails if it stays open ``within`` s).

    A client still writing when the server closes sees the close as a reset or a broken pipe
    on its reader instead of an end of file; both mean the server closed with nothing sent.
    """
    try:
        return await asyncio.wait_for(reader.read(), within)
    except (BrokenPipeError, ConnectionResetError):
        return b""


async def test_a_connection_over_the_limit_is_answered_503_and_counted(serve: Any) -> None:
    async with serve(max_connections=3, read_timeout=10) as listener:
        idle = [await listener.connect() for _ in range(3)]
        await asyncio.sleep(0.05)
        assert (await listener.request()).startswith(b"HTTP/1.1 503")
        assert listener.refused() == ["connection_limit"] and listener.handled == []
        idle[0][1].close()  # one leaves: the next request is served
        await asyncio.sleep(0.05)
        assert (await listener.request()).startswith(b"HTTP/1.1 200")
        for _, writer in idle[1:]:
            writer.close()


async def test_a_burst_of_accepts_cannot_slip_past_the_limit(serve: Any) -> None:
    async with serve(max_connections=5, read_timeout=10) as listener:
        opened = await asyncio.gather(*(listener.connect() for _ in range(40)))
        answers = await asyncio.gather(*(closed_by_server(r, 2) for r, _ in opened[5:]))
        assert all(a.startswith(b"HTTP/1.1 503") for a in answers)
        assert listener.refused() == ["connection_limit"] * 35
        for _, writer in opened:
            writer.close()


async def test_a_request_head_dripping_one_byte_at_a_time_is_closed_at_the_deadline(serve: Any) -> None:
    async with serve() as listener:
        reader, writer = await listener.connect()
        writer.write(listener.whole_request().partition(b"\r\n")[0] + b"\r\n")
        done = asyncio.ensure_future(closed_by_server(reader, TIMEOUT * 5))
        with contextlib.suppress(ConnectionError):
            for _ in range(30):  # a byte every 50 ms: more than the deadline if it moved with data
                if done.done():
                    break
                writer.write(b"X")
                await writer.drain()
                await asyncio.sleep(TIMEOUT / 6)
        assert await done == b""
        assert listener.handled == []
        writer.close()


async def test_an_idle_connection_is_closed_after_the_read_timeout(serve: Any) -> None:
    async with serve() as listener:
        reader, writer = await listener.connect()
        assert await closed_by_server(reader, TIMEOUT * 5) == b""
        writer.close()


async def test_a_body_that_does_not_arrive_is_answered_408_reaches_no_handler_and_is_counted(
    serve: Any,
) -> None:
    async with serve() as listener:
        reader, writer = await listener.connect()
        head = listener.whole_request().partition(b"\r\n")[0]
        writer.write(head + b'\r\nHost: a\r\nContent-Length: 100\r\n\r\n{"n":')
        await writer.drain()
        assert (await closed_by_server(reader, TIMEOUT * 5)).startswith(b"HTTP/1.1 408")
        assert listener.handled == [] and listener.refused() == ["read_timeout"]
        writer.close()


async def test_whole_requests_on_a_kept_alive_connection_are_served(serve: Any) -> None:
    async with serve() as listener:
        reader, writer = await listener.connect()
        for n in range(3):
            writer.write(listener.whole_request(n))
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            length = int(
                next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1]
            )
            await reader.readexactly(length)
        assert listener.refused() == []
        if listener.kind == "unix":
            assert listener.handled == [{"n": 0}, {"n": 1}, {"n": 2}]
        writer.close()


async def test_a_flood_of_idle_connections_holds_no_more_than_the_limit_and_passes(serve: Any) -> None:
    """The flood that held 10,000 connections open in the controller and exhausted the agent's file
    limit: the process holds at most the limit, and once the idle connections time out, requests are
    served again."""
    async with serve(max_connections=20) as listener:
        before = len(os.listdir("/proc/self/fd"))
        flood = await asyncio.gather(*(listener.connect() for _ in range(300)))
        await asyncio.sleep(0.2)
        # each of our client ends is one descriptor; the server keeps one per served connection only
        held_by_server = len(os.listdir("/proc/self/fd")) - before - len(flood)
        assert held_by_server <= 20 + 1
        await asyncio.sleep(TIMEOUT * 2)  # the served ones time out
        assert (await listener.request()).startswith(b"HTTP/1.1 200")
        for _, writer in flood:
            writer.close()


async def test_a_flood_is_one_log_line_and_no_traceback(serve: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with serve(max_connections=2, read_timeout=10) as listener:
        with capture_logs() as logs:
            # Within the listen backlog (128): a unix client beyond it may be dropped before the accept.
            flood = await asyncio.gather(*(listener.connect() for _ in range(100)))
            await asyncio.gather(*(closed_by_server(r, 5) for r, _ in flood[2:]))
        assert listener.refused() == ["connection_limit"] * 98
        assert [entry["event"] for entry in logs] == ["connection_limit"]
        assert logs[0]["limit"] == 2 and logs[0]["listener"].startswith(f"{listener.kind}:")
        assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]
        for _, writer in flood:
            writer.close()


async def test_the_tcp_refusal_names_the_setting_to_raise() -> None:
    async with tcp(max_connections=1, read_timeout=10) as listener:
        _, writer = await listener.connect()
        await asyncio.sleep(0.05)
        answer = await listener.request()
        assert answer.startswith(b"HTTP/1.1 503") and b"server.max_connections" in answer
        writer.close()


async def test_every_refusal_reason_and_accept_error_is_exported_at_zero_from_the_start() -> None:
    """So that the first refusal is an increase a dashboard or an alert sees, not a new series."""
    async with tcp(max_connections=4, read_timeout=TIMEOUT) as listener:
        assert isinstance(listener, Tcp)
        sample = listener.metrics.sample
        for reason in ("connection_limit", "read_timeout"):
            assert sample("eni_ipam_http_connections_refused_total", {"reason": reason}) == 0
        for error in ("EMFILE", "ENFILE", "ENOBUFS", "ENOMEM"):
            assert sample("eni_ipam_accept_errors_total", {"error": error}) == 0


@pytest.mark.parametrize(
    "garbage",
    [
        b"GET /<script>secret HTTP/9.9\r\nHost: e\r\n\r\n",  # a version no parser reads
        b"\x16\x03\x01secret-tls-hello\r\n\r\n",  # not HTTP at all
        b"GET / HTTP/1.1\r\nHost: e\r\nContent-Length: secret\r\n\r\n",  # a bad header value
    ],
)
async def test_an_answer_to_a_request_it_cannot_read_echoes_none_of_it_and_names_no_versions(
    serve: Any, garbage: bytes
) -> None:
    async with serve() as listener:
        reader, writer = await listener.connect()
        writer.write(garbage)
        await writer.drain()
        answer = await closed_by_server(reader, 5)
        writer.close()
        assert answer.split(b" ", 2)[1] == b"400", answer
        assert b"secret" not in answer and b"script" not in answer
        assert b"Server: eni-ipam\r\n" in answer
        assert b"aiohttp" not in answer.lower() and b"python" not in answer.lower()


async def test_every_answer_names_the_product_and_no_versions(serve: Any) -> None:
    async with serve() as listener:
        answer = await listener.request()
        head = answer.split(b"\r\n\r\n", 1)[0]
        assert b"\r\nServer: eni-ipam\r\n" in head + b"\r\n", head
        assert b"aiohttp" not in head.lower() and b"python" not in head.lower()


async def test_a_client_that_never_reads_its_answers_is_aborted_at_the_deadline(serve: Any) -> None:
    # The attack: requests pipelined on a connection whose answers are never read. The handler then
    # waits for the client to drain; without a write deadline the slot was held for as long as the
    # client liked (and, with every slot held so, every probe was refused).
    async with serve(read_timeout=TIMEOUT) as listener:
        # A receive buffer of 1 KB, as the attacker set it: the answers pile up on the server's side.
        if isinstance(listener, Tcp):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
            sock.connect(("127.0.0.1", listener.port))
            request = b"GET /metrics HTTP/1.1\r\nHost: e\r\n\r\n"
        else:
            assert isinstance(listener, Unix)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
            sock.connect(listener.path)
            request = listener.whole_request()
        sock.setblocking(False)
        reader, writer = await (
            asyncio.open_connection(sock=sock)
            if isinstance(listener, Tcp)
            else asyncio.open_unix_connection(sock=sock)
        )
        started = asyncio.get_running_loop().time()
        writer.write(request * 5000)  # pipelined, never read
        while "write_timeout" not in listener.refused():
            assert asyncio.get_running_loop().time() - started < 10, listener.refused()
            await asyncio.sleep(0.05)
        assert asyncio.get_running_loop().time() - started < 5
        with contextlib.suppress(ConnectionError):
            while await asyncio.wait_for(reader.read(1 << 20), 5):
                pass  # what was written before the abort; then the end
        writer.close()
        assert await listener.request()  # the slot is free again


async def test_a_connection_is_closed_after_its_lifetime_whatever_it_sends(
    serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eni_ipam.adapters import guard

    monkeypatch.setattr(guard, "LIFETIME_READ_TIMEOUTS", 1)
    async with serve(read_timeout=TIMEOUT * 2) as listener:  # a lifetime of 0.6 s
        reader, writer = await listener.connect()
        answers = 0
        with contextlib.suppress(ConnectionError):
            for _ in range(20):  # one whole request every 0.1 s, each well within the deadline
                writer.write(listener.whole_request())
                await writer.drain()
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                length = int(
                    next(
                        line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
                    ).split(b":")[1]
                )
                await reader.readexactly(length)
                answers += 1
                if b"Connection: close" in head:
                    break
                await asyncio.sleep(0.1)
        writer.close()
        assert 4 <= answers < 20  # served while young, closed once past its lifetime


# -- fair slots ----------------------------------------------------------------------------------


async def connect_from(listener: Tcp, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the TCP listener from another loopback address: another client to the slots."""
    return await asyncio.open_connection("127.0.0.1", listener.port, local_addr=(source, 0))


async def test_a_client_holding_every_slot_gives_one_up_to_another_client() -> None:
    async with tcp(max_connections=4, read_timeout=10) as listener:
        assert isinstance(listener, Tcp)
        flood = [await connect_from(listener, "127.0.0.2") for _ in range(4)]
        await asyncio.sleep(0.05)
        # The flooding client itself is refused as before...
        reader, writer = await connect_from(listener, "127.0.0.2")
        assert (await closed_by_server(reader, 5)).startswith(b"HTTP/1.1 503")
        writer.close()
        # ...but another client takes the slot of the flood's oldest idle connection.
        assert (await listener.request()).startswith(b"HTTP/1.1 200")
        assert await closed_by_server(flood[0][0], 5) == b""
        assert sorted(listener.refused()) == ["connection_limit", "evicted"]
        for _, w in flood:
            w.close()


async def test_of_the_busiest_clients_connections_an_idle_one_goes_before_one_being_answered() -> None:
    async with tcp(max_connections=2, read_timeout=10) as listener:
        assert isinstance(listener, Tcp)
        busy_reader, busy = await connect_from(listener, "127.0.0.2")  # the oldest
        busy.write(b"GET /metrics HTTP/1.1\r\nHost: e\r\n\r\n" * 2000)  # pipelined: always answering
        idle_reader, idle = await connect_from(listener, "127.0.0.2")
        await asyncio.sleep(0.2)
        assert (await listener.request()).startswith(b"HTTP/1.1 200")
        assert listener.refused() == ["evicted"]
        assert await closed_by_server(idle_reader, 5) == b""  # the idle one gave its slot up
        assert (await busy_reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")  # still answered
        busy.close()
        idle.close()


async def test_the_probe_listener_answers_the_probes_alone_one_request_a_connection() -> None:
    from eni_ipam.adapters.server import start_probes

    metrics = Metrics(process=False)
    runner = await start_probes(
        lambda: (False, "leader, resync pending"), host="127.0.0.1", port=0, metrics=metrics
    )
    try:
        port = int(runner.addresses[0][1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: e\r\n\r\nGET /readyz HTTP/1.1\r\nHost: e\r\n\r\n")
        answer = await closed_by_server(reader, 5)  # one answer, then closed: the second is not served
        assert answer.startswith(b"HTTP/1.1 200") and answer.count(b"HTTP/1.1") == 1
        writer.close()
        for path, status in ((b"/readyz", b"503"), (b"/metrics", b"404")):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET " + path + b" HTTP/1.1\r\nHost: e\r\n\r\n")
            assert (await closed_by_server(reader, 5)).split(b" ", 2)[1] == status
            writer.close()
    finally:
        await runner.cleanup()


async def test_stopping_waits_for_a_handler_that_never_ends_at_most_the_read_timeout() -> None:
    """A SIGTERM stops the listeners; a request in flight whose handler never returns is cancelled
    after ``read_timeout`` (aiohttp's own default waited a minute, past a supervisor's patience)."""
    stuck = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        stuck.set()
        await asyncio.Event().wait()  # never
        raise AssertionError("unreachable")

    with tempfile.TemporaryDirectory(prefix="eni-guard-") as directory:
        path = str(Path(directory) / "agent.sock")
        app = web.Application()
        app.router.add_get("/hang", hang)
        runner = await serve_unix(app, path, max_connections=4, read_timeout=TIMEOUT)
        _, writer = await asyncio.open_unix_connection(path)
        writer.write(b"GET /hang HTTP/1.1\r\nHost: agent\r\n\r\n")
        await writer.drain()
        await asyncio.wait_for(stuck.wait(), 5)
        started = asyncio.get_running_loop().time()
        await asyncio.wait_for(runner.cleanup(), TIMEOUT * 10)
        assert asyncio.get_running_loop().time() - started < TIMEOUT * 5
        writer.close()
