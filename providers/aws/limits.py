"""Instance-type limits for the AWS provider: EC2's own answer, with the shipped table as fallback.

:class:`Ec2InstanceTypes` is the provider's :class:`~providers.ec2_provider.LimitsSource`:

* it starts from the shipped table (:mod:`providers.ec2_limits`), so the controller works with no
  DescribeInstanceTypes permission and through an EC2 outage;
* the first lookup loads every type from DescribeInstanceTypes (paged) and merges it over the table,
  because EC2 knows types released after this build;
* a later lookup of a type neither knows triggers one more load, at most once per
  ``refresh_interval``. Concurrent misses share that load, and misses in between answer "unknown" at
  once: an unknown type never becomes a stream of calls;
* a failed load keeps what is known, logs ``instance_types_refresh_failed``, and waits out the
  interval before trying again.

Records are converted exactly as the table generator converts them
(:func:`providers.ec2_limits.convert_instance_type`). The limits are those of the default network
card, and bare-metal types carry no hypervisor, so prefix delegation stays off for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping

import structlog

from eni_ipam import errors
from eni_ipam.clock import Clock
from eni_ipam.model import InstanceLimits
from providers.aws.client import Ec2Client
from providers.ec2_limits import InstanceTypeError, convert_instance_type, limits_from_row

log = structlog.get_logger("eni_ipam.aws")

PAGE_SIZE = 100
"""DescribeInstanceTypes pages hold at most 100 types."""


class Ec2InstanceTypes:
    """:class:`~providers.ec2_provider.LimitsSource` backed by DescribeInstanceTypes (see module doc)."""

    def __init__(
        self,
        client: Ec2Client | None,
        *,
        table: Mapping[str, InstanceLimits],
        clock: Clock,
        refresh_interval: float = 60.0,
    ) -> None:
        """Args:
        client: the EC2 client; ``None`` uses the table only (no calls).
        table: the fallback table.
        clock: the clock of ``refresh_interval``.
        refresh_interval: minimum seconds between two loads caused by unknown types.
        """
        self._client = client
        self._known: dict[str, InstanceLimits] = dict(table)
        self._clock = clock
        self._interval = refresh_interval
        self._last_load: float | None = None
        self._lock = asyncio.Lock()

    async def limits(self, instance_type: str) -> InstanceLimits:
        """Limits of ``instance_type``.

        Raises:
            errors.LimitsUnknown: neither EC2 (within the refresh budget) nor the table knows it.
        """
        if instance_type not in self._known or self._last_load is None:
            await self._load_if_due()
        found = self._known.get(instance_type)
        if found is None:
            raise errors.LimitsUnknown(instance_type)
        return found

    async def known(self, instance_types: Collection[str]) -> dict[str, InstanceLimits]:
        """Limits of the types in ``instance_types`` that are known; never raises."""
        if self._last_load is None or any(t not in self._known for t in instance_types):
            await self._load_if_due()
        return {t: self._known[t] for t in instance_types if t in self._known}

    async def _load_if_due(self) -> None:
        if self._client is None:
            return
        async with self._lock:
            now = self._clock.monotonic()
            if self._last_load is not None and now - self._last_load < self._interval:
                return
            self._last_load = now
            try:
                records = await self._client.pages(
                    "DescribeInstanceTypes", "InstanceTypes", MaxResults=PAGE_SIZE
                )
            except errors.ProviderError as exc:
                log.warning("instance_types_refresh_failed", error=str(exc), known=len(self._known))
                return
            loaded = 0
            for i, record in enumerate(records):
                try:
                    name, row = convert_instance_type(record, f"InstanceTypes[{i}]")
                except InstanceTypeError as exc:
                    log.warning("instance_type_skipped", error=str(exc))
                    continue
                self._known[name] = limits_from_row(row)
                loaded += 1
            log.info("instance_types_loaded", loaded=loaded, known=len(self._known))
