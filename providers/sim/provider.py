"""SimProvider: the shared :class:`~providers.ec2.provider.Ec2Provider` over a :class:`SimCloud`.

Only the thin client lives here: :class:`SimApi` calls the simulated cloud's EC2 operations the way the
boto3 client calls EC2. Every request goes through one :class:`~eni_ipam.core.caller.ApiCaller` (client-side
rate limiter → call → metrics → error translation via :func:`providers.ec2.errors.translate_ec2`),
listings are paged to the end, and nothing above it ever sees a
:class:`~providers.sim.records.SimError`. It reads the cloud only through counted operations, so the
cloud's call counters measure exactly what the reconciler costs.

Limits come from a table (the cloud's own by default, like the shipped table of the AWS provider),
not from an API call; pass ``limits`` to model a provider whose table lags the cloud.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar

from eni_ipam import errors
from eni_ipam.core.caller import ApiCaller
from eni_ipam.core.clock import Clock
from eni_ipam.core.model import InstanceLimits, Interface, SecurityGroup, Subnet
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.ratelimit import EC2_BUCKETS, RateLimiter
from providers.ec2.errors import translate_ec2
from providers.ec2.provider import DESCRIPTION, Ec2Provider, Filters, InstanceInfo, Scope, TableLimits
from providers.sim.cloud import SimCloud
from providers.sim.records import Page, SimError

__all__ = ["DESCRIPTION", "SimApi", "SimProvider", "translate"]

T = TypeVar("T")


def translate(exc: BaseException, operation: str) -> errors.EniIpamError | None:
    """The :class:`~eni_ipam.core.caller.ApiCaller` translation: a :class:`SimError` through the EC2 table."""
    if isinstance(exc, SimError):
        error = translate_ec2(exc.code, exc.message, operation)
        error.retry_after = exc.retry_after
        return error
    return None


class SimApi:
    """The :class:`~providers.ec2.provider.Ec2Api` over a :class:`SimCloud`: one request per page or call."""

    def __init__(self, cloud: SimCloud, caller: ApiCaller) -> None:
        self.cloud = cloud
        self._api = caller

    async def describe_subnets(self, *, filters: Filters) -> list[Subnet]:
        return await self._all(
            "DescribeSubnets", lambda t: self.cloud.describe_subnets(filters=filters, next_token=t)
        )

    async def describe_security_groups(self, *, filters: Filters) -> list[SecurityGroup]:
        return await self._all(
            "DescribeSecurityGroups",
            lambda t: self.cloud.describe_security_groups(filters=filters, next_token=t),
        )

    async def describe_instances(
        self, *, instance_ids: Sequence[str] = (), filters: Filters | None = None
    ) -> list[InstanceInfo]:
        return await self._all(
            "DescribeInstances",
            lambda t: self.cloud.describe_instances(instance_ids=instance_ids, filters=filters, next_token=t),
        )

    async def describe_network_interfaces(
        self, *, interface_ids: Sequence[str] = (), filters: Filters | None = None
    ) -> list[Interface]:
        return await self._all(
            "DescribeNetworkInterfaces",
            lambda t: self.cloud.describe_network_interfaces(
                interface_ids=interface_ids, filters=filters, next_token=t
            ),
        )

    async def assign_private_ip_addresses(
        self, *, interface_id: str, secondary_count: int, prefix_count: int, addresses: Sequence[str] = ()
    ) -> list[str]:
        return await self._api.call(
            "AssignPrivateIpAddresses",
            lambda: self.cloud.assign_private_ip_addresses(
                interface_id=interface_id,
                secondary_count=secondary_count,
                prefix_count=prefix_count,
                addresses=tuple(addresses),
            ),
        )

    async def unassign_private_ip_addresses(
        self, *, interface_id: str, addresses: Sequence[str], prefixes: Sequence[str]
    ) -> None:
        await self._api.call(
            "UnassignPrivateIpAddresses",
            lambda: self.cloud.unassign_private_ip_addresses(
                interface_id=interface_id, addresses=tuple(addresses), prefixes=tuple(prefixes)
            ),
        )

    async def assign_ipv6_addresses(self, *, interface_id: str, prefix_count: int) -> list[str]:
        return await self._api.call(
            "AssignIpv6Addresses",
            lambda: self.cloud.assign_ipv6_addresses(interface_id=interface_id, prefix_count=prefix_count),
        )

    async def create_network_interface(
        self,
        *,
        subnet_id: str,
        groups: Sequence[str],
        secondary_count: int,
        prefix_count: int,
        tags: Mapping[str, str],
        description: str,
        client_token: str,
        ipv6_prefix_count: int = 0,
    ) -> Interface:
        return await self._api.call(
            "CreateNetworkInterface",
            lambda: self.cloud.create_network_interface(
                subnet_id=subnet_id,
                groups=tuple(groups),
                secondary_count=secondary_count,
                prefix_count=prefix_count,
                tags=dict(tags),
                description=description,
                client_token=client_token,
                ipv6_prefix_count=ipv6_prefix_count,
            ),
        )

    async def attach_network_interface(
        self, *, interface_id: str, instance_id: str, device_index: int, network_card: int = 0
    ) -> str:
        return await self._api.call(
            "AttachNetworkInterface",
            lambda: self.cloud.attach_network_interface(
                interface_id=interface_id,
                instance_id=instance_id,
                device_index=device_index,
                network_card=network_card,
            ),
        )

    async def modify_network_interface_attribute(
        self, *, interface_id: str, attachment_id: str, delete_on_termination: bool
    ) -> None:
        await self._api.call(
            "ModifyNetworkInterfaceAttribute",
            lambda: self.cloud.modify_network_interface_attribute(
                interface_id=interface_id,
                attachment_id=attachment_id,
                delete_on_termination=delete_on_termination,
            ),
        )

    async def detach_network_interface(self, *, attachment_id: str, force: bool = False) -> None:
        await self._api.call(
            "DetachNetworkInterface",
            lambda: self.cloud.detach_network_interface(attachment_id=attachment_id, force=force),
        )

    async def delete_network_interface(self, *, interface_id: str) -> None:
        await self._api.call(
            "DeleteNetworkInterface", lambda: self.cloud.delete_network_interface(interface_id=interface_id)
        )

    async def _all(
        self, operation: str, fetch: Callable[[str | None], Coroutine[Any, Any, Page[T]]]
    ) -> list[T]:
        """Every item of a paged listing; one rate-limited, counted call per page."""
        items: list[T] = []
        token: str | None = None
        while True:
            page = await self._api.call(operation, functools.partial(fetch, token))
            items.extend(page.items)
            token = page.next_token
            if token is None:
                return items


class SimProvider(Ec2Provider):
    """The Provider protocol over a SimCloud (see :mod:`eni_ipam.core.provider` for the contract)."""

    name: str = "sim"

    def __init__(
        self,
        cloud: SimCloud,
        *,
        clock: Clock,
        metrics: ApiObserver,
        limiter: RateLimiter | None = None,
        vpc_id: str | None = None,
        limits: Mapping[str, InstanceLimits] | None = None,
    ) -> None:
        """Create a provider over ``cloud``.

        Args:
            cloud: the simulated cloud.
            clock: the clock of the API-duration metrics and of the default rate limiter.
            metrics: where every call is recorded.
            limiter: client-side rate limiter; EC2's published buckets by default.
            vpc_id: restrict the view to one VPC (subnets, groups, instances, interfaces).
            limits: the provider's instance-type table; the cloud's by default.
        """
        caller = ApiCaller(
            limiter=limiter if limiter is not None else RateLimiter(EC2_BUCKETS, clock=clock),
            metrics=metrics,
            clock=clock,
            translate=translate,
        )
        table = cloud.limits if limits is None else MappingProxyType(dict(limits))
        super().__init__(
            SimApi(cloud, caller), limits=TableLimits(table), clock=clock, scope=Scope(vpc_id=vpc_id or "")
        )
        self.cloud = cloud
