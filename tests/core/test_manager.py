"""The NodeManager: gating, ordering, backoff isolation, re-fetching, cancellation."""

import asyncio
import dataclasses

import pytest
import structlog.testing

from eni_ipam.core import errors
from eni_ipam.core.node import CAPACITY_REASON_HOLD, PassResult
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeResource, NodeSpec
from tests.core import manager_running

pytestmark = pytest.mark.looptime


def assign_attempts(world) -> list[str]:
    """The instance of every AssignPrivateIpAddresses call from now on, in order (read off the
    in-memory cloud's gate, which every call passes)."""
    seen: list[str] = []

    def watch(operation, request):
        if operation == "AssignPrivateIpAddresses":
            interface = world.cloud.interface_view(request["interface_id"])
            seen.append(interface.instance_id if interface else request["interface_id"])

    world.cloud.gate.watch(watch)
    return seen


async def test_no_mutation_before_the_initial_resync_succeeds(make_world):
    async with make_world(start=False) as world:
        world.cloud.fail_next("DescribeSubnets", 3)  # the first three resyncs fail
        world.add_node("n1")
        async with world.cluster.running():
            await asyncio.sleep(0.5)
            assert not world.manager.ready
            assert world.cloud.calls["AssignPrivateIpAddresses"] == 0
            await world.settle()
            assert world.manager.ready
            assert world.manager.nodes["n1"].stats.available == 8


async def test_the_resyncs_age_and_failures_in_a_row_are_what_a_scrape_reads(make_world):
    async with make_world(Settings(resync_interval=60), start=False) as world:
        sample = world.metrics.sample
        world.cloud.fail_next("DescribeSubnets", 3)  # the first three resyncs fail
        world.add_node("n1")
        async with world.cluster.running():
            await asyncio.sleep(0.5)
            assert sample("eni_ipam_resync_failing") >= 1  # failing in a row, none succeeded yet
            assert sample("eni_ipam_resync_age_seconds") >= 0.5  # since the manager began
            await world.settle()
            assert sample("eni_ipam_resync_failing") == 0  # reset by the first success
            listed = sample("eni_ipam_resync_age_seconds")
            await asyncio.sleep(30)
            assert sample("eni_ipam_resync_age_seconds") == pytest.approx(listed + 30)
            failed = sample("eni_ipam_resync_failures_total")
            world.cloud.fail_next("DescribeSubnets", 100)  # every periodic resync fails from now on
            await asyncio.sleep(150)
            in_a_row = sample("eni_ipam_resync_failures_total") - failed
            assert in_a_row >= 2 and sample("eni_ipam_resync_failing") == in_a_row
            assert sample("eni_ipam_resync_age_seconds") >= listed + 180


async def test_deficit_node_is_served_before_idle_and_excess_nodes(make_world):
    async with make_world(Settings(parallel_workers=1), start=False) as world:
        order = assign_attempts(world)
        world.add_node("small", pre_allocate=2)
        world.add_node("big", pre_allocate=9)
        world.add_node("mid", pre_allocate=5)
        async with world.cluster.running():
            await world.settle()
        assert order == ["i-big", "i-mid", "i-small"]


async def test_failing_node_backs_off_without_slowing_the_others(make_world):
    async with make_world(Settings(parallel_workers=1)) as world:
        attempts = assign_attempts(world)
        world.add_node("bad")
        world.cloud.fail_while("AssignPrivateIpAddresses", world.cloud.on_interfaces_of("i-bad"))
        await asyncio.sleep(0.1)
        world.add_node("good")
        loop = asyncio.get_running_loop()
        start = loop.time()
        while world.manager.nodes["good"].stats.available < 8:
            await asyncio.sleep(0.01)
        assert loop.time() - start < 0.5  # served at once despite the other node failing
        await asyncio.sleep(60)
        tries = attempts.count("i-bad")
        # Backoff 1, 2, 4, 8, 16, 32 s (jittered into [d/2, d]): a handful of tries in a minute, not hundreds.
        assert 5 <= tries <= 12
        schedule = world.manager.schedule("bad")
        assert schedule is not None and schedule.failures == tries


async def test_a_failing_node_has_a_series_of_its_failures_in_a_row_by_reason_until_a_pass_succeeds(
    make_world,
):
    async with make_world(Settings(parallel_workers=1)) as world:
        sample = world.metrics.sample
        world.add_node("bad")
        world.add_node("good")
        world.cloud.fail_while("AssignPrivateIpAddresses", world.cloud.on_interfaces_of("i-bad"))
        await asyncio.sleep(30)
        failures = world.manager.schedule("bad").failures
        assert failures >= 3
        assert sample("eni_ipam_node_failing", {"node": "bad", "reason": "TransientError"}) == failures
        assert sample("eni_ipam_node_failing", {"node": "good", "reason": "TransientError"}) is None
        world.cloud.clear_faults()
        await asyncio.sleep(60)
        assert world.manager.nodes["bad"].stats.needed == 0
        assert sample("eni_ipam_node_failing", {"node": "bad", "reason": "TransientError"}) is None


async def test_the_schedule_exports_its_backlog_its_nodes_in_backoff_and_its_oldest_deficit(make_world):
    async with make_world(Settings(parallel_workers=1)) as world:
        sample = world.metrics.sample
        world.add_node("bad")
        world.cloud.fail_while("AssignPrivateIpAddresses", world.cloud.on_interfaces_of("i-bad"))
        await asyncio.sleep(30)
        assert sample("eni_ipam_nodes_in_backoff") == 1 and sample("eni_ipam_nodes_waiting") == 0
        assert 29 <= sample("eni_ipam_oldest_deficit_seconds") <= 31  # short since it joined
        passes = sample("eni_ipam_node_maintenance_duration_seconds_count")
        assert passes == sample("eni_ipam_node_maintenance_passes_total") and passes >= 3
        world.cloud.clear_faults()
        await asyncio.sleep(60)
        assert sample("eni_ipam_nodes_in_backoff") == 0 and sample("eni_ipam_oldest_deficit_seconds") == 0
        world.manager.delete("bad")
        for n in range(3):
            world.add_node(f"n{n}")
        world.manager.trigger("n0")
        assert sample("eni_ipam_nodes_waiting") == sum(
            world.manager.schedule(f"n{n}").queued for n in range(3)
        )


async def test_failing_node_waits_at_least_what_the_cloud_asked(make_world):
    async with make_world(Settings(parallel_workers=1)) as world:
        attempts = assign_attempts(world)
        world.add_node("bad")
        world.cloud.fail_while(
            "AssignPrivateIpAddresses", world.cloud.on_interfaces_of("i-bad"), "Throttling", retry_after=30.0
        )
        await asyncio.sleep(65)
        # Without Retry-After the backoff (1, 2, 4, 8, 16, 32 s) would try about six times.
        assert 2 <= attempts.count("i-bad") <= 3


async def test_instance_missing_from_resync_is_refetched_not_zeroed(make_world):
    async with make_world() as world:
        world.add_node("n1")
        await world.settle()

        async def listing_without_n1(operation, request, proceed):
            answer = await proceed()
            by_id = request.get("instance_ids") or "instance-id" in (request.get("filters") or {})
            if operation == "DescribeInstances" and not by_id:  # the full listing, not a read by id
                answer = dataclasses.replace(answer, items=tuple(i for i in answer.items if i.id != "i-n1"))
            return answer

        world.cloud.gate.around(listing_without_n1)  # a listing that missed the instance
        describes = world.cloud.calls["DescribeNetworkInterfaces"]
        await world.manager.resync()
        node = world.manager.nodes["n1"]
        assert node.needs_refresh
        await world.settle()
        assert world.cloud.calls["DescribeNetworkInterfaces"] > describes + 1  # the per-instance sync ran
        assert node.stats.available == 8 and node.stats.needed == 0
        assert world.cloud.calls["AssignPrivateIpAddresses"] == 1  # nothing was re-allocated


async def test_unknown_limits_leave_the_node_alone_and_say_so(make_world):
    async with make_world() as world:
        world.add_node("n1", type="x99.hypothetical")  # in no table the cloud or eni-ipam knows
        await world.settle()
        assert world.cloud.calls["AssignPrivateIpAddresses"] == 0
        assert "unknown" in world.store.statuses["n1"].message


async def test_upsert_triggers_allocation_at_once(make_world):
    async with make_world() as world:
        world.add_node("n1")
        await world.settle()
        loop = asyncio.get_running_loop()
        start = loop.time()
        world.side.update("n1", used=12)
        await world.settle()
        assert world.manager.nodes["n1"].stats.available == 20
        assert loop.time() - start < 1.0  # no waiting for the minute-long resync


async def test_periodic_resync_runs_every_interval(make_world):
    async with make_world(Settings(resync_interval=10)) as world:
        world.add_node("n1")
        await asyncio.sleep(35)
        assert world.metrics.sample("eni_ipam_resync_total") == 4  # initial + 3


async def test_steady_state_makes_no_mutating_calls_and_reads_do_not_grow_with_nodes(make_world):
    async with make_world(Settings(resync_interval=10)) as world:
        for n in range(30):
            world.add_node(f"n{n}")
        await world.settle()
        before = dict(world.cloud.calls)
        await asyncio.sleep(100)
        after = world.cloud.calls
        mutating = [op for op in after if not op.startswith("Describe")]
        assert all(after[op] == before.get(op, 0) for op in mutating)
        reads = sum(after[op] - before.get(op, 0) for op in after if op.startswith("Describe"))
        assert reads <= 10 * 4  # ten resyncs, a handful of paginated listings each


async def test_deleted_node_metrics_are_removed(make_world):
    async with make_world() as world:
        world.add_node("n1")
        await world.settle()
        assert world.metrics.sample("eni_ipam_node_ips", {"node": "n1", "type": "available"}) == 8
        world.store.remove("n1")
        assert world.metrics.sample("eni_ipam_node_ips", {"node": "n1", "type": "available"}) is None
        assert "n1" not in world.manager.nodes


async def test_cancelling_the_manager_leaves_no_stray_tasks(make_world):
    async with make_world() as world:
        world.add_node("n1")
        await world.settle()
    await asyncio.sleep(0)
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert others == []


async def test_time_to_ip_is_observed_when_a_deficit_is_resolved(make_world):
    async with make_world() as world:
        world.add_node("n1")
        await world.settle()
        assert world.metrics.sample("eni_ipam_time_to_ip_seconds_count") == 1


async def test_node_changing_instance_is_re_read(make_world):
    async with make_world() as world:
        world.add_node("n1")
        await world.settle()
        world.cloud.add_instance("i-other", type="m5.large", subnet="s-1", security_groups=["sg-1"])
        world.side.update("n1", instance_id="i-other")
        await world.settle()
        assert world.manager.nodes["n1"].instance.id == "i-other"
        assert world.cloud.instance_view("i-other").interfaces[0].pool_size == 8


def test_resource_defaults_are_empty():
    resource = NodeResource(name="n", instance_id="i")
    assert resource.used == 0 and not resource.in_use and not resource.release_answers


async def test_a_bug_in_one_node_pass_does_not_stop_the_manager(make_world):
    class Buggy:
        """A provider with a bug (not a cloud fault): assigning to one instance raises RuntimeError."""

        def __init__(self, inner):
            self._inner = inner

        def __getattr__(self, name):
            return getattr(self._inner, name)

        async def assign_addresses(self, *, interface_id, count, prefixes=False):
            if interface_id == self._inner.cloud.instance_view("i-bad").interfaces[0].id:
                raise RuntimeError("unexpected")
            return await self._inner.assign_addresses(
                interface_id=interface_id, count=count, prefixes=prefixes
            )

    async with make_world(provider_wrapper=Buggy) as world:
        world.add_node("bad")
        world.add_node("good")
        await asyncio.sleep(5)
        assert world.cluster.task is not None and not world.cluster.task.done()
        assert world.manager.nodes["good"].stats.available == 8
        assert (
            world.metrics.sample("eni_ipam_node_maintenance_failures_total", {"reason": "RuntimeError"}) >= 2
        )


async def test_an_assign_that_failed_but_landed_is_seen_before_the_next_plan(make_world):
    async with make_world() as world:
        world.cloud.fail_next("AssignPrivateIpAddresses", code="InternalError", applied=True)
        world.add_node("n1")
        await world.settle()
        node = world.manager.nodes["n1"]
        # The node re-read its instance after the failure instead of assigning a second pool.
        assert world.cloud.calls["AssignPrivateIpAddresses"] == 1
        assert node.stats.available == 8 and node.stats.needed == 0


async def test_a_failed_pass_asking_for_a_sooner_pass_still_waits_out_its_backoff(make_world):
    async with make_world() as world:
        world.add_node("n1")
        await world.settle()
        node = world.manager.nodes["n1"]
        passes = 0

        async def wants_one_second_but_was_told_thirty() -> PassResult:
            nonlocal passes
            passes += 1
            # A release delay runs out in 1 s, but the cloud said: come back in 30 s.
            throttled = errors.Throttled("slow down", code="Throttled", retry_after=30.0)
            return PassResult(status=None, again_at=world.clock.monotonic() + 1.0, error=throttled)

        node.maintain = wants_one_second_but_was_told_thirty  # type: ignore[method-assign]
        world.manager.trigger("n1")
        await asyncio.sleep(5)
        assert passes == 1
        schedule = world.manager.schedule("n1")
        assert schedule is not None and schedule.not_before >= world.clock.monotonic() + 24.0
        await asyncio.sleep(30)
        assert passes == 2


async def test_a_node_removed_during_its_pass_leaves_no_gauges_and_can_be_awaited(make_world):
    async with make_world() as world:
        await world.settle()
        world.cloud.set_latency("AssignPrivateIpAddresses", 5.0)
        started = world.clock.monotonic()
        world.add_node("n1")
        await asyncio.sleep(1.0)  # the pass is waiting on the cloud
        departure = world.manager.delete("n1")
        assert departure is not None and departure.running
        await departure.idle()
        assert not departure.running
        assert world.clock.monotonic() - started >= 5.0  # idle() returned when the pass ended, not before
        assert world.metrics.sample("eni_ipam_node_ips", {"node": "n1", "type": "available"}) is None
        assert world.manager.delete("n1") is None


async def test_an_event_caused_by_a_pass_own_status_waits_for_the_minimum_interval(make_world):
    async with make_world(Settings(trigger_min_interval=0.5)) as world:
        world.add_node("n1")
        await world.settle()
        node = world.manager.nodes["n1"]
        maintain = node.maintain
        starts: list[float] = []

        async def timed() -> PassResult:
            starts.append(world.clock.monotonic())
            return await maintain()

        node.maintain = timed  # type: ignore[method-assign]
        await asyncio.sleep(1.0)  # out of the minimum interval of the last pass
        world.side.update("n1", used=12)  # the pass allocates; the node side answers its status
        await world.settle()
        assert len(starts) >= 2  # the answer (addresses now in use) made one follow-up pass
        assert starts[1] - starts[0] >= 0.5  # ...coalesced behind the minimum interval, not at once


async def test_a_node_that_cannot_grow_says_why_and_stops_saying_it_once_it_can(make_world):
    async with make_world() as world:
        # No security group named, none tagged, none on the primary interface: no new interface.
        world.cloud.add_instance("i-bare", type="m5.large", subnet="s-1", security_groups=[])
        world.side.add(NodeResource(name="bare", instance_id="i-bare", spec=NodeSpec(pre_allocate=20)))
        await world.settle()
        stats = world.manager.nodes["bare"].stats
        assert stats.needed > 0 and not stats.at_capacity
        assert world.metrics.samples("eni_ipam_node_at_capacity") == {
            (("node", "bare"), ("reason", "security-groups")): 1.0
        }
        # The pods go: nothing is needed any more. The reason holds a while (the next pod may come
        # at once), then goes: nothing stops the node from growing.
        world.side.update("bare", spec=world.store.resources["bare"].spec.replace(pre_allocate=2))
        await world.settle()
        assert world.metrics.samples("eni_ipam_node_at_capacity") == {
            (("node", "bare"), ("reason", "security-groups")): 1.0
        }
        await asyncio.sleep(CAPACITY_REASON_HOLD + world.manager.settings.resync_interval)
        assert world.metrics.samples("eni_ipam_node_at_capacity") == {}
        assert world.metrics.totals_problems() == []


def at_capacity(world) -> dict[str, str]:
    """Node → the capacity reason its series report."""
    return {
        dict(labels)["node"]: dict(labels)["reason"]
        for labels in world.metrics.samples("eni_ipam_node_at_capacity")
    }


async def test_a_node_at_a_full_subnet_keeps_its_reason_while_pods_come_and_go(make_world):
    async with make_world() as world:
        world.add_node("n1", pre_allocate=8)
        await world.settle()
        world.cloud.set_subnet_available("s-1", 0)  # others took the rest of the subnet
        changes = 0
        last = ""
        for minute in range(20):
            # Churn: a pod comes (a deficit), then leaves (none), each minute.
            world.side.update("n1", used=4 if minute % 2 == 0 else 0)
            await asyncio.sleep(30)
            reason = at_capacity(world).get("n1", "")
            changes += reason != last
            last = reason
            await asyncio.sleep(30)
        assert last == "subnet" and changes == 1  # on once, and never off again


async def test_the_subnet_reason_comes_from_the_cloud_too_and_ends_when_the_deficit_is_placed(make_world):
    async with make_world() as world:
        world.add_node("n1", pre_allocate=8)
        await world.settle()
        # The view still shows room; the cloud says the subnet is full at every call.
        world.cloud.fail_while(
            "AssignPrivateIpAddresses", lambda request: True, "InsufficientFreeAddressesInSubnet"
        )
        world.side.update("n1", used=6)
        await asyncio.sleep(10)
        assert at_capacity(world) == {"n1": "subnet"}
        world.cloud.clear_faults()
        await asyncio.sleep(world.manager.settings.backoff_max)
        assert world.manager.nodes["n1"].stats.needed == 0
        assert at_capacity(world) == {}  # placed in full: no hold


async def test_a_full_node_with_pods_waiting_exports_them_as_needed(make_world):
    async with make_world() as world:
        world.add_node("n1", type="t3.nano", pre_allocate=2)  # 2 interfaces × 2 addresses
        await world.settle()
        node = world.manager.nodes["n1"]
        world.side.update("n1", used=node.stats.capacity)
        await world.settle()
        assert node.stats.at_capacity and node.stats.needed == 0  # nothing more can be placed
        assert world.metrics.sample("eni_ipam_node_ips", {"node": "n1", "type": "needed"}) == 0
        world.side.update("n1", pending_pods=3)
        await world.settle()
        assert world.metrics.sample("eni_ipam_node_ips", {"node": "n1", "type": "needed"}) == 3
        assert world.metrics.sample("eni_ipam_ips", {"type": "needed"}) == 3
        assert at_capacity(world) == {"n1": "instance-limit"}
        assert world.metrics.totals_problems() == []


async def test_every_pass_that_ends_is_counted_failed_ones_included(make_world):
    async with make_world() as world:
        world.add_node("n1")
        await world.settle()
        passes = world.count_passes("n1")
        before = world.metrics.sample("eni_ipam_node_maintenance_passes_total")
        world.cloud.fail_next("AssignPrivateIpAddresses", 1)
        world.side.update("n1", used=6)
        await world.settle()
        assert passes() >= 2  # the failed pass and its retry
        assert world.metrics.sample("eni_ipam_node_maintenance_passes_total") == before + passes()
        assert (
            world.metrics.sample("eni_ipam_node_maintenance_failures_total", {"reason": "TransientError"})
            == 1
        )


class _Held:
    """A provider whose resync hands back a snapshot the test holds (identity preserved)."""

    name = "held"

    def __init__(self, snapshot) -> None:
        self.snapshot = snapshot

    async def resync(self):
        return self.snapshot


class _Sink:
    def publish(self, name, status) -> None:
        pass


def _cluster(nodes: int):
    from eni_ipam.adapters.metrics import Metrics
    from eni_ipam.core.clock import LoopClock
    from eni_ipam.core.manager import NodeManager
    from eni_ipam.core.model import CloudSnapshot, Instance, InstanceLimits, Interface, Subnet

    limits = InstanceLimits(adapters=4, ipv4_per_interface=15)
    instances = {
        f"i-{n}": Instance(
            id=f"i-{n}",
            type="m5.2xlarge",
            vpc_id="vpc",
            zone="z",
            subnet_id="s-1",
            interfaces=(
                Interface(
                    id=f"eni-{n}",
                    device_index=0,
                    subnet_id="s-1",
                    primary_ip=f"10.0.{n}.4",
                    addresses=tuple(f"10.0.{n}.{k}" for k in range(5, 15)),
                    instance_id=f"i-{n}",
                ),
            ),
        )
        for n in range(nodes)
    }
    subnet = Subnet(id="s-1", vpc_id="vpc", zone="z", cidr="10.0.0.0/16", available=1000)
    snapshot = CloudSnapshot(
        subnets={"s-1": subnet}, security_groups={}, instances=instances, limits={"m5.2xlarge": limits}
    )
    manager = NodeManager(
        provider=_Held(snapshot),  # type: ignore[arg-type]
        settings=Settings(),
        metrics=Metrics(),
        clock=LoopClock(),
        status_sink=_Sink(),
    )
    for n in range(nodes):
        manager.upsert(NodeResource(name=f"n{n}", instance_id=f"i-{n}", spec=NodeSpec(pre_allocate=2)))
    return manager, snapshot


async def test_a_resync_recomputes_only_the_nodes_whose_instance_changed(monkeypatch):
    import eni_ipam.core.node as node_module

    manager, snapshot = _cluster(20)
    await manager.apply_resync(snapshot, started=0.0)
    computed: list[str] = []
    real = node_module.node_stats

    def counting(spec, instance, limits, **kw):
        computed.append(instance.id)
        return real(spec, instance, limits, **kw)

    monkeypatch.setattr(node_module, "node_stats", counting)
    await manager.apply_resync(snapshot, started=1.0)  # the same objects: nothing changed
    assert computed == []
    changed = dict(snapshot.instances)
    changed["i-3"] = dataclasses.replace(changed["i-3"], interfaces=changed["i-3"].interfaces[:1])
    await manager.apply_resync(dataclasses.replace(snapshot, instances=changed), started=2.0)
    assert computed == ["i-3"]


async def test_a_resync_visits_a_blocked_node_even_when_its_instance_did_not_change(monkeypatch):
    manager, snapshot = _cluster(5)
    await manager.apply_resync(snapshot, started=0.0)
    manager.nodes["n2"].blocked = "no-subnet"  # its last plan found no room: the fresh view may have some
    computed = _counting_stats(monkeypatch)
    await manager.apply_resync(snapshot, started=1.0)
    assert computed == ["i-2"] and manager.nodes["n2"].blocked == ""


def _counting_stats(monkeypatch) -> list[str]:
    """Instance ids of every node whose stats are computed from now on."""
    import eni_ipam.core.node as node_module

    computed: list[str] = []
    real = node_module.node_stats
    monkeypatch.setattr(
        node_module,
        "node_stats",
        lambda spec, inst, lim, **kw: computed.append(inst.id) or real(spec, inst, lim, **kw),
    )
    return computed


def _listing(snapshot, instances, since, said=()):
    """``snapshot`` listing ``instances``, saying that those named in ``said`` changed since ``since``."""
    from eni_ipam.core.model import Changes

    changes = Changes(since=since, instance_ids=frozenset(said))
    return dataclasses.replace(snapshot, instances=instances, changes=changes)


async def test_a_resync_that_says_what_changed_looks_only_at_those_nodes(monkeypatch):
    manager, snapshot = _cluster(20)
    await manager.apply_resync(snapshot, started=0.0)
    computed = _counting_stats(monkeypatch)
    same = dataclasses.replace(snapshot.instances["i-5"])  # equal, another object, and not said
    grown = dataclasses.replace(snapshot.instances["i-3"], interfaces=())
    second = _listing(
        snapshot, {**snapshot.instances, "i-3": grown, "i-5": same}, snapshot.instances, {"i-3"}
    )
    await manager.apply_resync(second, started=1.0)
    assert computed == ["i-3"]
    assert manager.nodes["n5"].instance is snapshot.instances["i-5"]  # never looked at


async def test_a_resync_whose_base_was_not_applied_looks_at_every_node(monkeypatch):
    manager, snapshot = _cluster(5)
    await manager.apply_resync(snapshot, started=0.0)
    computed = _counting_stats(monkeypatch)
    same = dataclasses.replace(snapshot.instances["i-4"])
    unapplied = dict(snapshot.instances)  # a snapshot the manager never applied
    await manager.apply_resync(
        _listing(snapshot, {**snapshot.instances, "i-4": same}, unapplied, {"i-4"}), started=1.0
    )
    assert manager.nodes["n4"].instance is same and computed == ["i-4"]


async def test_a_node_whose_record_changed_is_looked_at_by_the_next_resync_that_says_what_changed(
    monkeypatch,
):
    manager, snapshot = _cluster(5)
    await manager.apply_resync(snapshot, started=0.0)
    computed = _counting_stats(monkeypatch)
    # n2 now names i-4's instance (replaced): forgotten its view, it reads the listing's again.
    manager.upsert(dataclasses.replace(manager.nodes["n2"].resource, instance_id="i-4"))
    await manager.apply_resync(_listing(snapshot, snapshot.instances, snapshot.instances), started=1.0)
    assert manager.nodes["n2"].instance is snapshot.instances["i-4"] and "i-4" in computed
    computed.clear()
    # Found by its new instance id: i-4 changing reaches both nodes naming it, i-2 changing neither.
    changed = {i: dataclasses.replace(snapshot.instances[i], interfaces=()) for i in ("i-4", "i-2")}
    third = _listing(snapshot, {**snapshot.instances, **changed}, snapshot.instances, changed)
    await manager.apply_resync(third, started=2.0)
    assert sorted(computed) == ["i-4", "i-4"]


async def test_a_node_left_unsure_is_looked_at_by_every_resync_until_its_instance_is_listed(monkeypatch):
    manager, snapshot = _cluster(3)
    await manager.apply_resync(snapshot, started=0.0)
    gone = {k: v for k, v in snapshot.instances.items() if k != "i-1"}
    base = snapshot.instances
    for started in (1.0, 2.0):
        listed = _listing(snapshot, dict(gone), base, {"i-1"} if started == 1.0 else ())
        await manager.apply_resync(listed, started=started)
        assert manager.nodes["n1"].needs_refresh  # missing from the listing: read it again
        base = listed.instances
    computed = _counting_stats(monkeypatch)
    await manager.apply_resync(_listing(snapshot, snapshot.instances, base), started=3.0)
    assert computed == ["i-1"] and not manager.nodes["n1"].needs_refresh


@pytest.mark.parametrize(
    ("floor", "cost", "share", "interval"),
    [
        (60.0, 0.5, 0.10, 60.0),  # a small cluster: the floor
        (60.0, 15.0, 0.10, 150.0),  # 15 s of CPU at 10 %: every 150 s
        (60.0, 200.0, 0.10, 900.0),  # never longer than 15 minutes
        (1200.0, 200.0, 0.10, 1200.0),  # unless the floor itself is longer
        (60.0, 15.0, 0.0, 60.0),  # adaptation off
        (60.0, 0.0, 0.10, 60.0),  # a virtual clock measures nothing
    ],
)
def test_the_resync_interval_keeps_resyncs_within_their_share_of_a_core(floor, cost, share, interval):
    from eni_ipam.core.manager import resync_interval

    assert resync_interval(floor=floor, cost=cost, share=share) == interval


async def test_a_costly_resync_pushes_the_next_one_back(monkeypatch):
    manager, _ = _cluster(3)
    cpu = iter([10.0, 25.0])  # the resync took 15 CPU seconds
    monkeypatch.setattr(manager.clock, "cpu_seconds", lambda: next(cpu))
    await manager.resync()
    assert manager.next_resync_in == 150.0


async def test_a_pool_changed_behind_our_back_is_published_at_the_resync_that_sees_it():
    manager, snapshot = _cluster(3)
    published: list[str] = []
    manager.status_sink = type("Sink", (), {"publish": lambda self, name, status: published.append(name)})()
    await manager.apply_resync(snapshot, started=0.0)
    published.clear()
    changed = dict(snapshot.instances)
    grown = changed["i-1"].interfaces[0]
    changed["i-1"] = dataclasses.replace(
        changed["i-1"], interfaces=(dataclasses.replace(grown, addresses=(*grown.addresses, "10.0.1.99")),)
    )
    await manager.apply_resync(dataclasses.replace(snapshot, instances=changed), started=1.0)
    assert published == ["n1"]  # someone else added an address: the node side must see it in the pool
    await manager.apply_resync(dataclasses.replace(snapshot, instances=dict(changed)), started=2.0)
    assert published == ["n1"]  # the same view again (another object, equal): nothing to publish


async def test_a_node_with_pods_waiting_is_served_before_idle_nodes():
    manager, snapshot = _cluster(4)
    await manager.apply_resync(snapshot, started=0.0)
    for name in ("n0", "n1", "n2"):
        manager.trigger(name)  # idle nodes, queued first
    manager.upsert(dataclasses.replace(manager.nodes["n3"].resource, pending_pods=2))
    order = []
    while not manager._queue.empty():
        order.append(manager._queue.get_nowait()[-1])
    assert order == ["n3", "n0", "n1", "n2"]


async def test_a_listing_started_before_the_nodes_were_known_is_the_first_resync(make_world):
    async with make_world(start=False) as world:
        listings: list[float] = []
        provider = world.manager.provider
        real = provider.resync

        async def counted():  # type: ignore[no-untyped-def]
            listings.append(asyncio.get_running_loop().time())
            return await real()

        provider.resync = counted
        listing = asyncio.ensure_future(world.manager.first_listing())
        await asyncio.sleep(0)
        world.add_node("n1")  # learnt while the cloud was being listed
        async with manager_running(world.manager, first=listing):
            await world.settle()
            assert world.manager.ready
            assert world.manager.nodes["n1"].stats.available == 8
            assert len(listings) == 1  # the first resync was the listing already under way


async def test_a_first_listing_that_failed_is_retried(make_world):
    async with make_world(start=False) as world:
        world.cloud.fail_next("DescribeSubnets", 1)
        listing = asyncio.ensure_future(world.manager.first_listing())
        assert await listing is None  # logged, not raised into the caller's task group
        world.add_node("n1")
        async with manager_running(world.manager, first=asyncio.ensure_future(asyncio.sleep(0))):
            await world.settle()
            assert world.manager.ready and world.manager.nodes["n1"].stats.available == 8


def test_a_provider_reading_the_node_store_is_known_through_its_fence() -> None:
    from eni_ipam.core.fence import Fence, FencedProvider
    from eni_ipam.core.provider import reads_node_store
    from providers.generic.provider import GenericProvider

    class Cloud:
        name = "cloud"

    assert not reads_node_store(FencedProvider(Cloud(), Fence()))  # type: ignore[arg-type]
    fenced = FencedProvider.__new__(FencedProvider)
    fenced.inner = GenericProvider.__new__(GenericProvider)
    assert reads_node_store(fenced)


async def test_only_subnets_a_node_has_an_interface_in_are_exported(make_world):
    async with make_world() as world:
        world.cloud.add_subnet("s-db", vpc="vpc-1", zone="z1", cidr="10.0.8.0/24")  # another tier's
        world.add_node("n1")
        await world.settle()
        await asyncio.sleep(world.manager.settings.resync_interval)
        exported = world.metrics.samples("eni_ipam_available_ips_per_subnet")
        assert [dict(labels)["subnet"] for labels in exported] == ["s-1"]
        # A node whose instance lives in s-db brings it in at the next resync.
        world.cloud.add_instance("i-db", type="m5.large", subnet="s-db", security_groups=["sg-1"])
        world.side.add(NodeResource(name="db", instance_id="i-db", spec=NodeSpec()))
        await world.settle()
        await asyncio.sleep(world.manager.settings.resync_interval)
        exported = world.metrics.samples("eni_ipam_subnet_size_ips")
        assert sorted(dict(labels)["subnet"] for labels in exported) == ["s-1", "s-db"]


async def test_a_node_blocked_by_a_full_subnet_says_so_once_not_at_every_resync(make_world):
    async with make_world() as world:
        world.add_node("n1", pre_allocate=8)
        await world.settle()
        world.cloud.set_subnet_available("s-1", 0)
        await asyncio.sleep(world.manager.settings.resync_interval)
        with structlog.testing.capture_logs() as logs:
            world.side.update("n1", used=6)
            await asyncio.sleep(10 * world.manager.settings.resync_interval)  # ten resyncs plan it again
        blocked = [e for e in logs if e["event"] == "allocation_blocked"]
        assert [(e["node"], e["reason"]) for e in blocked] == [("n1", "no-subnet")]


async def test_a_pass_refused_for_a_lapsed_term_is_retried_once_renewed_and_is_no_failure(make_world):
    from eni_ipam.core.fence import Fence, FencedProvider

    fence = Fence(is_open=True, term_clock=lambda: asyncio.get_running_loop().time())  # no term yet
    async with make_world(provider_wrapper=lambda provider: FencedProvider(provider, fence)) as world:
        attempts = assign_attempts(world)
        world.add_node("n1")
        await asyncio.sleep(10)
        assert world.manager.ready  # reads pass a lapsed term
        assert attempts == [] and world.manager.nodes["n1"].stats.available == 0
        schedule = world.manager.schedule("n1")
        assert schedule is not None and schedule.failures == 0
        assert world.metrics.sample("eni_ipam_nodes_in_backoff") == 0
        assert world.metrics.samples("eni_ipam_node_maintenance_failures_total") == {}
        fence.renewed(
            asyncio.get_running_loop().time() + 60.0
        )  # the next renewal succeeded: the retry goes ahead within a first-retry delay
        await asyncio.sleep(Settings().backoff_initial + 0.1)
        assert attempts == ["i-n1"] and world.manager.nodes["n1"].stats.available == 8


async def test_an_interface_fuller_than_the_view_says_is_read_again_within_the_pass(make_world):
    async with make_world() as world:
        world.add_node("n1", pre_allocate=2)
        await world.settle()
        node = world.manager.nodes["n1"]
        assert node.instance is not None
        primary = node.instance.interfaces[0]
        # Someone else fills the primary interface: the node's view still says 2 addresses on it.
        await world.cloud.assign_private_ip_addresses(interface_id=primary.id, secondary_count=7)
        with structlog.testing.capture_logs() as logs:
            world.side.update("n1", spec=world.store.resources["n1"].spec.replace(pre_allocate=12))
            await world.settle()
        assert [e for e in logs if e["event"] == "maintenance_failed"] == []  # replanned, no backoff
        assert node.stats.available >= 12


async def test_two_resyncs_asked_at_once_list_the_cloud_one_after_the_other(make_world):
    async with make_world() as world:
        world.add_node("n1")
        await world.settle()
        provider = world.manager.provider
        real = provider.resync
        running = 0
        most = 0

        async def counted():  # type: ignore[no-untyped-def]
            nonlocal running, most
            running += 1
            most = max(most, running)
            try:
                await asyncio.sleep(1)
                return await real()
            finally:
                running -= 1

        provider.resync = counted
        first = asyncio.create_task(world.manager.resync())
        await asyncio.sleep(0.1)
        assert world.manager.resyncing
        await asyncio.gather(first, world.manager.resync())
        assert most == 1
        assert not world.manager.resyncing


async def test_nodes_whose_pools_look_alike_hold_one_stats_object(make_world):
    async with make_world() as world:
        world.add_node("a", pre_allocate=4)
        world.add_node("b", pre_allocate=4)
        await world.settle()
        a, b = world.manager.nodes["a"].stats, world.manager.nodes["b"].stats
        assert a == b and a is b
