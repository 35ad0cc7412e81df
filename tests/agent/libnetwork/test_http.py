"""The plugin protocol over the socket: activation, capabilities, and malformed requests refused."""

from __future__ import annotations

import json

import pytest

from tests.agent.libnetwork import Node

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
