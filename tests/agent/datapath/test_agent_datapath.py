"""The agent with its datapath on, in a private network namespace, following its ENIPool on the
fake API server (served in the same namespace): tables follow the pool's interfaces, an ADD's rules
exist before it is answered, a DEL's are gone, a restart puts back exactly what held addresses need."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from eni_ipam.agent.config import agent_config_from_mapping
from eni_ipam.agent.daemon import Agent
from eni_ipam.agent.datapath.netlink import Netlink
from eni_ipam.agent.datapath.plan import (
    FROM_POD_PRIORITY,
    MAIN_TABLE,
    PROTOCOL,
    TO_POD_PRIORITY,
    Interface,
    Rule,
)
from eni_ipam.agent.metrics import AgentMetrics
from eni_ipam.kube.api import ENIPOOLS, KubeApi
from eni_ipam.kube.permissions import AGENT_PERMISSIONS
from eni_ipam_testkit.fake_kube import FakeKube, Fault
from tests.agent import agent_paths
from tests.agent.datapath import ETH0, ETH1, ETH2, RecordedNft, node
from tests.kube.conftest import make_api
from tests.waiting import until

pytestmark = pytest.mark.timeout(30)

LATE = Interface(
    id="eni-3", mac="02:00:00:00:00:13", device_index=3, subnet="10.0.3.0/24", primary_ip="10.0.3.10"
)


def status(*interfaces: Interface) -> dict[str, Any]:
    """An ENIPool status with two pool addresses on each interface (.50 and .51 of its subnet)."""
    pool: dict[str, Any] = {}
    for i in interfaces:
        base = i.subnet.rsplit(".", 1)[0]
        for host in (50, 51):
            pool[f"{base}.{host}"] = {"interface": i.id, "subnet": f"s-{i.device_index}"}
    return {
        "pool": pool,
        "subnets": {f"s-{i.device_index}": {"cidr": i.subnet} for i in interfaces},
        "interfaces": [
            {
                "id": i.id,
                "deviceIndex": i.device_index,
                "subnet": f"s-{i.device_index}",
                "primaryIP": i.primary_ip,
                "macAddress": i.mac,
            }
            for i in interfaces
        ],
    }


@pytest.fixture
async def kube_here(private_netns: None, kube_crds: list[dict[str, Any]]) -> AsyncIterator[FakeKube]:
    """The fake API server, listening in the test's own namespace (its loopback)."""
    async with FakeKube() as server:
        for crd in kube_crds:
            await server.apply_manifest(crd)
        yield server


@pytest.fixture
async def controller(kube_here: FakeKube) -> AsyncIterator[KubeApi]:
    api = make_api(kube_here)
    await api.create(ENIPOOLS, {"metadata": {"name": "n1"}, "spec": {"instanceID": "i-1"}})
    await api.patch(ENIPOOLS, "n1", {"status": status(ETH0, ETH1, ETH2)}, status=True)
    await node(ETH0, ETH1, ETH2)
    yield api
    await api.close()


@contextlib.asynccontextmanager
async def running_agent(kube: FakeKube, tmp_path: Path) -> AsyncIterator[Agent]:
    config = agent_config_from_mapping(
        {
            **agent_paths(tmp_path),
            "report_interval": "50ms",
            "claims": False,
            "sweep_interval": 0,
            "datapath": {"enabled": True, "vpc_cidrs": ["10.0.0.0/16"], "external_snat": True},
        }
    )
    metrics = AgentMetrics()
    api = make_api(kube, metrics)
    api.allowed = AGENT_PERMISSIONS
    agent = Agent(config, node="n1", kube=api, metrics=metrics, nft=RecordedNft())
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await until(lambda: agent.readiness()[0] or task.done())
        assert not task.done(), task.exception() if task.done() else None
        yield agent
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await api.close()


async def call(agent: Agent, operation: str, **body: Any) -> tuple[int, dict[str, Any]]:
    connector = aiohttp.UnixConnector(path=agent.config.socket)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(f"http://agent/v1/cni/{operation}", json=body) as answer,
    ):
        return answer.status, await answer.json()


async def host_rules() -> set[Rule]:
    async with Netlink() as netlink:
        return await netlink.rules()


async def host_tables() -> set[int]:
    async with Netlink() as netlink:
        return {r.table for r in await netlink.routes({})}


async def test_an_add_answers_the_pod_gateway_and_its_rules_exist_before_the_answer(
    controller: KubeApi, kube_here: FakeKube, tmp_path: Path
) -> None:
    async with running_agent(kube_here, tmp_path) as agent:
        assert await host_tables() == {30_001, 30_002}
        added = []
        for n in range(6):  # every address of the pool, on every interface
            code, answer = await call(agent, "add", containerID=f"c{n}", ifname="eth0")
            assert code == 200, answer
            (ip,) = answer["ips"]
            # The subnet's prefix and its reserved fourth address: ptp needs the gateway inside.
            subnet = ip["address"].rsplit(".", 1)[0]
            assert (ip["prefixLength"], ip["gateway"]) == (24, f"{subnet}.3")
            added.append((ip["address"], ip["interfaceID"]))
        rules = await host_rules()
        for address, interface in added:
            assert Rule(TO_POD_PRIORITY, MAIN_TABLE, destination=address) in rules
            table = {"eni-1": 30_001, "eni-2": 30_002}.get(interface)
            has_from = any(r.source == address for r in rules)
            assert has_from == (table is not None), (address, interface)
            if table is not None:
                assert Rule(FROM_POD_PRIORITY, table, source=address) in rules
        code, answer = await call(agent, "check", containerID="c1", ifname="eth0")
        assert code == 200, answer
        code, _ = await call(agent, "del", containerID="c1", ifname="eth0")
        assert code == 200
        gone = added[1][0]
        assert not any(gone in (r.source, r.destination) for r in await host_rules())


async def test_check_fails_when_a_pods_rule_was_removed_by_hand_and_a_reconcile_puts_it_back(
    controller: KubeApi, kube_here: FakeKube, tmp_path: Path
) -> None:
    async with running_agent(kube_here, tmp_path) as agent:
        addresses = []
        for n in range(6):
            _, answer = await call(agent, "add", containerID=f"c{n}", ifname="eth0")
            addresses.append((f"c{n}", answer["ips"][0]))
        container, ip = next((c, ip) for c, ip in addresses if ip["interfaceID"] == "eni-2")
        async with Netlink() as netlink:
            await netlink.delete_rule(Rule(FROM_POD_PRIORITY, 0, source=ip["address"]))
        code, answer = await call(agent, "check", containerID=container, ifname="eth0")
        assert code == 409 and answer["error"]["code"] == "routes_missing", answer
        await agent.reconcile_datapath()
        assert Rule(FROM_POD_PRIORITY, 30_002, source=ip["address"]) in await host_rules()


async def test_a_detached_interface_loses_its_table_and_a_late_device_is_withheld_until_it_appears(
    controller: KubeApi, kube_here: FakeKube, tmp_path: Path
) -> None:
    async with running_agent(kube_here, tmp_path) as agent:
        # The controller replaces its status fields whole; a merge patch needs the nulls to.
        cleared = {"pool": None, "subnets": None, "interfaces": None}
        await controller.patch(ENIPOOLS, "n1", {"status": cleared}, status=True)
        await controller.patch(ENIPOOLS, "n1", {"status": status(ETH0, ETH1, LATE)}, status=True)
        await until(lambda: agent.datapath is not None and "eni-3" in agent.datapath.interfaces)
        await until(lambda: "eni-3" in agent.datapath.unready())
        assert await host_tables() == {30_001}  # eni-2 detached: its table is gone
        handed = set()
        for n in range(4):  # what is free: eni-0's and eni-1's; none of eni-3's, whose device is missing
            code, answer = await call(agent, "add", containerID=f"c{n}", ifname="eth0")
            assert code == 200, answer
            handed.add(answer["ips"][0]["interfaceID"])
        code, answer = await call(agent, "add", containerID="c9", ifname="eth0")
        assert code == 503 and answer["error"]["code"] in ("pool_withheld", "pool_exhausted"), answer
        assert handed == {"eni-0", "eni-1"}
        await node(LATE, first=9)  # the device appears
        await agent.reconcile_datapath()
        assert agent.datapath.unready() == set()
        assert await host_tables() == {30_001, 30_003}
        code, answer = await call(agent, "add", containerID="c9", ifname="eth0")
        assert code == 200 and answer["ips"][0]["interfaceID"] == "eni-3", answer


async def test_a_restart_puts_back_exactly_what_the_held_addresses_need(
    controller: KubeApi, kube_here: FakeKube, tmp_path: Path
) -> None:
    async with running_agent(kube_here, tmp_path) as agent:
        for n in range(3):
            await call(agent, "add", containerID=f"c{n}", ifname="eth0")
        held = {a.address for a in agent.allocator.allocations(pool="default")}
    # While the agent is down: a stale rule of an address nobody holds, and a held one's rule lost.
    async with Netlink() as netlink:
        await netlink.add_rule(Rule(FROM_POD_PRIORITY, 30_001, source="10.0.1.99"))
        lost = next(iter(sorted(held)))
        await netlink.delete_rule(Rule(TO_POD_PRIORITY, MAIN_TABLE, destination=lost))
    async with running_agent(kube_here, tmp_path):
        rules = await host_rules()
        assert {r.destination for r in rules if r.priority == TO_POD_PRIORITY} == held
        assert not any(r.source == "10.0.1.99" for r in rules)
        assert all(r.table != 0 for r in rules)


async def test_a_restart_keeps_the_tables_and_rules_until_it_has_read_the_pool(
    controller: KubeApi, kube_here: FakeKube, tmp_path: Path
) -> None:
    """The interfaces come with the node's ENIPool: a reconcile before it is read would plan none,
    and take every table and ``from`` rule away (pods of secondary interfaces then leave through the
    primary one, and are dropped) until the pool arrives."""
    async with running_agent(kube_here, tmp_path) as agent:
        for n in range(6):
            await call(agent, "add", containerID=f"c{n}", ifname="eth0")
        before = (await host_rules(), await host_tables())
    assert before[1] == {30_001, 30_002} and any(r.priority == FROM_POD_PRIORITY for r in before[0])
    # The API server is slow to list the pool at the next start.
    kube_here.faults.append(Fault(verb="list", plural="enipools", status=None, delay=1.5))
    seen: list[tuple[set[Rule], set[int]]] = []

    async def watch() -> None:
        while True:
            seen.append((await host_rules(), await host_tables()))
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch())
    try:
        async with running_agent(kube_here, tmp_path):
            assert len(seen) > 10, "the pool was read at once: nothing was watched"
    finally:
        watcher.cancel()
    changed = [n for n, held in enumerate(seen) if held != before]
    assert not changed, f"{len(changed)} of {len(seen)} looks during the start differ: {seen[changed[0]]}"


def reconciles(agent: Agent) -> float:
    """Reconciles of the datapath so far, whatever their outcome."""
    return sum(agent.metrics.samples("eni_ipam_agent_datapath_reconciles_total").values())


async def test_only_a_change_of_the_pools_interfaces_has_the_datapath_reconciled_at_once(
    controller: KubeApi, kube_here: FakeKube, tmp_path: Path
) -> None:
    """The agent's own status reports (``used``) and new pool addresses change the ENIPool, not its
    interfaces: a reconcile for each would dump the host's rules, routes and SNAT table after every
    ADD and DEL for nothing. An interface attached is reconciled at once."""
    async with running_agent(kube_here, tmp_path) as agent:
        before = reconciles(agent)
        for n in range(4):
            await call(agent, "add", containerID=f"c{n}", ifname="eth0")
        await until(lambda: len(agent._used()) == 4 and (agent._pool or {}).get("status", {}).get("used"))
        grown = status(ETH0, ETH1, ETH2)
        grown["pool"]["10.0.1.52"] = {"interface": "eni-1", "subnet": "s-1"}
        await controller.patch(ENIPOOLS, "n1", {"status": grown}, status=True)
        await until(lambda: "10.0.1.52" in {m.address for m in agent.allocator.pool_addresses("default")})
        await asyncio.sleep(0.3)
        assert reconciles(agent) == before, "reconciled for a change that is not the interfaces'"
        # An interface attached: the status says so before its device appears on the node.
        await controller.patch(ENIPOOLS, "n1", {"status": status(ETH0, ETH1, ETH2, LATE)}, status=True)
        await until(lambda: agent.datapath is not None and "eni-3" in agent.datapath.unready())
        await node(LATE, first=9)
        await until(lambda: not agent.datapath.unready(), limit=5)  # looked for again within seconds
        assert await host_tables() == {30_001, 30_002, 30_003}


async def test_addresses_of_an_interface_the_status_does_not_list_are_never_handed_out(
    controller: KubeApi, kube_here: FakeKube, tmp_path: Path
) -> None:
    async with running_agent(kube_here, tmp_path) as agent:
        unlisted = status(ETH0, ETH1, ETH2)
        unlisted["interfaces"] = unlisted["interfaces"][:2]  # eni-2's addresses, without eni-2
        await controller.patch(ENIPOOLS, "n1", {"status": unlisted}, status=True)
        await until(lambda: "eni-2" not in {i.id for i in agent._interfaces})
        handed = set()
        for n in range(5):
            code, answer = await call(agent, "add", containerID=f"c{n}", ifname="eth0")
            if code != 200:
                break
            handed.add(answer["ips"][0]["interfaceID"])
        assert handed == {"eni-0", "eni-1"}


async def test_rules_of_other_software_are_left_alone(
    controller: KubeApi, kube_here: FakeKube, tmp_path: Path
) -> None:
    from pyroute2 import AsyncIPRoute

    async with AsyncIPRoute() as ipr:
        await ipr.rule("add", dst="10.9.9.9", dst_len=32, table=MAIN_TABLE, priority=TO_POD_PRIORITY)
    async with running_agent(kube_here, tmp_path):
        async with AsyncIPRoute() as ipr:
            others = [
                r.get("dst") async for r in await ipr.get_rules(family=2) if r.get("FRA_PROTOCOL") != PROTOCOL
            ]
        assert "10.9.9.9" in others
