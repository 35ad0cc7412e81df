"""The libnetwork driver's tests: an agent's allocator and driver served on a real unix socket, with
their state files, called as Docker calls them (:class:`Node`)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.libnetwork.driver import LibnetworkDriver
from eni_ipam.agent.libnetwork.http import CONTENT_TYPE, add_routes
from eni_ipam.agent.libnetwork.protocol import GLOBAL_ADDRESS_SPACE, LOCAL_ADDRESS_SPACE
from eni_ipam.agent.state import StateFile
from eni_ipam.agent.types import DEFAULT_POOL, PoolAddress
from eni_ipam.core.clock import LoopClock

LOCAL, GLOBAL = LOCAL_ADDRESS_SPACE, GLOBAL_ADDRESS_SPACE
DEFAULT_V4 = [PoolAddress(address=f"10.0.0.{i}", prefix_length=24, gateway="10.0.0.1") for i in range(10, 20)]
DEFAULT_V6 = [
    PoolAddress(address=f"2600:1f18::{i:x}", prefix_length=64, gateway="2600:1f18::1") for i in range(16, 20)
]
STATIC = [PoolAddress(address=f"10.99.0.{i}", prefix_length=24, gateway="10.99.0.1") for i in range(10, 21)]


class Node:
    """An agent's allocator + driver served on a unix socket; :meth:`restart` rebuilds both from the files."""

    def __init__(self, directory: Path, default: list[PoolAddress], *, ipv6: bool = True) -> None:
        self.directory = directory
        self.default = default
        self.ipv6 = ipv6
        self.socket = str(directory / "agent.sock")
        self.registry = directory / "libnetwork.json"
        self.allocator: Allocator
        self.driver: LibnetworkDriver
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        # The daemon's order: pools from configuration, the driver, then the allocator's restore.
        self.allocator = Allocator(
            clock=LoopClock(), ipv4=True, ipv6=self.ipv6, state=StateFile(self.directory / "allocations.json")
        )
        self.allocator.set_pool("static", STATIC)
        self.driver = LibnetworkDriver(self.allocator, state_path=self.registry)
        self.allocator.set_pool(DEFAULT_POOL, self.default)
        self.allocator.restore()
        app = web.Application()
        add_routes(app, self.driver)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.UnixSite(self._runner, self.socket).start()
        self._session = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=self.socket))

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()
        self._session = self._runner = None

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def call(self, method: str, body: Any = None, *, raw: bytes | None = None) -> tuple[int, Any]:
        assert self._session is not None
        data = raw if raw is not None else json.dumps(body).encode()
        async with self._session.post(
            f"http://eni-ipam/{method}", data=data, headers={"Content-Type": CONTENT_TYPE}
        ) as response:
            assert response.content_type == CONTENT_TYPE
            return response.status, await response.json(content_type=None)

    async def ok(self, method: str, body: Any = None) -> Any:
        status, reply = await self.call(method, body)
        assert status == 200, reply
        assert "Err" not in reply
        return reply

    async def refused(self, method: str, body: Any = None) -> tuple[int, str]:
        status, reply = await self.call(method, body)
        assert status != 200, reply
        assert set(reply) == {"Err"} and reply["Err"]
        return status, reply["Err"]

    async def pool(self, pool: str = "", space: str = LOCAL, **extra: Any) -> dict[str, Any]:
        reply: dict[str, Any] = await self.ok(
            "IpamDriver.RequestPool",
            {"AddressSpace": space, "Pool": pool, "SubPool": "", "V6": False, **extra},
        )
        return reply

    async def address(self, pool_id: str, address: str = "", options: dict[str, str] | None = None) -> str:
        reply = await self.ok(
            "IpamDriver.RequestAddress", {"PoolID": pool_id, "Address": address, "Options": options or {}}
        )
        assert reply["Data"] == {}
        result: str = reply["Address"]
        return result

    async def release(self, pool_id: str, address: str) -> None:
        await self.ok("IpamDriver.ReleaseAddress", {"PoolID": pool_id, "Address": address})

    def owners(self) -> dict[str, str]:
        return {a.address: a.owner for a in self.allocator.allocations()}


async def started_node(default: Iterable[PoolAddress], *, ipv6: bool = True) -> AsyncIterator[Node]:
    # A short directory: a unix socket's path is limited to 107 bytes.
    directory = Path(tempfile.mkdtemp(prefix="eni-lnw-", dir="/tmp"))
    node = Node(directory, list(default), ipv6=ipv6)
    await node.start()
    try:
        yield node
    finally:
        await node.stop()
        shutil.rmtree(directory, ignore_errors=True)
