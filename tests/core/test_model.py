"""The model's fast constructors make exactly what its dataclasses make."""

from __future__ import annotations

import dataclasses

import pytest

from eni_ipam.core.model import AssignAddresses, NodeStats, assignment, computed_stats


def test_computed_stats_are_the_same_as_made_by_the_constructor() -> None:
    made = computed_stats(40, 21, 6, 0, 56, 1, False, True, False)
    expected = NodeStats(
        available=40, used=21, needed=6, excess=0, capacity=56, remaining_interfaces=1, running=True
    )
    assert made == expected and hash(made) == hash(expected) and repr(made) == repr(expected)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.used = 3  # type: ignore[misc]


def test_an_assignment_is_the_same_as_made_by_the_constructor() -> None:
    made = assignment("eni-1", "subnet-1", 3, False)
    expected = AssignAddresses(interface_id="eni-1", subnet_id="subnet-1", count=3, prefixes=False)
    assert made == expected and hash(made) == hash(expected) and repr(made) == repr(expected)
    assert made.addresses == 3 and dataclasses.replace(made, count=4).count == 4


def test_equal_stats_are_shared_as_one_object_and_the_table_stays_bounded(monkeypatch) -> None:
    from eni_ipam.core import model

    monkeypatch.setattr(model, "_shared_stats", {})
    monkeypatch.setattr(model, "SHARED_STATS_LIMIT", 3)
    first = model.shared_stats(model.NodeStats(available=8, used=2))
    assert model.shared_stats(model.NodeStats(available=8, used=2)) is first
    other = model.shared_stats(model.NodeStats(available=8, used=3))
    assert other is not first and other == model.NodeStats(available=8, used=3)
    for used in range(10):
        model.shared_stats(model.NodeStats(available=9, used=used))
    assert len(model._shared_stats) <= 3
