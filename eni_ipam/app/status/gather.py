"""What ``eni-ipam status`` reads: the API server's documents, and the controller's ``/metrics``.

**The API server**, through the product's own client (:class:`~eni_ipam.kube.api.KubeApi`, limited to
:data:`~eni_ipam.kube.permissions.STATUS_PERMISSIONS`), five reads at once: the ENIPools, the Nodes
(``--selector``), the Warning Events eni-ipam sent (they live in the ``default`` namespace, where
Events of cluster-scoped objects go), the leader Lease and the ENIPool CRD, each by name. A read
that the server refuses (403) or finds nothing for (404) is recorded and the rest goes on; no answer
at all, or credentials refused (401), is :class:`CannotReach`: nothing can be judged.

**The metrics**, where a URL is given: ``/metrics`` (the Prometheus text format) and ``/readyz`` beside
it. With a window, ``/metrics`` twice, that many seconds apart (rates need two readings). What cannot
be read is said, never raised: the judgement says "metrics not reachable".
"""

from __future__ import annotations

import asyncio
import datetime
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp

from eni_ipam.adapters.metrics.scrape import Scrape
from eni_ipam.app.status.model import Gathered
from eni_ipam.kube import errors
from eni_ipam.kube.api import CRDS, ENIPOOLS, EVENTS, LEASES, NODES, KubeApi
from eni_ipam.kube.crd import CRD_NAME
from eni_ipam.kube.events import COMPONENT, NAMESPACE
from eni_ipam.kube.health import problem_of

MAX_SCRAPE = 64 * 2**20
"""Bytes of ``/metrics`` read at most (a leader of 100,000 nodes writes about 1 MB)."""


class CannotReach(Exception):
    """The API server did not answer, or refused the credentials: nothing can be judged."""


async def read_cluster(
    api: KubeApi,
    *,
    namespace: str,
    lease_name: str,
    selector: Mapping[str, str],
    now: Callable[[], datetime.datetime],
) -> Gathered:
    """The documents, as of the moment the reads return (``now``).

    Raises:
        CannotReach: no answer, or the credentials refused, for any read.
    """

    async def listed(run: Awaitable[tuple[list[dict[str, Any]], str]]) -> list[dict[str, Any]]:
        return (await run)[0]

    reads: dict[str, Awaitable[Any]] = {
        "enipools": listed(api.list(ENIPOOLS)),
        "nodes": listed(api.list(NODES, labels=selector)),
        "events": listed(
            api.list(EVENTS, namespace=NAMESPACE, fields={"type": "Warning", "source": COMPONENT})
        ),
        "leases": api.get(LEASES, lease_name, namespace=namespace),
        "customresourcedefinitions": api.get(CRDS, CRD_NAME),
    }
    answers = await asyncio.gather(*reads.values(), return_exceptions=True)
    found: dict[str, Any] = {}
    unread: dict[str, str] = {}
    for resource, answer in zip(reads, answers, strict=True):
        if isinstance(answer, errors.KubeError):
            if problem_of(answer):
                raise CannotReach(str(answer)) from answer
            if not isinstance(answer, errors.KubeNotFound):
                unread[resource] = str(answer)
            found[resource] = None  # a Lease or a CRD that is not there; a kind not served
        elif isinstance(answer, BaseException):
            raise answer
        else:
            found[resource] = answer
    return Gathered(
        now=now(),
        namespace=namespace,
        lease_name=lease_name,
        lease=found["leases"],
        crd=found["customresourcedefinitions"],
        pools=found["enipools"] or (),
        nodes=found["nodes"] or (),
        events=found["events"] or (),
        unread=unread,
        selector=selector,
    )


async def read_metrics(url: str, *, window: float = 0.0, deadline: float = 10.0) -> dict[str, Any]:
    """What the controller at ``url`` says: ``scrape``, ``earlier`` (with ``window``: the first of two
    scrapes that far apart), ``readyz`` and ``metrics_error`` (why it could not be read), as
    :class:`Gathered`'s fields. ``deadline``: seconds each request may take."""
    client = aiohttp.ClientTimeout(total=deadline)
    try:
        async with aiohttp.ClientSession(timeout=client) as session:
            earlier = None
            if window > 0:
                earlier = await _scrape(session, url)
                await asyncio.sleep(window)
            scrape = await _scrape(session, url)
            readyz = await _readyz(session, url)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return {"metrics_error": _why(exc)}
    return {"scrape": scrape, "earlier": earlier, "window": window, "readyz": readyz}


async def _scrape(session: aiohttp.ClientSession, url: str) -> Scrape:
    async with session.get(url, headers={"Accept": "text/plain"}) as response:
        if response.status != 200:
            raise ValueError(f"{url} answered {response.status} {response.reason}")
        body = await response.content.read(MAX_SCRAPE + 1)
    if len(body) > MAX_SCRAPE:
        raise ValueError(f"{url} answered more than {MAX_SCRAPE} bytes")
    return Scrape.parse(body.decode("utf-8", "replace"))


async def _readyz(session: aiohttp.ClientSession, url: str) -> str:
    """``/readyz``'s one line beside ``url`` ("" when it does not answer one)."""
    try:
        async with session.get(urllib.parse.urljoin(url, "/readyz")) as response:
            body = await response.content.read(4096)
    except (aiohttp.ClientError, TimeoutError):
        return ""
    return body.decode("utf-8", "replace").strip().splitlines()[0] if body.strip() else ""


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return str(exc) or type(exc).__name__
