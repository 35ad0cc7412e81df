"""The node-local allocator: pools, allocation order, exclusions, expirations, the release handshake."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

import pytest
from structlog.testing import capture_logs

from eni_ipam.agent import errors
from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.types import DEFAULT_POOL, Allocation, Family, PoolAddress
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.model import ReleaseState
from tests.agent import FakeClock, FakeHandle

MARKED, RELEASED = ReleaseState.MARKED, ReleaseState.RELEASED
READY, DO_NOT_RELEASE = ReleaseState.READY, ReleaseState.DO_NOT_RELEASE


def member(address: str, *, interface: str = "eni-1", subnet: str = "subnet-1") -> PoolAddress:
    if ":" in address:
        return PoolAddress(address=address, prefix_length=64, gateway="2001:db8::1", interface_id=interface)
    return PoolAddress(
        address=address, prefix_length=24, gateway="10.0.0.1", interface_id=interface, subnet_id=subnet
    )


def members(*addresses: str) -> list[PoolAddress]:
    return [member(a) for a in addresses]


def counter() -> itertools.count[int]:
    return itertools.count(1)


def make(*addresses: str, ipv6: bool = True, clock: FakeClock | None = None) -> Allocator:
    numbers = counter()
    allocator = Allocator(clock=clock or FakeClock(), ipv6=ipv6, uuids=lambda: f"uuid-{next(numbers)}")
    allocator.set_pool(DEFAULT_POOL, members(*addresses))
    return allocator


# -- allocating a given address ------------------------------------------------------------------


def test_allocate_gives_the_address_with_its_pool_data() -> None:
    allocator = make("10.0.0.5")
    assert allocator.allocate("10.0.0.5", "c1") == Allocation(
        address="10.0.0.5",
        pool=DEFAULT_POOL,
        owner="c1",
        prefix_length=24,
        gateway="10.0.0.1",
        interface_id="eni-1",
        subnet_id="subnet-1",
    )
    assert allocator.used() == {"10.0.0.5"}


def test_allocating_again_for_the_same_owner_returns_the_existing_allocation() -> None:
    allocator = make("10.0.0.5")
    first = allocator.allocate("10.0.0.5", "c1")
    assert allocator.allocate("10.0.0.5", "c1") == first
    assert allocator.allocations() == [first]


def test_an_address_owned_by_someone_else_is_refused() -> None:
    allocator = make("10.0.0.5")
    allocator.allocate("10.0.0.5", "c1")
    with pytest.raises(errors.AlreadyAllocated) as caught:
        allocator.allocate("10.0.0.5", "c2")
    assert (caught.value.address, caught.value.pool) == ("10.0.0.5", DEFAULT_POOL)
    assert allocator.allocations(owner="c2") == []


def test_an_address_has_one_owner_even_when_two_pools_list_it() -> None:
    allocator = make("10.0.0.5", "10.0.0.6")
    allocator.set_pool("static", members("10.0.0.5"))
    allocator.allocate("10.0.0.5", "c1")
    with pytest.raises(errors.AlreadyAllocated):
        allocator.allocate("10.0.0.5", "c1", pool="static")  # same owner, other pool: still one owner
    with pytest.raises(errors.PoolExhausted):
        allocator.allocate_next("c2", "static", Family.IPV4)


@pytest.mark.parametrize(
    ("address", "pool", "error"),
    [
        ("10.0.0.9", DEFAULT_POOL, errors.NotInPool),
        ("not-an-address", DEFAULT_POOL, errors.NotInPool),
        ("10.0.0.5", "nope", errors.UnknownPool),
    ],
)
def test_allocate_refuses_non_members_garbage_and_unknown_pools(
    address: str, pool: str, error: type[errors.AllocatorError]
) -> None:
    allocator = make("10.0.0.5")
    with pytest.raises(error):
        allocator.allocate(address, "c1", pool)
    assert allocator.used() == set()


def test_allocating_an_address_of_a_disabled_family_is_refused() -> None:
    allocator = make("10.0.0.5", "2001:db8::5", ipv6=False)
    with pytest.raises(errors.FamilyDisabled, match="IPv6 allocation disabled"):
        allocator.allocate("2001:db8::5", "c1")


def test_an_allocation_needs_an_owner() -> None:
    allocator = make("10.0.0.5")
    with pytest.raises(errors.AllocatorError, match="owner"):
        allocator.allocate("10.0.0.5", "")
    with pytest.raises(errors.AllocatorError, match="owner"):
        allocator.allocate_next("")


def test_addresses_are_matched_in_canonical_form() -> None:
    allocator = make("2001:DB8::0:9")
    allocation = allocator.allocate("2001:db8:0::9", "c1")
    assert allocation.address == "2001:db8::9"
    assert [m.address for m in allocator.pool_addresses(DEFAULT_POOL)] == ["2001:db8::9"]
    assert allocator.release("2001:DB8::9") == allocation
    assert allocator.used() == set()


# -- allocating the next free address -----------------------------------------------------------


def test_allocate_next_hands_out_the_lowest_free_address_in_numeric_order() -> None:
    allocator = make("10.0.0.10", "10.0.0.100", "10.0.0.9", "2001:db8::10", "2001:db8::a", "2001:db8::9")
    got = [allocator.allocate_next(f"c{i}") for i in range(3)]
    assert [(v4.address, v6.address) for v4, v6 in got if v4 and v6] == [
        ("10.0.0.9", "2001:db8::9"),
        ("10.0.0.10", "2001:db8::a"),
        ("10.0.0.100", "2001:db8::10"),
    ]


def test_allocate_next_of_one_family_leaves_the_other_alone() -> None:
    allocator = make("10.0.0.5", "2001:db8::5")
    v4, v6 = allocator.allocate_next("c1", family=Family.IPV6)
    assert v4 is None and v6 is not None and v6.address == "2001:db8::5"
    assert allocator.used() == {"2001:db8::5"}


def test_allocate_next_without_a_family_takes_only_the_enabled_ones() -> None:
    allocator = make("10.0.0.5", "2001:db8::5", ipv6=False)
    v4, v6 = allocator.allocate_next("c1")
    assert v4 is not None and v4.address == "10.0.0.5" and v6 is None
    with pytest.raises(errors.FamilyDisabled):
        allocator.allocate_next("c1", family=Family.IPV6)


def test_allocate_next_with_no_family_enabled_is_refused() -> None:
    allocator = Allocator(clock=FakeClock(), ipv4=False, ipv6=False)
    allocator.set_pool(DEFAULT_POOL, members("10.0.0.5"))
    with pytest.raises(errors.FamilyDisabled):
        allocator.allocate_next("c1")


def test_allocate_next_is_all_or_nothing_when_one_family_is_exhausted() -> None:
    allocator = make("10.0.0.5", "10.0.0.6", "2001:db8::5")
    allocator.allocate_next("c1")
    with pytest.raises(errors.PoolExhausted) as caught:
        allocator.allocate_next("c2")
    assert "IPv6" in str(caught.value)
    assert allocator.allocations(owner="c2") == []
    v4, _ = allocator.allocate_next("c2", family=Family.IPV4)
    assert v4 is not None and v4.address == "10.0.0.6"  # the failed attempt left 10.0.0.6 free


def test_allocate_next_from_an_unknown_pool_is_refused() -> None:
    with pytest.raises(errors.UnknownPool):
        make("10.0.0.5").allocate_next("c1", "nope")


def test_serial_allocation_continues_after_the_last_address_handed_out_and_wraps() -> None:
    allocator = make("10.0.0.1", "10.0.0.2", "10.0.0.3", ipv6=False)

    def serial(owner: str) -> str:
        v4, _ = allocator.allocate_next(owner, serial=True)
        assert v4 is not None
        return v4.address

    assert serial("a") == "10.0.0.1"
    allocator.release("10.0.0.1")
    assert serial("b") == "10.0.0.2"  # not the freed 10.0.0.1
    allocator.release("10.0.0.2")
    assert serial("c") == "10.0.0.3"
    assert serial("d") == "10.0.0.1"  # wrapped
    allocator.release("10.0.0.3")
    v4, _ = allocator.allocate_next("e")  # not serial: lowest free
    assert v4 is not None and v4.address == "10.0.0.2"


# -- exclusions ----------------------------------------------------------------------------------


def test_an_excluded_address_is_never_handed_out() -> None:
    allocator = make("10.0.0.5", "10.0.0.6", ipv6=False)
    allocator.exclude("10.0.0.5", "router")
    allocator.exclude("10.0.0.5", "router")  # idempotent
    v4, _ = allocator.allocate_next("c1")
    assert v4 is not None and v4.address == "10.0.0.6"
    with pytest.raises(errors.NotInPool, match="excluded by router"):
        allocator.allocate("10.0.0.5", "c2")
    with pytest.raises(errors.PoolExhausted):
        allocator.allocate_next("c2")


def test_an_exclusion_made_before_the_address_joins_the_pool_still_applies() -> None:
    allocator = make("10.0.0.6", ipv6=False)
    allocator.exclude("10.0.0.5", "router")
    allocator.set_pool(DEFAULT_POOL, members("10.0.0.5", "10.0.0.6"))
    v4, _ = allocator.allocate_next("c1")
    assert v4 is not None and v4.address == "10.0.0.6"


def test_an_exclusion_applies_to_its_pool_only() -> None:
    allocator = make("10.0.0.5", ipv6=False)
    allocator.set_pool("static", members("10.0.0.7"))
    allocator.exclude("10.0.0.5", "router", "static")
    allocator.exclude("10.0.0.7", "router", "static")
    v4, _ = allocator.allocate_next("c1")
    assert v4 is not None and v4.address == "10.0.0.5"
    with pytest.raises(errors.NotInPool):
        allocator.allocate("10.0.0.7", "c1", "static")


def test_excluding_an_allocated_address_keeps_the_allocation_but_never_hands_it_out_again() -> None:
    allocator = make("10.0.0.5", ipv6=False)
    allocator.allocate("10.0.0.5", "c1")
    allocator.exclude("10.0.0.5", "router")
    assert allocator.used() == {"10.0.0.5"}
    allocator.release("10.0.0.5")
    with pytest.raises(errors.PoolExhausted):
        allocator.allocate_next("c2")


def test_excluding_something_that_is_not_an_address_is_refused() -> None:
    with pytest.raises(errors.NotInPool):
        make().exclude("10.0.0.300", "router")


def test_a_withheld_range_is_handed_out_from_no_pool_until_lifted() -> None:
    allocator = make("10.0.0.5", "10.0.0.6", "10.0.0.9", ipv6=False)
    allocator.set_pool("static", members("10.0.0.7"))
    allocator.allocate("10.0.0.6", "c0")
    allocator.withhold("10.0.0.4/30", "rebuild:docker")  # 10.0.0.4-7, a range no pool need list
    assert allocator.withheld() == {"rebuild:docker": ["10.0.0.4/30"]}
    assert "withheld 10.0.0.4/30 (every pool) by rebuild:docker" in allocator.debug_status()
    v4, _ = allocator.allocate_next("c1")
    assert v4 is not None and v4.address == "10.0.0.9"
    with pytest.raises(errors.NotInPool, match="withheld by rebuild:docker"):
        allocator.allocate("10.0.0.5", "c2")
    with pytest.raises(errors.PoolExhausted):
        allocator.allocate_next("c2", "static")
    assert allocator.allocate("10.0.0.6", "c0").owner == "c0"  # an owner keeps what it holds
    assert allocator.lift("rebuild:docker") == ["10.0.0.4/30"] and allocator.withheld() == {}
    assert allocator.allocate("10.0.0.5", "c2").owner == "c2"


# -- release -------------------------------------------------------------------------------------


def test_release_returns_the_allocation_and_frees_the_address_for_the_next_owner() -> None:
    allocator = make("10.0.0.5", ipv6=False)
    allocation = allocator.allocate("10.0.0.5", "c1")
    assert allocator.release("10.0.0.5") == allocation
    v4, _ = allocator.allocate_next("c2")
    assert v4 is not None and v4.owner == "c2" and v4.address == "10.0.0.5"


def test_releasing_what_is_not_allocated_in_that_pool_is_refused() -> None:
    allocator = make("10.0.0.5")
    allocator.set_pool("static", members("10.0.0.7"))
    allocator.allocate("10.0.0.5", "c1")
    for address, pool in [("10.0.0.6", DEFAULT_POOL), ("10.0.0.5", "static"), ("garbage", DEFAULT_POOL)]:
        with pytest.raises(errors.NotAllocated):
            allocator.release(address, pool)
    assert allocator.used() == {"10.0.0.5"}


def test_release_owner_releases_every_allocation_of_the_owner_and_nothing_else() -> None:
    allocator = make("10.0.0.5", "10.0.0.6", "2001:db8::5", "2001:db8::6")
    mine = allocator.allocate_next("c1")
    theirs = allocator.allocate_next("c2")
    assert allocator.release_owner("c1") == list(mine)
    assert allocator.allocations() == list(theirs)
    assert allocator.release_owner("c1") == []


# -- pool membership -----------------------------------------------------------------------------


def test_an_allocated_address_leaving_the_pool_stays_allocated_until_released() -> None:
    allocator = make("10.0.0.5", "10.0.0.6", ipv6=False)
    allocator.allocate("10.0.0.5", "c1")
    allocator.set_pool(DEFAULT_POOL, members("10.0.0.6"))
    assert allocator.dump()[0] == {"10.0.0.5": "c1"}
    allocator.release("10.0.0.5")
    allocator.allocate_next("c2")
    with pytest.raises(errors.PoolExhausted):
        allocator.allocate_next("c3")  # 10.0.0.5 is not handed out again
    assert allocator.used() == {"10.0.0.6"}


def test_a_removed_pool_keeps_its_allocations_until_released() -> None:
    allocator = make("10.0.0.5", ipv6=False)
    allocator.set_pool("static", members("10.0.0.7"))
    allocator.allocate("10.0.0.7", "c1", "static")
    allocator.remove_pool("static")
    assert allocator.pools() == [DEFAULT_POOL]
    assert allocator.allocations(pool="static")[0].address == "10.0.0.7"
    allocator.release("10.0.0.7", "static")
    with pytest.raises(errors.UnknownPool):
        allocator.remove_pool("static")


def test_pool_addresses_lists_members_in_address_order() -> None:
    allocator = make("2001:db8::10", "10.0.0.10", "2001:db8::9", "10.0.0.9")
    listed = [m.address for m in allocator.pool_addresses(DEFAULT_POOL)]
    assert listed == ["10.0.0.9", "10.0.0.10", "2001:db8::9", "2001:db8::10"]
    with pytest.raises(errors.UnknownPool):
        allocator.pool_addresses("nope")


def test_a_pool_member_that_is_not_an_address_is_refused() -> None:
    with pytest.raises(errors.AllocatorError):
        make().set_pool(DEFAULT_POOL, members("10.0.0.5", "eni-1"))


def test_capacity_counts_members_of_enabled_families_that_are_not_excluded() -> None:
    allocator = make("10.0.0.5", "10.0.0.6", "10.0.0.7", "2001:db8::5", ipv6=False)
    allocator.allocate("10.0.0.5", "c1")
    allocator.exclude("10.0.0.6", "router")
    assert allocator.capacity() == 2
    with pytest.raises(errors.UnknownPool):
        allocator.capacity("nope")


# -- the release handshake -----------------------------------------------------------------------


def test_a_marked_free_address_is_answered_ready_and_held() -> None:
    allocator = make("10.0.0.5", "10.0.0.6", ipv6=False)
    assert allocator.answer_release({"10.0.0.5": MARKED}) == {"10.0.0.5": READY}
    v4, _ = allocator.allocate_next("c1")
    assert v4 is not None and v4.address == "10.0.0.6"
    with pytest.raises(errors.NotInPool, match="held for release"):
        allocator.allocate("10.0.0.5", "c2")
    with pytest.raises(errors.PoolExhausted):
        allocator.allocate_next("c2")


def test_a_marked_allocated_address_is_answered_do_not_release_and_held_once_released() -> None:
    allocator = make("10.0.0.5", ipv6=False)
    allocator.allocate("10.0.0.5", "c1")
    assert allocator.answer_release({"10.0.0.5": MARKED}) == {"10.0.0.5": DO_NOT_RELEASE}
    assert allocator.allocate("10.0.0.5", "c1").owner == "c1"  # the owner keeps what it holds
    allocator.release("10.0.0.5")
    with pytest.raises(errors.PoolExhausted):
        allocator.allocate_next("c2")
    assert allocator.answer_release({"10.0.0.5": MARKED}) == {"10.0.0.5": READY}


def test_a_released_address_leaves_the_pool_and_the_answers() -> None:
    allocator = make("10.0.0.5", "10.0.0.6", ipv6=False)
    answers = allocator.answer_release({"10.0.0.5": RELEASED, "10.0.0.6": MARKED})
    assert answers == {"10.0.0.6": READY}
    assert [m.address for m in allocator.pool_addresses(DEFAULT_POOL)] == ["10.0.0.6"]


def test_an_address_still_listed_as_released_is_not_handed_out_when_the_pool_lags() -> None:
    allocator = make("10.0.0.5", ipv6=False)
    allocator.answer_release({"10.0.0.5": RELEASED})
    allocator.set_pool(DEFAULT_POOL, members("10.0.0.5"))  # a status written before the release
    with pytest.raises(errors.PoolExhausted):
        allocator.allocate_next("c1")


def test_an_address_no_longer_marked_is_handed_out_again() -> None:
    allocator = make("10.0.0.5", ipv6=False)
    allocator.answer_release({"10.0.0.5": MARKED})
    assert allocator.answer_release({}) == {}
    v4, _ = allocator.allocate_next("c1")
    assert v4 is not None and v4.address == "10.0.0.5"


def test_a_hold_applies_to_every_pool() -> None:
    allocator = make("10.0.0.5", ipv6=False)
    allocator.set_pool("static", members("10.0.0.5"))
    allocator.answer_release({"10.0.0.5": MARKED})
    with pytest.raises(errors.PoolExhausted):
        allocator.allocate_next("c1", "static")


def test_a_mark_that_is_not_an_address_is_ignored() -> None:
    allocator = make("10.0.0.5", ipv6=False)
    with capture_logs() as logs:
        assert allocator.answer_release({"bogus": MARKED}) == {}
    assert any(e["event"] == "release_mark_invalid" for e in logs)
    assert allocator.allocate_next("c1")[0] is not None


# -- expiration timers ---------------------------------------------------------------------------


def test_an_allocation_expires_unless_its_timer_is_stopped() -> None:
    clock = FakeClock()
    allocator = make("10.0.0.5", "10.0.0.6", ipv6=False, clock=clock)
    kept, _ = allocator.allocate_next_with_expiration("c1", DEFAULT_POOL, None, 30)
    lapsed, _ = allocator.allocate_next_with_expiration("c2", DEFAULT_POOL, None, 30)
    assert kept is not None and lapsed is not None and kept.expiration_uuid
    allocator.stop_expiration_timer(kept.address, DEFAULT_POOL, kept.expiration_uuid)
    assert allocator.allocations(owner="c1")[0].expiration_uuid == ""
    clock.advance(29.9)
    assert allocator.used() == {"10.0.0.5", "10.0.0.6"}
    with capture_logs() as logs:
        clock.advance(0.2)
    assert allocator.used() == {"10.0.0.5"}
    assert [e["event"] for e in logs] == ["allocation_expired"]
    assert clock.pending() == 0


def test_each_family_gets_its_own_timer() -> None:
    clock = FakeClock()
    allocator = make("10.0.0.5", "2001:db8::5", clock=clock)
    v4, v6 = allocator.allocate_next_with_expiration("c1", DEFAULT_POOL, None, 10)
    assert v4 is not None and v6 is not None
    assert (v4.expiration_uuid, v6.expiration_uuid) == ("uuid-1", "uuid-2")
    allocator.stop_expiration_timer(v6.address, DEFAULT_POOL, "uuid-2")
    clock.advance(10)
    assert allocator.used() == {"2001:db8::5"}


def test_stopping_a_timer_with_another_uuid_is_refused_and_the_timer_keeps_running() -> None:
    clock = FakeClock()
    allocator = make("10.0.0.5", ipv6=False, clock=clock)
    allocator.allocate("10.0.0.5", "c1")
    uuid = allocator.start_expiration_timer("10.0.0.5", DEFAULT_POOL, 5)
    for wrong in ("someone-else", ""):
        with pytest.raises(errors.ExpirationMismatch):
            allocator.stop_expiration_timer("10.0.0.5", DEFAULT_POOL, wrong)
    assert allocator.allocations()[0].expiration_uuid == uuid
    clock.advance(5)
    assert allocator.used() == set()


def test_timers_of_unallocated_addresses_are_refused() -> None:
    allocator = make("10.0.0.5", ipv6=False)
    with pytest.raises(errors.NotAllocated):
        allocator.start_expiration_timer("10.0.0.5", DEFAULT_POOL, 5)
    with pytest.raises(errors.NotAllocated):
        allocator.stop_expiration_timer("10.0.0.5", DEFAULT_POOL, "uuid-1")


def test_releasing_stops_the_timer_so_the_next_owner_keeps_the_address() -> None:
    clock = FakeClock()
    allocator = make("10.0.0.5", ipv6=False, clock=clock)
    allocator.allocate_next_with_expiration("c1", DEFAULT_POOL, Family.IPV4, 5)
    allocator.release("10.0.0.5")
    allocator.allocate("10.0.0.5", "c2")
    clock.advance(60)
    assert allocator.dump()[0] == {"10.0.0.5": "c2"}
    assert clock.pending() == 0


def test_starting_a_timer_again_replaces_the_running_one() -> None:
    clock = FakeClock()
    allocator = make("10.0.0.5", ipv6=False, clock=clock)
    allocator.allocate("10.0.0.5", "c1")
    first = allocator.start_expiration_timer("10.0.0.5", DEFAULT_POOL, 5)
    second = allocator.start_expiration_timer("10.0.0.5", DEFAULT_POOL, 50)
    assert first != second
    clock.advance(10)
    assert allocator.used() == {"10.0.0.5"}  # the first timer no longer releases it
    with pytest.raises(errors.ExpirationMismatch):
        allocator.stop_expiration_timer("10.0.0.5", DEFAULT_POOL, first)
    clock.advance(40)
    assert allocator.used() == set()


@pytest.mark.parametrize("timeout", [-1.0, float("nan"), float("inf")])
def test_an_invalid_timeout_is_refused_before_anything_is_allocated(timeout: float) -> None:
    allocator = make("10.0.0.5", ipv6=False)
    with pytest.raises(errors.AllocatorError, match="timeout"):
        allocator.allocate_next_with_expiration("c1", DEFAULT_POOL, None, timeout)
    assert allocator.used() == set()
    allocator.allocate("10.0.0.5", "c1")
    with pytest.raises(errors.AllocatorError, match="timeout"):
        allocator.start_expiration_timer("10.0.0.5", DEFAULT_POOL, timeout)
    assert allocator.allocations()[0].expiration_uuid == ""


@pytest.mark.looptime
async def test_expiration_runs_on_the_event_loop_clock() -> None:
    allocator = Allocator(clock=LoopClock())
    allocator.set_pool(DEFAULT_POOL, members("10.0.0.5"))
    allocator.allocate_next_with_expiration("c1", DEFAULT_POOL, Family.IPV4, 300)
    await asyncio.sleep(299)
    assert allocator.used() == {"10.0.0.5"}
    await asyncio.sleep(2)
    assert allocator.used() == set()


# -- inspection ----------------------------------------------------------------------------------


def test_dump_gives_owners_per_family_and_a_status_line() -> None:
    allocator = make("10.0.0.10", "10.0.0.9", "2001:db8::5")
    allocator.allocate("10.0.0.10", "c1")
    allocator.allocate_next("c2")
    allocator.answer_release({"10.0.0.9": MARKED})
    v4, v6, status = allocator.dump()
    assert list(v4.items()) == [("10.0.0.9", "c2"), ("10.0.0.10", "c1")]
    assert v6 == {"2001:db8::5": "c2"}
    assert status == "IPv4 2/2 allocated, IPv6 1/1 allocated; pools: default; 1 held for release"
    assert (
        make(ipv6=False).dump()[2] == "IPv4 0/0 allocated, IPv6 disabled; pools: default; 0 held for release"
    )


def test_debug_status_names_pools_allocations_timers_and_exclusions() -> None:
    allocator = make("10.0.0.5", "10.0.0.6", "10.0.0.7", ipv6=False)
    allocator.allocate_next_with_expiration("c1", DEFAULT_POOL, None, 30)
    allocator.exclude("10.0.0.6", "router")
    allocator.answer_release({"10.0.0.7": MARKED})
    status = allocator.debug_status()
    assert "pool default: 3 members, 1 allocated, held: 10.0.0.7" in status
    assert "10.0.0.5 pool default owner c1 (expires after 30s, uuid uuid-1)" in status
    assert "excluded 10.0.0.6 pool default by router" in status


def test_allocations_filter_by_owner_and_pool() -> None:
    allocator = make("10.0.0.5", "10.0.0.6", ipv6=False)
    allocator.set_pool("static", members("10.0.0.7"))
    a = allocator.allocate("10.0.0.6", "c1")
    b = allocator.allocate("10.0.0.5", "c2")
    c = allocator.allocate("10.0.0.7", "c1", "static")
    assert allocator.allocations() == [b, a, c]
    assert allocator.allocations(owner="c1") == [a, c]
    assert allocator.allocations(owner="c1", pool="static") == [c]
    assert allocator.used() == {"10.0.0.5", "10.0.0.6", "10.0.0.7"}


def test_changes_are_logged_with_event_names() -> None:
    clock = FakeClock()
    with capture_logs() as logs:
        allocator = make("10.0.0.5", "10.0.0.6", ipv6=False, clock=clock)
        allocator.allocate("10.0.0.5", "c1")
        allocator.exclude("10.0.0.6", "router")
        allocator.release("10.0.0.5")
        allocator.answer_release({"10.0.0.5": MARKED})
    events = [(e["event"], e["log_level"]) for e in logs]
    assert events == [
        ("pool_updated", "info"),
        ("address_allocated", "debug"),
        ("address_excluded", "info"),
        ("address_released", "debug"),
        ("release_holds_changed", "info"),
        ("release_answered", "debug"),
    ]
    allocated = logs[1]
    assert (allocated["address"], allocated["owner"], allocated["pool"]) == ("10.0.0.5", "c1", DEFAULT_POOL)


class LateCancelClock(FakeClock):
    """A clock whose cancel comes too late: the callback runs anyway (already due on the loop)."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeHandle:
        handle = super().call_later(delay, callback)
        handle.cancel = lambda: None  # type: ignore[method-assign]
        return handle


def test_a_timer_that_fires_after_being_stopped_or_replaced_releases_nothing() -> None:
    clock = LateCancelClock()
    allocator = make("10.0.0.5", "10.0.0.6", ipv6=False, clock=clock)
    stopped, _ = allocator.allocate_next_with_expiration("c1", DEFAULT_POOL, None, 5)
    assert stopped is not None
    allocator.stop_expiration_timer(stopped.address, DEFAULT_POOL, stopped.expiration_uuid)
    replaced, _ = allocator.allocate_next_with_expiration("c2", DEFAULT_POOL, None, 5)
    assert replaced is not None
    allocator.start_expiration_timer(replaced.address, DEFAULT_POOL, 50)
    clock.advance(10)
    assert allocator.used() == {"10.0.0.5", "10.0.0.6"}
    clock.advance(40)
    assert allocator.used() == {"10.0.0.5"}
