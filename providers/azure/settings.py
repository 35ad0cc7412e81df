"""Settings of the Azure provider (the ``azure:`` section): frozen, validated, every default justified.

Operator-wide behaviour (cluster name, the rate-limit share, garbage collection) lives in
:class:`eni_ipam.core.settings.Settings`; this module holds what only the Azure client needs.
A :class:`~eni_ipam.config.schema.ConfigModel`: unknown keys and bad values are refused with a
:class:`~eni_ipam.errors.ConfigError` naming the field (``azure.resource_groups[1]``), and
nothing is half-applied. ``subscription_id``, ``resource_groups`` and ``vnet_id`` have no default:
without them there is nothing to look at, and a guess could only look at the wrong thing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from eni_ipam.config.schema import ConfigModel, FieldError, PositiveDuration, check_names, short
from eni_ipam.core.fields import EMPTY_BUCKETS, Buckets
from eni_ipam.core.ratelimit import Bucket
from eni_ipam.errors import ConfigError
from providers.azure import ids
from providers.azure.operations import BUCKETS

CLOUDS = ("AzurePublicCloud", "AzureChinaCloud", "AzureUSGovernment")
"""National clouds by the names the Azure CLI uses (``az cloud list``)."""

_EMPTY_SIZES: Mapping[str, int] = MappingProxyType({})
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
# Resource group names: 1-90 characters, letters, digits, '.', '_', '-', '(' and ')', not ending in '.'.
_RESOURCE_GROUP = re.compile(r"^[-\w.()]{0,89}[-\w()]$")
_VM_SIZE = re.compile(r"^[A-Za-z][A-Za-z0-9_]+$")
_MAX_NICS = 16
_MAX_RETRIES = 10


def _text(raw: Any) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError(f"expected a non-empty string, got {short(raw)}")
    return raw.strip()


def _subscription(raw: Any) -> str:
    value = _text(raw)
    if not _UUID.match(value):
        raise ValueError(f"expected a subscription id (a UUID), got {raw!r}")
    return value.lower()


def _resource_group(raw: Any) -> str:
    name = _text(raw)
    if not _RESOURCE_GROUP.match(name):
        raise ValueError(f"not a resource group name: {raw!r}")
    return name.lower()


def _distinct_groups(groups: tuple[str, ...]) -> tuple[str, ...]:
    if not groups:
        raise ValueError("expected a non-empty list of resource group names")
    for i, name in enumerate(groups):
        if name in groups[:i]:
            raise FieldError(f"[{i}]", f"{name!r} is listed twice (names are case-insensitive)")
    return groups


def _vnet_id(raw: Any) -> str:
    value = _text(raw)
    if ids.parse_vnet(value) is None:
        raise ValueError(
            "expected a virtual network resource id (/subscriptions/<id>/resourceGroups/<group>"
            f"/providers/Microsoft.Network/virtualNetworks/<name>), got {raw!r}"
        )
    return ids.normalize(value)


def _cloud(raw: Any) -> str:
    value = _text(raw)
    for cloud in CLOUDS:
        if value.lower() == cloud.lower():
            return cloud
    raise ValueError(f"expected one of {', '.join(CLOUDS)}, got {raw!r}")


def _url(raw: Any) -> str:
    if raw == "":
        return ""
    value = _text(raw)
    if not value.startswith("https://"):
        raise ValueError(f"expected an https:// URL (tokens are only sent over TLS), got {raw!r}")
    return value.rstrip("/")


def _vm_size(name: str) -> str | None:
    return None if _VM_SIZE.match(name) else "expected a VM size name such as Standard_D8s_v5"


def _bucket_name(name: str) -> str | None:
    return None if name in BUCKETS else f"unknown bucket (known: {', '.join(sorted(BUCKETS))})"


_Subscription = Annotated[str, BeforeValidator(_subscription)]
_ResourceGroups = Annotated[
    tuple[Annotated[str, BeforeValidator(_resource_group)], ...],
    Field(strict=False),
    AfterValidator(_distinct_groups),
]
_VnetId = Annotated[str, BeforeValidator(_vnet_id)]
_Cloud = Annotated[str, BeforeValidator(_cloud)]
_Url = Annotated[str, BeforeValidator(_url)]
_Retries = Annotated[int, Field(ge=0, le=_MAX_RETRIES)]
_VmSizes = Annotated[
    Mapping[str, Annotated[int, Field(ge=1, le=_MAX_NICS)]],
    AfterValidator(lambda v: MappingProxyType(dict(check_names(v, _vm_size)))),
]
_ArmBuckets = Annotated[Buckets, AfterValidator(lambda v: check_names(v, _bucket_name))]


class AzureSettings(ConfigModel):
    subscription_id: _Subscription
    """The subscription of the VMs, their NICs and the virtual network. Required: ARM ids are scoped
    to one subscription, and every request names it."""

    resource_groups: _ResourceGroups
    """Resource groups whose VMs, scale sets, NICs and application security groups are listed by the
    full resync (on AKS, the node resource group ``MC_…``). Required: listing a whole subscription
    would read, and count against ARM's read budget, every VM of every other team. A node whose VM is
    outside these groups is still read by id, but never seen by a resync."""

    vnet_id: _VnetId
    """Resource id of the virtual network of the nodes' NICs; its subnets (and their free addresses)
    are the ones reported. Required, for the same reason. It must be in ``subscription_id``."""

    cloud: _Cloud = "AzurePublicCloud"
    """National cloud: ``AzurePublicCloud``, ``AzureChinaCloud`` or ``AzureUSGovernment``. Picks the
    Resource Manager endpoint, the token scope and the Entra ID authority."""

    arm_endpoint: _Url = ""
    """Resource Manager endpoint to use instead of the cloud's (Azure Stack Hub, a private link, or a
    test double). Empty: the cloud's own. The token scope follows it (``<endpoint>/.default``)."""

    operation_timeout: PositiveDuration = 120.0
    """Longest one assign or unassign may take: waiting for another update of the same NIC, rate-limit
    tokens, reads, the write (retries and long-running-operation polling included) and settling its
    outcome, together. The write must end a quarter of it before the deadline, so that a write whose
    outcome is unknown can still be settled by reading the NIC. The time the write's status polls
    wait for read tokens is not counted, up to another ``operation_timeout``. Any other single call
    (a listing with all its pages, one read, a delete) is bounded by it on its own. Past it:
    ``TransientError`` with code ``OperationTimeout`` (nothing changed) or ``OutcomeUnknown`` (the
    write may have landed; the next resync shows it). A NIC update usually completes in seconds; a
    scale-set VM update can take a minute. It bounds each provider call, not a worker's pass over a
    node, which may make several calls (one update per NIC, then a read of the instance)."""

    polling_interval: PositiveDuration = 2.0
    """Seconds between two status polls of a long-running operation when Azure does not say
    (``Retry-After`` on the status answer takes precedence, as the SDK does). Each poll spends a read
    token; 2 s keeps an assignment's latency low without polling faster than NIC updates complete."""

    max_retries: _Retries = 3
    """Retries of one request after a throttle (429), a 408/5xx, or a dropped connection, by
    azure-core's retry policy (``Retry-After`` honoured, exponential backoff otherwise). Every retry is
    a real request against ARM's buckets, so it stays small; the reconciler's per-node backoff takes
    over after that."""

    max_retry_after: PositiveDuration = 30.0
    """Longest ``Retry-After`` a request waits for in place. A longer one ends the call at once with
    ``Throttled`` carrying ``retry_after``, so the worker is released and the node is retried no
    sooner than Azure asked."""

    vm_sizes: _VmSizes = Field(default_factory=lambda: _EMPTY_SIZES)
    """Maximum NICs by VM size (``{Standard_D8s_v5: 4}``), added to or overriding the shipped table
    (``providers/azure/vm_sizes.json``). A size in neither is unknown, and its nodes are left alone."""

    rate_limits: _ArmBuckets = Field(default_factory=lambda: EMPTY_BUCKETS)
    """Client-side token buckets overriding the documented ones by bucket name
    (``{network-writes: {burst: 50, refill: 1}}``; names in docs/azure.md); the operator-wide
    ``rate_limit_share`` still scales them."""

    def buckets(self) -> dict[str, Bucket]:
        """The documented buckets with this configuration's overrides applied."""
        return {**BUCKETS, **self.rate_limits}

    @model_validator(mode="after")
    def _same_subscription(self) -> AzureSettings:
        vnet = ids.parse_vnet(self.vnet_id)
        assert vnet is not None  # _vnet_id checked it
        if vnet.subscription != self.subscription_id.lower():
            raise FieldError("vnet_id", f"the virtual network must be in subscription {self.subscription_id}")
        return self

    @property
    def vnet(self) -> ids.VnetRef:
        ref = ids.parse_vnet(self.vnet_id)
        if ref is None:  # the parser guarantees it; this guards hand-built settings
            raise ConfigError("azure.vnet_id", f"not a virtual network id: {self.vnet_id!r}")
        return ref
