"""Settings of the Azure provider (the ``azure:`` section): frozen, validated, every default justified.

Operator-wide behaviour (cluster name, the rate-limit share, garbage collection) lives in
:class:`eni_ipam.core.config.Settings`; this module holds what only the Azure client needs.
:func:`azure_settings_from_mapping` is the one parser: it rejects unknown keys and bad values with a
:class:`~eni_ipam.core.errors.ConfigError` naming the field (``azure.resource_groups[1]``), and never
half-applies anything. ``subscription_id``, ``resource_groups`` and ``vnet_id`` have no default:
without them there is nothing to look at, and a guess could only look at the wrong thing.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from eni_ipam.core.config import parse_buckets, parse_duration, parse_int, section_items
from eni_ipam.core.errors import ConfigError
from eni_ipam.core.ratelimit import Bucket
from providers.azure import ids
from providers.azure.operations import BUCKETS

CLOUDS = ("AzurePublicCloud", "AzureChinaCloud", "AzureUSGovernment")
"""National clouds by the names the Azure CLI uses (``az cloud list``)."""

_EMPTY_BUCKETS: Mapping[str, Bucket] = MappingProxyType({})
_EMPTY_SIZES: Mapping[str, int] = MappingProxyType({})
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
# Resource group names: 1-90 characters, letters, digits, '.', '_', '-', '(' and ')', not ending in '.'.
_RESOURCE_GROUP = re.compile(r"^[-\w.()]{0,89}[-\w()]$")
_VM_SIZE = re.compile(r"^[A-Za-z][A-Za-z0-9_]+$")
_MAX_NICS = 16


@dataclasses.dataclass(frozen=True, kw_only=True)
class AzureSettings:
    subscription_id: str
    """The subscription of the VMs, their NICs and the virtual network. Required: ARM ids are scoped
    to one subscription, and every request names it."""

    resource_groups: tuple[str, ...]
    """Resource groups whose VMs, scale sets, NICs and application security groups are listed by the
    full resync (on AKS, the node resource group ``MC_…``). Required: listing a whole subscription
    would read, and count against ARM's read budget, every VM of every other team. A node whose VM is
    outside these groups is still read by id, but never seen by a resync."""

    vnet_id: str
    """Resource id of the virtual network of the nodes' NICs; its subnets (and their free addresses)
    are the ones reported. Required, for the same reason. It must be in ``subscription_id``."""

    cloud: str = "AzurePublicCloud"
    """National cloud: ``AzurePublicCloud``, ``AzureChinaCloud`` or ``AzureUSGovernment``. Picks the
    Resource Manager endpoint, the token scope and the Entra ID authority."""

    arm_endpoint: str = ""
    """Resource Manager endpoint to use instead of the cloud's (Azure Stack Hub, a private link, or a
    test double). Empty: the cloud's own. The token scope follows it (``<endpoint>/.default``)."""

    operation_timeout: float = 120.0
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

    polling_interval: float = 2.0
    """Seconds between two status polls of a long-running operation when Azure does not say
    (``Retry-After`` on the status answer takes precedence, as the SDK does). Each poll spends a read
    token; 2 s keeps an assignment's latency low without polling faster than NIC updates complete."""

    max_retries: int = 3
    """Retries of one request after a throttle (429), a 408/5xx, or a dropped connection, by
    azure-core's retry policy (``Retry-After`` honoured, exponential backoff otherwise). Every retry is
    a real request against ARM's buckets, so it stays small; the reconciler's per-node backoff takes
    over after that."""

    max_retry_after: float = 30.0
    """Longest ``Retry-After`` a request waits for in place. A longer one ends the call at once with
    ``Throttled`` carrying ``retry_after``, so the worker is released and the node is retried no
    sooner than Azure asked."""

    vm_sizes: Mapping[str, int] = dataclasses.field(default_factory=lambda: _EMPTY_SIZES)
    """Maximum NICs by VM size (``{Standard_D8s_v5: 4}``), added to or overriding the shipped table
    (``providers/azure/vm_sizes.json``). A size in neither is unknown, and its nodes are left alone."""

    rate_limits: Mapping[str, Bucket] = dataclasses.field(default_factory=lambda: _EMPTY_BUCKETS)
    """Client-side token buckets overriding the documented ones by bucket name
    (``{network-writes: {burst: 50, refill: 1}}``; names in docs/azure.md); the operator-wide
    ``rate_limit_share`` still scales them."""

    def buckets(self) -> dict[str, Bucket]:
        """The documented buckets with this configuration's overrides applied."""
        return {**BUCKETS, **self.rate_limits}

    @property
    def vnet(self) -> ids.VnetRef:
        ref = ids.parse_vnet(self.vnet_id)
        if ref is None:  # the parser guarantees it; this guards hand-built settings
            raise ConfigError("azure.vnet_id", f"not a virtual network id: {self.vnet_id!r}")
        return ref


_REQUIRED = ("subscription_id", "resource_groups", "vnet_id")


def azure_settings_from_mapping(data: Mapping[str, Any] | None, *, path: str = "azure") -> AzureSettings:
    """Build :class:`AzureSettings` from plain data (YAML), validating every key.

    Raises:
        ConfigError: unknown, missing or invalid value; ``field`` is ``path.key`` (or deeper).
    """
    fields = {f.name for f in dataclasses.fields(AzureSettings)}
    values: dict[str, Any] = {
        key: _PARSERS[key](field, raw) for key, field, raw in section_items(data, path, fields)
    }
    for key in _REQUIRED:
        if key not in values:
            raise ConfigError(f"{path}.{key}" if path else key, "required")
    vnet = ids.parse_vnet(values["vnet_id"])
    assert vnet is not None  # _vnet_id checked it
    if vnet.subscription != values["subscription_id"].lower():
        raise ConfigError(
            f"{path}.vnet_id", f"the virtual network must be in subscription {values['subscription_id']}"
        )
    return AzureSettings(**values)


def _string(field: str, raw: Any) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(field, f"expected a non-empty string, got {raw!r}")
    return raw.strip()


def _subscription(field: str, raw: Any) -> str:
    value = _string(field, raw)
    if not _UUID.match(value):
        raise ConfigError(field, f"expected a subscription id (a UUID), got {raw!r}")
    return value.lower()


def _resource_groups(field: str, raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list | tuple) or not raw:
        raise ConfigError(field, f"expected a non-empty list of resource group names, got {raw!r}")
    groups: list[str] = []
    for i, item in enumerate(raw):
        name = _string(f"{field}[{i}]", item)
        if not _RESOURCE_GROUP.match(name):
            raise ConfigError(f"{field}[{i}]", f"not a resource group name: {item!r}")
        if name.lower() in groups:
            raise ConfigError(f"{field}[{i}]", f"{item!r} is listed twice (names are case-insensitive)")
        groups.append(name.lower())
    return tuple(groups)


def _vnet_id(field: str, raw: Any) -> str:
    value = _string(field, raw)
    if ids.parse_vnet(value) is None:
        raise ConfigError(
            field,
            "expected a virtual network resource id (/subscriptions/<id>/resourceGroups/<group>"
            f"/providers/Microsoft.Network/virtualNetworks/<name>), got {raw!r}",
        )
    return ids.normalize(value)


def _cloud(field: str, raw: Any) -> str:
    value = _string(field, raw)
    for cloud in CLOUDS:
        if value.lower() == cloud.lower():
            return cloud
    raise ConfigError(field, f"expected one of {', '.join(CLOUDS)}, got {raw!r}")


def _url(field: str, raw: Any) -> str:
    if raw == "":
        return ""
    value = _string(field, raw)
    if value and not value.startswith("https://"):
        raise ConfigError(field, f"expected an https:// URL (tokens are only sent over TLS), got {raw!r}")
    return value.rstrip("/")


def _seconds(field: str, raw: Any) -> float:
    value = parse_duration(raw, field)
    if value <= 0:
        raise ConfigError(field, "must be positive")
    return value


def _retries(field: str, raw: Any) -> int:
    value = parse_int(field, raw, minimum=0)
    if value > 10:
        raise ConfigError(field, f"at most 10 retries (each is a request against ARM's buckets), got {value}")
    return value


def _vm_sizes(field: str, raw: Any) -> Mapping[str, int]:
    if not isinstance(raw, Mapping):
        raise ConfigError(field, f"expected a mapping of VM size to maximum NICs, got {raw!r}")
    out: dict[str, int] = {}
    for size, nics in raw.items():
        where = f"{field}.{size}"
        if not isinstance(size, str) or not _VM_SIZE.match(size):
            raise ConfigError(where, "expected a VM size name such as Standard_D8s_v5")
        value = parse_int(where, nics, minimum=1)
        if value > _MAX_NICS:
            raise ConfigError(where, f"no Azure VM size has more than {_MAX_NICS} NICs, got {value}")
        out[size] = value
    return MappingProxyType(out)


def _bucket_name(where: str, name: Any) -> None:
    if name not in BUCKETS:
        raise ConfigError(where, f"unknown bucket (known: {', '.join(sorted(BUCKETS))})")


def _buckets(field: str, raw: Any) -> Mapping[str, Bucket]:
    return parse_buckets(field, raw, check_name=_bucket_name, names="bucket name")


_PARSERS: dict[str, Any] = {
    "subscription_id": _subscription,
    "resource_groups": _resource_groups,
    "vnet_id": _vnet_id,
    "cloud": _cloud,
    "arm_endpoint": _url,
    "operation_timeout": _seconds,
    "polling_interval": _seconds,
    "max_retries": _retries,
    "max_retry_after": _seconds,
    "vm_sizes": _vm_sizes,
    "rate_limits": _buckets,
}
