"""The agent's JSON API for the CNI plugin, against the real Allocator."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from eni_ipam.agent import api, cni
from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.types import PoolAddress
from eni_ipam.core.clock import LoopClock

V4 = [PoolAddress(address=f"10.99.0.{i}", prefix_length=24, gateway="10.99.0.1") for i in range(10, 21)]
V6 = [PoolAddress(address=f"fd00:99::{i:x}", prefix_length=64, gateway="fd00:99::1") for i in range(16, 20)]


def make_allocator(*, ipv6: bool = False, pool: list[PoolAddress] | None = None) -> Allocator:
    allocator = Allocator(clock=LoopClock(), ipv4=True, ipv6=ipv6)
    allocator.set_pool("default", pool if pool is not None else V4 + (V6 if ipv6 else []))
    return allocator


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Allocator], Any]]:
    clients: list[TestClient[web.Request, web.Application]] = []

    async def start(allocator: Allocator) -> TestClient[web.Request, web.Application]:
        app = web.Application()
        api.add_routes(app, allocator)
        client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.close()


async def post(client: TestClient[web.Request, web.Application], path: str, body: Any) -> tuple[int, Any]:
    response = await client.post(path, json=body)
    return response.status, await response.json()


def ident(container: str = "c1", ifname: str = "eth0", **extra: Any) -> dict[str, Any]:
    return {"containerID": container, "ifname": ifname, **extra}


async def test_add_hands_out_the_lowest_pool_address_with_its_prefix_and_gateway(serve: Any) -> None:
    allocator = make_allocator()
    client = await serve(allocator)
    status, body = await post(client, "/v1/cni/add", ident(netns="/var/run/netns/x"))
    assert status == 200
    assert body["owner"] == "cni:c1:eth0"
    assert body["existing"] is False
    assert body["ips"] == [
        {
            "address": "10.99.0.10",
            "prefixLength": 24,
            "gateway": "10.99.0.1",
            "family": "ipv4",
            "pool": "default",
            "interfaceID": "",
            "subnetID": "",
        }
    ]
    assert [(a.address, a.owner) for a in allocator.allocations()] == [("10.99.0.10", "cni:c1:eth0")]


async def test_add_again_for_the_same_container_and_ifname_returns_the_same_address(serve: Any) -> None:
    allocator = make_allocator()
    client = await serve(allocator)
    _, first = await post(client, "/v1/cni/add", ident())
    status, again = await post(client, "/v1/cni/add", ident())
    _, other_if = await post(client, "/v1/cni/add", ident(ifname="net1"))
    assert status == 200
    assert again["ips"] == first["ips"] and again["existing"] is True
    assert other_if["ips"][0]["address"] == "10.99.0.11"
    assert len(allocator.allocations()) == 2


async def test_del_releases_the_containers_addresses_and_unknown_del_succeeds(serve: Any) -> None:
    allocator = make_allocator()
    client = await serve(allocator)
    await post(client, "/v1/cni/add", ident())
    status, body = await post(client, "/v1/cni/del", ident())
    assert status == 200
    assert [ip["address"] for ip in body["released"]] == ["10.99.0.10"]
    assert allocator.allocations() == []
    status, body = await post(client, "/v1/cni/del", ident())
    assert (status, body["released"]) == (200, [])
    status, body = await post(client, "/v1/cni/del", ident(container="never-added"))
    assert (status, body["released"]) == (200, [])


async def test_dual_family_add_hands_out_one_address_of_each_family_ipv4_first(serve: Any) -> None:
    allocator = make_allocator(ipv6=True)
    client = await serve(allocator)
    status, body = await post(client, "/v1/cni/add", ident(family="dual"))
    assert status == 200
    assert [(ip["address"], ip["family"], ip["prefixLength"]) for ip in body["ips"]] == [
        ("10.99.0.10", "ipv4", 24),
        ("fd00:99::10", "ipv6", 64),
    ]
    status, only6 = await post(client, "/v1/cni/add", ident(container="c2", family="ipv6"))
    assert [ip["address"] for ip in only6["ips"]] == ["fd00:99::11"]
    status, _ = await post(client, "/v1/cni/check", ident(ips=["10.99.0.10", "FD00:99:0:0::10"]))
    assert status == 200  # addresses compare in canonical form


async def test_add_completes_a_missing_family_and_keeps_the_held_one(serve: Any) -> None:
    allocator = make_allocator(ipv6=True)
    client = await serve(allocator)
    await post(client, "/v1/cni/add", ident(family="ipv4"))
    status, body = await post(client, "/v1/cni/add", ident(family="dual"))
    assert status == 200 and body["existing"] is False
    assert [ip["address"] for ip in body["ips"]] == ["10.99.0.10", "fd00:99::10"]


async def test_check_succeeds_while_the_container_holds_the_listed_addresses(serve: Any) -> None:
    allocator = make_allocator()
    client = await serve(allocator)
    await post(client, "/v1/cni/add", ident())
    status, body = await post(client, "/v1/cni/check", ident(ips=["10.99.0.10"]))
    assert status == 200 and [ip["address"] for ip in body["ips"]] == ["10.99.0.10"]
    status, _ = await post(client, "/v1/cni/check", ident())
    assert status == 200


@pytest.mark.parametrize(
    ("ips", "status", "code"),
    [
        (["10.99.0.12"], 409, "address_mismatch"),  # the container's address is not in the previous result
        (["10.99.0.10", "10.99.0.11"], 409, "address_mismatch"),  # a listed address belongs to someone else
        (["10.99.0.10", "10.99.0.15"], 409, "address_mismatch"),  # a listed address is held by nobody
    ],
)
async def test_check_fails_when_the_previous_result_disagrees_with_the_allocator(
    serve: Any, ips: list[str], status: int, code: str
) -> None:
    allocator = make_allocator()
    client = await serve(allocator)
    await post(client, "/v1/cni/add", ident())
    await post(client, "/v1/cni/add", ident(container="c2"))
    got, body = await post(client, "/v1/cni/check", ident(ips=ips))
    assert (got, body["error"]["code"], body["error"]["field"]) == (status, code, "ips")


async def test_check_of_a_container_holding_nothing_is_not_allocated(serve: Any) -> None:
    client = await serve(make_allocator())
    status, body = await post(client, "/v1/cni/check", ident(ips=["10.99.0.10"]))
    assert (status, body["error"]["code"]) == (404, "not_allocated")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/cni/add", {"ifname": "eth0"}, "containerID"),
        ("/v1/cni/add", {"containerID": "", "ifname": "eth0"}, "containerID"),
        ("/v1/cni/add", {"containerID": "-bad", "ifname": "eth0"}, "containerID"),
        ("/v1/cni/add", {"containerID": 7, "ifname": "eth0"}, "containerID"),
        ("/v1/cni/add", {"containerID": "c1"}, "ifname"),
        ("/v1/cni/add", {"containerID": "c1", "ifname": "a/b"}, "ifname"),
        ("/v1/cni/add", {"containerID": "c1", "ifname": "x" * 16}, "ifname"),
        ("/v1/cni/add", {"containerID": "c1", "ifname": "eth0", "pool": ""}, "pool"),
        ("/v1/cni/add", {"containerID": "c1", "ifname": "eth0", "pool": 3}, "pool"),
        ("/v1/cni/add", {"containerID": "c1", "ifname": "eth0", "family": "ipv5"}, "family"),
        ("/v1/cni/add", {"containerID": "c1", "ifname": "eth0", "netns": 1}, "netns"),
        ("/v1/cni/add", ["not", "an", "object"], ""),
        ("/v1/cni/del", {"containerID": "c1"}, "ifname"),
        ("/v1/cni/check", {"containerID": "c1", "ifname": "eth0", "ips": "10.99.0.10"}, "ips"),
        ("/v1/cni/check", {"containerID": "c1", "ifname": "eth0", "ips": ["nope"]}, "ips[0]"),
    ],
)
async def test_bad_requests_are_400_naming_the_field_and_change_nothing(
    serve: Any, path: str, body: Any, field: str
) -> None:
    allocator = make_allocator()
    allocator.allocate("10.99.0.15", "cni:c1:eth0")
    before = allocator.allocations()
    client = await serve(allocator)
    status, answer = await post(client, path, body)
    assert status == 400
    assert answer["error"]["code"] == "bad_request"
    assert answer["error"]["field"] == field
    assert field in answer["error"]["msg"]
    assert allocator.allocations() == before


async def test_a_body_that_is_not_json_is_400(serve: Any) -> None:
    allocator = make_allocator()
    client = await serve(allocator)
    response = await client.post(
        "/v1/cni/add", data=b"{containerID", headers={"Content-Type": "application/json"}
    )
    body = await response.json()
    assert response.status == 400 and body["error"]["code"] == "bad_request"
    assert "not valid JSON" in body["error"]["msg"]
    assert allocator.allocations() == []


async def test_an_integer_too_long_to_read_is_400_naming_its_field(serve: Any) -> None:
    allocator = make_allocator()
    client = await serve(allocator)
    data = b'{"containerID": "c1", "ifname": "eth0", "ips": [1, ' + b"9" * 5000 + b"]}"
    response = await client.post("/v1/cni/add", data=data, headers={"Content-Type": "application/json"})
    body = await response.json()
    assert (response.status, body["error"]["field"]) == (400, "ips[1]")
    assert body["error"]["msg"] == "ips[1]: an integer of 5000 digits: no field takes one"
    assert allocator.allocations() == []


async def test_an_exhausted_pool_is_503_pool_exhausted(serve: Any) -> None:
    allocator = make_allocator(pool=V4[:1])
    client = await serve(allocator)
    await post(client, "/v1/cni/add", ident())
    status, body = await post(client, "/v1/cni/add", ident(container="c2"))
    assert (status, body["error"]["code"]) == (503, "pool_exhausted")
    assert [a.owner for a in allocator.allocations()] == ["cni:c1:eth0"]


async def test_an_unknown_pool_is_404_naming_the_pool_field(serve: Any) -> None:
    client = await serve(make_allocator())
    status, body = await post(client, "/v1/cni/add", ident(pool="gold"))
    assert (status, body["error"]["code"], body["error"]["field"]) == (404, "unknown_pool", "pool")


async def test_a_disabled_family_is_409_and_dual_on_a_single_family_node_leaves_nothing_allocated(
    serve: Any,
) -> None:
    allocator = make_allocator()
    client = await serve(allocator)
    status, body = await post(client, "/v1/cni/add", ident(family="ipv6"))
    assert (status, body["error"]["code"]) == (409, "family_disabled")
    status, body = await post(client, "/v1/cni/add", ident(family="dual"))
    assert (status, body["error"]["code"]) == (409, "family_disabled")
    assert "IPv6" in body["error"]["msg"]
    assert allocator.allocations() == []


async def test_add_to_another_pool_while_holding_addresses_is_an_owner_conflict(serve: Any) -> None:
    allocator = make_allocator()
    allocator.set_pool("gold", [PoolAddress(address="10.98.0.5", prefix_length=24, gateway="10.98.0.1")])
    client = await serve(allocator)
    await post(client, "/v1/cni/add", ident())
    status, body = await post(client, "/v1/cni/add", ident(pool="gold"))
    assert (status, body["error"]["code"], body["error"]["field"]) == (409, "owner_conflict", "pool")
    assert [a.pool for a in allocator.allocations()] == ["default"]


async def test_status_dumps_owners_pools_and_allocations(serve: Any) -> None:
    allocator = make_allocator()
    client = await serve(allocator)
    await post(client, "/v1/cni/add", ident())
    response = await client.get("/v1/status")
    body = await response.json()
    assert response.status == 200
    assert body["ipv4"] == {"10.99.0.10": "cni:c1:eth0"}
    assert body["ipv6"] == {}
    assert body["pools"]["default"]["capacity"] == 11
    assert body["pools"]["default"]["addresses"][0] == "10.99.0.10"
    assert body["allocations"][0]["owner"] == "cni:c1:eth0"
    assert isinstance(body["status"], str) and body["status"]


def test_every_error_code_of_the_api_has_a_cni_code_in_the_plugin() -> None:
    assert api.ERROR_CODES - {"bad_request"} <= set(cni.AGENT_ERROR_CODES)
    later = ("pool_exhausted", "pool_withheld", "not_ready", "state_unwritable")
    assert {cni.AGENT_ERROR_CODES[name] for name in later} == {cni.TRY_AGAIN_LATER}
    assert all(
        code >= 100 for name, code in cni.AGENT_ERROR_CODES.items() if name not in (*later, "not_allocated")
    )


# -- requested addresses -------------------------------------------------------------------------


async def test_a_requested_address_is_handed_out_exactly_and_again_on_a_repeated_add(serve: Any) -> None:
    allocator = make_allocator()
    client = await serve(allocator)
    status, body = await post(client, "/v1/cni/add", ident(ips=["10.99.0.15"]))
    assert status == 200 and [ip["address"] for ip in body["ips"]] == ["10.99.0.15"]
    status, again = await post(client, "/v1/cni/add", ident(ips=["10.99.0.15"]))
    assert status == 200 and again["existing"] is True and again["ips"] == body["ips"]


@pytest.mark.parametrize(
    ("held", "requested", "status", "code"),
    [
        ({}, ["10.50.0.1"], 409, "not_in_pool"),  # the pool does not offer it
        ({"10.99.0.12": "cni:other:eth0"}, ["10.99.0.12"], 409, "already_allocated"),
        ({"10.99.0.10": "cni:c1:eth0"}, ["10.99.0.11"], 409, "address_mismatch"),  # holds another
        ({}, ["10.99.0.11", "10.99.0.12"], 400, "bad_request"),  # two of one family
        ({}, ["not-an-address"], 400, "bad_request"),
    ],
)
async def test_a_requested_address_that_cannot_be_given_is_an_error_never_another_address(
    serve: Any, held: dict[str, str], requested: list[str], status: int, code: str
) -> None:
    allocator = make_allocator()
    for address, owner in held.items():
        allocator.allocate(address, owner)
    before = allocator.allocations()
    client = await serve(allocator)
    got, body = await post(client, "/v1/cni/add", ident(ips=requested))
    assert (got, body["error"]["code"]) == (status, code), body
    assert allocator.allocations() == before


async def test_a_requested_ipv6_address_on_a_node_without_ipv6_is_refused(serve: Any) -> None:
    allocator = make_allocator(pool=V4 + V6)
    client = await serve(allocator)
    status, body = await post(client, "/v1/cni/add", ident(ips=["fd00:99::10"]))
    assert (status, body["error"]["code"]) == (409, "family_disabled")
    assert allocator.allocations() == []


# -- what the runtime said of the container ------------------------------------------------------


async def test_add_records_the_network_namespace_and_pod_and_a_repeated_add_updates_them(serve: Any) -> None:
    allocator = make_allocator()
    client = await serve(allocator)
    pod = {"network": "podnet", "podUID": "u-1", "podNamespace": "ns", "podName": "web"}
    await post(client, "/v1/cni/add", ident(netns="/run/netns/a", **pod))
    [allocation] = allocator.allocations()
    assert (allocation.network, allocation.netns, allocation.pod_uid, allocation.pod) == (
        "podnet",
        "/run/netns/a",
        "u-1",
        "ns/web",
    )
    # The container restarted: a new namespace, the same owner, the same address.
    status, body = await post(client, "/v1/cni/add", ident(netns="/run/netns/b", **pod))
    assert status == 200 and body["existing"] is True
    assert [(a.address, a.netns) for a in allocator.allocations()] == [(allocation.address, "/run/netns/b")]


@pytest.mark.parametrize("field", ["network", "netns", "podUID", "podNamespace", "podName"])
async def test_attachment_fields_must_be_strings(serve: Any, field: str) -> None:
    allocator = make_allocator()
    client = await serve(allocator)
    status, body = await post(client, "/v1/cni/add", ident(**{field: 7}))
    assert (status, body["error"]["field"]) == (400, field)
    assert allocator.allocations() == []


# -- GC and STATUS -------------------------------------------------------------------------------


async def test_gc_releases_the_networks_attachments_not_listed_and_nothing_else(serve: Any) -> None:
    allocator = make_allocator()
    client = await serve(allocator)
    for container, network in (("keep", "podnet"), ("stale", "podnet"), ("other", "othernet")):
        await post(client, "/v1/cni/add", ident(container, network=network))
    allocator.allocate("10.99.0.20", "cni:legacy:eth0")  # made before networks were recorded
    allocator.allocate("10.99.0.19", "claim:ns/c")  # not a CNI allocation
    status, body = await post(
        client,
        "/v1/cni/gc",
        {"network": "podnet", "validAttachments": [{"containerID": "keep", "ifname": "eth0"}]},
    )
    assert status == 200
    assert [ip["address"] for ip in body["released"]] == ["10.99.0.11"]
    assert body["kept"] == 1
    assert {a.owner for a in allocator.allocations()} == {
        "cni:keep:eth0",
        "cni:other:eth0",
        "cni:legacy:eth0",
        "claim:ns/c",
    }


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"validAttachments": []}, "network"),
        ({"network": "n"}, "validAttachments"),
        ({"network": "n", "validAttachments": [{"containerID": "c"}]}, "validAttachments[0].ifname"),
        ({"network": "n", "validAttachments": ["c/eth0"]}, "validAttachments[0]"),
    ],
)
async def test_a_malformed_gc_is_400_naming_the_field_and_releases_nothing(
    serve: Any, body: dict[str, Any], field: str
) -> None:
    allocator = make_allocator()
    client = await serve(allocator)
    await post(client, "/v1/cni/add", ident(network="n"))
    status, answer = await post(client, "/v1/cni/gc", body)
    assert (status, answer["error"]["field"]) == (400, field)
    assert len(allocator.allocations()) == 1


async def test_status_says_whether_an_add_can_be_served(serve: Any) -> None:
    allocator = make_allocator(pool=V4[:1])
    client = await serve(allocator)
    assert await post(client, "/v1/cni/status", {}) == (200, {"ready": True, "available": 1})
    await post(client, "/v1/cni/add", ident())
    status, body = await post(client, "/v1/cni/status", {"pool": "default"})
    assert (status, body["error"]["code"]) == (503, "pool_exhausted")
    status, body = await post(client, "/v1/cni/status", {"pool": "nope"})
    assert (status, body["error"]["code"]) == (404, "unknown_pool")


async def test_status_of_an_agent_not_ready_says_why() -> None:
    app = web.Application()
    api.add_routes(app, make_allocator(), ready=lambda: "allocations not restored yet")
    async with TestClient(TestServer(app)) as client:
        status, body = await post(client, "/v1/cni/status", {})
    assert (status, body["error"]["code"], body["error"]["msg"]) == (
        503,
        "not_ready",
        "allocations not restored yet",
    )
