"""The sweep: what runtimes forgot to release comes back, and nothing whose owner may be alive goes.

The judges are tested on their sources of truth (network namespaces, the node's pods, Docker's API
on a unix socket); the sweeper's rule — gone at two sweeps ``grace`` apart and at every sweep in
between — is property-tested against a model of every verdict it was shown.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.docker import DockerApi
from eni_ipam.agent.libnetwork.driver import LibnetworkDriver
from eni_ipam.agent.libnetwork.protocol import LOCAL_ADDRESS_SPACE
from eni_ipam.agent.runtime import container_known
from eni_ipam.agent.sweep import DockerJudge, Finding, NamespaceJudge, PodJudge, Sweeper
from eni_ipam.agent.types import Attachment, PoolAddress
from eni_ipam.core.clock import LoopClock
from tests.agent import FakeClock, docker_network, fake_docker
from tests.agent.test_runtime import write_entry

POOL = [PoolAddress(address=f"10.99.0.{i}", prefix_length=24, gateway="10.99.0.1") for i in range(10, 20)]


def allocator() -> Allocator:
    a = Allocator(clock=LoopClock())
    a.set_pool("default", POOL)
    return a


class ScriptedJudge:
    """Says what it is told: ``verdicts`` key → gone? (None: no usable view this sweep)."""

    name = "scripted"

    def __init__(self) -> None:
        self.verdicts: dict[str, bool] | None = {}
        self.released: list[str] = []

    async def findings(self) -> list[Finding] | None:
        if self.verdicts is None:
            return None
        return [
            Finding(key, gone, (lambda key=key: self.released.append(key)), "scripted")
            for key, gone in self.verdicts.items()
        ]


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


# -- the sweeper's rule ---------------------------------------------------------------------------


def test_a_finding_is_released_only_when_gone_at_two_sweeps_a_grace_period_apart() -> None:
    clock, judge = FakeClock(), ScriptedJudge()
    sweeper = Sweeper([judge], clock=clock, interval=10, grace=30)
    judge.verdicts = {"a": True}
    for _ in range(3):  # t = 0, 10, 20: suspected, not yet gone for 30 s
        assert run(sweeper.sweep_once()) == []
        clock.advance(10)
    assert run(sweeper.sweep_once()) == ["a"]  # t = 30
    assert judge.released == ["a"]


def test_one_sweep_saying_alive_or_blind_starts_the_grace_period_again() -> None:
    for interruption in ({"a": False}, None, {}):  # alive; no usable view; not judged at all
        clock, judge = FakeClock(), ScriptedJudge()
        sweeper = Sweeper([judge], clock=clock, interval=10, grace=30)
        judge.verdicts = {"a": True}
        run(sweeper.sweep_once())
        clock.advance(20)
        judge.verdicts = interruption
        run(sweeper.sweep_once())
        clock.advance(20)
        judge.verdicts = {"a": True}
        assert run(sweeper.sweep_once()) == [], interruption  # gone again, for 0 s
        clock.advance(30)
        assert run(sweeper.sweep_once()) == ["a"], interruption


def test_any_judge_saying_alive_outweighs_one_saying_gone() -> None:
    clock, gone, alive = FakeClock(), ScriptedJudge(), ScriptedJudge()
    sweeper = Sweeper([gone, alive], clock=clock, interval=10, grace=5)
    gone.verdicts, alive.verdicts = {"a": True}, {"a": False}
    for _ in range(3):
        assert run(sweeper.sweep_once()) == []
        clock.advance(10)


def test_the_grace_period_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Sweeper([], clock=FakeClock(), interval=1, grace=0)


SWEEPS = st.lists(
    st.tuples(
        st.floats(min_value=0.5, max_value=40),  # time since the previous sweep
        st.one_of(st.none(), st.dictionaries(st.sampled_from("abc"), st.booleans())),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(SWEEPS, st.floats(min_value=1, max_value=60))
def test_nothing_is_released_that_was_not_judged_gone_throughout_a_grace_period(
    sweeps: list, grace: float
) -> None:
    """The invariant, against every history: a release at time t means the key was judged gone at
    every sweep from some sweep at or before t - grace up to t, at two sweeps at least."""
    clock, judge = FakeClock(), ScriptedJudge()
    sweeper = Sweeper([judge], clock=clock, interval=1, grace=grace)
    history: list[tuple[float, dict[str, bool] | None]] = []
    for step, verdicts in sweeps:
        clock.advance(step)
        judge.verdicts = verdicts
        history.append((clock.now, verdicts))
        for key in run(sweeper.sweep_once()):
            run_of_gone = []
            for when, seen in reversed(history):
                if seen is None or seen.get(key) is not True:
                    break
                run_of_gone.append(when)
            assert len(run_of_gone) >= 2 and clock.now - run_of_gone[-1] >= grace, (key, history)


# -- network namespaces (a host without Kubernetes) ----------------------------------------------


def test_namespace_judge_reads_the_namespace_and_falls_back_on_the_cache(tmp_path: Path) -> None:
    netns, cache = tmp_path / "netns", tmp_path / "results"
    netns.mkdir()
    cache.mkdir()
    (netns / "live").touch()
    a = allocator()
    attach = {
        "cni:live:eth0": Attachment(netns=str(netns / "live")),
        "cni:gone:eth0": Attachment(netns=str(netns / "gone")),
        "cni:hidden:eth0": Attachment(netns="/nowhere/visible/ns"),
        "cni:pid:eth0": Attachment(netns="/proc/1/ns/net"),
        "cni:cached:eth0": Attachment(),  # no namespace recorded; libcni still lists it: no verdict
        "cni:forgotten:eth0": Attachment(),  # no namespace recorded; libcni lists it no more
    }
    for owner, attachment in attach.items():
        a.allocate_next(owner, attachment=attachment)
    a.allocate_next("claim:ns/c")  # not a CNI allocation: never judged here
    write_entry(cache, "cached", "10.99.0.14")
    found = {f.key.split("|")[0]: f.gone for f in run(NamespaceJudge(a, cni_cache_dir=cache).findings())}
    assert found == {"cni:live:eth0": False, "cni:gone:eth0": True, "cni:forgotten:eth0": True}
    # Without a visible cache, an allocation with no namespace recorded gets no verdict.
    found = {f.key.split("|")[0] for f in run(NamespaceJudge(a, cni_cache_dir=tmp_path / "none").findings())}
    assert found == {"cni:live:eth0", "cni:gone:eth0"}


def test_an_allocation_without_a_namespace_is_judged_by_its_container_and_its_cache_entry_removed(
    tmp_path: Path,
) -> None:
    """A rebuild from libcni before 1.2 leaves allocations without a namespace; a cache file is no
    evidence of life (libcni keeps the file of a failed DEL), an OCI runtime's state is."""
    cache, oci = tmp_path / "results", tmp_path / "runc"
    cache.mkdir()
    (oci / "running").mkdir(parents=True)
    a = allocator()
    for name in ("running", "removed"):
        v4, _ = a.allocate_next(f"cni:{name}:eth0")
        assert v4 is not None
        write_entry(cache, name, v4.address)
    judge = NamespaceJudge(
        a, cni_cache_dir=cache, container=functools.partial(container_known, state_dirs=[oci])
    )
    clock = FakeClock()
    sweeper = Sweeper([judge], clock=clock, interval=1, grace=5)
    assert run(sweeper.sweep_once()) == []
    clock.advance(5)
    assert run(sweeper.sweep_once()) == ["cni:removed:eth0|10.99.0.11"]
    assert [x.owner for x in a.allocations()] == ["cni:running:eth0"]
    assert sorted(p.name for p in cache.iterdir()) == ["podnet-running-eth0"]  # no rebuild brings it back


def test_a_release_checks_the_allocation_is_still_the_one_judged(tmp_path: Path) -> None:
    a = allocator()
    a.allocate_next("cni:c1:eth0", attachment=Attachment(netns=str(tmp_path / "gone")))
    [finding] = run(NamespaceJudge(a, cni_cache_dir=tmp_path).findings())
    a.release_owner("cni:c1:eth0")
    a.allocate_next("cni:c2:eth0")  # the same address, another container
    finding.release()
    assert [x.owner for x in a.allocations()] == ["cni:c2:eth0"]


# -- pods (Kubernetes) ---------------------------------------------------------------------------


@dataclasses.dataclass
class FakePods:
    store: dict[str, Any]
    synced: asyncio.Event


def pod(uid: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": uid, "namespace": "ns"}, "status": {"phase": phase}}


def test_pod_judge_knows_running_pods_and_has_no_view_before_its_informer_synced() -> None:
    async def scenario() -> tuple[Any, Any]:
        a = allocator()
        for uid in ("running", "finished", "deleted"):
            a.allocate_next(f"cni:{uid}:eth0", attachment=Attachment(pod_uid=uid, pod=f"ns/{uid}"))
        a.allocate_next("cni:nopod:eth0")
        pods = FakePods(
            {"ns/running": pod("running"), "ns/finished": pod("finished", "Succeeded")}, asyncio.Event()
        )
        judge = PodJudge(a, pods)
        before = await judge.findings()
        pods.synced.set()
        return before, await judge.findings()

    before, after = run(scenario())
    assert before is None
    assert {f.key.split("|")[0]: f.gone for f in after} == {
        "cni:running:eth0": False,
        "cni:finished:eth0": True,
        "cni:deleted:eth0": True,
    }


# -- Docker --------------------------------------------------------------------------------------


def test_docker_judge_reconciles_addresses_and_pools_with_dockers_endpoints(tmp_path: Path) -> None:
    async def scenario() -> tuple[dict[str, bool], Any]:
        a = allocator()
        driver = LibnetworkDriver(a, state_path=tmp_path / "libnetwork.json")
        kept = driver.request_pool(address_space=LOCAL_ADDRESS_SPACE, pool="10.99.0.0/24")
        live, _ = driver.request_address(kept.pool_id)
        leaked, _ = driver.request_address(kept.pool_id)
        docker_view = [
            docker_network("10.99.0.0/24", {"c1": live.split("/")[0]}),
            docker_network("10.98.0.0/24", {}, driver="default"),
        ]
        async with fake_docker(lambda: docker_view) as socket:
            judge = DockerJudge(a, driver, DockerApi(socket, driver_name="eni-ipam"))
            found = {f.key: f.gone for f in await judge.findings()}
            docker_view.pop(0)  # the network was removed while the agent was down
            gone_pool = {f.key: f.gone for f in await judge.findings()}
        nowhere = str(tmp_path / "nope.sock")
        unreachable = await DockerJudge(a, driver, DockerApi(nowhere, driver_name="eni-ipam")).findings()
        return found | {"pools": gone_pool}, (live, leaked, kept.pool_id, unreachable)

    found, (live, leaked, pool_id, unreachable) = run(scenario())
    owner = f"libnetwork:{pool_id}"
    assert found[f"{owner}|{live.split('/')[0]}"] is False
    assert found[f"{owner}|{leaked.split('/')[0]}"] is True
    assert found["pools"] == {f"pool:{pool_id}": True}
    assert unreachable is None


def test_docker_judge_releases_a_pool_docker_no_longer_uses(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[str], str, Allocator, LibnetworkDriver]:
        a = allocator()
        driver = LibnetworkDriver(a, state_path=tmp_path / "libnetwork.json")
        pool = driver.request_pool(address_space=LOCAL_ADDRESS_SPACE, pool="10.99.0.0/24")
        driver.request_address(pool.pool_id)
        async with fake_docker(lambda: []) as socket:
            clock = FakeClock()
            judge = DockerJudge(a, driver, DockerApi(socket, driver_name="eni-ipam"))
            sweeper = Sweeper([judge], clock=clock, interval=1, grace=5)
            await sweeper.sweep_once()
            clock.advance(5)
            released = await sweeper.sweep_once()
        return released, pool.pool_id, a, driver

    released, pool_id, a, driver = run(scenario())
    assert released == [f"pool:{pool_id}"]
    assert driver.pools() == [] and a.allocations() == []
