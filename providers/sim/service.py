"""The in-memory cloud as an ``eni-ipam run`` provider (``provider: sim``).

For trials and end-to-end tests of the service: the cloud is declared in the configuration in the
scenario files' ``cloud:`` format (:mod:`providers.sim.declaration`) and lives in the process (it
starts afresh on every start).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection

from eni_ipam.config.schema import ConfigModel, Duration, did_you_mean
from eni_ipam.core.clock import Clock, LoopClock
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.provider import Provider
from eni_ipam.core.ratelimit import EC2_BUCKETS, RateLimiter
from eni_ipam.core.records import NodeRecords
from eni_ipam.errors import ConfigError, combine
from providers.ec2.limits import load_limits
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
    """What ``open_provider`` would refuse, found without starting anything: every instance's type
    is in the limits table (a misspelt ``m5.lage`` would be a node with no address, whose limits
    nothing can ever tell), then the cloud is built and dropped (a subnet without room for the
    declared interfaces, more interfaces than a type has).

    Raises:
        ConfigError: ``sim.cloud.instances[n].type`` naming the closest known type, all of them at
            once (:class:`~eni_ipam.errors.ConfigErrors`); or what building the cloud refuses.
    """
    known = load_limits()
    errors = [
        ConfigError(
            f"sim.cloud.instances[{n}].type",
            f"unknown instance type {i.type!r}{did_you_mean(i.type, known)}: the in-memory cloud knows "
            "EC2's instance types (its shipped limits table), and a node of another would get no address",
        )
        for n, i in enumerate(settings.cloud.instances)
        if i.type not in known
    ]
    found = combine(errors)
    if found is not None:
        raise found
    build_cloud(settings.cloud, LoopClock(), path="sim.cloud")


def instance_types(settings: SimSettings) -> tuple[Collection[str], bool]:
    """The instance types whose limits the in-memory cloud knows, all of them: EC2's shipped table."""
    return load_limits().keys(), True


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
