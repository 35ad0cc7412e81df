"""The soak's invariants on small random runs: hypothesis drives faults, kills and cluster events
step by step, and every step must keep every invariant; then faults stop and everything converges.
`make soak` runs the long version."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from bench.soak import QUICK, Soak, SoakConfig, soak
from eni_ipam.simulator.simloop import VirtualTimeLoop

pytestmark = pytest.mark.timeout(120)

SMALL = SoakConfig(nodes=8, fault_rate=0.25, kill_rate=0.0, gc_interval=30.0, recovery_limit=900.0)


class ReconcilerUnderFaults(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = VirtualTimeLoop()
        self.world: Soak | None = None
        self.exhausted: list[str] = []

    def _run(self, coro):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(coro)

    def _do(self, action: Callable[[], object]) -> object:
        """Run a synchronous action inside the loop (the store and the manager read its clock)."""

        async def inside() -> object:
            return action()

        return self._run(inside())

    @property
    def soak(self) -> Soak:
        assert self.world is not None
        return self.world

    @initialize(seed=st.integers(0, 2**16))
    def start(self, seed: int) -> None:
        async def make() -> Soak:
            world = Soak(dataclasses.replace(SMALL, seed=seed))
            world.cloud.set_latency(None, 0.05)
            for _ in range(SMALL.nodes):
                world.add_node()
            world.next_node = SMALL.nodes
            world.start_process()
            world.chaos = True
            return world

        self.world = self._run(make())

    def _advance(self, seconds: float) -> None:
        async def tick() -> None:
            for _ in range(int(seconds)):
                await asyncio.sleep(1.0)
                self.soak.check()

        self._run(tick())

    @rule(seconds=st.integers(1, 90))
    def time_passes(self, seconds: int) -> None:
        self._advance(seconds)

    @rule()
    def pods_churn(self) -> None:
        self._do(self.soak.churn)

    @rule()
    def an_instance_terminates(self) -> None:
        self._do(self.soak.terminate)

    @rule(before=st.booleans())
    def the_process_dies_and_restarts(self, before: bool) -> None:
        self._do(self.soak.kill)
        self._advance(1 if before else 5)
        self._do(self.soak.start_process)

    @rule()
    def throttling_burst(self) -> None:
        self._do(self.soak.throttle_burst)

    @rule()
    def a_subnet_is_exhausted(self) -> None:
        self.exhausted.append(str(self._do(self.soak.exhaust_one)))

    @rule()
    def subnets_are_refilled(self) -> None:
        for subnet in self.exhausted:
            self._do(lambda subnet=subnet: self.soak.refill(subnet))
        self.exhausted.clear()

    @invariant()
    def no_invariant_is_broken(self) -> None:
        if self.world is not None:
            assert not self.soak.report.violations, self.soak.report.violations

    def teardown(self) -> None:
        if self.world is not None:
            world = self.world
            world.chaos = False

            async def finish() -> None:
                await world.recover()
                world.kill()
                for task in world.dead:
                    task.cancel()
                await asyncio.gather(*world.dead, return_exceptions=True)

            self._run(finish())
            assert not world.report.violations, world.report.violations
            assert world.report.final_recovery is not None
        self.loop.close()


ReconcilerUnderFaults.TestCase.settings = settings(
    max_examples=12,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_reconciler_keeps_its_invariants_under_faults = ReconcilerUnderFaults.TestCase


def test_a_short_soak_with_kills_keeps_every_invariant_and_converges() -> None:
    report = soak(dataclasses.replace(QUICK, nodes=20, chaos_seconds=900.0, kill_rate=0.03, seed=11))
    assert report.events["process kills"] >= 2, report.events
    assert sum(report.faults.values()) > 50
    assert report.events["violations"] == 0, report.violations
    assert report.final_recovery is not None
