"""The libnetwork remote IPAM driver over a real unix socket, against the real Allocator and state files."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from eni_ipam.agent import libnetwork
from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.libnetwork import (
    CONTENT_TYPE,
    GATEWAY,
    GLOBAL_ADDRESS_SPACE,
    LOCAL_ADDRESS_SPACE,
    REQUEST_ADDRESS_TYPE,
    SERIAL,
    LibnetworkDriver,
    add_routes,
)
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

    def __init__(self, directory: Path, default: list[PoolAddress]) -> None:
        self.directory = directory
        self.default = default
        self.socket = str(directory / "agent.sock")
        self.registry = directory / "libnetwork.json"
        self.allocator: Allocator
        self.driver: LibnetworkDriver
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        # The daemon's order: pools from configuration, the driver, then the allocator's restore.
        self.allocator = Allocator(
            clock=LoopClock(), ipv4=True, ipv6=True, state=StateFile(self.directory / "allocations.json")
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


async def _node(default: Iterable[PoolAddress]) -> AsyncIterator[Node]:
    # A short directory: a unix socket's path is limited to 107 bytes.
    directory = Path(tempfile.mkdtemp(prefix="eni-lnw-", dir="/tmp"))
    node = Node(directory, list(default))
    await node.start()
    try:
        yield node
    finally:
        await node.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def node() -> AsyncIterator[Node]:
    async for n in _node(DEFAULT_V4 + DEFAULT_V6):
        yield n


@pytest.fixture
async def two_subnet_node() -> AsyncIterator[Node]:
    small = [PoolAddress(address=f"10.0.0.{i}", prefix_length=24, gateway="10.0.0.1") for i in (10, 11)]
    large = [PoolAddress(address=f"10.0.1.{i}", prefix_length=24, gateway="10.0.1.1") for i in range(10, 15)]
    async for n in _node(small + large):
        yield n


# -- handshake -------------------------------------------------------------------------------------


async def test_activate_capabilities_and_address_spaces_answer_as_an_ipam_plugin(node: Node) -> None:
    assert await node.ok("Plugin.Activate") == {"Implements": ["IpamDriver"]}
    status, reply = await node.call("Plugin.Activate", raw=b"")
    assert (status, reply) == (200, {"Implements": ["IpamDriver"]})
    assert await node.ok("IpamDriver.GetCapabilities") == {
        "RequiresMACAddress": False,
        "RequiresRequestReplay": False,
    }
    assert await node.ok("IpamDriver.GetDefaultAddressSpaces") == {
        "LocalDefaultAddressSpace": "eni-ipam-local",
        "GlobalDefaultAddressSpace": "eni-ipam-global",
    }


# -- RequestPool ----------------------------------------------------------------------------------


async def test_pool_without_cidr_is_the_default_subnet_with_its_router_as_gateway(node: Node) -> None:
    reply = await node.pool()
    assert reply["Pool"] == "10.0.0.0/24"
    assert reply["Data"] == {GATEWAY: "10.0.0.1/24"}
    pool_id = reply["PoolID"]
    assert isinstance(pool_id, str) and pool_id
    assert await node.address(pool_id) == "10.0.0.10/24"
    assert await node.address(pool_id) == "10.0.0.11/24"
    assert node.owners() == {"10.0.0.10": f"libnetwork:{pool_id}", "10.0.0.11": f"libnetwork:{pool_id}"}


async def test_pool_without_cidr_picks_the_default_subnet_with_most_free_addresses(
    two_subnet_node: Node,
) -> None:
    node = two_subnet_node
    first = await node.pool()
    assert (first["Pool"], first["Data"]) == ("10.0.1.0/24", {GATEWAY: "10.0.1.1/24"})
    # Allocation stays inside the chosen subnet although 10.0.0.10 is the pool's lowest free address.
    assert await node.address(first["PoolID"]) == "10.0.1.10/24"
    second = await node.pool()
    assert second["Pool"] == "10.0.0.0/24"
    assert await node.address(second["PoolID"]) == "10.0.0.10/24"
    assert await node.address(second["PoolID"]) == "10.0.0.11/24"
    assert await node.refused("IpamDriver.RequestAddress", {"PoolID": second["PoolID"]}) == (
        503,
        "no available addresses on this pool",
    )
    assert await node.refused("IpamDriver.RequestPool", {"AddressSpace": LOCAL}) == (
        403,
        "Pool overlaps with other one on this address space",
    )
    assert (await node.pool(space=GLOBAL))["Pool"] == "10.0.1.0/24"


async def test_v6_pool_is_the_default_ipv6_subnet_and_hands_out_ipv6_addresses(node: Node) -> None:
    reply = await node.pool(V6=True)
    assert reply["Pool"] == "2600:1f18::/64"
    assert reply["Data"] == {GATEWAY: "2600:1f18::1/64"}
    assert await node.address(reply["PoolID"]) == "2600:1f18::10/64"
    assert await node.address(reply["PoolID"], "2600:1f18::13") == "2600:1f18::13/64"
    status, err = await node.refused(
        "IpamDriver.RequestAddress", {"PoolID": reply["PoolID"], "Address": "10.0.0.12"}
    )
    assert (status, err) == (400, "requested address is out of range")


async def test_v6_pool_without_ipv6_members_has_no_available_addresses() -> None:
    async for node in _node(DEFAULT_V4):
        assert await node.refused("IpamDriver.RequestPool", {"AddressSpace": LOCAL, "V6": True}) == (
            503,
            "no available addresses on this pool",
        )
        assert node.driver.pools() == []


async def test_pool_with_a_configured_cidr_uses_that_named_pool(node: Node) -> None:
    reply = await node.pool("10.99.0.0/24")
    assert (reply["Pool"], reply["Data"]) == ("10.99.0.0/24", {GATEWAY: "10.99.0.1/24"})
    assert await node.address(reply["PoolID"]) == "10.99.0.10/24"
    [allocation] = node.allocator.allocations()
    assert (allocation.pool, allocation.owner) == ("static", f"libnetwork:{reply['PoolID']}")


@pytest.mark.parametrize(
    ("body", "status", "err"),
    [
        ({"AddressSpace": "elsewhere"}, 400, "invalid address space"),
        ({"AddressSpace": ""}, 400, "invalid address space"),
        ({"AddressSpace": LOCAL, "Pool": "10.0.0.0/33"}, 400, "invalid address pool"),
        ({"AddressSpace": LOCAL, "Pool": "pool-a"}, 400, "invalid address pool"),
        (
            {"AddressSpace": LOCAL, "Pool": "10.7.0.0/24"},
            400,
            "address space does not contain specified address pool",
        ),
        (
            {"AddressSpace": LOCAL, "Pool": "10.0.0.0/16"},
            400,
            "address space does not contain specified address pool",
        ),
        ({"AddressSpace": LOCAL, "SubPool": "10.0.0.0/28"}, 400, "invalid address subpool"),
        (
            {"AddressSpace": LOCAL, "Pool": "10.0.0.0/24", "SubPool": "10.0.1.0/28"},
            400,
            "invalid address subpool",
        ),
        (
            {"AddressSpace": LOCAL, "Pool": "10.0.0.0/24", "SubPool": "10.0.0.0/23"},
            400,
            "invalid address subpool",
        ),
        (
            {"AddressSpace": LOCAL, "Pool": "10.0.0.0/24", "SubPool": "2600:1f18::/96"},
            400,
            "invalid address subpool",
        ),
        ({"AddressSpace": LOCAL, "Pool": "10.0.0.0/24", "SubPool": "x"}, 400, "invalid address subpool"),
    ],
)
async def test_pool_requests_are_refused_with_libnetworks_messages(
    node: Node, body: dict[str, Any], status: int, err: str
) -> None:
    assert await node.refused("IpamDriver.RequestPool", body) == (status, err)
    assert node.driver.pools() == []
    assert not node.registry.exists()


async def test_overlapping_pools_are_refused_within_an_address_space_only(node: Node) -> None:
    overlap = (403, "Pool overlaps with other one on this address space")
    await node.pool("10.0.0.0/24")
    assert (
        await node.refused("IpamDriver.RequestPool", {"AddressSpace": LOCAL, "Pool": "10.0.0.0/24"})
        == overlap
    )
    assert await node.refused("IpamDriver.RequestPool", {"AddressSpace": LOCAL}) == overlap
    assert (await node.pool("10.0.0.0/24", space=GLOBAL))["Pool"] == "10.0.0.0/24"
    # Disjoint SubPools of one Pool coexist; a range overlapping one of them does not.
    await node.pool("10.99.0.0/24", SubPool="10.99.0.0/28")
    await node.pool("10.99.0.0/24", SubPool="10.99.0.16/28")
    assert (
        await node.refused(
            "IpamDriver.RequestPool",
            {"AddressSpace": LOCAL, "Pool": "10.99.0.0/24", "SubPool": "10.99.0.8/29"},
        )
        == overlap
    )
    assert (
        await node.refused("IpamDriver.RequestPool", {"AddressSpace": LOCAL, "Pool": "10.99.0.0/24"})
        == overlap
    )
    assert len(node.driver.pools()) == 4


# -- RequestAddress -------------------------------------------------------------------------------


async def test_subpool_restricts_dynamic_allocation_but_not_preferred_addresses(node: Node) -> None:
    pool_id = (await node.pool("10.99.0.0/24", SubPool="10.99.0.16/30"))["PoolID"]
    assert [await node.address(pool_id) for _ in range(4)] == [f"10.99.0.{i}/24" for i in (16, 17, 18, 19)]
    assert await node.refused("IpamDriver.RequestAddress", {"PoolID": pool_id}) == (
        503,
        "no available addresses on this pool",
    )
    assert await node.address(pool_id, "10.99.0.12") == "10.99.0.12/24"
    assert "10.99.0.10" not in node.owners()


async def test_preferred_address_must_be_a_free_member_of_the_pool(node: Node) -> None:
    pool_id = (await node.pool())["PoolID"]
    in_use, out_of_range = (403, "Address already in use"), (400, "requested address is out of range")
    assert await node.address(pool_id, "10.0.0.12") == "10.0.0.12/24"
    request = {"PoolID": pool_id, "Address": "10.0.0.12"}
    assert await node.refused("IpamDriver.RequestAddress", request) == in_use
    node.allocator.allocate("10.0.0.13", "cni:c1:eth0")
    assert await node.refused("IpamDriver.RequestAddress", {**request, "Address": "10.0.0.13"}) == in_use
    node.allocator.exclude("10.0.0.14", "operator")
    for address in ("10.0.0.14", "10.0.0.200", "10.5.0.1", "2600:1f18::10"):
        assert (
            await node.refused("IpamDriver.RequestAddress", {**request, "Address": address}) == out_of_range
        )
    assert node.owners() == {"10.0.0.12": f"libnetwork:{pool_id}", "10.0.0.13": "cni:c1:eth0"}


async def test_an_exhausted_pool_answers_no_available_addresses(node: Node) -> None:
    pool_id = (await node.pool())["PoolID"]
    handed = [await node.address(pool_id) for _ in DEFAULT_V4]
    assert handed == [f"10.0.0.{i}/24" for i in range(10, 20)]
    assert await node.refused("IpamDriver.RequestAddress", {"PoolID": pool_id}) == (
        503,
        "no available addresses on this pool",
    )


async def test_serial_allocation_continues_after_the_last_address_instead_of_reusing_the_lowest(
    node: Node,
) -> None:
    pool_id = (await node.pool())["PoolID"]
    serial = {SERIAL: "true"}
    assert [await node.address(pool_id) for _ in range(3)] == ["10.0.0.10/24", "10.0.0.11/24", "10.0.0.12/24"]
    await node.release(pool_id, "10.0.0.10")
    assert await node.address(pool_id, options=serial) == "10.0.0.13/24"
    assert await node.address(pool_id) == "10.0.0.10/24"
    # A pool created serial (``--ipam-opt``) is serial for every request.
    global_id = (await node.pool(space=GLOBAL, Options=serial))["PoolID"]
    assert await node.address(global_id) == "10.0.0.14/24"
    await node.release(pool_id, "10.0.0.10")
    assert await node.address(global_id) == "10.0.0.15/24"


async def test_serial_allocation_in_a_subpool_walks_from_its_own_cursor(node: Node) -> None:
    pool_id = (await node.pool("10.99.0.0/24", SubPool="10.99.0.16/29"))["PoolID"]
    serial = {SERIAL: "true"}
    assert [await node.address(pool_id, options=serial) for _ in range(2)] == [
        "10.99.0.16/24",
        "10.99.0.17/24",
    ]
    await node.release(pool_id, "10.99.0.16")
    assert await node.address(pool_id, options=serial) == "10.99.0.18/24"
    assert await node.address(pool_id) == "10.99.0.16/24"


async def test_gateway_request_answers_the_router_without_allocating_it(node: Node) -> None:
    pool_id = (await node.pool())["PoolID"]
    gateway = {REQUEST_ADDRESS_TYPE: GATEWAY}
    assert await node.address(pool_id, options=gateway) == "10.0.0.1/24"
    assert await node.address(pool_id, "10.0.0.1", options=gateway) == "10.0.0.1/24"
    status, err = await node.refused(
        "IpamDriver.RequestAddress", {"PoolID": pool_id, "Address": "10.0.0.5", "Options": gateway}
    )
    assert status == 400 and "10.0.0.1" in err and "10.0.0.5" in err
    assert node.owners() == {}
    await node.release(pool_id, "10.0.0.1")  # libnetwork releases the gateway when the network goes
    assert node.owners() == {}


# -- releases -------------------------------------------------------------------------------------


async def test_releasing_an_address_twice_is_refused_naming_the_address(node: Node) -> None:
    pool_id = (await node.pool())["PoolID"]
    await node.address(pool_id)
    await node.release(pool_id, "10.0.0.10")
    assert node.owners() == {}
    body = {"PoolID": pool_id, "Address": "10.0.0.10"}
    assert await node.refused("IpamDriver.ReleaseAddress", body) == (
        400,
        f"ip address 10.0.0.10 not allocated on pool {pool_id}",
    )
    assert await node.refused("IpamDriver.ReleaseAddress", {**body, "Address": "10.9.0.1"}) == (
        400,
        "requested address is out of range",
    )


async def test_an_address_of_another_pool_or_owner_is_not_released(node: Node) -> None:
    local = (await node.pool())["PoolID"]
    other = (await node.pool(space=GLOBAL))["PoolID"]
    await node.address(local, "10.0.0.15")
    node.allocator.allocate("10.0.0.16", "cni:c1:eth0")
    for address in ("10.0.0.15", "10.0.0.16"):
        assert await node.refused("IpamDriver.ReleaseAddress", {"PoolID": other, "Address": address}) == (
            400,
            f"ip address {address} not allocated on pool {other}",
        )
    assert node.owners() == {"10.0.0.15": f"libnetwork:{local}", "10.0.0.16": "cni:c1:eth0"}


async def test_releasing_a_pool_releases_its_remaining_addresses_and_forgets_its_id(node: Node) -> None:
    pool_id = (await node.pool())["PoolID"]
    await node.address(pool_id)
    await node.address(pool_id, "10.0.0.17")
    node.allocator.allocate("10.0.0.18", "cni:c1:eth0")
    assert await node.ok("IpamDriver.ReleasePool", {"PoolID": pool_id}) == {}
    assert node.owners() == {"10.0.0.18": "cni:c1:eth0"}
    assert await node.refused("IpamDriver.RequestAddress", {"PoolID": pool_id}) == (
        400,
        f"unknown PoolID {pool_id!r}",
    )
    assert await node.refused("IpamDriver.ReleasePool", {"PoolID": pool_id}) == (
        400,
        f"unknown PoolID {pool_id!r}",
    )
    again = await node.pool()
    assert again["Pool"] == "10.0.0.0/24" and again["PoolID"] != pool_id


# -- malformed requests ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "raw", "names"),
    [
        ("IpamDriver.RequestPool", b"{not json", "malformed JSON"),
        ("IpamDriver.RequestPool", b"", "JSON object"),
        ("IpamDriver.RequestPool", b"null", "JSON object"),
        ("IpamDriver.RequestPool", b"[]", "JSON object"),
        ("IpamDriver.RequestPool", b'"eni-ipam-local"', "JSON object"),
        ("IpamDriver.RequestPool", b'{"AddressSpace": 5}', "AddressSpace"),
        ("IpamDriver.RequestPool", b'{"AddressSpace": "eni-ipam-local", "V6": "yes"}', "V6"),
        ("IpamDriver.RequestPool", b'{"AddressSpace": "eni-ipam-local", "Options": {"a": 1}}', "Options"),
        ("IpamDriver.RequestPool", b'{"AddressSpace": "eni-ipam-local", "Pool": ["10.0.0.0/24"]}', "Pool"),
        ("IpamDriver.RequestAddress", b"{}", "PoolID"),
        ("IpamDriver.RequestAddress", b'{"PoolID": 7}', "PoolID"),
        ("IpamDriver.RequestAddress", b'{"PoolID": "no-such-pool"}', "no-such-pool"),
        ("IpamDriver.RequestAddress", b'{"PoolID": "@", "Address": "10.0.0.300"}', "10.0.0.300"),
        ("IpamDriver.RequestAddress", b'{"PoolID": "@", "Address": "10.0.0.12/24"}', "Address"),
        ("IpamDriver.RequestAddress", b'{"PoolID": "@", "Options": "serial"}', "Options"),
        ("IpamDriver.ReleaseAddress", b'{"PoolID": "@"}', "Address"),
        ("IpamDriver.ReleaseAddress", b'{"PoolID": "@", "Address": "ten"}', "ten"),
        ("IpamDriver.ReleaseAddress", b'{"PoolID": "no-such-pool", "Address": "10.0.0.10"}', "no-such-pool"),
        ("IpamDriver.ReleasePool", b'{"PoolID": "no-such-pool"}', "no-such-pool"),
        ("IpamDriver.ReleasePool", b"{\x00}", "malformed JSON"),
    ],
)
async def test_malformed_requests_are_refused_with_400_naming_the_problem_and_change_nothing(
    node: Node, method: str, raw: bytes, names: str
) -> None:
    pool_id = (await node.pool())["PoolID"]
    await node.address(pool_id, "10.0.0.10")
    registry, owners = node.registry.read_bytes(), node.owners()
    status, reply = await node.call(method, raw=raw.replace(b'"@"', json.dumps(pool_id).encode()))
    assert status == 400
    assert set(reply) == {"Err"} and names in reply["Err"]
    assert node.owners() == owners
    assert node.registry.read_bytes() == registry
    assert [p.pool_id for p in node.driver.pools()] == [pool_id]


async def test_a_pool_whose_registry_cannot_be_written_is_refused_and_not_kept(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(path: Path, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(libnetwork, "write_atomically", disk_full)
    status, err = await node.refused("IpamDriver.RequestPool", {"AddressSpace": LOCAL})
    assert status == 500 and "registry" in err and "No space left" in err
    assert node.driver.pools() == []
    monkeypatch.undo()
    assert (await node.pool())["Pool"] == "10.0.0.0/24"


# -- restarts -------------------------------------------------------------------------------------


async def test_pool_ids_stay_valid_across_a_restart_of_driver_and_allocator(node: Node) -> None:
    default = (await node.pool())["PoolID"]
    static = (await node.pool("10.99.0.0/24", space=GLOBAL, SubPool="10.99.0.16/30"))["PoolID"]
    await node.address(default, "10.0.0.10")
    await node.address(static)
    await node.restart()
    assert {p.pool_id for p in node.driver.pools()} == {default, static}
    assert node.owners() == {"10.0.0.10": f"libnetwork:{default}", "10.99.0.16": f"libnetwork:{static}"}
    assert await node.address(default) == "10.0.0.11/24"
    assert await node.address(static) == "10.99.0.17/24"
    await node.release(default, "10.0.0.10")
    assert await node.refused("IpamDriver.RequestPool", {"AddressSpace": LOCAL}) == (
        403,
        "Pool overlaps with other one on this address space",
    )
    await node.ok("IpamDriver.ReleasePool", {"PoolID": static})
    await node.restart()
    assert [p.pool_id for p in node.driver.pools()] == [default]
    assert node.owners() == {"10.0.0.11": f"libnetwork:{default}"}


async def test_a_corrupt_registry_is_moved_aside_and_its_pools_adopted_from_the_allocations(
    node: Node,
) -> None:
    pool_id = (await node.pool())["PoolID"]
    await node.address(pool_id, "10.0.0.12")
    await node.stop()
    node.registry.write_text(node.registry.read_text()[:-20])
    await node.start()
    aside = node.registry.with_name("libnetwork.json.corrupt-1")
    assert aside.exists()
    assert await node.address(pool_id) == "10.0.0.10/24"
    [adopted] = node.driver.pools()
    assert (adopted.pool_id, adopted.pool, adopted.adopted) == (pool_id, "10.0.0.0/24", True)
    await node.release(pool_id, "10.0.0.12")
    await node.ok("IpamDriver.ReleasePool", {"PoolID": pool_id})
    assert node.owners() == {}
    assert json.loads(node.registry.read_text())["pools"] == []


async def test_a_lost_registry_is_rebuilt_from_allocations_restored_after_the_driver_was_built(
    node: Node,
) -> None:
    pool_id = (await node.pool())["PoolID"]
    await node.address(pool_id, "10.0.0.12")
    await node.stop()
    node.registry.unlink()
    await node.start()  # the allocator restores after the driver is built: adoption happens on use
    await node.release(pool_id, "10.0.0.12")
    assert node.owners() == {}
    assert [p.pool_id for p in node.driver.pools()] == [pool_id]
    assert json.loads(node.registry.read_text())["pools"][0]["pool_id"] == pool_id
