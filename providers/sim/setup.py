"""Setup and out-of-band changes of the simulated cloud: what a scenario declares and changes.

:class:`CloudSetup` adds VPCs, subnets, security groups and instances, caps subnets, and terminates,
stops or starts instances. None of it is an API call: it is free and uncounted, like the world
changing under the reconciler.

Setup validates as a scenario loader needs: an unknown VPC, subnet or security group, a CIDR that does
not fit, an interface entry with an unknown key, or more than an instance type can hold raise
``ValueError`` naming the culprit, and leave the cloud unchanged. An instance type missing from the
limits table is accepted on purpose: it is how a scenario shows a node whose limits are unknown.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from eni_ipam.core import devices, model
from eni_ipam.core.devices import MAX_NETWORK_CARD
from providers.sim.addressing import BLOCK, SubnetSpace
from providers.sim.records import InstanceRecord, InterfaceRecord, SubnetRecord, Vpc
from providers.sim.state import CloudState

_INTERFACE_KEYS = frozenset(
    {
        "index",
        "network_card",
        "subnet",
        "secondary_ips",
        "prefixes",
        "tags",
        "security_groups",
        "delete_on_termination",
        "type",
    }
)


DECLARED_TYPES = {
    kind.label: kind
    for kind in (devices.Kind.PLAIN, devices.Kind.EFA, devices.Kind.EFA_ONLY, devices.Kind.TRUNK)
}
"""The interface types a declaration may attach to an instance: EC2 attaches these four (a branch
interface rides a trunk, never an instance)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Declared:
    """One interface declared at setup, validated."""

    index: int
    network_card: int
    subnet: SubnetRecord
    secondaries: int
    prefixes: int
    tags: dict[str, str]
    groups: tuple[str, ...]
    delete_on_termination: bool
    kind: devices.Kind


class CloudSetup(CloudState):
    """The setup and fault API of the simulated cloud."""

    def add_vpc(self, id: str, cidr: str) -> None:
        """Add a VPC.

        Raises:
            ValueError: duplicate id, or ``cidr`` is not an IPv4 network.
        """
        self._fresh(id, self._vpcs, "VPC")
        self._vpcs[id] = Vpc(id=id, cidr=str(ipaddress.IPv4Network(cidr)))

    def add_subnet(
        self,
        id: str,
        *,
        vpc: str,
        zone: str,
        cidr: str,
        tags: Mapping[str, str] | None = None,
        available: int | None = None,
        ipv6_cidr: str = "",
    ) -> None:
        """Add a subnet of ``vpc``.

        Args:
            available: cap on the free addresses the subnet reports and hands out, counted after
                the interfaces later declared in it by :meth:`add_instance`; never above what the
                CIDR allows.
            ipv6_cidr: the subnet's IPv6 block, a /64 as EC2's (empty: none, an IPv4-only subnet).

        Raises:
            ValueError: duplicate id, unknown VPC, a CIDR outside the VPC or overlapping a sibling,
                an IPv6 block that is not a /64 or overlaps another subnet's.
        """
        self._fresh(id, self._subnets, "subnet")
        if vpc not in self._vpcs:
            raise ValueError(f"subnet {id}: unknown VPC {vpc!r}")
        space = SubnetSpace(cidr)
        if not space.network.subnet_of(ipaddress.IPv4Network(self._vpcs[vpc].cidr)):
            raise ValueError(f"subnet {id}: CIDR {cidr} is outside VPC {vpc} ({self._vpcs[vpc].cidr})")
        for other in self._subnets.values():
            if other.vpc_id == vpc and other.space.network.overlaps(space.network):
                raise ValueError(f"subnet {id}: CIDR {cidr} overlaps subnet {other.id}")
        if available is not None:
            space.cap(available)
        ipv6 = None
        if ipv6_cidr:
            ipv6 = ipaddress.IPv6Network(ipv6_cidr)
            if ipv6.prefixlen != 64:
                raise ValueError(f"subnet {id}: IPv6 block {ipv6_cidr} is not a /64, as EC2's are")
            for other in self._subnets.values():
                if other.ipv6 is not None and other.ipv6.overlaps(ipv6):
                    raise ValueError(f"subnet {id}: IPv6 block {ipv6_cidr} overlaps subnet {other.id}")
        self._subnets[id] = SubnetRecord(
            id=id, vpc_id=vpc, zone=zone, tags=dict(tags or {}), space=space, ipv6=ipv6
        )

    def add_security_group(self, id: str, *, vpc: str, tags: Mapping[str, str] | None = None) -> None:
        """Add a security group of ``vpc``.

        Raises:
            ValueError: duplicate id or unknown VPC.
        """
        self._fresh(id, self._groups, "security group")
        if vpc not in self._vpcs:
            raise ValueError(f"security group {id}: unknown VPC {vpc!r}")
        self._groups[id] = model.SecurityGroup(id=id, vpc_id=vpc, tags=model.frozen_tags(tags))

    def add_instance(
        self,
        id: str,
        *,
        type: str,
        subnet: str,
        security_groups: Sequence[str],
        interfaces: Sequence[Mapping[str, Any]] | None = None,
        running: bool = True,
    ) -> None:
        """Add an instance with its interfaces attached.

        Args:
            type: instance type. A type missing from the cloud's limits table is accepted (a provider
                then reports its limits unknown); the cloud enforces the widest limits of any type
                on it, and no prefixes.
            subnet: subnet of the primary interface (the instance's VPC and zone follow from it).
            security_groups: the instance's groups, given to every declared interface by default.
            interfaces: ``{index, network_card, subnet, secondary_ips, prefixes, tags,
                security_groups, delete_on_termination, type}`` per interface (all optional but ``index``;
                ``type`` is EC2's InterfaceType: ``interface``, ``efa``, ``efa-only`` or ``trunk``;
                index 0 of network card 0 is the primary and must be present). Default: one primary
                interface with no secondaries. Each network card holds the type's interfaces of
                that card at most (``adapters_on``); a card the type does not have is refused.
            running: ``False`` adds the instance stopped.

        Raises:
            ValueError: an unknown reference, a bad interface entry, or limits the type cannot hold.
        """
        self._fresh(id, self._instances, "instance")
        limits = self._limits.get(type, self._unlisted_limits)
        home = self._subnet_for_setup(f"instance {id}", subnet)
        groups = tuple(security_groups)
        self._check_groups(f"instance {id}", groups, home.vpc_id)
        specs = list(interfaces) if interfaces is not None else [{"index": 0}]
        declared = [self._declared(id, n, spec, limits, home, groups) for n, spec in enumerate(specs)]
        slots = [(d.network_card, d.index) for d in declared]
        if len(set(slots)) != len(slots):
            raise ValueError(f"instance {id}: duplicate interface index")
        if (0, 0) not in slots:
            raise ValueError(f"instance {id}: interfaces must include the primary (index 0)")
        for card in sorted({c for c, _ in slots}):
            on_card = sum(1 for c, _ in slots if c == card)
            holds = limits.adapters_on(card)
            if not holds:
                raise ValueError(f"instance {id}: instance type {type} has no network card {card}")
            if on_card > holds:
                raise ValueError(
                    f"instance {id}: {on_card} interfaces exceed the type's {holds}"
                    + (f" on network card {card}" if card else "")
                )
        record = InstanceRecord(
            id=id,
            type=type,
            limits=limits,
            vpc_id=home.vpc_id,
            subnet_id=home.id,
            zone=home.zone,
            security_groups=groups,
            state="running" if running else "stopped",
        )
        # All or nothing: a declaration that does not fit leaves the cloud as it was.
        blocked = {sid: s.space.blocked for sid, s in self._subnets.items()}
        created: list[InterfaceRecord] = []
        self._instances[id] = record
        try:
            now = self._setup_time()
            for d in declared:
                if d.kind is not devices.Kind.EFA_ONLY:
                    self._room(id, d.subnet, addresses=1)
                iface = self._new_interface(
                    d.subnet, d.groups, d.tags, f"eni-ipam sim ({id})", now, from_blocked=True, kind=d.kind
                )
                created.append(iface)
                self._room(id, d.subnet, blocks=d.prefixes)
                self._grant_prefixes(iface, d.prefixes, from_blocked=True)
                self._room(id, d.subnet, addresses=d.secondaries)
                self._grant_addresses(iface, d.secondaries, from_blocked=True, spread=True)
                self._attach(
                    iface,
                    record,
                    d.index,
                    delete_on_termination=d.delete_on_termination,
                    network_card=d.network_card,
                )
        except ValueError:
            for iface in created:
                self._delete(iface)
            for sid, count in blocked.items():
                self._subnets[sid].space.blocked = count
            del self._instances[id]
            raise

    def _declared(
        self,
        id: str,
        n: int,
        spec: Mapping[str, Any],
        limits: model.InstanceLimits,
        home: SubnetRecord,
        groups: tuple[str, ...],
    ) -> _Declared:
        where = f"instance {id}: interfaces[{n}]"
        unknown = set(spec) - _INTERFACE_KEYS
        if unknown:
            raise ValueError(f"{where}: unknown key {sorted(unknown)[0]!r}")
        index, card, secondaries, prefixes = (
            spec.get("index", n),
            spec.get("network_card", 0),
            spec.get("secondary_ips", 0),
            spec.get("prefixes", 0),
        )
        numbers = (
            ("index", index),
            ("network_card", card),
            ("secondary_ips", secondaries),
            ("prefixes", prefixes),
        )
        for key, value in numbers:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{where}.{key}: expected a non-negative integer, got {value!r}")
        if card > MAX_NETWORK_CARD:
            raise ValueError(f"{where}.network_card: {card} is above the highest card, {MAX_NETWORK_CARD}")
        sub = self._subnet_for_setup(f"{where}.subnet", spec.get("subnet") or home.id)
        if (card, index) == (0, 0) and sub.id != home.id:
            raise ValueError(
                f"{where}.subnet: the primary interface must be in the instance's subnet {home.id}"
            )
        if (sub.vpc_id, sub.zone) != (home.vpc_id, home.zone):
            raise ValueError(f"{where}.subnet: {sub.id} is not in the instance's VPC and zone")
        if secondaries + prefixes > limits.slots_per_interface:
            raise ValueError(
                f"{where}: more than {limits.slots_per_interface} secondary addresses and prefixes"
            )
        if prefixes and not limits.supports_prefixes:
            raise ValueError(f"{where}.prefixes: the instance type does not support prefixes (not nitro)")
        kind = DECLARED_TYPES.get(spec.get("type", "interface"))
        if kind is None:
            raise ValueError(
                f"{where}.type: expected one of {', '.join(DECLARED_TYPES)}, got {spec.get('type')!r}"
            )
        if kind is devices.Kind.EFA_ONLY and (secondaries or prefixes):
            raise ValueError(
                f"{where}: an efa-only interface has no IP addresses, so no secondary_ips or prefixes"
            )
        if kind is devices.Kind.EFA_ONLY and (card, index) == (0, 0):
            raise ValueError(f"{where}.type: the primary interface cannot be efa-only (it has no IP address)")
        sgs = tuple(spec.get("security_groups") or groups)
        self._check_groups(f"{where}.security_groups", sgs, home.vpc_id)
        return _Declared(
            index=index,
            network_card=card,
            subnet=sub,
            secondaries=secondaries,
            prefixes=prefixes,
            tags=dict(spec.get("tags") or {}),
            groups=sgs,
            delete_on_termination=bool(spec.get("delete_on_termination", True)),
            kind=kind,
        )

    @staticmethod
    def _room(id: str, subnet: SubnetRecord, *, addresses: int = 0, blocks: int = 0) -> None:
        space = subnet.space
        if space.free_blocks() < blocks or space.cidr_free < addresses + BLOCK * blocks:
            raise ValueError(f"instance {id}: subnet {subnet.id} has no room for the declared interfaces")

    def set_subnet_available(self, id: str, available: int) -> None:
        """Make subnet ``id`` report and hand out ``available`` free addresses from now on.

        The cap may be raised or lowered at any time, but never above what the CIDR allows (a larger
        value means "as many as the CIDR has").

        Raises:
            ValueError: unknown subnet.
        """
        self._subnet_for_setup("set_subnet_available", id).space.cap(available)

    def set_subnet_address_choice(self, id: str, choice: str) -> None:
        """How subnet ``id`` chooses single addresses it is not told: ``lowest`` or ``spread``
        (:attr:`~providers.sim.addressing.SubnetSpace.spread`).

        Raises:
            ValueError: unknown subnet or choice.
        """
        if choice not in ("lowest", "spread"):
            raise ValueError(f"address choice {choice!r}: expected lowest or spread")
        self._subnet_for_setup("set_subnet_address_choice", id).space.spread = choice == "spread"

    def hide_addresses(self, id: str, addresses: Iterable[str]) -> None:
        """Mark ``addresses`` of subnet ``id`` in use by someone no listing shows (another account's
        interfaces in a shared subnet).

        Raises:
            ValueError: unknown subnet, or an address outside it.
        """
        self._subnet_for_setup("hide_addresses", id).space.occupy(addresses)

    def set_subnet_tags(self, id: str, tags: Mapping[str, str]) -> None:
        """Replace the tags of subnet ``id``.

        Raises:
            ValueError: unknown subnet.
        """
        self._subnet_for_setup("set_subnet_tags", id).tags = dict(tags)

    def terminate_instance(self, id: str) -> None:
        """Terminate an instance, as EC2 does.

        Interfaces marked delete-on-termination are deleted (their addresses return to the subnet);
        the others are detached and left ``available`` for garbage collection.

        Raises:
            ValueError: unknown instance.
        """
        record = self._instance_for_setup(id)
        for iface_id in record.interface_ids():
            iface = self._interfaces[iface_id]
            dot = iface.delete_on_termination
            self._detach(iface)
            if dot:
                self._delete(iface)
        record.state = "terminated"

    def stop_instance(self, id: str) -> None:
        """Stop an instance; its interfaces stay attached.

        Raises:
            ValueError: unknown or terminated instance.
        """
        record = self._instance_for_setup(id)
        if record.state == "terminated":
            raise ValueError(f"instance {id} is terminated")
        record.state = "stopped"

    def start_instance(self, id: str) -> None:
        """Start a stopped instance.

        Raises:
            ValueError: unknown or terminated instance.
        """
        record = self._instance_for_setup(id)
        if record.state == "terminated":
            raise ValueError(f"instance {id} is terminated")
        record.state = "running"

    # -- setup helpers ---------------------------------------------------------------------------

    def _setup_time(self) -> float:
        # Setup may run before any event loop exists; what it declares predates the timeline.
        try:
            return self._clock.monotonic()
        except RuntimeError:
            return 0.0

    @staticmethod
    def _fresh(id: str, table: Mapping[str, object], kind: str) -> None:
        if not id:
            raise ValueError(f"{kind} id must not be empty")
        if id in table:
            raise ValueError(f"duplicate {kind} id {id!r}")

    def _subnet_for_setup(self, where: str, id: str) -> SubnetRecord:
        record = self._subnets.get(id)
        if record is None:
            raise ValueError(f"{where}: unknown subnet {id!r}")
        return record

    def _instance_for_setup(self, id: str) -> InstanceRecord:
        record = self._instances.get(id)
        if record is None:
            raise ValueError(f"unknown instance {id!r}")
        return record

    def _check_groups(self, where: str, groups: Sequence[str], vpc: str) -> None:
        for group in groups:
            found = self._groups.get(group)
            if found is None:
                raise ValueError(f"{where}: unknown security group {group!r}")
            if found.vpc_id != vpc:
                raise ValueError(f"{where}: security group {group} is in VPC {found.vpc_id}, not {vpc}")
