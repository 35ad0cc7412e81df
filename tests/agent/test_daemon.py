"""The agent daemon against the fake API server: it follows its node's ENIPool, restores before it
serves, reports the addresses in use and answers the release handshake."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from eni_ipam.agent.config import agent_config_from_mapping
from eni_ipam.agent.daemon import STARTUP_POLL, Agent, pool_addresses
from eni_ipam.agent.metrics import AgentMetrics
from eni_ipam.kube.api import ENIPOOLS, KubeApi
from eni_ipam.kube.nodemarks import STARTUP_TAINT
from eni_ipam.kube.permissions import AGENT_PERMISSIONS
from eni_ipam_testkit.fake_kube import FakeKube
from tests.agent import agent_paths, unix_server
from tests.agent.conftest import enipool_status
from tests.kube.conftest import make_api, node
from tests.waiting import until

pytestmark = pytest.mark.timeout(30)
POOL = [f"10.0.0.{n}" for n in range(10, 16)]


def serving(agent: Agent) -> bool:
    """Restored, holding the node's pool (what the tests allocate from) and withholding none of it:
    until the node's pods are listed, a start withholds what they may hold."""
    return (
        agent.restored
        and bool(agent.allocator.pool_addresses("default"))
        and not agent.allocator.withholding("default")
    )


def status(kube: FakeKube) -> dict[str, Any]:
    return (kube.get_object("enipools", "n1") or {}).get("status") or {}


async def set_pool(controller: KubeApi, addresses: list[str], **kwargs: Any) -> None:
    await controller.patch(ENIPOOLS, "n1", {"status": enipool_status(addresses, **kwargs)}, status=True)


@contextlib.asynccontextmanager
async def running_agent(kube: FakeKube, tmp_path: Path, **options: Any) -> AsyncIterator[Agent]:
    config = agent_config_from_mapping(
        {
            **agent_paths(tmp_path),
            "report_interval": "50ms",
            "claims": False,
            **options,
        }
    )
    metrics = AgentMetrics()
    api = make_api(kube, metrics)
    api.allowed = AGENT_PERMISSIONS
    agent = Agent(config, node="n1", kube=api, metrics=metrics)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        yield agent
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await api.close()


async def test_agent_serves_at_once_but_hands_out_addresses_only_from_its_pool(
    kube: FakeKube, tmp_path: Path
) -> None:
    from eni_ipam.agent.errors import PoolExhausted

    controller = make_api(kube)
    async with running_agent(kube, tmp_path) as agent:
        await until(lambda: agent.restored and (tmp_path / "run" / "agent.sock").exists())
        assert agent.readiness()[0] is False  # no pool yet
        with pytest.raises(PoolExhausted):  # the CNI plugin answers "try again later"
            agent.allocator.allocate_next("cni:early:eth0")
        await controller.create(ENIPOOLS, {"metadata": {"name": "n1"}, "spec": {"instanceID": "i-1"}})
        await set_pool(controller, POOL)
        await until(lambda: len(agent.allocator.pool_addresses("default")) == len(POOL))
        assert agent.readiness()[0] is True
        assert [a.address for a in agent.allocator.pool_addresses("default")] == POOL
        member = agent.allocator.pool_addresses("default")[0]
        assert (member.prefix_length, member.gateway, member.subnet_id) == (24, "10.0.0.1", "s-1")
    await controller.close()


async def test_an_add_before_the_nodes_pool_is_read_is_not_ready_not_exhausted(
    kube: FakeKube, controller: KubeApi, tmp_path: Path
) -> None:
    # A restarted agent serves before its first read of the API server: an ADD meanwhile is told
    # to wait (not_ready, which the plugin sends again), not that a pool it has not read is empty.
    from eni_ipam_testkit.fake_kube import Fault

    await set_pool(controller, POOL)
    kube.faults.append(Fault(plural="enipools", status=503, times=1_000_000))  # not read yet
    socket = tmp_path / "run" / "agent.sock"
    async with running_agent(kube, tmp_path) as agent:
        await until(lambda: agent.restored and socket.exists())
        connector = aiohttp.UnixConnector(path=str(socket))
        async with aiohttp.ClientSession(connector=connector) as session:
            body = {"containerID": "c1", "ifname": "eth0", "netns": "/x"}

            async def add() -> tuple[int, Any]:
                async with session.post("http://agent/v1/cni/add", json=body) as response:
                    return response.status, await response.json()

            status, answer = await add()
            assert (status, answer["error"]["code"]) == (503, "not_ready"), answer
            assert "ENIPool n1" in answer["error"]["msg"]
            kube.faults.clear()
            await until(lambda: serving(agent))
            status, answer = await add()
            assert status == 200 and answer["ips"][0]["address"] == POOL[0], answer


async def test_a_restart_without_the_api_server_still_releases_what_containers_held(
    kube: FakeKube, controller: KubeApi, tmp_path: Path
) -> None:
    from eni_ipam_testkit.fake_kube import Fault

    await set_pool(controller, POOL)
    async with running_agent(kube, tmp_path) as agent:
        await until(lambda: agent.restored and len(agent.allocator.pool_addresses("default")) == len(POOL))
        agent.allocator.allocate_next("cni:c1:eth0")
    kube.faults.append(Fault(plural="enipools", status=503, times=1_000_000))  # the API server is down
    async with running_agent(kube, tmp_path) as agent:
        await until(lambda: agent.restored and (tmp_path / "run" / "agent.sock").exists())
        assert [a.owner for a in agent.allocator.release_owner("cni:c1:eth0")] == ["cni:c1:eth0"]
    kube.faults.clear()


async def test_addresses_in_use_are_reported_and_survive_a_restart(
    kube: FakeKube, controller: KubeApi, tmp_path: Path
) -> None:
    await set_pool(controller, POOL)
    async with running_agent(kube, tmp_path) as agent:
        await until(lambda: serving(agent))
        v4, _ = agent.allocator.allocate_next("cni:c1:eth0")
        assert v4 is not None and v4.address == "10.0.0.10"
        await until(lambda: status(kube).get("used") == ["10.0.0.10"])
        sample = agent.metrics.sample
        await until(lambda: sample("eni_ipam_agent_allocations", {"node": "n1", "pool": "default"}) == 1)
        assert sample("eni_ipam_agent_pool_addresses", {"node": "n1", "pool": "default"}) == len(POOL)
        # The counter moves once the PATCH has returned to the agent, after the server already holds it.
        await until(lambda: (sample("eni_ipam_agent_status_reports_total", {"outcome": "ok"}) or 0) >= 1)
    async with running_agent(kube, tmp_path) as agent:
        await until(lambda: serving(agent))
        assert [(a.address, a.owner) for a in agent.allocator.allocations()] == [("10.0.0.10", "cni:c1:eth0")]
        again, _ = agent.allocator.allocate_next("cni:c2:eth0")
        assert again is not None and again.address == "10.0.0.11"


async def test_release_marks_are_answered_by_use(kube: FakeKube, controller: KubeApi, tmp_path: Path) -> None:
    await set_pool(controller, POOL)
    async with running_agent(kube, tmp_path) as agent:
        await until(lambda: serving(agent))
        agent.allocator.allocate("10.0.0.14", "cni:c1:eth0")
        await set_pool(
            controller, POOL, release={"10.0.0.15": "marked-for-release", "10.0.0.14": "marked-for-release"}
        )
        await until(
            lambda: (
                status(kube).get("releaseAnswers")
                == {"10.0.0.15": "ready-for-release", "10.0.0.14": "do-not-release"}
            )
        )
        # a held address is never handed out while its mark stands
        taken = [agent.allocator.allocate_next(f"cni:c{n}:eth0")[0] for n in range(2, 6)]
        assert "10.0.0.15" not in {a.address for a in taken if a}
        await set_pool(controller, [a for a in POOL if a != "10.0.0.15"], release={"10.0.0.15": "released"})
        await until(lambda: status(kube).get("releaseAnswers") == {"10.0.0.14": "do-not-release"})


async def test_health_and_readiness_endpoints(kube: FakeKube, tmp_path: Path) -> None:
    controller = make_api(kube)
    async with running_agent(kube, tmp_path) as agent:
        await until(lambda: agent.endpoint is not None)
        port = await _port(agent)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/healthz") as r:
                assert r.status == 200

            async def readyz() -> tuple[int, str]:
                async with session.get(f"http://127.0.0.1:{port}/readyz") as r:
                    return r.status, await r.text()

            # Served meanwhile: first while the allocations are restored (the agent listens at
            # once), then while it waits for its pool.
            async with asyncio.timeout(10):
                while "waiting for the node's pool" not in (answer := await readyz())[1]:
                    assert answer == (503, "not ready: allocations not restored yet\n")
                    await asyncio.sleep(0.01)
            assert answer[0] == 503
            await controller.create(ENIPOOLS, {"metadata": {"name": "n1"}, "spec": {"instanceID": "i-1"}})
            await until(lambda: agent.pool_seen.is_set())
            async with session.get(f"http://127.0.0.1:{port}/readyz") as r:
                assert r.status == 200 and "node n1" in await r.text()
    await controller.close()


async def _port(agent: Agent) -> int:
    assert agent.endpoint is not None
    return int(agent.endpoint.addresses[0][1])


async def test_a_mark_written_while_the_agent_was_down_is_answered_after_the_restore(
    kube: FakeKube, controller: KubeApi, tmp_path: Path
) -> None:
    await set_pool(controller, POOL, release={"10.0.0.13": "marked-for-release"})
    async with running_agent(kube, tmp_path) as agent:
        await until(lambda: status(kube).get("releaseAnswers") == {"10.0.0.13": "ready-for-release"})
        taken = {agent.allocator.allocate_next(f"cni:c{n}:eth0")[0].address for n in range(5)}  # type: ignore[union-attr]
        assert "10.0.0.13" not in taken


async def test_a_second_agent_on_the_same_state_directory_is_refused(
    kube: FakeKube, controller: KubeApi, tmp_path: Path
) -> None:
    from eni_ipam.errors import ConfigError

    await set_pool(controller, POOL)
    async with running_agent(kube, tmp_path) as agent:
        await until(lambda: serving(agent))
        with pytest.raises(ConfigError, match="another agent is running"):
            async with running_agent(kube, tmp_path):
                pass


def memory_agent(tmp_path: Path, cidr: str, **more: Any) -> Agent:
    """An agent of one memory-sourced pool ``cidr`` (``more``: other settings), its state restored."""
    config = agent_config_from_mapping(
        {
            "node_source": "memory",
            "socket": str(tmp_path / "agent.sock"),
            "state_dir": str(tmp_path / "state"),
            "pools": {"default": {"cidr": cidr}},
            **more,
        }
    )
    (tmp_path / "state").mkdir()
    agent = Agent(config, node="n1")
    agent.allocator.restore()
    return agent


async def test_excluded_addresses_are_never_handed_out(tmp_path: Path) -> None:
    server = {"host": "127.0.0.1", "port": 0, "probe_port": 0}
    agent = memory_agent(tmp_path, "10.99.0.0/29", server=server, exclude=["10.99.0.2", "10.99.0.4"])
    handed = [agent.allocator.allocate_next(f"o{n}")[0] for n in range(3)]
    assert [a.address for a in handed if a] == ["10.99.0.3", "10.99.0.5", "10.99.0.6"]


async def test_the_socket_refuses_a_body_larger_than_64_kib_and_changes_nothing(tmp_path: Path) -> None:
    agent = memory_agent(tmp_path, "10.99.0.0/29")
    async with unix_server(agent.socket_app()) as path:
        connector = aiohttp.UnixConnector(path=path)
        async with aiohttp.ClientSession(connector=connector) as session:
            body = {"containerID": "c1", "ifname": "eth0", "netns": "/x" * 40_000}
            async with session.post("http://agent/v1/cni/add", json=body) as answer:
                assert answer.status == 413
            async with session.post("http://agent/v1/cni/add", json={**body, "netns": "/x"}) as answer:
                assert answer.status == 200
    assert [a.owner for a in agent.allocator.allocations()] == ["cni:c1:eth0"]


async def test_requests_are_counted_by_api_operation_and_outcome_pool_exhaustion_included(
    tmp_path: Path,
) -> None:
    agent = memory_agent(tmp_path, "10.99.0.0/30")  # two usable addresses at most
    async with unix_server(agent.socket_app()) as path:
        connector = aiohttp.UnixConnector(path=path)
        async with aiohttp.ClientSession(connector=connector) as session:
            for n in range(4):
                body = {"containerID": f"c{n}", "ifname": "eth0", "netns": "/x"}
                async with session.post("http://agent/v1/cni/add", json=body):
                    pass
            async with session.post("http://agent/v1/cni/del", json={"ifname": "eth0"}):
                pass  # no containerID: refused
            async with session.post("http://agent/IpamDriver.RequestAddress", json={"PoolID": ""}):
                pass
            async with session.post("http://agent/v1/cni/nothing", json={}):
                pass  # not an operation: not counted

    def count(api: str, operation: str, outcome: str) -> float | None:
        labels = {"api": api, "operation": operation, "outcome": outcome}
        return agent.metrics.sample("eni_ipam_agent_requests_total", labels)

    served, exhausted = count("cni", "add", "ok") or 0, count("cni", "add", "pool_exhausted") or 0
    assert served >= 1 and exhausted >= 1 and served + exhausted == 4  # a /30 holds at most two
    assert count("cni", "del", "bad_request") == 1
    assert count("libnetwork", "RequestAddress", "invalid") == 1
    operations = {
        dict(labels)["operation"] for labels in agent.metrics.samples("eni_ipam_agent_requests_total")
    }
    assert "nothing" not in operations


def test_a_subnets_base_and_gateway_are_never_pool_addresses() -> None:
    members = [
        (f"10.244.0.{n}", "10.244.0.0/16", "vif-n1", "10.244.0.0/16") for n in range(4)
    ]  # a generic node holding the cluster CIDR's first /28
    listed = pool_addresses(members)
    assert [m.address for m in listed] == ["10.244.0.2", "10.244.0.3"]
    assert {(m.prefix_length, m.gateway) for m in listed} == {(16, "10.244.0.1")}
    # With the node datapath, base + 3 is the pods' gateway on the host: never a pod's address.
    assert pool_addresses([*members, ("10.244.0.4", *members[0][1:])], reserved=3)[0].address == "10.244.0.4"


async def test_a_dual_stack_agent_hands_out_addresses_from_its_pools_ipv6_block(
    kube: FakeKube, controller: KubeApi, tmp_path: Path
) -> None:
    body = enipool_status(POOL)
    body["interfaces"] = [
        {
            "id": "vif-n1",
            "deviceIndex": 0,
            "subnet": "s-1",
            "primaryIP": "",
            "addresses": 0,
            "prefixes": [],
            "ipv6Prefixes": ["fd00:10:244:3::/64"],
        }
    ]
    await controller.patch(ENIPOOLS, "n1", {"status": body}, status=True)
    async with running_agent(kube, tmp_path, ipv6=True, ipv6_pool_size=4) as agent:
        await until(lambda: serving(agent))
        v6 = [a for a in agent.allocator.pool_addresses("default") if ":" in a.address]
        assert [a.address for a in v6] == [f"fd00:10:244:3::{n}" for n in range(2, 6)]
        assert {(a.prefix_length, a.gateway) for a in v6} == {(64, "fd00:10:244:3::1")}
        ipv4, ipv6 = agent.allocator.allocate_next("cni:c1:eth0")
        assert ipv4 is not None and ipv6 is not None and ipv6.address == "fd00:10:244:3::2"
    async with running_agent(kube, tmp_path / "v4only") as agent:  # IPv6 off: the block is ignored
        await until(lambda: serving(agent))
        assert all(":" not in a.address for a in agent.allocator.pool_addresses("default"))


async def test_an_address_whose_network_namespace_is_gone_comes_back_after_the_grace_period(
    tmp_path: Path,
) -> None:
    """The runtime's DEL never came (the agent was down, podman does not retry): the sweep releases the
    address once the container's namespace is gone — and never the one of a live container."""
    netns = tmp_path / "netns"
    netns.mkdir()
    for name in ("live", "stopped"):
        (netns / name).touch()
    config = agent_config_from_mapping(
        {
            "node_source": "memory",
            **agent_paths(tmp_path),
            "pools": {"default": {"cidr": "10.99.0.0/29"}},
            "sweep_interval": "50ms",
            "sweep_grace": "200ms",
        }
    )
    agent = Agent(config, node="n1")
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await until(lambda: agent.restored and Path(config.socket).exists())
        connector = aiohttp.UnixConnector(path=config.socket)
        async with aiohttp.ClientSession(connector=connector) as session:
            for name in ("live", "stopped"):
                body = {"containerID": name, "ifname": "eth0", "netns": str(netns / name), "network": "n"}
                async with session.post("http://agent/v1/cni/add", json=body) as response:
                    assert response.status == 200
        (netns / "stopped").unlink()
        await until(lambda: [a.owner for a in agent.allocator.allocations()] == ["cni:live:eth0"], limit=5)
        await asyncio.sleep(0.5)  # many more sweeps: the live container keeps its address
        assert [a.owner for a in agent.allocator.allocations()] == ["cni:live:eth0"]
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_an_address_whose_pod_left_the_node_comes_back_and_a_running_pods_stays(
    kube: FakeKube, controller: KubeApi, tmp_path: Path
) -> None:
    from eni_ipam.agent.types import Attachment
    from eni_ipam.kube.api import PODS

    await set_pool(controller, POOL)
    pods = {}
    kube.add_object("namespaces", {"metadata": {"name": "ns"}})
    for name, node_name in (("web", "n1"), ("job", "n1"), ("elsewhere", "n2")):
        spec = {"nodeName": node_name, "containers": [{"name": "c", "image": "busybox:1"}]}
        pods[name] = kube.add_object("pods", {"metadata": {"name": name, "namespace": "ns"}, "spec": spec})
    controller.allowed = frozenset(controller.allowed) | {("", "pods", "delete")}  # the test's own power
    async with running_agent(kube, tmp_path, sweep_interval="50ms", sweep_grace="200ms") as agent:
        await until(lambda: agent.restored and len(agent.allocator.pool_addresses("default")) == len(POOL))
        for name, pod in pods.items():
            uid = pod["metadata"]["uid"]
            agent.allocator.allocate_next(
                f"cni:{name}:eth0", attachment=Attachment(pod_uid=uid, pod=f"ns/{name}")
            )
        await controller.delete(PODS, "job", namespace="ns")  # its DEL never came
        # The pod on another node is not this node's: gone from here too (a stale allocation).
        await until(lambda: [a.owner for a in agent.allocator.allocations()] == ["cni:web:eth0"], limit=5)
        await asyncio.sleep(0.5)
        assert [a.owner for a in agent.allocator.allocations()] == ["cni:web:eth0"]


async def test_the_http_endpoint_serves_within_its_configured_limits(kube: FakeKube, tmp_path: Path) -> None:
    """server.max_connections and server.read_timeout reach the TCP endpoint; refusals are counted."""
    server = {"host": "127.0.0.1", "port": 0, "probe_port": 0, "max_connections": 1, "read_timeout": "200ms"}
    async with running_agent(kube, tmp_path, server=server) as agent:
        await until(lambda: agent.endpoint is not None)
        port = await _port(agent)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        second_reader, second = await asyncio.open_connection("127.0.0.1", port)
        assert (await asyncio.wait_for(second_reader.read(), 5)).startswith(b"HTTP/1.1 503")
        assert await asyncio.wait_for(reader.read(), 5) == b""  # idle: closed after 200 ms
        refused = agent.metrics.sample(
            "eni_ipam_http_connections_refused_total", {"reason": "connection_limit"}
        )
        assert refused == 1
        writer.close()
        second.close()


async def test_the_socket_serves_within_its_configured_limits(kube: FakeKube, tmp_path: Path) -> None:
    """socket_max_connections and socket_read_timeout reach the socket; refusals are counted."""
    async with running_agent(kube, tmp_path, socket_max_connections=1, socket_read_timeout="200ms") as agent:
        await until(lambda: agent.restored and Path(agent.config.socket).exists())
        reader, writer = await asyncio.open_unix_connection(agent.config.socket)
        second_reader, second = await asyncio.open_unix_connection(agent.config.socket)
        assert (await asyncio.wait_for(second_reader.read(), 5)).startswith(b"HTTP/1.1 503")
        assert await asyncio.wait_for(reader.read(), 5) == b""  # idle: closed after 200 ms
        refused = agent.metrics.registry.get_sample_value(
            "eni_ipam_agent_socket_refused_total", {"reason": "connection_limit"}
        )
        assert refused == 1
        writer.close()
        second.close()


async def test_the_startup_taint_comes_off_once_the_pool_holds_its_minimum_and_adds_are_served(
    kube: FakeKube, controller: KubeApi, tmp_path: Path
) -> None:
    registered = node("n1", "i-1")
    other = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    registered["spec"]["taints"] = [other, {"key": STARTUP_TAINT, "effect": "NoSchedule"}]
    kube.add_object("nodes", registered)
    await controller.patch(ENIPOOLS, "n1", {"spec": {"minAllocate": 6}})

    def taints() -> list[dict]:
        return kube.get_object("nodes", "n1")["spec"].get("taints") or []

    async with running_agent(kube, tmp_path) as agent:
        await until(lambda: agent.serving.is_set())
        # The pool holds 4 of its 6: the agent serves, but the taint stays.
        await controller.patch(
            ENIPOOLS, "n1", {"status": {**enipool_status(POOL[:4]), "stats": {"available": 4}}}, status=True
        )
        await until(lambda: len(agent.allocator.pool_addresses("default")) == 4)
        await asyncio.sleep(3 * STARTUP_POLL)
        assert not agent.ready_for_pods() and len(taints()) == 2
        assert not [r for r in kube.requests if r.plural == "nodes"]  # not even read yet
        await controller.patch(
            ENIPOOLS, "n1", {"status": {**enipool_status(POOL), "stats": {"available": 6}}}, status=True
        )
        await until(lambda: taints() == [other])
        assert agent.ready_for_pods()
    assert [r.verb for r in kube.requests if r.plural == "nodes"] == ["get", "patch"]


async def test_no_startup_taint_setting_never_reads_the_node(
    kube: FakeKube, controller: KubeApi, tmp_path: Path
) -> None:
    kube.add_object("nodes", node("n1", "i-1"))
    async with running_agent(kube, tmp_path, startup_taint="") as agent:
        await set_pool(controller, POOL)
        await until(lambda: serving(agent) and agent.serving.is_set())
        await asyncio.sleep(3 * STARTUP_POLL)
    assert not [r for r in kube.requests if r.plural == "nodes"]
