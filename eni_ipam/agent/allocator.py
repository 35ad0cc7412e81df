"""The node-local allocator: hands the addresses of a node's named pools to owners.

The default pool follows the node's ENIPool status; other pools come from configuration. An owner is any
non-empty string: a container id + ifname, ``claim:<ns>/<name>``, a libnetwork endpoint.

Invariants:

* An address has at most one owner, across all pools: allocations are keyed by address.
* An excluded address (in its pool), an address held by the release handshake (named by the
  reconciler's current marks, or with a ready-for-release answer still published — in any pool), and an
  address inside a withheld range (in any pool: a runtime that could not be read may hold it) is never
  handed out. An owner keeps what it already holds.
* Handing out is deterministic: the lowest free address first, in numeric order; serially, the first free
  address after the last one the pool handed out for that family, wrapping.
* A released address (every path: release, release by owner, expiry) is quarantined
  (:mod:`~eni_ipam.agent.quarantine`): the automatic choice (``allocate_next*``) passes it by until
  the quarantine's minimum has passed and no EndpointSlice lists it, and hands out no address an
  EndpointSlice lists. Only when its family has no other free address is a quarantined address whose
  time has not passed handed out, the oldest release first (an early reuse: counted, logged). An
  explicit request for an address (``allocate``, ``allocate_addresses``) is served even while it is
  quarantined (the requester chose it; logged and counted as ``requested``).
* Restoring never gives away an address a container holds: the state file's newest valid slot, what
  a suspect slot or a corrupt file still says, and every address a runtime reports are kept, even
  where no pool lists the address (yet). Where two of them name different owners for one address, the
  owner proven alive is kept, else the state file's (logged either way): never two owners.
* With a state file, no allocation changes before :meth:`Allocator.restore`, and every change is saved
  before the call returns; if the save fails, the change is undone and the call fails, so the file never
  lags behind what was handed out. (An expiry whose save fails stays applied and is logged: the file then
  holds a stale allocation, never a missing one, until the next save.)
* An expiration timer belongs to one allocation: releasing stops it, a timer releases only the allocation
  it was started for (matched by UUID), and a restored allocation gets its timer back, with its full timeout.
* The quarantine is saved with the allocations (the wall time of each release): a restart neither
  frees a quarantined address early nor loses one.
* Exclusions, holds and withheld ranges are not persisted: they come from configuration, the node's
  ENIPool status and what the start could not read, which the daemon applies (``set_pool``,
  ``exclude``, ``answer_release``, ``withhold``) before serving. The serial
  cursors are saved with the allocations: after a restart, serial allocation goes on after the last
  address handed out rather than handing out again the one just released.
* Not thread-safe: calls and timer callbacks run on one event loop.

Pool membership and address order are :mod:`~eni_ipam.agent.members`'s; the handshake's answers and
holds are :mod:`~eni_ipam.agent.handshake`'s; when a released address may come back is
:mod:`~eni_ipam.agent.quarantine`'s. This class owns what one change touches: the allocations, their
expiration timers, the serial cursors and the quarantined addresses (undone together when the change
fails), and the state file that saves them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import ipaddress
import math
import os
import uuid as uuid_module
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import NoReturn

import structlog

from eni_ipam.agent import errors
from eni_ipam.core.clock import Clock, Handle
from eni_ipam.core.model import ReleaseState

from .files import compact
from .handshake import ReleaseHolds
from .members import FAMILY_LABEL, PoolMembers, address_family, address_key, canonical_address, parse_address
from .mirror import Mirror
from .quarantine import LISTED, UNREAD, WAITING, Endpoints, Quarantine
from .state import Reading, RestoreReport, StateFile, read_state
from .types import DEFAULT_POOL, Allocation, Attachment, Family, PoolAddress, RuntimeEntry

__all__ = ["Allocator", "RestoreReport"]

log = structlog.get_logger("eni_ipam.agent.allocator")


def _check(owner: str | None = None, timeout: float = 0.0) -> None:
    if owner is not None and not owner:
        raise errors.AllocatorError("an allocation needs a non-empty owner")
    if not (math.isfinite(timeout) and timeout >= 0):
        raise errors.AllocatorError(f"invalid expiration timeout {timeout!r}")


@dataclasses.dataclass(slots=True)
class _Timer:
    uuid: str
    timeout: float
    handle: Handle | None = None  # None until scheduled, after the change that started it was saved


class Allocator:
    """The node's allocator over named pools of :class:`PoolAddress` (see the module's invariants)."""

    def __init__(
        self,
        *,
        clock: Clock,
        ipv4: bool = True,
        ipv6: bool = False,
        state: StateFile | None = None,
        uuids: Callable[[], str] = lambda: str(uuid_module.uuid4()),
        mirror: Mirror | None = None,
        quarantine: float = 0.0,
        reused: Callable[[str], None] | None = None,
    ) -> None:
        """``mirror``: a second record of some owners' allocations (Docker's), written around each
        save of the state file (:mod:`~eni_ipam.agent.mirror`). ``quarantine``: seconds a released
        address waits before the automatic choice hands it out again (0: no quarantine);
        ``reused``: told of each quarantined address handed out before its time, with why
        (``pool_exhausted``: nothing else was free; ``requested``: asked for by address)."""
        self._clock = clock
        self._enabled = {Family.IPV4: ipv4, Family.IPV6: ipv6}
        self._state = state
        self.mirror = mirror
        self._uuids = uuids
        self._pools: dict[str, PoolMembers] = {}
        self._allocations: dict[str, Allocation] = {}
        self._timers: dict[str, _Timer] = {}
        self._cursors: dict[tuple[str, Family], str] = {}  # (pool, family) -> last address handed out
        self._excluded: dict[str, dict[str, str]] = {}  # pool -> address -> who excluded it
        self._withheld: dict[str, list[ipaddress.IPv4Network | ipaddress.IPv6Network]] = {}  # by whom
        self._withheld_why: dict[str, str] = {}  # by whom → why, in words
        self._holds = ReleaseHolds()
        self._quarantine = Quarantine(clock, quarantine)
        self._reused = reused or (lambda _: None)
        self._restored = state is None
        self._depth = 0
        self._after: list[Callable[[], object]] = []
        """What a change says once it holds (saved): counted, logged."""
        self.state_error = ""
        """Why the last write of the state file failed (empty: it succeeded); the agent is not ready
        meanwhile."""

    # -- pools -------------------------------------------------------------------------------------

    def set_pool(self, name: str, addresses: Iterable[PoolAddress]) -> None:
        """Replace the pool's membership (creating the pool). Allocations of leaving addresses are kept."""
        new = PoolMembers.of(name, addresses)
        members = new.members
        old = self._pools.get(name)
        before = set(old.members) if old is not None else set()
        self._pools[name] = new
        added, removed = (
            sorted(members.keys() - before, key=address_key),
            sorted(before - members.keys(), key=address_key),
        )
        if old is None or added or removed:
            log.info("pool_updated", pool=name, members=len(members), added=len(added), removed=len(removed))
        for address in (a for a in removed if a in self._allocations):
            log.info("allocated_address_left_pool", pool=name, address=address)

    def remove_pool(self, name: str) -> None:
        """Forget the pool; its allocations are kept until released."""
        self._pool(name)
        del self._pools[name]
        if any(k[0] == name for k in self._cursors):
            with self._change() if self._restored else contextlib.nullcontext():
                self._cursors = {k: v for k, v in self._cursors.items() if k[0] != name}
        log.info("pool_removed", pool=name, kept=len(self.allocations(pool=name)))

    def pools(self) -> list[str]:
        return sorted(self._pools)

    def pool_addresses(self, name: str) -> list[PoolAddress]:
        """The pool's members in address order (IPv4 first)."""
        return self._pool(name).in_order()

    def exclude(self, address: str, owner: str, pool: str = DEFAULT_POOL) -> None:
        """Never hand ``address`` out from ``pool`` (idempotent; it need not be a member yet)."""
        canonical = parse_address(address, pool)
        excluded = self._excluded.setdefault(pool, {})
        if excluded.get(canonical) != owner:
            log.info("address_excluded", address=canonical, owner=owner, pool=pool)
        excluded[canonical] = owner
        if (current := self._allocations.get(canonical)) is not None and current.owner != owner:
            log.warning("excluded_address_allocated", address=canonical, owner=current.owner, pool=pool)

    def withhold(self, network: str, owner: str, why: str = "") -> None:
        """Hand out no address inside ``network`` (CIDR), from any pool, until :meth:`lift` of ``owner``.

        A range rather than addresses: the pool may not list its members yet (the node's ENIPool is
        read after the restore), and an IPv6 range is too large to list. Allocations inside it stay.
        ``why`` completes "withheld ..." in the error an ADD gets while nothing else is free (``while
        Docker's API on /run/docker.sock does not answer``)."""
        parsed = ipaddress.ip_network(network, strict=False)
        ranges = self._withheld.setdefault(owner, [])
        self._withheld_why[owner] = why or self._withheld_why.get(owner) or f"by {owner}"
        if parsed not in ranges:
            ranges.append(parsed)
            log.debug("range_withheld", network=str(parsed), owner=owner)

    def lift(self, owner: str) -> list[str]:
        """Lift every range ``owner`` withheld; the ranges lifted."""
        lifted = [str(n) for n in self._withheld.pop(owner, [])]
        self._withheld_why.pop(owner, None)
        if lifted:
            log.info("ranges_lifted", owner=owner, networks=lifted[:20], count=len(lifted))
        return lifted

    def withheld(self) -> dict[str, list[str]]:
        """owner → the ranges it withholds."""
        return {owner: [str(n) for n in ranges] for owner, ranges in sorted(self._withheld.items())}

    def withholding(self, pool: str = DEFAULT_POOL, family: Family | None = None) -> dict[str, int]:
        """Why, in words → how many of the pool's addresses (of ``family``, else of every enabled one)
        that would be free are withheld so."""
        counts: dict[str, int] = {}
        if not self._withheld:
            return counts
        excluded, members = self._excluded.get(pool, {}), self._pool(pool).members
        for address in members:
            found = address_family(address)
            if not self._enabled[found] or family not in (None, found) or address in excluded:
                continue
            if address in self._allocations or self._is_held(address):
                continue
            if owner := self._withholder(address):
                why = self._withheld_why.get(owner, owner)
                counts[why] = counts.get(why, 0) + 1
        return counts

    def capacity(self, pool: str = DEFAULT_POOL) -> int:
        """The pool's members of enabled families that are not excluded (allocated ones included)."""
        excluded = self._excluded.get(pool, {})
        return sum(
            1 for a in self._pool(pool).members if self._enabled[address_family(a)] and a not in excluded
        )

    def free(self, pool: str = DEFAULT_POOL) -> int:
        """Members of enabled families that could be handed out now (not excluded, held, allocated, nor
        listed by an EndpointSlice; a quarantined one counts: it is handed out when nothing else is)."""
        return sum(
            1
            for a in self._pool(pool).members
            if self._enabled[address_family(a)]
            and not self._refusal(a, pool)
            and self._quarantine.hold(a) in ("", WAITING)
        )

    # -- allocation --------------------------------------------------------------------------------

    def enabled(self, family: Family) -> bool:
        """Whether addresses of ``family`` are handed out on this node."""
        return self._enabled[family]

    def families(self, pool: str = DEFAULT_POOL) -> set[Family]:
        """The families the pool holds addresses of (empty for an empty pool)."""
        order = self._pool(pool).order
        return {f for f in Family if order[f]}

    def allocate(
        self, address: str, owner: str, pool: str = DEFAULT_POOL, *, attachment: Attachment | None = None
    ) -> Allocation:
        """Allocate ``address``; the same owner asking again (same pool) gets its existing allocation."""
        return self.allocate_addresses([address], owner, pool, attachment=attachment)[0]

    def allocate_addresses(
        self,
        addresses: Collection[str],
        owner: str,
        pool: str = DEFAULT_POOL,
        *,
        attachment: Attachment | None = None,
    ) -> list[Allocation]:
        """Allocate exactly ``addresses`` to ``owner``, all or nothing; what the owner already holds of
        them is kept (and, given an ``attachment``, updated to it).

        Raises NotInPool for an address that is not a member (or is excluded, or held for release),
        AlreadyAllocated for one another owner holds, FamilyDisabled for a disabled family.
        """
        _check(owner)
        self._pool(pool)
        wanted: list[str] = []
        for address in addresses:
            canonical = parse_address(address, pool)
            if not self._enabled[family := address_family(canonical)]:
                raise errors.FamilyDisabled(
                    f"{FAMILY_LABEL[family]} allocation disabled", address=canonical, pool=pool
                )
            if (existing := self._allocations.get(canonical)) is not None:
                if existing.owner != owner or existing.pool != pool:
                    why = f"{canonical} is allocated to {existing.owner} (pool {existing.pool})"
                    raise errors.AlreadyAllocated(why, address=canonical, pool=pool)
            elif refusal := self._refusal(canonical, pool):
                why = f"{canonical} is not available in pool {pool}: {refusal}"
                raise errors.NotInPool(why, address=canonical, pool=pool)
            if canonical not in wanted:
                wanted.append(canonical)
        made = [a for a in wanted if a not in self._allocations]
        stale = [
            a
            for a in wanted
            if a in self._allocations
            and attachment is not None
            and self._allocations[a].attachment() != attachment
        ]
        if made or stale:
            with self._change():
                for address in made:
                    self._allocations[address] = self._allocation(address, owner, pool, attachment)
                    self._unquarantine(address, owner, pool, "requested")
                for address in stale:
                    self._allocations[address] = self._allocations[address].with_attachment(
                        attachment or Attachment()
                    )
            for address in made:
                log.debug("address_allocated", address=address, owner=owner, pool=pool)
        return [self._allocations[a] for a in wanted]

    def annotate(self, owner: str, attachment: Attachment) -> list[Allocation]:
        """Record ``attachment`` on every allocation of ``owner`` (a repeated ADD names a new network
        namespace after a restart of the container); the owner's allocations."""
        mine = self.allocations(owner=owner)
        if any(a.attachment() != attachment for a in mine):
            with self._change():
                for allocation in mine:
                    self._allocations[allocation.address] = allocation.with_attachment(attachment)
            mine = self.allocations(owner=owner)
        return mine

    def allocate_next(
        self,
        owner: str,
        pool: str = DEFAULT_POOL,
        family: Family | None = None,
        *,
        serial: bool = False,
        attachment: Attachment | None = None,
    ) -> tuple[Allocation | None, Allocation | None]:
        """The next free address of each requested family (None: every enabled one), ``(ipv4, ipv6)``.

        All or nothing: when one family has no free address, nothing is allocated (PoolExhausted).
        """
        _check(owner)
        with self._change():
            result = self._allocate_next(owner, pool, family, serial, attachment)
        for allocation in filter(None, result):
            log.debug("address_allocated", address=allocation.address, owner=owner, pool=pool, serial=serial)
        return result

    def allocate_among(self, candidates: Sequence[str], owner: str, pool: str = DEFAULT_POOL) -> Allocation:
        """Allocate one of ``candidates`` (canonical members of ``pool``, one family, in the order to
        try them: a libnetwork sub-range) as the automatic choice would: quarantined ones last.

        Raises PoolExhausted when none can be handed out, FamilyDisabled for a disabled family."""
        _check(owner)
        self._pool(pool)
        families = {address_family(a) for a in candidates}
        for family in families:
            if not self._enabled[family]:
                raise errors.FamilyDisabled(f"{FAMILY_LABEL[family]} allocation disabled", pool=pool)
        with self._change():
            address = self._choose(candidates, owner, pool)
            if address is None:
                self._exhausted(pool, next(iter(families), Family.IPV4))
            allocation = self._allocations[address] = self._allocation(address, owner, pool)
        log.debug("address_allocated", address=address, owner=owner, pool=pool)
        return allocation

    def allocate_next_with_expiration(
        self, owner: str, pool: str, family: Family | None, timeout: float
    ) -> tuple[Allocation | None, Allocation | None]:
        """As :meth:`allocate_next`, each allocation with an expiration timer (its UUID in the allocation)."""
        _check(owner, timeout)
        with self._change():
            v4, v6 = (
                self._start_timer(a, timeout) if a else None for a in self._allocate_next(owner, pool, family)
            )
        for allocation in filter(None, (v4, v6)):
            log.debug(
                "address_allocated", address=allocation.address, owner=owner, pool=pool, expires=timeout
            )
        return v4, v6

    def start_expiration_timer(self, address: str, pool: str, timeout: float) -> str:
        """Release the allocation after ``timeout`` s unless stopped (replaces a running timer); the UUID."""
        _check(timeout=timeout)
        allocation = self._owned(address, pool)
        with self._change():
            uuid = self._start_timer(allocation, timeout).expiration_uuid
        log.debug("expiration_timer_started", address=allocation.address, pool=pool, uuid=uuid)
        return uuid

    def stop_expiration_timer(self, address: str, pool: str, uuid: str) -> None:
        allocation = self._owned(address, pool)
        if not uuid or allocation.expiration_uuid != uuid:
            why = f"{allocation.address}: no expiration timer {uuid!r}"
            raise errors.ExpirationMismatch(why, address=allocation.address, pool=pool)
        with self._change():
            del self._timers[allocation.address]
            self._allocations[allocation.address] = dataclasses.replace(allocation, expiration_uuid="")
        log.debug("expiration_timer_stopped", address=allocation.address, pool=pool, uuid=uuid)

    def release(self, address: str, pool: str = DEFAULT_POOL, *, quarantine: bool = True) -> Allocation:
        """Release the allocation (and stop its timer); the allocation as it was. The address is
        quarantined unless ``quarantine`` is false: an allocation undone before its owner could use
        it (no traffic can be on its way to it), whose address goes back as it was before (in the
        quarantine, with its earlier release's time, if it was taken from there)."""
        allocation = self._owned(address, pool)
        with self._change():
            self._drop(allocation.address)
            if quarantine:
                self._quarantine.add(allocation.address)
            else:
                self._quarantine.undo(allocation.address)
        log.debug("address_released", address=allocation.address, owner=allocation.owner, pool=pool)
        return allocation

    def release_owner(self, owner: str) -> list[Allocation]:
        """Release every allocation of ``owner``; the released allocations, [] if there were none."""
        if mine := self.allocations(owner=owner):
            with self._change():
                for allocation in mine:
                    self._drop(allocation.address)
                    self._quarantine.add(allocation.address)
            log.debug("owner_released", owner=owner, addresses=[a.address for a in mine])
        return mine

    def allocations(self, *, owner: str | None = None, pool: str | None = None) -> list[Allocation]:
        """Allocations in address order (IPv4 first), optionally of one owner and/or one pool."""
        chosen = (
            a for a in self._allocations.values() if owner in (None, a.owner) and pool in (None, a.pool)
        )
        return sorted(chosen, key=lambda a: address_key(a.address))

    def used(self) -> set[str]:
        """Every allocated address, in any pool."""
        return set(self._allocations)

    # -- the quarantine ----------------------------------------------------------------------------

    def set_endpoints(self, endpoints: Endpoints) -> None:
        """What the EndpointSlices list (the daemon's watch): an address they list is not handed out
        by the automatic choice, and until they are read every quarantined address counts as listed."""
        self._quarantine.endpoints = endpoints

    def quarantined(self) -> dict[str, float]:
        """Quarantined address → seconds left of its minimum wait (0: waited, still held: listed by an
        EndpointSlice, or the slices not read yet), for those the automatic choice passes by now."""
        q = self._quarantine
        return {a: q.remaining(a) for a in sorted(q.entries, key=address_key) if q.hold(a)}

    def knows(self, address: str) -> bool:
        """Whether ``address`` is this node's: a member of a pool, allocated or quarantined (what the
        EndpointSlice watch keeps of the cluster's endpoints)."""
        return (
            address in self._allocations
            or address in self._quarantine.entries
            or any(address in p.members for p in self._pools.values())
        )

    # -- the release handshake ---------------------------------------------------------------------

    def answer_release(
        self,
        marks: Mapping[str, ReleaseState],
        pool: str = DEFAULT_POOL,
        *,
        published: Collection[str] = (),
    ) -> dict[str, ReleaseState]:
        """Answer the reconciler's marks for ``pool`` (its whole current set) and hold what they name.

        MARKED → DO_NOT_RELEASE if allocated, else READY; RELEASED → dropped from the pool, no answer.
        Every address in ``marks`` is held (never handed out, from any pool) until a later call for this
        pool no longer names it. Returns the answers to publish, keyed as in ``marks`` — none before
        :meth:`restore` ran, when what is allocated is not known yet (call again after restoring).

        ``published``: addresses whose ``ready-for-release`` answer is still visible to the reconciler.
        They stay held even when their mark is withdrawn, until the answer is gone too — otherwise the
        reconciler could re-mark, read the stale answer, and release an address just handed out.
        """
        return self._holds.answer(
            marks,
            pool,
            members=self._pools.get(pool),
            allocations=self._allocations,
            published=published,
            restored=self._restored,
        )

    # -- inspection --------------------------------------------------------------------------------

    def dump(self) -> tuple[dict[str, str], dict[str, str], str]:
        """``({IPv4 address: owner}, {IPv6 address: owner}, status line)``, in address order."""
        by_family: dict[Family, dict[str, str]] = {f: {} for f in Family}
        for allocation in self.allocations():
            by_family[allocation.family][allocation.address] = allocation.owner
        return by_family[Family.IPV4], by_family[Family.IPV6], self._status_line()

    def debug_status(self) -> str:
        """The status line, then one line per pool, allocation and exclusion."""
        lines = [self._status_line()]
        for name, pool in sorted(self._pools.items()):
            held = ", ".join(sorted((a for a in pool.members if self._is_held(a)), key=address_key)) or "none"
            allocated = len(self.allocations(pool=name))
            lines.append(f"pool {name}: {len(pool.members)} members, {allocated} allocated, held: {held}")
        for a in self.allocations():
            timer = self._timers.get(a.address)
            expiry = f" (expires after {timer.timeout:g}s, uuid {timer.uuid})" if timer else ""
            lines.append(f"  {a.address} pool {a.pool} owner {a.owner}{expiry}")
        for name, excluded in sorted(self._excluded.items()):
            lines += [f"  excluded {a} pool {name} by {owner}" for a, owner in sorted(excluded.items())]
        for owner, networks in self.withheld().items():
            why = self._withheld_why.get(owner, "")
            lines += [f"  withheld {network} (every pool) by {owner}: {why}" for network in networks]
        for address, left in self.quarantined().items():
            lines.append(f"  quarantined {address}: {self._quarantine.hold(address)}, {left:.0f}s left")
        return "\n".join(lines)

    def _status_line(self) -> str:
        parts = [
            f"{FAMILY_LABEL[f]} {sum(1 for a in self._allocations if address_family(a) is f)}/"
            f"{sum(len(p.order[f]) for p in self._pools.values())} allocated"
            if self._enabled[f]
            else f"{FAMILY_LABEL[f]} disabled"
            for f in Family
        ]
        held = self._holds.count()
        return f"{', '.join(parts)}; pools: {', '.join(self.pools()) or 'none'}; {held} held for release"

    # -- restore -----------------------------------------------------------------------------------

    def restore(
        self,
        *,
        runtime: Mapping[str, str | RuntimeEntry] | None = None,
        judge: Callable[[Allocation], bool | None] | None = None,
    ) -> RestoreReport:
        """Settle what the state file says with what the runtimes hold, and keep the union. Call once,
        after ``set_pool`` of the default pool, before any allocation.

        * the state file's newest valid slot is restored as it is;
        * what a suspect slot or a corrupt file still says (owner and address both read) is held;
        * ``runtime`` (address → owner, or a :class:`RuntimeEntry`: what the runtimes hold, whether or
          not the file says so) is added, each address in the pool the entry names, else the first pool
          listing it, else the default pool (reported in ``not_in_pool``).

        Two owners for one address: the one proven alive is kept (``RuntimeEntry.alive``; ``judge``
        for an allocation: True alive, False gone, None cannot tell), else the one already kept (the
        state file's before the runtimes'); never both. Whatever was not read back as it is gets
        written; when that write fails (a full disk) the result is served from memory and the reason
        is in ``state_error`` and the report's ``unsaved``: changes are refused until a write succeeds.
        """
        if self._allocations:
            raise errors.AllocatorError("restore() must run before any allocation")
        entries = {
            address: entry if isinstance(entry, RuntimeEntry) else RuntimeEntry(owner=entry)
            for address, entry in (runtime or {}).items()
        }
        judge = judge or (lambda _: None)
        reading = read_state(self._state)
        snapshot = reading.snapshot
        merged = {a.address: a for a in snapshot.allocations}
        origin: dict[str, str] = dict.fromkeys(merged, "restored")
        replaced: dict[str, str] = {}
        dropped: dict[str, str] = {}
        salvaged = reading.salvaged.entries if reading.salvaged is not None else {}
        for source, found in (("salvaged", salvaged), ("rebuilt", entries)):
            for address, entry in found.items():
                allocation = self._place(address, entry) if entry.owner else None
                if allocation is None:
                    dropped[address] = entry.owner
                    continue
                current = merged.get(allocation.address)
                if current is not None and current.owner == allocation.owner:
                    continue
                if current is not None:
                    alive = entry.alive if entry.alive is not None else judge(allocation)
                    if not _displaces(current, allocation, judge(current), alive, source):
                        dropped[allocation.address] = allocation.owner
                        continue
                    replaced[allocation.address] = current.owner
                merged[allocation.address] = allocation
                origin[allocation.address] = source
        self._restored = True
        try:
            with self._change(save=False):
                for allocation in merged.values():
                    timeout = snapshot.timeouts.get(allocation.address)
                    if allocation.expiration_uuid and origin[allocation.address] == "restored":
                        assert timeout is not None  # the file's parser pairs every UUID with a timeout
                        self._timers[allocation.address] = _Timer(allocation.expiration_uuid, timeout)
                    self._allocations[allocation.address] = allocation
                self._cursors.update(_parse_cursors(snapshot.cursors))
                distrusted = self._quarantine.restore(snapshot.quarantine, allocated=merged.__contains__)
        except BaseException:
            self._restored = False
            raise
        picked = {
            k: tuple(a for a in merged.values() if origin[a.address] == k) for k in ("salvaged", "rebuilt")
        }
        # Read back exactly as it is: no write (a start on a full disk must not depend on one).
        changed = picked["salvaged"] or picked["rebuilt"] or replaced or distrusted
        rewrite = bool(changed or reading.corrupt or reading.suspect)
        unsaved = self._save_restored(reading) if rewrite and self._state is not None else ""
        not_in_pool = tuple(a for a in merged.values() if not self._is_member(a.address, a.pool))
        for allocation in not_in_pool:
            log.warning("restored_address_not_in_pool", address=allocation.address, pool=allocation.pool)
        report = RestoreReport(
            restored=tuple(a for a in merged.values() if origin[a.address] == "restored"),
            salvaged=picked["salvaged"],
            rebuilt=picked["rebuilt"],
            replaced=replaced,
            dropped=dropped,
            not_in_pool=not_in_pool,
            corrupt=reading.corrupt,
            suspect=reading.suspect,
            moved_to=reading.moved_to,
            missing=reading.missing,
            unaccounted=tuple(reading.salvaged.networks()) if reading.salvaged is not None else (),
            unsaved=unsaved,
        )
        if report.rebuilt or report.salvaged or report.dropped:
            log.warning(
                "state_rebuilt",
                rebuilt=sorted((a.address for a in report.rebuilt), key=address_key),
                salvaged=sorted((a.address for a in report.salvaged), key=address_key),
                dropped=dropped,
            )
        counts = {
            k: len(getattr(report, k))
            for k in ("restored", "salvaged", "rebuilt", "replaced", "dropped", "not_in_pool")
        }
        damaged = report.corrupt or report.suspect or report.dropped or report.replaced or not_in_pool
        event = log.warning if damaged or unsaved else log.info
        event(
            "state_restored", **counts, corrupt=report.corrupt, suspect=report.suspect, missing=report.missing
        )
        return report

    def settle_mirror(self) -> None:
        """Docker has been read and its endpoints adopted: the mirror records exactly the
        ``libnetwork:`` allocations from now on (:meth:`Mirror.settle`)."""
        if self.mirror is not None:
            self.mirror.settle(self._allocations)

    def replace_withheld(self, owner: str, networks: Iterable[str], why: str) -> None:
        """Make ``owner``'s withheld ranges exactly ``networks`` (logged only when they change)."""
        wanted = [ipaddress.ip_network(n, strict=False) for n in networks]
        if set(wanted) == set(self._withheld.get(owner, [])):
            if wanted:
                self._withheld_why[owner] = why
            return
        self.lift(owner)
        for network in wanted:
            self.withhold(str(network), owner, why)

    def _save_restored(self, reading: Reading) -> str:
        """Write what the start settled; why it could not be written ("" when it was). A damaged file
        renamed aside is made small first when there is no room for the new one beside it."""
        try:
            self._save()
        except OSError as exc:
            freed = compact(Path(reading.moved_to), _slot_size(reading.moved_to)) if reading.moved_to else 0
            if not freed:
                return self._unsaved(exc)
            log.warning("state_aside_compacted", path=reading.moved_to, freed=freed, error=str(exc))
            try:
                self._save()
            except OSError as again:
                return self._unsaved(again)
        self.state_error = ""
        return ""

    def _unsaved(self, exc: OSError) -> str:
        path = self._state.path if self._state is not None else ""
        self.state_error = f"{path}: {exc}"
        log.error(
            "state_not_written_at_start",
            path=str(path),
            error=str(exc),
            serving="from memory: every change is refused (state_unwritable) until the file can be written",
        )
        return str(exc)

    def adopt(
        self, runtime: Mapping[str, RuntimeEntry], judge: Callable[[Allocation], bool | None] | None = None
    ) -> tuple[list[Allocation], dict[str, str]]:
        """Record what a runtime reported after the restore (one that could not be read then), each
        address placed as :meth:`restore` places it. An address another owner holds by now is left to
        it unless the entry is proven alive and that owner is not (``judge``, as for :meth:`restore`).
        Returns the allocations made and the conflicts (address → the other owner: the one kept, or
        the one replaced)."""
        made: list[Allocation] = []
        conflicts: dict[str, str] = {}
        judge = judge or (lambda _: None)
        with self._change():
            for address, entry in runtime.items():
                allocation = self._place(address, entry)
                if allocation is None:
                    continue
                if (current := self._allocations.get(allocation.address)) is not None:
                    if current.owner == entry.owner:
                        continue
                    conflicts[allocation.address] = current.owner
                    if not _displaces(current, allocation, judge(current), entry.alive, "adopted"):
                        continue
                    self._drop(current.address)
                self._allocations[allocation.address] = allocation
                self._quarantine.discard(allocation.address)  # a runtime holds it: no longer free
                made.append(allocation)
        if made or conflicts:
            log.warning(
                "runtime_allocations_adopted",
                adopted={a.address: a.owner for a in made},
                conflicts=conflicts,
            )
        return made, conflicts

    def _place(self, address: str, entry: RuntimeEntry) -> Allocation | None:
        """The allocation ``entry``'s owner would have of ``address`` in the pool the runtime named, else
        the first pool holding it (default first), with what the runtime said of the container.

        An address no pool holds (yet: the node's pool may still be filling in) is kept all the same,
        in the pool the runtime named or the default pool — a running container holds it, so it must
        never be handed to another."""
        if (canonical := canonical_address(address)) is None:
            return None
        if entry.pool:
            known = entry.pool in self._pools and canonical in self._pools[entry.pool].members
            pool = entry.pool if known else None
        else:
            pools = sorted(self._pools, key=lambda name: (name != DEFAULT_POOL, name))
            pool = next((p for p in pools if canonical in self._pools[p].members), None)
        if pool is not None:
            return self._allocation(canonical, entry.owner, pool, entry.attachment)
        host = 32 if address_family(canonical) is Family.IPV4 else 128
        return Allocation(
            address=canonical,
            pool=entry.pool or DEFAULT_POOL,
            owner=entry.owner,
            prefix_length=host,
            gateway="",
            **entry.attachment.fields(),
        )

    # -- internals ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _change(self, *, undo_on_save_error: bool = True, save: bool = True) -> Iterator[None]:
        """One change of the allocations: undone if the body raises; saved (unless ``save`` is false:
        nothing changed on disk's account); then timers (re)scheduled."""
        if self._depth:
            yield
            return
        if not self._restored:
            raise errors.AllocatorError("the allocator has a state file: restore() must run first")
        before = dict(self._allocations), dict(self._timers), dict(self._cursors)
        quarantined = dict(self._quarantine.entries), dict(self._quarantine.lifted)
        self._after = []
        self._depth += 1
        try:
            yield
        except BaseException:
            self._allocations, self._timers, self._cursors = before
            self._quarantine.entries, self._quarantine.lifted = quarantined
            self._after = []
            raise
        finally:
            self._depth -= 1
        if self._state is not None and save:
            try:
                self._save()
            except OSError as exc:
                log.error(
                    "state_save_failed", path=str(self._state.path), error=str(exc), undone=undo_on_save_error
                )
                self.state_error = f"{self._state.path}: {exc}"
                if undo_on_save_error:
                    self._allocations, self._timers, self._cursors = before
                    self._quarantine.entries, self._quarantine.lifted = quarantined
                    self._after = []
                    raise errors.StateNotWritten(f"state file not written, change undone: {exc}") from exc
            else:
                self.state_error = ""
        after, self._after = self._after, []
        for say in after:
            say()
        for address, timer in before[1].items():
            if self._timers.get(address) is not timer and timer.handle is not None:
                timer.handle.cancel()
        for address, timer in self._timers.items():
            if timer.handle is None:
                expire = functools.partial(self._expire, address, timer.uuid)
                timer.handle = self._clock.call_later(timer.timeout, expire)

    def _save(self) -> None:
        """The allocations, their timers, the cursors and the quarantine to the state file (the mirror
        around it). Raises OSError."""
        assert self._state is not None
        if self.mirror is not None:
            self.mirror.before(self._allocations)
        self._quarantine.prune()  # what has waited and no slice lists is not worth a line in the file
        self._state.save(
            self._allocations.values(),
            {a: t.timeout for a, t in self._timers.items()},
            {f"{pool}/{family}": address for (pool, family), address in self._cursors.items()},
            self._quarantine.saved(),
        )
        if self.mirror is not None:
            self.mirror.after(self._allocations)

    def _expire(self, address: str, uuid: str) -> None:
        timer = self._timers.get(address)
        if timer is None or timer.uuid != uuid:
            return  # stopped, replaced or released meanwhile
        allocation = self._allocations[address]
        with self._change(undo_on_save_error=False):
            self._drop(address)
            self._quarantine.add(address)
        log.info(
            "allocation_expired", address=address, owner=allocation.owner, pool=allocation.pool, uuid=uuid
        )

    def _allocate_next(
        self,
        owner: str,
        pool: str,
        family: Family | None,
        serial: bool = False,
        attachment: Attachment | None = None,
    ) -> tuple[Allocation | None, Allocation | None]:
        if family is None:
            families = [f for f in Family if self._enabled[f]]
        elif self._enabled[family := Family(family)]:
            families = [family]
        else:
            raise errors.FamilyDisabled(f"{FAMILY_LABEL[family]} allocation disabled", pool=pool)
        if not families:
            raise errors.FamilyDisabled("no address family is enabled", pool=pool)
        members = self._pool(pool)
        result: dict[Family, Allocation] = {}
        for f in families:
            cursor = self._cursors.get((pool, f)) if serial else None
            if (address := self._choose(members.walk(f, cursor), owner, pool)) is None:
                self._exhausted(pool, f)
            result[f] = self._allocations[address] = self._allocation(address, owner, pool, attachment)
            self._cursors[(pool, f)] = address
        return result.get(Family.IPV4), result.get(Family.IPV6)

    def _choose(self, candidates: Iterable[str], owner: str, pool: str) -> str | None:
        """The automatic choice among ``candidates`` (in their order): the first free one the
        quarantine does not hold, else the oldest quarantined one whose time has not passed (an
        early reuse), else None. Taken out of the quarantine either way."""
        waiting: list[str] = []  # quarantined, their time not passed: only if nothing else is free
        for candidate in candidates:
            if self._refusal(candidate, pool):
                continue
            hold = self._quarantine.hold(candidate)
            if not hold:
                self._quarantine.discard(candidate)  # waited out: nothing left to wait for
                return candidate
            if hold == WAITING:
                waiting.append(candidate)
        if (address := self._quarantine.oldest(waiting)) is not None:
            self._unquarantine(address, owner, pool, "pool_exhausted")
        return address

    def _unquarantine(self, address: str, owner: str, pool: str, why: str) -> None:
        """``address`` is handed out while quarantined (``why``: ``pool_exhausted``, ``requested``):
        counted and logged, once the change holds (an undone change counts nothing)."""
        q = self._quarantine
        if address not in q.entries:
            return
        if not (hold := q.hold(address)):
            q.discard(address)
            return
        left = q.remaining(address)
        q.discard(address)
        self._after.append(functools.partial(self._reused, why))
        self._after.append(
            functools.partial(
                # Nothing else free is worth a warning; an address asked for by name is the asker's.
                log.warning if why == "pool_exhausted" else log.info,
                "quarantined_address_reused",
                address=address,
                owner=owner,
                pool=pool,
                why=why,
                hold=hold,
                remaining=round(left, 3),
            )
        )

    def _exhausted(self, pool: str, family: Family) -> NoReturn:
        """PoolWithheld when addresses of ``family`` would be free but are withheld (the client must
        hear why and for how long, not that the pool is full), PoolExhausted otherwise."""
        label = FAMILY_LABEL[family]
        waiting = self.withholding(pool, family)
        held = self._endpoint_holds(pool, family)
        if not waiting:
            raise errors.PoolExhausted(f"no free {label} address in pool {pool}{held}", pool=pool)
        said = "; ".join(f"{n} withheld {why}" for why, n in sorted(waiting.items()))
        raise errors.PoolWithheld(
            f"no {label} address of pool {pool} can be handed out now: {said}{held}; try again later",
            pool=pool,
            waiting=tuple(sorted(waiting)),
        )

    def _endpoint_holds(self, pool: str, family: Family) -> str:
        """What an exhaustion adds: how many of ``family``'s free addresses the EndpointSlices hold
        (``" (3 listed by an EndpointSlice)"``), or ""."""
        counts = {LISTED: 0, UNREAD: 0}
        for address in self._pool(pool).order[family]:
            if not self._refusal(address, pool) and (hold := self._quarantine.hold(address)) in counts:
                counts[hold] += 1
        said = ", ".join(f"{n} {why}" for why, n in counts.items() if n)
        return f" ({said})" if said else ""

    def _is_member(self, address: str, pool: str) -> bool:
        return pool in self._pools and address in self._pools[pool].members

    def _is_held(self, address: str) -> bool:
        return address in self._holds

    def _refusal(self, address: str, pool: str) -> str:
        """Why ``address`` cannot be handed out from ``pool`` now; empty if it can."""
        if not self._is_member(address, pool):
            return "not a member of the pool"
        if (excluded_by := self._excluded.get(pool, {}).get(address)) is not None:
            return f"excluded by {excluded_by}"
        if self._withheld and (withheld_by := self._withholder(address)):
            return f"withheld by {withheld_by}"
        if self._is_held(address):
            return "held for release"
        return "allocated" if address in self._allocations else ""

    def _withholder(self, address: str) -> str:
        parsed = ipaddress.ip_address(address)
        return next((o for o, ranges in self._withheld.items() if any(parsed in n for n in ranges)), "")

    def _allocation(
        self, address: str, owner: str, pool: str, attachment: Attachment | None = None
    ) -> Allocation:
        m = self._pools[pool].members[address]
        return Allocation(
            address=address,
            pool=pool,
            owner=owner,
            prefix_length=m.prefix_length,
            gateway=m.gateway,
            interface_id=m.interface_id,
            subnet_id=m.subnet_id,
            **(attachment or Attachment()).fields(),
        )

    def _start_timer(self, allocation: Allocation, timeout: float) -> Allocation:
        self._timers[allocation.address] = _Timer(uuid := self._uuids(), timeout)
        started = self._allocations[allocation.address] = dataclasses.replace(
            allocation, expiration_uuid=uuid
        )
        return started

    def _drop(self, address: str) -> None:
        del self._allocations[address]
        self._timers.pop(address, None)

    def _owned(self, address: str, pool: str) -> Allocation:
        allocation = self._allocations.get(canonical_address(address) or "")
        if allocation is None or allocation.pool != pool:
            raise errors.NotAllocated(
                f"{address} is not allocated in pool {pool}", address=address, pool=pool
            )
        return allocation

    def _pool(self, name: str) -> PoolMembers:
        if (pool := self._pools.get(name)) is None:
            raise errors.UnknownPool(f"no pool {name!r}", pool=name)
        return pool


def _displaces(
    current: Allocation, candidate: Allocation, current_alive: bool | None, alive: bool | None, source: str
) -> bool:
    """Whether ``candidate`` takes the address from ``current`` (the owner kept so far): only when it
    is proven alive and ``current`` is not. Logged either way: two records of one address disagree."""
    fields = {
        "address": current.address,
        "kept": current.owner,
        "other": candidate.owner,
        "source": source,
        "kept_alive": current_alive,
        "other_alive": alive,
    }
    if alive is True and current_alive is not True:
        fields.update(kept=candidate.owner, other=current.owner, kept_alive=alive, other_alive=current_alive)
        log.warning("state_owner_replaced", **fields, why="the other owner is proven alive")
        return True
    if alive is True:
        log.error("address_held_twice", **fields, why="both owners are alive: one address in two places")
    else:
        log.warning("state_owner_kept", **fields, why="the other owner is not proven alive")
    return False


def _slot_size(path: str) -> int:
    try:
        return os.stat(path).st_size // 2
    except OSError:
        return 0


def _parse_cursors(saved: Mapping[str, str]) -> dict[tuple[str, Family], str]:
    """The saved ``<pool>/<family>`` → address map, minus entries this version cannot read (a cursor
    only orders the search: losing one is harmless)."""
    cursors: dict[tuple[str, Family], str] = {}
    for key, address in saved.items():
        pool, _, family = key.rpartition("/")
        canonical = canonical_address(address)
        if pool and family in (Family.IPV4, Family.IPV6) and canonical is not None:
            cursors[(pool, Family(family))] = canonical
    return cursors
