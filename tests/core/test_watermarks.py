"""Watermark formulas: the reference operator's table rows, plus properties that must always hold."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eni_ipam.core.model import InstanceLimits
from eni_ipam.core.watermarks import (
    allocation_budget,
    excess_ips,
    max_allocatable,
    needed_ips,
)


@pytest.mark.parametrize(
    ("available", "used", "pre", "min_", "max_", "want"),
    [
        (0, 0, 0, 16, 0, 16),
        (0, 0, 8, 16, 0, 16),
        (0, 0, 16, 8, 0, 16),
        (0, 0, 16, 0, 0, 16),
        (8, 0, 0, 16, 0, 8),
        (8, 4, 8, 0, 0, 4),
        (8, 4, 8, 8, 0, 4),
        (8, 4, 8, 8, 6, 0),
        (8, 4, 8, 0, 8, 0),
        (4, 4, 8, 0, 8, 4),
    ],
)
def test_needed_ips_matches_reference_table(available, used, pre, min_, max_, want):
    got = needed_ips(available=available, used=used, pre_allocate=pre, min_allocate=min_, max_allocate=max_)
    assert got == want


@pytest.mark.parametrize(
    ("available", "used", "pre", "min_", "maw", "want"),
    [
        (0, 0, 0, 16, 0, 0),
        (15, 0, 8, 16, 8, 0),
        (17, 0, 8, 16, 0, 1),
        (20, 0, 8, 16, 4, 0),
        (21, 0, 8, 0, 4, 9),
        (20, 0, 8, 20, 8, 0),
        (16, 1, 8, 16, 8, 0),
        (20, 4, 8, 17, 8, 0),
        (20, 4, 8, 0, 0, 8),
        (20, 4, 8, 0, 8, 0),
    ],
)
def test_excess_ips_matches_reference_table(available, used, pre, min_, maw, want):
    got = excess_ips(
        available=available, used=used, pre_allocate=pre, min_allocate=min_, max_above_watermark=maw
    )
    assert got == want


@pytest.mark.parametrize(
    ("fii", "pd", "want"),
    [(0, False, 27), (1, False, 18), (4, False, 0), (0, True, 432)],
)
def test_max_allocatable_for_m5_large(fii, pd, want):
    m5_large = InstanceLimits(adapters=3, ipv4_per_interface=10, hypervisor="nitro")
    assert max_allocatable(m5_large, first_interface_index=fii, prefix_delegated=pd) == want


@pytest.mark.parametrize(
    ("cards", "fii", "want"),
    [((0,), 0, 98), ((0, 1), 0, 196), ((0, 1), 1, 147), ((1, 2), 1, 196), ((0, 40), 0, 98), ((5,), 0, 98)],
)
def test_max_allocatable_counts_the_pools_cards(cards, fii, want):
    """A p5.48xlarge: 32 cards of 2 interfaces of 49 slots; ``first_interface_index`` holds back card
    0's lowest indexes only; a card the type does not have adds nothing."""
    p5 = InstanceLimits(adapters=2, ipv4_per_interface=50, hypervisor="nitro", cards=(2,) * 32)
    assert max_allocatable(p5, first_interface_index=fii, prefix_delegated=False, network_cards=cards) == want


def test_budget_adds_surge_beyond_deficit_and_keeps_watermark_slack_as_bonus():
    assert allocation_budget(needed=4, max_above_watermark=2, pending_pods=10) == (10, 2)
    assert allocation_budget(needed=4, max_above_watermark=2, pending_pods=1) == (4, 2)
    assert allocation_budget(needed=0, max_above_watermark=2, pending_pods=10) == (0, 0)


counts = st.integers(min_value=0, max_value=2000)
pres = st.integers(min_value=-4, max_value=64)


@given(available=counts, used=counts, pre=pres, min_=counts, max_=counts, maw=counts)
def test_needed_and_excess_are_never_both_positive(available, used, pre, min_, max_, maw):
    needed = needed_ips(
        available=available, used=used, pre_allocate=pre, min_allocate=min_, max_allocate=max_
    )
    excess = excess_ips(
        available=available, used=used, pre_allocate=pre, min_allocate=min_, max_above_watermark=maw
    )
    # A max below the minimum makes the spec contradictory; everything else must be consistent.
    if max_ == 0 or max_ >= min_:
        assert not (needed > 0 and excess > 0)


@given(available=counts, used=counts, pre=pres, min_=counts, max_=counts)
def test_needed_never_pushes_the_pool_above_max_allocate(available, used, pre, min_, max_):
    needed = needed_ips(
        available=available, used=used, pre_allocate=pre, min_allocate=min_, max_allocate=max_
    )
    assert needed >= 0
    if max_ > 0 and needed > 0:
        assert available + needed <= max_


@given(available=counts, used=counts, pre=st.integers(min_value=0, max_value=64), maw=counts)
def test_releasing_the_excess_leaves_pre_allocate_free(available, used, pre, maw):
    excess = excess_ips(available=available, used=used, pre_allocate=pre, max_above_watermark=maw)
    assert 0 <= excess <= available
    if excess:
        assert available - excess - used >= pre


@given(available=counts, used=counts, pre=st.integers(min_value=1, max_value=64), min_=counts)
def test_after_allocating_the_deficit_nothing_more_is_needed(available, used, pre, min_):
    needed = needed_ips(available=available, used=used, pre_allocate=pre, min_allocate=min_)
    assert needed_ips(available=available + needed, used=used, pre_allocate=pre, min_allocate=min_) == 0
