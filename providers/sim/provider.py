"""SimProvider: the :class:`~eni_ipam.provider.Provider` over a :class:`~providers.sim.cloud.SimCloud`.

It is written the way a provider over EC2 is: every cloud call goes through one
:class:`~eni_ipam.api.ApiCaller` (client-side rate limiter → call → metrics → error translation via
:func:`providers.ec2_errors.translate_ec2`), listings are paged to the end, and nothing above it ever
sees a :class:`~providers.sim.records.SimError`. It reads the cloud only through counted operations,
so the cloud's call counters measure exactly what the reconciler costs.

Caching: instance type, zone, VPC and subnet never change, so ``describe_instance`` keeps what
``DescribeInstances`` said and calls only ``DescribeNetworkInterfaces`` (one call per sync) while the
instance is known. It asks ``DescribeInstances`` again when the instance is not cached, or when no
interface is attached (a live instance always has its primary), which is how termination is seen.
The ``running`` flag is therefore as fresh as the last full resync, or the last failure that said
the instance is not running (which drops the cache entry).

Limits come from a table (the cloud's own by default, like the shipped table of the AWS provider),
not from an API call; pass ``limits`` to model a provider whose table lags the cloud.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Callable, Coroutine, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar

from eni_ipam import errors
from eni_ipam.api import ApiCaller
from eni_ipam.clock import Clock
from eni_ipam.metrics import Metrics
from eni_ipam.model import CloudSnapshot, Instance, InstanceLimits, Interface
from eni_ipam.ratelimit import EC2_BUCKETS, RateLimiter
from providers.ec2_errors import translate_ec2
from providers.sim.cloud import SimCloud
from providers.sim.records import InstanceInfo, Page, SimError

T = TypeVar("T")

DESCRIPTION = "eni-ipam ({instance})"
"""Description of the interfaces the provider creates."""


def translate(exc: BaseException, operation: str) -> errors.EniIpamError | None:
    """The :class:`~eni_ipam.api.ApiCaller` translation: a :class:`SimError` through the EC2 table."""
    if isinstance(exc, SimError):
        return translate_ec2(exc.code, exc.message, operation)
    return None


class SimProvider:
    """The Provider protocol over a SimCloud (see :mod:`eni_ipam.provider` for the contract)."""

    name: str = "sim"

    def __init__(
        self,
        cloud: SimCloud,
        *,
        clock: Clock,
        metrics: Metrics,
        limiter: RateLimiter | None = None,
        vpc_id: str | None = None,
        limits: Mapping[str, InstanceLimits] | None = None,
    ) -> None:
        """Create a provider over ``cloud``.

        Args:
            cloud: the simulated cloud.
            clock: the clock of the API-duration metrics.
            metrics: where every call is recorded.
            limiter: client-side rate limiter; EC2's published buckets by default.
            vpc_id: restrict the view to one VPC (subnets, groups, instances, interfaces).
            limits: the provider's instance-type table; the cloud's by default.
        """
        self.cloud = cloud
        self._api = ApiCaller(
            limiter=limiter if limiter is not None else RateLimiter(EC2_BUCKETS),
            metrics=metrics,
            clock=clock,
            translate=translate,
        )
        self._vpc: dict[str, Sequence[str]] = {"vpc-id": [vpc_id]} if vpc_id else {}
        self._limits = cloud.limits if limits is None else MappingProxyType(dict(limits))
        self._known: dict[str, InstanceInfo] = {}

    # -- reads -----------------------------------------------------------------------------------

    async def resync(self) -> CloudSnapshot:
        """The full view of the cloud (of the provider's VPC), terminated instances left out.

        Calls DescribeSubnets, DescribeSecurityGroups, DescribeInstances and DescribeNetworkInterfaces,
        each paged to the end, and refreshes the instance cache.

        Raises:
            errors.ProviderError: any call failed (no partial view is returned).
        """
        cloud, vpc = self.cloud, self._vpc
        subnets = await self._all(
            "DescribeSubnets", lambda t: cloud.describe_subnets(filters=vpc, next_token=t)
        )
        groups = await self._all(
            "DescribeSecurityGroups", lambda t: cloud.describe_security_groups(filters=vpc, next_token=t)
        )
        infos = await self._all(
            "DescribeInstances", lambda t: cloud.describe_instances(filters=vpc, next_token=t)
        )
        interfaces = await self._all(
            "DescribeNetworkInterfaces",
            lambda t: cloud.describe_network_interfaces(filters=vpc, next_token=t),
        )
        live = {info.id: info for info in infos if info.state != "terminated"}
        self._known = dict(live)
        attached: dict[str, list[Interface]] = collections.defaultdict(list)
        for iface in interfaces:
            if iface.instance_id in live:
                attached[iface.instance_id].append(iface)
        return CloudSnapshot(
            subnets={s.id: s for s in subnets},
            security_groups={g.id: g for g in groups},
            instances={id: self._instance(info, attached[id]) for id, info in live.items()},
            limits={
                info.type: self._limits[info.type] for info in live.values() if info.type in self._limits
            },
        )

    async def describe_instance(self, *, instance_id: str) -> Instance | None:
        """The instance with its attached interfaces now; ``None`` when missing or terminated.

        Raises:
            errors.ProviderError: the cloud could not answer (never for "not found").
        """
        info = self._known.get(instance_id)
        fresh = info is None
        if info is None:
            info = await self._instance_info(instance_id)
            if info is None:
                return None
        interfaces = await self._all(
            "DescribeNetworkInterfaces",
            lambda t: self.cloud.describe_network_interfaces(
                filters={"attachment.instance-id": [instance_id]}, next_token=t
            ),
        )
        if not interfaces and not fresh:
            info = await self._instance_info(instance_id)
            if info is None:
                return None
        return self._instance(info, interfaces)

    async def instance_limits(self, *, instance_type: str) -> InstanceLimits:
        """Limits of ``instance_type`` from the provider's table (no API call).

        Raises:
            errors.LimitsUnknown: the type is not in the table.
        """
        limits = self._limits.get(instance_type)
        if limits is None:
            raise errors.LimitsUnknown(instance_type)
        return limits

    async def list_detached_interfaces(self, *, tags: Mapping[str, str]) -> list[Interface]:
        """Detached interfaces carrying every one of ``tags``.

        An empty ``tags`` selects nothing (never every detached interface of the account), with no call.

        Raises:
            errors.ProviderError: the listing failed.
        """
        if not tags:
            return []
        filters = {"status": ["available"], **{f"tag:{k}": [v] for k, v in tags.items()}, **self._vpc}
        return await self._all(
            "DescribeNetworkInterfaces",
            lambda t: self.cloud.describe_network_interfaces(filters=filters, next_token=t),
        )

    # -- mutations -------------------------------------------------------------------------------

    async def assign_addresses(self, *, interface_id: str, count: int, prefixes: bool = False) -> list[str]:
        """Assign exactly ``count`` addresses (or /28 prefixes) in one call; returns the new ones.

        Raises:
            errors.InterfaceLimitExceeded, errors.SubnetExhausted, errors.PrefixesExhausted,
            errors.NotFound, errors.Throttled, errors.TransientError: see the Provider protocol.
        """
        if count == 0:
            return []
        secondary, prefix = (0, count) if prefixes else (count, 0)
        return await self._api.call(
            "AssignPrivateIpAddresses",
            lambda: self.cloud.assign_private_ip_addresses(
                interface_id=interface_id, secondary_count=secondary, prefix_count=prefix
            ),
        )

    async def unassign_addresses(
        self, *, interface_id: str, addresses: Sequence[str] = (), prefixes: Sequence[str] = ()
    ) -> None:
        """Remove the given addresses and prefixes in one call (nothing to remove: no call).

        Raises:
            errors.InvalidRequest: an address is not assigned to the interface (nothing is removed).
            errors.NotFound: no such interface.
        """
        if not addresses and not prefixes:
            return
        await self._api.call(
            "UnassignPrivateIpAddresses",
            lambda: self.cloud.unassign_private_ip_addresses(
                interface_id=interface_id, addresses=tuple(addresses), prefixes=tuple(prefixes)
            ),
        )

    async def create_interface(
        self,
        *,
        instance_id: str,
        subnet_id: str,
        security_groups: Sequence[str],
        device_index: int,
        count: int,
        prefixes: bool = False,
        tags: Mapping[str, str],
        token: str,
        delete_on_termination: bool = True,
    ) -> Interface:
        """Create, attach and mark an interface; a failure after the create deletes it again.

        The calls are CreateNetworkInterface (addresses or prefixes, tags, description, ``token`` as
        the ClientToken), AttachNetworkInterface and ModifyNetworkInterfaceAttribute
        (delete-on-termination; skipped when not wanted). A retry with the same ``token`` finds the
        interface it created; if that one is already attached at ``device_index`` (or marked), those
        steps are skipped, so a retried create costs no second interface. Cancellation between the
        steps leaves a tagged, detached interface for garbage collection.

        Raises:
            errors.AttachmentLimitExceeded, errors.DeviceIndexInUse, errors.SubnetExhausted,
            errors.PrefixesExhausted, errors.InterfaceLimitExceeded, errors.InstanceNotRunning,
            errors.NotFound: the original error, after the rollback.
        """
        secondary, prefix = (0, count) if prefixes else (count, 0)
        iface = await self._api.call(
            "CreateNetworkInterface",
            lambda: self.cloud.create_network_interface(
                subnet_id=subnet_id,
                groups=tuple(security_groups),
                secondary_count=secondary,
                prefix_count=prefix,
                tags=dict(tags),
                description=DESCRIPTION.format(instance=instance_id),
                client_token=token,
            ),
        )
        attached_here = ""
        try:
            if (iface.instance_id, iface.device_index) != (instance_id, device_index):
                attached_here = await self._api.call(
                    "AttachNetworkInterface",
                    lambda: self.cloud.attach_network_interface(
                        interface_id=iface.id, instance_id=instance_id, device_index=device_index
                    ),
                )
                iface = dataclasses.replace(
                    iface,
                    instance_id=instance_id,
                    device_index=device_index,
                    attachment_id=attached_here,
                    delete_on_termination=False,
                )
            if delete_on_termination and not iface.delete_on_termination:
                attachment = iface.attachment_id
                await self._api.call(
                    "ModifyNetworkInterfaceAttribute",
                    lambda: self.cloud.modify_network_interface_attribute(
                        interface_id=iface.id, attachment_id=attachment, delete_on_termination=True
                    ),
                )
                iface = dataclasses.replace(iface, delete_on_termination=True)
        except errors.EniIpamError as exc:
            if isinstance(exc, errors.InstanceNotRunning):
                self._known.pop(instance_id, None)
            await self._roll_back(iface.id, attached_here, exc)
            raise
        return iface

    async def delete_interface(self, *, interface_id: str) -> None:
        """Delete an interface, detaching it first when it is attached.

        Raises:
            errors.NotFound: no such interface.
            errors.ProviderError: the cloud refused (the primary interface cannot be detached).
        """
        try:
            await self._delete(interface_id)
        except errors.ProviderError as exc:
            if exc.code != "InvalidNetworkInterface.InUse":
                raise
            page = await self._api.call(
                "DescribeNetworkInterfaces",
                lambda: self.cloud.describe_network_interfaces(interface_ids=[interface_id]),
            )
            for iface in page.items:
                if iface.attachment_id:
                    await self._detach(iface.attachment_id)
            await self._delete(interface_id)

    # -- helpers ---------------------------------------------------------------------------------

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

    async def _instance_info(self, instance_id: str) -> InstanceInfo | None:
        """DescribeInstances for one instance; refreshes the cache; ``None`` when missing or terminated."""
        try:
            page = await self._api.call(
                "DescribeInstances", lambda: self.cloud.describe_instances(instance_ids=[instance_id])
            )
        except errors.NotFound:
            page = Page(())
        info = next((i for i in page.items if i.id == instance_id and i.state != "terminated"), None)
        if info is None:
            self._known.pop(instance_id, None)
        else:
            self._known[instance_id] = info
        return info

    @staticmethod
    def _instance(info: InstanceInfo, interfaces: Sequence[Interface]) -> Instance:
        return Instance(
            id=info.id,
            type=info.type,
            vpc_id=info.vpc_id,
            zone=info.zone,
            subnet_id=info.subnet_id,
            interfaces=tuple(interfaces),
            running=info.state == "running",
        )

    async def _delete(self, interface_id: str) -> None:
        await self._api.call(
            "DeleteNetworkInterface", lambda: self.cloud.delete_network_interface(interface_id=interface_id)
        )

    async def _detach(self, attachment_id: str) -> None:
        await self._api.call(
            "DetachNetworkInterface", lambda: self.cloud.detach_network_interface(attachment_id=attachment_id)
        )

    async def _roll_back(self, interface_id: str, attachment_id: str, cause: BaseException) -> None:
        """Undo a create: detach what this call attached, then delete.

        Failures are noted on ``cause`` (the error the caller sees) rather than raised over it; a
        leftover interface carries its tags, so garbage collection finds it.
        """
        try:
            if attachment_id:
                await self._detach(attachment_id)
            await self._delete(interface_id)
        except errors.EniIpamError as exc:
            cause.add_note(f"rollback of {interface_id} failed: {exc}")
