"""The EC2 front end: one request's bytes in, one EC2 answer out, whatever carries them.

:class:`Ec2Frontend` is transport-free: :meth:`Ec2Frontend.handle` takes a form-encoded body and
returns an :class:`Answer` (HTTP status, XML body, headers). The in-process transport
(:func:`install`, below) and the HTTP server (:mod:`~eni_ipam_testkit.ec2_wire.server`) only carry
it. It must run on the event loop of the cloud it fronts: every operation is one of the cloud's
coroutines or passes its gate.

Errors are EC2's: every refusal (the cloud's :class:`~providers.sim.records.SimError`, a malformed
or unknown parameter, an unknown action) becomes
``<Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/></Response>`` with EC2's
status: 503 for throttling codes (botocore's retry logic recognises them by code and status), 500
for ``InternalError`` / ``InternalFailure`` / ``Unavailable`` (retried as transient), 401/403 for
authentication and authorization codes, 400 for the rest. An exception that is not a ``SimError``
is a bug of the double and is not dressed up as an EC2 error: it propagates (in-process, to the
caller of boto3; over HTTP, aiohttp answers a plain 500 that botocore cannot parse).

In-process, :func:`install` registers a hook on one boto3 EC2 client. botocore builds, signs and
serializes each request as it would for EC2, then emits ``before-send``; the hook answers it with a
:class:`botocore.awsrequest.AWSResponse` made from the front end's :class:`Answer`, and botocore
parses that answer, raises ``ClientError`` and retries exactly as it would with EC2's
(status codes, error codes, its retry quota). Only the socket is skipped.

Threads: the AWS provider calls boto3 from its executor threads, while the in-memory cloud's
operations are coroutines on the test's event loop (their gate waits latency on that loop's clock).
The hook therefore submits each request to that loop with :func:`asyncio.run_coroutine_threadsafe`
and blocks its thread until the answer: the loop is free meanwhile, because the provider is
awaiting the executor. Calling the client synchronously *on* the loop's thread would deadlock, so
the hook refuses that with a ``RuntimeError`` saying so (use ``asyncio.to_thread``). An answer that
takes longer than ``timeout`` raises botocore's ``ReadTimeoutError``, as a hung EC2 would.

Instance tags: the in-memory cloud keeps none, but real nodes carry a dozen, which weigh in
DescribeInstances and which ``tag:`` filters select on. The front end gives every instance
:data:`DEFAULT_INSTANCE_TAGS` (an EKS managed node group's) unless :meth:`Ec2Frontend.tag_instance`
says otherwise, and DescribeInstances filters on those.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import io
import time
import uuid
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import botocore.awsrequest
import botocore.exceptions

from eni_ipam.core import errors
from eni_ipam_testkit.ec2_wire import render
from eni_ipam_testkit.ec2_wire.describe import Describer, Handler
from eni_ipam_testkit.ec2_wire.mutate import Mutator
from eni_ipam_testkit.ec2_wire.query import Query
from eni_ipam_testkit.ec2_wire.tables import Fragments, Tables
from providers.ec2.errors import EC2_ERRORS
from providers.sim.cloud import SimCloud
from providers.sim.records import SimError

THROTTLE_CODES = frozenset(code for code, kind in EC2_ERRORS.items() if kind is errors.Throttled)
SERVER_ERROR_CODES = frozenset({"InternalError", "InternalFailure", "Unavailable"})
_AUTH_STATUS = {"AuthFailure": 401, "UnauthorizedOperation": 403, "SignatureDoesNotMatch": 403}

DEFAULT_INSTANCE_TAGS: Mapping[str, str] = MappingProxyType(
    {
        "Name": "sim-nodes",
        "aws:autoscaling:groupName": "eks-nodes-sim-0a1b2c3d",
        "aws:ec2:fleet-id": "fleet-0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b",
        "aws:ec2launchtemplate:id": "lt-0f1e2d3c4b5a69788",
        "aws:ec2launchtemplate:version": "1",
        "eks:cluster-name": "sim",
        "eks:nodegroup-name": "nodes",
        "k8s.io/cluster-autoscaler/enabled": "true",
        "k8s.io/cluster-autoscaler/sim": "owned",
        "kubernetes.io/cluster/sim": "owned",
    }
)
"""Tags of every instance unless :meth:`Ec2Frontend.tag_instance` sets others: an EKS managed node
group's nodes in a cluster named ``sim``."""


def http_status(code: str) -> int:
    """The HTTP status EC2 answers an error ``code`` with."""
    if code in THROTTLE_CODES:
        return 503
    if code in SERVER_ERROR_CODES:
        return 500
    return _AUTH_STATUS.get(code, 400)


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """One EC2 answer: what a transport sends back."""

    status: int
    body: bytes
    request_id: str
    error_code: str = ""
    """The EC2 error code of an error answer, empty on success."""

    @property
    def headers(self) -> dict[str, str]:
        return {
            "Content-Type": "text/xml;charset=UTF-8",
            "x-amzn-RequestId": self.request_id,
            "Server": "AmazonEC2",
        }


class Ec2Frontend:
    """EC2's wire protocol over one :class:`SimCloud` (see the module docstring)."""

    def __init__(
        self,
        cloud: SimCloud,
        *,
        region: str = "us-east-1",
        instance_tags: Mapping[str, str] = DEFAULT_INSTANCE_TAGS,
        cache: bool = True,
    ) -> None:
        """Args:
        cloud: the cloud answered from; the front end must run on the loop of its clock.
        region: the region of the DNS names and ARNs in the answers.
        instance_tags: tags of every instance that :meth:`tag_instance` has not tagged.
        cache: keep rendered items until their record changes (:class:`~.tables.Fragments`).
        """
        self.cloud = cloud
        self.region = region
        self.tables = Tables(cloud)
        self._default_tags = dict(instance_tags)
        self._tags: dict[str, dict[str, str]] = {}
        self.fragments = Fragments(
            render.Renderer(region, self.tables.groups.rows), self.tables, self.instance_tags, cache=cache
        )
        self.requests: collections.Counter[str] = collections.Counter()
        """Requests answered, by action (errors included; an unknown action counts under its name)."""
        self._handlers: dict[str, Handler] = {
            **Describer(cloud, self.tables, self.fragments, self.instance_tags).handlers(),
            **Mutator(cloud, self.tables, self.fragments).handlers(),
        }

    @property
    def actions(self) -> frozenset[str]:
        """Every EC2 action the front end answers."""
        return frozenset(self._handlers)

    def warm(self, *, render: bool = True) -> float:
        """Index every table and, with ``render``, render every interface and instance, so that the
        first listing costs what later ones do; the seconds it took."""
        started = time.perf_counter()
        self.tables.refresh()
        if render and self.fragments.cache:
            for iface in self.tables.interfaces.rows.values():
                self.fragments.interface(iface)
            for instance in self.tables.instances.rows.values():
                self.fragments.reservation(instance)
        return time.perf_counter() - started

    def instance_tags(self, instance_id: str) -> Mapping[str, str]:
        return self._tags.get(instance_id, self._default_tags)

    def tag_instance(self, instance_id: str, tags: Mapping[str, str]) -> None:
        """Give ``instance_id`` exactly ``tags`` (instead of the default ones) from now on."""
        self._tags[instance_id] = dict(tags)

    async def handle(self, body: bytes | str) -> Answer:
        """Answer one request (a form-encoded body, as botocore sends it).

        Raises:
            Exception: only a bug of the front end or of the cloud; every EC2 refusal is an answer.
        """
        request_id = str(uuid.uuid4())
        try:
            q = Query.parse(body)
            self.requests[q.action or "(none)"] += 1
            handler = self._handlers.get(q.action)
            if handler is None:
                raise SimError(
                    "InvalidAction", f"The action {q.action or '(none)'} is not valid for this web service."
                )
            if q.boolean("DryRun", False):
                raise SimError(
                    "UnsupportedOperation", f"{q.action}: the in-memory cloud does not model DryRun"
                )
            q.params.pop("DryRun", None)
            return Answer(200, await handler(q, request_id), request_id)
        except SimError as exc:
            return Answer(
                http_status(exc.code),
                render.error_document(exc.code, exc.message, request_id),
                request_id,
                exc.code,
            )


# -- in-process transport ------------------------------------------------------------------------


class _Body(io.BytesIO):
    """The raw body botocore reads an answer from (``AWSResponse.content`` calls ``stream()``)."""

    def stream(self, **_: Any) -> Iterator[bytes]:
        chunk = self.read()
        while chunk:
            yield chunk
            chunk = self.read()


@dataclasses.dataclass
class Installed:
    """A front end installed on a client; :meth:`uninstall` removes the hook."""

    frontend: Ec2Frontend
    client: Any
    unique_id: str

    def uninstall(self) -> None:
        self.client.meta.events.unregister("before-send.ec2", unique_id=self.unique_id)


def install(
    client: Any,
    cloud: SimCloud | Ec2Frontend,
    loop: asyncio.AbstractEventLoop | None = None,
    *,
    timeout: float = 60.0,
) -> Installed:
    """Make ``client`` (a boto3 EC2 client) talk to ``cloud`` through EC2's wire protocol, in-process.

    Args:
        client: the boto3 client; give the same one to ``AwsProvider(client=...)``.
        cloud: the cloud, or a front end already made over it (to share its tags and caches).
        loop: the loop the cloud's operations run on; the running loop by default.
        timeout: seconds a request may take before it fails with ``ReadTimeoutError``.

    Raises:
        RuntimeError: no ``loop`` given and none is running.
    """
    frontend = cloud if isinstance(cloud, Ec2Frontend) else Ec2Frontend(cloud)
    target = loop if loop is not None else asyncio.get_running_loop()

    def before_send(request: botocore.awsrequest.AWSPreparedRequest, **_: Any) -> Any:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is target:
            raise RuntimeError(
                "a boto3 call on the event loop's own thread would deadlock the in-process EC2 "
                "front end; call it from another thread (asyncio.to_thread, or the provider's executor)"
            )
        future = asyncio.run_coroutine_threadsafe(frontend.handle(request.body or b""), target)
        try:
            answer = future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise botocore.exceptions.ReadTimeoutError(endpoint_url=request.url) from None
        return botocore.awsrequest.AWSResponse(request.url, answer.status, answer.headers, _Body(answer.body))

    unique_id = f"eni-ipam-ec2-wire-{id(frontend)}-{id(client)}"
    client.meta.events.register("before-send.ec2", before_send, unique_id=unique_id)
    return Installed(frontend, client, unique_id)
