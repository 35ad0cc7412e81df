"""The Provider protocol over any EC2 API: every decision about which EC2 calls to make, in one place.

This is Cilium's ``pkg/ipam`` split. A thin client, :class:`Ec2Api`, has one model-typed method per EC2
operation and sends every request through :class:`~eni_ipam.core.caller.ApiCaller`. :class:`Ec2Provider` turns
the :class:`~eni_ipam.core.provider.Provider` protocol into those calls. The in-memory cloud
(:mod:`providers.sim`) and boto3 (:mod:`providers.aws`) supply only an :class:`Ec2Api` and a
:class:`LimitsSource`. Everything else is shared, so the same contract suite checks both and they
cannot drift apart:

* resync assembly and scoping (VPC, subnet ids and tags, instance tags);
* the per-instance cache;
* create → attach → delete-on-termination, with rollback and the attach retry on an index conflict;
* delete with detach;
* the garbage-collection listing.

Invariants:

* A create that fails after ``CreateNetworkInterface`` deletes what it created before raising. If the
  rollback fails too, that failure is noted on the original error, and the interface keeps its
  ownership tags so garbage collection finds it.
* A retried create with the same idempotency token adopts the interface of the first attempt and
  never attaches a second one.
* A token whose interface was rolled back (or deleted since) is spent. EC2 answers a spent token with
  the deleted interface, so the next create derives a fresh token from it, in a fixed sequence. After a
  restart, the sequence leads back to an interface an interrupted attempt left behind, instead of
  making another one.
* A lookup by id (a node's providerID) sees no further than the listings: the instance must be in
  the configured VPC and carry the configured instance tags (the same filters as the resync's
  listing). One that exists outside them is refused with
  :class:`~eni_ipam.core.errors.InstanceOutOfScope` naming the failed check, never described.
* The only waiting here is for EC2 to finish a detach before the delete (detaching is asynchronous on
  EC2). It is bounded and runs on the injected clock. Retries across passes belong to the reconciler's
  backoff.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
from collections.abc import Collection, Mapping, Sequence
from typing import Literal, Protocol

import structlog

from eni_ipam.core import devices, errors
from eni_ipam.core.blocks import count_blocks
from eni_ipam.core.clock import Clock
from eni_ipam.core.model import (
    EMPTY_TAGS,
    Changes,
    CloudSnapshot,
    CreateInterface,
    Instance,
    InstanceLimits,
    Interface,
    SecurityGroup,
    Subnet,
    Tags,
)
from eni_ipam.core.packed import pack_detail
from eni_ipam.errors import EniIpamError

log = structlog.get_logger("eni_ipam.core.provider")

BLOCKS_SLICE = 4
"""Subnets whose free /28 blocks are counted between two yields to the event loop: a subnet holds at
most its size in addresses (65,536 for a /16, a few ms to count), so four keep a stall under 20 ms."""

Filters = Mapping[str, Sequence[str]]
"""EC2 filters: name → accepted values (a value matches when any one does)."""

InstanceState = Literal["pending", "running", "stopping", "stopped", "shutting-down", "terminated"]

LIVE_STATES: tuple[str, ...] = ("pending", "running", "stopping", "stopped")
"""Instance states worth listing: a terminated (or terminating) instance has no pool to keep."""

NOT_RUNNING: tuple[str, ...] = ("pending", "stopping", "stopped", "shutting-down", "terminated")
"""Every state but running: what an incremental resync lists (EC2 filters only by inclusion)."""


DESCRIPTION = "eni-ipam ({instance})"
"""Description of the interfaces eni-ipam creates (the instance id fills in)."""

READY_DESCRIPTION = "eni-ipam (ready)"
"""Description of the interfaces made for the pool of ready interfaces (no instance is known yet)."""

ATTACH_ATTEMPTS = 5
"""Device indexes tried by one create: the planned one, then the next ones on an index conflict."""

ASSEMBLY_SLICE = 1000
"""Interfaces grouped, or instances assembled, between two yields to the event loop in a resync (a
few milliseconds of work: the loop never waits for a whole cluster's)."""
FILTER_VALUES_PER_CALL = 200
"""EC2 accepts at most 200 values in one filter; longer id lists are split across calls."""

TOKEN_SPINS = 4
"""Tokens one create may try with the cloud: the caller's, then ones derived from it when an earlier
one is spent (tokens already known to be spent are skipped without a call)."""

DETACH_WAITS = (0.5, 1.0, 2.0, 4.0, 4.0, 4.0)
"""Seconds between delete attempts while EC2 is still detaching an interface (about 15 s in all)."""

_INTERFACE_GONE = "InvalidNetworkInterfaceID.NotFound"
_IN_USE = "InvalidNetworkInterface.InUse"


def spin_token(token: str, n: int) -> str:
    """The ``n``-th token derived from ``token`` (``n == 0``: the token itself); at most 64 characters,
    as EC2's ClientToken allows."""
    return token if n == 0 else "eni-ipam-" + hashlib.sha256(f"{token}#{n}".encode()).hexdigest()[:40]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class InstanceInfo:
    """One instance as ``DescribeInstances`` reports it (interfaces come from DescribeNetworkInterfaces)."""

    id: str
    type: str
    state: InstanceState
    vpc_id: str
    subnet_id: str
    zone: str
    security_groups: tuple[str, ...] = ()


class Ec2Api(Protocol):
    """The thin EC2 client: one method per operation, model-typed, keyword-only.

    Every request goes through :class:`~eni_ipam.core.caller.ApiCaller`, which means it is rate limited,
    measured, and has its errors translated with :func:`providers.ec2.errors.translate_ec2`. Listings
    return every page, and each page is one request. A method makes exactly the one request its name
    says: no retries beyond the SDK's, and no policy.
    """

    async def describe_subnets(self, *, filters: Filters) -> list[Subnet]: ...

    async def describe_security_groups(self, *, filters: Filters) -> list[SecurityGroup]: ...

    async def describe_instances(
        self, *, instance_ids: Sequence[str] = (), filters: Filters | None = None
    ) -> list[InstanceInfo]:
        """Instances by id and/or filters; an unknown id raises :class:`~eni_ipam.core.errors.NotFound`."""
        ...

    async def describe_network_interfaces(
        self, *, interface_ids: Sequence[str] = (), filters: Filters | None = None
    ) -> list[Interface]:
        """Interfaces by id and/or filters; detached ones have ``device_index == -1``."""
        ...

    async def assign_private_ip_addresses(
        self, *, interface_id: str, secondary_count: int, prefix_count: int, addresses: Sequence[str] = ()
    ) -> list[str]:
        """Only the newly assigned addresses (or prefixes), in address order. ``addresses``: the
        ``PrivateIpAddresses`` to assign, named (then ``secondary_count`` is 0)."""
        ...

    async def unassign_private_ip_addresses(
        self, *, interface_id: str, addresses: Sequence[str], prefixes: Sequence[str]
    ) -> None: ...

    async def assign_ipv6_addresses(self, *, interface_id: str, prefix_count: int) -> list[str]:
        """``AssignIpv6Addresses`` with ``Ipv6PrefixCount``: only the new /80 prefixes."""
        ...

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
        """The new interface; with a ``client_token`` seen before, the one that call created."""
        ...

    async def attach_network_interface(
        self, *, interface_id: str, instance_id: str, device_index: int, network_card: int = 0
    ) -> str:
        """The attachment id (``device_index`` of ``network_card``: EC2's NetworkCardIndex)."""
        ...

    async def modify_network_interface_attribute(
        self, *, interface_id: str, attachment_id: str, delete_on_termination: bool
    ) -> None: ...

    async def detach_network_interface(self, *, attachment_id: str, force: bool = False) -> None: ...

    async def delete_network_interface(self, *, interface_id: str) -> None: ...


class LimitsSource(Protocol):
    """Where an EC2 provider learns instance-type limits (a static table, or the API with a fallback)."""

    async def limits(self, instance_type: str) -> InstanceLimits:
        """Limits of one type.

        Raises:
            errors.LimitsUnknown: the type is unknown (after any lookup the source allows itself).
        """
        ...

    async def known(self, instance_types: Collection[str]) -> dict[str, InstanceLimits]:
        """Limits of every type in ``instance_types`` the source knows; unknown types are left out.

        Never raises: a failed lookup leaves the types out, and the caller treats them as unknown.
        """
        ...


class TableLimits:
    """A :class:`LimitsSource` over a fixed table: no API calls."""

    def __init__(self, table: Mapping[str, InstanceLimits]) -> None:
        self.table = table

    async def limits(self, instance_type: str) -> InstanceLimits:
        found = self.table.get(instance_type)
        if found is None:
            raise errors.LimitsUnknown(instance_type)
        return found

    async def known(self, instance_types: Collection[str]) -> dict[str, InstanceLimits]:
        return {t: self.table[t] for t in instance_types if t in self.table}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Scope:
    """What part of the account the provider sees. Empty fields do not restrict."""

    vpc_id: str = ""
    """Only this VPC's subnets, security groups, instances and interfaces."""
    subnet_ids: tuple[str, ...] = ()
    """Only these subnets are reported (and so chosen for new interfaces)."""
    subnet_tags: Tags = EMPTY_TAGS
    """Only subnets carrying every one of these tags are reported."""
    instance_tags: Tags = EMPTY_TAGS
    """Only instances carrying every one of these tags (and their interfaces) are reported."""

    def vpc(self) -> dict[str, list[str]]:
        return {"vpc-id": [self.vpc_id]} if self.vpc_id else {}

    def subnet_filters(self) -> dict[str, list[str]]:
        filters = self.vpc()
        if self.subnet_ids:
            filters["subnet-id"] = list(self.subnet_ids)
        filters.update({f"tag:{k}": [v] for k, v in self.subnet_tags.items()})
        return filters

    def instance_filters(self) -> dict[str, list[str]]:
        filters = {**self.vpc(), "instance-state-name": list(LIVE_STATES)}
        filters.update({f"tag:{k}": [v] for k, v in self.instance_tags.items()})
        return filters


def _same_objects(held: Sequence[Interface], listed: Sequence[Interface]) -> bool:
    """Whether ``listed`` holds exactly the objects of ``held`` (of the same length), in any order."""
    ids = {id(i) for i in held}
    return all(id(i) in ids for i in listed)


def _chunks(items: Sequence[str], size: int = FILTER_VALUES_PER_CALL) -> list[list[str]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


class Ec2Provider:
    """The :class:`~eni_ipam.core.provider.Provider` protocol over an :class:`Ec2Api` (contract in its docs).

    Caching: an instance's type, zone, VPC and subnet never change, so ``describe_instance`` keeps what
    ``DescribeInstances`` said. While the instance is known, it makes only one
    ``DescribeNetworkInterfaces`` call per sync. It asks ``DescribeInstances`` again when the instance
    is not cached, or when no interface is attached (a live instance always has its primary). That is
    how a termination is seen.
    """

    name: str = "ec2"

    def __init__(
        self,
        api: Ec2Api,
        *,
        limits: LimitsSource,
        clock: Clock,
        scope: Scope | None = None,
        instance_listing_interval: float = 0.0,
    ) -> None:
        """``instance_listing_interval``: seconds between two full ``DescribeInstances`` listings
        (0: at every resync); the resyncs between list only the instances that are not running and
        the ones they learn of (see :meth:`resync`)."""
        self.api = api
        self.instance_listing_interval = instance_listing_interval
        self.limits = limits
        self.clock = clock
        self.scope = scope or Scope()
        self._instances: dict[str, InstanceInfo] = {}
        self._listed_at: float | None = None
        """When the last full ``DescribeInstances`` listing started (None: none yet)."""
        self._snapshot: dict[str, Instance] = {}
        """Every instance of the last resync: an unchanged one is handed back as the same object."""
        self._spent: set[str] = set()
        """Tokens whose interface this process deleted: EC2 would answer them with a dead interface."""

    # -- reads -----------------------------------------------------------------------------------

    async def shared_view(self) -> CloudSnapshot:
        """Subnets and security groups within the scope (DescribeSubnets, DescribeSecurityGroups):
        what a new leader plans with before its first full listing ends
        (:class:`~eni_ipam.core.provider.SharedViewReader`).

        Raises:
            errors.ProviderError: either call failed.
        """
        return await self._list_shared()

    async def _list_shared(self) -> CloudSnapshot:
        """What :meth:`shared_view` returns; every resync begins with it (a provider adding a check
        of its own overrides this)."""
        subnets = await self.api.describe_subnets(filters=self.scope.subnet_filters())
        groups = await self.api.describe_security_groups(filters=self.scope.vpc())
        return CloudSnapshot(
            subnets={s.id: s for s in subnets},
            security_groups={g.id: g for g in groups},
            instances={},
            limits={},
        )

    async def resync(self) -> CloudSnapshot:
        """The full view within the scope: subnets, groups, live instances with their attached
        interfaces, and limits of their types.

        Calls what :meth:`shared_view` calls, then DescribeInstances and DescribeNetworkInterfaces,
        each paged to the end; with an instance-tag scope, interfaces are asked for by instance id.

        Instances are listed whole at the first resync, every ``instance_listing_interval`` (0: every
        time), and every time with an instance-tag scope (it is how new instances are found there).
        In between, with a VPC scope, only the instances that are not running are listed: the rest
        keep what the last listing said (an instance's type, zone and subnet never change while it
        runs), instances the interface listing names but the cache does not know are described, and
        so is a known instance with no interface attached (a live instance always has its primary
        one: one that has none is gone, or going). A listing of every instance nests every interface
        and address again: as heavy as the interface listing itself, every resync.

        An instance that did not change since the last resync is handed back as the very same
        :class:`Instance` object, so the reconciler can pass over it.

        Raises:
            errors.ProviderError: any call failed (no partial view is returned).
        """
        scope = self.scope
        started = self.clock.monotonic()
        shared = await self._list_shared()
        whole = (
            bool(scope.instance_tags)
            or self._listed_at is None
            or started - self._listed_at >= self.instance_listing_interval
        )
        if whole:
            infos = await self.api.describe_instances(filters=scope.instance_filters())
            live = {info.id: info for info in infos if info.state in LIVE_STATES}
        else:
            live = {
                id: dataclasses.replace(info, state="running") if info.state != "running" else info
                for id, info in self._instances.items()
            }
            stopped = await self.api.describe_instances(
                filters={**scope.instance_filters(), "instance-state-name": list(NOT_RUNNING)}
            )
            for info in stopped:
                if info.state in LIVE_STATES:
                    live[info.id] = info
                else:
                    live.pop(info.id, None)
        if scope.instance_tags:
            interfaces: list[Interface] = []
            for chunk in _chunks(sorted(live)):
                interfaces += await self.api.describe_network_interfaces(
                    filters={"attachment.instance-id": chunk}
                )
        else:
            interfaces = await self.api.describe_network_interfaces(filters=scope.vpc())
        attached: dict[str, list[Interface]] = collections.defaultdict(list)
        # Every interface of the VPC is listed (not only the cluster's): the used addresses of each
        # subnet, hence its free /28 blocks, are known. An instance-tag scope lists only its own.
        blocks = None if scope.instance_tags else count_blocks(shared.subnets, ())
        for n, iface in enumerate(interfaces, 1):
            if iface.instance_id:
                attached[iface.instance_id].append(iface)
            if blocks is not None:
                counted = blocks.get(iface.subnet_id)
                if counted is not None:
                    counted.add(iface)
            if not n % ASSEMBLY_SLICE:
                await asyncio.sleep(0)  # 400,000 interfaces at 100,000 nodes: the loop runs between
        subnets = shared.subnets
        if blocks is not None:
            subnets = dict(subnets)
            for n, (sid, of_subnet) in enumerate(blocks.items(), 1):
                subnets[sid] = dataclasses.replace(subnets[sid], free_blocks=of_subnet.free_blocks)
                if not n % BLOCKS_SLICE:
                    await asyncio.sleep(0)
        if not whole:
            # New instances (attached to, unknown yet), and known ones whose primary interface is
            # gone: described now, so neither is missed nor kept past its termination.
            unsure = sorted(
                {*(i for i in attached if i not in live), *(i for i in live if i not in attached)}
            )
            for chunk in _chunks(unsure):
                described = {
                    info.id: info
                    for info in await self.api.describe_instances(
                        filters={**scope.instance_filters(), "instance-id": chunk}
                    )
                }
                for id in chunk:
                    if id in described:
                        live[id] = described[id]
                    else:
                        live.pop(id, None)  # terminated, gone, or not in the scope
        else:
            self._listed_at = started
        self._instances = live
        previous = self._snapshot
        instances: dict[str, Instance] = {}
        changed = set(previous.keys() - live.keys())
        for n, (id, info) in enumerate(live.items(), 1):
            held = previous.get(id)
            instance = instances[id] = self._reuse(held, info, attached.get(id, ()))
            if instance is not held:
                changed.add(id)
            if not n % ASSEMBLY_SLICE:
                await asyncio.sleep(0)
        self._snapshot = instances
        return CloudSnapshot(
            subnets=subnets,
            security_groups=shared.security_groups,
            instances=instances,
            limits=await self.limits.known({info.type for info in live.values()}),
            changes=Changes(since=previous, instance_ids=frozenset(changed)),
            blocks=blocks,
        )

    def _reuse(
        self, previous: Instance | None, info: InstanceInfo, interfaces: Sequence[Interface]
    ) -> Instance:
        """``previous`` when nothing of it changed (the same object: what lets the reconciler pass over
        it), a new :class:`Instance` otherwise."""
        if (
            previous is not None
            and len(previous.interfaces) == len(interfaces)
            and _same_objects(previous.interfaces, interfaces)
            and previous.running == (info.state == "running")
            and (previous.type, previous.vpc_id, previous.zone, previous.subnet_id)
            == (info.type, info.vpc_id, info.zone, info.subnet_id)
        ):
            # The listing handed back the very interface objects (unchanged since it last read
            # them): nothing to build or compare field by field.
            return previous
        fresh = self._instance(info, interfaces)
        if previous is not None and previous == fresh:
            return previous
        return fresh

    async def describe_instance(self, *, instance_id: str) -> Instance | None:
        """The instance with its attached interfaces now; ``None`` when missing or terminated.

        Raises:
            errors.InstanceOutOfScope: the instance exists outside the configured VPC or without
                the configured instance tags.
            errors.ProviderError: the cloud could not answer (never for "not found").
        """
        info = self._instances.get(instance_id)
        fresh = info is None
        if info is None:
            info = await self._instance_info(instance_id)
            if info is None:
                return None
        interfaces = await self.api.describe_network_interfaces(
            filters={"attachment.instance-id": [instance_id], **self.scope.vpc()}
        )
        if not interfaces and not fresh:
            info = await self._instance_info(instance_id)
            if info is None:
                return None
        return self._instance(info, interfaces)

    async def instance_limits(self, *, instance_type: str) -> InstanceLimits:
        """Limits of ``instance_type`` from the provider's :class:`LimitsSource`.

        Raises:
            errors.LimitsUnknown: the type is unknown.
        """
        return await self.limits.limits(instance_type)

    async def list_detached_interfaces(self, *, tags: Mapping[str, str]) -> list[Interface]:
        """Detached interfaces (within the VPC scope) carrying every one of ``tags``.

        An empty ``tags`` selects nothing, with no call: it never lists every detached interface
        of the account.

        Raises:
            errors.ProviderError: the listing failed.
        """
        if not tags:
            return []
        filters = {
            "status": ["available"],
            **{f"tag:{k}": [v] for k, v in tags.items()},
            **self.scope.vpc(),
        }
        return await self.api.describe_network_interfaces(filters=filters)

    # -- mutations -------------------------------------------------------------------------------

    async def assign_addresses(
        self, *, interface_id: str, count: int, prefixes: bool = False, addresses: Sequence[str] = ()
    ) -> list[str]:
        """Assign exactly ``count`` addresses (or /28 prefixes) in one call; returns the new ones.
        Named ``addresses`` go as ``PrivateIpAddresses``, never with reassignment.

        Raises:
            errors.AddressInUse, errors.InvalidRequest (named addresses),
            errors.InterfaceLimitExceeded, errors.SubnetExhausted, errors.PrefixesExhausted,
            errors.NotFound, errors.Throttled, errors.TransientError: see the Provider protocol.
        """
        if addresses:
            if prefixes or count != len(addresses):
                raise errors.InvalidRequest(
                    f"{len(addresses)} named addresses for a count of {count}"
                    + (" of prefixes" if prefixes else ""),
                    code="InvalidParameterCombination",
                    operation="AssignPrivateIpAddresses",
                )
            return await self.api.assign_private_ip_addresses(
                interface_id=interface_id, secondary_count=0, prefix_count=0, addresses=tuple(addresses)
            )
        if count == 0:
            return []
        secondary, prefix = (0, count) if prefixes else (count, 0)
        return await self.api.assign_private_ip_addresses(
            interface_id=interface_id, secondary_count=secondary, prefix_count=prefix
        )

    async def assign_ipv6_prefix(self, *, interface_id: str) -> str:
        """One IPv6 /80 prefix in one call (``AssignIpv6Addresses``, ``Ipv6PrefixCount=1``).

        Raises:
            errors.InvalidRequest, errors.InterfaceLimitExceeded, errors.PrefixesExhausted,
            errors.NotFound, errors.Throttled, errors.TransientError: see the Provider protocol.
        """
        new = await self.api.assign_ipv6_addresses(interface_id=interface_id, prefix_count=1)
        if len(new) != 1:
            raise errors.TransientError(
                f"AssignIpv6Addresses answered {len(new)} prefixes for one: a fresh read tells",
                code="OutcomeUnknown",
                operation="AssignIpv6Addresses",
            )
        return new[0]

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
        await self.api.unassign_private_ip_addresses(
            interface_id=interface_id, addresses=tuple(addresses), prefixes=tuple(prefixes)
        )

    async def create_interface(
        self,
        *,
        instance_id: str,
        request: CreateInterface,
        tags: Mapping[str, str],
        token: str,
        delete_on_termination: bool = True,
    ) -> Interface:
        """Create, attach and mark an interface; a failure after the create deletes it again.

        The calls:

        * CreateNetworkInterface, carrying the addresses or prefixes (and the IPv6 prefix, when asked),
          the tags, a description, and ``token`` as the ClientToken;
        * AttachNetworkInterface at ``request.device_index`` of ``request.network_card``. On an index
          conflict (our view was stale) it tries the card's next index, up to :data:`ATTACH_ATTEMPTS`
          indexes, and the returned interface says which one it got;
        * ModifyNetworkInterfaceAttribute for delete-on-termination, skipped when not wanted.

        A retry with the same ``token`` gets back the interface the first attempt created. If that
        one is already attached to the instance (or already marked), those steps are skipped, so a
        retried create never costs a second interface. If the task is cancelled between the steps,
        a tagged, detached interface is left behind, and garbage collection removes it.

        Raises:
            errors.AttachmentLimitExceeded, errors.DeviceIndexInUse, errors.SubnetExhausted,
            errors.PrefixesExhausted, errors.InterfaceLimitExceeded, errors.InstanceNotRunning,
            errors.NotFound: the original error, after the rollback.
        """
        secondary, prefix = (0, request.count) if request.prefixes else (request.count, 0)
        # Tokens known to be spent are skipped for free; at most TOKEN_SPINS are tried with the cloud
        # per call. Counting the spent ones against that budget left a plan that had rolled back four
        # times unable to create ever again in this process.
        tried, n = 0, -1
        while tried < TOKEN_SPINS and n <= len(self._spent) + TOKEN_SPINS:
            n += 1
            client_token = spin_token(token, n)
            if client_token in self._spent:
                continue
            tried += 1
            iface = await self.api.create_network_interface(
                subnet_id=request.subnet_id,
                groups=request.security_groups,
                secondary_count=secondary,
                prefix_count=prefix,
                tags=dict(tags),
                description=DESCRIPTION.format(instance=instance_id),
                client_token=client_token,
                ipv6_prefix_count=request.ipv6_prefixes,
            )
            try:
                return await self._attach_and_mark(
                    iface,
                    client_token,
                    instance_id,
                    (request.network_card, request.device_index),
                    delete_on_termination,
                )
            except errors.NotFound as exc:
                if exc.code != _INTERFACE_GONE:
                    raise
                # The token's interface was deleted since (a rollback before a restart, or by hand):
                # the token is spent, and the next one in the sequence is tried.
                self._spent.add(client_token)
                log.info("idempotency_token_spent", interface=iface.id, instance=instance_id)
        raise errors.ProviderError(
            f"{TOKEN_SPINS} more idempotency tokens derived from {token} were spent in one call",
            code="IdempotencyTokensSpent",
            operation="CreateNetworkInterface",
        )

    async def _attach_and_mark(
        self,
        iface: Interface,
        client_token: str,
        instance_id: str,
        slot: tuple[int, int],
        delete_on_termination: bool,
    ) -> Interface:
        """Attach at ``slot`` (network card, device index) and mark a created (or adopted) interface;
        on failure, roll it back and re-raise.

        Raises:
            errors.NotFound: ``InvalidNetworkInterfaceID.NotFound``, the interface no longer exists
                (nothing to roll back), or the instance is gone.
            EniIpamError: any other failure, after the rollback.
        """
        attached_here = ""
        try:
            if iface.instance_id != instance_id:
                card, index = slot
                index, attached_here = await self._attach(iface.id, instance_id, card, index)
                iface = dataclasses.replace(
                    iface,
                    instance_id=instance_id,
                    device_index=index,
                    detail=pack_detail(iface.primary_ip, attached_here),
                    delete_on_termination=False,
                    link=devices.with_card(iface.link, card),
                )
            if delete_on_termination and not iface.delete_on_termination:
                await self.api.modify_network_interface_attribute(
                    interface_id=iface.id, attachment_id=iface.attachment_id, delete_on_termination=True
                )
                iface = dataclasses.replace(iface, delete_on_termination=True)
        except EniIpamError as exc:
            if isinstance(exc, errors.NotFound) and exc.code == _INTERFACE_GONE:
                raise
            if isinstance(exc, errors.InstanceNotRunning):
                self._instances.pop(instance_id, None)
            if await self._roll_back(iface.id, attached_here, exc):
                self._spent.add(client_token)
            raise
        return iface

    async def create_ready_interface(
        self,
        *,
        subnet_id: str,
        security_groups: Sequence[str],
        count: int,
        prefixes: bool = False,
        tags: Mapping[str, str],
        token: str,
    ) -> Interface:
        """One CreateNetworkInterface carrying the addresses (or prefixes) and the tags, with
        ``token`` as its ClientToken; nothing else: the interface stays detached.

        Raises:
            errors.QuotaExceeded, errors.SubnetExhausted, errors.PrefixesExhausted,
            errors.InterfaceLimitExceeded, errors.InvalidRequest: see the Provider protocol.
        """
        secondary, prefix = (0, count) if prefixes else (count, 0)
        return await self.api.create_network_interface(
            subnet_id=subnet_id,
            groups=tuple(security_groups),
            secondary_count=secondary,
            prefix_count=prefix,
            tags=dict(tags),
            description=READY_DESCRIPTION,
            client_token=token,
        )

    async def attach_interface(
        self, *, interface: Interface, instance_id: str, device_index: int, network_card: int = 0
    ) -> Interface:
        """One AttachNetworkInterface (more only on an index conflict: the card's next indexes, as a
        create's attach). Delete-on-termination is left off, which saves the second call: when the
        instance goes, the interface is detached by EC2 and comes back to the pool of ready
        interfaces (docs/aws.md). A failure leaves the interface detached: nothing is rolled back.

        Raises:
            errors.InvalidRequest: the interface is attached already.
            errors.AttachmentLimitExceeded, errors.DeviceIndexInUse, errors.InstanceNotRunning,
            errors.NotFound: see the Provider protocol.
        """
        if interface.instance_id:
            raise errors.InvalidRequest(
                f"{interface.id} is attached to {interface.instance_id} already",
                code="InterfaceAttached",
                operation="AttachNetworkInterface",
            )
        try:
            index, attachment = await self._attach(interface.id, instance_id, network_card, device_index)
        except errors.InstanceNotRunning:
            self._instances.pop(instance_id, None)
            raise
        return dataclasses.replace(
            interface,
            instance_id=instance_id,
            device_index=index,
            detail=pack_detail(interface.primary_ip, attachment),
            delete_on_termination=False,
            link=devices.with_card(interface.link, network_card),
        )

    async def delete_interface(self, *, interface_id: str, detach: bool = True) -> None:
        """Delete an interface; when ``detach``, detach it first if it is attached.

        With ``detach=False`` an attached interface is refused by the cloud and kept (garbage
        collection relies on this: an interface attached since it was marked survives).

        Raises:
            errors.NotFound: no such interface.
            errors.InvalidRequest: the interface is attached and ``detach`` is false, or it is an
                instance's primary interface, which cannot be detached.
        """
        try:
            await self.api.delete_network_interface(interface_id=interface_id)
        except errors.ProviderError as exc:
            if not detach or exc.code != _IN_USE:
                raise
            for iface in await self.api.describe_network_interfaces(interface_ids=[interface_id]):
                if iface.attachment_id:
                    await self.api.detach_network_interface(attachment_id=iface.attachment_id)
            await self._delete_detaching(interface_id)

    # -- helpers ---------------------------------------------------------------------------------

    async def _attach(
        self, interface_id: str, instance_id: str, network_card: int, device_index: int
    ) -> tuple[int, str]:
        """Attach at ``device_index`` of ``network_card``, or the card's next free index after a
        conflict; (index, attachment)."""
        last = device_index + ATTACH_ATTEMPTS - 1
        for index in range(device_index, last + 1):
            try:
                attachment = await self.api.attach_network_interface(
                    interface_id=interface_id,
                    instance_id=instance_id,
                    device_index=index,
                    network_card=network_card,
                )
                return index, attachment
            except errors.DeviceIndexInUse:
                if index == last:
                    raise
                log.info(
                    "device_index_in_use",
                    interface=interface_id,
                    instance=instance_id,
                    index=index,
                    network_card=network_card,
                )
        raise AssertionError("ATTACH_ATTEMPTS must be at least 1")

    async def _instance_info(self, instance_id: str) -> InstanceInfo | None:
        """DescribeInstances for one instance, with the listing's filters (VPC, instance tags);
        refreshes the cache; ``None`` when missing or terminated.

        Raises:
            errors.InstanceOutOfScope: it exists, live, outside those filters.
        """
        # A filter, not InstanceIds: an unknown id answers an empty page instead of an error, and a
        # filtered, paginated request is in EC2's larger non-mutating bucket.
        scope = self.scope
        infos = await self.api.describe_instances(
            filters={**scope.instance_filters(), "instance-id": [instance_id]}
        )
        info = next((i for i in infos if i.id == instance_id and i.state in LIVE_STATES), None)
        if info is None:
            self._instances.pop(instance_id, None)
            if scope.vpc_id or scope.instance_tags:
                await self._refuse_if_out_of_scope(instance_id)
        else:
            self._instances[instance_id] = info
        return info

    async def _refuse_if_out_of_scope(self, instance_id: str) -> None:
        """The scoped lookup found nothing: a second one by id alone tells a missing instance (return)
        from one outside the scope (raise, naming the check). Only instances not found pay for it."""
        infos = await self.api.describe_instances(filters={"instance-id": [instance_id]})
        info = next((i for i in infos if i.id == instance_id and i.state in LIVE_STATES), None)
        if info is None:
            return
        scope = self.scope
        if scope.vpc_id and info.vpc_id != scope.vpc_id:
            check = f"its VPC {info.vpc_id or '(none)'} is not the configured {scope.vpc_id}"
        else:
            tags = ", ".join(f"{k}={v}" for k, v in sorted(scope.instance_tags.items()))
            check = f"it does not carry every configured instance tag ({tags})"
        raise errors.InstanceOutOfScope(instance_id, check, operation="DescribeInstances")

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

    async def _roll_back(self, interface_id: str, attachment_id: str, cause: BaseException) -> bool:
        """Undo a create: detach what this call attached, then delete.

        Failures are noted on ``cause`` (the error the caller sees) rather than raised over it; a
        leftover interface carries its tags, so garbage collection finds it.

        Returns:
            Whether the interface was deleted.
        """
        try:
            if attachment_id:
                await self.api.detach_network_interface(attachment_id=attachment_id)
                await self._delete_detaching(interface_id)
            else:
                await self.api.delete_network_interface(interface_id=interface_id)
        except EniIpamError as exc:
            cause.add_note(f"rollback of {interface_id} failed: {exc}")
            log.warning("rollback_failed", interface=interface_id, error=str(exc))
            return False
        return True

    async def _delete_detaching(self, interface_id: str) -> None:
        """Delete an interface just detached: EC2 detaches asynchronously, and refuses the delete
        (``InvalidNetworkInterface.InUse``) until the detach is done; retried for about 15 s."""
        for wait in (*DETACH_WAITS, None):
            try:
                await self.api.delete_network_interface(interface_id=interface_id)
                return
            except errors.ProviderError as exc:
                if exc.code != _IN_USE or wait is None:
                    raise
            await self.clock.sleep(wait)
