"""Settings of the AWS provider (the ``aws:`` section): frozen, validated, every default justified.

Operator-wide behaviour (cluster name, interface tags, prefix delegation, the rate-limit share) lives
in :class:`eni_ipam.core.settings.Settings`. What a node asks for (watermarks, first interface index,
subnets, security groups) lives in its spec. This module holds what only the EC2 client needs, as a
:class:`~eni_ipam.config.schema.ConfigModel`: unknown keys and bad values are refused with a
:class:`~eni_ipam.errors.ConfigError` naming the field, and nothing is half-applied.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from eni_ipam.config.schema import (
    ConfigModel,
    Duration,
    FieldError,
    PositiveDuration,
    PositiveInt,
    check_names,
)
from eni_ipam.core.fields import EMPTY_BUCKETS, Buckets, TagMap
from eni_ipam.core.model import EMPTY_TAGS
from eni_ipam.core.ratelimit import EC2_BUCKETS, Bucket

_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
_OPERATION = re.compile(r"[A-Z][A-Za-z0-9]+")


def _region(value: str) -> str:
    value = value.strip()
    if value and not _REGION.match(value):
        raise ValueError(f"expected a region such as eu-west-1, got {value!r}")
    return value


def _url(value: str) -> str:
    value = value.strip()
    if value and not value.startswith(("http://", "https://")):
        raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
    return value


def _prefixed(prefix: str) -> AfterValidator:
    def check(value: str) -> str:
        value = value.strip()
        if value and not value.startswith(prefix):
            raise ValueError(f"expected an id starting with {prefix!r}, got {value!r}")
        return value

    return AfterValidator(check)


def _distinct(ids: tuple[str, ...]) -> tuple[str, ...]:
    if len(set(ids)) != len(ids) or "" in ids:
        raise ValueError("subnet ids must be non-empty and distinct")
    return ids


def _operation(name: str) -> str | None:
    if _OPERATION.fullmatch(name):
        return None
    return "expected an EC2 operation name such as AssignPrivateIpAddresses"


_Region = Annotated[str, AfterValidator(_region)]
_Url = Annotated[str, AfterValidator(_url)]
_VpcId = Annotated[str, _prefixed("vpc-")]
_SubnetIds = Annotated[
    tuple[Annotated[str, _prefixed("subnet-")], ...], Field(strict=False), AfterValidator(_distinct)
]
_OperationBuckets = Annotated[Buckets, AfterValidator(lambda v: check_names(v, _operation))]


class AwsSettings(ConfigModel):
    region: _Region = ""
    """EC2 region (``eu-west-1``). Empty: boto3's own discovery (``AWS_DEFAULT_REGION`` or the profile's
    region); when that finds none, the provider refuses to start with an error naming ``aws.region``.
    Set it: the manifests do."""

    endpoint_url: _Url = ""
    """EC2 endpoint to use instead of the regional one: an interface VPC endpoint in private
    clusters, or a local EC2 emulator in tests. Empty: the regional endpoint. ``http://`` only with
    ``allow_plain_http``."""

    allow_plain_http: bool = False
    """Allow an ``http://`` ``endpoint_url``: for a local EC2 emulator only. Over plain HTTP every
    request's signature (SigV4 ``Authorization``) and the session token travel in clear text, so
    an ``http://`` endpoint is refused unless this says so."""

    vpc_id: _VpcId = ""
    """Only this VPC's subnets, security groups, instances and interfaces are listed. Set it: without
    it every full resync lists every interface in the region."""

    subnet_ids_filter: _SubnetIds = ()
    """Only these subnets are listed, and so only they can receive new interfaces. Empty: every subnet
    of the VPC. An existing interface in a subnet outside the filter is never filled (its subnet's free
    addresses are unknown), so list the subnets of the nodes' interfaces too."""

    subnet_tags_filter: TagMap = EMPTY_TAGS
    """Only subnets carrying every one of these tags are listed. Empty: no tag restriction."""

    instance_tags_filter: TagMap = EMPTY_TAGS
    """Only instances carrying every one of these tags, and their interfaces, are listed by the full
    resync. Use it when several clusters share a VPC (``kubernetes.io/cluster/<name>: owned``). It
    scopes the listing only: a node whose instance lacks the tags is still fetched by id."""

    max_results: Annotated[int, Field(ge=5, le=1000)] = 1000
    """Page size of every Describe call: EC2's maximum, so a resync costs the fewest requests. Pages
    are still followed to the end."""

    max_threads: PositiveInt = 16
    """Threads running boto3 calls (the client is thread-safe; each call blocks one thread). The rate
    limiter, not this, bounds the request rate; 16 covers EC2's latency at its refill rates."""

    total_max_attempts: PositiveInt = 3
    """HTTP attempts per call in botocore's ``standard`` retry mode, the first included. Every retry is
    a real request against EC2's buckets, so it stays small; the reconciler's per-node backoff takes
    over after the SDK gives up."""

    connect_timeout: PositiveDuration = 5.0
    """Seconds to wait for a connection to the endpoint."""

    read_timeout: PositiveDuration = 30.0
    """Seconds to wait for an answer. EC2 answers mutations in well under a second; a hung call must
    not hold a worker for minutes."""

    update_limits_via_api: bool = True
    """Ask DescribeInstanceTypes about every type the cluster runs (once, until EC2 has described it)
    and prefer its answer to the shipped table, which stays the fallback. Without the IAM permission
    the first denial turns this off with one warning. Off: the shipped table only, with no call."""

    limits_refresh_interval: PositiveDuration = 60.0
    """Minimum seconds between two DescribeInstanceTypes requests about a type EC2 has not described
    yet, so a type EC2 does not know cannot turn into a stream of calls."""

    instance_listing_interval: Duration = 1800.0
    """Seconds between two full DescribeInstances listings (0: at every resync). Between them a
    resync lists only the instances that are not running, and describes the ones the interface
    listing names but it does not know, or that lost every interface: a running instance's type,
    zone and subnet never change. A full listing nests every instance's interfaces and addresses, as
    heavy as the interface listing itself; at 100,000 nodes that halves a resync. The full listing
    still comes every 30 minutes, for a type changed while an instance was stopped and started again
    between two resyncs. With ``instance_tags_filter`` every resync lists whole: it is how new
    instances are found there."""

    rate_limits: _OperationBuckets = Field(default_factory=lambda: EMPTY_BUCKETS)
    """Per-operation token buckets overriding EC2's published ones (``{AssignPrivateIpAddresses:
    {burst: 50, refill: 2}}``); the operator-wide ``rate_limit_share`` still scales them."""

    @model_validator(mode="after")
    def _plain_http(self) -> AwsSettings:
        if self.endpoint_url.startswith("http://") and not self.allow_plain_http:
            raise FieldError(
                "endpoint_url",
                f"{self.endpoint_url} is plain HTTP: requests' signatures and session tokens would travel "
                "in clear text. Use https://, or set aws.allow_plain_http: true for a local emulator",
            )
        return self

    def buckets(self) -> dict[str, Bucket]:
        """EC2's published buckets with this configuration's overrides applied."""
        return {**EC2_BUCKETS, **self.rate_limits}
