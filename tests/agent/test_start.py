"""The agent's start with Docker and libcni on the node: a lost state file is rebuilt from every
runtime, a runtime that cannot be read keeps its ranges withheld until it can, and the pools of
networks removed while the agent was down are released at once."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.config import agent_config_from_mapping
from eni_ipam.agent.daemon import Agent
from eni_ipam.agent.docker import DockerApi, DockerNetwork, DockerSubnet, DockerView
from eni_ipam.agent.errors import PoolWithheld
from eni_ipam.agent.libnetwork import LOCAL_ADDRESS_SPACE, LibnetworkDriver, PoolRecord
from eni_ipam.agent.start import UNREAD, StartReconciler, docker_entries
from eni_ipam.agent.state import StateFile
from eni_ipam.agent.types import Attachment, PoolAddress, RuntimeEntry
from tests.agent import FakeClock, agent_paths, docker_network, fake_docker
from tests.agent.test_runtime import write_entry
from tests.waiting import until

pytestmark = pytest.mark.timeout(30)
CIDR = "10.99.0.0/28"  # 10.99.0.2-14 handed out; 10.99.0.1 is the router
LAB = "10.98.0.0/28"


@pytest.fixture
def docker_path() -> Iterator[str]:
    """Where Docker's socket will be (short: a unix socket path has at most 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="eni-dock-", dir="/tmp") as directory:
        yield f"{directory}/docker.sock"


def make_agent(tmp_path: Path, docker_socket: str, **more: Any) -> Agent:
    config = agent_config_from_mapping(
        {
            "node_source": "memory",
            **agent_paths(tmp_path),
            "pools": {"default": {"cidr": CIDR}, "lab": {"cidr": LAB}},
            "docker_socket": docker_socket,
            **more,
        }
    )
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "cni-cache").mkdir(exist_ok=True)
    Path(config.socket).unlink(missing_ok=True)  # a previous run's: serving starts when it is back
    agent = Agent(config, node="n1")
    agent.startup.retry = 0.05
    return agent


@contextlib.asynccontextmanager
async def running(agent: Agent) -> AsyncIterator[Agent]:
    """The agent running, from the moment its socket serves."""
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await until(lambda: Path(agent.config.socket).exists() or task.done())
        assert not task.done(), task
        yield agent
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def call(agent: Agent, method: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A libnetwork call on the agent's socket, as Docker makes it."""
    connector = aiohttp.UnixConnector(path=agent.config.socket)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(f"http://agent/IpamDriver.{method}", json=body) as answer,
    ):
        return answer.status, await answer.json(content_type=None)


async def cni_add(agent: Agent, container: str, pool: str = "default") -> dict[str, Any]:
    """A CNI ADD on the agent's socket, as the plugin sends it; the answer's body."""
    connector = aiohttp.UnixConnector(path=agent.config.socket)
    body = {"containerID": container, "ifname": "eth0", "pool": pool}
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post("http://agent/v1/cni/add", json=body) as answer,
    ):
        found: dict[str, Any] = await answer.json()
        return found


def request_pool(pool: str) -> dict[str, Any]:
    return {"AddressSpace": LOCAL_ADDRESS_SPACE, "Pool": pool, "SubPool": "", "Options": {}, "V6": False}


def owners(agent: Agent) -> dict[str, str]:
    return {a.address: a.owner for a in agent.allocator.allocations()}


def previous_run(tmp_path: Path) -> Agent:
    """The agent of the previous run, its state file written (a valid one, with nothing allocated)."""
    agent = make_agent(tmp_path, "")
    agent.allocator.restore()
    StateFile(tmp_path / "state" / "allocations.json").save([])
    return agent


def busy_host(tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """What the previous run left: a Docker network on CIDR with two endpoints and an auxiliary
    address, and a podman container (CNI) with a live network namespace. Returns the network's
    PoolID and the network as Docker shows it."""
    agent = previous_run(tmp_path)
    pool = agent.driver.request_pool(address_space=LOCAL_ADDRESS_SPACE, pool=CIDR)
    first, _ = agent.driver.request_address(pool.pool_id)
    second, _ = agent.driver.request_address(pool.pool_id)
    (tmp_path / "netns").mkdir()
    (tmp_path / "netns" / "pod1").touch()
    netns = str(tmp_path / "netns" / "pod1")
    v4, _ = agent.allocator.allocate_next("cni:pod1:eth0", attachment=Attachment(netns=netns))
    assert v4 is not None
    write_entry(tmp_path / "cni-cache", "pod1", v4.address, netns=netns)
    aux, _ = agent.driver.request_address(pool.pool_id, "10.99.0.5")
    assert [first, second, v4.address, aux] == ["10.99.0.2/28", "10.99.0.3/28", "10.99.0.4", "10.99.0.5/28"]
    network = docker_network(CIDR, {"c1": "10.99.0.2", "c2": "10.99.0.3"}, auxiliary={"host": "10.99.0.5"})
    return pool.pool_id, network


def lose_state(tmp_path: Path) -> None:
    (tmp_path / "state" / "allocations.json").write_text("garbage")


# -- the rebuild -----------------------------------------------------------------------------------


async def test_a_rebuild_keeps_dockers_endpoints_as_well_as_libcnis_attachments(
    tmp_path: Path, docker_path: str
) -> None:
    pool_id, network = busy_host(tmp_path)
    lose_state(tmp_path)
    async with (
        fake_docker(lambda: [network], docker_path),
        running(make_agent(tmp_path, docker_path)) as agent,
    ):
        docker = f"libnetwork:{pool_id}"
        assert owners(agent) == {
            "10.99.0.2": docker,
            "10.99.0.3": docker,
            "10.99.0.4": "cni:pod1:eth0",
            "10.99.0.5": docker,  # the auxiliary address; the router 10.99.0.1 is never an allocation
        }
        assert {a.pool for a in agent.allocator.allocations()} == {"default"}
        v4, _ = agent.allocator.allocate_next("cni:new:eth0")
        assert v4 is not None and v4.address == "10.99.0.6"
        # Docker releases what the rebuilt allocations hold, as it would have before.
        status, _ = await call(agent, "ReleaseAddress", {"PoolID": pool_id, "Address": "10.99.0.3"})
        assert status == 200 and "10.99.0.3" not in owners(agent)


async def test_while_docker_cannot_be_read_without_a_mirror_its_pools_subnets_are_withheld(
    tmp_path: Path, docker_path: str
) -> None:
    pool_id, network = busy_host(tmp_path)  # the previous run had no Docker: no mirror was written
    lose_state(tmp_path)
    agent = make_agent(tmp_path, docker_path)
    with capture_logs() as logs:
        async with running(agent):
            assert owners(agent) == {"10.99.0.4": "cni:pod1:eth0"}  # all libcni could say
            [unread] = [e for e in logs if e["event"] == "runtime_not_read"]
            assert (unread["runtime"], unread["networks"]) == ("docker", [CIDR])
            assert "docker.sock" in unread["reason"] and "mirror missing" in unread["withheld"]
            ready, why = agent.readiness()  # every address left in the default pool is withheld
            assert not ready and why.startswith("pool default: no address can be handed out: 12 withheld")
            assert f"while Docker's API on {docker_path} does not answer" in why
            said = f"pool default.*12 withheld while Docker's API on {docker_path}"
            with pytest.raises(PoolWithheld, match=said):
                agent.allocator.allocate_next("cni:new:eth0")
            assert (await cni_add(agent, "new"))["error"]["code"] == "pool_withheld"  # never pool_exhausted
            v4, _ = agent.allocator.allocate_next("cni:lab:eth0", "lab")  # another range: served
            assert v4 is not None
            async with fake_docker(lambda: [network], docker_path):
                await until(lambda: not agent.allocator.withheld(), limit=5)
            docker = f"libnetwork:{pool_id}"
            assert {a: o for a, o in owners(agent).items() if a.startswith("10.99.")} == {
                "10.99.0.2": docker,
                "10.99.0.3": docker,
                "10.99.0.4": "cni:pod1:eth0",
                "10.99.0.5": docker,
            }
            v4, _ = agent.allocator.allocate_next("cni:new:eth0")
            assert v4 is not None and v4.address == "10.99.0.6"
            assert agent.readiness() == (True, "node n1, 6 addresses in use")


async def test_a_start_on_a_valid_state_file_still_reads_every_runtime(
    tmp_path: Path, docker_path: str
) -> None:
    """A valid file may be an older copy put back: what libcni and Docker hold is added to it."""
    pool_id, network = busy_host(tmp_path)
    oci = tmp_path / "runc"
    (oci / "late").mkdir(parents=True)
    write_entry(tmp_path / "cni-cache", "late", "10.99.0.9")  # an ADD the file does not have
    write_entry(tmp_path / "cni-cache", "gone", "10.99.0.10")  # a DEL that failed: runc forgot it
    network["Containers"]["c3"] = {"IPv4Address": "10.99.0.11/28", "IPv6Address": ""}  # nor this
    async with (
        fake_docker(lambda: [network], docker_path),
        running(make_agent(tmp_path, docker_path, oci_state_dirs=[str(oci)])) as agent,
    ):
        docker = f"libnetwork:{pool_id}"
        assert owners(agent) == {
            "10.99.0.2": docker,
            "10.99.0.3": docker,
            "10.99.0.4": "cni:pod1:eth0",
            "10.99.0.5": docker,
            "10.99.0.9": "cni:late:eth0",
            "10.99.0.11": docker,
        }
        assert agent.allocator.withheld() == {}
        assert not (tmp_path / "cni-cache" / "podnet-gone-eth0").exists()  # proven gone: not resurrected
        v4, _ = agent.allocator.allocate_next("cni:new:eth0")
        assert v4 is not None and v4.address == "10.99.0.6"


def test_dockers_addresses_go_to_the_registered_pool_holding_them() -> None:
    records = [
        PoolRecord(pool_id="a", address_space="l", pool=CIDR, allocator_pool="default", gateway="10.99.0.1"),
        PoolRecord(pool_id="b", address_space="l", pool=LAB, sub_pool="10.98.0.8/29", allocator_pool="lab"),
    ]
    view = DockerView(
        (
            DockerNetwork(
                id="n1",
                subnets=(DockerSubnet(subnet=CIDR, gateway="10.99.0.1", auxiliary=("10.99.0.9",)),),
                endpoints=("10.99.0.2",),
            ),
            DockerNetwork(
                id="n2",
                subnets=(DockerSubnet(subnet=LAB, ip_range="10.98.0.8/29", gateway="10.98.0.1"),),
                endpoints=("10.98.0.9",),
            ),
            DockerNetwork(
                id="n3",
                subnets=(DockerSubnet(subnet="10.97.0.0/24", gateway="10.97.0.1"),),
                endpoints=("10.97.0.5",),
            ),
        )
    )
    entries, unmapped = docker_entries(view, records)
    assert entries == {
        "10.99.0.2": RuntimeEntry(owner="libnetwork:a", pool="default", alive=True),
        "10.99.0.9": RuntimeEntry(owner="libnetwork:a", pool="default", alive=True),
        "10.98.0.9": RuntimeEntry(owner="libnetwork:b", pool="lab", alive=True),
    }  # a gateway is the subnet's router: the driver never allocates it; Docker lists live endpoints
    assert unmapped == {"10.97.0.5"}  # a network this registry does not know: withheld instead


# -- pools of networks removed while the agent was down --------------------------------------------


async def test_a_pool_whose_network_was_removed_while_the_agent_was_down_is_released_at_start(
    tmp_path: Path, docker_path: str
) -> None:
    agent = previous_run(tmp_path)
    removed = agent.driver.request_pool(address_space=LOCAL_ADDRESS_SPACE, pool=CIDR)
    kept = agent.driver.request_pool(address_space=LOCAL_ADDRESS_SPACE, pool=LAB)
    still_there = [docker_network(LAB, {}, gateway="10.98.0.1")]
    with capture_logs() as logs:
        async with (
            fake_docker(lambda: still_there, docker_path),
            running(make_agent(tmp_path, docker_path)) as agent,
        ):
            # The sweep (every 30 s, a minute's grace) has not run: the start released it.
            assert [r.pool_id for r in agent.driver.pools()] == [kept.pool_id]
            status, answer = await call(agent, "RequestPool", request_pool(CIDR))
            assert status == 200 and answer["Pool"] == CIDR and answer["PoolID"] != removed.pool_id
    [released] = [e for e in logs if e["event"] == "sweep_released"]  # where the sweep's releases are
    assert (released["key"], released["at_start"]) == (f"pool:{removed.pool_id}", True)


async def test_a_removed_networks_pool_is_released_as_soon_as_docker_answers(
    tmp_path: Path, docker_path: str
) -> None:
    agent = previous_run(tmp_path)
    agent.driver.request_pool(address_space=LOCAL_ADDRESS_SPACE, pool=CIDR)
    async with running(make_agent(tmp_path, docker_path)) as agent:
        assert len(agent.driver.pools()) == 1  # Docker not answering: nothing known, nothing released
        assert "withheld while Docker's API" in agent.readiness()[1]
        async with fake_docker(lambda: [], docker_path):
            await until(lambda: not agent.driver.pools(), limit=5)
        status, _ = await call(agent, "RequestPool", request_pool(CIDR))
        assert status == 200


async def test_a_pool_requested_since_the_start_is_left_to_the_sweep(docker_path: str) -> None:
    allocator = Allocator(clock=FakeClock())
    allocator.set_pool(
        "default",
        [PoolAddress(address=f"10.99.0.{n}", prefix_length=28, gateway="10.99.0.1") for n in range(2, 15)],
    )
    allocator.set_pool(
        "lab",
        [PoolAddress(address=f"10.98.0.{n}", prefix_length=28, gateway="10.98.0.1") for n in range(2, 15)],
    )
    driver = LibnetworkDriver(allocator)
    before = driver.request_pool(address_space=LOCAL_ADDRESS_SPACE, pool=CIDR)
    docker = DockerApi(docker_path, driver_name="eni-ipam")
    start = StartReconciler(allocator, driver, cni_cache_dir="/nonexistent", docker=docker, clock=FakeClock())
    await start.restore()  # no state file: a rebuild, without Docker
    assert allocator.withheld() == {UNREAD: [CIDR]}
    since = driver.request_pool(address_space=LOCAL_ADDRESS_SPACE, pool=LAB)  # Docker creating a network
    async with fake_docker(lambda: [], docker_path):
        await start.run()
    assert [r.pool_id for r in driver.pools()] == [since.pool_id] != [before.pool_id]
    assert allocator.withheld() == {} and start.status() == ""


# -- stale libcni cache entries --------------------------------------------------------------------


async def test_a_rebuild_resurrects_no_stale_cache_entry_and_removes_their_files(tmp_path: Path) -> None:
    """A podman host (libcni before 1.2: no namespace in any entry) whose failed DELs left cache
    files behind, one of whose addresses a later container got: rebuilt twice, the live containers
    keep their addresses, the dead ones are neither imported nor left to be imported again."""
    previous_run(tmp_path)
    cache, oci = tmp_path / "cni-cache", tmp_path / "runc"
    for live in ("keep", "new"):
        (oci / live).mkdir(parents=True)  # runc's state of a container it runs
    write_entry(cache, "keep", "10.99.0.2", mtime=1000)
    leftovers = [write_entry(cache, f"gone{n}", f"10.99.0.{n}", mtime=1000) for n in (3, 4, 5)]
    write_entry(cache, "new", "10.99.0.3", mtime=2000)  # handed out again after a lost state
    leftovers.append(write_entry(cache, "netns", "10.99.0.6", netns=str(tmp_path / "gone"), mtime=1000))
    for _ in range(2):
        lose_state(tmp_path)
        with capture_logs() as logs:
            async with running(make_agent(tmp_path, "", oci_state_dirs=[str(oci)])) as agent:
                assert owners(agent) == {"10.99.0.2": "cni:keep:eth0", "10.99.0.3": "cni:new:eth0"}
        assert not [e for e in logs if e["event"] == "cni_cache_duplicate_address"]
        assert not any(path.exists() for path in leftovers)
    assert sorted(p.name for p in cache.iterdir()) == ["podnet-keep-eth0", "podnet-new-eth0"]
