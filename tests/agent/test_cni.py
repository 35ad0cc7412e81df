"""The ``eni-ipam-cni`` plugin as it is installed (built by scripts/build_cni_plugin.py), run as a
process with the CNI environment and stdin, against the agent API served on a unix socket by the
test's event loop (real Allocator)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from eni_ipam.agent import api, cni
from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.types import PoolAddress
from eni_ipam.core.clock import LoopClock
from tests.agent import FullDisk, built_plugin, unix_server

pytestmark = pytest.mark.system


V4 = [PoolAddress(address=f"10.99.0.{i}", prefix_length=24, gateway="10.99.0.1") for i in range(10, 21)]
V6 = [PoolAddress(address=f"fd00:99::{i:x}", prefix_length=64, gateway="fd00:99::1") for i in range(16, 20)]


class Plugin:
    """Runs the plugin like a runtime does; ``socket`` is where the agent listens."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    def conf(self, version: str = "1.0.0", **ipam: Any) -> dict[str, Any]:
        return {
            "cniVersion": version,
            "name": "podnet",
            "type": "bridge",
            "ipam": {"type": "eni-ipam-cni", "socket": self.socket, **ipam},
        }

    async def __call__(
        self,
        command: str,
        conf: Any = None,
        *,
        container: str = "c1",
        ifname: str = "eth0",
        netns: str = "/var/run/netns/test",
        env: Mapping[str, str | None] | None = None,
        stdin: bytes | None = None,
    ) -> tuple[int, Any, str]:
        environ = {
            "PATH": os.environ.get("PATH", ""),
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": container,
            "CNI_IFNAME": ifname,
            "CNI_NETNS": netns,
            "CNI_PATH": "/usr/lib/cni",
        }
        for key, value in (env or {}).items():
            if value is None:
                environ.pop(key, None)
            else:
                environ[key] = value
        data = stdin if stdin is not None else json.dumps(self.conf() if conf is None else conf).encode()
        proc = await asyncio.create_subprocess_exec(
            str(built_plugin()),
            env=environ,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(data), 20)
        assert proc.returncode is not None
        return proc.returncode, json.loads(out) if out.strip() else None, err.decode()


def make_allocator(*, ipv6: bool = False, pool: list[PoolAddress] | None = None) -> Allocator:
    allocator = Allocator(clock=LoopClock(), ipv4=True, ipv6=ipv6)
    allocator.set_pool("default", pool if pool is not None else V4 + (V6 if ipv6 else []))
    return allocator


@pytest.fixture
async def agent() -> AsyncIterator[Callable[..., Awaitable[tuple[Allocator, Plugin]]]]:
    """Start an agent (its API on a unix socket) over a fresh Allocator; the plugin runner for it."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(ready: Callable[[], str] | None = None, **kwargs: Any) -> tuple[Allocator, Plugin]:
            allocator = make_allocator(**kwargs)
            app = web.Application()
            api.add_routes(app, allocator, ready=ready)
            return allocator, Plugin(await stack.enter_async_context(unix_server(app)))

        yield start


def expect_error(rc: int, out: Any, err: str, code: int, *, names: str = "", version: str = "1.0.0") -> None:
    assert rc != 0
    assert out["code"] == code, out
    assert out["cniVersion"] == version
    assert isinstance(out["msg"], str) and out["msg"]
    assert names in out["msg"] + out.get("details", "")
    assert f"error {code}" in err  # one log line on stderr


@pytest.mark.parametrize(("stdin", "answered"), [(b'{"cniVersion": "1.0.0"}', "1.0.0"), (b"", "1.1.0")])
async def test_version_lists_the_supported_spec_versions_in_the_version_asked(
    stdin: bytes, answered: str
) -> None:
    rc, out, err = await Plugin("/nonexistent")("VERSION", stdin=stdin)
    assert (rc, out, err) == (
        0,
        {"cniVersion": answered, "supportedVersions": ["0.4.0", "1.0.0", "1.1.0"]},
        "",
    )


async def test_add_prints_a_1_0_0_result_with_the_address_gateway_and_default_route(agent: Any) -> None:
    allocator, plugin = await agent()
    rc, out, err = await plugin("ADD")
    assert (rc, err) == (0, "")
    assert out == {
        "cniVersion": "1.0.0",
        "ips": [{"address": "10.99.0.10/24", "gateway": "10.99.0.1"}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.99.0.1"}],
        "dns": {},
    }
    assert [(a.address, a.owner) for a in allocator.allocations()] == [("10.99.0.10", "cni:c1:eth0")]


async def test_add_with_0_4_0_labels_each_ip_with_its_version(agent: Any) -> None:
    _, plugin = await agent(ipv6=True)
    rc, out, _ = await plugin("ADD", plugin.conf("0.4.0", family="dual"))
    assert rc == 0 and out["cniVersion"] == "0.4.0"
    assert out["ips"] == [
        {"version": "4", "address": "10.99.0.10/24", "gateway": "10.99.0.1"},
        {"version": "6", "address": "fd00:99::10/64", "gateway": "fd00:99::1"},
    ]
    assert out["routes"] == [{"dst": "0.0.0.0/0", "gw": "10.99.0.1"}, {"dst": "::/0", "gw": "fd00:99::1"}]


async def test_add_twice_for_the_same_container_returns_the_same_result(agent: Any) -> None:
    allocator, plugin = await agent()
    first = await plugin("ADD")
    again = await plugin("ADD")
    assert first == again and first[0] == 0
    assert len(allocator.allocations()) == 1


async def test_extra_routes_follow_the_default_route_and_default_route_false_drops_it(agent: Any) -> None:
    _, plugin = await agent()
    extra = [{"dst": "10.0.0.0/8"}, {"dst": "192.168.0.0/16", "gw": "10.99.0.2"}]
    rc, out, _ = await plugin("ADD", plugin.conf(routes=extra))
    assert rc == 0 and out["routes"] == [{"dst": "0.0.0.0/0", "gw": "10.99.0.1"}, *extra]
    rc, out, _ = await plugin("ADD", plugin.conf(routes=extra, defaultRoute=False), container="c2")
    assert rc == 0 and out["routes"] == extra


async def test_del_releases_the_address_and_repeating_it_or_omitting_netns_succeeds(agent: Any) -> None:
    allocator, plugin = await agent()
    await plugin("ADD")
    rc, out, err = await plugin("DEL")
    assert (rc, out, err) == (0, None, "")
    assert allocator.allocations() == []
    assert (await plugin("DEL"))[:2] == (0, None)
    assert (await plugin("DEL", env={"CNI_NETNS": None}, container="never-added"))[:2] == (0, None)


@pytest.mark.parametrize("version", ["1.0.0", "0.4.0"])
async def test_check_with_the_previous_result_succeeds_silently(agent: Any, version: str) -> None:
    _, plugin = await agent()
    _, result, _ = await plugin("ADD", plugin.conf(version))
    rc, out, err = await plugin("CHECK", {**plugin.conf(version), "prevResult": result})
    assert (rc, out, err) == (0, None, "")


async def test_check_after_del_reports_the_container_unknown(agent: Any) -> None:
    _, plugin = await agent()
    _, result, _ = await plugin("ADD")
    await plugin("DEL")
    rc, out, err = await plugin("CHECK", {**plugin.conf(), "prevResult": result})
    expect_error(rc, out, err, cni.UNKNOWN_CONTAINER, names="cni:c1:eth0")


async def test_check_with_a_previous_result_naming_another_address_is_an_address_mismatch(agent: Any) -> None:
    _, plugin = await agent()
    await plugin("ADD")
    prev = {"cniVersion": "1.0.0", "ips": [{"address": "10.99.0.19/24"}]}
    rc, out, err = await plugin("CHECK", {**plugin.conf(), "prevResult": prev})
    expect_error(rc, out, err, cni.ADDRESS_MISMATCH, names="10.99.0.10")


async def test_an_exhausted_pool_asks_the_runtime_to_try_again_later(agent: Any) -> None:
    allocator, plugin = await agent(pool=V4[:1])
    await plugin("ADD")
    rc, out, err = await plugin("ADD", container="c2")
    expect_error(rc, out, err, cni.TRY_AGAIN_LATER, names="pool_exhausted")
    assert [a.owner for a in allocator.allocations()] == ["cni:c1:eth0"]


@pytest.mark.parametrize(
    ("ipam", "code", "names"),
    [
        ({"pool": "gold"}, cni.UNKNOWN_POOL, "gold"),
        ({"family": "ipv6"}, cni.FAMILY_DISABLED, "IPv6"),
        ({"family": "dual"}, cni.FAMILY_DISABLED, "IPv6"),
    ],
)
async def test_allocator_refusals_are_plugin_specific_codes(
    agent: Any, ipam: dict[str, Any], code: int, names: str
) -> None:
    allocator, plugin = await agent()
    rc, out, err = await plugin("ADD", plugin.conf("0.4.0", **ipam))
    expect_error(rc, out, err, code, names=names, version="0.4.0")
    assert allocator.allocations() == []


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK", "GC"])
async def test_an_unreachable_agent_is_try_again_later_for_every_command(command: str) -> None:
    plugin = Plugin("/nonexistent/agent.sock")
    version = "1.1.0" if command == "GC" else "1.0.0"
    conf = {**plugin.conf(version), "prevResult": {"ips": [{"address": "10.99.0.10/24"}]}}
    rc, out, err = await plugin(command, conf)
    expect_error(rc, out, err, cni.TRY_AGAIN_LATER, names="/nonexistent/agent.sock", version=version)


async def serve_later(app: web.Application, path: str, delay: float, plugin_call: Any) -> Any:
    """``plugin_call`` run while ``app`` starts serving on ``path`` only ``delay`` seconds later (the
    agent restarting); what it returned."""
    call = asyncio.ensure_future(plugin_call)
    await asyncio.sleep(delay)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.UnixSite(runner, path).start()
        return await call
    finally:
        await runner.cleanup()


async def test_an_agent_restarting_within_the_connect_patience_serves_the_add(tmp_path: Any) -> None:
    # The socket appears half a second after the plugin started (the agent restarting): a runtime
    # that never retries an ADD (podman, Docker through CNI) still gets its address.
    allocator = make_allocator()
    app = web.Application()
    api.add_routes(app, allocator)
    path = str(tmp_path / "agent.sock")
    rc, out, err = await serve_later(app, path, 0.5, Plugin(path)("ADD"))
    assert (rc, err) == (0, ""), out
    assert [a.owner for a in allocator.allocations()] == ["cni:c1:eth0"]


async def test_a_restart_longer_than_a_busy_nodes_serves_the_add_within_the_retry_window(
    tmp_path: Any,
) -> None:
    # SIGKILL, the unit's RestartSec=1, then a start slowed by a busy node: 4 s from the kill to
    # serving, as measured on such a node (docs/PERFORMANCE.md). A runtime that never retries an
    # ADD still gets its address, and nothing twice.
    allocator = make_allocator()
    app = web.Application()
    api.add_routes(app, allocator)
    path = str(tmp_path / "agent.sock")
    rc, out, err = await serve_later(app, path, 4.0, Plugin(path)("ADD"))
    assert (rc, err) == (0, ""), out
    assert [a.owner for a in allocator.allocations()] == ["cni:c1:eth0"]


async def test_an_add_the_agent_defers_until_its_pool_is_read_is_sent_again_until_served(
    agent: Any,
) -> None:
    # A restarted agent serves before it has read its node's ENIPool (DEL and CHECK work at once);
    # an ADD meanwhile is answered not_ready, and the plugin asks again.
    waiting = ["the node's pool (ENIPool n1) is not read yet"]
    allocator, _ = await agent()
    app = web.Application()
    api.add_routes(app, allocator, pending=lambda pool: waiting[0] if waiting else "")
    async with unix_server(app) as path:
        add = asyncio.ensure_future(Plugin(path)("ADD"))
        await asyncio.sleep(1.0)
        assert not add.done() and allocator.allocations() == []
        waiting.clear()
        rc, out, err = await add
    assert (rc, err) == (0, ""), out
    assert [a.owner for a in allocator.allocations()] == ["cni:c1:eth0"]


async def test_without_the_agents_socket_directory_no_agent_is_waited_for(tmp_path: Any) -> None:
    # The directory is made by the agent's start and outlives its restarts: without it, no agent
    # ran since the host booted, and code 11 comes at once rather than after the retry window.
    plugin = Plugin(str(tmp_path / "never-made" / "agent.sock"))
    loop = asyncio.get_running_loop()
    started = loop.time()
    rc, out, err = await plugin("ADD")
    took = loop.time() - started
    expect_error(rc, out, err, cni.TRY_AGAIN_LATER, names="not reachable")
    assert took < 1.5, took  # a plugin's own run takes milliseconds


async def test_an_agent_that_does_not_come_back_is_code_11_once_the_window_is_spent(tmp_path: Any) -> None:
    plugin = Plugin(str(tmp_path / "agent.sock"))  # its directory exists: an agent restarting
    loop = asyncio.get_running_loop()
    started = loop.time()
    rc, out, err = await plugin("DEL")
    took = loop.time() - started
    expect_error(rc, out, err, cni.TRY_AGAIN_LATER, names="not reachable")
    assert cni.RETRY_WINDOW - 2 * cni.RETRY_PAUSE <= took < cni.RETRY_WINDOW + 10, took


async def test_an_add_cut_off_before_its_answer_is_sent_again_and_holds_one_address(
    agent: Any, tmp_path: Any
) -> None:
    # The agent takes the ADD (the address is allocated and saved) and goes away before answering,
    # twice: the plugin sends the same ADD again, and the same owner gets the same address back.
    allocator, plugin = await agent()
    cut = 2

    async def front(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal cut
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(
            next(
                v
                for k, v in (h.split(b": ", 1) for h in head.split(b"\r\n")[1:-2])
                if k.lower() == b"content-length"
            )
        )
        request = head + await reader.readexactly(length)
        back_reader, back_writer = await asyncio.open_unix_connection(plugin.socket)
        back_writer.write(request)
        answer = await back_reader.read()
        back_writer.close()
        if cut > 0:
            cut -= 1
        else:
            writer.write(answer)
        writer.close()

    path = str(tmp_path / "front.sock")
    server = await asyncio.start_unix_server(front, path)
    try:
        rc, out, err = await Plugin(path)("ADD")
    finally:
        server.close()
    assert (rc, err) == (0, ""), out
    assert cut == 0  # both cut-off exchanges happened
    assert [(a.address, a.owner) for a in allocator.allocations()] == [("10.99.0.10", "cni:c1:eth0")]
    assert out["ips"] == [{"address": "10.99.0.10/24", "gateway": "10.99.0.1"}]


async def test_status_answers_within_seconds_when_the_agent_accepts_but_never_answers(tmp_path: Any) -> None:
    # A stopped (SIGSTOP) agent: the kernel still accepts connections on its socket.
    import socket

    loop = asyncio.get_running_loop()
    path = str(tmp_path / "agent.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(16)
        plugin = Plugin(path)
        started = loop.time()
        rc, out, err = await plugin("STATUS", plugin.conf("1.1.0"))
        took = loop.time() - started
    expect_error(rc, out, err, cni.NOT_AVAILABLE, version="1.1.0")
    assert took < 10, took  # the deadline is 1 s; an ADD's would be 30 s


@pytest.mark.parametrize("command", ["GC", "STATUS"])
@pytest.mark.parametrize("version", ["0.4.0", "1.0.0"])
async def test_gc_and_status_are_refused_below_cni_1_1_0_as_the_reference_plugins_do(
    agent: Any, command: str, version: str
) -> None:
    allocator, plugin = await agent()
    assert (await plugin("ADD"))[0] == 0
    conf = {**plugin.conf(version), "cni.dev/valid-attachments": []}
    rc, out, err = await plugin(command, conf)
    expect_error(rc, out, err, cni.INCOMPATIBLE_VERSION, version=version)
    assert "does not allow" in out["msg"] and command in out["msg"]
    assert len(allocator.allocations()) == 1  # a GC with no valid attachment would have released it


async def test_an_add_without_family_on_a_node_with_both_gets_ipv4_alone(agent: Any) -> None:
    # IPv6 enabled, but the IPv6 pool is empty: an IPv4-only network must not depend on it.
    _, plugin = await agent(ipv6=True, pool=V4)
    rc, out, err = await plugin("ADD")
    assert (rc, err) == (0, ""), out
    assert [ip["address"] for ip in out["ips"]] == ["10.99.0.10/24"]
    rc, out, err = await plugin("ADD", plugin.conf(family="dual"), container="c2")
    # Asked for both, and the pool has no IPv6 address: a permanent error saying so, not code 11
    # ("try again later"), which a kubelet would retry for ever.
    expect_error(rc, out, err, cni.FAMILY_DISABLED, names="pool default")
    for named in ("family dual", "IPv6"):
        assert named in out["msg"], out


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"CNI_COMMAND": None}, "CNI_COMMAND"),
        ({"CNI_COMMAND": "UPDATE"}, "CNI_COMMAND"),
        ({"CNI_CONTAINERID": None}, "CNI_CONTAINERID"),
        ({"CNI_CONTAINERID": "_starts-badly"}, "CNI_CONTAINERID"),
        ({"CNI_CONTAINERID": "c" * 257}, "CNI_CONTAINERID"),
        ({"CNI_IFNAME": None}, "CNI_IFNAME"),
        ({"CNI_IFNAME": "an-interface-name-too-long"}, "CNI_IFNAME"),
        ({"CNI_IFNAME": "eth 0"}, "CNI_IFNAME"),
        (
            {"CNI_IFNAME": "eth\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"},
            "CNI_IFNAME",
        ),  # 10 characters, 17 bytes
        ({"CNI_NETNS": None}, "CNI_NETNS"),
    ],
)
async def test_a_bad_environment_is_code_4_naming_the_variable(
    agent: Any, env: dict[str, str | None], names: str
) -> None:
    allocator, plugin = await agent()
    rc, out, err = await plugin("ADD", env=env)
    expect_error(rc, out, err, cni.INVALID_ENV, names=names)
    assert allocator.allocations() == []


def _without_ipam(conf: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in conf.items() if k != "ipam"}


@pytest.mark.parametrize(
    ("command", "mutate", "code", "names"),
    [
        ("ADD", lambda c: [c], cni.DECODE_FAILURE, "JSON object"),
        (
            "ADD",
            lambda c: {k: v for k, v in c.items() if k != "cniVersion"},
            cni.INVALID_CONFIG,
            "cniVersion",
        ),
        ("ADD", lambda c: {**c, "cniVersion": "0.3.1"}, cni.INCOMPATIBLE_VERSION, "0.3.1"),
        ("ADD", _without_ipam, cni.INVALID_CONFIG, "ipam"),
        (
            "ADD",
            lambda c: {**c, "ipam": {**c["ipam"], "sockett": "/x"}},
            cni.UNSUPPORTED_FIELD,
            "ipam.sockett",
        ),
        (
            "ADD",
            lambda c: {**c, "ipam": {**c["ipam"], "socket": "agent.sock"}},
            cni.INVALID_CONFIG,
            "ipam.socket",
        ),
        ("ADD", lambda c: {**c, "ipam": {**c["ipam"], "pool": ""}}, cni.INVALID_CONFIG, "ipam.pool"),
        ("ADD", lambda c: {**c, "ipam": {**c["ipam"], "family": "both"}}, cni.INVALID_CONFIG, "ipam.family"),
        (
            "ADD",
            lambda c: {**c, "ipam": {**c["ipam"], "defaultRoute": "no"}},
            cni.INVALID_CONFIG,
            "defaultRoute",
        ),
        ("ADD", lambda c: {**c, "ipam": {**c["ipam"], "routes": {}}}, cni.INVALID_CONFIG, "ipam.routes"),
        (
            "ADD",
            lambda c: {**c, "ipam": {**c["ipam"], "routes": [{"dst": "0.0.0.0/0"}, {"dst": "x"}]}},
            cni.INVALID_CONFIG,
            "ipam.routes[1].dst",
        ),
        (
            "ADD",
            lambda c: {**c, "ipam": {**c["ipam"], "routes": [{"dst": "10.0.0.0/8", "gw": "y"}]}},
            cni.INVALID_CONFIG,
            "ipam.routes[0].gw",
        ),
        (
            "ADD",
            lambda c: {**c, "ipam": {**c["ipam"], "routes": [{"dst": "10.0.0.0/8", "via": "y"}]}},
            cni.UNSUPPORTED_FIELD,
            "ipam.routes[0].via",
        ),
        ("CHECK", lambda c: c, cni.INVALID_CONFIG, "prevResult"),
        (
            "CHECK",
            lambda c: {**c, "prevResult": {"ips": [{"address": "10.99.0.10"}, {"address": "nope"}]}},
            cni.INVALID_CONFIG,
            "prevResult.ips[1].address",
        ),
    ],
)
async def test_a_bad_configuration_is_reported_with_the_spec_code_naming_the_field(
    agent: Any, command: str, mutate: Callable[[dict[str, Any]], Any], code: int, names: str
) -> None:
    allocator, plugin = await agent()
    allocator.allocate("10.99.0.10", "cni:c1:eth0")
    conf = mutate(plugin.conf())
    rc, out, err = await plugin(command, conf)
    # The error speaks the configuration's version, or the newest when it has no supported one.
    stated = conf.get("cniVersion") if isinstance(conf, dict) else None
    expect_error(
        rc, out, err, code, names=names, version=stated if stated in cni.SUPPORTED_VERSIONS else "1.1.0"
    )
    assert [a.address for a in allocator.allocations()] == ["10.99.0.10"]


async def test_stdin_that_is_not_json_is_code_6(agent: Any) -> None:
    allocator, plugin = await agent()
    rc, out, err = await plugin("ADD", stdin=b'{"cniVersion": ')
    expect_error(rc, out, err, cni.DECODE_FAILURE, names="not valid JSON", version="1.1.0")
    assert allocator.allocations() == []


async def test_stdin_that_is_not_utf8_is_code_6(agent: Any) -> None:
    _, plugin = await agent()
    rc, out, err = await plugin("ADD", stdin=b'{"cniVersion": "1.0.0", "name": "\xff"}')
    expect_error(rc, out, err, cni.DECODE_FAILURE, names="UTF-8", version="1.1.0")


async def test_errors_after_the_version_is_known_are_written_in_that_version(agent: Any) -> None:
    _, plugin = await agent()
    rc, out, err = await plugin("ADD", plugin.conf("0.4.0", family="ipv5"))
    expect_error(rc, out, err, cni.INVALID_CONFIG, names="ipam.family", version="0.4.0")


@pytest.mark.parametrize(
    ("status", "answer", "code", "names"),
    [
        (
            400,
            {"error": {"code": "bad_request", "msg": "containerID: nope", "field": "containerID"}},
            4,
            "nope",
        ),
        (400, {"error": {"code": "bad_request", "msg": "pool: nope", "field": "pool"}}, 7, "pool"),
        (503, {"error": {"code": "starting", "msg": "not ready yet", "field": ""}}, 11, "not ready yet"),
        (409, {"error": {"code": "something_new", "msg": "refused", "field": ""}}, 100, "refused"),
        (500, ["no", "error", "object"], 100, "HTTP 500"),
        (200, {"ips": []}, 100, "without addresses"),
        (200, {"ips": [{"address": "10.99.0.10"}]}, 100, "malformed"),
    ],
)
async def test_unexpected_agent_answers_map_to_cni_codes(
    status: int, answer: Any, code: int, names: str
) -> None:
    async def reply(_: web.Request) -> web.Response:
        return web.json_response(answer, status=status)

    app = web.Application()
    app.router.add_post("/v1/cni/add", reply)
    async with unix_server(app) as path:
        rc, out, err = await Plugin(path)("ADD")
    expect_error(rc, out, err, code, names=names)


async def test_an_agent_answer_that_is_not_json_is_code_100() -> None:
    async def reply(_: web.Request) -> web.Response:
        return web.Response(text="<html>oops</html>")

    app = web.Application()
    app.router.add_post("/v1/cni/del", reply)
    async with unix_server(app) as path:
        rc, out, err = await Plugin(path)("DEL")
    expect_error(rc, out, err, cni.AGENT_ERROR, names="oops")


# --- requested addresses, the pod's identity, GC and STATUS (CNI 1.1) ----------------------------


@pytest.mark.parametrize(
    ("env", "conf"),
    [
        ({"CNI_ARGS": "IgnoreUnknown=1;IP=10.99.0.15"}, {}),
        ({"CNI_ARGS": "IP=10.99.0.15/24"}, {}),
        ({}, {"runtimeConfig": {"ips": ["10.99.0.15/24"]}}),
        ({"CNI_ARGS": "IP=10.99.0.15"}, {"runtimeConfig": {"ips": ["10.99.0.15/24"]}}),
    ],
)
async def test_a_requested_address_is_the_one_handed_out(
    agent: Any, env: dict[str, str], conf: dict[str, Any]
) -> None:
    allocator, plugin = await agent()
    rc, out, err = await plugin("ADD", {**plugin.conf(), **conf}, env=env)
    assert (rc, err) == (0, "")
    assert out["ips"] == [{"address": "10.99.0.15/24", "gateway": "10.99.0.1"}]
    assert [(a.address, a.owner) for a in allocator.allocations()] == [("10.99.0.15", "cni:c1:eth0")]


async def test_a_requested_address_outside_the_pool_or_taken_fails_and_nothing_else_is_handed_out(
    agent: Any,
) -> None:
    allocator, plugin = await agent()
    rc, out, err = await plugin("ADD", env={"CNI_ARGS": "IP=10.98.0.5"})
    expect_error(rc, out, err, cni.NOT_IN_POOL, names="10.98.0.5")
    allocator.allocate("10.99.0.15", "cni:other:eth0")
    rc, out, err = await plugin("ADD", env={"CNI_ARGS": "IP=10.99.0.15"})
    expect_error(rc, out, err, cni.ALREADY_ALLOCATED, names="10.99.0.15")
    assert [(a.address, a.owner) for a in allocator.allocations()] == [("10.99.0.15", "cni:other:eth0")]


@pytest.mark.parametrize(
    ("env", "conf", "code", "names"),
    [
        ({"CNI_ARGS": "IP=10.99.0.300"}, {}, cni.INVALID_ENV, "CNI_ARGS IP"),
        ({"CNI_ARGS": "IgnoreUnknown"}, {}, cni.INVALID_ENV, "CNI_ARGS"),
        ({}, {"runtimeConfig": {"ips": "10.99.0.15"}}, cni.INVALID_CONFIG, "runtimeConfig.ips"),
        ({}, {"runtimeConfig": {"ips": ["10.99.0.15", 7]}}, cni.INVALID_CONFIG, "runtimeConfig.ips[1]"),
    ],
)
async def test_a_malformed_request_for_an_address_names_where_it_came_from(
    agent: Any, env: dict[str, str], conf: dict[str, Any], code: int, names: str
) -> None:
    allocator, plugin = await agent()
    rc, out, err = await plugin("ADD", {**plugin.conf(), **conf}, env=env)
    expect_error(rc, out, err, code, names=names)
    assert allocator.allocations() == []


async def test_add_records_the_network_namespace_and_pod_with_the_allocation(agent: Any) -> None:
    allocator, plugin = await agent()
    args = "K8S_POD_NAMESPACE=web;K8S_POD_NAME=api-0;K8S_POD_UID=5f1c;K8S_POD_INFRA_CONTAINER_ID=c1"
    rc, _, err = await plugin("ADD", env={"CNI_ARGS": args}, netns="/var/run/netns/cni-1")
    assert (rc, err) == (0, "")
    [allocation] = allocator.allocations()
    assert (allocation.network, allocation.netns, allocation.pod_uid, allocation.pod) == (
        "podnet",
        "/var/run/netns/cni-1",
        "5f1c",
        "web/api-0",
    )


def _gc_conf(plugin: Plugin, valid: list[dict[str, str]], **extra: Any) -> dict[str, Any]:
    return {**plugin.conf("1.1.0"), cni.VALID_ATTACHMENTS: valid, **extra}


async def test_gc_releases_the_networks_attachments_that_are_not_valid_and_nothing_else(agent: Any) -> None:
    allocator, plugin = await agent()
    for container in ("c1", "c2", "c3"):
        assert (await plugin("ADD", container=container))[0] == 0
    other = {**plugin.conf(), "name": "othernet"}
    assert (await plugin("ADD", other, container="c4"))[0] == 0
    allocator.allocate("10.99.0.20", "docker:ep1")  # not a CNI owner
    rc, out, err = await plugin(
        "GC", _gc_conf(plugin, [{"containerID": "c1", "ifname": "eth0"}]), env={"CNI_CONTAINERID": None}
    )
    assert (rc, out, err) == (0, None, "")
    assert sorted(a.owner for a in allocator.allocations()) == ["cni:c1:eth0", "cni:c4:eth0", "docker:ep1"]


@pytest.mark.parametrize(
    ("conf", "names"),
    [
        ({cni.VALID_ATTACHMENTS: {}}, cni.VALID_ATTACHMENTS),
        ({cni.VALID_ATTACHMENTS: [{"containerID": "c1"}]}, f"{cni.VALID_ATTACHMENTS}[0].ifname"),
        ({cni.VALID_ATTACHMENTS: [{"containerID": "-x", "ifname": "eth0"}]}, "[0].containerID"),
        ({"name": None}, "name"),
    ],
)
async def test_a_malformed_gc_changes_nothing(agent: Any, conf: dict[str, Any], names: str) -> None:
    allocator, plugin = await agent()
    await plugin("ADD")
    rc, out, err = await plugin("GC", _gc_conf(plugin, [], **conf))
    expect_error(rc, out, err, cni.INVALID_CONFIG, names=names, version="1.1.0")
    assert [a.owner for a in allocator.allocations()] == ["cni:c1:eth0"]


async def test_status_succeeds_silently_when_an_add_can_be_served(agent: Any) -> None:
    _, plugin = await agent()
    rc, out, err = await plugin(
        "STATUS", plugin.conf("1.1.0"), env={"CNI_CONTAINERID": None, "CNI_NETNS": None}
    )
    assert (rc, out, err) == (0, None, "")


async def test_status_is_code_50_when_the_agent_is_unreachable_not_ready_or_the_pool_exhausted(
    agent: Any,
) -> None:
    rc, out, err = await Plugin("/nonexistent/agent.sock")("STATUS", Plugin("/x").conf("1.1.0"))
    expect_error(rc, out, err, cni.NOT_AVAILABLE, names="not reachable", version="1.1.0")
    _, plugin = await agent(ready=lambda: "the state is being restored")
    rc, out, err = await plugin("STATUS", plugin.conf("1.1.0"))
    expect_error(rc, out, err, cni.NOT_AVAILABLE, names="restored", version="1.1.0")
    _, plugin = await agent(pool=V4[:1])
    assert (await plugin("ADD"))[0] == 0
    rc, out, err = await plugin("STATUS", plugin.conf("1.1.0"))
    expect_error(rc, out, err, cni.NOT_AVAILABLE, names="pool_exhausted", version="1.1.0")


# --- the plugin's own JSON (the C accelerator alone) ---------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(_json_values)
def test_the_plugins_json_writes_and_reads_what_the_json_module_does(value: Any) -> None:
    text = cni.dumps(value)
    assert text == json.dumps(value)
    assert cni.loads(text) == value
    assert cni.loads(f" \n{json.dumps(value, indent=2)}\t") == value


@pytest.mark.parametrize("text", ["", "{", '{"a": 1} x', "[NaN]", "Infinity", "{'a': 1}", '"\\x"'])
def test_the_plugins_json_refuses_what_is_not_json(text: str) -> None:
    with pytest.raises(ValueError):
        cni.loads(text)


async def test_a_del_the_agent_cannot_write_down_is_try_again_later_and_releases_nothing(
    tmp_path: Any,
) -> None:
    state = FullDisk(tmp_path / "allocations.json")
    allocator = Allocator(clock=LoopClock(), state=state)
    allocator.set_pool("default", V4)
    allocator.restore()
    app = web.Application()
    api.add_routes(app, allocator)
    async with unix_server(app) as socket:
        plugin = Plugin(socket)
        assert (await plugin("ADD"))[0] == 0
        state.full = True
        rc, out, err = await plugin("DEL")
        expect_error(rc, out, err, cni.TRY_AGAIN_LATER, names="state_unwritable")
        assert [a.owner for a in allocator.allocations()] == ["cni:c1:eth0"]
        state.full = False
        assert (await plugin("DEL"))[:2] == (0, None)
        assert allocator.allocations() == []
