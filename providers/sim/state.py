"""The simulated cloud's state: records, address mechanics, inspection and invariants.

:class:`CloudState` holds VPCs, subnets, security groups, instances and interfaces, and the address
mechanics shared by setup (:mod:`providers.sim.setup`) and the EC2 operations
(:mod:`providers.sim.cloud`). Inspection is free and uncounted, so tests and the simulator can observe
the cloud without disturbing what they measure.

Invariants (checked by :meth:`CloudState.check_invariants`): no address belongs to two interfaces;
every address is a usable address of its interface's subnet; the subnets' accounting matches what
the interfaces hold; no attached interface exceeds its instance type's limits or holds prefixes on a
non-nitro type; no instance has more interfaces on a network card than the card holds; every
attachment is recorded on its instance, at its card and device index.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from eni_ipam.core import devices, model
from eni_ipam.core.clock import Clock
from eni_ipam.core.model import DETACHED_INDEX
from providers.sim.records import InstanceRecord, InterfaceRecord, SubnetRecord, Vpc


def _by_address(values: Sequence[str]) -> list[str]:
    return sorted(values, key=lambda v: int(ipaddress.IPv4Address(v.split("/", 1)[0])))


class CloudState:
    """In-memory EC2 state without setup or the API (see :class:`providers.sim.cloud.SimCloud`)."""

    def __init__(self, clock: Clock, limits: Mapping[str, model.InstanceLimits]) -> None:
        self._clock = clock
        self._limits: Mapping[str, model.InstanceLimits] = MappingProxyType(dict(limits))
        self._vpcs: dict[str, Vpc] = {}
        self._subnets: dict[str, SubnetRecord] = {}
        self._groups: dict[str, model.SecurityGroup] = {}
        self._instances: dict[str, InstanceRecord] = {}
        self._interfaces: dict[str, InterfaceRecord] = {}
        self._serial = itertools.count(1)
        # The largest per-interface slot count of any type bounds an interface before it is attached.
        self._max_slots = max((lim.slots_per_interface for lim in self._limits.values()), default=49)
        # An instance of a type the table lacks exists (EC2 launches types newer than any table), but
        # nothing can be known of its limits; the cloud then enforces only the widest ones of any type.
        widest = max((lim.adapters for lim in self._limits.values()), default=15)
        cards = max((len(lim.cards) for lim in self._limits.values()), default=1)
        self._unlisted_limits = model.InstanceLimits(
            adapters=widest,
            ipv4_per_interface=self._max_slots + 1,
            cards=(widest,) * cards if cards > 1 else (),
        )

    @property
    def limits(self) -> Mapping[str, model.InstanceLimits]:
        """The cloud's instance-type limits (the truth attach and assign enforce)."""
        return self._limits

    # -- inspection (free, uncounted) ------------------------------------------------------------

    def instance_view(self, id: str) -> model.Instance:
        """The instance as the cloud holds it now, with its attached interfaces.

        Raises:
            KeyError: unknown instance.
        """
        record = self._instances[id]
        return model.Instance(
            id=record.id,
            type=record.type,
            vpc_id=record.vpc_id,
            zone=record.zone,
            subnet_id=record.subnet_id,
            interfaces=tuple(self._interfaces[i].view() for i in record.interface_ids()),
            running=record.state == "running",
        )

    def instance_state(self, id: str) -> str:
        """``running``, ``stopped`` or ``terminated``.

        Raises:
            KeyError: unknown instance.
        """
        return self._instances[id].state

    def interface_count(self) -> int:
        """How many interfaces the cloud holds, attached or not (what a Region's quota counts)."""
        return len(self._interfaces)

    def interfaces(self) -> list[model.Interface]:
        """Every interface, attached or not, by id."""
        return [self._interfaces[i].view() for i in sorted(self._interfaces)]

    def interface_view(self, id: str) -> model.Interface | None:
        """The interface as the cloud holds it now, or ``None`` when there is no such interface."""
        iface = self._interfaces.get(id)
        return iface.view() if iface is not None else None

    def subnet_view(self, id: str) -> model.Subnet:
        """The subnet as DescribeSubnets would report it.

        Raises:
            KeyError: unknown subnet.
        """
        return self._subnets[id].view()

    def subnet_free(self, id: str) -> int:
        """Free addresses subnet ``id`` reports now (the cap applied).

        Raises:
            KeyError: unknown subnet.
        """
        return self._subnets[id].space.free

    def owner_of(self, address: str) -> str | None:
        """The interface holding ``address`` (primary, secondary or inside a prefix), if any."""
        ip = ipaddress.IPv4Address(address)
        for iface in self._interfaces.values():
            if str(ip) == iface.primary_ip or str(ip) in iface.addresses:
                return iface.id
            if any(ip in ipaddress.IPv4Network(p) for p in iface.prefixes):
                return iface.id
        return None

    def check_invariants(self) -> None:
        """Raise ``AssertionError`` naming the first broken invariant (see the module docstring)."""
        owners: dict[str, str] = {}
        per_subnet: dict[str, int] = dict.fromkeys(self._subnets, 0)
        for iface in self._interfaces.values():
            space = self._subnets[iface.subnet_id].space
            singles = [iface.primary_ip, *iface.addresses] if iface.primary_ip else list(iface.addresses)
            held = singles + [a for p in iface.prefixes for a in model.expand_prefix(p)]
            per_subnet[iface.subnet_id] += len(held)
            for prefix in iface.prefixes:
                assert ipaddress.IPv4Network(prefix).prefixlen == 28, f"{iface.id}: {prefix} is not a /28"
            for address in held:
                assert address not in owners, f"{address} is held by {owners[address]} and {iface.id}"
                owners[address] = iface.id
                assert space.usable(address), (
                    f"{iface.id}: {address} is not a usable address of subnet {iface.subnet_id}"
                )
            if iface.instance_id:
                inst = self._instances.get(iface.instance_id)
                assert inst is not None and inst.at(iface.network_card, iface.device_index) == iface.id, (
                    f"{iface.id}: attachment to {iface.instance_id} at {iface.device_index} "
                    f"(card {iface.network_card}) is not recorded"
                )
                assert iface.slots_used <= inst.limits.slots_per_interface, f"{iface.id}: over its limit"
                assert not iface.prefixes or inst.limits.supports_prefixes, (
                    f"{iface.id}: prefixes on non-nitro"
                )
        for inst in self._instances.values():
            assert len(inst.attached) <= inst.limits.adapters, f"{inst.id}: more interfaces than adapters"
            for card in {c for c, _ in inst.other_cards}:
                on_card = sum(1 for c, _ in inst.other_cards if c == card)
                assert on_card <= inst.limits.adapters_on(card) or not inst.limits.cards, (
                    f"{inst.id}: more interfaces on network card {card} than it holds"
                )
        for sub_id, held_count in per_subnet.items():
            assigned = self._subnets[sub_id].space.assigned()
            assert assigned == held_count, (
                f"subnet {sub_id}: {assigned} in use but interfaces hold {held_count}"
            )

    # -- mechanics shared with the operations ----------------------------------------------------

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._serial):017x}"

    def _new_interface(
        self,
        subnet: SubnetRecord,
        groups: tuple[str, ...],
        tags: Mapping[str, str],
        description: str,
        created_at: float,
        *,
        from_blocked: bool = False,
        kind: devices.Kind = devices.Kind.PLAIN,
    ) -> InterfaceRecord:
        # An EFA-only interface is the EFA device alone: no IP address, not even a primary.
        no_ip = kind is devices.Kind.EFA_ONLY
        (primary,) = [""] if no_ip else subnet.space.take_addresses(1, from_blocked=from_blocked)
        iface = InterfaceRecord(
            kind=kind,
            id=self._next_id("eni"),
            subnet_id=subnet.id,
            vpc_id=subnet.vpc_id,
            zone=subnet.zone,
            primary_ip=primary,
            security_groups=groups,
            tags=dict(tags),
            description=description,
            created_at=created_at,
        )
        self._interfaces[iface.id] = iface
        return iface

    def _grant_addresses(
        self, iface: InterfaceRecord, count: int, *, from_blocked: bool = False, spread: bool = False
    ) -> list[str]:
        new = self._subnets[iface.subnet_id].space.take_addresses(
            count, from_blocked=from_blocked, spread=spread
        )
        iface.addresses = _by_address(iface.addresses + new)
        return new

    def _grant_named(self, iface: InterfaceRecord, addresses: Sequence[str]) -> list[str]:
        new = self._subnets[iface.subnet_id].space.take_named(addresses)
        iface.addresses = _by_address(iface.addresses + new)
        return new

    def _grant_prefixes(self, iface: InterfaceRecord, count: int, *, from_blocked: bool = False) -> list[str]:
        new = self._subnets[iface.subnet_id].space.take_blocks(count, from_blocked=from_blocked)
        iface.prefixes = _by_address(iface.prefixes + new)
        return new

    def _release(self, iface: InterfaceRecord, addresses: Sequence[str], prefixes: Sequence[str]) -> None:
        gone_a, gone_p = set(addresses), set(prefixes)
        self._subnets[iface.subnet_id].space.give_back(sorted(gone_a), sorted(gone_p))
        iface.addresses = [a for a in iface.addresses if a not in gone_a]
        iface.prefixes = [p for p in iface.prefixes if p not in gone_p]

    def _attach(
        self,
        iface: InterfaceRecord,
        instance: InstanceRecord,
        index: int,
        *,
        delete_on_termination: bool,
        network_card: int = 0,
    ) -> str:
        iface.instance_id = instance.id
        iface.device_index = index
        iface.network_card = network_card
        iface.attachment_id = self._next_id("eni-attach")
        iface.delete_on_termination = delete_on_termination
        if network_card:
            instance.other_cards[network_card, index] = iface.id
        else:
            instance.attached[index] = iface.id
            instance.attached = dict(sorted(instance.attached.items()))
        return iface.attachment_id

    def _detach(self, iface: InterfaceRecord) -> None:
        instance = self._instances[iface.instance_id]
        if iface.network_card:
            del instance.other_cards[iface.network_card, iface.device_index]
        else:
            del instance.attached[iface.device_index]
        iface.instance_id, iface.attachment_id = "", ""
        iface.device_index, iface.network_card, iface.delete_on_termination = DETACHED_INDEX, 0, False

    def _delete(self, iface: InterfaceRecord) -> None:
        self._release(iface, iface.addresses, iface.prefixes)
        self._subnets[iface.subnet_id].give_back_ipv6(iface.ipv6_prefixes)
        if iface.primary_ip:
            self._subnets[iface.subnet_id].space.give_back([iface.primary_ip])
        del self._interfaces[iface.id]
