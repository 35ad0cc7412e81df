"""The allocator's state file: atomic durable writes, strict reads, survival of restarts, corruption."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from eni_ipam.agent import errors
from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.state import StateFile
from eni_ipam.agent.types import DEFAULT_POOL, Allocation, Family, RuntimeEntry
from eni_ipam.core.model import ReleaseState
from tests.agent import FakeClock, FullDisk
from tests.agent.test_allocator import members

V4 = Allocation(address="10.0.0.5", pool=DEFAULT_POOL, owner="c1", prefix_length=24, gateway="10.0.0.1")
V6 = Allocation(
    address="2001:db8::5",
    pool="static",
    owner="claim:ns/a",
    prefix_length=64,
    gateway="2001:db8::1",
    interface_id="eni-2",
    subnet_id="subnet-2",
    expiration_uuid="uuid-7",
)
MARKED = ReleaseState.MARKED
POOL = ("10.0.0.5", "10.0.0.6", "10.0.0.7", "2001:db8::5", "2001:db8::6")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "allocations.json"


def start(path: Path, clock: FakeClock, *, runtime: Mapping[str, str] | None = None) -> Allocator:
    """A freshly started allocator on ``path``: pool set, then restored (as the daemon does)."""
    numbers = iter(range(1, 1000))
    state = StateFile(path)
    allocator = Allocator(clock=clock, ipv6=True, state=state, uuids=lambda: f"uuid-{next(numbers)}")
    allocator.set_pool(DEFAULT_POOL, members(*POOL))
    allocator.restore(runtime=runtime)
    return allocator


# -- the file ------------------------------------------------------------------------------------


def test_saved_allocations_load_back_with_their_timers(path: Path) -> None:
    state = StateFile(path)
    state.save([V6, V4], {"2001:db8::5": 30.0})
    assert state.load() == [V4, V6]
    assert state.read().timeouts == {"2001:db8::5": 30.0}
    document = json.loads(path.read_text())  # one document, and an empty slot: spaces
    assert (document["version"], document["generation"]) == (3, 1)
    assert document["checksum"] == checksum(covered(document))


def test_a_missing_file_is_an_empty_state(path: Path) -> None:
    assert StateFile(path).load() == []


def test_saving_a_timer_without_its_timeout_is_refused(path: Path) -> None:
    with pytest.raises(ValueError, match="timeout"):
        StateFile(path).save([V6])
    assert not path.exists()


def test_save_fsyncs_the_file_and_its_directory_and_leaves_no_temporary(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append("dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    StateFile(path).save([V4])
    assert synced == ["file", "dir"]
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_a_failed_write_leaves_the_previous_state_and_no_temporary(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = StateFile(path)
    state.save([V4])
    state.save([V4, dataclasses.replace(V4, address="10.0.0.6")])

    def refuse(*_: object) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "pwrite", refuse)
    with pytest.raises(OSError):
        state.save([])
    assert [a.address for a in StateFile(path).load()] == ["10.0.0.5", "10.0.0.6"]
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    monkeypatch.undo()
    state.save([])
    assert StateFile(path).load() == []


def test_a_change_overwrites_the_older_slot_in_place_and_waits_for_fdatasync_alone(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = StateFile(path)
    state.save([V4])
    size = path.stat().st_size
    synced: list[str] = []
    monkeypatch.setattr(os, "fdatasync", lambda fd: synced.append("data"))
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append("fsync"))
    monkeypatch.setattr(os, "replace", lambda *_: pytest.fail("a change must not replace the file"))
    first = path.read_bytes()[: size // 2]
    state.save([])
    assert synced == ["data"]
    assert path.stat().st_size == size
    assert path.read_bytes()[: size // 2] == first  # the newest state was in slot 0: slot 1 was written
    assert StateFile(path).load() == []


def test_a_damaged_older_slot_is_superseded_and_written_again(path: Path) -> None:
    state = StateFile(path)
    state.save([V4])  # generation 1, slot 0
    state.save([])  # generation 2, slot 1
    raw = bytearray(path.read_bytes())
    half = len(raw) // 2
    raw[10:20] = b"#" * 10  # slot 0, generation 1: its generation line still reads 1
    path.write_bytes(bytes(raw))
    with capture_logs() as logs:
        again = StateFile(path)
        assert again.load() == []
    assert [(e["event"], e["generation"], e["newest"]) for e in logs] == [("state_slot_damaged", 1, 2)]
    assert again.salvaged is None and not again.suspect  # generation 2 holds all that was acknowledged
    again.save([V4])  # generation 3, into the damaged slot: slot 1 keeps generation 2
    assert path.read_bytes()[half:] == bytes(raw[half:])
    assert StateFile(path).load() == [V4]


def test_a_damaged_newer_slot_is_suspect_and_what_it_still_says_is_salvaged(path: Path) -> None:
    state = StateFile(path)
    state.save([V4])  # generation 1, slot 0
    second = dataclasses.replace(V4, address="10.0.0.6", owner="c2", netns="/run/netns/c2")
    state.save([V4, second])  # generation 2, slot 1
    raw = bytearray(path.read_bytes())
    half = len(raw) // 2
    start = raw.index(b'"gateway"', half)  # inside the first entry, after its address and before its owner
    raw[start : start + 10] = b"#" * 10  # damaged after its acknowledgement, or torn: alike
    path.write_bytes(bytes(raw))
    with capture_logs() as logs:
        again = StateFile(path)
        assert again.load() == [V4]  # the valid slot, generation 1
    assert [(e["event"], e["generation"], e["newest"]) for e in logs] == [("state_slot_suspect", 2, 1)]
    assert again.suspect.startswith("slot 1 (generation 2, beside 1)")
    assert again.salvaged is not None
    assert {a: e.owner for a, e in again.salvaged.entries.items()} == {"10.0.0.6": "c2"}
    assert again.salvaged.entries["10.0.0.6"].attachment.netns == "/run/netns/c2"
    assert again.salvaged.ownerless == ("10.0.0.5",)  # read, but its owner's line came after the damage


def test_a_file_with_no_valid_slot_is_corrupt_naming_both(path: Path) -> None:
    state = StateFile(path)
    state.save([V4])
    state.save([])
    raw = bytearray(path.read_bytes())
    half = len(raw) // 2
    raw[10:20] = raw[half + 10 : half + 20] = b"#" * 10
    path.write_bytes(bytes(raw))
    with pytest.raises(errors.CorruptState, match=r"slot 0: .*slot 1: "):
        StateFile(path).load()


def test_a_state_that_outgrows_its_slots_moves_to_a_file_twice_the_size(path: Path) -> None:
    state = StateFile(path)
    state.save([V4])
    small = path.stat().st_size
    many = [
        dataclasses.replace(V4, address=f"10.1.{n // 250}.{n % 250 + 1}", owner=f"c{n}") for n in range(600)
    ]
    state.save(many)
    assert path.stat().st_size >= 2 * small
    assert StateFile(path).load() == many
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_a_version_2_file_is_read_and_replaced_by_slots_on_the_first_write(path: Path) -> None:
    entries = [dataclasses.asdict(V4)]
    covered2 = {"allocations": entries, "cursors": {"default/ipv4": "10.0.0.5"}}
    path.write_text(json.dumps({"version": 2, "checksum": checksum(covered2), **covered2}))
    state = StateFile(path)
    assert state.read().allocations == [V4] and state.read().cursors == {"default/ipv4": "10.0.0.5"}
    state.save([V4])
    document = json.loads(path.read_text())
    assert (document["version"], document["generation"]) == (3, 1)
    assert path.stat().st_size >= 2 * 64 * 1024


def checksum(entries: object) -> str:
    """The documented checksum: SHA-256 of the canonical JSON of the allocations."""
    return (
        "sha256:"
        + hashlib.sha256(json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    )


def covered(document: dict) -> object:
    """What the checksum covers: version 3, the allocations, the cursors, the generation and (when
    the document has it) the quarantine; version 2, the allocations and the cursors; version 1, the
    allocations."""
    if document.get("version") == 1:
        return document["allocations"]
    if document.get("version") == 2:
        return {"allocations": document["allocations"], "cursors": document.get("cursors")}
    keys = ("allocations", "cursors", "generation", "quarantine")
    return {k: document.get(k) for k in keys if k in document or k != "quarantine"}


def rewrite(path: Path, change: Callable[[dict], None], *, fix_checksum: bool = True) -> None:
    """Apply ``change`` to the document of a file saved once (slot 0; slot 1 is empty), recomputing its
    checksum unless told not to; the file keeps its slots."""
    raw = path.read_bytes()
    document = json.loads(raw)
    change(document)
    if fix_checksum:
        document["checksum"] = checksum(covered(document))
    half = len(raw) // 2
    path.write_bytes(json.dumps(document).encode().ljust(half) + raw[half:])


def entry(**changes: object) -> Callable[[dict], None]:
    return lambda document: document["allocations"][0].update(changes)


CORRUPTIONS: dict[str, Callable[[Path], None]] = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "empty": lambda p: p.write_bytes(b""),
    "garbage": lambda p: p.write_bytes(b"\x00\xff garbage \x17"),
    "not an object": lambda p: p.write_text("[]"),
    "checksum mismatch": lambda p: rewrite(p, entry(owner="c9"), fix_checksum=False),
    "wrong version": lambda p: rewrite(p, lambda d: d.update(version=4)),
    "no generation": lambda p: rewrite(p, lambda d: d.pop("generation")),
    "cursors not a map": lambda p: rewrite(p, lambda d: d.update(cursors=["default/ipv4"])),
    "no allocation list": lambda p: rewrite(p, lambda d: d.update(allocations={})),
    "bad address": lambda p: rewrite(p, entry(address="10.0.0.256")),
    "non-canonical address": lambda p: rewrite(p, entry(address="2001:DB8::5")),
    "missing owner": lambda p: rewrite(p, entry(owner="")),
    "bad prefix length": lambda p: rewrite(p, entry(prefix_length=33)),
    "string field not a string": lambda p: rewrite(p, entry(gateway=7)),
    "timer without timeout": lambda p: rewrite(p, entry(expiration_uuid="u")),
    "timeout without timer": lambda p: rewrite(p, entry(expiration_timeout=5)),
    "negative timeout": lambda p: rewrite(p, entry(expiration_uuid="u", expiration_timeout=-1)),
    "listed twice": lambda p: rewrite(p, lambda d: d["allocations"].append(d["allocations"][0])),
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_load_refuses_a_corrupt_file(path: Path, corrupt: Callable[[Path], None]) -> None:
    StateFile(path).save([V4])
    corrupt(path)
    with pytest.raises(errors.CorruptState) as caught:
        StateFile(path).load()
    assert caught.value.path == str(path)
    assert isinstance(caught.value, errors.AllocatorError)


def test_an_unreadable_file_is_corrupt(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    def failing(_: object) -> bytes:  # an OSError other than "not found" (a directory is refused instead)
        raise OSError(errno.EIO, "Input/output error")

    path.write_bytes(b"{}")
    monkeypatch.setattr("eni_ipam.agent.state.read_regular", failing)
    with pytest.raises(errors.CorruptState, match="unreadable"):
        StateFile(path).load()


# -- the allocator on its file -------------------------------------------------------------------


def test_every_change_is_saved_before_the_call_returns(path: Path) -> None:
    clock = FakeClock()
    allocator = start(path, clock)
    steps: list[Callable[[], object]] = [
        lambda: allocator.allocate("10.0.0.6", "c1"),
        lambda: allocator.allocate_next("c2"),
        lambda: allocator.allocate_next_with_expiration("c3", DEFAULT_POOL, Family.IPV4, 30),
        lambda: allocator.stop_expiration_timer("10.0.0.7", DEFAULT_POOL, "uuid-1"),
        lambda: allocator.start_expiration_timer("10.0.0.6", DEFAULT_POOL, 10),
        lambda: allocator.release("10.0.0.5"),
        lambda: allocator.release_owner("c2"),
        lambda: clock.advance(10),
    ]
    for step in steps:
        step()
        assert StateFile(path).load() == allocator.allocations()


def test_allocations_survive_a_restart_between_operations(path: Path) -> None:
    clock = FakeClock()
    first = start(path, clock)
    first.allocate("10.0.0.6", "c1")
    first.allocate_next("c2")
    first.release("10.0.0.6")
    before = first.allocations()
    clock.kill()  # the process dies: its timers with it
    second = start(path, clock)
    assert second.allocations() == before
    v4, _ = second.allocate_next("c3", family=Family.IPV4)
    assert v4 is not None and v4.address == "10.0.0.6"  # never one of the restored addresses
    third = start(path, clock)
    assert third.allocations() == second.allocations()


def test_a_restored_allocation_gets_its_timer_back_with_its_full_timeout(path: Path) -> None:
    clock = FakeClock()
    first = start(path, clock)
    (kept, _), (lapsed, _) = (
        first.allocate_next_with_expiration(owner, DEFAULT_POOL, Family.IPV4, 30) for owner in ("c1", "c2")
    )
    assert kept is not None and lapsed is not None
    clock.advance(20)
    clock.kill()
    second = start(path, clock)
    second.stop_expiration_timer(kept.address, DEFAULT_POOL, kept.expiration_uuid)  # the caller's UUID works
    clock.advance(29)
    assert second.used() == {kept.address, lapsed.address}
    clock.advance(1)
    assert second.used() == {kept.address}
    assert StateFile(path).load() == second.allocations()


def test_a_change_whose_save_fails_is_undone_and_reported(path: Path) -> None:
    clock = FakeClock()
    state = FullDisk(path)
    allocator = Allocator(clock=clock, state=state)
    allocator.set_pool(DEFAULT_POOL, members(*POOL))
    allocator.restore()
    kept = allocator.allocate("10.0.0.7", "c1")
    state.full = True
    with capture_logs() as logs, pytest.raises(errors.StateNotWritten, match="not written"):
        allocator.allocate_next_with_expiration("c2", DEFAULT_POOL, None, 5)
    assert any(e["event"] == "state_save_failed" and e["log_level"] == "error" for e in logs)
    assert "No space left" in allocator.state_error  # the agent is not ready meanwhile
    with pytest.raises(errors.AllocatorError):
        allocator.release("10.0.0.7")
    assert allocator.allocations() == [kept]
    assert clock.pending() == 0  # no timer was started for the undone allocation
    state.full = False
    v4, _ = allocator.allocate_next("c2")
    assert v4 is not None and v4.address == "10.0.0.5"  # the undone allocation did not move the cursor either
    assert allocator.state_error == ""


def test_a_start_that_reads_the_state_back_as_it_is_writes_nothing(path: Path) -> None:
    StateFile(path).save([V4])
    state = FullDisk(path)
    state.full = True  # a full disk: the start must not depend on writing
    allocator = Allocator(clock=FakeClock(), state=state)
    allocator.set_pool(DEFAULT_POOL, members(*POOL))
    report = allocator.restore(runtime={"10.0.0.5": "c1"})  # the runtime agrees with the file
    assert report.restored == (V4,) and allocator.allocations() == [V4]
    assert report.unsaved == "" and allocator.state_error == ""
    with pytest.raises(errors.StateNotWritten):  # a DEL on a full disk: try again later, nothing lost
        allocator.release_owner("c1")
    assert allocator.allocations() == [V4]


def test_a_start_that_cannot_write_what_it_settled_serves_it_and_refuses_changes(path: Path) -> None:
    StateFile(path).save([V4])
    state = FullDisk(path)
    state.full = True
    allocator = Allocator(clock=FakeClock(), state=state)
    allocator.set_pool(DEFAULT_POOL, members(*POOL))
    with capture_logs() as logs:
        report = allocator.restore(runtime={"10.0.0.6": "c9"})  # held by a container, not in the file
    assert allocator.dump()[0] == {"10.0.0.5": "c1", "10.0.0.6": "c9"}  # served from memory
    assert "No space left" in report.unsaved and "No space left" in allocator.state_error
    assert [e["log_level"] for e in logs if e["event"] == "state_not_written_at_start"] == ["error"]
    with pytest.raises(errors.StateNotWritten):
        allocator.allocate_next("c2")
    state.full = False
    v4, _ = allocator.allocate_next("c2")  # the first write that succeeds saves everything
    assert v4 is not None and v4.address == "10.0.0.7" and allocator.state_error == ""
    assert StateFile(path).load() == allocator.allocations()


def test_an_expiry_whose_save_fails_still_frees_the_address(path: Path) -> None:
    clock = FakeClock()
    state = FullDisk(path)
    allocator = Allocator(clock=clock, state=state)
    allocator.set_pool(DEFAULT_POOL, members(*POOL))
    allocator.restore()
    allocator.allocate_next_with_expiration("c1", DEFAULT_POOL, None, 5)
    state.full = True
    clock.advance(5)
    assert allocator.used() == set()
    assert [a.address for a in StateFile(path).load()] == ["10.0.0.5"]  # stale, never missing
    state.full = False
    allocator.allocate("10.0.0.6", "c2")
    assert [a.address for a in StateFile(path).load()] == ["10.0.0.6"]


def test_no_release_answers_are_given_before_restore_but_marks_already_hold(path: Path) -> None:
    StateFile(path).save([V4])
    allocator = Allocator(clock=FakeClock(), state=StateFile(path))
    allocator.set_pool(DEFAULT_POOL, members(*POOL))
    assert allocator.answer_release({"10.0.0.5": MARKED, "10.0.0.6": MARKED}) == {}  # 10.0.0.5 is in use
    allocator.restore()
    v4, _ = allocator.allocate_next("c2")
    assert v4 is not None and v4.address == "10.0.0.7"
    answers = allocator.answer_release({"10.0.0.5": MARKED, "10.0.0.6": MARKED})
    assert answers == {"10.0.0.5": ReleaseState.DO_NOT_RELEASE, "10.0.0.6": ReleaseState.READY}


def test_changes_before_restore_are_refused_so_the_file_is_never_overwritten(path: Path) -> None:
    StateFile(path).save([V4])
    allocator = Allocator(clock=FakeClock(), state=StateFile(path))
    allocator.set_pool(DEFAULT_POOL, members(*POOL))
    with pytest.raises(errors.AllocatorError, match="restore"):
        allocator.allocate_next("c2")
    assert StateFile(path).load() == [V4]
    allocator.restore()
    with pytest.raises(errors.AllocatorError, match="before any allocation"):
        allocator.restore()


# -- restore ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_a_corrupt_file_is_moved_aside_reported_and_rebuilt_from_the_runtime(path: Path, name: str) -> None:
    StateFile(path).save([V4])
    CORRUPTIONS[name](path)
    damaged = path.read_bytes()
    runtime = {"10.0.0.6": "c1", "2001:DB8::6": "c2", "10.9.9.9": "elsewhere", "bogus": "c3"}
    with capture_logs() as logs:
        allocator = start(path, FakeClock(), runtime=runtime)
    report_events = [e for e in logs if e["event"] == "state_corrupt"]
    assert report_events and report_events[0]["log_level"] == "error"
    moved = path.with_name("allocations.json.corrupt-1")
    assert moved.read_bytes() == damaged
    # an address no pool holds yet is kept for its container (the pool may still be filling in); what
    # the damaged file still says is held too (the truncated one lost only its empty second slot)
    salvaged = {"10.0.0.5": "c1"} if name == "truncated" else {}
    expected = {**salvaged, "10.0.0.6": "c1", "10.9.9.9": "elsewhere"}
    assert allocator.dump()[:2] == (expected, {"2001:db8::6": "c2"})
    assert StateFile(path).load() == allocator.allocations()  # a valid file again


def test_the_restore_report_says_what_was_rebuilt_and_dropped(path: Path) -> None:
    path.write_text("{")
    allocator = Allocator(clock=FakeClock(), state=StateFile(path))
    allocator.set_pool(DEFAULT_POOL, members(*POOL))
    report = allocator.restore(runtime={"10.0.0.6": "c1", "10.9.9.9": "elsewhere", "10.0.0.7": ""})
    assert "not JSON" in report.corrupt
    assert report.moved_to == str(path.with_name("allocations.json.corrupt-1"))
    assert [(a.address, a.owner) for a in report.rebuilt] == [("10.0.0.6", "c1"), ("10.9.9.9", "elsewhere")]
    assert [a.address for a in report.not_in_pool] == ["10.9.9.9"]
    assert report.dropped == {"10.0.0.7": ""}  # no owner: nothing to keep it for
    assert report.restored == () and not report.missing


def test_each_corrupt_file_gets_its_own_name(path: Path) -> None:
    for _ in range(2):
        path.write_text("garbage")
        start(path, FakeClock())
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "allocations.json",
        "allocations.json.corrupt-1",
        "allocations.json.corrupt-2",
    ]


def test_a_corrupt_file_without_a_runtime_view_is_still_reported(path: Path) -> None:
    path.write_text("garbage")
    allocator = Allocator(clock=FakeClock(), state=StateFile(path))
    allocator.set_pool(DEFAULT_POOL, members(*POOL))
    report = allocator.restore()
    assert report.corrupt and report.moved_to and report.rebuilt == ()
    assert allocator.used() == set()


def test_a_corrupt_file_that_cannot_be_moved_aside_stops_the_restore(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path.write_text("garbage")

    def refuse(self: StateFile) -> Path:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(StateFile, "move_aside", refuse)
    allocator = Allocator(clock=FakeClock(), state=StateFile(path))
    allocator.set_pool(DEFAULT_POOL, members(*POOL))
    with pytest.raises(errors.CorruptState, match="moving it aside failed"):
        allocator.restore(runtime={"10.0.0.6": "c1"})
    assert path.read_text() == "garbage"
    with pytest.raises(errors.AllocatorError, match="restore"):
        allocator.allocate_next("c2")


def test_a_missing_file_is_rebuilt_from_the_runtime(path: Path) -> None:
    allocator = Allocator(clock=FakeClock(), state=StateFile(path))
    allocator.set_pool(DEFAULT_POOL, members(*POOL))
    report = allocator.restore(runtime={"10.0.0.6": "c1"})
    assert report.missing and not report.corrupt
    assert allocator.dump()[0] == {"10.0.0.6": "c1"}
    assert StateFile(path).load() == allocator.allocations()


def test_a_valid_file_is_not_the_whole_truth_what_the_runtime_holds_is_added(path: Path) -> None:
    StateFile(path).save([V4])  # an older copy put back, say: it lacks the last ADD
    allocator = Allocator(clock=FakeClock(), state=StateFile(path))
    allocator.set_pool(DEFAULT_POOL, members(*POOL))
    report = allocator.restore(runtime={"10.0.0.6": "c2"})
    assert report.restored == (V4,) and [(a.address, a.owner) for a in report.rebuilt] == [("10.0.0.6", "c2")]
    assert StateFile(path).load() == allocator.allocations()


@pytest.mark.parametrize(
    ("alive", "kept_alive", "kept"),
    [(True, None, "c2"), (True, False, "c2"), (None, None, "c1"), (None, False, "c1"), (True, True, "c1")],
    ids=["runtime live", "file's owner gone", "neither proven", "file's gone, runtime unproven", "both live"],
)
def test_two_owners_for_one_address_resolve_to_the_one_proven_alive(
    path: Path, alive: bool | None, kept_alive: bool | None, kept: str
) -> None:
    StateFile(path).save([V4])  # c1 at 10.0.0.5
    allocator = Allocator(clock=FakeClock(), state=StateFile(path))
    allocator.set_pool(DEFAULT_POOL, members(*POOL))
    runtime = {"10.0.0.5": RuntimeEntry(owner="c2", alive=alive)}
    with capture_logs() as logs:
        report = allocator.restore(runtime=runtime, judge=lambda a: kept_alive if a.owner == "c1" else None)
    assert allocator.dump()[0] == {"10.0.0.5": kept}  # one owner, never two
    events = {e["event"]: e for e in logs}
    if kept == "c2":
        assert report.replaced == {"10.0.0.5": "c1"} and events["state_owner_replaced"]["kept"] == "c2"
    else:
        assert report.dropped == {"10.0.0.5": "c2"} and report.replaced == {}
        assert ("address_held_twice" if alive and kept_alive else "state_owner_kept") in events


def test_restored_allocations_outside_the_pool_are_kept_and_never_handed_to_another(path: Path) -> None:
    StateFile(path).save([V4, V6], {V6.address: 60})
    allocator = Allocator(clock=FakeClock(), ipv6=True, state=StateFile(path))
    allocator.set_pool(DEFAULT_POOL, members("10.0.0.6"))  # 10.0.0.5 not (yet) listed; no "static" pool
    report = allocator.restore()
    assert report.not_in_pool == (V4, V6)
    allocator.set_pool(DEFAULT_POOL, members("10.0.0.5", "10.0.0.6"))
    v4, _ = allocator.allocate_next("c2", family=Family.IPV4)
    assert v4 is not None and v4.address == "10.0.0.6"
    with pytest.raises(errors.AlreadyAllocated):
        allocator.allocate("10.0.0.5", "c3")
    assert allocator.release("2001:db8::5", "static") == V6


def test_an_allocator_without_a_state_file_restores_from_the_runtime_only() -> None:
    allocator = Allocator(clock=FakeClock())
    allocator.set_pool(DEFAULT_POOL, members(*POOL))
    report = allocator.restore(runtime={"10.0.0.6": "c1"})
    assert report.missing and [a.address for a in report.rebuilt] == ["10.0.0.6"]


def test_a_version_1_file_is_read_as_it_is(path: Path) -> None:
    entries = [
        {k: v for k, v in dataclasses.asdict(V4).items() if k not in ("network", "netns", "pod_uid", "pod")}
    ]
    path.write_text(json.dumps({"version": 1, "checksum": checksum(entries), "allocations": entries}))
    assert StateFile(path).read().allocations == [V4]
    assert StateFile(path).read().cursors == {}


def test_what_the_runtime_said_of_the_container_is_saved_with_the_allocation(path: Path) -> None:
    attached = dataclasses.replace(V4, network="podnet", netns="/run/netns/x", pod_uid="u-1", pod="ns/p")
    StateFile(path).save([attached], cursors={"default/ipv4": "10.0.0.9"})
    snapshot = StateFile(path).read()
    assert snapshot.allocations == [attached]
    assert snapshot.cursors == {"default/ipv4": "10.0.0.9"}


def test_serial_allocation_goes_on_after_a_restart_instead_of_reusing_the_address_just_released(
    path: Path,
) -> None:
    first = start(path, FakeClock())
    v4, _ = first.allocate_next("c1", serial=True)
    assert v4 is not None
    first.release(v4.address)
    again = start(path, FakeClock())  # a new process on the same file
    after, _ = again.allocate_next("c2", serial=True)
    assert after is not None and after.address != v4.address


def test_a_runtime_entry_naming_its_pool_is_rebuilt_there(path: Path) -> None:
    allocator = Allocator(clock=FakeClock(), state=StateFile(path))
    allocator.set_pool(DEFAULT_POOL, members(*POOL))
    allocator.set_pool("docker", members("10.0.0.5", "10.0.0.9"))
    allocator.restore(
        runtime={
            "10.0.0.5": RuntimeEntry(owner="libnetwork:p1", pool="docker"),  # default lists it too
            "10.0.0.8": RuntimeEntry(owner="libnetwork:p1", pool="docker"),  # no pool lists it (yet)
            "10.0.0.6": RuntimeEntry(owner="c1"),
        }
    )
    assert {(a.address, a.pool, a.prefix_length) for a in allocator.allocations()} == {
        ("10.0.0.5", "docker", 24),
        ("10.0.0.8", "docker", 32),
        ("10.0.0.6", DEFAULT_POOL, 24),
    }


def test_what_a_runtime_reports_after_the_restore_is_adopted_and_saved(path: Path) -> None:
    allocator = start(path, FakeClock())
    allocator.allocate("10.0.0.6", "c1")
    made, conflicts = allocator.adopt(
        {
            "10.0.0.5": RuntimeEntry(owner="libnetwork:p1"),
            "10.0.0.6": RuntimeEntry(owner="libnetwork:p1"),  # taken meanwhile: left to its owner
            "10.0.0.7": RuntimeEntry(owner="libnetwork:p1"),
        }
    )
    assert [a.address for a in made] == ["10.0.0.5", "10.0.0.7"] and conflicts == {"10.0.0.6": "c1"}
    assert StateFile(path).load() == allocator.allocations()
