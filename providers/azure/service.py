"""Azure as an ``eni-ipam run`` provider (``provider: azure``, settings in the ``azure:`` section)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from eni_ipam.core.clock import Clock
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.provider import Provider
from eni_ipam.core.records import NodeRecords
from providers.azure.settings import AzureSettings

SETTINGS = AzureSettings
PROVIDER_ID_SCHEMES = ("azure",)
"""Nodes of Azure carry ``azure:///subscriptions/…/virtualMachines/<name>``."""
REQUIRED = True


def check(settings: AzureSettings) -> None:
    """Nothing beyond the model: credentials are only known once a token is asked for."""


@contextlib.asynccontextmanager
async def open_provider(
    settings: AzureSettings,
    *,
    clock: Clock,
    metrics: ApiObserver,
    rate_limit_share: float,
    records: NodeRecords | None = None,
    credential: Any = None,
    transport: Any = None,
) -> AsyncIterator[Provider]:
    """The provider, open for the block; its SDK clients (and the credential it made) closed after.

    ``credential`` and ``transport`` replace ``DefaultAzureCredential`` and the aiohttp transport
    (tests: :mod:`eni_ipam_testkit.fake_azure`); an injected credential stays its owner's to close.
    """
    from providers.azure.provider import AzureProvider

    provider = AzureProvider(
        settings,
        clock=clock,
        metrics=metrics,
        rate_limit_share=rate_limit_share,
        credential=credential,
        transport=transport,
    )
    try:
        yield provider
    finally:
        await provider.close()
