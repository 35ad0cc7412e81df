"""Settings of the AWS provider: frozen, validated, every default justified.

Operator-wide behaviour (cluster name, interface tags, prefix delegation, the rate-limit share) lives
in :class:`eni_ipam.core.config.Settings`. What a node asks for (watermarks, first interface index,
subnets, security groups) lives in its spec. This module holds what only the EC2 client needs.
:func:`aws_settings_from_mapping` is the one parser: it rejects unknown keys and bad values with a
:class:`~eni_ipam.core.errors.ConfigError` naming the field, and never half-applies anything.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from eni_ipam.core.config import (
    parse_bool,
    parse_buckets,
    parse_duration,
    parse_int,
    parse_tags,
    section_items,
)
from eni_ipam.core.errors import ConfigError
from eni_ipam.core.model import EMPTY_TAGS, Tags
from eni_ipam.core.ratelimit import EC2_BUCKETS, Bucket

_EMPTY_BUCKETS: Mapping[str, Bucket] = MappingProxyType({})
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AwsSettings:
    region: str = ""
    """EC2 region (``eu-west-1``). Empty: boto3's own discovery (``AWS_DEFAULT_REGION`` or the profile's
    region); when that finds none, the provider refuses to start with an error naming ``aws.region``.
    Set it: the manifests do."""

    endpoint_url: str = ""
    """EC2 endpoint to use instead of the regional one: an interface VPC endpoint in private
    clusters, or a local EC2 emulator in tests. Empty: the regional endpoint."""

    vpc_id: str = ""
    """Only this VPC's subnets, security groups, instances and interfaces are listed. Set it: without
    it every full resync lists every interface in the region."""

    subnet_ids_filter: tuple[str, ...] = ()
    """Only these subnets are listed, and so only they can receive new interfaces. Empty: every subnet
    of the VPC. An existing interface in a subnet outside the filter is never filled (its subnet's free
    addresses are unknown), so list the subnets of the nodes' interfaces too."""

    subnet_tags_filter: Tags = EMPTY_TAGS
    """Only subnets carrying every one of these tags are listed. Empty: no tag restriction."""

    instance_tags_filter: Tags = EMPTY_TAGS
    """Only instances carrying every one of these tags, and their interfaces, are listed by the full
    resync. Use it when several clusters share a VPC (``kubernetes.io/cluster/<name>: owned``). It
    scopes the listing only: a node whose instance lacks the tags is still fetched by id."""

    max_results: int = 1000
    """Page size of every Describe call: EC2's maximum, so a resync costs the fewest requests. Pages
    are still followed to the end."""

    max_threads: int = 16
    """Threads running boto3 calls (the client is thread-safe; each call blocks one thread). The rate
    limiter, not this, bounds the request rate; 16 covers EC2's latency at its refill rates."""

    total_max_attempts: int = 3
    """HTTP attempts per call in botocore's ``standard`` retry mode, the first included. Every retry is
    a real request against EC2's buckets, so it stays small; the reconciler's per-node backoff takes
    over after the SDK gives up."""

    connect_timeout: float = 5.0
    """Seconds to wait for a connection to the endpoint."""

    read_timeout: float = 30.0
    """Seconds to wait for an answer. EC2 answers mutations in well under a second; a hung call must
    not hold a worker for minutes."""

    update_limits_via_api: bool = True
    """Ask DescribeInstanceTypes about every type the cluster runs (once, until EC2 has described it)
    and prefer its answer to the shipped table, which stays the fallback. Without the IAM permission
    the first denial turns this off with one warning. Off: the shipped table only, with no call."""

    limits_refresh_interval: float = 60.0
    """Minimum seconds between two DescribeInstanceTypes requests about a type EC2 has not described
    yet, so a type EC2 does not know cannot turn into a stream of calls."""

    rate_limits: Mapping[str, Bucket] = dataclasses.field(default_factory=lambda: _EMPTY_BUCKETS)
    """Per-operation token buckets overriding EC2's published ones (``{AssignPrivateIpAddresses:
    {burst: 50, refill: 2}}``); the operator-wide ``rate_limit_share`` still scales them."""

    def buckets(self) -> dict[str, Bucket]:
        """EC2's published buckets with this configuration's overrides applied."""
        return {**EC2_BUCKETS, **self.rate_limits}


def aws_settings_from_mapping(data: Mapping[str, Any] | None, *, path: str = "aws") -> AwsSettings:
    """Build :class:`AwsSettings` from plain data (YAML), validating every key.

    Raises:
        ConfigError: unknown key or invalid value; ``field`` is ``path.key`` (or deeper).
    """
    fields = {f.name for f in dataclasses.fields(AwsSettings)}
    values: dict[str, Any] = {
        key: _PARSERS[key](field, raw) for key, field, raw in section_items(data, path, fields)
    }
    return AwsSettings(**values)


def _string(field: str, raw: Any) -> str:
    if not isinstance(raw, str):
        raise ConfigError(field, f"expected a string, got {raw!r}")
    return raw.strip()


def _region(field: str, raw: Any) -> str:
    value = _string(field, raw)
    if value and not _REGION.match(value):
        raise ConfigError(field, f"expected a region such as eu-west-1, got {raw!r}")
    return value


def _url(field: str, raw: Any) -> str:
    value = _string(field, raw)
    if value and not value.startswith(("http://", "https://")):
        raise ConfigError(field, f"expected an http:// or https:// URL, got {raw!r}")
    return value


def _prefixed_id(prefix: str) -> Any:
    def parse(field: str, raw: Any) -> str:
        value = _string(field, raw)
        if value and not value.startswith(prefix):
            raise ConfigError(field, f"expected an id starting with {prefix!r}, got {raw!r}")
        return value

    return parse


def _ids(field: str, raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list | tuple):
        raise ConfigError(field, f"expected a list of subnet ids, got {raw!r}")
    parse = _prefixed_id("subnet-")
    ids = tuple(parse(f"{field}[{i}]", item) for i, item in enumerate(raw))
    if len(set(ids)) != len(ids) or "" in ids:
        raise ConfigError(field, "subnet ids must be non-empty and distinct")
    return ids


def _positive_int(field: str, raw: Any) -> int:
    return parse_int(field, raw, minimum=1)


def _page_size(field: str, raw: Any) -> int:
    value = _positive_int(field, raw)
    if not 5 <= value <= 1000:
        raise ConfigError(field, f"EC2 accepts page sizes from 5 to 1000, got {value}")
    return value


def _seconds(field: str, raw: Any) -> float:
    value = parse_duration(raw, field)
    if value <= 0:
        raise ConfigError(field, "must be positive")
    return value


def _operation_name(where: str, op: Any) -> None:
    if not isinstance(op, str) or not re.fullmatch(r"[A-Z][A-Za-z0-9]+", op):
        raise ConfigError(where, "expected an EC2 operation name such as AssignPrivateIpAddresses")


def _buckets(field: str, raw: Any) -> Mapping[str, Bucket]:
    return parse_buckets(field, raw, check_name=_operation_name)


_PARSERS: dict[str, Any] = {
    "region": _region,
    "endpoint_url": _url,
    "vpc_id": _prefixed_id("vpc-"),
    "subnet_ids_filter": _ids,
    "subnet_tags_filter": parse_tags,
    "instance_tags_filter": parse_tags,
    "max_results": _page_size,
    "max_threads": _positive_int,
    "total_max_attempts": _positive_int,
    "connect_timeout": _seconds,
    "read_timeout": _seconds,
    "update_limits_via_api": parse_bool,
    "limits_refresh_interval": _seconds,
    "rate_limits": _buckets,
}
