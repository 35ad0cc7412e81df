"""The pool of ready interfaces: a joining node's first new interface is one attach; refills wait for
the nodes, stay within the quota, and nothing is ever lost to a failed call."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import pytest
import yaml

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.model import CreateInterface, ownership_tags, ready_interface_tags
from eni_ipam.core.readypool import TAKEN_GRACE, ReadyPool
from eni_ipam.core.settings import Settings
from eni_ipam.core.view import CloudView
from eni_ipam.simulator.scenario import parse_scenario
from eni_ipam.simulator.simulate import Outcome, simulate
from providers.sim.cloud import SimCloud
from providers.sim.provider import SimProvider
from tests.providers.sim import make_cloud

# -- black box: the simulator ------------------------------------------------------------------------

JOIN = """
settings: {{ready_interfaces_enabled: {enabled}, ready_interfaces_per_subnet: 3}}
cloud:
  vpcs: [{{id: vpc-1, cidr: 10.0.0.0/16}}]
  subnets: [{{id: s-1, vpc: vpc-1, zone: z, cidr: 10.0.0.0/22}}]
  security_groups: [{{id: sg-1, vpc: vpc-1}}]
  instances:
    - {{id: i-1, type: m5.large, subnet: s-1, security_groups: [sg-1]}}
    - {{id: i-2, type: m5.large, subnet: s-1, security_groups: [sg-1]}}
    - {{id: i-3, type: m5.large, subnet: s-1, security_groups: [sg-1]}}
nodes:
  - {{name: node1, instance: i-1, first_interface_index: 1, min_allocate: 9}}
steps:
  - converge: 60s
  - advance: 30s
  {before}
  - add_node: {{name: node2, instance: i-2, first_interface_index: 1, min_allocate: 9}}
  - add_node: {{name: node3, instance: i-3, first_interface_index: 1, min_allocate: 9}}
  - converge: 60s
  {after}
"""


def run(enabled: bool, before: str = "", after: str = "") -> Outcome:
    text = JOIN.format(enabled=str(enabled).lower(), before=before, after=after)
    return simulate(parse_scenario(yaml.safe_load(text)))


def calls_after(outcome: Outcome, step: int) -> dict[str, int]:
    """Mutating calls between the end of ``step`` and the end of the run."""
    first, last = outcome.results[step].state["api_calls"], outcome.results[-1].state["api_calls"]
    mutating = ("Create", "Attach", "Modify", "Assign", "Delete", "Detach")
    return {
        op: n - first.get(op, 0)
        for op, n in last.items()
        if op.startswith(mutating) and n != first.get(op, 0)
    }


def test_joining_nodes_take_ready_interfaces_with_one_attach_each() -> None:
    outcome = run(True, after="- expect: {node2: {available: 9, interfaces: 2}, node3: {available: 9}}")
    assert outcome.passed, [f for r in outcome.results for f in r.failures]
    assert calls_after(outcome, 1) == {"AttachNetworkInterface": 2}


def test_without_the_pool_joining_nodes_create_attach_and_mark() -> None:
    outcome = run(False, after="- expect: {node2: {available: 9, interfaces: 2}, node3: {available: 9}}")
    assert outcome.passed, [f for r in outcome.results for f in r.failures]
    assert calls_after(outcome, 1) == {
        "CreateNetworkInterface": 2,
        "AttachNetworkInterface": 2,
        "ModifyNetworkInterfaceAttribute": 2,
    }


def test_the_pool_is_refilled_to_its_target_once_no_node_waits() -> None:
    outcome = run(
        True,
        after="""- advance: 20s
  - expect:
      metrics:
        'eni_ipam_ready_interfaces{subnet="s-1"}': 3
        'eni_ipam_ready_interface_takes_total{subnet="s-1",outcome="attached"}': 2
        'eni_ipam_ready_interface_refills_total{subnet="s-1",outcome="created"}': 5""",
    )
    assert outcome.passed, [f for r in outcome.results for f in r.failures]


def test_a_failed_attach_leaves_the_interface_in_the_pool_and_the_node_retries() -> None:
    outcome = run(
        True,
        before="- cloud: {fail: {AttachNetworkInterface: {count: 1, code: RequestLimitExceeded}}}",
        after="""- converge: 60s
  - expect:
      node2: {available: 9, interfaces: 2}
      node3: {available: 9, interfaces: 2}
      api_calls: {DeleteNetworkInterface: 0}
      metrics:
        'eni_ipam_ready_interface_takes_total{subnet="s-1",outcome="RequestLimitExceeded"}': 1
        'eni_ipam_ready_interface_takes_total{subnet="s-1",outcome="attached"}': 2""",
    )
    assert outcome.passed, [f for r in outcome.results for f in r.failures]
    assert calls_after(outcome, 1).get("CreateNetworkInterface", 0) == 0  # none made on the node's path


# -- white box: one pool over the in-memory cloud ----------------------------------------------------


def request(count: int = 4) -> CreateInterface:
    return CreateInterface(subnet_id="s-1", security_groups=("sg-1",), device_index=1, count=count)


@dataclasses.dataclass
class World:
    cloud: SimCloud
    provider: SimProvider
    view: CloudView
    waiting: bool = False
    known: int = 0

    def pool(self, **settings: object) -> ReadyPool:
        values = {"ready_interfaces_enabled": True, "ready_interfaces_per_subnet": 3, "cluster_name": "c1"}
        return ReadyPool(
            self.provider,
            settings=Settings(**{**values, **settings}),
            view=self.view,
            clock=LoopClock(),
            metrics=Metrics(),
            demand=lambda: [request()],
            waiting=lambda: self.waiting,
            known_interfaces=lambda: self.known,
        )

    async def ready_in_cloud(self) -> list[str]:
        listed = await self.provider.list_detached_interfaces(tags=ready_interface_tags(cluster_name="c1"))
        return sorted(i.id for i in listed)


@pytest.fixture
async def world() -> World:
    cloud = make_cloud()
    cloud.add_instance("i-1", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    provider = SimProvider(cloud, clock=LoopClock(), metrics=Metrics())
    view = CloudView(provider, clock=LoopClock(), metrics=Metrics())
    view.apply(await provider.resync())
    return World(cloud, provider, view)


async def test_a_round_fills_every_wanted_key_to_its_target(world: World) -> None:
    pool = world.pool()
    done = await pool.run_once()
    assert len(done.created) == 3 and pool.count() == 3
    assert await world.ready_in_cloud() == sorted(done.created)
    assert all(len(world.cloud.interface_view(i).addresses) == 4 for i in done.created)


async def test_refills_wait_while_a_node_waits_for_addresses(world: World) -> None:
    world.waiting = True
    pool = world.pool()
    assert (await pool.run_once()).created == ()
    world.waiting = False
    assert len((await pool.run_once()).created) == 3


async def test_refills_stop_short_of_the_region_quota(world: World) -> None:
    world.known = 98
    pool = world.pool(region_interface_quota=100)
    assert len((await pool.run_once()).created) == 1
    assert len((await pool.run_once()).created) == 0


async def test_ready_interfaces_max_bounds_the_whole_pool(world: World) -> None:
    pool = world.pool(ready_interfaces_max=2)
    assert len((await pool.run_once()).created) == 2


@pytest.mark.parametrize(
    ("change", "left"),
    [
        (lambda w: w.pool(ready_interfaces_per_subnet=1), 1),
        (lambda w: w.pool(ready_interfaces_max=0), 0),
    ],
    ids=["shrunk", "no-room"],
)
async def test_a_smaller_target_deletes_the_surplus(
    world: World, change: Callable[[World], ReadyPool], left: int
) -> None:
    await world.pool().run_once()
    smaller = change(world)
    done = await smaller.run_once()
    assert len(done.deleted) == 3 - left and done.created == ()
    assert len(await world.ready_in_cloud()) == left
    assert world.cloud.calls["DeleteNetworkInterface"] == 3 - left


async def test_a_disabled_pool_deletes_what_garbage_collection_hands_it(world: World) -> None:
    await world.pool().run_once()
    disabled = world.pool(ready_interfaces_enabled=False)
    listed = await world.provider.list_detached_interfaces(tags=ownership_tags("c1"))
    await disabled.drain(listed)
    assert await world.ready_in_cloud() == []


async def test_a_take_fits_the_request_and_the_instance_type(world: World) -> None:
    pool = world.pool()
    await pool.run_once()
    limits = await world.provider.instance_limits(instance_type="m5.large")
    assert pool.take(request(count=5), limits=limits) is None  # carries 4: too few
    assert pool.take(request(count=4), limits=limits, most=3) is None  # 4 would pass max_allocate
    other = dataclasses.replace(request(), subnet_id="s-other")
    assert pool.take(other, limits=limits) is None
    taken = pool.take(request(count=2), limits=limits)
    assert taken is not None and pool.count() == 2
    pool.give_back(taken)
    assert pool.count() == 3


async def test_an_interface_taken_outside_the_pool_is_its_instances_at_the_next_listing(world: World) -> None:
    pool = world.pool()
    done = await pool.run_once()
    stolen = done.created[0]
    await world.cloud.attach_network_interface(interface_id=stolen, instance_id="i-1", device_index=1)
    await pool.relist()
    assert pool.count() == 2
    instance = await world.provider.describe_instance(instance_id="i-1")
    assert instance is not None and instance.interface(stolen) is not None


async def test_an_interface_whose_create_answer_was_lost_is_found_by_the_listing(world: World) -> None:
    pool = world.pool(ready_interfaces_per_subnet=1)
    made = await world.provider.create_ready_interface(
        subnet_id="s-1",
        security_groups=["sg-1"],
        count=4,
        tags=ready_interface_tags(cluster_name="c1"),
        token="t",
    )
    done = await pool.run_once()
    assert done.created == () and pool.count() == 1
    assert await world.ready_in_cloud() == [made.id]


async def test_refills_leave_the_subnets_reserve_to_the_pods() -> None:
    cloud = make_cloud(available=40)  # s-1: a /24 whose reserve is 16 (a sixteenth)
    cloud.add_instance("i-1", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    provider = SimProvider(cloud, clock=LoopClock(), metrics=Metrics())
    view = CloudView(provider, clock=LoopClock(), metrics=Metrics())
    view.apply(await provider.resync())
    free = view.planner_subnets()["s-1"].available
    world = World(cloud, provider, view)
    done = await world.pool(ready_interfaces_per_subnet=8).run_once()
    # Each ready interface takes 5 addresses (4 and its primary): as many as fit above the reserve.
    assert len(done.created) == (free - 16) // 5 < 8
    assert view.planner_subnets()["s-1"].available >= 16


@pytest.mark.looptime
async def test_a_taken_interface_comes_back_to_the_pool_when_its_instance_terminates(world: World) -> None:
    pool = world.pool()
    await pool.run_once()
    limits = await world.provider.instance_limits(instance_type="m5.large")
    taken = pool.take(request(), limits=limits)
    assert taken is not None
    await world.provider.attach_interface(interface=taken, instance_id="i-1", device_index=1)
    await pool.relist()
    assert pool.count() == 2
    # EC2 detaches an interface that is not delete-on-termination when its instance goes, and keeps
    # it with its addresses and tags: it is ready again.
    world.cloud.terminate_instance("i-1")
    await asyncio.sleep(TAKEN_GRACE)
    await pool.relist()
    assert pool.count() == 3 and taken.id in await world.ready_in_cloud()
