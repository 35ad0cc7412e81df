"""The standard ``ptp`` plugin (/usr/lib/cni) with ``eni-ipam-cni`` and the agent's API with its node
datapath: the pod gets its address with its subnet's prefix and a default route through the
subnet's reserved fourth address, which ``ptp`` puts on the host's end of the veth; DEL releases it;
an address handed out again while the previous pod's veth is still on the host waits for it.

``ptp`` adds the result's default route while the address's prefix route is the only route of the
pod's interface, then deletes that prefix route: an answer whose gateway lies outside the prefix (a
/32 with a link-local gateway) fails at the first step, and a /32 has no prefix route to delete. And
``ptp``'s DEL releases the address before it deletes the veth, whose host route goes with it: a new
pod given the address in between would take that route for its own ("file exists" is ignored) and
lose it with the old veth.

The test's thread runs in a private network namespace standing in for the node (the datapath's
netlink and ``ptp`` both work there: the host's routing is never touched); pods are namespaces of
their own. Needs root, ``ip netns``, ``nsenter``, busybox and Debian's containernetworking-plugins;
skips otherwise, saying which is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from eni_ipam.agent import api
from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.daemon import pool_addresses
from eni_ipam.agent.datapath import pods
from eni_ipam.agent.datapath.datapath import Datapath
from eni_ipam.agent.datapath.netlink import Netlink
from eni_ipam.agent.datapath.nft import SnatTable
from eni_ipam.agent.datapath.pods import PodRoutes
from eni_ipam.agent.datapath.settings import DatapathSettings
from eni_ipam.config.schema import validate
from eni_ipam.core.clock import LoopClock
from tests.agent import built_plugin, unix_server
from tests.agent.datapath import RecordedNft

pytestmark = [pytest.mark.system, pytest.mark.usefixtures("private_netns")]

CNI_DIR = Path("/usr/lib/cni")
BUSYBOX = Path("/bin/busybox")
SUBNET = "10.0.2.0/24"
MEMBERS = [(f"10.0.2.{n}", SUBNET, "eni-2", "subnet-b") for n in range(1, 12)]
SETTINGS = validate(DatapathSettings, {"enabled": True, "vpc_cidrs": ["10.0.0.0/16"]})


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=10)


def node_netns() -> str:
    """The test thread's network namespace (the node's), as a path any process can enter."""
    return f"/proc/{os.getpid()}/task/{threading.get_native_id()}/ns/net"


@pytest.fixture
def pod_namespaces() -> Iterator[list[str]]:
    """Two pods' network namespaces (removed afterwards)."""
    for needed in (CNI_DIR / "ptp", BUSYBOX):
        if not needed.is_file():
            pytest.skip(f"{needed} is missing (containernetworking-plugins, busybox-static)")
    token = uuid.uuid4().hex[:8]
    made: list[str] = []
    try:
        for n in range(2):
            name = f"eni-ptp-pod{n}-{token}"
            if _ip("netns", "add", name, check=False).returncode != 0:
                pytest.skip("ip netns add failed: no network namespaces here")
            made.append(name)
            _ip("-n", name, "link", "set", "lo", "up")
        yield made
    finally:
        for name in made:
            _ip("netns", "del", name, check=False)


@pytest.fixture
async def agent() -> AsyncIterator[tuple[str, Allocator]]:
    """The agent's CNI API on a unix socket, with the datapath in the node's namespace."""
    allocator = Allocator(clock=LoopClock())
    allocator.set_pool("default", pool_addresses(MEMBERS, reserved=3))
    async with Netlink() as netlink:
        datapath = Datapath(SETTINGS, netlink=netlink, snat=SnatTable(run=RecordedNft()))
        app = web.Application()
        api.add_routes(app, allocator, routes=PodRoutes(datapath))
        async with unix_server(app, prefix="eni-ptp-") as sock:
            yield sock, allocator


def conf(sock: str) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "eni-pods",
        "type": "ptp",
        "ipMasq": False,
        "ipam": {"type": "eni-ipam-cni", "socket": sock},
    }


async def ptp(command: str, config: dict[str, Any], *, pod: str, container: str) -> tuple[int, Any, str]:
    """The ``ptp`` plugin run in the node's namespace, as a runtime there would run it."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container,
        "CNI_NETNS": f"/var/run/netns/{pod}",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": f"{built_plugin().parent}:{CNI_DIR}",
    }
    pipe = asyncio.subprocess.PIPE
    argv = ["nsenter", f"--net={node_netns()}", "--", str(CNI_DIR / "ptp")]
    process = await asyncio.create_subprocess_exec(*argv, env=env, stdin=pipe, stdout=pipe, stderr=pipe)
    out, err = await asyncio.wait_for(process.communicate(json.dumps(config).encode()), 30)
    assert process.returncode is not None
    return process.returncode, json.loads(out) if out.strip() else None, err.decode()


def shown(*args: str) -> list[dict[str, Any]]:
    """``ip -j`` in the node's namespace (the test's thread's)."""
    listed: list[dict[str, Any]] = json.loads(_ip("-j", *args).stdout or "[]")
    return listed


def host_veth(result: dict[str, Any]) -> str:
    (veth,) = [i["name"] for i in result["interfaces"] if not i.get("sandbox")]
    return str(veth)


def routed_to(address: str) -> list[str]:
    """The devices of the node's main-table routes to ``address``."""
    return [str(r.get("dev")) for r in shown("route", "show", "table", "main") if r["dst"] == address]


async def test_ptp_takes_the_datapaths_answer_and_the_pod_routes_through_the_host(
    pod_namespaces: list[str], agent: tuple[str, Allocator]
) -> None:
    sock, allocator = agent
    pod = pod_namespaces[0]
    code, result, err = await ptp("ADD", conf(sock), pod=pod, container="c0")
    assert code == 0, (result, err)
    assert [(ip["address"], ip.get("gateway")) for ip in result["ips"]] == [("10.0.2.4/24", "10.0.2.3")]
    rules = [r for r in shown("rule", "show") if r.get("protocol") == "234"]
    assert [(r["priority"], r.get("dst")) for r in rules] == [(512, "10.0.2.4")], "the pod's rule"

    routes = {(r["dst"], r.get("gateway", ""), r.get("scope", "")) for r in json.loads(
        _ip("-n", pod, "-j", "route", "show").stdout)}  # fmt: skip
    assert ("default", "10.0.2.3", "") in routes, routes
    assert ("10.0.2.3", "", "link") in routes, routes
    veth = host_veth(result)
    on_host = [a["local"] for link in shown("addr", "show", "dev", veth) for a in link["addr_info"]]
    assert "10.0.2.3" in on_host, on_host
    assert routed_to("10.0.2.4") == [veth]
    pinged = _ip("netns", "exec", pod, str(BUSYBOX), "ping", "-c", "1", "-W", "2", "10.0.2.3", check=False)
    assert pinged.returncode == 0, pinged.stdout + pinged.stderr

    code, out, err = await ptp("DEL", {**conf(sock), "prevResult": result}, pod=pod, container="c0")
    assert (code, out) == (0, None), err
    assert allocator.allocations() == []
    assert not [r for r in shown("rule", "show") if r.get("protocol") == "234"]


async def test_an_address_handed_out_again_waits_for_the_previous_pods_veth(
    pod_namespaces: list[str], agent: tuple[str, Allocator]
) -> None:
    """The previous pod's DEL has released the address (its IPAM step) but not yet deleted its veth:
    the new pod's ADD waits for the veth to go, and then owns the host route."""
    sock, allocator = agent
    first, second = pod_namespaces
    code, result, err = await ptp("ADD", conf(sock), pod=first, container="c0")
    assert code == 0, (result, err)
    old = host_veth(result)
    allocator.release_owner("cni:c0:eth0")  # ptp's DEL, between its IPAM DEL and its link deletion

    adding = asyncio.create_task(ptp("ADD", conf(sock), pod=second, container="c1"))
    await asyncio.sleep(0.5)
    assert not adding.done(), "the ADD did not wait for the previous pod's veth"
    _ip("link", "del", old)  # the previous DEL deletes the veth
    code, result, err = await adding
    assert code == 0, (result, err)
    assert result["ips"][0]["address"] == "10.0.2.4/24", "the same address, handed out again"
    assert routed_to("10.0.2.4") == [host_veth(result)], "the new pod lost its host route"


async def test_an_add_whose_address_still_routes_to_another_veth_is_refused_for_now(
    pod_namespaces: list[str], agent: tuple[str, Allocator], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A previous pod's veth that does not go (its DEL stuck): the ADD fails with "try again later"
    and its address is free again, for the retry."""
    monkeypatch.setattr(pods, "PREVIOUS_POD_GRACE", 0.3)
    sock, allocator = agent
    first, second = pod_namespaces
    code, result, err = await ptp("ADD", conf(sock), pod=first, container="c0")
    assert code == 0, (result, err)
    allocator.release_owner("cni:c0:eth0")
    code, answer, err = await ptp("ADD", conf(sock), pod=second, container="c1")
    assert code == 1 and answer["code"] == 11, (answer, err)  # ptp passes the plugin's error on
    assert "still routes 10.0.2.4" in answer["msg"] + answer.get("details", ""), answer
    assert allocator.allocations() == [], "the refused ADD's address is free again"
