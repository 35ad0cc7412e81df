"""Durable files: atomic replacement, corrupt files kept aside, order-independent checksums."""

from __future__ import annotations

from pathlib import Path

import pytest

from eni_ipam.agent.files import checksum, move_aside, remove_leftovers, write_atomically


def test_write_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b"old")
    write_atomically(path, b"new")
    assert path.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b"old")

    def broken(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", broken)
    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, b"new")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_corrupt_files_are_kept_under_the_lowest_free_number(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    (tmp_path / "state.json.corrupt-1").write_text("first")
    path.write_text("second")
    assert move_aside(path) == tmp_path / "state.json.corrupt-2"
    assert not path.exists() and (tmp_path / "state.json.corrupt-2").read_text() == "second"


def test_checksum_ignores_key_order_but_not_content() -> None:
    assert checksum([{"a": 1, "b": 2}]) == checksum([{"b": 2, "a": 1}])
    assert checksum([{"a": 1}]) != checksum([{"a": 2}])


def test_temporary_files_left_by_a_crash_are_removed_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "allocations.json").write_text("{}")
    (tmp_path / ".allocations.json.k2j3.tmp").write_text("half")
    (tmp_path / ".libnetwork.json.x9.tmp").write_text("half")
    (tmp_path / "allocations.json.corrupt-1").write_text("kept")
    (tmp_path / ".lock").write_text("")
    (tmp_path / ".dir.tmp").mkdir()
    removed = remove_leftovers(tmp_path)
    assert [p.name for p in removed] == [".allocations.json.k2j3.tmp", ".libnetwork.json.x9.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".dir.tmp",
        ".lock",
        "allocations.json",
        "allocations.json.corrupt-1",
    ]
