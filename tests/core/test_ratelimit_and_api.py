"""Per-operation token buckets on the loop's clock, and the one call wrapper."""

import asyncio
import random

import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core import errors
from eni_ipam.core.caller import ApiCaller
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.ratelimit import EC2_BUCKETS, Bucket, RateLimiter
from eni_ipam.simulator.simloop import run_virtual

pytestmark = pytest.mark.looptime


async def test_burst_is_free_then_calls_wait_for_refill():
    limiter = RateLimiter({"Op": Bucket(10, 5)})
    loop = asyncio.get_running_loop()
    start = loop.time()
    for _ in range(10):
        assert await limiter.acquire("Op") == 0
    for _ in range(10):
        await limiter.acquire("Op")
    assert loop.time() - start == pytest.approx(2.0, abs=0.3)  # 10 more tokens at 5 per second


async def test_buckets_are_per_operation():
    limiter = RateLimiter({"A": Bucket(1, 1), "B": Bucket(1, 1)})
    await limiter.acquire("A")
    assert await limiter.acquire("B") == 0


def test_share_scales_every_bucket():
    limiter = RateLimiter(EC2_BUCKETS, share=0.5)
    assert limiter.bucket("AssignPrivateIpAddresses") == Bucket(50, 2.5)
    with pytest.raises(ValueError, match="share"):
        RateLimiter(share=0)


class SdkError(Exception):
    def __init__(self, code):
        self.code = code


def translate(exc, operation):
    if isinstance(exc, SdkError):
        cls = errors.Throttled if exc.code == "RequestLimitExceeded" else errors.ProviderError
        return cls("failed", code=exc.code, operation=operation)
    return None


async def test_wrapper_translates_sdk_errors_and_records_metrics():
    metrics = Metrics()
    caller = ApiCaller(limiter=RateLimiter(), metrics=metrics, clock=LoopClock(), translate=translate)

    async def throttled():
        raise SdkError("RequestLimitExceeded")

    with pytest.raises(errors.Throttled) as info:
        await caller.call("AssignPrivateIpAddresses", throttled)
    assert isinstance(info.value.__cause__, SdkError)
    assert metrics.sample("eni_ipam_api_throttled_total", {"operation": "AssignPrivateIpAddresses"}) == 1
    labels = {"operation": "AssignPrivateIpAddresses", "outcome": "RequestLimitExceeded"}
    assert metrics.sample("eni_ipam_api_duration_seconds_count", labels) == 1

    async def ok():
        await asyncio.sleep(0.2)
        return 42

    assert await caller.call("AssignPrivateIpAddresses", ok) == 42
    labels["outcome"] = "ok"
    assert metrics.sample("eni_ipam_api_duration_seconds_sum", labels) == pytest.approx(0.2)


async def test_wrapper_lets_untranslated_errors_through():
    caller = ApiCaller(limiter=RateLimiter(), metrics=Metrics(), clock=LoopClock(), translate=translate)

    async def bug():
        raise KeyError("x")

    with pytest.raises(KeyError):
        await caller.call("Op", bug)


@pytest.mark.timeout(20)
def test_buckets_drain_on_a_virtual_clock_whatever_the_rounding() -> None:
    # Thousands of waiters arriving at odd moments late on a virtual clock: rounding used to put a
    # bucket's wake-up on "now" for ever, and the loop never idled long enough to move its clock.
    async def main() -> float:
        limiter = RateLimiter(EC2_BUCKETS)
        rng = random.Random(1)
        await asyncio.sleep(1000.37)
        start = asyncio.get_running_loop().time()

        async def one() -> None:
            await asyncio.sleep(rng.random() * 30)
            await limiter.acquire("AssignPrivateIpAddresses")

        await asyncio.gather(*(one() for _ in range(2000)))
        return asyncio.get_running_loop().time() - start

    elapsed = run_virtual(main())
    bucket = EC2_BUCKETS["AssignPrivateIpAddresses"]
    assert elapsed == pytest.approx((2000 - bucket.burst) / bucket.refill, abs=1.0)
