"""The mutation fence: closed means no mutating call starts; drain waits for those in flight."""

from __future__ import annotations

import asyncio

import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core import errors
from eni_ipam.core.caller import ApiCaller
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.fence import Fence, FencedProvider
from eni_ipam.core.ratelimit import Bucket, RateLimiter


class SlowProvider:
    name = "slow"

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def resync(self):  # type: ignore[no-untyped-def]
        self.calls.append("resync")
        return "snapshot"

    async def assign_addresses(self, *, interface_id: str, count: int, prefixes: bool = False) -> list[str]:
        self.calls.append("assign")
        await asyncio.sleep(5)
        return ["10.0.0.5"]

    async def delete_interface(self, *, interface_id: str, detach: bool = True) -> None:
        self.calls.append("delete")


@pytest.mark.looptime
async def test_closed_fence_refuses_mutations_but_not_reads() -> None:
    inner = SlowProvider()
    provider = FencedProvider(inner, Fence())  # type: ignore[arg-type]
    with pytest.raises(errors.Fenced):
        await provider.delete_interface(interface_id="eni-1")
    assert await provider.resync() == "snapshot"
    assert inner.calls == ["resync"]


@pytest.mark.looptime
async def test_drain_waits_for_calls_in_flight_and_stops_new_ones() -> None:
    fence = Fence(is_open=True)
    inner = SlowProvider()
    provider = FencedProvider(inner, fence)  # type: ignore[arg-type]
    call = asyncio.create_task(provider.assign_addresses(interface_id="eni-1", count=1))
    await asyncio.sleep(1)
    fence.close("shutting down")
    with pytest.raises(errors.Fenced, match="shutting down"):
        await provider.delete_interface(interface_id="eni-1")
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await fence.drain(30)
    assert loop.time() - started == pytest.approx(4, abs=0.01)
    assert await call == ["10.0.0.5"]
    assert inner.calls == ["assign"]


@pytest.mark.looptime
async def test_drain_gives_up_after_its_limit() -> None:
    fence = Fence(is_open=True)
    provider = FencedProvider(SlowProvider(), fence)  # type: ignore[arg-type]
    call = asyncio.create_task(provider.assign_addresses(interface_id="eni-1", count=1))
    await asyncio.sleep(0)
    fence.close("shutting down")
    assert not await fence.drain(2)
    assert fence.in_flight == 1
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert fence.in_flight == 0


def test_a_sealed_fence_stays_closed_when_a_new_term_opens_it() -> None:
    fence = Fence(is_open=True)
    fence.seal("shutting down")
    fence.open()  # a leadership term won during shutdown must not mutate
    assert not fence.is_open
    with pytest.raises(errors.Fenced, match="shutting down"):
        fence.enter()


class Seconds:
    """A term clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_fence_with_a_term_refuses_everything_before_the_first_renewal() -> None:
    fence = Fence(is_open=True, term_clock=Seconds())
    with pytest.raises(errors.Lapsed, match="not proven"):
        fence.enter()


def test_a_fence_with_a_term_refuses_at_the_end_of_the_term_until_the_next_renewal() -> None:
    seconds = Seconds()
    fence = Fence(is_open=True, term_clock=seconds)
    fence.renewed(seconds.now + 10.0)
    fence.enter()
    fence.exit()
    seconds.now += 9.99
    fence.enter()  # still within the term
    fence.exit()
    seconds.now += 0.01  # the process was stopped: the switch is still open, the term is over
    assert fence.is_open
    with pytest.raises(errors.Lapsed, match="past the renew deadline"):
        fence.enter()
    assert fence.in_flight == 0
    fence.renewed(seconds.now + 10.0)
    fence.enter()
    fence.exit()


def test_a_closed_switch_wins_over_a_term_still_running() -> None:
    seconds = Seconds()
    fence = Fence(is_open=True, term_clock=seconds)
    fence.renewed(seconds.now + 10.0)
    fence.close("the leader lease was lost")
    with pytest.raises(errors.Fenced, match="lease was lost") as refused:
        fence.enter()
    assert not isinstance(refused.value, errors.Lapsed)


def test_a_fence_without_a_term_is_decided_by_its_switch_alone() -> None:
    fence = Fence(is_open=True)
    assert fence.term_left == float("inf")
    fence.enter()
    fence.exit()


class Throttled:
    """A provider whose every request waits for a token of a slow bucket, as under EC2's
    throttling, and goes through the one caller."""

    name = "throttled"

    def __init__(self, clock: LoopClock) -> None:
        bucket = Bucket(burst=1.0, refill=0.1)  # a token every 10 s
        self.caller = ApiCaller(
            limiter=RateLimiter({"AssignPrivateIpAddresses": bucket}, clock=clock),
            metrics=Metrics(process=False),
            clock=clock,
            translate=lambda exc, operation: None,
        )
        self.sent: list[float] = []

    async def assign_addresses(self, *, interface_id: str, count: int, prefixes: bool = False) -> list[str]:
        async def send() -> list[str]:
            self.sent.append(asyncio.get_running_loop().time())
            return ["10.0.0.5"]

        return await self.caller.call("AssignPrivateIpAddresses", send)


@pytest.mark.looptime
async def test_a_request_that_waited_for_a_token_past_the_term_does_not_go_out() -> None:
    loop = asyncio.get_running_loop()
    fence = Fence(is_open=True, term_clock=loop.time)
    fence.renewed(loop.time() + 5.0)
    inner = Throttled(LoopClock())
    provider = FencedProvider(inner, fence)  # type: ignore[arg-type]
    assert await provider.assign_addresses(interface_id="eni-1", count=1) == ["10.0.0.5"]  # the burst
    # The next waits 10 s for its token: admitted within the term, refused when it would go out.
    with pytest.raises(errors.Lapsed):
        await provider.assign_addresses(interface_id="eni-1", count=1)
    assert len(inner.sent) == 1 and fence.in_flight == 0
    fence.renewed(loop.time() + 30.0)  # a term long enough for the next token (10 s away)
    assert await provider.assign_addresses(interface_id="eni-1", count=1) == ["10.0.0.5"]
    assert len(inner.sent) == 2


@pytest.mark.looptime
async def test_a_request_outside_a_fenced_method_asks_no_gate() -> None:
    inner = Throttled(LoopClock())
    assert await inner.assign_addresses(interface_id="eni-1", count=1) == ["10.0.0.5"]
    assert await inner.assign_addresses(interface_id="eni-1", count=1) == ["10.0.0.5"]
    assert len(inner.sent) == 2
