"""The pool registry: PoolIDs survive restarts, a write that fails keeps nothing, and a lost or corrupt
registry is rebuilt from the allocations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eni_ipam.agent.libnetwork import registry
from tests.agent.libnetwork import GLOBAL, LOCAL, Node


async def test_a_pool_whose_registry_cannot_be_written_is_refused_and_not_kept(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(path: Path, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(registry, "write_atomically", disk_full)
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
