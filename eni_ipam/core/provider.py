"""The Provider protocol: what a cloud must do for eni-ipam.

A provider is a thin client (Cilium's ``pkg/aws/ec2`` shape): it translates between the cloud's API
and :mod:`eni_ipam.core.model`, sends every call through :class:`eni_ipam.core.caller.ApiCaller`
(rate limiter → SDK → error translation → observer) and raises only :mod:`eni_ipam.core.errors`
types. It holds no policy: which interface to fill, how many addresses, when to release — the
planner decides.

Concurrency: the manager may call a provider concurrently for *different* instances, never
concurrently for the *same* instance. Every method is keyword-only.

:func:`eni_ipam.testing.provider_contract.check_provider` is the executable form of this contract;
every provider runs it in its tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, Protocol

from eni_ipam.config.schema import ConfigModel
from eni_ipam.core import errors
from eni_ipam.core.clock import Clock
from eni_ipam.core.model import CloudSnapshot, CreateInterface, Instance, InstanceLimits, Interface
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.records import NodeRecords

READS_NODE_STORE = "reads_node_store"
"""Optional attribute of a provider: true when its ``resync`` builds the view from the node store's
records (the generic provider) rather than from a cloud. The first resync of a leadership term then
waits until the store has been read for that term; other providers' first listing runs while the
nodes are still being learnt."""


def reads_node_store(provider: object) -> bool:
    """Whether ``provider`` (or the provider it wraps, ``inner``) says :data:`READS_NODE_STORE`."""
    while provider is not None:
        if getattr(provider, READS_NODE_STORE, False):
            return True
        provider = getattr(provider, "inner", None)
    return False


class SharedViewReader(Protocol):
    """An optional capability of a provider: the shared part of the view alone, cheaply.

    A new leader at a large cluster spends tens of seconds on its first full listing; with the
    shared view it can serve the nodes that wait for addresses before that listing ends, each on a
    fresh read of its own instance (:meth:`Provider.describe_instance`). A provider that does not
    offer it (or whose view comes from the node store) makes a new leader wait for the listing."""

    async def shared_view(self) -> CloudSnapshot:
        """The subnets (free counts as the cloud reports them now) and security groups that
        :meth:`Provider.resync` would return, in one or two calls; no instances and no limits.

        Raises:
            errors.ProviderError: any failure (never a partial view).
        """
        ...


def shared_view_reader(provider: object) -> SharedViewReader | None:
    """``provider`` (or the provider it wraps, ``inner``) as a :class:`SharedViewReader`; None when
    it offers no shared view or builds its view from the node store."""
    if reads_node_store(provider):
        return None
    while provider is not None:
        if callable(getattr(provider, "shared_view", None)):
            return provider  # type: ignore[return-value]
        provider = getattr(provider, "inner", None)
    return None


class Provider(Protocol):
    name: str
    """Short name used in logs and metrics (``aws``, ``azure``, ``generic``, ``sim``)."""

    async def resync(self) -> CloudSnapshot:
        """Return the full view: subnets, security groups, every instance with the cluster's interfaces
        grouped by instance (attached interfaces only), and limits for the instance types seen.

        Pages through every listing; never returns a partial view — any failure raises.

        May say what changed (``CloudSnapshot.changes``): then every instance whose object is not
        the very one the snapshot named as ``since`` held (new, changed or gone) is in
        ``instance_ids``; the reconciler then looks only at those nodes. A provider that does not
        know leaves it None, and every node is looked at.

        Raises:
            errors.ProviderError: any failure (the caller keeps its previous view).
        """
        ...

    async def describe_instance(self, *, instance_id: str) -> Instance | None:
        """Return the instance as the cloud sees it now, or ``None`` when it does not exist or is
        terminated. Interfaces and addresses are always read fresh; instance metadata that never
        changes (type, zone, subnet) may be cached. ``running`` must be no older than the last full
        resync or the last error saying the instance is not running.

        Raises:
            errors.ProviderError: the cloud could not answer (never for "not found").
        """
        ...

    async def instance_limits(self, *, instance_type: str) -> InstanceLimits:
        """Limits of an instance type.

        Raises:
            errors.LimitsUnknown: the type is unknown to the provider.
        """
        ...

    async def assign_addresses(
        self, *, interface_id: str, count: int, prefixes: bool = False, addresses: Sequence[str] = ()
    ) -> list[str]:
        """Assign exactly ``count`` new secondary addresses (or ``count`` /28 prefixes when ``prefixes``)
        to the interface, all or nothing. Returns only the new ones (addresses, or prefixes in CIDR
        form), in address order.

        ``addresses`` (optional, single addresses only): exactly these ``count`` addresses of the
        interface's subnet, named (dense placement; EC2's ``PrivateIpAddresses``, never with
        ``AllowReassignment``: an address another interface holds is refused, never moved). The
        result is then those addresses. A provider that cannot name addresses refuses with
        ``errors.InvalidRequest`` code ``ExplicitAddressesNotSupported`` and assigns nothing; the
        caller lets the cloud choose instead.

        Raises:
            errors.AddressInUse: a named address is held by another interface (nothing is assigned).
            errors.InvalidRequest: ``addresses`` with ``prefixes``, a count other than their number, an
                address outside the subnet or reserved, or ``ExplicitAddressesNotSupported``.
            errors.InterfaceLimitExceeded: the interface would exceed its limit.
            errors.SubnetExhausted: the subnet has fewer than ``count`` free addresses.
            errors.PrefixesExhausted: no free aligned /28 is left (``prefixes`` only).
            errors.NotFound: no such interface.
            errors.Throttled: retry later; nothing was assigned.
            errors.TransientError: retry later. Nothing was assigned, unless the code is
                ``OutcomeUnknown``: the change may have landed, and only a fresh read tells.
        """
        ...

    async def assign_ipv6_prefix(self, *, interface_id: str) -> str:
        """Delegate one IPv6 /80 prefix to the interface (the node's IPv6 pool); returns it in CIDR
        form (``2600:1f18:…::/80``).

        Raises:
            errors.InvalidRequest: the provider delegates no IPv6 prefixes (``code``
                ``Ipv6PrefixesNotSupported``), or the interface's subnet has no IPv6 block.
            errors.InterfaceLimitExceeded: the interface holds as many IPv6 addresses as its type allows.
            errors.PrefixesExhausted: the subnet's IPv6 block has no free /80.
            errors.NotFound: no such interface.
            errors.Throttled, errors.TransientError: as :meth:`assign_addresses`.
        """
        ...

    async def unassign_addresses(
        self, *, interface_id: str, addresses: Sequence[str] = (), prefixes: Sequence[str] = ()
    ) -> None:
        """Remove the given secondary addresses and prefixes from the interface in one call.

        Raises:
            errors.InvalidRequest: an address is not assigned to the interface (nothing is removed).
            errors.NotFound: no such interface.
        """
        ...

    async def create_interface(
        self,
        *,
        instance_id: str,
        request: CreateInterface,
        tags: Mapping[str, str],
        token: str,
        delete_on_termination: bool = True,
    ) -> Interface:
        """Create the interface the planner asked for: in ``request.subnet_id`` with
        ``request.security_groups``, carrying ``request.count`` secondary addresses (or ``count`` /28
        prefixes when ``request.prefixes``) and ``tags``; attach it to the instance at
        ``request.device_index`` of network card ``request.network_card``, and set
        delete-on-termination unless ``delete_on_termination`` is false.

        With ``request.ipv6_prefixes`` (1), the interface is created with an IPv6 /80 prefix too
        (raising as :meth:`assign_ipv6_prefix` does when it cannot be).

        ``request.device_index`` comes from the caller's view, which may be stale: when another
        interface holds it, the provider tries the card's following indexes (a bounded number of
        them) and the returned interface says which index it got. A provider of one network card
        (Azure, the generic provider) is only ever asked for card 0.

        ``token`` is an idempotency token: a retried create with the same token returns the same
        interface instead of creating a second one. If attaching (or marking) fails, the created
        interface is deleted before the error is raised, so a failure never leaks an interface.

        Returns:
            The attached interface (``instance_id`` and the ``device_index`` it got set).

        Raises:
            errors.AttachmentLimitExceeded: no free adapter slot on the instance.
            errors.DeviceIndexInUse: ``request.device_index`` and every following index tried were taken.
            errors.SubnetExhausted, errors.PrefixesExhausted, errors.InterfaceLimitExceeded
            errors.InstanceNotRunning, errors.NotFound
        """
        ...

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
        """Create an interface for the pool of ready interfaces: in ``subnet_id`` with
        ``security_groups``, carrying ``count`` secondary addresses (or ``count`` /28 prefixes when
        ``prefixes``) and ``tags``, and leave it detached (one call on EC2).

        ``token`` is an idempotency token: a retried create with the same token returns the same
        interface instead of creating a second one.

        Returns:
            The detached interface (``device_index`` :data:`~eni_ipam.core.model.DETACHED_INDEX`,
            no ``instance_id``).

        Raises:
            errors.InvalidRequest: the provider keeps no ready interfaces (``code``
                ``ReadyInterfacesNotSupported``: a cloud that cannot attach an interface to a
                running instance), or the parameters were refused.
            errors.QuotaExceeded: the account's interface quota is reached.
            errors.SubnetExhausted, errors.PrefixesExhausted, errors.InterfaceLimitExceeded
            errors.Throttled, errors.TransientError: nothing was created, unless the code is
                ``OutcomeUnknown`` (the listing of ready interfaces tells).
        """
        ...

    async def attach_interface(
        self, *, interface: Interface, instance_id: str, device_index: int, network_card: int = 0
    ) -> Interface:
        """Attach an existing detached ``interface`` (a ready one) to the instance at
        ``device_index`` of ``network_card``: one call on EC2. Its addresses, tags and
        delete-on-termination are left as they are.

        ``device_index`` comes from the caller's view, which may be stale: when another interface
        holds it, the provider tries the card's following indexes (as :meth:`create_interface`
        does) and the returned interface says which index it got.

        A failure never deletes the interface: it stays detached, as it was, for the pool to keep
        (unless the error says it is gone).

        Returns:
            ``interface`` attached (``instance_id``, ``device_index`` and the attachment set).

        Raises:
            errors.InvalidRequest: the provider keeps no ready interfaces
                (``ReadyInterfacesNotSupported``), or the interface is attached already.
            errors.AttachmentLimitExceeded: no free adapter slot on the instance.
            errors.DeviceIndexInUse: ``device_index`` and every following index tried were taken.
            errors.InstanceNotRunning, errors.NotFound (the instance, or the interface),
            errors.Throttled, errors.TransientError
        """
        ...

    async def delete_interface(self, *, interface_id: str, detach: bool = True) -> None:
        """Delete an interface, detaching it first when ``detach`` and it is attached.

        With ``detach=False`` an attached interface is kept and the call fails: garbage collection
        deletes only what is still detached when it sweeps.

        Raises:
            errors.NotFound: no such interface.
            errors.InvalidRequest: attached and ``detach`` is false, or a primary interface.
        """
        ...

    async def list_detached_interfaces(self, *, tags: Mapping[str, str]) -> list[Interface]:
        """Detached interfaces carrying every one of ``tags`` (garbage-collection candidates, and
        the pool of ready interfaces when the tags include its tag)."""
        ...


PLUGIN_GROUP = "eni_ipam.providers"
"""The entry-point group providers register under (``aws = "providers.aws.service"``)."""


class RefusesReadyInterfaces:
    """The ready-interface operations of a provider whose interfaces cannot be made ahead of a node
    and attached to it later (decision 0051): both refuse, ``InvalidRequest`` with the code
    ``ReadyInterfacesNotSupported``, saying why in :attr:`ready_interfaces_refused`."""

    ready_interfaces_refused: ClassVar[str]
    """Why this provider has no ready interfaces, as the end of a sentence."""

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
        """Always refused.

        Raises:
            errors.InvalidRequest: always (``ReadyInterfacesNotSupported``).
        """
        raise errors.InvalidRequest(
            f"{self.ready_interfaces_refused}: set settings.ready_interfaces_enabled to false",
            code="ReadyInterfacesNotSupported",
            operation="create_ready_interface",
        )

    async def attach_interface(
        self, *, interface: Interface, instance_id: str, device_index: int, network_card: int = 0
    ) -> Interface:
        """Always refused.

        Raises:
            errors.InvalidRequest: always (``ReadyInterfacesNotSupported``).
        """
        raise errors.InvalidRequest(
            f"cannot attach {interface.id} to {instance_id}: {self.ready_interfaces_refused}",
            code="ReadyInterfacesNotSupported",
            operation="attach_interface",
        )


class ProviderPlugin(Protocol):
    """What a provider package offers ``eni-ipam run``: registered as an entry point in the
    :data:`PLUGIN_GROUP` group, found by the name of the ``provider:`` setting, so adding a provider
    touches no core file. A plug-in module must import quickly and without its cloud's SDK (the run
    configuration loads every plug-in to know every section); ``open_provider`` imports the rest.
    """

    @property
    def SETTINGS(self) -> type[ConfigModel]:
        """The model of the provider's configuration section (named after the provider)."""
        ...

    @property
    def REQUIRED(self) -> bool:
        """Whether the section must be written (True when no default could be right)."""
        ...

    @property
    def PROVIDER_ID_SCHEMES(self) -> tuple[str, ...]:
        """The ``spec.providerID`` schemes of this cloud's Kubernetes Nodes (``aws``); a Node with
        another scheme gets no pool. Empty: any."""
        ...

    def check(self, settings: Any) -> None:
        """What can be checked of ``settings`` before the cloud is reached (by ``run --check`` and
        before ``run`` binds its port): a region that resolves, credentials that are configured.

        Raises:
            ConfigError: naming the field of the provider's section that must change.
        """
        ...

    # Optional (looked up with ``getattr``, so that a plug-in written before it still loads):
    # ``instance_types(settings) -> tuple[Collection[str], bool] | None``, the instance types whose
    # limits are known without the cloud and whether they are all that can be (False: the cloud is
    # asked about others); None when types do not matter. An instance type the configuration names
    # (a profile's selector) outside a complete collection is refused, with the closest known one.

    def open_provider(
        self,
        settings: Any,
        *,
        clock: Clock,
        metrics: ApiObserver,
        rate_limit_share: float,
        records: NodeRecords | None,
    ) -> AbstractAsyncContextManager[Provider]:
        """The provider, open for the block and closed (clients, threads) after it. ``records`` is
        the node store's view of the published pools (the generic provider keeps its state there)."""
        ...
