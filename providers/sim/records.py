"""Values the simulated cloud speaks, and the mutable records behind them.

Public values (returned by :class:`~providers.sim.cloud.SimCloud` operations) are immutable:
:class:`Vpc`, :class:`Page`, :class:`~providers.ec2.provider.InstanceInfo`, plus :mod:`eni_ipam.core.model`'s
``Subnet``, ``SecurityGroup`` and ``Interface``. :class:`SimError` is the cloud's only exception, shaped like
botocore's ``ClientError`` (an EC2 code and message), so a provider over the sim translates errors
exactly as a provider over EC2 does.

The ``*Record`` classes are the cloud's own mutable state; they never leave the ``providers.sim``
package (callers get immutable views), so no caller can change the cloud behind its back.

An interface's view is what the AWS provider reads of EC2's answer for it (providers/aws/api.py):
in particular, one attached on a network card other than 0 reads as detached from its instance,
keeping its card. Its MAC address is derived from its id (:func:`mac_address`): deterministic,
unique in the cloud, locally administered like EC2's.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from typing import Generic, Literal, TypeVar

from eni_ipam.core import devices, model
from eni_ipam.core.model import DETACHED_INDEX
from providers.ec2.provider import InstanceInfo
from providers.sim.addressing import SubnetSpace, free_ipv6_prefixes

T = TypeVar("T")

InstanceState = Literal["running", "stopped", "terminated"]


def mac_address(interface_id: str) -> str:
    """The MAC address of the interface ``interface_id`` (``eni-`` and the cloud's serial in 17 hex
    digits): ``02:`` and the serial's low 40 bits, so unique for the first trillion ids, and locally
    administered and unicast (EC2's are too: ``02:``, ``06:``, ``0a:``…)."""
    serial = int(interface_id.rsplit("-", 1)[-1], 16) & (1 << 40) - 1
    return devices.mac_text(0x02 << 40 | serial)


class SimError(Exception):
    """An EC2 error answer: ``code`` (``InsufficientCidrBlocks``) and ``message``, as EC2 words them;
    ``retry_after``, the seconds the answer asks to wait, when it says (an injected fault may)."""

    def __init__(self, code: str, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retry_after = retry_after


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Vpc:
    id: str
    cidr: str


@dataclasses.dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a Describe answer; ``next_token`` is ``None`` on the last page."""

    items: tuple[T, ...]
    next_token: str | None = None


@dataclasses.dataclass(slots=True, kw_only=True)
class SubnetRecord:
    id: str
    vpc_id: str
    zone: str
    tags: Mapping[str, str]
    space: SubnetSpace
    ipv6: ipaddress.IPv6Network | None = None
    """The subnet's IPv6 block (a /64), if it has one."""
    ipv6_taken: set[str] = dataclasses.field(default_factory=set)
    """The /80s of ``ipv6`` delegated to an interface."""

    def view(self) -> model.Subnet:
        return model.Subnet(
            id=self.id,
            vpc_id=self.vpc_id,
            zone=self.zone,
            cidr=str(self.space.network),
            available=self.space.free,
            tags=model.frozen_tags(self.tags),
            ipv6_cidr=str(self.ipv6) if self.ipv6 is not None else "",
        )

    def take_ipv6_prefix(self) -> str | None:
        """The lowest free /80 of the IPv6 block, now taken; None when there is none (or no block)."""
        if self.ipv6 is None:
            return None
        fresh = free_ipv6_prefixes(self.ipv6, self.ipv6_taken, 1)
        self.ipv6_taken.update(fresh)
        return fresh[0] if fresh else None

    def give_back_ipv6(self, prefixes: list[str]) -> None:
        self.ipv6_taken.difference_update(prefixes)


@dataclasses.dataclass(slots=True, kw_only=True)
class InstanceRecord:
    id: str
    type: str
    limits: model.InstanceLimits
    vpc_id: str
    subnet_id: str
    zone: str
    security_groups: tuple[str, ...]
    state: InstanceState = "running"
    attached: dict[int, str] = dataclasses.field(default_factory=dict)
    """Interface id by device index, on network card 0: the interfaces the type's ``adapters`` count."""
    other_cards: dict[tuple[int, int], str] = dataclasses.field(default_factory=dict)
    """Interface id by (network card, device index) for the other cards (each holds the type's
    ``adapters_on(card)``)."""

    def at(self, network_card: int, device_index: int) -> str | None:
        """The interface attached at ``device_index`` of ``network_card``, if any."""
        if network_card:
            return self.other_cards.get((network_card, device_index))
        return self.attached.get(device_index)

    def on_card(self, network_card: int) -> int:
        """How many interfaces are attached on ``network_card``."""
        if network_card:
            return sum(1 for card, _ in self.other_cards if card == network_card)
        return len(self.attached)

    def interface_ids(self) -> list[str]:
        """Every attached interface, card 0 first, each card in device-index order."""
        return [*self.attached.values(), *(self.other_cards[k] for k in sorted(self.other_cards))]

    def info(self) -> InstanceInfo:
        return InstanceInfo(
            id=self.id,
            type=self.type,
            state=self.state,
            vpc_id=self.vpc_id,
            subnet_id=self.subnet_id,
            zone=self.zone,
            security_groups=self.security_groups,
        )


@dataclasses.dataclass(slots=True, kw_only=True)
class InterfaceRecord:
    id: str
    subnet_id: str
    vpc_id: str
    zone: str
    primary_ip: str
    security_groups: tuple[str, ...]
    tags: dict[str, str]
    description: str
    created_at: float
    addresses: list[str] = dataclasses.field(default_factory=list)
    prefixes: list[str] = dataclasses.field(default_factory=list)
    ipv6_prefixes: list[str] = dataclasses.field(default_factory=list)
    instance_id: str = ""
    device_index: int = DETACHED_INDEX
    network_card: int = 0
    attachment_id: str = ""
    delete_on_termination: bool = False
    kind: devices.Kind = devices.Kind.PLAIN
    """EC2's InterfaceType: an ``efa-only`` interface has no IP address at all (no primary)."""

    @property
    def slots_used(self) -> int:
        return len(self.addresses) + len(self.prefixes)

    @property
    def status(self) -> str:
        """EC2's interface status: ``in-use`` when attached, ``available`` otherwise."""
        return "in-use" if self.instance_id else "available"

    @property
    def mac_address(self) -> str:
        return mac_address(self.id)

    def view(self) -> model.Interface:
        # Read as the AWS provider reads EC2's answer: attached on whatever card.
        attached = bool(self.instance_id)
        return model.Interface(
            id=self.id,
            device_index=self.device_index if attached else DETACHED_INDEX,
            subnet_id=self.subnet_id,
            primary_ip=self.primary_ip,
            addresses=tuple(self.addresses),
            prefixes=tuple(self.prefixes),
            ipv6_prefixes=tuple(sorted(self.ipv6_prefixes, key=model.ipv6_prefix_key)),
            security_groups=self.security_groups,
            tags=model.frozen_tags(self.tags),
            instance_id=self.instance_id if attached else "",
            attachment_id=self.attachment_id if attached else "",
            delete_on_termination=self.delete_on_termination and attached,
            created_at=self.created_at,
            link=devices.pack(self.mac_address, self.network_card, self.kind),
        )
