"""Tests of the node side. :class:`FakeClock` drives the allocator's expiration timers by hand;
:func:`unix_server` serves an aiohttp app on a unix socket, as the agent does; :func:`fake_docker`
is Docker's API on one; :func:`built_plugin` is the CNI plugin as it is installed."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import datetime
import functools
import heapq
import itertools
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from eni_ipam.agent.state import StateFile

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def built_plugin() -> Path:
    """``eni-ipam-cni`` as it is installed (scripts/build_cni_plugin.py), for this interpreter; built
    once per test run into a directory of its own (what a runtime's CNI_PATH names)."""
    directory = tempfile.mkdtemp(prefix="eni-ipam-cni-")
    atexit.register(shutil.rmtree, directory, True)
    plugin = Path(directory) / "eni-ipam-cni"
    script = ROOT / "scripts" / "build_cni_plugin.py"
    command = [sys.executable, str(script), "--output", str(plugin), "--interpreter", sys.executable]
    subprocess.run(command, check=True, capture_output=True, timeout=60)
    return plugin


@contextlib.asynccontextmanager
async def unix_server(app: web.Application, *, prefix: str = "eni-agent-") -> AsyncIterator[str]:
    """Serve ``app`` on a fresh unix socket for the block; yields the socket's path."""
    with tempfile.TemporaryDirectory(prefix=prefix) as directory:
        path = str(Path(directory) / "agent.sock")
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.UnixSite(runner, path).start()
            yield path
        finally:
            await runner.cleanup()


@contextlib.asynccontextmanager
async def fake_docker(
    networks: Callable[[], list[dict[str, Any]]], socket: str | None = None
) -> AsyncIterator[str]:
    """Docker's API on a unix socket (``socket``, else a fresh one): ``GET /networks`` and
    ``GET /networks/{id}``, from what ``networks()`` returns at each request."""

    async def listing(_: web.Request) -> web.Response:
        return web.json_response([{k: v for k, v in n.items() if k != "Containers"} for n in networks()])

    async def inspect(request: web.Request) -> web.Response:
        found = [n for n in networks() if n["Id"] == request.match_info["id"]]
        return (
            web.json_response(found[0])
            if found
            else web.json_response({"message": "no such network"}, status=404)
        )

    app = web.Application()
    app.router.add_get("/networks", listing)
    app.router.add_get("/networks/{id}", inspect)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    with tempfile.TemporaryDirectory(prefix="eni-dock-", dir="/tmp") as directory:
        path = socket or f"{directory}/docker.sock"
        await web.UnixSite(runner, path).start()
        try:
            yield path
        finally:
            await runner.cleanup()


def docker_network(
    subnet: str,
    containers: dict[str, str],
    driver: str = "eni-ipam",
    *,
    gateway: str = "10.99.0.1",
    auxiliary: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A network as ``GET /networks/{id}`` shows it: ``containers`` maps an endpoint to its address."""
    config: dict[str, Any] = {"Subnet": subnet, "Gateway": gateway}
    if auxiliary:
        config["AuxiliaryAddresses"] = auxiliary
    return {
        "Id": "net-" + subnet.replace("/", "-"),
        "Name": "net-" + subnet,
        "IPAM": {"Driver": driver, "Config": [config]},
        "Containers": {
            cid: {"IPv4Address": f"{address}/{subnet.split('/')[1]}", "IPv6Address": ""}
            for cid, address in containers.items()
        },
    }


def agent_paths(tmp_path: Path) -> dict[str, object]:
    """The keys of an agent configuration that place it under ``tmp_path``: its socket, state, libcni
    cache, and its endpoint on a free loopback port."""
    return {
        "socket": str(tmp_path / "run" / "agent.sock"),
        "state_dir": str(tmp_path / "state"),
        "cni_cache_dir": str(tmp_path / "cni-cache"),
        "server": {"host": "127.0.0.1", "port": 0, "probe_port": 0},
    }


@dataclasses.dataclass(eq=False)
class FakeHandle:
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock that moves only when told (:meth:`advance`), firing due callbacks in time order."""

    def __init__(self, start: float = 10_000.0) -> None:
        self.now = start
        self._queue: list[tuple[float, int, FakeHandle]] = []
        self._seq = itertools.count()

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeHandle:
        handle = FakeHandle(callback)
        heapq.heappush(self._queue, (self.now + max(delay, 0.0), next(self._seq), handle))
        return handle

    def now_utc(self) -> datetime.datetime:
        return datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=self.now)

    def advance(self, seconds: float) -> None:
        until = self.now + seconds
        while self._queue and self._queue[0][0] <= until:
            when, _, handle = heapq.heappop(self._queue)
            self.now = when
            if not handle.cancelled:
                handle.callback()
        self.now = until

    def pending(self) -> int:
        """Callbacks still due (not cancelled)."""
        return sum(1 for _, _, handle in self._queue if not handle.cancelled)

    def kill(self) -> None:
        """Drop every pending callback: what a process that dies takes with it."""
        self._queue.clear()


class FullDisk(StateFile):
    """A state file whose saves fail, as on a full disk, while ``full`` is set."""

    full = False

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.full:
            raise OSError(28, "No space left on device")
        super().save(*args, **kwargs)
