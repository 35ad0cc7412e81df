"""AwsProvider: the shared :class:`~providers.ec2.provider.Ec2Provider` over boto3.

Everything that decides which EC2 calls to make is shared with the in-memory cloud's provider (and
checked by the same contract suite). This module only assembles the pieces: the boto3 client with its
thread pool, hooks and buckets (:mod:`providers.aws.client`), the thin client
(:mod:`providers.aws.api`), instance-type limits (:mod:`providers.aws.limits`) and the scope that
:class:`~providers.aws.settings.AwsSettings` configures.
"""

from __future__ import annotations

from typing import Any

from eni_ipam.core import errors
from eni_ipam.core.clock import Clock
from eni_ipam.core.model import CloudSnapshot
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.ratelimit import RateLimiter
from eni_ipam.errors import ConfigError
from providers.aws.api import Boto3Api
from providers.aws.client import Ec2Client
from providers.aws.limits import Ec2InstanceTypes
from providers.aws.settings import AwsSettings
from providers.ec2.limits import load_limits
from providers.ec2.provider import Ec2Provider, Scope


class AwsProvider(Ec2Provider):
    """The :class:`~eni_ipam.core.provider.Provider` protocol on EC2 (its contract is in
    :mod:`eni_ipam.core.provider`)."""

    name: str = "aws"

    def __init__(
        self,
        settings: AwsSettings,
        *,
        clock: Clock,
        metrics: ApiObserver,
        rate_limit_share: float = 1.0,
        client: Any = None,
    ) -> None:
        """Args:
        settings: region, endpoint, scope, retries, buckets, limits lookups.
        clock: the clock of the metrics, the rate limiter and the limits refresh interval.
        metrics: where every request is recorded.
        rate_limit_share: the fraction of each EC2 bucket this controller may spend.
        client: a boto3 EC2 client to use instead of making one from ``settings`` (tests).
        """
        self.settings = settings
        self.client = Ec2Client(
            settings,
            limiter=RateLimiter(settings.buckets(), share=rate_limit_share, clock=clock),
            metrics=metrics,
            clock=clock,
            client=client,
        )
        limits = Ec2InstanceTypes(
            self.client if settings.update_limits_via_api else None,
            table=load_limits(),
            clock=clock,
            refresh_interval=settings.limits_refresh_interval,
        )
        scope = Scope(
            vpc_id=settings.vpc_id,
            subnet_ids=settings.subnet_ids_filter,
            subnet_tags=settings.subnet_tags_filter,
            instance_tags=settings.instance_tags_filter,
        )
        super().__init__(
            Boto3Api(self.client),
            limits=limits,
            clock=clock,
            scope=scope,
            instance_listing_interval=settings.instance_listing_interval,
        )
        self._vpc_checked = not settings.vpc_id

    async def _list_shared(self) -> CloudSnapshot:
        """Subnets and security groups (the shared view, and the start of every resync); the first
        call also checks that the configured VPC exists.

        A wrong ``vpc_id`` would otherwise look like an empty VPC: every node unknown, and nothing
        saying why.

        Raises:
            ConfigError: ``aws.vpc_id`` names no VPC of the region (retried like any failed
                resync; correcting the VPC or the region needs a restart with the fixed configuration).
            errors.ProviderError: any call failed.
        """
        if not self._vpc_checked:
            try:
                await self.client.call("DescribeVpcs", VpcIds=[self.settings.vpc_id])
            except errors.NotFound as exc:
                raise ConfigError(
                    "aws.vpc_id", f"{self.settings.vpc_id} does not exist in this region ({exc.code})"
                ) from exc
            self._vpc_checked = True
        return await super()._list_shared()

    def close(self) -> None:
        """Release the thread pool and the HTTP connections."""
        self.client.close()
