"""The planner: from a node's spec and the cloud's view to what should change. Pure: state in, plan out.

Decisions it makes, and why:

* **Fewest mutating calls.** Existing interfaces are filled before any is created (one call versus
  three: create, attach, delete-on-termination). When one existing interface can take the whole
  deficit, the lowest-indexed such interface takes it in one call; otherwise interfaces are filled
  largest room first, which needs the fewest calls. Several calls may be planned in one pass.
* **Deterministic.** Interfaces are visited by device index, subnets and groups ordered by id on
  ties, so the same state always gives the same plan (the reference operator iterates a Go map).
* **Slack never costs a call.** ``max_above_watermark`` (the ``bonus``) only rides on calls the
  plan makes anyway; it never creates an interface of its own.
* **Prefix delegation** plans /28 prefixes (16 addresses per slot) while the node is prefix
  delegated, skipping subnets known to have no free aligned /28 (``no_prefix_subnets``): first
  prefixes on existing interfaces, then prefixes on new interfaces in eligible subnets, and only
  then plain addresses — which ends the node's prefix delegation.
* **Placed where they fit** (``placement``): a subnet gets at most as many prefixes as its counted
  free /28 blocks (``Subnet.free_blocks``, :mod:`eni_ipam.core.blocks`), so a fragmented subnet is
  skipped before the cloud refuses it. ``dense``: single addresses on existing interfaces are named
  inside broken blocks, keeping whole blocks for prefixes (:func:`dense_plan`).
* **Release** takes only pool addresses that are not in use (the primary is never in the pool),
  interface with the most candidates first, one call per interface, whole unused prefixes first.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence

from eni_ipam.core.blocks import SubnetBlocks
from eni_ipam.core.model import (
    PREFIX_SIZE,
    AllocationPlan,
    AssignAddresses,
    AssignIpv6Prefix,
    CreateInterface,
    Instance,
    InstanceLimits,
    Interface,
    Ipv6Plan,
    NodeStats,
    ReleasePlan,
    SecurityGroup,
    Subnet,
    UnassignAddresses,
    address_key,
    allocation_plan,
    assignment,
    computed_stats,
    expand_prefix,
    tags_match,
)
from eni_ipam.core.pressure import pressure_watermarks
from eni_ipam.core.spec import NodeSpec
from eni_ipam.core.watermarks import excess_ips, max_allocatable, needed_ips

_UNCOUNTED = 1 << 30
"""The prefix room of a subnet whose free /28 blocks are not counted: bounded by nothing else."""


def is_excluded(interface: Interface, spec: NodeSpec) -> bool:
    """Excluded interfaces are neither counted nor filled: on a network card the pool does not use
    (``network_cards``), below the first index (on card 0), tagged out, or of a kind no pool fills
    (EFA-only, trunk, …: :data:`~eni_ipam.core.devices.FILLABLE`)."""
    card = interface.network_card
    return (
        not interface.fillable
        or card not in spec.network_cards
        or (card == 0 and interface.device_index < spec.first_interface_index)
        or tags_match(interface.tags, spec.exclude_interface_tags)
    )


def managed_interfaces(instance: Instance, spec: NodeSpec) -> Sequence[Interface]:
    """The interfaces of ``instance`` the node's pool counts and fills (:func:`is_excluded`)."""
    if (
        instance.plain
        and spec.first_interface_index <= 0
        and not spec.exclude_interface_tags
        and 0 in spec.network_cards
    ):
        return instance.interfaces  # nothing to exclude (the common case, kept cheap)
    return [i for i in instance.interfaces if not is_excluded(i, spec)]


def is_prefix_delegated(
    spec: NodeSpec,
    instance: Instance,
    limits: InstanceLimits,
    *,
    enabled: bool,
    managed: Sequence[Interface] | None = None,
) -> bool:
    """Prefix delegated: enabled, Nitro, not disabled by the spec, and no managed interface holds plain
    secondary addresses (a single plain address ends it: the two modes do not mix on a node). A
    provider offering prefixes only (``limits.addresses`` false) is always prefix delegated."""
    if not limits.addresses:
        return limits.supports_prefixes
    if not (enabled and limits.supports_prefixes and not spec.disable_prefix_delegation):
        return False
    interfaces = managed if managed is not None else managed_interfaces(instance, spec)
    # A prefix takes one slot and adds 16 addresses, a plain address takes one slot and adds one.
    return all(i.pool_size == PREFIX_SIZE * i.slots_used for i in interfaces)


def usable_free_slots(instance: Instance, spec: NodeSpec, limits: InstanceLimits) -> list[tuple[int, int]]:
    """(network card, device index) slots where a new interface may be attached: the pool's cards in
    the spec's order, each lowest index first, card 0 from ``first_interface_index`` (none where the
    cloud cannot attach to a running instance)."""
    if not limits.hot_attach:
        return []
    if instance.plain and spec.network_cards == (0,):  # one card (the common case, kept cheap)
        taken = {i.device_index for i in instance.interfaces}
        return [(0, d) for d in range(spec.first_interface_index, limits.adapters) if d not in taken]
    held = {(i.network_card, i.device_index) for i in instance.interfaces}
    return [
        (card, d)
        for card in spec.network_cards
        for d in range(spec.first_interface_index if card == 0 else 0, limits.adapters_on(card))
        if (card, d) not in held
    ]


def _room(interface: Interface, limits: InstanceLimits) -> int:
    """Free slots on an interface (a secondary address and a prefix take one slot each)."""
    return max(limits.slots_per_interface - interface.slots_used, 0)


def node_stats(
    spec: NodeSpec,
    instance: Instance,
    limits: InstanceLimits,
    *,
    used: int,
    prefix_delegation: bool,
    pressure: bool = False,
    pending_pods: int = 0,
) -> NodeStats:
    """Pool size, watermarks and capacity of one node as the given view shows it. Called for every
    node at every change and, at start, for every node of the cluster: kept to one loop over the
    interfaces. ``pressure``: a subnet of the pool is under pressure, and the watermarks keep only
    what pods use or wait for (``pending_pods``; :func:`~eni_ipam.core.pressure.pressure_watermarks`)."""
    managed = managed_interfaces(instance, spec)
    pd = (prefix_delegation or not limits.addresses) and is_prefix_delegated(
        spec, instance, limits, enabled=prefix_delegation, managed=managed
    )
    per_slot = PREFIX_SIZE if pd else 1
    slots = limits.slots_per_interface
    available = taken = open_interfaces = 0
    for iface in managed:
        available += iface.pool_size
        taken += iface.slots_used
        if iface.slots_used < slots:
            open_interfaces += 1
    capacity = len(managed) * slots * per_slot
    if not pd:
        # Leftover prefixes on a node that is no longer delegated still count at their full size:
        # each adds 15 addresses beyond its slot, and nothing else does.
        capacity += available - taken
    free_slots = usable_free_slots(instance, spec, limits)
    capacity += len(free_slots) * slots * per_slot
    remaining = open_interfaces + len(free_slots)
    # An IPv6-only pool keeps no IPv4 watermark: its pods take addresses of the node's /80.
    v4 = spec.address_family != "ipv6"
    pre = spec.pre_allocate if v4 else 0  # resolved when the spec was parsed (0 is the default already)
    min_allocate = spec.min_allocate if v4 else 0
    max_allocate = spec.max_allocate or max_allocatable(
        limits,
        first_interface_index=spec.first_interface_index,
        prefix_delegated=pd,
        network_cards=spec.network_cards,
    )
    slack = spec.max_above_watermark
    if pressure and v4:
        pre, min_allocate, slack = pressure_watermarks(
            pre_allocate=pre,
            min_allocate=min_allocate,
            max_above_watermark=slack,
            used=used,
            waiting=pending_pods,
        )
    needed = needed_ips(
        available=available,
        used=used,
        pre_allocate=pre,
        min_allocate=min_allocate,
        max_allocate=max_allocate,
    )
    excess = excess_ips(
        available=available,
        used=used,
        pre_allocate=pre,
        min_allocate=min_allocate,
        max_above_watermark=slack,
    )
    return computed_stats(
        available, used, needed, excess, capacity, remaining, remaining == 0, instance.running, pd
    )


# --- new-interface placement -------------------------------------------------------------------


def _most_free(candidates: list[Subnet], free: Mapping[str, int], minimum: int) -> Subnet | None:
    eligible = [s for s in candidates if free.get(s.id, 0) >= minimum]
    if not eligible:
        return None
    return min(eligible, key=lambda s: (-free.get(s.id, 0), s.id))


def choose_subnet(
    spec: NodeSpec,
    instance: Instance,
    limits: InstanceLimits,
    subnets: Mapping[str, Subnet],
    free: Mapping[str, int],
    *,
    minimum: int = 1,
    exclude: Collection[str] = (),
    ipv6: bool = False,
) -> Subnet | None:
    """Subnet for a new interface: ``subnet_ids`` (most free) → ``subnet_tags`` (most free) → the node's
    own subnet if it has room for a full interface → the most free subnet in the same VPC and zone.
    Only subnets in the instance's VPC and zone qualify (with an IPv6 block, when ``ipv6``);
    ``minimum`` free addresses are required."""
    local = sorted(
        (
            s
            for s in subnets.values()
            if s.vpc_id == instance.vpc_id
            and s.zone == instance.zone
            and s.id not in exclude
            and (s.ipv6_cidr or not ipv6)
        ),
        key=lambda s: s.id,
    )
    if spec.subnet_ids:
        return _most_free([s for s in local if s.id in spec.subnet_ids], free, minimum)
    if spec.subnet_tags:
        return _most_free([s for s in local if tags_match(s.tags, spec.subnet_tags)], free, minimum)
    own = next((s for s in local if s.id == instance.subnet_id), None)
    if own is not None and free.get(own.id, 0) >= max(limits.ipv4_per_interface, minimum):
        return own
    return _most_free(local, free, minimum)


def choose_security_groups(
    spec: NodeSpec, instance: Instance, groups: Mapping[str, SecurityGroup]
) -> tuple[str, ...]:
    """``security_groups`` → groups of the VPC matching all ``security_group_tags`` → the primary's groups."""
    if spec.security_groups:
        return tuple(sorted(spec.security_groups))
    if spec.security_group_tags:
        tagged = sorted(
            g.id
            for g in groups.values()
            if g.vpc_id == instance.vpc_id and tags_match(g.tags, spec.security_group_tags)
        )
        if tagged:
            return tuple(tagged)
    primary = instance.primary()
    return tuple(sorted(primary.security_groups)) if primary else ()


# --- allocation ----------------------------------------------------------------------------------


class _Free(dict[str, int]):
    """Free addresses per subnet for one plan: read from the subnets on first use, then tracked.

    A plan touches one or two subnets; copying every subnet of a large VPC for every node's plan
    made planning a cluster cost nodes × subnets.
    """

    __slots__ = ("_subnets",)

    def __init__(self, subnets: Mapping[str, Subnet]) -> None:  # the dict starts empty: no super()
        self._subnets = subnets

    def __missing__(self, subnet_id: str) -> int:
        subnet = self._subnets.get(subnet_id)
        if subnet is None:
            raise KeyError(subnet_id)
        value = self[subnet_id] = max(subnet.available, 0)
        return value

    def get(self, subnet_id: str, default: int = 0) -> int:  # type: ignore[override]
        try:
            return self[subnet_id]
        except KeyError:
            return default


@dataclasses.dataclass(slots=True)
class _Draft:
    """Mutable scratch state of one planning run."""

    spec: NodeSpec
    instance: Instance
    limits: InstanceLimits
    subnets: Mapping[str, Subnet]
    groups: Mapping[str, SecurityGroup]
    free: dict[str, int]
    free_slots: list[tuple[int, int]] | None = None
    """(network card, device index) slots a new interface may take, found when the first is needed
    (most plans fit on the interfaces there are)."""
    assigns: dict[str, AssignAddresses] = dataclasses.field(default_factory=dict)
    creates: list[CreateInterface] = dataclasses.field(default_factory=list)
    reason: str = ""
    blocks_left: dict[str, int] | None = None
    """Free /28 blocks per subnet this plan has not taken yet, read from ``Subnet.free_blocks`` on
    first use (None: placement by the count is off, and every subnet may take prefixes)."""

    def block_room(self, subnet_id: str) -> int:
        """Prefixes ``subnet_id`` can still take by the count (unbounded when not counted)."""
        left = self.blocks_left
        if left is None:
            return _UNCOUNTED
        if subnet_id not in left:
            subnet = self.subnets.get(subnet_id)
            counted = subnet.free_blocks if subnet is not None else -1
            left[subnet_id] = counted if counted >= 0 else _UNCOUNTED
        return left[subnet_id]

    def take_blocks(self, subnet_id: str, n: int) -> None:
        if self.blocks_left is not None and self.block_room(subnet_id) != _UNCOUNTED:
            self.blocks_left[subnet_id] -= n

    def no_blocks(self) -> set[str]:
        """Subnets the count says have no free /28 left for this plan."""
        if self.blocks_left is None:
            return set()
        return {sid for sid in self.subnets if self.block_room(sid) <= 0}

    def fill_existing(
        self,
        remaining: int,
        *,
        prefixes: bool,
        skip_subnets: Collection[str],
        rooms: list[tuple[Interface, int]] | None = None,
    ) -> int:
        """Spread ``remaining`` over the interfaces there are, the roomiest first (``rooms``: their
        room, already found, none taking it all); returns what did not fit."""
        unit = PREFIX_SIZE if prefixes else 1
        slots = self.limits.slots_per_interface
        free, assigns = self.free, self.assigns
        single: tuple[Interface, int] | None = None
        if rooms is None:
            rooms = []
            for iface in managed_interfaces(self.instance, self.spec):
                subnet_id = iface.subnet_id
                if iface.id in assigns or subnet_id in skip_subnets:
                    continue
                available = free[subnet_id] if subnet_id in free else free.get(subnet_id, 0)
                room = min(slots - iface.slots_used, available // unit)
                if prefixes:
                    room = min(room, self.block_room(subnet_id))
                if room >= remaining:
                    single = (iface, room)  # the first interface taking it all: one call, no sort
                    break
                if room > 0:
                    rooms.append((iface, room))
        order = [single] if single else sorted(rooms, key=lambda ir: (-ir[1], ir[0].device_index))
        for iface, room in order:
            if remaining <= 0:
                break
            # Interfaces sharing a subnet share its free addresses: the rooms were each found
            # against the whole count, so what the ones before took is taken off here.
            n = min(room, remaining, free.get(iface.subnet_id, 0) // unit)
            if prefixes:
                n = min(n, self.block_room(iface.subnet_id))
            if n <= 0:
                continue
            assigns[iface.id] = assignment(iface.id, iface.subnet_id, n, prefixes)
            free[iface.subnet_id] -= n * unit
            if prefixes:
                self.take_blocks(iface.subnet_id, n)
            remaining -= n
        return remaining

    def _slots_left(self) -> bool:
        """Whether an interface has a slot this plan leaves empty."""
        slots = self.limits.slots_per_interface
        for iface in managed_interfaces(self.instance, self.spec):
            planned = self.assigns.get(iface.id)
            if iface.slots_used + (planned.count if planned is not None else 0) < slots:
                return True
        return False

    def create_new(self, remaining: int, *, prefixes: bool, skip_subnets: Collection[str]) -> int:
        unit = PREFIX_SIZE if prefixes else 1
        if remaining > 0 and self.free_slots is None:
            self.free_slots = usable_free_slots(self.instance, self.spec, self.limits)
        while remaining > 0:
            if not self.free_slots:
                # No adapter slot left: at capacity only when the interfaces are full too; slots
                # left empty for want of subnet addresses are the subnet's doing.
                self.reason = "no-subnet" if self._slots_left() else "at-capacity"
                break
            # A new interface takes its primary address from the subnet besides what it carries: a
            # subnet with one free address has no room for one.
            subnet = choose_subnet(
                self.spec,
                self.instance,
                self.limits,
                self.subnets,
                self.free,
                minimum=unit + 1,
                exclude={*skip_subnets, *self.no_blocks()} if prefixes else skip_subnets,
            )
            if subnet is None:
                self.reason = "no-subnet"
                break
            groups = choose_security_groups(self.spec, self.instance, self.groups)
            if not groups:
                self.reason = "no-security-groups"
                break
            n = min(remaining, self.limits.slots_per_interface, (self.free[subnet.id] - 1) // unit)
            if prefixes:
                n = min(n, self.block_room(subnet.id))
                self.take_blocks(subnet.id, n)
            card, index = self.free_slots.pop(0)
            self.creates.append(
                CreateInterface(
                    subnet_id=subnet.id,
                    security_groups=groups,
                    device_index=index,
                    count=n,
                    prefixes=prefixes,
                    network_card=card,
                )
            )
            self.free[subnet.id] -= n * unit + 1
            remaining -= n
        return remaining

    def add_bonus(self, bonus: int) -> None:
        """Top up planned calls with slack, in plan order, within their room and subnet."""
        if bonus <= 0:
            return
        for iface_id, action in list(self.assigns.items()):
            iface = self.instance.interface(iface_id)
            unit = PREFIX_SIZE if action.prefixes else 1
            room = _room(iface, self.limits) - action.count if iface else 0
            extra = min(bonus, room, self.free.get(action.subnet_id, 0) // unit)
            if action.prefixes:
                extra = min(extra, self.block_room(action.subnet_id))
            if extra > 0:
                self.assigns[iface_id] = dataclasses.replace(action, count=action.count + extra)
                self.free[action.subnet_id] -= extra * unit
                if action.prefixes:
                    self.take_blocks(action.subnet_id, extra)
                bonus -= extra
        for n, create in enumerate(self.creates):
            unit = PREFIX_SIZE if create.prefixes else 1
            room = self.limits.slots_per_interface - create.count
            extra = min(bonus, room, self.free.get(create.subnet_id, 0) // unit)
            if create.prefixes:
                extra = min(extra, self.block_room(create.subnet_id))
            if extra > 0:
                self.creates[n] = dataclasses.replace(create, count=create.count + extra)
                self.free[create.subnet_id] -= extra * unit
                if create.prefixes:
                    self.take_blocks(create.subnet_id, extra)
                bonus -= extra


def plan_allocation(
    spec: NodeSpec,
    instance: Instance,
    limits: InstanceLimits,
    subnets: Mapping[str, Subnet],
    groups: Mapping[str, SecurityGroup],
    *,
    must: int,
    bonus: int = 0,
    prefix_delegation: bool = False,
    no_prefix_subnets: Collection[str] = (),
    placement: bool = False,
    dense: Mapping[str, SubnetBlocks] | None = None,
    returning: bool = False,
) -> AllocationPlan:
    """Plan how to add ``must`` addresses (plus up to ``bonus`` riding along) to a node.

    ``subnets[...].available`` must already account for addresses other nodes are about to take.

    ``placement``: prefixes go only where ``Subnet.free_blocks`` (when counted) leaves a whole /28
    for each, existing interfaces and new ones alike; ``no_prefix_subnets`` (what the cloud refused
    in this pass) is skipped as well. ``dense``: the subnets where single addresses are named inside
    broken /28 blocks (:func:`dense_plan`). ``returning``: plan prefixes for a node that holds single
    addresses (the return to prefix delegation: the node's single addresses are on their way out).
    """
    if must <= 0:
        return AllocationPlan()
    # Plain addresses offered and delegation off (the common case): no need to look further.
    pd = (prefix_delegation or not limits.addresses) and (
        returning or is_prefix_delegated(spec, instance, limits, enabled=prefix_delegation)
    )
    rooms: list[tuple[Interface, int]] | None = None
    if not pd:
        single = _one_call(spec, instance, limits, subnets, must=must, bonus=bonus)
        if isinstance(single, AllocationPlan):
            return dense_plan(single, dense) if dense else single
        rooms = single
    plan = _plan(
        spec,
        instance,
        limits,
        subnets,
        groups,
        must=must,
        bonus=bonus,
        pd=pd,
        no_prefix_subnets=no_prefix_subnets,
        rooms=rooms,
        placement=placement,
    )
    return dense_plan(plan, dense) if dense else plan


def dense_plan(plan: AllocationPlan, dense: Mapping[str, SubnetBlocks]) -> AllocationPlan:
    """``plan`` with the single addresses of its assigns on existing interfaces named, in subnets of
    ``dense``: the free addresses of the fullest broken /28 blocks first
    (:meth:`~eni_ipam.core.blocks.SubnetBlocks.pick`), so whole blocks stay free for prefixes. An
    assign the subnet cannot name all of (fewer free addresses known than asked) is left to the
    cloud's choice; so are new interfaces (EC2 chooses their addresses)."""
    actions = list(plan.actions)
    named: dict[str, list[str]] = {}
    changed = False
    for n, action in enumerate(actions):
        if not isinstance(action, AssignAddresses) or action.prefixes or action.chosen:
            continue
        blocks = dense.get(action.subnet_id)
        if blocks is None:
            continue
        taken = named.setdefault(action.subnet_id, [])
        chosen = blocks.pick(action.count, taken=taken)
        if len(chosen) == action.count:
            taken.extend(chosen)
            actions[n] = dataclasses.replace(action, chosen=tuple(chosen))
            changed = True
    if not changed:
        return plan
    return dataclasses.replace(plan, actions=tuple(actions))


def _one_call(
    spec: NodeSpec,
    instance: Instance,
    limits: InstanceLimits,
    subnets: Mapping[str, Subnet],
    *,
    must: int,
    bonus: int,
) -> AllocationPlan | list[tuple[Interface, int]]:
    """The plan when the first interface (in device order) with room for all ``must`` plain
    addresses in its subnet takes them, with what of ``bonus`` fits beside. The same plan as the
    general path's (fill the first interface that takes it all, then top it up), without its scratch
    state: most plans of a cluster are this one call. When no interface has the room: the room of
    each that has some, in device order, where the general path starts."""
    slots = limits.slots_per_interface
    rooms: list[tuple[Interface, int]] = []
    for iface in managed_interfaces(instance, spec):
        subnet = subnets.get(iface.subnet_id)
        if subnet is None:
            continue
        room = min(slots - iface.slots_used, max(subnet.available, 0))
        if room >= must:
            count = must + max(min(bonus, room - must), 0)
            action = assignment(iface.id, iface.subnet_id, count, False)
            return allocation_plan((action,), 0, "", False)
        if room > 0:
            rooms.append((iface, room))
    return rooms


def _plan(
    spec: NodeSpec,
    instance: Instance,
    limits: InstanceLimits,
    subnets: Mapping[str, Subnet],
    groups: Mapping[str, SecurityGroup],
    *,
    must: int,
    bonus: int,
    pd: bool,
    no_prefix_subnets: Collection[str],
    rooms: list[tuple[Interface, int]] | None,
    placement: bool = False,
) -> AllocationPlan:
    """The general plan: fill the interfaces there are, then create new ones, then add the bonus.
    ``rooms``: the plain-address room of the interfaces, when :func:`_one_call` found it."""
    draft = _Draft(
        spec=spec,
        instance=instance,
        limits=limits,
        subnets=subnets,
        groups=groups,
        free=_Free(subnets),
        blocks_left={} if placement and pd else None,
    )
    if pd:
        want = math.ceil(must / PREFIX_SIZE)
        left = draft.fill_existing(want, prefixes=True, skip_subnets=no_prefix_subnets)
        left = draft.create_new(left, prefixes=True, skip_subnets=no_prefix_subnets)
        extra = math.ceil((must + bonus) / PREFIX_SIZE) - want
        draft.add_bonus(extra)
        placed = sum(a.addresses for a in draft.assigns.values()) + sum(c.addresses for c in draft.creates)
        remaining = max(must - placed, 0) if left > 0 else 0
        if remaining > 0:
            # No prefix anywhere: plain addresses on what remains (this ends delegation for the node).
            draft.reason = ""
            remaining = draft.fill_existing(remaining, prefixes=False, skip_subnets=())
            remaining = draft.create_new(remaining, prefixes=False, skip_subnets=())
            planned: list[AssignAddresses | CreateInterface] = [*draft.assigns.values(), *draft.creates]
            pd = all(a.prefixes for a in planned)
    else:
        remaining = draft.fill_existing(must, prefixes=False, skip_subnets=(), rooms=rooms)
        remaining = draft.create_new(remaining, prefixes=False, skip_subnets=())
        draft.add_bonus(bonus)
    assigns = draft.assigns
    # In device order (the instance's interfaces are in it): the calls' order does not depend on
    # which interface had the most room.
    ordered_assigns = (
        [assigns[i.id] for i in instance.interfaces if i.id in assigns]
        if len(assigns) > 1
        else list(assigns.values())
    )
    return allocation_plan(
        (*ordered_assigns, *draft.creates),
        max(remaining, 0),
        draft.reason if remaining > 0 else "",
        pd,
    )


def first_new_interface(
    spec: NodeSpec,
    instance: Instance,
    limits: InstanceLimits,
    subnets: Mapping[str, Subnet],
    groups: Mapping[str, SecurityGroup],
    *,
    prefix_delegation: bool,
) -> CreateInterface | None:
    """The first interface the planner would create for ``instance`` as a fresh node: its primary
    interface alone, without secondary addresses, no pod running or pending. None when a fresh node
    of this spec needs no new interface (its primary takes the watermarks), or cannot get one.

    What the pool of ready interfaces makes ahead of nodes (:mod:`eni_ipam.core.readypool`): the same
    subnet, security groups and number of addresses (or /28 prefixes) the node's first plan asks
    for, so a joining node takes one as it is."""
    primary = instance.primary()
    if primary is None:
        return None
    fresh = dataclasses.replace(
        instance,
        interfaces=(dataclasses.replace(primary, addresses=(), prefixes=(), ipv6_prefixes=()),),
        running=True,
    )
    stats = node_stats(spec, fresh, limits, used=0, prefix_delegation=prefix_delegation)
    if stats.needed <= 0:
        return None
    plan = plan_allocation(
        spec,
        fresh,
        limits,
        subnets,
        groups,
        must=stats.needed,
        bonus=max(spec.max_above_watermark, 0),
        prefix_delegation=prefix_delegation,
    )
    return next((a for a in plan.actions if isinstance(a, CreateInterface)), None)


# --- IPv6 -----------------------------------------------------------------------------------------


def has_ipv6_prefix(instance: Instance, spec: NodeSpec) -> bool:
    """Whether an interface of the pool holds an IPv6 prefix (the node's IPv6 pool)."""
    return any(i.ipv6_prefixes for i in managed_interfaces(instance, spec))


def _ipv6_home(instance: Instance, spec: NodeSpec, subnets: Mapping[str, Subnet]) -> Interface | None:
    """The first interface of the pool (card, then device order) whose subnet has an IPv6 block."""
    for iface in managed_interfaces(instance, spec):
        subnet = subnets.get(iface.subnet_id)
        if subnet is not None and subnet.ipv6_cidr:
            return iface
    return None


def plan_ipv6(
    spec: NodeSpec,
    instance: Instance,
    limits: InstanceLimits,
    subnets: Mapping[str, Subnet],
    groups: Mapping[str, SecurityGroup],
) -> Ipv6Plan:
    """What a node of family ``ipv6`` or ``dual`` lacks for its one IPv6 /80 prefix.

    The prefix goes on the first interface of the pool (card, then device order: the primary when it
    is the pool's) whose subnet has an IPv6 block, in one call. Without one, a new interface carries
    it (``Ipv6PrefixCount`` on its create), in a subnet chosen as for any new interface among those
    with an IPv6 block. The prefix is never planned twice, nor released: it is the node's for its
    life, as the AWS VPC CNI keeps it."""
    if spec.address_family == "ipv4" or has_ipv6_prefix(instance, spec):
        return Ipv6Plan()
    if not limits.ipv6_prefixes:
        return Ipv6Plan(reason="no-ipv6-prefixes")
    home = _ipv6_home(instance, spec, subnets)
    if home is not None:
        return Ipv6Plan(action=AssignIpv6Prefix(interface_id=home.id, subnet_id=home.subnet_id))
    slots = usable_free_slots(instance, spec, limits)
    if not slots:
        return Ipv6Plan(reason="no-ipv6-subnet" if managed_interfaces(instance, spec) else "at-capacity")
    free = {sid: max(s.available, 0) for sid, s in subnets.items()}
    subnet = choose_subnet(spec, instance, limits, subnets, free, minimum=1, ipv6=True)
    if subnet is None:
        return Ipv6Plan(reason="no-ipv6-subnet")
    chosen = choose_security_groups(spec, instance, groups)
    if not chosen:
        return Ipv6Plan(reason="no-security-groups")
    card, index = slots[0]
    create = CreateInterface(
        subnet_id=subnet.id,
        security_groups=chosen,
        device_index=index,
        count=0,
        network_card=card,
        ipv6_prefixes=1,
    )
    return Ipv6Plan(action=create)


def carrying_ipv6_prefix(
    plan: AllocationPlan,
    spec: NodeSpec,
    instance: Instance,
    limits: InstanceLimits,
    subnets: Mapping[str, Subnet],
) -> AllocationPlan:
    """``plan`` with its first new interface in a subnet with an IPv6 block carrying the node's IPv6
    prefix, when the node lacks one and no interface it has could take it: one request
    (``Ipv6PrefixCount`` on the create) where a create and an assign would be two."""
    if spec.address_family == "ipv4" or not limits.ipv6_prefixes or has_ipv6_prefix(instance, spec):
        return plan
    if _ipv6_home(instance, spec, subnets) is not None:
        return plan  # an interface there takes it in its own call (plan_ipv6)
    actions = list(plan.actions)
    for n, action in enumerate(actions):
        if isinstance(action, CreateInterface):
            subnet = subnets.get(action.subnet_id)
            if subnet is not None and subnet.ipv6_cidr:
                actions[n] = dataclasses.replace(action, ipv6_prefixes=1)
                return dataclasses.replace(plan, actions=tuple(actions))
    return plan


# --- release --------------------------------------------------------------------------------------


def plan_release(spec: NodeSpec, instance: Instance, *, in_use: Collection[str], excess: int) -> ReleasePlan:
    """Choose up to ``excess`` unused pool addresses to release, one call per interface."""
    if excess <= 0:
        return ReleasePlan()
    candidates: list[tuple[Interface, list[str], list[str]]] = []
    for iface in managed_interfaces(instance, spec):
        prefixes = [p for p in iface.prefixes if not any(a in in_use for a in expand_prefix(p))]
        primary = iface.primary_ip
        plain = sorted(
            (a for a in iface.addresses if a not in in_use and a != primary),
            key=address_key,
            reverse=True,  # highest first: the node side hands out the lowest addresses first
        )
        if prefixes or plain:
            candidates.append((iface, prefixes, plain))
    candidates.sort(key=lambda c: (-(len(c[1]) * PREFIX_SIZE + len(c[2])), c[0].device_index))
    left = excess
    actions: list[UnassignAddresses] = []
    for iface, prefixes, plain in candidates:
        if left <= 0:
            break
        take_prefixes = prefixes[: left // PREFIX_SIZE]
        left -= PREFIX_SIZE * len(take_prefixes)
        take_plain = plain[:left]
        left -= len(take_plain)
        if take_prefixes or take_plain:
            actions.append(
                UnassignAddresses(
                    interface_id=iface.id,
                    subnet_id=iface.subnet_id,
                    addresses=tuple(sorted(take_plain, key=address_key)),
                    prefixes=tuple(take_prefixes),
                )
            )
    return ReleasePlan(actions=tuple(actions))
