"""The subnet reserve (``settings.subnet_reserve``): what only a node's watermarks ask for leaves a
share of each subnet free, for the pods of every node sharing it; pods waiting take from it.

Scenarios in the simulator (the real manager, planner and view on the simulated cloud), and the
status a node publishes while the reserve holds its watermark back."""

from __future__ import annotations

from typing import Any

import pytest

from eni_ipam.core.settings import Settings
from eni_ipam.simulator.scenario import parse_scenario
from eni_ipam.simulator.simulate import simulate

FREE = 'eni_ipam_available_ips_per_subnet{subnet="s-1",zone="us-east-1a"}'


def run(
    *, available: int | None, node: dict[str, Any], expect: dict[str, Any], reserve: float | None = None
) -> None:
    subnet: dict[str, Any] = {"id": "s-1", "vpc": "vpc-1", "zone": "us-east-1a", "cidr": "10.0.0.0/24"}
    if available is not None:
        subnet["available"] = available
    data: dict[str, Any] = {
        "cloud": {
            "vpcs": [{"id": "vpc-1", "cidr": "10.0.0.0/16"}],
            "subnets": [subnet],
            "security_groups": [{"id": "sg-1", "vpc": "vpc-1"}],
            "instances": [{"id": "i-1", "type": "m5.large", "subnet": "s-1", "security_groups": ["sg-1"]}],
        },
        "nodes": [{"name": "node1", "instance": "i-1", **node}],
        "steps": [{"converge": "60s"}, {"expect": expect}],
    }
    if reserve is not None:
        data["settings"] = {"subnet_reserve": reserve}
    outcome = simulate(parse_scenario(data))
    assert outcome.passed, [f for r in outcome.results for f in r.failures]


def test_a_subnet_with_room_above_its_reserve_is_drawn_in_one_call_pods_or_not() -> None:
    run(
        available=None,  # a /24's 251
        node={"pending_pods": 4},
        expect={"node1": {"available": 8}, "api_calls": {"AssignPrivateIpAddresses": 1}},
    )


def test_a_warm_pool_stops_at_the_reserve_and_says_why() -> None:
    # A /24 keeps 16: of 20 free, the watermark (8) may take 4.
    run(
        available=20,
        node={},
        expect={
            "node1": {"available": 4, "needed": 4},
            "metrics": {FREE: 16, 'eni_ipam_node_at_capacity{node="node1",reason="subnet"}': 1},
        },
    )


def test_pods_waiting_take_from_the_reserve_and_the_watermark_then_waits() -> None:
    # 10 free, all of them in the reserve: the 4 pods get theirs in one call, the warm pool none.
    run(
        available=10,
        node={"pending_pods": 4},
        expect={
            "node1": {"available": 4},
            "api_calls": {"AssignPrivateIpAddresses": 1},
            "metrics": {FREE: 6},
        },
    )


@pytest.mark.parametrize(("reserve", "available"), [(0.0, 8), (0.25, 6), (0.5, 0)])
def test_the_reserve_is_a_share_of_the_subnets_size(reserve: float, available: int) -> None:
    # 70 free of a /24 (256): a quarter keeps 64, a half 128; 0 turns the reserve off.
    run(available=70, node={}, reserve=reserve, expect={"node1": {"available": available}})


@pytest.mark.looptime
async def test_a_node_held_back_by_the_reserve_says_so_and_not_that_its_subnets_are_full(
    make_world: Any,
) -> None:
    async with make_world(Settings(subnet_reserve=0.5)) as world:  # s-1, a /22: 512 kept
        world.add_node("hostile", type="m5.24xlarge", min_allocate=16384)
        await world.settle()
        world.add_node("n2")
        await world.settle()
        status = world.store.statuses["n2"]
        assert status.stats.available == 0 and status.limit == "subnet"
        assert "down to their reserve" in status.message and "settings.subnet_reserve" in status.message
        assert "no subnet this pool may use has room" not in status.message
        free = world.metrics.sample("eni_ipam_available_ips_per_subnet", {"subnet": "s-1", "zone": "z1"})
        assert free is not None and 512 <= free < 512 + 16  # the hostile pool stopped at the reserve
