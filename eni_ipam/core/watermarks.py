"""Watermark arithmetic: pure functions, no state, no I/O.

``available`` is the number of addresses in the pool, used ones included; ``used`` the number in
use. These formulas follow the reference operator's code (and its table tests), not its docs,
where the two disagree.
"""

from __future__ import annotations

from collections.abc import Sequence

from eni_ipam.core.model import MAX_NODE_ADDRESSES, PREFIX_SIZE, InstanceLimits


def needed_ips(
    *, available: int, used: int, pre_allocate: int, min_allocate: int = 0, max_allocate: int = 0
) -> int:
    """Addresses to add so that ``pre_allocate`` stay free, at least ``min_allocate`` are in the pool
    and at most ``max_allocate`` are (0: no minimum / no maximum)."""
    needed = pre_allocate - (available - used)
    if min_allocate > 0:
        needed = max(needed, min_allocate - available)
    if max_allocate > 0 and available + needed > max_allocate:
        needed = max_allocate - available
    return max(needed, 0)


def excess_ips(
    *, available: int, used: int, pre_allocate: int, min_allocate: int = 0, max_above_watermark: int = 0
) -> int:
    """Addresses that could be released while keeping ``pre_allocate`` free, ``min_allocate`` in the
    pool, and ``max_above_watermark`` of slack."""
    floor = min_allocate + max_above_watermark
    if used <= floor:
        if available <= floor:
            return 0
        if used + pre_allocate <= floor:
            return available - floor
    return max(available - used - pre_allocate - max_above_watermark, 0)


def max_allocatable(
    limits: InstanceLimits,
    *,
    first_interface_index: int,
    prefix_delegated: bool,
    network_cards: Sequence[int] = (0,),
) -> int:
    """Most addresses a node could hold: every usable adapter of the pool's network cards full of
    secondaries (×16 with prefixes), at most :data:`~eni_ipam.core.model.MAX_NODE_ADDRESSES` (what
    a status lists). ``first_interface_index`` holds back card 0's lowest indexes."""
    adapters = 0
    for card in network_cards:
        on_card = limits.adapters_on(card)
        adapters += max(on_card - first_interface_index, 0) if card == 0 else on_card
    total = adapters * limits.slots_per_interface
    return min(total * PREFIX_SIZE if prefix_delegated else total, MAX_NODE_ADDRESSES)


HOST_NETWORK_PODS = 2
"""Pods of a node that take no pool address (host networking): the node agent and kube-proxy, as the
AWS VPC CNI counts them (its "+2")."""


def max_pods(
    limits: InstanceLimits,
    *,
    prefix_delegated: bool = False,
    first_interface_index: int = 0,
    network_cards: Sequence[int] = (0,),
    max_allocate: int = 0,
    host_network_pods: int = HOST_NETWORK_PODS,
) -> int:
    """The most pods a node can run: every address its pool could ever hold (:func:`max_allocatable`,
    at most ``max_allocate`` when set) plus the pods that take none (``host_network_pods``).

    The AWS VPC CNI's formula, ``interfaces × (addresses per interface − 1) + 2``, is this one for a
    pool on card 0 from index 0 with plain addresses (docs/aws.md "Max pods" says where they differ)."""
    addresses = max_allocatable(
        limits,
        first_interface_index=first_interface_index,
        prefix_delegated=prefix_delegated,
        network_cards=network_cards,
    )
    if max_allocate > 0:
        addresses = min(addresses, max_allocate)
    return addresses + host_network_pods


def allocation_budget(*, needed: int, max_above_watermark: int, pending_pods: int) -> tuple[int, int]:
    """What one maintenance pass may add: ``(must, bonus)``.

    ``must`` is the deficit plus the surge (pending pods beyond the deficit); ``bonus`` is
    ``max_above_watermark``, added only to calls the pass makes anyway — slack never costs a call.
    """
    if needed <= 0:
        return 0, 0
    surge = max(pending_pods - needed, 0)
    return needed + surge, max(max_above_watermark, 0)
