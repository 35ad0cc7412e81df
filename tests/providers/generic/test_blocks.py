"""BlockSet: the range allocator's next-fit, occupy and release, IPv4 and IPv6."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from providers.generic.blocks import BlockSet


def net(text: str):
    return ipaddress.ip_network(text)


@pytest.mark.parametrize(
    ("cidr", "mask", "first", "count"),
    [
        ("10.244.0.0/16", 24, "10.244.0.0/24", 256),
        ("10.244.0.0/16", 28, "10.244.0.0/28", 4096),
        ("10.0.0.0/24", 24, "10.0.0.0/24", 1),
        ("fd00:10:244::/56", 64, "fd00:10:244::/64", 256),
        ("fd00::/104", 120, "fd00::/120", 65536),
    ],
)
def test_blocks_are_carved_from_the_start_of_the_cidr(cidr: str, mask: int, first: str, count: int) -> None:
    blocks = BlockSet(net(cidr), mask)
    assert blocks.count == count
    assert blocks.allocate() == net(first)
    assert blocks.free == count - 1


@pytest.mark.parametrize(("cidr", "mask"), [("10.0.0.0/16", 15), ("10.0.0.0/8", 25), ("fd00::/48", 65)])
def test_impossible_block_sizes_are_refused(cidr: str, mask: int) -> None:
    with pytest.raises(ValueError):
        BlockSet(net(cidr), mask)


def test_allocation_is_next_fit_so_a_released_block_is_reused_last() -> None:
    blocks = BlockSet(net("10.0.0.0/26"), 28)
    a, b = blocks.allocate(), blocks.allocate()
    blocks.release(a)
    assert [blocks.allocate(), blocks.allocate(), blocks.allocate()] == [
        net("10.0.0.32/28"),
        net("10.0.0.48/28"),
        a,
    ]
    assert blocks.allocate() is None and b is not None


def test_occupy_marks_every_block_a_range_touches_and_ignores_other_ranges() -> None:
    blocks = BlockSet(net("10.96.0.0/22"), 24)
    blocks.occupy(net("10.96.1.128/25"))  # a service CIDR inside the cluster CIDR
    blocks.occupy(net("10.96.3.7/32"))
    blocks.occupy(net("192.168.0.0/16"))
    blocks.occupy(net("fd00::/64"))
    assert [blocks.allocate(), blocks.allocate(), blocks.allocate()] == [
        net("10.96.0.0/24"),
        net("10.96.2.0/24"),
        None,
    ]


def test_occupying_twice_counts_once() -> None:
    blocks = BlockSet(net("10.0.0.0/24"), 28)
    blocks.occupy(net("10.0.0.16/28"))
    blocks.occupy(net("10.0.0.16/28"))
    assert blocks.free == 15
    blocks.release(net("10.0.0.16/28"))
    blocks.release(net("10.0.0.16/28"))
    assert blocks.free == 16


def test_a_block_of_another_size_is_not_one_of_ours() -> None:
    blocks = BlockSet(net("10.0.0.0/24"), 28)
    with pytest.raises(ValueError):
        blocks.release(net("10.0.0.0/27"))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 15)), max_size=80))
def test_no_block_is_ever_handed_out_twice(ops: list[tuple[bool, int]]) -> None:
    blocks = BlockSet(net("10.0.0.0/24"), 28)
    held: list = []
    for allocate, pick in ops:
        if allocate:
            block = blocks.allocate()
            if block is None:
                assert len(held) == 16
            else:
                assert block not in held
                held.append(block)
        elif held:
            blocks.release(held.pop(pick % len(held)))
        assert blocks.free == 16 - len(held)
