"""Freed addresses wait out their traffic before the automatic choice hands them out again.

A pod's address freed at once and handed to the next pod receives the dead pod's traffic: kube-proxy
and the Service proxies still list it as an endpoint until the EndpointSlice changes and every node has
seen it, and conntrack keeps sending established flows there (a SYN_SENT entry lives 120 s). So a
freed address is *quarantined* (docs/decisions/0050): the automatic choice (lowest free, serial)
passes it by until ``seconds`` have passed since its release **and** no EndpointSlice lists it.

Invariants:

* An address listed by an EndpointSlice is never handed out by the automatic choice, quarantined or
  not (a free address a Service still sends traffic to belongs to nobody yet); while the slices have
  not been read since the start, every quarantined address counts as listed.
* A quarantined address whose time has not passed is handed out by the automatic choice only when no
  other address of its family is free, the oldest release first (an *early reuse*, counted and logged).
* Time since a release is measured on the injected clock's monotonic timeline while the process runs;
  what is saved is the wall time of the release (``clock.now_utc()``: a monotonic time means nothing to
  the next process). Restored, a wall time in the future, or one that cannot be read, counts as a
  release at the restore (never trust a time that cannot be proven: the full wait again).
* An allocation undone before its owner had it (:meth:`Quarantine.undo`) leaves its address as it
  found it: quarantined since its earlier release if it was taken from the quarantine, free otherwise.
* ``seconds == 0`` disables the quarantine: nothing is recorded, nothing is held.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

import structlog

from eni_ipam.core.clock import Clock

log = structlog.get_logger("eni_ipam.agent.quarantine")

LISTED = "listed by an EndpointSlice"
UNREAD = "quarantined until the EndpointSlices are read"
WAITING = "quarantined"


class Endpoints(Protocol):
    """What the EndpointSlices list (:class:`~eni_ipam.agent.endpoints.EndpointAddresses`)."""

    def listed(self, address: str) -> bool:
        """Whether an EndpointSlice lists ``address`` among its endpoints' addresses."""
        ...

    def synced(self) -> bool:
        """Whether the slices have been read since the start (until then nothing is known)."""
        ...


class _Nothing:
    """No EndpointSlices (no Kubernetes, or the watch is disabled): nothing is listed."""

    def listed(self, address: str) -> bool:
        return False

    def synced(self) -> bool:
        return True


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """One quarantined address: when it was released, on the monotonic and on the wall clock."""

    since: float
    wall: datetime.datetime


class Quarantine:
    """The node's quarantined addresses (owned by the allocator, saved with its allocations)."""

    def __init__(self, clock: Clock, seconds: float) -> None:
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"invalid quarantine {seconds!r}")
        self.clock = clock
        self.seconds = seconds
        self.entries: dict[str, Entry] = {}
        self.lifted: dict[str, Entry] = {}
        """Entries of addresses handed out while quarantined, by address: an allocation undone
        before its owner had it puts its address back as it was (:meth:`undo`). At most one per
        address of the node; not saved (a restart keeps the allocation, not the undo)."""
        self.endpoints: Endpoints = _Nothing()

    @property
    def enabled(self) -> bool:
        return self.seconds > 0

    def add(self, address: str) -> None:
        """``address`` was released now (a new release restarts its wait)."""
        if self.enabled:
            self.entries[address] = Entry(self.clock.monotonic(), self.clock.now_utc())
            self.lifted.pop(address, None)

    def discard(self, address: str) -> None:
        """``address`` is handed out (or held by a runtime): out of the quarantine, remembered for
        :meth:`undo`."""
        if (entry := self.entries.pop(address, None)) is not None:
            self.lifted[address] = entry

    def undo(self, address: str) -> None:
        """``address``'s allocation is undone before its owner had it: back in the quarantine with
        its first release's time if it was taken from there, free otherwise."""
        if (entry := self.lifted.pop(address, None)) is not None:
            self.entries[address] = entry

    def remaining(self, address: str) -> float:
        """Seconds left of ``address``'s minimum wait (0 when it is not quarantined or has waited)."""
        entry = self.entries.get(address)
        if entry is None:
            return 0.0
        return max(self.seconds - (self.clock.monotonic() - entry.since), 0.0)

    def hold(self, address: str) -> str:
        """Why the automatic choice passes ``address`` by: :data:`LISTED` or :data:`UNREAD` (never
        handed out), :data:`WAITING` (only when nothing else is free), or "" (it may be handed out)."""
        if not self.enabled:
            return ""
        quarantined = address in self.entries
        if not self.endpoints.synced():
            if quarantined:
                return UNREAD
        elif self.endpoints.listed(address):
            return LISTED
        return WAITING if quarantined and self.remaining(address) > 0 else ""

    def oldest(self, addresses: Iterable[str]) -> str | None:
        """Of ``addresses`` (each :data:`WAITING`), the one released first (ties: the first given)."""
        return min(addresses, key=lambda a: self.entries[a].since, default=None)

    def prune(self) -> None:
        """Forget the addresses that have waited and no EndpointSlice lists (read: synced)."""
        if self.entries and self.endpoints.synced():
            self.entries = {a: e for a, e in self.entries.items() if self.hold(a)}

    # -- the state file ----------------------------------------------------------------------------

    def saved(self) -> dict[str, str]:
        """address → the wall time of its release (RFC 3339, UTC), as the state file keeps it."""
        return {
            a: e.wall.astimezone(datetime.UTC).isoformat(timespec="milliseconds")
            for a, e in self.entries.items()
        }

    def restore(self, saved: Mapping[str, object], allocated: Callable[[str], bool]) -> dict[str, str]:
        """Quarantine what the state file says (addresses allocated meanwhile excepted); the entries
        whose time could not be trusted, and why (each counts as released now)."""
        distrusted: dict[str, str] = {}
        self.entries = {}
        if not self.enabled:
            return distrusted
        now, mono = self.clock.now_utc(), self.clock.monotonic()
        for address, raw in saved.items():
            if allocated(address):
                continue
            wall, why = _wall_time(raw, now)
            if why:
                distrusted[address] = why
            elapsed = (now - wall).total_seconds()
            self.entries[address] = Entry(mono - elapsed, wall)
        if distrusted:
            log.warning("quarantine_time_distrusted", addresses=distrusted, counted_from=now.isoformat())
        return distrusted


def _wall_time(raw: object, now: datetime.datetime) -> tuple[datetime.datetime, str]:
    """The saved release time, or ``now`` with why it is not trusted."""
    if not isinstance(raw, str):
        return now, f"not a time: {raw!r}"[:80]
    try:
        wall = datetime.datetime.fromisoformat(raw)
    except ValueError:
        return now, f"not a time: {raw!r}"[:80]
    if wall.tzinfo is None:
        return now, f"no time zone: {raw!r}"[:80]
    if wall > now:
        return now, f"in the future: {raw}"
    return wall, ""
