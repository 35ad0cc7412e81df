"""End to end: the reference ``bridge`` and ``ptp`` plugins (/usr/lib/cni) delegate IPAM to
``eni-ipam-cni`` as it is installed (scripts/build_cni_plugin.py), which asks a real Allocator served
on a unix socket; the pool address must end up on the interface inside a real network namespace,
and DEL must release it and remove the interface.

Needs root, ``ip netns`` and Debian's containernetworking-plugins (``make test`` installs it when it can);
skips otherwise, saying which is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from eni_ipam.agent import api
from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.types import PoolAddress
from eni_ipam.core.clock import LoopClock
from tests.agent import built_plugin, unix_server

pytestmark = pytest.mark.system


CNI_DIR = Path("/usr/lib/cni")
POOL = [PoolAddress(address=f"10.99.0.{i}", prefix_length=24, gateway="10.99.0.1") for i in range(10, 21)]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=10)


@pytest.fixture
def netns() -> Iterator[str]:
    """A fresh network namespace (removed afterwards); skips when this machine cannot make one."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if not (CNI_DIR / "bridge").is_file():
        pytest.skip(f"{CNI_DIR / 'bridge'} is missing (apt-get install containernetworking-plugins)")
    name = f"eni-test-{uuid.uuid4().hex[:8]}"
    try:
        added = _ip("netns", "add", name, check=False)
    except FileNotFoundError:
        pytest.skip("the ip command (iproute2) is missing")
    if added.returncode != 0:
        pytest.skip(f"ip netns add failed: {added.stderr.strip()}")
    try:
        yield name
    finally:
        _ip("netns", "del", name, check=False)


@pytest.fixture
def plugin_dir() -> str:
    """The directory of the installed ``eni-ipam-cni`` (what a runtime puts in CNI_PATH)."""
    return str(built_plugin().parent)


@contextlib.asynccontextmanager
async def agent(allocator: Allocator) -> AsyncIterator[str]:
    app = web.Application()
    api.add_routes(app, allocator)
    async with unix_server(app, prefix="eni-netns-") as path:
        yield path


async def run_cni(
    plugin: str, command: str, conf: dict[str, Any], *, container: str, netns: str, cni_path: str
) -> tuple[int, Any, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container,
        "CNI_NETNS": f"/var/run/netns/{netns}",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": cni_path,
    }
    proc = await asyncio.create_subprocess_exec(
        str(CNI_DIR / plugin),
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(json.dumps(conf).encode()), 30)
    assert proc.returncode is not None
    return proc.returncode, json.loads(out) if out.strip() else None, err.decode()


def addresses_in(netns: str, ifname: str = "eth0") -> list[tuple[str, int]]:
    shown = _ip("-n", netns, "-j", "addr", "show", "dev", ifname)
    return [
        (info["local"], info["prefixlen"])
        for link in json.loads(shown.stdout)
        for info in link.get("addr_info", [])
        if info.get("family") == "inet"
    ]


def link_exists(netns: str, ifname: str = "eth0") -> bool:
    return _ip("-n", netns, "link", "show", ifname, check=False).returncode == 0


def routes_in(netns: str) -> list[dict[str, Any]]:
    routes: list[dict[str, Any]] = json.loads(_ip("-n", netns, "-j", "route", "show").stdout)
    return routes


async def test_bridge_configures_the_pool_address_in_the_namespace_and_del_releases_it(
    netns: str, plugin_dir: str
) -> None:
    allocator = Allocator(clock=LoopClock())
    allocator.set_pool("default", POOL)
    bridge = f"enibr{uuid.uuid4().hex[:6]}"
    container = f"ctr-{netns}"
    owner = f"cni:{container}:eth0"
    cni_path = f"{plugin_dir}:{CNI_DIR}"
    try:
        async with agent(allocator) as sock:
            conf = {
                "cniVersion": "1.0.0",
                "name": "eni-test",
                "type": "bridge",
                "bridge": bridge,
                "isGateway": False,
                "ipMasq": False,
                "ipam": {"type": "eni-ipam-cni", "socket": sock},
            }
            common = {"container": container, "netns": netns, "cni_path": cni_path}
            rc, result, err = await run_cni("bridge", "ADD", conf, **common)
            assert rc == 0, (result, err)
            assert [ip["address"] for ip in result["ips"]] == ["10.99.0.10/24"]
            assert addresses_in(netns) == [("10.99.0.10", 24)]
            assert any(r["dst"] == "default" and r.get("gateway") == "10.99.0.1" for r in routes_in(netns))
            assert [(a.address, a.owner) for a in allocator.allocations()] == [("10.99.0.10", owner)]

            rc, out, err = await run_cni("bridge", "CHECK", {**conf, "prevResult": result}, **common)
            assert (rc, out) == (0, None), err

            rc, out, err = await run_cni("bridge", "DEL", {**conf, "prevResult": result}, **common)
            assert (rc, out) == (0, None), err
            assert allocator.allocations(owner=owner) == []
            assert not link_exists(netns)

            rc, out, err = await run_cni("bridge", "DEL", conf, **common)
            assert (rc, out) == (0, None), err  # DEL again: nothing left, still success
    finally:
        _ip("link", "del", bridge, check=False)


async def test_ptp_uses_the_pool_address_and_del_after_the_namespace_is_gone_still_releases_it(
    netns: str, plugin_dir: str
) -> None:
    allocator = Allocator(clock=LoopClock())
    allocator.set_pool("default", POOL)
    allocator.allocate("10.99.0.10", "cni:someone-else:eth0")
    container = f"ctr-{netns}"
    owner = f"cni:{container}:eth0"
    async with agent(allocator) as sock:
        conf = {
            "cniVersion": "0.4.0",
            "name": "eni-test-ptp",
            "type": "ptp",
            "ipMasq": False,
            "ipam": {"type": "eni-ipam-cni", "socket": sock},
        }
        common = {"container": container, "netns": netns, "cni_path": f"{plugin_dir}:{CNI_DIR}"}
        rc, result, err = await run_cni("ptp", "ADD", conf, **common)
        try:
            assert rc == 0, (result, err)
            assert [ip["address"] for ip in result["ips"]] == ["10.99.0.11/24"]
            assert [address for address, _ in addresses_in(netns)] == ["10.99.0.11"]
            assert [a.address for a in allocator.allocations(owner=owner)] == ["10.99.0.11"]
            assert any(r["dst"] == "default" and r.get("gateway") == "10.99.0.1" for r in routes_in(netns))
            rc, out, err = await run_cni("ptp", "CHECK", {**conf, "prevResult": result}, **common)
            assert (rc, out) == (0, None), err
        finally:
            host_veths = (
                [i["name"] for i in result.get("interfaces", []) if not i.get("sandbox")] if result else []
            )
            _ip("netns", "del", netns, check=False)  # the runtime lost the namespace before DEL

        assert host_veths, result
        rc, out, err = await run_cni("ptp", "DEL", {**conf, "prevResult": result}, **common)
        assert (rc, out) == (0, None), err
        assert allocator.allocations(owner=owner) == []
        assert [a.owner for a in allocator.allocations()] == ["cni:someone-else:eth0"]
        # The host end goes away with the namespace; the kernel cleans namespaces up asynchronously.
        for _ in range(100):
            if all(_ip("link", "show", veth, check=False).returncode != 0 for veth in host_veths):
                break
            await asyncio.sleep(0.05)
        for veth in host_veths:
            assert _ip("link", "show", veth, check=False).returncode != 0
