"""The record of what the driver handed Docker: a superset of the ``libnetwork:`` allocations at every
instant, trusted only when whole, and not written while it is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from eni_ipam.agent import errors
from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.mirror import Mirror
from eni_ipam.agent.state import StateFile
from eni_ipam.agent.types import DEFAULT_POOL
from tests.agent import FakeClock, FullDisk
from tests.agent.test_allocator import members

POOL = ("10.0.0.5", "10.0.0.6", "10.0.0.7")
DOCKER = "libnetwork:p1"


def start(tmp_path: Path, state: StateFile | None = None) -> tuple[Allocator, Mirror]:
    mirror = Mirror(StateFile(tmp_path / "mirror.json"), lambda owner: owner.startswith("libnetwork:"))
    allocator = Allocator(clock=FakeClock(), state=state or StateFile(tmp_path / "state.json"), mirror=mirror)
    allocator.set_pool(DEFAULT_POOL, members(*POOL))
    mirror.load()
    allocator.restore()
    return allocator, mirror


def recorded(tmp_path: Path) -> list[str]:
    return [a.address for a in StateFile(tmp_path / "mirror.json").load()]


def test_what_docker_is_handed_is_recorded_before_the_state_and_dropped_after(tmp_path: Path) -> None:
    allocator, mirror = start(tmp_path)
    mirror.settle({})  # Docker read once: the record is trusted from now on
    allocator.allocate("10.0.0.5", DOCKER)
    allocator.allocate("10.0.0.6", "cni:c1:eth0")  # not Docker's: not recorded
    assert recorded(tmp_path) == ["10.0.0.5"]
    state = FullDisk(tmp_path / "state.json")
    allocator, mirror = start(tmp_path, state)
    assert mirror.trusted and list(mirror.floor) == ["10.0.0.5"]
    state.full = True
    with pytest.raises(errors.StateNotWritten):
        allocator.allocate("10.0.0.7", DOCKER)  # undone; the record keeps it: a superset
    assert recorded(tmp_path) == ["10.0.0.5", "10.0.0.7"]
    state.full = False
    allocator.release("10.0.0.5")  # after the state: the undone 10.0.0.7 goes, while 10.0.0.5, which
    assert recorded(tmp_path) == ["10.0.0.5"]  # the record listed at the start, stays till Docker is read
    allocator.settle_mirror()
    assert recorded(tmp_path) == []


@pytest.mark.parametrize("damage", ["garbage", "missing"])
def test_a_record_that_is_not_whole_is_not_trusted_nor_written_until_docker_is_read(
    tmp_path: Path, damage: str
) -> None:
    start(tmp_path)[1].settle({})
    path = tmp_path / "mirror.json"
    if damage == "garbage":
        path.write_bytes(b"{garbage")
    else:
        path.unlink()
    allocator, mirror = start(tmp_path)
    assert not mirror.trusted
    allocator.allocate("10.0.0.5", DOCKER)
    assert path.read_bytes() == b"{garbage" if damage == "garbage" else not path.exists()
    allocator.settle_mirror()
    assert recorded(tmp_path) == ["10.0.0.5"]
