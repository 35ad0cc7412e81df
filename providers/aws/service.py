"""AWS as an ``eni-ipam run`` provider (``provider: aws``, settings in the ``aws:`` section)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from eni_ipam.core.clock import Clock
from eni_ipam.core.metrics import Metrics
from eni_ipam.core.provider import Provider
from eni_ipam.store.records import NodeRecords
from providers.aws.settings import AwsSettings, aws_settings_from_mapping


def parse_settings(data: Any, *, path: str) -> AwsSettings:
    return aws_settings_from_mapping(data, path=path)


@contextlib.asynccontextmanager
async def open_provider(
    settings: AwsSettings,
    *,
    clock: Clock,
    metrics: Metrics,
    rate_limit_share: float,
    records: NodeRecords | None = None,
) -> AsyncIterator[Provider]:
    from providers.aws.provider import AwsProvider

    provider = AwsProvider(settings, clock=clock, metrics=metrics, rate_limit_share=rate_limit_share)
    try:
        yield provider
    finally:
        provider.close()
