"""The standard ``ptp`` plugin (/usr/lib/cni) with ``eni-ipam-cni``'s answer when the node datapath is
on: the pod gets its address with its subnet's prefix and a default route through the subnet's
reserved fourth address, which ``ptp`` puts on the host's end of the veth; DEL releases it.

``ptp`` adds the result's default route while the address's prefix route is the only route of the
pod's interface, then deletes that prefix route: an answer whose gateway lies outside the prefix (a
/32 with a link-local gateway) fails at the first step, and a /32 has no prefix route to delete.

``ptp`` runs in a namespace of its own standing in for the node (so the host's routing is never
touched), the pod in another; the agent's API is served in process, its datapath's rules stubbed
(tests/agent/datapath/test_agent_datapath.py runs the real ones). Needs root, ``ip netns``, busybox
and Debian's containernetworking-plugins; skips otherwise, saying which is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from aiohttp import web

from eni_ipam.agent import api
from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.daemon import pool_addresses
from eni_ipam.agent.datapath.pods import PodRoutes
from eni_ipam.agent.datapath.settings import DatapathSettings
from eni_ipam.config.schema import validate
from eni_ipam.core.clock import LoopClock
from tests.agent import built_plugin, unix_server

pytestmark = pytest.mark.system

CNI_DIR = Path("/usr/lib/cni")
BUSYBOX = Path("/bin/busybox")
SUBNET = "10.0.2.0/24"
MEMBERS = [(f"10.0.2.{n}", SUBNET, "eni-2", "subnet-b") for n in range(1, 12)]


class StubDatapath:
    """What :class:`PodRoutes` asks of the datapath, with no rules made."""

    def __init__(self) -> None:
        self.settings = validate(DatapathSettings, {"enabled": True, "vpc_cidrs": ["10.0.0.0/16"]})
        self.added: list[tuple[str, str]] = []

    async def add(self, pods: Sequence[tuple[str, str]]) -> None:
        self.added += pods

    async def remove(self, addresses: Any) -> None:
        list(addresses)

    async def check(self, address: str, interface_id: str) -> str:
        return ""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=10)


@pytest.fixture
def namespaces() -> Iterator[tuple[str, str]]:
    """A node's and a pod's network namespace (removed afterwards)."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    for needed in (CNI_DIR / "ptp", BUSYBOX):
        if not needed.is_file():
            pytest.skip(f"{needed} is missing (containernetworking-plugins, busybox-static)")
    token = uuid.uuid4().hex[:8]
    names = (f"eni-ptp-node-{token}", f"eni-ptp-pod-{token}")
    made = []
    try:
        for name in names:
            if _ip("netns", "add", name, check=False).returncode != 0:
                pytest.skip("ip netns add failed: no network namespaces here")
            made.append(name)
            _ip("-n", name, "link", "set", "lo", "up")
        yield names
    finally:
        for name in made:
            _ip("netns", "del", name, check=False)


async def ptp(
    command: str, conf: dict[str, Any], *, node: str, pod: str, container: str
) -> tuple[int, Any, str]:
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
    process = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", node, str(CNI_DIR / "ptp"), env=env, stdin=pipe, stdout=pipe, stderr=pipe
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(json.dumps(conf).encode()), 30)
    assert process.returncode is not None
    return process.returncode, json.loads(out) if out.strip() else None, err.decode()


def shown(namespace: str, *args: str) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads(_ip("-n", namespace, "-j", *args).stdout or "[]")
    return listed


async def test_ptp_takes_the_datapaths_answer_and_the_pod_routes_through_the_host(
    namespaces: tuple[str, str],
) -> None:
    node, pod = namespaces
    allocator = Allocator(clock=LoopClock())
    allocator.set_pool("default", pool_addresses(MEMBERS, reserved=3))
    datapath = StubDatapath()
    app = web.Application()
    api.add_routes(app, allocator, routes=PodRoutes(cast(Any, datapath)))
    container = f"ctr-{pod}"
    async with unix_server(app, prefix="eni-ptp-") as sock:
        conf = {
            "cniVersion": "1.0.0",
            "name": "eni-pods",
            "type": "ptp",
            "ipMasq": False,
            "ipam": {"type": "eni-ipam-cni", "socket": sock},
        }
        common = {"node": node, "pod": pod, "container": container}
        code, result, err = await ptp("ADD", conf, **common)
        assert code == 0, (result, err)
        assert [(ip["address"], ip.get("gateway")) for ip in result["ips"]] == [("10.0.2.4/24", "10.0.2.3")]
        assert datapath.added == [("10.0.2.4", "eni-2")], "the pod's rules are asked for before the answer"

        routes = {(r["dst"], r.get("gateway", ""), r.get("scope", "")) for r in shown(pod, "route", "show")}
        assert ("default", "10.0.2.3", "") in routes, routes
        assert ("10.0.2.3", "", "link") in routes, routes
        (veth,) = [i["name"] for i in result["interfaces"] if not i.get("sandbox")]
        on_host = [a["local"] for link in shown(node, "addr", "show", "dev", veth) for a in link["addr_info"]]
        assert "10.0.2.3" in on_host, on_host
        assert any(r["dst"] == "10.0.2.4" and r.get("dev") == veth for r in shown(node, "route", "show"))
        pinged = _ip(
            "netns", "exec", pod, str(BUSYBOX), "ping", "-c", "1", "-W", "2", "10.0.2.3", check=False
        )
        assert pinged.returncode == 0, pinged.stdout + pinged.stderr

        code, out, err = await ptp("DEL", {**conf, "prevResult": result}, **common)
        assert (code, out) == (0, None), err
        assert allocator.allocations() == []
