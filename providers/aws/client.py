"""The boto3 EC2 client and the one path every EC2 request takes (docs/aws.md, "6. Rate limits").

Path of a call: client-side token bucket of the operation → boto3 on a bounded thread pool →
metrics → error translation (:func:`translate`, through :mod:`providers.ec2.errors`). It is built on
:class:`~eni_ipam.core.caller.ApiCaller`, like every other provider's calls.

Why threads: boto3 is synchronous. Its clients are thread-safe (sessions are not), so one client is
made at start-up and shared by a :class:`~concurrent.futures.ThreadPoolExecutor` of
``max_threads``. A cancelled call stops waiting at once, but its thread runs until the HTTP request
returns, which the read timeout bounds.

Retries: botocore's ``standard`` mode with ``total_max_attempts`` (3 by default), and its retry
quota is left on. Each retry is a real request against EC2's bucket, so botocore hooks account for
every attempt:

* ``before-send`` counts each HTTP attempt in ``eni_ipam_api_requests_total{operation}``;
* ``response-received`` counts each throttled answer in ``eni_ipam_api_throttled_total{operation}``;
* ``request-created`` of a retry (attempt > 1) spends a token of the operation's bucket before it
  goes out. It blocks the worker thread, not the event loop, and its wait shows in
  ``eni_ipam_api_rate_limit_wait_seconds``. Without it, botocore's retries would spend EC2's budget
  behind the limiter's back.

Callers never see a botocore exception: ``ClientError`` becomes the project error its EC2 code maps
to, and connection failures, timeouts, missing credentials and parameter validation errors map to
:class:`~eni_ipam.core.errors.TransientError`, :class:`~eni_ipam.core.errors.Unauthorized` and
:class:`~eni_ipam.core.errors.InvalidRequest`; an answer that cannot be read is a
:class:`~eni_ipam.core.errors.ProviderError` with the code ``ResponseParserError``.

The two heavy listings: :meth:`Ec2Client.pages` asks for ``DescribeNetworkInterfaces`` and
``DescribeInstances`` answers in the model, which the listing parser the client's session carries
(:mod:`providers.aws.listings`, installed by :func:`make_session`) reads straight from EC2's XML. A
client given by a caller without it answers botocore's dicts, and :mod:`providers.aws.api` reads
those as before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
from collections.abc import Callable
from typing import Any

import boto3
import botocore.config
import botocore.exceptions
import botocore.parsers
import botocore.session
import structlog

from eni_ipam.core import errors
from eni_ipam.core.caller import ApiCaller
from eni_ipam.core.clock import Clock
from eni_ipam.core.gate import check_current_gate
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.ratelimit import RateLimiter
from eni_ipam.errors import ConfigError, EniIpamError
from providers.aws import lean, listings
from providers.aws.settings import AwsSettings
from providers.ec2.errors import EC2_ERRORS, translate_ec2

log = structlog.get_logger("eni_ipam.aws")

SERVICE = "ec2"
RETRY_TOKEN_TIMEOUT = 60.0
"""Longest a retry waits for a rate-limit token from its thread; past it the retry goes anyway
(an event loop that stopped answering must not strand a worker thread)."""

THROTTLE_CODES = frozenset(code for code, kind in EC2_ERRORS.items() if kind is errors.Throttled)


def translate(exc: BaseException, operation: str) -> EniIpamError | None:
    """Map any botocore exception to the project's error tree (``None``: not botocore's)."""
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        return translate_ec2(str(error.get("Code", "Unknown")), str(error.get("Message", exc)), operation)
    if isinstance(exc, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError):
        return errors.Unauthorized(str(exc), code=type(exc).__name__, operation=operation)
    if isinstance(exc, botocore.exceptions.ParamValidationError):
        return errors.InvalidRequest(str(exc), code="ParamValidationError", operation=operation)
    # An answer that cannot be read (botocore's XML parser, or the listing parser finding a layout it
    # does not know): the call failed, loudly, whatever the HTTP status said.
    if isinstance(exc, botocore.parsers.ResponseParserError):
        return errors.ProviderError(str(exc), code="ResponseParserError", operation=operation)
    # HTTPClientError: read timeouts, closed connections; ConnectionError: refused, connect timeouts,
    # proxy and TLS failures. All transient from the reconciler's point of view.
    if isinstance(exc, botocore.exceptions.HTTPClientError | botocore.exceptions.ConnectionError):
        return errors.TransientError(str(exc), code=type(exc).__name__, operation=operation)
    if isinstance(exc, botocore.exceptions.BotoCoreError):
        return errors.ProviderError(str(exc), code=type(exc).__name__, operation=operation)
    return None


def make_session() -> boto3.session.Session:
    """A boto3 session whose clients read the two heavy listings with :mod:`providers.aws.listings`
    (botocore's ``response_parser_factory`` component; every other answer is botocore's)."""
    core = botocore.session.get_session()
    listings.install(core)
    return boto3.session.Session(botocore_session=core)


def make_client(settings: AwsSettings) -> Any:
    """A boto3 EC2 client configured as :class:`AwsSettings` says (one per process: clients are
    thread-safe, sessions are not).

    Raises:
        ConfigError: no region is configured or discoverable (field ``aws.region``).
    """
    config = botocore.config.Config(
        retries={"mode": "standard", "total_max_attempts": settings.total_max_attempts},
        connect_timeout=settings.connect_timeout,
        read_timeout=settings.read_timeout,
        max_pool_connections=settings.max_threads,
        user_agent_extra="eni-ipam",
    )
    try:
        session = make_session()
        lean.lean_session(session._session)  # the calls the provider makes, not all of EC2's
        return session.client(
            SERVICE,
            region_name=settings.region or None,
            endpoint_url=settings.endpoint_url or None,
            config=config,
        )
    except botocore.exceptions.BotoCoreError as exc:
        if not isinstance(exc, botocore.exceptions.NoRegionError):
            raise ConfigError("aws", f"cannot make the EC2 client: {exc}") from exc
        raise ConfigError(
            "aws.region", "not set, and none found in AWS_DEFAULT_REGION or the profile"
        ) from exc


class Ec2Client:
    """One boto3 client, its thread pool and its hooks; :meth:`call` and :meth:`pages` are the only
    ways to reach EC2."""

    def __init__(
        self,
        settings: AwsSettings,
        *,
        limiter: RateLimiter,
        metrics: ApiObserver,
        clock: Clock,
        client: Any = None,
    ) -> None:
        """Args:
        settings: the provider's settings (threads, retries, page size).
        limiter: the per-operation buckets every request spends from.
        metrics: where requests, throttles, latency and waits are recorded.
        clock: the clock of the latency metrics.
        client: a boto3 EC2 client to use instead of making one (tests).
        """
        self.settings = settings
        self.client = client if client is not None else make_client(settings)
        self._metrics = metrics
        self._caller = ApiCaller(
            limiter=limiter, metrics=metrics, clock=clock, translate=translate, sdk_counts_requests=True
        )
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=settings.max_threads, thread_name_prefix="eni-ipam-ec2"
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._reuse = {operation: listings.ReuseCache() for operation in listings.OPERATIONS}
        events = self.client.meta.events
        events.register(f"before-send.{SERVICE}", self._count_request)
        events.register(f"response-received.{SERVICE}", self._count_throttle)
        events.register(f"request-created.{SERVICE}", self._limit_retry)

    async def call(self, operation: str, **params: Any) -> dict[str, Any]:
        """Send one EC2 request (``operation`` as EC2 names it) with ``params``; the parsed answer.

        Raises:
            errors.ProviderError: translated from whatever botocore raised.
        """
        return await self._call(operation, params, None)

    async def _call(
        self, operation: str, params: dict[str, Any], listing: listings.Listing | None
    ) -> dict[str, Any]:
        if self._closed:
            raise errors.TransientError("the EC2 client is closed", code="ClientClosed", operation=operation)
        method: Callable[..., dict[str, Any]] = getattr(self.client, botocore.xform_name(operation))
        send = (
            functools.partial(method, **params)
            if listing is None
            else functools.partial(_in_model, listing, method, params)
        )
        loop = self._loop = asyncio.get_running_loop()
        # The worker thread runs the request in this task's context: botocore's retry hook asks the
        # mutation gate of the fenced method it runs for, if any (eni_ipam.core.gate).
        context = contextvars.copy_context()
        try:
            return await self._caller.call(
                operation, lambda: loop.run_in_executor(self._executor, context.run, send)
            )
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._closed and task is not None and not task.cancelling():
                # close() dropped the queued request; this task itself was not cancelled.
                raise errors.TransientError(
                    "the EC2 client was closed", code="ClientClosed", operation=operation
                ) from None
            raise

    async def pages(self, operation: str, key: str, *, full: bool = False, **params: Any) -> list[Any]:
        """Every item under ``key`` of a paged Describe answer, following ``NextToken`` to the end;
        one rate-limited request per page.

        ``DescribeNetworkInterfaces`` and ``DescribeInstances`` pages come in the model when the
        client's session has the listing parser: ``Interface`` and ``InstanceInfo`` objects
        (:mod:`providers.aws.listings`); otherwise (a client made without it, botocore's
        ``Stubber``), and for every other operation, botocore's dicts. ``full``: the listing holds
        everything in scope; its end turns over the operation's cache of unchanged items
        (:class:`~providers.aws.listings.ReuseCache`).
        """
        listing = listings.Listing(self._reuse.get(operation), full=full)
        items: list[Any] = []
        while True:
            answer = await self._call(operation, params, listing)
            items.extend(answer[listings.MODEL_KEY] if listings.MODEL_KEY in answer else answer.get(key, []))
            token = answer.get("NextToken")
            if not token:
                listing.finish()
                return items
            params = {**params, "NextToken": token}

    def close(self) -> None:
        """Stop the thread pool (calls in flight finish in their threads; queued ones are dropped and
        their callers get :class:`~eni_ipam.core.errors.TransientError`) and close the client."""
        self._closed = True
        self._loop = None
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.client.close()

    # -- botocore hooks (run in the worker thread) -----------------------------------------------

    def _count_request(self, event_name: str = "", **_: Any) -> None:
        self._metrics.api_request(operation=event_name.rsplit(".", 1)[-1])

    def _count_throttle(self, event_name: str = "", parsed_response: Any = None, **_: Any) -> None:
        code = ((parsed_response or {}).get("Error") or {}).get("Code")
        if code in THROTTLE_CODES:
            self._metrics.api_throttle(operation=event_name.rsplit(".", 1)[-1])

    def _limit_retry(self, request: Any = None, operation_name: str = "", **_: Any) -> None:
        attempt = ((getattr(request, "context", None) or {}).get("retries") or {}).get("attempt", 1)
        if attempt <= 1:
            return  # the first attempt took its token, and asked the gate, in the caller
        self._retry_token(operation_name, attempt)
        # A retry of a mutating request goes out only if the fence still admits it: the backoff and
        # the token may have outlasted the term (raising here ends the call).
        check_current_gate()

    def _retry_token(self, operation_name: str, attempt: int) -> None:
        loop = self._loop
        if loop is None or not loop.is_running():
            return  # no loop to wait on (closing down): the retry goes without a token
        future: concurrent.futures.Future[float] | None = None
        try:
            future = asyncio.run_coroutine_threadsafe(self._caller.limiter.acquire(operation_name), loop)
            waited = future.result(timeout=RETRY_TOKEN_TIMEOUT)
        except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError, RuntimeError):
            if future is not None:
                future.cancel()
            log.warning("retry_token_wait_abandoned", operation=operation_name, attempt=attempt)
            return
        self._metrics.rate_limit_wait(operation=operation_name, seconds=waited)


def _in_model(listing: listings.Listing, method: Callable[..., Any], params: dict[str, Any]) -> Any:
    """Call ``method`` (in a worker thread) with its listing's answers asked for in the model."""
    with listings.model_answers(listing):
        return method(**params)
