"""The libnetwork remote IPAM driver: Docker networks whose addresses come from the node's pools.

:class:`LibnetworkDriver` is the pure logic over the node's allocator; :func:`add_routes` serves it on
the agent's socket with the Docker plugin protocol (every call is ``POST /<Method>`` with a JSON body,
answered with ``Content-Type: application/vnd.docker.plugins.v1+json``; a refusal is ``{"Err": msg}``
with a non-200 status). Requests run synchronously on the event loop, so two requests never interleave.

Address spaces
    ``eni-ipam-local`` (local default) and ``eni-ipam-global`` (global default); both map onto the node's
    allocator. Any other address space is refused with ``invalid address space``. An address space is a
    set of non-overlapping pools: the *range* of a pool (its SubPool when it has one, else its Pool) may not
    overlap the range of another pool of the same address space (``Pool overlaps with other one on this
    address space``). Two pools with the same Pool and disjoint SubPools may coexist; the same Pool may be
    held once in each address space.

RequestPool
    Without ``Pool``: a subnet of the node's default pool (its ENIPool addresses) of the family ``V6``
    asks for. A subnet is the CIDR of a member's address with its ``prefix_length``. When the default pool
    spans several subnets, the one with the most free addresses whose range does not overlap a pool already
    held in the address space is chosen (ties: the lowest subnet); when all of them are held, the answer is
    ``Pool overlaps with other one on this address space``; when the default pool has no address of that
    family, ``no available addresses on this pool``. With ``Pool`` (a CIDR): the allocator pool with a
    subnet equal to it (the default pool first, then the named pools from configuration in name order),
    else ``address space does not contain specified address pool``; an unparsable Pool is
    ``invalid address pool``. ``SubPool`` without ``Pool``, unparsable, or not inside ``Pool`` is
    ``invalid address subpool``. ``V6`` is ignored when ``Pool`` is given (the CIDR says the family).
    The answer's ``Data`` carries ``com.docker.network.gateway`` (the subnet's router, as ``addr/len``),
    so libnetwork does not ask for a gateway address unless the user names one.

PoolIDs
    Opaque random strings (32 hex digits), never reused. The registry of pools (PoolID → address space,
    Pool, SubPool, allocator pool, gateway, options) lives in memory and, when the driver is given a
    ``state_path``, in that file (JSON with a format version and a checksum), written atomically (temporary
    file, fsync, rename, fsync of the directory) before a RequestPool or ReleasePool is answered, so PoolIDs
    stay valid across a restart of the agent; a registry that cannot be written fails the request (a
    RequestPool then changes nothing; a ReleasePool has released the addresses and keeps the PoolID). A
    registry file that cannot be read or fails its checksum is moved aside (``<name>.corrupt-<n>``) and
    reported (``libnetwork_registry_corrupt``). Allocations owned by ``libnetwork:<PoolID>`` whose PoolID
    is not in the registry are *adopted*: the pool is re-registered in the local default address space
    from the allocation's subnet (even where that overlaps a registered pool), so libnetwork can still
    use and release it. Adoption runs at construction, before every RequestPool and on an unknown
    PoolID, so the driver may be built before the allocator restores its state. Nothing is silently
    dropped.

RequestAddress
    Every address of a pool is allocated to the owner ``libnetwork:<PoolID>`` (one owner per libnetwork
    pool: ReleasePool releases by owner, and the allocator's dump shows which network holds an address).
    ``RequestAddressType: com.docker.network.gateway`` answers the pool's gateway (the subnet's router,
    never a pool member, never allocated); a preferred gateway that is not the router is refused; no known
    router is ``no address returned``. A preferred ``Address`` must lie in the Pool (the SubPool restricts
    dynamic allocation only, as in libnetwork) and be a member of the allocator pool that is neither
    excluded nor held for release, else ``requested address is out of range``; an address with an owner
    (this pool included) is ``Address already in use``. Without ``Address`` the next free address of the
    range is allocated: through ``allocate_next`` (lowest free first; with
    ``com.docker.network.ipam.serial: "true"`` the first free after the last one handed out) when the
    range holds every member of that family of the allocator pool, else by walking the range's members in
    address order (serial: from the pool's own cursor, wrapping; like the allocator's cursor it is not
    persisted, and it moves on every dynamic hand-out, serial or not). An empty range is
    ``no available addresses on this pool``. The request's Options override the pool's Options (so
    ``--ipam-opt com.docker.network.ipam.serial=true`` makes a network serial). The answer is the
    address with the Pool's prefix length.

ReleaseAddress / ReleasePool
    Releasing the pool's gateway succeeds and changes nothing (it was never allocated). Releasing an address
    outside the Pool is ``requested address is out of range``; an address this pool does not hold is
    ``ip address <addr> not allocated on pool <PoolID>``. ReleasePool releases the addresses the pool
    still holds (libnetwork releases them itself first; leftovers are logged) and forgets the PoolID.

Statuses: 400 for an invalid parameter (libnetwork's InvalidParameter errors, a double release),
403 for ``Address already in use`` and the pool overlap (Forbidden), 503 for ``no available addresses on
this pool`` and ``no address returned`` (Unavailable), 500 when the driver or the allocator failed (a
state file that cannot be written). Malformed JSON, a body that is not an object, a missing or mistyped
field and an unknown PoolID are answered with status 400 and an ``Err`` naming the problem; nothing
changes. ``RequiresRequestReplay`` is false: the registry and the allocator persist, so libnetwork need
not replay requests on restart.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import structlog
from aiohttp import web

from eni_ipam.agent.files import checksum, move_aside, write_atomically
from eni_ipam.agent.types import DEFAULT_POOL, Allocation, Family, PoolAddress
from eni_ipam.core.errors import (
    AlreadyAllocated,
    EniIpamError,
    FamilyDisabled,
    NotAllocated,
    NotInPool,
    PoolExhausted,
    UnknownPool,
)

log = structlog.get_logger("eni_ipam.agent.libnetwork")

LOCAL_ADDRESS_SPACE = "eni-ipam-local"
GLOBAL_ADDRESS_SPACE = "eni-ipam-global"
ADDRESS_SPACES = (LOCAL_ADDRESS_SPACE, GLOBAL_ADDRESS_SPACE)
CONTENT_TYPE = "application/vnd.docker.plugins.v1+json"
REQUEST_ADDRESS_TYPE = "RequestAddressType"
"""Option key of RequestAddress saying what the address is for."""
GATEWAY = "com.docker.network.gateway"
"""The RequestAddressType of a gateway, and the RequestPool Data key carrying the gateway."""
SERIAL = "com.docker.network.ipam.serial"
"""Option: ``"true"`` hands out the first free address after the last one (not the lowest free)."""
OWNER_PREFIX = "libnetwork:"
REGISTRY_FORMAT = 1

# libnetwork's well-known IPAM errors (ipamapi), verbatim.
ERR_INVALID_ADDRESS_SPACE = "invalid address space"
ERR_INVALID_POOL = "invalid address pool"
ERR_INVALID_SUBPOOL = "invalid address subpool"
ERR_NO_AVAILABLE_IPS = "no available addresses on this pool"
ERR_NO_IP_RETURNED = "no address returned"
ERR_IP_ALREADY_ALLOCATED = "Address already in use"
ERR_IP_OUT_OF_RANGE = "requested address is out of range"
ERR_POOL_OVERLAP = "Pool overlaps with other one on this address space"
ERR_BAD_POOL = "address space does not contain specified address pool"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class IpamRequestError(EniIpamError):
    """The driver refused a request. ``message`` is libnetwork's ``Err``; ``status`` the HTTP status
    (400 invalid parameter, 403 forbidden, 503 unavailable, 500 the driver failed)."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def _invalid(message: str) -> IpamRequestError:
    return IpamRequestError(message, status=400)


def _forbidden(message: str) -> IpamRequestError:
    return IpamRequestError(message, status=403)


def _unavailable(message: str) -> IpamRequestError:
    return IpamRequestError(message, status=503)


class AllocatorView(Protocol):
    """The part of :class:`eni_ipam.agent.allocator.Allocator` the driver uses."""

    def pools(self) -> list[str]: ...

    def pool_addresses(self, name: str) -> list[PoolAddress]: ...

    def allocate(self, address: str, owner: str, pool: str = ...) -> Allocation: ...

    def allocate_next(
        self, owner: str, pool: str = ..., family: Family | None = ..., *, serial: bool = ...
    ) -> tuple[Allocation | None, Allocation | None]: ...

    def release(self, address: str, pool: str = ...) -> Allocation: ...

    def release_owner(self, owner: str) -> list[Allocation]: ...

    def allocations(self, *, owner: str | None = ..., pool: str | None = ...) -> list[Allocation]: ...

    def used(self) -> set[str]: ...


@dataclasses.dataclass(slots=True, kw_only=True)
class PoolRecord:
    """One libnetwork pool the driver handed out (an entry of the registry)."""

    pool_id: str
    address_space: str
    pool: str
    """The subnet, in CIDR form (the answer's Pool)."""
    sub_pool: str = ""
    """The CIDR dynamic allocation is restricted to; empty: the whole Pool."""
    allocator_pool: str
    """The allocator pool the addresses come from."""
    gateway: str = ""
    """The subnet's router; empty when unknown."""
    options: dict[str, str] = dataclasses.field(default_factory=dict)
    adopted: bool = False
    """Re-registered from allocations after its registry entry was lost."""

    @property
    def network(self) -> Network:
        return ipaddress.ip_network(self.pool)

    @property
    def range(self) -> Network:
        return ipaddress.ip_network(self.sub_pool or self.pool)

    @property
    def owner(self) -> str:
        return f"{OWNER_PREFIX}{self.pool_id}"

    @property
    def family(self) -> Family:
        return Family.IPV6 if self.network.version == 6 else Family.IPV4


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolGrant:
    """RequestPool's answer."""

    pool_id: str
    pool: str
    data: dict[str, str]


def _subnet(member: PoolAddress) -> Network:
    return ipaddress.ip_network(f"{member.address}/{member.prefix_length}", strict=False)


def _parse_network(text: str) -> Network | None:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def _parse_address(text: str, field: str) -> Address:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise _invalid(f"{field} must be an IP address such as 10.0.0.5, got {text!r}") from None


def _same(a: str, b: Address) -> bool:
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(a) == b
    return False


class LibnetworkDriver:
    """The remote IPAM driver's logic over the node's allocator (see the module docstring)."""

    def __init__(
        self,
        allocator: AllocatorView,
        state_path: str | Path | None = None,
        *,
        ids: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self._allocator = allocator
        self._path = Path(state_path) if state_path is not None else None
        self._ids = ids
        self._pools: dict[str, PoolRecord] = {}
        self._cursors: dict[str, str] = {}
        """PoolID → the last address handed out by walking its range (not persisted, as the allocator's)."""
        self._load()

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
        return [dataclasses.replace(r, options=dict(r.options)) for _, r in sorted(self._pools.items())]

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
            raise _invalid(ERR_INVALID_ADDRESS_SPACE)
        self.adopt_orphans()
        if sub_pool and not pool:
            raise _invalid(ERR_INVALID_SUBPOOL)
        if pool:
            network = _parse_network(pool)
            if network is None:
                raise _invalid(ERR_INVALID_POOL)
            sub: Network | None = None
            if sub_pool:
                sub = _parse_network(sub_pool)
                if sub is None or sub.version != network.version or not sub.subnet_of(network):  # type: ignore[arg-type]
                    raise _invalid(ERR_INVALID_SUBPOOL)
            found = self._find_subnet(network)
            if found is None:
                raise _invalid(ERR_BAD_POOL)
            allocator_pool, members = found
            if self._overlaps(address_space, sub or network):
                raise _forbidden(ERR_POOL_OVERLAP)
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
        if record.pool_id in self._pools:
            raise IpamRequestError(f"PoolID {record.pool_id} is already in use", status=500)
        self._pools[record.pool_id] = record
        try:
            self._save()
        except IpamRequestError:
            del self._pools[record.pool_id]
            raise
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
        del self._pools[pool_id]
        self._cursors.pop(pool_id, None)
        try:
            self._save()
        except IpamRequestError:
            self._pools[pool_id] = record
            raise
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
            raise _invalid(ERR_IP_OUT_OF_RANGE)
        if record.gateway and _same(record.gateway, ip):
            log.debug("libnetwork_gateway_released", pool_id=pool_id, address=str(ip))
            return
        held = next(
            (a for a in self._allocator.allocations(owner=record.owner) if _same(a.address, ip)), None
        )
        if held is None:
            raise _invalid(f"ip address {ip} not allocated on pool {pool_id}")
        try:
            self._allocator.release(held.address, held.pool)
        except NotAllocated:
            raise _invalid(f"ip address {ip} not allocated on pool {pool_id}") from None
        log.info("libnetwork_address_released", pool_id=pool_id, address=held.address)

    # -- pools -----------------------------------------------------------------------------------

    def _record(self, pool_id: str) -> PoolRecord:
        record = self._pools.get(pool_id)
        if record is None and pool_id in self.adopt_orphans():
            record = self._pools.get(pool_id)
        if record is None:
            raise _invalid(f"unknown PoolID {pool_id!r}")
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
            for r in self._pools.values()
        )

    def _choose_default_subnet(self, address_space: str, family: Family) -> tuple[Network, list[PoolAddress]]:
        subnets: dict[Network, list[PoolAddress]] = {}
        for member in self._members(DEFAULT_POOL):
            if member.family == family:
                subnets.setdefault(_subnet(member), []).append(member)
        if not subnets:
            raise _unavailable(ERR_NO_AVAILABLE_IPS)
        free = [(n, ms) for n, ms in subnets.items() if not self._overlaps(address_space, n)]
        if not free:
            raise _forbidden(ERR_POOL_OVERLAP)
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
            raise _unavailable(ERR_NO_IP_RETURNED)
        if preferred and not _same(gateway, _parse_address(preferred, "Address")):
            raise _invalid(
                f"the gateway of pool {record.pool} is its subnet's router {gateway}; {preferred} cannot be"
            )
        log.info("libnetwork_gateway_requested", pool_id=record.pool_id, gateway=gateway)
        return gateway

    def _allocate_preferred(self, record: PoolRecord, ip: Address) -> Allocation:
        if ip not in record.network:
            raise _invalid(ERR_IP_OUT_OF_RANGE)
        member = next((m for m in self._members(record.allocator_pool) if _same(m.address, ip)), None)
        if member is None:
            raise _invalid(ERR_IP_OUT_OF_RANGE)
        if member.address in self._allocator.used():
            raise _forbidden(ERR_IP_ALREADY_ALLOCATED)
        try:
            return self._allocator.allocate(member.address, record.owner, record.allocator_pool)
        except AlreadyAllocated:
            raise _forbidden(ERR_IP_ALREADY_ALLOCATED) from None
        except NotInPool:
            raise _invalid(ERR_IP_OUT_OF_RANGE) from None
        except FamilyDisabled:
            raise _unavailable(f"address family {record.family} is disabled on this node") from None
        except UnknownPool:
            raise _unavailable(f"pool {record.allocator_pool} no longer exists on this node") from None

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
            raise _unavailable(ERR_NO_AVAILABLE_IPS)
        if len(inside) == len(members):
            return self._allocate_next_in_allocator(record, family, serial=serial)
        last = self._cursors.get(record.pool_id)
        if serial and last:
            cursor = int(ipaddress.ip_address(last))
            inside = [c for c in inside if int(c[0]) > cursor] + [c for c in inside if int(c[0]) <= cursor]
        used = self._allocator.used()
        for _, address in inside:
            if address in used:
                continue
            try:
                allocation = self._allocator.allocate(address, record.owner, record.allocator_pool)
            except (NotInPool, AlreadyAllocated):
                continue
            except FamilyDisabled:
                raise _unavailable(f"address family {family} is disabled on this node") from None
            self._cursors[record.pool_id] = allocation.address
            return allocation
        raise _unavailable(ERR_NO_AVAILABLE_IPS)

    def _allocate_next_in_allocator(self, record: PoolRecord, family: Family, *, serial: bool) -> Allocation:
        try:
            ipv4, ipv6 = self._allocator.allocate_next(
                record.owner, record.allocator_pool, family, serial=serial
            )
        except PoolExhausted:
            raise _unavailable(ERR_NO_AVAILABLE_IPS) from None
        except FamilyDisabled:
            raise _unavailable(f"address family {family} is disabled on this node") from None
        except UnknownPool:
            raise _unavailable(f"pool {record.allocator_pool} no longer exists on this node") from None
        allocation = ipv6 if family == Family.IPV6 else ipv4
        if allocation is None:
            raise _unavailable(ERR_NO_IP_RETURNED)
        return allocation

    # -- the registry file -----------------------------------------------------------------------

    def _save(self) -> None:
        if self._path is None:
            return
        pools = [dataclasses.asdict(r) for _, r in sorted(self._pools.items())]
        document = {"format": REGISTRY_FORMAT, "pools": pools, "checksum": checksum(pools)}
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self._path, (json.dumps(document, indent=1, sort_keys=True) + "\n").encode())
        except OSError as exc:
            log.error("libnetwork_registry_save_failed", path=str(self._path), error=str(exc))
            raise IpamRequestError(f"cannot save the pool registry {self._path}: {exc}", status=500) from exc

    def _load(self) -> None:
        if self._path is not None:
            try:
                text = self._path.read_text()
            except FileNotFoundError:
                text = None
            except OSError as exc:
                text = None
                self._quarantine(f"unreadable: {exc}")
            if text is not None:
                try:
                    records = _parse_registry(text)
                except ValueError as exc:
                    self._quarantine(str(exc))
                else:
                    self._pools = {r.pool_id: r for r in records}
            log.info("libnetwork_registry_loaded", path=str(self._path), pools=len(self._pools))
        self.adopt_orphans()

    def _quarantine(self, reason: str) -> None:
        assert self._path is not None
        try:
            aside = move_aside(self._path)
        except OSError as exc:
            raise EniIpamError(
                f"the libnetwork pool registry {self._path} is corrupt ({reason}) and cannot be moved "
                f"aside: {exc}"
            ) from exc
        log.error("libnetwork_registry_corrupt", path=str(self._path), moved_to=str(aside), reason=reason)

    def adopt_orphans(self) -> list[str]:
        """Re-register the pools of allocations owned by ``libnetwork:<PoolID>`` with an unknown PoolID.

        Runs at construction, before each RequestPool and on an unknown PoolID, so it also catches
        allocations the allocator restored after the driver was built. Returns the adopted PoolIDs.
        """
        orphans: dict[str, Allocation] = {}
        for allocation in self._allocator.allocations():
            if allocation.owner.startswith(OWNER_PREFIX):
                pool_id = allocation.owner.removeprefix(OWNER_PREFIX)
                if pool_id and pool_id not in self._pools:
                    orphans.setdefault(pool_id, allocation)
        if not orphans:
            return []
        for pool_id, allocation in sorted(orphans.items()):
            network = ipaddress.ip_network(f"{allocation.address}/{allocation.prefix_length}", strict=False)
            self._pools[pool_id] = PoolRecord(
                pool_id=pool_id,
                address_space=LOCAL_ADDRESS_SPACE,
                pool=str(network),
                allocator_pool=allocation.pool,
                gateway=allocation.gateway,
                adopted=True,
            )
            log.warning(
                "libnetwork_pool_adopted", pool_id=pool_id, pool=str(network), allocator_pool=allocation.pool
            )
        try:
            self._save()
        except IpamRequestError as exc:
            log.error("libnetwork_adopted_pools_not_saved", error=exc.message)
        return sorted(orphans)


def _parse_registry(text: str) -> list[PoolRecord]:
    """Raises ValueError saying what is wrong."""
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != REGISTRY_FORMAT:
        raise ValueError(f"not a registry of format {REGISTRY_FORMAT}")
    pools = document.get("pools")
    if not isinstance(pools, list):
        raise ValueError("pools: expected a list")
    if document.get("checksum") != checksum(pools):
        raise ValueError("checksum mismatch")
    records = []
    strings = ("pool_id", "address_space", "pool", "sub_pool", "allocator_pool", "gateway")
    for n, raw in enumerate(pools):
        if not isinstance(raw, dict) or not all(isinstance(raw.get(k), str) for k in strings):
            raise ValueError(f"pools[{n}]: malformed entry")
        options = raw.get("options")
        if not isinstance(options, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in options.items()
        ):
            raise ValueError(f"pools[{n}].options: expected a mapping of strings")
        if _parse_network(raw["pool"]) is None or (
            raw["sub_pool"] and _parse_network(raw["sub_pool"]) is None
        ):
            raise ValueError(f"pools[{n}]: malformed pool")
        records.append(
            PoolRecord(
                **{k: raw[k] for k in strings}, options=dict(options), adopted=bool(raw.get("adopted"))
            )
        )
    return records


# -- the plugin protocol over HTTP ---------------------------------------------------------------

Body = dict[str, Any]


def _string(body: Body, field: str) -> str:
    value = body.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _invalid(f"field {field} must be a string, got {type(value).__name__}")
    return value


def _bool(body: Body, field: str) -> bool:
    value = body.get(field)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _invalid(f"field {field} must be a boolean, got {type(value).__name__}")
    return value


def _options(body: Body, field: str = "Options") -> dict[str, str]:
    value = body.get(field)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _invalid(f"field {field} must be an object of strings")
    return {str(k): v for k, v in value.items()}


def _required(body: Body, field: str) -> str:
    value = _string(body, field)
    if not value:
        raise _invalid(f"field {field} is required")
    return value


def _reply(data: Mapping[str, Any], status: int = 200) -> web.Response:
    return web.json_response(dict(data), status=status, content_type=CONTENT_TYPE)


Handler = Callable[[Body], Mapping[str, Any]]


def _endpoint(
    method: str, handler: Handler, *, payload: bool
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def serve(request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            try:
                body = json.loads(raw) if raw.strip() else None
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
                raise _invalid(f"{method}: malformed JSON body: {exc or 'nested too deeply'}") from None
            if body is None and not payload:
                body = {}
            if not isinstance(body, dict):
                raise _invalid(f"{method}: the body must be a JSON object, got {type(body).__name__}")
            return _reply(handler(body))
        except IpamRequestError as exc:
            log.info("libnetwork_request_refused", method=method, error=exc.message, status=exc.status)
            return _reply({"Err": exc.message}, exc.status)
        except EniIpamError as exc:
            log.error("libnetwork_request_failed", method=method, error=str(exc))
            return _reply({"Err": f"{method}: {exc}"}, 500)

    return serve


def add_routes(app: web.Application, driver: LibnetworkDriver) -> None:
    """Serve ``driver`` on ``app``: ``/Plugin.Activate`` and the ``/IpamDriver.*`` methods."""

    def request_pool(body: Body) -> Mapping[str, Any]:
        grant = driver.request_pool(
            address_space=_string(body, "AddressSpace"),
            pool=_string(body, "Pool"),
            sub_pool=_string(body, "SubPool"),
            options=_options(body),
            v6=_bool(body, "V6"),
        )
        return {"PoolID": grant.pool_id, "Pool": grant.pool, "Data": grant.data}

    def release_pool(body: Body) -> Mapping[str, Any]:
        driver.release_pool(_required(body, "PoolID"))
        return {}

    def request_address(body: Body) -> Mapping[str, Any]:
        address, data = driver.request_address(
            _required(body, "PoolID"), _string(body, "Address"), _options(body)
        )
        return {"Address": address, "Data": data}

    def release_address(body: Body) -> Mapping[str, Any]:
        driver.release_address(_required(body, "PoolID"), _required(body, "Address"))
        return {}

    routes: Iterable[tuple[str, Handler, bool]] = (
        ("Plugin.Activate", lambda _: {"Implements": ["IpamDriver"]}, False),
        ("IpamDriver.GetCapabilities", lambda _: driver.capabilities(), False),
        ("IpamDriver.GetDefaultAddressSpaces", lambda _: driver.default_address_spaces(), False),
        ("IpamDriver.RequestPool", request_pool, True),
        ("IpamDriver.ReleasePool", release_pool, True),
        ("IpamDriver.RequestAddress", request_address, True),
        ("IpamDriver.ReleaseAddress", release_address, True),
        ("IpamDriver.DiscoverNew", lambda _: {}, False),
        ("IpamDriver.DiscoverDelete", lambda _: {}, False),
    )
    for method, handler, payload in routes:
        app.router.add_post(f"/{method}", _endpoint(method, handler, payload=payload))
