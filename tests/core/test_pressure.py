"""Subnet pressure (decision 0054): the judgement with its hysteresis (table tests), the watermarks a
node keeps under pressure, the tracker's transitions, the settings that must agree, and — in the
simulator, on the real manager, planner and view — what nodes do while their subnet is under it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from eni_ipam.core.pressure import (
    CALM,
    PressureState,
    PressureTracker,
    Thresholds,
    judge,
    pressure_watermarks,
)
from eni_ipam.core.settings import Settings
from eni_ipam.core.watermarks import excess_ips, needed_ips
from eni_ipam.simulator.scenario import ScenarioError, parse_scenario
from eni_ipam.simulator.simulate import simulate

T = Thresholds(enter=0.05, leave=0.10, hold=300.0)
"""The defaults: a /24 (256) enters at 12 free or fewer, leaves after 26 or more for 5 minutes."""
UNDER = PressureState(under=True)


@pytest.mark.parametrize(
    ("state", "free", "now", "want"),
    [
        (CALM, 200, 0.0, CALM),  # roomy: nothing
        (CALM, 13, 0.0, CALM),  # one above the line
        (CALM, 12, 0.0, UNDER),  # at the line: in
        (CALM, 0, 0.0, UNDER),
        (UNDER, 12, 10.0, UNDER),  # still short
        (UNDER, 25, 10.0, UNDER),  # between the lines: stays in, no hold begun
        (UNDER, 26, 10.0, PressureState(under=True, calm_since=10.0)),  # room: the hold begins
        (PressureState(under=True, calm_since=10.0), 30, 309.0, PressureState(under=True, calm_since=10.0)),
        (PressureState(under=True, calm_since=10.0), 30, 310.0, CALM),  # held for 300 s: out
        (PressureState(under=True, calm_since=10.0), 25, 200.0, UNDER),  # a dip: the hold starts anew
        (PressureState(under=True, calm_since=10.0), 5, 400.0, UNDER),
    ],
)
def test_a_subnet_enters_at_one_line_and_leaves_only_above_the_other_after_the_hold(
    state: PressureState, free: int, now: float, want: PressureState
) -> None:
    assert judge(state, free=free, size=256, now=now, thresholds=T) == want


def test_a_subnet_of_unknown_size_is_never_under_pressure() -> None:
    assert judge(CALM, free=0, size=0, now=0.0, thresholds=T) == CALM
    assert judge(UNDER, free=0, size=0, now=0.0, thresholds=T) == CALM


@pytest.mark.parametrize(
    ("size", "enter_at", "leave_at"),
    [(256, 12, 26), (512, 25, 52), (4096, 204, 410), (32, 1, 4)],
)
def test_the_lines_are_shares_of_the_cidr(size: int, enter_at: int, leave_at: int) -> None:
    assert (T.enter_at(size), T.leave_at(size)) == (enter_at, leave_at)


@pytest.mark.parametrize(
    ("pre", "min_", "maw", "used", "waiting", "want"),
    [
        (8, 0, 0, 3, 0, (0, 0, 0)),  # spare only: none kept
        (8, 0, 4, 3, 2, (2, 0, 0)),  # the pods waiting are kept, the slack is not
        (8, 20, 0, 5, 0, (0, 5, 0)),  # a floor shrinks to what is used
        (8, 20, 0, 5, 3, (3, 8, 0)),  # ... and waited for
        (8, 4, 0, 10, 0, (0, 4, 0)),  # a floor below the use stays as it is
        (2, 0, 0, 0, 6, (6, 0, 0)),  # pods waiting are kept, whatever the spec's spare
        (-3, 0, 0, 0, 0, (-3, 0, 0)),  # a negative pre_allocate stays
    ],
)
def test_under_pressure_only_what_pods_use_or_wait_for_is_kept(
    pre: int, min_: int, maw: int, used: int, waiting: int, want: tuple[int, int, int]
) -> None:
    got = pressure_watermarks(
        pre_allocate=pre, min_allocate=min_, max_above_watermark=maw, used=used, waiting=waiting
    )
    assert got == want


def pressured_targets(
    *, available: int, used: int, waiting: int, pre_allocate: int, min_allocate: int, max_above_watermark: int
) -> tuple[int, int]:
    """``(needed, excess)`` of a pool under pressure, as the planner's ``node_stats`` composes them:
    :func:`pressure_watermarks` applied to the usual formulas."""
    pre, floor, slack = pressure_watermarks(
        pre_allocate=pre_allocate,
        min_allocate=min_allocate,
        max_above_watermark=max_above_watermark,
        used=used,
        waiting=waiting,
    )
    needed = needed_ips(available=available, used=used, pre_allocate=pre, min_allocate=floor)
    excess = excess_ips(
        available=available, used=used, pre_allocate=pre, min_allocate=floor, max_above_watermark=slack
    )
    return needed, excess


@pytest.mark.parametrize(
    ("available", "used", "waiting", "pre", "min_", "maw", "want"),
    [
        (14, 2, 0, 12, 0, 0, (0, 12)),  # every spare address is excess
        (14, 14, 0, 12, 0, 4, (0, 0)),  # nothing spare: nothing to give
        (32, 32, 6, 12, 0, 0, (6, 0)),  # pods waiting: what they need, no more
        (32, 12, 26, 12, 0, 0, (6, 0)),  # 26 waiting, 20 free: none of them is excess
        (20, 5, 3, 8, 16, 0, (0, 12)),  # the floor gives way, the waiting pods' 3 stay
        (0, 0, 0, 8, 0, 0, (0, 0)),
    ],
)
def test_a_pool_under_pressure_needs_its_waiting_pods_and_gives_back_the_rest(
    available: int, used: int, waiting: int, pre: int, min_: int, maw: int, want: tuple[int, int]
) -> None:
    got = pressured_targets(
        available=available,
        used=used,
        waiting=waiting,
        pre_allocate=pre,
        min_allocate=min_,
        max_above_watermark=maw,
    )
    assert got == want
    needed, excess = got
    assert available - excess >= used + 0  # never below what is used
    assert available - excess + needed >= used + waiting  # nor below what pods wait for


def test_the_tracker_counts_transitions_and_calls_back_on_each() -> None:
    seen: list[tuple[str, bool]] = []
    tracker = PressureTracker(T, changed=lambda sid, under: seen.append((sid, under)))
    figures = [(0.0, 20), (10.0, 12), (20.0, 5), (30.0, 30), (60.0, 20), (70.0, 30), (369.0, 40), (370.0, 40)]
    changes = [tracker.see("s-1", free=free, size=256, now=now) for now, free in figures]
    assert changes == [False, True, False, False, False, False, False, True]
    assert seen == [("s-1", True), ("s-1", False)]
    assert tracker.transitions == {"s-1": 2}
    assert not tracker.under("s-1") and tracker.pressured() == frozenset()


def test_a_count_wobbling_around_one_line_never_flaps() -> None:
    tracker = PressureTracker(T)
    for n in range(200):  # 12 and 13 free, then 25 and 26, alternately, a second apart
        tracker.see("s-1", free=12 + n % 2, size=256, now=float(n))
    for n in range(200, 2000):
        tracker.see("s-1", free=25 + n % 2, size=256, now=float(n))
    assert tracker.transitions == {"s-1": 1} and tracker.under("s-1")


def test_forgotten_subnets_leave_no_state() -> None:
    tracker = PressureTracker(T)
    tracker.see("s-1", free=0, size=256, now=0.0)
    tracker.see("s-2", free=0, size=256, now=0.0)
    tracker.forget(frozenset({"s-2"}))
    assert tracker.pressured() == frozenset({"s-2"})


# -- settings ----------------------------------------------------------------------------------------


def test_pressure_is_off_by_default_and_its_defaults_agree_with_the_reserve() -> None:
    settings = Settings()
    assert not settings.subnet_pressure_enabled
    assert settings.subnet_pressure_enter < settings.subnet_reserve < settings.subnet_pressure_leave
    Settings(subnet_pressure_enabled=True)  # the defaults pass their own checks


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"subnet_pressure_enter": 0.08}, "subnet_pressure_enter"),  # above the reserve (0.0625)
        ({"subnet_reserve": 0}, "subnet_pressure_enter"),
        ({"subnet_pressure_leave": 0.05}, "subnet_pressure_leave"),  # not above enter
        ({"subnet_pressure_leave": 0.04}, "subnet_pressure_leave"),
    ],
)
def test_enabled_pressure_whose_lines_would_flap_is_refused_naming_the_field(
    fields: dict[str, Any], field: str
) -> None:
    data = example()
    data["settings"] = {"subnet_pressure_enabled": True, **fields}
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    assert info.value.path == f"settings.{field}"


def test_disabled_pressure_checks_none_of_its_lines() -> None:
    Settings(subnet_reserve=0, subnet_pressure_enter=0.3, subnet_pressure_leave=0.1)


# -- in the simulator ------------------------------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "subnet_pressure.yaml"
PRESSURE = 'eni_ipam_subnet_pressure{subnet="s-1",zone="us-east-1a"}'
TRANSITIONS = 'eni_ipam_subnet_pressure_transitions_total{subnet="s-1",zone="us-east-1a"}'
RELEASED = 'eni_ipam_release_ops_total{subnet="s-1"}'


def example() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text())


def until_pressure(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The example's steps up to the burst on d that puts s-1 under pressure (its first 5 steps),
    without their expectations."""
    return [copy.deepcopy(s) for s in data["steps"][:5] if "expect" not in s]


def passed(data: dict[str, Any]) -> None:
    outcome = simulate(parse_scenario(data))
    assert outcome.passed, [f for r in outcome.results for f in r.failures]


def test_without_pressure_the_starving_node_waits_while_the_others_keep_their_spare() -> None:
    data = example()
    data["settings"] = {"excess_ip_release_delay": "60s"}
    data["steps"] = [
        *until_pressure(data),
        {"advance": "600s"},
        {
            "expect": {
                "a": {"available": 14, "excess": 0},
                "d": {"available": 32, "needed": 12},  # its warm pool, and its 6 pods with it
                "metrics": {PRESSURE: None, RELEASED: None},
            }
        },
    ]
    passed(data)


def test_a_node_whose_agent_does_not_answer_keeps_its_spare_under_pressure() -> None:
    data = example()
    data["steps"] = [
        {"set": {"a": {"agent": "down"}}},
        *until_pressure(data),
        {"advance": "130s"},
        {
            "expect": {
                "a": {"available": 14, "excess": 12},
                "b": {"available": 2},
                "c": {"available": 2},
                "metrics": {PRESSURE: 1, RELEASED: 24},
            }
        },
    ]
    passed(data)


def test_addresses_in_use_stay_under_pressure() -> None:
    data = example()
    data["steps"] = [
        *until_pressure(data),
        {"set": {"b": {"used": 14}}},  # b's pods took its spare meanwhile
        {"advance": "130s"},
        {"expect": {"a": {"available": 2}, "b": {"available": 14, "excess": 0}, "metrics": {RELEASED: 24}}},
    ]
    passed(data)


def test_pressure_ending_aborts_a_handshake_still_under_way_with_release_off() -> None:
    """a's agent does not answer: its 12 stay marked; once the subnet has room again and leaves
    pressure, nothing of a is excess any more and the marks are withdrawn (release is off)."""
    data = example()
    data["steps"] = [
        {"set": {"a": {"agent": "down"}}},
        *until_pressure(data),
        {"advance": "90s"},
        {"expect": {"a": {"release_ips": 12, "excess": 12}, "metrics": {PRESSURE: 1, RELEASED: 24}}},
        {"cloud": {"subnets": {"s-1": {"available": 100}}}},  # the cloud's other users gave room back
        {"advance": "480s"},
        {
            "expect": {
                "a": {"release_ips": 0, "excess": 0, "available": 14},
                "metrics": {PRESSURE: 0, TRANSITIONS: 2, RELEASED: 24},
            }
        },
    ]
    passed(data)


def test_a_node_blocked_on_the_subnet_gets_the_addresses_given_back_without_waiting_for_a_resync() -> None:
    data = example()
    data["settings"]["resync_interval"] = "900s"  # no full resync between the burst and the expect
    data["steps"] = [
        *until_pressure(data),
        {"advance": "90s"},  # the release delay (60 s) runs out, a, b and c give back 36
        {
            "expect": {
                "d": {"available": 38, "needed": 0},
                "metrics": {RELEASED: 36, "eni_ipam_resync_total": 1},
            }
        },
    ]
    passed(data)
