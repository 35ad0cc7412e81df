"""The EC2 front end over HTTP: an aiohttp server, in a test's loop or in a process of its own.

:class:`Ec2Server` serves an :class:`~.frontend.Ec2Frontend` on ``http://127.0.0.1:<port>/``: botocore
POSTs each request to ``/`` and gets EC2's answer with EC2's status and headers. It runs on the loop
of the cloud it fronts (its operations are that loop's coroutines). In a test, that is the test's
loop, and the AWS provider's executor threads reach it through the socket while the loop awaits
them.

For the benchmark it runs in a process of its own, so that parsing requests and rendering XML cost
the measured controller nothing::

    python -m eni_ipam_testkit.ec2_wire.server --fleet 100000 --port 0
    python -m eni_ipam_testkit.ec2_wire.server --cloud scenario.yaml --port 8790

``--cloud`` reads a cloud declaration in the scenario files' ``cloud:`` format (a scenario file, or
a file holding only the declaration; :mod:`providers.sim.declaration`); ``--fleet N`` builds N
nodes in bulk (:func:`~.fleet.build_fleet`); both may be given (the declaration first). The process
prints one line, ``listening on http://HOST:PORT`` (with what it holds and how long the build took),
once it accepts requests, and serves until SIGINT or SIGTERM. :func:`spawn` starts it and waits for
that line. Point the provider at it with ``AwsSettings(endpoint_url=url, region=...)`` and any
credentials: signatures are not checked.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

import yaml
from aiohttp import web

from eni_ipam.core.clock import LoopClock
from eni_ipam.core.ratelimit import EC2_BUCKETS
from eni_ipam_testkit.ec2_wire.fleet import FleetSpec, build_fleet
from eni_ipam_testkit.ec2_wire.frontend import Ec2Frontend
from providers.sim.cloud import SimCloud
from providers.sim.declaration import CloudDeclaration, build_cloud
from providers.sim.gate import Gate

READY = "listening on "


class Ec2Server:
    """EC2's wire protocol over HTTP for one cloud, on the running loop."""

    def __init__(self, cloud: SimCloud | Ec2Frontend, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.frontend = cloud if isinstance(cloud, Ec2Frontend) else Ec2Frontend(cloud)
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    async def start(self) -> str:
        """Start listening (port 0: an ephemeral one); the URL to give ``AwsSettings.endpoint_url``."""
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/", self._answer)
        # No access log: at a thousand requests a second it would cost more than the answers.
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        self.port = int(self._runner.addresses[0][1])
        return self.url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Ec2Server:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _answer(self, request: web.Request) -> web.Response:
        body = await request.read() if request.method == "POST" else request.query_string.encode()
        answer = await self.frontend.handle(body)
        return web.Response(status=answer.status, body=answer.body, headers=answer.headers)


def load_declaration(path: Path) -> CloudDeclaration:
    """The cloud declaration in ``path``: a scenario file's ``cloud:`` section, or the whole file."""
    document = yaml.safe_load(path.read_text()) or {}
    if isinstance(document, dict) and "cloud" in document:
        document = document["cloud"]
    return CloudDeclaration.model_validate(document)


def make_cloud(args: argparse.Namespace) -> tuple[SimCloud, str]:
    """The cloud the command line asks for, and a line saying what it holds."""
    clock = LoopClock()
    if args.cloud:
        cloud = build_cloud(load_declaration(Path(args.cloud)), clock, path=args.cloud)
    else:
        cloud = SimCloud(clock)
    # Server-side throttling: EC2's published buckets unless told otherwise (the gate is public).
    cloud.gate = Gate(clock, EC2_BUCKETS if args.throttle else None)
    built = ""
    if args.fleet:
        fleet = build_fleet(
            cloud,
            FleetSpec(
                instances=args.fleet,
                interfaces=args.interfaces,
                addresses=args.addresses,
                instance_type=args.instance_type,
            ),
        )
        built = f"; fleet built in {fleet.seconds:.1f} s"
    held = f"{len(cloud._instances)} instances, {len(cloud._interfaces)} interfaces{built}"
    return cloud, held


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m eni_ipam_testkit.ec2_wire.server",
        description="EC2's wire protocol over HTTP, answered by the in-memory cloud",
    )
    parser.add_argument("--cloud", help="a scenario file (its cloud: section) or a cloud declaration")
    parser.add_argument("--fleet", type=int, default=0, help="add this many nodes, built in bulk")
    parser.add_argument("--interfaces", type=int, default=4, help="interfaces per fleet node")
    parser.add_argument("--addresses", type=int, default=10, help="secondary addresses per fleet interface")
    parser.add_argument("--instance-type", default="m5.4xlarge", help="instance type of the fleet")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: an ephemeral port (printed)")
    parser.add_argument("--region", default="us-east-1", help="region of DNS names and ARNs")
    parser.add_argument("--no-throttle", dest="throttle", action="store_false", help="no server-side buckets")
    parser.add_argument(
        "--warm", action="store_true", help="render every item before listening (the first resync is cached)"
    )
    parser.add_argument(
        "--no-cache", dest="cache", action="store_false", help="render every item every time (less memory)"
    )
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace, out: IO[str] = sys.stdout) -> None:
    """Build the cloud, serve it, say so on ``out``, and run until SIGINT or SIGTERM."""
    started = time.perf_counter()
    cloud, held = make_cloud(args)
    frontend = Ec2Frontend(cloud, region=args.region, cache=args.cache)
    warmed = frontend.warm(render=args.warm)
    if args.warm:
        held += f"; rendered in {warmed:.1f} s"
    server = Ec2Server(frontend, host=args.host, port=args.port)
    url = await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"{READY}{url} ({held}; ready in {time.perf_counter() - started:.1f} s)", file=out, flush=True)
    try:
        await stop.wait()
    finally:
        await server.close()


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(serve(parse_args(argv)))


class ServerProcess:
    """An :class:`Ec2Server` in a child process (:func:`spawn`); a context manager that stops it."""

    def __init__(self, process: subprocess.Popen[str], url: str, banner: str) -> None:
        self.process = process
        self.url = url
        self.banner = banner

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn(
    args: Sequence[str] = (), *, timeout: float = 300.0, env: dict[str, str] | None = None
) -> ServerProcess:
    """Start ``python -m eni_ipam_testkit.ec2_wire.server *args`` and wait until it listens.

    Raises:
        RuntimeError: the process exited, or printed nothing ready within ``timeout`` seconds.
    """
    command = [sys.executable, "-m", "eni_ipam_testkit.ec2_wire.server", *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    assert process.stdout is not None
    deadline = time.perf_counter() + timeout
    with contextlib.ExitStack() as undo:
        undo.callback(process.kill)
        while (left := deadline - time.perf_counter()) > 0:
            # The child prints one line when ready; select bounds the wait for it.
            if not select.select([process.stdout], [], [], left)[0]:
                break
            line = process.stdout.readline()
            if not line:
                raise RuntimeError(f"the EC2 front end exited with {process.wait()} before listening")
            if line.startswith(READY):
                undo.pop_all()
                return ServerProcess(process, line[len(READY) :].split()[0], line.strip())
    raise RuntimeError(f"the EC2 front end printed no {READY!r} line within {timeout} s")


if __name__ == "__main__":
    main()
