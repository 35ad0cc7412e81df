"""The EndpointSlice side of the quarantine: what the agent keeps of the cluster's slices, and the
daemon's watch holding an address a slice lists, across a restart (the fake API server)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from eni_ipam.agent.endpoints import EndpointAddresses, SliceAddresses
from eni_ipam.agent.state import StateFile
from eni_ipam.kube.api import ENDPOINTSLICES, KubeApi
from eni_ipam.kube.permissions import DISCOVERY_GROUP as DISCOVERY
from eni_ipam_testkit.fake_kube import FakeKube
from tests.agent.test_daemon import POOL, running_agent, serving, set_pool
from tests.waiting import until


def test_the_endpointslice_view_keeps_only_the_nodes_addresses_and_counts_every_slice() -> None:
    view = EndpointAddresses(lambda address: address.startswith("10.0.0."))
    web = view.project(
        {
            "metadata": {"resourceVersion": "7"},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.0.0.5"], "conditions": {"ready": False, "terminating": True}},
                {"addresses": ["10.9.9.9"]},  # another node's pod
            ],
        }
    )
    assert web == SliceAddresses("7", ("10.0.0.5",))
    other = view.project({"metadata": {}, "endpoints": [{"addresses": ["10.0.0.5", "10.0.0.6"]}]})
    view.on_slice("ADDED", web, None)
    view.on_slice("ADDED", other, None)
    view.on_slice("DELETED", web, web)
    assert view.addresses() == ["10.0.0.5", "10.0.0.6"]  # the other slice still lists .5
    view.on_slice("MODIFIED", SliceAddresses("9", ()), other)
    assert view.addresses() == []
    assert not view.synced()  # no informer has read the slices


def endpoint_slice(name: str, *addresses: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


async def test_the_daemon_holds_an_address_an_endpointslice_lists_across_a_restart(
    kube: FakeKube, controller: KubeApi, tmp_path: Path
) -> None:
    await set_pool(controller, POOL)
    kube.add_object("namespaces", {"metadata": {"name": "ns"}})
    kube.add_object("endpointslices", endpoint_slice("elsewhere", "10.9.9.9"))  # another node's pod
    options = {"reuse_quarantine_seconds": "200ms"}
    async with running_agent(kube, tmp_path, **options) as agent:
        endpoints = agent.endpoints
        assert endpoints is not None
        await until(lambda: serving(agent) and endpoints.synced())
        v4, _ = agent.allocator.allocate_next("cni:web:eth0")
        assert v4 is not None and v4.address == POOL[0]
        # The endpoint controller lists the pod; then the pod is deleted, before its slice changes.
        kube.add_object("endpointslices", endpoint_slice("web-1", POOL[0]))
        await until(lambda: endpoints.listed(POOL[0]))
        agent.allocator.release_owner("cni:web:eth0")
        await asyncio.sleep(0.3)  # the quarantine's time has passed: the slice still holds it
        v4, _ = agent.allocator.allocate_next("cni:next:eth0")
        assert v4 is not None and v4.address == POOL[1]
        assert agent.allocator.quarantined() == {POOL[0]: 0.0}
        assert agent.metrics.sample("eni_ipam_agent_quarantined_addresses") == 1
        assert endpoints.addresses() == [POOL[0]]  # only this node's addresses are kept
    async with running_agent(kube, tmp_path, **options) as agent:  # restored from the state file
        endpoints = agent.endpoints
        assert endpoints is not None
        await until(lambda: serving(agent))
        assert POOL[0] in agent.allocator.quarantined()  # held before the slices are read, and after
        await until(endpoints.synced)
        v4, _ = agent.allocator.allocate_next("cni:third:eth0")
        assert v4 is not None and v4.address == POOL[2]
        controller.allowed = frozenset(controller.allowed) | {(DISCOVERY, "endpointslices", "delete")}
        await controller.delete(ENDPOINTSLICES, "web-1", namespace="ns")  # the endpoint controller's
        await until(lambda: not endpoints.listed(POOL[0]))
        v4, _ = agent.allocator.allocate_next("cni:fourth:eth0")
        assert v4 is not None and v4.address == POOL[0]
        assert agent.metrics.sample(
            "eni_ipam_agent_quarantine_early_reuses_total", {"reason": "pool_exhausted"}
        ) in (None, 0)
    assert any(r.verb == "watch" and r.plural == "endpointslices" for r in kube.requests)


async def test_without_a_quarantine_the_daemon_reads_no_endpointslices(
    kube: FakeKube, tmp_path: Path
) -> None:
    async with running_agent(kube, tmp_path, reuse_quarantine_seconds=0) as agent:
        await until(lambda: agent.restored)
        await asyncio.sleep(0.1)
        assert agent.endpoints is None
    assert not any(r.plural == "endpointslices" for r in kube.requests)


async def test_a_restarted_daemon_keeps_a_quarantined_address_for_the_rest_of_its_time(
    kube: FakeKube, controller: KubeApi, tmp_path: Path
) -> None:
    await set_pool(controller, POOL)
    options = {"reuse_quarantine_seconds": "1h"}
    async with running_agent(kube, tmp_path, **options) as agent:
        await until(lambda: serving(agent))
        agent.allocator.allocate_next("cni:web:eth0")
        agent.allocator.release_owner("cni:web:eth0")
    state = StateFile(tmp_path / "state" / "allocations.json")
    released = state.read().quarantine[POOL[0]]
    await asyncio.sleep(0.05)
    async with running_agent(kube, tmp_path, **options) as agent:
        endpoints = agent.endpoints
        assert endpoints is not None
        await until(lambda: serving(agent) and endpoints.synced())
        assert 3000 < agent.allocator.quarantined()[POOL[0]] < 3600
        v4, _ = agent.allocator.allocate_next("cni:next:eth0")
        assert v4 is not None and v4.address == POOL[1]
        # Saved again with the first release's time: the wait goes on, it did not start over.
        assert state.read().quarantine == {POOL[0]: released}
