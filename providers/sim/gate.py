"""The front door every simulated EC2 call passes, in EC2's order.

For each call, :meth:`Gate.run`:

1. counts it in ``calls`` under its EC2 operation name (a throttled or failed call still costs a
   request, as on EC2);
2. applies an injected fault queued with :meth:`Gate.fail_next`, if any;
3. spends a token from the operation's server-side bucket, answering ``RequestLimitExceeded`` when
   it is empty (:class:`ServerBucket`);
4. waits the injected latency on the injected clock;
5. runs the state change, which is synchronous — so every operation is atomic with respect to the
   others, whatever the interleaving of concurrent callers.

A fault queued with ``applied=True`` lets the state change happen and then answers the error: the
"lost response" that idempotency tokens and re-syncs exist for. A fault may be limited to the calls
whose request matches a predicate (``when``: one node's interface, say), may last until cleared
(:meth:`Gate.fail_while`), and may carry the wait the cloud asks for (``retry_after``, as clouds with
a ``Retry-After`` answer do). Observers (:meth:`Gate.watch`) see every call and its request, in
order. The :func:`api` decorator turns a cloud method (the synchronous state change) into such an
operation, its keyword arguments being the request.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from eni_ipam.core.clock import Clock
from eni_ipam.core.ratelimit import Bucket
from providers.sim.records import SimError

T = TypeVar("T")

THROTTLED = ("RequestLimitExceeded", "Request limit exceeded.")
DEFAULT_FAULT_MESSAGE = "An internal error has occurred."


class ServerBucket:
    """EC2's server-side token bucket: starts full, refills continuously (fractionally), never waits.

    Deterministic: its only input is the clock reading passed to :meth:`take`.
    """

    def __init__(self, bucket: Bucket, now: float) -> None:
        self.burst = float(bucket.burst)
        self.refill = float(bucket.refill)
        self.tokens = self.burst
        self._last = now

    def take(self, now: float) -> bool:
        """Spend one token if there is one; ``False`` means the request is throttled."""
        elapsed = max(now - self._last, 0.0)
        self._last = now
        self.tokens = min(self.burst, self.tokens + elapsed * self.refill)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


Request = Mapping[str, Any]
"""The parameters of one call, by name (``interface_id``, ``secondary_count``, …)."""
Matcher = Callable[[Request], bool]
Around = Callable[[str, Request, Callable[[], Awaitable[Any]]], Awaitable[Any]]
"""Code run around every call (:meth:`Gate.around`): given the operation, its request and ``proceed``,
which passes the call on through the gate and returns its answer."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Fault:
    code: str
    message: str
    applied: bool
    when: Matcher | None = None
    retry_after: float | None = None

    def matches(self, request: Request) -> bool:
        return self.when is None or self.when(request)

    def error(self) -> SimError:
        return SimError(self.code, self.message, retry_after=self.retry_after)


EVERY_OPERATION = "*"
"""The operation a lasting fault of every call is filed under (credentials revoked)."""


class Gate:
    """Call counting, fault injection, server-side throttling and latency for one cloud."""

    def __init__(self, clock: Clock, buckets: Mapping[str, Bucket] | None) -> None:
        """Create a gate with no faults, no latency and full buckets.

        Args:
            clock: where bucket refills are measured and latency is waited.
            buckets: server-side buckets by operation; ``None`` disables throttling. Operations
                missing from the mapping are never throttled.
        """
        self.calls: collections.Counter[str] = collections.Counter()
        self._clock = clock
        self._bucket_specs = dict(buckets) if buckets is not None else {}
        self._buckets: dict[str, ServerBucket] = {}
        self._faults: dict[str, collections.deque[_Fault]] = collections.defaultdict(collections.deque)
        self._lasting: dict[str, list[_Fault]] = collections.defaultdict(list)
        self._observers: list[Callable[[str, Request], None]] = []
        self._around: list[Around] = []
        self._latency: dict[str, float] = {}
        self._default_latency = 0.0

    def fail_next(
        self,
        operation: str,
        count: int = 1,
        code: str = "InternalError",
        message: str | None = None,
        *,
        applied: bool = False,
        when: Matcher | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Make the next ``count`` calls of ``operation`` answer the EC2 error ``code``.

        Args:
            operation: EC2 operation name (``AssignPrivateIpAddresses``).
            count: how many consecutive calls fail.
            code: the EC2 error code answered.
            message: the error message (a generic one when empty or ``None``).
            applied: make the change first and then answer the error (a lost response).
            when: only calls whose request matches fail (and use up the fault); others pass.
            retry_after: seconds the answer asks the caller to wait.

        Raises:
            ValueError: ``count`` is negative.
        """
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        fault = _Fault(code, message or DEFAULT_FAULT_MESSAGE, applied, when, retry_after)
        self._faults[operation].extend([fault] * count)

    def fail_while(
        self,
        operation: str,
        when: Matcher,
        code: str = "InternalError",
        message: str | None = None,
        *,
        retry_after: float | None = None,
    ) -> None:
        """Make every call of ``operation`` (:data:`EVERY_OPERATION`: of any operation) whose request
        matches ``when`` answer ``code``, until :meth:`clear_faults` (a broken node among healthy
        ones, or credentials revoked)."""
        self._lasting[operation].append(
            _Fault(code, message or DEFAULT_FAULT_MESSAGE, False, when, retry_after)
        )

    def around(self, wrapper: Around) -> None:
        """Run ``wrapper`` around every call from now on, outside the gate's own steps (a chaos
        harness deciding faults, killing a caller before or after a call). The last added runs
        outermost."""
        self._around.append(wrapper)

    def watch(self, observer: Callable[[str, Request], None]) -> None:
        """Call ``observer(operation, request)`` for every call, before anything else happens to it."""
        self._observers.append(observer)

    def clear_lasting(self, operation: str) -> None:
        """Drop the lasting faults of ``operation`` (:data:`EVERY_OPERATION`: those of every call)."""
        self._lasting.pop(operation, None)

    def clear_faults(self) -> None:
        """Drop every injected fault still waiting, and the lasting ones."""
        self._faults.clear()
        self._lasting.clear()

    def pending_faults(self, operation: str) -> int:
        """Injected faults still waiting for calls of ``operation``."""
        return len(self._faults.get(operation, ()))

    def set_latency(self, operation: str | None, seconds: float) -> None:
        """Delay every call of ``operation`` (``None``: every operation without its own) by ``seconds``.

        Raises:
            ValueError: ``seconds`` is negative.
        """
        if seconds < 0:
            raise ValueError(f"latency must be >= 0, got {seconds}")
        if operation is None:
            self._default_latency = seconds
        else:
            self._latency[operation] = seconds

    def tokens(self, operation: str) -> float | None:
        """Tokens left in ``operation``'s server-side bucket (``None`` when it is not throttled)."""
        spec = self._bucket_specs.get(operation)
        if spec is None:
            return None
        bucket = self._buckets.get(operation)
        return bucket.tokens if bucket is not None else float(spec.burst)

    async def run(self, operation: str, apply: Callable[[], T], *, request: Request | None = None) -> T:
        """Pass one call of ``operation`` (with its ``request``) through the door and run ``apply``
        (the state change).

        Raises:
            SimError: an injected fault, ``RequestLimitExceeded``, or whatever ``apply`` raises.
        """
        request = request if request is not None else {}
        proceed: Callable[[], Awaitable[Any]] = lambda: self._pass(operation, apply, request)  # noqa: E731
        for wrapper in self._around:
            proceed = functools.partial(wrapper, operation, request, proceed)
        result: T = await proceed()
        return result

    async def _pass(self, operation: str, apply: Callable[[], T], request: Request) -> T:
        self.calls[operation] += 1
        for observer in self._observers:
            observer(operation, request)
        fault = self._fault(operation, request)
        if fault is not None and not fault.applied:
            raise fault.error()
        self._throttle(operation)
        delay = self._latency.get(operation, self._default_latency)
        if delay > 0:
            await self._clock.sleep(delay)
        result = apply()
        if fault is not None:
            raise fault.error()
        return result

    def _fault(self, operation: str, request: Request) -> _Fault | None:
        """The fault this call meets: a lasting one that matches, else the first queued one that
        matches (used up)."""
        lasting: list[_Fault] = [*self._lasting.get(operation, ()), *self._lasting.get(EVERY_OPERATION, ())]
        for fault in lasting:
            if fault.matches(request):
                return fault
        queue = self._faults.get(operation)
        if not queue:
            return None
        for n, fault in enumerate(queue):
            if fault.matches(request):
                del queue[n]
                return fault
        return None

    def _throttle(self, operation: str) -> None:
        spec = self._bucket_specs.get(operation)
        if spec is None:
            return
        now = self._clock.monotonic()
        bucket = self._buckets.get(operation)
        if bucket is None:
            bucket = self._buckets[operation] = ServerBucket(spec, now)
        if not bucket.take(now):
            raise SimError(*THROTTLED)


class Gated(Protocol):
    gate: Gate


S = TypeVar("S", bound=Gated)
P = ParamSpec("P")


def api(
    operation: str,
) -> Callable[[Callable[Concatenate[S, P], T]], Callable[Concatenate[S, P], Coroutine[Any, Any, T]]]:
    """Make a synchronous state change the EC2 operation ``operation``: async, counted, gated.

    The decorated method keeps its signature; its body runs only after the gate let the call through.
    """

    def wrap(fn: Callable[Concatenate[S, P], T]) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
        @functools.wraps(fn)
        async def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
            return await self.gate.run(operation, lambda: fn(self, *args, **kwargs), request=kwargs)

        return call

    return wrap
