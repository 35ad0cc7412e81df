"""Stateful properties of the allocator, checked against a plain model of what it must do.

Every rule predicts its outcome from the model (which address, which error, which answer) and checks the
allocator agrees; the invariants check after every step that there is one owner per address, that
``used()``, ``dump()`` and the state file agree with the allocations, that no expired allocation is left,
and that the handshake answers DO_NOT_RELEASE exactly for the marked addresses that are allocated.

The quarantine is modelled too: every release quarantines its address for :data:`QUARANTINE` seconds
(restarts included), an address the EndpointSlices list is never the automatic choice, and a
quarantined one is chosen only when nothing else is free, the oldest release first (counted).
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from eni_ipam.agent import errors
from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.state import StateFile
from eni_ipam.agent.types import DEFAULT_POOL, Allocation, Family
from eni_ipam.core.model import ReleaseState
from tests.agent import FakeClock
from tests.agent.test_allocator import member

V4 = ["10.0.0.1", "10.0.0.2", "10.0.0.9", "10.0.0.10", "10.0.0.100"]
V6 = ["2001:db8::9", "2001:db8::a", "2001:db8::10"]
UNIVERSE = V4 + V6
STATIC = ["10.0.0.2", "10.0.0.9", "2001:db8::a"]  # overlaps the default pool: still one owner per address
POOLS = [DEFAULT_POOL, "static"]
MARKED, RELEASED = ReleaseState.MARKED, ReleaseState.RELEASED

addresses = st.sampled_from(UNIVERSE)
pools = st.sampled_from(POOLS)
owners = st.sampled_from(["a", "b", "c"])
families = st.sampled_from([None, Family.IPV4, Family.IPV6])
timeouts = st.sampled_from([1.0, 5.0, 30.0])
QUARANTINE = 20.0


class Slices:
    """The EndpointSlices' listed addresses, as the machine sets them."""

    def __init__(self) -> None:
        self.addresses: set[str] = set()

    def listed(self, address: str) -> bool:
        return address in self.addresses

    def synced(self) -> bool:
        return True


@functools.cache
def key(address: str) -> tuple[int, int]:
    parsed = ipaddress.ip_address(address)
    return parsed.version, int(parsed)


class AllocatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        shm = Path("/dev/shm")
        self.directory = Path(tempfile.mkdtemp(prefix="allocator-", dir=shm if shm.is_dir() else None))
        self.path = self.directory / "allocations.json"
        self.clock = FakeClock()
        self.numbers = itertools.count(1)
        # The model.
        self.members: dict[str, set[str]] = {DEFAULT_POOL: set(UNIVERSE), "static": set(STATIC)}
        self.owners: dict[str, tuple[str, str]] = {}  # address -> (owner, pool)
        self.excluded: dict[str, set[str]] = {}  # pool -> addresses
        self.marks: dict[str, dict[str, ReleaseState]] = {}  # pool -> the marks last answered
        self.published: dict[str, set[str]] = {}  # pool -> ready-for-release answers still published
        self.timers: dict[str, tuple[str, float, float]] = {}  # address -> (uuid, deadline, timeout)
        self.cursors: dict[tuple[str, Family], str] = {}
        self.slices = Slices()  # what the EndpointSlices list (the real view is shared the same way)
        self.released: dict[str, float] = {}  # address -> when it was last released
        self.early: list[str] = []  # what the allocator counted
        self.early_expected = 0  # what the model expects it counted (pool_exhausted)
        self.allocator = self.start()

    def teardown(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def start(self) -> Allocator:
        """An allocator on the state file, configured as the daemon does it: pools, exclusions, marks."""
        allocator = Allocator(
            clock=self.clock,
            ipv6=True,
            state=StateFile(self.path),
            uuids=lambda: f"u{next(self.numbers)}",
            quarantine=QUARANTINE,
            reused=self.early.append,
        )
        allocator.set_endpoints(self.slices)
        for pool, current in self.members.items():
            allocator.set_pool(pool, [member(a) for a in current])
        for pool, excluded in self.excluded.items():
            for address in excluded:
                allocator.exclude(address, "operator", pool)
        for pool, marks in self.marks.items():
            allocator.answer_release(marks, pool, published=self.published[pool])
        allocator.restore()
        return allocator

    # -- the model's predictions -------------------------------------------------------------------

    def held(self) -> set[str]:
        return {a for marks in self.marks.values() for a in marks} | set().union(*self.published.values())

    def free(self, address: str, pool: str) -> bool:
        return (
            address in self.members.get(pool, ())
            and address not in self.owners
            and address not in self.excluded.get(pool, ())
            and address not in self.held()
        )

    def waiting(self, address: str) -> bool:
        """Quarantined, its time not passed."""
        return address in self.released and self.clock.now - self.released[address] < QUARANTINE

    def next_free(self, pool: str, family: Family, serial: bool) -> str | None:
        """The automatic choice: the first free address in order that neither waits nor is listed,
        else the oldest-released waiting one that is not listed (an early reuse)."""
        version = 4 if family is Family.IPV4 else 6
        free = sorted((a for a in self.members[pool] if key(a)[0] == version and self.free(a, pool)), key=key)
        cursor = self.cursors.get((pool, family)) if serial else None
        if cursor is not None:
            free = [a for a in free if key(a) > key(cursor)] + [a for a in free if key(a) <= key(cursor)]
        free = [a for a in free if a not in self.slices.addresses]
        ready = [a for a in free if not self.waiting(a)]
        if ready:
            return ready[0]
        return min(free, key=lambda a: self.released[a], default=None)

    def took(self, allocation: Allocation, owner: str, pool: str) -> None:
        """A new allocation was made: it must be of a free, non-excluded, non-held address."""
        assert allocation.owner == owner and allocation.pool == pool
        assert self.free(allocation.address, pool), f"{allocation.address} was not free to hand out"
        self.owners[allocation.address] = (owner, pool)
        self.released.pop(allocation.address, None)

    def drop(self, address: str, when: float | None = None) -> None:
        del self.owners[address]
        self.timers.pop(address, None)
        self.released[address] = self.clock.now if when is None else when

    def expect_next(self, pool: str, family: Family | None, serial: bool) -> dict[Family, str] | None:
        expected = {}
        for f in [Family.IPV4, Family.IPV6] if family is None else [family]:
            address = self.next_free(pool, f, serial)
            if address is None:
                return None
            expected[f] = address
        return expected

    # -- rules -------------------------------------------------------------------------------------

    @rule(address=addresses, owner=owners, pool=pools)
    def allocate(self, address: str, owner: str, pool: str) -> None:
        existing = self.owners.get(address)
        if pool not in self.members:
            expected: type[Exception] | None = errors.UnknownPool
        elif existing is not None:
            expected = None if existing == (owner, pool) else errors.AlreadyAllocated
        else:
            expected = None if self.free(address, pool) else errors.NotInPool
        if expected is not None:
            with pytest.raises(expected):
                self.allocator.allocate(address, owner, pool)
            return
        allocation = self.allocator.allocate(address, owner, pool)
        assert allocation.address == address
        if existing is None:
            self.took(allocation, owner, pool)

    def _allocate_next(
        self, owner: str, pool: str, family: Family | None, serial: bool, timeout: float
    ) -> None:
        if pool not in self.members:
            with pytest.raises(errors.UnknownPool):
                self.allocator.allocate_next(owner, pool, family, serial=serial)
            return
        expected = self.expect_next(pool, family, serial)
        if expected is None:
            with pytest.raises(errors.PoolExhausted):
                if timeout:
                    self.allocator.allocate_next_with_expiration(owner, pool, family, timeout)
                else:
                    self.allocator.allocate_next(owner, pool, family, serial=serial)
            return
        if timeout:
            v4, v6 = self.allocator.allocate_next_with_expiration(owner, pool, family, timeout)
        else:
            v4, v6 = self.allocator.allocate_next(owner, pool, family, serial=serial)
        got = {a.family: a for a in (v4, v6) if a is not None}
        assert {f: a.address for f, a in got.items()} == expected
        assert (v4 is None or v4.family is Family.IPV4) and (v6 is None or v6.family is Family.IPV6)
        self.early_expected += sum(1 for a in expected.values() if self.waiting(a))
        for f, allocation in got.items():
            self.took(allocation, owner, pool)
            self.cursors[(pool, f)] = allocation.address
            if timeout:
                assert allocation.expiration_uuid
                self.timers[allocation.address] = (
                    allocation.expiration_uuid,
                    self.clock.now + timeout,
                    timeout,
                )

    @rule(owner=owners, pool=pools, family=families, serial=st.booleans())
    def allocate_next(self, owner: str, pool: str, family: Family | None, serial: bool) -> None:
        self._allocate_next(owner, pool, family, serial, 0.0)

    @rule(owner=owners, pool=pools, family=families, timeout=timeouts)
    def allocate_next_with_expiration(
        self, owner: str, pool: str, family: Family | None, timeout: float
    ) -> None:
        self._allocate_next(owner, pool, family, False, timeout)

    @rule(address=addresses, pool=pools)
    def release(self, address: str, pool: str) -> None:
        existing = self.owners.get(address)
        if existing is None or existing[1] != pool:
            with pytest.raises(errors.NotAllocated):
                self.allocator.release(address, pool)
            return
        assert self.allocator.release(address, pool).owner == existing[0]
        self.drop(address)

    @precondition(lambda self: self.owners)
    @rule(data=st.data())
    def release_an_allocated_address(self, data: st.DataObject) -> None:
        address = data.draw(st.sampled_from(sorted(self.owners, key=key)))
        self.release(address, self.owners[address][1])

    @rule(owner=owners)
    def release_owner(self, owner: str) -> None:
        mine = {a for a, (o, _) in self.owners.items() if o == owner}
        assert {a.address for a in self.allocator.release_owner(owner)} == mine
        for address in mine:
            self.drop(address)

    @rule(address=addresses, pool=pools)
    def exclude(self, address: str, pool: str) -> None:
        self.allocator.exclude(address, "operator", pool)
        self.excluded.setdefault(pool, set()).add(address)

    @rule(pool=pools, current=st.sets(addresses))
    def set_pool(self, pool: str, current: set[str]) -> None:
        self.allocator.set_pool(pool, [member(a) for a in current])
        self.members[pool] = set(current)

    @rule(pool=pools)
    def remove_pool(self, pool: str) -> None:
        if pool not in self.members:
            with pytest.raises(errors.UnknownPool):
                self.allocator.remove_pool(pool)
            return
        self.allocator.remove_pool(pool)
        del self.members[pool]
        self.cursors = {k: v for k, v in self.cursors.items() if k[0] != pool}

    @rule(
        pool=pools,
        marks=st.dictionaries(addresses, st.sampled_from([MARKED, RELEASED]), max_size=4),
        published=st.sets(addresses, max_size=2),
    )
    def answer_release(self, pool: str, marks: dict[str, ReleaseState], published: set[str]) -> None:
        self.handshake(pool, dict(marks), published)

    def handshake(self, pool: str, marks: dict[str, ReleaseState], published: set[str]) -> None:
        """Answer ``marks``; ``published``: earlier ready-for-release answers the reconciler still sees."""
        answers = self.allocator.answer_release(marks, pool, published=published)
        self.marks[pool], self.published[pool] = marks, published
        for address, state in marks.items():
            if state == RELEASED and pool in self.members:
                self.members[pool].discard(address)
        expected = {
            a: ReleaseState.DO_NOT_RELEASE if a in self.owners else ReleaseState.READY
            for a, state in marks.items()
            if state == MARKED
        }
        assert answers == expected

    @rule(data=st.data(), timeout=timeouts)
    def start_expiration_timer(self, data: st.DataObject, timeout: float) -> None:
        address = data.draw(addresses)
        pool = self.owners[address][1] if address in self.owners else data.draw(pools)
        if address not in self.owners:
            with pytest.raises(errors.NotAllocated):
                self.allocator.start_expiration_timer(address, pool, timeout)
            return
        uuid = self.allocator.start_expiration_timer(address, pool, timeout)
        assert uuid and uuid != self.timers.get(address, ("",))[0]
        self.timers[address] = (uuid, self.clock.now + timeout, timeout)

    @precondition(lambda self: self.owners)
    @rule(data=st.data(), right_uuid=st.booleans())
    def stop_expiration_timer(self, data: st.DataObject, right_uuid: bool) -> None:
        address = data.draw(st.sampled_from(sorted(self.owners)))
        pool = self.owners[address][1]
        timer = self.timers.get(address)
        if timer is None or not right_uuid:
            with pytest.raises(errors.ExpirationMismatch):
                self.allocator.stop_expiration_timer(address, pool, "not-the-uuid")
            return
        self.allocator.stop_expiration_timer(address, pool, timer[0])
        del self.timers[address]

    @rule(seconds=st.sampled_from([0.5, 1.0, 4.0, 10.0, 31.0]))
    def advance(self, seconds: float) -> None:
        until = self.clock.now + seconds
        for address, (_, deadline, _) in list(self.timers.items()):
            if deadline <= until:
                self.drop(address, when=deadline)  # released when its timer fired
        self.clock.advance(seconds)

    @rule(address=addresses, listed=st.booleans())
    def endpointslice(self, address: str, listed: bool) -> None:
        """An EndpointSlice starts or stops listing ``address``."""
        if listed:
            self.slices.addresses.add(address)
        else:
            self.slices.addresses.discard(address)

    @rule()
    def restart(self) -> None:
        before = self.allocator.allocations()
        self.clock.kill()  # the process dies, and its timers with it
        # the serial cursors are saved with the allocations: they survive the restart
        self.timers = {a: (u, self.clock.now + t, t) for a, (u, _, t) in self.timers.items()}
        self.allocator = self.start()
        assert self.allocator.allocations() == before

    # -- invariants --------------------------------------------------------------------------------

    @invariant()
    def one_owner_per_address_and_the_model_agrees(self) -> None:
        allocations = self.allocator.allocations()
        assert len({a.address for a in allocations}) == len(allocations)
        assert {a.address: (a.owner, a.pool) for a in allocations} == self.owners
        assert {a.address: a.expiration_uuid for a in allocations if a.expiration_uuid} == {
            a: uuid for a, (uuid, _, _) in self.timers.items()
        }

    @invariant()
    def used_and_dump_equal_the_allocated_addresses(self) -> None:
        assert self.allocator.used() == set(self.owners)
        v4, v6, _ = self.allocator.dump()
        assert {**v4, **v6} == {a: owner for a, (owner, _) in self.owners.items()}
        assert all(Family.of(a) is Family.IPV4 for a in v4) and all(Family.of(a) is Family.IPV6 for a in v6)

    @invariant()
    def pools_hold_the_members_set_minus_the_released(self) -> None:
        assert self.allocator.pools() == sorted(self.members)
        for pool, current in self.members.items():
            assert [m.address for m in self.allocator.pool_addresses(pool)] == sorted(current, key=key)

    @invariant()
    def no_expired_allocation_is_left(self) -> None:
        assert all(deadline > self.clock.now for _, deadline, _ in self.timers.values())
        assert self.clock.pending() == len(self.timers)

    @invariant()
    def the_quarantine_holds_what_waits_and_early_reuses_are_counted(self) -> None:
        waiting = {a for a, left in self.allocator.quarantined().items() if left > 0}
        assert waiting == {a for a in self.released if self.waiting(a)}
        assert self.early.count("pool_exhausted") == self.early_expected

    @invariant()
    def the_state_file_holds_the_allocations(self) -> None:
        assert StateFile(self.path).load() == self.allocator.allocations()

    @invariant()
    def answers_say_do_not_release_exactly_for_allocated_marked_addresses(self) -> None:
        # The daemon answers again on every status event: the same marks, against the current allocations.
        for pool, marks in list(self.marks.items()):
            self.handshake(pool, marks, self.published[pool])


AllocatorMachine.TestCase.settings = settings(
    max_examples=80, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestAllocatorProperties = AllocatorMachine.TestCase
