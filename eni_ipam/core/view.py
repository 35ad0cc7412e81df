"""The shared cloud view: subnets with live free counts, security groups, instance-type limits.

One :class:`CloudView` per manager. A full resync replaces it (:meth:`CloudView.apply`); between
resyncs, passes keep the free counts honest by *reserving* addresses before the call that takes
them (:meth:`CloudView.reserve`) and returning them when an unassign frees them. So two nodes
maintained at once never plan the same last addresses of a subnet.

Invariants:

* The planner sees free counts net of every reservation in flight, never below zero.
* ``ready`` turns true at the first successful :meth:`apply` and never back: no mutation is
  planned on a view that was never synced. Before it, a :meth:`apply_shared` (subnets and groups
  alone) makes ``shared`` true: only a pass that reads its own instance fresh may plan on it.
* An unknown instance type is asked about at most once per :data:`LIMITS_RETRY_INTERVAL`.
* With subnet pressure enabled (``pressure``), every subnet whose free count is exported is judged
  (:mod:`~eni_ipam.core.pressure`) each time that count changes and at each full resync; only those
  subnets are ever under pressure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import math
from collections.abc import Callable, Iterable, Iterator, Mapping

import structlog

from eni_ipam.core import errors
from eni_ipam.core.blocks import SubnetBlocks
from eni_ipam.core.clock import Clock
from eni_ipam.core.model import CloudSnapshot, InstanceLimits, SecurityGroup, Subnet
from eni_ipam.core.observe import ViewObserver
from eni_ipam.core.pressure import PressureTracker, Thresholds
from eni_ipam.core.provider import Provider

log = structlog.get_logger("eni_ipam.core.view")

LIMITS_RETRY_INTERVAL = 60.0
"""An unknown instance type is asked about again at most once a minute."""

DENSE_REFUSAL_HOLD = 3600.0
"""Seconds a subnet where the cloud refused a named address is left to the cloud's choice. A refusal
means someone the listing cannot see holds addresses there (another account in a shared subnet), or
a race with another writer; either may last, and each refusal costs a failed call and a retry. An
hour bounds that to one failed call an hour per subnet, while a subnet freed of its invisible tenant
gets dense placement back without a restart."""


class Reservation:
    """Handed out by :meth:`CloudView.reserve`; ``commit()`` keeps the addresses taken."""

    committed = False

    def commit(self) -> None:
        self.committed = True


class CloudView:
    """What every node's pass reads of the cloud, and the subnet accounting they share."""

    def __init__(
        self,
        provider: Provider,
        *,
        clock: Clock,
        metrics: ViewObserver,
        pressure: Thresholds | None = None,
    ) -> None:
        self._provider = provider
        self._clock = clock
        self._metrics = metrics
        self.ready = False
        """The first full resync has been applied (mutations may be planned)."""
        self.shared = False
        """Subnets and security groups are known (a full resync or :meth:`apply_shared` applied):
        a pass that reads its instance fresh may plan on them before ``ready``."""
        self.subnets: dict[str, Subnet] = {}
        """Subnets as the last resync saw them (free counts as reported then)."""
        self.security_groups: Mapping[str, SecurityGroup] = {}
        self._free: dict[str, int] = {}
        self._limits: dict[str, InstanceLimits] = {}
        self._limits_misses: dict[str, float] = {}
        self._planner_view: dict[str, Subnet] | None = None
        self._held_view: dict[str, Subnet] | None = None
        """The planner's view with each subnet's reserve held back (for ``_held_share``)."""
        self._held_share = 0.0
        self._sizes: dict[str, int] = {}
        """Addresses of each subnet's CIDR (0 when it cannot be read), found on first use."""
        self._published: frozenset[str] = frozenset()
        """The subnets whose free counts are exported (:meth:`publish`)."""
        self.pressure = PressureTracker(pressure) if pressure is not None else None
        """Each exported subnet's pressure (None: subnet pressure is disabled)."""
        self.room_back: Callable[[str], None] | None = None
        """Called with a subnet under pressure that addresses just went back to (an unassign)."""
        self.blocks: Mapping[str, SubnetBlocks] = {}
        """Used addresses and free /28 blocks per subnet, from the last full resync's listing of every
        interface of the VPC, with what this process's calls took since (:meth:`took`); empty when
        the provider does not list them all."""
        self._dense_refused: dict[str, float] = {}
        """Subnets where a named address was refused (:meth:`refuse_dense`) → when."""

    def apply(self, snapshot: CloudSnapshot) -> frozenset[str]:
        """Replace the view with a full resync's (reservations in flight are forgotten with the old
        counts: the cloud's fresh count already includes whatever those calls took). Returns the
        instance types whose limits the resync changed (learnt or revised)."""
        self._take_shared(snapshot)
        changed = frozenset(t for t, limits in snapshot.limits.items() if self._limits.get(t) != limits)
        self._limits.update(snapshot.limits)
        self.ready = self.shared = True
        return changed

    def apply_shared(self, snapshot: CloudSnapshot) -> None:
        """Take the subnets and security groups of ``snapshot`` (a shared view, listed before the
        first full resync ends) as the view; ignored once a full resync was applied (it is at least
        as fresh, and its counts are net of what the passes since took)."""
        if not self.ready:
            self._take_shared(snapshot)
            self.shared = True

    def _take_shared(self, snapshot: CloudSnapshot) -> None:
        """The subnets, with their free counts as listed, and the security groups of ``snapshot``."""
        self.subnets = dict(snapshot.subnets)
        self.blocks = dict(snapshot.blocks) if snapshot.blocks is not None else {}
        self._free = {sid: s.available for sid, s in snapshot.subnets.items()}
        self._planner_view = self._held_view = None
        self.security_groups = dict(snapshot.security_groups)

    # -- subnets ----------------------------------------------------------------------------------

    def free(self) -> Mapping[str, int]:
        """Free addresses per subnet, net of reservations (may dip below zero while calls race)."""
        return self._free

    def planner_subnets(self, *, reserve: float = 0.0) -> Mapping[str, Subnet]:
        """Subnets with their free counts net of reservations: what the planner must see.

        ``reserve``: with each subnet's reserve (that share of its CIDR, :meth:`held_back`) taken off
        its free count as well — what allocations made only for a node's watermarks may use."""
        if self._planner_view is None:
            self._planner_view = {
                sid: dataclasses.replace(s, available=max(self._free.get(sid, 0), 0))
                for sid, s in self.subnets.items()
            }
        if reserve <= 0:
            return self._planner_view
        if self._held_view is None or self._held_share != reserve:
            self._held_share = reserve
            self._held_view = {
                sid: dataclasses.replace(s, available=max(s.available - self.held_back(sid, reserve), 0))
                for sid, s in self._planner_view.items()
            }
        return self._held_view

    def held_back(self, subnet_id: str, reserve: float) -> int:
        """The addresses of ``subnet_id`` that ``reserve`` (a share of its CIDR) keeps for pods."""
        return math.ceil(self.size(subnet_id) * reserve)

    def size(self, subnet_id: str) -> int:
        """Addresses in ``subnet_id``'s CIDR (0 when unknown)."""
        size = self._sizes.get(subnet_id)
        if size is None:
            subnet = self.subnets.get(subnet_id)
            try:
                size = ipaddress.ip_network(subnet.cidr, strict=False).num_addresses if subnet else 0
            except ValueError:
                size = 0
            self._sizes[subnet_id] = size
        return size

    def publish(self, in_use: Iterable[str]) -> None:
        """Export the free counts of the subnets eni-ipam fills, ``in_use`` (those some node has an
        interface in, its primary's included), and of no other: a listing names every subnet of the
        VPC, or of the region, database tiers included, and an alert on those would page for
        what eni-ipam neither uses nor can help. Called after each full resync is applied."""
        view = self.planner_subnets()
        self._published = frozenset(sid for sid in in_use if sid in view)
        self._metrics.replace_subnets(view[sid] for sid in sorted(self._published))
        if self.pressure is not None:
            self.pressure.forget(self._published)
            for sid in sorted(self._published):
                self._judge(sid)

    def under_pressure(self, subnet_id: str) -> bool:
        """Whether ``subnet_id`` is under pressure now (never, with pressure disabled)."""
        return self.pressure is not None and self.pressure.under(subnet_id)

    def _judge(self, subnet_id: str) -> None:
        """Judge one exported subnet's pressure on its free count now, and export it."""
        tracker = self.pressure
        assert tracker is not None
        changed = tracker.see(
            subnet_id,
            free=self._free.get(subnet_id, 0),
            size=self.size(subnet_id),
            now=self._clock.monotonic(),
        )
        self._metrics.subnet_pressure(
            self.subnets[subnet_id], under=tracker.under(subnet_id), changed=changed
        )
        if changed:
            log.info(
                "subnet_pressure" if tracker.under(subnet_id) else "subnet_pressure_ended",
                subnet=subnet_id,
                free=self._free.get(subnet_id, 0),
                size=self.size(subnet_id),
            )

    def cidr(self, subnet_id: str) -> str | None:
        subnet = self.subnets.get(subnet_id)
        return subnet.cidr if subnet is not None else None

    @contextlib.contextmanager
    def reserve(self, subnet_id: str, count: int) -> Iterator[Reservation]:
        """Take ``count`` addresses off a subnet's free count for the duration of a call; they are
        given back unless the call commits them."""
        reservation = Reservation()
        self._adjust(subnet_id, -count)
        try:
            yield reservation
        finally:
            if not reservation.committed:
                self._adjust(subnet_id, count)

    def returned(self, subnet_id: str, count: int) -> None:
        """``count`` addresses went back to the subnet (an unassign succeeded)."""
        self._adjust(subnet_id, count)
        if self.room_back is not None and self.under_pressure(subnet_id):
            self.room_back(subnet_id)

    def took(self, subnet_id: str, *, addresses: Iterable[str] = (), prefixes: Iterable[str] = ()) -> None:
        """A call of this process assigned ``addresses`` and ``prefixes`` in ``subnet_id``: counted
        as used until the next full resync lists them, so the next plan neither names them again nor
        counts their blocks free."""
        blocks = self.blocks.get(subnet_id)
        subnet = self.subnets.get(subnet_id)
        if blocks is None or subnet is None:
            return
        blocks.mark(addresses, prefixes)
        if blocks.free_blocks != subnet.free_blocks:
            self.subnets[subnet_id] = dataclasses.replace(subnet, free_blocks=blocks.free_blocks)
            self._planner_view = self._held_view = None
            if subnet_id in self._published:
                self._metrics.set_subnet_free_blocks(self.subnets[subnet_id], blocks.free_blocks)

    def refuse_dense(self, subnet_id: str) -> None:
        """The cloud refused an address a plan named in ``subnet_id`` (taken meanwhile, or held by an
        interface the listing cannot see): plans let the cloud choose there for
        :data:`DENSE_REFUSAL_HOLD`."""
        self._dense_refused[subnet_id] = self._clock.monotonic()

    def dense_refused(self) -> frozenset[str]:
        """The subnets where plans must not name addresses now (:meth:`refuse_dense`)."""
        if not self._dense_refused:
            return frozenset()
        now = self._clock.monotonic()
        for sid, at in list(self._dense_refused.items()):
            if now - at >= DENSE_REFUSAL_HOLD:
                del self._dense_refused[sid]
        return frozenset(self._dense_refused)

    def _adjust(self, subnet_id: str, delta: int) -> None:
        if subnet_id in self._free:
            self._free[subnet_id] += delta
            self._planner_view = self._held_view = None
            if subnet_id in self._published:
                self._metrics.set_subnet_free(self.subnets[subnet_id], self._free[subnet_id])
                if self.pressure is not None:
                    self._judge(subnet_id)

    # -- instance-type limits ---------------------------------------------------------------------

    def known_limits(self, instance_type: str) -> InstanceLimits | None:
        """The limits already known for ``instance_type`` (no call)."""
        return self._limits.get(instance_type)

    async def limits(self, instance_type: str) -> InstanceLimits | None:
        """The limits of ``instance_type``, asking the provider about a type not known yet (at most
        once per :data:`LIMITS_RETRY_INTERVAL`); None while they are unknown."""
        known = self._limits.get(instance_type)
        if known is not None:
            return known
        now = self._clock.monotonic()
        if now - self._limits_misses.get(instance_type, float("-inf")) < LIMITS_RETRY_INTERVAL:
            return None
        try:
            limits = await self._provider.instance_limits(instance_type=instance_type)
        except errors.LimitsUnknown:
            self._limits_misses[instance_type] = now
            log.warning("instance_limits_unknown", instance_type=instance_type)
            return None
        self._limits[instance_type] = limits
        return limits
