"""The driver's logic: libnetwork's IPAM semantics over the node's allocator.

A libnetwork pool is a subnet of one allocator pool (the default pool, from the node's ENIPool, or a
named static pool); every address it hands out is an allocation owned by ``libnetwork:<PoolID>``. The
semantics, as Docker sees them, are documented in docs/node.md, "The libnetwork protocol".

Invariants:

* A refused request (400, 403, 503) changes no allocation and no registered pool, adoption aside. When
  the registry cannot be written the request fails with 500: a RequestPool then changes nothing, a
  ReleasePool has released its addresses and keeps its PoolID.
* Within an address space, the ranges of two pools never overlap (adopted pools excepted: they are
  re-registered as they were, so that their addresses can be used and released).
* Nothing owned by ``libnetwork:<PoolID>`` is left without a registered pool: such allocations are
  adopted at construction, before every RequestPool and on an unknown PoolID, so the driver may be
  built before the allocator restores its state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import structlog

from eni_ipam.agent.errors import (
    AlreadyAllocated,
    FamilyDisabled,
    NotAllocated,
    NotInPool,
    PoolExhausted,
    PoolWithheld,
    UnknownPool,
)
from eni_ipam.agent.types import DEFAULT_POOL, Allocation, Family, PoolAddress

from .protocol import (
    ADDRESS_SPACES,
    ERR_BAD_POOL,
    ERR_INVALID_ADDRESS_SPACE,
    ERR_INVALID_POOL,
    ERR_INVALID_SUBPOOL,
    ERR_IP_ALREADY_ALLOCATED,
    ERR_IP_OUT_OF_RANGE,
    ERR_NO_AVAILABLE_IPS,
    ERR_NO_IP_RETURNED,
    ERR_POOL_OVERLAP,
    GATEWAY,
    GLOBAL_ADDRESS_SPACE,
    LOCAL_ADDRESS_SPACE,
    REQUEST_ADDRESS_TYPE,
    SERIAL,
    forbidden,
    invalid,
    unavailable,
)
from .registry import OWNER_PREFIX, Address, Network, PoolRecord, PoolRegistry, parse_network

log = structlog.get_logger("eni_ipam.agent.libnetwork")


class AllocatorView(Protocol):
    """The part of :class:`eni_ipam.agent.allocator.Allocator` the driver uses."""

    def pools(self) -> list[str]: ...

    def pool_addresses(self, name: str) -> list[PoolAddress]: ...

    def allocate(self, address: str, owner: str, pool: str = ...) -> Allocation: ...
    def allocate_among(self, candidates: Sequence[str], owner: str, pool: str = ...) -> Allocation: ...

    def allocate_next(
        self, owner: str, pool: str = ..., family: Family | None = ..., *, serial: bool = ...
    ) -> tuple[Allocation | None, Allocation | None]: ...

    def release(self, address: str, pool: str = ...) -> Allocation: ...

    def release_owner(self, owner: str) -> list[Allocation]: ...

    def allocations(self, *, owner: str | None = ..., pool: str | None = ...) -> list[Allocation]: ...

    def used(self) -> set[str]: ...

    def enabled(self, family: Family) -> bool: ...


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolGrant:
    """RequestPool's answer."""

    pool_id: str
    pool: str
    data: dict[str, str]


def _subnet(member: PoolAddress) -> Network:
    return ipaddress.ip_network(f"{member.address}/{member.prefix_length}", strict=False)


def _parse_address(text: str, field: str) -> Address:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise invalid(f"{field} must be an IP address such as 10.0.0.5, got {text!r}") from None


def _same(a: str, b: Address) -> bool:
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(a) == b
    return False


class LibnetworkDriver:
    """The remote IPAM driver's logic over the node's allocator (see the module's invariants)."""

    def __init__(
        self,
        allocator: AllocatorView,
        state_path: str | Path | None = None,
        *,
        ids: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self._allocator = allocator
        self._ids = ids
        self._registry = PoolRegistry(Path(state_path) if state_path is not None else None)
        self.adopt_orphans()

    # -- the protocol's answers ------------------------------------------------------------------

    @staticmethod
    def capabilities() -> dict[str, bool]:
        return {"RequiresMACAddress": False, "RequiresRequestReplay": False}

    @staticmethod
    def default_address_spaces() -> dict[str, str]:
        return {
            "LocalDefaultAddressSpace": LOCAL_ADDRESS_SPACE,
            "GlobalDefaultAddressSpace": GLOBAL_ADDRESS_SPACE,
        }

    def pools(self) -> list[PoolRecord]:
        """The registry, by PoolID (copies)."""
        return [dataclasses.replace(r, options=dict(r.options)) for r in self._registry.records()]

    def request_pool(
        self,
        *,
        address_space: str,
        pool: str = "",
        sub_pool: str = "",
        options: Mapping[str, str] | None = None,
        v6: bool = False,
    ) -> PoolGrant:
        if address_space not in ADDRESS_SPACES:
            raise invalid(ERR_INVALID_ADDRESS_SPACE)
        self.adopt_orphans()
        if sub_pool and not pool:
            raise invalid(ERR_INVALID_SUBPOOL)
        asked = parse_network(pool) if pool else None
        family = Family.IPV6 if (asked.version == 6 if asked is not None else v6) else Family.IPV4
        if not self._allocator.enabled(family):
            # Refused here, not at the first RequestAddress: Docker would already hold the network's
            # IPv4 addresses by then, and leave them behind when the IPv6 one fails.
            label = "IPv6" if family == Family.IPV6 else "IPv4"
            raise unavailable(
                f"{label} is disabled on this node ({family}: false in the agent's configuration)"
            )
        if pool:
            network = parse_network(pool)
            if network is None:
                raise invalid(ERR_INVALID_POOL)
            sub: Network | None = None
            if sub_pool:
                sub = parse_network(sub_pool)
                if sub is None or sub.version != network.version or not sub.subnet_of(network):  # type: ignore[arg-type]
                    raise invalid(ERR_INVALID_SUBPOOL)
            found = self._find_subnet(network)
            if found is None:
                raise invalid(ERR_BAD_POOL)
            allocator_pool, members = found
            if self._overlaps(address_space, sub or network):
                raise forbidden(ERR_POOL_OVERLAP)
        else:
            sub = None
            allocator_pool = DEFAULT_POOL
            network, members = self._choose_default_subnet(address_space, Family.IPV6 if v6 else Family.IPV4)
        record = PoolRecord(
            pool_id=self._ids(),
            address_space=address_space,
            pool=str(network),
            sub_pool=str(sub) if sub is not None else "",
            allocator_pool=allocator_pool,
            gateway=next((m.gateway for m in members if m.gateway), ""),
            options=dict(options or {}),
        )
        self._registry.add(record)
        data = {GATEWAY: f"{record.gateway}/{network.prefixlen}"} if record.gateway else {}
        log.info(
            "libnetwork_pool_requested",
            pool_id=record.pool_id,
            address_space=address_space,
            pool=record.pool,
            sub_pool=record.sub_pool,
            allocator_pool=allocator_pool,
            gateway=record.gateway,
        )
        return PoolGrant(pool_id=record.pool_id, pool=record.pool, data=data)

    def release_pool(self, pool_id: str) -> None:
        record = self._record(pool_id)
        leftovers = self._allocator.release_owner(record.owner)
        if leftovers:
            log.warning(
                "libnetwork_pool_released_with_addresses",
                pool_id=pool_id,
                addresses=sorted(a.address for a in leftovers),
            )
        self._registry.remove(pool_id)
        log.info("libnetwork_pool_released", pool_id=pool_id, pool=record.pool, released=len(leftovers))

    def request_address(
        self, pool_id: str, address: str = "", options: Mapping[str, str] | None = None
    ) -> tuple[str, dict[str, str]]:
        """Returns the address in CIDR form (``10.0.0.5/24``) and the answer's Data."""
        record = self._record(pool_id)
        opts = {**record.options, **(options or {})}
        prefix = record.network.prefixlen
        if opts.get(REQUEST_ADDRESS_TYPE) == GATEWAY:
            return f"{self._gateway(record, address)}/{prefix}", {}
        if address:
            allocation = self._allocate_preferred(record, _parse_address(address, "Address"))
        else:
            allocation = self._allocate_next(record, serial=opts.get(SERIAL, "").lower() == "true")
        log.info(
            "libnetwork_address_requested",
            pool_id=pool_id,
            address=allocation.address,
            preferred=bool(address),
        )
        return f"{allocation.address}/{prefix}", {}

    def release_address(self, pool_id: str, address: str) -> None:
        record = self._record(pool_id)
        ip = _parse_address(address, "Address")
        if ip not in record.network:
            raise invalid(ERR_IP_OUT_OF_RANGE)
        if record.gateway and _same(record.gateway, ip):
            log.debug("libnetwork_gateway_released", pool_id=pool_id, address=str(ip))
            return
        held = next(
            (a for a in self._allocator.allocations(owner=record.owner) if _same(a.address, ip)), None
        )
        if held is None:
            raise invalid(f"ip address {ip} not allocated on pool {pool_id}")
        try:
            self._allocator.release(held.address, held.pool)
        except NotAllocated:
            raise invalid(f"ip address {ip} not allocated on pool {pool_id}") from None
        log.info("libnetwork_address_released", pool_id=pool_id, address=held.address)

    def adopt_orphans(self) -> list[str]:
        """Re-register the pools of allocations owned by ``libnetwork:<PoolID>`` with an unknown PoolID.

        Runs at construction, before each RequestPool and on an unknown PoolID, so it also catches
        allocations the allocator restored after the driver was built. Returns the adopted PoolIDs.
        """
        orphans: dict[str, Allocation] = {}
        for allocation in self._allocator.allocations():
            if allocation.owner.startswith(OWNER_PREFIX):
                pool_id = allocation.owner.removeprefix(OWNER_PREFIX)
                if pool_id and pool_id not in self._registry:
                    orphans.setdefault(pool_id, allocation)
        if not orphans:
            return []
        adopted = []
        for pool_id, allocation in sorted(orphans.items()):
            network = ipaddress.ip_network(f"{allocation.address}/{allocation.prefix_length}", strict=False)
            adopted.append(
                PoolRecord(
                    pool_id=pool_id,
                    address_space=LOCAL_ADDRESS_SPACE,
                    pool=str(network),
                    allocator_pool=allocation.pool,
                    gateway=allocation.gateway,
                    adopted=True,
                )
            )
            log.warning(
                "libnetwork_pool_adopted", pool_id=pool_id, pool=str(network), allocator_pool=allocation.pool
            )
        self._registry.adopt(adopted)
        return sorted(orphans)

    # -- pools -----------------------------------------------------------------------------------

    def _record(self, pool_id: str) -> PoolRecord:
        record = self._registry.get(pool_id)
        if record is None and pool_id in self.adopt_orphans():
            record = self._registry.get(pool_id)
        if record is None:
            raise invalid(f"unknown PoolID {pool_id!r}")
        return record

    def _members(self, name: str) -> list[PoolAddress]:
        try:
            return self._allocator.pool_addresses(name)
        except UnknownPool:
            return []

    def _find_subnet(self, network: Network) -> tuple[str, list[PoolAddress]] | None:
        names = sorted(self._allocator.pools(), key=lambda n: (n != DEFAULT_POOL, n))
        for name in names:
            members = [m for m in self._members(name) if _subnet(m) == network]
            if members:
                return name, members
        return None

    def _overlaps(self, address_space: str, network: Network) -> bool:
        return any(
            r.address_space == address_space
            and r.range.version == network.version
            and r.range.overlaps(network)
            for r in self._registry.records()
        )

    def _choose_default_subnet(self, address_space: str, family: Family) -> tuple[Network, list[PoolAddress]]:
        subnets: dict[Network, list[PoolAddress]] = {}
        for member in self._members(DEFAULT_POOL):
            if member.family == family:
                subnets.setdefault(_subnet(member), []).append(member)
        if not subnets:
            raise unavailable(ERR_NO_AVAILABLE_IPS)
        free = [(n, ms) for n, ms in subnets.items() if not self._overlaps(address_space, n)]
        if not free:
            raise forbidden(ERR_POOL_OVERLAP)
        used = self._allocator.used()
        network, members = min(
            free, key=lambda c: (-sum(m.address not in used for m in c[1]), int(c[0].network_address))
        )
        return network, members

    # -- addresses -------------------------------------------------------------------------------

    def _gateway(self, record: PoolRecord, preferred: str) -> str:
        gateway = record.gateway or next(
            (
                m.gateway
                for m in self._members(record.allocator_pool)
                if m.gateway and _subnet(m) == record.network
            ),
            "",
        )
        if not gateway:
            raise unavailable(ERR_NO_IP_RETURNED)
        if preferred and not _same(gateway, _parse_address(preferred, "Address")):
            raise invalid(
                f"the gateway of pool {record.pool} is its subnet's router {gateway}; "
                f"{preferred} cannot be the gateway"
            )
        log.info("libnetwork_gateway_requested", pool_id=record.pool_id, gateway=gateway)
        return gateway

    def _allocate_preferred(self, record: PoolRecord, ip: Address) -> Allocation:
        if ip not in record.network:
            raise invalid(ERR_IP_OUT_OF_RANGE)
        member = next((m for m in self._members(record.allocator_pool) if _same(m.address, ip)), None)
        if member is None:
            raise invalid(ERR_IP_OUT_OF_RANGE)
        if member.address in self._allocator.used():
            raise forbidden(ERR_IP_ALREADY_ALLOCATED)
        try:
            return self._allocator.allocate(member.address, record.owner, record.allocator_pool)
        except AlreadyAllocated:
            raise forbidden(ERR_IP_ALREADY_ALLOCATED) from None
        except NotInPool:
            raise invalid(ERR_IP_OUT_OF_RANGE) from None
        except FamilyDisabled:
            raise unavailable(f"address family {record.family} is disabled on this node") from None
        except UnknownPool:
            raise unavailable(f"pool {record.allocator_pool} no longer exists on this node") from None

    def _allocate_next(self, record: PoolRecord, *, serial: bool) -> Allocation:
        family = record.family
        span = record.range
        members = [m for m in self._members(record.allocator_pool) if m.family == family]
        inside = sorted(
            (
                (ipaddress.ip_address(m.address), m.address)
                for m in members
                if ipaddress.ip_address(m.address) in span
            ),
            key=lambda c: int(c[0]),
        )
        if not inside:
            raise unavailable(ERR_NO_AVAILABLE_IPS)
        if len(inside) == len(members):
            # The range is the whole pool (for this family): the allocator chooses, with its own cursor.
            return self._allocate_next_in_allocator(record, family, serial=serial)
        last = record.cursor
        if serial and last:
            cursor = int(ipaddress.ip_address(last))
            inside = [c for c in inside if int(c[0]) > cursor] + [c for c in inside if int(c[0]) <= cursor]
        try:
            # The allocator's automatic choice over the sub-range: a quarantined address last.
            allocation = self._allocator.allocate_among(
                [address for _, address in inside], record.owner, record.allocator_pool
            )
        except FamilyDisabled:
            raise unavailable(f"address family {family} is disabled on this node") from None
        except PoolWithheld as exc:
            raise unavailable(f"{ERR_NO_AVAILABLE_IPS} now: {exc}") from None
        except PoolExhausted:
            raise unavailable(ERR_NO_AVAILABLE_IPS) from None
        if serial:
            self._registry.set_cursor(record.pool_id, allocation.address)
        return allocation

    def _allocate_next_in_allocator(self, record: PoolRecord, family: Family, *, serial: bool) -> Allocation:
        try:
            ipv4, ipv6 = self._allocator.allocate_next(
                record.owner, record.allocator_pool, family, serial=serial
            )
        except PoolWithheld as exc:  # Docker itself is what is waited for, or the pods: say so
            raise unavailable(f"{ERR_NO_AVAILABLE_IPS} now: {exc}") from None
        except PoolExhausted:
            raise unavailable(ERR_NO_AVAILABLE_IPS) from None
        except FamilyDisabled:
            raise unavailable(f"address family {family} is disabled on this node") from None
        except UnknownPool:
            raise unavailable(f"pool {record.allocator_pool} no longer exists on this node") from None
        allocation = ipv6 if family == Family.IPV6 else ipv4
        if allocation is None:
            raise unavailable(ERR_NO_IP_RETURNED)
        return allocation
