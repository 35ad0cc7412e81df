"""What a damaged document of the state file still says: entries read whole, addresses read without
their owner, and the gaps where damage may have hidden entries."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from eni_ipam.agent.files import compact
from eni_ipam.agent.salvage import interval_networks, merge_salvages, salvage
from eni_ipam.agent.state import StateFile
from eni_ipam.agent.types import DEFAULT_POOL, Allocation

A = Allocation(
    address="10.99.0.2",
    pool=DEFAULT_POOL,
    owner="cni:a:eth0",
    prefix_length=28,
    gateway="10.99.0.1",
    netns="/run/netns/a",
    network="podnet",
)
B = dataclasses.replace(A, address="10.99.0.3", owner="cni:b:eth0", netns="/run/netns/b")
C = dataclasses.replace(A, address="10.99.0.4", owner="cni:c:eth0", netns="/run/netns/c")


def document(path: Path, *allocations: Allocation) -> bytes:
    """The document the state file writes for ``allocations`` (generation 1, in slot 0)."""
    StateFile(path).save(list(allocations), cursors={"default/ipv4": allocations[-1].address})
    raw = path.read_bytes()
    return raw[: len(raw) // 2]


def damage(data: bytes, at: bytes, length: int = 10, *, by: bytes = b"\0") -> bytes:
    """``data`` with ``length`` bytes overwritten from the first ``at`` on."""
    start = data.index(at)
    return data[:start] + by * length + data[start + length :]


def test_an_undamaged_document_is_read_whole(tmp_path: Path) -> None:
    found = salvage(document(tmp_path / "s", A, B))
    assert found.generation == 1 and found.damaged_lines == 0
    assert {a: (e.owner, e.attachment.netns, e.pool) for a, e in found.entries.items()} == {
        "10.99.0.2": ("cni:a:eth0", "/run/netns/a", DEFAULT_POOL),
        "10.99.0.3": ("cni:b:eth0", "/run/netns/b", DEFAULT_POOL),
    }
    assert found.ownerless == () and found.gaps == () and found.networks() == []


def test_damage_after_an_entrys_owner_keeps_it_and_bounds_what_it_may_hide(tmp_path: Path) -> None:
    found = salvage(damage(document(tmp_path / "s", A, B, C), b'"subnet_id"'))  # A's last field
    assert sorted(found.entries) == ["10.99.0.2", "10.99.0.3", "10.99.0.4"]
    assert found.gaps == (("10.99.0.2", "10.99.0.3"),) and found.networks() == []  # nothing between


def test_an_owner_read_after_damage_is_not_trusted_and_a_lost_address_is_a_gap(tmp_path: Path) -> None:
    data = document(tmp_path / "s", A, B, C)
    data = damage(data, b'"gateway": "10.99.0.1",\n   "interface_id": "",\n   "netns": "/run/netns/b"')
    found = salvage(data)
    assert sorted(found.entries) == ["10.99.0.2", "10.99.0.4"] and found.ownerless == ("10.99.0.3",)
    lost = salvage(damage(document(tmp_path / "t", A, B, C), b'"address": "10.99.0.3"', 25))
    assert sorted(lost.entries) == ["10.99.0.2", "10.99.0.4"] and lost.ownerless == ()
    assert lost.gaps == (("10.99.0.2", "10.99.0.4"),) and lost.networks() == ["10.99.0.3/32"]


def test_damage_before_the_first_entry_or_in_an_empty_list_leaves_an_open_gap(tmp_path: Path) -> None:
    head = salvage(damage(document(tmp_path / "s", B), b'"allocations"', 5))
    assert sorted(head.entries) == ["10.99.0.3"] and head.gaps == ((None, "10.99.0.3"),)
    empty = StateFile(tmp_path / "e")
    empty.save([])
    raw = empty.path.read_bytes()[:65536]
    nothing = salvage(damage(raw, b'"allocations": []', 5))
    assert nothing.gaps == ((None, None),) and nothing.networks() == ["0.0.0.0/0", "::/0"]


def test_damage_past_the_end_of_the_allocations_hides_no_entry(tmp_path: Path) -> None:
    found = salvage(damage(document(tmp_path / "s", A, B), b'"generation"'))
    assert sorted(found.entries) == ["10.99.0.2", "10.99.0.3"] and found.gaps == ()
    assert found.generation is None and found.damaged_lines == 1


def test_garbage_says_nothing_but_that_anything_may_be_hidden() -> None:
    found = salvage(b"\x00\xff garbage \x17")
    assert not found.entries and found.gaps == ((None, None),)


@pytest.mark.parametrize(
    ("after", "before", "networks"),
    [
        ("10.0.0.1", "10.0.0.4", ["10.0.0.2/31"]),
        ("10.0.0.1", "10.0.0.2", []),
        ("255.255.255.254", "::1", ["255.255.255.255/32", "::/128"]),
        (None, "0.0.0.2", ["0.0.0.0/31"]),
        ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", None, ["ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"]),
    ],
)
def test_a_gap_is_every_address_strictly_between_its_bounds_ipv4_before_ipv6(
    after: str | None, before: str | None, networks: list[str]
) -> None:
    assert [str(n) for n in interval_networks(after, before)] == networks


def test_two_damaged_slots_say_what_the_higher_generation_says_where_they_disagree(tmp_path: Path) -> None:
    state = StateFile(tmp_path / "s")
    state.save([A])
    state.save([dataclasses.replace(A, owner="cni:a2:eth0"), B])
    raw = state.path.read_bytes()
    half = len(raw) // 2
    found = merge_salvages([salvage(raw[:half]), salvage(raw[half:])])
    assert found.generation == 2
    assert {a: e.owner for a, e in found.entries.items()} == {
        "10.99.0.2": "cni:a2:eth0",
        "10.99.0.3": "cni:b:eth0",
    }


def test_a_damaged_file_set_aside_is_compacted_in_place_keeping_every_document_byte(tmp_path: Path) -> None:
    state = StateFile(tmp_path / "s")
    state.save([A])
    state.save([A, B])
    raw = bytearray(state.path.read_bytes())
    half = len(raw) // 2
    raw[10:20] = raw[half + 10 : half + 20] = b"#" * 10
    state.path.write_bytes(bytes(raw))
    freed = compact(state.path, half)
    kept = state.path.read_bytes()
    assert freed == len(raw) - len(kept) and len(kept) < 4096
    assert kept == bytes(raw[:half]).rstrip(b" \n") + b"\n" + bytes(raw[half:]).rstrip(b" \n") + b"\n"
    assert compact(state.path, half) == 0  # not a file of two slots any more
