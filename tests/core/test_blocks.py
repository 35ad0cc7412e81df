"""Free /28 blocks counted from a listing, and dense single-address placement."""

import ipaddress
import random

import hypothesis
from hypothesis import strategies as st

from eni_ipam.core.blocks import SubnetBlocks, count_blocks
from eni_ipam.core.model import Interface, Subnet


def iface(id, sid="s-1", primary="", addresses=(), prefixes=()):
    return Interface(
        id=id,
        device_index=0,
        subnet_id=sid,
        primary_ip=primary or None,
        addresses=addresses,
        prefixes=prefixes,
    )


def test_an_empty_subnet_has_every_block_free_but_the_first_and_the_last():
    # AWS reserves .0-.3 and .255: the first and the last /28 of a /24 are never whole.
    assert SubnetBlocks("10.0.0.0/24").free_blocks == 14
    assert SubnetBlocks("10.0.0.0/28").free_blocks == 0
    assert SubnetBlocks("10.0.0.0/20").free_blocks == 254


def test_one_address_breaks_its_block_and_a_prefix_takes_its_block():
    blocks = count_blocks(
        {"s-1": Subnet(id="s-1", vpc_id="v", zone="z", cidr="10.0.0.0/24", available=0)},
        [
            iface("eni-1", primary="10.0.0.20", addresses=("10.0.0.21", "10.0.0.40")),
            iface("eni-2", primary="10.0.0.5", prefixes=("10.0.0.96/28",)),
            iface("eni-3", sid="s-other", primary="10.0.0.130"),  # another subnet's: not counted here
        ],
    )["s-1"]
    # Broken: 16-31 (.20, .21), 32-47 (.40), 96-111 (prefix); .5 is in the reserved first block.
    assert blocks.free_blocks == 14 - 3


def test_pick_fills_the_fullest_broken_block_first_and_never_names_a_used_address():
    blocks = SubnetBlocks("10.0.0.0/24")
    blocks.add(iface("eni-1", primary="10.0.0.20", addresses=("10.0.0.21", "10.0.0.22")))
    blocks.add(iface("eni-2", primary="10.0.0.40"))
    chosen = blocks.pick(4)
    assert chosen == ["10.0.0.16", "10.0.0.17", "10.0.0.18", "10.0.0.19"]
    free_before = blocks.free_blocks
    blocks.mark(chosen)
    assert blocks.free_blocks == free_before  # packed into a broken block: no whole block lost


def test_pick_takes_the_reserved_blocks_spare_addresses_before_breaking_a_whole_block():
    blocks = SubnetBlocks("10.0.0.0/24")
    chosen = blocks.pick(12)
    # .4-.15 (the first block, broken by the reserved .0-.3) come first.
    assert chosen[0] == "10.0.0.4" and len(chosen) == 12
    assert all(int(ipaddress.IPv4Address(a)) & 0xFF < 16 for a in chosen)


@hypothesis.given(
    st.lists(st.integers(min_value=0, max_value=255), max_size=120),
    st.integers(min_value=1, max_value=40),
)
def test_pick_names_free_usable_distinct_addresses_and_breaks_no_block_while_a_broken_one_has_room(
    used, count
):
    blocks = SubnetBlocks("10.0.0.0/24")
    taken = sorted({f"10.0.0.{n}" for n in used if 4 <= n <= 254})
    blocks.add(iface("eni-1", addresses=taken))
    chosen = blocks.pick(count)
    values = [int(ipaddress.IPv4Address(a)) & 0xFF for a in chosen]
    assert len(set(chosen)) == len(chosen)
    assert not set(chosen) & set(taken)
    assert all(4 <= v <= 254 for v in values)
    taken_octets = {int(a.rsplit(".", 1)[1]) for a in taken}
    broken = {n >> 4 for n in taken_octets} | {0, 15}
    if any(v >> 4 not in broken for v in values):
        # A whole block was broken: only once every broken block was full.
        left = [n for n in range(4, 255) if n >> 4 in broken and n not in taken_octets and n not in values]
        assert not left, f"broke a whole block while {left} were free in broken ones"


def test_the_count_agrees_with_a_naive_one_over_several_subnets():
    """400 interfaces of 10 random addresses over 4 /20 subnets (the cost at 100,000 nodes is
    measured by bench.placement, docs/PERFORMANCE.md)."""
    rng = random.Random(1)
    subnets = {
        f"s-{n}": Subnet(id=f"s-{n}", vpc_id="v", zone="z", cidr=f"10.{n}.0.0/20", available=0)
        for n in range(4)
    }
    interfaces = []
    for n in range(400):
        s = n % 4
        base = (10 << 24) | (s << 16)
        addresses = tuple(str(ipaddress.IPv4Address(base + rng.randrange(16, 4000))) for _ in range(10))
        interfaces.append(iface(f"eni-{n}", sid=f"s-{s}", addresses=addresses))
    counted = count_blocks(subnets, interfaces)
    for sid, blocks in counted.items():
        used_blocks = {
            int(ipaddress.IPv4Address(a)) >> 4 for i in interfaces if i.subnet_id == sid for a in i.addresses
        }
        first = int(ipaddress.IPv4Network(subnets[sid].cidr).network_address) >> 4
        expected = 256 - len(used_blocks | {first, first + 255})
        assert blocks.free_blocks == expected
