"""The in-memory cloud as people declare it: the ``cloud:`` section of scenario files, and the
``sim.cloud`` section of a run configuration with ``provider: sim`` (docs/scenarios.md).

:class:`CloudDeclaration` validates a declaration whole — every reference resolves, ids are
unique, CIDRs nest and fit EC2's sizes (/16 to /28) — so that :func:`build_cloud` only meets what
the cloud itself refuses (an unknown instance type, a subnet without room), which it reports as a
:class:`~eni_ipam.errors.ConfigError` naming the instance.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from eni_ipam.config.schema import ConfigModel, FieldError, Name, Names, NonNegativeInt, short
from eni_ipam.core.clock import Clock
from eni_ipam.core.devices import MAX_NETWORK_CARD
from eni_ipam.core.fields import LooseTagMap
from eni_ipam.core.model import EMPTY_TAGS
from eni_ipam.errors import ConfigError
from providers.sim.cloud import SimCloud

MIN_PREFIX = 16
MAX_PREFIX = 28
"""EC2 accepts VPC and subnet blocks from /16 to /28."""


def _ipv4_network(raw: Any) -> ipaddress.IPv4Network:
    if not isinstance(raw, str) or not raw:
        raise ValueError(f"expected a non-empty string, got {short(raw)}")
    try:
        network = ipaddress.IPv4Network(raw)
    except ValueError as exc:
        raise ValueError(f"not an IPv4 CIDR: {exc}") from None
    if network.prefixlen > MAX_PREFIX:
        raise ValueError(f"{network}: EC2 blocks are /{MIN_PREFIX} to /{MAX_PREFIX}, so /28 or larger")
    if network.prefixlen < MIN_PREFIX:
        raise ValueError(
            f"{network}: EC2 blocks are /{MIN_PREFIX} to /{MAX_PREFIX}; a /{network.prefixlen} is too large"
        )
    return network


Cidr = Annotated[ipaddress.IPv4Network, BeforeValidator(_ipv4_network)]


def _ipv6_block(raw: Any) -> ipaddress.IPv6Network:
    if not isinstance(raw, str) or not raw:
        raise ValueError(f"expected a non-empty string, got {short(raw)}")
    try:
        network = ipaddress.IPv6Network(raw)
    except ValueError as exc:
        raise ValueError(f"not an IPv6 CIDR: {exc}") from None
    if network.prefixlen != 64:
        raise ValueError(f"{network}: a subnet's IPv6 block is a /64 on EC2")
    return network


Ipv6Cidr = Annotated[ipaddress.IPv6Network, BeforeValidator(_ipv6_block)]


class VpcDeclaration(ConfigModel):
    id: Name
    cidr: Cidr


class SubnetDeclaration(ConfigModel):
    id: Name
    vpc: Name
    zone: Name
    cidr: Cidr
    tags: LooseTagMap = EMPTY_TAGS
    available: NonNegativeInt | None = None
    """Caps the free addresses the subnet reports and hands out (after the declared interfaces)."""
    ipv6_cidr: Ipv6Cidr | None = None
    """The subnet's IPv6 block, a /64 (EC2 associates one per subnet). Default: none, an IPv4-only
    subnet, where no interface can be delegated an IPv6 prefix."""
    address_choice: Literal["lowest", "spread"] = "lowest"
    """How the cloud chooses single addresses it is not told: the lowest free one (default), or
    ``spread``: from the emptiest /28 block, breaking whole blocks as EC2's choice may (what
    fragments a subnet for prefix delegation)."""
    hidden: Annotated[tuple[str, ...], Field(strict=False)] = ()
    """Addresses held by someone no listing shows (another account's interfaces in a shared
    subnet): in use for the cloud, invisible to the reconciler's count of free /28 blocks."""


class SecurityGroupDeclaration(ConfigModel):
    id: Name
    vpc: Name
    tags: LooseTagMap = EMPTY_TAGS


class InterfaceDeclaration(ConfigModel):
    index: NonNegativeInt
    network_card: Annotated[int, Field(ge=0, le=MAX_NETWORK_CARD)] = 0
    """Default: the default card, 0, where the reconciler's interfaces go. An interface on another
    card (an EFA card of a GPU instance) is never in a pool: it reads as detached, as on EC2."""
    subnet: Name | None = None
    """Default: the instance's subnet."""
    secondary_ips: NonNegativeInt = 0
    prefixes: NonNegativeInt = 0
    tags: LooseTagMap = EMPTY_TAGS
    type: Literal["interface", "efa", "efa-only", "trunk"] = "interface"
    """EC2's InterfaceType. Default: a plain interface. ``efa-only`` and ``trunk`` interfaces belong
    to something else (the EFA stack, the VPC resource controller): no pool fills or counts them.
    An ``efa-only`` interface has no IP address: no ``secondary_ips``, no ``prefixes``, never the
    primary."""

    @model_validator(mode="after")
    def _no_ip(self) -> InterfaceDeclaration:
        if self.type == "efa-only" and (self.secondary_ips or self.prefixes):
            field = "secondary_ips" if self.secondary_ips else "prefixes"
            raise FieldError(field, "an efa-only interface has no IP addresses: leave it at 0")
        return self


class InstanceDeclaration(ConfigModel):
    id: Name
    type: Name
    subnet: Name
    security_groups: Names = ()
    interfaces: Annotated[tuple[InterfaceDeclaration, ...], Field(strict=False)] = ()
    """Default: one primary interface, index 0, no secondary addresses."""
    running: bool = True


class CloudDeclaration(ConfigModel):
    vpcs: Annotated[tuple[VpcDeclaration, ...], Field(strict=False)] = ()
    subnets: Annotated[tuple[SubnetDeclaration, ...], Field(strict=False)] = ()
    security_groups: Annotated[tuple[SecurityGroupDeclaration, ...], Field(strict=False)] = ()
    instances: Annotated[tuple[InstanceDeclaration, ...], Field(strict=False)] = ()

    @model_validator(mode="after")
    def _references(self) -> CloudDeclaration:
        vpcs = _unique("vpcs", [v.id for v in self.vpcs], "VPC")
        subnets = _unique("subnets", [s.id for s in self.subnets], "subnet")
        groups = _unique("security_groups", [g.id for g in self.security_groups], "security group")
        _unique("instances", [i.id for i in self.instances], "instance")
        cidrs = {v.id: v.cidr for v in self.vpcs}
        for n, s in enumerate(self.subnets):
            where = f"subnets[{n}]"
            if s.vpc not in vpcs:
                raise FieldError(f"{where}.vpc", f"unknown VPC {s.vpc!r}")
            if not s.cidr.subnet_of(cidrs[s.vpc]):
                raise FieldError(f"{where}.cidr", f"{s.cidr} is not inside VPC {s.vpc} ({cidrs[s.vpc]})")
            for m, other in enumerate(self.subnets[:n]):
                if other.vpc == s.vpc and other.cidr.overlaps(s.cidr):
                    raise FieldError(
                        f"{where}.cidr", f"{s.cidr} overlaps subnets[{m}] {other.id} ({other.cidr})"
                    )
                if s.ipv6_cidr is not None and s.ipv6_cidr == other.ipv6_cidr:
                    raise FieldError(f"{where}.ipv6_cidr", f"{s.ipv6_cidr} is subnets[{m}] {other.id}'s too")
        for n, g in enumerate(self.security_groups):
            if g.vpc not in vpcs:
                raise FieldError(f"security_groups[{n}].vpc", f"unknown VPC {g.vpc!r}")
        for n, i in enumerate(self.instances):
            where = f"instances[{n}]"
            if i.subnet not in subnets:
                raise FieldError(f"{where}.subnet", f"unknown subnet {i.subnet!r}")
            for k, group in enumerate(i.security_groups):
                if group not in groups:
                    raise FieldError(f"{where}.security_groups[{k}]", f"unknown security group {group!r}")
            seen: set[tuple[int, int]] = set()
            for k, f in enumerate(i.interfaces):
                if (f.network_card, f.index) in seen:
                    card = f" on network card {f.network_card}" if f.network_card else ""
                    raise FieldError(
                        f"{where}.interfaces[{k}].index", f"device index {f.index} declared twice{card}"
                    )
                seen.add((f.network_card, f.index))
                if f.subnet is not None and f.subnet not in subnets:
                    raise FieldError(f"{where}.interfaces[{k}].subnet", f"unknown subnet {f.subnet!r}")
                if (f.network_card, f.index) == (0, 0) and f.type == "efa-only":
                    raise FieldError(
                        f"{where}.interfaces[{k}].type", "the primary interface (index 0) cannot be efa-only"
                    )
            if i.interfaces and (0, 0) not in seen:
                raise FieldError(f"{where}.interfaces", "the primary interface (index 0) must be declared")
        return self

    def instance_ids(self) -> set[str]:
        return {i.id for i in self.instances}


def _unique(field: str, ids: list[str], noun: str) -> set[str]:
    seen: set[str] = set()
    for n, name in enumerate(ids):
        if name in seen:
            raise FieldError(f"{field}[{n}].id", f"duplicate {noun} {name!r}")
        seen.add(name)
    return seen


def build_cloud(declaration: CloudDeclaration, clock: Clock, *, path: str = "cloud") -> SimCloud:
    """The in-memory cloud ``declaration`` describes, on ``clock``.

    Raises:
        ConfigError: what the cloud itself refuses (an unknown instance type, a subnet without room
            for the declared interfaces, more interfaces than the type allows), naming the instance
            under ``path``.
    """
    sim = SimCloud(clock)
    for v in declaration.vpcs:
        sim.add_vpc(v.id, str(v.cidr))
    for s in declaration.subnets:
        sim.add_subnet(
            s.id,
            vpc=s.vpc,
            zone=s.zone,
            cidr=str(s.cidr),
            tags=s.tags,
            ipv6_cidr=str(s.ipv6_cidr) if s.ipv6_cidr is not None else "",
        )
        if s.address_choice != "lowest":
            sim.set_subnet_address_choice(s.id, s.address_choice)
    for g in declaration.security_groups:
        sim.add_security_group(g.id, vpc=g.vpc, tags=g.tags)
    for n, i in enumerate(declaration.instances):
        interfaces = [
            {
                "index": f.index,
                "network_card": f.network_card,
                "subnet": f.subnet or i.subnet,
                "secondary_ips": f.secondary_ips,
                "prefixes": f.prefixes,
                "tags": dict(f.tags),
                "type": f.type,
            }
            for f in i.interfaces
        ]
        try:
            sim.add_instance(
                i.id,
                type=i.type,
                subnet=i.subnet,
                security_groups=list(i.security_groups),
                interfaces=interfaces or None,
                running=i.running,
            )
        except ValueError as exc:  # what the cloud itself refuses: unknown type, no room, too many interfaces
            raise ConfigError(f"{path}.instances[{n}]", str(exc)) from None
    # `available` counts free addresses after the declared interfaces took theirs.
    for m, s in enumerate(declaration.subnets):
        if s.hidden:
            try:
                sim.hide_addresses(s.id, s.hidden)
            except ValueError as exc:  # not an address, or not one of the subnet's
                raise ConfigError(f"{path}.subnets[{m}].hidden", str(exc)) from None
        if s.available is not None:
            sim.set_subnet_available(s.id, s.available)
    return sim
