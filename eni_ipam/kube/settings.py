"""Settings of the Kubernetes node source and leader election (the ``kubernetes:`` section).

Frozen and validated like :class:`~eni_ipam.core.config.Settings`; errors name the field. The lease
timings follow client-go's defaults and rules: ``lease_duration > renew_deadline > retry_period``
(a leader that cannot renew within the deadline stops before any standby may take over).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from eni_ipam.core.config import parse_duration, parse_int, parse_positive, parse_tags, section_items
from eni_ipam.core.errors import ConfigError
from eni_ipam.core.model import EMPTY_TAGS, Tags


@dataclasses.dataclass(frozen=True, kw_only=True)
class KubeSettings:
    kubeconfig: str = ""
    """Path of a kubeconfig file; empty uses the pod's service account (in-cluster)."""

    lease_name: str = "eni-ipam"
    """Name of the coordination.k8s.io Lease the replicas compete for."""

    lease_namespace: str = ""
    """Namespace of the Lease; empty means ``$POD_NAMESPACE`` (set by the chart), else ``kube-system``."""

    identity: str = ""
    """This replica's name in the Lease; empty means ``$POD_NAME``, else the host name."""

    lease_duration: float = 15.0
    """Seconds a standby waits after the last renewal it saw before taking over (client-go's
    default): the worst-case failover time when a leader dies without releasing the lease."""

    renew_deadline: float = 10.0
    """Seconds a leader keeps trying to renew before it stops all mutations. Shorter than
    ``lease_duration``, so a leader that lost contact stops before anyone else can lead."""

    retry_period: float = 2.0
    """Seconds between renewals, and between a standby's attempts to acquire."""

    node_selector: Tags = EMPTY_TAGS
    """Labels a Node must carry to get a pool (empty: every Node)."""

    instance_ids: str = ""
    """Where a pool's ``instanceID`` comes from: ``provider-id`` (the Node's ``spec.providerID``; a
    Node gets its pool once the cloud controller has set it) or ``node-name`` (for clusters with no
    cloud controller). Empty: ``node-name`` with the generic provider, ``provider-id`` otherwise."""

    status_qps: float = 10.0
    """Pool status writes per second (token bucket refill): status is informative, and the API
    server's priority and fairness budget is shared with the rest of the cluster."""

    status_burst: int = 50
    """Status writes that may go out at once after a quiet period (a whole batch at start-up)."""

    watch_timeout: float = 300.0
    """Seconds a watch request stays open before the server ends it and it is renewed; a watch
    silent for this long plus a minute is treated as dropped and restarted."""


INSTANCE_ID_SOURCES = ("provider-id", "node-name")


def instance_id_source(settings: KubeSettings, provider: str) -> str:
    """``instance_ids`` resolved: generic clusters have no cloud controller to set providerID, so
    their pools name instances by node."""
    return settings.instance_ids or ("node-name" if provider == "generic" else "provider-id")


_DURATIONS = {"lease_duration", "renew_deadline", "retry_period", "watch_timeout"}
_STRINGS = {"kubeconfig", "lease_name", "lease_namespace", "identity"}


def kube_settings_from_mapping(data: Mapping[str, Any] | None, *, path: str = "kubernetes") -> KubeSettings:
    """Build :class:`KubeSettings` from plain data, validating every key.

    Raises:
        ConfigError: unknown key or invalid value; ``field`` is ``path.key``.
    """
    known = {f.name for f in dataclasses.fields(KubeSettings)}
    values: dict[str, Any] = {}
    for key, field, raw in section_items(data, path, known):
        if key in _DURATIONS:
            values[key] = parse_duration(raw, field)
        elif key in _STRINGS:
            if not isinstance(raw, str):
                raise ConfigError(field, f"expected a string, got {raw!r}")
            values[key] = raw.strip()
        elif key == "node_selector":
            values[key] = parse_tags(field, raw)
        elif key == "instance_ids":
            if raw not in ("", *INSTANCE_ID_SOURCES):
                raise ConfigError(field, f"expected one of {', '.join(INSTANCE_ID_SOURCES)}, got {raw!r}")
            values[key] = raw
        elif key == "status_qps":
            values[key] = parse_positive(field, raw)
        else:
            values[key] = parse_int(field, raw, minimum=1)
    settings = KubeSettings(**values)
    if settings.retry_period <= 0:
        raise ConfigError(f"{path}.retry_period", "must be positive")
    if not settings.renew_deadline > settings.retry_period:
        raise ConfigError(f"{path}.renew_deadline", "must be longer than retry_period")
    if not settings.lease_duration > settings.renew_deadline:
        raise ConfigError(f"{path}.lease_duration", "must be longer than renew_deadline")
    if settings.watch_timeout < 1:
        raise ConfigError(f"{path}.watch_timeout", "must be at least 1s")
    if not settings.lease_name:
        raise ConfigError(f"{path}.lease_name", "must not be empty")
    return settings
