"""AzureProvider: the :class:`~eni_ipam.core.provider.Provider` protocol on Azure Resource Manager.

Azure attaches NICs only to deallocated VMs, and every IP configuration of a NIC must be in the NIC's
subnet. So the pool of a node is the **secondary IP configurations of the NICs its VM already has**:
``assign_addresses`` adds configurations with dynamic allocation (Azure picks the addresses),
``unassign_addresses`` removes them, ``create_interface`` always refuses
(:class:`~eni_ipam.core.errors.AttachmentLimitExceeded`, no request), and the limits say
``hot_attach=False`` so the planner never asks. Ids are normalized ARM ids
(:mod:`providers.azure.ids`); the JSON mapping is in :mod:`providers.azure.resources`.

This module reads (resync, ``describe_instance``, garbage collection) and validates arguments; how a
NIC is written, and how a write whose answer does not say what happened is settled, is
:mod:`providers.azure.updates`, whose docstring states the rules: one conditional update per NIC per
call, another writer's change kept, configurations told apart by name, one deadline
(``operation_timeout``) per assign or unassign, and ``TransientError`` meaning that nothing changed
except with code ``OutcomeUnknown``.

``describe_instance`` reaches no further than the resync: a VM outside ``resource_groups``, or whose
primary NIC is in another virtual network than ``vnet_id``, is refused with
:class:`~eni_ipam.core.errors.InstanceOutOfScope` (the resource group is in the id: no request is
sent for it). It answers ``None`` only when Azure says that the VM itself does not exist
(``ResourceNotFound``/``NotFound`` on reading it): any other 404 (``SubscriptionNotFound``,
``ResourceGroupNotFound``) says nothing about the VM, and is raised.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import structlog
from azure.core.credentials_async import AsyncTokenCredential
from azure.core.pipeline.transport import AsyncHttpTransport

from eni_ipam.core import errors
from eni_ipam.core.clock import Clock
from eni_ipam.core.model import (
    DETACHED_INDEX,
    CloudSnapshot,
    CreateInterface,
    Instance,
    InstanceLimits,
    Interface,
    SecurityGroup,
    frozen_tags,
    tags_match,
)
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.provider import RefusesReadyInterfaces
from eni_ipam.errors import ConfigError
from providers.azure import ids
from providers.azure import resources as r
from providers.azure.client import ArmClient, Json, gather_all
from providers.azure.limits import VmSizes
from providers.azure.operations import ArmRateLimiter
from providers.azure.settings import AzureSettings
from providers.azure.updates import NicUpdates

log = structlog.get_logger("eni_ipam.azure")

_GONE = frozenset({"resourcenotfound", "notfound"})
"""404 codes that say the resource read does not exist (others name a missing subscription or group)."""


class AzureProvider(RefusesReadyInterfaces):
    """The :class:`~eni_ipam.core.provider.Provider` protocol on Azure (its contract is in
    :mod:`eni_ipam.core.provider`)."""

    name: str = "azure"

    ready_interfaces_refused = (
        "Azure attaches NICs only to deallocated VMs, so a NIC made ahead of a node could never be "
        "attached to it"
    )

    def __init__(
        self,
        settings: AzureSettings,
        *,
        clock: Clock,
        metrics: ApiObserver,
        rate_limit_share: float = 1.0,
        credential: AsyncTokenCredential | None = None,
        transport: AsyncHttpTransport[Any, Any] | None = None,
    ) -> None:
        """Args:
        settings: subscription, scope, cloud, timeouts, retries, buckets, VM-size overrides.
        clock: the clock of the latency metrics.
        metrics: where every request is recorded.
        rate_limit_share: the fraction of each bucket this controller may spend.
        credential: a token credential instead of ``DefaultAzureCredential`` (tests); not closed here.
        transport: an azure-core async transport instead of aiohttp (tests: the fake ARM).
        """
        self.settings = settings
        self.limiter = ArmRateLimiter(settings.buckets(), share=rate_limit_share)
        self.client = ArmClient(
            settings,
            limiter=self.limiter,
            metrics=metrics,
            clock=clock,
            credential=credential,
            transport=transport,
        )
        self.sizes = VmSizes(settings.vm_sizes)
        self.updates = NicUpdates(self.client)
        self._vnet = settings.vnet
        self._subscription = settings.subscription_id.lower()
        self._groups = frozenset(rg.lower() for rg in settings.resource_groups)

    @property
    def _network(self) -> Any:
        return self.client.network

    @property
    def _compute(self) -> Any:
        return self.client.compute

    # -- discovery ---------------------------------------------------------------------------------

    async def resync(self) -> CloudSnapshot:
        """VMs and scale-set VMs of the resource groups with their NICs, the VNet's subnets with free
        addresses, the groups' application security groups.

        A configured virtual network or resource group that does not exist would otherwise look like
        an empty cluster (every node unknown, and nothing saying why), so it is a configuration error.

        Raises:
            ConfigError: ``azure.vnet_id`` or an entry of ``azure.resource_groups`` names nothing
                (retried like any failed resync; fixing it needs a restart with the corrected value).
            errors.ProviderError: any listing failed (never a partial view).
        """
        reads: list[Awaitable[Any]] = [
            self._vnet_document(),
            self._vnet_usage(),
            *(self._group(rg) for rg in self.settings.resource_groups),
        ]
        vnet_doc, usage, *groups = await gather_all(reads)
        subnets = r.subnets(vnet_doc, usage)
        vnet_id = self._vnet.id
        instances: dict[str, Instance] = {}
        security_groups: dict[str, SecurityGroup] = {}
        for group in groups:
            for found in group.instances():
                instances[found.id] = found
            for asg in group.asgs:
                gid = ids.normalize(str(asg.get("id", "")))
                tags = {str(k): str(v) for k, v in (asg.get("tags") or {}).items()}
                security_groups[gid] = SecurityGroup(id=gid, vpc_id=vnet_id, tags=frozen_tags(tags))
        limits: dict[str, InstanceLimits] = {}
        for found in instances.values():
            known = self.sizes.get(found.type)
            if known is not None:
                limits[found.type] = known
        return CloudSnapshot(
            subnets=subnets, security_groups=security_groups, instances=instances, limits=limits
        )

    async def _vnet_document(self) -> Json:
        v = self._vnet
        try:
            return await self.client.get(
                "VirtualNetworks.Get", lambda: self._network.virtual_networks.get(v.resource_group, v.name)
            )
        except errors.NotFound as exc:
            raise ConfigError(
                "azure.vnet_id", f"{self.settings.vnet_id} does not exist ({exc.code}: {exc.message})"
            ) from exc

    async def _vnet_usage(self) -> list[Json]:
        v = self._vnet
        return await self.client.collect(
            "VirtualNetworks.ListUsage",
            lambda: self._network.virtual_networks.list_usage(v.resource_group, v.name),
        )

    async def _group(self, rg: str) -> _GroupView:
        listings: list[Awaitable[list[Json]]] = [
            self.client.collect(
                "VirtualMachines.List",
                lambda: self._compute.virtual_machines.list(rg, expand="instanceView"),
            ),
            self.client.collect("NetworkInterfaces.List", lambda: self._network.network_interfaces.list(rg)),
            self.client.collect(
                "ApplicationSecurityGroups.List",
                lambda: self._network.application_security_groups.list(rg),
            ),
            self.client.collect(
                "VirtualMachineScaleSets.List", lambda: self._compute.virtual_machine_scale_sets.list(rg)
            ),
        ]
        try:
            vms, nics, asgs, scale_sets = await gather_all(listings)
        except errors.NotFound as exc:
            if exc.code.lower() != "resourcegroupnotfound":
                raise
            raise ConfigError(
                "azure.resource_groups", f"resource group {rg!r} does not exist in the subscription"
            ) from exc
        # A Flexible scale set's VMs are ordinary VMs (listed above); only Uniform ones have their own.
        uniform = [
            str(ss.get("name", ""))
            for ss in scale_sets
            if str(r.props(ss).get("orchestrationMode") or "Uniform").lower() != "flexible"
        ]
        members = await gather_all(self._scale_set(rg, name) for name in uniform)
        return _GroupView(vms=vms, nics=nics, asgs=asgs, scale_sets=members)

    async def _scale_set(self, rg: str, name: str) -> tuple[list[Json], list[Json]]:
        vms, nics = await gather_all(
            [
                self.client.collect(
                    "VirtualMachineScaleSetVMs.List",
                    lambda: self._compute.virtual_machine_scale_set_vms.list(rg, name, expand="instanceView"),
                ),
                self.client.collect(
                    "NetworkInterfaces.ListVirtualMachineScaleSetNetworkInterfaces",
                    lambda: (
                        self._network.network_interfaces.list_virtual_machine_scale_set_network_interfaces(
                            rg, name
                        )
                    ),
                ),
            ]
        )
        return vms, nics

    async def describe_instance(self, *, instance_id: str) -> Instance | None:
        """The VM and its NICs, read now; ``None`` when the VM does not exist (or the id names no VM of
        this subscription).

        Raises:
            errors.InstanceOutOfScope: the VM is outside ``resource_groups``, or its primary NIC in
                another virtual network than ``vnet_id``.
            errors.ProviderError: any failure, a 404 that does not say that the VM is gone included.
        """
        ref = ids.parse_instance(instance_id)
        if ref is None or ref.subscription != self._subscription:
            return None
        if ref.resource_group.lower() not in self._groups:
            raise errors.InstanceOutOfScope(
                instance_id,
                f"its resource group {ref.resource_group} is not one of azure.resource_groups",
                operation="describe_instance",
            )
        try:
            if isinstance(ref, ids.VmRef):
                instance = await self._describe_vm(ref)
            else:
                instance = await self._describe_scale_set_vm(ref)
        except _Gone:
            return None
        if instance.vpc_id and instance.vpc_id.lower() != self._vnet.id.lower():
            raise errors.InstanceOutOfScope(
                instance_id,
                f"its virtual network {instance.vpc_id} is not azure.vnet_id",
                operation="describe_instance",
            )
        return instance

    async def _read_vm(self, operation: str, read: Callable[[], Awaitable[Any]]) -> Json:
        """The VM document; :class:`_Gone` when Azure says that it does not exist."""
        try:
            return await self.client.get(operation, read)
        except errors.NotFound as exc:
            if exc.code.lower() in _GONE:
                raise _Gone from exc
            raise

    async def _describe_vm(self, ref: ids.VmRef) -> Instance:
        vm = await self._read_vm(
            "VirtualMachines.Get",
            lambda: self._compute.virtual_machines.get(ref.resource_group, ref.name, expand="instanceView"),
        )
        docs = await gather_all(self._nic_or_none(slot.nic_id) for slot in r.nic_slots(vm))
        return r.instance(vm, {ids.normalize(str(d["id"])): d for d in docs if d is not None})

    async def _nic_or_none(self, nic_id: str) -> Json | None:
        ref = ids.parse_nic(nic_id)
        if ref is None or ref.in_scale_set:
            return None
        if ref.subscription != self._subscription:
            # The clients are bound to one subscription: reading it would read the NIC of the same
            # group and name in ours.
            log.warning("azure_nic_in_another_subscription", nic=ref.id)
            return None
        try:
            return await self.updates.read_nic(ref)
        except errors.NotFound as exc:
            if exc.code.lower() in _GONE:
                return None  # deleted since the VM was read
            raise

    async def _describe_scale_set_vm(self, ref: ids.ScaleSetVmRef) -> Instance:
        # The VM first: only its own read may say that the VM is gone.
        vm = await self._read_vm(
            "VirtualMachineScaleSetVMs.Get",
            lambda: self._compute.virtual_machine_scale_set_vms.get(
                ref.resource_group, ref.scale_set, ref.index, expand="instanceView"
            ),
        )
        nics = await self.client.collect(
            "NetworkInterfaces.ListVirtualMachineScaleSetVMNetworkInterfaces",
            lambda: self._network.network_interfaces.list_virtual_machine_scale_set_vm_network_interfaces(
                ref.resource_group, ref.scale_set, ref.index
            ),
        )
        return _scale_set_instance(vm, nics)

    async def instance_limits(self, *, instance_type: str) -> InstanceLimits:
        return self.sizes.limits(instance_type)

    # -- addresses ---------------------------------------------------------------------------------

    async def assign_addresses(
        self, *, interface_id: str, count: int, prefixes: bool = False, addresses: Sequence[str] = ()
    ) -> list[str]:
        """``count`` new secondary IP configurations in one update; their addresses
        (:meth:`NicUpdates.assign <providers.azure.updates.NicUpdates.assign>`).

        Named ``addresses`` are refused (``InvalidRequest``, code ``ExplicitAddressesNotSupported``),
        nothing assigned: Azure has no prefix delegation, so packing single addresses buys nothing,
        and no count of free /28s is made for it (docs/azure.md).

        Raises (besides the contract's): ``TransientError(code="OutcomeUnknown")`` when the update may
        have landed but that could not be settled before the deadline; the next resync shows it.
        """
        if addresses:
            raise errors.InvalidRequest(
                "Azure NICs are given addresses Azure chooses here: named addresses are not supported",
                code="ExplicitAddressesNotSupported",
                operation="assign",
            )
        if prefixes:
            raise errors.InvalidRequest(
                "Azure has no prefix delegation on NICs", code="PrefixesNotSupported", operation="assign"
            )
        if count < 0:
            raise errors.InvalidRequest(
                f"cannot assign {count} addresses", code="InvalidCount", operation="assign"
            )
        ref = self._nic_ref(interface_id)
        if count == 0:
            return []
        return await self.updates.assign(ref, count)

    async def assign_ipv6_prefix(self, *, interface_id: str) -> str:
        """Azure delegates no IPv6 prefixes to a NIC, and a NIC holds at most one IPv6 address (on a
        secondary IP configuration): no pool of IPv6 pod addresses can be made of NICs
        (docs/azure.md "IPv6").

        Raises:
            errors.InvalidRequest: always (``Ipv6PrefixesNotSupported``).
        """
        raise errors.InvalidRequest(
            "Azure delegates no IPv6 prefixes to NICs (docs/azure.md, IPv6)",
            code="Ipv6PrefixesNotSupported",
            operation="assign-ipv6-prefix",
        )

    async def unassign_addresses(
        self, *, interface_id: str, addresses: Sequence[str] = (), prefixes: Sequence[str] = ()
    ) -> None:
        """Remove exactly the IP configurations holding ``addresses``, in one update
        (:meth:`NicUpdates.unassign <providers.azure.updates.NicUpdates.unassign>`).

        Raises (besides the contract's): ``TransientError(code="OutcomeUnknown")`` as for assign.
        """
        if prefixes:
            raise errors.InvalidRequest(
                "Azure has no prefix delegation on NICs", code="PrefixesNotSupported", operation="unassign"
            )
        ref = self._nic_ref(interface_id)
        if not addresses:
            return
        await self.updates.unassign(ref, addresses)

    def _nic_ref(self, interface_id: str) -> ids.NicRef:
        ref = ids.parse_nic(interface_id)
        if ref is None or ref.subscription != self._subscription:
            raise errors.NotFound(
                f"no NIC {interface_id!r} in this subscription", code="NotFound", operation=""
            )
        return ref

    # -- interfaces --------------------------------------------------------------------------------

    async def create_interface(
        self,
        *,
        instance_id: str,
        request: CreateInterface,
        tags: Mapping[str, str],
        token: str,
        delete_on_termination: bool = True,
    ) -> Interface:
        """Always refused: Azure attaches NICs only to deallocated VMs."""
        raise errors.AttachmentLimitExceeded(
            f"cannot add a NIC to {instance_id}: Azure attaches NICs only to deallocated VMs; "
            "eni-ipam fills the NICs a VM already has",
            code="HotAttachNotSupported",
            operation="create_interface",
        )

    async def delete_interface(self, *, interface_id: str, detach: bool = True) -> None:
        """Delete a detached NIC. An attached one is refused whatever ``detach`` says: Azure detaches
        NICs only from deallocated VMs."""
        ref = self._nic_ref(interface_id)
        nic = await self.updates.read_nic(ref)  # NotFound propagates
        vm = r.attached_vm(nic) or (ref.vm.id if ref.in_scale_set else "")
        if vm:
            raise errors.InvalidRequest(
                f"{ref.id} is attached to {vm}; Azure cannot detach a NIC from a running VM",
                code="NicInUse",
                operation="NetworkInterfaces.Delete",
            )
        await self.client.lro(
            "NetworkInterfaces.Delete",
            lambda: self._network.network_interfaces.begin_delete(ref.resource_group, ref.name),
        )

    async def list_detached_interfaces(self, *, tags: Mapping[str, str]) -> list[Interface]:
        """NICs of the resource groups attached to no VM and carrying every one of ``tags``."""
        if not tags:
            return []
        listings = await gather_all(self._list_group_nics(rg) for rg in self.settings.resource_groups)
        out = []
        for nic in (n for listing in listings for n in listing):
            iface = r.interface(nic, device_index=DETACHED_INDEX)
            if not r.attached_vm(nic) and tags_match(iface.tags, tags):
                out.append(iface)
        return sorted(out, key=lambda i: i.id)

    async def _list_group_nics(self, rg: str) -> list[Json]:
        return await self.client.collect(
            "NetworkInterfaces.List", lambda: self._network.network_interfaces.list(rg)
        )

    async def close(self) -> None:
        """Close the SDK clients (HTTP sessions) and the credential the provider made."""
        await self.client.close()


@dataclasses.dataclass
class _GroupView:
    """One resource group's listings."""

    vms: list[Json]
    nics: list[Json]
    asgs: list[Json]
    scale_sets: list[tuple[list[Json], list[Json]]]
    """Per Uniform scale set: its VMs and its NICs."""

    def instances(self) -> Iterable[Instance]:
        nics = {ids.normalize(str(n.get("id", ""))): n for n in self.nics}
        for vm in self.vms:
            yield r.instance(vm, nics)
        for vms, scale_set_nics in self.scale_sets:
            by_vm: dict[str, list[Json]] = {}
            for nic in scale_set_nics:
                by_vm.setdefault(r.attached_vm(nic), []).append(nic)
            for vm in vms:
                yield _scale_set_instance(vm, by_vm.get(ids.normalize(str(vm.get("id", ""))), []))


def _scale_set_instance(vm: Json, nics: Sequence[Json]) -> Instance:
    by_id = {ids.normalize(str(n.get("id", ""))): n for n in nics}
    return r.instance(vm, by_id, scale_set_nic_ids=by_id)


class _Gone(Exception):
    """The VM read does not exist (raised inside ``describe_instance`` only)."""
