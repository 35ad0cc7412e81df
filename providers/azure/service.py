"""Azure as an ``eni-ipam run`` provider (``provider: azure``, settings in the ``azure:`` section)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Collection
from typing import Any

from eni_ipam.core.clock import Clock
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.provider import Provider
from eni_ipam.core.records import NodeRecords
from eni_ipam.errors import ConfigError, combine
from providers.azure.settings import AzureSettings

SETTINGS = AzureSettings
PROVIDER_ID_SCHEMES = ("azure",)
"""Nodes of Azure carry ``azure:///subscriptions/…/virtualMachines/<name>``."""
REQUIRED = True


CREDENTIAL_FILES = {
    "AZURE_FEDERATED_TOKEN_FILE": "workload identity's token, mounted by AKS's webhook for a service "
    'account labelled azure.workload.identity/use: "true" (docs/azure.md)',
    "AZURE_CLIENT_CERTIFICATE_PATH": "a service principal's certificate",
}
"""The files ``DefaultAzureCredential`` reads when the environment names them, and what each is."""


def check(settings: AzureSettings) -> None:
    """The credential files the environment names exist (``DefaultAzureCredential`` would only find
    out at the first token, and every call would then fail). Whether the credentials are good is
    only known once a token is asked for.

    Raises:
        ConfigError: the variable naming a file that is not there, every such variable at once.
    """
    errors = [
        ConfigError(variable, f"names {path}, which does not exist: {what}")
        for variable, what in CREDENTIAL_FILES.items()
        if (path := os.environ.get(variable, "")) and not os.path.isfile(path)
    ]
    found = combine(errors)
    if found is not None:
        raise found


def instance_types(settings: AzureSettings) -> tuple[Collection[str], bool]:
    """The VM sizes whose limits are known, all of them: the shipped table and ``azure.vm_sizes``
    (no API answers it cheaply)."""
    from providers.azure.limits import load_table

    return {*load_table(), *settings.vm_sizes}, True


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
