"""The reuse quarantine: a released address waits out its time and its EndpointSlices before the
automatic choice hands it out again, across restarts; early reuse only when nothing else is free."""

from __future__ import annotations

import datetime
import itertools
import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from eni_ipam.agent import errors
from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.state import StateFile
from eni_ipam.agent.types import DEFAULT_POOL
from tests.agent import FakeClock, FullDisk
from tests.agent.test_allocator import members

POOL = ("10.0.0.5", "10.0.0.6", "10.0.0.7")
QUARANTINE = 150.0


class Slices:
    """What the EndpointSlices list, set by hand (``synced`` False: not read yet)."""

    def __init__(self, *addresses: str, synced: bool = True) -> None:
        self.addresses = set(addresses)
        self.read = synced

    def listed(self, address: str) -> bool:
        return address in self.addresses

    def synced(self) -> bool:
        return self.read


def start(
    clock: FakeClock,
    path: Path | None = None,
    *,
    pool: tuple[str, ...] = POOL,
    quarantine: float = QUARANTINE,
    slices: Slices | None = None,
    reused: list[str] | None = None,
    state: StateFile | None = None,
) -> Allocator:
    """An allocator as the daemon starts one: quarantine, slices, pool, then restored."""
    numbers = itertools.count(1)
    allocator = Allocator(
        clock=clock,
        state=state or (StateFile(path) if path is not None else None),
        uuids=lambda: f"uuid-{next(numbers)}",
        quarantine=quarantine,
        reused=(reused.append if reused is not None else None),
    )
    allocator.set_endpoints(slices or Slices())
    allocator.set_pool(DEFAULT_POOL, members(*pool))
    if path is not None or state is not None:
        allocator.restore()
    return allocator


def next_address(allocator: Allocator, owner: str, *, serial: bool = False) -> str:
    v4, _ = allocator.allocate_next(owner, serial=serial)
    assert v4 is not None
    return v4.address


# -- the time --------------------------------------------------------------------------------------


def test_a_released_address_is_not_handed_out_again_within_the_quarantine() -> None:
    clock = FakeClock()
    allocator = start(clock)
    assert next_address(allocator, "a") == "10.0.0.5"
    allocator.release("10.0.0.5")
    clock.advance(QUARANTINE - 1)
    assert next_address(allocator, "b") == "10.0.0.6"  # the lowest free one waits
    assert allocator.quarantined() == {"10.0.0.5": pytest.approx(1.0)}
    clock.advance(1)
    assert next_address(allocator, "c") == "10.0.0.5"  # waited out
    assert allocator.quarantined() == {}


@pytest.mark.parametrize("path", ["release", "release_owner", "expiry"])
def test_every_release_path_quarantines_the_address(path: str) -> None:
    clock = FakeClock()
    allocator = start(clock)
    if path == "expiry":
        allocator.allocate_next_with_expiration("a", DEFAULT_POOL, None, timeout=5.0)
        clock.advance(5.0)
        assert allocator.allocations() == []
    else:
        next_address(allocator, "a")
        if path == "release":
            allocator.release("10.0.0.5")
        else:
            allocator.release_owner("a")
    assert list(allocator.quarantined()) == ["10.0.0.5"]
    assert next_address(allocator, "b") == "10.0.0.6"


def test_serial_allocation_passes_a_quarantined_address_by_too() -> None:
    clock = FakeClock()
    allocator = start(clock)
    for owner in "abc":
        next_address(allocator, owner, serial=True)
    allocator.release("10.0.0.5")
    allocator.release("10.0.0.7")  # the cursor is on .7: serially, .5 comes next, but it waits
    clock.advance(10)
    allocator.release("10.0.0.6")
    # Nothing waited out: the oldest release (.5, then .7) goes first, not the serial order.
    assert next_address(allocator, "d", serial=True) == "10.0.0.5"


def test_an_undone_allocation_is_released_without_a_quarantine() -> None:
    allocator = start(FakeClock())
    next_address(allocator, "a")
    allocator.release("10.0.0.5", quarantine=False)  # never handed over: no traffic can come
    assert allocator.quarantined() == {}
    assert next_address(allocator, "b") == "10.0.0.5"


def test_an_undone_early_reuse_puts_the_address_back_with_its_first_release_time() -> None:
    clock = FakeClock()
    allocator = start(clock, pool=("10.0.0.5",))
    next_address(allocator, "a")
    allocator.release("10.0.0.5")
    clock.advance(100)
    assert next_address(allocator, "b") == "10.0.0.5"  # early: nothing else is free
    allocator.release("10.0.0.5", quarantine=False)  # the ADD failed before the pod had it
    assert allocator.quarantined() == {"10.0.0.5": pytest.approx(QUARANTINE - 100)}


def test_zero_disables_the_quarantine() -> None:
    clock = FakeClock()
    reused: list[str] = []
    allocator = start(clock, quarantine=0, slices=Slices("10.0.0.5"), reused=reused)
    next_address(allocator, "a")
    allocator.release("10.0.0.5")
    assert allocator.quarantined() == {}
    assert next_address(allocator, "b") == "10.0.0.5"  # at once, slices or not
    assert reused == []


# -- early reuse -----------------------------------------------------------------------------------


def test_with_nothing_else_free_the_oldest_quarantined_address_is_reused_early_and_counted() -> None:
    clock = FakeClock()
    reused: list[str] = []
    allocator = start(clock, reused=reused)
    for owner in "abc":
        next_address(allocator, owner)
    allocator.release("10.0.0.7")
    clock.advance(5)
    allocator.release("10.0.0.5")
    clock.advance(5)
    with capture_logs() as logs:
        assert next_address(allocator, "d") == "10.0.0.7"  # released first, though not the lowest
    assert reused == ["pool_exhausted"]
    [event] = [e for e in logs if e["event"] == "quarantined_address_reused"]
    assert (event["address"], event["why"], event["remaining"]) == ("10.0.0.7", "pool_exhausted", 140.0)
    assert next_address(allocator, "e") == "10.0.0.5"
    assert reused == ["pool_exhausted", "pool_exhausted"]


def test_an_early_reuse_undone_by_a_failed_save_counts_nothing(tmp_path: Path) -> None:
    clock = FakeClock()
    reused: list[str] = []
    state = FullDisk(tmp_path / "allocations.json")
    allocator = start(clock, state=state, pool=("10.0.0.5",), reused=reused)
    next_address(allocator, "a")
    allocator.release("10.0.0.5")
    state.full = True
    with pytest.raises(errors.StateNotWritten):
        allocator.allocate_next("b")
    assert reused == []
    assert list(allocator.quarantined()) == ["10.0.0.5"]  # undone with the change


def test_an_explicit_request_takes_a_quarantined_address_and_is_counted() -> None:
    reused: list[str] = []
    allocator = start(FakeClock(), slices=Slices("10.0.0.5"), reused=reused)
    allocator.allocate("10.0.0.5", "docker-endpoint")
    allocator.release("10.0.0.5")  # then asked for again, by address (docker run --ip)
    assert allocator.allocate("10.0.0.5", "docker-endpoint").address == "10.0.0.5"
    assert reused == ["requested"]
    assert allocator.quarantined() == {}


def test_a_sub_range_choice_takes_a_quarantined_address_last() -> None:
    reused: list[str] = []
    allocator = start(FakeClock(), reused=reused)
    allocator.allocate("10.0.0.6", "x")
    allocator.release("10.0.0.6")
    # The libnetwork driver's sub-range, in its order: .6 first, but quarantined.
    assert allocator.allocate_among(["10.0.0.6", "10.0.0.7"], "a").address == "10.0.0.7"
    assert allocator.allocate_among(["10.0.0.6", "10.0.0.7"], "b").address == "10.0.0.6"
    assert reused == ["pool_exhausted"]
    with pytest.raises(errors.PoolExhausted):
        allocator.allocate_among(["10.0.0.6", "10.0.0.7"], "c")


# -- the EndpointSlices ----------------------------------------------------------------------------


def test_an_address_an_endpointslice_lists_is_not_handed_out_after_its_quarantine() -> None:
    clock = FakeClock()
    slices = Slices()
    allocator = start(clock, slices=slices)
    next_address(allocator, "a")
    slices.addresses.add("10.0.0.5")  # the pod's endpoint, not removed yet
    allocator.release("10.0.0.5")
    clock.advance(QUARANTINE * 10)
    assert next_address(allocator, "b") == "10.0.0.6"
    assert allocator.quarantined() == {"10.0.0.5": 0.0}  # waited, still listed
    slices.addresses.clear()
    assert next_address(allocator, "c") == "10.0.0.5"


def test_an_address_every_slice_lists_is_never_reused_early_and_exhaustion_says_why() -> None:
    clock = FakeClock()
    slices = Slices("10.0.0.6", "10.0.0.7")  # stale endpoints of addresses never released here, too
    reused: list[str] = []
    allocator = start(clock, slices=slices, reused=reused)
    next_address(allocator, "a")
    allocator.release("10.0.0.5")
    slices.addresses.add("10.0.0.5")
    assert allocator.free() == 0
    with pytest.raises(errors.PoolExhausted, match=r"\(3 listed by an EndpointSlice\)"):
        allocator.allocate_next("b")
    assert reused == []


def test_until_the_slices_are_read_every_quarantined_address_is_held() -> None:
    clock = FakeClock()
    slices = Slices(synced=False)
    allocator = start(clock, pool=("10.0.0.5", "10.0.0.6"), slices=slices)
    next_address(allocator, "a")
    allocator.release("10.0.0.5")
    clock.advance(QUARANTINE * 2)
    assert next_address(allocator, "b") == "10.0.0.6"  # never released here: not held
    allocator.release("10.0.0.6")
    with pytest.raises(errors.PoolExhausted, match="2 quarantined until the EndpointSlices are read"):
        allocator.allocate_next("c")  # not even early: a listing cannot be ruled out
    slices.read = True
    assert next_address(allocator, "c") == "10.0.0.5"


# -- restarts --------------------------------------------------------------------------------------


def test_the_quarantine_survives_a_restart_with_its_remaining_time(tmp_path: Path) -> None:
    path = tmp_path / "allocations.json"
    clock = FakeClock()
    slices = Slices()
    allocator = start(clock, path, slices=slices)
    next_address(allocator, "a")
    next_address(allocator, "b")
    allocator.release("10.0.0.5")
    slices.addresses.add("10.0.0.6")
    allocator.release("10.0.0.6")
    clock.advance(100)
    clock.kill()  # the process dies
    restarted = start(clock, path, slices=Slices(synced=False))
    assert restarted.quarantined() == {"10.0.0.5": pytest.approx(50.0), "10.0.0.6": pytest.approx(50.0)}
    assert next_address(restarted, "c") == "10.0.0.7"
    restarted.release("10.0.0.7")  # saved again, with .5 and .6 still waiting
    clock.advance(60)
    again = start(clock, path, slices=Slices("10.0.0.6"))
    assert again.quarantined() == {"10.0.0.6": 0.0, "10.0.0.7": pytest.approx(90.0)}
    assert next_address(again, "d") == "10.0.0.5"  # waited out across two restarts
    assert next_address(again, "e") == "10.0.0.7"  # .6 is listed: never, even early
    with pytest.raises(errors.PoolExhausted):
        again.allocate_next("f")


def test_the_state_file_holds_each_quarantined_address_with_its_release_time(tmp_path: Path) -> None:
    path = tmp_path / "allocations.json"
    clock = FakeClock()
    allocator = start(clock, path)
    next_address(allocator, "a")
    allocator.release("10.0.0.5")
    raw = path.read_bytes()
    slots = [raw[: len(raw) // 2], raw[len(raw) // 2 :]]
    document = max((json.loads(slot) for slot in slots if slot.strip()), key=lambda d: d["generation"])
    released = clock.now_utc().isoformat(timespec="milliseconds")
    assert document["quarantine"] == {"10.0.0.5": released}
    assert StateFile(path).read().quarantine == {"10.0.0.5": released}


def test_an_old_state_file_without_a_quarantine_restores_an_empty_one(tmp_path: Path) -> None:
    from eni_ipam.agent.files import checksum

    path = tmp_path / "allocations.json"
    covered = {"allocations": [], "cursors": {}, "generation": 4}  # written before the quarantine
    document = {"version": 3, "checksum": checksum(covered), **covered}
    path.write_bytes(
        json.dumps(document).encode().ljust(64 * 1024 - 1) + b"\n" + b" " * (64 * 1024 - 1) + b"\n"
    )
    allocator = start(FakeClock(), path)
    assert allocator.quarantined() == {}
    assert next_address(allocator, "a") == "10.0.0.5"


@pytest.mark.parametrize(
    "saved",
    [
        (datetime.datetime(2031, 1, 1, tzinfo=datetime.UTC)).isoformat(),  # in the future
        "yesterday",
        "2030-01-01T00:00:00",  # no time zone
        12345,
    ],
)
def test_a_release_time_that_cannot_be_proven_counts_from_the_restore(tmp_path: Path, saved: object) -> None:
    path = tmp_path / "allocations.json"
    clock = FakeClock()
    StateFile(path).save([], quarantine={"10.0.0.5": saved})  # type: ignore[dict-item]
    clock.advance(3600)
    with capture_logs() as logs:
        allocator = start(clock, path)
    assert allocator.quarantined() == {"10.0.0.5": QUARANTINE}  # the full wait, from now
    assert [e["event"] for e in logs if e["event"] == "quarantine_time_distrusted"]
    rewritten = StateFile(path).read().quarantine  # written as counted, so a later start agrees
    assert rewritten == {"10.0.0.5": clock.now_utc().isoformat(timespec="milliseconds")}


def test_a_quarantined_address_a_runtime_holds_at_the_restore_leaves_the_quarantine(tmp_path: Path) -> None:
    path = tmp_path / "allocations.json"
    clock = FakeClock()
    StateFile(path).save([], quarantine={"10.0.0.5": clock.now_utc().isoformat()})
    allocator = Allocator(clock=clock, state=StateFile(path), quarantine=QUARANTINE)
    allocator.set_pool(DEFAULT_POOL, members(*POOL))
    allocator.restore(runtime={"10.0.0.5": "cni:c1:eth0"})
    assert allocator.quarantined() == {}
    assert [a.owner for a in allocator.allocations()] == ["cni:c1:eth0"]
