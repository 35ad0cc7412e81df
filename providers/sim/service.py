"""The in-memory cloud as an ``eni-ipam run`` provider (``provider: sim``).

For trials and end-to-end tests of the service: the cloud is declared in the configuration in the
scenario files' ``cloud:`` format (:mod:`providers.sim.declaration`) and lives in the process (it
starts afresh on every start).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from eni_ipam.config.schema import ConfigModel, Duration
from eni_ipam.core.clock import Clock
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.provider import Provider
from eni_ipam.core.ratelimit import EC2_BUCKETS, RateLimiter
from eni_ipam.core.records import NodeRecords
from providers.sim.declaration import CloudDeclaration, build_cloud
from providers.sim.provider import SimProvider


class SimSettings(ConfigModel):
    cloud: CloudDeclaration
    """The cloud: VPCs, subnets, security groups, instances (docs/scenarios.md, ``cloud:``)."""
    latency: Duration = 0.0
    """Seconds every simulated call takes (0: answers at once)."""


SETTINGS = SimSettings
PROVIDER_ID_SCHEMES = ("aws", "sim")
"""The in-memory cloud is EC2-like: its Nodes may carry ``aws:///<zone>/<id>`` (or ``sim://``)."""
REQUIRED = True


def check(settings: SimSettings) -> None:
    """Nothing beyond the model: the declaration was checked whole."""


@contextlib.asynccontextmanager
async def open_provider(
    settings: SimSettings,
    *,
    clock: Clock,
    metrics: ApiObserver,
    rate_limit_share: float,
    records: NodeRecords | None = None,
) -> AsyncIterator[Provider]:
    cloud = build_cloud(settings.cloud, clock, path="sim.cloud")
    cloud.set_latency(None, settings.latency)
    yield SimProvider(
        cloud, clock=clock, metrics=metrics, limiter=RateLimiter(EC2_BUCKETS, share=rate_limit_share)
    )
