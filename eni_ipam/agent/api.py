"""The agent's JSON API for the ``eni-ipam-cni`` plugin (served on the agent's unix socket).

Routes (bodies are JSON objects; field names as the CNI spec spells them):

* ``POST /v1/cni/add`` ``{containerID, ifname, netns?, pool?, family?}`` → 200
  ``{owner, pool, existing, ips: [{address, prefixLength, gateway, family, pool, interfaceID, subnetID}]}``.
  ``family``: ``ipv4``, ``ipv6``, ``dual`` (both, or nothing), or absent (every enabled family).
* ``POST /v1/cni/del`` ``{containerID, ifname}`` → 200 ``{owner, released: [...]}``; unknown is success.
* ``POST /v1/cni/check`` ``{containerID, ifname, ips?: [address, ...]}`` → 200 ``{owner, ips}`` when the
  container still holds addresses, every one of them is among ``ips`` (the previous result), and none of
  ``ips`` is held by someone else.
* ``GET /v1/status`` → ``{ipv4: {address: owner}, ipv6: {...}, status, pools: {name: {capacity, addresses}},
  allocations: [...]}``.

Errors are ``{"error": {"code", "msg", "field"}}``: 400 ``bad_request`` naming the field (no state
change), 404 ``unknown_pool`` / ``not_allocated``, 409 ``family_disabled`` / ``not_in_pool`` /
``already_allocated`` / ``owner_conflict`` / ``address_mismatch`` / ``allocator_error``, 503
``pool_exhausted`` (the plugin reports "try again later"). The plugin's table of these codes is
:data:`eni_ipam.agent.cni.AGENT_ERROR_CODES`.

Invariants: the owner of a CNI allocation is ``cni:<containerID>:<ifname>``; ADD is idempotent (the
same owner gets the same addresses back), DEL is idempotent; every request is validated completely
before the allocator is touched, and a handler never awaits between reading and changing the
allocator, so requests are atomic with respect to each other.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from aiohttp import web

from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.cni import FAMILIES, container_id_problem, ifname_problem
from eni_ipam.agent.runtime import cni_owner
from eni_ipam.agent.types import DEFAULT_POOL, Allocation, Family
from eni_ipam.core.errors import (
    AllocatorError,
    AlreadyAllocated,
    FamilyDisabled,
    NotAllocated,
    NotInPool,
    PoolExhausted,
    UnknownPool,
)

log = structlog.get_logger("eni_ipam.agent.api")

ERRORS: tuple[tuple[type[AllocatorError], int, str], ...] = (
    (PoolExhausted, 503, "pool_exhausted"),
    (UnknownPool, 404, "unknown_pool"),
    (NotAllocated, 404, "not_allocated"),
    (FamilyDisabled, 409, "family_disabled"),
    (NotInPool, 409, "not_in_pool"),
    (AlreadyAllocated, 409, "already_allocated"),
    (AllocatorError, 409, "allocator_error"),
)
"""Allocator exception → (HTTP status, error code); the first matching class wins."""

ERROR_CODES = frozenset(
    {"bad_request", "owner_conflict", "address_mismatch", *(code for _, _, code in ERRORS)}
)
"""Every ``error.code`` this API answers with."""


class ApiError(Exception):
    def __init__(self, status: int, code: str, msg: str, field: str = "") -> None:
        super().__init__(msg)
        self.status = status
        self.code = code
        self.msg = msg
        self.field = field

    def response(self) -> web.Response:
        body = {"error": {"code": self.code, "msg": self.msg, "field": self.field}}
        return web.json_response(body, status=self.status)


def _bad(field: str, msg: str) -> ApiError:
    return ApiError(400, "bad_request", f"{field}: {msg}" if field else msg, field)


def _from_allocator(exc: AllocatorError) -> ApiError:
    for cls, status, code in ERRORS:
        if isinstance(exc, cls):
            return ApiError(status, code, str(exc), "pool" if isinstance(exc, UnknownPool) else "")
    raise AssertionError("unreachable: AllocatorError is the last entry")  # pragma: no cover


def allocation_json(allocation: Allocation) -> dict[str, Any]:
    return {
        "address": allocation.address,
        "prefixLength": allocation.prefix_length,
        "gateway": allocation.gateway,
        "family": str(allocation.family),
        "pool": allocation.pool,
        "interfaceID": allocation.interface_id,
        "subnetID": allocation.subnet_id,
    }


# --- request parsing (pure; raises ApiError 400 naming the field) ------------------------------


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json(loads=json.loads)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise _bad("", f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _bad("", f"the body must be a JSON object, got {type(body).__name__}")
    return body


def _string(body: Mapping[str, Any], field: str, *, problem: Callable[[str], str] | None = None) -> str:
    if field not in body:
        raise _bad(field, "required")
    value = body[field]
    if not isinstance(value, str):
        raise _bad(field, f"expected a string, got {type(value).__name__}")
    why = problem(value) if problem else ("must not be empty" if not value else "")
    if why:
        raise _bad(field, why)
    return value


def _optional_string(body: Mapping[str, Any], field: str, default: str) -> str:
    if body.get(field) is None:
        return default
    return _string(body, field)


def _owner(body: Mapping[str, Any]) -> str:
    container_id = _string(body, "containerID", problem=container_id_problem)
    ifname = _string(body, "ifname", problem=ifname_problem)
    return cni_owner(container_id, ifname)


def _families(body: Mapping[str, Any]) -> tuple[Family, ...] | None:
    """The families an ADD asks for: None = every enabled family (the allocator decides)."""
    raw = body.get("family")
    if raw is None:
        return None
    if raw not in FAMILIES:
        raise _bad("family", f"expected one of {', '.join(FAMILIES)}, got {raw!r}")
    return (Family.IPV4, Family.IPV6) if raw == "dual" else (Family(raw),)


def _addresses(body: Mapping[str, Any]) -> list[str] | None:
    raw = body.get("ips")
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
        raise _bad("ips", "expected a list of addresses")
    canonical: list[str] = []
    for n, address in enumerate(raw):
        try:
            canonical.append(str(ipaddress.ip_address(address)))
        except ValueError:
            raise _bad(f"ips[{n}]", f"expected an address, got {address!r}") from None
    return canonical


# --- the operations (synchronous: no await between reading and changing the allocator) ---------


def cni_add(
    allocator: Allocator, owner: str, pool: str, families: tuple[Family, ...] | None
) -> tuple[list[Allocation], bool]:
    """The owner's addresses in ``pool``, allocating what is missing; (allocations, all existed)."""
    held = allocator.allocations(owner=owner)
    elsewhere = sorted({a.pool for a in held if a.pool != pool})
    if elsewhere:
        raise ApiError(
            409,
            "owner_conflict",
            f"{owner} holds addresses in pool {', '.join(elsewhere)}: DEL it before an ADD to pool {pool}",
            "pool",
        )
    if families is None:
        if held:
            return held, True
        v4, v6 = allocator.allocate_next(owner, pool)
        return [a for a in (v4, v6) if a is not None], False
    missing = [f for f in families if not any(a.family == f for a in held)]
    if not missing:
        return [a for a in held if a.family in families], True
    # One allocator call: all or nothing. Both families missing (dual): every enabled family, and
    # undo when one of the two is disabled on this node.
    v4, v6 = allocator.allocate_next(owner, pool, missing[0] if len(missing) == 1 else None)
    made = [a for a in (v4, v6) if a is not None]
    absent = [f for f in missing if not any(a.family == f for a in made)]
    if absent:
        for allocation in made:
            allocator.release(allocation.address, allocation.pool)
        label = "IPv6" if absent[0] == Family.IPV6 else "IPv4"
        raise FamilyDisabled(f"{label} allocation disabled (family dual needs both)", pool=pool)
    chosen = [a for a in held if a.family in families] + made
    return sorted(chosen, key=lambda a: a.family != Family.IPV4), False


def cni_check(allocator: Allocator, owner: str, addresses: list[str] | None) -> list[Allocation]:
    held = allocator.allocations(owner=owner)
    if not held:
        raise ApiError(404, "not_allocated", f"{owner} holds no address")
    if addresses is not None:
        listed = set(addresses)
        lost = [a.address for a in held if a.address not in listed]
        if lost:
            raise ApiError(
                409,
                "address_mismatch",
                f"{owner} holds {', '.join(lost)}, which the previous result does not list",
                "ips",
            )
        mine = {a.address for a in held}
        owners = {a.address: a.owner for a in allocator.allocations() if a.address in listed - mine}
        foreign = sorted(
            f"{address} (held by {owners[address]})" if address in owners else f"{address} (held by nobody)"
            for address in listed - mine
        )
        if foreign:  # every listed address must still be the container's own
            raise ApiError(409, "address_mismatch", f"the previous result lists {', '.join(foreign)}", "ips")
    return held


def add_routes(app: web.Application, allocator: Allocator) -> None:
    """Serve the CNI plugin's API from ``allocator`` on ``app``."""

    async def add(request: web.Request) -> web.Response:
        try:
            body = await _body(request)
            owner = _owner(body)
            pool = _optional_string(body, "pool", DEFAULT_POOL)
            families = _families(body)
            netns = body.get("netns")
            if netns is not None and not isinstance(netns, str):
                raise _bad("netns", f"expected a string, got {type(netns).__name__}")
            try:
                allocations, existing = cni_add(allocator, owner, pool, families)
            except AllocatorError as exc:
                raise _from_allocator(exc) from None
        except ApiError as exc:
            log.warning("cni_add_refused", code=exc.code, field=exc.field, error=exc.msg)
            return exc.response()
        addresses = [a.address for a in allocations]
        log.info("cni_add", owner=owner, pool=pool, addresses=addresses, existing=existing, netns=netns)
        return web.json_response(
            {
                "owner": owner,
                "pool": pool,
                "existing": existing,
                "ips": [allocation_json(a) for a in allocations],
            }
        )

    async def delete(request: web.Request) -> web.Response:
        try:
            body = await _body(request)
            owner = _owner(body)
        except ApiError as exc:
            log.warning("cni_del_refused", code=exc.code, field=exc.field, error=exc.msg)
            return exc.response()
        try:
            released = allocator.release_owner(owner)
        except AllocatorError as exc:
            error = _from_allocator(exc)
            log.error("cni_del_failed", owner=owner, code=error.code, error=error.msg)
            return error.response()
        log.info("cni_del", owner=owner, released=[a.address for a in released])
        return web.json_response({"owner": owner, "released": [allocation_json(a) for a in released]})

    async def check(request: web.Request) -> web.Response:
        try:
            body = await _body(request)
            owner = _owner(body)
            held = cni_check(allocator, owner, _addresses(body))
        except ApiError as exc:
            log.warning("cni_check_failed", code=exc.code, field=exc.field, error=exc.msg)
            return exc.response()
        return web.json_response({"owner": owner, "ips": [allocation_json(a) for a in held]})

    async def status(_: web.Request) -> web.Response:
        v4, v6, line = allocator.dump()
        pools = {
            name: {
                "capacity": allocator.capacity(name),
                "addresses": [p.address for p in allocator.pool_addresses(name)],
            }
            for name in allocator.pools()
        }
        allocations = [{**allocation_json(a), "owner": a.owner} for a in allocator.allocations()]
        return web.json_response(
            {"ipv4": v4, "ipv6": v6, "status": line, "pools": pools, "allocations": allocations}
        )

    app.router.add_post("/v1/cni/add", add)
    app.router.add_post("/v1/cni/del", delete)
    app.router.add_post("/v1/cni/check", check)
    app.router.add_get("/v1/status", status)
