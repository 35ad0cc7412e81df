"""The in-memory cloud as an ``eni-ipam run`` provider (``provider: sim``).

For trials and end-to-end tests of the service: the cloud is declared in the configuration in the
scenario files' ``cloud:`` format and lives in the process (it starts afresh on every start).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Mapping
from typing import Any

from eni_ipam.app.runconfig import parse_sim_cloud
from eni_ipam.core.clock import Clock
from eni_ipam.core.config import parse_duration
from eni_ipam.core.errors import ConfigError, ScenarioError
from eni_ipam.core.metrics import Metrics
from eni_ipam.core.provider import Provider
from eni_ipam.core.ratelimit import EC2_BUCKETS, RateLimiter
from eni_ipam.store.records import NodeRecords
from providers.sim.provider import SimProvider


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimSettings:
    cloud: Mapping[str, Any]
    """The validated ``cloud:`` declaration (VPCs, subnets, security groups, instances)."""
    latency: float = 0.0
    """Seconds every simulated call takes (0: answers at once)."""


def parse_settings(data: Any, *, path: str) -> SimSettings:
    if data is None:
        raise ConfigError(path, "required with provider: sim (a `cloud:` declaration, docs/scenarios.md)")
    if not isinstance(data, Mapping):
        raise ConfigError(path, f"expected a mapping, got {type(data).__name__}")
    for key in data:
        if key not in ("cloud", "latency"):
            raise ConfigError(f"{path}.{key}", "unknown key (known: cloud, latency)")
    return SimSettings(
        cloud=parse_sim_cloud(data.get("cloud", {}), path=path),
        latency=parse_duration(data.get("latency", 0), f"{path}.latency"),
    )


@contextlib.asynccontextmanager
async def open_provider(
    settings: SimSettings,
    *,
    clock: Clock,
    metrics: Metrics,
    rate_limit_share: float,
    records: NodeRecords | None = None,
) -> AsyncIterator[Provider]:
    from eni_ipam.simulator.simulate import build_cloud

    try:
        cloud = build_cloud(settings.cloud, clock)
    except ScenarioError as exc:  # what the cloud refuses (an unknown instance type, no room)
        raise ConfigError(f"sim.{exc.path}", exc.message) from None
    cloud.set_latency(None, settings.latency)
    yield SimProvider(
        cloud, clock=clock, metrics=metrics, limiter=RateLimiter(EC2_BUCKETS, share=rate_limit_share)
    )
