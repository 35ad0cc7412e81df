"""The fake ARM as an azure-core transport: a request in, an ARM answer out, every one recorded.

Role: :class:`FakeAzure` is what a test passes to the SDK clients as ``transport=``. Its
:meth:`~FakeAzure.send` takes the request azure-core's pipeline built (after the retry, the
credential and the other policies), finds its route (:mod:`~eni_ipam_testkit.fake_azure.routes`),
lets the queued faults act (:mod:`~eni_ipam_testkit.fake_azure.faults`), has the handler answer
(:mod:`~eni_ipam_testkit.fake_azure.handlers`, :mod:`~eni_ipam_testkit.fake_azure.operations`),
and returns the answer as a complete azure-core response. The class is the whole fake: it stacks
the store, the faults, the operations and the handlers (one layer a module, each on the one below),
so a test holds one object.

Invariants:

* every request a route serves is recorded in :attr:`FakeAzure.requests` with the status it got, a
  dropped one with status ``0``, before ``send`` returns or raises;
* a request for another subscription answers ``404 SubscriptionNotFound``; a status poll is recorded
  as ``<operation>.Poll``, so faults and counts can tell one operation's polls from another's;
* an ARM refusal (:class:`~eni_ipam_testkit.fake_azure.model.Refusal`) becomes its error answer; any
  other exception (a bug, or a request the fake does not serve) propagates to the test;
* ``latency`` is slept on the event loop before the request is handled (virtual under looptime), and
  nothing else awaits, so a request is handled atomically with respect to the others.
"""

from __future__ import annotations

import asyncio
import json
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

from azure.core.exceptions import ServiceRequestError
from azure.core.pipeline.transport import AsyncHttpTransport
from azure.core.rest import AsyncHttpResponse, HttpRequest

from eni_ipam_testkit.fake_azure.handlers import Handlers
from eni_ipam_testkit.fake_azure.model import BASE_URL, DEFAULT_SUBSCRIPTION, Refusal
from eni_ipam_testkit.fake_azure.routes import ROUTES
from eni_ipam_testkit.fake_azure.wire import Answer, FakeResponse, RecordedRequest, Request, error


class _Dropped(Exception):
    def __init__(self, operation: str) -> None:
        super().__init__(operation)
        self.operation = operation


class FakeAzure(Handlers, AsyncHttpTransport[HttpRequest, AsyncHttpResponse]):
    """One subscription of Azure Resource Manager, in memory, served over azure-core's transport API."""

    def __init__(
        self,
        *,
        subscription_id: str = DEFAULT_SUBSCRIPTION,
        location: str = "westeurope",
        page_size: int = 100,
        lro_polls: int = 1,
        latency: float = 0.0,
        base_url: str = BASE_URL,
    ) -> None:
        """Args:
        subscription_id: the only subscription served (others answer ``SubscriptionNotFound``).
        location: region of everything created.
        page_size: items per page of every listing.
        lro_polls: ``InProgress`` answers of a long-running operation's status before it ends.
        latency: seconds each request takes, slept on the event loop.
        base_url: the endpoint the clients are configured with (``nextLink``s and status URLs use it).
        """
        super().__init__(
            subscription_id=subscription_id,
            location=location,
            page_size=page_size,
            lro_polls=lro_polls,
            base_url=base_url,
        )
        self.latency = latency
        self.requests: list[RecordedRequest] = []
        self.closed = False

    # -- what was asked ----------------------------------------------------------------------------

    def operations(self, *, method: str | None = None) -> list[str]:
        """Operations of the recorded requests, in order (``method`` filters)."""
        return [r.operation for r in self.requests if method is None or r.method == method]

    def count(self, operation: str, *, status: int | None = None) -> int:
        return sum(
            1 for r in self.requests if r.operation == operation and (status is None or r.status == status)
        )

    # -- transport ---------------------------------------------------------------------------------

    async def open(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True

    async def __aenter__(self) -> FakeAzure:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.close()

    async def send(self, request: HttpRequest, **kwargs: Any) -> AsyncHttpResponse:
        if self.latency:
            await asyncio.sleep(self.latency)
        parts = urlsplit(str(request.url))
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        raw = request.content
        body = json.loads(raw) if raw else None
        req = Request(
            method=str(request.method).upper(),
            path=parts.path.rstrip("/"),
            query=query,
            headers=request.headers,
            body=body,
            api_version=query.get("api-version", ""),
        )
        try:
            operation, answer = self._dispatch(req)
        except _Dropped as dropped:
            if_match = request.headers.get("If-Match")
            self.requests.append(
                RecordedRequest(req.method, str(request.url), dropped.operation, 0, if_match, body)
            )
            raise ServiceRequestError(f"connection dropped before ARM answered {dropped.operation}") from None
        self.requests.append(
            RecordedRequest(
                method=req.method,
                url=str(request.url),
                operation=operation,
                status=answer.status,
                if_match=request.headers.get("If-Match"),
                body=body,
            )
        )
        payload = b"" if answer.body is None else json.dumps(answer.body).encode()
        headers = {"Content-Type": "application/json; charset=utf-8", **answer.headers}
        return FakeResponse(request, answer.status, payload, headers)

    def _dispatch(self, req: Request) -> tuple[str, Answer]:
        path = req.path.lower()
        for method, pattern, operation, handler in ROUTES:
            if method != req.method or not (m := pattern.match(path)):
                continue
            if m["sub"] != self.subscription_id.lower():
                return operation, error(
                    404, "SubscriptionNotFound", f"The subscription '{m['sub']}' could not be found."
                )
            if operation in ("AsyncOperation.Get", "AsyncOperation.Result"):
                lro = self._lros.get(m["op"])
                operation = f"{lro.operation}.Poll" if lro else operation
            if self._dropped(operation):
                raise _Dropped(operation)
            if (throttled := self._throttled(operation)) is not None:
                return operation, throttled
            try:
                answer: Answer = getattr(self, handler)(m, req)
            except Refusal as refusal:
                answer = error(refusal.status, refusal.code, refusal.message)
            return operation, self._lose(operation, answer)
        raise NotImplementedError(f"the fake Azure does not serve {req.method} {req.path}")
