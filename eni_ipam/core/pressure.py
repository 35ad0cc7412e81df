"""Subnet pressure: when a subnet runs short, its nodes' warm pools give back their spare addresses.

A subnet *enters* pressure when its free addresses fall to ``enter`` (a share of its CIDR) or
below, and *leaves* it only once they have stayed at ``leave`` or above for ``hold`` seconds
(decision 0054). Two thresholds and a hold time: a count that wobbles around one threshold never
turns the state on and off.

:func:`judge` is the judgement, pure (state and figures in, state out: table tests).
:class:`PressureTracker` keeps each subnet's state on the injected clock's timeline and calls back
on every transition; the shared :class:`~eni_ipam.core.view.CloudView` feeds it each subnet's free
count as it changes, and at each full resync.

Invariants:

* ``0 < enter < leave``; while enabled, ``enter`` is below the settings' ``subnet_reserve``
  (checked by :class:`~eni_ipam.core.settings.Settings`). Warm pools stop at the reserve, so the
  pools that regrow once a subnet leaves pressure can never push it back in: only pods (or the
  cloud's other users) can.
* A subnet whose size is unknown (an unreadable CIDR) is never under pressure.
* Time is the injected clock's (``now`` is passed in), never the OS's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable


@dataclasses.dataclass(frozen=True, slots=True)
class Thresholds:
    """When a subnet enters and leaves pressure (``Settings.subnet_pressure_*``)."""

    enter: float
    """Free share of the CIDR at or below which a subnet enters pressure."""
    leave: float
    """Free share of the CIDR at or above which (for ``hold`` seconds) a subnet leaves it."""
    hold: float
    """Seconds the free count must stay at ``leave`` or above before the subnet leaves pressure."""

    def enter_at(self, size: int) -> int:
        """Free addresses at or below which a subnet of ``size`` addresses enters pressure."""
        return math.floor(size * self.enter)

    def leave_at(self, size: int) -> int:
        """Free addresses at or above which a subnet of ``size`` addresses may leave pressure."""
        return math.ceil(size * self.leave)


@dataclasses.dataclass(frozen=True, slots=True)
class PressureState:
    """One subnet's pressure: whether it is under it, and since when its free count has been at
    the leave threshold or above (None: it is not, or the subnet is not under pressure)."""

    under: bool = False
    calm_since: float | None = None


CALM = PressureState()


def judge(state: PressureState, *, free: int, size: int, now: float, thresholds: Thresholds) -> PressureState:
    """The subnet's pressure after seeing ``free`` addresses (of ``size``) at ``now``.

    Out of pressure: in at ``free <= enter_at(size)``. Under pressure: out once ``free`` has been
    ``>= leave_at(size)`` for ``hold`` seconds; a dip below ``leave_at`` starts the hold anew."""
    if size <= 0:
        return CALM
    if not state.under:
        if free <= thresholds.enter_at(size):
            return PressureState(under=True)
        return state
    if free < thresholds.leave_at(size):
        return state if state.calm_since is None else PressureState(under=True)
    calm_since = now if state.calm_since is None else state.calm_since
    if now - calm_since >= thresholds.hold:
        return CALM
    return state if state.calm_since == calm_since else PressureState(under=True, calm_since=calm_since)


def pressure_watermarks(
    *, pre_allocate: int, min_allocate: int, max_above_watermark: int, used: int, waiting: int
) -> tuple[int, int, int]:
    """A node's ``(pre_allocate, min_allocate, max_above_watermark)`` while a subnet of its pool
    is under pressure: only what its pods use or wait for is kept.

    ``pre_allocate`` (spare kept free) becomes the pods waiting for an address (``waiting``): what
    they wait for is kept whatever the spec's spare, as the surge keeps it out of pressure.
    ``min_allocate`` (a floor kept whatever the use) shrinks to what is used and waited for, and
    ``max_above_watermark`` (slack) to nothing. A negative ``pre_allocate`` (a spec that keeps less
    than is used) and a smaller floor stay as they are."""
    waiting = max(waiting, 0)
    pre = pre_allocate if pre_allocate < 0 else waiting
    return pre, min(min_allocate, max(used, 0) + waiting), 0


class PressureTracker:
    """Each subnet's pressure over time. ``changed(subnet_id, under)`` is called on every transition
    (the manager triggers the subnet's nodes); ``transitions`` counts them per subnet."""

    def __init__(self, thresholds: Thresholds, *, changed: Callable[[str, bool], None] | None = None) -> None:
        self.thresholds = thresholds
        self._states: dict[str, PressureState] = {}
        self.transitions: dict[str, int] = {}
        self._changed = changed

    def on_change(self, changed: Callable[[str, bool], None]) -> None:
        self._changed = changed

    def under(self, subnet_id: str) -> bool:
        state = self._states.get(subnet_id)
        return state is not None and state.under

    def pressured(self) -> frozenset[str]:
        """The subnets under pressure now."""
        return frozenset(sid for sid, state in self._states.items() if state.under)

    def see(self, subnet_id: str, *, free: int, size: int, now: float) -> bool:
        """The subnet has ``free`` addresses at ``now``; returns whether its pressure changed."""
        before = self._states.get(subnet_id, CALM)
        after = judge(before, free=free, size=size, now=now, thresholds=self.thresholds)
        if after is CALM:
            self._states.pop(subnet_id, None)
        elif after is not before:
            self._states[subnet_id] = after
        if after.under == before.under:
            return False
        self.transitions[subnet_id] = self.transitions.get(subnet_id, 0) + 1
        if self._changed is not None:
            self._changed(subnet_id, after.under)
        return True

    def forget(self, keep: frozenset[str]) -> None:
        """Drop the state of subnets not in ``keep`` (no longer listed or filled)."""
        for sid in [s for s in self._states if s not in keep]:
            del self._states[sid]
