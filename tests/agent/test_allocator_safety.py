"""Two safety rules of the allocator: a rebuilt allocation outside the pool stays its container's,
and a withdrawn mark keeps its address held while a ready-for-release answer is still published."""

from __future__ import annotations

from pathlib import Path

from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.state import StateFile
from eni_ipam.agent.types import DEFAULT_POOL
from eni_ipam.core.model import ReleaseState
from tests.agent import FakeClock
from tests.agent.test_allocator import members


def test_a_rebuilt_address_the_pool_gains_later_is_not_handed_to_another(tmp_path: Path) -> None:
    path = tmp_path / "allocations.json"
    path.write_text("garbage")
    allocator = Allocator(clock=FakeClock(), state=StateFile(path))
    allocator.set_pool(DEFAULT_POOL, [])  # the node's pool has not been written yet
    report = allocator.restore(runtime={"10.0.0.5": "cni:running:eth0"})
    assert [a.address for a in report.not_in_pool] == ["10.0.0.5"]
    allocator.set_pool(DEFAULT_POOL, members("10.0.0.5", "10.0.0.6"))
    v4, _ = allocator.allocate_next("cni:new:eth0")
    assert v4 is not None and v4.address == "10.0.0.6"
    assert allocator.dump()[0]["10.0.0.5"] == "cni:running:eth0"


def test_a_withdrawn_mark_holds_its_address_until_the_ready_answer_is_gone(tmp_path: Path) -> None:
    allocator = Allocator(clock=FakeClock())
    allocator.set_pool(DEFAULT_POOL, members("10.0.0.5", "10.0.0.6"))
    allocator.restore()
    assert allocator.answer_release({"10.0.0.5": ReleaseState.MARKED}) == {"10.0.0.5": ReleaseState.READY}
    # the mark is withdrawn, but the agent's "ready-for-release" is still what the reconciler reads
    assert allocator.answer_release({}, published=["10.0.0.5"]) == {}
    first, _ = allocator.allocate_next("cni:a:eth0")
    assert first is not None and first.address == "10.0.0.6"
    # once the answer is gone from the status, the address is free again
    allocator.answer_release({}, published=[])
    again, _ = allocator.allocate_next("cni:b:eth0")
    assert again is not None and again.address == "10.0.0.5"
