"""What travels between azure-core and the fake ARM: requests in, answers out, and their record.

Role: the HTTP side of the transport, kept apart from what the fake models. :class:`Request` is a
request as the handlers read it (upper-case method, path without a trailing slash, last value of
each query parameter, decoded JSON body); :class:`Answer` is what a handler returns (an ARM error is
:func:`error`'s ``{"error": {"code", "message"}}``); :class:`FakeResponse` is the complete, already
read azure-core response the SDK's pipeline gets; :class:`RecordedRequest` is one line of
:attr:`~eni_ipam_testkit.fake_azure.FakeAzure.requests`. :func:`page` writes ARM's paging: a
``value`` of at most ``size`` items and, while more follow, a ``nextLink`` whose ``$skiptoken`` is the
next item's index.

Invariant: a response is whole from the start (no streaming): reading it twice gives the same bytes,
and the SDK's retry or polling never meets a half-read body.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Mapping, MutableMapping
from types import TracebackType
from typing import Any

from azure.core.exceptions import HttpResponseError
from azure.core.rest import AsyncHttpResponse, HttpRequest
from azure.core.utils import case_insensitive_dict

from eni_ipam_testkit.fake_azure.model import NETWORK_API, Json


class FakeResponse(AsyncHttpResponse):
    """A complete, already-read ARM answer."""

    def __init__(self, request: HttpRequest, status: int, body: bytes, headers: Mapping[str, str]) -> None:
        self._request = request
        self._status = status
        self._content = body
        self._headers: MutableMapping[str, str] = case_insensitive_dict(dict(headers))
        self._closed = False
        self._encoding: str | None = "utf-8"

    @property
    def request(self) -> HttpRequest:
        return self._request

    @property
    def status_code(self) -> int:
        return self._status

    @property
    def headers(self) -> MutableMapping[str, str]:
        return self._headers

    @property
    def reason(self) -> str:
        return _REASONS.get(self._status, "Unknown")

    @property
    def content_type(self) -> str | None:
        return self._headers.get("Content-Type")

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def is_stream_consumed(self) -> bool:
        return self._closed

    @property
    def encoding(self) -> str | None:
        return self._encoding

    @encoding.setter
    def encoding(self, value: str | None) -> None:
        self._encoding = value

    @property
    def url(self) -> str:
        return str(self._request.url)

    @property
    def content(self) -> bytes:
        return self._content

    def text(self, encoding: str | None = None) -> str:
        return self._content.decode(encoding or self._encoding or "utf-8")

    def json(self) -> Any:
        return json.loads(self.text()) if self._content else None

    def raise_for_status(self) -> None:
        if self._status >= 400:
            raise HttpResponseError(response=self)

    async def read(self) -> bytes:
        self._closed = True
        return self._content

    async def iter_raw(self, **kwargs: Any) -> AsyncIterator[bytes]:
        yield self._content

    async def iter_bytes(self, **kwargs: Any) -> AsyncIterator[bytes]:
        yield self._content

    async def close(self) -> None:
        self._closed = True

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.close()


_REASONS = {
    200: "OK",
    201: "Created",
    202: "Accepted",
    204: "No Content",
    400: "Bad Request",
    404: "Not Found",
    409: "Conflict",
    412: "Precondition Failed",
    429: "Too Many Requests",
}


@dataclasses.dataclass(frozen=True)
class RecordedRequest:
    """One request the fake answered (``status`` 0: the connection was dropped)."""

    method: str
    url: str
    operation: str
    """The provider's name for it (``NetworkInterfaces.CreateOrUpdate``, ``<operation>.Poll``)."""
    status: int
    if_match: str | None
    body: Any


@dataclasses.dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: Mapping[str, str]
    body: Any
    api_version: str


@dataclasses.dataclass
class Answer:
    status: int
    body: Any = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


def error(status: int, code: str, message: str) -> Answer:
    return Answer(status, {"error": {"code": code, "message": message}})


def page(items: list[Json], req: Request, size: int, base_url: str) -> Answer:
    """One page of a listing: the items from ``$skiptoken`` on, and a ``nextLink`` while more follow."""
    start = int(req.query.get("$skiptoken", "0"))
    chunk = items[start : start + size]
    body: Json = {"value": chunk}
    if start + size < len(items):
        version = req.api_version or NETWORK_API
        body["nextLink"] = f"{base_url}{req.path}?api-version={version}&$skiptoken={start + size}"
    return Answer(200, body)
