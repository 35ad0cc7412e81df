"""libnetwork's IPAM semantics over the real Allocator: pools, addresses, gateways and releases."""

from __future__ import annotations

from typing import Any

import pytest

from eni_ipam.agent.libnetwork.protocol import GATEWAY, REQUEST_ADDRESS_TYPE, SERIAL
from tests.agent.libnetwork import DEFAULT_V4, GLOBAL, LOCAL, Node, started_node

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
    async for node in started_node(DEFAULT_V4):
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


async def test_serial_allocation_goes_on_after_a_restart_of_the_agent(node: Node) -> None:
    """The position is saved: after a restart the address just released is not handed out at once."""
    pool_id = (await node.pool())["PoolID"]
    sub_id = (await node.pool("10.99.0.0/24", SubPool="10.99.0.16/29"))["PoolID"]
    serial = {SERIAL: "true"}
    for pid, first in ((pool_id, "10.0.0.10/24"), (sub_id, "10.99.0.16/24")):
        assert await node.address(pid, options=serial) == first
        await node.release(pid, first.split("/")[0])
    await node.restart()
    assert await node.address(pool_id, options=serial) == "10.0.0.11/24"
    assert await node.address(sub_id, options=serial) == "10.99.0.17/24"


async def test_an_ipv6_network_is_refused_at_request_pool_when_the_agent_has_ipv6_off() -> None:
    """Refused before Docker takes the network's IPv4 addresses, which a failure at the first IPv6
    RequestAddress would leave behind."""
    async for node in started_node(DEFAULT_V4, ipv6=False):
        for body in ({"V6": True}, {"Pool": "2600:1f18::/64"}):
            status, err = await node.refused("IpamDriver.RequestPool", {"AddressSpace": LOCAL, **body})
            assert status == 503 and "IPv6 is disabled on this node" in err, body
        assert node.driver.pools() == [] and node.owners() == {}


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
    assert (status, err) == (
        400,
        "the gateway of pool 10.0.0.0/24 is its subnet's router 10.0.0.1; 10.0.0.5 cannot be the gateway",
    )
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
