"""The agent's JSON API for the ``eni-ipam-cni`` plugin (served on the agent's unix socket).

Routes (bodies are JSON objects; field names as the CNI spec spells them):

* ``POST /v1/cni/add`` ``{containerID, ifname, netns?, pool?, family?, ips?, network?, podUID?,
  podNamespace?, podName?}`` → 200 ``{owner, pool, existing, ips: [{address, prefixLength, gateway,
  family, pool, interfaceID, subnetID}]}``. ``family``: ``ipv4``, ``ipv6``, ``dual`` (both, or
  nothing), or absent (IPv4; IPv6 on a node with IPv4 disabled). ``ips``: the addresses the
  container asks for (CNI_ARGS ``IP=``, the ``ips`` capability): exactly those are handed out, or
  the request fails — ``not_in_pool`` for an address the pool does not offer, ``already_allocated``
  for one another owner holds; never another address instead. ``network``, ``netns`` and the pod
  fields are recorded with the allocation: ``GC`` is per network, and the sweep releases an owner
  whose pod or network namespace is gone.
* ``POST /v1/cni/del`` ``{containerID, ifname}`` → 200 ``{owner, released: [...]}``; unknown is success.
* ``POST /v1/cni/check`` ``{containerID, ifname, ips?: [address, ...]}`` → 200 ``{owner, ips}`` when the
  container still holds addresses, every one of them is among ``ips`` (the previous result), and none of
  ``ips`` is held by someone else.
* ``POST /v1/cni/gc`` ``{network, pool?, validAttachments: [{containerID, ifname}]}`` → 200
  ``{released: [...], kept}``: every CNI allocation recorded for ``network`` (in ``pool`` when given)
  whose attachment is not listed is released. Allocations with no recorded network are left alone.
* ``POST /v1/cni/status`` ``{pool?}`` → 200 ``{ready: true, available}`` when an ADD can be served;
  503 ``not_ready`` (state not restored, or the node's pool not seen yet), ``pool_withheld`` (every
  address left is withheld while a source that may hold it is read; the message says which) or
  ``pool_exhausted``.
* ``GET /v1/status`` → ``{ipv4: {address: owner}, ipv6: {...}, status, pools: {name: {capacity, addresses}},
  allocations: [...]}``.

Errors are ``{"error": {"code", "msg", "field"}}``: 400 ``bad_request`` naming the field (no state
change), 404 ``unknown_pool`` / ``not_allocated``, 409 ``family_disabled`` / ``family_not_in_pool`` /
``not_in_pool`` / ``already_allocated`` / ``owner_conflict`` / ``address_mismatch`` /
``allocator_error``, 503 ``pool_exhausted`` and ``pool_withheld`` (the plugin reports "try again
later"). A 409 is for good: asking again cannot change it (a family the node disables or the pool
holds no address of names the pool and the family); a 503 may pass (an empty pool fills, an
exhausted one frees, a withheld one is released once its source is read). The plugin's table of
these codes is :data:`eni_ipam.agent.cni.AGENT_ERROR_CODES`.

Invariants: the owner of a CNI allocation is ``cni:<containerID>:<ifname>``; ADD is idempotent (the
same owner gets the same addresses back), DEL is idempotent; every request is validated completely
before the allocator is touched, and a handler never awaits between reading and changing the
allocator, so requests are atomic with respect to each other.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import structlog
from aiohttp import web

from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.cni import FAMILIES, HugeInteger, container_id_problem, ifname_problem, load_json
from eni_ipam.agent.datapath.errors import DatapathError
from eni_ipam.agent.errors import (
    AllocatorError,
    AlreadyAllocated,
    FamilyDisabled,
    FamilyNotInPool,
    NotAllocated,
    NotInPool,
    PoolExhausted,
    PoolWithheld,
    StateNotWritten,
    UnknownPool,
)
from eni_ipam.agent.members import FAMILY_LABEL
from eni_ipam.agent.runtime import CNI_PREFIX, cni_owner
from eni_ipam.agent.types import DEFAULT_POOL, Allocation, Attachment, Family

log = structlog.get_logger("eni_ipam.agent.api")

ERRORS: tuple[tuple[type[AllocatorError], int, str], ...] = (
    (PoolWithheld, 503, "pool_withheld"),
    (PoolExhausted, 503, "pool_exhausted"),
    (UnknownPool, 404, "unknown_pool"),
    (NotAllocated, 404, "not_allocated"),
    (FamilyDisabled, 409, "family_disabled"),
    (FamilyNotInPool, 409, "family_not_in_pool"),
    (NotInPool, 409, "not_in_pool"),
    (AlreadyAllocated, 409, "already_allocated"),
    (StateNotWritten, 503, "state_unwritable"),
    (AllocatorError, 409, "allocator_error"),
)
"""Allocator exception → (HTTP status, error code); the first matching class wins."""

ERROR_CODES = frozenset(
    {"bad_request", "owner_conflict", "address_mismatch", "not_ready", *(code for _, _, code in ERRORS)}
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
        body = await request.json(loads=load_json)
    except HugeInteger as exc:
        raise _bad(exc.field, exc.reason) from None
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
    """The families an ADD asks for: None = none named (IPv4, or IPv6 where IPv4 is disabled)."""
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


def _attachment(body: Mapping[str, Any]) -> Attachment:
    fields: dict[str, str] = {}
    for field in ("network", "netns", "podUID", "podNamespace", "podName"):
        value = body.get(field)
        if value is not None and not isinstance(value, str):
            raise _bad(field, f"expected a string, got {type(value).__name__}")
        if value is not None and len(value) > MAX_FIELD:
            raise _bad(field, f"longer than {MAX_FIELD} characters")
        fields[field] = value or ""
    # podman passes K8S_POD_NAME (the container's name) without a namespace: no pod, then.
    pod = (
        f"{fields['podNamespace']}/{fields['podName']}"
        if fields["podNamespace"] and fields["podName"]
        else ""
    )
    return Attachment(network=fields["network"], netns=fields["netns"], pod_uid=fields["podUID"], pod=pod)


MAX_FIELD = 4096
"""Longest network name, namespace path or pod field recorded (they are saved with every change)."""


def _valid_attachments(body: Mapping[str, Any]) -> set[str]:
    raw = body.get("validAttachments")
    if not isinstance(raw, list):
        raise _bad("validAttachments", "required: a list of {containerID, ifname}")
    owners: set[str] = set()
    for n, item in enumerate(raw):
        if not isinstance(item, dict):
            raise _bad(f"validAttachments[{n}]", "expected an object with containerID and ifname")
        try:
            owners.add(_owner(item))
        except ApiError as exc:
            raise _bad(f"validAttachments[{n}].{exc.field}", exc.msg.split(": ", 1)[-1]) from None
    return owners


# --- the operations (synchronous: no await between reading and changing the allocator) ---------


def cni_add(
    allocator: Allocator,
    owner: str,
    pool: str,
    families: tuple[Family, ...] | None,
    *,
    requested: list[str] | None = None,
    attachment: Attachment | None = None,
) -> tuple[list[Allocation], bool]:
    """The owner's addresses in ``pool``, allocating what is missing; (allocations, all existed)."""
    attachment = attachment or Attachment()
    held = allocator.allocations(owner=owner)
    elsewhere = sorted({a.pool for a in held if a.pool != pool})
    if elsewhere:
        raise ApiError(
            409,
            "owner_conflict",
            f"{owner} holds addresses in pool {', '.join(elsewhere)}: DEL it before an ADD to pool {pool}",
            "pool",
        )
    if requested:
        return _add_requested(allocator, owner, pool, families, requested, held, attachment)
    if held:
        held = allocator.annotate(owner, attachment)  # a restarted container has a new namespace
    if families is None:
        if held:
            return held, True
        # No family asked: IPv4, or IPv6 on a node without IPv4. Both only when asked (dual): an
        # IPv4-only runtime on a node that also has IPv6 enabled must not depend on the IPv6 pool.
        default = Family.IPV4 if allocator.enabled(Family.IPV4) else Family.IPV6
        _check_families(allocator, pool, [default], asked=f"{default} (the default)")
        v4, v6 = allocator.allocate_next(owner, pool, default, attachment=attachment)
        return [a for a in (v4, v6) if a is not None], False
    missing = [f for f in families if not any(a.family == f for a in held)]
    if not missing:
        return [a for a in held if a.family in families], True
    _check_families(allocator, pool, missing, asked="dual" if len(families) > 1 else str(families[0]))
    # One allocator call: all or nothing (both families missing, dual: both enabled, checked above).
    v4, v6 = allocator.allocate_next(
        owner, pool, missing[0] if len(missing) == 1 else None, attachment=attachment
    )
    made = [a for a in (v4, v6) if a is not None]
    chosen = [a for a in held if a.family in families] + made
    return sorted(chosen, key=lambda a: a.family != Family.IPV4), False


def _check_families(allocator: Allocator, pool: str, families: list[Family], *, asked: str) -> None:
    """Refuse, for good, an ADD no retry can serve: a family disabled on this node (FamilyDisabled),
    or one the pool holds no address of while it holds the other's (FamilyNotInPool: a static pool
    of one family, a node's pool without an IPv6 block). Each message names the pool and the family
    asked for. An empty pool is not judged: its addresses may not be known yet (the node's ENIPool
    not read, none assigned yet), and that is worth waiting for (PoolExhausted)."""
    for family in families:
        if not allocator.enabled(family):
            raise FamilyDisabled(
                f"family {asked} needs an {FAMILY_LABEL[family]} address from pool {pool}, and "
                f"{FAMILY_LABEL[family]} is disabled on this node ({family}: false in the agent's "
                "configuration)",
                pool=pool,
            )
    held = allocator.families(pool)
    absent = [f for f in families if f not in held]
    if held and absent:
        has = " and ".join(FAMILY_LABEL[f] for f in sorted(held))
        raise FamilyNotInPool(
            f"family {asked} needs an {FAMILY_LABEL[absent[0]]} address, and pool {pool} has none (its "
            f"addresses are {has}): ask for the pool's family (ipam.family), or give the pool "
            f"{FAMILY_LABEL[absent[0]]} addresses",
            pool=pool,
        )


def _add_requested(
    allocator: Allocator,
    owner: str,
    pool: str,
    families: tuple[Family, ...] | None,
    requested: list[str],
    held: list[Allocation],
    attachment: Attachment,
) -> tuple[list[Allocation], bool]:
    """Exactly the requested addresses, or an error: never another address instead."""
    asked = {Family.of(a) for a in requested}
    if len(asked) != len(requested):
        raise _bad("ips", "at most one address per family")
    if families is not None and not asked <= set(families):
        raise _bad("ips", f"an address of a family the request does not ask for ({', '.join(families)})")
    others = [a.address for a in held if a.address not in requested]
    if others:
        raise ApiError(
            409,
            "address_mismatch",
            f"{owner} already holds {', '.join(others)}, not the requested {', '.join(requested)}: "
            "DEL it first",
            "ips",
        )
    existed = len(held) == len(requested)
    return allocator.allocate_addresses(requested, owner, pool, attachment=attachment), existed


def cni_gc(allocator: Allocator, network: str, pool: str | None, valid: set[str]) -> list[Allocation]:
    """Release the CNI allocations of ``network`` whose owner is not among ``valid``."""
    stale = sorted(
        {
            a.owner
            for a in allocator.allocations(pool=pool)
            if a.owner.startswith(CNI_PREFIX) and a.network == network and a.owner not in valid
        }
    )
    released: list[Allocation] = []
    for owner in stale:
        released.extend(allocator.release_owner(owner))
    return released


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


class PodRoutes(Protocol):
    """What the API asks of the node datapath for the pods it serves
    (:class:`eni_ipam.agent.datapath.pods.PodRoutes`): every method but ``present`` may raise
    :class:`~eni_ipam.agent.datapath.errors.DatapathError`."""

    def present(self, allocation: Allocation) -> Allocation: ...

    async def added(self, allocations: Sequence[Allocation], *, existing: bool = False) -> None: ...

    async def released(self, allocations: Sequence[Allocation]) -> None: ...

    async def missing(self, allocations: Sequence[Allocation]) -> str: ...


def add_routes(
    app: web.Application,
    allocator: Allocator,
    ready: Callable[[], str] | None = None,
    pending: Callable[[str], str] | None = None,
    *,
    routes: PodRoutes | None = None,
) -> None:
    """Serve the CNI plugin's API from ``allocator`` on ``app``. ``ready()`` says why an ADD cannot be
    served now (empty: it can), for ``/v1/cni/status``. ``pending(pool)`` says why an ADD to ``pool``
    must wait (empty: it need not): its members are not known yet since the agent started, so an
    empty pool would be a wrong "exhausted". Such an ADD is answered 503 ``not_ready``, which the
    plugin sends again for a while (a restart's last step, reading the node's pool). ``routes``: the
    node datapath, told of every address an ADD hands out (before the answer) and every one released."""

    def shown(allocation: Allocation) -> dict[str, Any]:
        return allocation_json(routes.present(allocation) if routes is not None else allocation)

    async def forget(allocations: Sequence[Allocation], event: str) -> None:
        """The datapath told of released addresses; a failure is left to its next reconcile."""
        if routes is None or not allocations:
            return
        try:
            await routes.released(allocations)
        except DatapathError as exc:
            log.warning(event, addresses=[a.address for a in allocations], error=str(exc))

    async def add(request: web.Request) -> web.Response:
        try:
            body = await _body(request)
            owner = _owner(body)
            pool = _optional_string(body, "pool", DEFAULT_POOL)
            families = _families(body)
            requested = _addresses(body)
            attachment = _attachment(body)
            if pending is not None and (why := pending(pool)):
                raise ApiError(503, "not_ready", why, "pool")
            try:
                allocations, existing = cni_add(
                    allocator, owner, pool, families, requested=requested, attachment=attachment
                )
            except AllocatorError as exc:
                raise _from_allocator(exc) from None
        except ApiError as exc:
            log.warning("cni_add_refused", code=exc.code, field=exc.field, error=exc.msg)
            return exc.response()
        if routes is not None:
            try:
                await routes.added(allocations, existing=existing)
            except DatapathError as exc:
                if not existing:  # undone: an address whose packets would be dropped is not handed out
                    for allocation in allocations:
                        with contextlib.suppress(AllocatorError):
                            allocator.release(allocation.address, allocation.pool, quarantine=False)
                log.error("cni_add_failed", owner=owner, error=str(exc))
                return ApiError(
                    503, "datapath_failed", f"the node's routing for the pod failed: {exc}"
                ).response()
        addresses = [a.address for a in allocations]
        log.info(
            "cni_add",
            owner=owner,
            pool=pool,
            addresses=addresses,
            existing=existing,
            requested=bool(requested),
            **{k: v for k, v in attachment.fields().items() if v},
        )
        return web.json_response(
            {
                "owner": owner,
                "pool": pool,
                "existing": existing,
                "ips": [shown(a) for a in allocations],
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
        await forget(released, "cni_del_rules_left")
        log.info("cni_del", owner=owner, released=[a.address for a in released])
        return web.json_response({"owner": owner, "released": [shown(a) for a in released]})

    async def check(request: web.Request) -> web.Response:
        try:
            body = await _body(request)
            owner = _owner(body)
            held = cni_check(allocator, owner, _addresses(body))
            lacking = await routes.missing(held) if routes is not None else ""
            if lacking:
                raise ApiError(409, "routes_missing", f"the node's routing lacks {lacking}", "ips")
        except ApiError as exc:
            log.warning("cni_check_failed", code=exc.code, field=exc.field, error=exc.msg)
            return exc.response()
        except DatapathError as exc:
            return ApiError(503, "datapath_failed", f"the node's routing cannot be read: {exc}").response()
        return web.json_response({"owner": owner, "ips": [shown(a) for a in held]})

    async def gc(request: web.Request) -> web.Response:
        try:
            body = await _body(request)
            network = _string(body, "network")
            pool = _optional_string(body, "pool", "") or None
            valid = _valid_attachments(body)
        except ApiError as exc:
            log.warning("cni_gc_refused", code=exc.code, field=exc.field, error=exc.msg)
            return exc.response()
        try:
            released = cni_gc(allocator, network, pool, valid)
        except AllocatorError as exc:
            error = _from_allocator(exc)
            log.error("cni_gc_failed", network=network, code=error.code, error=error.msg)
            return error.response()
        kept = sum(1 for a in allocator.allocations() if a.network == network)
        log.info("cni_gc", network=network, released=[a.address for a in released], kept=kept)
        return web.json_response({"released": [allocation_json(a) for a in released], "kept": kept})

    async def cni_status(request: web.Request) -> web.Response:
        try:
            body = await _body(request) if request.can_read_body else {}
            pool = _optional_string(body, "pool", DEFAULT_POOL)
        except ApiError as exc:
            return exc.response()
        why = ready() if ready is not None else ""
        if why:
            return ApiError(503, "not_ready", why).response()
        try:
            free = allocator.free(pool)
        except AllocatorError as exc:
            return _from_allocator(exc).response()
        if free == 0:
            if waiting := allocator.withholding(pool):
                said = "; ".join(f"{n} withheld {why}" for why, n in sorted(waiting.items()))
                msg = f"no address of pool {pool} can be handed out now: {said}; try again later"
                return ApiError(503, "pool_withheld", msg, "pool").response()
            return ApiError(503, "pool_exhausted", f"no free address in pool {pool}", "pool").response()
        return web.json_response({"ready": True, "available": free})

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
    app.router.add_post("/v1/cni/gc", gc)
    app.router.add_post("/v1/cni/status", cni_status)
    app.router.add_get("/v1/status", status)
