"""One node: its cloud view, stats, release handshake, and the maintenance pass that acts on them.

A maintenance pass (:meth:`Node.maintain`) is: refresh the instance if its view is missing or stale →
recalculate → release handshake (when enabled) → allocate the deficit → if anything changed,
re-read the instance (per-instance sync) → recalculate. It returns a :class:`PassResult` — the
status to publish, when it wants another pass, and the error that ended it, if any — and leaves
every scheduling decision (backoff, timers, ordering) to the manager. The manager runs at most one
pass per node at a time, which is what lets this class mutate without locks.

A node sees the rest of the system only through its :class:`NodeEnv`: the provider, the shared
:class:`~eni_ipam.core.view.CloudView` (subnets, reservations, limits), settings, metrics and the
clock. It never reads or writes the manager.

Invariants:

* The local instance view is only ever replaced by a fresher one (``view_time`` guards against a
  full resync that started before a mutation overwriting what the mutation returned).
* An address is unassigned only after the node side answered ``ready-for-release`` for it, it was
  continuously excess for ``excess_ip_release_delay`` (or it is a single address of a node returning
  to prefixes, none of whose single addresses is in use), and it is not reported in use.
* A cloud error leaves the local view consistent with what the cloud did: successes before the
  error are applied, the failed call changes nothing (the provider rolls back its own creates).
* While a subnet of its pool is under pressure (:mod:`~eni_ipam.core.pressure`), a node keeps only
  what its pods use or wait for and releases the rest through the same handshake, whether or not
  ``release_excess_ips`` is on; when the pressure ends, a handshake under way is aborted unless
  release is on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import types
from collections.abc import Collection, Container, Mapping, Sequence
from typing import cast

import structlog

from eni_ipam.core import errors
from eni_ipam.core.blocks import SubnetBlocks
from eni_ipam.core.clock import Clock
from eni_ipam.core.model import (
    AllocationPlan,
    AssignAddresses,
    CreateInterface,
    Instance,
    InstanceLimits,
    Interface,
    NodeStats,
    NodeStatus,
    PoolEntries,
    ReleaseState,
    Subnet,
    UnassignAddresses,
    address_key,
    expand_prefix,
    interface_tags,
    shared_stats,
)
from eni_ipam.core.observe import Observer
from eni_ipam.core.planner import (
    carrying_ipv6_prefix,
    has_ipv6_prefix,
    managed_interfaces,
    node_stats,
    plan_allocation,
    plan_ipv6,
    plan_release,
)
from eni_ipam.core.provider import Provider
from eni_ipam.core.readypool import ReadyPool
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeResource
from eni_ipam.core.view import CloudView
from eni_ipam.core.watermarks import allocation_budget, max_pods

log = structlog.get_logger("eni_ipam.core.node")

NEVER = float("-inf")
"""A time before every other, one object for every node (``float("-inf")`` makes a new float of 24
bytes at each call: three a node, 7 MB at 100,000 nodes)."""

AT_CAPACITY_LOG_INTERVAL = 3600.0
"""At most one "at capacity" log line per node per hour: it is a state, not an event."""
MAX_REPLANS = 3
"""Replans within one pass after a recoverable surprise (no /28 left, device index taken)."""
_SHORTFALL_REASONS = {
    "no-subnet": "subnet",
    "subnet-reserve": "subnet",
    "no-security-groups": "security-groups",
}
"""A plan's shortfall reason → the capacity reason a node short of addresses reports."""
CAPACITY_REASON_HOLD = 300.0
"""Seconds a node keeps reporting ``subnet`` / ``security-groups`` after the last shortfall, even when
it needs nothing meanwhile (a pod left): a node at a full subnet under pod churn reports one steady
reason, not one flickering with every pod, so an alert's ``for`` can run. The reason ends at once
when a pass places the whole deficit."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NodeEnv:
    """Everything a node's pass may use besides its own state, shared by every node of a manager."""

    provider: Provider
    view: CloudView
    settings: Settings
    metrics: Observer
    clock: Clock
    ready: ReadyPool | None = None
    """The pool of ready interfaces a new interface is taken from first (None: disabled)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PassResult:
    """What one maintenance pass leaves for the manager to act on."""

    status: NodeStatus | None
    """The node's status after the pass, to publish (unless the node was removed meanwhile); None
    when the pass ended before it learnt anything new (not synced yet, the instance unreadable)."""
    again_at: float | None = None
    """When (on the clock's timeline) the node wants another pass: a release delay running out."""
    error: Exception | None = None
    """Why the pass stopped early; the manager backs off (or, for :class:`~errors.Fenced`, stops)."""


_NO_ADDRESSES: frozenset[str] = frozenset()
_NOTHING_MARKED = cast(dict[str, float], types.MappingProxyType({}))
_NOTHING_RELEASED = cast(dict[str, ReleaseState], types.MappingProxyType({}))


class Node:
    # A hundred thousand nodes: no per-instance dict for the fields below. ``__dict__`` stays for
    # what tests patch onto one node; it is only allocated when something is set there.
    __slots__ = (
        "__dict__",
        "_again_at",
        "_last_capacity_log",
        "_publish",
        "blocked",
        "deficit_since",
        "env",
        "instance",
        "ipv6_blocked",
        "marked",
        "message",
        "needs_refresh",
        "pressured",
        "release_status",
        "resource",
        "return_blocked",
        "shortfall",
        "shortfall_at",
        "stats",
        "terminated",
        "view_time",
    )

    def __init__(self, resource: NodeResource, env: NodeEnv) -> None:
        self.env = env
        self.resource = resource
        self.instance: Instance | None = None
        self.view_time = NEVER
        self.stats = NodeStats(limits_known=False)
        self.message = ""
        self.terminated = False
        self.needs_refresh = True
        self.blocked = ""
        """Why the last pass could not place the deficit (``at-capacity``, ``no-subnet``); reset on change."""
        self.ipv6_blocked = ""
        """Why the last pass could not get the node its IPv6 prefix (:class:`~eni_ipam.core.model.Ipv6Plan`
        reasons); reset on change."""
        self.return_blocked = False
        """The last pass found the node could not return to prefixes (:meth:`_returning`); reset on
        change, as ``blocked`` is."""
        self.shortfall = ""
        """Why the node's allocations fall short (a plan found no room, or the cloud said the subnet
        is full); kept until a pass places the whole deficit, or for :data:`CAPACITY_REASON_HOLD`
        after the last shortfall once the node needs nothing: what its capacity series reports."""
        self.shortfall_at = NEVER
        """When (on the clock's timeline) the last shortfall was seen."""
        self.deficit_since: float | None = None
        # Both stay the shared read-only empty mapping until a release begins (most nodes never
        # release: two empty dicts each would be 13 MB at 100,000 nodes); only the release path
        # writes them, and it takes its own dicts first (_own_release_state).
        self.marked: dict[str, float] = _NOTHING_MARKED
        """Addresses chosen for release → when they were first seen excess."""
        self.release_status: dict[str, ReleaseState] = _NOTHING_RELEASED
        """What the reconciler publishes in the handshake (marked-for-release / released)."""
        self.pressured: tuple[str, ...] = ()
        """The subnets of the pool under pressure (empty: none, or pressure is disabled)."""
        self._last_capacity_log = NEVER
        self._again_at: float | None = None
        self._publish = False

    @property
    def name(self) -> str:
        return self.resource.name

    @property
    def instance_id(self) -> str:
        """The instance the node's record names (what the cloud's listing is keyed by)."""
        return self.resource.instance_id

    # -- what the node source and the resync tell it ------------------------------------------------

    def update(self, resource: NodeResource) -> None:
        """The node's record changed (spec, used addresses, answers). A new instance id forgets the
        old instance's view: the next pass reads the new one."""
        if self.resource.instance_id != resource.instance_id:
            self.instance, self.needs_refresh, self.terminated = None, True, False
            self.view_time = NEVER
        self.resource = resource
        self.blocked = self.ipv6_blocked = ""
        self.return_blocked = False

    def observe(self, instance: Instance | None, *, seen_at: float) -> bool:
        """What a full resync that started at ``seen_at`` saw of this node's instance. Missing from it
        means "read it again", never "needs nothing" (a listing can miss an instance).

        Returns whether the node's pool changed behind its back: it now holds an instance that
        differs from the one it held (addresses or interfaces added or removed by someone else), not
        merely a fresher copy of the same."""
        seen = self.instance
        if instance is not None:
            self.terminated = False
            # Only a listing begun after the node's view was read replaces it: one begun at the very
            # same tick may have read the instance before a change the view already holds.
            if seen_at > self.view_time:
                self.set_instance(instance, seen_at=seen_at)
        elif not self.terminated:
            self.needs_refresh = True
        # A node blocked on the last view (no subnet room, at capacity) is planned again on the fresh
        # one: room may have come back (addresses released elsewhere, a node gone).
        self.blocked = self.ipv6_blocked = ""
        self.return_blocked = False
        return self.instance is not seen and self.instance is not None and self.instance != seen

    def set_instance(self, instance: Instance, *, seen_at: float) -> None:
        if seen_at >= self.view_time:
            self.instance = instance
            self.view_time = seen_at
            self.needs_refresh = False

    # -- views ------------------------------------------------------------------------------------

    def limits(self) -> InstanceLimits | None:
        return self.env.view.known_limits(self.instance.type) if self.instance else None

    def recalculate(self) -> NodeStats:
        """Recompute stats from the current view; unknown limits or instance leave the node untouched."""
        limits = self.limits()
        self.pressured = self._pressured() if not self.terminated else ()
        if self.terminated:
            self.stats = NodeStats(used=self.resource.used, limits_known=limits is not None, running=False)
        elif self.instance is None or limits is None:
            # Unknown: keep the last pool size we saw, but claim no need or excess (nothing will act on it).
            self.stats = NodeStats(
                available=self.stats.available, used=self.resource.used, limits_known=False
            )
        else:
            self.stats = node_stats(
                self.resource.spec,
                self.instance,
                limits,
                used=self.resource.used,
                prefix_delegation=self.env.settings.prefix_delegation,
                pressure=bool(self.pressured),
                pending_pods=self.resource.pending_pods,
            )
        self.stats = shared_stats(self.stats)
        now = self.env.clock.monotonic()
        if self.shortfall and self.stats.needed == 0 and now - self.shortfall_at >= CAPACITY_REASON_HOLD:
            self.shortfall = ""  # it needed nothing for a while: whatever blocked it is not its concern
        if self.stats.needed > 0 and self.deficit_since is None:
            self.deficit_since = now
        elif self.stats.needed == 0 and self.deficit_since is not None:
            self.env.metrics.deficit_resolved(seconds=now - self.deficit_since)
            self.deficit_since = None
        return self.stats

    def _pressured(self) -> tuple[str, ...]:
        """The subnets of the pool's interfaces that are under pressure now."""
        view = self.env.view
        if view.pressure is None or self.instance is None:
            return ()
        found = {
            i.subnet_id
            for i in managed_interfaces(self.instance, self.resource.spec)
            if view.under_pressure(i.subnet_id)
        }
        return tuple(sorted(found)) if found else ()

    def room_back(self) -> None:
        """Addresses went back to a subnet of the pool: a node blocked on the last view is planned
        again (as a full resync would have it)."""
        self.blocked = ""

    def in_subnet(self, subnet_id: str) -> bool:
        """Whether an interface of the pool is in ``subnet_id``."""
        if self.instance is None:
            return False
        return any(i.subnet_id == subnet_id for i in managed_interfaces(self.instance, self.resource.spec))

    def capacity_limit(self) -> str:
        """Why the pool cannot grow, if it cannot (:data:`~eni_ipam.core.observe.CAPACITY_REASONS`):
        ``limits-unknown`` (the instance type's limits are unknown: nothing is allocated),
        ``instance-limit`` (every usable interface is full and no adapter slot is free), or — for
        a node short of addresses — ``subnet`` / ``security-groups`` (the last plan found no
        subnet with room / no security group for a new interface). Empty otherwise."""
        if self.stopped or self.instance is None:
            return ""
        if not self.stats.limits_known:
            return "limits-unknown"
        if self.stats.at_capacity:
            return "instance-limit"
        if self.shortfall:
            return _SHORTFALL_REASONS.get(self.shortfall, "")
        return ""

    def demand(self) -> int:
        """Addresses the node must get: its deficit to the watermark or, when more, the pods
        waiting for an address beyond the free ones — even beyond what its instance can hold,
        where ``stats.needed`` stops (a full node with pods waiting needs them, and says so)."""
        stats = self.stats
        if not stats.limits_known or not stats.running:
            return stats.needed
        return max(stats.needed, self._pods_waiting())

    def _pods_waiting(self) -> int:
        """Pods waiting for an address beyond the node's free ones (0 when the free ones cover them,
        and on an IPv6-only node, whose pods take addresses of its /80)."""
        if self.resource.spec.address_family == "ipv6":
            return 0
        stats = self.stats
        return max(self.resource.pending_pods - (stats.available - stats.used), 0)

    def _short_of(self, reason: str) -> None:
        self.shortfall = reason
        self.shortfall_at = self.env.clock.monotonic()

    @property
    def stopped(self) -> bool:
        """The instance is gone or not running: nothing to do until that changes."""
        return self.terminated or (self.instance is not None and not self.instance.running)

    @property
    def unsure(self) -> bool:
        """Whether a fresh view can change the node without its instance changing: blocked on the last
        view (room may be back), reporting a shortfall (its hold runs out), to be re-read, terminated, or
        still without its instance."""
        return (
            bool(self.blocked or self.shortfall)
            or self.return_blocked
            or self.needs_refresh
            or self.terminated
            or self.instance is None
        )

    def learns_from(self, instance: Instance | None, *, changed_types: Container[str]) -> bool:
        """Whether a full resync that listed ``instance`` for the node (None: not listed) has anything
        to tell it. Nothing, when it lists the very object the node holds (a provider hands back the
        same :class:`Instance` for an instance that did not change), the limits of its type are not
        among ``changed_types`` (the types whose limits the resync changed), and the node is not
        :attr:`unsure`."""
        return (
            instance is not self.instance or instance is None or self.unsure or instance.type in changed_types
        )

    def wants_pass(self) -> bool:
        """Whether the node, as it stands, wants something a pass could do."""
        if self.stopped:
            return False
        if self.needs_refresh:
            return True
        if not self.stats.limits_known:
            return False
        if self.stats.needed > 0 and not self.blocked:
            return True
        if self.wants_ipv6_prefix() and not self.ipv6_blocked:
            return True
        if self.env.settings.return_to_prefixes and (
            # A return under way (its handshake), or one that may begin.
            self.marked or self.release_status or (not self.return_blocked and self._idle_single_addresses())
        ):
            return True
        if self.env.settings.release_excess_ips or self.pressured:
            return self.stats.excess > 0 or bool(self.marked) or bool(self.release_status)
        # A handshake begun under pressure that ended: to be wound down.
        return bool(self.marked) or bool(self.release_status)

    def wants_ipv6_prefix(self) -> bool:
        """The node's family has IPv6 (``ipv6``, ``dual``) and no interface of its pool holds a prefix."""
        return (
            self.resource.spec.address_family != "ipv4"
            and self.instance is not None
            and not has_ipv6_prefix(self.instance, self.resource.spec)
        )

    def status(self) -> NodeStatus:
        interfaces: tuple[Interface, ...] = ()
        managed: Sequence[Interface] = ()
        if self.instance is not None:
            interfaces = self.instance.interfaces
            managed = managed_interfaces(self.instance, self.resource.spec)
        pooled = {i.subnet_id for i in managed if i.pool_size}
        cidrs = {sid: self.env.view.cidr(sid) for sid in pooled}
        return NodeStatus(
            pool=PoolEntries(managed),
            stats=self.stats,
            release=dict(self.release_status),
            interfaces=interfaces,
            subnets={sid: cidr for sid, cidr in cidrs.items() if cidr is not None},
            message=self.message or self._blocked_message(),
            limit=self.capacity_limit(),
            max_pods=self._max_pods(),
            no_room=self._no_room(),
            pressure=self.pressured if self.env.view.pressure is not None else None,
        )

    def _no_room(self) -> bool:
        """:attr:`NodeStatus.no_room <eni_ipam.core.model.NodeStatus.no_room>`. A node whose instance
        is gone or stopped runs no pods: it has no room to speak of."""
        if self.terminated or self.instance is None or not self.instance.running:
            return False
        family = self.resource.spec.address_family
        if family != "ipv4" and self.ipv6_blocked and self.wants_ipv6_prefix():
            return True
        if family == "ipv6":
            return False
        return bool(self.capacity_limit()) and self.stats.available - self.stats.used <= 0

    def _max_pods(self) -> int:
        """What the node's Node publishes as its pods' ceiling (0: not known). An IPv6-only pool's
        pods take addresses of its /80, which no instance limit bounds: none is published."""
        limits = self.limits()
        spec = self.resource.spec
        if limits is None or self.instance is None or spec.address_family == "ipv6":
            return 0
        return max_pods(
            limits,
            prefix_delegated=self.stats.prefix_delegated,
            first_interface_index=spec.first_interface_index,
            network_cards=spec.network_cards,
            max_allocate=spec.max_allocate,
        )

    def _blocked_message(self) -> str:
        """Why the node is not progressing, as a sentence (empty when nothing stands in its way)."""
        instance_id = self.resource.instance_id
        if self.terminated:
            return f"instance {instance_id} no longer exists: nothing is allocated"
        if self.instance is not None and not self.instance.running:
            return f"instance {instance_id} is not running: nothing is allocated until it runs"
        if self.ipv6_blocked and self.wants_ipv6_prefix():
            return self._ipv6_message()
        needed = self.demand()
        if self.stats.at_capacity and needed > 0 and not self.blocked:
            # Full, with pods waiting beyond what the pool holds: no plan is made for them.
            kind = self.instance.type if self.instance is not None else "of the node"
            return (
                f"{needed} pods wait for an address, but instance type {kind} holds no more: every "
                "interface is full and no adapter slot is free (a larger type, or /28 prefixes, hold more)"
            )
        if not self.blocked or needed <= 0:
            return ""
        if self.blocked == "at-capacity":
            kind = self.instance.type if self.instance is not None else "of the node"
            return (
                f"{needed} more addresses needed, but instance type {kind} holds no more: every "
                "interface is full and no adapter slot is free (a larger type, or /28 prefixes, hold more)"
            )
        if self.blocked == "no-subnet":
            return (
                f"{needed} more addresses needed, but no subnet this pool may use has room: free "
                "addresses there, or give the pool more subnets (spec.subnetIDs or spec.subnetTags)"
            )
        if self.blocked == "subnet-reserve":
            return (
                f"{needed} more addresses needed for the watermarks, but the subnets this pool may use "
                "are down to their reserve, kept for the pods of every node sharing them "
                "(settings.subnet_reserve): a pod waiting for an address still gets one"
            )
        if self.blocked == "no-security-groups":
            return (
                f"{needed} more addresses needed, but no security group was found for a new interface "
                "(spec.securityGroups or spec.securityGroupTags)"
            )
        return f"{needed} more addresses needed, but they cannot be placed ({self.blocked})"

    def _ipv6_message(self) -> str:
        family = self.resource.spec.address_family
        why = {
            "no-ipv6-prefixes": (
                f"instance type {self.instance.type if self.instance else ''} takes no IPv6 prefixes "
                "(EC2 delegates them to Nitro types with IPv6 only; Azure and the generic provider to none)"
            ),
            "no-ipv6-subnet": (
                "no interface of the pool is in a subnet with an IPv6 CIDR block, and no subnet the pool "
                "may use has one (associate an IPv6 block with the node's subnet, or list a dual-stack "
                "subnet in spec.subnetIDs or spec.subnetTags)"
            ),
            "at-capacity": "no interface of the pool can take it and no adapter slot is free",
            "no-security-groups": (
                "a new interface would carry it, but no security group was found "
                "(spec.securityGroups or spec.securityGroupTags)"
            ),
        }.get(self.ipv6_blocked, self.ipv6_blocked)
        return f"address family {family}: the node has no IPv6 prefix and cannot get one: {why}"

    # -- the pass ---------------------------------------------------------------------------------

    async def maintain(self) -> PassResult:
        """One maintenance pass. Never raises an :class:`Exception`: a failure, even a bug, ends the
        pass and is returned with the status the node has after it (cancellation propagates)."""
        self._again_at = None
        self._publish = False
        error: Exception | None = None
        try:
            await self._pass()
        except Exception as exc:  # one node's failure, even a bug, never stops the others
            error = exc
        return PassResult(
            status=self.status() if self._publish else None, again_at=self._again_at, error=error
        )

    async def _pass(self) -> None:
        env = self.env
        if not env.view.shared:
            raise errors.NotReady("the initial resync has not succeeded yet")
        if self.needs_refresh or self.instance is None or not env.view.ready:
            # Before the first full listing is applied only a fresh read of the instance is
            # planned on (the manager runs such passes for nodes known to wait for addresses).
            await self.refresh()
        if self.instance is None or self.terminated or not self.instance.running:
            self.recalculate()
            self._publish = True
            return
        limits = await env.view.limits(self.instance.type)
        if limits is None:
            self.message = (
                f"the limits of instance type {self.instance.type} are unknown (the cloud does not "
                "describe it): nothing is allocated on this node until they are known"
            )
            self.recalculate()
            self._publish = True
            return
        self.message = ""
        self._publish = True  # from here on the status is published, whatever happens
        stats = self.recalculate()
        mutated = False
        try:
            returning = self._returning(limits)
            release = env.settings.release_excess_ips or self.pressured
            if release or returning or self.marked or self.release_status:
                # With release off and no pressure, only a handshake under way is wound down (a
                # pressure that ended aborts its marks: nothing is excess then).
                mutated |= await self._release(stats, returning)
            stats = self.recalculate()
            if stats.needed > 0 or (returning and self._return_need(limits) > 0):
                mutated |= await self._allocate(limits, returning=bool(returning))
            if self.wants_ipv6_prefix():
                mutated |= await self._ipv6_prefix(limits)
        except (errors.NotFound, errors.InstanceNotRunning):
            self.needs_refresh = True  # the instance changed under us (stopped, terminated, replaced)
            raise
        except errors.TransientError:
            # A timeout or a lost answer may hide a change that landed: read the instance again
            # before planning on a view that may lack it.
            self.needs_refresh = True
            raise
        finally:
            # After a change, or a failure that may hide one, publish what the cloud holds now rather
            # than a view that may list an address already gone (and maybe another node's by now).
            if mutated or self.needs_refresh:
                try:
                    await self.refresh()
                except errors.ProviderError as exc:  # the view we hold is still right; resync will confirm
                    log.warning("instance_sync_failed", node=self.name, error=str(exc))
            self.recalculate()

    async def refresh(self) -> None:
        """Per-instance sync: re-read the instance from the cloud. A missing instance is terminated.

        An instance outside the provider's scope (:class:`~errors.InstanceOutOfScope`: the Node's
        providerID names an instance of another VPC, without the instance tags) is refused: the node
        forgets any view of it, publishes why, and the error ends the pass (the manager backs off),
        so nothing is ever planned for it."""
        env = self.env
        instance_id = self.resource.instance_id
        started = env.clock.monotonic()
        try:
            instance = await env.provider.describe_instance(instance_id=instance_id)
        except errors.InstanceOutOfScope as exc:
            message = f"refused: {exc.message}"
            if self.message != message:  # once per refusal, not at every backed-off retry
                log.warning("instance_out_of_scope", node=self.name, instance=instance_id, check=exc.check)
            self.instance, self.needs_refresh, self.message = None, True, message
            self.view_time = NEVER
            self._publish = True
            raise
        if instance is None:
            if not self.terminated:
                log.warning("instance_gone", node=self.name, instance=instance_id)
            self.terminated = True
            self.instance = None  # its interfaces are left to the cloud (delete-on-termination) and to GC
            self.needs_refresh = False
            return
        self.terminated = False
        self.set_instance(instance, seen_at=started)
        self.needs_refresh = False

    # -- allocation -------------------------------------------------------------------------------

    async def _allocate(self, limits: InstanceLimits, *, returning: bool = False) -> bool:
        """Place the deficit. ``returning``: the node returns to prefixes (:meth:`_returning`): its
        deficit is what it lacks without its single addresses, placed in prefixes only; a plan that
        cannot be ends the return for this view (``return_blocked``) and the node is planned as it is."""
        spec = self.resource.spec
        no_prefix: set[str] = set()
        mutated = False
        rounds = MAX_REPLANS
        while rounds > 0:
            rounds -= 1
            assert self.instance is not None
            stats = self.recalculate()
            must, bonus = allocation_budget(
                needed=self._return_need(limits) if returning else stats.needed,
                max_above_watermark=0 if self.pressured else spec.max_above_watermark,
                pending_pods=self.resource.pending_pods,
            )
            if spec.max_allocate > 0 and not returning:
                must = min(must, max(spec.max_allocate - stats.available, 0))
                bonus = min(bonus, max(spec.max_allocate - stats.available - must, 0))
            plan, then = self._plan(limits, must=must, bonus=bonus, no_prefix=no_prefix, returning=returning)
            for action in plan.actions:
                if isinstance(action, AssignAddresses) and action.chosen:
                    # Claimed before any call: a node planned while this one's call runs does not
                    # name them too (a refused call would cost both a retry).
                    self.env.view.took(action.subnet_id, addresses=action.chosen)
            if returning and (plan.shortfall or not all(a.prefixes for a in plan.actions)):
                self.return_blocked, returning = True, False
                log.info("return_to_prefixes_blocked", node=self.name)
                if stats.needed <= 0:
                    return mutated
                rounds += 1
                continue
            if then:
                rounds += 1  # the watermark's part, planned once the pods' is placed: not a replan
            # Short even after what the plan places: nothing more until the view changes (a resync,
            # a change of the node), so the node does not claim work nobody will do.
            self.blocked = plan.reason if plan.shortfall else ""
            before = self.shortfall
            if plan.shortfall:
                self._short_of(plan.reason)
            if plan.reason == "at-capacity":
                self._log_at_capacity(plan.shortfall)
            elif plan.reason and not plan.actions and plan.reason != before:
                # Once per shortfall, not at every resync that plans the node again.
                log.warning(
                    "allocation_blocked", node=self.name, reason=plan.reason, shortfall=plan.shortfall
                )
            subnet = ""
            try:
                for action in plan.actions:
                    subnet = action.subnet_id
                    if isinstance(action, AssignAddresses):
                        await self._assign(action)
                    else:
                        await self._create(action)
                    mutated = True
                if then:
                    continue
                if not plan.shortfall:
                    self.shortfall = ""  # the whole deficit is placed: nothing blocks it any more
                return mutated
            except errors.SubnetExhausted:
                # The cloud knows better than the view: the subnet is full (what the view's count
                # hid, other users' addresses). The node reports it while it backs off.
                self._short_of("no-subnet")
                raise
            except errors.PrefixesExhausted:
                no_prefix.add(subnet)  # fall back in this same pass: sibling subnets, then plain addresses
                log.info("prefixes_exhausted", node=self.name, subnet=subnet)
                if returning:  # the count missed what EC2 sees: no return on this view
                    self.return_blocked, returning = True, False
            except (errors.DeviceIndexInUse, errors.AttachmentLimitExceeded, errors.InterfaceLimitExceeded):
                await self.refresh()  # our view of the attachments or the addresses was stale
        return mutated

    def _plan(
        self, limits: InstanceLimits, *, must: int, bonus: int, no_prefix: set[str], returning: bool = False
    ) -> tuple[AllocationPlan, bool]:
        """The allocation plan of one round, and whether another round is to follow.

        The subnet reserve (``settings.subnet_reserve``): what only the watermarks ask for is planned
        on the subnets with their reserve held back; what pods waiting now need may take from it.
        When a plan on the whole view keeps every subnet it draws from above its reserve (the usual
        case), it is the plan: one call, as without a reserve. Otherwise the pods' part is placed
        first, on the whole view, and the watermarks' part follows in another round."""
        m = self.env
        assert self.instance is not None
        share = m.settings.subnet_reserve
        dense = self._dense_subnets()

        def plan_on(subnets: Mapping[str, Subnet], must: int, bonus: int) -> AllocationPlan:
            assert self.instance is not None
            spec = self.resource.spec
            plan = plan_allocation(
                spec,
                self.instance,
                limits,
                subnets,
                m.view.security_groups,
                must=must,
                bonus=bonus,
                prefix_delegation=m.settings.prefix_delegation,
                no_prefix_subnets=no_prefix,
                placement=m.settings.prefix_placement,
                dense=dense,
                returning=returning,
            )
            if spec.address_family == "ipv4" or not plan.actions:
                return plan
            return carrying_ipv6_prefix(plan, spec, self.instance, limits, subnets)

        whole = m.view.planner_subnets()
        if share <= 0 or must <= 0:
            return plan_on(whole, must, bonus), False
        held = m.view.planner_subnets(reserve=share)
        pods = min(must, self._pods_waiting())
        if pods == 0:
            plan = plan_on(held, must, bonus)
            if plan.shortfall and plan.reason == "no-subnet" and not plan_on(whole, must, bonus).shortfall:
                plan = dataclasses.replace(plan, reason="subnet-reserve")
            return plan, False
        plan = plan_on(whole, must, bonus)
        taken: dict[str, int] = {}
        for action in plan.actions:
            extra = 0 if isinstance(action, AssignAddresses) else 1  # a new interface's own address
            taken[action.subnet_id] = taken.get(action.subnet_id, 0) + action.addresses + extra
        if all(n <= held[sid].available for sid, n in taken.items() if sid in held):
            return plan, False
        return plan_on(whole, pods, 0), pods < must

    def _dense_subnets(self) -> Mapping[str, SubnetBlocks] | None:
        """The subnets where plans name single addresses (``dense_placement``): every counted one
        but those where the cloud refused a named address lately; None when dense placement is off
        or nothing is counted."""
        m = self.env
        if not m.settings.dense_placement or not m.view.blocks:
            return None
        refused = m.view.dense_refused()
        if not refused:
            return m.view.blocks
        return {sid: b for sid, b in m.view.blocks.items() if sid not in refused}

    # -- return to prefixes -----------------------------------------------------------------------

    def _idle_single_addresses(self) -> frozenset[str]:
        """The single addresses of a node that could be prefix delegated but holds single addresses
        (it fell back, or delegation was turned on under it), when none of them is in use; empty
        otherwise."""
        instance, spec = self.instance, self.resource.spec
        if (
            instance is None
            or self.stats.prefix_delegated
            or not self.env.settings.prefix_delegation
            or spec.disable_prefix_delegation
        ):
            return _NO_ADDRESSES
        limits = self.limits()
        if limits is None or not (limits.supports_prefixes and limits.addresses):
            return _NO_ADDRESSES
        plain = [a for i in managed_interfaces(instance, spec) for a in i.addresses]
        in_use = self.resource.in_use
        if not plain or any(a in in_use for a in plain):
            return _NO_ADDRESSES
        return frozenset(plain)

    def _returning(self, limits: InstanceLimits) -> frozenset[str]:
        """The single addresses of a node returning to prefix delegation (empty: it is not).

        The rule (``return_to_prefixes``; docs/aws.md, "Return to prefixes"): the node is not prefix
        delegated only because it holds single addresses, none of them is in use, the free /28
        blocks are counted, and a plan for what the node lacks without them (at least one address:
        its next growth) is made of prefixes alone, on the count. Then its growth takes prefixes and
        its single addresses go through the release handshake at once (no release delay: they are
        not excess, they are being replaced). A return already under way (addresses marked) and
        needing no growth goes on without asking for a free block again."""
        m = self.env
        if not m.settings.return_to_prefixes or not m.view.blocks or self.return_blocked:
            return _NO_ADDRESSES
        plain = self._idle_single_addresses()
        if not plain:
            return _NO_ADDRESSES
        need = self._return_need(limits)
        if need <= 0 and any(a in self.marked for a in plain):
            return plain
        assert self.instance is not None
        plan = plan_allocation(
            self.resource.spec,
            self.instance,
            limits,
            m.view.planner_subnets(),
            m.view.security_groups,
            must=max(need, 1),
            prefix_delegation=True,
            placement=True,
            returning=True,
        )
        if plan.shortfall or not plan.actions or not all(a.prefixes for a in plan.actions):
            self.return_blocked = True
            return _NO_ADDRESSES
        return plain

    def _return_need(self, limits: InstanceLimits) -> int:
        """What the node lacks for its watermarks without its single addresses."""
        instance, spec = self.instance, self.resource.spec
        assert instance is not None
        managed = {i.id for i in managed_interfaces(instance, spec)}
        stripped = dataclasses.replace(
            instance,
            interfaces=tuple(
                dataclasses.replace(i, addresses=()) if i.id in managed and i.addresses else i
                for i in instance.interfaces
            ),
        )
        return node_stats(spec, stripped, limits, used=self.resource.used, prefix_delegation=True).needed

    def _return_unassigns(self, returning: frozenset[str]) -> list[UnassignAddresses]:
        """One unassign per interface holding single addresses of a return."""
        assert self.instance is not None
        out = []
        for iface in managed_interfaces(self.instance, self.resource.spec):
            mine = tuple(sorted((a for a in iface.addresses if a in returning), key=address_key))
            if mine:
                out.append(
                    UnassignAddresses(interface_id=iface.id, subnet_id=iface.subnet_id, addresses=mine)
                )
        return out

    async def _ipv6_prefix(self, limits: InstanceLimits) -> bool:
        """Get the node its one IPv6 /80 (:func:`~eni_ipam.core.planner.plan_ipv6`): on an interface of
        the pool, or on a new one. Returns whether a call was made."""
        m = self.env
        assert self.instance is not None
        plan = plan_ipv6(
            self.resource.spec, self.instance, limits, m.view.planner_subnets(), m.view.security_groups
        )
        if plan.reason:
            if plan.reason != self.ipv6_blocked:
                log.warning("ipv6_prefix_blocked", node=self.name, reason=plan.reason)
            self.ipv6_blocked = plan.reason
            return False
        action = plan.action
        if isinstance(action, CreateInterface):
            await self._create(action)
            return True
        if action is None:
            return False
        started = m.clock.monotonic()
        try:
            prefix = await m.provider.assign_ipv6_prefix(interface_id=action.interface_id)
        except errors.ProviderError:
            self._observe_allocation("assign-ipv6-prefix", False, started)
            raise
        self._observe_allocation("assign-ipv6-prefix", True, started)
        iface = self.instance.interface(action.interface_id)
        if iface is not None:
            iface = dataclasses.replace(iface, ipv6_prefixes=(*iface.ipv6_prefixes, prefix))
            self.set_instance(self.instance.replace_interface(iface), seen_at=m.clock.monotonic())
        log.info(
            "ipv6_prefix_assigned",
            node=self.name,
            interface=action.interface_id,
            prefix=prefix,
            subnet=action.subnet_id,
        )
        return True

    async def _assign(self, action: AssignAddresses) -> None:
        m = self.env
        kind = "assign-prefixes" if action.prefixes else "assign"
        started = m.clock.monotonic()
        with m.view.reserve(action.subnet_id, action.addresses) as reservation:
            try:
                if action.chosen:
                    new = await self._assign_named(action)
                else:
                    new = await m.provider.assign_addresses(
                        interface_id=action.interface_id, count=action.count, prefixes=action.prefixes
                    )
            except errors.ProviderError:
                self._observe_allocation(kind, False, started)
                raise
            reservation.commit()
        if action.prefixes:
            m.view.took(action.subnet_id, prefixes=new)
        else:
            m.view.took(action.subnet_id, addresses=new)
        self._observe_allocation(kind, True, started)
        m.metrics.addresses_allocated(subnet=action.subnet_id, count=action.addresses)
        assert self.instance is not None
        iface = self.instance.interface(action.interface_id)
        if iface is not None:
            if action.prefixes:
                iface = dataclasses.replace(iface, prefixes=(*iface.prefixes, *new))
            else:
                iface = dataclasses.replace(iface, addresses=(*iface.addresses, *new))
            self.set_instance(self.instance.replace_interface(iface), seen_at=m.clock.monotonic())
        log.info(
            "addresses_assigned",
            node=self.name,
            interface=action.interface_id,
            count=action.count,
            prefixes=action.prefixes,
            subnet=action.subnet_id,
        )

    async def _assign_named(self, action: AssignAddresses) -> list[str]:
        """Assign the plan's named addresses; when the cloud refuses them (one is held by someone,
        maybe by an interface the listing cannot see, or the provider names none), once more letting
        the cloud choose, and the subnet is left to the cloud's choice for a while
        (:meth:`~eni_ipam.core.view.CloudView.refuse_dense`)."""
        m = self.env
        try:
            return await m.provider.assign_addresses(
                interface_id=action.interface_id, count=action.count, addresses=action.chosen
            )
        except errors.InvalidRequest as exc:
            m.view.refuse_dense(action.subnet_id)
            log.info(
                "named_addresses_refused",
                node=self.name,
                interface=action.interface_id,
                subnet=action.subnet_id,
                code=exc.code,
            )
        return await m.provider.assign_addresses(interface_id=action.interface_id, count=action.count)

    async def _create(self, action: CreateInterface) -> None:
        m = self.env
        spec = self.resource.spec
        started = m.clock.monotonic()
        if m.ready is not None and self.instance is not None:
            limits = m.view.known_limits(self.instance.type)
            # Never past max_allocate: a ready interface may carry more than this plan asks for.
            room = spec.max_allocate - self.stats.available if spec.max_allocate > 0 else 0
            if limits is not None and (spec.max_allocate <= 0 or room > 0):
                ready = m.ready.take(action, limits=limits, most=room)
                if ready is not None:
                    return await self._attach_ready(action, ready, started)
        tags = interface_tags(
            cluster_name=m.settings.cluster_name,
            node=self.name,
            instance_id=self.resource.instance_id,
            extra=m.settings.interface_tags,
        )
        with m.view.reserve(action.subnet_id, action.addresses + 1) as reservation:  # +1: the primary address
            try:
                iface = await m.provider.create_interface(
                    instance_id=self.resource.instance_id,
                    request=action,
                    tags=tags,
                    token=self._token(action),
                    delete_on_termination=spec.delete_on_termination,
                )
            except errors.ProviderError as exc:
                self._observe_allocation("create-interface", False, started)
                m.metrics.interface_created(subnet=action.subnet_id, outcome=exc.code or "error")
                raise
            reservation.commit()
        m.view.took(
            action.subnet_id,
            addresses=(*([iface.primary_ip] if iface.primary_ip else ()), *iface.addresses),
            prefixes=iface.prefixes,
        )
        self._observe_allocation("create-interface", True, started)
        m.metrics.interface_created(subnet=action.subnet_id, outcome="success")
        m.metrics.addresses_allocated(subnet=action.subnet_id, count=action.addresses)
        assert self.instance is not None
        self.set_instance(self.instance.replace_interface(iface), seen_at=m.clock.monotonic())
        log.info(
            "interface_created",
            node=self.name,
            interface=iface.id,
            device_index=iface.device_index,
            subnet=action.subnet_id,
            count=action.count,
            prefixes=action.prefixes,
        )

    async def _attach_ready(self, action: CreateInterface, ready: Interface, started: float) -> None:
        """Attach a ready interface where the plan would have created one: one call instead of
        create, attach and delete-on-termination. A failure gives it back to the pool (it is still
        detached; the pool's next listing confirms it) and ends the pass as a create's would."""
        m = self.env
        pool = m.ready
        assert pool is not None and self.instance is not None
        try:
            iface = await m.provider.attach_interface(
                interface=ready,
                instance_id=self.resource.instance_id,
                device_index=action.device_index,
                network_card=action.network_card,
            )
        except errors.ProviderError as exc:
            self._observe_allocation("attach-ready-interface", False, started)
            pool.taken(ready, ok=False, outcome=exc.code or type(exc).__name__)
            if not (isinstance(exc, errors.NotFound) and exc.code == "InvalidNetworkInterfaceID.NotFound"):
                pool.give_back(ready)
            log.warning("ready_interface_attach_failed", node=self.name, interface=ready.id, error=str(exc))
            raise
        self._observe_allocation("attach-ready-interface", True, started)
        pool.taken(ready, ok=True)
        m.metrics.addresses_allocated(subnet=ready.subnet_id, count=ready.pool_size)
        self.set_instance(self.instance.replace_interface(iface), seen_at=m.clock.monotonic())
        log.info(
            "ready_interface_attached",
            node=self.name,
            interface=iface.id,
            device_index=iface.device_index,
            subnet=iface.subnet_id,
            count=iface.slots_used,
            prefixes=bool(iface.prefixes),
        )

    def _observe_allocation(self, kind: str, ok: bool, started: float) -> None:
        m = self.env
        m.metrics.allocation_finished(kind=kind, ok=ok, seconds=m.clock.monotonic() - started)

    def _token(self, action: CreateInterface) -> str:
        """Idempotency token: the same planned create (after a retry or a restart) gets the same token,
        so the cloud returns the interface it already made instead of a second one."""
        m = self.env
        key = "|".join(
            (
                m.settings.cluster_name,
                self.resource.instance_id,
                str(action.device_index),
                action.subnet_id,
                str(action.count),
                str(action.prefixes),
                str(len(self.instance.interfaces) if self.instance else 0),
            )
        )
        return "eni-ipam-" + hashlib.sha256(key.encode()).hexdigest()[:40]

    def _log_at_capacity(self, shortfall: int) -> None:
        now = self.env.clock.monotonic()
        if now - self._last_capacity_log >= AT_CAPACITY_LOG_INTERVAL:
            self._last_capacity_log = now
            log.warning("node_at_capacity", node=self.name, shortfall=shortfall)

    # -- release ----------------------------------------------------------------------------------

    async def _release(self, stats: NodeStats, returning: frozenset[str] = frozenset()) -> bool:
        """One step of the release handshake; returns whether anything was unassigned.

        Candidates: the excess (``release_excess_ips``, or a subnet of the node under pressure), and
        the single addresses of a node returning to prefixes (``returning``), which wait no release
        delay. Marks of addresses that are neither any more are aborted."""
        m = self.env
        assert self.instance is not None
        now = m.clock.monotonic()
        excess = stats.excess if m.settings.release_excess_ips or self.pressured else 0
        in_use: Collection[str] = self.resource.in_use
        if returning:
            # The excess is what the node holds beyond its watermarks once the single addresses are gone.
            excess = max(excess - len(returning), 0)
            in_use = frozenset(self.resource.in_use) | returning
        plan = plan_release(self.resource.spec, self.instance, in_use=in_use, excess=excess)
        chosen = plan.candidates() | returning
        answers: Mapping[str, ReleaseState] = self.resource.release_answers
        self._own_release_state()
        # Addresses no longer excess: abort their handshake (released ones stay until the node side clears).
        for address in list(self.marked):
            if address not in chosen:
                del self.marked[address]
                if self.release_status.get(address) != ReleaseState.RELEASED:
                    self.release_status.pop(address, None)
        for address, status in list(self.release_status.items()):
            if status == ReleaseState.RELEASED and address not in answers:
                del self.release_status[address]  # the node side saw it and forgot it: done
        ready: set[str] = set()
        next_due = float("inf")
        for address in sorted(chosen):
            first_seen = self.marked.setdefault(address, now)
            due = first_seen + (0.0 if address in returning else m.settings.excess_ip_release_delay)
            if due > now:
                next_due = min(next_due, due)
                continue
            answer = answers.get(address)
            if self.release_status.get(address) == ReleaseState.MARKED and answer == ReleaseState.READY:
                ready.add(address)
            elif (
                self.release_status.get(address) == ReleaseState.MARKED
                and answer == ReleaseState.DO_NOT_RELEASE
            ):
                del self.marked[address]
                del self.release_status[address]
            else:
                self.release_status[address] = ReleaseState.MARKED
        if next_due < float("inf"):
            self._again_at = next_due
        if not self.marked and not self.release_status:
            self.marked, self.release_status = _NOTHING_MARKED, _NOTHING_RELEASED
        ready -= self.resource.in_use  # never release what the node reports in use, whatever it answered
        if not ready:
            return False
        mutated = False
        for action in (*plan.actions, *self._return_unassigns(returning)):
            addresses = tuple(a for a in action.addresses if a in ready)
            prefixes = tuple(p for p in action.prefixes if all(a in ready for a in expand_prefix(p)))
            if addresses or prefixes:
                await self._unassign(
                    UnassignAddresses(
                        interface_id=action.interface_id,
                        subnet_id=action.subnet_id,
                        addresses=addresses,
                        prefixes=prefixes,
                    )
                )
                mutated = True
        return mutated

    def _own_release_state(self) -> None:
        if self.marked is _NOTHING_MARKED:
            self.marked = {}
        if self.release_status is _NOTHING_RELEASED:
            self.release_status = {}

    async def _unassign(self, action: UnassignAddresses) -> None:
        m = self.env
        started = m.clock.monotonic()
        try:
            await m.provider.unassign_addresses(
                interface_id=action.interface_id, addresses=action.addresses, prefixes=action.prefixes
            )
        except errors.ProviderError:
            m.metrics.release_finished(ok=False, seconds=m.clock.monotonic() - started)
            raise
        m.metrics.release_finished(ok=True, seconds=m.clock.monotonic() - started)
        m.metrics.addresses_released(subnet=action.subnet_id, count=action.size)
        m.view.returned(action.subnet_id, action.size)
        released = set(action.addresses)
        for prefix in action.prefixes:
            released.update(expand_prefix(prefix))
        self._own_release_state()
        for address in released:
            self.marked.pop(address, None)
            self.release_status[address] = ReleaseState.RELEASED
        assert self.instance is not None
        iface = self.instance.interface(action.interface_id)
        if iface is not None:
            iface = dataclasses.replace(
                iface,
                addresses=tuple(a for a in iface.addresses if a not in released),
                prefixes=tuple(p for p in iface.prefixes if p not in action.prefixes),
            )
            self.set_instance(self.instance.replace_interface(iface), seen_at=m.clock.monotonic())
        log.info(
            "addresses_released",
            node=self.name,
            interface=action.interface_id,
            count=action.size,
            subnet=action.subnet_id,
        )
