"""The token bucket on the injected clock: burst and refill, arrival order, cancellation, no hang."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eni_ipam.core.clock import LoopClock
from eni_ipam.core.ratelimit import MIN_WAIT, Bucket, RateLimiter, TokenBucket
from eni_ipam.simulator.simloop import run_virtual


def bucket(burst: float, refill: float) -> TokenBucket:
    return TokenBucket(Bucket(burst, refill), LoopClock())


def now() -> float:
    return asyncio.get_running_loop().time()


class StepClock:
    """A clock outside any event loop whose sleeps fall short of the time asked by a float hair."""

    def __init__(self, start: float = 1000.37) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds * (1 - 1e-12)


@pytest.mark.looptime
async def test_a_full_bucket_grants_its_burst_at_once_then_one_token_per_refill_interval():
    b = bucket(3, 2)
    grants = []
    for _ in range(7):
        await b.acquire()
        grants.append(now())
    assert grants == pytest.approx([0, 0, 0, 0.5, 1.0, 1.5, 2.0], abs=1e-5)


@pytest.mark.looptime
async def test_an_idle_bucket_refills_up_to_its_burst_and_no_further():
    b = bucket(3, 2)
    for _ in range(3):
        await b.acquire()
    assert b.tokens() == 0
    await asyncio.sleep(1.0)
    assert b.tokens() == pytest.approx(2.0)
    await asyncio.sleep(100.0)
    assert b.tokens() == 3.0
    start = now()
    for _ in range(4):
        await b.acquire()
    assert now() - start == pytest.approx(0.5, abs=1e-5)  # three free, the fourth waits for refill


@pytest.mark.looptime
async def test_waiters_are_served_in_arrival_order():
    b = bucket(2, 1)
    served: list[int] = []

    async def one(i: int, arrival: float) -> None:
        await asyncio.sleep(arrival)
        await b.acquire()
        served.append(i)

    # Arrivals spread over the time tokens come back, started in scrambled order: an arrival that
    # finds a token just refilled must still queue behind the earlier waiters.
    arrivals = {i: i * 0.37 for i in range(12)}
    order = sorted(arrivals, key=lambda i: (i * 7) % 12)
    await asyncio.gather(*(one(i, arrivals[i]) for i in order))
    assert served == sorted(arrivals)
    assert now() == pytest.approx(10.0, abs=1e-5)  # 12 tokens: 2 at once, 10 at 1 per second


@pytest.mark.looptime
async def test_an_arrival_at_the_moment_a_token_returns_queues_behind_the_waiter_for_it():
    b = bucket(1, 1)
    await b.acquire()
    served: list[str] = []

    async def late() -> None:
        await asyncio.sleep(1.0)  # its timer is due with the waiter's, and fires first
        await b.acquire()
        served.append("late")

    async def waiter() -> None:
        await b.acquire()
        served.append("waiter")

    await asyncio.gather(late(), waiter())
    assert served == ["waiter", "late"]
    assert now() == pytest.approx(2.0, abs=1e-5)


@pytest.mark.looptime
async def test_a_cancelled_waiter_spends_no_token_and_does_not_hold_up_those_behind_it():
    b = bucket(1, 1)
    await b.acquire()
    granted: dict[str, float] = {}

    async def one(name: str) -> None:
        await b.acquire()
        granted[name] = now()

    head = asyncio.create_task(one("head"))
    middle = asyncio.create_task(one("middle"))
    last = asyncio.create_task(one("last"))
    await asyncio.sleep(0.5)
    middle.cancel()
    head.cancel()  # the head was waiting for the token half refilled: it passes on, unspent
    await asyncio.gather(head, middle, last, return_exceptions=True)
    assert granted == {"last": pytest.approx(1.0, abs=1e-5)}
    assert b.tokens() == pytest.approx(0.0, abs=1e-5)


@pytest.mark.timeout(5)
@pytest.mark.looptime
async def test_a_waiter_cancelled_as_its_turn_comes_passes_the_token_on():
    b = bucket(1, 1)
    await b.acquire()
    granted: dict[str, float] = {}

    async def one(name: str) -> None:
        await b.acquire()
        granted[name] = now()

    async def first_then_cancel_second() -> None:
        await b.acquire()  # at 1 s, handing the turn to `second`, which has not run since
        granted["first"] = now()
        second.cancel()

    first = asyncio.create_task(first_then_cancel_second())
    await asyncio.sleep(0)
    second = asyncio.create_task(one("second"))
    third = asyncio.create_task(one("third"))
    await asyncio.gather(first, second, third, return_exceptions=True)
    assert second.cancelled()
    assert granted == {"first": pytest.approx(1.0, abs=1e-5), "third": pytest.approx(2.0, abs=1e-5)}


@pytest.mark.looptime
async def test_a_waiter_timing_out_leaves_the_queue_moving():
    b = bucket(1, 1)
    await b.acquire()
    head = asyncio.create_task(b.acquire())
    await asyncio.sleep(0)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1.0):  # due at the very moment the head gets its token
            await b.acquire()
    await head
    await b.acquire()
    assert now() == pytest.approx(2.0, abs=1e-5)


async def test_a_wait_for_a_missing_token_is_never_shorter_than_a_microsecond():
    clock = StepClock()
    b = TokenBucket(Bucket(1, 3), clock)
    for _ in range(50):
        await b.acquire()
    assert clock.sleeps
    assert min(clock.sleeps) >= MIN_WAIT
    assert clock.now - 1000.37 == pytest.approx(49 / 3, abs=1e-3)


FLOAT_UNFRIENDLY_REFILLS = [3.0, 0.1, 1 / 3, 7.0]


async def twenty_waiters_late_on_the_clock(refill: float) -> float:
    # Refill rates whose reciprocal is not exact, late on the clock: a wait computed as "a hair"
    # used to land on "now", and a virtual clock that only moves when the loop idles never moved.
    b = bucket(2, refill)
    await asyncio.sleep(1000.37)
    start = now()
    await asyncio.gather(*(b.acquire() for _ in range(20)))
    return now() - start


@pytest.mark.timeout(10)
@pytest.mark.looptime(start=1_000_000.0)
@pytest.mark.parametrize("refill", FLOAT_UNFRIENDLY_REFILLS)
async def test_waiters_finish_under_looptime_whatever_the_float_rounding(refill: float):
    assert await twenty_waiters_late_on_the_clock(refill) == pytest.approx(18 / refill, abs=1e-3)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("refill", FLOAT_UNFRIENDLY_REFILLS)
def test_waiters_finish_on_the_simulator_clock_whatever_the_float_rounding(refill: float):
    elapsed = run_virtual(twenty_waiters_late_on_the_clock(refill))
    assert elapsed == pytest.approx(18 / refill, abs=1e-3)


@pytest.mark.looptime
async def test_share_scales_burst_and_refill_of_the_waits():
    limiter = RateLimiter({"Op": Bucket(10, 4)}, share=0.5)
    waits = [await limiter.acquire("Op") for _ in range(7)]
    assert waits[:5] == [0, 0, 0, 0, 0]
    assert waits[5:] == pytest.approx([0.5, 0.5], abs=1e-5)


def test_a_share_never_leaves_a_bucket_without_a_whole_token_or_a_refill():
    assert Bucket(50, 5).scaled(0.01) == Bucket(1.0, 0.05)
    assert Bucket(1, 1e-3).scaled(1e-6) == Bucket(1.0, 1e-6)


async def test_the_limiter_reads_and_waits_on_its_injected_clock():
    clock = StepClock(start=0.0)
    limiter = RateLimiter({"Op": Bucket(1, 2)}, clock=clock)
    assert await limiter.acquire("Op") == 0
    waited = await limiter.acquire("Op")
    assert waited == pytest.approx(0.5, abs=1e-5)
    assert clock.now == pytest.approx(0.5, abs=1e-5)


def test_a_bucket_without_a_whole_token_or_a_refill_is_refused():
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(Bucket(0.5, 1), LoopClock())
    with pytest.raises(ValueError, match="refill"):
        TokenBucket(Bucket(1, 0), LoopClock())


arrivals = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=3, allow_nan=False),  # gap since the previous arrival
        st.one_of(st.none(), st.floats(min_value=0, max_value=5, allow_nan=False)),  # patience
    ),
    min_size=1,
    max_size=40,
)


@dataclasses.dataclass
class Run:
    arrived: list[int] = dataclasses.field(default_factory=list)
    """Indices in the order they called ``acquire``."""
    granted: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    """(index, seconds since the bucket's first use), in grant order."""


def run_arrivals(burst: float, refill: float, plan: list[tuple[float, float | None]]) -> Run:
    """Arrivals after the given gaps; an arrival with a patience gives up after that many seconds."""
    run = Run()

    async def main() -> None:
        b = bucket(burst, refill)
        await asyncio.sleep(1000.37)
        b.tokens()  # first use: full from here on
        start = now()

        async def one(i: int, at: float, patience: float | None) -> None:
            await asyncio.sleep(at)
            run.arrived.append(i)
            try:
                async with asyncio.timeout(patience):
                    await b.acquire()
            except TimeoutError:
                return
            run.granted.append((i, now() - start))

        ats = itertools.accumulate(gap for gap, _ in plan)
        await asyncio.gather(*(one(i, at, p) for i, (at, (_, p)) in enumerate(zip(ats, plan, strict=True))))

    run_virtual(main())
    return run


@settings(max_examples=150, deadline=None)
@given(
    burst=st.integers(min_value=1, max_value=10),
    refill=st.floats(min_value=0.05, max_value=50, allow_nan=False),
    plan=arrivals,
)
def test_tokens_granted_by_any_time_never_exceed_burst_plus_refill_times_that_time(burst, refill, plan):
    run = run_arrivals(burst, refill, plan)
    for k, (_, t) in enumerate(run.granted, start=1):
        assert k <= burst + refill * t + 1e-9
    # First come, first served, whoever gave up in between.
    served = {i for i, _ in run.granted}
    assert [i for i, _ in run.granted] == [i for i in run.arrived if i in served]


@settings(max_examples=150, deadline=None)
@given(
    burst=st.integers(min_value=1, max_value=10),
    refill=st.floats(min_value=0.05, max_value=50, allow_nan=False),
    gaps=st.lists(st.floats(min_value=0, max_value=3, allow_nan=False), min_size=1, max_size=40),
)
def test_every_token_is_granted_as_soon_as_the_bucket_holds_it(burst, refill, gaps):
    run = run_arrivals(burst, refill, [(gap, None) for gap in gaps])
    # The ideal bucket, served in arrival order: a grant waits for its arrival, for the one before
    # it, and for a whole token.
    expected: list[float] = []
    tokens, last = float(burst), 0.0
    for at in itertools.accumulate(gaps):
        t = max(at, last)
        tokens = min(float(burst), tokens + (t - last) * refill)
        if tokens < 1:
            t += (1 - tokens) / refill
            tokens = 1.0
        tokens -= 1
        last = t
        expected.append(t)
    assert [t for _, t in run.granted] == pytest.approx(expected, abs=1e-4)
