"""The central pool of ready interfaces: made ahead of nodes, so a joining node's first new interface
is one attach (docs/aws.md, "Burst scale-up: ready interfaces"; decision 0051).

A ready interface is created detached, in a (subnet, security groups) that nodes' first new
interfaces use, carrying the addresses (or /28 prefixes) the planner gives such an interface
(:func:`~eni_ipam.core.planner.first_new_interface`), and tagged with the cluster's ownership tags
and the pool tag (:func:`~eni_ipam.core.model.ready_interface_tags`). A node whose plan creates an
interface takes a matching one (:meth:`ReadyPool.take`) and attaches it instead.

Invariants:

* **Nothing is lost.** The cloud is the record: every round starts from a listing of the detached
  interfaces carrying the pool tag (at most :data:`LISTING_INTERVAL` old), so an interface whose
  create answer was lost, or that a previous process made, is found and kept. A failed attach gives
  the interface back (:meth:`ReadyPool.give_back`); an interface found attached is its instance's,
  like any other, and the pool never lists it again.
* **Nodes first.** Refills wait while any node waits for addresses (``waiting``), and go one at a
  time through the provider, so through the same per-operation bucket as every create.
* **Bounded.** At most ``ready_interfaces_per_subnet`` per key and ``ready_interfaces_max`` in all;
  no refill while the interfaces the controller knows of (the cluster's instances' and the ready
  ones) would reach ``region_interface_quota``; a quota refusal stops refills until the next round;
  no refill that would take a subnet's reserve (``subnet_reserve``, the pods').
* **Surplus goes.** More than the targets, an interface with fewer addresses than its key now asks
  for, a key no node has asked for within :data:`DEMAND_MEMORY`, or the pool disabled: deleted
  (``detach=False``: an interface attached meanwhile survives), one call each, through the delete
  bucket.
* Garbage collection never collects a ready interface (:mod:`eni_ipam.core.gc` skips the pool tag).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import uuid
from collections.abc import Callable, Iterable, Sequence

import structlog

from eni_ipam.core import errors
from eni_ipam.core.clock import Clock
from eni_ipam.core.model import (
    PREFIX_SIZE,
    READY,
    TAG_POOL,
    CreateInterface,
    InstanceLimits,
    Interface,
    ownership_tags,
    ready_interface_tags,
)
from eni_ipam.core.observe import ReadyPoolObserver
from eni_ipam.core.provider import Provider
from eni_ipam.core.settings import Settings
from eni_ipam.core.view import CloudView

log = structlog.get_logger("eni_ipam.core.readypool")

ROUND_INTERVAL = 5.0
"""Seconds between two rounds (refill, surplus) when nothing wakes the pool sooner."""
LISTING_INTERVAL = 60.0
"""Seconds a listing of the ready interfaces is trusted before a round lists again: what the pool
learns of the cloud behind its back (a lost create answer, an interface taken by hand) within a
minute, for one DescribeNetworkInterfaces a minute."""
TAKEN_GRACE = 120.0
"""Seconds an interface handed to a node is not believed to be ready again, whatever a listing says:
a listing that raced with the attach may still show it detached."""
DEMAND_MEMORY = 3600.0
"""Seconds a (subnet, security groups) stays wanted after the last node that would take from it
(a node group scaled to zero for a lunch break keeps its ready interfaces)."""


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class PoolKey:
    """What makes ready interfaces interchangeable: where they are, and in which unit they hold."""

    subnet_id: str
    security_groups: tuple[str, ...]
    """Sorted."""
    prefixes: bool

    @classmethod
    def of_interface(cls, iface: Interface) -> PoolKey:
        return cls(iface.subnet_id, tuple(sorted(iface.security_groups)), bool(iface.prefixes))

    @classmethod
    def of_request(cls, request: CreateInterface) -> PoolKey:
        return cls(request.subnet_id, tuple(sorted(request.security_groups)), request.prefixes)


@dataclasses.dataclass(frozen=True, slots=True)
class Round:
    """What one round did."""

    created: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    """Keys (``subnet``) whose refill failed."""


class ReadyPool:
    """Ready interfaces by :class:`PoolKey`; see the module's invariants."""

    def __init__(
        self,
        provider: Provider,
        *,
        settings: Settings,
        view: CloudView,
        clock: Clock,
        metrics: ReadyPoolObserver,
        demand: Callable[[], Iterable[CreateInterface]],
        waiting: Callable[[], bool],
        known_interfaces: Callable[[], int],
    ) -> None:
        """Args:
        demand: the first new interface of every node as a fresh node would get it (the manager
            derives it with :func:`~eni_ipam.core.planner.first_new_interface`).
        waiting: whether a node waits for addresses now (refills wait behind it).
        known_interfaces: interfaces of the cluster's instances (what counts against the quota
            besides the ready ones).
        """
        self.provider = provider
        self.settings = settings
        self.enabled = settings.ready_interfaces_enabled
        self.view = view
        self.clock = clock
        self.metrics = metrics
        self.demand = demand
        self.waiting = waiting
        self.known_interfaces = known_interfaces
        self.tags = ready_interface_tags(cluster_name=settings.cluster_name, extra=settings.interface_tags)
        self.ready: dict[PoolKey, dict[str, Interface]] = {}
        """Detached ready interfaces, by key and id."""
        self.sizes: dict[PoolKey, int] = {}
        """Slots (addresses or prefixes) a ready interface of each wanted key carries."""
        self._wanted_at: dict[PoolKey, float] = {}
        self._taken: dict[str, float] = {}
        """Interfaces handed to a node, and when."""
        self._listed_at: float | None = None
        self._serial = itertools.count()
        self._nonce = uuid.uuid4().hex
        """This pool's own: a token is never one an earlier process sent (EC2 would answer it with
        the interface that create made, which a node may have taken since)."""
        self._tokens: dict[PoolKey, str] = {}
        """The idempotency token of a key's refill that has not succeeded yet (a lost answer is
        retried with the same token, and the cloud returns what it made)."""
        self._published: set[str] = set()
        self._full: set[PoolKey] = set()
        """Keys whose subnet had no room left above its reserve at the last look."""

    # -- what nodes see ---------------------------------------------------------------------------

    def take(self, request: CreateInterface, *, limits: InstanceLimits, most: int = 0) -> Interface | None:
        """A ready interface for ``request`` (its subnet, groups and unit), carrying at least
        ``request.count`` slots and no more than the instance type allows; the fewest such first.
        ``most``: the addresses the node may take at most (0: no bound). None when none fits."""
        if not self.enabled or request.ipv6_prefixes:
            return None
        found = self.ready.get(PoolKey.of_request(request))
        if not found:
            return None
        fitting = [
            i
            for i in found.values()
            if request.count <= i.slots_used <= limits.slots_per_interface
            and (not most or i.pool_size <= most)
        ]
        if not fitting:
            return None
        chosen = min(fitting, key=lambda i: (i.slots_used, i.id))
        del found[chosen.id]
        self._taken[chosen.id] = self.clock.monotonic()
        self._publish()
        return chosen

    def give_back(self, iface: Interface) -> None:
        """An attach failed: the interface is still detached and ready."""
        self._taken.pop(iface.id, None)
        if self.enabled:
            self.ready.setdefault(PoolKey.of_interface(iface), {})[iface.id] = iface
            self._publish()

    def taken(self, iface: Interface, *, ok: bool, outcome: str = "attached") -> None:
        """A take's end: attached (``ok``), or failed with ``outcome`` (the error's code)."""
        self.metrics.ready_interface_taken(subnet=iface.subnet_id, outcome=outcome if not ok else "attached")

    def count(self) -> int:
        return sum(len(found) for found in self.ready.values())

    # -- rounds -----------------------------------------------------------------------------------

    async def run(self) -> None:
        """Rounds every :data:`ROUND_INTERVAL` until cancelled or fenced; a failed round is logged."""
        while True:
            try:
                await self.run_once()
            except errors.Lapsed:
                log.info(
                    "ready_pool_round_skipped", reason="leadership is not proven until the lease is renewed"
                )
            except errors.Fenced:
                log.info("ready_pool_stopped", reason="mutations are stopped")
                return
            except errors.ProviderError as exc:
                log.warning("ready_pool_round_failed", error=str(exc))
            await self.clock.sleep(ROUND_INTERVAL)

    async def run_once(self) -> Round:
        """List when the last listing is stale, learn what nodes want, delete the surplus, refill.

        Raises:
            errors.ProviderError: the listing failed (nothing else was done).
        """
        now = self.clock.monotonic()
        if self._listed_at is None or now - self._listed_at >= LISTING_INTERVAL:
            await self.relist()
            self._learn(now)  # with the listing: every node's plan is looked at once a minute
        deleted = await self._delete_surplus(now)
        created, failed = await self._refill()
        return Round(tuple(created), tuple(deleted), tuple(failed))

    async def relist(self) -> None:
        """Replace what the pool holds with the cloud's detached interfaces carrying its tags (those
        handed to a node within :data:`TAKEN_GRACE` left out)."""
        now = self.clock.monotonic()
        wanted = {**ownership_tags(self.settings.cluster_name), TAG_POOL: READY}
        listed = await self.provider.list_detached_interfaces(tags=wanted)
        self._taken = {i: t for i, t in self._taken.items() if now - t < TAKEN_GRACE}
        ready: dict[PoolKey, dict[str, Interface]] = {}
        for iface in listed:
            if iface.id not in self._taken:
                ready.setdefault(PoolKey.of_interface(iface), {})[iface.id] = iface
        self.ready = ready
        self._listed_at = now
        self._publish()

    async def drain(self, listed: Sequence[Interface]) -> None:
        """Delete ready interfaces a listing found while the pool is disabled (garbage collection
        hands over those it skips, so a disabled pool costs no listing of its own)."""
        if self.enabled:
            return
        for iface in listed:
            await self._delete(iface, reason="pool disabled")

    def _learn(self, now: float) -> None:
        for request in self.demand():
            key = PoolKey.of_request(request)
            self._wanted_at[key] = now
            self.sizes[key] = max(self.sizes.get(key, 0), request.count)
        for key in self.ready:
            if key not in self._wanted_at and self.ready[key]:
                # Found in the cloud (a previous process's): wanted until nodes say otherwise.
                self._wanted_at[key] = now
                self.sizes.setdefault(key, min(i.slots_used for i in self.ready[key].values()))
        for key, at in list(self._wanted_at.items()):
            if now - at >= DEMAND_MEMORY:
                del self._wanted_at[key]
                self.sizes.pop(key, None)

    def _targets(self) -> dict[PoolKey, int]:
        """Ready interfaces wanted per key: ``ready_interfaces_per_subnet`` each, keys in order
        until ``ready_interfaces_max`` is spent."""
        if not self.enabled:
            return {}
        left = self.settings.ready_interfaces_max
        targets = {}
        for key in sorted(self.sizes):
            n = min(self.settings.ready_interfaces_per_subnet, left)
            targets[key] = n
            left -= n
        return targets

    async def _delete_surplus(self, now: float) -> list[str]:
        targets = self._targets()
        deleted = []
        for key in sorted(self.ready):
            found = self.ready[key]
            size = self.sizes.get(key, 0)
            # Too small for what the key asks now goes first, then the newest beyond the target.
            order = sorted(found.values(), key=lambda i: (i.slots_used >= size, -i.created_at, i.id))
            stale = [i for i in order if i.slots_used < size]
            extra = max(len(found) - len(stale) - targets.get(key, 0), 0)
            for iface in [*stale, *order[len(stale) : len(stale) + extra]]:
                if await self._delete(iface, reason="surplus"):
                    deleted.append(iface.id)
        return deleted

    async def _delete(self, iface: Interface, *, reason: str) -> bool:
        try:
            await self.provider.delete_interface(interface_id=iface.id, detach=False)
        except errors.NotFound:
            pass  # gone already
        except errors.Fenced:
            raise
        except errors.ProviderError as exc:
            log.warning("ready_interface_delete_failed", interface=iface.id, error=str(exc))
            return False
        found = self.ready.get(PoolKey.of_interface(iface))
        if found is not None:
            found.pop(iface.id, None)
        self.view.returned(iface.subnet_id, iface.pool_size + 1)
        self._publish()
        log.info("ready_interface_deleted", interface=iface.id, subnet=iface.subnet_id, reason=reason)
        return True

    async def _refill(self) -> tuple[list[str], list[str]]:
        created: list[str] = []
        failed: list[str] = []
        targets = self._targets()
        if not any(len(self.ready.get(key, ())) < target for key, target in targets.items()):
            return created, failed
        known = self.known_interfaces()
        for key, target in targets.items():
            while len(self.ready.get(key, ())) < target:
                if self.waiting():
                    return created, failed  # nodes first: the next round goes on
                if not self._room(key):
                    break  # the subnet's reserve is the pods': the pool never takes from it
                if known + self.count() + 1 >= self.settings.region_interface_quota:
                    log.warning("ready_pool_at_quota", quota=self.settings.region_interface_quota)
                    return created, failed
                iface = await self._create(key)
                if iface is None:
                    failed.append(key.subnet_id)
                    return created, failed  # one failure ends the round: the cloud said no
                created.append(iface.id)
        return created, failed

    def _room(self, key: PoolKey) -> bool:
        """Whether ``key``'s subnet keeps its reserve (``subnet_reserve``) after one more ready
        interface: what only a warm pool asks for never takes the addresses pods wait for."""
        subnet = self.view.planner_subnets(reserve=self.settings.subnet_reserve).get(key.subnet_id)
        size = self.sizes[key] * (PREFIX_SIZE if key.prefixes else 1) + 1
        if subnet is not None and subnet.available >= size:
            self._full.discard(key)
            return True
        if key not in self._full:  # once until it has room again, not every round
            self._full.add(key)
            log.info("ready_pool_subnet_full", subnet=key.subnet_id, reserve=self.settings.subnet_reserve)
        return False

    async def _create(self, key: PoolKey) -> Interface | None:
        size = self.sizes[key]
        token = self._tokens.get(key)
        if token is None:
            seed = f"{self.settings.cluster_name}|{key}|{size}|{self._nonce}|{next(self._serial)}"
            token = self._tokens[key] = "eni-ipam-" + hashlib.sha256(seed.encode()).hexdigest()[:40]
        addresses = size * PREFIX_SIZE if key.prefixes else size
        with self.view.reserve(key.subnet_id, addresses + 1) as reservation:  # +1: its primary address
            try:
                iface = await self.provider.create_ready_interface(
                    subnet_id=key.subnet_id,
                    security_groups=key.security_groups,
                    count=size,
                    prefixes=key.prefixes,
                    tags=self.tags,
                    token=token,
                )
            except errors.Fenced:
                raise
            except errors.ProviderError as exc:
                if not isinstance(exc, errors.TransientError | errors.Throttled):
                    self._tokens.pop(key, None)  # refused: nothing was made, the token is free
                self.metrics.ready_interface_refilled(subnet=key.subnet_id, outcome=exc.code or "error")
                log.warning(
                    "ready_interface_refill_failed", subnet=key.subnet_id, code=exc.code, error=str(exc)
                )
                return None
            reservation.commit()
        self._tokens.pop(key, None)
        if iface.instance_id:  # a token's earlier interface, attached since: its instance's, not ready
            return None
        self.ready.setdefault(key, {})[iface.id] = iface
        self.metrics.ready_interface_refilled(subnet=key.subnet_id, outcome="created")
        self._publish()
        log.info(
            "ready_interface_created",
            interface=iface.id,
            subnet=key.subnet_id,
            count=size,
            prefixes=key.prefixes,
        )
        return iface

    def _publish(self) -> None:
        per_subnet: dict[str, int] = {}
        for key, found in self.ready.items():
            per_subnet[key.subnet_id] = per_subnet.get(key.subnet_id, 0) + len(found)
        for subnet in self._published - per_subnet.keys():
            self.metrics.ready_interfaces(subnet=subnet, count=0)
        for subnet, n in per_subnet.items():
            self.metrics.ready_interfaces(subnet=subnet, count=n)
        self._published |= per_subnet.keys()
