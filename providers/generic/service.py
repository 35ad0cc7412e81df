"""The generic provider as an ``eni-ipam run`` provider (``provider: generic``, section ``generic:``).

Its state lives in the node store, which the service hands over as ``records``: the ENIPools'
statuses with ``node_source: kubernetes``, the embedded store with ``node_source: memory``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from eni_ipam.core.clock import Clock
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.provider import Provider
from eni_ipam.core.records import NodeRecords
from eni_ipam.errors import ConfigError
from providers.generic.settings import GenericSettings

SETTINGS = GenericSettings
PROVIDER_ID_SCHEMES = ()
"""Any: a generic cluster names its instances by node (or by whatever provider id it has)."""
REQUIRED = True


def check(settings: GenericSettings) -> None:
    """Nothing beyond the model: the ranges were checked against each other."""


def instance_types(settings: GenericSettings) -> None:
    """None: pools are carved from CIDRs, whatever the instance type."""


@contextlib.asynccontextmanager
async def open_provider(
    settings: GenericSettings,
    *,
    clock: Clock,
    metrics: ApiObserver,
    rate_limit_share: float,
    records: NodeRecords | None = None,
) -> AsyncIterator[Provider]:
    from providers.generic.provider import GenericProvider

    if records is None:
        raise ConfigError("provider", "the generic provider needs a node store to keep its state in")
    yield GenericProvider(settings, records=records, clock=clock, metrics=metrics)
