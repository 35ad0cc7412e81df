"""The Azure SDK clients and the one path every ARM request takes.

Path of a call: client-side token buckets of the operation (:mod:`providers.azure.operations`) →
the async SDK (``azure.mgmt.network.aio``, ``azure.mgmt.compute.aio``) → metrics → error
translation (:mod:`providers.azure.errors`). It is built on :class:`~eni_ipam.core.caller.ApiCaller`, like
every other provider's calls.

Time is bounded by a :class:`Deadline` on the event loop's clock. A provider method that writes
opens one (:meth:`ArmClient.deadline`, ``operation_timeout`` from its start) and every call inside it
shares it; a call made outside any gets one of its own. The wait for a call's first rate-limit token
and the call itself (retries, pages, polls) count against it; a call that overruns raises
``TransientError(code="OperationTimeout")`` and assumes nothing about what Azure did (the caller
settles a write's outcome, :mod:`providers.azure.updates`). The one exception: the time a
long-running operation's status polls wait for read tokens moves the deadline later, by at most
another ``operation_timeout`` in all, because it measures how busy our own limiter is, not Azure.

Retries are azure-core's, kept on purpose: a paged listing or a long-running operation is many
requests inside one SDK call, and only the SDK can retry its third page or its fifth status poll
without starting over. :class:`ArmRetryPolicy` (azure-core's ``AsyncRetryPolicy``) retries 408,
429, 5xx and dropped connections up to ``max_retries`` times, sleeping ``Retry-After`` when Azure
says (otherwise exponential backoff), through the transport's ``sleep``, which is
``asyncio.sleep``: waits are on the event loop, virtual under a virtual clock. A ``Retry-After``
longer than ``max_retry_after`` is not waited for in place: the 429 ends the call as
:class:`~eni_ipam.core.errors.Throttled` with ``retry_after`` set, and the reconciler's per-node backoff
waits instead, with the worker released.

Each HTTP attempt is accounted for by :class:`AttemptPolicy`, a per-retry pipeline policy (it runs
once per attempt, after the retry policy):

* every attempt is counted in ``eni_ipam_api_requests_total{operation}`` and, when Azure answered
  429, in ``eni_ipam_api_throttled_total{operation}`` (the ApiCaller counts nothing itself:
  ``sdk_counts_requests=True``);
* every attempt but the first of a call (retries, further pages, status polls) first spends a token
  of the operation's buckets, the way the first one did through the ApiCaller. Without it, retries
  and polls would spend ARM's budget behind the limiter's back.

The policy learns which call it is serving from a context variable the call sets, so nothing has to
be threaded through SDK keyword arguments: pages and polls run in the calling task. In a
long-running operation (a ``PUT`` or ``DELETE``), the ``GET`` requests after the first request are
its status polls and final read, labelled ``<Operation>.Poll`` and spending read tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar

from azure.core import AzureClouds
from azure.core.credentials_async import AsyncTokenCredential
from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.pipeline import PipelineRequest, PipelineResponse
from azure.core.pipeline.policies import AsyncHTTPPolicy, AsyncRetryPolicy
from azure.core.pipeline.transport import AsyncHttpTransport
from azure.core.polling import AsyncLROPoller
from azure.mgmt.compute.aio import ComputeManagementClient
from azure.mgmt.core.tools import get_arm_endpoints
from azure.mgmt.network.aio import NetworkManagementClient

from eni_ipam.core import errors
from eni_ipam.core.caller import ApiCaller
from eni_ipam.core.clock import Clock
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.ratelimit import Bucket, RateLimiter
from providers.azure.errors import translate
from providers.azure.operations import poll_name
from providers.azure.settings import AzureSettings

T = TypeVar("T")
Json = dict[str, Any]

_CLOUDS = {
    "AzurePublicCloud": AzureClouds.AZURE_PUBLIC_CLOUD,
    "AzureChinaCloud": AzureClouds.AZURE_CHINA_CLOUD,
    "AzureUSGovernment": AzureClouds.AZURE_US_GOVERNMENT,
}
_AUTHORITIES = {
    "AzurePublicCloud": "login.microsoftonline.com",
    "AzureChinaCloud": "login.chinacloudapi.cn",
    "AzureUSGovernment": "login.microsoftonline.us",
}
_LRO_METHODS = frozenset({"PUT", "DELETE", "PATCH", "POST"})


@dataclasses.dataclass
class Deadline:
    """When a provider method (or a lone call) must be done, on the event loop's clock.

    ``when`` is set at the start, ``operation_timeout`` later, and moves later only to give back the
    time a long-running operation's status polls waited for read tokens, ``slack`` seconds at most
    in all (``slack`` starts at ``operation_timeout``).
    """

    when: float
    slack: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(when=asyncio.get_running_loop().time() + seconds, slack=seconds)

    def left(self) -> float:
        """Seconds until the deadline (negative once it has passed)."""
        return self.when - asyncio.get_running_loop().time()

    def excuse(self, seconds: float) -> None:
        """Move the deadline ``seconds`` later, as far as the slack left allows."""
        granted = min(max(seconds, 0.0), self.slack)
        self.slack -= granted
        self.when += granted


_DEADLINE: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "eni_ipam_azure_deadline", default=None
)


@dataclasses.dataclass
class _Call:
    """What :class:`AttemptPolicy` and the first-token wait need to know about the call in progress."""

    operation: str
    deadline: Deadline
    reserve: float = 0.0
    """Seconds before the deadline by which this call must end (time kept for what follows it)."""
    first_method: str = ""
    attempts: int = 0
    timeout: asyncio.Timeout | None = None
    """The running call's timeout, moved when the deadline moves."""

    def bound(self) -> float:
        return self.deadline.when - self.reserve

    def open_slack(self) -> None:
        """While a status poll waits for a token, the call may run into the deadline's slack."""
        self._reschedule(self.bound() + self.deadline.slack)

    def excuse(self, waited: float) -> None:
        """A status poll waited ``waited`` seconds for a token: that much is not counted."""
        self.deadline.excuse(waited)
        self._reschedule(self.bound())

    def _reschedule(self, when: float) -> None:
        if self.timeout is not None and not self.timeout.expired():
            self.timeout.reschedule(when)


_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("eni_ipam_azure_call", default=None)


def _label(call: _Call, method: str) -> str:
    if call.first_method in _LRO_METHODS and method == "GET":
        return poll_name(call.operation)
    return call.operation


class AttemptPolicy(AsyncHTTPPolicy[Any, Any]):
    """Counts every HTTP attempt and spends a rate-limit token for every one after a call's first."""

    def __init__(self, *, limiter: RateLimiter, metrics: ApiObserver) -> None:
        self._limiter = limiter
        self._metrics = metrics

    async def send(self, request: PipelineRequest[Any]) -> PipelineResponse[Any, Any]:
        call = _CALL.get()
        method = str(request.http_request.method).upper()
        if call is None:  # a request outside ArmClient.call: a bug, but still counted
            call = _Call("Unattributed", Deadline.after(0.0), first_method=method)
        if call.attempts == 0:
            call.first_method = method
            operation = call.operation  # its token was spent by the ApiCaller
        else:
            operation = _label(call, method)
            # A status poll's wait for a read token says how busy our limiter is, not how long Azure
            # takes: it is not counted against the write (within the deadline's slack).
            polling = operation != call.operation
            if polling:
                call.open_slack()
            started = asyncio.get_running_loop().time()
            try:
                waited = await self._limiter.acquire(operation)
            finally:
                if polling:  # excused even when the wait ran into the deadline: settling needs its time
                    call.excuse(asyncio.get_running_loop().time() - started)
            self._metrics.rate_limit_wait(operation=operation, seconds=waited)
        call.attempts += 1
        try:
            response = await self.next.send(request)
        except (ServiceRequestError, ServiceResponseError):
            self._metrics.api_request(operation=operation)
            raise
        self._metrics.api_request(operation=operation, throttled=response.http_response.status_code == 429)
        return response


class _FirstTokenLimiter(RateLimiter):
    """The shared limiter as the ApiCaller sees it: waiting for a call's first token counts against
    the call's deadline. A wait that reaches it raises ``OperationTimeout``, and nothing was sent."""

    def __init__(self, shared: RateLimiter) -> None:
        super().__init__({})  # every bucket lives in the shared limiter
        self._shared = shared

    def bucket(self, operation: str) -> Bucket:
        return self._shared.bucket(operation)

    async def acquire(self, operation: str) -> float:
        call = _CALL.get()
        if call is None:
            return await self._shared.acquire(operation)
        try:
            async with asyncio.timeout_at(call.bound()):
                return await self._shared.acquire(operation)
        except TimeoutError as exc:
            raise errors.TransientError(
                "no rate-limit token before the deadline (operation_timeout); nothing was sent",
                code="OperationTimeout",
                operation=operation,
            ) from exc


class ArmRetryPolicy(AsyncRetryPolicy[Any, Any]):
    """azure-core's retries, except that a ``Retry-After`` above ``max_retry_after`` is not waited
    for in place (the call ends and the caller backs off for that long)."""

    def __init__(self, *, max_retry_after: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._max_retry_after = max_retry_after

    def is_retry(self, settings: dict[str, Any], response: PipelineResponse[Any, Any]) -> bool:
        wait = self.get_retry_after(response)
        if wait is not None and wait > self._max_retry_after:
            return False
        return bool(super().is_retry(settings, response))


async def gather_all(aws: Iterable[Awaitable[T]]) -> list[T]:
    """Await all concurrently; on the first failure cancel the rest and raise it (never a partial
    result, never a stray task)."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def as_json(model: Any) -> Json:
    """The raw JSON of an SDK model (the new SDK models are mappings over it)."""
    if model is None:
        return {}
    as_dict = getattr(model, "as_dict", None)
    return dict(as_dict()) if callable(as_dict) else dict(model)


def make_credential(settings: AzureSettings) -> AsyncTokenCredential:
    """``DefaultAzureCredential`` for the configured cloud: workload identity on AKS (the federated
    token file the webhook mounts), managed identity on a VM, environment variables elsewhere."""
    from azure.identity.aio import DefaultAzureCredential

    return DefaultAzureCredential(authority=_AUTHORITIES[settings.cloud])


class ArmClient:
    """The network and compute SDK clients of one subscription; :meth:`call`, :meth:`collect` and
    :meth:`lro` are the only ways to reach Azure."""

    def __init__(
        self,
        settings: AzureSettings,
        *,
        limiter: RateLimiter,
        metrics: ApiObserver,
        clock: Clock,
        credential: AsyncTokenCredential | None = None,
        transport: AsyncHttpTransport[Any, Any] | None = None,
    ) -> None:
        """Args:
        settings: subscription, cloud, endpoint, retries, timeouts.
        limiter: the buckets every request spends from.
        metrics: where requests, throttles, latency and waits are recorded.
        clock: the clock of the latency metrics.
        credential: a token credential to use instead of ``DefaultAzureCredential`` (tests); the
            caller keeps ownership of it and closes it.
        transport: an azure-core async transport to use instead of aiohttp (tests: the fake ARM).
        """
        self.settings = settings
        self._owns_credential = credential is None
        self.credential = credential if credential is not None else make_credential(settings)
        self._caller = ApiCaller(
            limiter=_FirstTokenLimiter(limiter),
            metrics=metrics,
            clock=clock,
            translate=translate,
            sdk_counts_requests=True,
        )
        cloud = _CLOUDS[settings.cloud]
        endpoint = settings.arm_endpoint or get_arm_endpoints(cloud)["resource_manager"].rstrip("/")
        scopes = (
            [f"{settings.arm_endpoint}/.default"]
            if settings.arm_endpoint
            else list(get_arm_endpoints(cloud)["credential_scopes"])
        )

        def options() -> dict[str, Any]:
            # Policies are chained per pipeline (``next``), so each client gets instances of its own.
            retries = settings.max_retries
            return {
                "base_url": endpoint,
                "credential_scopes": scopes,
                "polling_interval": settings.polling_interval,
                "retry_policy": ArmRetryPolicy(
                    max_retry_after=settings.max_retry_after,
                    retry_total=retries,
                    retry_connect=retries,
                    retry_read=retries,
                    retry_status=retries,
                    retry_backoff_max=30,
                ),
                "per_retry_policies": [AttemptPolicy(limiter=limiter, metrics=metrics)],
                **({"transport": transport} if transport is not None else {}),
            }

        self.network = NetworkManagementClient(self.credential, settings.subscription_id, **options())
        self.compute = ComputeManagementClient(self.credential, settings.subscription_id, **options())
        self._closed = False

    @contextlib.contextmanager
    def deadline(self) -> Iterator[Deadline]:
        """Bound every call made inside (in this task and the tasks it starts) by one deadline,
        ``operation_timeout`` from now."""
        deadline = Deadline.after(self.settings.operation_timeout)
        token = _DEADLINE.set(deadline)
        try:
            yield deadline
        finally:
            _DEADLINE.reset(token)

    async def call(self, operation: str, fn: Callable[[], Awaitable[T]], *, reserve: float = 0.0) -> T:
        """Run one SDK call (``operation`` as :mod:`providers.azure.operations` names it), within the
        current :meth:`deadline` (or ``operation_timeout`` of its own), ending ``reserve`` seconds
        before it.

        Raises:
            errors.ProviderError: translated from whatever azure-core raised, or
                ``TransientError(code="OperationTimeout")`` at the deadline.
        """
        if self._closed:
            raise errors.TransientError(
                "the Azure client is closed", code="ClientClosed", operation=operation
            )
        deadline = _DEADLINE.get() or Deadline.after(self.settings.operation_timeout)
        call = _Call(operation, deadline, reserve=reserve)
        if call.bound() <= asyncio.get_running_loop().time():
            # Checked here: a call started past its bound could still reach ARM before the first
            # point at which the timeout can cancel it.
            raise errors.TransientError(
                "the deadline (operation_timeout) passed before it could be sent; nothing was sent",
                code="OperationTimeout",
                operation=operation,
            )

        async def run() -> T:
            try:
                async with asyncio.timeout_at(call.bound()) as timeout:
                    call.timeout = timeout
                    return await fn()
            except TimeoutError as exc:
                raise errors.TransientError(
                    "no answer before the deadline (operation_timeout); the outcome is unknown",
                    code="OperationTimeout",
                    operation=operation,
                ) from exc
            finally:
                call.timeout = None

        token = _CALL.set(call)
        try:
            return await self._caller.call(operation, run)
        finally:
            _CALL.reset(token)

    async def collect(self, operation: str, pages: Callable[[], AsyncIterator[Any]]) -> list[Json]:
        """Every item of a paged listing, following ``nextLink`` to the end, as raw JSON; one call
        (each page a rate-limited, counted request)."""

        async def run() -> list[Json]:
            return [as_json(item) async for item in pages()]

        return await self.call(operation, run)

    async def get(self, operation: str, fn: Callable[[], Awaitable[Any]]) -> Json:
        """One read, as raw JSON."""

        async def run() -> Json:
            return as_json(await fn())

        return await self.call(operation, run)

    async def lro(
        self,
        operation: str,
        begin: Callable[[], Awaitable[AsyncLROPoller[Any]]],
        *,
        reserve: float = 0.0,
    ) -> Json:
        """Start a long-running operation and wait for its end (polling on the event loop); its final
        resource as raw JSON (``{}`` for a delete). It must end ``reserve`` seconds before the
        deadline.

        Raises:
            errors.ProviderError: the operation was refused, or ended ``Failed``/``Canceled`` (its
                error code translated), or did not end in time (``OperationTimeout``).
        """

        async def run() -> Json:
            poller = await begin()
            return as_json(await poller.result())

        return await self.call(operation, run, reserve=reserve)

    async def close(self) -> None:
        """Close both SDK clients (their HTTP sessions) and the credential this client made."""
        if self._closed:
            return
        self._closed = True
        # Every close runs even when one before it raises (the stack unwinds in reverse order).
        async with contextlib.AsyncExitStack() as stack:
            if self._owns_credential:
                close = getattr(self.credential, "close", None)
                if close is not None:
                    stack.push_async_callback(close)
            stack.push_async_callback(self.compute.close)
            stack.push_async_callback(self.network.close)
