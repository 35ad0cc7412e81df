"""AWS as an ``eni-ipam run`` provider (``provider: aws``, settings in the ``aws:`` section).

Imports no boto3 until asked to check or open: the run configuration loads every plug-in.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from eni_ipam.core.clock import Clock
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.provider import Provider
from eni_ipam.core.records import NodeRecords
from providers.aws.settings import AwsSettings

SETTINGS = AwsSettings
PROVIDER_ID_SCHEMES = ("aws",)
"""Nodes of EC2 carry ``aws:///<zone>/<instance id>``."""
REQUIRED = False


def check(settings: AwsSettings) -> None:
    """The EC2 client can be made: a region is set or found (``AWS_DEFAULT_REGION``, the profile).

    Raises:
        ConfigError: ``aws.region`` when no region resolves, ``aws`` for another client problem.
    """
    from providers.aws.client import make_client

    make_client(settings)


@contextlib.asynccontextmanager
async def open_provider(
    settings: AwsSettings,
    *,
    clock: Clock,
    metrics: ApiObserver,
    rate_limit_share: float,
    records: NodeRecords | None = None,
) -> AsyncIterator[Provider]:
    from providers.aws.client import make_client
    from providers.aws.provider import AwsProvider

    # botocore loads EC2's service model (tenths of a second of CPU): not on the event loop.
    client = await asyncio.to_thread(make_client, settings)
    provider = AwsProvider(
        settings, clock=clock, metrics=metrics, rate_limit_share=rate_limit_share, client=client
    )
    try:
        yield provider
    finally:
        provider.close()
