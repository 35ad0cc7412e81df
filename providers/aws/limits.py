"""Instance-type limits for the AWS provider: EC2's own answer, with the shipped table as fallback.

:class:`Ec2InstanceTypes` is the provider's :class:`~providers.ec2.provider.LimitsSource`:

* it starts from the shipped table (:mod:`providers.ec2.limits`), so the controller works with no
  DescribeInstanceTypes permission and through an EC2 outage;
* it asks DescribeInstanceTypes about the types the cluster actually runs (up to 100 per request)
  and lets EC2's answer win over the table, because limits change and EC2 knows types released
  after this build. Asking for the cluster's few types costs one request; listing all ~1,000 types
  would cost a dozen pages for nothing;
* it asks about a type at most once per ``refresh_interval``. Concurrent lookups share one request,
  and a type EC2 does not know answers "unknown" at once until the interval has passed: an unknown
  type never becomes a stream of calls;
* EC2 rejects a whole request when one of its types does not exist (``InvalidInstanceType``), so a
  rejected batch is asked again one type at a time;
* a failed request keeps what is known and logs ``instance_types_refresh_failed``; a denied one
  (no IAM permission) turns the lookups off for good with one ``instance_types_not_permitted``.

Records are converted exactly as the table generator converts them
(:func:`providers.ec2.limits.convert_instance_type`). The limits are those of the default network
card, and bare-metal types carry no hypervisor, so prefix delegation stays off for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping

import structlog

from eni_ipam.core import errors
from eni_ipam.core.clock import Clock
from eni_ipam.core.model import InstanceLimits
from providers.aws.client import Ec2Client
from providers.ec2.limits import InstanceTypeError, convert_instance_type, limits_from_row

log = structlog.get_logger("eni_ipam.aws")

DENIED = frozenset({"UnauthorizedOperation", "AccessDenied", "AccessDeniedException"})
"""Codes that mean "the policy does not allow it", as opposed to a passing credential problem."""

BATCH = 100
"""Instance types asked about in one DescribeInstanceTypes request (EC2's maximum)."""


class Ec2InstanceTypes:
    """:class:`~providers.ec2.provider.LimitsSource` backed by DescribeInstanceTypes (see module doc)."""

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
        refresh_interval: minimum seconds between two requests about the same type.
        """
        self._client = client
        self._known: dict[str, InstanceLimits] = dict(table)
        self._answered: set[str] = set()
        """Types EC2 has described: their limits are EC2's, never asked about again."""
        self._asked: dict[str, float] = {}
        self._clock = clock
        self._interval = refresh_interval
        self._lock = asyncio.Lock()

    async def limits(self, instance_type: str) -> InstanceLimits:
        """Limits of ``instance_type``.

        Raises:
            errors.LimitsUnknown: neither EC2 (within the refresh budget) nor the table knows it.
        """
        await self._ask([instance_type])
        found = self._known.get(instance_type)
        if found is None:
            raise errors.LimitsUnknown(instance_type)
        return found

    async def known(self, instance_types: Collection[str]) -> dict[str, InstanceLimits]:
        """Limits of the types in ``instance_types`` that are known; never raises."""
        await self._ask(instance_types)
        return {t: self._known[t] for t in instance_types if t in self._known}

    async def _ask(self, instance_types: Collection[str]) -> None:
        if self._client is None or all(t in self._answered for t in instance_types):
            return
        async with self._lock:
            now = self._clock.monotonic()
            due = sorted(
                t
                for t in set(instance_types) - self._answered
                if now - self._asked.get(t, float("-inf")) >= self._interval
            )
            for t in due:
                self._asked[t] = now
            for start in range(0, len(due), BATCH):
                await self._describe(due[start : start + BATCH])

    async def _describe(self, batch: list[str]) -> None:
        if self._client is None:  # turned off by a denial while this lookup waited for the lock
            return
        try:
            records = await self._client.pages("DescribeInstanceTypes", "InstanceTypes", InstanceTypes=batch)
        except errors.Unauthorized as exc:
            if exc.code not in DENIED:  # expired credentials, clock skew: passing, retried later
                log.warning("instance_types_refresh_failed", error=str(exc), types=len(batch))
                return
            # No permission: the table is all there is. Say so once instead of once a minute.
            log.warning("instance_types_not_permitted", error=exc.code, fallback="shipped table")
            self._client = None
            return
        except errors.InvalidRequest as exc:
            if len(batch) > 1:  # one unknown type spoils the batch: ask one by one
                for instance_type in batch:
                    await self._describe([instance_type])
            else:
                log.warning("instance_type_unknown_to_ec2", instance_type=batch[0], error=exc.code)
            return
        except errors.ProviderError as exc:
            log.warning("instance_types_refresh_failed", error=str(exc), types=len(batch))
            return
        for i, record in enumerate(records):
            try:
                name, row = convert_instance_type(record, f"InstanceTypes[{i}]")
            except InstanceTypeError as exc:
                log.warning("instance_type_skipped", error=str(exc))
                continue
            self._known[name] = limits_from_row(row)
            self._answered.add(name)
        log.info("instance_types_described", asked=len(batch), answered=len(records))
