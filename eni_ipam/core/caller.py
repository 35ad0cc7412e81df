"""The one path every cloud call takes: rate limiter → SDK call → error translation → observer.

Providers build an :class:`ApiCaller` with their own ``translate`` function (cloud error → one of
:mod:`eni_ipam.core.errors`) and wrap every SDK call in :meth:`ApiCaller.call`. Callers above the
provider therefore never see SDK exception types, every call is rate limited on its operation's
bucket, and every call is reported to the :class:`~eni_ipam.core.observe.ApiObserver` with its
operation, outcome and duration (what the process exports as
``eni_ipam_api_duration_seconds{operation,outcome}``).

Requests and throttles are counted per request the cloud sees. A client without SDK retries makes
one request per call, and the caller counts it. An SDK that retries on its own (botocore) reports
each attempt from its hooks instead (``sdk_counts_requests=True``), so that a call which succeeded
on its third attempt still shows two throttles and three requests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from eni_ipam.core import errors
from eni_ipam.core.clock import Clock
from eni_ipam.core.gate import check_current_gate
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.ratelimit import RateLimiter
from eni_ipam.errors import EniIpamError

T = TypeVar("T")

Translate = Callable[[BaseException, str], EniIpamError | None]
"""Maps an SDK exception and the operation name to a project error; ``None`` lets it propagate."""


class ApiCaller:
    def __init__(
        self,
        *,
        limiter: RateLimiter,
        metrics: ApiObserver,
        clock: Clock,
        translate: Translate,
        sdk_counts_requests: bool = False,
    ) -> None:
        self.limiter = limiter
        self.metrics = metrics
        self._clock = clock
        self._translate = translate
        self._count_requests = not sdk_counts_requests

    async def call(self, operation: str, fn: Callable[[], Awaitable[T]]) -> T:
        waited = await self.limiter.acquire(operation)
        self.metrics.rate_limit_wait(operation=operation, seconds=waited)
        # The wait for a token may have outlasted the leadership term (a throttled, then paused
        # process): a mutating method's request asks its fence again as it goes out.
        check_current_gate()
        started = self._clock.monotonic()
        outcome = "error"
        throttled = False
        try:
            result = await fn()
            outcome = "ok"
            return result
        except EniIpamError as exc:
            outcome = getattr(exc, "code", "") or type(exc).__name__
            throttled = isinstance(exc, errors.Throttled)
            raise
        except Exception as exc:
            translated = self._translate(exc, operation)
            if translated is None:
                raise
            outcome = getattr(translated, "code", "") or type(translated).__name__
            throttled = isinstance(translated, errors.Throttled)
            raise translated from exc
        finally:
            self.metrics.api_call(
                operation=operation, outcome=outcome, seconds=self._clock.monotonic() - started
            )
            if self._count_requests:
                self.metrics.api_request(operation=operation, throttled=throttled)
